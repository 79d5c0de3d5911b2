"""A study: several experiments of the cycle pipeline side by side, then one report.

A plan (YAML, ``conf/base/study.yml`` unless the configuration environment has its own) lists the
experiments; each is ``kedro run --pipelines=cycle --only-missing-outputs`` under its own
``run.experiment`` with its method, its number of cycles (``RESAIL_CYCLES``) and its parameter
overrides. The report pipeline then reads every experiment of the environment's data folder.
Everything a run finishes is kept: killing the study anywhere and starting it again redoes
nothing finished (the initial policy's evaluation and cycle 1's corpus are shared by all). An
experiment listed twice with more cycles continues from where the first entry stopped.

Every experiment's wall time goes to ``data/08_reporting/<plan>-<env>.csv``, one row per
invocation (``started``), with the largest resident memory of any process the study has run so
far (Linux keeps one maximum over all finished children). A running experiment's row is
rewritten every minute, so a study killed anywhere (``SIGKILL`` included) keeps the time it spent,
to the minute: such a row has an empty ``exit_code``. The time of a study interrupted and resumed
is the sum of its rows. An experiment whose last cycle is already evaluated is passed over without
starting Kedro, and without a row.

    python -m resail_pipeline.study --env study             # the comparison (make study)
    python -m resail_pipeline.study --env study --tier 1    # its first tier (make study TIER=1)
    python -m resail_pipeline.study --env study --plan conf/study/budgets.yml

The plan is checked whole before anything runs or is copied: its YAML, its keys, each experiment's
method, cycles, tier and name, the data tags (``params.data_tag``, ``cycle_0_from``: folder names,
never a path out of ``data/``), the folders its runs write (``bootstrap.build_dir``: under
``data/``) and ``--tier`` (one of the plan's tiers). A refusal is one line naming the field, and
the exit status is 2.

A plan may take its cycle 0 from another data folder of the same environment (``cycle_0_from:``,
that folder's data tag): the initial policy's record, reference episodes, fixed Experience, probe
set and evaluation depend on the policy and the evaluation settings only, so a plan that changes
neither (a budget check run again at another budget) copies them instead of playing them again.
They are copied whole, once, into a folder that has none of cycle 0 yet, after the evaluation
settings the plan sets are checked against the episodes they describe.

A plan may pre-register a rule (``rule:``) that chooses among its candidates once they are
evaluated, from each one's cycle-1 paired difference from cycle 0 and its 95% interval:
``largest_harmless`` takes the largest value of ``parameter`` among the ``method``'s experiments
whose interval has an upper bound >= 0 in every split and view (the first cycle does no
measurable harm); ``largest_gain`` takes the value whose ordinary view gains most (its mean
difference over the splits) among those whose ordinary-view interval lies above zero in every
split (the first cycle teaches), else the largest harmless value, reported as a gain not met.
The table of every candidate and the choice go to ``data/08_reporting/<folder>/rule.md``.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import logging
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from resail_pipeline.config import ConfigError, build, check_folder_name, check_int
from resail_pipeline.io import atomic_path, tied_to_this_process
from resail_pipeline.training.config import METHODS, REACT

__all__ = [
    "EVALUATION_FILES",
    "Experiment",
    "Rule",
    "RuleOutcome",
    "StudyPlan",
    "apply_rule",
    "data_folder",
    "finished",
    "load_plan",
    "main",
    "rerun_cell",
    "run_study",
    "take_cycle_0",
]

logger = logging.getLogger(__name__)

PLAN_FILE = "study.yml"
#: how often a running experiment's time row is rewritten, in seconds
HEARTBEAT_S = 60.0


@dataclass(frozen=True)
class Experiment:
    """One run of the cycle pipeline: ``run.method``, ``run.experiment``, cycles, overrides."""

    method: str
    cycles: int
    name: str = ""
    params: Mapping[str, Any] = field(default_factory=dict)
    # the plan's tiers run in order; ``--tier N`` runs those up to N (the question first)
    tier: int = 1

    def __post_init__(self) -> None:
        if self.method not in METHODS or self.method == REACT:
            trained = [m for m in METHODS if m != REACT]
            raise ConfigError(
                f"method: must be one of {trained} (react is cycle 0's evaluation, which every "
                f"experiment writes), got {self.method!r}"
            )
        check_int("cycles", self.cycles, low=1)
        check_int("tier", self.tier, low=1)
        if not self.name:
            object.__setattr__(self, "name", self.method)
        check_folder_name(self.name, "name")
        if self.params is None:  # `params:` left empty
            object.__setattr__(self, "params", {})
        check_overrides(self.params, "params")
        for key in self.params:
            if key.split(".")[0] == "run":
                raise ConfigError(f"params: {key!r}; the method and name are given as such")

    def run_params(self, shared: Mapping[str, Any]) -> dict[str, Any]:
        """The run's parameter overrides, nested as ``kedro run --params`` gives them: the plan's
        shared overrides, this experiment's, its method and name."""
        values = {**shared, **self.params, "run.method": self.method, "run.experiment": self.name}
        return nest(values)


