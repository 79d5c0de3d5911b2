"""A policy checkpoint in the catalog: its one-row manifest, with the model directory beside it.

A node that trains or builds a policy writes the Hugging Face directory into a staging area and
returns its manifest row (schema ``checkpoints``). Saving removes the earlier row, moves the
directory from staging to ``<manifest folder>/policy`` (one rename: the directory appears complete
or not at all; :func:`~resail_pipeline.io.replace_directory`) and then writes the manifest Parquet,
so a manifest never names a missing, partial or replaced model (a kill in between leaves no row,
and the node runs again) and the catalog alone decides where checkpoints live. A published model's
``path`` is recorded as ``policy``, relative to the manifest's folder, so that a data folder can be
moved; a manifest whose ``path`` lies outside the staging area (a checkpoint given by path, the
shipped reference policy) is recorded as it is.

Loading verifies the checkpoint against its manifest row before any node acts with it (a flipped
byte or an edited row would otherwise collect with other weights under the old ``policy_id``, or
re-collect a cycle under another's label): the model beside the manifest is the one the row
names, a manifest in a ``cycle_<r>`` folder has cycle ``r``, the weights hash to the row's
``sha256``, the checkpoint's own manifest records the same ``policy_id`` and its config,
tokenizer and template files are the ones that manifest recorded (``files_sha256``). A model
published beside its row was written with that manifest, which must be there with its
``files_sha256``; a checkpoint recorded where it lies (``bootstrap.checkpoint``: any local
Hugging Face directory) may have none, and the shipped reference policy's is checked where the
run asks for it (:func:`~resail_pipeline.initial_policy.check_published`). Each refusal is one
line naming the folder, what is wrong and what to do.

The manifest row is a copy of what the published model's own manifest records, so a row that
cannot be read (a truncated Parquet file beside an intact ``policy``) is rebuilt from it, written
again and verified like any other; the node that trained the model does not run again, which
would leave the later cycles made with the old model in place. Without a ``policy`` to rebuild
from, the row is missing and its node runs again.
"""

from __future__ import annotations

import contextlib
import logging
import re
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
from kedro.io import DatasetError

from resail_pipeline.checkpoints import (
    MANIFEST_NAME,
    CheckpointError,
    CheckpointInfo,
    check_checkpoint,
    read_manifest,
    verify_files,
    weights_sha256,
)
from resail_pipeline.datasets.parquet import AtomicParquetDataset
from resail_pipeline.io import replace_directory

logger = logging.getLogger(__name__)

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
        try:
            frame = super()._load()
        except (OSError, pa.ArrowException) as error:  # truncated or unreadable
            frame = self._rebuilt(error)
        if len(frame) != 1:
            raise DatasetError(f"{self._filepath}: expected one checkpoint row, got {len(frame)}")
        frame = with_published_path(frame, self._filepath)
        self._verify(frame.iloc[0], self._filepath.parent / POLICY_DIR)
        return frame

    def _exists(self) -> bool:
        """The row can be read, or rebuilt from the published model's own manifest (when loaded);
        otherwise it is missing, and its node runs again."""
        if self._filepath.is_file() and self._unreadable() is not None and self._rebuildable():
            return True
        return super()._exists()

    def _rebuildable(self) -> bool:
        """An unreadable row beside a published model whose manifest records the row."""
        if not self._filepath.is_file():
            return False
        try:
            manifest = read_manifest(self._filepath.parent / POLICY_DIR)
        except CheckpointError:
            return False
        return manifest is not None and set(CheckpointInfo.__dataclass_fields__) <= set(manifest)

    def _rebuilt(self, error: Exception) -> pd.DataFrame:
        """The row of the published model, from its own manifest, written again; the unreadable
        file's ``error`` where there is no model to rebuild it from."""
        if not self._rebuildable():
            raise DatasetError(f"{self._filepath}: unreadable Parquet file ({error})") from None
        manifest = read_manifest(self._filepath.parent / POLICY_DIR) or {}
        row = {name: manifest[name] for name in CheckpointInfo.__dataclass_fields__}
        frame = CheckpointInfo(**{**row, "path": POLICY_DIR}).to_frame()
        logger.warning(
            "%s: unreadable (%s); its row is rebuilt from %s and written again",
            self._filepath,
            error,
            self._filepath.parent / POLICY_DIR / MANIFEST_NAME,
        )
        super()._save(frame)
        return frame

    def _remedy(self) -> str:
        """What to do about a checkpoint that is not what its row says. The later cycles of a
        cycle's checkpoint were made with it, so they go with it: a rerun that kept them would
        refuse them, made by a policy that no longer exists."""
        restore = "restore the checkpoint as it was published"
        folder = _CYCLE_FOLDER.fullmatch(self._filepath.parent.name)
        if folder is None:
            return f"{restore}, or remove this checkpoint's outputs and rerun"
        cycle = int(folder.group(1))
        if cycle == 0:
            return (
                f"{restore} (every experiment of this data folder starts from it), or start a "
                "new data folder (--params data_tag=-<name>)"
            )
        return (
            f"{restore}, or remove the outputs of cycle {cycle} and of every later cycle (made "
            "with this policy) and rerun"
        )

    def _verify(self, row: pd.Series, own: Path) -> None:
        """Raise :class:`CheckpointError` where the checkpoint is not what ``row`` says."""
        where = f"{self._filepath}"
        try:  # a checkpoint given by path may have no manifest (the shipped one: check_published)
            path = check_checkpoint(row["path"]).resolve()
            published = own.is_dir() and path == own.resolve()  # written with its manifest
            verify_files(path, foreign=not published)
        except CheckpointError as error:
            raise CheckpointError(f"{where}: {error}; {self._remedy()}") from None
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
                f"{str(row['sha256'])[:12]}; they changed since they were published: "
                f"{self._remedy()}"
            )
        manifest = read_manifest(path)
        recorded = manifest.get("policy_id") if manifest is not None else None
        if (published or recorded is not None) and recorded != row["policy_id"]:
            raise CheckpointError(
                f"{where}: records policy {row['policy_id']}, the model in {path} is "
                f"{recorded or 'unnamed (its manifest records no policy_id)'}; {self._remedy()}"
            )

    def _save(self, data: pd.DataFrame) -> None:
        if not isinstance(data, pd.DataFrame) or len(data) != 1:
            raise DatasetError(f"{self._filepath}: expected a one-row checkpoint manifest")
        source = Path(str(data["path"].iloc[0])).resolve()
        check_checkpoint(source)
        if source.is_relative_to(self._staging):
            target = self._filepath.parent / POLICY_DIR
            target.parent.mkdir(parents=True, exist_ok=True)
            # the row goes first: a kill before the new one is written leaves no row, and the node
            # runs again, rather than the old row naming a model no longer there (its node skipped)
            self._filepath.unlink(missing_ok=True)
            replace_directory(source, target)  # the earlier model removed once the new one is in
            if source.parent != self._staging:  # the node's own work folder, now empty
                with contextlib.suppress(OSError):
                    source.parent.rmdir()
            data = data.assign(path=POLICY_DIR)  # relative to the manifest's folder
        super()._save(data)

    def _describe(self) -> dict[str, Any]:
        return {**super()._describe(), "staging_dir": str(self._staging)}
