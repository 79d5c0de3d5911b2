"""The rule a plan pre-registers: its choice among the candidates once they are evaluated, and
the table of every candidate written beside the report, with cycle 0's privileged lead where cycle
0 was evaluated in both views (the teacher's half of the premise)."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from resail_pipeline.config import ConfigError, flatten
from resail_pipeline.io import atomic_path, read_json
from resail_pipeline.pipelines.common import SHARED_FOLDER
from resail_pipeline.schemas import VIEW_ORDINARY
from resail_pipeline.study.cells import evaluated
from resail_pipeline.study.plan import StudyPlan, data_folder, load_plan

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RuleOutcome:
    """What a plan's rule found: every candidate's differences, the choice, whether the choice
    met the rule's aim (``largest_gain``: a gain; ``largest_harmless``: no harm), whether any
    candidate gained, and cycle 0's privileged lead."""

    # one row per candidate, split and view: difference, low, high (points), tasks, gained, lost,
    # sign_p, harmless, gain
    table: pd.DataFrame
    chosen: float | None
    met: bool
    # whether a candidate's first cycle gains in the ordinary view (interval above 0, every split)
    gained: bool
    # one row per split cycle 0 evaluated in both views on two tasks or more: tasks, difference,
    # low, high (points), gained, lost, sign_p
    lead: pd.DataFrame

    @property
    def premise(self) -> bool | None:
        """Whether the paper's premise holds: cycle 0's privileged view leads its ordinary view
        on every split with a paired interval above zero (the teacher knows more), and a
        candidate's first cycle gains in the ordinary view (a first cycle teaches), whatever the
        rule chose; ``None`` where cycle 0 has no split with both views on two tasks or more."""
        if self.lead.empty:
            return None
        return bool((self.lead["low"] > 0).all()) and self.gained


def unevaluated(plan: StudyPlan, outputs: Path) -> list[Path]:
    """The cycles' folders under ``outputs`` (the data folder's model outputs) whose evaluations
    ``plan``'s rule reads and which are not :func:`~resail_pipeline.study.cells.evaluated`:
    cycle 0's, then each candidate's cycle 1, in plan order."""
    needed = [outputs / SHARED_FOLDER / "cycle_0"]
    needed += [outputs / e.name / "cycle_1" for e, _ in plan.candidates()]
    return [folder for folder in needed if not evaluated(folder)]


def apply_rule(plan: StudyPlan, outputs: Path) -> RuleOutcome:
    """Every candidate's cycle-1 paired difference from cycle 0, and the rule's choice.

    Args:
        plan: a plan with a rule.
        outputs: the data folder's model outputs (``data/07_model_output/<env><data_tag>``).

    Returns:
        One row per candidate, split and view (``difference``, ``low``, ``high`` in percentage
        points, ``tasks``, ``harmless``: upper bound >= 0, ``gain``: lower bound > 0), the chosen
        value (``None`` when no candidate is harmless), whether it met the rule's aim, and cycle
        0's privileged lead per split (points).
    """
    from resail_pipeline.evaluation.stats import paired_difference, privileged_lead

    if plan.rule is None:
        raise ValueError("plan: has no rule")
    baseline = pd.read_parquet(outputs / SHARED_FOLDER / "cycle_0" / "eval_results.parquet")
    rows = []
    for experiment, value in plan.candidates():
        results = pd.read_parquet(outputs / experiment.name / "cycle_1" / "eval_results.parquet")
        for (split, view), group in results.groupby(["split", "view"], sort=True):
            base = baseline[(baseline["split"] == split) & (baseline["view"] == view)]
            where = f"{experiment.name}, {split}, {view} view"
            try:
                d = paired_difference(group, base)
            except ValueError as error:  # "results" is the candidate, "baseline" cycle 0
                raise ValueError(f"{where}: {error}") from None
            if d["tasks"] < 2:  # no interval over tasks: neither harmless nor harmful
                raise ValueError(f"{where}: one task; the rule's interval needs at least two")
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
                    "gained": d["gained"],
                    "lost": d["lost"],
                    "sign_p": d["sign_p"],
                    "harmless": d["high"] >= 0,
                    "gain": d["low"] > 0,
                }
            )
    table = pd.DataFrame(rows)
    lead = privileged_lead(baseline)
    lead[["difference", "low", "high"]] *= 100
    by_value = table.groupby(plan.rule.parameter)
    harmless = by_value["harmless"].all()
    largest_harmless = float(harmless[harmless].index.max()) if harmless.any() else None
    ordinary = table[table["view"] == VIEW_ORDINARY].groupby(plan.rule.parameter)
    gains = ordinary["difference"].mean()[ordinary["gain"].all()]
    gained = not gains.empty
    if plan.rule.choose == "largest_harmless":
        return RuleOutcome(table, largest_harmless, largest_harmless is not None, gained, lead)
    if ordinary.ngroups == 0:
        raise ValueError("largest_gain: the candidates were not evaluated in the ordinary view")
    if gains.empty:
        return RuleOutcome(table, largest_harmless, False, gained, lead)
    return RuleOutcome(table, float(gains.idxmax()), True, gained, lead)


