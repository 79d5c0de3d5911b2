"""Evaluate a policy on a fixed test split: per-episode results and success per decoding seed.

Appendix A.3: each checkpoint runs the same test tasks from the same initial states under every
decoding seed (temperature 0.4, top-p 1, no top-k, a 30-step limit where invalid actions consume
a step); the success rate of each seed is reported as the mean and sample SD over seeds.

Dual-view evaluation (appendix D.2) adds the privileged view: the same episodes, but every step
is generated with the task's fixed Experience, a summary of one reference episode of the initial
model (successful or failed), held fixed across checkpoints and seeds. :func:`reference_episodes`
runs those reference episodes; the summaries themselves come from :mod:`resail_pipeline.experience`.

All views and seeds of one checkpoint run as one batched rollout.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Annotated

import pandas as pd

from resail_pipeline.config import ConfigError, Field, model_validator, one_of
from resail_pipeline.envs import Environment
from resail_pipeline.experience import (
    SummarizeConfig,
    configured_planner,
    summarize_trajectories,
)
from resail_pipeline.generation.base import Generator
from resail_pipeline.journal import EpisodeJournal
from resail_pipeline.prompts import OUTCOMES, Summary
from resail_pipeline.rollout import EpisodeSpec, RolloutSettings, episodes_to_frames
from resail_pipeline.schemas import (
    SCHEMAS,
    VIEW_ORDINARY,
    VIEW_PRIVILEGED,
    VIEWS,
    check_columns,
)

logger = logging.getLogger(__name__)

#: Columns of the fixed Experience table: the ``summaries`` of the reference episodes, one per
#: test task, with the task id; rows that were never accepted give their task no Experience.
EXPERIENCE_COLUMNS = ("task_id", "traj_id", "outcome", "summary", "accepted")


class EvalConfig(RolloutSettings):
    """How a checkpoint is evaluated (defaults: the paper's, appendix A.3)."""

    splits: tuple[str, ...] = ("test",)
    """The environment's test splits (TextCraft: ``test``; ALFWorld: ``id`` and ``ood``), each
    reported apart."""
    num_tasks: int | None = Field(None, ge=1)
    """Evaluate ``num_tasks`` ids of each split, evenly spaced over its fixed order so that a
    subset keeps the split's mix of difficulties (see :func:`spread`); null: all of them."""
    decoding_seeds: tuple[Annotated[int, Field(ge=0)], ...] = (0, 1, 2)
    """One full pass over the tasks per seed; mean and sample SD are taken over seeds."""
    views: tuple[one_of(*VIEWS), ...] = (VIEW_ORDINARY,)
    """``ordinary`` (no PI, the deployment view) and/or ``privileged`` (the fixed Experience)."""

    @model_validator(mode="after")
    def _distinct(self) -> EvalConfig:
        if not self.splits or len(set(self.splits)) != len(self.splits):
            raise ConfigError(f"splits: must be distinct split names, got {list(self.splits)}")
        if not self.decoding_seeds or len(set(self.decoding_seeds)) != len(self.decoding_seeds):
            raise ConfigError(f"decoding_seeds: must be distinct, got {list(self.decoding_seeds)}")
        if not self.views or len(set(self.views)) != len(self.views):
            raise ConfigError(f"views: must be distinct values of {VIEWS}, got {list(self.views)}")
        return self

    @property
    def privileged(self) -> bool:
        return VIEW_PRIVILEGED in self.views


def spread(ids: list[int], n: int | None) -> list[int]:
    """``n`` of ``ids`` evenly spaced over their order (``ids[floor(k * len / n)]``, k = 0..n-1),
    all of them when ``n`` is None. A split's order often follows difficulty (TextCraft's goals
    are sorted by recipe depth), so its first ``n`` ids would be the easiest."""
    if n is None:
        return list(ids)
    return [ids[k * len(ids) // n] for k in range(n)]


def evaluation_tasks(env: Environment, config: EvalConfig) -> list[tuple[str, int]]:
    """``(split, task_id)`` of every evaluated task: ``num_tasks`` ids of each split, evenly
    spaced over the environment's fixed order (:func:`spread`)."""
    tasks = []
    for split in config.splits:
        ids = env.task_ids(split)
        if config.num_tasks is not None and config.num_tasks > len(ids):
            raise ConfigError(
                f"num_tasks: {split!r} has {len(ids)} tasks, asked for {config.num_tasks}"
            )
        tasks += [(split, t) for t in spread(ids, config.num_tasks)]
    return tasks


def _frames(
    episodes: list, specs: list[EpisodeSpec], splits: list[str], **fields: object
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The episodes' tables, each trajectory labelled with its own split."""
    trajectories, steps = episodes_to_frames(episodes, split="", **fields)
    trajectories["split"] = splits
    return trajectories, steps


def experience_by_task(experience: pd.DataFrame) -> dict[int, Summary]:
    """Task id -> its fixed Experience (accepted rows of a table with :data:`EXPERIENCE_COLUMNS`)."""
    missing = [c for c in EXPERIENCE_COLUMNS if c not in experience.columns]
    if missing:
        raise ValueError(f"experience: missing column(s) {missing}")
    by_task: dict[int, Summary] = {}
    for row in experience[experience["accepted"].astype(bool)].itertuples(index=False):
        task_id = int(row.task_id)
        if task_id in by_task:
            raise ValueError(f"experience.task_id: task {task_id} has more than one summary")
        if row.outcome not in OUTCOMES or not isinstance(row.summary, str) or not row.summary:
            raise ValueError(f"experience: task {task_id} has no usable summary")
        by_task[task_id] = Summary(row.outcome, row.summary)
    return by_task


def evaluate_policy(
    make_env: Callable[[], Environment],
    generator: Generator,
    config: EvalConfig,
    *,
    cycle: int,
    method: str,
    experience: pd.DataFrame | None = None,
    journal: EpisodeJournal | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Run every (view, seed, task) episode of ``config`` and return ``(eval_results, steps)``.

    ``experience`` is required for the privileged view. The views stay paired: a task without an
    accepted Experience summary (:func:`build_experience` falls back to the rules, so only a
    summary the rules could not write either) is left out of every view, logged, and the report's
    ``Tasks`` column shows how many were evaluated. The ``steps`` table holds every step of every
    episode (for inspection). With ``journal``, an evaluation killed anywhere resumes from the
    episodes it finished (:mod:`resail_pipeline.journal`).
    """
    env = make_env()
    tasks = evaluation_tasks(env, config)
    summaries: dict[int, Summary] = {}
    if config.privileged:
        if experience is None:
            raise ValueError("experience: the privileged view needs the fixed Experience table")
        summaries = experience_by_task(experience)
        lacking = [t for _, t in tasks if t not in summaries]
        if len(lacking) == len(tasks):
            raise ValueError(
                f"experience: none of the {len(tasks)} evaluation tasks has an accepted summary "
                f"(first: {lacking[:3]}); was the Experience built for these splits?"
            )
        if lacking:
            logger.warning(
                "evaluate: %d of %d tasks have no accepted Experience summary (first: %s); they "
                "are left out of every view, so that the views compare the same tasks",
                len(lacking),
                len(tasks),
                lacking[:5],
            )
            tasks = [(split, task_id) for split, task_id in tasks if task_id in summaries]
    specs, splits = [], []
    for view in config.views:
        for seed in config.decoding_seeds:
            for split, task_id in tasks:
                specs.append(
                    EpisodeSpec(
                        traj_id=f"eval/{env.name}/{split}/{view}/{task_id}/{seed}",
                        task_id=task_id,
                        decoding_seed=seed,
                        summary=summaries[task_id] if view == VIEW_PRIVILEGED else None,
                    )
                )
                splits.append(split)
    episodes = config.roll_out(make_env, specs, generator, journal=journal)
    trajectories, steps = _frames(episodes, specs, splits, cycle=cycle, method=method)
    trajectories["view"] = [
        VIEW_PRIVILEGED if spec.summary is not None else VIEW_ORDINARY for spec in specs
    ]
    results = trajectories[[*SCHEMAS["eval_results"], "traj_id", "end_reason"]].copy()
    return check_columns(results, "eval_results"), steps


def reference_episodes(
    make_env: Callable[[], Environment],
    generator: Generator,
    config: EvalConfig,
    *,
    decoding_seed: int,
    journal: EpisodeJournal | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One ordinary-view episode per test task of ``config`` (every split), for the fixed
    Experience (``journal``: as :func:`evaluate_policy`'s).

    Returns the ``trajectories`` and ``steps`` tables (method ``reference``, cycle 0); each
    trajectory's ``task_id`` is what the Experience is keyed by.
    """
    env = make_env()
    tasks = evaluation_tasks(env, config)
    specs = [
        EpisodeSpec(
            traj_id=f"reference/{env.name}/{split}/{task_id}/{decoding_seed}",
            task_id=task_id,
            decoding_seed=decoding_seed,
        )
        for split, task_id in tasks
    ]
    episodes = config.roll_out(make_env, specs, generator, journal=journal)
    return _frames(episodes, specs, [split for split, _ in tasks], cycle=0, method="reference")


def build_experience(
    make_env: Callable[[], Environment],
    generator: Generator,
    config: EvalConfig,
    summarize: SummarizeConfig,
    *,
    decoding_seed: int,
    journal: EpisodeJournal | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The fixed Experience (appendix D.2): :func:`reference_episodes` of the initial policy,
    summarised as a cycle's trajectories are (``summarize``; the model source writes them with
    ``generator``), except that a model summary rejected after every attempt is replaced by the
    rules-based one whatever ``summarize.on_rejected`` says: a task without an Experience would be
    left out of the evaluation's every view (:func:`evaluate_policy`). ``journal``: the reference
    episodes', as :func:`evaluate_policy`'s.

    Returns the reference ``trajectories`` and ``steps`` and the Experience table: their
    ``summaries`` with each trajectory's ``task_id`` (:data:`EXPERIENCE_COLUMNS`).
    """
    trajectories, steps = reference_episodes(
        make_env, generator, config, decoding_seed=decoding_seed, journal=journal
    )
    summarize = summarize.replace(on_rejected="rules")
    planner = configured_planner(summarize, make_env)
    summaries = summarize_trajectories(trajectories, steps, summarize, generator, planner=planner)
    experience = summaries.merge(trajectories[["traj_id", "task_id"]], on="traj_id", how="left")
    return trajectories, steps, experience
