"""Nodes of the ``aitz`` pipeline: thin wrappers over :mod:`resail_pipeline.gui`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from resail_pipeline.checkpoints import CheckpointInfo
from resail_pipeline.config import build
from resail_pipeline.evaluation.report.figures import gui_accuracy_figure
from resail_pipeline.evaluation.report.tables import gui_accuracy_table, table_to_markdown
from resail_pipeline.gui import experiment, offline
from resail_pipeline.gui.config import AitzConfig


def aitz_config(params: dict[str, Any]) -> AitzConfig:
    return build(AitzConfig, params, "aitz")


def episodes_node(params: dict[str, Any]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The train and test steps (synthetic episodes written first where configured)."""
    return experiment.read_splits(aitz_config(params))


def pool_node(train: pd.DataFrame, params: dict[str, Any]) -> pd.DataFrame:
    """The fixed, ordered training pool shared by both runs."""
    config = aitz_config(params).offline
    return offline.training_pool(train, config.pool_size, config.schedule.seed)


def initial_policy_node(
    train: pd.DataFrame, pool: pd.DataFrame, params: dict[str, Any]
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The initial policy's manifest and its warm start's losses."""
    info, losses = experiment.build_initial_policy(aitz_config(params), train, pool)
    return info.to_frame(), losses


def _policy(config: AitzConfig, checkpoint: pd.DataFrame):
    return experiment.load_policy(config.initial, CheckpointInfo.from_frame(checkpoint).path)


def diagnose_node(
    pool: pd.DataFrame, checkpoint: pd.DataFrame, params: dict[str, Any]
) -> pd.DataFrame:
    config = aitz_config(params)
    with _policy(config, checkpoint) as policy:
        return offline.diagnose(policy, pool, Path(config.data.root), config.offline)


def summarize_node(
    pool: pd.DataFrame, attempts: pd.DataFrame, checkpoint: pd.DataFrame, params: dict[str, Any]
) -> pd.DataFrame:
    config = aitz_config(params)
    with _policy(config, checkpoint) as policy:
        return offline.summarize(policy, pool, attempts, Path(config.data.root), config.offline)


def score_node(
    pool: pd.DataFrame,
    attempts: pd.DataFrame,
    summaries: pd.DataFrame,
    checkpoint: pd.DataFrame,
    params: dict[str, Any],
) -> pd.DataFrame:
    config = aitz_config(params)
    with _policy(config, checkpoint) as policy:
        return offline.score_steps(
            policy, pool, attempts, summaries, Path(config.data.root), config.offline
        )


def filter_node(pool: pd.DataFrame, scores: pd.DataFrame, params: dict[str, Any]) -> pd.DataFrame:
    return experiment.filter_steps(pool, scores, aitz_config(params).offline.keep)


def train_node(
    pool: pd.DataFrame,
    summaries: pd.DataFrame,
    test: pd.DataFrame,
    checkpoint: pd.DataFrame,
    params: dict[str, Any],
    filtered: pd.DataFrame | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """OEL on every step of the pool, or (with ``filtered``) on the kept steps only."""
    run = "oel" if filtered is None else "oel_sgs"
    info, metrics, curve = experiment.run_oel(
        aitz_config(params),
        CheckpointInfo.from_frame(checkpoint),
        pool,
        summaries,
        test,
        run,
        filtered,
    )
    return info.to_frame(), metrics, curve


def report_node(*curves: pd.DataFrame) -> tuple[Figure, str]:
    """Figure 5b and the accuracy table (every run at every monitored update)."""
    frame = pd.concat(curves, ignore_index=True)
    table = table_to_markdown(gui_accuracy_table(frame))
    return gui_accuracy_figure(frame, source="aitz curves"), table
