"""The study runner: plans checked before anything runs, and (slow) the whole comparison on the
smoke configuration, resumed, with its report."""

from __future__ import annotations

import csv
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from resail_pipeline.config import flatten
from resail_pipeline.evaluation.report import PAPER_TABLES
from resail_pipeline.study import Experiment, Rule, StudyPlan, apply_rule, load_plan, plan_path
from resail_pipeline.study.plan import nest

ROOT = Path(__file__).resolve().parents[1]


def test_the_shipped_plan_is_the_papers_comparison():
    plan = load_plan(ROOT / "conf" / "base" / "study.yml")
    cycles: dict[str, int] = {}
    methods: dict[str, str] = {}
    for experiment in plan.experiments:
        cycles[experiment.name] = max(cycles.get(experiment.name, 0), experiment.cycles)
        methods[experiment.name] = experiment.method
    # every trained method of table 1 for three cycles; OEL and its ReSAIL version to five
    assert cycles == {
        "oel": 5,
        "oel_resail": 5,
        "sdpo": 3,
        "sdpo_resail": 3,
        "rft": 3,
        "epd": 3,
        "grpo": 3,
        "oel_resail-retention_none": 3,
        "oel_resail-retention_ordinary": 3,
        "oel_resail-selection_bottom": 3,
        "oel_resail-selection_random": 3,
    }
    ablations = {e.name: e.params for e in plan.experiments if e.name.startswith("oel_resail-")}
    assert ablations == {
        "oel_resail-retention_none": {"train.resail.retention": "none"},
        "oel_resail-retention_ordinary": {"train.resail.retention": "ordinary"},
        "oel_resail-selection_bottom": {"train.resail.selection": "bottom"},
        "oel_resail-selection_random": {"train.resail.selection": "random"},
    }
    # tier by tier: the question (the OEL pair, with the probe) before SDPO's, then the rest
    tiers = [(e.tier, e.name) for e in plan.experiments]
    assert tiers == sorted(tiers, key=lambda t: t[0])
    assert {n for t, n in tiers if t == 1} == {"oel", "oel_resail"}
    assert {n for t, n in tiers if t == 2} == {"sdpo", "sdpo_resail"}
    assert all(e.params.get("train.probe.enabled") for e in plan.experiments if e.tier == 1)
    assert plan_path("smoke", ROOT) == ROOT / "conf" / "base" / "study.yml"


def test_the_clone_lever_runs_on_dev_with_the_policy_of_its_own_chain():
    """conf/study/lever-clone.yml: evaluated on dev alone, in its own data folder, collecting on
    the train tasks its initial policy (reference/textcraft-clone-chain/, shipped to
    reference/textcraft-clone-initial) was not cloned on."""
    from resail_pipeline.bootstrap.__main__ import load_env_options

    plan = load_plan(ROOT / "conf" / "study" / "lever-clone.yml")
    grid = load_plan(ROOT / "conf" / "base" / "study.yml")
    assert plan.params["evaluate.splits"] == ["dev"] and plan.rule is None
    assert plan.params["data_tag"] not in {grid.params.get("data_tag"), "-study", "-study-dev"}
    assert plan.params["bootstrap.reference"] == "reference/textcraft-clone-initial"
    for recipe in sorted((ROOT / "reference" / "textcraft-clone-chain").glob("*.yml")):
        assert load_env_options(recipe, "textcraft") == plan.params["run.env_options"], recipe
    assert {(e.method, e.cycles) for e in plan.experiments} == {
        (m, c) for m in ("oel", "oel_resail") for c in range(1, 6)
    }


def test_the_alfworld_plans_fix_the_rate_on_dev_below_the_policys_last_rate():
    """conf/study-alfworld: the budget check runs OEL's cycle 1 on ALFWorld's dev games alone, in
    a data folder of its own, at rates below the one its initial policy's last stage ended
    behaviour cloning at; the grid is the OEL pair to five cycles (with the probe), then the SDPO
    pair to three, at table 4's ALFWorld row."""
    from kedro.config import OmegaConfigLoader

    from resail_pipeline.bootstrap.__main__ import load_config
    from resail_pipeline.settings import CONFIG_LOADER_ARGS
    from resail_pipeline.study import data_folder

    conf = ROOT / "conf" / "study-alfworld"
    check, grid = load_plan(conf / "budgets.yml"), load_plan(conf / "study.yml")
    assert plan_path("study-alfworld", ROOT) == conf / "study.yml"
    assert data_folder(grid, "study-alfworld", ROOT) == ("alfworld", "-study")
    assert data_folder(check, "study-alfworld", ROOT) == ("alfworld", "-study-dev")
    assert check.params["evaluate.splits"] == ["dev"] and check.rule.method == "oel"
    last_stage = sorted((ROOT / "reference" / "alfworld-chain").glob("*.yml"))[-1]
    training = load_config(last_stage, ROOT / "conf" / "base" / "parameters_bootstrap.yml").training
    last_rate = training.learning_rate * training.min_lr_ratio
    rates = [e.params["train.optimizer.lr"] for e in check.experiments]
    assert rates == sorted(rates) and len(rates) == 4 and max(rates) < last_rate
    assert {(e.method, e.cycles) for e in check.experiments} == {("oel", 1)}
    # the check again at the budget its cost rule chose: the same candidates and rule, cycle 0
    # taken from the first check's folder, its own folder apart from every other
    again = load_plan(conf / "budgets-30x16.yml")
    assert again.experiments == check.experiments and again.rule == check.rule
    assert again.params["train.schedule.trajectories_per_update"] == 16
    assert again.cycle_0_from == check.params["data_tag"]
    assert {k: v for k, v in again.params.items() if k.startswith("evaluate.")} == {
        k: v for k, v in check.params.items() if k.startswith("evaluate.")
    }
    assert data_folder(again, "study-alfworld", ROOT) == ("alfworld", "-study-dev-30x16")
    cycles: dict[str, int] = {}
    for experiment in grid.experiments:
        cycles[experiment.method] = max(cycles.get(experiment.method, 0), experiment.cycles)
    assert cycles == {
        "oel": 5,
        "oel_resail": 5,
        "sdpo": 3,
        "sdpo_resail": 3,
    }
    assert all(e.params.get("train.probe.enabled") for e in grid.experiments if e.tier == 1)
    loader = OmegaConfigLoader(
        str(ROOT / "conf"), **{**CONFIG_LOADER_ARGS, "default_run_env": "study-alfworld"}
    )
    train = loader["parameters"]["train"]
    assert (train["resail"]["rho"], train["resail"]["lambda"]) == (0.05, 0.5)
    assert train["schedule"]["updates"] == 30
    # the grid runs at the check's budget and at the rate its rule chooses from the committed
    # evaluations of the candidates
    budget = again.params["train.schedule.trajectories_per_update"]
    assert train["schedule"]["trajectories_per_update"] == budget
    chosen = apply_rule(
        again, ROOT / "data" / "07_model_output" / "alfworld-study-dev-30x16"
    ).chosen
    assert train["optimizer"]["lr"] == chosen == 4e-5


def test_the_alfworld_premise_plan_asks_for_a_gain_from_the_shipped_policy():
    """conf/study-alfworld/premise.yml: OEL's cycle 1 at 1e-5 to 8e-5 from the shipped initial
    policy, on every dev game in both views, in a folder of its own, chosen by the gain rule."""
    from resail_pipeline.study import data_folder

    plan = load_plan(ROOT / "conf" / "study-alfworld" / "premise.yml")
    assert data_folder(plan, "study-alfworld", ROOT) == ("alfworld", "-study-premise-dev")
    assert plan.rule.choose == "largest_gain" and plan.rule.method == "oel"
    assert [value for _, value in plan.candidates()] == [1e-5, 2e-5, 4e-5, 8e-5]
    assert {(e.method, e.cycles) for e in plan.experiments} == {("oel", 1)}
    assert plan.params["bootstrap.reference"] == "reference/alfworld-initial"
    assert plan.params["evaluate.splits"] == ["dev"] and plan.params["evaluate.num_tasks"] is None
    assert plan.params["evaluate.views"] == ["ordinary", "privileged"]
    assert plan.cycle_0_from is None  # other games (full rooms): its own cycle 0


