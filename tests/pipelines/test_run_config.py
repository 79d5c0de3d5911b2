"""``params:run`` in every configuration environment: each backend gets only its own options, and
an option a backend does not take fails before anything loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kedro.config import OmegaConfigLoader

from resail_pipeline.pipelines.common import RunConfig
from resail_pipeline.settings import CONFIG_LOADER_ARGS

CONF = Path(__file__).resolve().parents[2] / "conf"


def _run_params(env: str) -> dict:
    loader = OmegaConfigLoader(str(CONF), **{**CONFIG_LOADER_ARGS, "default_run_env": env})
    return loader["parameters"]["run"]


def test_the_paper_environment_hands_vllm_only_its_own_options():
    """conf/base's transformers batch size is soft-merged into conf/paper's run section; it must
    not reach vllm.LLM (whose engine arguments have no such field)."""
    run = RunConfig.from_params(_run_params("paper"))
    assert run.backend == "vllm"
    assert "batch_size" in run.generation["transformers"]  # merged from conf/base, unused
    assert run.generation_options == {"gpu_memory_utilization": 0.9, "max_model_len": 16384}


@pytest.mark.parametrize("env", ["base", "smoke", "study", "study-alfworld"])
def test_every_cpu_environment_gives_transformers_options_it_takes(env):
    run = RunConfig.from_params(_run_params(env))
    assert run.backend == "transformers" and run.generation_options["batch_size"] in (32, 64)


def test_an_option_the_backend_does_not_take_fails_naming_it():
    base = _run_params("base")
    bad = {**base, "generation": {"transformers": {"gpu_memory_utilization": 0.9}}}
    with pytest.raises(
        ValueError, match=r"run\.generation\.transformers: .*gpu_memory_utilization"
    ):
        RunConfig.from_params(bad)
    flat = {**base, "generation": {"batch_size": 8}}  # the old, flat layout
    with pytest.raises(ValueError, match="'batch_size' is not a generation backend"):
        RunConfig.from_params(flat)


@pytest.mark.parametrize("env", ["base", "smoke", "study", "study-alfworld", "paper"])
def test_every_environment_passes_the_parameter_check(env):
    from resail_pipeline.pipelines.parameters import check_parameters

    loader = OmegaConfigLoader(str(CONF), **{**CONFIG_LOADER_ARGS, "default_run_env": env})
    check_parameters(loader["parameters"])


def test_a_fresh_staging_path_removes_what_a_killed_run_of_the_same_label_left(tmp_path):
    base = _run_params("base")
    run = RunConfig.from_params({**base, "staging_dir": str(tmp_path)})
    other = RunConfig.from_params({**base, "staging_dir": str(tmp_path), "experiment": "other"})
    stale = tmp_path / f"{run.experiment}-cycle_2-0123456789ab"
    (stale / "policy").mkdir(parents=True)
    kept = [
        tmp_path / f"{run.experiment}-cycle_1-0123456789ab",
        tmp_path / "other-cycle_2-abcdef012345",
        # experiment "<name>-cycle_2"'s own folders and snapshots start with the same prefix
        tmp_path / f"{run.experiment}-cycle_2-cycle_1-0123456789ab",
        tmp_path / f"{run.experiment}-cycle_2-cycle_1.snapshots",
    ]
    for path in kept:
        path.mkdir()
    fresh = run.staging_path("cycle_2")
    assert fresh.name.startswith(f"{run.experiment}-cycle_2-") and not fresh.exists()
    assert not stale.exists() and all(path.exists() for path in kept)
    assert other.staging_path("cycle_2").name.startswith("other-cycle_2-")
    assert not kept[1].exists()  # the other experiment's own stale folder
    assert all(path.exists() for path in kept[2:])


def test_the_paper_environments_differ_only_in_table_4s_rows():
    """conf/paper (ALFWorld) and conf/paper-textcraft are one setting: only the benchmark and
    table 4's per-benchmark values may differ."""
    from resail_pipeline.config import flatten
    from resail_pipeline.pipelines.parameters import check_parameters

    def parameters(env):
        loader = OmegaConfigLoader(str(CONF), **{**CONFIG_LOADER_ARGS, "default_run_env": env})
        return loader["parameters"], loader["globals"]

    (alfworld, alfworld_globals), (textcraft, textcraft_globals) = map(
        parameters, ("paper", "paper-textcraft")
    )
    check_parameters(textcraft)
    a, t = flatten(alfworld), flatten(textcraft)
    for key in ("run.staging_dir", "aitz.staging_dir", "aitz.data.root"):
        del a[key], t[key]  # follow the data folder
    differing = {k: (a.get(k), t.get(k)) for k in a.keys() | t.keys() if a.get(k) != t.get(k)}
    assert differing == {
        "run.env": ("alfworld", "textcraft"),
        "evaluate.splits": (["id", "ood"], ["test"]),
        "train.resail.rho": (0.05, 0.25),
        "train.resail.lambda": (0.5, 1.0),
        "train.schedule.trajectories_per_update": (32, 8),
    }
    assert (alfworld_globals["env"], textcraft_globals["env"]) == ("alfworld", "textcraft")
    assert t["train.probe.enabled"] is True and t["train.schedule.updates"] == 30


