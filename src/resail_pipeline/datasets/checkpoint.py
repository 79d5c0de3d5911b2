"""A policy checkpoint in the catalog: its one-row manifest, with the model directory beside it.

A node that trains or builds a policy writes the Hugging Face directory into a staging area and
returns its manifest row (schema ``checkpoints``). Saving moves the directory from staging to
``<manifest folder>/policy`` (one rename: the directory appears complete or not at all) and then
writes the manifest Parquet, so a manifest never names a missing or partial model and the
catalog alone decides where checkpoints live. A manifest whose ``path`` lies outside the staging
area (a checkpoint given by path, the shipped reference policy) is recorded as it is.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pandas as pd
from kedro.io import DatasetError

from resail_pipeline.checkpoints import check_checkpoint
from resail_pipeline.datasets.parquet import AtomicParquetDataset

#: Folder name of the model directory beside its manifest.
POLICY_DIR = "policy"


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
        check_checkpoint(frame["path"].iloc[0])
        return frame

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
            data = data.assign(path=str(target))
        super()._save(data)

    def _describe(self) -> dict[str, Any]:
        return {**super()._describe(), "staging_dir": str(self._staging)}