def test_the_alfworld_grid_runs_every_tier_at_the_premises_rate():
    """conf/study-alfworld/grid.yml: tier 1 (OEL, OEL + ReSAIL, cycles 1-5, the probe on), tier 2
    (SDPO, SDPO + ReSAIL, cycles 1-5), tier 3 (selection and retention to cycle 3, rho at cycle
    1, lambda at cycle 3) on every id and ood game in both views, at the rate premise.yml's rule
    chooses; every ablation the report tabulates is an experiment of the plan."""
    from kedro.config import OmegaConfigLoader

    from resail_pipeline.settings import CONFIG_LOADER_ARGS
    from resail_pipeline.study import data_folder

    plan = load_plan(ROOT / "conf" / "study-alfworld" / "grid.yml")
    assert Path(plan.chosen_by) == ROOT / "conf" / "study-alfworld" / "premise.yml"
    assert data_folder(plan, "study-alfworld", ROOT) == ("alfworld", "-study-full")
    assert (
        plan.params["evaluate.splits"] == ["id", "ood"]
        and plan.params["evaluate.num_tasks"] is None
    )
    assert plan.params["evaluate.views"] == ["ordinary", "privileged"]
    assert plan.params["evaluate.decoding_seeds"] == [0, 1]
    assert "train.optimizer.lr" not in plan.params  # the premise's rule sets it
    last = {e.name: (e.method, e.cycles, e.tier) for e in plan.experiments}
    assert {n: v for n, v in last.items() if v[2] < 3} == {
        "oel": ("oel", 5, 1),
        "oel_resail": ("oel_resail", 5, 1),
        "sdpo": ("sdpo", 5, 2),
        "sdpo_resail": ("sdpo_resail", 5, 2),
    }
    assert all(e.params == {"train.probe.enabled": True} for e in plan.experiments if e.tier == 1)
    ablations = {n: c for n, (_, c, tier) in last.items() if tier == 3}
    assert sum(ablations.values()) == 24  # cell-cycles of tier 3
    assert {n for n, c in ablations.items() if c == 1} == {
        "oel_resail-rho_10",
        "oel_resail-rho_25",
        "oel_resail-rho_50",
    }
    report = nest(plan.params)["report"]
    named = {e for rows in report["ablations"].values() for e in rows.values()}
    named |= {e for sweep in report["sweeps"].values() for _, e in sweep["points"]}
    base = OmegaConfigLoader(str(ROOT / "conf"), **CONFIG_LOADER_ARGS)["parameters"]["report"]
    named |= {e for rows in base["ablations"].values() for e in rows.values()}
    assert named <= set(last)  # every row of tables 3(a), 3(b), of rho and lambda (figure 4) runs
    components = {n: v for n, v in last.items() if v[2] == 4}
    assert components == {  # the paper's table 2: each component alone, cycles 1-3
        f"oel_resail-{part}_only": ("oel_resail", 3, 4) for part in ("sgs", "tlb", "pr")
    }
    env = OmegaConfigLoader(str(ROOT / "conf"), **CONFIG_LOADER_ARGS, env="study-alfworld")
    paper = env["parameters"]["report"]["paper"]
    alfworld = {e for t, rows in paper.items() if t != "1" for e in rows.values()}
    assert alfworld - set(last) == {"react"}  # every experiment of the ALFWorld tables runs
    assert set(paper["2"]) == set(PAPER_TABLES["2"][1])  # every row of table 2 runs


def test_an_experiment_becomes_nested_run_params():
    experiment = Experiment(
        method="oel_resail", cycles=3, name="x-1", params={"train.resail.retention": "none"}
    )
    shared = {"data_tag": "-dev", "evaluate.splits": ["dev", "test"], "train.optimizer.lr": 2e-4}
    assert experiment.run_params(shared) == {
        "data_tag": "-dev",
        "evaluate": {"splits": ["dev", "test"]},  # a list with a comma: a file carries it
        "train": {"optimizer": {"lr": 2e-4}, "resail": {"retention": "none"}},
        "run": {"method": "oel_resail", "experiment": "x-1"},
    }
    with pytest.raises(ValueError, match="sets a key below a value"):
        experiment.run_params({"train": 1, "train.optimizer.lr": 1e-5})


def test_nesting_never_writes_into_the_callers_nested_values():
    """A plan's nested ``train`` followed by a dotted key below it (a training seed's) once wrote
    that key into the plan itself, which then had two training seeds."""
    plan = {"train": {"optimizer": {"lr": 1e-5}}, "evaluate.splits": ["dev"]}
    nested = nest({**plan, "train.schedule.seed": 1})
    assert nested["train"] == {"optimizer": {"lr": 1e-5}, "schedule": {"seed": 1}}
    nested["evaluate"]["splits"].append("test")
    assert plan == {"train": {"optimizer": {"lr": 1e-5}}, "evaluate.splits": ["dev"]}


def test_nested_overrides_of_a_plan_and_an_experiment_merge_leaf_by_leaf():
    experiment = Experiment(
        method="oel", cycles=1, params={"train": {"probe": {"enabled": True}, "epochs": 2}}
    )
    shared = {"train": {"optimizer": {"lr": 1e-5}, "epochs": 1}, "evaluate.splits": ["dev"]}
    assert experiment.run_params(shared) == {
        "train": {"optimizer": {"lr": 1e-5}, "probe": {"enabled": True}, "epochs": 2},
        "evaluate": {"splits": ["dev"]},
        "run": {"method": "oel", "experiment": "oel"},
    }


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("experiments: []", "no experiments"),
        (
            "experiments: [{method: react, cycles: 3}]",
            r"experiments\[0\]\.method: .*react is cycle 0",
        ),
        ("experiments: [{method: oel, cycles: 0}]", r"experiments\[0\]\.cycles"),
        ("experiments: [{method: oel, cycles: 1, name: ../x}]", r"experiments\[0\]\.name"),
        ("experiments: [{method: oel, cycles: 1, seeds: 3}]", r"unknown key\(s\) \['seeds'\]"),
        (
            "experiments: [{method: oel, cycles: 1, params: {run.seed: 1}}]",
            r"params: 'run.seed'",
        ),
        (
            "experiments: [{method: oel, cycles: 1, name: a}, {method: rft, cycles: 1, name: a}]",
            "listed with two methods",
        ),
        (  # a name listed again continues its run: with the same params, to more cycles
            "experiments: [{method: oel, cycles: 1}, "
            "{method: oel, cycles: 2, params: {train.optimizer.lr: 1.0e-5}}]",
            "'oel' is listed with two sets of params",
        ),
        (
            "experiments: [{method: oel, cycles: 3}, {method: oel, cycles: 2}]",
            r"'oel' is listed again with fewer cycles \(2 after 3\)",
        ),
        ("experiments: [{method: oel, cycles: 1, name: shared}]", "'shared' is cycle 0's folder"),
        (  # what pairs the cells is the plan's: its data folder and its evaluation
            "experiments: [{method: oel, cycles: 1, params: {evaluate: {decoding_seeds: [3]}}}]",
            r"params\.evaluate\.decoding_seeds: the same for every experiment of a plan",
        ),
        ("experiment: []", r"unknown key\(s\) \['experiment'\]"),
        ("experiments: [{method: oel, cycles: 1, tier: 0}]", r"experiments\[0\]\.tier"),
        (
            "cycle_0_from: [-dev]\nexperiments: [{method: oel, cycles: 1}]",
            "cycle_0_from: a data tag",
        ),
        (
            "cycle_0_from: -dev\nparams: {data_tag: -dev}\nexperiments: [{method: oel, cycles: 1}]",
            "cycle_0_from: '-dev' is the plan's own data_tag",
        ),
    ],
)
def test_a_bad_plan_fails_before_anything_runs(tmp_path, text, message):
    path = tmp_path / "study.yml"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        load_plan(path)


def test_a_tier_runs_the_experiments_up_to_it_then_the_report(tmp_path, monkeypatch):
    import resail_pipeline.study as study

    calls = []

    def fake_kedro(args, project, params=None, cycles=None, heartbeat=None, ended=None):
        """A fake of the Kedro call: records what would run."""
        calls.append((args[args.index("--pipelines") + 1], (params or {}).get("run")))
        return 0

    monkeypatch.setattr(study.runner, "_kedro", fake_kedro)
    (tmp_path / "conf").symlink_to(ROOT / "conf")
    plan = load_plan(ROOT / "conf" / "base" / "study.yml")
    study.run_study(plan, "study", tmp_path, log=tmp_path / "times.csv", tier=1)
    # tier 1 cycle by cycle, the parent and its ReSAIL version in turn, to cycle 5
    pair = [
        ("cycle", {"method": "oel", "experiment": "oel"}),
        ("cycle", {"method": "oel_resail", "experiment": "oel_resail"}),
    ]
    assert calls == pair * 5 + [("report", None)]
    assert [e.cycles for e in plan.experiments if e.tier == 1] == [1, 1, 2, 2, 3, 3, 4, 4, 5, 5]
    calls.clear()
    study.run_study(plan, "study", tmp_path, log=tmp_path / "times.csv", tier=2)
    runs = [run["experiment"] for _, run in calls[:-1]]
    assert runs == ["oel", "oel_resail"] * 5 + ["sdpo", "sdpo_resail"] * 3
    assert [e.cycles for e in plan.experiments if e.tier == 2] == [1, 1, 2, 2, 3, 3]


def test_cycle_0_alone_runs_to_the_initial_policys_evaluation(tmp_path, monkeypatch):
    """``--cycle-0``: one Kedro run up to cycle 0's evaluation, with the plan's settings as its
    first experiment has them, and nothing else (no experiment, no report)."""
    import resail_pipeline.study as study

    calls = []

    def fake_kedro(args, project, params=None, cycles=None, heartbeat=None, ended=None):
        """A fake of the Kedro call: records what would run."""
        calls.append((list(args), params, cycles))
        return 0

    monkeypatch.setattr(study.runner, "_kedro", fake_kedro)
    (tmp_path / "conf").symlink_to(ROOT / "conf")
    plan = load_plan(ROOT / "conf" / "study-alfworld" / "premise.yml")
    study.run_cycle_0(plan, "study-alfworld", tmp_path)
    [(args, params, cycles)] = calls
    assert args[-2:] == ["--to-nodes", "cycle_0.evaluate_node"] and "--only-missing-outputs" in args
    assert params == plan.experiments[0].run_params(plan.params) and cycles == 1
    assert params["data_tag"] == "-study-premise-dev"
    monkeypatch.setattr(study.runner, "_kedro", lambda *a, **k: 1)
    with pytest.raises(RuntimeError, match="cycle 0 failed"):
        study.run_cycle_0(plan, "study-alfworld", tmp_path)