def nest(dotted: Mapping[str, Any]) -> dict[str, Any]:
    """``{"a.b": 1, "c": 2}`` -> ``{"a": {"b": 1}, "c": 2}``."""
    out: dict[str, Any] = {}
    for key, value in dotted.items():
        *parents, leaf = key.split(".")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"params: {key!r} sets a key below a value")
        node[leaf] = value
    return out


def flatten(params: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}, "c.d": 2}`` -> ``{"a.b": 1, "c.d": 2}``: overrides as dotted keys, however
    a plan nests them."""
    out: dict[str, Any] = {}
    for key, value in params.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, f"{dotted}."))
        else:
            out[dotted] = value
    return out


#: the folders a plan's runs write that a plan may set: each must lie under the data folder
WRITTEN_FOLDERS = ("bootstrap.build_dir",)


def check_overrides(params: Any, field: str) -> None:
    """Raise :class:`ConfigError` naming ``field`` (``params``) where a plan's or an experiment's
    parameter overrides are no mapping, or would put a data folder (``data_tag``) or a folder the
    runs write (:data:`WRITTEN_FOLDERS`) outside the project's data folder."""
    if not isinstance(params, Mapping):
        raise ConfigError(f"{field}: must be a mapping of parameter overrides, got {params!r}")
    flat = flatten(params)
    if "data_tag" in flat:
        check_folder_name(flat["data_tag"], f"{field}.data_tag", empty=True)
    for key in WRITTEN_FOLDERS:
        value = flat.get(key)
        parts = Path(value).parts if isinstance(value, str) else ()
        if key in flat and (len(parts) < 2 or parts[0] != "data" or ".." in parts):
            raise ConfigError(
                f"{field}.{key}: must be a folder under data/ (a relative path without '..'), "
                f"got {value!r}"
            )


def _is_number(value: Any) -> bool:
    """A number, or a string YAML left one (PyYAML reads ``1e-5`` as a string)."""
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


#: the rules a plan may pre-register
RULES = ("largest_harmless", "largest_gain")


@dataclass(frozen=True)
class Rule:
    """A choice among a plan's candidates, fixed before their results are seen."""

    # the parameter the candidates vary, as the experiments' params name it
    parameter: str
    # the method whose experiments are the candidates
    method: str
    # largest_harmless: the largest value whose paired interval's upper bound is >= 0;
    # largest_gain: the largest ordinary-view gain whose interval lies above 0, else as above
    choose: str = "largest_harmless"

    def __post_init__(self) -> None:
        if self.choose not in RULES:
            raise ConfigError(f"choose: must be one of {list(RULES)}, got {self.choose!r}")
        if self.method not in METHODS:
            raise ConfigError(f"method: must be one of {list(METHODS)}, got {self.method!r}")


