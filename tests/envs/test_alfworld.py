"""The ALFWorld adapter through the real engine, on the hand-written games in ``alfworld_data/``.

The fixture games (see ``alfworld_data/README.md``): train 0 "put a mug in shelf", train 1 "put a
cool tomato in countertop", id 100000 "put a clean plate in cabinet", id 100001 "put two pencil in
drawer", ood 200000 "look at book under the desklamp", ood 200001 "put a hot potato in
diningtable".
"""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("alfworld")

from resail_pipeline.envs import END_STEP_LIMIT, END_SUCCESS, Environment, make_env
from resail_pipeline.envs.alfworld import (
    _IDLE_ENGINES,
    HELP,
    MAX_STEPS,
    NOTHING_HAPPENS,
    TASK_ID_STRIDE,
    AlfWorldEnv,
    AlfWorldGameError,
    GameEngine,
    kept_translations,
    split_games,
    task_of,
)
from resail_pipeline.prompts import EpisodeHistory, render_user_message

pytestmark = pytest.mark.alfworld

FIXTURE_DATA = Path(__file__).parent / "alfworld_data"
ALL_IDS = [0, 1, 100_000, 100_001, 200_000, 200_001]
OPENING = (
    "-= Welcome to TextWorld, ALFRED! =-\n\n"
    "You are in the middle of a room. Looking quickly around you, you see a bed 1, a desk 1, "
    "a drawer 1, and a shelf 1.\n\n"
    "Your task is to: put a mug in shelf."
)


@pytest.fixture()
def env() -> AlfWorldEnv:
    return make_env("alfworld", data_path=FIXTURE_DATA)


def test_registry_builds_the_adapter(env):
    assert isinstance(env, AlfWorldEnv) and isinstance(env, Environment)
    assert (env.name, env.max_steps, MAX_STEPS) == ("alfworld", 30, 30)


def test_splits_and_task_ids(env):
    assert [env.task_ids(s) for s in ("train", "id", "ood")] == [[0, 1], ALL_IDS[2:4], ALL_IDS[4:]]
    assert env.game_file(100_001).parts[-4:-2] == (
        "valid_seen",
        "pick_two_obj_and_place-Pencil-None-Drawer",
    )
    assert env.game_file(200_000).parts[-4] == "valid_unseen"
    # A test set smaller than the split is a fixed sample; train is never cut.
    small = AlfWorldEnv(data_path=FIXTURE_DATA, test_size=1)
    assert small.task_ids("id") == AlfWorldEnv(data_path=FIXTURE_DATA, test_size=1).task_ids("id")
    assert len(small.task_ids("ood")) == 1 and small.task_ids("train") == [0, 1]
    with pytest.raises(ValueError, match="split: unknown ALFWorld split 'test'"):
        env.task_ids("test")
    for bad in (2, TASK_ID_STRIDE + 2, 5 * TASK_ID_STRIDE, -1, True, "0"):
        with pytest.raises(ValueError, match="task_id: "):
            env.reset(bad)
    # ALFWorld's own layout has no dev or clone games: their ids name the split that is missing
    for split, task_id in (("dev", 3 * TASK_ID_STRIDE), ("clone", 4 * TASK_ID_STRIDE)):
        with pytest.raises(FileNotFoundError, match=f"split '{split}': no games under"):
            env.reset(task_id)


def test_dev_and_clone_are_read_from_their_own_folders(tmp_path):
    """The generated set's dev and clone folders: dev is a fixed sample of ``test_size`` games,
    as id and ood are; clone, like train, is every game."""
    root = tmp_path / "data"
    shutil.copytree(FIXTURE_DATA / "json_2.1.1", root / "json_2.1.1")
    for split in ("dev", "clone"):
        shutil.copytree(FIXTURE_DATA / "json_2.1.1" / "train", root / "json_2.1.1" / split)
    env = AlfWorldEnv(data_path=root, test_size=1)
    assert env.task_ids("clone") == [400_000, 400_001]
    (dev,) = env.task_ids("dev")
    assert dev in (300_000, 300_001) and env.task_ids("train") == [0, 1]
    assert env.game_file(400_001).parts[-4:-2] == (
        "clone",
        "pick_cool_then_place_in_recep-Tomato-None-CounterTop",
    )
    assert env.game_file(300_000).parts[-4] == "dev"
    assert env.reset(400_000).task == "put a mug in shelf."
    env.close()


def test_reset_shows_the_real_opening_text_without_help(env):
    obs = env.reset(0)
    assert obs.text == OPENING
    assert obs.task == "put a mug in shelf."
    assert obs.admissible_actions == (
        "go to bed 1",
        "go to desk 1",
        "go to drawer 1",
        "go to shelf 1",
        "inventory",
        "look",
    )
    assert obs.commands == ()
    assert env.reset(1).task == "put a cool tomato in countertop."
    assert env.reset(0) == obs  # the same id is the same start


@pytest.mark.parametrize("task_id", ALL_IDS)
def test_the_walkthrough_wins_and_help_is_never_offered(env, task_id):
    walkthrough = env.walkthrough(task_id)
    obs = env.reset(task_id)
    assert HELP not in obs.admissible_actions
    offered = obs.admissible_actions
    for t, action in enumerate(walkthrough, start=1):
        assert action in offered
        result = env.step(action)
        assert result.action_valid and HELP not in result.admissible_actions
        assert result.done == (t == len(walkthrough))
        offered = result.admissible_actions
    assert (result.success, result.reward, result.end_reason) == (True, 1.0, END_SUCCESS)
    with pytest.raises(RuntimeError, match="episode is over"):
        env.step("look")


def test_the_step_limit_ends_an_episode(env):
    env.reset(100_000)
    results = [env.step("look") for _ in range(MAX_STEPS)]
    assert all(r.action_valid for r in results)
    assert [r.done for r in results] == [False] * (MAX_STEPS - 1) + [True]
    assert (results[-1].end_reason, results[-1].success, results[-1].reward) == (
        END_STEP_LIMIT,
        False,
        0.0,
    )


def test_unparsable_and_inadmissible_actions_consume_a_step(env):
    short = AlfWorldEnv(data_path=FIXTURE_DATA, max_steps=3)
    short.reset(0)
    unparsable = short.step(None)
    assert (unparsable.observation, unparsable.action_valid, unparsable.done) == (
        "Nothing happens.",
        False,
        False,
    )
    inadmissible = short.step("take mug 1 from desk 1")  # not at the desk yet
    assert (inadmissible.observation, inadmissible.action_valid) == ("Nothing happens.", False)
    helped = short.step(HELP)  # the engine answers, but it was never offered
    assert not helped.action_valid and helped.done and helped.end_reason == END_STEP_LIMIT
    assert "Available commands" in helped.observation


def test_an_offered_action_with_spaces_around_it_is_taken_and_valid(env):
    env.reset(0)
    arrived = env.step("  go to desk 1 ")  # the engine strips it; so does the record of validity
    assert arrived.action_valid and arrived.observation.startswith("You arrive at desk 1.")


def test_episodes_stepped_together_stay_independent():
    envs = [AlfWorldEnv(data_path=FIXTURE_DATA) for _ in ALL_IDS]
    plans = [list(e.walkthrough(t)) for e, t in zip(envs, ALL_IDS, strict=True)]
    for e, t in zip(envs, ALL_IDS, strict=True):
        e.reset(t)
    finished: dict[int, bool] = {}
    for t in range(max(len(p) for p in plans)):
        for k, (e, plan) in enumerate(zip(envs, plans, strict=True)):
            if t < len(plan):
                result = e.step(plan[t])
                assert result.action_valid, (ALL_IDS[k], plan[t], result.observation)
                if result.done:
                    finished[k] = result.success
    assert finished == dict.fromkeys(range(len(ALL_IDS)), True)


def test_engines_are_reused_by_later_episodes(env, monkeypatch):
    env.reset(0)
    env.close()  # hands its engine back
    built = []
    monkeypatch.setattr(GameEngine, "__init__", lambda *a, **k: built.append(1))
    fresh = AlfWorldEnv(data_path=FIXTURE_DATA)
    assert fresh.reset(1).task == "put a cool tomato in countertop."
    assert built == []


def test_a_game_is_translated_once_however_often_it_is_played(monkeypatch):
    """TextWorld translates a game's PDDL at every load and reset, twice (for play and for the
    planner); the translations are kept, and engines playing the same game at once share them."""
    monkeypatch.setattr(sys, "argv", ["translate.py", "domain", "task"])  # read at its import
    from fast_downward.translate import translate

    real = translate.pddl_to_sas
    translated = []
    monkeypatch.setattr(translate, "pddl_to_sas", lambda task: translated.append(1) or real(task))
    kept_translations().cache_clear()
    first, second = AlfWorldEnv(data_path=FIXTURE_DATA), AlfWorldEnv(data_path=FIXTURE_DATA)
    assert first.reset(0).text == second.reset(0).text == OPENING
    plan = first.walkthrough(0)
    played = [first.step(action) for action in plan]
    assert played[-1].success
    again = [second.step(action) for action in plan]  # untouched by the first one's play
    assert [r.observation for r in again] == [r.observation for r in played]
    assert all(r.action_valid for r in again) and again[-1].success
    assert len(translated) == 2  # 8 where every load and reset translates
    assert kept_translations().cache_info().hits == 6


def test_rendered_prompts_from_real_observations(env):
    obs = env.reset(0)
    history = EpisodeHistory.start("alfworld", obs)
    first = render_user_message(history)
    assert f"Your current observation is: {OPENING}\n" in first
    assert "'go to shelf 1'\n 'inventory'\n 'look']." in first and "'help'" not in first
    result = env.step("go to desk 1")
    later = render_user_message(history.advance("go to desk 1", result))
    assert later.startswith(
        "You are an expert agent operating in the ALFRED Embodied Environment. "
        "Your task is to: put a mug in shelf.\n"
        "Prior to this step, you have already taken 1 step(s). Below are the most recent 1 "
        f"observations and the corresponding actions you took: [Observation 1: '{OPENING}', "
        "Action 1: 'go to desk 1']\n"
        "You are now at step 2 and your current observation is: "
        "You arrive at desk 1. On the desk 1, you see a mug 1.\n"
    )
    assert "'take mug 1 from desk 1'" in later


def test_the_engine_keeps_sys_argv(env):
    argv = list(sys.argv)
    env.reset(200_001)
    assert sys.argv == argv


def _copy_game(task_id: int, root: Path, edit) -> AlfWorldEnv:
    """The fixture game ``task_id`` copied as the only train game under ``root``, its game data
    changed by ``edit``."""
    source = make_env("alfworld", data_path=FIXTURE_DATA).game_file(task_id).parent
    target = root / "json_2.1.1" / "train" / source.parent.name / source.name
    shutil.copytree(source, target)
    game = json.loads((target / "game.tw-pddl").read_text())
    edit(game)
    (target / "game.tw-pddl").write_text(json.dumps(game))
    return AlfWorldEnv(data_path=root)


def test_a_name_with_two_types_is_an_error_naming_the_game(tmp_path):
    def clash(game):  # DeskType declared as an object type too: Fast Downward calls exit()
        game["pddl_problem"] = game["pddl_problem"].replace(
            "MugType PencilType", "DeskType MugType PencilType"
        )

    broken = _copy_game(0, tmp_path, clash)
    with pytest.raises(
        AlfWorldGameError, match=r"game\.tw-pddl: the ALFWorld engine failed"
    ) as error:
        _reset_fails(broken)
    assert isinstance(error.value.__cause__, SystemExit)
    assert "duplicate object 'desktype'" in str(error.value)


def _reset_fails(env: AlfWorldEnv) -> None:
    """``env.reset(0)``, expected to raise; checks first that the failure ends the episode and
    hands the engine back to the pool (a process's engines are never freed)."""
    idle = len(_IDLE_ENGINES[env.expert])
    try:
        env.reset(0)
    finally:
        assert len(_IDLE_ENGINES[env.expert]) == max(idle, 1)  # taken (or made), then back
        with pytest.raises(RuntimeError, match="the episode is over"):
            env.step("look")


def test_a_game_won_before_any_action_is_refused(tmp_path):
    def already_on_shelf(game):
        game["pddl_problem"] = game["pddl_problem"].replace(
            "(inReceptacle Mug_bar_1 Desk_bar_1)", "(inReceptacle Mug_bar_1 Shelf_bar_1)"
        )

    with pytest.raises(AlfWorldGameError, match="already holds before any action"):
        _reset_fails(_copy_game(0, tmp_path, already_on_shelf))


def test_a_reset_refused_ends_the_episode_before_it():
    env = make_env("alfworld", data_path=FIXTURE_DATA)
    env.reset(0)
    with pytest.raises(ValueError, match="task_id: must be an integer"):
        env.reset(-1)
    with pytest.raises(RuntimeError, match="the episode is over"):
        env.step("look")
    assert env.reset(0).task == "put a mug in shelf."  # and the adapter plays on


