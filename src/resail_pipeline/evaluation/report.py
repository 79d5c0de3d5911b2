"""The evaluation report: the paper's main-results table, cost table and four figures.

Built from whatever experiments and cycles the catalog holds:

- :func:`main_results_table`: table 1. Rows are methods (ReAct, RFT, GRPO, EPD, SDPO, + ReSAIL,
  OEL, + ReSAIL, then any others), columns are benchmark x cycle, cells are success without PI as
  ``"mean (SD)"`` in percent with one decimal, ``--`` where nothing was evaluated. ReAct is the
  shared initial model, never updated: its row repeats cycle 0 under every cycle.
- :func:`paired_differences_table`: every experiment against the initial model, and each ReSAIL
  variant against its parent, at every cycle and view: the paired difference on the same tasks
  and seeds with a 95% bootstrap interval over tasks.
- :func:`ablation_table`: table 3 style, named experiments as rows (e.g. the retention views).
- :func:`success_figure`: figure 1a, success without PI per cycle, ±1 SD error bars; ReAct, the
  initial model, as a flat dashed line.
- :func:`dual_view_figure`: figure 3 (appendix D.2, table 7), success without and with PI per
  cycle.
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
- ``probe``: the ``probe`` contract, one row per (update, probe step); update 0 is the cycle start.

A figure built from partial data (one method, one cycle) shows what there is; one with no data says
so in its title. A table without rows is an error naming the dataset. Figures are drawn on their
own Agg canvas (:class:`matplotlib.figure.Figure`, never ``pyplot``), so building them touches no
global state and needs no display.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from pathlib import Path

import matplotlib as mpl
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from resail_pipeline.evaluation.stats import mean_and_sd, paired_difference
from resail_pipeline.io import atomic_path
from resail_pipeline.schemas import SchemaError, check_columns

logger = logging.getLogger(__name__)

#: Method key -> the name the paper prints, in table 1's row order.
METHOD_LABELS: dict[str, str] = {
    "react": "ReAct",
    "rft": "RFT",
    "grpo": "GRPO",
    "epd": "EPD",
    "sdpo": "SDPO",
    "sdpo_resail": "SDPO + ReSAIL",
    "oel": "OEL",
    "oel_resail": "OEL + ReSAIL",
}
#: The method of the unchanged initial policy.
INITIAL_METHOD = "react"
#: ReSAIL variant -> its parent; directly after its parent the table prints the variant "+ ReSAIL".
RESAIL_PARENTS: dict[str, str] = {"sdpo_resail": "sdpo", "oel_resail": "oel"}
#: (env, split) -> benchmark name, in table 1's column order; other pairs follow as "env (split)".
BENCHMARK_LABELS: dict[tuple[str, str], str] = {
    ("alfworld", "id"): "ALFWorld (ID)",
    ("alfworld", "ood"): "ALFWorld (OOD)",
    ("textcraft", "test"): "TextCraft",
}
#: Evaluation views: without PI (the deployment view) and with the fixed PI (appendix D.2).
VIEWS = ("ordinary", "privileged")
#: ``train_metrics`` column -> cost component, in the stacking order of figure 5a.
COST_COMPONENTS: dict[str, str] = {
    "seconds_response": "Response",
    "seconds_scoring": "Scoring",
    "seconds_optimisation": "Optimization",
    "seconds_other": "Other",
}
#: The ``train_metrics`` columns the cost table and figure rely on.
COST_COLUMNS = ("experiment", "cycle", *COST_COMPONENTS)
#: Legend entry of the shared initial model in the figures: ReAct, never updated.
INITIAL_LABEL = "ReAct (initial model, no update)"
#: A cell with nothing to show.
MISSING = "--"
#: Resolution of the written PNGs.
DPI = 150

_BENCHMARK_KEYS = ("env", "split")
_CELL_KEYS = ("experiment", "cycle", "env", "split", "view")
_PROBE_UPDATE_KEYS = ("experiment", "method", "cycle", "update")


# --------------------------------------------------------------------------- names and order


def method_label(name: str) -> str:
    """The paper's name for a method key (``"oel_resail"`` -> ``"OEL + ReSAIL"``); others as given."""
    return METHOD_LABELS.get(name, name)


def benchmark_label(env: str, split: str) -> str:
    """``"ALFWorld (OOD)"``, ``"TextCraft"``, ...; an unknown pair reads ``"env (split)"``."""
    return BENCHMARK_LABELS.get((env, split), f"{env} ({split})")


def format_cell(mean: float, sd: float) -> str:
    """A table-1 cell: ``"mean (SD)"`` of fractions, in percent with one decimal.

    >>> format_cell(0.6133, 0.0153)
    '61.3 (1.5)'

    A single seed has no sample SD: its cell reads ``"61.3 (--)"``.
    """
    sd_text = MISSING if math.isnan(sd) else f"{100 * sd:.1f}"
    return f"{100 * mean:.1f} ({sd_text})"


