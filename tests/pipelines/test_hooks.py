"""The project's hooks: node timing, the GPU's cached memory handed back after each node, and the
check of reused collections against the run's settings."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
from pathlib import Path
from types import SimpleNamespace
from unittest.mock import ANY

import pandas as pd
import pytest
import torch
import yaml

from resail_pipeline import hooks
from resail_pipeline.hooks import (
    DeviceMemoryHook,
    JournalHook,
    NodeTimingHook,
    PreflightHook,
    RunConfigLoader,
    TrackingHook,
)
from resail_pipeline.settings import CONFIG_LOADER_CLASS, HOOKS


def test_every_hook_and_the_run_loader_are_registered():
    assert CONFIG_LOADER_CLASS is RunConfigLoader
    # pluggy calls the last registered first: the checks run before tracking opens a run
    assert [type(hook) for hook in HOOKS][-2:] == [TrackingHook, PreflightHook]
    assert {type(hook) for hook in HOOKS} == {
        TrackingHook,
        NodeTimingHook,
        DeviceMemoryHook,
        JournalHook,
        PreflightHook,
    }


CONF = Path(__file__).resolve().parents[2] / "conf"
RUN = {
    "env": "textcraft",
    "method": "oel",
    "experiment": "oel",
    "generation": {"transformers": {"batch_size": 8}},
}
COLLECT = {"split": "train", "num_trajectories": None, "temperature": 0.4, "max_new_tokens": 8}
TRAIN = {"schedule": {"updates": 2, "trajectories_per_update": 3}}


@pytest.fixture(autouse=True)
def _staging_in_tmp(tmp_path, monkeypatch):
    """Every run below stages (and takes its experiment's lock) under the test's own folder, not
    in the project's ``data/`` (``run.staging_dir``'s default), where a real run may hold it."""
    monkeypatch.setitem(RUN, "staging_dir", str(tmp_path / "staging"))


def _catalog(tasks: pd.DataFrame | None, policy: pd.DataFrame, **sections):
    """The run's catalog: the project's parameters with these run, collect and train sections."""
    from kedro.config import OmegaConfigLoader
    from kedro.io import DataCatalog, MemoryDataset

    from resail_pipeline.settings import CONFIG_LOADER_ARGS

    params = OmegaConfigLoader(str(CONF), **CONFIG_LOADER_ARGS)["parameters"]
    params.update(run=RUN, collect=COLLECT, train={**params["train"], **TRAIN})
    params.update(sections)
    datasets = {"cycle_0.checkpoint": MemoryDataset(policy), "parameters": MemoryDataset(params)}
    if tasks is not None:
        datasets["cycle_1.tasks"] = MemoryDataset(tasks)
    for name in ("run", "collect", "train", "aitz"):
        datasets[f"params:{name}"] = MemoryDataset(params[name], copy_mode="deepcopy")
    return DataCatalog(datasets)


@pytest.fixture()
def cycle_1(tiny_checkpoint):
    """The initial policy's manifest and the cycle-1 tasks it collected with the defaults above."""
    from resail_pipeline.checkpoints import read_checkpoint_info
    from resail_pipeline.pipelines.collect.nodes import collect_config, settings_of
    from resail_pipeline.pipelines.common import RunConfig

    info = read_checkpoint_info(tiny_checkpoint)
    run = RunConfig.from_params(RUN)
    settings = settings_of(collect_config(COLLECT, TRAIN, run), run, info)
    tasks = pd.DataFrame(
        {"env": "textcraft", "split": "train", "task_id": [2, 3], "seed": [5, 6]}
    ).assign(settings=json.dumps(settings, sort_keys=True))
    return info.to_frame(), tasks


def test_a_reused_collection_must_match_the_runs_settings(cycle_1):
    from kedro.pipeline import Pipeline, node

    policy, tasks = cycle_1
    pipeline = Pipeline([node(lambda x: x, "cycle_1.tasks", "cycle_1.out", name="reader")])
    hook = PreflightHook()
    hook.before_pipeline_run({}, pipeline, _catalog(tasks, policy))  # the same settings: passes
    hook.before_pipeline_run({}, pipeline, _catalog(None, policy))  # nothing collected yet

    # another budget (num_trajectories resolves from the schedule) and another temperature
    other = {"schedule": {"updates": 3, "trajectories_per_update": 3}, "probe": {}}
    with pytest.raises(ValueError) as error:
        hook.before_pipeline_run(
            {},
            pipeline,
            _catalog(tasks, policy, train=other, collect={**COLLECT, "temperature": 0.7}),
        )
    message = str(error.value)
    assert "collect.num_trajectories: collected with 6, this run 9" in message
    assert "collect.temperature: collected with 0.4, this run 0.7" in message
    assert "batch_size" not in message

    # a table that records nothing cannot be trusted either
    with pytest.raises(ValueError, match="records no collection settings"):
        hook.before_pipeline_run({}, pipeline, _catalog(tasks.drop(columns="settings"), policy))


