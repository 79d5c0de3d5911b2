"""The report's datasets: Parquet collections and atomic text and figure outputs."""

from __future__ import annotations

import pandas as pd
import pytest
from kedro.io import DatasetError
from matplotlib.figure import Figure

from resail_pipeline.datasets import FigureDataset, ParquetCollectionDataset, TextDataset
from resail_pipeline.schemas import SCHEMAS


def _write(path, frame):
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.to_parquet(path)


def test_collection_concatenates_parts_with_their_folders(tmp_path):
    _write(tmp_path / "oel" / "cycle_1" / "m.parquet", pd.DataFrame({"x": [1, 2]}))
    _write(tmp_path / "shared" / "cycle_0" / "m.parquet", pd.DataFrame({"x": [3]}))
    _write(tmp_path / "oel" / "cycle_1" / "other.parquet", pd.DataFrame({"x": [9]}))
    frame = ParquetCollectionDataset(str(tmp_path), "m.parquet", ["experiment", "namespace"]).load()
    assert frame.to_dict("list") == {
        "x": [1, 2, 3],
        "experiment": ["oel", "oel", "shared"],
        "namespace": ["cycle_1", "cycle_1", "cycle_0"],
    }


def test_collection_without_parts_is_empty_with_the_contract_columns(tmp_path):
    dataset = ParquetCollectionDataset(str(tmp_path), "probe.parquet", ["experiment"], "probe")
    frame = dataset.load()
    assert frame.empty and list(frame.columns) == list(SCHEMAS["probe"])
    assert not dataset.exists()


def test_an_unreadable_part_is_named(tmp_path):
    _write(tmp_path / "oel" / "m.parquet", pd.DataFrame({"x": [1]}))
    broken = tmp_path / "shared" / "m.parquet"
    broken.parent.mkdir()
    broken.write_bytes(b"PAR1 cut short")
    with pytest.raises(DatasetError, match=rf"^{broken}: unreadable Parquet file"):
        ParquetCollectionDataset(str(tmp_path), "m.parquet", ["experiment"]).load()


def test_collection_checks_depth_and_contract(tmp_path):
    _write(tmp_path / "a" / "m.parquet", pd.DataFrame({"x": [1]}))
    with pytest.raises(DatasetError, match="expected 2 folder level"):
        ParquetCollectionDataset(str(tmp_path), "m.parquet", ["e", "n"]).load()
    with pytest.raises(DatasetError, match="missing column"):
        ParquetCollectionDataset(str(tmp_path), "m.parquet", ["e"], "probe").load()
    with pytest.raises(DatasetError, match="read-only"):
        ParquetCollectionDataset(str(tmp_path), "m.parquet", ["e"]).save(pd.DataFrame())


def test_text_and_figure_outputs(tmp_path):
    """kedro-datasets' datasets, written through a temporary file that is renamed (no other file
    is left beside them)."""
    text = TextDataset(str(tmp_path / "r" / "t.md"))
    text.save("| a |\n")
    assert text.load() == "| a |\n" and sorted(p.name for p in (tmp_path / "r").iterdir()) == [
        "t.md"
    ]
    figure = Figure()
    figure.add_subplot().plot([0, 1], [1, 0])
    png = FigureDataset(str(tmp_path / "r" / "f.png"))
    png.save(figure)
    assert png.load()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == ["f.png", "t.md"]
    with pytest.raises(DatasetError, match="expected a matplotlib Figure"):
        png.save("not a figure")
    with pytest.raises(DatasetError, match=r"f\.pdf: figures are written as \.png"):
        FigureDataset(str(tmp_path / "r" / "f.pdf"))


def test_a_misspelt_schema_is_refused_naming_the_dataset(tmp_path):
    from resail_pipeline.datasets import AtomicParquetDataset

    with pytest.raises(DatasetError, match=r"/runs: unknown schema 'eval_sumary'; known: \["):
        ParquetCollectionDataset(str(tmp_path / "runs"), "x.parquet", schema="eval_sumary")
    with pytest.raises(DatasetError, match=r"/t\.parquet: unknown schema 'taks'; known: \["):
        AtomicParquetDataset(str(tmp_path / "t.parquet"), schema="taks")
