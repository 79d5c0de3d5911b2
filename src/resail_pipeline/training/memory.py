"""Memory of one training rank, planned before the first node runs.

A configuration that cannot fit its GPUs should fail in the pre-run checks with its figures, not
after cycle 0 has run on eight of them. :func:`plan_memory` estimates what one rank of the trainer
holds at its peak from the model's shape, the resolved engine and the budgets:

- **weights**: the student, and the frozen model beside it (the distillation methods' teacher,
  GRPO's KL reference), in the parameters' dtype (bf16 under DeepSpeed in bf16, else fp32);
  ZeRO-3 partitions the student over the ranks, gathers up to ``stage3_max_live_parameters`` of it
  while its modules run (the student then runs the model's own forward: its modules gather their
  weights one by one), and, where the trainer samples, decodes from a whole copy of it.
- **gradients**: fp32 (DeepSpeed accumulates in fp32); ZeRO-2 and -3 keep the rank's partition
  and one reduce bucket, ZeRO-1 and the other engines the whole; DDP adds its bucket copies.
- **optimiser**: AdamW's two fp32 moments, and under bf16 parameters the fp32 master weights;
  partitioned over the ranks by every ZeRO stage.
- **autocast copies**: fp32 parameters computing in bf16 keep a bf16 copy of every weight while
  a micro-batch runs (autocast's cache, emptied when its region ends).
- **activations** of one micro-batch of ``micro_batch_steps`` rows of the longest row (the prompt,
  then one response branch per view the student trains): every layer's saved tensors, or with
  gradient checkpointing every layer's input and one layer's tensors, recomputed. The project's
  forward attends per tree: a two-branch row's second branch (the privileged insert and the
  response) reads the trunk's keys and values copied beside its own (repeated per head where
  grouped) under a mask of its queries by those keys, which SDPA keeps as a bias for its backward.
- **attention mask**: gradient checkpointing runs the model's own forward over padded rows, whose
  two-branch rows carry a boolean tree mask of ``L x L`` each (kept as a bias in the same way).
- **logits**: the student's response logits, kept for the backward, and their gradient; the
  teacher's, reduced to its top-K targets while the student's graph is alive; one fp32 block of
  the top-K reduction (``chunk_size`` positions, all of them when ``None``).
- **sampling**: OEL and GRPO sample in the loop (:func:`sampling_terms`): their decode batch's
  key-value cache, in the student's dtype, allocated whole at prefill on a GPU (rows of prompt
  plus response, at most ``responses.max_batch_tokens``); where GRPO samples a group per prompt,
  the distinct prompts' cache beside it while it is copied per sample; a prefill forward's working
  set (its MLP, its attention scores); the logits that start and continue the decoding. Live while
  no activation is.
- **optimiser step**: torch's multi-tensor AdamW (the default on a GPU) takes one fp32 temporary
  of every moment it steps (the second moments' square roots), live while nothing of a
  micro-batch is; at Qwen3-4B's shape in one process this phase, not the micro-batch, is the
  peak (measured on an H200: docs/gpu.md).
- **allocator rounding**: CUDA's caching allocator gives a tensor a block up to 1 MiB larger than
  it asks for (a large block's rest is not split off below that); counted per parameter tensor of
  every per-tensor copy (weights, and outside DeepSpeed's flat partitions gradients and moments).

The plan's peak is the fixed parts and the largest of the three phases (a micro-batch's
training, sampling, the optimiser step).

The per-token, per-layer count of saved activations is that of a Llama-family layer (Qwen3:
normalised queries and keys, rotary embeddings, a gated MLP) run by the project's forward. The
plan is held against what the trainer measurably takes: :func:`measurement_inputs` writes a
corpus whose rows all have one length (the plan's longest row is then every row) and
:func:`allocator_peak` counts the bytes torch's allocator holds at most while a run goes; a test
does so on small shapes on the CPU, the GPU check (``scale``) at Qwen3-4B's shape on a GPU.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch

from resail_pipeline.config import ConfigError
from resail_pipeline.training.config import TrainConfig

__all__ = [
    "GIB",
    "MemoryPlan",
    "ModelShape",
    "allocator_peak",
    "check_fits",
    "measurement_inputs",
    "plan_memory",
    "sampling_terms",
]

logger = logging.getLogger(__name__)

GIB = 1024**3

T = TypeVar("T")

#: elements DeepSpeed's ZeRO-2/3 reduce bucket holds (``reduce_bucket_size``'s default)
ZERO_REDUCE_BUCKET = 500_000_000
#: elements of gathered parameters ZeRO-3 keeps live at once (``stage3_max_live_parameters``'s
#: default)
ZERO3_MAX_LIVE_PARAMETERS = 1_000_000_000
#: the most bytes the CUDA caching allocator adds to one tensor's block (``kSmallSize``: the rest of
#: a large block is split off only when larger than this)
ALLOCATOR_SLACK = 2**20


@dataclass(frozen=True)
class ModelShape:
    """What the plan needs of a decoder-only causal LM.

    Attributes:
        parameters: trainable parameters (tied embeddings counted once).
        tensors: parameter tensors (tied embeddings counted once).
        layers: decoder layers.
        hidden: hidden size.
        intermediate: the MLP's inner size.
        heads: attention heads.
        kv_heads: key-value heads.
        head_dim: size of one head.
        vocab: vocabulary size (columns of the logits).
    """

    parameters: int
    tensors: int
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int

    @classmethod
    def from_config(cls, config: Any) -> ModelShape:
        """From a Hugging Face ``PretrainedConfig`` (a causal LM's); the parameters are counted on
        the meta device, so no memory is allocated whatever the model's size."""
        from transformers import AutoModelForCausalLM

        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config, trust_remote_code=False)
        heads = int(config.num_attention_heads)
        tensors = list(model.parameters())
        return cls(
            parameters=sum(p.numel() for p in tensors),
            tensors=len(tensors),
            layers=int(config.num_hidden_layers),
            hidden=int(config.hidden_size),
            intermediate=int(config.intermediate_size),
            heads=heads,
            kv_heads=int(getattr(config, "num_key_value_heads", None) or heads),
            head_dim=int(getattr(config, "head_dim", None) or config.hidden_size // heads),
            vocab=int(config.vocab_size),
        )

    @classmethod
    def from_checkpoint(cls, path: str | Path) -> ModelShape:
        """From a checkpoint directory's ``config.json`` (no weights are read)."""
        from transformers import AutoConfig

        if not (Path(path) / "config.json").is_file():
            raise ConfigError(f"{path}: no config.json, so the memory plan has no model shape")
        return cls.from_config(AutoConfig.from_pretrained(path, trust_remote_code=False))

    def layer_activations_per_token(self, *, repeated_kv: bool) -> int:
        """Elements one layer saves for its backward per token (Llama family, Qwen3's norms).

        Two RMSNorms (input, normalised, output: 3H each); queries before and after their per-head
        norm, rotated, and the attention's output (4 query widths); keys before and after their
        norm (2 key widths); the rotated keys and the values as attention reads them (2 query
        widths where grouped keys are repeated per head, under a mask; else 2 key widths); the
        gated MLP's gate, up, activation and product (4I). Counted from the tensors autograd saves
        for the project's forward.
        """
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        keys_read = q if repeated_kv and self.heads != self.kv_heads else kv
        return 6 * self.hidden + 4 * q + 2 * kv + 2 * keys_read + 4 * self.intermediate

    @property
    def cache_per_token(self) -> int:
        """Elements of key-value cache per token over all layers."""
        return 2 * self.layers * self.kv_heads * self.head_dim


@dataclass(frozen=True)
class MemoryPlan:
    """One rank's planned peak, part by part.

    Attributes:
        fixed: ``(name, bytes)`` held for the whole run.
        training: ``(name, bytes)`` live during a micro-batch's forward and backward.
        sampling: ``(name, bytes)`` live while the trainer samples.
        stepping: ``(name, bytes)`` live while the optimiser steps.
    """

    fixed: tuple[tuple[str, int], ...]
    training: tuple[tuple[str, int], ...]
    sampling: tuple[tuple[str, int], ...] = ()
    stepping: tuple[tuple[str, int], ...] = ()

    @property
    def phases(self) -> dict[str, tuple[tuple[str, int], ...]]:
        """The phases that hold memory, by name; one at a time is live."""
        named = {"training": self.training, "sampling": self.sampling, "step": self.stepping}
        return {name: parts for name, parts in named.items() if any(b for _, b in parts)}

    @property
    def peak(self) -> int:
        """Bytes at the peak: the fixed parts and the largest phase."""
        phase = max((sum(b for _, b in parts) for parts in self.phases.values()), default=0)
        return sum(b for _, b in self.fixed) + phase

    def describe(self) -> str:
        """``"weights 16.4 + ... + max(training (...), step (...)) = 78.0 GiB"``, in plan order."""

        def parts(items: tuple[tuple[str, int], ...]) -> str:
            return " + ".join(f"{name} {b / GIB:.1f}" for name, b in items if b)

        text = parts(self.fixed)
        phases = [f"{name} ({parts(items)})" for name, items in self.phases.items()]
        if not phases:
            return text
        live = phases[0] if len(phases) == 1 else f"max({', '.join(phases)})"
        return f"{text} + {live} = {self.peak / GIB:.1f} GiB"


def plan_memory(
    config: TrainConfig,
    shape: ModelShape,
    *,
    prompt_tokens: int,
    insert_tokens: int | None = None,
    steps_per_update: int = 0,
    cuda: bool = True,
) -> MemoryPlan:
    """The peak memory of one rank of ``config``'s trainer.

    Args:
        config: the training configuration, its engine resolved (``auto`` replaced).
        shape: the policy's shape.
        prompt_tokens: the longest prompt a step can have, in its privileged view.
        insert_tokens: the most tokens a privileged prompt has beyond its ordinary one (the
            summary and its frame); ``None``: the whole prompt, an upper bound.
        steps_per_update: the steps of an update, where ``engine.micro_batch_steps`` is ``None``
            (a rank's share of them is one micro-batch); ignored otherwise.
        cuda: a GPU rank, whose caching allocator rounds blocks up (:data:`ALLOCATOR_SLACK`);
            ``False``: a CPU trainer's, whose allocator gives every tensor its size.

    Raises:
        ConfigError: an unresolved engine, or no way to size the micro-batch.
    """
    engine = config.engine
    if not engine.resolved:
        raise ConfigError("train.engine: resolve the engine before planning its memory")
    if prompt_tokens < 1:
        raise ConfigError(f"prompt_tokens: must be positive, got {prompt_tokens}")
    if insert_tokens is not None and not 0 <= insert_tokens <= prompt_tokens:
        raise ConfigError(
            f"insert_tokens: must be between 0 and prompt_tokens ({prompt_tokens}), "
            f"got {insert_tokens}"
        )
    world = engine.world_size or 1
    p = shape.parameters
    deepspeed = engine.kind == "deepspeed"
    weight_bytes = 2 if engine.bf16_parameters else 4
    compute_bytes = 2 if engine.precision == "bf16" else 4

    student = p * weight_bytes // (world if deepspeed and engine.zero_stage == 3 else 1)
    frozen = p * weight_bytes if (config.distills or config.parent == "grpo") else 0
    if deepspeed and engine.zero_stage >= 2:
        gradients = 4 * p // world + weight_bytes * min(p, ZERO_REDUCE_BUCKET)
    else:
        gradients = 4 * p * (2 if engine.kind == "ddp" else 1)
    optimiser = 8 * p + (4 * p if engine.bf16_parameters else 0)
    if deepspeed:
        optimiser //= world
    casts = 2 * p if engine.precision == "bf16" and not engine.bf16_parameters else 0
    # per-tensor copies: the student's weights (ZeRO-3: flat partitions), the frozen model's; out
    # of DeepSpeed (flat partitions) the gradients and both moments too
    copies = (0 if deepspeed and engine.zero_stage == 3 else 1) + (1 if frozen else 0)
    copies += 0 if deepspeed else 3
    slack = ALLOCATOR_SLACK if cuda else 0
    zero3 = deepspeed and engine.zero_stage == 3
    # ZeRO-3's sampler decodes from a whole copy of the student (DeepSpeedEngine.sampling_model)
    sampler_copy = p * weight_bytes if zero3 and config.samples_responses else 0
    fixed = (
        ("student weights", student),
        ("frozen weights", frozen),
        ("gradients", gradients),
        ("optimiser", optimiser),
        ("sampler's student copy", sampler_copy),
        ("allocator rounding", (copies + (1 if sampler_copy else 0)) * shape.tensors * slack),
    )
    # the weights ZeRO-3 gathers while modules run: up to its live-parameter bound at once
    gathered = min(p, ZERO3_MAX_LIVE_PARAMETERS) * weight_bytes if zero3 else 0
    if not config.trains:
        return MemoryPlan(fixed=(), training=())
    # the multi-tensor step's fp32 temporary of the moments it steps (DeepSpeed: the partition)
    stepped = p // world if deepspeed else p
    temporaries = 4 * stepped + (0 if deepspeed else shape.tensors * slack)
    stepping = (("optimiser step", temporaries),)

    rows = engine.micro_batch_steps
    if rows is None:
        if steps_per_update < 1:
            raise ConfigError(
                "train.engine.micro_batch_steps: null (a rank's whole share of an update at "
                "once) needs the steps of an update to plan memory; set micro_batch_steps"
            )
        rows = math.ceil(steps_per_update / world)
    response = config.responses.max_tokens
    # the student's views of a row (its longest row: both, under ReSAIL) and the teacher's
    branches = 2 if config.distills and config.uses_resail else 1
    teacher_branches = (2 if config.uses_resail else 1) if config.distills else 0
    length = prompt_tokens + branches * response  # the longest packed row
    tokens = rows * length
    two = branches > 1
    if not engine.functional_student:  # the model's forward: padded rows under a tree mask
        layer = shape.layer_activations_per_token(repeated_kv=two) * tokens * compute_bytes
        # SDPA keeps the tree mask as an additive bias of the compute dtype for its backward
        bias = rows * length * length * compute_bytes if two else 0
        mask = rows * length * length if two else 0
    else:  # the project's: per tree, the second branch masked over the trunk and itself
        layer = shape.layer_activations_per_token(repeated_kv=False) * tokens * compute_bytes
        keys = prompt_tokens + response  # the privileged view: the trunk and the branch
        queries = min(keys, (prompt_tokens if insert_tokens is None else insert_tokens) + response)
        # its keys and values, copied beside the branch's (per head: grouped ones are repeated)
        copies = 2 * keys * shape.heads * shape.head_dim
        bias = rows * (queries * keys + copies) * compute_bytes if two else 0
        mask = rows * queries * keys if two else 0  # the bool mask, until SDPA takes it
    if engine.gradient_checkpointing:
        saved = shape.layers * tokens * shape.hidden * compute_bytes  # each layer's input
    else:
        saved = shape.layers * (layer + bias)
    saved += 3 * tokens * shape.hidden * compute_bytes  # the embeddings and the final norm
    # one layer's tensors live at a time: the teacher's no-grad forward, beside the student's
    # graph, and the recomputation of a checkpointed layer
    working = layer + bias
    logit_bytes = 4 if weight_bytes == 4 and compute_bytes == 4 else 2
    student_logits = rows * branches * response * shape.vocab
    teacher_logits = rows * teacher_branches * response * shape.vocab
    positions = rows * branches * response
    block = positions if engine.chunk_size is None else min(engine.chunk_size, positions)
    logits = (
        2 * student_logits * logit_bytes  # kept for the backward, and their gradient
        + teacher_logits * logit_bytes
        + 4 * block * shape.vocab  # the top-K reduction's fp32 block
    )
    training = (
        ("gathered weights", gathered),
        ("autocast copies", casts),
        ("activations", saved),
        ("layer working set", working),
        ("attention mask", mask),
        ("logits", logits),
    )

    sampling: tuple[tuple[str, int], ...] = ()
    if config.samples_responses:
        sampling = sampling_terms(
            shape,
            rows=config.responses.batch_size,
            prompt_tokens=prompt_tokens,
            response=response,
            cache_bytes=weight_bytes,  # the sampling model's own dtype
            max_batch_tokens=config.responses.max_batch_tokens,
            samples=config.grpo.samples if config.parent == "grpo" else 1,
        )
    return MemoryPlan(fixed=fixed, training=training, sampling=sampling, stepping=stepping)


#: padded tokens per prefill forward of the trainer's sampler (the generator's default)
PREFILL_TOKENS = 4096


def sampling_terms(
    shape: ModelShape,
    *,
    rows: int,
    prompt_tokens: int,
    response: int,
    cache_bytes: int,
    max_batch_tokens: int | None = None,
    samples: int = 1,
    prefill_tokens: int = PREFILL_TOKENS,
) -> tuple[tuple[str, int], ...]:
    """What the transformers generator holds at most while it samples one decode batch with
    ``preallocate`` (a GPU's default), as ``(name, bytes)``.

    Args:
        shape: the model's shape.
        rows: rows decoded together (``responses.batch_size``).
        prompt_tokens: the longest prompt.
        response: new tokens per row (``responses.max_tokens``).
        cache_bytes: bytes of a cache element: the sampling model's parameter dtype.
        max_batch_tokens: the cache tokens a batch may hold (``responses.max_batch_tokens``).
        samples: rows per distinct prompt (GRPO's group); its prompts are encoded once, then
            copied per sample.
        prefill_tokens: padded tokens per prefill forward.
    """
    per_token = shape.cache_per_token * cache_bytes + 8  # and the int64 mask's column
    row = prompt_tokens + response
    tokens = rows * row
    if max_batch_tokens is not None:  # one prompt's rows are a batch even when they exceed it
        tokens = max(min(tokens, max_batch_tokens), samples * row)
    cache = tokens * per_token
    # the distinct prompts' cache (no room for new tokens) while it is copied per sample
    copies = math.ceil(tokens / row / samples) * prompt_tokens * per_token if samples > 1 else 0
    # a prefill forward: its hidden states, normalised input, queries, keys and values, gated MLP
    # (gate, up, activation, product) and one head-batch of attention scores over the prompt
    forward_tokens = min(prefill_tokens, tokens - tokens // row * response)
    q, kv = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    hidden = forward_tokens * (3 * shape.hidden + q + 2 * kv + 4 * shape.intermediate)
    scores = forward_tokens * min(prompt_tokens, forward_tokens) * shape.heads
    working = (hidden + scores) * cache_bytes
    if samples > 1:  # the prefill runs before the copies' cache exists: only beyond it
        working = max(0, working - cache)
    # fp32 logits: the prefill's last positions (and their copies per sample), a decode step's,
    # and its log-softmax
    logits = 4 * rows * shape.vocab * 4
    return (
        ("sampling cache", cache),
        ("sampling prompt copies", copies),
        ("sampling forward", working),
        ("sampling logits", logits),
    )


#: the share of a GPU's memory a plan may fill: the rest is the CUDA context, NCCL's buffers and
#: the caching allocator's fragmentation. The share leaves about twice the overhead beyond the
#: allocator's peak that the GPU check's scale step measured on an H200 before the trainer used
#: expandable segments (docs/gpu.md).
USABLE_SHARE = 0.9


def check_fits(plan: MemoryPlan, capacity: int, *, device: str) -> None:
    """Raise :class:`ConfigError` with the plan's figures when its peak exceeds the usable share
    (:data:`USABLE_SHARE`) of ``capacity``.

    Args:
        plan: the rank's plan.
        capacity: bytes of one device.
        device: the device's name, for the message.
    """
    usable = int(capacity * USABLE_SHARE)
    if plan.peak > usable:
        raise ConfigError(
            f"train.engine: one training rank needs about {plan.describe()}, more than "
            f"{usable / GIB:.1f} GiB ({USABLE_SHARE:.0%} of the {capacity / GIB:.1f} GiB of {device}); "
            "lower train.engine.micro_batch_steps, set train.engine.chunk_size and "
            "gradient_checkpointing, or train on more GPUs (train.engine.world_size)"
        )


# ----------------------------------------------------------------------------------------------
# holding the plan against a measurement


def allocator_peak(run: Callable[[], T], device: torch.device, trace: Path) -> tuple[T, int]:
    """``run()``'s result and the most bytes torch's allocator held at once while it ran.

    On a GPU, CUDA's peak statistics (everything allocated on the device counts, what was live
    before included); on the CPU, the profiler's memory events, written to ``trace`` (Chrome
    format) and read back: what was live before the run counts as zero there.
    """
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        result = run()
        torch.cuda.synchronize(device)
        return result, int(torch.cuda.max_memory_allocated(device))
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        result = run()
    prof.export_chrome_trace(str(trace))
    events = json.loads(Path(trace).read_text())["traceEvents"]
    memory = sorted((e for e in events if e.get("name") == "[memory]"), key=lambda e: e["ts"])
    if not memory:
        return result, 0
    # the allocator's total counts what an earlier profile of this process left alive: measured
    # from the level before this run's first event
    before = memory[0]["args"]["Total Allocated"] - memory[0]["args"]["Bytes"]
    return result, max(e["args"]["Total Allocated"] for e in memory) - before


def measurement_inputs(
    root: str | Path,
    policy: str | Path,
    tokenizer: Any,
    *,
    words: int,
    response: int,
    trajectories: int = 4,
    steps: int = 2,
) -> Path:
    """A trainer's inputs under ``root/inputs`` whose rows all have about one length.

    ``trajectories`` successful trajectories of ``steps`` steps each, every prompt ``words``
    alphabetic words of ``tokenizer``'s vocabulary (one token each in a word tokenizer), one
    accepted rules summary per trajectory and one cached response of exactly ``response`` tokens
    per step (the methods that train on cached responses read them). Returns the manifest.
    """
    import pandas as pd

    from resail_pipeline.training.data import write_inputs

    vocabulary = sorted(w for w in tokenizer.get_vocab() if w.isalpha())
    if not vocabulary:
        raise ConfigError("tokenizer: no alphabetic token to write prompts with")
    token = tokenizer.convert_tokens_to_ids(vocabulary[0])
    rows_steps, rows_summaries, rows_responses = [], [], []
    for k in range(trajectories):
        traj = f"t{k}"
        rows_summaries.append(
            {
                "traj_id": traj,
                "outcome": "success",
                "summary": "Guidance summary: - Minimal plan: craft 4 oak planks",
                "attempts": 1,
                "accepted": True,
                "source": "rules",
                "rejection_reasons": [],
            }
        )
        for t in range(steps):
            prompt = " ".join(vocabulary[(7 * i + k) % len(vocabulary)] for i in range(words))
            rows_steps.append(
                {
                    "traj_id": traj,
                    "t": t,
                    "observation": "Inventory: [oak planks] (4)",
                    "admissible_actions": None,
                    "prompt": prompt,
                    "response": "<action> get 1 oak logs </action>",
                    "action": "get 1 oak logs",
                    "action_valid": True,
                    "next_observation": "Got 1 oak logs",
                    "reward": 0.0,
                    "done": t == steps - 1,
                }
            )
            rows_responses.append(
                {
                    "traj_id": traj,
                    "t": t,
                    "sample": 0,
                    "response": f"{vocabulary[0]} " * response,
                    "token_ids": [token] * response,
                    "logprobs": [-1.0] * response,
                    "policy_id": "p",
                }
            )
    return write_inputs(
        Path(root) / "inputs",
        policy=policy,
        steps=pd.DataFrame(rows_steps),
        summaries=pd.DataFrame(rows_summaries),
        responses=pd.DataFrame(rows_responses),
    )


def main(argv: list[str] | None = None) -> None:
    """Print (and check) the plan of a ``train`` section for a model on a number of GPUs."""
    import argparse

    import yaml

    parser = argparse.ArgumentParser(
        prog="python -m resail_pipeline.training.memory", description=main.__doc__
    )
    parser.add_argument("parameters", help="a YAML file with a train section (conf/paper/...)")
    parser.add_argument("--model", required=True, help="a checkpoint folder with config.json")
    parser.add_argument("--method", default="oel_resail", help="the method (run.method)")
    parser.add_argument("--gpus", type=int, default=8, help="GPUs the engine resolves for")
    parser.add_argument(
        "--gpu-gib", type=float, default=79.6, help="memory of one GPU, GiB (an 80 GB H100: 79.6)"
    )
    parser.add_argument("--prompt-tokens", type=int, required=True, help="the longest prompt")
    parser.add_argument(
        "--insert-tokens",
        type=int,
        default=None,
        help="the most tokens a privileged prompt adds to its ordinary one (default: all of them)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        data = yaml.safe_load(Path(args.parameters).read_text()) or {}
        config = TrainConfig.from_dict({**data.get("train", {}), "method": args.method}, "train")
        config = config.resolve(num_gpus=args.gpus, bf16_supported=True)
        shape = ModelShape.from_checkpoint(args.model)
        plan = plan_memory(
            config, shape, prompt_tokens=args.prompt_tokens, insert_tokens=args.insert_tokens
        )
        logger.info("%s", plan.describe())
        check_fits(plan, int(args.gpu_gib * GIB), device="the GPU")
    except (ConfigError, OSError) as error:
        raise SystemExit(f"error: {error}") from None
    logger.info("fits: %.1f of %.1f usable GiB", plan.peak / GIB, USABLE_SHARE * args.gpu_gib)


if __name__ == "__main__":
    main()
