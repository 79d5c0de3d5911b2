"""Rules-based summaries: both formats from the trajectory itself, accepted by the validator."""

from __future__ import annotations

import dataclasses

import pytest

from resail_pipeline.envs import make_env
from resail_pipeline.envs.planner import plan_from_observation
from resail_pipeline.experience.evidence import build_evidence_table
from resail_pipeline.experience.rules import (
    ENV_RULES,
    QUOTE_CHARS,
    EnvRules,
    env_rules,
    rules_summary,
)
from resail_pipeline.experience.validation import validate_summary

from ._episodes import (
    ALFWORLD_FAILURE,
    ALFWORLD_SUCCESS,
    EPISODES,
    TEXTCRAFT_FAILURE,
    TEXTCRAFT_PLAN,
    TEXTCRAFT_SUCCESS,
    Episode,
    play,
    tables,
)


def evidence_of(episode: Episode):
    return build_evidence_table(*tables(episode))[0]


def fields(text: str) -> dict[str, str]:
    """``Field -> value`` of a canonical summary."""
    return dict(line[2:].split(": ", 1) for line in text.splitlines()[1:])


def fixed_planner(evidence) -> list[str]:
    # planners get the evidence, with the full, uncapped initial observation
    assert evidence.initial_observation == TEXTCRAFT_FAILURE.initial
    return TEXTCRAFT_PLAN


@pytest.mark.parametrize("episode", EPISODES, ids=lambda e: f"{e.env}-{e.end_reason}")
def test_rules_summaries_pass_the_validator_with_the_copy_rule(episode):
    evidence = evidence_of(episode)
    planner = fixed_planner if episode.env == "textcraft" else None
    text = rules_summary(evidence, planner)
    verdict = validate_summary(text, evidence.outcome, evidence)
    assert verdict.accepted, verdict.reasons
    assert verdict.summary.text == text  # already canonical


def test_textcraft_success():
    got = fields(rules_summary(evidence_of(TEXTCRAFT_SUCCESS)))
    # accepted state-changing actions in order: no `inventory`, no rejected craft
    assert got["Minimal plan"] == ", then ".join(f"`{a}`" for a in TEXTCRAFT_PLAN)
    assert got["Critical actions"] == ", then ".join(f"`{a}`" for a in TEXTCRAFT_PLAN[1:])
    assert got["Checks"] == (
        "`craft 1 dark oak button using 1 dark oak planks` returned "
        '"Crafted 1 minecraft:dark_oak_button" and completed the task; 1 of 5 actions rejected'
    )
    assert got["Avoid"] == (
        "actions outside the minimal plan (1 rejected); information-only steps such as "
        "`inventory` (1 used), which change nothing"
    )


def test_textcraft_failure_with_a_plan():
    got = fields(rules_summary(evidence_of(TEXTCRAFT_FAILURE), fixed_planner))
    assert got["Failure diagnosis"] == (
        "the last rejected action, one outside the corrected plan, returned "
        '"Could not find enough items to craft minecraft:dark_oak_button"; '
        "the episode hit the step limit after 4 steps without success"
    )
    assert got["Useful evidence"] == (
        "`get 1 dark oak logs` were accepted and are progress toward the goal"
    )
    assert got["Corrected plan"] == ", then ".join(f"`{a}`" for a in TEXTCRAFT_PLAN)
    # counted, not quoted: the plan says what to do, and a quoted failure invites its repetition
    assert got["Avoid"] == "actions outside the corrected plan (3 rejected)"
    assert "1 planks`" not in rules_summary(evidence_of(TEXTCRAFT_FAILURE), fixed_planner)


def test_failure_without_a_plan_names_the_rejected_actions():
    got = fields(rules_summary(evidence_of(TEXTCRAFT_FAILURE), lambda _observation: None))
    assert got["Failure diagnosis"].startswith(
        "the last rejected action was `craft 1 dark oak button using 1 planks`, which returned "
    )
    assert got["Avoid"] == (
        "repeating the rejected `craft 1 dark oak button using 1 planks` (rejected 2 times), "
        "responses without an action"
    )


def test_useful_evidence_keeps_only_the_steps_of_the_corrected_plan():
    """An accepted craft the plan does not need, or a repeat beyond its count, is no progress."""
    plate = "craft 1 dark oak pressure plate using 2 dark oak planks"
    looping = dataclasses.replace(
        TEXTCRAFT_FAILURE,
        steps=(
            ("get 1 dark oak logs", True, "Got 1 dark oak logs"),
            (TEXTCRAFT_PLAN[1], True, "Crafted 4 minecraft:dark_oak_planks"),
            (plate, True, "Crafted 1 minecraft:dark_oak_pressure_plate"),
            ("get 1 dark oak logs", True, "Got 1 dark oak logs"),
            (
                plate,
                False,
                "Could not find enough items to craft minecraft:dark_oak_pressure_plate",
            ),
        ),
    )
    evidence = evidence_of(looping)
    text = rules_summary(evidence, fixed_planner)
    assert fields(text)["Useful evidence"] == (
        f"`{TEXTCRAFT_PLAN[0]}`, then `{TEXTCRAFT_PLAN[1]}` were accepted and are progress toward "
        "the goal"
    )
    assert validate_summary(text, evidence.outcome, evidence).accepted
    off_plan = dataclasses.replace(
        TEXTCRAFT_FAILURE, steps=((plate, True, "Crafted 1 minecraft:dark_oak_pressure_plate"),)
    )
    assert fields(rules_summary(evidence_of(off_plan), fixed_planner))["Useful evidence"] == (
        "no accepted action is a step of the corrected plan, so there is no progress to keep"
    )
    # without a plan, every accepted state-changing action is kept
    no_plan = fields(rules_summary(evidence, lambda _observation: None))
    assert no_plan["Useful evidence"].count("`") == 2 * 4


