"""AtomicParquetDataset: a truncated file counts as missing, so that its node runs again; every
catalog entry of the type names its contract."""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import yaml

from resail_pipeline.datasets import AtomicParquetDataset
from resail_pipeline.schemas import SCHEMAS

CATALOG = Path(__file__).resolve().parents[2] / "conf" / "base" / "catalog.yml"


def test_a_truncated_file_is_missing_and_says_so(tmp_path, caplog):
    path = tmp_path / "tasks.parquet"
    dataset = AtomicParquetDataset(filepath=str(path), schema="tasks")
    assert not dataset.exists()
    frame = pd.DataFrame({"env": ["textcraft"], "split": ["train"], "task_id": [3], "seed": [7]})
    dataset.save(frame)
    assert dataset.exists()
    pd.testing.assert_frame_equal(dataset.load(), frame)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])  # a disk filled mid-write
    with caplog.at_level(logging.WARNING):
        assert not dataset.exists()
    assert "unreadable Parquet file" in caplog.text and str(path) in caplog.text


def test_every_parquet_table_of_the_catalog_names_a_known_schema():
    entries = yaml.safe_load(CATALOG.read_text())
    tables = {
        name: entry
        for name, entry in entries.items()
        if not name.startswith("_")  # variables
        and entry["type"] == "resail_pipeline.datasets.AtomicParquetDataset"
    }
    assert "aitz.pool" in tables and "{namespace}.steps" in tables
    assert [name for name, entry in tables.items() if "schema" not in entry] == []
    unknown = {name: e["schema"] for name, e in tables.items() if e["schema"] not in SCHEMAS}
    assert unknown == {}


def test_tables_are_written_with_zstd_and_read_back_equal(tmp_path):
    path = tmp_path / "steps.parquet"
    history = "You are in the middle of a room. " * 40
    frame = pd.DataFrame({"prompt": [history + f"step {t}" for t in range(200)]})
    AtomicParquetDataset(filepath=str(path)).save(frame)
    column = pq.ParquetFile(path).metadata.row_group(0).column(0)
    assert column.compression == "ZSTD"
    assert path.stat().st_size < frame["prompt"].str.len().sum() / 20
    pd.testing.assert_frame_equal(AtomicParquetDataset(filepath=str(path)).load(), frame)
