"""Nodes of the ``collect`` pipeline."""

from __future__ import annotations

from typing import Any

import pandas as pd

from resail_pipeline.checkpoints import CheckpointInfo, resolve_device
from resail_pipeline.collection import CollectConfig, collect, collection_settings
from resail_pipeline.config import Field, build
from resail_pipeline.devices import machine_description
from resail_pipeline.pipelines.common import RunConfig, policy_info
from resail_pipeline.training import TrainConfig


class CollectParams(CollectConfig):
    """``params:collect``: one cycle's collection, decoded as at deployment (appendix A.3)."""

    num_trajectories: int | None = Field(None, ge=1)
    """Trajectories per cycle (a task recurs when this exceeds the split); the trainer uses each
    once per cycle. Null: as many as the trainer uses in a cycle (``train.schedule``: updates x
    trajectories per update)."""


def collect_config(
    collect_params: dict[str, Any], train_params: dict[str, Any], run: RunConfig
) -> CollectConfig:
    """``params:collect``, with ``num_trajectories: null`` resolved to as many as the trainer uses
    in a cycle (``train.schedule``: updates x trajectories per update)."""
    params = dict(build(CollectParams, collect_params, "collect"))
    if params["num_trajectories"] is None:
        schedule = TrainConfig.from_dict({**train_params, "method": run.method}, "train").schedule
        params["num_trajectories"] = schedule.updates * schedule.trajectories_per_update
    return CollectConfig(**params)


def settings_of(config: CollectConfig, run: RunConfig, policy: CheckpointInfo) -> dict[str, Any]:
    """What this run's collection with ``policy`` records (and a shared corpus is checked against)."""
    return collection_settings(
        config,
        policy_id=policy.policy_id,
        env=run.env,
        seed=run.seed,
        env_options=run.env_options,
        generation={"backend": run.backend, **run.generation_options},
    )


def collect_node(
    policy: pd.DataFrame,
    collect_params: dict[str, Any],
    train_params: dict[str, Any],
    run_params: dict[str, Any],
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """One trajectory per task of the cycle with the cycle-start policy, ordinary view.

    Returns the cycle's ``tasks`` (with the collection's settings, and the ``generation`` and
    ``machine`` that ran it: the backend's resolved dtype and mode, as an evaluation records
    them), ``trajectories`` and ``steps``.
    """
    run = RunConfig.from_params(run_params)
    config = collect_config(collect_params, train_params, run)
    info = policy_info(policy)
    make_env = run.environment(config.split)
    settings = settings_of(config, run, info)
    journal = run.journal(f"collect-cycle_{info.cycle + 1}", policy=info.sha256, settings=settings)
    with run.generator(info) as generator:
        tasks, trajectories, steps = collect(
            make_env,
            generator,
            config,
            cycle=info.cycle + 1,
            method=info.method,
            seed=run.seed,
            settings=settings,
            journal=journal,
        )
    journal.finish()  # removed once the catalog has saved the corpus (hooks.JournalHook)
    tasks = tasks.assign(
        generation=run.generation_record(), machine=machine_description(resolve_device("auto"))
    )
    return tasks, trajectories, steps
