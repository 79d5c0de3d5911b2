"""Copying drills: the crafting commands taken out of a rendered message, nothing else."""

from __future__ import annotations

from resail_pipeline.bootstrap.drills import without_crafting_commands
from resail_pipeline.envs import make_env
from resail_pipeline.prompts import EpisodeHistory, Turn, render_user_message


def _histories():
    env = make_env("textcraft")
    initial = env.reset(env.task_ids("train")[0])
    first = EpisodeHistory.start(env.name, initial)
    later = EpisodeHistory(
        env=env.name,
        initial=initial,
        turns=(Turn(initial.text, "inventory"),),
        current_observation="Inventory: You are not carrying anything.",
    )
    return initial, first, later


def test_the_first_steps_command_list_goes_with_its_header():
    initial, first, _ = _histories()
    message = render_user_message(first)
    drilled = without_crafting_commands(message)
    assert initial.commands and all(c in message for c in initial.commands)
    assert not any(c in drilled for c in initial.commands)
    assert "Crafting commands:" not in drilled
    # everything else stays, in order: the message minus the list's lines
    kept = [line for line in message.split("\n") if line not in initial.commands]
    kept.remove("Crafting commands:")
    assert drilled.split("\n") == kept
    assert f"Goal: {initial.task}." in drilled


def test_a_later_steps_command_block_goes_and_the_history_stays():
    initial, _, later = _histories()
    message = render_user_message(later)
    drilled = without_crafting_commands(message)
    assert "Available crafting commands for this episode:" in message
    assert "Available crafting commands for this episode:" not in drilled
    assert not any(c in drilled for c in initial.commands)
    assert "Action 1: 'inventory'" in drilled
    assert drilled.endswith(message.split("Your current observation is:")[1])


def test_a_text_without_a_command_list_is_unchanged():
    text = "- Corrected plan: `get 1 oak logs`, then `craft 4 oak planks using 1 oak logs`"
    assert without_crafting_commands(text) == text
    assert without_crafting_commands("") == ""