def write_rule(plan: StudyPlan, outputs: Path, reporting: Path) -> RuleOutcome:
    """Apply the plan's rule; write every candidate and the choice to ``reporting/rule.md``, and
    where cycle 0 was evaluated in both views, its privileged lead and whether the premise
    holds."""
    from resail_pipeline.evaluation.report import table_to_markdown

    outcome = apply_rule(plan, outputs)
    table, chosen, rule = outcome.table, outcome.chosen, plan.rule
    # the candidates' values as written (a learning rate is not a one-decimal figure), and the
    # sign test's p to three decimals
    shown = table.assign(
        **{rule.parameter: table[rule.parameter].map(lambda v: f"{v:g}")},
        sign_p=table["sign_p"].map(lambda p: f"{p:.3f}"),
    )
    lead = outcome.lead.assign(sign_p=outcome.lead["sign_p"].map(lambda p: f"{p:.3f}"))
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
        "over tasks; harmless: upper bound >= 0; gain: lower bound > 0. Beside them, not part of "
        "the rule: the tasks gained and lost and the exact sign test over those (sign_p).\n\n"
        f"{table_to_markdown(shown, float_format='.1f')}\n\n{verdict}\n"
    )
    if outcome.premise is not None:
        teaches = "a first cycle gains" if outcome.gained else "no first cycle gains"
        leads = "leads" if (outcome.lead["low"] > 0).all() else "does not lead on every split"
        text += (
            "\n## Cycle 0's privileged lead\n\n"
            "Privileged-view success minus ordinary-view success at cycle 0 in percentage points, "
            "paired by task and decoding seed, 95% bootstrap interval over tasks; the tasks "
            "gained and lost, and their sign test.\n\n"
            f"{table_to_markdown(lead, float_format='.1f')}\n\n"
            f"premise {'holds' if outcome.premise else 'unmet'}: the privileged view {leads} "
            f"with an interval above zero, and {teaches}\n"
        )
        logger.info("study: premise %s", "holds" if outcome.premise else "unmet")
    reporting.mkdir(parents=True, exist_ok=True)
    with atomic_path(reporting / "rule.md") as tmp:
        Path(tmp).write_text(text)
    logger.info("study: %s", verdict)
    return outcome


#: The file, in the reporting folder of a plan with ``chosen_by``, that records the choice it ran at
CHOICE_RECORD = "chosen_by.json"


def with_choice(plan: StudyPlan, env: str, project: Path) -> StudyPlan:
    """``plan`` with the choice of the plan ``plan.chosen_by`` names: that plan's rule applied to
    its candidates' evaluations (in its own data folder), its value set for the rule's parameter
    among ``plan``'s shared overrides, so that a grid runs at the rate a pre-registered check
    chose, with no hand in between. A plan without ``chosen_by`` is returned as it is.

    The first choice is recorded (:data:`CHOICE_RECORD` in the plan's reporting folder); a grid
    run over several sittings continues only while the rule chooses the same value.

    Raises:
        ConfigError: the plan sets the parameter itself; the chooser has no rule, cycle 0 or a
            candidate not yet evaluated (naming its file), or chose nothing (no candidate
            harmless); the rule now chooses other than the recorded choice.
    """
    if plan.chosen_by is None:
        return plan
    name = Path(plan.chosen_by).name
    chooser = load_plan(plan.chosen_by)
    if chooser.rule is None:
        raise ConfigError(f"chosen_by: {name} has no rule")
    parameter = chooser.rule.parameter
    overrides = [flatten(plan.params)] + [flatten(e.params) for e in plan.experiments]
    if any(parameter in params for params in overrides):
        raise ConfigError(f"chosen_by: {name} chooses {parameter}, which the plan also sets")
    outputs = project / "data" / "07_model_output" / "".join(data_folder(chooser, env, project))
    missing = unevaluated(chooser, outputs)
    if missing:
        what = "cycle 0 is" if missing[0].name == "cycle_0" else "candidates are"
        raise ConfigError(
            f"chosen_by: {missing[0]}: no evaluation there; {name}'s {what} not evaluated"
        )
    try:
        outcome = apply_rule(chooser, outputs)
    except ValueError as error:  # evaluations the rule cannot compare (e.g. not paired)
        raise ConfigError(f"chosen_by: {name}'s rule: {error}") from None
    if outcome.chosen is None:
        raise ConfigError(f"chosen_by: {name}'s rule chose nothing (no candidate is harmless)")
    choice = {"chosen_by": name, "parameter": parameter, "value": outcome.chosen}
    reporting = project / "data" / "08_reporting" / "".join(data_folder(plan, env, project))
    record = reporting / CHOICE_RECORD
    if record.is_file():
        try:
            kept = read_json(record)
        except ValueError as error:
            raise ConfigError(f"chosen_by: {error}") from None
        if kept != choice:
            raise ConfigError(
                f"chosen_by: {record} records {kept['parameter']} = {kept['value']:g}, which the "
                f"plan's runs so far used; {name}'s rule now chooses {parameter} = "
                f"{outcome.chosen:g} (its candidates' evaluations changed?)"
            )
    else:
        record.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(record) as tmp:
            Path(tmp).write_text(json.dumps(choice, indent=2) + "\n")
    logger.info("study: %s = %g, chosen by %s's rule", parameter, outcome.chosen, name)
    return plan.replace(params={**plan.params, parameter: outcome.chosen})