@dataclass(frozen=True)
class StudyPlan:
    """Experiments in the order they run, overrides shared by all (e.g. ``data_tag``),
    optionally the rule that chooses among them, and the data tag of the folder whose cycle 0
    the runs take (``cycle_0_from``; ``None``: they play their own)."""

    experiments: tuple[Experiment, ...]
    params: Mapping[str, Any] = field(default_factory=dict)
    rule: Rule | None = None
    cycle_0_from: str | None = None

    def __post_init__(self) -> None:
        if not self.experiments:
            raise ConfigError("experiments: the plan has no experiments")
        check_overrides(self.params, "params")
        source = self.cycle_0_from
        if source is not None and not isinstance(source, str):
            raise ConfigError(f"cycle_0_from: a data tag (a string), got {source!r}")
        if source is not None:
            check_folder_name(source, "cycle_0_from", empty=True)
        if source is not None and source == flatten(self.params).get("data_tag"):
            raise ConfigError(f"cycle_0_from: {source!r} is the plan's own data_tag")
        methods: dict[str, str] = {}
        for experiment in self.experiments:
            if methods.setdefault(experiment.name, experiment.method) != experiment.method:
                raise ConfigError(f"experiments: {experiment.name!r} is listed with two methods")
        if self.rule is not None:
            for experiment, _ in self._candidates():
                value = experiment.params[self.rule.parameter]
                if isinstance(value, bool) or not _is_number(value):
                    raise ConfigError(
                        f"rule: {experiment.name!r} sets {self.rule.parameter} to {value!r}; "
                        "the rule compares numbers"
                    )
            if not self._candidates():
                raise ConfigError(
                    f"rule: no {self.rule.method} experiment sets {self.rule.parameter}; "
                    "nothing to choose"
                )

    @property
    def tiers(self) -> list[int]:
        """The tiers the plan's experiments are in, in order."""
        return sorted({experiment.tier for experiment in self.experiments})

    def _candidates(self) -> list[tuple[Experiment, Any]]:
        if self.rule is None:
            return []
        seen: dict[str, tuple[Experiment, Any]] = {}
        for experiment in self.experiments:
            if experiment.method == self.rule.method and self.rule.parameter in experiment.params:
                seen[experiment.name] = (experiment, experiment.params[self.rule.parameter])
        return list(seen.values())

    def candidates(self) -> list[tuple[Experiment, float]]:
        """The rule's candidates and their values of its parameter, in plan order."""
        return [(experiment, float(value)) for experiment, value in self._candidates()]


def load_plan(path: str | Path) -> StudyPlan:
    """Read and check a plan, whole, before anything runs; every error is a :class:`ConfigError`
    of one line naming the file and the entry (``study.yml: experiments[2].method: ...``)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such study plan")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or " ".join(str(error).split())
        raise ConfigError(f"{path}: not a YAML file: {problem}{where}") from None
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"{path}: must be a mapping (experiments, params, ...), got {type(data).__name__}"
        )
    known = ["cycle_0_from", "experiments", "params", "rule"]
    unknown = sorted(set(map(str, data)) - set(known))
    if unknown:
        raise ConfigError(f"{path}: unknown key(s) {unknown}; known: {known}")
    entries = data.get("experiments") or []
    if not isinstance(entries, list):
        raise ConfigError(f"{path}: experiments: must be a list of experiments, got {entries!r}")
    experiments = tuple(
        build(Experiment, entry, f"{path}: experiments[{i}]") for i, entry in enumerate(entries)
    )
    rule = build(Rule, data["rule"], f"{path}: rule") if data.get("rule") is not None else None
    params = data.get("params")
    try:
        return StudyPlan(
            experiments=experiments,
            params={} if params is None else params,
            rule=rule,
            cycle_0_from=data.get("cycle_0_from"),
        )
    except ConfigError as error:
        raise ConfigError(f"{path}: {error}") from None


@dataclass(frozen=True)
class RuleOutcome:
    """What a plan's rule found: every candidate's differences, the choice, and whether the
    choice met the rule's aim (``largest_gain``: a gain; ``largest_harmless``: no harm)."""

    # one row per candidate, split and view: difference, low, high (points), tasks, harmless, gain
    table: pd.DataFrame
    chosen: float | None
    met: bool


def apply_rule(plan: StudyPlan, outputs: Path) -> RuleOutcome:
    """Every candidate's cycle-1 paired difference from cycle 0, and the rule's choice.

    Args:
        plan: a plan with a rule.
        outputs: the data folder's model outputs (``data/07_model_output/<env><data_tag>``).

    Returns:
        One row per candidate, split and view (``difference``, ``low``, ``high`` in percentage
        points, ``tasks``, ``harmless``: upper bound >= 0, ``gain``: lower bound > 0), the chosen
        value (``None`` when no candidate is harmless) and whether it met the rule's aim.
    """
    from resail_pipeline.evaluation.stats import paired_difference

    if plan.rule is None:
        raise ValueError("plan: has no rule")
    baseline = pd.read_parquet(outputs / "shared" / "cycle_0" / "eval_results.parquet")
    rows = []
    for experiment, value in plan.candidates():
        results = pd.read_parquet(outputs / experiment.name / "cycle_1" / "eval_results.parquet")
        for (split, view), group in results.groupby(["split", "view"], sort=True):
            base = baseline[(baseline["split"] == split) & (baseline["view"] == view)]
            d = paired_difference(group, base)
            rows.append(
                {
                    "experiment": experiment.name,
                    plan.rule.parameter: value,
                    "split": split,
                    "view": view,
                    "difference": 100 * d["difference"],
                    "low": 100 * d["low"],
                    "high": 100 * d["high"],
                    "tasks": d["tasks"],
                    "harmless": d["high"] >= 0,
                    "gain": d["low"] > 0,
                }
            )
    table = pd.DataFrame(rows)
    by_value = table.groupby(plan.rule.parameter)
    harmless = by_value["harmless"].all()
    largest_harmless = float(harmless[harmless].index.max()) if harmless.any() else None
    if plan.rule.choose == "largest_harmless":
        return RuleOutcome(table, largest_harmless, largest_harmless is not None)
    ordinary = table[table["view"] == "ordinary"].groupby(plan.rule.parameter)
    if ordinary.ngroups == 0:
        raise ValueError("largest_gain: the candidates were not evaluated in the ordinary view")
    gains = ordinary["difference"].mean()[ordinary["gain"].all()]
    if gains.empty:
        return RuleOutcome(table, largest_harmless, met=False)
    return RuleOutcome(table, float(gains.idxmax()), met=True)


