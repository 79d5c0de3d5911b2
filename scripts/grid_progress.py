"""A grid's reading between its cells: the success of every cell evaluated so far (mean and SD
over decoding seeds, per benchmark and view), the report's paired differences among them (the same
games and decoding seeds; 95% bootstrap interval over games, the sign test over the games that
differ) and every experiment against its own previous cycle, in Markdown, printed and written to
``--out``::

    .venv/bin/python scripts/grid_progress.py --grid data/07_model_output/alfworld-study-full \
        --out data/08_reporting/alfworld-study-full/progress.md

The grid's report (``make study``) is written once its tier is whole and refuses a cycle trained
but not yet evaluated; this reads only the cells whose evaluation is written, with the report's
own tables (:func:`~resail_pipeline.evaluation.report.paired_differences_table`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from resail_pipeline.evaluation import report
from resail_pipeline.evaluation.report.frames import (
    experiment_methods,
    in_method_order,
    ordered_benchmarks,
)
from resail_pipeline.io import atomic_path
from resail_pipeline.study.cells import grid_cells


def success_table(summaries: pd.DataFrame) -> pd.DataFrame:
    """One row per evaluated (experiment, cycle): the initial policy's (cycle 0) first, then each
    experiment's cycles, experiments in the report's order; a ``mean (SD)`` column (percent) per
    benchmark and view."""
    methods = experiment_methods(summaries, "eval_summary files")
    summaries = in_method_order(
        summaries.assign(trained=summaries["cycle"] > 0), methods, ["cycle", "env", "split", "view"]
    ).sort_values("trained", kind="stable")
    keys = ["env", "split", "view"]
    present = set(map(tuple, summaries[keys].itertuples(index=False)))
    views = sorted(summaries["view"].unique())
    columns = [(*b, v) for b in ordered_benchmarks(summaries) for v in views if (*b, v) in present]
    rows = []
    for (experiment, cycle), group in summaries.groupby(["experiment", "cycle"], sort=False):
        cells = {
            (env, split, view): report.format_cell(mean, sd)
            for env, split, view, mean, sd in group[[*keys, "mean", "sd"]].itertuples(index=False)
        }
        rows.append(
            {"Experiment": experiment, "Cycle": int(cycle)}
            | {
                f"{report.benchmark_label(env, split)}, {view}": cells.get(
                    (env, split, view), report.MISSING
                )
                for env, split, view in columns
            }
        )
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--grid", type=Path, required=True, help="a grid's model outputs")
    parser.add_argument("--out", type=Path, help="the Markdown written (default: none)")
    args = parser.parse_args()
    if not args.grid.is_dir():
        raise SystemExit(f"--grid: {args.grid} is not a folder")
    results, summaries = grid_cells(args.grid), grid_cells(args.grid, "eval_summary")
    if results.empty or not (results["cycle"] > 0).any():
        raise SystemExit(f"{args.grid}: no trained cycle's eval_results.parquet yet")
    sources = (f"{args.grid} eval_summary files", f"{args.grid} eval_results files")
    try:  # a cell's two files disagree, or an evaluation was cut short: name it, print nothing
        report.check_episode_counts(summaries, results, sources=sources)
        paired = report.paired_differences_table(results, source=sources[1], successive=True)
    except ValueError as error:
        raise SystemExit(str(error)) from None
    text = (
        "## Success (%), mean (SD) over decoding seeds\n\n"
        + report.table_to_markdown(success_table(summaries))
        + "\n## Paired differences (percentage points)\n\n"
        + report.table_to_markdown(paired)
    )
    print(text, end="")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(args.out) as tmp:
            tmp.write_text(text)


if __name__ == "__main__":
    main()