def test_a_rollouts_journal_outlives_a_failed_save_and_goes_with_the_last_output(tmp_path):
    """Kedro saves a node's outputs after the node returns: the journal a rollout node finished
    stays until the last of them is saved, so a run whose save fails resumes every episode."""
    from kedro.framework.hooks.manager import _create_hook_manager
    from kedro.io import AbstractDataset, DataCatalog, MemoryDataset
    from kedro.pipeline import Pipeline, node
    from kedro.runner import SequentialRunner

    from resail_pipeline.pipelines.common import RunConfig

    class FailingSaveDataset(AbstractDataset):
        """A fake dataset for this test: its save fails, as a full disk or a kill would."""

        def _load(self):
            raise NotImplementedError

        def _save(self, data):
            raise OSError("disk full")

        def _describe(self):
            return {}

    run = RunConfig.from_params(RUN)
    earlier = run.journal("evaluate-cycle_1", policy="a" * 64)  # an earlier run finished it
    earlier.finish()
    unfinished = run.journal("evaluate-cycle_2", policy="a" * 64)  # a killed rollout's
    unfinished.folder.mkdir(parents=True)

    def rollout():
        run.journal("collect-cycle_2", policy="b" * 64).finish()
        return 1, 2

    pipeline = Pipeline([node(rollout, None, ["cycle_2.tasks", "cycle_2.steps"], name="collect")])
    parameters = MemoryDataset({"run": RUN})
    hook = JournalHook()
    manager = _create_hook_manager()
    manager.register(hook)
    catalog = DataCatalog({"parameters": parameters, "cycle_2.steps": FailingSaveDataset()})
    hook.before_pipeline_run({}, pipeline, catalog)
    with pytest.raises(Exception, match="disk full"):
        SequentialRunner().run(pipeline, catalog, manager)
    # the first output was saved, the second was not: every journal is still there
    finished = run.finished_journals()
    assert [folder.name.split("-")[1] for folder in finished] == ["collect", "evaluate"]
    assert unfinished.folder.is_dir()

    catalog = DataCatalog({"parameters": parameters})
    hook.before_pipeline_run({}, pipeline, catalog)
    SequentialRunner().run(pipeline, catalog, manager)
    # the node's own journal is gone; the others wait for the nodes that will resume them
    assert run.finished_journals() == {earlier.folder: ANY}
    assert unfinished.folder.is_dir()


def test_a_node_logs_its_wall_time(caplog):
    hook, node = NodeTimingHook(), SimpleNamespace(name="cycle_1.score_node")
    with caplog.at_level(logging.INFO, logger="resail_pipeline.hooks"):
        hook.before_node_run(node)
        hook.after_node_run(node)
    assert "node cycle_1.score_node finished in" in caplog.text


@pytest.mark.parametrize(
    ("available", "initialized", "emptied"),
    [(False, False, 0), (True, False, 0), (True, True, 1)],
)
def test_the_cache_is_emptied_only_where_cuda_was_used(
    monkeypatch, available, initialized, emptied
):
    calls = []  # fakes of the CUDA queries: this machine may have no GPU
    monkeypatch.setattr(torch.cuda, "is_available", lambda: available)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: initialized)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty_cache"))
    DeviceMemoryHook().after_node_run(SimpleNamespace(name="cycle_1.score_node"))
    assert len(calls) == emptied


def test_every_parameter_is_checked_before_the_first_node(cycle_1):
    from kedro.pipeline import Pipeline

    policy, _ = cycle_1
    hook, nothing = PreflightHook(), Pipeline([])
    hook.before_pipeline_run({}, nothing, _catalog(None, policy))
    catalog = _catalog(None, policy, trian={"resail": {"rho": 0.5}})
    with pytest.raises(ValueError, match=r"unknown top-level key\(s\) \['trian'\]"):
        hook.before_pipeline_run({}, nothing, catalog)
    params = _catalog(None, policy).load("parameters")
    evaluate = {**params["evaluate"], "temperature": -1.0}  # once failed after a whole cycle
    with pytest.raises(ValueError, match=r"evaluate\.temperature"):
        hook.before_pipeline_run({}, nothing, _catalog(None, policy, evaluate=evaluate))
    evaluate = {**params["evaluate"], "decoding_seeds": [0, 1000], "reference_seed": 1000}
    with pytest.raises(
        ValueError, match=r"evaluate\.reference_seed: 1000 is one of decoding_seeds"
    ):
        hook.before_pipeline_run({}, nothing, _catalog(None, policy, evaluate=evaluate))
    with pytest.raises(ValueError, match=r"data_tag: must be a folder name"):
        hook.before_pipeline_run({}, nothing, _catalog(None, policy, data_tag="/../x"))


def test_budgets_are_compared_with_the_splits_where_the_pipeline_acts(cycle_1):
    from kedro.pipeline import Pipeline, node

    policy, _ = cycle_1
    hook = PreflightHook()
    params = _catalog(None, policy).load("parameters")
    evaluate = {**params["evaluate"], "num_tasks": 1000}
    catalog = _catalog(None, policy, evaluate=evaluate)
    hook.before_pipeline_run({}, Pipeline([]), catalog)  # nothing acts in the environment
    acting = Pipeline([node(lambda x: x, "cycle_0.checkpoint", "cycle_1.eval_results")])
    with pytest.raises(ValueError, match=r"evaluate\.num_tasks: 1000 is more than the 100"):
        hook.before_pipeline_run({}, acting, catalog)
    summarize = {**params["summarize"], "corrected_plan": "walkthrough"}  # ALFWorld's oracle
    catalog = _catalog(None, policy, summarize=summarize)
    with pytest.raises(ValueError, match=r"^summarize\.corrected_plan: 'walkthrough' needs"):
        hook.before_pipeline_run({}, acting, catalog)


