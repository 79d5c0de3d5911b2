"""Evidence of a trajectory: the appendix-G limits, the task snapshot, the prompt layout."""

from __future__ import annotations

import pandas as pd
import pytest

from resail_pipeline.experience.evidence import (
    ACTION_CHARS,
    OBSERVATION_CHARS,
    SNAPSHOT_LINE_CHARS,
    SNAPSHOT_LINES,
    build_evidence,
    build_evidence_table,
    cap,
    normalise,
    task_snapshot,
)
from resail_pipeline.schemas import SchemaError

from ._episodes import (
    ALFWORLD_SUCCESS,
    TEXTCRAFT_FAILURE,
    TEXTCRAFT_SUCCESS,
    Episode,
    tables,
)


def one_step(action: str, observation: str) -> Episode:
    return Episode(
        traj_id="c/textcraft/train/1/0",
        env="textcraft",
        task="craft stick",
        initial="Goal: craft stick.",
        success=False,
        end_reason="step_limit",
        steps=((action, True, observation),),
    )


def record_of(episode: Episode):
    trajectories, steps = tables(episode)
    return build_evidence_table(trajectories, steps)[0].records[0]


def test_the_limits_are_the_papers():
    assert (ACTION_CHARS, OBSERVATION_CHARS, SNAPSHOT_LINES, SNAPSHOT_LINE_CHARS) == (
        240,
        480,
        4,
        240,
    )


@pytest.mark.parametrize("delta", [-1, 0, 1])
def test_action_is_cut_at_240_characters(delta):
    action = "a" * (ACTION_CHARS + delta)
    record = record_of(one_step(action, "ok"))
    assert record.action == "a" * min(len(action), ACTION_CHARS)


@pytest.mark.parametrize("delta", [-1, 0, 1])
def test_observation_is_cut_at_480_characters(delta):
    observation = "o" * (OBSERVATION_CHARS + delta)
    record = record_of(one_step("inventory", observation))
    assert record.observation == "o" * min(len(observation), OBSERVATION_CHARS)


def test_limits_apply_after_whitespace_normalisation():
    # 239 letters and a newline run: normalised to 239 + " " + "b" = 241 characters, cut at 240
    action = "a" * 239 + "\n\n  b"
    assert normalise(action) == "a" * 239 + " b"
    assert cap(action, ACTION_CHARS) == "a" * 239 + " "
    assert len(cap(action, ACTION_CHARS)) == ACTION_CHARS


@pytest.mark.parametrize("delta", [-1, 0, 1])
def test_snapshot_lines_are_cut_at_240_characters(delta):
    line = "x" * (SNAPSHOT_LINE_CHARS + delta)
    snapshot = task_snapshot(f"{line}\nshort")
    assert snapshot == ("x" * min(len(line), SNAPSHOT_LINE_CHARS), "short")


@pytest.mark.parametrize("count", [SNAPSHOT_LINES - 1, SNAPSHOT_LINES, SNAPSHOT_LINES + 1])
def test_snapshot_keeps_at_most_four_non_empty_lines(count):
    lines = [f"line {i}" for i in range(count)]
    text = "\n\n   \n".join(lines)  # empty and blank lines between them do not count
    assert task_snapshot(text) == tuple(lines[:SNAPSHOT_LINES])


def test_snapshot_is_the_first_four_lines_as_printed():
    # appendix G: the first four non-empty lines in the environment's order (TextCraft prints the
    # goal after the command list, so it is not among them)
    assert task_snapshot(TEXTCRAFT_SUCCESS.initial) == (
        "Crafting commands:",
        "craft 1 dark oak fence gate using 4 stick, 2 dark oak planks",
        "craft 3 dark oak sign using 6 dark oak planks, 1 stick",
        "craft 4 dark oak stairs using 6 dark oak planks",
    )
    alfworld = task_snapshot(ALFWORLD_SUCCESS.initial)
    assert alfworld[0] == "-= Welcome to TextWorld, ALFRED! =-"
    assert alfworld[-1] == "Your task is to: put a clean mug in coffeemachine."
    assert len(alfworld) == 3  # the observation has three non-empty lines


