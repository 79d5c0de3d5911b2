"""The dual-view evaluation through the project's transformers backend and through vLLM's CPU build.

The workload is the evaluation of every checkpoint (appendix D.2): the shipped policy on the 100
`test` tasks x one decoding seed, in the ordinary and the privileged view, with the fixed
Experience of its own reference episodes (rules summaries, built once with the transformers
backend in fp32), temperature 0.4, 48 new tokens, 30 steps per episode. Each engine then plays the
same episodes, one after the other in this process, as the pipeline would build it from
``run.generation`` (``conf/base``'s transformers options: dtype and compile ``auto``: bf16 where the
processor multiplies faster in it, compiled; vLLM's from ``conf/rehearsal``: fp32, the
CPU build's KV cache in a share of RAM, prefix caching on). Per engine it prints the seconds of
its first call (engine start, compilation) apart, the wall time of the evaluation, episodes per
second, success per view, and the ratio of the two engines' rates; success rates should agree
within noise (the engines sample with their own random streams).

It needs vLLM, so it runs in the rehearsal environment (``make .venv-rehearsal/.installed``):

    .venv-rehearsal/bin/python benchmarks/engines.py [--tasks 100] [--seed 0] [--engines ...]
"""

from __future__ import annotations

import argparse
import gc
import logging
import os

os.environ.setdefault("TQDM_DISABLE", "1")  # the rollouts' progress bars would bury the figures
import resource
import time
from pathlib import Path

import torch
import yaml

from resail_pipeline.checkpoints import load_policy, read_checkpoint_info
from resail_pipeline.devices import machine_header
from resail_pipeline.envs import make_env
from resail_pipeline.evaluation.evaluate import (
    VIEWS,
    EvalConfig,
    build_experience,
    evaluate_policy,
)
from resail_pipeline.experience import SummarizeConfig
from resail_pipeline.generation import SamplingParams, make_generator
from resail_pipeline.generation.transformers_backend import TransformersGenerator

ROOT = Path(__file__).resolve().parents[1]
POLICY = ROOT / "reference" / "textcraft-initial"
ENGINES = ("transformers", "vllm")


def engine_options(engine: str) -> dict:
    """``run.generation.<engine>`` as the pipeline gives it: conf/base's transformers options,
    conf/rehearsal's vLLM options (the CPU build's)."""
    env = "base" if engine == "transformers" else "rehearsal"
    params = yaml.safe_load((ROOT / "conf" / env / "parameters.yml").read_text())
    return dict(params["run"]["generation"][engine])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--policy", type=Path, default=POLICY)
    parser.add_argument("--tasks", type=int, default=100, help="test tasks (evenly spaced)")
    parser.add_argument("--seed", type=int, default=0, help="the decoding seed")
    parser.add_argument("--temperature", type=float, default=0.4)
    parser.add_argument("--engines", nargs="+", default=list(ENGINES), choices=ENGINES)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    print(machine_header())
    info = read_checkpoint_info(args.policy)
    config = EvalConfig(
        num_tasks=args.tasks,
        decoding_seeds=(args.seed,),
        temperature=args.temperature,
        max_new_tokens=48,
        views=VIEWS,
    )

    def environment():
        return make_env("textcraft")  # 30 steps

    model, tokenizer = load_policy(info.path, dtype=torch.float32)
    builder = TransformersGenerator(model, tokenizer, policy_id=info.policy_id, progress=False)
    _, _, experience = build_experience(
        environment, builder, config, SummarizeConfig(source="rules"), decoding_seed=1000
    )
    builder.close()
    del model, builder
    gc.collect()
    print(
        f"policy {info.policy_id}: {args.tasks} test tasks x 1 seed x 2 views = "
        f"{2 * args.tasks} episodes, temperature {args.temperature}, {torch.get_num_threads()} "
        "threads"
    )

    rates = {}
    for engine in args.engines:
        options = engine_options(engine)
        start = time.perf_counter()
        generator = make_generator(engine, info.path, policy_id=info.policy_id, **options)
        generator.generate(["warm up"], SamplingParams(temperature=0.0, max_new_tokens=4))
        first = time.perf_counter() - start
        start = time.perf_counter()
        results, _ = evaluate_policy(
            environment, generator, config, cycle=0, method="react", experience=experience
        )
        seconds = time.perf_counter() - start
        generator.close()
        gc.collect()
        rates[engine] = len(results) / seconds
        success = results.groupby("view")["success"].mean()
        print(
            f"{engine:13s} {options}\n{'':13s} start and first call {first:.1f} s; evaluation "
            f"{seconds:.1f} s, {rates[engine]:.3f} episodes/s; success "
            + " / ".join(f"{view} {100 * rate:.1f}%" for view, rate in success.items()),
            flush=True,
        )
    if len(rates) == 2:
        print(
            f"transformers / vllm episodes per second: {rates['transformers'] / rates['vllm']:.2f}"
        )
    print(
        f"peak resident memory: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB"
    )


if __name__ == "__main__":
    main()
