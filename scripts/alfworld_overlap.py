"""How far ALFWorld's ``id``, ``ood``, ``dev`` and ``clone`` games are from ``train``'s, per root.

    python scripts/alfworld_overlap.py before=data/01_raw/alfworld_games_old \\
        after=data/01_raw/alfworld_games/<settings> --json data/08_reporting/alfworld-overlap.json

Each root (``NAME=DIR``, or ``DIR`` named by its folder) is the generated set or ALFWorld's own
data; every game is opened in ALFWorld's engine by ``--workers`` processes and each split compared
with the root's ``train`` (:mod:`resail_pipeline.envs.alfworld_overlap`). Prints one markdown table
(sets in the order given) and, with ``--json``, writes every new word and class there.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from resail_pipeline.envs.alfworld_overlap import (
    COMPARED_SPLITS,
    as_json,
    markdown_table,
    split_overlap,
)


def _named(value: str) -> tuple[str, Path]:
    name, sep, folder = value.partition("=")
    return (name, Path(folder)) if sep else (Path(value).name, Path(value))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("roots", nargs="+", type=_named, metavar="[NAME=]DIR", help="data roots")
    parser.add_argument(
        "--splits",
        nargs="+",
        default=list(COMPARED_SPLITS),
        help=f"splits compared with train (default: {' '.join(COMPARED_SPLITS)})",
    )
    parser.add_argument("--workers", type=int, default=None, help="processes (one per core)")
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    sets = {name: split_overlap(root, args.splits, args.workers) for name, root in args.roots}
    print(markdown_table(sets))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        roots = {name: str(root) for name, root in args.roots}
        args.json.write_text(json.dumps({"roots": roots, "sets": as_json(sets)}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
