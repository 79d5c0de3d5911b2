"""Env-steps per second of batched rollout against one-at-a-time generation, on TextCraft.

Both runs play the same sampled TextCraft tasks with the same policy and decoding seeds: first
all episodes together (one ``generate`` call per turn, micro-batches of ``--episodes`` rows), then
each episode alone with micro-batches of one row. Because every response is seeded by its episode
and step, both runs should play the same trajectories; the script reports how many agree.

The policy is a small random Qwen3 (the embedded default's shape: 4 layers, width 256) over a
word-level tokenizer trained on the rendered prompts of the sampled tasks, or a checkpoint::

    .venv/bin/python benchmarks/rollout_batching.py
    .venv/bin/python benchmarks/rollout_batching.py --checkpoint data/06_models/initial
"""

from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path

import torch

from resail_pipeline.envs import make_env
from resail_pipeline.generation import SamplingParams
from resail_pipeline.generation.transformers_backend import TransformersGenerator
from resail_pipeline.modeling import build_qwen3, build_word_tokenizer, small_qwen3_config
from resail_pipeline.prompts import EpisodeHistory, Turn, render_user_message
from resail_pipeline.rollout import Episode, EpisodeSpec, run_episodes, sample_tasks


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=32, help="episodes in the batch")
    parser.add_argument("--checkpoint", type=Path, help="a policy directory (default: random)")
    parser.add_argument("--max-steps", type=int, default=10, help="TextCraft step limit")
    parser.add_argument("--max-new-tokens", type=int, default=24, help="tokens per response")
    parser.add_argument("--temperature", type=float, default=0.4, help="sampling temperature")
    parser.add_argument("--batch-size", type=int, default=8, help="rows per forward pass, batched")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--seed", type=int, default=0, help="task sampling and decoding seed")
    return parser.parse_args()


def random_policy(task_ids: list[int], seed: int) -> TransformersGenerator:
    """A random small Qwen3 over a word tokenizer trained on the tasks' rendered prompts."""
    env = make_env("textcraft")
    corpus = []
    for task_id in task_ids:
        history = EpisodeHistory.start(env.name, env.reset(task_id))
        corpus.append(render_user_message(history))
        later = EpisodeHistory(
            env=env.name,
            initial=history.initial,
            turns=(Turn(history.current_observation, "inventory"),),
            current_observation="Inventory: You are not carrying anything.",
        )
        corpus.append(render_user_message(later))
    tokenizer = build_word_tokenizer(corpus)
    config = small_qwen3_config(
        len(tokenizer), pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id
    )
    model = build_qwen3(config, seed=seed).eval()
    return TransformersGenerator(model, tokenizer, policy_id="random@benchmark", progress=False)


def env_steps(episodes: list[Episode]) -> int:
    return sum(e.num_steps for e in episodes)


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    task_ids = sample_tasks(make_env("textcraft").task_ids("train"), args.episodes, args.seed)
    if args.checkpoint is None:
        policy = random_policy(task_ids, args.seed)
    else:
        policy = TransformersGenerator.from_checkpoint(args.checkpoint, progress=False)
    specs = [
        EpisodeSpec(f"bench/textcraft/train/{task_id}/{args.seed}", task_id, args.seed)
        for task_id in task_ids
    ]
    params = SamplingParams(temperature=args.temperature, max_new_tokens=args.max_new_tokens)
    parameters = sum(p.numel() for p in policy.model.parameters())

    def new_env():
        return make_env("textcraft", max_steps=args.max_steps)

    print(
        f"policy {policy.policy_id} ({parameters / 1e6:.1f} M parameters), "
        f"{args.episodes} TextCraft train tasks, step limit {args.max_steps}, "
        f"{args.max_new_tokens} new tokens at T={args.temperature}, {args.threads} thread(s)"
    )

    batched_policy = TransformersGenerator(
        policy.model,
        policy.tokenizer,
        policy_id=policy.policy_id,
        batch_size=args.batch_size,
        progress=False,
    )
    start = time.perf_counter()
    batched = run_episodes(new_env, specs, batched_policy, params, progress=False)
    batched_s = time.perf_counter() - start

    single_policy = TransformersGenerator(
        policy.model, policy.tokenizer, policy_id=policy.policy_id, batch_size=1, progress=False
    )
    start = time.perf_counter()
    single = [
        episode
        for spec in specs
        for episode in run_episodes(new_env, [spec], single_policy, params, progress=False)
    ]
    single_s = time.perf_counter() - start

    batched_rate = env_steps(batched) / batched_s
    single_rate = env_steps(single) / single_s
    agree = sum(a == b for a, b in zip(batched, single, strict=True))
    print(
        f"batched ({args.episodes} episodes together, micro-batches of {args.batch_size}): "
        f"{env_steps(batched)} env-steps in "
        f"{batched_s:.1f} s = {batched_rate:.2f} env-steps/s"
    )
    print(
        f"one at a time (batch of 1): {env_steps(single)} env-steps in "
        f"{single_s:.1f} s = {single_rate:.2f} env-steps/s"
    )
    print(f"batched / one-at-a-time env-steps per second: {batched_rate / single_rate:.2f}x")
    print(f"identical trajectories in both runs: {agree}/{len(specs)}")
    print(
        f"success: batched {sum(e.success for e in batched)}/{len(batched)}, "
        f"one at a time {sum(e.success for e in single)}/{len(single)}"
    )
    print(
        f"peak resident memory: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB"
    )


if __name__ == "__main__":
    main()
