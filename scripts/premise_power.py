"""The power of the ALFWorld comparison, as conf/study-alfworld/premise.yml pre-registers it.

How much pairing shrinks the variance of a ReSAIL-vs-parent difference is read from an earlier
grid's pairs (every cycle, split and ordinary view: ``Var(x - y) / (Var x + Var y)`` over games,
:func:`~resail_pipeline.evaluation.stats.variance_ratio`), and its ``--quantile`` taken; the
per-game variance from cycle 0's evaluation on ``dev``. From both: the minimum detectable effect
(80% power, 5% two-sided) at ``--tasks`` games per split, and the games per split it takes to
bring it to ``--effect`` points. Written to ``--out`` (JSON) and printed::

    dev=alfworld-study-premise-dev
    .venv/bin/python scripts/premise_power.py \\
        --grid data/07_model_output/alfworld-study \\
        --baseline data/07_model_output/$dev/shared/cycle_0/eval_results.parquet \\
        --out data/08_reporting/$dev/power.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd
from grid_power import PAIRS, paired_cells

from resail_pipeline.evaluation.stats import (
    FlatTasksError,
    minimum_detectable_effect,
    tasks_for_effect,
    variance_ratio,
)
from resail_pipeline.io import atomic_path


def prior_ratios(grid: Path, view: str = "ordinary") -> pd.DataFrame:
    """Every pair's variance ratio in ``grid`` (a data folder's model outputs), per cycle and
    split, in ``view``; ``None`` where neither arm varies over games (no ratio to learn from)."""
    rows = [
        {"parent": parent, "cycle": cycle, "split": split, "ratio": _ratio(a, b)}
        for parent, _, cycle, split, cell_view, a, b in paired_cells(grid)
        if cell_view == view
    ]
    if not any(row["ratio"] is not None for row in rows):
        raise SystemExit(f"{grid}: no pair of {[list(p) for p in PAIRS]} evaluated in {view}")
    return pd.DataFrame(rows)


def _ratio(a: pd.DataFrame, b: pd.DataFrame) -> float | None:
    """:func:`variance_ratio` of ``a`` and ``b``, ``None`` where no game varies in either."""
    try:
        return variance_ratio(a, b)
    except FlatTasksError:
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--grid", type=Path, required=True, help="an earlier grid's outputs")
    parser.add_argument("--baseline", type=Path, required=True, help="cycle 0's eval_results")
    parser.add_argument("--split", default="dev", help="the baseline's split (default dev)")
    parser.add_argument("--quantile", type=float, default=0.75, help="of the prior ratios")
    parser.add_argument("--tasks", type=int, default=256, help="games per evaluation split")
    parser.add_argument("--effect", type=float, default=4.0, help="points to detect")
    parser.add_argument("--out", type=Path, help="the JSON written (default: none)")
    args = parser.parse_args()
    if not args.baseline.is_file():
        raise SystemExit(f"--baseline: {args.baseline} is no file")

    ratios = prior_ratios(args.grid)
    ratio = float(np.quantile(ratios["ratio"].dropna(), args.quantile))
    results = pd.read_parquet(args.baseline)
    figures = {}
    for view, group in results[results["split"] == args.split].groupby("view", sort=True):
        figures[view] = {
            "games": int(group["task_id"].nunique()),
            "seeds": int(group["decoding_seed"].nunique()),
            "success": round(100 * float(group["success"].mean()), 1),
            "game_variance": float(group.groupby("task_id")["success"].mean().var(ddof=1)),
            "mde_points": round(
                100 * minimum_detectable_effect(group, ratio=ratio, tasks=args.tasks), 2
            ),
            "games_for_effect": tasks_for_effect(group, args.effect / 100, ratio=ratio),
        }
    if not figures:
        raise SystemExit(f"--baseline: no {args.split!r} episodes in {args.baseline}")
    report = {
        "grid": str(args.grid),
        "prior_ratios": [
            {**row, "ratio": None if pd.isna(row["ratio"]) else round(row["ratio"], 4)}
            for row in ratios.to_dict(orient="records")
        ],
        "quantile": args.quantile,
        "ratio": round(ratio, 4),
        "baseline": str(args.baseline),
        "tasks": args.tasks,
        "effect_points": args.effect,
        "views": figures,
    }
    text = json.dumps(report, indent=2)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(args.out) as tmp:
            Path(tmp).write_text(text + "\n")
    print(
        f"ratio {ratio:.3f} (quantile {args.quantile} of {ratios['ratio'].count()} pairs); "
        + "; ".join(
            f"{view}: success {f['success']}%, MDE {f['mde_points']} points at {args.tasks} "
            f"games, {f['games_for_effect']} games for {args.effect:g}"
            for view, f in figures.items()
        )
    )


if __name__ == "__main__":
    main()
