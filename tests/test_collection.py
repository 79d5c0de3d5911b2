"""Collection: the cycle's tasks and one trajectory per task on the real TextCraft adapter."""

from __future__ import annotations

from collections import Counter

import pytest

from resail_pipeline.collection import CollectConfig, collect, cycle_tasks, episode_specs
from resail_pipeline.envs import make_env
from resail_pipeline.generation.base import derive_seed
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
        cycle_tasks(ids, 0, 1, seed=3)


def test_a_budget_above_the_split_repeats_tasks_evenly_with_distinct_ids_and_seeds():
    train = make_env("textcraft").task_ids("train")
    assert len(train) == 219
    for cycle in (1, 2, 3):
        tasks = cycle_tasks(train, 240, cycle, seed=0)  # table 4: 30 updates x 8 trajectories
        uses = Counter(tasks)
        assert set(uses) == set(train)  # every task at least once
        assert sorted(Counter(uses.values()).items()) == [(1, 198), (2, 21)]
        specs = episode_specs(tasks, cycle=cycle, seed=0, env="textcraft", split="train")
        assert [s.task_id for s in specs] == tasks
        assert len({s.traj_id for s in specs}) == len({s.decoding_seed for s in specs}) == 240
    # a task's first run keeps the seed it had before repeats existed
    first = episode_specs([5, 7, 5], cycle=1, seed=0, env="textcraft", split="train")
    assert first[0].decoding_seed == derive_seed(0, 1, 5) != first[2].decoding_seed
    assert first[2].decoding_seed == derive_seed(0, 1, 5, 1)


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
