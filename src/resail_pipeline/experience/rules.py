"""Rules-based summaries (``source: rules``): the two appendix-G formats built from the trajectory.

For models too small to write prose, the summary is assembled from the evidence itself; it goes
through the same validator as a generated one.

An environment may register builders of its own (:class:`EnvRules` ``success`` and ``failure``):
ALFWorld's (:mod:`.alfworld_rules`) read the world the episode revealed and plan the next steps
from it. The generic rules below serve every environment that registers none; TextCraft uses them.
They invent nothing: every action named is an executed action, every quoted result is an
observation of the trajectory, and the corrected plan of a failure comes only from an environment
planner (:data:`Planner`, given the evidence) that computes it from what the trajectory shows
(TextCraft's: the initial observation's crafting commands). Every environment's information-only
actions (:class:`EnvRules`) are also read where the initial policy's tokenizer corpus varies the
summaries' forms (:mod:`resail_pipeline.bootstrap.vocabulary`).

Success ("Guidance summary"):

- Minimal plan: the *contributing* actions in order: accepted actions, without the environment's
  information-only actions (TextCraft ``inventory``), which change no state. Repeated accepted
  actions are kept: in TextCraft a repeated ``get`` adds to the count a later craft consumes.
- Critical actions: the environment's critical subset of the plan (TextCraft: the ``craft``
  actions, where recipe quantities matter; by default the actions that followed a rejected one,
  which corrected it, and the final action).
- Checks: the final action's result, which completed the task, and how many actions were rejected.
- Avoid: how many rejected actions fell outside the plan, and any information-only steps taken. A
  rejected action that the plan itself takes later (rejected before its ingredients were made, say)
  is named as one to take only after the plan steps that precede it: "avoid X" beside a plan that
  does X would contradict the plan.

Failure ("Failure analysis"):

- Failure diagnosis: the last rejected action and its result; if none was rejected, that all
  accepted actions did not reach the goal; with the end of the episode (step limit, ...).
- Useful evidence: the partial progress, told apart from the pattern that failed (appendix G asks
  for that): with a corrected plan, the contributing accepted actions that are steps of it, in
  order, each counted as often as the plan has it (an accepted craft of an item the plan does not
  need is no progress, nor is a repeat beyond the plan's count); without one, every contributing
  accepted action.
- Corrected plan: the environment planner's plan from the initial observation (TextCraft: goal and
  crafting commands); where there is no planner, or it finds no plan, the field says so.
- Avoid: with a corrected plan, how many rejected actions fell outside it; without one, the
  rejected actions (at most three), with how often each was repeated. A rejected step of the
  corrected plan is named as one to take only after the plan steps that precede it, as in a success.

Rejected actions outside a plan are counted, not quoted, in both formats (and the diagnosis names
the last one's result, not its text): the plan already says what to do, and a small policy copies a
quoted action from its context whatever the words around it say, so a quoted failure invites its
own repetition.

Quoted results are cut to :data:`QUOTE_CHARS`, below the validator's long-copy limit.
"""

from __future__ import annotations

import importlib
import itertools
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from resail_pipeline.envs import check_env_name
from resail_pipeline.experience import alfworld_rules
from resail_pipeline.experience.evidence import Evidence, EvidenceRecord, Planner, ending_text
from resail_pipeline.experience.validation import canonical_text
from resail_pipeline.prompts.common import OUTCOME_SUCCESS

#: Characters of an observation quoted in a rules-based summary.
QUOTE_CHARS = 100
#: Distinct rejected actions named in an "Avoid" field.
AVOID_ACTIONS = 3

#: An environment's own summary builder: (evidence, planner or ``None``) -> the four values of the
#: outcome's template, in order.
FieldBuilder = Callable[[Evidence, "Planner | None"], list[str]]


@dataclass(frozen=True)
class EnvRules:
    """What the rules-based extractor knows about one environment.

    Attributes:
        information_actions: exact actions that only report state (dropped from plans).
        critical: picks the critical actions from the plan; ``None`` uses the default rule.
        planner: ``"module:function"`` of a :data:`Planner`, imported on first use; ``None`` when
            the environment has no planner (the corrected plan then says so).
        success, failure: the environment's own builders of the two formats (:data:`FieldBuilder`);
            ``None`` uses the generic rules of this module.
    """

    information_actions: frozenset[str] = field(default_factory=frozenset)
    critical: Callable[[Sequence[EvidenceRecord], list[str]], list[str]] | None = None
    planner: str | None = None
    success: FieldBuilder | None = None
    failure: FieldBuilder | None = None


