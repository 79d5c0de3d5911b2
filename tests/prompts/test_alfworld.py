"""ALFWorld prompts against appendix G, with the templates filled in by hand."""

from __future__ import annotations

from resail_pipeline.envs.base import Observation, StepResult
from resail_pipeline.prompts import EpisodeHistory, Summary, render_user_message

OPENING = (
    "-= Welcome to TextWorld, ALFRED! =-\n\n"
    "You are in the middle of a room. Looking quickly around you, you see a desk 1, and a shelf 1."
    "\n\nYour task is to: put a mug in shelf."
)
START = Observation(
    text=OPENING,
    task="put a mug in shelf.",
    admissible_actions=("go to desk 1", "go to shelf 1", "inventory", "look"),
)
AT_DESK = StepResult(
    observation="You arrive at desk 1. On the desk 1, you see a mug 1.",
    reward=0.0,
    done=False,
    success=False,
    action_valid=True,
    admissible_actions=("examine desk 1", "go to shelf 1", "take mug 1 from desk 1"),
)
HOLDING = StepResult(
    observation="You pick up the mug 1 from the desk 1.",
    reward=0.0,
    done=False,
    success=False,
    action_valid=True,
    admissible_actions=("go to shelf 1", "inventory"),
)
SUCCESS = Summary(
    "success",
    "Guidance summary:\n- Minimal plan: take the mug from the desk, move it to the shelf.\n"
    "- Critical actions: take mug 1 from desk 1\n- Checks: the mug is held\n- Avoid: help",
)
FAILURE = Summary(
    "failure",
    "Failure analysis:\n- Failure diagnosis: looked around\n- Useful evidence: a mug on desk 1\n"
    "- Corrected plan: go to desk 1, take mug 1\n- Avoid: look",
)

FIRST_STEP = """\
You are an expert agent operating in the ALFRED Embodied Environment.
Your current observation is: -= Welcome to TextWorld, ALFRED! =-

You are in the middle of a room. Looking quickly around you, you see a desk 1, and a shelf 1.

Your task is to: put a mug in shelf.
Your admissible actions of the current situation are: [
 'go to desk 1'
 'go to shelf 1'
 'inventory'
 'look'].

Now it's your turn to take an action.
You should first reason step-by-step about the current situation. This reasoning process MUST \
be enclosed within <thinking> </thinking> tags.
Once you've finished your reasoning, you should choose an admissible action for current step and \
present it within <action> </action> tags."""

LATER_STEP = """\
You are an expert agent operating in the ALFRED Embodied Environment. Your task is to: put a mug \
in shelf.
Prior to this step, you have already taken 2 step(s). Below are the most recent 2 observations \
and the corresponding actions you took: [Observation 1: '-= Welcome to TextWorld, ALFRED! =-

You are in the middle of a room. Looking quickly around you, you see a desk 1, and a shelf 1.

Your task is to: put a mug in shelf.', Action 1: 'go to desk 1'] [Observation 2: 'You arrive at \
desk 1. On the desk 1, you see a mug 1.', Action 2: 'take mug 1 from desk 1']
You are now at step 3 and your current observation is: You pick up the mug 1 from the desk 1.
Your admissible actions of the current situation are: [
 'go to shelf 1'
 'inventory'].

Now it's your turn to take an action.
You should first reason step-by-step about the current situation. This reasoning process MUST \
be enclosed within <thinking> </thinking> tags.
Once you've finished your reasoning, you should choose an admissible action for current step and \
present it within <action> </action> tags."""

SUCCESS_INSERT = """

A successful trajectory for the current task:

Guidance summary:
- Minimal plan: take the mug from the desk, move it to the shelf.
- Critical actions: take mug 1 from desk 1
- Checks: the mug is held
- Avoid: help

Use this information as a reference and continue solving the original task."""

FAILURE_INSERT = """

A failed trajectory for the current task:

Failure analysis:
- Failure diagnosis: looked around
- Useful evidence: a mug on desk 1
- Corrected plan: go to desk 1, take mug 1
- Avoid: look

Use this information as a reference and continue solving the original task."""


def _later() -> EpisodeHistory:
    history = EpisodeHistory.start("alfworld", START)
    return history.advance("go to desk 1", AT_DESK).advance("take mug 1 from desk 1", HOLDING)


def test_first_step_input_matches_appendix_g():
    history = EpisodeHistory.start("alfworld", START)
    assert render_user_message(history) == FIRST_STEP


def test_later_step_input_matches_appendix_g():
    assert render_user_message(_later()) == LATER_STEP


def test_privileged_views_append_the_outcome_matched_insert():
    first = EpisodeHistory.start("alfworld", START)
    assert render_user_message(first, SUCCESS) == FIRST_STEP + SUCCESS_INSERT
    assert render_user_message(first, FAILURE) == FIRST_STEP + FAILURE_INSERT
    assert render_user_message(_later(), SUCCESS) == LATER_STEP + SUCCESS_INSERT
    assert render_user_message(_later(), FAILURE) == LATER_STEP + FAILURE_INSERT


def test_an_unparsable_step_is_recorded_with_an_empty_action():
    nothing = StepResult("Nothing happens.", 0.0, False, False, False, START.admissible_actions)
    message = render_user_message(EpisodeHistory.start("alfworld", START).advance("", nothing))
    assert "Your task is to: put a mug in shelf.', Action 1: '']\n" in message
    assert "You are now at step 2 and your current observation is: Nothing happens.\n" in message