def test_the_rehearsal_is_the_paper_setting_with_only_its_sizes_changed():
    """conf/rehearsal (`make rehearse`) runs conf/paper-textcraft's path on CPU: the backend,
    summaries, engine, stage, checkpointing and probe are the paper's; only sizes may differ."""
    from resail_pipeline.config import flatten
    from resail_pipeline.pipelines.parameters import check_parameters

    def parameters(env):
        return OmegaConfigLoader(str(CONF), **{**CONFIG_LOADER_ARGS, "default_run_env": env})[
            "parameters"
        ]

    paper, rehearsal = map(parameters, ("paper-textcraft", "rehearsal"))
    check_parameters(rehearsal)
    p, r = flatten(paper), flatten(rehearsal)
    for key in ("run.staging_dir", "aitz.staging_dir", "aitz.data.root"):
        del p[key], r[key]  # follow the data folder
    differing = {k for k in p.keys() | r.keys() if p.get(k) != r.get(k)}
    assert differing == {
        "run.shards",
        "run.env_options.max_steps",
        "run.generation.vllm.gpu_memory_utilization",
        "run.generation.vllm.max_model_len",
        "run.generation.vllm.dtype",
        "run.generation.vllm.max_num_batched_tokens",
        "run.generation.vllm.enable_chunked_prefill",
        "bootstrap.checkpoint",
        "bootstrap.reference",
        "summarize.max_attempts",
        "summarize.on_rejected",
        "summarize.sampling.max_new_tokens",
        "collect.max_new_tokens",
        "evaluate.num_tasks",
        "evaluate.decoding_seeds",
        "evaluate.max_new_tokens",
        "train.schedule.updates",
        "train.schedule.trajectories_per_update",
        "train.engine.world_size",
        "train.engine.precision",
        "train.responses.max_tokens",
        "train.responses.batch_size",
        "train.responses.max_batch_tokens",
        "train.probe.num_trajectories",
    }
    assert (r["run.backend"], r["summarize.source"], r["train.engine.kind"]) == (
        "vllm",
        "model",
        "deepspeed",
    )
    assert r["train.engine.zero_stage"] == 2 and r["train.probe.enabled"] is True


@pytest.mark.parametrize(
    ("env", "runtime", "folder"),
    [
        ("local", {}, "textcraft"),
        ("smoke", {}, "textcraft-smoke"),
        ("study", {"data_tag": "-x"}, "textcraft-x"),
        ("local", {"run": {"env": "alfworld"}}, "alfworld"),
    ],
)
def test_staging_is_per_data_folder_and_the_same_for_nodes_and_catalog(env, runtime, folder):
    """A run removes its own experiment's stale staging; keyed by data folder, a smoke run and a
    default run of the same experiment never remove each other's."""
    loader = OmegaConfigLoader(
        str(CONF), **{**CONFIG_LOADER_ARGS, "default_run_env": env}, runtime_params=runtime
    )
    staging = f"data/06_models/.staging/{folder}"
    assert loader["parameters"]["run"]["staging_dir"] == staging
    assert loader["catalog"]["cycle_0.checkpoint"]["staging_dir"] == staging