def _method_rank(method: str) -> int:
    order = list(METHOD_LABELS)
    return order.index(method) if method in METHOD_LABELS else len(order)


def _ordered_experiments(methods: Mapping[str, str]) -> list[str]:
    """Experiments in table-1 order of their method; an experiment named after its method first."""
    return sorted(methods, key=lambda e: (_method_rank(methods[e]), e != methods[e], e))


def _experiment_methods(frame: pd.DataFrame, source: str) -> dict[str, str]:
    """experiment -> method of ``frame``'s rows; one experiment must be one method."""
    methods: dict[str, str] = {}
    for experiment, group in frame.groupby("experiment", sort=True):
        distinct = sorted(group["method"].unique())
        if len(distinct) != 1:
            raise ValueError(
                f"{source}: experiment {experiment!r} has rows of several methods {distinct}; "
                "tag each run with its own experiment name"
            )
        methods[str(experiment)] = str(distinct[0])
    return methods


def _ordered_benchmarks(frame: pd.DataFrame) -> list[tuple[str, str]]:
    known = list(BENCHMARK_LABELS)
    pairs = {(str(e), str(s)) for e, s in frame[list(_BENCHMARK_KEYS)].itertuples(index=False)}
    return sorted(pairs, key=lambda p: (known.index(p) if p in known else len(known), p))


def _colors(experiments: Iterable[str]) -> dict[str, tuple[float, ...]]:
    palette = mpl.colormaps["tab10"].colors
    return {e: palette[i % len(palette)] for i, e in enumerate(experiments)}


# --------------------------------------------------------------------------- input checks


