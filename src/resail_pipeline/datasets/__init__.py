"""Kedro datasets of this project: Parquet with atomic writes and column checks on load, policy
checkpoints published from a staging area, and the report's collections and outputs."""

from resail_pipeline.datasets.checkpoint import CheckpointDataset
from resail_pipeline.datasets.collections import (
    FigureDataset,
    ParquetCollectionDataset,
    TextDataset,
)
from resail_pipeline.datasets.parquet import AtomicParquetDataset

__all__ = [
    "AtomicParquetDataset",
    "CheckpointDataset",
    "FigureDataset",
    "ParquetCollectionDataset",
    "TextDataset",
]
