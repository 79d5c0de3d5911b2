"""The report's figures: 1a (success per cycle), 3 (both views), 4 (success against a swept
setting), 5a (cost) and 6 (sensitivity).

Each is drawn on its own Agg canvas (:class:`matplotlib.figure.Figure`, never ``pyplot``), so
building one touches no global state and needs no display; one built from partial data shows what
there is, one without data says so in its title.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping

import matplotlib as mpl
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from resail_pipeline.config import Config, Field, FolderName
from resail_pipeline.evaluation.report.frames import (
    COST_COMPONENTS,
    INITIAL_LABEL,
    VIEWS,
    benchmark_label,
    checked_eval_summary,
    cycle_costs,
    experiment_methods,
    initial_rows,
    method_label,
    ordered_benchmarks,
    ordered_experiments,
    rows_where,
    sensitivity_per_update,
)

_LEGEND_COLUMN_INCHES = 2.4  # the widest label, "ReAct (initial model, no update)", in "small"
_LEGEND_ROW_INCHES = 0.25


def _colors(experiments: Iterable[str]) -> dict[str, tuple[float, ...]]:
    """A colour per experiment: tab20's ten strong colours (tab10's), then its ten light ones (a
    full grid, ablations included, has eleven experiments), repeating only beyond twenty."""
    tab20 = mpl.colormaps["tab20"].colors
    palette = [*tab20[0::2], *tab20[1::2]]
    return {e: palette[i % len(palette)] for i, e in enumerate(experiments)}


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
    """One legend for all panels, below them: each experiment once, in order, then C0.

    As many columns as fit the figure's width (about 2.4 inches each), and the figure taller by
    the legend's rows, so that a grid of eleven experiments leaves the panels their size.
    """
    found: dict[str, object] = {}
    for ax in figure.axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            found.setdefault(label, handle)
    order = [*map(method_label, experiments), INITIAL_LABEL]
    handles = {label: found[label] for label in order if label in found}
    if handles:
        columns = max(1, min(len(handles), int(figure.get_figwidth() // _LEGEND_COLUMN_INCHES)))
        rows = math.ceil(len(handles) / columns)
        figure.set_figheight(figure.get_figheight() + _LEGEND_ROW_INCHES * rows)
        figure.legend(
            handles.values(),
            handles.keys(),
            loc="outside lower center",
            ncols=columns,
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


def _drawn(
    trained: pd.DataFrame, source: str, experiments: Collection[str] | None
) -> tuple[list[str], dict[str, tuple[float, ...]]]:
    """The experiments of ``trained`` a figure draws, in table-1 order (those of ``experiments``,
    as a figure of the paper's draws its rows; all where ``None``), and their colours, given
    over every experiment so that each keeps its colour in every figure."""
    ordered = ordered_experiments(experiment_methods(trained, source))
    colors = _colors(ordered)
    return ordered if experiments is None else [e for e in ordered if e in experiments], colors


def success_figure(
    eval_summary: pd.DataFrame,
    *,
    experiments: Collection[str] | None = None,
    source: str = "eval_summary",
) -> Figure:
    """Figure 1a: success without PI per cycle, one panel per benchmark, one line per experiment
    (of ``experiments`` only, where given: the paper's figure shows table 1's methods).

    Points are means over decoding seeds, error bars ±1 sample SD; every line starts from the
    shared initial model at C0.
    """
    title = "Task success without PI per cycle"
    if eval_summary.empty:
        return _empty_figure(title, f"{source} has no rows")
    frame = checked_eval_summary(eval_summary, source)
    ordinary = rows_where(frame, view="ordinary")
    if ordinary.empty:
        return _empty_figure(title, f"{source} has no ordinary-view rows")
    trained = ordinary[ordinary["cycle"] > 0]
    experiments, colors = _drawn(trained, source, experiments)
    initial = initial_rows(ordinary)
    benchmarks = ordered_benchmarks(ordinary)
    figure, axes = _new_figure(1, len(benchmarks), (5.0, 3.8))
    for ax, (env, split) in zip(axes[0], benchmarks, strict=True):
        _plot_success_curves(
            ax,
            rows_where(trained, env=env, split=split),
            rows_where(initial, env=env, split=split),
            experiments,
            colors,
        )
        ax.set_title(benchmark_label(env, split))
    _shared_legend(figure, experiments)
    figure.suptitle(f"{title} (mean ± 1 SD over decoding seeds)")
    return figure


def dual_view_figure(
    eval_summary: pd.DataFrame,
    *,
    experiments: Collection[str] | None = None,
    source: str = "eval_summary",
) -> Figure:
    """Figure 3: success per cycle without PI (left) and with the fixed PI (right).

    One row of panels per benchmark, y shared within a row; one line per experiment (of
    ``experiments`` only, where given: the paper's figure shows the retention views) starting
    from the initial model at C0; error bars ±1 sample SD. A view without rows says so in its
    title.
    """
    title = "Task success under both input views"
    if eval_summary.empty:
        return _empty_figure(title, f"{source} has no rows")
    frame = checked_eval_summary(eval_summary, source)
    trained = frame[frame["cycle"] > 0]
    experiments, colors = _drawn(trained, source, experiments)
    initial = initial_rows(frame)
    benchmarks = ordered_benchmarks(frame)
    captions = {"ordinary": "ordinary view (without PI)", "privileged": "privileged view (with PI)"}
    figure, axes = _new_figure(len(benchmarks), len(VIEWS), (5.0, 3.8), sharey="row")
    for row_axes, (env, split) in zip(axes, benchmarks, strict=True):
        for ax, view in zip(row_axes, VIEWS, strict=True):
            caption = f"{benchmark_label(env, split)}: {captions[view]}"
            if rows_where(frame, env=env, split=split, view=view).empty:
                ax.set_title(f"{caption}: no data")
                _say_no_data(ax, f"{source} has no {view}-view rows here")
                continue
            _plot_success_curves(
                ax,
                rows_where(trained, env=env, split=split, view=view),
                rows_where(initial, env=env, split=split, view=view),
                experiments,
                colors,
            )
            ax.set_title(caption)
            ax.tick_params(axis="y", labelleft=True)  # shared limits, values readable on both
    _shared_legend(figure, experiments)
    figure.suptitle(f"{title} (PI fixed across checkpoints; mean ± 1 SD over decoding seeds)")
    return figure


class Sweep(Config):
    """One panel of figure 4: a setting swept over experiments, read at one cycle."""

    cycle: int = Field(ge=1)
    """The cycle whose evaluation is shown (the paper's rho at cycle 1, lambda at cycle 3)."""
    points: tuple[tuple[float, FolderName], ...] = Field(min_length=1)
    """``[value, experiment]`` pairs: the setting's value and the experiment run with it; an
    experiment not yet evaluated at the cycle leaves its point out."""


def sweep_figure(
    eval_summary: pd.DataFrame, sweeps: Mapping[str, Sweep], *, source: str = "eval_summary"
) -> Figure:
    """Figure 4: success at each value of a swept setting, one panel per sweep (its title the
    setting's name), one line per benchmark and view; points are means over decoding seeds,
    error bars ±1 sample SD. The values sit evenly along the axis, labelled as given."""
    title = "Task success against a swept setting"
    if not sweeps:
        return _empty_figure(title, "report.sweeps names no sweep")
    if eval_summary.empty:
        return _empty_figure(title, f"{source} has no rows")
    frame = checked_eval_summary(eval_summary, source)
    figure, axes = _new_figure(1, len(sweeps), (5.0, 3.8))
    styles = {"ordinary": "-", "privileged": "--"}
    for ax, (name, sweep) in zip(axes[0], sweeps.items(), strict=True):
        at = rows_where(frame, cycle=sweep.cycle)
        drawn = False
        for k, (env, split) in enumerate(ordered_benchmarks(frame)):
            for view in VIEWS:
                rows = rows_where(at, env=env, split=split, view=view).set_index("experiment")
                points = [
                    (i, rows.loc[e]) for i, (_, e) in enumerate(sweep.points) if e in rows.index
                ]
                if not points:
                    continue
                ax.errorbar(
                    [i for i, _ in points],
                    [100 * float(row["mean"]) for _, row in points],
                    yerr=[
                        100 * (0.0 if math.isnan(row["sd"]) else float(row["sd"]))
                        for _, row in points
                    ],
                    label=f"{benchmark_label(env, split)}, {view}",
                    color=mpl.colormaps["tab10"].colors[k % 10],
                    linestyle=styles[view],
                    marker="o",
                    capsize=3,
                )
                drawn = True
        ax.set_xticks(range(len(sweep.points)), [f"{value:g}" for value, _ in sweep.points])
        ax.set_xlabel(name)
        ax.set_ylabel("Success rate (%)")
        ax.grid(axis="y", alpha=0.3)
        ax.set_title(f"{name} (cycle {sweep.cycle})" if drawn else f"{name}: no data")
        if drawn:
            ax.legend(fontsize="small")
        else:
            _say_no_data(ax, f"no experiment of the sweep is evaluated at cycle {sweep.cycle}")
    figure.suptitle(f"{title} (mean ± 1 SD over decoding seeds)")
    return figure


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
        curve = rows_where(per_update, experiment=experiment)
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
    totals = cycle_costs(train_metrics, source)
    cycles = sorted(totals["cycle"].unique())
    scale, unit = _time_unit(float(totals[list(COST_COMPONENTS)].sum(axis=1).max()))
    palette = mpl.colormaps["Set2"].colors
    width = max(3.2, 0.9 * totals["experiment"].nunique() + 1.6)
    figure, axes = _new_figure(1, len(cycles), (width, 4.2), sharey="row")
    for ax, cycle in zip(axes[0], cycles, strict=True):
        rows = rows_where(totals, cycle=cycle)
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


def gui_accuracy_figure(curves: pd.DataFrame, *, source: str = "curves") -> Figure:
    """Figure 5b: step-level exact-match accuracy on the fixed monitoring subset against the
    update, one line per run (``run``, ``update``, ``accuracy`` in ``[0, 1]``, ``steps``)."""
    title = "AITZ step-level action accuracy on the fixed monitoring subset"
    if curves.empty:
        return _empty_figure(title, f"{source} has no rows")
    runs = list(dict.fromkeys(curves["run"]))
    colors = _colors(runs)
    figure, axes = _new_figure(1, 1, (6.4, 4.0))
    ax = axes[0, 0]
    for run in runs:
        curve = curves[curves["run"] == run].sort_values("update")
        ax.plot(
            curve["update"],
            100 * curve["accuracy"],
            label=method_label(run),
            color=colors[run],
            marker="o",
            markersize=3,
            linewidth=1.2,
        )
    steps = sorted(set(curves["steps"]))
    ax.set_xlabel("Update")
    ax.set_ylabel("Accuracy (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    ax.set_title(f"{title}\n({', '.join(map(str, steps))} non-stop steps, one decoding seed)")
    return figure
