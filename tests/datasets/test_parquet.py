"""AtomicParquetDataset: a truncated file counts as missing, so that its node runs again."""

from __future__ import annotations

import logging

import pandas as pd

from resail_pipeline.datasets import AtomicParquetDataset


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