def test_evidence_of_a_trajectory():
    trajectories, steps = tables(TEXTCRAFT_FAILURE)
    evidence = build_evidence(trajectories.iloc[0], steps.sample(frac=1, random_state=0))
    assert evidence.outcome == "failure"
    assert evidence.env == "textcraft"
    assert evidence.end_reason == "step_limit"
    assert evidence.initial_observation == TEXTCRAFT_FAILURE.initial
    assert [r.action for r in evidence.records] == [
        "get 1 dark oak logs",
        "craft 1 dark oak button using 1 planks",
        "",  # no action parsed
        "craft 1 dark oak button using 1 planks",
    ]
    assert [r.valid for r in evidence.records] == [True, False, False, False]
    assert evidence.records[0].observation == "Got 1 dark oak logs"


def test_prompt_is_laid_out_as_in_appendix_g():
    trajectories, steps = tables(TEXTCRAFT_SUCCESS)
    evidence = build_evidence_table(trajectories, steps)[0]
    prompt = evidence.prompt()
    assert prompt.startswith("You are writing concise guidance from one completed trajectory.\n")
    assert prompt.endswith(
        "Task snapshot:\n"
        "Crafting commands:\n"
        "craft 1 dark oak fence gate using 4 stick, 2 dark oak planks\n"
        "craft 3 dark oak sign using 6 dark oak planks, 1 stick\n"
        "craft 4 dark oak stairs using 6 dark oak planks\n"
        "\n"
        "Successful trajectory evidence:\n"
        "1. Action: `get 1 dark oak logs`\n"
        "   Result: Got 1 dark oak logs\n"
        "2. Action: `inventory`\n"
        "   Result: Inventory: [dark oak logs] (1)\n"
        "3. Action: `craft 1 dark oak button using 1 planks`\n"
        "   Result: Could not find enough items to craft minecraft:dark_oak_button\n"
        "4. Action: `craft 4 dark oak planks using 1 dark oak logs`\n"
        "   Result: Crafted 4 minecraft:dark_oak_planks\n"
        "5. Action: `craft 1 dark oak button using 1 dark oak planks`\n"
        "   Result: Crafted 1 minecraft:dark_oak_button"
    )
    failure = build_evidence_table(*tables(TEXTCRAFT_FAILURE))[0].prompt()
    assert "- Failure diagnosis: ...\n" in failure
    assert "\nUnsuccessful trajectory evidence:\n1. Action: `get 1 dark oak logs`\n" in failure


def test_missing_column_names_the_table_and_column():
    trajectories, steps = tables(TEXTCRAFT_SUCCESS)
    with pytest.raises(
        SchemaError, match=r"steps: steps table is missing column\(s\) \['next_observation'\]"
    ):
        build_evidence_table(trajectories, steps.drop(columns=["next_observation"]))
    with pytest.raises(SchemaError, match=r"trajectories: .*\['task'\]"):
        build_evidence_table(trajectories.drop(columns=["task"]), steps)


def test_incomplete_or_duplicated_trajectories_are_refused():
    trajectories, steps = tables(TEXTCRAFT_SUCCESS, TEXTCRAFT_FAILURE)
    with pytest.raises(
        ValueError, match=r"steps\.t: trajectory 'cycle_1/textcraft/train/328/0' is incomplete"
    ):
        build_evidence_table(trajectories, steps[steps["t"] != 2])
    with pytest.raises(ValueError, match=r"trajectories\.traj_id: duplicated"):
        build_evidence_table(pd.concat([trajectories, trajectories.iloc[:1]]), steps)
    with pytest.raises(ValueError, match=r"steps\.\(traj_id, t\): duplicated step t=0"):
        build_evidence_table(trajectories, pd.concat([steps, steps.iloc[:1]]))


def test_missing_values_read_as_empty_text():
    trajectories, steps = tables(TEXTCRAFT_FAILURE)
    steps.loc[0, "next_observation"] = pd.NA
    evidence = build_evidence_table(trajectories, steps)[0]
    assert evidence.records[0].observation == ""
