"""The report node over the catalog's collections of per-cycle files: a cycle one of them lacks
is an error naming the file, not a report without it."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import pytest

from resail_pipeline.datasets import ParquetCollectionDataset
from resail_pipeline.pipelines.report.nodes import report_node
from resail_pipeline.schemas import BOOL, FLOAT, INT, LIST, SCHEMAS

#: a value of each kind, for the columns a test does not set
_DEFAULTS = {BOOL: False, INT: 0, FLOAT: 0.0, LIST: [], "str": "x"}
#: report input -> (its layer, its file), as conf/base/catalog.yml reads them
_INPUTS = {
    "eval_summary": ("07_model_output", "eval_summary.parquet"),
    "eval_results": ("07_model_output", "eval_results.parquet"),
    "train_metrics": ("07_model_output", "train_metrics.parquet"),
    "probe": ("07_model_output", "probe.parquet"),
    "trajectories": ("02_intermediate", "trajectories.parquet"),
}


def _row(schema: str, **values) -> dict:
    return {c: _DEFAULTS[k.rstrip("?")] for c, k in SCHEMAS[schema].items()} | values


def _write(data: Path, name: str, experiment: str, cycle: int, rows: list[dict]) -> Path:
    layer, file = _INPUTS[name]
    path = data / layer / "textcraft" / experiment / f"cycle_{cycle}" / file
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows, columns=list(SCHEMAS[name])).to_parquet(path, index=False)
    return path


@pytest.fixture()
def data(tmp_path) -> Path:
    """A data folder after three cycles of ``oel``: every file the report reads."""
    cell = {"env": "textcraft", "split": "test", "view": "ordinary"}
    for experiment, cycle in [("shared", 0), ("oel", 1), ("oel", 2), ("oel", 3)]:
        method = "react" if cycle == 0 else "oel"
        policy = {"policy_id": f"{experiment}@{cycle}", "cycle": cycle, "method": method}
        summary = _row("eval_summary", **policy, **cell, success_per_seed=[1.0], mean=1.0)
        summary |= {"sd": float("nan"), "episodes": 1}  # one seed: no sample SD
        _write(tmp_path, "eval_summary", experiment, cycle, [summary])
        result = _row("eval_results", **policy, **cell, success=True)
        _write(tmp_path, "eval_results", experiment, cycle, [result])
    for cycle in (1, 2, 3):
        run = {"experiment": "oel", "method": "oel", "cycle": cycle}
        _write(tmp_path, "train_metrics", "oel", cycle, [_row("train_metrics", **run)])
        _write(tmp_path, "probe", "oel", cycle, [_row("probe", **run, tokens=5)])
        collected = _row("trajectories", cycle=cycle, env="textcraft", split="train")
        _write(tmp_path, "trajectories", "shared" if cycle == 1 else "oel", cycle, [collected])
    return tmp_path


def _report(data: Path, params: dict | None = None) -> tuple:
    """The report node's outputs from the collections the catalog gives it."""
    inputs = {
        name: ParquetCollectionDataset(
            str(data / layer / "textcraft"), file, ["experiment", "namespace"], name
        ).load()
        for name, (layer, file) in _INPUTS.items()
    }
    outputs = report_node(
        inputs["eval_summary"],
        inputs["eval_results"],
        inputs["train_metrics"],
        inputs["probe"],
        inputs["trajectories"],
        params or {},
    )
    plt.close("all")
    return outputs


def test_figures_1a_and_3_draw_the_experiments_of_the_papers_tables(data):
    def lines(figure) -> set[str]:
        return {line.get_label() for ax in figure.axes for line in ax.containers}

    react = "ReAct (initial model, no update)"
    everything = _report(data)
    assert lines(everything[9]) == lines(everything[10]) == {"OEL", react}
    chosen = _report(data, {"paper": {"1": {"oel": "oel"}, "dual": {"privileged": "oel_resail"}}})
    assert lines(chosen[9]) == {"OEL", react}
    assert lines(chosen[10]) == {react}  # the dual-view rows name no experiment run here


@pytest.mark.parametrize(
    ("name", "experiment", "cycle"),
    [
        ("train_metrics", "oel", 2),
        ("probe", "oel", 2),
        ("trajectories", "oel", 2),
        ("trajectories", "shared", 1),
    ],
)
def test_an_empty_but_schema_valid_file_fails_the_report_naming_it(data, name, experiment, cycle):
    """An empty cycle_2/train_metrics.parquet gave a report of "2 trained cycle(s)" without its
    cost row; an empty probe.parquet (figure 6) or trajectories.parquet (the collection table)
    dropped their cycle the same way."""
    cost = _report(data)[7]
    assert [line.split("|")[2].strip() for line in cost.splitlines()[2:]] == ["1", "2", "3"]
    path = _write(data, name, experiment, cycle, [])  # the columns, no rows
    with pytest.raises(ValueError) as error:
        _report(data)
    relative = path.relative_to(path.parents[2])
    assert str(error.value).startswith(f"{name} files: {relative} has no rows or is missing")
    assert f"trained cycle {cycle}" in str(error.value)
