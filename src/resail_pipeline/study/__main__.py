"""``python -m resail_pipeline.study``: the command line; its help is the package's notes."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from resail_pipeline.config import ConfigError
from resail_pipeline.study.plan import load_plan, plan_path
from resail_pipeline.study.runner import rerun_cell, run_cycle_0, run_study

#: the package this command runs (imported before it, as every parent is): its docstring is the help
_PACKAGE = sys.modules[__spec__.parent]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m resail_pipeline.study", description=_PACKAGE.__doc__
    )
    parser.add_argument("--env", default="study", help="Kedro configuration environment")
    parser.add_argument(
        "--plan", type=Path, help="the plan (default: conf/<env>/study.yml, else base)"
    )
    parser.add_argument("--project", type=Path, default=Path.cwd(), help="the Kedro project")
    parser.add_argument(
        "--tier", type=int, default=None, help="run the experiments of tiers up to this one"
    )
    parser.add_argument(
        "--rerun",
        metavar="EXPERIMENT",
        help="evaluate one cell again instead (with --cycle, --seeds)",
    )
    parser.add_argument("--cycle", type=int, help="the cell's cycle (with --rerun)")
    parser.add_argument("--seeds", type=int, nargs="+", help="decoding seeds (with --rerun)")
    parser.add_argument(
        "--cycle-0",
        action="store_true",
        help="run only the plan's shared cycle 0 (the initial policy's evaluation), for a figure "
        "pre-registered on it before any candidate is evaluated",
    )
    args = parser.parse_args(argv)
    if (args.rerun is None) != (args.cycle is None) or (args.rerun is None) != (args.seeds is None):
        parser.error("--rerun, --cycle and --seeds go together")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    path = args.plan or plan_path(args.env, args.project)
    try:
        plan = load_plan(path)
        if args.cycle_0:
            run_cycle_0(plan, args.env, args.project)
            return
        if args.rerun is not None:
            rerun_cell(
                plan, args.env, args.project, name=args.rerun, cycle=args.cycle, seeds=args.seeds
            )
            return
        log = args.project / "data" / "08_reporting" / f"{path.stem}-{args.env}.csv"
        run_study(plan, args.env, args.project, log=log, tier=args.tier)
    except ConfigError as error:  # a bad plan or option: one line naming the field, status 2
        parser.exit(2, f"error: {error}\n")


if __name__ == "__main__":
    main()
