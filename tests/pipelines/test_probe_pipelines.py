"""The probe's Kedro wiring: the initial-policy pipeline builds the shared probe set from its
reference episodes, and the train pipeline hands it to the trainer and returns ``<namespace>.probe``
(empty with the probe off), stored where the report reads it."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch
from kedro.config import OmegaConfigLoader
from kedro.io import DataCatalog, DatasetError, MemoryDataset
from kedro.runner import SequentialRunner

from resail_pipeline.checkpoints import read_checkpoint_info, resolve_device
from resail_pipeline.evaluation.report import sensitivity_per_update
from resail_pipeline.pipelines.common import RunConfig, in_cycle
from resail_pipeline.pipelines.evaluate import initial_policy_pipeline
from resail_pipeline.pipelines.evaluate import nodes as evaluate_nodes
from resail_pipeline.pipelines.score import nodes as score_nodes
from resail_pipeline.pipelines.train import base_pipeline as train_pipeline
from resail_pipeline.schemas import SCHEMAS, check_columns
from resail_pipeline.settings import CONFIG_LOADER_ARGS
from resail_pipeline.training import InputError, ProbeSet
from resail_pipeline.training import run as training_run

CONF = Path(__file__).parents[2] / "conf"


def project_config(key: str) -> dict[str, Any]:
    """The project's ``base`` + ``local`` configuration (``parameters`` or ``catalog``)."""
    return OmegaConfigLoader(str(CONF), **CONFIG_LOADER_ARGS)[key]


def test_the_probe_datasets_are_wired_and_catalogued(tmp_path, monkeypatch):
    initial = initial_policy_pipeline()
    assert "cycle_0.probe_set" in initial.outputs()
    node = next(n for n in initial.nodes if n.name == "cycle_0.probe_set_node")
    assert set(node.inputs) == {
        "cycle_0.checkpoint",
        "cycle_0.reference_trajectories",
        "cycle_0.reference_steps",
        "cycle_0.experience",
        "params:train",
    }
    train = in_cycle(train_pipeline(), 2)  # every cycle reads the one shared probe set
    assert "cycle_0.probe_set" in train.inputs() and "cycle_2.probe" in train.outputs()
    # on by default: the main job draws the report's figure 6 from it
    assert project_config("parameters")["train"]["probe"]["enabled"] is True

    monkeypatch.chdir(tmp_path)  # the catalog's paths are relative to the project
    catalog = DataCatalog.from_config(project_config("catalog"))
    with pytest.raises(DatasetError, match=r"probe_set table is missing column\(s\)"):
        catalog.save("cycle_0.probe_set", pd.DataFrame({"traj_id": ["a"]}))
    catalog.save("cycle_0.probe_set", pd.DataFrame(columns=list(SCHEMAS["probe_set"])))
    assert (tmp_path / "data/04_feature/textcraft/shared/cycle_0/probe_set.parquet").is_file()
    rows = pd.DataFrame(
        {
            "experiment": "oel_resail",
            "method": "oel_resail",
            "cycle": 2,
            "update": [0, 1],
            "traj_id": "reference/textcraft/test/0/1000",
            "t": 0,
            "jsd": [0.02, 0.01],
            "tokens": 7,
        }
    )
    catalog.save("cycle_2.probe", rows)
    assert (tmp_path / "data/07_model_output/textcraft/oel_resail/cycle_2/probe.parquet").is_file()
    report = catalog.load("report.probe")  # the report's figure 6 reads every experiment's cycles
    assert report["namespace"].tolist() == ["cycle_2", "cycle_2"]
    assert report["jsd"].tolist() == [0.02, 0.01]


def test_with_the_probe_off_the_probe_set_is_empty_and_no_model_is_loaded(monkeypatch):
    def no_model(*args, **kwargs):
        raise AssertionError("the probe set of a disabled probe must not load the model")

    monkeypatch.setattr(training_run, "load_frozen", no_model)
    train = project_config("parameters")["train"]
    train = {**train, "probe": {**train["probe"], "enabled": False}}
    unused = pd.DataFrame()
    probe_set = evaluate_nodes.probe_set_node(unused, unused, unused, unused, train)
    assert probe_set.empty
    check_columns(probe_set, "probe_set")
    with pytest.raises(InputError, match=r"built with train\.probe\.enabled false"):
        ProbeSet.from_frame(probe_set)


