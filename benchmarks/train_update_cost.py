"""Wall time of one update of ``oel_resail`` against ``oel``, side by side on the same batch and model.

The batch is built the pipeline's way: TextCraft training goals played by the exact planner (every
third episode stops two actions short and fails), ordinary prompts rendered from each step's
history by ``prompts.render_user_message`` (appendix G), summaries written by the experience rules.
The model has the embedded default's shape (Qwen3, 4 layers, width 256, SwiGLU 768, tied
embeddings, random init) over a word-level tokenizer trained on that text.

Both methods are set up once from the same checkpoint and inputs; each round then times one update
of each, in alternating order, from the same starting weights (restored before every update), on
the schedule's first batch. Fresh OEL responses are sampled with the same seeds from the same
weights, so both methods see the same responses. A random model rarely ends a response, so every
response has ``--max-tokens`` tokens. The script prints the median wall seconds per phase
(response, scoring, optimisation, other: the categories of the paper's table 6), the median
process CPU seconds per update, and the ratios. On a machine shared with other jobs, CPU time is
the steadier of the two, and one thread (the default here) the steadier setting.

    .venv/bin/python benchmarks/train_update_cost.py [--rounds 5] [--max-tokens 32] [--threads 1]
"""

from __future__ import annotations

import argparse
import logging
import resource
import statistics
import tempfile
import time
from pathlib import Path

import pandas as pd
import torch

from resail_pipeline.checkpoints import save_policy
from resail_pipeline.devices import machine_header
from resail_pipeline.envs import make_env
from resail_pipeline.envs.planner import plan_from_observation
from resail_pipeline.experience.evidence import build_evidence
from resail_pipeline.experience.rules import rules_summary
from resail_pipeline.modeling import build_qwen3, build_word_tokenizer, small_qwen3_config
from resail_pipeline.prompts import EpisodeHistory, render_user_message
from resail_pipeline.training import TrainConfig, write_inputs
from resail_pipeline.training.run import TrainingRun
from resail_pipeline.training.trainer import PHASES, UpdateRecord

METHODS = ("oel", "oel_resail")


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


def setup(workdir: Path, args: argparse.Namespace) -> dict[str, TrainingRun]:
    steps, summaries = play_episodes(args.trajectories)
    tokenizer = build_word_tokenizer([*steps["prompt"], *summaries["summary"], *steps["response"]])
    config = small_qwen3_config(
        len(tokenizer), pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id
    )
    policy = workdir / "policy"
    save_policy(build_qwen3(config, seed=0), tokenizer, policy, name="bench")
    manifest = write_inputs(workdir / "inputs", policy=policy, steps=steps, summaries=summaries)
    runs = {}
    for method in METHODS:
        train_config = TrainConfig.from_dict(
            {
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
        )
        runs[method] = TrainingRun(train_config)
    return runs


def time_update(
    run: TrainingRun, start: dict[str, torch.Tensor]
) -> tuple[float, float, UpdateRecord]:
    """``(wall seconds, process CPU seconds, record)`` of update 0 from the weights ``start``."""
    run.trainer.engine.inner.load_state_dict(start)
    wall, cpu = time.perf_counter(), time.process_time()
    record = run.trainer.update(0, run.schedule[0])
    return time.perf_counter() - wall, time.process_time() - cpu, record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="timed updates per method")
    parser.add_argument("--trajectories", type=int, default=8, help="|B| (TextCraft: 8)")
    parser.add_argument("--max-tokens", type=int, default=32, help="response tokens per step")
    parser.add_argument("--micro-batch-steps", type=int, default=None)
    parser.add_argument("--precision", default="fp32", choices=("fp32", "bf16"))
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(args.threads)
    print(machine_header())

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
