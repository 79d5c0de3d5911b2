"""The power a finished grid had: for every ReSAIL-vs-parent pair, cycle, split and view, the
standard error of the paired difference over tasks (each task's success averaged over its
decoding seeds) and the minimum detectable effect it gives (80% power, 5% two-sided: 2.80 standard
errors), in percentage points::

    .venv/bin/python scripts/grid_power.py --grid data/07_model_output/textcraft-study
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterator
from pathlib import Path

import pandas as pd

from resail_pipeline.evaluation.stats import detection_z, paired_per_task

#: each parent and its ReSAIL version
PAIRS = (("oel", "oel_resail"), ("sdpo", "sdpo_resail"))


def paired_cells(
    grid: Path,
) -> Iterator[tuple[str, str, int, str, str, pd.DataFrame, pd.DataFrame]]:
    """Every cell of ``grid`` (a data folder's model outputs) whose parent and ReSAIL version are
    both evaluated: ``(parent, resail, cycle, split, view, parent's rows, ReSAIL's rows)``."""
    for parent, resail in PAIRS:
        for folder in sorted((grid / parent).glob("cycle_*"), key=lambda f: int(f.name[6:])):
            other = grid / resail / folder.name / "eval_results.parquet"
            if not other.is_file():
                continue
            a, b = pd.read_parquet(folder / "eval_results.parquet"), pd.read_parquet(other)
            for (split, view), group in a.groupby(["split", "view"], sort=True):
                paired = b[(b["split"] == split) & (b["view"] == view)]
                yield parent, resail, int(folder.name[6:]), split, view, group, paired


def contrasts(grid: Path, level: float = 0.95, power: float = 0.8) -> pd.DataFrame:
    """One row per pair, cycle, split and view of ``grid`` (a data folder's model outputs)."""
    z = detection_z(level, power)
    rows = []
    for parent, resail, cycle, split, view, group, paired in paired_cells(grid):
        cell = f"{grid}: {resail} - {parent}, cycle {cycle}, {split}, {view}"
        try:
            d = paired_per_task(paired, group)  # the same games and decoding seeds, or refused
        except ValueError as error:
            raise SystemExit(f"{cell}: {error}") from None
        if len(d) < 2:
            raise SystemExit(f"{cell}: {len(d)} game(s); a standard error needs two")
        se = float(d.std(ddof=1) / math.sqrt(len(d)))
        rows.append(
            {
                "pair": f"{resail} - {parent}",
                "cycle": cycle,
                "split": split,
                "view": view,
                "tasks": len(d),
                "difference": round(100 * float(d.mean()), 1),
                "se": round(100 * se, 2),
                "mde": round(100 * z * se, 1),
            }
        )
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--grid", type=Path, required=True, help="a grid's model outputs")
    args = parser.parse_args()
    table = contrasts(args.grid)
    if table.empty:
        raise SystemExit(f"{args.grid}: no pair of {[list(p) for p in PAIRS]} evaluated")
    print(table.to_string(index=False))
    print(
        f"standard error {table['se'].min():.1f}-{table['se'].max():.1f} points, minimum "
        f"detectable effect {table['mde'].min():.1f}-{table['mde'].max():.1f} "
        f"(median {table['mde'].median():.1f}) over {len(table)} contrasts"
    )


if __name__ == "__main__":
    main()