@pytest.mark.parametrize(
    ("runtime", "policy", "splits"),
    [
        ({}, "textcraft-initial", ("test",)),
        ({"run": {"env": "alfworld"}}, "alfworld-initial", ("id", "ood")),
    ],
)
def test_the_initial_policy_and_the_evaluated_splits_follow_the_environment(
    runtime, policy, splits
):
    """`--params run.env=alfworld` alone gives an ALFWorld run its own shipped policy and its
    `id` and `ood` evaluation, as a TextCraft run gets its own policy and `test`."""
    from resail_pipeline.pipelines.bootstrap.nodes import bootstrap_config
    from resail_pipeline.pipelines.evaluate.nodes import eval_config

    loader = OmegaConfigLoader(str(CONF), **CONFIG_LOADER_ARGS, runtime_params=runtime)
    params = loader["parameters"]
    bootstrap = bootstrap_config(params["bootstrap"], params["run"]["env"])
    assert (bootstrap.name, bootstrap.reference) == (policy, f"reference/{policy}")
    assert eval_config(dict(params["evaluate"]), params["run"]["env"]).splits == splits
    # a list given keeps its splits in either environment
    given = {**params["evaluate"], "splits": ["dev"]}
    assert eval_config(given, params["run"]["env"]).splits == ("dev",)


def _params(env: str) -> dict:
    loader = OmegaConfigLoader(str(CONF), **{**CONFIG_LOADER_ARGS, "default_run_env": env})
    return loader["parameters"]


@pytest.mark.parametrize("env", ["base", "smoke", "study", "paper-textcraft"])
def test_every_textcraft_environments_budgets_fit_its_splits(env, caplog):
    from resail_pipeline.pipelines.parameters import check_budgets

    params = _params(env)
    with caplog.at_level("INFO", logger="resail_pipeline.pipelines.parameters"):
        check_budgets(params)
    if env == "paper-textcraft":  # table 4: 30 x 8 = 240 trajectories from the 219 train tasks
        assert "240 trajectories per cycle from the 219 tasks" in caplog.text
        assert "each task runs 1 time(s) per cycle, 21 of them once more" in caplog.text