@pytest.mark.slow
def test_the_smoke_study_runs_every_method_resumes_and_reports(tmp_path):
    """The whole plan at the smoke budgets in a scratch project; run twice, the second run
    redoes nothing; every method and ablation is evaluated and the report is written."""
    project = tmp_path / "project"
    project.mkdir()
    for name in ("pyproject.toml", "conf", "reference"):
        (project / name).symlink_to(ROOT / name)
    (project / "src").mkdir()
    (project / "src" / "resail_pipeline").symlink_to(ROOT / "src" / "resail_pipeline")
    env = {**os.environ, "KEDRO_DISABLE_TELEMETRY": "true", "PYTHONHASHSEED": "0"}
    command = [sys.executable, "-m", "resail_pipeline.study", "--env", "smoke"]
    first = subprocess.run(command, cwd=project, env=env, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr[-4000:]

    outputs = project / "data" / "07_model_output" / "textcraft-smoke"
    plan = load_plan(ROOT / "conf" / "base" / "study.yml")
    for experiment in plan.experiments:
        for cycle in range(1, experiment.cycles + 1):
            path = outputs / experiment.name / f"cycle_{cycle}" / "eval_summary.parquet"
            assert sorted(pd.read_parquet(path)["view"]) == ["ordinary", "privileged"], path
    # the shared cycle-1 corpus: every method's first cycle trained on the same files (the sha256
    # its train manifest recorded), later cycles on its own
    models = project / "data" / "06_models" / "textcraft-smoke"
    inputs = {
        (e.name, cycle): json.loads(
            (models / e.name / f"cycle_{cycle}" / "policy" / "resail_manifest.json").read_text()
        )["inputs"]
        for e in plan.experiments
        for cycle in (1, 2)
    }
    first_cycle = {(i["steps"], i["summaries"]) for (_, c), i in inputs.items() if c == 1}
    assert len(first_cycle) == 1
    for e in plan.experiments:  # cycle 2 was collected by the experiment's own cycle-1 policy
        policy = pd.read_parquet(models / e.name / "cycle_1" / "checkpoint.parquet")
        collected = pd.read_parquet(
            project
            / "data"
            / "02_intermediate"
            / "textcraft-smoke"
            / e.name
            / "cycle_2"
            / "trajectories.parquet"
        )
        assert set(collected["policy_id"]) == {policy["policy_id"].item()}
    grpo = inputs[("grpo", 2)]
    assert grpo["reference"] == inputs[("oel", 1)]["policy"]  # the initial policy, at every cycle

    reporting = project / "data" / "08_reporting" / "textcraft-smoke"
    table = (reporting / "main_results.md").read_text()
    for label in ("ReAct", "RFT", "GRPO", "EPD", "SDPO", "OEL", "+ ReSAIL"):
        assert f"| {label} |" in table
    assert "OEL + ReSAIL - OEL" in (reporting / "paired_differences.md").read_text()
    ablations = (reporting / "ablations.md").read_text()
    assert "| None |" in ablations and "--" not in ablations.split("| None |")[1].split("\n")[0]
    for figure in ("fig1a_success", "fig3_dual_view"):
        assert (reporting / f"{figure}.png").stat().st_size > 10_000

    times = pd.read_csv(project / "data" / "08_reporting" / "study-smoke.csv")
    assert len(times) == len(plan.experiments) and (times["exit_code"] == 0).all()

    second = subprocess.run(command, cwd=project, env=env, capture_output=True, text=True)
    assert second.returncode == 0, second.stderr[-4000:]
    assert "train_node finished" not in second.stdout + second.stderr  # nothing redone
    assert len(pd.read_csv(project / "data" / "08_reporting" / "study-smoke.csv")) == len(times)

    # one cell again with a decoding seed the grid did not use: evaluated, not trained
    rerun = [*command, "--rerun", "oel_resail", "--cycle", "2", "--seeds", "7"]
    third = subprocess.run(rerun, cwd=project, env=env, capture_output=True, text=True)
    assert third.returncode == 0, third.stderr[-4000:]
    assert "train_node finished" not in third.stdout + third.stderr
    again = project / "data" / "07_model_output" / "textcraft-smoke-seeds7"
    for folder in ("shared/cycle_0", "oel/cycle_2", "oel_resail/cycle_2"):
        assert set(pd.read_parquet(again / folder / "eval_results.parquet")["decoding_seed"]) == {7}
    compared = (
        project / "data" / "08_reporting" / "textcraft-smoke-seeds7" / "rerun-oel_resail-cycle_2.md"
    ).read_text()
    assert "| OEL + ReSAIL - OEL |" in compared and "rerun: seeds 7 (pp)" in compared

    # one cell trained again with another training seed: its own corpora from the grid's cycle 0
    retrain = [*command, "--rerun", "oel_resail", "--cycle", "1", "--training-seed", "1"]
    fourth = subprocess.run(retrain, cwd=project, env=env, capture_output=True, text=True)
    assert fourth.returncode == 0, fourth.stderr[-4000:]
    seeded = project / "data" / "02_intermediate" / "textcraft-smoke-training-seed1"
    grid = project / "data" / "02_intermediate" / "textcraft-smoke"
    corpus = "shared/cycle_1/trajectories.parquet"  # cycle 1's corpus, shared by all
    tasks = [pd.read_parquet(folder / corpus)["task_id"].tolist() for folder in (seeded, grid)]
    assert tasks[0] != tasks[1]  # the seed draws other tasks
    for folder in ("shared/cycle_0", "oel/cycle_1", "oel_resail/cycle_1"):
        assert (seeded.parent.parent / "07_model_output" / seeded.name / folder).is_dir()
    seeds = pd.read_csv(reporting / "training-seeds.csv")
    lead = seeds[(seeds["Comparison"] == "OEL + ReSAIL - OEL") & (seeds["Cycle"] == 1)]
    assert len(lead) == 2 and (lead["Training seeds"] == "0, 1").all()  # both views
    times = project / "data" / "08_reporting" / "study-smoke-training-seed1.csv"
    assert pd.read_csv(times)["experiment"].tolist() == ["oel", "oel_resail"]


def test_an_evaluated_experiment_is_passed_over_without_a_time_row(tmp_path, monkeypatch):
    import resail_pipeline.study as study

    calls = []

    def fake_kedro(args, project, params=None, cycles=None, heartbeat=None, ended=None):
        """A fake of the Kedro call: records the experiments it would run."""
        calls.append((params or {}).get("run", {}).get("experiment"))
        return 0

    monkeypatch.setattr(study.runner, "_kedro", fake_kedro)
    (tmp_path / "conf").symlink_to(ROOT / "conf")
    plan = load_plan(ROOT / "conf" / "base" / "study.yml")
    cycle = tmp_path / "data" / "07_model_output" / "textcraft-study" / "oel" / "cycle_1"
    cycle.mkdir(parents=True)
    for name in study.EVALUATION_FILES[:-1]:  # one file short: not finished
        (cycle / name).touch()
    log = tmp_path / "times.csv"
    study.run_study(plan, "study", tmp_path, log=log, tier=1)
    assert calls[:2] == ["oel", "oel_resail"]
    (cycle / study.EVALUATION_FILES[-1]).touch()
    calls.clear()
    study.run_study(plan, "study", tmp_path, log=log, tier=1)
    assert calls[:2] == ["oel_resail", "oel"]  # oel's first entry passed over, its second run
    rows = pd.read_csv(log)["experiment"].tolist()
    assert rows.count("oel") == 5 + 4 and rows.count("oel_resail") == 5 + 5


def _conf(project: Path, globals_: dict[str, str]) -> None:
    """``project/conf``: each layer's ``globals.yml`` as given, and the repository's base
    parameters (the study resolves its data folder from them, as ``kedro run`` does)."""
    for layer, text in globals_.items():
        (project / "conf" / layer).mkdir(parents=True)
        (project / "conf" / layer / "globals.yml").write_text(text)
    for path in sorted((ROOT / "conf" / "base").glob("parameters*.yml")):
        (project / "conf" / "base" / path.name).symlink_to(path)


#: the evaluation settings the cycle 0 of :func:`_cycle_0_project` was played with
_PLAYED = {
    "evaluate.splits": ["dev"],
    "evaluate.views": ["ordinary"],
    "evaluate.decoding_seeds": [0, 1],
}


def _taking_plan(params: dict | None = None) -> str:
    """A plan of one OEL experiment taking its cycle 0 from ``-a`` into ``-b``, with ``params``
    (dotted or nested) in place of the settings cycle 0 was played with that they name."""
    params = params or {}
    kept = {key: value for key, value in _PLAYED.items() if key not in flatten(params)}
    plan = {
        "cycle_0_from": "-a",
        "params": {"data_tag": "-b", **kept, **params},
        "experiments": [{"method": "oel", "cycles": 1}],
    }
    return json.dumps(plan)  # JSON is YAML


def _cycle_0_project(tmp_path: Path, plan_text: str) -> tuple[Path, Path]:
    """A project whose data folder ``textcraft-a`` has an evaluated cycle 0 (dev split, ordinary
    view, decoding seeds 0-1) in every layer, and a plan taking it into ``textcraft-b``."""
    project = tmp_path / "project"
    _conf(project, {"base": "env: textcraft\nmethod: oel_resail\ndata_tag: ''\n"})
    data = project / "data"
    for layer in ("02_intermediate", "03_primary", "04_feature", "06_models"):
        (data / layer / "textcraft-a" / "shared" / "cycle_0").mkdir(parents=True)
        (data / layer / "textcraft-a" / "shared" / "cycle_0" / "part.parquet").write_text(layer)
    _eval_results(data / "07_model_output" / "textcraft-a" / "shared" / "cycle_0", [[True]] * 2, 0)
    (project / "plan.yml").write_text(plan_text)
    return project, data


def test_a_plan_takes_cycle_0_from_another_folder_once_before_its_runs(tmp_path, monkeypatch):
    import resail_pipeline.study as study

    project, data = _cycle_0_project(tmp_path, _taking_plan({"evaluate.decoding_seeds": [1, 0]}))
    seen = []

    def fake_kedro(args, project, params=None, cycles=None, heartbeat=None, ended=None):
        """A fake of the Kedro call: records which of cycle 0 the run would find in its folder."""
        cycle_0 = project / "data" / "07_model_output" / "textcraft-b" / "shared" / "cycle_0"
        seen.append(sorted(p.name for p in cycle_0.iterdir()) if cycle_0.is_dir() else [])
        return 0

    monkeypatch.setattr(study.runner, "_kedro", fake_kedro)
    plan = load_plan(project / "plan.yml")
    study.run_study(plan, "base", project, log=tmp_path / "times.csv")
    assert seen[0] == ["eval_results.parquet", "eval_steps.parquet", "eval_summary.parquet"]
    for layer in ("02_intermediate", "03_primary", "04_feature", "06_models"):
        copied = data / layer / "textcraft-b" / "shared" / "cycle_0" / "part.parquet"
        assert copied.read_text() == layer
    # a folder with any of cycle 0 keeps its own: nothing is copied over it
    own = data / "03_primary" / "textcraft-b" / "shared" / "cycle_0" / "part.parquet"
    own.write_text("its own")
    (data / "06_models" / "textcraft-b" / "shared" / "cycle_0" / "part.parquet").unlink()
    assert study.take_cycle_0(plan, "base", project) is False
    assert own.read_text() == "its own"
    assert not (data / "06_models" / "textcraft-b" / "shared" / "cycle_0" / "part.parquet").exists()


def test_a_copy_of_cycle_0_cut_short_is_completed(tmp_path):
    from resail_pipeline.study import take_cycle_0

    project, data = _cycle_0_project(tmp_path, _taking_plan())
    plan = load_plan(project / "plan.yml")
    early = data / "03_primary" / "textcraft-b" / "shared" / "cycle_0" / "part.parquet"
    early.parent.mkdir(parents=True)
    early.write_text("copied before the cut")  # the copy was killed after this layer
    assert take_cycle_0(plan, "base", project) is True
    assert early.read_text() == "copied before the cut"  # kept, not copied over
    for layer in ("02_intermediate", "04_feature", "06_models"):
        copied = data / layer / "textcraft-b" / "shared" / "cycle_0" / "part.parquet"
        assert copied.read_text() == layer
    assert (data / "07_model_output" / "textcraft-b" / "shared" / "cycle_0").is_dir()
    assert take_cycle_0(plan, "base", project) is False  # complete: nothing more


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (
            {"evaluate.decoding_seeds": [0, 1, 2]},
            r"decoding_seed \[0, 1\]; the plan's runs play evaluate\.decoding_seeds \[0, 1, 2\]",
        ),
        (
            {"evaluate": {"views": ["ordinary", "privileged"]}},  # nested as dotted
            r"played with view \['ordinary'\]",
        ),
        ({"evaluate.splits": ["test"]}, r"played with split \['dev'\]"),
        ({"evaluate.num_tasks": 2}, r"played on \{'dev': 1\} tasks per split"),
    ],
)
def test_cycle_0_played_with_other_evaluation_settings_is_refused(tmp_path, params, message):
    from resail_pipeline.study import take_cycle_0

    project, data = _cycle_0_project(tmp_path, _taking_plan(params))
    with pytest.raises(ValueError, match=message):
        take_cycle_0(load_plan(project / "plan.yml"), "base", project)
    assert not (data / "07_model_output" / "textcraft-b").exists()  # nothing copied