def write_rule(plan: StudyPlan, outputs: Path, reporting: Path) -> RuleOutcome:
    """Apply the plan's rule; write every candidate and the choice to ``reporting/rule.md``."""
    from resail_pipeline.evaluation.report import table_to_markdown

    outcome = apply_rule(plan, outputs)
    table, chosen, rule = outcome.table, outcome.chosen, plan.rule
    # the candidates' values as written (a learning rate is not a one-decimal figure)
    shown = table.assign(**{rule.parameter: table[rule.parameter].map(lambda v: f"{v:g}")})
    smallest = f"{table[rule.parameter].min():g}"
    if rule.choose == "largest_gain" and outcome.met:
        verdict = f"chosen: {rule.parameter} = {chosen:g}, a gain in the ordinary view"
    elif rule.choose == "largest_gain" and chosen is not None:
        verdict = (
            f"no candidate gains in the ordinary view (the aim is not met); chosen, the largest "
            f"harmless: {rule.parameter} = {chosen:g}"
        )
    elif chosen is not None:
        verdict = f"chosen: {rule.parameter} = {chosen:g}"
    elif rule.choose == "largest_gain":
        verdict = f"no candidate gains and none is harmless; the smallest, {smallest}, is harmful"
    else:
        verdict = f"no candidate is harmless; the smallest, {smallest}, is harmful"
    text = (
        f"# Rule `{rule.choose}` over {rule.method}'s {rule.parameter}\n\n"
        "Paired difference of cycle 1 from cycle 0 in percentage points, 95% bootstrap interval "
        "over tasks; harmless: upper bound >= 0; gain: lower bound > 0.\n\n"
        f"{table_to_markdown(shown, float_format='.1f')}\n\n{verdict}\n"
    )
    reporting.mkdir(parents=True, exist_ok=True)
    with atomic_path(reporting / "rule.md") as tmp:
        Path(tmp).write_text(text)
    logger.info("study: %s", verdict)
    return outcome


def data_folder(plan: StudyPlan, env: str, project: Path) -> tuple[str, str]:
    """The environment and the data tag of the plan's runs, whose data folder is their
    concatenation (``textcraft`` + ``-study``): the configuration environment's ``globals.yml``
    over the base one, then the plan's overrides."""
    values: dict[str, Any] = {}
    for layer in ("base", env):
        path = project / "conf" / layer / "globals.yml"
        if path.is_file():
            values.update(yaml.safe_load(path.read_text()) or {})
    if "env" not in values:
        raise ConfigError(f"{project / 'conf' / 'base' / 'globals.yml'}: names no env")
    env_name = check_folder_name(values["env"], "globals.yml: env")
    tag = flatten(plan.params).get("data_tag", values.get("data_tag")) or ""
    return env_name, check_folder_name(tag, "data_tag", empty=True)


#: what the evaluation of a cycle writes, under ``07_model_output/<folder>/<experiment>/cycle_<r>``
#: (the catalog's ``eval_*`` datasets): the last node of the cycle pipeline
EVALUATION_FILES = ("eval_results.parquet", "eval_summary.parquet", "eval_steps.parquet")


def finished(experiment: Experiment, outputs: Path) -> bool:
    """Whether every evaluation file of ``experiment``'s last cycle is under ``outputs`` (the data
    folder of ``07_model_output``): its run would have nothing left to do."""
    cycle = outputs / experiment.name / f"cycle_{experiment.cycles}"
    return all((cycle / name).is_file() for name in EVALUATION_FILES)


