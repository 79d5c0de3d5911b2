"""Kedro datasets of this project: Parquet with atomic writes and column checks on load."""

from resail_pipeline.datasets.parquet import AtomicParquetDataset

__all__ = ["AtomicParquetDataset"]