def _textcraft_critical(_records: Sequence[EvidenceRecord], plan: list[str]) -> list[str]:
    return [action for action in plan if action.startswith("craft ")]


def textcraft_plan(evidence: Evidence) -> Sequence[str] | None:
    """TextCraft's planner on the episode's initial observation (goal and crafting commands)."""
    from resail_pipeline.envs.planner import plan_from_observation

    return plan_from_observation(evidence.initial_observation)


#: env name -> its rules. ALFWorld's summaries are its own (:mod:`.alfworld_rules`): what the
#: episode saw and the steps that follow from it.
ENV_RULES: dict[str, EnvRules] = {
    "textcraft": EnvRules(
        information_actions=frozenset({"inventory"}),
        critical=_textcraft_critical,
        planner="resail_pipeline.experience.rules:textcraft_plan",
    ),
    "alfworld": EnvRules(
        information_actions=frozenset({"look", "inventory", "help"}),
        success=alfworld_rules.success_fields,
        failure=alfworld_rules.failure_fields,
    ),
}


def env_rules(env: str) -> EnvRules:
    """The rules of ``env``; an unregistered environment raises naming it."""
    check_env_name(env)
    try:
        return ENV_RULES[env]
    except KeyError:
        raise ValueError(f"env: no summary rules for {env!r}; add them to ENV_RULES") from None


def load_planner(rules: EnvRules) -> Planner | None:
    """The planner function named by ``rules.planner``, or ``None``."""
    if rules.planner is None:
        return None
    module_name, _, name = rules.planner.partition(":")
    return getattr(importlib.import_module(module_name), name)


def _q(action: str) -> str:
    return f"`{action}`"


def _quote(observation: str) -> str:
    text = (
        observation if len(observation) <= QUOTE_CHARS else observation[: QUOTE_CHARS - 3] + "..."
    )
    return f'"{text}"'


def _actions(actions: Sequence[str]) -> str:
    return ", then ".join(_q(a) for a in actions)


def _contributing(evidence: Evidence, rules: EnvRules) -> list[str]:
    """Accepted, state-changing actions in order (see the module docstring)."""
    return [
        r.action
        for r in evidence.records
        if r.valid and r.action and r.action not in rules.information_actions
    ]


def _on_plan(actions: Sequence[str], plan: Sequence[str]) -> list[str]:
    """``actions`` that are steps of ``plan``, in order, each kept at most as often as in ``plan``."""
    left = Counter(plan)
    kept = []
    for action in actions:
        if left[action] > 0:
            left[action] -= 1
            kept.append(action)
    return kept


def _rejected(evidence: Evidence) -> list[EvidenceRecord]:
    return [r for r in evidence.records if not r.valid]


def _default_critical(records: Sequence[EvidenceRecord], plan: list[str]) -> list[str]:
    """Accepted actions right after a rejected one (the corrections), and the final action."""
    picked = [
        b.action
        for a, b in itertools.pairwise(records)
        if not a.valid and b.valid and b.action in plan
    ]
    if plan and plan[-1] not in picked:
        picked.append(plan[-1])
    return picked


def _avoid_rejected(
    rejected: list[EvidenceRecord], plan: Sequence[str], plan_name: str, with_counts: bool
) -> str:
    """The "Avoid" clauses on the rejected actions; "" when nothing was rejected.

    A rejected action that is itself a step of ``plan`` is not to be avoided but taken in its
    place (it was rejected out of place, say before the steps that make its ingredients), and is
    named so: "avoid X" beside a plan that does X would contradict the plan (the first
    :data:`AVOID_ACTIONS` such steps). With a plan, the rejected actions outside it are counted, not
    quoted (see the module docstring); without one, the first :data:`AVOID_ACTIONS` distinct
    rejected actions are named.
    """

    def times(count: int) -> str:
        return f" (rejected {count} times)" if with_counts and count > 1 else ""

    counts = Counter(r.action for r in rejected)
    on_plan = {action: count for action, count in counts.items() if action and action in plan}
    early = [
        f"{_q(action)} before the plan steps that precede it{times(count)}"
        for action, count in list(on_plan.items())[:AVOID_ACTIONS]
    ]
    clauses = []
    if plan:
        outside = counts.total() - sum(on_plan.values())
        if outside:
            clauses.append(f"actions outside the {plan_name} ({outside} rejected)")
    elif counts:
        named = [
            (_q(action) if action else "responses without an action") + times(count)
            for action, count in list(counts.items())[:AVOID_ACTIONS]
        ]
        repeating = "repeating the rejected " if with_counts else "the rejected "
        clauses.append(repeating + ", ".join(named))
    return "; ".join(clauses + early)