def _require(frame: pd.DataFrame, columns: Iterable[str], source: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise SchemaError(
            f"{source}: missing column(s) {missing}; the report needs {list(columns)}"
        )


def _checked_eval_summary(eval_summary: pd.DataFrame, source: str) -> pd.DataFrame:
    """A copy of ``eval_summary`` checked for the report: columns, views, cycles, statistics.

    ``mean`` and ``sd`` must be the mean and sample SD (``n - 1``) of ``success_per_seed``;
    cells are unique per (experiment, cycle, env, split, view) from cycle 1 on; all cycle 0 rows
    of one (env, split, view) come from one checkpoint, the shared initial model.
    """
    check_columns(eval_summary, "eval_summary", source=source)
    _require(eval_summary, ("experiment",), source)
    frame = eval_summary.copy()
    unknown = sorted(set(frame["view"]) - set(VIEWS))
    if unknown:
        raise ValueError(f"{source}: column 'view' has unknown value(s) {unknown}; use {VIEWS}")
    if (frame["cycle"] < 0).any():
        raise ValueError(f"{source}: column 'cycle' must be >= 0 (0 is the initial model)")
    frame["cycle"] = frame["cycle"].astype(int)
    for row in frame.itertuples(index=False):
        mean, sd = mean_and_sd(list(row.success_per_seed))
        if not (math.isclose(mean, row.mean, abs_tol=1e-9) and _same_sd(sd, row.sd)):
            raise ValueError(
                f"{source}: {row.experiment!r} cycle {row.cycle} {row.env}/{row.split} "
                f"{row.view}: mean/sd ({row.mean}, {row.sd}) are not the mean and sample SD "
                f"(n - 1) of success_per_seed {list(row.success_per_seed)}"
            )
    trained = frame[frame["cycle"] > 0]
    duplicated = trained[trained.duplicated(list(_CELL_KEYS), keep=False)]
    if not duplicated.empty:
        first = duplicated.iloc[0]
        raise ValueError(
            f"{source}: {len(duplicated)} rows share (experiment, cycle, env, split, view), e.g. "
            f"{tuple(first[k] for k in _CELL_KEYS)}; one evaluation per cell is expected"
        )
    initial_trained = trained[trained["method"] == INITIAL_METHOD]
    if not initial_trained.empty:
        raise ValueError(
            f"{source}: method {INITIAL_METHOD!r} has rows at cycle(s) "
            f"{sorted(initial_trained['cycle'].unique())}; it is the unchanged initial policy, "
            "evaluated at cycle 0"
        )
    for key, group in frame[frame["cycle"] == 0].groupby(["env", "split", "view"]):
        policies = sorted(group["policy_id"].unique())
        if len(policies) != 1:
            raise ValueError(
                f"{source}: cycle 0 of {'/'.join(key)} holds {len(policies)} checkpoints "
                f"{policies}; the report compares methods from one shared initial model"
            )
    return frame


def _same_sd(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, abs_tol=1e-9)


def _initial_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """The shared initial model's rows: cycle 0, one per (env, split, view)."""
    initial = frame[frame["cycle"] == 0]
    return initial.drop_duplicates(["env", "split", "view"]).reset_index(drop=True)


# --------------------------------------------------------------------------- tables


def main_results_table(eval_summary: pd.DataFrame, *, source: str = "eval_summary") -> pd.DataFrame:
    """Table 1: success without PI, rows = methods, columns = benchmark x cycle.

    Args:
        eval_summary: ``eval_summary`` rows of every experiment, with ``experiment``.
        source: the dataset's name in error messages.

    Returns:
        Strings only: a ``"Method"`` column, then one column per benchmark and cycle named
        ``"<benchmark>, Cycle <r>"``; cells as :func:`format_cell`, ``--`` where missing. ReAct
        (the cycle 0 model, never updated) repeats its cell under every cycle; a ReSAIL variant
        directly after its parent is labelled ``"+ ReSAIL"``.

    Raises:
        ValueError: no rows, or no ordinary-view rows (naming ``source``); inconsistent rows.
    """
    if eval_summary.empty:
        raise ValueError(
            f"{source}: no rows; the main-results table needs the evaluate pipeline's {source} "
            "of at least one checkpoint"
        )
    frame = _checked_eval_summary(eval_summary, source)
    ordinary = frame[frame["view"] == "ordinary"]
    if ordinary.empty:
        raise ValueError(
            f"{source}: no ordinary-view rows; the main results are success without PI"
        )
    initial = _initial_rows(ordinary)
    trained = ordinary[ordinary["cycle"] > 0]
    benchmarks = _ordered_benchmarks(ordinary)
    cycles = sorted({1, *trained["cycle"].unique().tolist()})
    columns = {
        (env, split, cycle): f"{benchmark_label(env, split)}, Cycle {cycle}"
        for env, split in benchmarks
        for cycle in cycles
    }

    rows: list[dict[str, str]] = []
    if not initial.empty:  # never updated: the same model, hence the same cell, at every cycle
        cells = {
            (r.env, r.split, cycle): format_cell(r.mean, r.sd)
            for r in initial.itertuples()
            for cycle in cycles
        }
        rows.append(_table_row(METHOD_LABELS[INITIAL_METHOD], cells, columns))
    previous = INITIAL_METHOD
    for experiment in _ordered_experiments(_experiment_methods(trained, source)):
        runs = trained[trained["experiment"] == experiment]
        cells = {(r.env, r.split, r.cycle): format_cell(r.mean, r.sd) for r in runs.itertuples()}
        short = experiment in RESAIL_PARENTS and previous == RESAIL_PARENTS[experiment]
        rows.append(_table_row("+ ReSAIL" if short else method_label(experiment), cells, columns))
        previous = experiment
    return pd.DataFrame(rows, columns=["Method", *columns.values()])


def _table_row(
    label: str, cells: Mapping[tuple, str], columns: Mapping[tuple, str]
) -> dict[str, str]:
    return {"Method": label} | {name: cells.get(key, MISSING) for key, name in columns.items()}


def paired_differences_table(
    eval_results: pd.DataFrame, *, source: str = "eval_results"
) -> pd.DataFrame:
    """Paired differences in success (same tasks, same decoding seeds;
    :func:`~resail_pipeline.evaluation.stats.paired_difference`) in percentage points, with 95%
    bootstrap intervals over tasks: first every experiment at every cycle against the initial
    model (ReAct, cycle 0), then each ReSAIL variant against its parent (the experiments named
    after the two methods) at every cycle both reached; per benchmark and view.

    Returns:
        Columns ``Comparison``, ``Benchmark``, ``View``, ``Cycle``, ``Difference (pp)``,
        ``95% CI (pp)``, ``Tasks``; no rows where no pair was evaluated.
    """
    columns = [
        "Comparison",
        "Benchmark",
        "View",
        "Cycle",
        "Difference (pp)",
        "95% CI (pp)",
        "Tasks",
    ]
    if eval_results.empty:
        return pd.DataFrame(columns=columns)
    check_columns(eval_results, "eval_results", source=source)
    _require(eval_results, ("experiment",), source)
    trained = eval_results[eval_results["cycle"] > 0]
    initial = eval_results[eval_results["cycle"] == 0]
    label = METHOD_LABELS[INITIAL_METHOD]
    pairs = [  # (label, rows, baseline rows, whether the baseline is the initial model)
        (f"{method_label(e)} - {label}", trained[trained["experiment"] == e], initial, True)
        for e in _ordered_experiments(_experiment_methods(trained, source))
    ]
    pairs += [
        (
            f"{method_label(variant)} - {method_label(parent)}",
            trained[trained["experiment"] == variant],
            trained[trained["experiment"] == parent],
            False,
        )
        for variant, parent in RESAIL_PARENTS.items()
    ]
    rows = []
    for name, ours, theirs, from_initial in pairs:
        keys = ["env", "split", "view", "cycle"]
        for (env, split, view, cycle), group in ours.groupby(keys, sort=True):
            where = {"env": env, "split": split, "view": view}
            base = _where(theirs, **where) if from_initial else _where(theirs, cycle=cycle, **where)
            if base.empty:
                continue
            d = paired_difference(group, base)
            rows.append(
                {
                    "Comparison": name,
                    "Benchmark": benchmark_label(env, split),
                    "View": view,
                    "Cycle": int(cycle),
                    "Difference (pp)": 100 * d["difference"],
                    "95% CI (pp)": f"[{100 * d['low']:.1f}, {100 * d['high']:.1f}]",
                    "Tasks": d["tasks"],
                }
            )
    return pd.DataFrame(rows, columns=columns)


def ablation_table(
    eval_summary: pd.DataFrame, rows: Mapping[str, str], *, source: str = "eval_summary"
) -> pd.DataFrame:
    """An ablation in table 3's format: one row per ``label -> experiment`` of ``rows``, columns
    benchmark x cycle (the cycles every variant evaluated there reached), success without PI and,
    where evaluated, with PI (``"(with PI)"``).

    Cells as :func:`format_cell`; ``--`` where an experiment (or a cycle of it) is missing.
    """
    frame = _checked_eval_summary(eval_summary, source) if not eval_summary.empty else eval_summary
    trained = frame[frame["cycle"] > 0] if not frame.empty else frame
    chosen = trained[trained["experiment"].isin(list(rows.values()))] if not frame.empty else frame
    columns: dict[tuple, str] = {}
    if not chosen.empty:
        for env, split in _ordered_benchmarks(chosen):
            for view in VIEWS:
                suffix = "" if view == "ordinary" else " (with PI)"
                here = _where(chosen, env=env, split=split, view=view)
                # the cycles every variant run here reached: the rows compare like with like
                reached = [set(g["cycle"]) for _, g in here.groupby("experiment")]
                for cycle in sorted(set.intersection(*reached) if reached else ()):
                    columns[(env, split, view, int(cycle))] = (
                        f"{benchmark_label(env, split)}, Cycle {cycle}{suffix}"
                    )
    table = []
    for label, experiment in rows.items():
        runs = chosen[chosen["experiment"] == experiment] if not chosen.empty else chosen
        cells = {
            (r.env, r.split, r.view, r.cycle): format_cell(r.mean, r.sd) for r in runs.itertuples()
        }
        table.append({"Variant": label} | {n: cells.get(k, MISSING) for k, n in columns.items()})
    return pd.DataFrame(table, columns=["Variant", *columns.values()])


def rejected_summaries_note(train_metrics: pd.DataFrame) -> str:
    """A sentence for the report: how many trajectories of each experiment's cycles were left out
    of training because their summary was still rejected after every attempt (the
    ``rejected_summaries`` column; nothing to say where no run recorded it)."""
    if train_metrics.empty or "rejected_summaries" not in train_metrics.columns:
        return ""
    per_cycle = train_metrics.groupby(["experiment", "cycle"], sort=True)["rejected_summaries"]
    counts = per_cycle.first().dropna().astype(int)
    if counts.empty:
        return ""
    if counts.sum() == 0:
        return (
            f"Summaries: every trajectory of the {len(counts)} trained cycle(s) had an accepted "
            "summary; none was left out.\n"
        )
    listed = ", ".join(
        f"{method_label(str(e))} cycle {c}: {n}" for (e, c), n in counts.items() if n > 0
    )
    return (
        f"Summaries: {int(counts.sum())} trajectories were left out of training because their "
        f"summary was rejected after every attempt ({listed}); batches were drawn from the "
        "others.\n"
    )


def cost_table(train_metrics: pd.DataFrame, *, source: str = "train_metrics") -> pd.DataFrame:
    """Table 6: seconds of each training-loop component, summed over a cycle's updates.

    Args:
        train_metrics: per-update rows with :data:`COST_COLUMNS`.
        source: the dataset's name in error messages.

    Returns:
        One row per (experiment, cycle) in method order: ``Method`` (the experiment's label),
        ``Cycle``, then seconds of ``Response``, ``Scoring``, ``Optimization``, ``Other`` and their
        ``Total``.

    Raises:
        ValueError: no rows (naming ``source``), or negative or non-finite seconds.
    """
    if train_metrics.empty:
        raise ValueError(
            f"{source}: no rows; the cost table needs the train pipeline's per-update {source}"
        )
    totals = _cycle_costs(train_metrics, source)
    table = totals.rename(columns=COST_COMPONENTS)
    table.insert(0, "Method", table.pop("experiment").map(method_label))
    table = table.rename(columns={"cycle": "Cycle"})
    table["Total"] = table[list(COST_COMPONENTS.values())].sum(axis=1)
    return table


def _cycle_costs(train_metrics: pd.DataFrame, source: str) -> pd.DataFrame:
    """Seconds per (experiment, cycle) and component, in method then cycle order."""
    _require(train_metrics, COST_COLUMNS, source)
    seconds = train_metrics[list(COST_COMPONENTS)].to_numpy(dtype=np.float64)
    if not np.isfinite(seconds).all() or (seconds < 0).any():
        raise ValueError(f"{source}: columns {list(COST_COMPONENTS)} must be finite and >= 0")
    totals = train_metrics.groupby(["experiment", "cycle"], as_index=False)[
        list(COST_COMPONENTS)
    ].sum()
    totals["cycle"] = totals["cycle"].astype(int)
    return _in_method_order(totals, {e: e for e in totals["experiment"].unique()}, ["cycle"])


def _in_method_order(
    frame: pd.DataFrame, methods: Mapping[str, str], then: list[str]
) -> pd.DataFrame:
    """``frame`` sorted by its experiments' table-1 order, then by ``then``; index reset."""
    rank = {e: i for i, e in enumerate(_ordered_experiments(methods))}
    ranked = frame.assign(_rank=frame["experiment"].map(rank))
    return ranked.sort_values(["_rank", *then]).drop(columns="_rank").reset_index(drop=True)


def table_to_markdown(table: pd.DataFrame, *, float_format: str = ".1f") -> str:
    """A GitHub-flavoured Markdown table: first column left-aligned, the others centred."""
    header = [str(c) for c in table.columns]
    align = [":---"] + [":---:"] * (len(header) - 1)
    lines = [_markdown_line(header), _markdown_line(align)]
    for row in table.itertuples(index=False):
        lines.append(_markdown_line(_markdown_cell(v, float_format) for v in row))
    return "\n".join(lines) + "\n"


def _markdown_line(cells: Iterable[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _markdown_cell(value: object, float_format: str) -> str:
    if isinstance(value, float | np.floating):
        return format(value, float_format)
    return str(value).replace("|", "\\|")


def write_table(table: pd.DataFrame, stem: str | Path) -> tuple[Path, Path]:
    """Write ``table`` as ``<stem>.md`` and ``<stem>.csv``, each atomically; return both paths."""
    stem = Path(stem)
    markdown, csv = stem.with_suffix(".md"), stem.with_suffix(".csv")
    with atomic_path(markdown) as tmp:
        tmp.write_text(table_to_markdown(table), encoding="utf-8")
    with atomic_path(csv) as tmp:
        table.to_csv(tmp, index=False)
    return markdown, csv


# --------------------------------------------------------------------------- figures


def _new_figure(
    nrows: int, ncols: int, size: tuple[float, float], *, sharey: bool | str = False
) -> tuple[Figure, np.ndarray]:
    """A figure on its own Agg canvas and its ``(nrows, ncols)`` array of axes.

    ``size`` is (width, height) in inches of one panel.
    """
    figure = Figure(figsize=(size[0] * ncols, size[1] * nrows), layout="constrained")
    FigureCanvasAgg(figure)
    return figure, figure.subplots(nrows, ncols, squeeze=False, sharey=sharey)


def _empty_figure(title: str, reason: str) -> Figure:
    figure, axes = _new_figure(1, 1, (8.0, 2.5))
    figure.suptitle(f"{title}: no data\n({reason})")
    _say_no_data(axes[0, 0], reason)
    axes[0, 0].set_axis_off()
    return figure


def _say_no_data(ax: Axes, reason: str) -> None:
    ax.set_xticks([])
    ax.text(0.5, 0.5, reason, transform=ax.transAxes, ha="center", va="center", color="0.4")


def _cycle_axis(ax: Axes, cycles: Iterable[int]) -> None:
    ticks = sorted(set(cycles))
    ax.set_xticks(ticks, [f"C{c}" for c in ticks])
    ax.set_xlabel("Cycle (C0 = shared initial model)")
    ax.set_ylabel("Success rate (%)")
    ax.grid(axis="y", alpha=0.3)


def _plot_success_curves(
    ax: Axes,
    rows: pd.DataFrame,
    initial: pd.DataFrame,
    experiments: list[str],
    colors: Mapping[str, tuple[float, ...]],
) -> None:
    """One error-bar line per experiment in ``rows``, each starting from the C0 point ``initial``.

    The shared initial model is drawn once more on top, in black, as ReAct: never updated, a flat
    dashed line from C0 to the last cycle. Lines are dodged sideways by a few hundredths of a cycle
    from C1 on, so that error bars stay apart; they meet at C0.
    """
    present = [e for e in experiments if (rows["experiment"] == e).any()]
    step = min(0.06, 0.3 / max(len(present) - 1, 1))
    for i, experiment in enumerate(present):
        curve = rows[rows["experiment"] == experiment]
        if not initial.empty:
            curve = pd.concat([initial, curve])
        dodge = (i - (len(present) - 1) / 2) * step
        _errorbar(
            ax, curve.sort_values("cycle"), dodge, method_label(experiment), colors[experiment]
        )
    if not initial.empty:
        last = int(rows["cycle"].max()) if not rows.empty else 0
        flat = pd.concat([initial.assign(cycle=c) for c in range(last + 1)])
        _errorbar(ax, flat, 0.0, INITIAL_LABEL, "black", zorder=3, linestyle="--")
    _cycle_axis(ax, [*initial["cycle"], *rows["cycle"]])


def _shared_legend(figure: Figure, experiments: list[str]) -> None:
    """One legend for all panels in a row below them: each experiment once, in order, then C0."""
    found: dict[str, object] = {}
    for ax in figure.axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            found.setdefault(label, handle)
    order = [*map(method_label, experiments), INITIAL_LABEL]
    handles = {label: found[label] for label in order if label in found}
    if handles:
        figure.legend(
            handles.values(),
            handles.keys(),
            loc="outside lower center",
            ncols=len(handles),
            fontsize="small",
        )


def _errorbar(
    ax: Axes,
    curve: pd.DataFrame,
    dodge: float,
    label: str,
    color: object,
    zorder: float = 2,
    linestyle: str = "-",
) -> None:
    """Means and ±1 SD of ``curve`` in percent; trained cycles shifted by ``dodge``, C0 never."""
    cycles = curve["cycle"].to_numpy(dtype=np.float64)
    ax.errorbar(
        np.where(cycles > 0, cycles + dodge, cycles),
        100 * curve["mean"].to_numpy(dtype=np.float64),
        yerr=100 * curve["sd"].fillna(0.0).to_numpy(dtype=np.float64),  # one seed: no bar
        label=label,
        color=color,
        marker="o",
        capsize=3,
        zorder=zorder,
        linestyle=linestyle,
    )


def _where(frame: pd.DataFrame, **values: object) -> pd.DataFrame:
    """The rows of ``frame`` whose columns equal ``values``."""
    mask = np.ones(len(frame), dtype=bool)
    for column, value in values.items():
        mask &= (frame[column] == value).to_numpy()
    return frame[mask]


def success_figure(eval_summary: pd.DataFrame, *, source: str = "eval_summary") -> Figure:
    """Figure 1a: success without PI per cycle, one panel per benchmark, one line per experiment.

    Points are means over decoding seeds, error bars ±1 sample SD; every line starts from the
    shared initial model at C0.
    """
    title = "Task success without PI per cycle"
    if eval_summary.empty:
        return _empty_figure(title, f"{source} has no rows")
    frame = _checked_eval_summary(eval_summary, source)
    ordinary = _where(frame, view="ordinary")
    if ordinary.empty:
        return _empty_figure(title, f"{source} has no ordinary-view rows")
    trained = ordinary[ordinary["cycle"] > 0]
    experiments = _ordered_experiments(_experiment_methods(trained, source))
    colors = _colors(experiments)
    initial = _initial_rows(ordinary)
    benchmarks = _ordered_benchmarks(ordinary)
    figure, axes = _new_figure(1, len(benchmarks), (5.0, 3.8))
    for ax, (env, split) in zip(axes[0], benchmarks, strict=True):
        _plot_success_curves(
            ax,
            _where(trained, env=env, split=split),
            _where(initial, env=env, split=split),
            experiments,
            colors,
        )
        ax.set_title(benchmark_label(env, split))
    _shared_legend(figure, experiments)
    figure.suptitle(f"{title} (mean ± 1 SD over decoding seeds)")
    return figure


def dual_view_figure(eval_summary: pd.DataFrame, *, source: str = "eval_summary") -> Figure:
    """Figure 3: success per cycle without PI (left) and with the fixed PI (right).

    One row of panels per benchmark, y shared within a row; one line per experiment starting from
    the initial model at C0; error bars ±1 sample SD. A view without rows says so in its title.
    """
    title = "Task success under both input views"
    if eval_summary.empty:
        return _empty_figure(title, f"{source} has no rows")
    frame = _checked_eval_summary(eval_summary, source)
    trained = frame[frame["cycle"] > 0]
    experiments = _ordered_experiments(_experiment_methods(trained, source))
    colors = _colors(experiments)
    initial = _initial_rows(frame)
    benchmarks = _ordered_benchmarks(frame)
    captions = {"ordinary": "ordinary view (without PI)", "privileged": "privileged view (with PI)"}
    figure, axes = _new_figure(len(benchmarks), len(VIEWS), (5.0, 3.8), sharey="row")
    for row_axes, (env, split) in zip(axes, benchmarks, strict=True):
        for ax, view in zip(row_axes, VIEWS, strict=True):
            caption = f"{benchmark_label(env, split)}: {captions[view]}"
            if _where(frame, env=env, split=split, view=view).empty:
                ax.set_title(f"{caption}: no data")
                _say_no_data(ax, f"{source} has no {view}-view rows here")
                continue
            _plot_success_curves(
                ax,
                _where(trained, env=env, split=split, view=view),
                _where(initial, env=env, split=split, view=view),
                experiments,
                colors,
            )
            ax.set_title(caption)
            ax.tick_params(axis="y", labelleft=True)  # shared limits, values readable on both
    _shared_legend(figure, experiments)
    figure.suptitle(f"{title} (PI fixed across checkpoints; mean ± 1 SD over decoding seeds)")
    return figure


def sensitivity_per_update(probe: pd.DataFrame, *, source: str = "probe") -> pd.DataFrame:
    """The probe's PI sensitivity per update, averaged over all response tokens (appendix D.3).

    A probe row's ``jsd`` is its step's mean over ``tokens`` response tokens, so an update's
    value is ``sum(jsd * tokens) / sum(tokens)`` over its probe steps: longer responses weigh more.

    Returns:
        One row per (experiment, method, cycle, update) in method, cycle and update order, with
        ``jsd`` (nats), ``tokens``, ``steps`` and ``position``: the update's place on one axis
        through all cycles. Cycle ``r``'s update ``u`` lies at ``u`` plus the last update of every
        earlier cycle, so a cycle's start (update 0) falls on the end of the cycle before it.

    Raises:
        SchemaError: a column of the ``probe`` contract is missing.
        ValueError: negative cycle, update or tokens; non-finite ``jsd``; a repeated
            (experiment, cycle, update, traj_id, t); an update without response tokens.
    """
    check_columns(probe, "probe", source=source)
    for column in ("cycle", "update", "tokens"):
        if (probe[column] < 0).any():
            raise ValueError(f"{source}: column {column!r} must be >= 0")
    if not np.isfinite(probe["jsd"].to_numpy(dtype=np.float64)).all():
        raise ValueError(f"{source}: column 'jsd' must be finite")
    step_keys = ["experiment", "cycle", "update", "traj_id", "t"]
    repeated = probe[probe.duplicated(step_keys, keep=False)]
    if not repeated.empty:
        raise ValueError(
            f"{source}: {len(repeated)} rows repeat a probe step of one update, e.g. "
            f"{tuple(repeated.iloc[0][step_keys])}"
        )
    methods = _experiment_methods(probe, source)
    weighted = probe.assign(weighted=probe["jsd"] * probe["tokens"])
    per_update = weighted.groupby(list(_PROBE_UPDATE_KEYS), as_index=False).agg(
        weighted=("weighted", "sum"), tokens=("tokens", "sum"), steps=("t", "size")
    )
    empty = per_update[per_update["tokens"] == 0]
    if not empty.empty:
        first = empty.iloc[0]
        raise ValueError(
            f"{source}: update {first['update']} of cycle {first['cycle']} of "
            f"{first['experiment']!r} has no response tokens; its sensitivity is undefined"
        )
    per_update["jsd"] = per_update.pop("weighted") / per_update["tokens"]
    last_update = per_update.groupby("cycle")["update"].max().sort_index()
    offsets = last_update.cumsum().shift(1, fill_value=0)  # cycle -> position of its update 0
    per_update["position"] = per_update["update"] + per_update["cycle"].map(offsets)
    return _in_method_order(per_update, methods, ["cycle", "update"])


def sensitivity_figure(probe: pd.DataFrame, *, source: str = "probe") -> Figure:
    """Figure 6: the current student's PI sensitivity on the fixed probe across all updates.

    One line per experiment over :func:`sensitivity_per_update`'s positions, unsmoothed; dashed
    vertical lines mark the cycle boundaries and each cycle is named at the top.
    """
    title = "PI sensitivity of the current student on the fixed probe"
    if probe.empty:
        return _empty_figure(title, f"{source} has no rows")
    per_update = sensitivity_per_update(probe, source=source)
    experiments = list(dict.fromkeys(per_update["experiment"]))
    colors = _colors(experiments)
    figure, axes = _new_figure(1, 1, (10.0, 4.2))
    ax = axes[0, 0]
    for experiment in experiments:
        curve = _where(per_update, experiment=experiment)
        ax.plot(
            curve["position"],
            curve["jsd"],
            label=method_label(experiment),
            color=colors[experiment],
            marker="o",
            markersize=3,
            markevery=max(1, len(curve) // 20),  # markers spaced for readability
            linewidth=1.2,
        )
    starts = per_update.groupby("cycle")["position"].min()
    for cycle, start in starts.items():
        if cycle != starts.index[0]:
            ax.axvline(start, color="0.45", linestyle="--", linewidth=0.9)
        ax.text(
            start,
            0.98,
            f" Cycle {cycle}",
            transform=ax.get_xaxis_transform(),  # x in data, y in axes units
            ha="left",
            va="top",
            fontsize="small",
            color="0.3",
        )
    ax.set_xlabel("Update (across cycles; update 0 = cycle start, dashed lines = cycle boundaries)")
    ax.set_ylabel("JSD between views (nats)")
    ax.set_ylim(bottom=0, top=ax.get_ylim()[1] * 1.12)  # room for the cycle names
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small", loc="lower left")
    ax.set_title(
        f"{title}\n(mean over all response tokens; support: initial model's top-20 + tail)"
    )
    return figure


def _time_unit(max_seconds: float) -> tuple[float, str]:
    """(seconds per unit, unit name) that keeps the tallest bar between about 2 and 120."""
    if max_seconds >= 2 * 3600:
        return 3600.0, "hours"
    if max_seconds >= 2 * 60:
        return 60.0, "minutes"
    return 1.0, "seconds"


def cost_figure(train_metrics: pd.DataFrame, *, source: str = "train_metrics") -> Figure:
    """Figure 5a / table 6: stacked wall time per experiment, one panel per cycle.

    Bars stack response generation, scoring, optimisation and other time (bottom to top), summed
    over the cycle's updates; the total is printed on each bar.
    """
    title = "Training-loop cost per cycle"
    if train_metrics.empty:
        return _empty_figure(title, f"{source} has no rows")
    totals = _cycle_costs(train_metrics, source)
    cycles = sorted(totals["cycle"].unique())
    scale, unit = _time_unit(float(totals[list(COST_COMPONENTS)].sum(axis=1).max()))
    palette = mpl.colormaps["Set2"].colors
    width = max(3.2, 0.9 * totals["experiment"].nunique() + 1.6)
    figure, axes = _new_figure(1, len(cycles), (width, 4.2), sharey="row")
    for ax, cycle in zip(axes[0], cycles, strict=True):
        rows = _where(totals, cycle=cycle)
        x = np.arange(len(rows))
        bottom = np.zeros(len(rows))
        for i, (column, label) in enumerate(COST_COMPONENTS.items()):
            heights = rows[column].to_numpy(dtype=np.float64) / scale
            ax.bar(x, heights, width=0.6, bottom=bottom, label=label, color=palette[i])
            bottom += heights
        ax.bar_label(ax.containers[-1], labels=[f"{t:.1f}" for t in bottom], fontsize="small")
        ax.set_xticks(x, [method_label(e) for e in rows["experiment"]], rotation=20, ha="right")
        ax.set_title(f"Cycle {cycle}")
        ax.set_ylabel(f"Wall time ({unit})")
        ax.margins(y=0.12)
        ax.grid(axis="y", alpha=0.3)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    figure.legend(handles[::-1], labels[::-1], loc="outside right upper", fontsize="small")
    figure.suptitle(f"{title} (summed over updates; Other = rest of the loop)")
    return figure


def write_figure(figure: Figure, path: str | Path) -> Path:
    """Save ``figure`` as a PNG at ``path`` atomically; return the path."""
    path = Path(path)
    if path.suffix != ".png":
        raise ValueError(f"path: figures are written as .png, got {str(path)!r}")
    with atomic_path(path) as tmp:
        figure.savefig(tmp, format="png", dpi=DPI, bbox_inches="tight")
    return path


def write_report(
    eval_summary: pd.DataFrame,
    train_metrics: pd.DataFrame,
    probe: pd.DataFrame,
    directory: str | Path,
) -> list[Path]:
    """Build the whole report, then write it under ``directory`` (``data/08_reporting``).

    Writes ``main_results.{md,csv}`` (table 1), ``cost_breakdown.{md,csv}`` (table 6, only when
    ``train_metrics`` has rows), ``fig1a_success.png``, ``fig3_dual_view.png``,
    ``fig5a_cost.png`` and ``fig6_sensitivity.png``. Everything is built before the first write,
    so bad input leaves ``directory`` as it was.

    Returns:
        The paths written, in the order above.
    """
    directory = Path(directory)
    tables = {"main_results": main_results_table(eval_summary)}
    if train_metrics.empty:
        logger.warning("report: train_metrics has no rows; the cost table is not written")
    else:
        tables["cost_breakdown"] = cost_table(train_metrics)
    figures = {
        "fig1a_success.png": success_figure(eval_summary),
        "fig3_dual_view.png": dual_view_figure(eval_summary),
        "fig5a_cost.png": cost_figure(train_metrics),
        "fig6_sensitivity.png": sensitivity_figure(probe),
    }
    written = [
        path for name, table in tables.items() for path in write_table(table, directory / name)
    ]
    written += [write_figure(figure, directory / name) for name, figure in figures.items()]
    logger.info("report: wrote %d files under %s", len(written), directory)
    return written
