"""A policy checkpoint in the catalog: its one-row manifest, with the model directory beside it.

A node that trains or builds a policy writes the Hugging Face directory into a staging area and
returns its manifest row (schema ``checkpoints``). Saving moves the directory from staging to
``<manifest folder>/policy`` (one rename: the directory appears complete or not at all) and then
writes the manifest Parquet, so a manifest never names a missing or partial model and the
catalog alone decides where checkpoints live. A published model's ``path`` is recorded as
``policy``, relative to the manifest's folder, so that a data folder can be moved; a manifest
whose ``path`` lies outside the staging area (a checkpoint given by path, the shipped reference
policy) is recorded as it is.

Loading verifies the checkpoint against its manifest row before any node acts with it (a flipped
byte or an edited row would otherwise collect with other weights under the old ``policy_id``, or
re-collect a cycle under another's label): the model beside the manifest is the one the row
names, a manifest in a ``cycle_<r>`` folder has cycle ``r``, the weights hash to the row's
``sha256``, the checkpoint's own manifest records the same ``policy_id`` and its config,
tokenizer and template files are the ones that manifest recorded (``files_sha256``).
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
from kedro.io import DatasetError

from resail_pipeline.checkpoints import (
    MANIFEST_NAME,
    CheckpointError,
    check_checkpoint,
    verify_files,
    weights_sha256,
)
from resail_pipeline.datasets.parquet import AtomicParquetDataset

#: Folder name of the model directory beside its manifest.
POLICY_DIR = "policy"
#: the folder of a cycle's datasets (``cycle_<r>``)
_CYCLE_FOLDER = re.compile(r"cycle_(\d+)")
#: weights already hashed in this process: path -> ((name, size, mtime) of each file, sha256)
_HASHED: dict[Path, tuple[tuple, str]] = {}


def verified_sha256(path: Path) -> str:
    """:func:`~resail_pipeline.checkpoints.weights_sha256` of ``path``, hashed once per process
    while no weights file changes its size or modification time (at the paper's scale a hash reads
    8-16 GB, and several nodes load the same checkpoint)."""
    files = sorted(path.glob("*.safetensors"))
    stamp = tuple((f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in files)
    known = _HASHED.get(path)
    if known is not None and known[0] == stamp:
        return known[1]
    sha = weights_sha256(path)
    _HASHED[path] = (stamp, sha)
    return sha


def with_published_path(frame: pd.DataFrame, manifest: str | Path) -> pd.DataFrame:
    """``frame``, the one-row manifest read from ``manifest``, with a published model's path
    (recorded relative to the manifest's folder) made a path that can be opened."""
    if frame["path"].iloc[0] == POLICY_DIR:
        return frame.assign(path=str(Path(manifest).parent / POLICY_DIR))
    return frame


class CheckpointDataset(AtomicParquetDataset):
    """The ``checkpoints`` manifest of one policy, publishing staged model directories on save.

    Args:
        filepath: the manifest's Parquet file; the model goes to ``<its folder>/policy``.
        staging_dir: where nodes stage model directories (``run.staging_dir``).
    """

    def __init__(self, filepath: str, staging_dir: str, metadata: dict | None = None):
        super().__init__(filepath=filepath, schema="checkpoints", metadata=metadata)
        self._staging = Path(staging_dir).resolve()

    def _load(self) -> pd.DataFrame:
        frame = super()._load()
        if len(frame) != 1:
            raise DatasetError(f"{self._filepath}: expected one checkpoint row, got {len(frame)}")
        frame = with_published_path(frame, self._filepath)
        self._verify(frame.iloc[0], self._filepath.parent / POLICY_DIR)
        return frame

    def _verify(self, row: pd.Series, own: Path) -> None:
        """Raise :class:`CheckpointError` where the checkpoint is not what ``row`` says."""
        where = f"{self._filepath}"
        path = verify_files(check_checkpoint(row["path"])).resolve()
        if own.is_dir() and path != own.resolve():
            raise CheckpointError(
                f"{where}: names the model {row['path']}, but the model published with this "
                f"manifest is {own}"
            )
        folder = _CYCLE_FOLDER.fullmatch(self._filepath.parent.name)
        if folder is not None and int(row["cycle"]) != int(folder.group(1)):
            raise CheckpointError(
                f"{where}: records cycle {row['cycle']} in the folder of cycle {folder.group(1)}"
            )
        sha = verified_sha256(path)
        if sha != row["sha256"]:
            raise CheckpointError(
                f"{where}: the weights in {path} hash to {sha[:12]}, the manifest says "
                f"{str(row['sha256'])[:12]}; they changed since they were published (restore "
                "them, or remove this cycle's outputs and rerun it)"
            )
        manifest = path / MANIFEST_NAME
        if manifest.is_file():
            recorded = json.loads(manifest.read_text()).get("policy_id")
            if recorded is not None and recorded != row["policy_id"]:
                raise CheckpointError(
                    f"{where}: records policy {row['policy_id']}, the model in {path} is {recorded}"
                )

    def _save(self, data: pd.DataFrame) -> None:
        if not isinstance(data, pd.DataFrame) or len(data) != 1:
            raise DatasetError(f"{self._filepath}: expected a one-row checkpoint manifest")
        source = Path(str(data["path"].iloc[0])).resolve()
        check_checkpoint(source)
        if source.is_relative_to(self._staging):
            target = self._filepath.parent / POLICY_DIR
            target.parent.mkdir(parents=True, exist_ok=True)
            old = target.with_name(f".{POLICY_DIR}.old")
            shutil.rmtree(old, ignore_errors=True)
            if target.exists():  # a rerun replaces the earlier model only once the new one is in
                target.rename(old)
            source.rename(target)
            shutil.rmtree(old, ignore_errors=True)
            if source.parent != self._staging:  # the node's own work folder, now empty
                with contextlib.suppress(OSError):
                    source.parent.rmdir()
            data = data.assign(path=POLICY_DIR)  # relative to the manifest's folder
        super()._save(data)

    def _describe(self) -> dict[str, Any]:
        return {**super()._describe(), "staging_dir": str(self._staging)}
