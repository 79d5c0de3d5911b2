"""``python -m resail_pipeline.study``: the command line; its help is the package's notes."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from resail_pipeline.config import ConfigError
from resail_pipeline.study.cells import write_training_seeds
from resail_pipeline.study.plan import (
    load_plan,
    plan_path,
    training_seed_tag,
    with_training_seed,
)
from resail_pipeline.study.rule import with_choice
from resail_pipeline.study.runner import (
    check_options,
    rerun_cell,
    retrain_cell,
    run_cycle_0,
    run_study,
)

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
        help="one cell again instead (with --cycle): evaluated with --seeds, or trained with "
        "--training-seed",
    )
    parser.add_argument("--cycle", type=int, help="the cell's cycle (with --rerun)")
    parser.add_argument(
        "--seeds", type=int, nargs="+", help="evaluate the cell with these decoding seeds"
    )
    parser.add_argument(
        "--training-seed",
        type=int,
        help="train the plan (or, with --rerun, the cell) again with this training seed, in a "
        "folder of its own, and write its paired differences beside the grid's",
    )
    parser.add_argument(
        "--cycle-0",
        action="store_true",
        help="run only the plan's shared cycle 0 (the initial policy's evaluation), for a figure "
        "pre-registered on it before any candidate is evaluated",
    )
    args = parser.parse_args(argv)
    if (args.rerun is None) != (args.cycle is None):
        parser.error("--rerun and --cycle go together")
    if args.seeds is not None and (args.rerun is None or args.training_seed is not None):
        parser.error("--seeds goes with --rerun, without --training-seed")
    if args.rerun is not None and (args.seeds is None) == (args.training_seed is None):
        parser.error("--rerun takes --seeds (evaluate again) or --training-seed (train again)")
    if args.training_seed is not None and args.cycle_0:
        parser.error("--cycle-0 is the plan's own; no training seed changes it")
    if args.cycle_0 and args.rerun is not None:
        parser.error("--cycle-0 runs the plan's cycle 0 alone; --rerun names a cell")
    if args.tier is not None and (args.rerun is not None or args.cycle_0):
        parser.error("--tier chooses the plan's experiments; --rerun and --cycle-0 name theirs")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    path = args.plan or plan_path(args.env, args.project)
    try:
        plan = load_plan(path)
        if args.cycle_0:
            run_cycle_0(plan, args.env, args.project)
            return
        check_options(plan, tier=args.tier, rerun=args.rerun, cycle=args.cycle)
        plan = with_choice(plan, args.env, args.project)  # cycle 0 trains nothing: not before
        if args.rerun is not None and args.seeds is not None:
            rerun_cell(
                plan, args.env, args.project, name=args.rerun, cycle=args.cycle, seeds=args.seeds
            )
            return
        seeded = "" if args.training_seed is None else training_seed_tag("", args.training_seed)
        log = args.project / "data" / "08_reporting" / f"{path.stem}-{args.env}{seeded}.csv"
        if args.rerun is not None:
            retrain_cell(
                plan,
                args.env,
                args.project,
                name=args.rerun,
                cycle=args.cycle,
                seed=args.training_seed,
                log=log,
            )
        else:
            runs = plan
            if args.training_seed is not None:
                runs = with_training_seed(plan, args.env, args.project, args.training_seed)
            run_study(runs, args.env, args.project, log=log, tier=args.tier)
            # either seed's run moves cells the seeds share: their table follows (nothing is
            # written while no cell is evaluated under two training seeds)
            write_training_seeds(plan, args.env, args.project)
    except ConfigError as error:  # a bad plan or option: one line naming the field, status 2
        parser.exit(2, f"error: {error}\n")


if __name__ == "__main__":
    main()
