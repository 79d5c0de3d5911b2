"""The plan and its checks: its experiments, shared overrides, rule and cycle-0 source, read and
checked whole before anything runs; where it lives and which data folder its runs write."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from resail_pipeline.config import ConfigError, build, check_folder_name, check_int
from resail_pipeline.training.config import METHODS, REACT

PLAN_FILE = "study.yml"


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


def plan_path(env: str, project: Path) -> Path:
    """The environment's own plan if it has one, else the base plan."""
    own = project / "conf" / env / PLAN_FILE
    return own if own.is_file() else project / "conf" / "base" / PLAN_FILE


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