# ----------------------------------------------------------------------------------------------
# the scorer and the probe set's support run as the trainer runs its teacher: on the machine's
# device, in the precision and blocks of train.engine


def recording_scorer(calls: dict):
    """A fake of the library's scoring call: records where the model is and how it is asked."""

    def score(model, tokenizer, *frames, **options):
        parameter = next(model.parameters())
        calls.update(options, device=parameter.device, dtype=parameter.dtype)
        return pd.DataFrame()

    return score


@pytest.mark.parametrize(
    ("kind", "precision", "expected", "dtype"),
    [
        ("auto", "auto", "fp32", torch.float32),
        ("single", "bf16", "bf16", torch.float32),  # fp32 weights under bf16 autocast
        ("deepspeed", "bf16", "fp32", torch.bfloat16),  # bf16 weights, as the trainer's teacher
    ],
)
def test_the_scorer_follows_the_trainers_engine(
    tiny_checkpoint, monkeypatch, kind, precision, expected, dtype
):
    calls: dict = {}
    monkeypatch.setattr(training_run, "score_steps", recording_scorer(calls))
    train = copy.deepcopy(project_config("parameters")["train"])
    train["engine"].update(kind=kind, precision=precision, chunk_size=64)
    policy = read_checkpoint_info(tiny_checkpoint).to_frame()
    unused, cached = pd.DataFrame(), pd.DataFrame({"traj_id": ["0/textcraft/train/1/0"]})
    run = {"env": "textcraft", "method": "sdpo"}
    score_nodes.score_node(unused, unused, cached, policy, train, {"micro_batch_steps": 4}, run)
    assert calls["device"] == resolve_device(
        "auto"
    )  # the CPU here: auto resolves to fp32 without GPUs
    assert (calls["precision"], calls["chunk_size"]) == (expected, 64)
    assert calls["dtype"] == dtype


def test_the_probe_support_follows_the_trainers_engine(tiny_checkpoint, monkeypatch):
    calls: dict = {}
    monkeypatch.setattr(training_run, "build_probe_set", recording_scorer(calls))
    train = copy.deepcopy(project_config("parameters")["train"])
    train["probe"]["enabled"] = True
    train["engine"].update(precision="bf16", chunk_size=32)
    checkpoint = read_checkpoint_info(tiny_checkpoint).to_frame()
    unused = pd.DataFrame()
    evaluate_nodes.probe_set_node(checkpoint, unused, unused, unused, train)
    assert calls["device"] == resolve_device("auto")
    assert (calls["precision"], calls["chunk_size"]) == ("bf16", 32)


# ----------------------------------------------------------------------------------------------
# a slice of the real pipelines: the tiny initial policy on TextCraft, the trainer in a subprocess


def parameters(staging: Path, **probe: Any) -> dict[str, Any]:
    """The shipped parameters, made tiny: 2 test tasks, short responses, one update."""
    params = project_config("parameters")
    params["run"].update(staging_dir=str(staging), generation={"transformers": {"batch_size": 8}})
    params["evaluate"].update(num_tasks=2, decoding_seeds=[0], max_new_tokens=6)
    params["train"]["schedule"].update(updates=1, trajectories_per_update=1)
    params["train"]["optimizer"]["lr"] = 1e-3
    params["train"]["responses"].update(max_tokens=4, batch_size=8)
    params["train"]["probe"].update(num_trajectories=1, top_k=5, **probe)
    return params