#: what a cell's evaluation reads besides its checkpoints: the initial policy and the fixed
#: Experience of cycle 0, per data layer
_SHARED_INPUTS = (
    ("06_models", "shared/cycle_0"),
    ("03_primary", "shared/cycle_0/experience.parquet"),
)
#: all of cycle 0, per data layer: the initial policy's record, its reference episodes, the
#: fixed Experience, the probe set and the initial policy's evaluation
_CYCLE_0 = tuple(
    (layer, "shared/cycle_0")
    for layer in ("02_intermediate", "03_primary", "04_feature", "06_models", "07_model_output")
)
#: the evaluation settings a plan may set, and the column of ``eval_results`` each one decides
_EVALUATION_COLUMNS = {
    "evaluate.splits": "split",
    "evaluate.views": "view",
    "evaluate.decoding_seeds": "decoding_seed",
}


def _copy_missing(data: Path, parts: Sequence[tuple[str, str]], source: str, target: str) -> None:
    """Copy each ``(layer, part)`` of ``data/<layer>/<source>`` to ``data/<layer>/<target>``
    where it is missing there, each moved into place whole."""
    for layer, part in parts:
        destination = data / layer / target / part
        origin = data / layer / source / part
        if destination.exists() or not origin.exists():
            continue
        with atomic_path(destination) as tmp:
            (shutil.copytree if origin.is_dir() else shutil.copy2)(origin, tmp)


def take_cycle_0(plan: StudyPlan, env: str, project: Path) -> bool:
    """Copy cycle 0 of the folder ``plan.cycle_0_from`` names into the plan's own, if the plan
    names one and its own folder has none of cycle 0 yet (see the module notes). Returns whether
    it copied.

    Raises:
        ConfigError: the source folder has no evaluated cycle 0, or its episodes were played with
            other splits, views, decoding seeds or numbers of tasks than the plan sets.
    """
    if plan.cycle_0_from is None:
        return False
    run_env, tag = data_folder(plan, env, project)
    data = project / "data"
    if any((data / layer / f"{run_env}{tag}" / part).exists() for layer, part in _CYCLE_0):
        return False
    source = f"{run_env}{plan.cycle_0_from}"
    results = data / "07_model_output" / source / "shared" / "cycle_0" / "eval_results.parquet"
    if not results.is_file():
        raise ConfigError(f"cycle_0_from: {results}: missing; that folder has no evaluated cycle 0")
    played = pd.read_parquet(results, columns=[*_EVALUATION_COLUMNS.values(), "task_id"])
    for key, column in _EVALUATION_COLUMNS.items():
        values = sorted(played[column].unique().tolist())
        if key in plan.params and values != sorted(plan.params[key]):
            raise ConfigError(
                f"cycle_0_from: {results}: played with {column} {values}, the plan's {key} is "
                f"{plan.params[key]}"
            )
    tasks = {split: int(n) for split, n in played.groupby("split")["task_id"].nunique().items()}
    wanted = plan.params.get("evaluate.num_tasks")
    if wanted is not None and set(tasks.values()) != {wanted}:
        raise ConfigError(
            f"cycle_0_from: {results}: played on {tasks} tasks per split, the plan's "
            f"evaluate.num_tasks is {wanted}"
        )
    _copy_missing(data, _CYCLE_0, source, f"{run_env}{tag}")
    logger.info("study: cycle 0 taken from %s", source)
    return True


def _cell_names(plan: StudyPlan, name: str) -> list[Experiment]:
    """The plan's experiment ``name`` after the one the report compares it with at the same
    cycle, where there is one: a ReSAIL variant's parent, an ablation's full method (the
    experiment named after its method)."""
    from resail_pipeline.evaluation.report import comparisons

    entries = {e.name: e for e in plan.experiments}  # the last entry: the most cycles
    if name not in entries:
        raise ConfigError(f"--rerun: no experiment {name!r} in the plan; it has {sorted(entries)}")
    against = dict(comparisons({name: entries[name].method})).get(name)
    names = [name] if against is None else [against, name]
    missing = [n for n in names if n not in entries]
    if missing:
        raise ConfigError(f"--rerun: {name!r} is compared with {missing[0]!r}, not in the plan")
    return [entries[n] for n in names]


def _cell_results(outputs: Path, names: Sequence[str], cycle: int) -> pd.DataFrame:
    """The ``eval_results`` of the initial policy and of ``names`` at ``cycle`` in ``outputs``,
    with their ``experiment``."""
    frames = [pd.read_parquet(outputs / "shared" / "cycle_0" / "eval_results.parquet")]
    frames[0]["experiment"] = "shared"
    for name in names:
        frame = pd.read_parquet(outputs / name / f"cycle_{cycle}" / "eval_results.parquet")
        frames.append(frame.assign(experiment=name))
    return pd.concat(frames, ignore_index=True)


