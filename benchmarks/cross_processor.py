"""Are episodes the same on another processor? The evaluation run with its kernels held below the
processor's own, side by side with the processor's own kernels.

A sampled episode is a chain of token draws: where a kernel rounds a log-prob differently (other
instruction sets block and accumulate matrix products differently), a draw near a boundary can
take another token, and the episode goes elsewhere from there. This script measures how often
that happens on the shipped policy's evaluation (ordinary view, ``--tasks`` test tasks x
``--seeds``, temperature 0.4, the appendix-D.2 settings) for each generation setting:

- ``bf16 compiled``: what ``dtype: auto`` and ``compile: auto`` pick on a processor with native bf16
  (the embedded default's figures), compared between the processor's own kernels and oneDNN held
  to AVX-512 BF16 (``ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16``: a processor without AMX);
- ``fp32 eager``: compared between the processor's own kernels and oneDNN, MKL and ATen held to
  AVX2 (a processor without AVX-512).

Each run is a fresh process with its variables set (they are read once, at start); each prints its
processor line. The parent prints, per setting, the episodes whose actions are identical in both
runs, the first step at which the others part, and the success rate of each run.

    .venv/bin/python benchmarks/cross_processor.py [--tasks 30] [--seeds 0 1] [--settings "fp32 eager"]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TQDM_DISABLE", "1")

ROOT = Path(__file__).resolve().parents[1]
POLICY = ROOT / "reference" / "textcraft-initial"

#: (setting, dtype, compile, variables that stand for the other processor)
SETTINGS = (
    ("bf16 compiled", "bfloat16", True, {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"}),
    (
        "fp32 eager",
        "float32",
        False,
        {
            "ONEDNN_MAX_CPU_ISA": "AVX2",
            "MKL_ENABLE_INSTRUCTIONS": "AVX2",
            "ATEN_CPU_CAPABILITY": "avx2",
        },
    ),
)
#: variables a run of the processor's own kernels must not inherit
CAPS = ("ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "ATEN_CPU_CAPABILITY")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=30, help="test tasks, evenly spaced (30)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--policy", default=str(POLICY))
    parser.add_argument(
        "--settings",
        nargs="+",
        choices=[setting for setting, *_ in SETTINGS],
        default=[setting for setting, *_ in SETTINGS],
        help="which settings to compare (all)",
    )
    parser.add_argument(
        "--child", default=None, help=argparse.SUPPRESS
    )  # "<dtype>,<compile>,<out>"
    return parser.parse_args()


def child(args: argparse.Namespace) -> None:
    """One evaluation in this process; its actions per episode to a JSON file."""
    from functools import partial

    from resail_pipeline.devices import machine_header
    from resail_pipeline.envs import make_env
    from resail_pipeline.evaluation.evaluate import EvalConfig, evaluate_policy
    from resail_pipeline.generation import make_generator

    dtype, compiled, out = args.child.split(",", 2)
    print(machine_header(), flush=True)
    config = EvalConfig(num_tasks=args.tasks, decoding_seeds=tuple(args.seeds))
    generator = make_generator(
        "transformers", args.policy, dtype=dtype, compile=compiled == "True", progress=False
    )
    started = time.perf_counter()
    results, steps = evaluate_policy(
        partial(make_env, "textcraft"), generator, config, cycle=0, method="react"
    )
    seconds = time.perf_counter() - started
    actions = steps.sort_values(["traj_id", "t"]).groupby("traj_id")["action"].apply(list)
    Path(out).write_text(
        json.dumps(
            {
                "seconds": seconds,
                "success": dict(
                    zip(results["traj_id"], map(bool, results["success"]), strict=True)
                ),
                "actions": {k: [a or "" for a in v] for k, v in actions.items()},
            }
        )
    )


def run(args: argparse.Namespace, dtype: str, compiled: bool, caps: dict, out: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in CAPS}
    env.update(caps)
    command = [sys.executable, __file__, "--tasks", str(args.tasks), "--policy", args.policy]
    command += ["--seeds", *map(str, args.seeds), "--child", f"{dtype},{compiled},{out}"]
    subprocess.run(command, env=env, check=True)
    return json.loads(out.read_text())


def parted_at(a: list[str], b: list[str]) -> int | None:
    """The first step whose actions differ; ``None`` for identical episodes."""
    for t, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return t
    return None if len(a) == len(b) else min(len(a), len(b))


def main() -> None:
    args = parse_args()
    if args.child:
        child(args)
        return
    with tempfile.TemporaryDirectory() as tmp:
        for setting, dtype, compiled, caps in SETTINGS:
            if setting not in args.settings:
                continue
            label = ", ".join(f"{k}={v}" for k, v in caps.items())
            print(f"\n== {setting}: the processor's own kernels, then {label}", flush=True)
            own = run(args, dtype, compiled, {}, Path(tmp) / "own.json")
            other = run(args, dtype, compiled, caps, Path(tmp) / "other.json")
            parted = {
                traj: parted_at(own["actions"][traj], other["actions"].get(traj, []))
                for traj in own["actions"]
            }
            same = sum(p is None for p in parted.values())
            steps = sorted(p for p in parted.values() if p is not None)
            rates = [100 * sum(r["success"].values()) / len(r["success"]) for r in (own, other)]
            print(
                f"{setting}: {same} of {len(parted)} episodes take identical actions; the others "
                f"part at step {steps if steps else '-'}; success {rates[0]:.1f}% (own kernels, "
                f"{own['seconds']:.0f} s) vs {rates[1]:.1f}% ({other['seconds']:.0f} s)",
                flush=True,
            )


if __name__ == "__main__":
    main()
