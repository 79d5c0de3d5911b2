"""What `make rehearse` must show, read from its data folder (``data/*/textcraft-rehearsal``).

    python scripts/check_rehearsal.py [--cycles 1]

Every generating node: two vLLM workers (the run's log). Every cycle: its corpus collected by vLLM
(the backend its tasks table records),
its summaries asked of the policy (the rules-based one standing in where it was rejected), its trainer a DeepSpeed ZeRO-2 job of two processes (the
configuration and log published beside the checkpoint), the probe's rows, and the evaluation of
the new checkpoint. Prints what it found; exits non-zero naming what is missing.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parents[1]
FOLDER = "textcraft-rehearsal"


def check_cycle(experiment: str, cycle: int) -> tuple[list[str], list[str]]:
    found, missing = [], []

    def read(layer: str, name: str) -> pd.DataFrame | None:
        path = ROOT / "data" / layer / FOLDER / experiment / f"cycle_{cycle}" / name
        if cycle == 1 and layer in ("01_raw", "02_intermediate", "03_primary"):
            path = ROOT / "data" / layer / FOLDER / "shared" / "cycle_1" / name
        if not path.is_file():
            missing.append(f"{path.relative_to(ROOT)}: missing")
            return None
        return pd.read_parquet(path)

    tasks = read("01_raw", "tasks.parquet")
    if tasks is not None:
        generation = json.loads(tasks["settings"].iloc[0])["generation"]
        if generation.get("backend") == "vllm":
            found.append(f"cycle {cycle}: {len(tasks)} tasks collected by vllm")
        else:
            missing.append(f"cycle {cycle}: collected with {generation}")
    summaries = read("03_primary", "summaries.parquet")
    if summaries is not None:
        sources = summaries["source"].value_counts().to_dict()
        if set(sources) <= {"model", "rules_fallback"} and int(summaries["attempts"].min()) >= 1:
            found.append(f"cycle {cycle}: every trajectory's summary asked of the policy {sources}")
        else:
            missing.append(f"cycle {cycle}: summaries not asked of the policy ({sources})")
    policy = ROOT / "data" / "06_models" / FOLDER / experiment / f"cycle_{cycle}" / "policy"
    config_path, log_path = policy / "train_config.yaml", policy / "train.log"
    if config_path.is_file() and log_path.is_file():
        engine = yaml.safe_load(config_path.read_text())["engine"]
        shape = (engine["kind"], engine["world_size"], engine["zero_stage"])
        if shape == ("deepspeed", 2, 2) and "engine deepspeed x 2" in log_path.read_text():
            found.append(f"cycle {cycle}: trained by DeepSpeed ZeRO-2 on 2 processes")
        else:
            missing.append(f"cycle {cycle}: trained by {shape}")
    else:
        missing.append(f"{policy.relative_to(ROOT)}: no published configuration and log")
    probe = read("07_model_output", "probe.parquet")
    if probe is not None:
        if len(probe):
            found.append(
                f"cycle {cycle}: {len(probe)} probe rows, updates {sorted(set(probe['update']))}"
            )
        else:
            missing.append(f"cycle {cycle}: the probe wrote no row")
    summary = read("07_model_output", "eval_summary.parquet")
    if summary is not None:
        rates = ", ".join(f"{r.view} {100 * r['mean']:.0f}%" for _, r in summary.iterrows())
        found.append(f"cycle {cycle}: evaluated ({rates})")
    return found, missing


def check_log(log: Path) -> tuple[list[str], list[str]]:
    """The Kedro run's log: every generating node started its two vLLM workers."""
    text = log.read_text(errors="replace") if log.is_file() else ""
    starts = text.count("generation: 2 vllm workers")
    if starts:
        return [f"{starts} generating nodes ran 2 vllm workers each"], []
    return [], [f"{log.relative_to(ROOT)}: no node started 2 vllm workers"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=1)
    parser.add_argument("--experiment", default="oel_resail")
    parser.add_argument("--log", default="data/08_reporting/rehearsal.log")
    args = parser.parse_args(argv)
    found, missing_all = check_log(ROOT / args.log)
    for line in found:
        print(f"ok      {line}")
    for cycle in range(1, args.cycles + 1):
        found, missing = check_cycle(args.experiment, cycle)
        for line in found:
            print(f"ok      {line}")
        missing_all += missing
    for line in missing_all:
        print(f"MISSING {line}")
    return 1 if missing_all else 0


if __name__ == "__main__":
    sys.exit(main())