def _vllm_catalog(policy, checkpoint, staging, max_model_len: int):
    """A vLLM run from ``checkpoint`` (the published policy) with this ``max_model_len``."""
    run = {
        **RUN,
        "backend": "vllm",
        "generation": {"vllm": {"max_model_len": max_model_len}},
        "staging_dir": str(staging),
    }
    params = _catalog(None, policy).load("parameters")
    bootstrap = {**params["bootstrap"], "checkpoint": str(checkpoint)}
    return _catalog(None, policy, run=run, bootstrap=bootstrap)


def test_a_vllm_run_whose_longest_prompt_does_not_fit_is_refused_before_any_node(
    cycle_1, tiny_checkpoint, tmp_path, monkeypatch
):
    from kedro.pipeline import Pipeline, node

    from resail_pipeline.config import ConfigError
    from resail_pipeline.generation import cuda

    monkeypatch.setattr(hooks, "check_installed", lambda _backend: None)  # fake: vLLM there
    monkeypatch.setattr(cuda, "cuda_runtime", lambda: None)  # fake: torch without CUDA
    policy, _ = cycle_1
    evaluating = Pipeline([node(lambda x: x, "cycle_0.checkpoint", "cycle_1.eval_results")])
    small = _vllm_catalog(policy, tiny_checkpoint, tmp_path / "a", max_model_len=256)
    PreflightHook().before_pipeline_run({}, Pipeline([]), small)  # generates nothing
    with pytest.raises(ConfigError) as error:
        PreflightHook().before_pipeline_run({}, evaluating, small)
    assert str(error.value).startswith("run.generation.vllm.max_model_len: 256 tokens, but ")
    assert "evaluate.max_new_tokens ask(s) for up to" in str(error.value)
    large = _vllm_catalog(policy, tiny_checkpoint, tmp_path / "b", max_model_len=65536)
    PreflightHook().before_pipeline_run({}, evaluating, large)


def test_an_nvidia_driver_too_old_for_the_vllm_wheel_is_refused_before_any_node(
    cycle_1, tiny_checkpoint, tmp_path, monkeypatch
):
    from kedro.pipeline import Pipeline, node

    from resail_pipeline.config import ConfigError
    from resail_pipeline.generation import cuda

    monkeypatch.setattr(hooks, "check_installed", lambda _backend: None)  # fake: vLLM there
    monkeypatch.setattr(cuda, "cuda_runtime", lambda: "13.0")  # fakes: a GPU node's readings
    monkeypatch.setattr(cuda, "driver_version", lambda: "550.54.15")
    monkeypatch.setattr(cuda, "vllm_version", lambda: "0.32.0")
    policy, _ = cycle_1
    collecting = Pipeline([node(lambda x: x, "cycle_0.checkpoint", "cycle_1.tasks")])
    catalog = _vllm_catalog(policy, tiny_checkpoint, tmp_path, max_model_len=65536)
    with pytest.raises(ConfigError, match=r"^run\.backend: .*install NVIDIA driver >= 580"):
        PreflightHook().before_pipeline_run({}, collecting, catalog)
    params = catalog.load("parameters")
    transformers = {**params["run"], "backend": "transformers"}  # needs no vLLM wheel
    PreflightHook().before_pipeline_run(
        {}, collecting, _catalog(None, policy, run=transformers, bootstrap=params["bootstrap"])
    )


def test_a_gpu_held_by_another_process_is_refused_before_any_vllm_engine_starts(
    cycle_1, tiny_checkpoint, tmp_path, monkeypatch
):
    """An orphaned engine of a crashed run holds 72 GB of a GPU: a run whose engines take 0.9
    of each GPU is refused before any node, naming the process; one that takes less runs."""
    from kedro.pipeline import Pipeline, node

    from resail_pipeline.config import ConfigError
    from resail_pipeline.generation import cuda

    monkeypatch.setattr(hooks, "check_installed", lambda _backend: None)  # fake: vLLM there
    monkeypatch.setattr(cuda, "cuda_runtime", lambda: None)  # fake: no driver to compare
    mib = 2**20
    orphan = cuda.GpuUse(0, 81559 * mib, 72600 * mib, ((4242, "python", 72000 * mib),))
    monkeypatch.setattr(cuda, "gpu_memory_use", lambda: [orphan])  # fake: nvidia-smi's view
    policy, _ = cycle_1
    collecting = Pipeline([node(lambda x: x, "cycle_0.checkpoint", "cycle_1.tasks")])
    catalog = _vllm_catalog(policy, tiny_checkpoint, tmp_path / "a", max_model_len=65536)
    with pytest.raises(ConfigError, match=r"^run\.generation\.vllm\.gpu_memory_utilization: 0\.9 "):
        PreflightHook().before_pipeline_run({}, collecting, catalog)
    small = _vllm_catalog(policy, tiny_checkpoint, tmp_path / "b", max_model_len=65536)
    params = small.load("parameters")
    run = {
        **params["run"],
        "generation": {"vllm": {"max_model_len": 65536, "gpu_memory_utilization": 0.1}},
    }
    PreflightHook().before_pipeline_run(
        {}, collecting, _catalog(None, policy, run=run, bootstrap=params["bootstrap"])
    )


