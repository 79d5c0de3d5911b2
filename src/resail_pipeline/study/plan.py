"""The plan and its checks: its experiments, shared overrides, rule and cycle-0 source, read and
checked whole before anything runs; where it lives and which data folder its runs write."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from resail_pipeline.config import (
    Config,
    ConfigError,
    Field,
    FolderName,
    build,
    check_folder_name,
    flatten,
    model_validator,
    one_of,
)
from resail_pipeline.pipelines.common import SHARED_FOLDER
from resail_pipeline.settings import CONFIG_LOADER_ARGS, CONFIG_LOADER_CLASS
from resail_pipeline.training.config import METHODS, REACT

PLAN_FILE = "study.yml"
#: the methods an experiment may run: every one but react, which is cycle 0's evaluation
TRAINED = tuple(m for m in METHODS if m != REACT)


#: the parameters (top-level keys) only a plan sets, the same for all its experiments: the data
#: folder they write and read, and the evaluation that pairs them with cycle 0 and each other
PLAN_WIDE = ("data_tag", "evaluate")


class Experiment(Config):
    """One run of the cycle pipeline: ``run.method``, ``run.experiment``, cycles, overrides."""

    method: one_of(*TRAINED)
    """The run's training method (``run.method``); not react, which is cycle 0's evaluation."""
    cycles: int = Field(ge=1)
    """Cycles the run trains."""
    name: FolderName = ""
    """The run's experiment (``run.experiment``), the folder of its datasets; empty: the method's
    name."""
    params: dict[str, Any] = Field(default_factory=dict)
    """The experiment's parameter overrides (dotted keys or nested), over the plan's shared ones;
    not ``run``'s, which the method and name give, nor those of :data:`PLAN_WIDE`."""
    tier: int = Field(1, ge=1)
    """The plan's tiers run in order; ``--tier N`` runs those up to N (the question first)."""

    @model_validator(mode="before")
    @classmethod
    def _defaults(cls, data: Any) -> Any:
        """React is refused saying why; the name is the method's where none is given;
        ``params:`` left empty is no overrides, and the overrides are checked as a plan's are
        (:func:`check_overrides`)."""
        if not isinstance(data, Mapping):
            return data
        data = dict(data)
        if data.get("method") == REACT:
            raise ConfigError(
                f"method: must be one of {list(TRAINED)} (react is cycle 0's evaluation, which "
                f"every experiment writes), got {REACT!r}"
            )
        if not data.get("name") and "method" in data:
            data["name"] = data["method"]
        if data.get("params", {}) is None:
            data["params"] = {}
        params = data.get("params", {})
        for key in flatten(params) if isinstance(params, Mapping) else ():
            if key.split(".")[0] in PLAN_WIDE:
                raise ConfigError(
                    f"params.{key}: the same for every experiment of a plan (its data folder, "
                    "its evaluation, which pairs the cells); set it in the plan's params"
                )
        check_overrides(params, "params")
        return data

    @model_validator(mode="after")
    def _no_run_keys(self) -> Experiment:
        for key in flatten(self.params):
            if key.split(".")[0] == "run":
                raise ConfigError(f"params: {key!r}; the method and name are given as such")
        return self

    def run_params(self, shared: Mapping[str, Any]) -> dict[str, Any]:
        """The run's parameter overrides, nested as ``kedro run --params`` gives them: the plan's
        shared overrides, this experiment's, its method and name."""
        run = {"run.method": self.method, "run.experiment": self.name}
        return nest({**flatten(shared), **flatten(self.params), **run})  # later wins, per leaf


def nest(dotted: Mapping[str, Any]) -> dict[str, Any]:
    """``{"a.b": 1, "c": 2}`` -> ``{"a": {"b": 1}, "c": 2}``, in new dicts: a later dotted key
    below a nested value (``{"a": {"b": 1}, "a.c": 2}``) never writes into the caller's."""
    out: dict[str, Any] = {}
    for key, value in dotted.items():
        *parents, leaf = key.split(".")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"params: {key!r} sets a key below a value")
        node[leaf] = copy.deepcopy(value)
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


class Rule(Config):
    """A choice among a plan's candidates, fixed before their results are seen."""

    parameter: str
    """The parameter the candidates vary, as the experiments' params name it."""
    method: one_of(*METHODS)
    """The method whose experiments are the candidates."""
    choose: one_of(*RULES) = "largest_harmless"
    """``largest_harmless``: the largest value whose paired interval's upper bound is >= 0;
    ``largest_gain``: the largest ordinary-view gain whose interval lies above 0, else as
    above."""