@pytest.mark.parametrize(
    ("section", "values", "message"),
    [
        ("evaluate", {"num_tasks": 1000}, r"evaluate\.num_tasks: 1000 is more than the 100 tasks"),
        ("evaluate", {"splits": ["bogus"]}, r"evaluate\.splits: split: unknown TextCraft split"),
        ("collect", {"split": "bogus"}, r"collect\.split: split: unknown TextCraft split"),
        (
            "collect",
            {"num_trajectories": 4},
            r"train\.schedule\.trajectories_per_update: 8 is more than the 4 trajectories",
        ),
    ],
)
def test_a_budget_that_does_not_fit_its_split_is_refused_naming_the_field(section, values, message):
    from resail_pipeline.config import ConfigError
    from resail_pipeline.pipelines.parameters import check_budgets

    params = _params("paper-textcraft")
    params[section] = {**params[section], **values}
    with pytest.raises(ConfigError, match=message):
        check_budgets(params)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"seed": "abc"}, r"run\.seed: must be a non-negative integer, got 'abc'"),
        ({"seed": -1}, r"run\.seed: must be a non-negative integer, got -1"),
        ({"seed": 1.5}, r"run\.seed: must be a non-negative integer, got 1\.5"),
        ({"seed": True}, r"run\.seed: must be a non-negative integer, got True"),
        (
            {"env_options": {"bogus": 1}},
            r"run\.env_options: the textcraft environment takes no option\(s\) \['bogus'\]",
        ),
        ({"env_options": {"max_steps": 0}}, r"run\.env_options\.max_steps: must be a positive"),
        (
            {"generation": {"transformers": {"batch_size": 0}}},
            r"run\.generation\.transformers\.batch_size: must be a positive integer, got 0",
        ),
        (
            {"generation": {"transformers": {"dtype": "fp64"}}},
            r"run\.generation\.transformers\.dtype: must be one of .*, got 'fp64'",
        ),
        (
            {"generation": {"transformers": {"compile": "yes"}}},
            r"run\.generation\.transformers\.compile: must be true, false or 'auto'",
        ),
        ({"staging_dir": "README.md"}, r"run\.staging_dir: README\.md is a file; give a folder"),
        ({"experiment": "shared"}, r"run\.experiment: 'shared' is the folder every experiment"),
        (
            {"generation": {"transformers": {"policy_id": "evil"}}},
            r"run\.generation\.transformers\.policy_id: set by the run itself",
        ),
    ],
)
def test_a_bad_run_value_is_refused_before_any_node(values, message):
    """What a hostile probe found accepted until a node failed (or, for 1.5 and true, read as 1):
    each is refused by the checks the pre-run hook makes."""
    from resail_pipeline.config import ConfigError
    from resail_pipeline.pipelines.parameters import check_budgets, check_parameters

    params = _params("base")
    run = dict(params["run"])
    for key, value in values.items():
        if key == "generation":
            run["generation"] = {**run["generation"], "transformers": value["transformers"]}
        else:
            run[key] = value
    params["run"] = run
    with pytest.raises(ConfigError, match=message):
        check_parameters(params)
        check_budgets(params)


def test_an_evaluation_records_its_machine_and_generation_settings(tiny_checkpoint, tmp_path):
    """bf16 rounding differs between processors: an eval_summary says where and how it ran."""
    from resail_pipeline.checkpoints import read_checkpoint_info
    from resail_pipeline.devices import processor
    from resail_pipeline.pipelines.evaluate.nodes import evaluate_node

    run = {
        **_params("base")["run"],
        "generation": {"transformers": {"dtype": "float32", "compile": False, "batch_size": 4}},
        "staging_dir": str(tmp_path),  # the evaluation journals its episodes there
    }
    assert RunConfig.from_params(run).generation_record() == "transformers, float32, eager"
    evaluate = {
        **_params("base")["evaluate"],
        "num_tasks": 1,
        "decoding_seeds": [0],
        "views": ["ordinary"],
        "max_new_tokens": 4,
    }
    checkpoint = read_checkpoint_info(tiny_checkpoint).to_frame()
    results, summary, steps = evaluate_node(checkpoint, None, evaluate, run)
    assert summary["generation"].tolist() == ["transformers, float32, eager"]
    # its journal outlives the node, finished: the catalog saves the tables after it returns
    config = RunConfig.from_params(run)
    (journal,) = config.finished_journals()
    assert journal.name.startswith(f"{config.experiment}-evaluate-cycle_0-")
    assert summary["machine"].iloc[0].startswith(processor())
    # and how the policy acted: the shares of its steps' actions that were valid and repeated
    from resail_pipeline.evaluation.stats import action_rates

    rates = action_rates(results, steps)
    assert len(results) == 1 and summary["valid_actions"].iloc[0] == steps["action_valid"].mean()
    assert summary[["valid_actions", "repeated_actions"]].equals(
        rates[["valid", "repeated"]].set_axis(["valid_actions", "repeated_actions"], axis=1)
    )