def test_cycle_0_is_checked_against_the_environments_settings_the_plan_leaves(tmp_path):
    """A plan that sets no evaluation settings plays the environment's (conf/base: views
    ordinary and privileged, decoding seeds 0-2): a cycle 0 played otherwise is not taken."""
    from resail_pipeline.study import take_cycle_0

    plan_text = "cycle_0_from: -a\nparams: {data_tag: -b}\nexperiments: [{method: oel, cycles: 1}]"
    project, data = _cycle_0_project(tmp_path, plan_text)
    with pytest.raises(
        ValueError, match=r"view \['ordinary'\]; the plan's runs play evaluate\.views"
    ):
        take_cycle_0(load_plan(project / "plan.yml"), "base", project)
    assert not (data / "07_model_output" / "textcraft-b").exists()


def test_cycle_0_from_a_folder_without_it_is_refused(tmp_path):
    from resail_pipeline.study import take_cycle_0

    plan_text = "cycle_0_from: -c\nparams: {data_tag: -b}\nexperiments: [{method: oel, cycles: 1}]"
    project, _ = _cycle_0_project(tmp_path, plan_text)
    with pytest.raises(ValueError, match=r"textcraft-c/shared/cycle_0: no evaluation there"):
        take_cycle_0(load_plan(project / "plan.yml"), "base", project)


def test_a_running_experiments_time_row_is_rewritten_in_place(tmp_path):
    from resail_pipeline.study.runner import _Segment, _write_row

    log = tmp_path / "times.csv"
    _write_row(log, {"experiment": "other", "started": "t0", "seconds": 5, "exit_code": 0})
    segment = _Segment(log, Experiment(method="oel", cycles=2))
    segment.record()  # a heartbeat: the row exists while the experiment runs
    segment.record()
    rows = pd.read_csv(log, keep_default_na=False)
    assert rows["experiment"].tolist() == ["other", "oel"]
    assert rows["exit_code"].astype(str).tolist() == ["0", ""]  # a study killed now keeps this
    segment.record(0)
    rows = pd.read_csv(log, keep_default_na=False)
    assert rows["exit_code"].astype(str).tolist() == ["0", "0"] and rows["finished"].iloc[1]
    again = _Segment(log, Experiment(method="oel", cycles=2))  # a resumed run: a row of its own
    again.record(0)
    assert len(pd.read_csv(log)) == 3


def test_the_heartbeat_runs_while_the_command_runs(tmp_path):
    """The command waits for a file that only the third heartbeat writes: it can end only if the
    heartbeat runs while it runs (no timing is asserted; a loaded machine only adds beats)."""
    from resail_pipeline.study.runner import _run

    flag = tmp_path / "third-beat"
    beats = []

    def heartbeat(pid: int) -> None:
        beats.append(pid)
        if len(beats) == 3:
            flag.touch()

    wait = f"import os, time\nwhile not os.path.exists({str(flag)!r}): time.sleep(0.01)"
    code = _run([sys.executable, "-c", wait], tmp_path, dict(os.environ), heartbeat, every=0.05)
    assert code == 0 and len(beats) >= 3
    assert _run([sys.executable, "-c", "raise SystemExit(3)"], tmp_path, dict(os.environ)) == 3


def test_a_failing_heartbeat_costs_the_run_nothing_and_an_interrupt_stops_it(
    tmp_path, caplog, process_alive
):
    """A time row that cannot be written (a full disk) is logged and the command goes on; an
    interrupt of the runner in this process (a notebook's) stops the command before it returns."""
    from resail_pipeline.study.runner import _run

    flag, beats = tmp_path / "third-beat", []

    def full_disk(pid: int) -> None:
        beats.append(pid)
        if len(beats) == 3:
            flag.touch()
        raise OSError(28, "No space left on device")

    wait = f"import os, time\nwhile not os.path.exists({str(flag)!r}): time.sleep(0.01)"
    with caplog.at_level(logging.WARNING, logger="resail_pipeline.study.runner"):
        code = _run([sys.executable, "-c", wait], tmp_path, dict(os.environ), full_disk, every=0.05)
    assert code == 0 and len(beats) >= 3
    assert "the time row was not written ([Errno 28] No space left on device)" in caplog.text

    children = []

    def interrupted(pid: int) -> None:
        children.append(pid)
        raise KeyboardInterrupt

    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    with pytest.raises(KeyboardInterrupt):
        _run(sleep, tmp_path, dict(os.environ), interrupted, every=0.05)
    assert not process_alive(children[0])


def test_two_writers_of_one_time_log_take_turns(tmp_path, while_lock_held):
    """Two runs sharing a time log (two cells retrained with one training seed) rewrite it one at
    a time: a writer waits while the log's lock is held, and both rows are kept."""
    from resail_pipeline.study.runner import _write_row

    log = tmp_path / "times.csv"
    _write_row(log, {"experiment": "oel", "started": "t0", "seconds": 1})
    events = while_lock_held(  # the other writer, mid-rewrite
        tmp_path / ".times.csv.lock",
        lambda: (
            _write_row(log, {"experiment": "oel_resail", "started": "t1", "seconds": 2}) or "wrote"
        ),
    )
    assert events == ["released", "wrote"]
    assert pd.read_csv(log)["experiment"].tolist() == ["oel", "oel_resail"]


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads /proc (Linux)")
def test_a_running_experiments_row_counts_the_memory_of_its_process_tree(tmp_path):
    """A grandchild (as torchrun's workers are) writes 256 MiB and holds them until a heartbeat
    has read them from ``/proc`` (a minute at most); the row written then says so. (The finished
    children's figure cannot stand in: a child that forks from this process and execs keeps its
    parent's high-water mark, whatever it uses itself.)"""
    from resail_pipeline.study.runner import _run, _Segment

    log, flag = tmp_path / "times.csv", tmp_path / "read"
    hold = (
        "import os, time\nblock, end = b'x' * 256 * 2**20, time.time() + 60\n"
        f"while not os.path.exists({str(flag)!r}) and time.time() < end: time.sleep(0.01)"
    )
    child = f"import subprocess, sys\nsubprocess.run([sys.executable, '-c', {hold!r}], check=True)"
    segment = _Segment(log, Experiment(method="oel", cycles=1))
    rows = []

    def heartbeat(pid: int) -> None:
        segment.beat(pid)
        rows.append(float(pd.read_csv(log)["peak_rss_gib"].iloc[0]))
        if segment.peak >= 0.25:
            flag.touch()

    code = _run([sys.executable, "-c", child], tmp_path, dict(os.environ), heartbeat, every=0.05)
    assert code == 0 and segment.peak >= 0.25 and rows[-1] == round(segment.peak, 2)
    assert pd.read_csv(log)["exit_code"].isna().all()  # rows written while it ran


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="reads /proc (Linux)")
def test_each_experiments_row_counts_its_own_memory_not_an_earlier_ones(tmp_path):
    """Two experiments in one invocation: the first's command holds this process's resident set
    plus 256 MiB and ends between two beats, the second's holds almost nothing. The first row
    counts its peak once it has ended; the second row does not inherit it (the peak of every
    child so far would)."""
    from resail_pipeline.study.runner import _run, _Segment

    here = next(  # a forked child starts from this process's resident set
        int(line.split()[1]) * 2**10
        for line in Path("/proc/self/status").read_text().splitlines()
        if line.startswith("VmRSS:")
    )
    big = f"block = b'x' * ({here} + 256 * 2**20)"
    log = tmp_path / "times.csv"
    first = _Segment(log, Experiment(method="oel", cycles=1))
    code = _run([sys.executable, "-c", big], tmp_path, dict(os.environ), ended=first.ended)
    first.record(code)
    second = _Segment(log, Experiment(method="oel_resail", cycles=1))
    code = _run([sys.executable, "-c", "pass"], tmp_path, dict(os.environ), ended=second.ended)
    second.record(code)
    peaks = pd.read_csv(log)["peak_rss_gib"].tolist()
    assert peaks[0] >= (here + 256 * 2**20) / 2**30 - 0.01
    assert peaks[1] < peaks[0] - 0.2


