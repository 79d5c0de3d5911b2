"""The registered pipelines and the lineage of the cycle pipeline (no node is run)."""

from __future__ import annotations

import pytest
from kedro.framework.project import configure_project

from resail_pipeline.pipeline_registry import register_pipelines
from resail_pipeline.pipelines.cycle.pipeline import num_cycles


@pytest.fixture(scope="module")
def pipelines():
    configure_project("resail_pipeline")
    return register_pipelines()


def test_every_pipeline_is_registered(pipelines):
    assert set(pipelines) >= {
        "bootstrap",
        "collect",
        "summarize",
        "score",
        "train",
        "evaluate",
        "report",
        "aitz",
        "cycle",
        "__default__",
    }
    assert pipelines["__default__"] is pipelines["cycle"]


def _producer(pipeline, dataset):
    (node,) = [n for n in pipeline.nodes if dataset in n.outputs]
    return node


def test_cycles_chain_from_the_initial_policy(pipelines):
    cycle = pipelines["cycle"]
    assert cycle.inputs() == {
        "params:bootstrap",
        "params:collect",
        "params:evaluate",
        "params:run",
        "params:score",
        "params:summarize",
        "params:train",
    }
    assert _producer(cycle, "cycle_0.checkpoint").name == "cycle_0.bootstrap_node"
    for r in (1, 2, 3):
        collect = _producer(cycle, f"cycle_{r}.trajectories")
        assert f"cycle_{r - 1}.checkpoint" in collect.inputs
        train = _producer(cycle, f"cycle_{r}.checkpoint")
        assert {f"cycle_{r - 1}.checkpoint", f"cycle_{r}.steps", f"cycle_{r}.summaries"} <= set(
            train.inputs
        )
        assert "cycle_0.probe_set" in train.inputs and f"cycle_{r}.probe" in train.outputs
        evaluate = _producer(cycle, f"cycle_{r}.eval_summary")
        assert {f"cycle_{r}.checkpoint", "cycle_0.experience"} <= set(evaluate.inputs)
    assert {"cycle_0.eval_summary", "cycle_3.eval_summary"} <= cycle.all_outputs()
    assert not any(d.startswith("cycle_4.") for d in cycle.all_outputs())


def test_standalone_pipelines_work_on_cycle_1(pipelines):
    assert pipelines["collect"].inputs() == {
        "cycle_0.checkpoint",
        "params:collect",
        "params:run",
        "params:train",
    }
    assert pipelines["train"].outputs() == {
        "cycle_1.checkpoint",
        "cycle_1.train_metrics",
        "cycle_1.selected_steps",
        "cycle_1.probe",
    }


def test_the_number_of_cycles_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("RESAIL_CYCLES", "5")
    assert num_cycles() == 5
    monkeypatch.setenv("RESAIL_CYCLES", "zero")
    with pytest.raises(ValueError, match="RESAIL_CYCLES"):
        num_cycles()