class StudyPlan(Config):
    """Experiments in the order they run, overrides shared by all (e.g. ``data_tag``),
    optionally the rule that chooses among them, the data tag of the folder whose cycle 0 the runs
    take (``cycle_0_from``; ``None``: they play their own), and the plan whose rule's choice sets
    its parameter here (``chosen_by``)."""

    experiments: tuple[Experiment, ...]
    """The experiments, in the order they run."""
    params: dict[str, Any] = Field(default_factory=dict)
    """Parameter overrides every experiment shares (``data_tag``, dotted keys or nested)."""
    rule: Rule | None = None
    """The rule that chooses among the candidates, pre-registered; null: none."""
    cycle_0_from: FolderName | None = None
    """The data tag of the folder whose cycle 0 the runs take; null: they play their own."""
    chosen_by: str | None = None
    """The plan (its path) whose rule, applied to its evaluated candidates, sets the rule's
    parameter for every experiment here (:func:`~resail_pipeline.study.rule.with_choice`); null:
    none."""

    @model_validator(mode="before")
    @classmethod
    def _overrides(cls, data: Any) -> Any:
        """``params:`` left empty is no overrides; the overrides and the source's tag are checked
        before anything else."""
        if not isinstance(data, Mapping):
            return data
        data = dict(data)
        if data.get("params", {}) is None:
            data["params"] = {}
        check_overrides(data.get("params", {}), "params")
        source = data.get("cycle_0_from")
        if source is not None and not isinstance(source, str):
            raise ConfigError(f"cycle_0_from: a data tag (a string), got {source!r}")
        return data

    @model_validator(mode="after")
    def _consistent(self) -> StudyPlan:
        if not self.experiments:
            raise ConfigError("experiments: the plan has no experiments")
        source = self.cycle_0_from
        if source is not None and source == flatten(self.params).get("data_tag"):
            raise ConfigError(f"cycle_0_from: {source!r} is the plan's own data_tag")
        if SHARED_FOLDER in {experiment.name for experiment in self.experiments}:
            raise ConfigError(f"experiments: {SHARED_FOLDER!r} is cycle 0's folder, not a name")
        earlier: dict[str, Experiment] = {}
        for experiment in self.experiments:
            # an experiment listed again continues the same run further (the last entry: the most
            # cycles), so that only its number of cycles may grow
            before = earlier.get(experiment.name, experiment)
            if before.method != experiment.method:
                raise ConfigError(f"experiments: {experiment.name!r} is listed with two methods")
            if flatten(before.params) != flatten(experiment.params):
                raise ConfigError(
                    f"experiments: {experiment.name!r} is listed with two sets of params"
                )
            if experiment.cycles < before.cycles:
                raise ConfigError(
                    f"experiments: {experiment.name!r} is listed again with fewer cycles "
                    f"({experiment.cycles} after {before.cycles})"
                )
            earlier[experiment.name] = experiment
        if self.rule is not None:
            for experiment, value in self._candidates():
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
        return self

    @property
    def tiers(self) -> list[int]:
        """The tiers the plan's experiments are in, in order."""
        return sorted({experiment.tier for experiment in self.experiments})

    def _candidates(self) -> list[tuple[Experiment, Any]]:
        if self.rule is None:
            return []
        seen: dict[str, tuple[Experiment, Any]] = {}
        for experiment in self.experiments:
            params = flatten(experiment.params)  # the parameter set dotted or nested
            if experiment.method == self.rule.method and self.rule.parameter in params:
                seen[experiment.name] = (experiment, params[self.rule.parameter])
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
    known = ["chosen_by", "cycle_0_from", "experiments", "params", "rule"]
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
    chooser = data.get("chosen_by")
    if chooser is not None and (
        not isinstance(chooser, str) or Path(chooser).name != chooser or chooser in (".", "..")
    ):
        raise ConfigError(f"{path}: chosen_by: a plan file beside this one, got {chooser!r}")
    try:
        return StudyPlan(
            experiments=experiments,
            params={} if params is None else params,
            rule=rule,
            cycle_0_from=data.get("cycle_0_from"),
            chosen_by=None if chooser is None else str(path.parent / chooser),
        )
    except ConfigError as error:
        raise ConfigError(f"{path}: {error}") from None


def plan_path(env: str, project: Path) -> Path:
    """The environment's own plan if it has one, else the base plan."""
    own = project / "conf" / env / PLAN_FILE
    return own if own.is_file() else project / "conf" / "base" / PLAN_FILE


#: the parameters a training seed sets, all to the seed: what draws a cycle's tasks and decodes its
#: collection, what samples a model's summaries (the rules draw nothing), what samples the
#: scoring's responses, and what orders and samples the updates
TRAINING_SEED_KEYS = ("run.seed", "summarize.sampling.seed", "score.seed", "train.schedule.seed")


