"""The report's tables: table 1, the paired differences (and their SD over training seeds),
ablations, the success of each cycle's collection, the rejected-summaries note, the cost table
(table 6), and their Markdown."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping

import numpy as np
import pandas as pd

from resail_pipeline.evaluation.report.frames import (
    COST_COMPONENTS,
    INITIAL_METHOD,
    METHOD_LABELS,
    MISSING,
    RESAIL_PARENTS,
    VIEWS,
    benchmark_label,
    checked_eval_summary,
    comparisons,
    cycle_costs,
    experiment_methods,
    format_cell,
    initial_rows,
    method_label,
    ordered_benchmarks,
    ordered_experiments,
    require,
    rows_where,
)
from resail_pipeline.evaluation.stats import (
    mean_and_sd,
    paired_difference,
    replicated_difference,
    task_difference,
)
from resail_pipeline.schemas import check_columns


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
    frame = checked_eval_summary(eval_summary, source)
    ordinary = frame[frame["view"] == "ordinary"]
    if ordinary.empty:
        raise ValueError(
            f"{source}: no ordinary-view rows; the main results are success without PI"
        )
    initial = initial_rows(ordinary)
    trained = ordinary[ordinary["cycle"] > 0]
    benchmarks = ordered_benchmarks(ordinary)
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
    for experiment in ordered_experiments(experiment_methods(trained, source)):
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


#: the keys of one paired difference: a comparison, on one benchmark and view, at one cycle
_DIFFERENCE_KEYS = ["Comparison", "Benchmark", "View", "Cycle"]


def _compared(
    eval_results: pd.DataFrame, source: str, *, successive: bool = False
) -> Iterator[tuple[tuple[str, str, str, int], pd.DataFrame, pd.DataFrame]]:
    """Every comparison of the report's paired differences, in its order: ``((comparison,
    benchmark, view, cycle), episodes, the episodes they are paired with)``; first every experiment
    at every cycle against the initial model (ReAct, cycle 0), then the pairs of
    :func:`~resail_pipeline.evaluation.report.frames.comparisons`, each at every cycle both
    reached, then, with ``successive``, every experiment at every cycle against its own previous
    cycle."""
    check_columns(eval_results, "eval_results", source=source)
    require(eval_results, ("experiment",), source)
    trained = eval_results[eval_results["cycle"] > 0]
    initial = eval_results[eval_results["cycle"] == 0]
    label = METHOD_LABELS[INITIAL_METHOD]
    methods = experiment_methods(trained, source)
    experiments = ordered_experiments(methods)
    of = {e: trained[trained["experiment"] == e] for e in experiments}
    pairs = [  # (label, rows, baseline rows, the baseline's cycle lag; None: the initial model)
        (f"{method_label(e)} - {label}", of[e], initial, None) for e in experiments
    ]
    pairs += [
        (
            f"{method_label(ours)} - {method_label(theirs)}",
            of[ours],
            trained[trained["experiment"] == theirs],  # none where ``theirs`` has not run
            0,
        )
        for ours, theirs in comparisons({e: methods[e] for e in experiments})
    ]
    if successive:
        pairs += [(f"{method_label(e)} - previous cycle", of[e], of[e], 1) for e in experiments]
    for name, ours, theirs, lag in pairs:
        for (env, split, view, cycle), group in ours.groupby(
            ["env", "split", "view", "cycle"], sort=True
        ):
            where = {"env": env, "split": split, "view": view}
            base = (
                rows_where(theirs, **where)
                if lag is None
                else rows_where(theirs, cycle=cycle - lag, **where)
            )
            if not base.empty:
                yield (name, benchmark_label(env, split), view, int(cycle)), group, base


def paired_differences_table(
    eval_results: pd.DataFrame, *, source: str = "eval_results", successive: bool = False
) -> pd.DataFrame:
    """Paired differences in success (same tasks, same decoding seeds;
    :func:`~resail_pipeline.evaluation.stats.paired_difference`) in percentage points, with 95%
    bootstrap intervals over tasks: first every experiment at every cycle against the initial
    model (ReAct, cycle 0), then each ReSAIL variant against its parent (the experiments named
    after the two methods), then each other experiment of a method against the one named after it
    (an ablation against the full method, e.g. ``oel_resail-retention_none - OEL + ReSAIL``), then
    each such experiment of a ReSAIL variant against the variant's parent
    (``oel_resail-retention_none - OEL``), each at every cycle both reached; with ``successive``,
    then every experiment at every cycle against its own previous one (``OEL - previous cycle``
    at cycle 3: cycle 3 over cycle 2; a grid's reading between cells); per benchmark and view.

    Returns:
        Columns ``Comparison``, ``Benchmark``, ``View``, ``Cycle``, ``Difference (pp)``,
        ``95% CI (pp)``, ``Tasks``, ``Gained / lost`` (the tasks whose success rose and fell) and
        ``Sign test p`` (exact, two-sided, over those: the check on an interval that rests on few
        tasks); no rows where no pair was evaluated.
    """
    columns = [
        *_DIFFERENCE_KEYS,
        "Difference (pp)",
        "95% CI (pp)",
        "Tasks",
        "Gained / lost",
        "Sign test p",
    ]
    if eval_results.empty:
        return pd.DataFrame(columns=columns)
    rows = []
    for keys, ours, theirs in _compared(eval_results, source, successive=successive):
        try:
            d = paired_difference(ours, theirs)
        except ValueError as error:  # e.g. an evaluation cut short: name the cell
            raise ValueError(f"{source}: {', '.join(map(str, keys))}: {error}") from None
        rows.append(
            dict(zip(_DIFFERENCE_KEYS, keys, strict=True))
            | {
                "Difference (pp)": 100 * d["difference"],
                "95% CI (pp)": _interval(d),
                "Tasks": d["tasks"],
                "Gained / lost": f"{d['gained']} / {d['lost']}",
                "Sign test p": round(d["sign_p"], 3),
            }
        )
    return pd.DataFrame(rows, columns=columns)


def training_seeds_table(
    eval_results: pd.DataFrame, *, source: str = "eval_results"
) -> pd.DataFrame:
    """The report's paired differences (:func:`paired_differences_table`) of a grid trained again
    with other training seeds: each seed's beside the others', their mean with its 95% bootstrap
    interval over tasks (:func:`~resail_pipeline.evaluation.stats.replicated_difference`: each
    task's difference averaged over decoding and training seeds; the training runs held fixed, so
    the shift a run gives every task is not in it) and their sample SD over training seeds, which
    is.

    Args:
        eval_results: the ``eval_results`` of every training seed's grid, with their
            ``experiment`` and ``training_seed``; a seed's comparisons pair its own episodes (the
            initial model's among them).

    Returns:
        Columns ``Comparison``, ``Benchmark``, ``View``, ``Cycle``, ``Training seeds``, one
        ``Seed <s> (pp)`` per training seed (``nan`` where that seed has not reached the cell),
        ``Mean (pp)``, ``95% CI over tasks (pp)``, ``SD over seeds (pp)``, ``Tasks``: one row per
        comparison at least two training seeds reached, the mean, interval and SD over those.
    """
    require(eval_results, ("training_seed",), source)
    seeds = sorted(int(s) for s in eval_results["training_seed"].unique())
    per_seed = {
        seed: {
            keys: (ours, theirs)
            for keys, ours, theirs in _compared(
                eval_results[eval_results["training_seed"] == seed], f"{source} (seed {seed})"
            )
        }
        for seed in seeds
    }
    rows = []
    for keys, _, _ in _compared(eval_results, source):  # every seed's cells, in the report's order
        reached = [seed for seed in seeds if keys in per_seed[seed]]
        if len(reached) < 2:  # one seed's difference is the report's own
            continue
        each = {seed: paired_difference(*per_seed[seed][keys]) for seed in reached}
        pooled = replicated_difference([per_seed[seed][keys] for seed in reached])
        _, sd = mean_and_sd([100 * d["difference"] for d in each.values()])
        rows.append(
            dict(zip(_DIFFERENCE_KEYS, keys, strict=True))
            | {"Training seeds": ", ".join(str(seed) for seed in reached)}
            | {
                f"Seed {seed} (pp)": 100 * each[seed]["difference"] if seed in each else np.nan
                for seed in seeds
            }
            | {
                "Mean (pp)": 100 * pooled["difference"],
                "95% CI over tasks (pp)": _interval(pooled),
                "SD over seeds (pp)": sd,
                "Tasks": pooled["tasks"],
            }
        )
    columns = [
        *_DIFFERENCE_KEYS,
        "Training seeds",
        *(f"Seed {seed} (pp)" for seed in seeds),
        "Mean (pp)",
        "95% CI over tasks (pp)",
        "SD over seeds (pp)",
        "Tasks",
    ]
    return pd.DataFrame(rows, columns=columns)


def ablation_table(
    eval_summary: pd.DataFrame, rows: Mapping[str, str], *, source: str = "eval_summary"
) -> pd.DataFrame:
    """An ablation in table 3's format: one row per ``label -> experiment`` of ``rows``, columns
    benchmark x cycle, success without PI and, where evaluated, with PI (``"(with PI)"``). A
    column is a cycle that at least two of the variants evaluated there reached (every cycle
    where only one variant is, or where no two share one), so that each column compares, and a
    variant still behind the others shows ``--`` rather than hiding their cycle.

    Cells as :func:`format_cell`; ``--`` where an experiment (or a cycle of it) is missing.
    """
    frame = checked_eval_summary(eval_summary, source) if not eval_summary.empty else eval_summary
    trained = frame[frame["cycle"] > 0] if not frame.empty else frame
    chosen = trained[trained["experiment"].isin(list(rows.values()))] if not frame.empty else frame
    columns: dict[tuple, str] = {}
    if not chosen.empty:
        for env, split in ordered_benchmarks(chosen):
            for view in VIEWS:
                suffix = "" if view == "ordinary" else " (with PI)"
                here = rows_where(chosen, env=env, split=split, view=view)
                reached = Counter(
                    int(c) for c in here.drop_duplicates(["experiment", "cycle"]).cycle
                )
                least = min(2, here["experiment"].nunique())
                shown = [c for c, variants in reached.items() if variants >= least]
                for cycle in sorted(shown or reached):  # none shared: every one, dashed
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


#: the columns of the trajectories the collection table reads
COLLECTION_COLUMNS = ("experiment", "method", "cycle", "env", "split", "task_id", "success")


def collection_table(trajectories: pd.DataFrame, *, source: str = "trajectories") -> pd.DataFrame:
    """The success of the trajectories each cycle collects, on the tasks the cycles learn from.

    Cycle r's corpus is collected by the policy cycle r - 1 trained; cycle 1's (shared by every
    experiment) by the initial policy. So this is each policy's success where it is deployed,
    one trajectory per task with a decoding seed of its own, where table 1 measures it on held-out
    tasks. Each policy is compared with the initial one by :func:`task_difference`: tasks paired,
    decoding seeds not; ``--`` where the two corpora are not of the same tasks (a budget that draws
    a sample of the split each cycle).

    Returns:
        One row per (experiment, benchmark, collecting policy), the initial policy's first, in
        method order: ``Method``, ``Benchmark``, ``Policy of cycle``, ``Trajectories``,
        ``Success (%)``, ``Difference (pp)``, ``95% CI (pp)``; no rows where nothing was collected.
    """
    columns = [
        "Method",
        "Benchmark",
        "Policy of cycle",
        "Trajectories",
        "Success (%)",
        "Difference (pp)",
        "95% CI (pp)",
    ]
    if trajectories.empty:
        return pd.DataFrame(columns=columns)
    require(trajectories, COLLECTION_COLUMNS, source)
    initial = trajectories[trajectories["cycle"] == 1]
    later = trajectories[trajectories["cycle"] > 1]
    groups = [(METHOD_LABELS[INITIAL_METHOD], initial)] + [
        (method_label(e), later[later["experiment"] == e])
        for e in ordered_experiments(experiment_methods(later, source))
    ]
    rows = []
    for env, split in ordered_benchmarks(trajectories):
        base = rows_where(initial, env=env, split=split)
        for label, frame in groups:
            for cycle, corpus in rows_where(frame, env=env, split=split).groupby("cycle"):
                same_tasks = not base.empty and set(corpus["task_id"]) == set(base["task_id"])
                d = task_difference(corpus, base) if same_tasks and cycle > 1 else None
                rows.append(
                    {
                        "Method": label,
                        "Benchmark": benchmark_label(env, split),
                        "Policy of cycle": int(cycle) - 1,
                        "Trajectories": len(corpus),
                        "Success (%)": 100 * corpus["success"].astype(float).mean(),
                        "Difference (pp)": np.nan if d is None else 100 * d["difference"],
                        "95% CI (pp)": MISSING if d is None else _interval(d),
                    }
                )
    return pd.DataFrame(rows, columns=columns)


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
    totals = cycle_costs(train_metrics, source)
    table = totals.rename(columns=COST_COMPONENTS)
    table.insert(0, "Method", table.pop("experiment").map(method_label))
    table = table.rename(columns={"cycle": "Cycle"})
    table["Total"] = table[list(COST_COMPONENTS.values())].sum(axis=1)
    return table


def gui_accuracy_table(curves: pd.DataFrame) -> pd.DataFrame:
    """AITZ accuracy (%) of each run (a row, the paper's name) at each monitored update (a
    column ``update N``), from the curves of :func:`~resail_pipeline.gui.offline.train_oel`."""
    wide = curves.pivot_table(index="run", columns="update", values="accuracy", sort=False)
    table = (100 * wide).rename(columns=lambda update: f"update {update}").reset_index()
    table["run"] = table["run"].map(method_label)
    return table.rename(columns={"run": "Run"})


#: the float format of a column whose name ends so (any case), in place of ``float_format``: a
#: p-value of 0.002 is not printed ``0.0``
_COLUMN_FORMATS = {"sign test p": ".3f"}


def table_to_markdown(table: pd.DataFrame, *, float_format: str = ".1f") -> str:
    """A GitHub-flavoured Markdown table: first column left-aligned, the others centred; floats
    by ``float_format``, those of a sign test's p-value column (``Sign test p``, ``grid: sign
    test p``) to three decimals."""
    header = [str(c) for c in table.columns]
    align = [":---"] + [":---:"] * (len(header) - 1)
    formats = [
        next((f for end, f in _COLUMN_FORMATS.items() if c.lower().endswith(end)), float_format)
        for c in header
    ]
    lines = [_markdown_line(header), _markdown_line(align)]
    for row in table.itertuples(index=False):
        lines.append(
            _markdown_line(_markdown_cell(v, f) for v, f in zip(row, formats, strict=True))
        )
    return "\n".join(lines) + "\n"


def _markdown_line(cells: Iterable[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _interval(difference: Mapping[str, float]) -> str:
    """A difference's 95% interval (fractions) in percentage points: ``"[-4.7, 2.7]"``; none
    over one task."""
    if math.isnan(difference["low"]):
        return MISSING
    return (
        f"[{_number(100 * difference['low'], '.1f')}, {_number(100 * difference['high'], '.1f')}]"
    )


def _number(value: float, spec: str) -> str:
    """``value`` formatted by ``spec``, without the sign of a value that rounds to zero (a
    difference of -1e-16 from float summation is printed 0.0, not -0.0)."""
    text = format(value, spec)
    return text[1:] if text.startswith("-") and float(text) == 0 else text


def _markdown_cell(value: object, float_format: str) -> str:
    if isinstance(value, float | np.floating):
        return MISSING if np.isnan(value) else _number(value, float_format)
    return str(value).replace("|", "\\|")