def _eval_results(
    folder: Path,
    successes: list[list[bool]],
    cycle: int,
    method: str = "oel",
    privileged: list[list[bool]] | None = None,
) -> None:
    """An eval_results file: ``successes[seed][task]`` on the dev split, ordinary view (and
    ``privileged[seed][task]`` in the privileged view)."""
    views = {"ordinary": successes} | ({"privileged": privileged} if privileged else {})
    rows = [
        {
            "policy_id": f"p@{cycle}",
            "cycle": cycle,
            "method": method,
            "env": "textcraft",
            "split": "dev",
            "view": view,
            "decoding_seed": seed,
            "task_id": task,
            "success": success,
            "num_steps": 5,
        }
        for view, per_seed in views.items()
        for seed, row in enumerate(per_seed)
        for task, success in enumerate(row)
    ]
    folder.mkdir(parents=True, exist_ok=True)  # a candidate's results may be written again
    pd.DataFrame(rows).to_parquet(folder / "eval_results.parquet", index=False)
    for other in ("eval_summary.parquet", "eval_steps.parquet"):  # fakes: evaluated() finds them
        (folder / other).write_bytes(b"")


def _rule_plan(tmp_path: Path, choose: str):
    """A plan of three OEL candidates, lr 1e-5 (small), 2e-5 (middle) and 4e-5 (large), chosen
    among by the rule ``choose``."""
    plan_file = tmp_path / "plan.yml"
    plan_file.write_text(
        f"rule: {{choose: {choose}, parameter: train.optimizer.lr, method: oel}}\n"
        "experiments:\n"
        + "".join(
            f"  - {{name: {name}, method: oel, cycles: 1, params: {{train.optimizer.lr: {lr}}}}}\n"
            for name, lr in (("small", 1e-5), ("middle", 2e-5), ("large", 4e-5))
        )
    )
    return load_plan(plan_file)


def test_the_rule_chooses_the_largest_harmless_rate_and_reports_every_candidate(tmp_path):
    from resail_pipeline.study import write_rule

    plan = _rule_plan(tmp_path, "largest_harmless")
    tasks = 40
    half = [task % 2 == 0 for task in range(tasks)]  # the initial policy solves half the tasks
    outputs = tmp_path / "outputs"
    _eval_results(outputs / "shared" / "cycle_0", [half, half], cycle=0)
    _eval_results(outputs / "small" / "cycle_1", [half, half], cycle=1)  # no change
    better = [True] * tasks
    _eval_results(outputs / "middle" / "cycle_1", [better, half], cycle=1)  # +25 points
    _eval_results(outputs / "large" / "cycle_1", [[False] * tasks] * 2, cycle=1)  # -50 points

    outcome = apply_rule(plan, outputs)
    table, chosen = outcome.table, outcome.chosen
    assert chosen == 2e-5 and outcome.met  # not the largest candidate: it harms
    by_name = table.set_index("experiment")
    assert by_name.loc["small", "difference"] == 0 and by_name.loc["small", "harmless"]
    assert by_name.loc["middle", "difference"] == 25 and by_name.loc["middle", "low"] > 0
    assert by_name.loc["large", "difference"] == -50 and not by_name.loc["large", "harmless"]
    assert by_name.loc["large", "high"] < 0 and (table["tasks"] == tasks).all()

    text_chosen = write_rule(plan, outputs, tmp_path / "report").chosen
    written = (tmp_path / "report" / "rule.md").read_text()
    assert text_chosen == 2e-5 and "chosen: train.optimizer.lr = 2e-05" in written
    assert all(name in written for name in ("small", "middle", "large"))
    assert "| small | 1e-05 |" in written  # each candidate's rate as written, not rounded to 0.0

    # every candidate harms: none is chosen, and the smallest is reported as harmful
    for name in ("small", "middle"):
        _eval_results(outputs / name / "cycle_1", [[False] * tasks] * 2, cycle=1)
    assert apply_rule(plan, outputs).chosen is None and not apply_rule(plan, outputs).met
    assert write_rule(plan, outputs, tmp_path / "report").chosen is None
    assert "the smallest, 1e-05, is harmful" in (tmp_path / "report" / "rule.md").read_text()


def test_a_rule_over_nested_params_finds_every_candidate():
    plan = StudyPlan(
        rule=Rule(parameter="train.optimizer.lr", method="oel"),
        experiments=[
            Experiment(name="a", method="oel", cycles=1, params={"train.optimizer.lr": 1e-5}),
            Experiment(
                name="b", method="oel", cycles=1, params={"train": {"optimizer": {"lr": 2e-5}}}
            ),
        ],
    )
    assert [(e.name, value) for e, value in plan.candidates()] == [("a", 1e-5), ("b", 2e-5)]


def test_a_tier_without_the_rules_candidates_leaves_the_rule_for_later(tmp_path, monkeypatch):
    """The rule is applied once cycle 0 and every candidate are evaluated; a tier that runs
    none of them ends with the report, and no rule.md, instead of failing on what is missing."""
    import resail_pipeline.study as study

    monkeypatch.setattr(study.runner, "_kedro", lambda *a, **k: 0)
    project = tmp_path / "project"
    _conf(project, {"base": "env: textcraft\nmethod: oel\ndata_tag: ''\n"})
    (project / "plan.yml").write_text(
        "rule: {parameter: train.optimizer.lr, method: oel}\nexperiments:\n"
        "  - {name: first, method: rft, cycles: 1}\n"
        "  - {name: small, method: oel, cycles: 1, tier: 2, params: {train.optimizer.lr: 1.0e-5}}\n"
        "  - {name: large, method: oel, cycles: 1, tier: 2, params: {train.optimizer.lr: 4.0e-5}}\n"
    )
    plan = load_plan(project / "plan.yml")
    outputs = project / "data" / "07_model_output" / "textcraft"
    rule_md = project / "data" / "08_reporting" / "textcraft" / "rule.md"
    half = [t % 2 == 0 for t in range(40)]
    _eval_results(outputs / "shared" / "cycle_0", [half, half], cycle=0)
    study.run_study(plan, "base", project, log=tmp_path / "times.csv", tier=1)
    assert study.unevaluated(plan, outputs) == [outputs / n / "cycle_1" for n in ("small", "large")]
    assert not rule_md.exists()
    for name in ("small", "large"):
        _eval_results(outputs / name / "cycle_1", [half, half], cycle=1)
    study.run_study(plan, "base", project, log=tmp_path / "times.csv", tier=2)
    assert "chosen: train.optimizer.lr = 4e-05" in rule_md.read_text()


def test_a_rule_over_one_task_is_refused_not_read_as_harm(tmp_path):
    """One task has no interval over tasks (nan bounds): the rule refuses it, naming the cell,
    rather than counting every candidate harmful."""
    plan = _rule_plan(tmp_path, "largest_harmless")
    outputs = tmp_path / "outputs"
    _eval_results(outputs / "shared" / "cycle_0", [[True], [False]], cycle=0)
    for name in ("small", "middle", "large"):
        _eval_results(outputs / name / "cycle_1", [[True], [True]], cycle=1)
    with pytest.raises(ValueError, match=r"^small, dev, ordinary view: one task; the rule's"):
        apply_rule(plan, outputs)


def test_the_gain_rule_chooses_the_largest_ordinary_gain_else_the_largest_harmless(tmp_path):
    from resail_pipeline.study import write_rule

    plan = _rule_plan(tmp_path, "largest_gain")
    tasks = 40
    half = [task % 2 == 0 for task in range(tasks)]
    three_quarters = [task % 4 != 1 for task in range(tasks)]
    outputs = tmp_path / "outputs"
    _eval_results(outputs / "shared" / "cycle_0", [half, half], cycle=0)
    _eval_results(outputs / "small" / "cycle_1", [three_quarters] * 2, cycle=1)  # +25 points
    _eval_results(outputs / "middle" / "cycle_1", [[True] * tasks] * 2, cycle=1)  # +50 points
    _eval_results(outputs / "large" / "cycle_1", [half, half], cycle=1)  # no change, harmless
    outcome = apply_rule(plan, outputs)
    assert outcome.chosen == 2e-5 and outcome.met  # the largest gain, not the largest rate
    assert outcome.table.set_index("experiment").loc["large", "gain"] == False  # noqa: E712

    # no candidate gains: the largest harmless one, and the aim reported unmet
    for name in ("small", "middle"):
        _eval_results(outputs / name / "cycle_1", [half, half], cycle=1)
    outcome = write_rule(plan, outputs, tmp_path / "report")
    assert outcome.chosen == 4e-5 and not outcome.met
    written = (tmp_path / "report" / "rule.md").read_text()
    assert "no candidate gains in the ordinary view (the aim is not met)" in written
    assert "train.optimizer.lr = 4e-05" in written