def test_the_aitz_pipelines_vllm_generation_is_checked_against_the_driver(cycle_1, monkeypatch):
    """The aitz pipeline's initial policy generates with its own backend (aitz.generation):
    vllm there has the driver checked as the text run's vllm does; transformers needs nothing."""
    from kedro.pipeline import Pipeline, node

    from resail_pipeline.config import ConfigError
    from resail_pipeline.generation import cuda

    monkeypatch.setattr(hooks, "check_installed", lambda _backend: None)  # fake: vLLM there
    monkeypatch.setattr(cuda, "cuda_runtime", lambda: "13.0")  # fakes: a GPU node's readings
    monkeypatch.setattr(cuda, "driver_version", lambda: "550.54.15")
    monkeypatch.setattr(cuda, "vllm_version", lambda: "0.32.0")
    policy, _ = cycle_1
    diagnosing = Pipeline([node(lambda x: x, "aitz.pool", "aitz.attempts")])
    aitz = _catalog(None, policy).load("parameters")["aitz"]
    vllm = {**aitz, "generation": {"backend": "vllm", "vllm": {}}}
    with pytest.raises(ConfigError, match=r"^run\.backend: .*install NVIDIA driver >= 580"):
        PreflightHook().before_pipeline_run({}, diagnosing, _catalog(None, policy, aitz=vllm))
    PreflightHook().before_pipeline_run({}, diagnosing, _catalog(None, policy, aitz=aitz))


def test_a_training_run_whose_rank_cannot_fit_its_gpus_is_refused_before_any_node(
    cycle_1, tiny_checkpoint, tmp_path, monkeypatch
):
    from kedro.pipeline import Pipeline, node

    from resail_pipeline import hooks
    from resail_pipeline.config import ConfigError
    from resail_pipeline.generation.cuda import GpuInfo

    policy, _ = cycle_1
    params = _catalog(None, policy).load("parameters")
    bootstrap = {**params["bootstrap"], "checkpoint": str(tiny_checkpoint)}
    run = {**RUN, "staging_dir": str(tmp_path)}
    catalog = _catalog(None, policy, run=run, bootstrap=bootstrap)
    training = Pipeline([node(lambda x: x, "cycle_0.checkpoint", "cycle_1.checkpoint")])
    evaluating = Pipeline([node(lambda x: x, "cycle_0.checkpoint", "cycle_1.eval_results")])
    tiny = [GpuInfo(memory=2**20, compute_capability=(9, 0))] * 2  # fakes: two 1 MiB GPUs
    monkeypatch.setattr(hooks, "visible_gpus", lambda: tiny)
    with pytest.raises(ConfigError, match=r"^train\.engine: one training rank needs about "):
        PreflightHook().before_pipeline_run({}, training, catalog)
    PreflightHook().before_pipeline_run({}, evaluating, catalog)  # trains nothing
    large = [GpuInfo(memory=80 * 2**30, compute_capability=(9, 0))] * 2
    monkeypatch.setattr(hooks, "visible_gpus", lambda: large)
    PreflightHook().before_pipeline_run({}, training, catalog)


def test_another_initial_policy_is_an_error_not_ignored(cycle_1, tiny_checkpoint, tmp_path):
    """Under --only-missing-outputs the bootstrap node is skipped once cycle 0 exists: a run that
    asks for another initial policy is stopped before any node, not silently given the old one."""
    import shutil

    from kedro.pipeline import Pipeline, node

    policy, _ = cycle_1
    reader = Pipeline([node(lambda x: x, "cycle_0.checkpoint", "out", name="reader")])
    hook = PreflightHook()
    params = _catalog(None, policy).load("parameters")
    same = {**params["bootstrap"], "checkpoint": str(tiny_checkpoint)}
    hook.before_pipeline_run({}, reader, _catalog(None, policy, bootstrap=same))
    other = shutil.copytree(tiny_checkpoint, tmp_path / "other")
    asked = {**params["bootstrap"], "checkpoint": str(other)}
    with pytest.raises(ValueError, match=r"this data folder's initial policy is .* asks for"):
        hook.before_pipeline_run({}, reader, _catalog(None, policy, bootstrap=asked))


def test_a_reference_policy_that_does_not_exist_is_refused_before_any_node(cycle_1):
    """A typo in bootstrap.reference was taken as 'build one' (or, with --only-missing-outputs,
    the published policy was used in silence)."""
    from kedro.pipeline import Pipeline, node

    from resail_pipeline.config import ConfigError

    policy, _ = cycle_1
    reader = Pipeline([node(lambda x: x, "cycle_0.checkpoint", "out", name="reader")])
    params = _catalog(None, policy).load("parameters")
    typo = {**params["bootstrap"], "reference": "reference/textcraft-initail"}
    for exists in (True, False):  # published already, or not yet
        catalog = _catalog(None, policy, bootstrap=typo)
        if not exists:
            catalog.release("cycle_0.checkpoint")
            assert not catalog.exists("cycle_0.checkpoint")
        with pytest.raises(ConfigError, match=r"bootstrap\.reference: no policy directory"):
            PreflightHook().before_pipeline_run({}, reader, catalog)
    built = {**params["bootstrap"], "reference": None}  # null: build one
    PreflightHook().before_pipeline_run({}, reader, _catalog(None, policy, bootstrap=built))


@contextlib.contextmanager
def _session_catalog(tmp_path, parameters, runtime, env=None):
    """The catalog of a session over a copy of conf/ (:func:`_project`) with ``runtime`` as the
    command line's parameters."""
    from kedro.framework.session import KedroSession

    project = _project(tmp_path, parameters, env)
    with KedroSession.create(project_path=project, env=env, runtime_params=runtime) as session:
        yield session.load_context().catalog


