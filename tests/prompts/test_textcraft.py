"""TextCraft prompts against appendix G, with the templates filled in by hand."""

from __future__ import annotations

from resail_pipeline.envs.base import Observation, StepResult
from resail_pipeline.prompts import EpisodeHistory, Summary, chat_prompt, render_user_message

COMMANDS = ("craft 4 oak planks using 1 oak logs", "craft 1 crafting table using 4 oak planks")
OPENING = "Crafting commands:\n" + "\n".join(COMMANDS) + "\n\nGoal: craft crafting table."
START = Observation(text=OPENING, task="craft crafting table", commands=COMMANDS)
GOT = StepResult(
    observation="Got 1 oak logs", reward=0.0, done=False, success=False, action_valid=True
)
CRAFTED = StepResult(
    observation="Crafted 4 minecraft:oak_planks",
    reward=0.0,
    done=False,
    success=False,
    action_valid=True,
)
SUCCESS = Summary(
    "success",
    "Guidance summary:\n- Minimal plan: `get 1 oak logs`\n- Critical actions: craft\n"
    "- Checks: planks\n- Avoid: nothing",
)
FAILURE = Summary(
    "failure",
    "Failure analysis:\n- Failure diagnosis: d\n- Useful evidence: e\n- Corrected plan: p\n"
    "- Avoid: a",
)

FIRST_STEP = """\
You are an expert agent operating in TextCraft, a text-only Minecraft crafting environment.
Your current observation is:
Crafting commands:
craft 4 oak planks using 1 oak logs
craft 1 crafting table using 4 oak planks

Goal: craft crafting table.

Valid actions are:
- get N item
- inventory
- craft N target item using N ingredient, N ingredient

Use only the crafting commands listed in the observation. Always include quantities for get and \
craft actions.
You should first reason step-by-step. This reasoning process MUST be enclosed within <thinking> \
</thinking> tags.
Then choose exactly one action and present it within <action> </action> tags."""

LATER_STEP = """\
You are an expert agent operating in TextCraft. Your goal is: craft crafting table
Prior to this step, you have already taken 2 step(s). Recent history: [Observation 1: 'Goal: \
craft crafting table.', Action 1: 'get 1 oak logs'] [Observation 2: 'Got 1 oak logs', Action 2: \
'craft 4 oak planks using 1 oak logs']
Available crafting commands for this episode:
craft 4 oak planks using 1 oak logs
craft 1 crafting table using 4 oak planks
Your current observation is:
Crafted 4 minecraft:oak_planks

Valid actions are: get N item, inventory, or craft N target item using N ingredient, N ingredient.
Use only the crafting commands listed above, in the observation, or already visible in the recent \
history.
You should first reason step-by-step within <thinking> </thinking> tags.
Then choose exactly one action within <action> </action> tags."""

SUCCESS_INSERT = """

A successful trajectory for the current task:

Guidance summary:
- Minimal plan: `get 1 oak logs`
- Critical actions: craft
- Checks: planks
- Avoid: nothing

Use this information as a reference and continue solving the original task."""

FAILURE_INSERT = """

A failed trajectory for the current task:

Failure analysis:
- Failure diagnosis: d
- Useful evidence: e
- Corrected plan: p
- Avoid: a

Use this information as a reference and continue solving the original task."""


def _later() -> EpisodeHistory:
    history = EpisodeHistory.start("textcraft", START)
    history = history.advance("get 1 oak logs", GOT)
    return history.advance("craft 4 oak planks using 1 oak logs", CRAFTED)


def test_first_step_both_views():
    history = EpisodeHistory.start("textcraft", START)
    assert render_user_message(history) == FIRST_STEP
    assert render_user_message(history, SUCCESS) == FIRST_STEP + SUCCESS_INSERT
    assert render_user_message(history, FAILURE) == FIRST_STEP + FAILURE_INSERT


def test_later_step_reinserts_the_commands_and_serialises_the_history():
    assert render_user_message(_later()) == LATER_STEP
    assert render_user_message(_later(), FAILURE) == LATER_STEP + FAILURE_INSERT


def test_later_step_without_commands_has_no_command_block():
    bare = Observation(text="Goal: craft crafting table.", task="craft crafting table")
    history = EpisodeHistory.start("textcraft", bare).advance("inventory", GOT)
    message = render_user_message(history)
    assert "Available crafting commands" not in message
    assert (
        "Recent history: [Observation 1: 'Goal: craft crafting table.', Action 1: 'inventory']\n"
        "Your current observation is:\nGot 1 oak logs\n" in message
    )


def test_the_chat_template_disables_thinking(tiny_tokenizer):
    text = chat_prompt(tiny_tokenizer, "hello")
    assert (
        text == "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )
