"""Collection: the cycle's tasks and one trajectory per task on the real TextCraft adapter."""

from __future__ import annotations

import pytest

from resail_pipeline.collection import CollectConfig, collect, cycle_tasks
from resail_pipeline.envs import make_env
from resail_pipeline.generation.transformers_backend import TransformersGenerator
from resail_pipeline.schemas import check_columns


def test_cycles_take_fresh_tasks_until_the_split_is_used_up():
    ids = list(range(10))
    first, second = cycle_tasks(ids, 4, 1, seed=3), cycle_tasks(ids, 4, 2, seed=3)
    assert len(set(first)) == 4 and set(first).isdisjoint(second)
    third = cycle_tasks(ids, 4, 3, seed=3)  # 12 > 10: the order wraps around
    assert len(set(third)) == 4 and set(third) & set(first)
    assert cycle_tasks(ids, 4, 1, seed=3) == first
    assert cycle_tasks(ids, 4, 1, seed=4) != first
    with pytest.raises(ValueError, match="cycle"):
        cycle_tasks(ids, 4, 0, seed=3)
    with pytest.raises(ValueError, match="num_trajectories"):
        cycle_tasks(ids, 11, 1, seed=3)


def test_config_is_checked():
    with pytest.raises(ValueError, match="num_trajectories"):
        CollectConfig(num_trajectories=0)
    with pytest.raises(ValueError, match="top_p"):
        CollectConfig(top_p=0.0)


def test_collect_writes_the_contracts(tiny_model, tiny_tokenizer):
    generator = TransformersGenerator(
        tiny_model, tiny_tokenizer, policy_id="tiny@0", progress=False
    )
    config = CollectConfig(num_trajectories=3, max_new_tokens=4)
    tasks, trajectories, steps = collect(
        lambda: make_env("textcraft", max_steps=2),
        generator,
        config,
        cycle=2,
        method="oel",
        seed=0,
    )
    check_columns(tasks, "tasks")
    check_columns(trajectories, "trajectories")
    check_columns(steps, "steps")
    train = set(make_env("textcraft").task_ids("train"))
    assert list(trajectories["task_id"]) == list(tasks["task_id"])
    assert set(tasks["task_id"]) <= train
    assert (trajectories["cycle"] == 2).all() and (trajectories["method"] == "oel").all()
    assert all(t.startswith("cycle_2/textcraft/train/") for t in trajectories["traj_id"])
    assert len(steps) == trajectories["num_steps"].sum() == 6
    assert (trajectories["policy_id"] == "tiny@0").all()
