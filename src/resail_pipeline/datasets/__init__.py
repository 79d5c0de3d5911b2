"""Kedro datasets of this project: Parquet with atomic writes and column checks on load, and
policy checkpoints published from a staging area."""

from resail_pipeline.datasets.checkpoint import CheckpointDataset
from resail_pipeline.datasets.parquet import AtomicParquetDataset

__all__ = ["AtomicParquetDataset", "CheckpointDataset"]
