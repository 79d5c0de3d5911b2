"""What ALFWorld's text reveals: task sentences, the room, the world, and the searching plan."""

from __future__ import annotations

from pathlib import Path

import pytest

from resail_pipeline.envs import make_env
from resail_pipeline.envs.alfworld_world import (
    World,
    parse_task,
    room_receptacles,
    search_plan,
    searchable,
    task_sentence,
)

FIXTURE_DATA = Path(__file__).parent / "alfworld_data"
OPENING = (
    "-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room. Looking quickly "
    "around you, you see a cabinet 1, a coffeemachine 1, a countertop 1, a sinkbasin 1, and a "
    "toaster 1.\n\nYour task is to: put a clean mug in coffeemachine."
)


@pytest.mark.parametrize(
    ("sentence", "task"),
    [
        ("put a mug in shelf.", ("place", "mug", "shelf")),
        ("put some spraybottle on toilet", ("place", "spraybottle", "toilet")),
        ("look at alarmclock under the desklamp.", ("look", "alarmclock", "desklamp")),
        ("examine the cd with the desklamp", ("look", "cd", "desklamp")),
        ("put a clean plate in cabinet.", ("clean", "plate", "cabinet")),
        ("clean some apple and put it in fridge.", ("clean", "apple", "fridge")),
        ("put a hot potato in diningtable.", ("heat", "potato", "diningtable")),
        ("heat some egg and put it in garbagecan", ("heat", "egg", "garbagecan")),
        ("put a cool tomato in countertop.", ("cool", "tomato", "countertop")),
        ("cool some pan and put it in stoveburner.", ("cool", "pan", "stoveburner")),
        ("put two pencil in drawer.", ("two", "pencil", "drawer")),
        ("find two book and put them in sofa.", ("two", "book", "sofa")),
    ],
)
def test_every_goal_template_is_read(sentence, task):
    got = parse_task(sentence)
    assert (got.kind, got.obj, got.recep) == task


def test_an_unknown_sentence_is_none():
    assert parse_task("bake a cake") is None


@pytest.mark.parametrize(
    ("text", "sentence"),
    [
        (OPENING, "put a clean mug in coffeemachine."),
        (OPENING + "\nHello!", "put a clean mug in coffeemachine."),
        ("Your task is to: \nlook around", ""),  # the task's own line is empty
        ("You are in the middle of a room.", ""),
    ],
)
def test_the_task_sentence_is_the_rest_of_its_line(text, sentence):
    assert task_sentence(text) == sentence


def test_the_world_follows_the_results():
    world = World(room_receptacles(OPENING))
    assert world.receptacles == [
        "cabinet 1", "coffeemachine 1", "countertop 1", "sinkbasin 1", "toaster 1"
    ]  # fmt: skip
    for observation in (
        "You arrive at cabinet 1. The cabinet 1 is closed.",
        "You open the cabinet 1. The cabinet 1 is open. In it, you see a cup 1, and a mug 2.",
        "You arrive at countertop 1. On the countertop 1, you see a mug 1, a apple 1, and a pen 3.",
        "You pick up the mug 1 from the countertop 1.",
        "You clean the mug 1 using the sinkbasin 1.",
        "You move the mug 1 to the coffeemachine 1.",
    ):
        world.observe(observation)
    assert world.seen_at == {
        "cup 1": "cabinet 1", "mug 2": "cabinet 1",
        "mug 1": "countertop 1", "apple 1": "countertop 1", "pen 3": "countertop 1",
    }  # fmt: skip
    assert world.opened == {"cabinet 1"} and not world.closed
    assert world.contents["countertop 1"] == ["apple 1", "pen 3"]
    assert world.treated == {"mug 1": {"clean": "sinkbasin 1"}}
    assert world.placed == {"mug 1": "coffeemachine 1"} and world.holding is None
    assert world.at == "countertop 1"


def test_the_search_goes_through_the_unsearched_receptacles_that_can_hold_the_object():
    task = parse_task("put a clean mug in coffeemachine.")
    world = World(room_receptacles(OPENING))
    assert searchable(world, "mug", exclude="coffeemachine") == [
        "cabinet 1", "countertop 1", "sinkbasin 1"
    ]  # fmt: skip
    assert search_plan(task, world) == ["go to cabinet 1"]
    world.observe("You arrive at cabinet 1. The cabinet 1 is closed.")
    assert search_plan(task, world) == ["open cabinet 1"]
    world.observe("You open the cabinet 1. The cabinet 1 is open. In it, you see a cup 1.")
    assert search_plan(task, world) == ["go to countertop 1"]
    world.observe("You arrive at countertop 1. On the countertop 1, you see a mug 1.")
    assert search_plan(task, world) == [
        "take mug 1 from countertop 1",
        "go to sinkbasin 1",
        "clean mug 1 with sinkbasin 1",
        "go to coffeemachine 1",
        "move mug 1 to coffeemachine 1",
    ]
    world.observe("You arrive at toaster 1. On the toaster 1, you see a apple 1.")
    world.observe("You pick up the apple 1 from the toaster 1.")  # a mistake: not the task's
    assert search_plan(task, world)[:3] == [
        "move apple 1 to toaster 1",
        "go to countertop 1",
        "take mug 1 from countertop 1",
    ]


@pytest.mark.alfworld
@pytest.mark.parametrize("task_id", [0, 1, 100_000, 100_001, 200_000, 200_001])
def test_the_searching_plan_wins_every_fixture_game(task_id):
    env = make_env("alfworld", data_path=FIXTURE_DATA)
    opening = env.reset(task_id)
    task, world = parse_task(opening.task), World(room_receptacles(opening.text))
    for _ in range(30):
        action = search_plan(task, world)[0]
        result = env.step(action)
        assert result.action_valid, (action, result.observation)
        world.observe(result.observation)
        if result.done:
            break
    assert result.success
    assert search_plan(task, world) == []