def _project(tmp_path, parameters, env=None):
    """A project over a copy of conf/ (its folders under ``tmp_path``) with ``parameters`` as the
    configuration environment's parameters (conf/local's where ``env`` is None, else added to
    conf/<env>'s), bootstrapped."""
    from kedro.framework.startup import bootstrap_project

    root = Path(__file__).resolve().parents[2]
    project = tmp_path / "project"
    project.mkdir(parents=True)
    (project / "pyproject.toml").symlink_to(root / "pyproject.toml")
    shutil.copytree(root / "conf", project / "conf")
    (project / "src").mkdir()
    (project / "src" / "resail_pipeline").symlink_to(root / "src" / "resail_pipeline")
    own = project / "conf" / (env or "local") / "parameters.yml"
    merged = _merged(yaml.safe_load(own.read_text()) if own.is_file() else {}, parameters)
    own.write_text(yaml.safe_dump(merged, sort_keys=False))
    bootstrap_project(project)
    return project


def _merged(data: dict | None, overlay: str) -> dict:
    """``data`` with the YAML ``overlay`` laid over it, mappings key by key."""
    out = dict(data or {})
    for key, value in (yaml.safe_load(overlay) or {}).items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            value = _merged(out[key], yaml.safe_dump(value))
        out[key] = value
    return out


def _under_data(path) -> str:
    """``path`` from the data folder on (``02_intermediate/...``)."""
    return str(path).split("/data/", 1)[1]


def _catalog_paths(tmp_path, parameters, runtime, names, env=None):
    """The file paths the project's catalog gives ``names`` in a session over a copy of conf/ with
    ``parameters`` as the environment's parameters and ``runtime`` as the command line's."""
    with _session_catalog(tmp_path, parameters, runtime, env) as catalog:
        return [_under_data(catalog.get(name)._describe()["filepath"]) for name in names]


@pytest.mark.parametrize(
    ("parameters", "runtime", "folder"),
    [
        ("run:\n  method: sdpo\n", {}, "textcraft/sdpo"),
        ("run:\n  method: sdpo\n", {"run": {"experiment": "mine"}}, "textcraft/mine"),
        ("", {"run": {"method": "rft"}}, "textcraft/rft"),
        ("", {}, "textcraft/oel_resail"),
    ],
)
def test_the_catalogs_folders_follow_the_resolved_run_parameters(
    tmp_path, parameters, runtime, folder
):
    """A method set in an environment's parameters (as conf/local would hold it) names the folder
    the run writes to, as one given on the command line does."""
    (path,) = _catalog_paths(tmp_path, parameters, runtime, ["cycle_2.trajectories"])
    assert path == f"02_intermediate/{folder}/cycle_2/trajectories.parquet"


def test_cycle_ones_responses_and_scores_are_shared_where_their_settings_agree(tmp_path):
    """Two learning rates, two methods that cache ordinary-view responses and the in-loop
    sampler's CUDA-graph switch share cycle 1's cached responses and scores; EPD (privileged
    view), another sampling temperature and the methods that read no cached responses (their
    folder holds empty tables) do not, and later cycles stay each experiment's own."""
    names = ["cycle_1.responses", "cycle_1.scores", "cycle_2.responses"]

    def paths(case, parameters="", **run):
        return _catalog_paths(tmp_path / case, parameters, {"run": run}, names)

    base = paths("base", method="sdpo", experiment="a")
    other_lr = paths("lr", "train:\n  optimizer:\n    lr: 1.0e-6\n", method="sdpo", experiment="b")
    resail = paths("resail", method="sdpo_resail")
    epd = paths("epd", method="epd")
    hotter = paths("hot", "train:\n  responses:\n    temperature: 0.7\n", method="sdpo")
    graphs = paths("graphs", "train:\n  responses:\n    cuda_graphs: false\n", method="sdpo")
    oel, oel_resail = paths("oel", method="oel"), paths("oel_resail", method="oel_resail")

    responses, scores, later = base
    folder = responses.removesuffix("/responses.parquet")
    assert folder.startswith("04_feature/textcraft/shared/cycle_1/ordinary-")
    assert scores == f"{folder}/scores.parquet"
    assert later == "04_feature/textcraft/a/cycle_2/responses.parquet"
    assert other_lr[:2] == base[:2] and resail[:2] == base[:2]
    assert graphs[:2] == base[:2]  # the trainer's own sampler: neither table reads it
    assert other_lr[2] == "04_feature/textcraft/b/cycle_2/responses.parquet"
    assert epd[0].startswith("04_feature/textcraft/shared/cycle_1/privileged-")
    assert hotter[0] != responses and hotter[0].startswith(
        "04_feature/textcraft/shared/cycle_1/ordinary-"
    )
    assert oel[:2] == oel_resail[:2]
    assert oel[0].startswith("04_feature/textcraft/shared/cycle_1/none-")