#: what a grid's data tag is followed by, then the seed, in the tag of its training seed's folder
TRAINING_SEED_SUFFIX = "-training-seed"


def training_seed_tag(tag: str, seed: int) -> str:
    """The data tag of a grid with data tag ``tag`` trained again with training seed ``seed``."""
    return f"{tag}{TRAINING_SEED_SUFFIX}{seed}"


def with_training_seed(plan: StudyPlan, env: str, project: Path, seed: int) -> StudyPlan:
    """``plan`` trained again with training seed ``seed``: every key of
    :data:`TRAINING_SEED_KEYS` set to ``seed``, in the folder :func:`training_seed_tag` names,
    taking its cycle 0 (which no training seed changes) from the plan's own folder.

    Raises:
        ConfigError: ``seed`` is negative or the plan's own (the seed its folder was trained
            with), the plan or an experiment sets a key of :data:`TRAINING_SEED_KEYS`, or the
            configuration gives them different values (then the plan's folder has no one seed).
    """
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ConfigError(f"--training-seed: an integer >= 0, got {seed!r}")
    for field, params in [("params", plan.params)] + [
        (f"experiments[{i}].params", e.params) for i, e in enumerate(plan.experiments)
    ]:
        set_here = sorted(set(flatten(params)) & set(TRAINING_SEED_KEYS))
        if set_here:
            raise ConfigError(
                f"{field}: sets {set_here}; a training seed sets {list(TRAINING_SEED_KEYS)}"
            )
    own = training_seed_of(plan, env, project)
    if seed == own:
        raise ConfigError(f"--training-seed: {seed} is the seed the plan's own folder trains with")
    _, tag = data_folder(plan, env, project)
    params = {**plan.params, "data_tag": training_seed_tag(tag, seed)}
    params.update(dict.fromkeys(TRAINING_SEED_KEYS, seed))
    return StudyPlan(
        experiments=plan.experiments,
        params=params,
        rule=plan.rule,
        cycle_0_from=tag,
        chosen_by=plan.chosen_by,
    )


def training_seed_of(plan: StudyPlan, env: str, project: Path) -> int:
    """The training seed the plan's own runs train with: the one value the configuration gives
    every key of :data:`TRAINING_SEED_KEYS`."""
    flat = resolved_params(plan, env, project)
    missing = [key for key in TRAINING_SEED_KEYS if key not in flat]
    if missing:
        raise ConfigError(f"{env}: the parameters set no {missing}; a training seed sets them")
    values = {key: flat[key] for key in TRAINING_SEED_KEYS}
    if len(set(values.values())) != 1:
        raise ConfigError(
            f"{env}: the parameters give the training seed's keys different values {values}; "
            "the plan's folder has no one training seed"
        )
    return next(iter(values.values()))


def data_folder(plan: StudyPlan, env: str, project: Path) -> tuple[str, str]:
    """The environment and the data tag of the plan's runs, whose data folder is their
    concatenation (``textcraft`` + ``-study``), resolved by the project's configuration loader as
    ``kedro run --env <env> --params <the plan's overrides>`` resolves them
    (:class:`~resail_pipeline.hooks.RunConfigLoader`)."""
    run = _loader(plan, env, project).run_values()
    return run["env"], run["data_tag"]


def resolved_params(plan: StudyPlan, env: str, project: Path) -> dict[str, Any]:
    """The parameters every run of the plan starts from, as dotted keys: the environment's with
    the plan's shared overrides (an experiment's own come on top of them)."""
    return flatten(_loader(plan, env, project)["parameters"])


def check_experiments(
    plan: StudyPlan, experiments: Sequence[Experiment], env: str, project: Path
) -> None:
    """Refuse, naming the experiment and the field, any of ``experiments`` whose run the run's
    own first check would refuse (:func:`~resail_pipeline.pipelines.parameters.check_parameters`
    of the environment's parameters with the plan's and the experiment's overrides): before the
    plan's first run, not hours into it (a misspelt key, a rate YAML read as a string)."""
    from resail_pipeline.pipelines.parameters import check_parameters

    for experiment in experiments:
        loader = _loader(plan, env, project, experiment.run_params(plan.params))
        try:
            check_parameters(loader["parameters"])
        except ConfigError as error:
            raise ConfigError(f"experiments: {experiment.name!r}: {error}") from None


def _loader(
    plan: StudyPlan, env: str, project: Path, params: Mapping[str, Any] | None = None
) -> Any:
    """The project's configuration loader for ``env`` with ``params`` (default: the plan's
    overrides), as ``kedro run --env <env> --params <them>`` builds it."""
    return CONFIG_LOADER_CLASS(
        str(project / "conf"),
        env=env,
        runtime_params=nest(flatten(plan.params if params is None else params)),
        **CONFIG_LOADER_ARGS,
    )
