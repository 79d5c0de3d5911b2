"""Nodes of the ``summarize`` pipeline."""

from __future__ import annotations

from typing import Any

import pandas as pd

from resail_pipeline.config import build
from resail_pipeline.experience import (
    SummarizeConfig,
    configured_planner,
    summarize_trajectories,
)
from resail_pipeline.experience.extraction import SOURCE_MODEL
from resail_pipeline.pipelines.common import RunConfig, policy_info


def summarize_node(
    trajectories: pd.DataFrame,
    steps: pd.DataFrame,
    policy: pd.DataFrame,
    summarize_params: dict[str, Any],
    run_params: dict[str, Any],
) -> pd.DataFrame:
    """The cycle's ``summaries``: written by the frozen cycle-start policy (``source: model``) or
    built from each trajectory (``source: rules``); rejections are recorded, never raised."""
    run = RunConfig.from_params(run_params)
    config = build(SummarizeConfig, summarize_params, "summarize")
    planner = configured_planner(config, run.environment())
    if config.source != SOURCE_MODEL:
        return summarize_trajectories(trajectories, steps, config, None, planner=planner)
    with run.generator(policy_info(policy)) as generator:
        return summarize_trajectories(trajectories, steps, config, generator, planner=planner)
