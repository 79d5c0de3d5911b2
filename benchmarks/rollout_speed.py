"""Episodes per second of the dual-view evaluation: the generation backend before and now, side by side.

The workload is ``bootstrap evaluate``'s (appendix D.2): the shipped policy on ``--tasks`` test
tasks evenly spaced over the split, x ``--seeds``, in the ordinary and the privileged view, with
the fixed Experience of its own reference episodes (rules summaries), at temperature 0.4 (or
``--temperature``) and 48 new tokens. The Experience is built once; then every configuration runs the same episodes (same
tasks, seeds and summaries), one after another in this process:

- ``before``: the transformers backend as of git revision ``--baseline`` (the one before prefix
  reuse and the in-place cache), fp32, 32 rows per forward, as ``bootstrap evaluate`` ran it;
- ``fp32`` and, where the CPU computes bf16 natively, ``bf16`` (what ``dtype: auto`` picks
  there), each with the decoder forward eager and compiled (``--compile``; compiled is what
  ``compile: auto`` picks on a CPU with a C++ compiler), without and with prefix reuse
  (``--prefix-reuse``). A compiled configuration's first call, which compiles, is timed apart;
- with ``--previous REV``, each of those again with the backend of git revision ``REV`` (an
  earlier one that takes the same options), right before it: a change to the backend measured
  side by side with what it replaced, on the same episodes;
- with ``--shards N``, each of those again with its episodes' prompts split over ``N`` worker
  processes of one generator each, with ``1/N`` of the threads (``ShardedGenerator``, what
  ``run.shards: N`` runs), right after the one-process configuration;
- with ``--batch-sizes`` or ``--prefill-tokens`` (several values each), each of those at every
  combination of rows decoded together and padded tokens per prefill forward.

Per configuration it prints the wall time, episodes per second and the ratio to ``before``, the
success rate per view, how many episodes took the same actions as under ``before`` and as under
the same dtype's first configuration (in fp32 they agree up to rounding), prompt tokens per
episode and how many of them a forward encoded (the rest came from identical or shared prefixes),
generated tokens, and the tokens per second
against the machine's limit: its measured matmul throughput in that dtype over the linear layers'
FLOPs per token (attention not counted).

    .venv/bin/python benchmarks/rollout_speed.py [--tasks 20] [--seeds 0 1 2] [--no-baseline]
    # where the time goes: each configuration under torch.profiler (slower; shares are what count)
    .venv/bin/python benchmarks/rollout_speed.py --tasks 10 --seeds 0 --no-baseline --profile
    # threads against processes: one generator on 2 threads, then 2 workers of 1 thread each
    .venv/bin/python benchmarks/rollout_speed.py --tasks 20 --seeds 0 --no-baseline --dtypes bf16 \
        --compile on --prefix-reuse off --shards 2
    # a change to the backend against the revision before it, as `auto` runs it without AMX
    ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 .venv/bin/python benchmarks/rollout_speed.py --tasks 50 \
        --seeds 0 --no-baseline --dtypes bf16 --compile on --prefix-reuse off --previous HEAD~1
    # correctness: greedy actions of every episode on the 100 test tasks, fp32, every way
    # (greedy decoding ignores the seed, so one seed plays every distinct episode)
    .venv/bin/python benchmarks/rollout_speed.py --tasks 100 --seeds 0 --temperature 0 --dtypes fp32
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os

os.environ.setdefault("TQDM_DISABLE", "1")  # the rollouts' progress bars would bury the figures
import importlib.util
import inspect
import itertools
import logging
import re
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from resail_pipeline.checkpoints import bf16_native, load_policy, read_checkpoint_info
from resail_pipeline.devices import machine_header
from resail_pipeline.envs import make_env
from resail_pipeline.evaluation.evaluate import (
    VIEWS,
    EvalConfig,
    build_experience,
    evaluate_policy,
)
from resail_pipeline.experience import SummarizeConfig
from resail_pipeline.generation import SamplingParams
from resail_pipeline.generation.decoder import can_compile
from resail_pipeline.generation.sharded import ShardedGenerator
from resail_pipeline.generation.transformers_backend import GenerationStats, TransformersGenerator

ROOT = Path(__file__).resolve().parents[1]
BACKEND = "src/resail_pipeline/generation/transformers_backend.py"
#: the last revision whose backend re-encoded every prompt whole and grew its cache by copies
BASELINE = "cc6224f"
#: --compile and --prefix-reuse: the settings each configuration runs with
CHOICES = {"off": (False,), "on": (True,), "both": (False, True)}
#: the backend's batching options at their defaults (conf/base's too): a configuration's name
#: says which of them it changes
DEFAULTS = {
    name: inspect.signature(TransformersGenerator).parameters[name].default
    for name in ("batch_size", "prefill_tokens")
}
#: prompts of a first call that compiles the decoder forward (prefill and decode shapes)
WARM_UP = ["Goal: craft 1 stick. Inventory: [oak planks] (2)", "Goal: craft 1 oak planks."]


def positive(text: str) -> int:
    """An argument that must be a positive integer."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--policy", type=Path, default=ROOT / "reference/textcraft-initial")
    parser.add_argument("--tasks", type=int, default=20, help="test tasks, evenly spaced")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--temperature", type=float, default=0.4, help="0: greedy")
    parser.add_argument(
        "--dtypes",
        nargs="+",
        choices=["fp32", "bf16"],
        default=["fp32", "bf16"],
        help="bf16 only where native",
    )
    parser.add_argument(
        "--compile", choices=sorted(CHOICES), default="both", help="the decoder forward compiled"
    )
    parser.add_argument(
        "--prefix-reuse", choices=sorted(CHOICES), default="both", help="shared prefixes once"
    )
    parser.add_argument("--baseline", default=BASELINE, help="git revision of `before`")
    parser.add_argument("--no-baseline", action="store_true", help="skip `before` (slowest)")
    parser.add_argument(
        "--previous",
        metavar="REV",
        help="also run each configuration with the backend of git revision REV, right before it",
    )
    parser.add_argument(
        "--batch-sizes",
        type=positive,
        nargs="+",
        default=[DEFAULTS["batch_size"]],
        help="rows decoded together (run.generation.transformers.batch_size), each in turn",
    )
    parser.add_argument(
        "--prefill-tokens",
        type=positive,
        nargs="+",
        default=[DEFAULTS["prefill_tokens"]],
        help="padded tokens per prefill forward (run.generation.transformers.prefill_tokens)",
    )
    parser.add_argument(
        "--shards",
        type=positive,
        default=1,
        help="also run each configuration over this many worker processes (run.shards)",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="where each configuration's time goes (torch.profiler): its operators' shares, "
        "attention apart for prefill and decoding",
    )
    args = parser.parse_args()
    if args.shards > 1 and args.profile:
        parser.error("--shards: the workers' operators are not profiled; run without --profile")
    return args