def compare_cells(grid: pd.DataFrame, rerun: pd.DataFrame) -> pd.DataFrame:
    """The paired differences of a cell's comparisons in the grid and in its rerun, side by side.

    Both are ``eval_results`` of the initial policy and the cell's experiments, with their
    ``experiment``; each gives every comparison the report makes (each experiment against the
    initial policy, the ReSAIL variant against its parent, an ablation against its full method) per
    benchmark and view, with its 95% interval over tasks and the decoding seeds it was measured over.
    """
    from resail_pipeline.evaluation.report import paired_differences_table

    keys = ["Comparison", "Benchmark", "View", "Cycle"]
    sides = []
    for frame, side in ((grid, "grid"), (rerun, "rerun")):
        table = paired_differences_table(frame, source=side).drop(columns="Tasks")
        seeds = ", ".join(str(s) for s in sorted(frame["decoding_seed"].unique()))
        sides.append(
            table.rename(
                columns={
                    "Difference (pp)": f"{side}: seeds {seeds} (pp)",
                    "95% CI (pp)": f"{side}: 95% CI (pp)",
                }
            )
        )
    order = pd.concat([side[keys] for side in sides]).drop_duplicates()  # the report's order
    return order.merge(sides[0], on=keys, how="left").merge(sides[1], on=keys, how="left")


def rerun_cell(
    plan: StudyPlan, env: str, project: Path, *, name: str, cycle: int, seeds: Sequence[int]
) -> pd.DataFrame:
    """Evaluate one cell of the grid again with decoding ``seeds``, from the checkpoints it kept.

    The initial policy, experiment ``name`` at ``cycle`` and the experiment it is compared with (a
    ReSAIL variant's parent, an ablation's full method) are evaluated with the plan's settings and
    the grid's fixed Experience in the data folder ``<grid folder>-seeds<s>`` (their checkpoints
    and the Experience copied there first; what exists is kept, so an interrupted rerun resumes,
    and cells sharing an experiment evaluate it once). Their paired differences go beside the
    grid's to ``data/08_reporting/<that folder>/rerun-<name>-cycle_<cycle>.md`` and ``.csv``.

    Returns:
        The side-by-side table (:func:`compare_cells`).
    """
    check_int("--cycle", cycle, low=1)
    if not seeds or any(not isinstance(s, int) or s < 0 for s in seeds):
        raise ConfigError(f"--seeds: one or more decoding seeds >= 0, got {list(seeds)}")
    experiments = _cell_names(plan, name)
    names = [e.name for e in experiments]
    run_env, tag = data_folder(plan, env, project)
    rerun_tag = f"{tag}-seeds{'-'.join(str(s) for s in seeds)}"
    data = project / "data"
    inputs = [*_SHARED_INPUTS, *(("06_models", f"{n}/cycle_{cycle}") for n in names)]
    results = [("07_model_output", f"{n}/cycle_{cycle}/eval_results.parquet") for n in names]
    for layer, part in (*inputs, *results):  # before anything is copied or run
        if not (data / layer / f"{run_env}{tag}" / part).exists():
            raise ConfigError(
                f"{data / layer / f'{run_env}{tag}' / part}: missing; the grid has not finished "
                f"cycle {cycle} of {names}"
            )
    _copy_missing(data, inputs, f"{run_env}{tag}", f"{run_env}{rerun_tag}")
    shared = {**plan.params, "data_tag": rerun_tag, "evaluate.decoding_seeds": list(seeds)}
    for k, experiment in enumerate(experiments):
        logger.info("rerun: %s, cycle %d, decoding seeds %s", experiment.name, cycle, list(seeds))
        nodes = (["cycle_0.evaluate_node"] if k == 0 else []) + [f"cycle_{cycle}.evaluate_node"]
        args = ["run", "--env", env, "--pipelines", "cycle", "--only-missing-outputs"]
        args += ["--nodes", ",".join(nodes)]
        if _kedro(args, project, params=experiment.run_params(shared), cycles=cycle) != 0:
            raise RuntimeError(
                f"rerun: the evaluation of {experiment.name!r} failed; what it finished is kept"
            )
    outputs = data / "07_model_output"
    table = compare_cells(
        _cell_results(outputs / f"{run_env}{tag}", names, cycle),
        _cell_results(outputs / f"{run_env}{rerun_tag}", names, cycle),
    )
    _write_comparison(table, data / "08_reporting" / f"{run_env}{rerun_tag}", names, cycle)
    return table