def _information_steps(evidence: Evidence, rules: EnvRules) -> list[str]:
    return [r.action for r in evidence.records if r.valid and r.action in rules.information_actions]


def _success_fields(evidence: Evidence, rules: EnvRules) -> list[str]:
    """The four "Guidance summary" values, in template order."""
    plan = _contributing(evidence, rules)
    rejected = _rejected(evidence)
    pick = rules.critical or _default_critical
    critical = pick(evidence.records, plan) or plan[-1:]
    accepted = [r for r in evidence.records if r.valid and r.action]

    minimal = _actions(plan) if plan else "no state-changing action was recorded"
    crit = _actions(critical) if critical else "none beyond the plan"
    if accepted:
        final = accepted[-1]
        checks = f"{_q(final.action)} returned {_quote(final.observation)} and completed the task"
    else:
        checks = "the task was completed without an accepted action"
    checks += (
        f"; {len(rejected)} of {len(evidence.records)} actions rejected"
        if rejected
        else "; every action was accepted"
    )
    avoid_parts = []
    if rejected:
        avoid_parts.append(_avoid_rejected(rejected, plan, "minimal plan", with_counts=False))
    info = _information_steps(evidence, rules)
    if info:
        avoid_parts.append(
            f"information-only steps such as {_q(info[0])} ({len(info)} used), which change nothing"
        )
    avoid = "; ".join(avoid_parts) or "no action was rejected; steps beyond the plan are not needed"
    return [minimal, crit, checks, avoid]


def _failure_fields(evidence: Evidence, rules: EnvRules, planner: Planner | None) -> list[str]:
    """The four "Failure analysis" values, in template order."""
    rejected = _rejected(evidence)
    contributing = _contributing(evidence, rules)
    plan = planner(evidence) if planner is not None else None
    if rejected:
        last = rejected[-1]
        result = _quote(last.observation)
        if plan and last.action not in plan:  # counted, not quoted, as in "Avoid"
            diagnosis = (
                f"the last rejected action, one outside the corrected plan, returned {result}"
            )
        else:
            what = _q(last.action) if last.action else "a response without a parsable action"
            diagnosis = f"the last rejected action was {what}, which returned {result}"
    else:
        diagnosis = f"all {len(evidence.records)} actions were accepted but none completed the task"
    diagnosis += f"; {ending_text(evidence)} without success"

    progress = _on_plan(contributing, plan) if plan else contributing
    if progress:
        useful = f"{_actions(progress)} were accepted and are progress toward the goal"
    elif contributing:  # accepted, and none of it on the plan
        useful = (
            "no accepted action is a step of the corrected plan, so there is no progress to keep"
        )
    else:
        useful = "no state-changing action was accepted, so there is no partial progress to keep"
    if plan:
        corrected = _actions(plan)
    elif planner is None:
        corrected = "not derivable from the evidence: this environment has no planner"
    else:
        corrected = "not derivable from the evidence: the planner found no plan for this task"
    if rejected:
        avoid = _avoid_rejected(rejected, plan or (), "corrected plan", with_counts=True)
    else:
        avoid = "stopping at the accepted actions above; they did not finish the task"
    return [diagnosis, useful, corrected, avoid]


def rules_summary(evidence: Evidence, planner: Planner | None = None) -> str:
    """The canonical summary text of ``evidence`` built by the rules (see the module docstring).

    ``planner`` overrides the environment's registered planner (used for failures only).
    """
    rules = env_rules(evidence.env)
    if evidence.outcome == OUTCOME_SUCCESS:
        if rules.success is not None:
            return canonical_text(evidence.outcome, rules.success(evidence, planner))
        return canonical_text(evidence.outcome, _success_fields(evidence, rules))
    if planner is None:
        planner = load_planner(rules)
    if rules.failure is not None:
        return canonical_text(evidence.outcome, rules.failure(evidence, planner))
    return canonical_text(evidence.outcome, _failure_fields(evidence, rules, planner))
