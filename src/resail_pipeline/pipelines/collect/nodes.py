"""Nodes of the ``collect`` pipeline."""

from __future__ import annotations

from typing import Any

import pandas as pd

from resail_pipeline.collection import CollectConfig, collect
from resail_pipeline.pipelines.common import RunConfig, dataclass_from_params, policy_info


def collect_node(
    policy: pd.DataFrame, collect_params: dict[str, Any], run_params: dict[str, Any]
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """One trajectory per task of the cycle with the cycle-start policy, ordinary view.

    Returns the cycle's ``tasks``, ``trajectories`` and ``steps``.
    """
    run = RunConfig.from_params(run_params)
    config = dataclass_from_params(CollectConfig, collect_params, "collect")
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