def _write_comparison(table: pd.DataFrame, reporting: Path, names: list[str], cycle: int) -> None:
    from resail_pipeline.evaluation.report import table_to_markdown

    reporting.mkdir(parents=True, exist_ok=True)
    stem = f"rerun-{names[-1]}-cycle_{cycle}"  # one pair per cell: cells of one folder keep theirs
    with atomic_path(reporting / f"{stem}.csv") as tmp:
        table.to_csv(tmp, index=False)
    text = (
        f"# Cycle {cycle} of {', '.join(names)}, evaluated again\n\n"
        "Paired differences in success (percentage points), 95% percentile-bootstrap intervals "
        "over tasks: the grid's beside the rerun's, each column naming its decoding seeds.\n\n"
        f"{table_to_markdown(table, float_format='+.1f')}\n"
    )
    with atomic_path(reporting / f"{stem}.md") as tmp:
        tmp.write_text(text)
    logger.info("rerun: %s", reporting / f"{stem}.md")


def plan_path(env: str, project: Path) -> Path:
    """The environment's own plan if it has one, else the base plan."""
    own = project / "conf" / env / PLAN_FILE
    return own if own.is_file() else project / "conf" / "base" / PLAN_FILE


def _run(
    command: Sequence[str],
    project: Path,
    env: Mapping[str, str],
    heartbeat: Callable[[], None] | None = None,
    every: float = HEARTBEAT_S,
) -> int:
    """Run ``command`` to its end; call ``heartbeat`` every ``every`` seconds while it runs."""
    # the child dies with this process, however it dies: a killed runner leaves no run holding
    # the experiment's lock (and its trainer dies with it in turn)
    process = subprocess.Popen(
        list(command), cwd=project, env=dict(env), preexec_fn=tied_to_this_process()
    )
    while True:
        try:
            return process.wait(timeout=every if heartbeat is not None else None)
        except subprocess.TimeoutExpired:
            heartbeat()


def _kedro(
    args: Sequence[str],
    project: Path,
    params: Mapping[str, Any] | None = None,
    cycles: int | None = None,
    heartbeat: Callable[[], None] | None = None,
) -> int:
    """``python -m kedro <args>`` in ``project``; ``params`` go through a run configuration file
    (``kedro run --config``), which carries lists and strings as YAML (``--params`` splits its
    value at every comma)."""
    env = {**os.environ, "KEDRO_DISABLE_TELEMETRY": "true"}
    if cycles is not None:
        env["RESAIL_CYCLES"] = str(cycles)
    with tempfile.TemporaryDirectory(prefix="resail-study-") as folder:
        command = [sys.executable, "-m", "kedro", *args]
        if params:
            config = Path(folder) / "run.yml"
            config.write_text(yaml.safe_dump({"run": {"params": dict(params)}}, sort_keys=False))
            command += ["--config", str(config)]
            logger.info("parameters: %s", json.dumps(params, sort_keys=True))
        logger.info("%s%s", f"RESAIL_CYCLES={cycles} " if cycles else "", " ".join(command[1:]))
        return _run(command, project, env, heartbeat)


def _peak_rss_gib() -> float:
    """The largest resident memory of any finished child process so far, in GiB."""
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20  # KiB on Linux


def _write_row(
    path: Path, row: Mapping[str, Any], key: Sequence[str] = ("experiment", "started")
) -> None:
    """Put ``row`` in the CSV at ``path`` (header on creation), in place of the row with the same
    ``key`` values if there is one, else at the end; the file is rewritten atomically."""
    rows = []
    if path.is_file():
        with path.open(newline="") as handle:
            rows = list(csv.DictReader(handle))
    text = {k: str(v) for k, v in row.items()}
    same = [i for i, old in enumerate(rows) if all(old.get(k) == text[k] for k in key)]
    if same:
        rows[same[0]] = text
    else:
        rows.append(text)
    with atomic_path(path) as tmp, tmp.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(row))
        writer.writeheader()
        writer.writerows(rows)