@pytest.mark.parametrize(("env", "tag"), [(None, ""), ("smoke", "-smoke")])
def test_an_env_set_in_a_parameter_file_moves_the_staging_folder_with_the_data_folder(
    tmp_path, monkeypatch, env, tag
):
    """``run: {env: alfworld}`` in an environment's parameters (conf/local's, or conf/smoke's under
    ``--env smoke``) moves the nodes' staging folder with the catalog's: the preflight takes the
    run's lock instead of refusing a ``run.staging_dir`` left at its default."""
    from kedro.pipeline import Pipeline, node

    writer = Pipeline([node(lambda x: x, "params:run", "cycle_1.checkpoint", name="writer")])
    with _session_catalog(tmp_path, "run:\n  env: alfworld\n", {}, env) as catalog:
        monkeypatch.chdir(tmp_path / "project")  # the staging folder is relative to the run's
        checkpoint = catalog.get("cycle_1.checkpoint")._describe()
        staging = catalog.load("params:run")["staging_dir"]
        hook = PreflightHook()
        hook.before_pipeline_run({}, writer, catalog)
        hook.after_pipeline_run()
    folder = f"alfworld{tag}"
    assert _under_data(checkpoint["filepath"]) == (
        f"06_models/{folder}/oel_resail/cycle_1/checkpoint.parquet"
    )
    assert staging == f"data/06_models/.staging/{folder}"
    assert _under_data(checkpoint["staging_dir"]) == f"06_models/.staging/{folder}"


@pytest.mark.parametrize(
    ("parameters", "runtime", "tag"),
    [
        ('data_tag: "-viaparams"\n', {}, "-viaparams"),
        ('data_tag: "-viaparams"\n', {"data_tag": "-cli"}, "-cli"),  # the command line wins
        ("", {"data_tag": "-cli"}, "-cli"),
        ("", {}, "-smoke"),  # the environment's globals.yml
    ],
)
def test_a_data_tag_set_in_a_parameter_file_names_the_data_folder(
    tmp_path, parameters, runtime, tag
):
    """``data_tag`` in an environment's parameters names the data folder of the cycles and of the
    aitz pipeline, and their staging folders, as ``--params data_tag=...`` does."""
    names = ["cycle_2.trajectories", "cycle_0.checkpoint", "aitz.pool"]
    with _session_catalog(tmp_path, parameters, runtime, "smoke") as catalog:
        paths = [_under_data(catalog.get(name)._describe()["filepath"]) for name in names]
        staging = _under_data(catalog.get("cycle_0.checkpoint")._describe()["staging_dir"])
        aitz_staging = _under_data(
            catalog.get("aitz.initial.checkpoint")._describe()["staging_dir"]
        )
        params = catalog.load("parameters")
    assert paths == [
        f"02_intermediate/textcraft{tag}/oel_resail/cycle_2/trajectories.parquet",
        f"06_models/textcraft{tag}/shared/cycle_0/checkpoint.parquet",
        f"02_intermediate/aitz{tag}/pool.parquet",
    ]
    assert staging == f"06_models/.staging/textcraft{tag}"
    assert params["run"]["staging_dir"] == f"data/{staging}"
    assert aitz_staging == f"06_models/.staging/aitz{tag}"
    assert params["aitz"]["staging_dir"] == f"data/{aitz_staging}"
    assert params["aitz"]["data"]["root"] == f"data/01_raw/aitz-synthetic{tag}"


def test_two_sessions_in_one_process_each_read_their_own_data_folder(tmp_path):
    """Two sessions, their contexts created in turn before either reads its catalog (a notebook,
    a test suite): each names the data folder its own parameters set."""
    from kedro.framework.session import KedroSession

    contexts = []
    for tag in ("-first", "-second"):
        project = _project(tmp_path / tag, f'data_tag: "{tag}"\n', "smoke")
        session = KedroSession.create(project_path=project, env="smoke")
        contexts.append((tag, session.load_context()))
    for tag, context in contexts:
        path = context.catalog.get("cycle_1.trajectories")._describe()["filepath"]
        assert (
            _under_data(path)
            == f"02_intermediate/textcraft{tag}/shared/cycle_1/trajectories.parquet"
        )
        assert context.params["run"]["staging_dir"] == f"data/06_models/.staging/textcraft{tag}"


def test_a_data_tag_that_would_leave_the_data_folder_is_refused_before_the_catalog(tmp_path):
    from resail_pipeline.config import ConfigError

    evil = 'data_tag: "/../../x"\n'
    with (
        pytest.raises(ConfigError, match=r"^data_tag: must be a folder name"),
        _session_catalog(tmp_path, evil, {}, "smoke"),
    ):
        pass


def test_a_second_run_of_an_experiment_is_refused_while_the_first_holds_its_lock(cycle_1, tmp_path):
    from kedro.pipeline import Pipeline, node

    from resail_pipeline.config import ConfigError

    policy, _ = cycle_1
    writer = Pipeline([node(lambda x: x, "params:run", "cycle_1.out", name="writer")])
    run = {**RUN, "staging_dir": str(tmp_path / "staging")}
    first, second = PreflightHook(), PreflightHook()
    first.before_pipeline_run({}, writer, _catalog(None, policy, run=run))
    assert (tmp_path / "staging" / "oel.lock").read_text() == str(os.getpid())
    with pytest.raises(ConfigError, match=r"another run of 'oel' is writing this data folder"):
        second.before_pipeline_run({}, writer, _catalog(None, policy, run=run))
    other = {**run, "experiment": "other"}  # another experiment of the folder may run beside it
    second.before_pipeline_run({}, writer, _catalog(None, policy, run=other))
    second.after_pipeline_run()
    first.on_pipeline_error()  # the lock goes with the run, however it ends
    second.before_pipeline_run({}, writer, _catalog(None, policy, run=run))
    second.after_pipeline_run()


