"""Deployment-time collection: the current policy acts on a cycle's tasks, one trajectory each.

Task ids are drawn without replacement from the training split in one seeded order, and cycle
``r`` takes the ``r``-th block of ``num_trajectories`` ids of that order, so consecutive cycles
collect on fresh task ids while the split lasts; beyond it the order wraps around and tasks recur
with fresh trajectories (appendix A.2). A cycle may ask for more trajectories than the split has
tasks (table 4's TextCraft row: 240 from 219): the order then wraps within the cycle, so every
task is used as evenly as possible (each ``floor`` or ``ceil`` of ``num / len(split)`` times),
and each repeat of a task is its own trajectory, with its own id and decoding seed. Every episode
is decoded in the ordinary view.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import pandas as pd

from resail_pipeline.config import ConfigError, Field, check_int, flatten
from resail_pipeline.envs import Environment
from resail_pipeline.generation.base import Generator, derive_seed
from resail_pipeline.journal import EpisodeJournal
from resail_pipeline.rollout import (
    EpisodeSpec,
    RolloutSettings,
    episodes_to_frames,
    sample_tasks,
)


class CollectConfig(RolloutSettings):
    """One cycle's collection, decoded as at deployment (appendix A.3)."""

    split: str = "train"
    """The environment split tasks are drawn from."""
    num_trajectories: int = Field(240, ge=1)
    """Trajectories per cycle (a task recurs when this exceeds the split); the trainer uses each
    once per cycle."""


def cycle_tasks(task_ids: list[int], num: int, cycle: int, seed: int) -> list[int]:
    """The task ids of ``cycle`` (1-based): block ``cycle - 1`` of one seeded order of the split.

    The order wraps around, so a block longer than the split holds every task once and the first
    ``num - len(task_ids)`` again (as evenly as the count allows); blocks are disjoint from earlier
    cycles while ``cycle * num <= len(task_ids)``.
    """
    if cycle < 1:
        raise ValueError(f"cycle: collection cycles start at 1, got {cycle}")
    check_int("num_trajectories", num, low=1)
    if not task_ids:
        raise ConfigError("split: has no task to collect on")
    order = sample_tasks(task_ids, len(task_ids), seed)
    start = (cycle - 1) * num
    return [order[(start + i) % len(order)] for i in range(num)]


def episode_specs(
    tasks: list[int], *, cycle: int, seed: int, env: str, split: str
) -> list[EpisodeSpec]:
    """One episode per entry of ``tasks``: the ``k``-th repeat of a task within the cycle gets the
    decoding seed ``derive_seed(seed, cycle, task_id, k)`` (``derive_seed(seed, cycle, task_id)``
    for its first run, as before repeats existed), and the id
    ``cycle_<r>/<env>/<split>/<task_id>/<decoding_seed>``: unique within and across cycles."""
    seen: dict[int, int] = {}
    specs = []
    for task_id in tasks:
        k = seen.get(task_id, 0)
        seen[task_id] = k + 1
        parts = (seed, cycle, task_id) if k == 0 else (seed, cycle, task_id, k)
        decoding_seed = derive_seed(*parts)
        specs.append(
            EpisodeSpec(
                traj_id=f"cycle_{cycle}/{env}/{split}/{task_id}/{decoding_seed}",
                task_id=task_id,
                decoding_seed=decoding_seed,
            )
        )
    return specs


def collect(
    make_env: Callable[[], Environment],
    generator: Generator,
    config: CollectConfig,
    *,
    cycle: int,
    method: str,
    seed: int,
    settings: Mapping[str, Any] | None = None,
    journal: EpisodeJournal | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Run one trajectory per task of ``cycle``; returns ``(tasks, trajectories, steps)``.

    ``method`` is recorded with the trajectories (the method that trained the acting policy);
    ``settings`` (:func:`collection_settings`), as JSON in the tasks table's ``settings`` column,
    so that a corpus shared by several runs can be checked against each run's configuration.
    With ``journal``, a collection killed anywhere resumes from the episodes it finished
    (:mod:`resail_pipeline.journal`).
    """
    env = make_env()
    tasks = cycle_tasks(env.task_ids(config.split), config.num_trajectories, cycle, seed)
    specs = episode_specs(tasks, cycle=cycle, seed=seed, env=env.name, split=config.split)
    episodes = config.roll_out(make_env, specs, generator, journal=journal)
    trajectories, steps = episodes_to_frames(
        episodes, cycle=cycle, method=method, split=config.split
    )
    task_table = pd.DataFrame(
        {
            "env": env.name,
            "split": config.split,
            "task_id": tasks,
            "seed": [spec.decoding_seed for spec in specs],
            "settings": json.dumps(dict(settings or {}), sort_keys=True),
        }
    )
    return task_table, trajectories, steps


def collection_settings(
    config: CollectConfig,
    *,
    policy_id: str,
    env: str,
    seed: int,
    env_options: Mapping[str, Any],
    generation: Mapping[str, Any],
) -> dict[str, Any]:
    """Everything that decides what a collection gathers: the acting policy, the environment and
    its options, the seed, the decoding settings and the generation backend's options (the cap on
    live episodes is left out: trajectories are the same under any cap, up to rounding)."""
    return {
        "policy_id": policy_id,
        "env": env,
        "env_options": dict(env_options),
        "seed": seed,
        "collect": config.deciding(),
        "generation": dict(generation),
    }


def check_collection_settings(
    tasks: pd.DataFrame, expected: Mapping[str, Any], source: str
) -> None:
    """Raise unless the collection recorded in ``tasks`` (its ``settings`` column) was made with
    ``expected``; the error names every setting that differs and ``source``."""
    if "settings" not in tasks.columns or tasks.empty:
        raise ValueError(f"{source}: records no collection settings to check this run against")
    recorded = flatten(json.loads(tasks["settings"].iloc[0]))
    wanted = flatten(json.loads(json.dumps(dict(expected))))  # as JSON gives them back
    differing = sorted(
        k for k in recorded.keys() | wanted.keys() if recorded.get(k) != wanted.get(k)
    )
    if differing:
        details = "; ".join(
            f"{k}: collected with {recorded.get(k)!r}, this run {wanted.get(k)!r}"
            for k in differing
        )
        raise ConfigError(
            f"{source}: the shared corpus was collected with other settings ({details}). Every "
            "run that shares it must collect as it did; remove it to collect again, or run with "
            "another data_tag."
        )
