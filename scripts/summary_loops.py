"""How many summaries quote an action their episode looped on: a fixed Experience as stored, and
the rules-based summaries the code builds now from the same episodes.

An action counts as looped when the episode took it 3 or more times or the game rejected it
(``experience.alfworld_rules.looped_actions``); a summary quotes it when the action occurs in it as
a whole command (``experience.alfworld_rules.quotes``). Reads a data folder's ``cycle_0`` reference
episodes and its Experience::

    .venv/bin/python scripts/summary_loops.py --data data --tag alfworld-study
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from resail_pipeline.experience.alfworld_rules import looped_actions, quotes
from resail_pipeline.experience.evidence import build_evidence_table
from resail_pipeline.experience.rules import rules_summary
from resail_pipeline.experience.validation import validate_summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path("data"), help="the data root")
    parser.add_argument("--tag", required=True, help="the data folder, e.g. alfworld-study")
    args = parser.parse_args()
    episodes = args.data / "02_intermediate" / args.tag / "shared" / "cycle_0"
    trajectories = pd.read_parquet(episodes / "reference_trajectories.parquet")
    steps = pd.read_parquet(episodes / "reference_steps.parquet")
    stored = pd.read_parquet(
        args.data / "03_primary" / args.tag / "shared" / "cycle_0" / "experience.parquet"
    ).set_index("traj_id")
    evidence = build_evidence_table(trajectories, steps)
    old = new = accepted = 0
    for item in evidence:
        looped = looped_actions(item)
        text = rules_summary(item)
        accepted += validate_summary(text, item.outcome, item).accepted
        old += any(quotes(stored.loc[item.traj_id, "summary"], a) for a in looped)
        new += any(quotes(text, a) for a in looped)
    n = len(evidence)
    print(f"{n} reference episodes of {args.tag}")
    print(f"stored Experience: {old} of {n} summaries quote a looped or rejected action")
    print(f"rules now: {new} of {n} ({accepted} of {n} pass the validator)")


if __name__ == "__main__":
    main()