@dataclass
class _Segment:
    """One invocation's run of an experiment: its row of the time log."""

    log: Path
    experiment: Experiment
    started: str = field(
        default_factory=lambda: datetime.datetime.now().isoformat(timespec="milliseconds")
    )
    start: float = field(default_factory=time.monotonic)

    def record(self, code: int | str = "") -> None:
        """Write the row as it stands: ``code`` the exit status, empty while it runs."""
        _write_row(
            self.log,
            {
                "experiment": self.experiment.name,
                "method": self.experiment.method,
                "cycles": self.experiment.cycles,
                "started": self.started,
                "seconds": round(time.monotonic() - self.start, 1),
                "peak_rss_gib": round(_peak_rss_gib(), 2),
                "exit_code": code,
                "finished": time.strftime("%Y-%m-%dT%H:%M:%S") if code != "" else "",
            },
        )


def run_study(
    plan: StudyPlan, env: str, project: Path, *, log: Path, tier: int | None = None
) -> None:
    """Run the experiments of ``plan`` in order (those of tiers up to ``tier``; ``None``: all),
    then the report; raise on the first failure.

    Raises:
        ConfigError: ``tier`` is none of the plan's tiers (before anything runs).
    """
    if tier is not None and tier not in plan.tiers:
        raise ConfigError(f"--tier: the plan's tiers are {plan.tiers}, got {tier}")
    experiments = [e for e in plan.experiments if tier is None or e.tier <= tier]
    if len(experiments) < len(plan.experiments):
        logger.info(
            "study: tiers up to %d, %d of the plan's %d experiments",
            tier,
            len(experiments),
            len(plan.experiments),
        )
    outputs = project / "data" / "07_model_output" / "".join(data_folder(plan, env, project))
    take_cycle_0(plan, env, project)
    for k, experiment in enumerate(experiments, start=1):
        if finished(experiment, outputs):
            logger.info(
                "study: experiment %d/%d %s, %d cycles: evaluated already",
                k,
                len(experiments),
                experiment.name,
                experiment.cycles,
            )
            continue
        logger.info(
            "study: experiment %d/%d %s (%s, %d cycles, tier %d)",
            k,
            len(experiments),
            experiment.name,
            experiment.method,
            experiment.cycles,
            experiment.tier,
        )
        segment = _Segment(log, experiment)
        segment.record()
        code = _kedro(
            ["run", "--env", env, "--pipelines", "cycle", "--only-missing-outputs"],
            project,
            params=experiment.run_params(plan.params),
            cycles=experiment.cycles,
            heartbeat=segment.record,
        )
        segment.record(code)
        if code != 0:
            raise RuntimeError(
                f"study: experiment {experiment.name!r} failed (exit code {code}); what it "
                "finished is kept, and running the study again continues from there"
            )
    # the plan's shared overrides (e.g. its data_tag): the report reads the same folder
    report = ["run", "--env", env, "--pipelines", "report"]
    if _kedro(report, project, params=nest(plan.params)) != 0:
        raise RuntimeError("study: the report failed")
    if plan.rule is not None:
        write_rule(plan, outputs, project / "data" / "08_reporting" / outputs.name)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m resail_pipeline.study", description=__doc__)
    parser.add_argument("--env", default="study", help="Kedro configuration environment")
    parser.add_argument(
        "--plan", type=Path, help="the plan (default: conf/<env>/study.yml, else base)"
    )
    parser.add_argument("--project", type=Path, default=Path.cwd(), help="the Kedro project")
    parser.add_argument(
        "--tier", type=int, default=None, help="run the experiments of tiers up to this one"
    )
    parser.add_argument(
        "--rerun",
        metavar="EXPERIMENT",
        help="evaluate one cell again instead (with --cycle, --seeds)",
    )
    parser.add_argument("--cycle", type=int, help="the cell's cycle (with --rerun)")
    parser.add_argument("--seeds", type=int, nargs="+", help="decoding seeds (with --rerun)")
    args = parser.parse_args(argv)
    if (args.rerun is None) != (args.cycle is None) or (args.rerun is None) != (args.seeds is None):
        parser.error("--rerun, --cycle and --seeds go together")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    path = args.plan or plan_path(args.env, args.project)
    try:
        plan = load_plan(path)
        if args.rerun is not None:
            rerun_cell(
                plan, args.env, args.project, name=args.rerun, cycle=args.cycle, seeds=args.seeds
            )
            return
        log = args.project / "data" / "08_reporting" / f"{path.stem}-{args.env}.csv"
        run_study(plan, args.env, args.project, log=log, tier=args.tier)
    except ConfigError as error:  # a bad plan or option: one line naming the field, status 2
        parser.exit(2, f"error: {error}\n")


if __name__ == "__main__":
    main()