def test_a_collection_records_its_machine_and_generation_settings(tiny_checkpoint, tmp_path):
    """The corpus's tasks table says where and how its episodes were generated, beside the
    settings a shared corpus is checked against (which stay as they were)."""
    from resail_pipeline.checkpoints import read_checkpoint_info
    from resail_pipeline.devices import processor
    from resail_pipeline.pipelines.collect.nodes import collect_node

    run = {
        **_params("base")["run"],
        "generation": {"transformers": {"dtype": "float32", "compile": False, "batch_size": 4}},
        "staging_dir": str(tmp_path),
    }
    collect = {**_params("base")["collect"], "max_new_tokens": 4}
    train = {**_params("base")["train"]}
    train["schedule"] = {**train["schedule"], "updates": 1, "trajectories_per_update": 2}
    checkpoint = read_checkpoint_info(tiny_checkpoint).to_frame()
    tasks, trajectories, _ = collect_node(checkpoint, collect, train, run)
    assert len(tasks) == len(trajectories) == 2
    config = RunConfig.from_params(run)
    (journal,) = config.finished_journals()  # kept for the catalog's save
    assert journal.name.startswith(f"{config.experiment}-collect-cycle_1-")
    assert tasks["generation"].tolist() == ["transformers, float32, eager"] * 2
    assert tasks["machine"].iloc[0].startswith(processor())
    assert "machine" not in json.loads(tasks["settings"].iloc[0])


def test_vllms_record_names_the_dtype_its_engine_runs_in():
    """vLLM's engines run in the backend's default dtype (bf16) unless a run sets one; its
    record says which, not ``auto``."""
    run = {**_run_params("base"), "backend": "vllm"}
    assert RunConfig.from_params(run).generation_record() == "vllm, bfloat16"
    run["generation"] = {"vllm": {"dtype": "float16"}}
    assert RunConfig.from_params(run).generation_record() == "vllm, float16"


def test_a_rollout_journal_is_kept_per_label_and_settings(tmp_path):
    """A rerun with the same settings finds the journal a killed run left; a journal of the same
    label under other settings (say, another checkpoint) is removed; other labels are kept."""
    run = RunConfig.from_params({**_run_params("base"), "staging_dir": str(tmp_path)})
    first = run.journal("evaluate-cycle_1", policy="a" * 64, config={"seeds": [0, 1]})
    assert first.folder.parent == tmp_path and first.folder.name.endswith(".episodes")
    first.folder.mkdir()
    again = run.journal("evaluate-cycle_1", policy="a" * 64, config={"seeds": [0, 1]})
    assert again.folder == first.folder and first.folder.is_dir()
    other_label = run.journal("evaluate-cycle_2", policy="a" * 64, config={"seeds": [0, 1]})
    other_label.folder.mkdir()
    changed = run.journal("evaluate-cycle_1", policy="b" * 64, config={"seeds": [0, 1]})
    assert changed.folder != first.folder and not first.folder.exists()
    assert other_label.folder.is_dir()
    elsewhere = RunConfig.from_params(
        {**_run_params("base"), "staging_dir": str(tmp_path), "env_options": {"max_steps": 10}}
    )
    assert elsewhere.journal("x", policy="a").folder != run.journal("x", policy="a").folder


def test_a_backend_whose_package_is_missing_names_the_extra(monkeypatch):
    from resail_pipeline import generation
    from resail_pipeline.config import ConfigError

    monkeypatch.setitem(generation.BACKEND_PACKAGES, "vllm", ("no_such_package_here", "gpu"))
    with pytest.raises(
        ConfigError, match=r"^backend: vllm needs the no_such_package_here .* `gpu`"
    ):
        generation.check_installed("vllm")
    generation.check_installed("transformers")  # needs nothing beyond the base install


def test_a_missing_initial_checkpoint_is_refused_before_any_node(tmp_path):
    from resail_pipeline.bootstrap.config import BootstrapConfig
    from resail_pipeline.config import ConfigError
    from resail_pipeline.initial_policy import requested_policy

    for checkpoint, what in ((tmp_path / "nonexistent", "no directory"), (tmp_path, "without")):
        config = BootstrapConfig.from_dict({"checkpoint": str(checkpoint)})
        with pytest.raises(ConfigError, match=rf"^bootstrap\.checkpoint: .* {what}"):
            requested_policy(config)