def test_avoid_does_not_contradict_the_plan():
    """A rejected step of the plan is named as one to take in its place, not as one to avoid."""
    button, plate = TEXTCRAFT_PLAN[2], "craft 1 dark oak pressure plate using 2 dark oak planks"
    missing = "Could not find enough items to craft minecraft:dark_oak_{}"
    early = (
        (button, False, missing.format("button")),
        (plate, False, missing.format("pressure_plate")),
        (button, False, missing.format("button")),
        ("get 1 dark oak logs", True, "Got 1 dark oak logs"),
        (TEXTCRAFT_PLAN[1], True, "Crafted 4 minecraft:dark_oak_planks"),
    )
    failure = dataclasses.replace(TEXTCRAFT_FAILURE, steps=early)
    evidence = evidence_of(failure)
    text = rules_summary(evidence, fixed_planner)
    got = fields(text)
    assert got["Avoid"] == (
        "actions outside the corrected plan (1 rejected); "
        f"`{button}` before the plan steps that precede it (rejected 2 times)"
    )
    # the last rejected action is a plan step, so the diagnosis quotes it
    assert got["Failure diagnosis"].startswith(f"the last rejected action was `{button}`, which ")
    assert validate_summary(text, evidence.outcome, evidence).accepted
    success = dataclasses.replace(
        TEXTCRAFT_SUCCESS, steps=(*early, (button, True, "Crafted 1 minecraft:dark_oak_button"))
    )
    evidence = evidence_of(success)
    text = rules_summary(evidence)
    assert fields(text)["Avoid"] == (
        f"actions outside the minimal plan (1 rejected); `{button}` before the plan steps that "
        "precede it"
    )
    assert validate_summary(text, evidence.outcome, evidence).accepted


def test_failure_without_a_plan_says_so():
    evidence = evidence_of(TEXTCRAFT_FAILURE)
    no_plan = fields(rules_summary(evidence, lambda _evidence: None))
    assert no_plan["Corrected plan"] == (
        "not derivable from the evidence: the planner found no plan for this task"
    )
    without = dataclasses.replace(env_rules("textcraft"), planner=None)
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(ENV_RULES, "textcraft", without)
        generic = fields(rules_summary(evidence))
    assert generic["Corrected plan"] == (
        "not derivable from the evidence: this environment has no planner"
    )


@pytest.fixture()
def generic_alfworld(monkeypatch):
    """ALFWorld under the generic rules (no summary builders of its own): an environment
    registered with its information actions only."""
    generic = EnvRules(information_actions=env_rules("alfworld").information_actions)
    monkeypatch.setitem(ENV_RULES, "alfworld", generic)


@pytest.mark.usefixtures("generic_alfworld")
def test_generic_success_uses_the_corrections_and_the_final_action_as_critical():
    got = fields(rules_summary(evidence_of(ALFWORLD_SUCCESS)))
    assert "`look`" not in got["Minimal plan"]
    assert got["Minimal plan"].startswith(
        "`go to countertop 1`, then `take mug 1 from countertop 1`"
    )
    # `go to sinkbasin 1` followed the rejected clean; the final move completed the task
    assert got["Critical actions"] == "`go to sinkbasin 1`, then `move mug 1 to coffeemachine 1`"


@pytest.mark.usefixtures("generic_alfworld")
def test_long_results_are_quoted_below_the_copy_limit():
    long = "You arrive at drawer 1. " + "On the drawer 1, you see a pen 1. " * 10
    steps = (*ALFWORLD_FAILURE.steps[:2], ("open drawer 1", False, long))
    evidence = evidence_of(dataclasses.replace(ALFWORLD_FAILURE, steps=steps))
    diagnosis = fields(rules_summary(evidence))["Failure diagnosis"]
    quoted = diagnosis.split('"')[1]
    assert len(quoted) == QUOTE_CHARS
    assert quoted.endswith("...")
    assert validate_summary(rules_summary(evidence), "failure", evidence).accepted


def test_unknown_environment_is_an_error():
    with pytest.raises(ValueError, match="env: unknown environment 'minigrid'"):
        env_rules("minigrid")


def test_real_textcraft_episodes_with_the_registered_planner():
    env = make_env("textcraft", max_steps=4)
    task_id = 0  # craft acacia boat
    plan = plan_from_observation(env.reset(task_id).text)
    failure = play(
        env, task_id, [plan[0], "craft 1 acacia boat using 5 acacia planks", None, "inventory"]
    )
    assert (failure.success, failure.end_reason) == (False, "step_limit")
    env = make_env("textcraft")
    success = play(env, task_id, [plan[0], "craft 1 acacia boat using 5 acacia planks", *plan[1:]])
    assert (success.success, success.end_reason) == (True, "success")

    for episode in (failure, success):
        evidence = evidence_of(episode)
        text = rules_summary(evidence)  # the planner registered for TextCraft
        assert validate_summary(text, evidence.outcome, evidence).accepted
    corrected = fields(rules_summary(evidence_of(failure)))["Corrected plan"]
    assert corrected == ", then ".join(f"`{a}`" for a in plan)
    # the corrected plan solves the task when executed
    replay = play(
        make_env("textcraft"), task_id, [a.strip("`") for a in corrected.split(", then ")]
    )
    assert replay.success
    assert fields(rules_summary(evidence_of(success)))["Minimal plan"] == ", then ".join(
        f"`{a}`" for a in plan
    )