def test_an_opening_without_a_task_is_an_error_naming_the_game():
    assert task_of(OPENING, Path("g/game.tw-pddl")) == "put a mug in shelf."
    with pytest.raises(AlfWorldGameError, match=r"g/game\.tw-pddl: the opening text has no"):
        task_of("-= Welcome to TextWorld, ALFRED! =-", Path("g/game.tw-pddl"))


def test_games_are_found_by_alfworld_itself(tmp_path):
    def unsolved(game):
        game["solvable"] = False

    env = _copy_game(0, tmp_path, unsolved)
    with pytest.raises(FileNotFoundError, match="no playable games"):
        env.task_ids("train")
    assert len(split_games(FIXTURE_DATA, "ood")) == 2


@pytest.mark.parametrize("task_id", ALL_IDS)
def test_the_expert_replans_after_a_wrong_move_and_its_plan_wins(task_id):
    expert = AlfWorldEnv(data_path=FIXTURE_DATA, expert=True)
    observation = expert.reset(task_id)
    first = expert.expert_plan
    assert first and first[0] in observation.admissible_actions
    detour = next(
        a for a in observation.admissible_actions if a.startswith("go to ") and a != first[0]
    )
    expert.step(detour)
    plan = expert.expert_plan
    assert plan and plan != first[1:]  # from where it stands now, not from the start
    for _ in range(len(plan)):
        result = expert.step(expert.expert_plan[0])
        assert result.action_valid
    assert result.end_reason == END_SUCCESS and expert.expert_plan == ()


class _FakeEngineState(dict):
    """A fake of the state TextWorld's engine returns (a mapping with ``feedback``), in a unit
    test of :class:`GameEngine`'s reading of it."""

    feedback = "You arrive at shelf 1."


def test_a_failed_replan_is_an_error_naming_the_game_not_a_win():
    """TextWorld answers a planner search that failed with no commands, which a game that is won
    also has: read as a plan, it would end an expert's episode as if won."""
    engine = GameEngine.__new__(GameEngine)  # its reading of a state only, no game loaded
    engine.expert, engine.game_file = True, Path("g/game.tw-pddl")
    won = engine._state(
        _FakeEngineState(won=True, admissible_commands=[], policy_commands=[]), None
    )
    assert won.won and won.expert_plan == ()
    state = _FakeEngineState(won=False, admissible_commands=["look"], policy_commands=["look"])
    assert engine._state(state, None).expert_plan == ("look",)
    with pytest.raises(AlfWorldGameError, match=r"g/game\.tw-pddl: the planner found no plan"):
        engine._state(_FakeEngineState(won=False, admissible_commands=[], policy_commands=[]), None)


@pytest.mark.parametrize("expert", [False, True])
def test_text_the_game_does_not_accept_is_answered_as_the_engine_answers_it(env, expert):
    engine = GameEngine(expert=expert)
    engine.load(env.game_file(0))
    start = engine.reset()
    asked = []
    real_step = engine._env.step
    engine._env.step = lambda command: asked.append(command) or real_step(command)
    unchanged = replace(start, feedback=NOTHING_HAPPENS, walkthrough=None)
    for text in ("take mug 1 from desk 1", "", "jump over the bed", "go to desk 1 "):
        if text.strip() in start.admissible_commands:
            continue
        assert engine.step(text) == unchanged
    assert asked == []  # answered without the engine
    state, _, _ = real_step("take mug 1 from desk 1")  # the engine's own answer, the same
    assert engine._state(state, None) == unchanged
    moved = engine.step("go to desk 1 ")  # what it accepts still reaches it, stripped as it strips
    assert asked == ["go to desk 1 "] and moved.feedback != NOTHING_HAPPENS
    assert engine.step("go to desk 1").admissible_commands == moved.admissible_commands
    assert engine.step("take mug 1 from desk 1").feedback != NOTHING_HAPPENS


def test_an_engine_steps_only_a_started_game(env):
    engine = GameEngine()
    with pytest.raises(RuntimeError, match="reset"):
        engine.step("look")
    engine.load(env.game_file(0))
    with pytest.raises(RuntimeError, match="reset"):
        engine.step("look")


def test_the_expert_is_asked_of_an_environment_built_for_it(env):
    with pytest.raises(RuntimeError, match="expert=True"):
        _ = env.expert_plan
    expert = AlfWorldEnv(data_path=FIXTURE_DATA, expert=True)
    with pytest.raises(RuntimeError, match="no episode has started"):
        _ = expert.expert_plan
    env.reset(0)
    env.close()  # an engine without the expert goes back to its own pool
    expert.reset(0)
    assert expert.expert_plan