#: the operators of one attention call, as torch.profiler names them on CPU
ATTENTION_OPS = (
    "aten::_scaled_dot_product_flash_attention_for_cpu",
    "aten::_scaled_dot_product_attention_math",
)


def time_shares(events, top: int = 6) -> str:
    """The largest operators' shares of the profiled CPU time, then attention's apart for
    prefill (many queries per row) and decoding (one), from ``torch.profiler`` averages grouped
    by input shape."""
    total = sum(e.self_cpu_time_total for e in events)
    by_name: dict[str, float] = {}
    for e in events:
        by_name[e.key] = by_name.get(e.key, 0.0) + e.self_cpu_time_total
    attention = [e for e in events if e.key in ATTENTION_OPS and e.input_shapes]
    decoding = sum(e.self_cpu_time_total for e in attention if e.input_shapes[0][2] == 1)
    prefill = sum(e.self_cpu_time_total for e in attention) - decoding
    largest = sorted(by_name.items(), key=lambda kv: -kv[1])[:top]
    return (
        ", ".join(f"{name.removeprefix('aten::')} {100 * t / total:.0f}%" for name, t in largest)
        + f"; attention in prefill {100 * prefill / total:.0f}%, in decoding "
        f"{100 * decoding / total:.0f}% (of {total / 1e6:.1f} CPU s)"
    )