def test_what_every_experiment_shares_is_written_by_one_run_and_read_by_many(cycle_1, tmp_path):
    """Cycle 0 and the cycle-1 corpus live in ``shared/``: a run that would write them holds
    ``shared.lock`` alone (another experiment is refused while it does), runs that find them
    written share it, side by side, and a run that would rewrite them (no
    ``--only-missing-outputs``) is refused while any of those reads. Cycle 1's responses, in a
    folder of their setting below ``shared/cycle_1``, take no part in it."""
    from kedro.pipeline import Pipeline, node

    from resail_pipeline.config import ConfigError
    from resail_pipeline.datasets.parquet import AtomicParquetDataset
    from resail_pipeline.io import ProcessLock

    policy, _ = cycle_1
    data = tmp_path / "data" / "textcraft" / "shared"
    writer = Pipeline([node(lambda x: x, "params:run", "cycle_0.eval_results", name="writer")])
    run = {**RUN, "staging_dir": str(tmp_path / "staging")}
    lock = tmp_path / "staging" / "shared.lock"

    def catalog(experiment):
        catalog = _catalog(None, policy, run={**run, "experiment": experiment})
        catalog["cycle_0.eval_results"] = AtomicParquetDataset(
            str(data / "cycle_0" / "eval_results.parquet")
        )
        catalog["cycle_1.responses"] = AtomicParquetDataset(
            str(data / "cycle_1" / "0123abcd" / "responses.parquet")
        )
        return catalog

    missing = {"only_missing_outputs": True}
    hooks = {name: PreflightHook() for name in ("oel", "oel_resail", "rft", "sdpo")}
    responses = Pipeline([node(lambda x: x, "params:run", "cycle_1.responses", name="r")])
    hooks["sdpo"].before_pipeline_run(missing, responses, catalog("sdpo"))
    assert not lock.exists()  # a setting's own folder: no lock on what all share
    hooks["oel"].before_pipeline_run(missing, writer, catalog("oel"))  # missing: it writes
    assert lock.read_text() == str(os.getpid())
    uses = r"^another run uses cycle 0 and the cycle-1 corpus every experiment .* would write"
    with pytest.raises(ConfigError, match=uses):
        hooks["oel_resail"].before_pipeline_run(missing, writer, catalog("oel_resail"))
    catalog("oel").save("cycle_0.eval_results", pd.DataFrame({"x": [1]}))
    with pytest.raises(ConfigError, match=r"^another run is writing cycle 0 and the cycle-1"):
        hooks["oel_resail"].before_pipeline_run(missing, writer, catalog("oel_resail"))
    hooks["oel"].after_pipeline_run()
    hooks["oel_resail"].before_pipeline_run(missing, writer, catalog("oel_resail"))  # written
    hooks["rft"].before_pipeline_run(missing, writer, catalog("rft"))  # beside it
    with pytest.raises(ConfigError, match=uses):
        hooks["oel"].before_pipeline_run({}, writer, catalog("oel"))  # would rewrite them
    refused = ProcessLock(tmp_path / "staging" / "oel.lock")  # the refused run keeps no lock
    refused.acquire()
    refused.release()
    hooks["oel_resail"].after_pipeline_run()
    hooks["rft"].on_pipeline_error()
    hooks["oel"].before_pipeline_run({}, writer, catalog("oel"))
    hooks["oel"].after_pipeline_run()


def test_two_aitz_runs_of_one_tag_are_locked_apart_and_stage_where_the_catalog_publishes(
    cycle_1, tmp_path
):
    from kedro.io import MemoryDataset
    from kedro.pipeline import Pipeline, node

    from resail_pipeline.config import ConfigError

    policy, _ = cycle_1
    writer = Pipeline([node(lambda x: x, "params:aitz", "aitz.pool", name="writer")])
    params = _catalog(None, policy).load("parameters")
    aitz = {**params["aitz"], "staging_dir": str(tmp_path / "staging")}
    first, second = PreflightHook(), PreflightHook()
    first.before_pipeline_run({}, writer, _catalog(None, policy, aitz=aitz))
    assert (tmp_path / "staging" / "aitz.lock").read_text() == str(os.getpid())
    with pytest.raises(ConfigError, match=r"^data_tag: another run of 'aitz' is writing"):
        second.before_pipeline_run({}, writer, _catalog(None, policy, aitz=aitz))
    first.after_pipeline_run()
    # a staging folder other than the one the catalog publishes the checkpoints from
    publishing = Pipeline([node(lambda x: x, "params:aitz", "aitz.initial.checkpoint")])
    catalog = _catalog(None, policy, aitz=aitz)
    described = MemoryDataset(None, metadata=None)
    described._describe = lambda: {"staging_dir": str(tmp_path / "elsewhere")}  # fake: a catalog
    catalog["aitz.initial.checkpoint"] = described
    with pytest.raises(ConfigError, match=r"^aitz\.staging_dir: .* is not the folder the catalog"):
        second.before_pipeline_run({}, publishing, catalog)


def test_a_killed_runs_lock_is_free():
    import subprocess
    import sys
    import tempfile

    from resail_pipeline.io import LockedError, ProcessLock

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "x.lock"
        holder = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import sys, time\n"
                "from resail_pipeline.io import ProcessLock\n"
                f"lock = ProcessLock({str(path)!r})\n"
                "lock.acquire()\n"
                "print('held', flush=True)\n"
                "time.sleep(120)\n",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert holder.stdout.readline().strip() == "held"
            with pytest.raises(LockedError, match=f"held by process {holder.pid}"):
                ProcessLock(path).acquire()
            holder.kill()
            holder.wait()
            lock = ProcessLock(path)
            lock.acquire()
            lock.release()
        finally:
            holder.kill()


