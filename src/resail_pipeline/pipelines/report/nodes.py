"""Nodes of the ``report`` pipeline."""

from __future__ import annotations

import logging
from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from resail_pipeline.config import Config, Field, build, model_validator
from resail_pipeline.evaluation import report

logger = logging.getLogger(__name__)


class ReportConfig(Config):
    """``params:report``: what the report shows beside table 1."""

    ablations: dict[str, dict[str, str]] = Field(default_factory=dict)
    """Ablation tables in table 3's format: title -> {row label: experiment}; an experiment not
    yet run shows as dashes."""
    sweeps: dict[str, report.Sweep] = Field(default_factory=dict)
    """Figure 4's panels: the swept setting's name -> its cycle and ``[value, experiment]``
    points (the paper's selection ratio at cycle 1 and retention weight at cycle 3)."""
    paper: dict[str, dict[str, str]] = Field(default_factory=dict)
    """The paper's tables set beside this grid's (``paper_comparison.md``): table (``1``, ``2``,
    ``3(a)``, ``3(b)``, ``rho``, ``lambda``, ``dual``) -> {the paper's row: the experiment that
    runs its setting}; a row no experiment runs shows the paper's cells only. Figure 1a draws the
    experiments of table ``1`` and figure 3 those of ``dual``, as the paper's do, where given
    (else every experiment)."""

    @model_validator(mode="after")
    def _paper_rows(self) -> ReportConfig:
        report.check_paper_rows(self.paper)
        return self


_PAPER_NOTE = (
    "Success (%) as mean (SD) over decoding seeds: here, this grid's (its policy, budgets and "
    "evaluation protocol); paper, Qwen3-4B as the paper prints it (three decoding seeds). Each "
    "paper row is set beside the experiment `report.paper` names for it; `--` where a side has "
    "no cell.\n\n"
)


def _with_cycle(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with a ``cycle`` column read from its ``namespace`` folder where it has none."""
    if "cycle" in frame.columns or frame.empty:
        return frame
    return frame.assign(cycle=frame["namespace"].str.removeprefix("cycle_").astype(int))


def _rows_of(paper: dict[str, dict[str, str]], table: str) -> set[str] | None:
    """The experiments ``paper`` sets beside the rows of the paper's ``table``; ``None`` where it
    names none."""
    return set(paper[table].values()) if paper.get(table) else None


def report_node(
    eval_summaries: pd.DataFrame,
    eval_results: pd.DataFrame,
    train_metrics: pd.DataFrame,
    probe: pd.DataFrame,
    trajectories: pd.DataFrame,
    report_params: dict[str, Any],
) -> tuple[str, str, str, str, str, str, str, str, str, Figure, Figure, Figure, Figure, Figure]:
    """Every experiment and cycle in the catalog, as table 1 (Markdown, CSV), the paired
    differences of each ReSAIL variant and its parent (Markdown, CSV), the ablation tables of
    ``report.ablations`` (Markdown), the paper's tables beside the experiments ``report.paper``
    names (Markdown), the success of every cycle's collection (Markdown), the cost
    table (Markdown, CSV) and figures 1a, 3, 4 (the sweeps of ``report.sweeps``), 5a and 6. Every
    cycle an experiment trained must be in each input that covers it
    (:func:`~resail_pipeline.evaluation.report.check_cycles_covered`), else the report fails
    naming the file."""
    config = build(ReportConfig, report_params, "report")
    main = report.main_results_table(eval_summaries, source="eval_summary files")
    eval_results = _with_cycle(eval_results)
    report.check_episode_counts(
        eval_summaries, eval_results, sources=("eval_summary files", "eval_results files")
    )
    paired = report.paired_differences_table(eval_results, source="eval_results files")
    ablations = "".join(
        f"## {title}\n\n"
        + report.table_to_markdown(
            report.ablation_table(eval_summaries, dict(rows), source="eval_summary files")
        )
        + "\n"
        for title, rows in config.ablations.items()
    )
    paper = "".join(
        f"## {title}\n\n{report.table_to_markdown(table)}\n"
        for title, table in report.paper_comparison(
            eval_summaries, config.paper, source="eval_summary files"
        ).items()
    )
    metrics, probe = _with_cycle(train_metrics), _with_cycle(probe)
    report.check_cycles_covered(eval_summaries, metrics, probe, trajectories)
    collection = report.collection_table(trajectories, source="trajectories files")
    if metrics.empty:
        logger.warning("report: no train_metrics files yet; the cost table is empty")
        cost_md, cost_csv = "No training metrics yet.\n", ""
    else:
        cost = report.cost_table(metrics, source="train_metrics files")
        cost_md, cost_csv = report.table_to_markdown(cost), cost.to_csv(index=False)
    note = report.rejected_summaries_note(metrics)
    return (
        report.table_to_markdown(main) + (f"\n{note}" if note else ""),
        main.to_csv(index=False),
        report.table_to_markdown(paired)
        if not paired.empty
        else "No ReSAIL variant and parent pair.\n",
        paired.to_csv(index=False),
        ablations or "No ablation configured.\n",
        (_PAPER_NOTE + paper) if paper else "No benchmark of the paper's tables evaluated.\n",
        report.table_to_markdown(collection) if not collection.empty else "Nothing collected.\n",
        cost_md,
        cost_csv,
        report.success_figure(eval_summaries, experiments=_rows_of(config.paper, "1")),
        report.dual_view_figure(eval_summaries, experiments=_rows_of(config.paper, "dual")),
        report.sweep_figure(eval_summaries, config.sweeps),
        report.cost_figure(metrics),
        report.sensitivity_figure(probe),
    )
