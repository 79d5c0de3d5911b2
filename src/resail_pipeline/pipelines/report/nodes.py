"""Nodes of the ``report`` pipeline."""

from __future__ import annotations

import logging

import pandas as pd
from matplotlib.figure import Figure

from resail_pipeline.evaluation import report

logger = logging.getLogger(__name__)


def _with_cycle(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with a ``cycle`` column read from its ``namespace`` folder where it has none."""
    if "cycle" in frame.columns or frame.empty:
        return frame
    return frame.assign(cycle=frame["namespace"].str.removeprefix("cycle_").astype(int))


def report_node(
    eval_summaries: pd.DataFrame, train_metrics: pd.DataFrame, probe: pd.DataFrame
) -> tuple[str, str, str, str, Figure, Figure, Figure, Figure]:
    """Every experiment and cycle in the catalog, as table 1 (Markdown, CSV), the cost table
    (Markdown, CSV) and figures 1a, 3, 5a and 6."""
    main = report.main_results_table(eval_summaries, source="eval_summary files")
    metrics = _with_cycle(train_metrics)
    if metrics.empty:
        logger.warning("report: no train_metrics files yet; the cost table is empty")
        cost_md, cost_csv = "No training metrics yet.\n", ""
    else:
        cost = report.cost_table(metrics, source="train_metrics files")
        cost_md, cost_csv = report.table_to_markdown(cost), cost.to_csv(index=False)
    return (
        report.table_to_markdown(main),
        main.to_csv(index=False),
        cost_md,
        cost_csv,
        report.success_figure(eval_summaries),
        report.dual_view_figure(eval_summaries),
        report.cost_figure(metrics),
        report.sensitivity_figure(_with_cycle(probe)),
    )
