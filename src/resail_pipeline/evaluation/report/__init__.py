"""The evaluation report: the paper's main-results table, cost table and four figures.

Built from whatever experiments and cycles the catalog holds:

- :func:`main_results_table`: table 1. Rows are methods (ReAct, RFT, GRPO, EPD, SDPO, + ReSAIL,
  OEL, + ReSAIL, then any others), columns are benchmark x cycle, cells are success without PI as
  ``"mean (SD)"`` in percent with one decimal, ``--`` where nothing was evaluated. ReAct is the
  shared initial model, never updated: its row repeats cycle 0 under every cycle.
- :func:`paired_differences_table`: every experiment against the initial model, each ReSAIL
  variant against its parent, each ablation against its full method and each ablation of a ReSAIL
  variant against the variant's parent, at every cycle and view: the paired difference on the same
  tasks and seeds with a 95% bootstrap interval over tasks.
- :func:`training_seeds_table`: the same differences for a grid trained again with other
  training seeds: each seed's, their mean with its interval over tasks, and their SD over seeds.
- :func:`ablation_table`: table 3 style, named experiments as rows (e.g. the retention views).
- :func:`paper_comparison`: the paper's Qwen3-4B tables (1, 2, 3, and the appendix's sweeps and
  dual-view table) beside this grid's cells, for the experiments ``report.paper`` names.
- :func:`collection_table`: the success of the trajectories each cycle collects (by the policy of
  the cycle before) on the tasks the cycles learn from, against the initial policy's.
- :func:`success_figure`: figure 1a, success without PI per cycle, ±1 SD error bars; ReAct, the
  initial model, as a flat dashed line.
- :func:`dual_view_figure`: figure 3 (appendix D.2, table 7), success without and with PI per
  cycle.
- :func:`sweep_figure`: figure 4, success at each value of a swept setting (the selection ratio
  at cycle 1, the retention weight at cycle 3), one panel per sweep of ``report.sweeps``.
- :func:`sensitivity_figure`: figure 6 (appendix D.3), the probe's JSD per update, averaged over
  all response tokens, with the cycle boundaries marked.
- :func:`cost_table` and :func:`cost_figure`: table 6 / figure 5a, wall time per cycle spent in
  response generation, scoring, optimisation and the rest of the training loop.

Inputs are the catalog's tables concatenated over experiments, every row tagged with
``experiment`` (the run's name, usually its method):

- ``eval_summary``: the columns of :data:`~resail_pipeline.schemas.SCHEMAS` plus ``experiment``.
  Rates are fractions; the report shows percent. Cycle 0 rows are the shared initial model,
  whatever their method: ReAct in the table and the figures, and the first point of every curve.
  All cycle 0 rows of one benchmark and view must come from one checkpoint.
- ``eval_results``: the ``eval_results`` contract plus ``experiment``, one row per episode (the
  paired differences).
- ``train_metrics``: the report relies only on :data:`COST_COLUMNS` (``experiment``, ``cycle`` and
  the four ``seconds_*`` columns of the ``train_metrics`` contract), one row per update.
- ``trajectories``: the ``trajectories`` contract plus ``experiment``; cycle 1's corpus, collected
  by the initial policy, is every experiment's.
- ``probe``: the ``probe`` contract, one row per (update, probe step); update 0 is the cycle start.

A table without rows is an error naming the dataset, and so is a cycle an experiment trained that
one of its inputs lacks (:func:`check_cycles_covered`: an empty ``train_metrics`` file would drop
the cycle's cost row in silence); a figure built from partial data shows what there is.
:mod:`.tables`, :mod:`.paper` and :mod:`.figures` build them from what :mod:`.frames` reads; the
Kedro datasets write them.
"""

from resail_pipeline.evaluation.report.figures import (
    Sweep,
    cost_figure,
    dual_view_figure,
    sensitivity_figure,
    success_figure,
    sweep_figure,
)
from resail_pipeline.evaluation.report.frames import (
    BENCHMARK_LABELS,
    COST_COLUMNS,
    COST_COMPONENTS,
    INITIAL_LABEL,
    INITIAL_METHOD,
    METHOD_LABELS,
    MISSING,
    RESAIL_PARENTS,
    VIEWS,
    benchmark_label,
    check_cycles_covered,
    check_episode_counts,
    comparisons,
    format_cell,
    method_label,
    sensitivity_per_update,
)
from resail_pipeline.evaluation.report.paper import (
    PAPER_TABLES,
    check_paper_rows,
    paper_comparison,
    paper_figures,
)
from resail_pipeline.evaluation.report.tables import (
    ablation_table,
    collection_table,
    cost_table,
    main_results_table,
    paired_differences_table,
    rejected_summaries_note,
    table_to_markdown,
    training_seeds_table,
)

__all__ = [
    "BENCHMARK_LABELS",
    "COST_COLUMNS",
    "COST_COMPONENTS",
    "INITIAL_LABEL",
    "INITIAL_METHOD",
    "METHOD_LABELS",
    "MISSING",
    "PAPER_TABLES",
    "RESAIL_PARENTS",
    "VIEWS",
    "Sweep",
    "ablation_table",
    "benchmark_label",
    "check_cycles_covered",
    "check_episode_counts",
    "check_paper_rows",
    "collection_table",
    "comparisons",
    "cost_figure",
    "cost_table",
    "dual_view_figure",
    "format_cell",
    "main_results_table",
    "method_label",
    "paired_differences_table",
    "paper_comparison",
    "paper_figures",
    "rejected_summaries_note",
    "sensitivity_figure",
    "sensitivity_per_update",
    "success_figure",
    "sweep_figure",
    "table_to_markdown",
    "training_seeds_table",
]
