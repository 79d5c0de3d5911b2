"""Wall time of one training update: ``oel_resail`` against ``oel``, or the trainer before and now.

The batch is built the pipeline's way: TextCraft training goals played by the exact planner (every
third episode stops two actions short and fails), ordinary prompts rendered from each step's
history by ``prompts.render_user_message`` (appendix G), summaries written by the experience rules.
The model has the embedded default's shape (Qwen3, 4 layers, width 256, SwiGLU 768, tied
embeddings, random init) over a word-level tokenizer trained on that text. A random model rarely
ends a response, so every response has ``--max-tokens`` tokens.

Methods (the default): both methods are set up once from the same checkpoint and inputs; each
round then times one update of each, in alternating order, from the same starting weights
(restored before every update), on the schedule's first batch. Fresh OEL responses are sampled
with the same seeds from the same weights, so both methods see the same responses. The script
prints the median wall seconds per phase (response, scoring, optimisation, other: the categories
of the paper's table 6), the median process CPU seconds per update, and the ratios. On a machine
shared with other jobs, CPU time is the steadier of the two, and one thread the steadier setting.

Side by side (``--side-by-side``): for each of ``--methods``, the trainer as of git revision
``--baseline`` (its ``src/`` extracted from git and imported in a process of its own) and the
current one, each in a process of its own, set up from the same
checkpoint, inputs and configuration; each round times one update of each, in alternating order,
from the same starting weights and seeds. The current trainer runs twice: eager
(``train.compile: false``) and, where inductor can compile here, compiled (``true``, what ``auto``
picks on a CPU with a C++ compiler). Every round asserts that each sampled the same response tokens
as ``before`` and computed the same loss (fp32; relative 5e-5 eager, 1e-4 compiled, whose fused
loops sum in another order), and the script prints the median wall seconds per phase of each and
the ratios (before / now). The first update of each process, which compiles, is not timed. The
current trainer keeps freed memory for its next step (``devices.keep_freed_memory``); with
``--same-allocator`` so does ``before`` (through glibc's environment), so that the ratios are the
code's gain alone.

    .venv/bin/python benchmarks/train_update_cost.py [--rounds 5] [--max-tokens 32] [--threads 1]
    .venv/bin/python benchmarks/train_update_cost.py --side-by-side [--baseline REV] [--no-compile]
        [--same-allocator]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from resail_pipeline.checkpoints import save_policy
from resail_pipeline.devices import KEEP_FREED_MEMORY_ENV, machine_header
from resail_pipeline.envs import make_env
from resail_pipeline.envs.planner import plan_from_observation
from resail_pipeline.experience.evidence import build_evidence
from resail_pipeline.experience.rules import rules_summary
from resail_pipeline.modeling import build_qwen3, build_word_tokenizer, small_qwen3_config
from resail_pipeline.prompts import EpisodeHistory, render_user_message
from resail_pipeline.training import TrainConfig, write_inputs
from resail_pipeline.training.records import PHASES, UpdateRecord
from resail_pipeline.training.run import TrainingRun

METHODS = ("oel", "oel_resail")
ROOT = Path(__file__).resolve().parents[1]
#: the trainer before the functional, compiled forward (training, scoring, in-loop sampling)
BASELINE = "4ce2e74"


def play_episodes(num: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``num`` planner episodes on TextCraft training goals: ``(steps, summaries)`` frames."""
    env = make_env("textcraft")
    steps, summaries = [], []
    for k, task_id in enumerate(env.task_ids("train")[:num]):
        initial = env.reset(task_id)
        history = EpisodeHistory.start("textcraft", initial)
        plan = plan_from_observation(initial.text) or []
        if k % 3 == 2:
            plan = plan[: max(1, len(plan) - 2)]  # stops short: a failed trajectory
        traj_id = f"bench/textcraft/train/{task_id}/0"
        rows = []
        success, end_reason = False, "step_limit"
        for t, action in enumerate(plan):
            prompt = render_user_message(history)
            result = env.step(action)
            rows.append(
                {
                    "traj_id": traj_id,
                    "t": t,
                    "observation": history.current_observation,
                    "admissible_actions": None,
                    "prompt": prompt,
                    "response": f"<thinking>\nFollow the plan.\n</thinking>\n<action>{action}</action>",
                    "action": action,
                    "action_valid": result.action_valid,
                    "next_observation": result.observation,
                    "reward": result.reward,
                    "done": result.done,
                }
            )
            history = history.advance(action, result)
            if result.done:
                success, end_reason = result.success, result.end_reason or end_reason
                break
        frame = pd.DataFrame(rows)
        trajectory = {
            "traj_id": traj_id,
            "env": "textcraft",
            "success": success,
            "task": initial.task,
            "end_reason": end_reason,
            "num_steps": len(rows),
        }
        summary = rules_summary(build_evidence(trajectory, frame))
        steps.append(frame)
        summaries.append(
            {
                "traj_id": traj_id,
                "outcome": "success" if success else "failure",
                "summary": summary,
                "attempts": 1,
                "accepted": True,
                "source": "rules",
                "rejection_reasons": [],
            }
        )
    return pd.concat(steps, ignore_index=True), pd.DataFrame(summaries)


