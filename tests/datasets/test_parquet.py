"""AtomicParquetDataset: a truncated file counts as missing, so that its node runs again; every
catalog entry of the type names its contract."""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd
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