def baseline_backend(revision: str) -> type:
    """The ``TransformersGenerator`` class of ``revision``'s backend module."""
    source = subprocess.run(
        ["git", "show", f"{revision}:{BACKEND}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    name = "backend_" + re.sub(r"\W", "_", revision)  # a module name, whatever the revision
    path = Path(tempfile.mkdtemp()) / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it executes
    spec.loader.exec_module(module)
    return module.TransformersGenerator


def matmul_flops(dtype: torch.dtype, width: int, inner: int) -> float:
    """Measured FLOP/s of a (4096, width) @ (width, inner) product, the MLP's shape at prefill."""
    a = torch.randn(4096, width, dtype=dtype)
    b = torch.randn(width, inner, dtype=dtype)
    for _ in range(3):
        a @ b
    rounds = 20
    start = time.perf_counter()
    for _ in range(rounds):
        a @ b
    return 2 * 4096 * width * inner * rounds / (time.perf_counter() - start)


class PromptCounter:
    """A generator that counts the prompt and generated tokens of the one it wraps: ``before``,
    whose backend encodes every prompt whole and keeps no counts (``whole``), or a sharded one,
    whose workers keep their own counts of what they encoded (``encoded_tokens`` is ``None``)."""

    def __init__(self, inner, *, whole: bool) -> None:
        self.inner, self.policy_id, self.tokenizer = inner, inner.policy_id, inner.tokenizer
        self.whole = whole
        self.prompt_tokens = self.generated_tokens = 0

    @property
    def encoded_tokens(self) -> int | None:
        return self.prompt_tokens if self.whole else None

    def close(self) -> None:
        if hasattr(self.inner, "close"):  # `before`'s backend predates close()
            self.inner.close()
        self.inner = None  # dropping it frees its memory

    def reset(self) -> None:
        self.prompt_tokens = self.generated_tokens = 0

    def generate(self, prompts, params, seeds=None):
        out = self.inner.generate(prompts, params, seeds)
        encoded = self.tokenizer(list(prompts), add_special_tokens=False)["input_ids"]
        self.prompt_tokens += sum(map(len, encoded))
        self.generated_tokens += sum(len(g.token_ids) for g in out)
        return out


@dataclass
class Run:
    name: str
    seconds: float
    episodes: int
    success: dict[str, float]
    actions: dict[str, tuple[str, ...]]
    prompt_tokens: int
    encoded_tokens: int | None  # None: counted in worker processes, not here
    generated_tokens: int


def main() -> None:
    args = parse_args()
    logging.basicConfig(level=logging.WARNING)
    print(machine_header())
    info = read_checkpoint_info(args.policy)
    config = EvalConfig(
        num_tasks=args.tasks,
        decoding_seeds=tuple(args.seeds),
        temperature=args.temperature,
        max_new_tokens=48,
        views=VIEWS,
    )

    def environment():
        return make_env("textcraft")

    fp32_model, tokenizer = load_policy(info.path, dtype=torch.float32)
    dtypes = {"fp32": torch.float32}
    if "bf16" in args.dtypes and bf16_native(torch.device("cpu")):
        dtypes["bf16"] = torch.bfloat16
    models = {name: load_policy(info.path, dtype=dtype)[0] for name, dtype in dtypes.items()}
    experience_generator = TransformersGenerator(
        models["fp32"], tokenizer, policy_id=info.policy_id, progress=False
    )
    _, _, experience = build_experience(
        environment,
        experience_generator,
        config,
        SummarizeConfig(source="rules"),
        decoding_seed=1000,
    )
    model_config = fp32_model.config
    linear = sum(
        p.numel() for name, p in fp32_model.named_parameters() if "embed" not in name
    )  # tied head: the embedding counted once, as the head
    peak = {
        name: matmul_flops(dtype, model_config.hidden_size, model_config.intermediate_size)
        for name, dtype in dtypes.items()
    }
    print(
        f"policy {info.policy_id}: {args.tasks} test tasks x {len(args.seeds)} seeds x 2 views "
        f"= {args.tasks * len(args.seeds) * 2} episodes, {torch.get_num_threads()} threads; "
        f"matmul throughput "
        + ", ".join(f"{name} {flops / 1e9:.0f} GFLOP/s" for name, flops in peak.items())
    )

    configurations = []
    if not args.no_baseline:
        before = baseline_backend(args.baseline)
        generator = before(
            models["fp32"], tokenizer, policy_id=info.policy_id, batch_size=32, progress=False
        )
        configurations.append(("before", "fp32", False, PromptCounter(generator, whole=True), None))
    previous = baseline_backend(args.previous) if args.previous else None
    compiles = [c for c in CHOICES[args.compile] if not c or can_compile(torch.device("cpu"))]
    for dtype in dtypes:
        if dtype not in args.dtypes:
            continue
        for compiled in compiles:
            for reuse, rows, prefill in itertools.product(
                CHOICES[args.prefix_reuse], args.batch_sizes, args.prefill_tokens
            ):
                options = dict(
                    prefix_reuse=reuse,
                    compile=compiled,
                    batch_size=rows,
                    prefill_tokens=prefill,
                    progress=False,
                )
                generator = TransformersGenerator(
                    models[dtype], tokenizer, policy_id=info.policy_id, **options
                )
                name = dtype + ", compiled" * compiled + ", prefix reuse" * reuse
                if rows != DEFAULTS["batch_size"]:
                    name += f", {rows} rows"
                if prefill != DEFAULTS["prefill_tokens"]:
                    name += f", prefill {prefill}"
                if previous is not None:
                    earlier = previous(
                        models[dtype], tokenizer, policy_id=info.policy_id, **options
                    )
                    configurations.append(
                        (f"{args.previous}: {name}", dtype, compiled, earlier, None)
                    )
                configurations.append((name, dtype, compiled, generator, None))
                if args.shards > 1:  # its workers start at its first call
                    sharded = ShardedGenerator(
                        "transformers",
                        info.path,
                        shards=args.shards,
                        policy_id=info.policy_id,
                        dtype=dtypes[dtype],
                        **options,
                    )
                    counter = PromptCounter(sharded, whole=False)
                    sharded_name = f"{name}, {args.shards} shards"
                    configurations.append((sharded_name, dtype, compiled, counter, name))

    runs = []
    for name, dtype, compiled, generator, twin in configurations:
        # compiled once per process and dtype (and cached on disk for the next); a sharded
        # generator's workers start at its first call
        if compiled or twin is not None:
            start = time.perf_counter()
            generator.generate(WARM_UP * 4, SamplingParams(temperature=0.0, max_new_tokens=4, n=2))
            if isinstance(generator, PromptCounter):
                generator.reset()
            else:
                generator.stats = GenerationStats()
            what = ", ".join(["compilation"] * compiled + ["worker start"] * (twin is not None))
            print(f"{name:28s} first call ({what}) {time.perf_counter() - start:.1f} s")
        profiler = contextlib.nullcontext()
        if args.profile:
            activities = [torch.profiler.ProfilerActivity.CPU]
            profiler = torch.profiler.profile(activities=activities, record_shapes=True)
        start = time.perf_counter()
        with profiler:
            results, steps = evaluate_policy(
                environment, generator, config, cycle=0, method="react", experience=experience
            )
        seconds = time.perf_counter() - start
        generator.close()  # its buffers' memory goes before the next configuration runs
        gc.collect()
        actions = steps.groupby("traj_id", sort=False)["action"].apply(tuple).to_dict()
        counts = getattr(generator, "stats", generator)  # a PromptCounter counts for itself
        runs.append(
            Run(
                name=name,
                seconds=seconds,
                episodes=len(results),
                success=results.groupby("view")["success"].mean().to_dict(),
                actions=actions,
                prompt_tokens=counts.prompt_tokens,
                encoded_tokens=counts.encoded_tokens,
                generated_tokens=counts.generated_tokens,
            )
        )
        run = runs[-1]
        reference = runs[0]
        line = (
            f"{name:28s} {seconds:7.1f} s  {run.episodes / seconds:5.2f} episodes/s "
            f"({reference.seconds / seconds:4.2f}x {reference.name})  success "
            + " / ".join(f"{view} {100 * rate:.1f}%" for view, rate in sorted(run.success.items()))
        )
        # the same actions as the first run, as the same dtype's first run and, sharded, as its
        # one-process twin
        for other in dict.fromkeys((reference.name, dtype, twin)):  # no run is named None
            match = next((r for r in runs[:-1] if r.name == other), None)
            if match is not None:
                same = sum(run.actions[t] == match.actions.get(t) for t in run.actions)
                line += f"; same actions as {other}: {same}/{len(run.actions)}"
        line += f"\n{'':28s} per episode: {run.prompt_tokens / run.episodes:.0f} prompt tokens, "
        if run.encoded_tokens is None:
            line += f"{run.generated_tokens / run.episodes:.0f} generated (encoded: in the workers)"
        else:
            rate = (run.encoded_tokens + run.generated_tokens) / seconds
            limit = peak[dtype] / (2 * linear)
            line += (
                f"{run.encoded_tokens / run.episodes:.0f} encoded, "
                f"{run.generated_tokens / run.episodes:.0f} generated; {rate:.0f} tokens/s "
                f"against a matmul limit of {limit:.0f} ({100 * rate / limit:.0f}%)"
            )
        if args.profile:  # the profiler's own cost is in `seconds`: shares, not times, count
            events = profiler.key_averages(group_by_input_shape=True)
            line += f"\n{'':28s} profiled: {time_shares(events)}"
        print(line, flush=True)
    print(
        f"peak resident memory: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB"
    )


if __name__ == "__main__":
    main()