def write_workload(workdir: Path, args: argparse.Namespace) -> Path:
    """The batch's inputs and the random policy under ``workdir``; returns the inputs' manifest."""
    steps, summaries = play_episodes(args.trajectories)
    tokenizer = build_word_tokenizer([*steps["prompt"], *summaries["summary"], *steps["response"]])
    config = small_qwen3_config(
        len(tokenizer), pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id
    )
    policy = workdir / "policy"
    save_policy(build_qwen3(config, seed=0), tokenizer, policy, name="bench")
    return write_inputs(workdir / "inputs", policy=policy, steps=steps, summaries=summaries)


def train_config(method: str, manifest: Path, workdir: Path, args: argparse.Namespace) -> dict:
    """The ``train`` configuration of one update of ``method`` on the workload."""
    return {
        "method": method,
        "schedule": {"updates": 1, "trajectories_per_update": args.trajectories},
        "engine": {
            "kind": "single",
            "precision": args.precision,
            "micro_batch_steps": args.micro_batch_steps,
        },
        "responses": {"max_tokens": args.max_tokens, "batch_size": 64},
        "run": {
            "manifest": str(manifest),
            "checkpoint": str(workdir / method / "policy"),
            "run_dir": str(workdir / method),
        },
    }


def setup(workdir: Path, args: argparse.Namespace) -> dict[str, TrainingRun]:
    manifest = write_workload(workdir, args)
    return {
        method: TrainingRun(
            TrainConfig.from_dict(train_config(method, manifest, workdir, args), "train")
        )
        for method in METHODS
    }


def time_update(
    run: TrainingRun, start: dict[str, torch.Tensor]
) -> tuple[float, float, UpdateRecord]:
    """``(wall seconds, process CPU seconds, record)`` of update 0 from the weights ``start``."""
    run.trainer.engine.inner.load_state_dict(start)
    wall, cpu = time.perf_counter(), time.process_time()
    record = run.trainer.update(0, run.schedule[0])
    return time.perf_counter() - wall, time.process_time() - cpu, record


# ----------------------------------------------------------------------------------------------
# side by side: the trainer of another revision and the current one, each in its own process

#: runs in a worker process whose ``PYTHONPATH`` holds one revision's ``src/``: sets up one
#: TrainingRun from the configuration on its first input line, then times one update per line
WORKER = """
import hashlib, json, sys, time
import torch
from resail_pipeline.training import TrainConfig
from resail_pipeline.training.run import TrainingRun

setup = json.loads(sys.stdin.readline())
torch.set_num_threads(setup["threads"])
run = TrainingRun(TrainConfig.from_dict(setup["config"], "train"))
start = {k: v.clone() for k, v in run.trainer.engine.inner.state_dict().items()}
sampled = []
generator = run.trainer.generator
if generator is not None:
    generate = generator.generate
    def recording(*a, **k):
        out = generate(*a, **k)
        sampled.extend(tuple(g.token_ids) for g in out)
        return out
    generator.generate = recording
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    run.trainer.engine.inner.load_state_dict(start)
    sampled.clear()
    wall, cpu = time.perf_counter(), time.process_time()
    record = run.trainer.update(0, run.schedule[0])
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    digest = hashlib.sha256(repr(sampled).encode()).hexdigest()
    print(json.dumps({"wall": wall, "cpu": cpu, "seconds": record.seconds, "loss": record.loss,
                      "tokens": record.tokens, "responses": digest}), flush=True)
"""


class Worker:
    """A process with one revision's trainer, set up for one method; :meth:`update` times one."""

    def __init__(
        self, src: Path, config: dict[str, Any], threads: int, env: dict[str, str] | None = None
    ) -> None:
        env = {**os.environ, **(env or {}), "PYTHONPATH": str(src), "TQDM_DISABLE": "1"}
        self.process = subprocess.Popen(
            [sys.executable, "-c", WORKER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            text=True,
        )
        self._send({"config": config, "threads": threads})
        if not self._receive().get("ready"):
            raise RuntimeError(f"worker for {src} did not start")

    def _send(self, message: Any) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(message) + "\n")
        self.process.stdin.flush()

    def _receive(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"a worker exited (code {self.process.wait()})")
        return json.loads(line)

    def update(self) -> dict[str, Any]:
        self._send("update")
        return self._receive()

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait()