def run(pipeline, data: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """Run ``pipeline`` on memory datasets; returns its outputs."""
    datasets = {name: MemoryDataset(value) for name, value in data.items()}
    datasets.update({f"params:{k}": MemoryDataset(v) for k, v in params.items()})
    catalog = DataCatalog(datasets)
    SequentialRunner().run(pipeline, catalog)
    return {name: catalog.load(name) for name in pipeline.outputs()}


@pytest.fixture(scope="module")
def cycle_0(tiny_checkpoint, tmp_path_factory) -> dict[str, Any]:
    """The reference episodes of the tiny initial policy on 2 TextCraft test tasks, its fixed
    Experience and the probe set (two nodes of the initial-policy pipeline, run one after the
    other to keep every output)."""
    pipeline = initial_policy_pipeline()
    params = parameters(tmp_path_factory.mktemp("staging"), enabled=True)
    data = {"cycle_0.checkpoint": read_checkpoint_info(tiny_checkpoint).to_frame()}
    for name in ("cycle_0.experience_node", "cycle_0.probe_set_node"):
        data.update(run(pipeline.only_nodes(name), data, params))
    return data


@pytest.mark.slow
def test_the_initial_policy_pipeline_builds_the_probe_set(cycle_0, tiny_checkpoint):
    probe_set = cycle_0["cycle_0.probe_set"]
    check_columns(probe_set, "probe_set")
    first = cycle_0["cycle_0.reference_trajectories"].sort_values("task_id")["traj_id"].iloc[0]
    assert probe_set["traj_id"].unique().tolist() == [first]
    assert (probe_set["policy_id"] == read_checkpoint_info(tiny_checkpoint).policy_id).all()
    lengths = zip(probe_set["support"], probe_set["response_ids"], strict=True)
    assert all(len(support) == len(response) > 0 for support, response in lengths)


@pytest.mark.slow
@pytest.mark.parametrize("enabled", [True, False])
def test_the_train_pipeline_returns_the_probe(enabled, cycle_0, tmp_path):
    params = parameters(tmp_path, enabled=enabled)
    data = {
        "cycle_0.checkpoint": cycle_0["cycle_0.checkpoint"],
        "cycle_0.probe_set": cycle_0["cycle_0.probe_set"],
        # cycle 1's data: here the reference episodes themselves
        "cycle_1.steps": cycle_0["cycle_0.reference_steps"],
        "cycle_1.summaries": cycle_0["cycle_0.experience"],
        "cycle_1.responses": pd.DataFrame(columns=list(SCHEMAS["responses"])),
    }
    probe = run(in_cycle(train_pipeline(), 1), data, params)["cycle_1.probe"]
    check_columns(probe, "probe")
    if not enabled:  # the probe set is not handed to the trainer; the output has no rows
        assert probe.empty
        return
    steps = len(cycle_0["cycle_0.probe_set"])
    assert probe["update"].tolist() == [0] * steps + [1] * steps
    experiment = RunConfig.from_params(params["run"]).experiment  # null: the method
    assert experiment == "oel_resail"
    assert (probe[["experiment", "method", "cycle"]] == [experiment, "oel_resail", 1]).all().all()
    per_update = sensitivity_per_update(probe)  # what the report's figure 6 plots
    assert per_update["update"].tolist() == [0, 1] and (per_update["jsd"] > 0).all()


def test_a_method_that_reads_no_cached_responses_samples_and_scores_none(
    tiny_checkpoint, monkeypatch
):
    """OEL samples its own responses while it trains: cycle 1's respond and score nodes write
    empty tables of their schemas, without loading a model or sampling."""
    from resail_pipeline.schemas import check_columns

    def no_model(*args, **kwargs):
        raise AssertionError("no model may be loaded for a method without cached responses")

    monkeypatch.setattr(score_nodes, "sample_responses", no_model)
    monkeypatch.setattr(score_nodes, "off_process", no_model)
    train = copy.deepcopy(project_config("parameters")["train"])
    policy = read_checkpoint_info(tiny_checkpoint).to_frame()
    run = {"env": "textcraft", "method": "oel_resail"}
    unused = pd.DataFrame()
    responses = score_nodes.respond_node(unused, unused, policy, train, {}, run)
    assert responses.empty and check_columns(responses, "responses") is responses
    scores = score_nodes.score_node(unused, unused, responses, policy, train, {}, run)
    assert scores.empty and list(scores.columns) == ["traj_id", "t", "scorer_id", "jsd", "tokens"]