def test_the_rule_report_gives_cycle_0s_privileged_lead_and_whether_the_premise_holds(tmp_path):
    from resail_pipeline.study import write_rule

    plan = _rule_plan(tmp_path, "largest_gain")
    tasks = 40
    half = [task % 2 == 0 for task in range(tasks)]
    outputs = tmp_path / "outputs"
    # cycle 0 in one view: no lead, and no premise to report
    _eval_results(outputs / "shared" / "cycle_0", [half, half], cycle=0)
    for name in ("small", "middle", "large"):
        _eval_results(outputs / name / "cycle_1", [[True] * tasks] * 2, cycle=1)  # +50 points
    outcome = write_rule(plan, outputs, tmp_path / "report")
    assert outcome.lead.empty and outcome.premise is None
    assert "privileged lead" not in (tmp_path / "report" / "rule.md").read_text()

    # the privileged view solves every task: a lead of 50 points, and a first cycle gains
    _eval_results(outputs / "shared" / "cycle_0", [half, half], 0, privileged=[[True] * tasks] * 2)
    outcome = write_rule(plan, outputs, tmp_path / "report")
    assert outcome.lead["split"].tolist() == ["dev"] and outcome.lead["tasks"].tolist() == [tasks]
    assert outcome.lead["difference"].iloc[0] == 50 and outcome.lead["low"].iloc[0] > 0
    assert outcome.met and outcome.premise
    written = (tmp_path / "report" / "rule.md").read_text()
    assert "| dev | 40 | 50.0 |" in written
    assert "premise holds: the privileged view leads with an interval above zero" in written

    # the privileged view solves none: it trails, and the premise is unmet whatever cycle 1 does
    _eval_results(outputs / "shared" / "cycle_0", [half, half], 0, privileged=[[False] * tasks] * 2)
    outcome = write_rule(plan, outputs, tmp_path / "report")
    assert outcome.lead["difference"].iloc[0] == -50 and outcome.met and not outcome.premise
    assert (
        "premise unmet: the privileged view does not lead"
        in (tmp_path / "report" / "rule.md").read_text()
    )

    # the harmless rule chooses a rate that did no harm; no candidate gained: a lead alone is no
    # premise, whichever rule chose
    harmless = _rule_plan(tmp_path, "largest_harmless")
    _eval_results(outputs / "shared" / "cycle_0", [half, half], 0, privileged=[[True] * tasks] * 2)
    for name in ("small", "middle", "large"):
        _eval_results(outputs / name / "cycle_1", [half, half], 1, privileged=[[True] * tasks] * 2)
    outcome = write_rule(harmless, outputs, tmp_path / "report")
    assert outcome.met and outcome.chosen == 4e-5 and not outcome.gained
    assert outcome.lead["low"].iloc[0] > 0 and outcome.premise is False
    assert (
        "premise unmet: the privileged view leads with an interval above zero, and no first"
        in (tmp_path / "report" / "rule.md").read_text()
    )


def _cell_project(tmp_path: Path) -> tuple[Path, Path]:
    """A project with a grid's cycle 2 of OEL and OEL + ReSAIL (dev split, seeds 0-1, 40 tasks):
    the initial policy solves half the tasks, OEL one in four, OEL + ReSAIL every one."""
    project = tmp_path / "project"
    _conf(
        project,
        {"base": "env: textcraft\nmethod: oel_resail\ndata_tag: ''\n", "study": "data_tag: -g\n"},
    )
    (project / "conf" / "study" / "parameters.yml").write_text(  # as the grid's cycle 0 played
        "evaluate: {splits: [dev], views: [ordinary], decoding_seeds: [0, 1]}\n"
    )
    data = project / "data"
    tasks = 40
    grid = data / "07_model_output" / "textcraft-g"
    initial = [[t % 2 == 0 for t in range(tasks)]] * 2
    _eval_results(grid / "shared" / "cycle_0", initial, cycle=0, method="react")
    _eval_results(grid / "oel" / "cycle_2", [[t % 4 == 0 for t in range(tasks)]] * 2, cycle=2)
    solved_all = [[True] * tasks] * 2
    _eval_results(grid / "oel_resail" / "cycle_2", solved_all, cycle=2, method="oel_resail")
    for folder in ("shared/cycle_0", "oel/cycle_2", "oel_resail/cycle_2"):
        (data / "06_models" / "textcraft-g" / folder / "policy").mkdir(parents=True)
        (data / "06_models" / "textcraft-g" / folder / "checkpoint.parquet").write_bytes(b"m")
    (data / "03_primary" / "textcraft-g" / "shared" / "cycle_0").mkdir(parents=True)
    (data / "03_primary" / "textcraft-g" / "shared" / "cycle_0" / "experience.parquet").write_bytes(
        b"e"
    )
    return project, data


def test_a_cell_reruns_with_other_seeds_beside_the_grids_differences(tmp_path, monkeypatch):
    import resail_pipeline.study as study

    project, data = _cell_project(tmp_path)
    calls = []

    def fake_kedro(args, project, params=None, cycles=None, heartbeat=None, ended=None):
        """A fake of the evaluation runs: OEL + ReSAIL solves half the tasks under other seeds,
        so its lead over OEL shrinks from 75 to 25 points; the others behave as in the grid."""
        nodes = args[args.index("--nodes") + 1].split(",")
        calls.append((params["run"]["experiment"], nodes, cycles, params["data_tag"]))
        seeds = params["evaluate"]["decoding_seeds"]
        out = project / "data" / "07_model_output" / f"textcraft{params['data_tag']}"
        for node in nodes:
            cycle = int(node.split(".")[0].removeprefix("cycle_"))
            folder = (
                out / ("shared" if cycle == 0 else params["run"]["experiment"]) / f"cycle_{cycle}"
            )
            solved = {
                "shared": lambda t: t % 2 == 0,
                "oel": lambda t: t % 4 == 0,
                "oel_resail": lambda t: t % 2 == 1,
            }["shared" if cycle == 0 else params["run"]["experiment"]]
            rows = [[solved(t) for t in range(40)] for _ in seeds]
            method = params["run"]["method"] if cycle else "react"
            _eval_results(folder, rows, cycle=cycle, method=method)
            frame = pd.read_parquet(folder / "eval_results.parquet")
            frame["decoding_seed"] = frame["decoding_seed"].map(dict(enumerate(seeds)))
            frame.to_parquet(folder / "eval_results.parquet", index=False)
        return 0

    monkeypatch.setattr(study.runner, "_kedro", fake_kedro)
    plan = load_plan(ROOT / "conf" / "base" / "study.yml")
    table = study.rerun_cell(plan, "study", project, name="oel_resail", cycle=2, seeds=[5, 6])

    # the parent first (with the initial policy), then the variant, each at cycle 2, seeds 5-6
    assert calls == [
        ("oel", ["cycle_0.evaluate_node", "cycle_2.evaluate_node"], 2, "-g-seeds5-6"),
        ("oel_resail", ["cycle_2.evaluate_node"], 2, "-g-seeds5-6"),
    ]
    copied = data / "06_models" / "textcraft-g-seeds5-6"
    assert (copied / "oel_resail" / "cycle_2" / "checkpoint.parquet").read_bytes() == b"m"
    assert (copied / "shared" / "cycle_0" / "policy").is_dir()
    experience = data / "03_primary" / "textcraft-g-seeds5-6" / "shared" / "cycle_0"
    assert (experience / "experience.parquet").read_bytes() == b"e"
    rows = table.set_index("Comparison")
    lead = rows.loc["OEL + ReSAIL - OEL"]
    assert lead["grid: seeds 0, 1 (pp)"] == 75 and lead["rerun: seeds 5, 6 (pp)"] == 25
    assert rows.loc["OEL - ReAct", "rerun: seeds 5, 6 (pp)"] == -25
    reporting = data / "08_reporting" / "textcraft-g-seeds5-6"
    written = (reporting / "rerun-oel_resail-cycle_2.md").read_text()
    assert "| OEL + ReSAIL - OEL |" in written and "+75.0" in written and "+25.0" in written
    assert len(pd.read_csv(reporting / "rerun-oel_resail-cycle_2.csv")) == 3


