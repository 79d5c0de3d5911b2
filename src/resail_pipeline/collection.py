"""Deployment-time collection: the current policy acts on a cycle's tasks, one trajectory each.

Task ids are drawn without replacement from the training split in one seeded order, and cycle
``r`` takes the ``r``-th block of ``num_trajectories`` ids of that order, so consecutive cycles
collect on fresh task ids while the split lasts; beyond it the order wraps around and tasks recur
with fresh trajectories (appendix A.2). Every episode is decoded in the ordinary view.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from resail_pipeline.envs import Environment
from resail_pipeline.generation.base import Generator, derive_seed
from resail_pipeline.rollout import (
    EpisodeSpec,
    RolloutSettings,
    episodes_to_frames,
    sample_tasks,
)


@dataclass(frozen=True)
class CollectConfig(RolloutSettings):
    """One cycle's collection, decoded as at deployment (appendix A.3)."""

    # the environment split tasks are drawn from
    split: str = "train"
    # trajectories (= tasks) per cycle; the trainer uses each once per cycle
    num_trajectories: int = 240

    def __post_init__(self) -> None:
        if isinstance(self.num_trajectories, bool) or int(self.num_trajectories) < 1:
            raise ValueError(
                f"num_trajectories: must be a positive integer, got {self.num_trajectories!r}"
            )
        super().__post_init__()


def cycle_tasks(task_ids: list[int], num: int, cycle: int, seed: int) -> list[int]:
    """The task ids of ``cycle`` (1-based): block ``cycle - 1`` of one seeded order of the split.

    Distinct within a cycle; disjoint from earlier cycles while ``cycle * num <= len(task_ids)``.
    """
    if cycle < 1:
        raise ValueError(f"cycle: collection cycles start at 1, got {cycle}")
    if num > len(task_ids):
        raise ValueError(f"num_trajectories: the split has {len(task_ids)} tasks, asked for {num}")
    order = sample_tasks(task_ids, len(task_ids), seed)
    start = (cycle - 1) * num
    return [order[(start + i) % len(order)] for i in range(num)]


def collect(
    make_env: Callable[[], Environment],
    generator: Generator,
    config: CollectConfig,
    *,
    cycle: int,
    method: str,
    seed: int,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Run one trajectory per task of ``cycle``; returns ``(tasks, trajectories, steps)``."""
    env = make_env()
    tasks = cycle_tasks(env.task_ids(config.split), config.num_trajectories, cycle, seed)
    specs = []
    for task_id in tasks:
        decoding_seed = derive_seed(seed, cycle, task_id)
        specs.append(
            EpisodeSpec(
                traj_id=f"cycle_{cycle}/{env.name}/{config.split}/{task_id}/{decoding_seed}",
                task_id=task_id,
                decoding_seed=decoding_seed,
            )
        )
    episodes = config.roll_out(make_env, specs, generator)
    trajectories, steps = episodes_to_frames(
        episodes, cycle=cycle, method=method, split=config.split
    )
    task_table = pd.DataFrame(
        {
            "env": env.name,
            "split": config.split,
            "task_id": tasks,
            "seed": [spec.decoding_seed for spec in specs],
        }
    )
    return task_table, trajectories, steps