def test_a_lock_taken_with_wait_waits_for_its_holder(tmp_path, caplog, while_lock_held):
    from resail_pipeline.io import ProcessLock

    path = tmp_path / "x.lock"

    def take():
        lock = ProcessLock(path)
        lock.acquire(wait=True)
        lock.release()
        return "taken"

    with caplog.at_level(logging.INFO, logger="resail_pipeline.io"):
        events = while_lock_held(path, take, hold=1.0)
    assert events == ["released", "taken"]
    assert f"{path}: held by process {os.getpid()}; waiting until it lets go" in caplog.text


def test_staging_elsewhere_than_the_catalog_publishes_from_is_refused(cycle_1, tmp_path):
    from kedro.io import DataCatalog, MemoryDataset
    from kedro.pipeline import Pipeline, node

    from resail_pipeline.config import ConfigError
    from resail_pipeline.datasets import CheckpointDataset

    policy, _ = cycle_1
    trainer = Pipeline([node(lambda x: x, "cycle_0.checkpoint", "cycle_1.checkpoint", name="t")])
    run = {**RUN, "staging_dir": str(tmp_path / "elsewhere")}
    base = _catalog(None, policy, run=run)
    catalog = DataCatalog(
        {
            "parameters": MemoryDataset(base.load("parameters")),
            "cycle_0.checkpoint": MemoryDataset(policy),
            "cycle_1.checkpoint": CheckpointDataset(
                str(tmp_path / "c1" / "checkpoint.parquet"), str(tmp_path / "staging")
            ),
        }
    )
    with pytest.raises(ConfigError, match=r"run\.staging_dir: .*elsewhere is not the folder"):
        PreflightHook().before_pipeline_run({}, trainer, catalog)


def _fake_games(tmp_path, monkeypatch) -> list:
    """A fake generator of ALFWorld's default set (its folder without its minutes of engine),
    with ALFWORLD_DATA unset; returns the list each call appends to."""
    from resail_pipeline.envs import alfworld_games

    made = []

    def fake_ensure_games():
        made.append(True)
        return tmp_path / "games"

    monkeypatch.setattr(alfworld_games, "ensure_games", fake_ensure_games)
    # set, then deleted, through monkeypatch: the hook's own setting is undone after the test too
    monkeypatch.setenv("ALFWORLD_DATA", "unset by the next line")
    monkeypatch.delenv("ALFWORLD_DATA")
    return made


def test_an_alfworld_run_without_data_gets_the_generated_set_before_the_checks(
    tmp_path, monkeypatch
):
    """Only an ALFWorld run that names no data and acts in the environment: the set is made where
    the main job keeps it and ALFWORLD_DATA names it before the budgets are checked against it;
    a run with data, on TextCraft, or that only reads tables (the report) is left alone."""
    from kedro.pipeline import Pipeline, node

    from resail_pipeline import hooks
    from resail_pipeline.envs.alfworld import ALFWORLD_DATA as DATA

    made = _fake_games(tmp_path, monkeypatch)
    checked = []  # fake budget check: records the data it would have read
    monkeypatch.setattr(hooks, "check_budgets", lambda _: checked.append(os.environ.get(DATA)))
    hook, policy = PreflightHook(), pd.DataFrame()
    acting = Pipeline([node(lambda x: x, "params:run", "eval_results")])
    reporting = Pipeline([node(lambda x: x, "eval_results", "main_results")])
    hook.before_pipeline_run({}, acting, _catalog(None, policy))  # TextCraft
    assert made == [] and DATA not in os.environ
    with_data = {**RUN, "env": "alfworld", "env_options": {"data_path": str(tmp_path / "x")}}
    hook.before_pipeline_run({}, acting, _catalog(None, policy, run=with_data))
    assert made == [] and DATA not in os.environ
    alfworld = {**RUN, "env": "alfworld"}
    hook.before_pipeline_run({}, reporting, _catalog(None, policy, run=alfworld))
    assert made == [] and DATA not in os.environ and len(checked) == 2
    hook.before_pipeline_run({}, acting, _catalog(None, policy, run=alfworld))
    games = str((tmp_path / "games").resolve())
    assert made == [True] and os.environ[DATA] == games and checked[-1] == games
    hook.before_pipeline_run({}, acting, _catalog(None, policy, run=alfworld))  # now set: kept
    assert made == [True]


def test_a_missing_initial_policy_is_refused_before_the_games_are_made(tmp_path, monkeypatch):
    """Making ALFWorld's games takes minutes on a first run: a shipped policy that is not there
    (a typo in `bootstrap.reference`, or a checkout without reference/alfworld-initial) fails first,
    naming the field."""
    from kedro.pipeline import Pipeline, node

    from resail_pipeline.config import ConfigError

    made = _fake_games(tmp_path, monkeypatch)
    resolving = Pipeline([node(lambda x: x, "params:bootstrap", "cycle_0.checkpoint")])
    catalog = _catalog(
        None,
        pd.DataFrame(),
        run={**RUN, "env": "alfworld"},
        bootstrap={"reference": str(tmp_path / "no-such-policy")},
    )
    with pytest.raises(
        ConfigError,
        match=r"^bootstrap\.reference: no policy directory .*"
        r"no-such-policy; give the shipped policy's directory "
        r"\(reference/alfworld-initial\)",
    ):
        PreflightHook().before_pipeline_run({}, resolving, catalog)
    assert made == []