def test_an_ablations_cell_reruns_beside_its_full_method_which_is_evaluated_once(
    tmp_path, monkeypatch
):
    import resail_pipeline.study as study

    project, data = _cell_project(tmp_path)
    grid = data / "07_model_output" / "textcraft-g"
    # the ablation solves the tasks OEL + ReSAIL solves but one in four
    _eval_results(
        grid / "oel_resail-selection_bottom" / "cycle_2",
        [[t % 4 != 0 for t in range(40)]] * 2,
        cycle=2,
        method="oel_resail",
    )
    models = data / "06_models" / "textcraft-g" / "oel_resail-selection_bottom" / "cycle_2"
    (models / "policy").mkdir(parents=True)
    calls = []

    def fake_kedro(args, project, params=None, cycles=None, heartbeat=None, ended=None):
        """A fake of the evaluation runs: each cell as in the grid, under the rerun's seeds."""
        nodes = args[args.index("--nodes") + 1].split(",")
        name = params["run"]["experiment"]
        out = project / "data" / "07_model_output" / f"textcraft{params['data_tag']}"
        for node in nodes:
            cycle = int(node.split(".")[0].removeprefix("cycle_"))
            folder = f"{'shared' if cycle == 0 else name}/cycle_{cycle}"
            if (out / folder).exists():  # --only-missing-outputs
                continue
            calls.append((name, node))
            frame = pd.read_parquet(grid / folder / "eval_results.parquet")
            frame["decoding_seed"] += 5
            (out / folder).mkdir(parents=True)
            frame.to_parquet(out / folder / "eval_results.parquet", index=False)
        return 0

    monkeypatch.setattr(study.runner, "_kedro", fake_kedro)
    plan = load_plan(ROOT / "conf" / "base" / "study.yml")
    study.rerun_cell(plan, "study", project, name="oel_resail", cycle=2, seeds=[5, 6])
    table = study.rerun_cell(
        plan, "study", project, name="oel_resail-selection_bottom", cycle=2, seeds=[5, 6]
    )

    # OEL + ReSAIL, evaluated for its own cell, is not evaluated again for the ablation's
    assert calls == [
        ("oel", "cycle_0.evaluate_node"),
        ("oel", "cycle_2.evaluate_node"),
        ("oel_resail", "cycle_2.evaluate_node"),
        ("oel_resail-selection_bottom", "cycle_2.evaluate_node"),
    ]
    rows = table.set_index("Comparison")
    against = rows.loc["oel_resail-selection_bottom - OEL + ReSAIL"]
    assert against["grid: seeds 0, 1 (pp)"] == -25 and against["rerun: seeds 5, 6 (pp)"] == -25
    reporting = data / "08_reporting" / "textcraft-g-seeds5-6"
    assert sorted(p.name for p in reporting.glob("*.md")) == [
        "rerun-oel_resail-cycle_2.md",
        "rerun-oel_resail-selection_bottom-cycle_2.md",
    ]


def test_a_cell_trains_again_with_another_training_seed_beside_the_grid(tmp_path, monkeypatch):
    """``--rerun oel_resail --cycle 2 --training-seed 1``: the parent and the variant run cycles
    1-2 with every training-seed key at 1, in a folder of their own with the grid's cycle 0, and
    their paired differences go beside the grid's with their mean and spread."""
    import resail_pipeline.study as study
    from resail_pipeline.config import flatten
    from resail_pipeline.study.__main__ import main
    from resail_pipeline.study.plan import TRAINING_SEED_KEYS

    project, data = _cell_project(tmp_path)
    calls = []

    def fake_kedro(args, project, params=None, cycles=None, heartbeat=None, ended=None):
        """A fake of the cycle runs: OEL solves one task in four at every cycle, OEL + ReSAIL
        half of them (the grid's solves all at cycle 2); the report run does nothing."""
        if "report" in args:
            calls.append(("report", params.get("data_tag")))
            return 0
        name = params["run"]["experiment"]
        flat = flatten(params)
        calls.append((name, cycles, params["data_tag"], [flat[k] for k in TRAINING_SEED_KEYS]))
        out = project / "data" / "07_model_output" / f"textcraft{params['data_tag']}"
        every = 4 if name == "oel" else 2
        for cycle in range(1, cycles + 1):
            rows = [[t % every == 0 for t in range(40)]] * 2
            _eval_results(out / name / f"cycle_{cycle}", rows, cycle, params["run"]["method"])
        return 0

    monkeypatch.setattr(study.runner, "_kedro", fake_kedro)
    plan = load_plan(ROOT / "conf" / "base" / "study.yml")
    log = tmp_path / "times.csv"
    table = study.retrain_cell(plan, "study", project, name="oel_resail", cycle=2, seed=1, log=log)

    folder = "-g-training-seed1"
    assert calls == [
        ("oel", 2, folder, [1, 1, 1, 1]),
        ("oel_resail", 2, folder, [1, 1, 1, 1]),
        ("report", folder),
    ]
    # the grid's cycle 0 copied, its cells left alone
    assert (data / "06_models" / f"textcraft{folder}" / "shared" / "cycle_0" / "policy").is_dir()
    assert not (data / "06_models" / f"textcraft{folder}" / "oel" / "cycle_2").exists()
    rows = table.set_index(["Comparison", "Cycle"])
    lead = rows.loc[("OEL + ReSAIL - OEL", 2)]
    assert (lead["Seed 0 (pp)"], lead["Seed 1 (pp)"]) == (75.0, 25.0)
    assert lead["Mean (pp)"] == 50 and lead["SD over seeds (pp)"] == pytest.approx(50 / 2**0.5)
    assert set(table["Cycle"]) == {2}  # cycle 1 is seed 1's alone: the grid has none
    written = (data / "08_reporting" / "textcraft-g" / "training-seeds.md").read_text()
    assert (
        "training seeds [0, 1]" in written and "| OEL + ReSAIL - OEL | textcraft (dev) |" in written
    )
    assert len(pd.read_csv(data / "08_reporting" / "textcraft-g" / "training-seeds.csv")) == 3
    assert [row["experiment"] for row in csv.DictReader(log.open())] == ["oel", "oel_resail"]

    # run again: everything is evaluated, nothing runs but the report
    calls.clear()
    study.retrain_cell(plan, "study", project, name="oel_resail", cycle=2, seed=1, log=log)
    assert calls == [("report", folder)]

    # the grid's own run moves a cell the seeds share (here OEL + ReSAIL's cycle 2 evaluated
    # again, solving half the tasks): the table beside it follows, written by that run too
    grid = data / "07_model_output" / "textcraft-g"
    _eval_results(
        grid / "oel_resail" / "cycle_2", [[t % 2 == 0 for t in range(40)]] * 2, 2, "oel_resail"
    )
    mine = tmp_path / "grid.yml"
    mine.write_text(
        "experiments:\n  - {method: oel, cycles: 2}\n  - {method: oel_resail, cycles: 2}\n"
    )
    calls.clear()
    main(["--env", "study", "--project", str(project), "--plan", str(mine)])
    assert calls == [("report", None)]  # the env's own folder
    written = pd.read_csv(data / "08_reporting" / "textcraft-g" / "training-seeds.csv")
    lead = written.set_index(["Comparison", "Cycle"]).loc[("OEL + ReSAIL - OEL", 2)]
    assert (lead["Seed 0 (pp)"], lead["Seed 1 (pp)"]) == (25.0, 25.0)


@pytest.mark.parametrize(
    ("name", "cycle", "seeds", "message"),
    [
        ("oel_resail", 3, [5], r"textcraft-g/oel/cycle_3: missing or not evaluated; the grid"),
        ("oel", 2, [5, 5], r"--seeds: each decoding seed once, got \[5, 5\]"),
        ("nope", 2, [5], r"--rerun: no experiment 'nope' in the plan"),
        ("oel", 0, [5], r"--cycle"),
        ("oel", 2, [], r"--seeds"),
    ],
)
def test_a_rerun_of_a_cell_the_grid_lacks_fails_before_anything_runs(
    tmp_path, monkeypatch, name, cycle, seeds, message
):
    import resail_pipeline.study as study

    project, data = _cell_project(tmp_path)
    monkeypatch.setattr(study.runner, "_kedro", lambda *a, **k: pytest.fail("nothing may run"))
    plan = load_plan(ROOT / "conf" / "base" / "study.yml")
    with pytest.raises(ValueError, match=message):
        study.rerun_cell(plan, "study", project, name=name, cycle=cycle, seeds=seeds)
    assert not (data / "06_models" / "textcraft-g-seeds5").exists()


def test_the_runners_child_dies_with_the_runner(tmp_path, process_alive):
    """A SIGKILL of the study runner leaves no kedro run behind holding the experiment's lock:
    its child (here a sleeper in the place of kedro) gets SIGTERM when the runner dies."""
    import os
    import signal
    import subprocess
    import sys
    import time

    pid_file = tmp_path / "child.pid"
    child = (
        f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(120)"
    )
    runner = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys\n"
            "from pathlib import Path\n"
            "from resail_pipeline.study.runner import _run\n"
            f"_run([sys.executable, '-c', {child!r}], Path('.'), {{}})\n",
        ]
    )
    try:
        deadline = time.monotonic() + 60
        while not pid_file.exists() or not pid_file.read_text():
            assert runner.poll() is None and time.monotonic() < deadline, "no child started"
            time.sleep(0.1)
        pid = int(pid_file.read_text())
        os.kill(runner.pid, signal.SIGKILL)
        runner.wait()
        deadline = time.monotonic() + 10
        while process_alive(pid):
            assert time.monotonic() < deadline, f"the child {pid} outlived the runner"
            time.sleep(0.1)
    finally:
        runner.kill()


_ONE = "experiments: [{method: oel, cycles: 1}]"