def revision_source(revision: str, folder: Path) -> Path:
    """``src/`` of git revision ``revision`` extracted under ``folder``."""
    archive = subprocess.run(
        ["git", "archive", "--format=tar", revision, "src"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    target = folder / f"src-{revision}"
    target.mkdir(parents=True)
    archive_path = folder / "src.tar"
    archive_path.write_bytes(archive)
    with tarfile.open(archive_path) as tar:
        tar.extractall(target, filter="data")
    return target / "src"


#: relative difference from ``before``'s loss allowed to each current trainer: the loss is a
#: divergence between two nearly equal distributions (about 6e-4 on this workload), which magnifies
#: the relative rounding of the logits; eager, the current forward attends per tree (no padding, no
#: masked blocks), where SDPA's kernel blocks the same sums differently (measured up to 1.7e-5);
#: compiled, fused loops also sum in another order
TOLERANCE = {"now eager": 5e-5, "now compiled": 1e-4}


def side_by_side(args: argparse.Namespace) -> None:
    """Time the baseline's trainer against the current one (see the module notes)."""
    from resail_pipeline.generation.decoder import can_compile

    nows = {"now eager": False}
    if args.compile and can_compile(torch.device("cpu")):
        nows["now compiled"] = True
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        manifest = write_workload(workdir, args)
        baseline = revision_source(args.baseline, workdir)
        print(
            f"before: git {args.baseline}; now: the working tree, train.compile "
            f"{' and '.join(str(v).lower() for v in nows.values())}; {args.trajectories} "
            f"trajectories, {args.max_tokens} response tokens, {args.threads} thread(s), "
            f"precision {args.precision}; before's allocator: "
            + ("keeps freed memory, as now's" if args.same_allocator else "glibc's default")
        )
        for method in args.methods:
            workers = {
                "before": Worker(
                    baseline,
                    train_config(method, manifest, workdir / "b", args),
                    args.threads,
                    KEEP_FREED_MEMORY_ENV if args.same_allocator else None,
                )
            }
            for k, (version, compiled) in enumerate(nows.items()):
                config = {
                    **train_config(method, manifest, workdir / f"n{k}", args),
                    "compile": compiled,
                }
                workers[version] = Worker(ROOT / "src", config, args.threads)
            for worker in workers.values():
                worker.update()  # warm-up: compiles, allocates, picks kernels
            results: dict[str, list[dict[str, Any]]] = {v: [] for v in workers}
            worst = dict.fromkeys(nows, 0.0)
            for round_ in range(args.rounds):
                order = list(workers) if round_ % 2 == 0 else list(workers)[::-1]
                for version in order:
                    results[version].append(workers[version].update())
                before = results["before"][-1]
                for version in nows:
                    now = results[version][-1]
                    if (now["responses"], now["tokens"]) != (before["responses"], before["tokens"]):
                        raise AssertionError(f"{method}, {version}: other responses than before")
                    relative = abs(now["loss"] - before["loss"]) / abs(before["loss"])
                    worst[version] = max(worst[version], relative)
                    if relative > TOLERANCE[version]:
                        raise AssertionError(
                            f"{method}, {version}: loss {now['loss']!r}, before {before['loss']!r}"
                        )
            for worker in workers.values():
                worker.close()
            print(
                f"{method}: median of {args.rounds} updates (wall seconds); the same responses "
                f"and loss ({results['before'][0]['loss']:.6g}) in every round, largest relative "
                "difference " + ", ".join(f"{v} {d:.1e}" for v, d in worst.items())
            )
            columns = (*PHASES, "total", "cpu")
            print(f"{'':>13}" + "".join(f"{c:>13}" for c in columns))
            medians = {}
            for version, rows in results.items():
                medians[version] = {
                    **{p: statistics.median(r["seconds"][p] for r in rows) for p in PHASES},
                    "total": statistics.median(r["wall"] for r in rows),
                    "cpu": statistics.median(r["cpu"] for r in rows),
                }
                print(f"{version:>13}" + "".join(f"{medians[version][c]:>13.3f}" for c in columns))
            for version in nows:
                print(
                    f"{'before / ' + version.removeprefix('now '):>13}"
                    + "".join(
                        f"{medians['before'][c] / medians[version][c]:>13.2f}"
                        if medians[version][c] > 0
                        else f"{'-':>13}"
                        for c in columns
                    )
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="timed updates per method")
    parser.add_argument("--trajectories", type=int, default=8, help="|B| (TextCraft: 8)")
    parser.add_argument("--max-tokens", type=int, default=32, help="response tokens per step")
    parser.add_argument("--micro-batch-steps", type=int, default=None)
    parser.add_argument("--precision", default="fp32", choices=("fp32", "bf16"))
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch CPU threads (default: 1 comparing methods, every core side by side)",
    )
    parser.add_argument("--side-by-side", action="store_true", help="the trainer before and now")
    parser.add_argument("--baseline", default=BASELINE, help="git revision of `before`")
    parser.add_argument("--methods", nargs="+", default=["oel", "oel_resail"], choices=METHODS)
    parser.add_argument(
        "--no-compile", dest="compile", action="store_false", help="only the eager current trainer"
    )
    parser.add_argument(
        "--same-allocator",
        action="store_true",
        help="`before` keeps freed memory too, as the current trainer does (the code's gain alone)",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.threads is None:
        args.threads = (os.cpu_count() or 1) if args.side_by_side else 1
    torch.set_num_threads(args.threads)
    print(machine_header())
    if args.side_by_side:
        side_by_side(args)
        return

    with tempfile.TemporaryDirectory() as tmp:
        runs = setup(Path(tmp), args)
        start = {k: v.clone() for k, v in runs["oel"].trainer.engine.inner.state_dict().items()}
        batch = runs["oel"].schedule[0]
        data = runs["oel"].data
        lengths = [
            (len(s.ordinary_ids), len(s.privileged_ids)) for t in batch for s in data.steps[t]
        ]
        print(
            f"batch: {len(batch)} trajectories, |U| = {len(lengths)} steps; prompt tokens "
            f"ordinary {statistics.mean(o for o, _ in lengths):.0f}, privileged "
            f"{statistics.mean(p for _, p in lengths):.0f} (mean); {args.max_tokens} response "
            f"tokens; {args.threads} thread(s); precision {args.precision}; "
            f"micro-batch {args.micro_batch_steps or 'whole share'}"
        )
        for method in METHODS:  # warm-up: first calls allocate and pick kernels
            time_update(runs[method], start)
        totals: dict[str, list[float]] = {m: [] for m in METHODS}
        cpu: dict[str, list[float]] = {m: [] for m in METHODS}
        phases: dict[str, dict[str, list[float]]] = {m: {p: [] for p in PHASES} for m in METHODS}
        for round_ in range(args.rounds):
            order = METHODS if round_ % 2 == 0 else METHODS[::-1]
            for method in order:
                seconds, cpu_seconds, record = time_update(runs[method], start)
                totals[method].append(seconds)
                cpu[method].append(cpu_seconds)
                for phase in PHASES:
                    phases[method][phase].append(record.seconds[phase])

    print(f"median of {args.rounds} updates (wall seconds):")
    print(f"{'':>12}" + "".join(f"{p:>14}" for p in (*PHASES, "total")))
    median = {m: {p: statistics.median(v) for p, v in phases[m].items()} for m in METHODS}
    for method in METHODS:
        median[method]["total"] = statistics.median(totals[method])
        print(f"{method:>12}" + "".join(f"{median[method][p]:>14.3f}" for p in (*PHASES, "total")))
    ratio = median["oel_resail"]["total"] / median["oel"]["total"]
    print(
        f"{'ratio':>12}"
        + "".join(
            f"{median['oel_resail'][p] / median['oel'][p]:>14.2f}"
            if median["oel"][p] > 0
            else f"{'-':>14}"
            for p in (*PHASES, "total")
        )
    )
    without = (median["oel_resail"]["total"] - median["oel_resail"]["response"]) / (
        median["oel"]["total"] - median["oel"]["response"]
    )
    cpu_median = {m: statistics.median(v) for m, v in cpu.items()}
    print(
        f"{'cpu seconds':>12}"
        + "".join(f"  {m} {cpu_median[m]:.3f}" for m in METHODS)
        + f"  ratio {cpu_median['oel_resail'] / cpu_median['oel']:.3f}"
    )
    print(f"oel_resail / oel per update: {ratio:.3f} wall (target <= 1.10; the paper's own: 1.23)")
    print(f"without response generation: {without:.3f} wall")
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"peak resident memory of the process (both methods set up): {peak_gb:.2f} GB")


if __name__ == "__main__":
    main()
