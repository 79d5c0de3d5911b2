"""A prepared check of the GPU path on one device: generation, training, the probe, a smoke cycle.

    scripts/gpu_check.sh --device cuda      # docs/gpu.md, "Checking a GPU machine"
    scripts/gpu_check.sh --device cpu       # the same steps on the CPU

The script runs this package as ``python -m gpu_check``, with ``scripts/`` and ``src/`` on
``PYTHONPATH``: :mod:`.options` holds the settings and the command line, :mod:`.steps` the steps,
:mod:`.report` their run and the report, ``__main__`` the process (the budget's watchdog, SIGTERM),
:mod:`.phases` the measured trainer rank of the ``zero2_8b`` step.

Each step is recorded with its outcome (``passed``, ``failed``, or ``skipped`` and why), its
seconds, the device memory it took and what it measured, in one JSON file (``--out``):

1. ``generation``: the shipped policy plays a few TextCraft tasks through the project's
   transformers backend on the device (the collection's decoding, the precision the backend picks
   there); then, in fp32, its greedy responses to a handful of those real prompts equal
   transformers' own ``model.generate`` token for token (one prompt at a time, no padding).
2. ``probe``: the PI-sensitivity probe set of those episodes built on the device by the frozen
   policy (:func:`~resail_pipeline.training.run.probe_set_with_frozen`, as the pipeline's node
   does), and the policy's sensitivity on it measured here; every value a JSD in [0, ln 2].
3. ``train_single``, ``train_deepspeed`` and ``train_zero3``: one training cycle of ``oel_resail``
   (a few updates) through the launcher, one process, then DeepSpeed ZeRO-2 and ZeRO-3 (the weights
   partitioned) in one rank under torchrun (NCCL on a GPU, gloo on the CPU) where ``deepspeed``
   imports: finite losses, a published checkpoint whose
   weights moved, the trainer's probe rows, their update 0 equal to step 2's measurement.
4. ``aitz``: the GUI path (section 4.3) with the small Qwen3-VL of ``make rehearse-aitz``, built
   and warm-started on the device over synthetic episodes: its greedy responses to real action
   prompts (screenshot included) equal ``model.generate``'s in fp32, then the initial policy's
   attempts and summaries, and one short OEL run in the GUI trainer's own process under the text
   trainer's engines (DeepSpeed ZeRO-2 in one torchrun rank where ``deepspeed`` imports, else one
   process): finite losses, weights that moved, the trainer on the device.
   With ``--aitz-shape`` its initial policy is instead a Qwen3-VL of a published shape
   (``reference/shapes/Qwen3-VL-4B-Instruct``) with random weights over the GUI tokenizer.
5. ``smoke``: ``python -m kedro run --env smoke --pipelines=cycle`` for one cycle in a scratch
   copy of the project with generation on the device, where ``kedro`` imports.
6. ``sampler``: the trainer's in-loop sampler at the ``scale`` step's shape with random weights,
   every response run to ``--sampler-tokens``, eager, compiled and in CUDA graphs (``cuda_graphs``,
   over eager and over compiled functions): its allocator peak beyond the weights against the
   plan's sampling terms, its milliseconds per decode step and tokens per second, the graphs'
   speed-up over eager; whether the graphs' greedy tokens equal eager's (at that shape and on the
   shipped policy), and tokens per second over ``--sampler-sweep-rows`` rows.
7. ``scale``: a policy of a published shape (Qwen3-4B's on a GPU, :data:`SCALE_SHAPE`; the shipped
   policy's on the CPU) with random weights and the shipped tokenizer: the transformers backend's
   decoding speed on it, then two updates of SDPO + ReSAIL at the paper's micro-batch settings in
   this process, whose allocator peak the memory plan (:mod:`~resail_pipeline.training.memory`)
   must meet from above within a quarter, as its test holds it on small shapes.
8. ``zero2_8b``: a policy of a published shape cut to a few layers (Qwen3-8B's width, heads and
   vocabulary, 4 layers, on a GPU, :data:`ZERO2_SHAPE`; the shipped policy's on the CPU) with
   random weights, then ``oel_resail`` updates sampling in the loop under DeepSpeed ZeRO-2 in one
   rank under torchrun (bf16 over NCCL; fp32 over gloo on the CPU) with conf/paper's engine
   settings; the rank (:mod:`.phases`) times every update's phases (the sampler, the
   micro-batches, the optimiser step) and counts each one's allocator peak, which must not exceed
   the plan's fixed parts and that phase's terms.

Steps that need a package the Python lacks (``pyarrow`` for every Parquet hand-off, ``textcraft``,
``deepspeed``, ``kedro``) are skipped, naming it; so are the steps left when ``--budget-s`` is spent.
The report is rewritten after every step, so that what finished survives; a step still running
:data:`GRACE_S` seconds past the budget, or when the check gets SIGTERM, is recorded as failed with
what it had measured (the long steps, ``aitz`` and ``scale``, record as they go) and the process
ends. It exits 0 when every step passed or was skipped.
"""

from __future__ import annotations

from typing import Any

from .options import CHECKS, GRACE_S, REQUIRES, CheckFailed, CheckOptions, CheckResult, parse_args
from .report import build_report, run_checks, write_report
from .steps import GpuCheck, missing_modules

__all__ = [
    "CHECKS",
    "GRACE_S",
    "REQUIRES",
    "CheckFailed",
    "CheckOptions",
    "CheckResult",
    "GpuCheck",
    "build_report",
    "main",
    "missing_modules",
    "parse_args",
    "run_checks",
    "write_report",
]


def __getattr__(name: str) -> Any:
    # ``main`` is loaded on first use: ``python -m gpu_check`` imports this package before it runs
    # ``__main__``, which must not be in ``sys.modules`` by then
    if name == "main":
        from .__main__ import main

        return main
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