@pytest.mark.parametrize(
    ("text", "argv", "message"),
    [
        # a data folder outside data/ (the plan's, its source's, an experiment's)
        (f"cycle_0_from: -a\nparams: {{data_tag: /../../../out}}\n{_ONE}", [], r"params\.data_tag"),
        (f"cycle_0_from: /../../../out\n{_ONE}", [], r"cycle_0_from: must be a folder name"),
        (
            "experiments: [{method: oel, cycles: 1, params: {data_tag: ../out}}]",
            [],
            r"experiments\[0\]\.params\.data_tag: the same for every experiment of a plan",
        ),
        # a folder the runs write outside data/, dotted or nested
        (f"params: {{bootstrap.build_dir: /tmp/out}}\n{_ONE}", [], r"params\.bootstrap\.build_dir"),
        (
            f"params: {{bootstrap: {{build_dir: data/../../out}}}}\n{_ONE}",
            [],
            r"params\.bootstrap\.build_dir: must be a folder under data/",
        ),
        ("experiments: [{method: nope, cycles: 1}]", [], r"experiments\[0\]\.method: must be"),
        ("experiments: [{method: oel, cycles: 1}", [], r"plan\.yml: not a YAML"),
        ("", [], r"plan\.yml: experiments: the plan has no experiments"),
        ("- method: oel", [], r"plan\.yml: must be a mapping"),
        (f"params: [data_tag]\n{_ONE}", [], r"plan\.yml: params: must be a mapping"),
        ("experiments: {method: oel, cycles: 1}", [], r"plan\.yml: experiments: must be a list"),
        (
            "rule: {parameter: train.resail.retention, method: oel_resail}\n"
            "experiments: [{method: oel_resail, cycles: 1, params: {train.resail.retention: none}}]",
            [],
            r"plan\.yml: rule: 'oel_resail' sets train\.resail\.retention to 'none'",
        ),
        (_ONE, ["--tier", "0"], r"--tier: the plan's tiers are \[1\], got 0"),
        # what the second experiment's run would refuse, before the first runs: a rate YAML reads
        # as a string (no dot), a misspelt section
        (
            "experiments: [{method: oel, cycles: 1},\n"
            "  {name: b, method: oel, cycles: 1, params: {train.optimizer.lr: 4e-5}}]",
            [],
            r"^error: experiments: 'b': train\.optimizer\.lr: must be a finite number, got '4e-5'",
        ),
        (
            "experiments: [{method: oel, cycles: 1},\n"
            "  {name: b, method: oel, cycles: 1, params: {trian.epochs: 2}}]",
            [],
            r"^error: experiments: 'b': parameters: unknown top-level key\(s\) \['trian'\]",
        ),
        (_ONE, ["--tier", "2"], r"--tier: the plan's tiers are \[1\], got 2"),
        # a training seed that is the folder's own, negative, or a plan that sets its keys
        (_ONE, ["--training-seed", "0"], r"--training-seed: 0 is the seed the plan's own folder"),
        (_ONE, ["--training-seed", "-1"], r"--training-seed: an integer >= 0, got -1"),
        (
            f"params: {{run.seed: 3}}\n{_ONE}",
            ["--training-seed", "1"],
            r"params: sets \['run\.seed'\]; a training seed sets",
        ),
        (
            "experiments: [{method: oel, cycles: 1, params: {train: {schedule: {seed: 2}}}}]",
            ["--rerun", "oel", "--cycle", "1", "--training-seed", "1"],
            r"experiments\[0\]\.params: sets \['train\.schedule\.seed'\]",
        ),
    ],
)
def test_a_bad_plan_is_refused_in_one_line_before_anything_runs(
    tmp_path, monkeypatch, capsys, text, argv, message
):
    """``python -m resail_pipeline.study``: a plan that would write outside the data folder, or
    that cannot run, exits with status 2 and one line naming the field; nothing is run or copied."""
    import re

    import resail_pipeline.study as study

    project, _ = _cycle_0_project(tmp_path, text)
    monkeypatch.setattr(study.runner, "_kedro", lambda *a, **k: pytest.fail("nothing may run"))
    before = sorted(tmp_path.rglob("*"))
    with pytest.raises(SystemExit) as exit_:
        study.main(
            ["--env", "base", "--project", str(project), "--plan", str(project / "plan.yml"), *argv]
        )
    assert exit_.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and re.search(message, lines[0]), lines
    assert sorted(tmp_path.rglob("*")) == before  # nothing copied, no time row


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--rerun", "oel"], "--rerun and --cycle go together"),
        (["--rerun", "oel", "--cycle", "1"], "--rerun takes --seeds .* or --training-seed"),
        (["--seeds", "3"], "--seeds goes with --rerun, without --training-seed"),
        (
            ["--rerun", "oel", "--cycle", "1", "--seeds", "3", "--training-seed", "1"],
            "--seeds goes with --rerun, without --training-seed",
        ),
        (["--cycle-0", "--training-seed", "1"], "--cycle-0 is the plan's own"),
        (["--cycle-0", "--rerun", "oel", "--cycle", "1", "--seeds", "3"], "--cycle-0 runs"),
        (["--rerun", "oel", "--cycle", "1", "--seeds", "3", "--tier", "1"], "--tier chooses"),
    ],
)
def test_options_that_do_not_go_together_are_refused(tmp_path, monkeypatch, capsys, argv, message):
    import re

    import resail_pipeline.study as study

    monkeypatch.setattr(study.runner, "_kedro", lambda *a, **k: pytest.fail("nothing may run"))
    with pytest.raises(SystemExit) as exit_:
        study.main(["--project", str(tmp_path), *argv])
    assert exit_.value.code == 2
    assert re.search(message, capsys.readouterr().err.strip().splitlines()[-1])


def test_a_configuration_without_one_training_seed_is_refused(tmp_path):
    """The grid's own training seed is the one value its configuration gives every key; where an
    environment sets one of them apart, the grid has none, and a new seed could repeat it."""
    from resail_pipeline.study import with_training_seed

    project, _ = _cycle_0_project(tmp_path, _ONE)
    plan = load_plan(project / "plan.yml")
    assert with_training_seed(plan, "base", project, 3).params["score.seed"] == 3
    (project / "conf" / "local").mkdir()
    (project / "conf" / "local" / "parameters.yml").write_text("score: {seed: 2}\n")
    with pytest.raises(ValueError, match=r"different values .*'score\.seed': 2"):
        with_training_seed(plan, "local", project, 3)
    with pytest.raises(ValueError, match=r"--cycle: the plan trains 'oel' to cycle 1, got 2"):
        import resail_pipeline.study as study

        study.retrain_cell(plan, "base", project, name="oel", cycle=2, seed=3, log=tmp_path / "t")


def test_a_plan_runs_at_the_value_another_plans_rule_chose(tmp_path):
    """``chosen_by``: the grid takes the rate its check's rule chose from the check's evaluated
    candidates, and is refused while one is not evaluated, where the rule chose nothing, or where
    it sets the rate itself."""
    from resail_pipeline.study import main, with_choice

    project = tmp_path / "project"
    _conf(project, {"base": "env: textcraft\nmethod: oel\ndata_tag: ''\n"})
    plans = project / "conf" / "base"
    check = _rule_plan(tmp_path, "largest_harmless")  # small 1e-5, middle 2e-5, large 4e-5
    (plans / "check.yml").write_text(
        (tmp_path / "plan.yml").read_text() + "params: {data_tag: -check}\n"
    )
    (plans / "grid.yml").write_text(
        "chosen_by: check.yml\nparams: {data_tag: -grid}\n"
        "experiments: [{method: oel, cycles: 2}, {method: oel_resail, cycles: 2}]\n"
    )
    grid = load_plan(plans / "grid.yml")
    assert grid.chosen_by == str(plans / "check.yml") and check.rule is not None

    outputs = project / "data" / "07_model_output" / "textcraft-check"
    half = [t % 2 == 0 for t in range(40)]
    _eval_results(outputs / "shared" / "cycle_0", [half, half], cycle=0)
    _eval_results(outputs / "small" / "cycle_1", [half, half], cycle=1)
    _eval_results(outputs / "middle" / "cycle_1", [half, half], cycle=1)
    with pytest.raises(ValueError, match=r"large/cycle_1: no evaluation there"):
        with_choice(grid, "base", project)
    _eval_results(outputs / "large" / "cycle_1", [[False] * 40] * 2, cycle=1)  # harms
    record = project / "data" / "08_reporting" / "textcraft-grid" / "chosen_by.json"
    argv = ["--env", "base", "--project", str(project), "--plan", str(plans / "grid.yml")]
    with pytest.raises(SystemExit):  # a bad option is refused before the choice is recorded
        main([*argv, "--tier", "9"])
    assert not record.exists()
    chosen = with_choice(grid, "base", project)
    assert chosen.params == {"data_tag": "-grid", "train.optimizer.lr": 2e-5}
    run = chosen.experiments[1].run_params(chosen.params)
    assert run["train"]["optimizer"]["lr"] == 2e-5 and run["data_tag"] == "-grid"
    assert with_choice(load_plan(tmp_path / "plan.yml"), "base", project) == check  # none named
    assert json.loads(record.read_text()) == {
        "chosen_by": "check.yml",
        "parameter": "train.optimizer.lr",
        "value": 2e-5,
    }
    assert with_choice(grid, "base", project) == chosen  # a later sitting: the same choice
    kept = record.read_text()
    record.write_text(kept[:20])  # cut short by hand
    with pytest.raises(ValueError, match=r"chosen_by\.json: not a JSON file"):
        with_choice(grid, "base", project)
    record.write_text(kept)

    _eval_results(outputs / "middle" / "cycle_1", [[False] * 40] * 2, cycle=1)  # now harms
    with pytest.raises(ValueError, match=r"records train\.optimizer\.lr = 2e-05, .* now chooses"):
        with_choice(grid, "base", project)  # the grid's runs so far used 2e-5
    record.unlink()
    _eval_results(outputs / "small" / "cycle_1", [[False] * 40] * 2, cycle=1)  # all harm
    with pytest.raises(ValueError, match=r"check\.yml's rule chose nothing"):
        with_choice(grid, "base", project)
    (outputs / "shared" / "cycle_0" / "eval_steps.parquet").unlink()  # a save cut short
    with pytest.raises(
        ValueError, match=r"shared/cycle_0: no evaluation there; check\.yml's cycle"
    ):
        with_choice(grid, "base", project)
    (plans / "both.yml").write_text(
        "chosen_by: check.yml\nexperiments: [{method: oel, cycles: 1, "
        "params: {train.optimizer.lr: 1.0e-4}}]\n"
    )
    with pytest.raises(ValueError, match=r"chooses train\.optimizer\.lr, which the plan also"):
        with_choice(load_plan(plans / "both.yml"), "base", project)
    (plans / "far.yml").write_text(f"chosen_by: ../x.yml\n{_ONE}\n")
    with pytest.raises(ValueError, match=r"chosen_by: a plan file beside this one"):
        load_plan(plans / "far.yml")
