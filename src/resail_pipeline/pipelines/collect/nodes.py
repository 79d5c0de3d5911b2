"""Nodes of the ``collect`` pipeline."""

from __future__ import annotations

from typing import Any

import pandas as pd

from resail_pipeline.collection import CollectConfig, collect
from resail_pipeline.pipelines.common import RunConfig, dataclass_from_params, policy_info
from resail_pipeline.training import TrainConfig


def collect_node(
    policy: pd.DataFrame,
    collect_params: dict[str, Any],
    train_params: dict[str, Any],
    run_params: dict[str, Any],
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """One trajectory per task of the cycle with the cycle-start policy, ordinary view.

    ``collect.num_trajectories: null`` collects as many as the trainer uses in a cycle
    (``train.schedule``: updates x trajectories per update). Returns the cycle's ``tasks``,
    ``trajectories`` and ``steps``.
    """
    run = RunConfig.from_params(run_params)
    params = dict(collect_params)
    if params.get("num_trajectories") is None:
        schedule = TrainConfig.from_dict({**train_params, "method": run.method}).schedule
        params["num_trajectories"] = schedule.updates * schedule.trajectories_per_update
    config = dataclass_from_params(CollectConfig, params, "collect")
    info = policy_info(policy)
    make_env = run.environment(config.split)
    return collect(
        make_env,
        run.generator(info),
        config,
        cycle=info.cycle + 1,
        method=run.method,
        seed=run.seed,
    )
