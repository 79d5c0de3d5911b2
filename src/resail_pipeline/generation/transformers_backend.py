"""Batched sampling from a live transformers model: one encoding per distinct prompt, an
in-place KV cache, fp32 log-probs.

The trainer wraps its current student in a :class:`TransformersGenerator` to sample fresh
responses between updates; pipelines build one from a checkpoint with
:meth:`TransformersGenerator.from_checkpoint`.

How a call runs:

- **Distinct prompts.** Identical prompts (the episodes of one task under several seeds, as long
  as they have taken the same actions) and the ``n`` samples of a prompt are encoded once and
  share that cache.
- **Prefill.** Prompts are sorted by length and cut into decode batches of ``batch_size`` rows
  (prompt x sample). A batch's prompts are encoded in forwards of at most ``prefill_tokens``
  padded tokens (a few thousand tokens' activations stay in a CPU's caches), rows of similar
  length together; a forward whose rows start from nothing is right-padded, so that attention is
  causal with no mask and skips the masked half of the scores. Every row's cache sits in one
  preallocated buffer, followed by room for the tokens it generates. On a GPU (``preallocate``)
  that room is every token the batch may generate, allocated at prefill, and nothing is kept
  between batches: the cache's peak is one batch's own, the figure a memory plan counts
  (:func:`sampling_terms`). On a CPU it starts at 64 columns and doubles, and buffers reuse the
  memory of earlier ones (fresh memory costs more in page faults than in writes).
- **Decode.** One token per row per forward, written into the buffer in place (no copy of the
  cache per token); rows that end stay until a quarter of the batch has ended, then leave it
  together, the live rows after them moving into their places.
- **Static decode** (``cuda_graphs``; ``auto``: where the model is on a GPU with the cache allocated
  whole, ``preallocate``). Every step of a decode batch has one shape: the batch keeps all its rows
  to the end (a row that ended decodes on into outputs nobody reads), each step writes its keys and
  values at a column given as a tensor and attends over every column of the buffer, those not yet
  filled masked out (:meth:`~.decoder.DecoderForward.step`). On a GPU the step is captured once per
  decode batch in a CUDA graph and replayed (:class:`~.decoder.StaticStep`), compiled functions
  included; on a CPU the same step runs without a graph. Tokens are the dynamic decode's (the
  longer masked span rounds differently, to about 1e-6 in fp32, like a batch of another size).
- **Forward.** For Llama, Qwen2 and Qwen3 models, :class:`~.decoder.DecoderForward` runs the
  model's weights as plain tensor functions (transformers' outputs, bit for bit), compiled with
  ``compile`` (fused loops; agrees to rounding); other models run their own forward.
- **Prefix reuse** (``prefix_reuse``, off by default). The distinct prompts also go into a radix
  tree of token ids (:mod:`.prefix_tree`); a prefix that several of them share is encoded once,
  level by level from the root, and a prompt that it covers for at least a quarter encodes only
  its tail on top of it, through a padding mask. Nothing is assumed about how prompts relate:
  common prefixes are found from the token ids. With ``prefix_cache_tokens`` above 0 the tree also
  keeps that many tokens' cache between calls (least recently used out), for prompts that extend
  earlier ones, and drops it whenever the model's weights change. On TextCraft's appendix-G
  prompts it barely pays: the step count comes before the history, so consecutive turns of an
  episode share only their first 8 tokens, and within a turn it saves a small share of the
  tokens, which its extra forwards and masked attention cost back (``benchmarks/rollout_speed.py``
  measures both: docs/generation.md).

What is guaranteed:

- The same prompts, params and seeds give identical outputs on the same hardware, dtype and
  options, from the same cache state (a fresh generator, or the same sequence of calls).
- Every response draws its uniforms from its own stream (:func:`~.base.response_seeds`), so the
  random choices do not depend on which other prompts share the call. A prompt's cache, however,
  is computed in forwards shaped by its neighbours (which rows are padded together, which prefixes
  are shared), and batched kernels agree across shapes only up to rounding (about 1e-6 in fp32 on
  CPU): a sampled token can differ only where its uniform falls within that rounding of a
  boundary of the cumulative distribution, and a greedy choice only at a near-tie.
"""

from __future__ import annotations

import inspect
import itertools
import logging
import math
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel
from transformers.cache_utils import Cache, DynamicLayer

from resail_pipeline.checkpoints import (
    bf16_faster,
    load_policy,
    read_checkpoint_info,
    resolve_device,
)
from resail_pipeline.config import check_int
from resail_pipeline.devices import keep_freed_memory, release_device_memory
from resail_pipeline.generation.base import (
    Generation,
    Generator,
    SamplingParams,
    response_seeds,
)
from resail_pipeline.generation.decoder import (
    DecoderForward,
    StaticStep,
    can_compile,
    static_unsupported,
    unsupported,
)
from resail_pipeline.generation.prefix_tree import Node, PrefixTree

logger = logging.getLogger(__name__)

#: Free columns a decode batch starts with; the buffer doubles when they run out, up to what the
#: batch can need.
_FIRST_DECODE_COLUMNS = 64

#: New storage is this much larger than asked for, so that the next few larger buffers fit in it:
#: an episode's prompts grow from turn to turn, and with them each turn's buffers, and fresh
#: memory costs a page fault per page on a CPU (docs/generation.md, "Moving rows and fresh
#: memory", measures it).
_STORAGE_HEADROOM = 1.25

#: What one more forward costs, in padded tokens, when prefill rows are cut into forwards.
_FORWARD_COST_TOKENS = 128

#: The least share of a prompt that a shared prefix must cover for the prompt to be encoded on
#: top of it. A prompt encoded after a prefix attends through a padding mask; one encoded whole
#: attends causally with no mask, which skips the masked half of the scores and so costs less
#: per token: a short shared prefix saves less than the mask costs.
_MIN_REUSED_SHARE = 0.25

#: ``dtype`` option values (``auto``: bf16 where the device multiplies faster in it, else fp32).
DTYPES = {"auto": None, "float32": torch.float32, "bfloat16": torch.bfloat16}


@contextmanager
def eval_mode(model: torch.nn.Module) -> Iterator[None]:
    """Put every module of ``model`` in eval mode; restore each module's own flag on exit."""
    flags = [(module, module.training) for module in model.modules()]
    model.eval()
    try:
        yield
    finally:
        for module, training in flags:
            module.training = training


def choose_tokens(
    logits: torch.Tensor, params: SamplingParams, uniforms: torch.Tensor | None
) -> torch.Tensor:
    """The next token of each row: greedy, or sampled by inverse CDF from one uniform per row.

    Temperature scales the logits, then top-k keeps the ``top_k`` largest, then top-p keeps the
    smallest set of the remaining (renormalised) tokens whose mass reaches ``top_p``.

    Args:
        logits: ``(B, V)`` next-token logits.
        params: the decoding settings.
        uniforms: ``(B,)`` float64 draws in ``[0, 1)``; unused (may be ``None``) when greedy.

    Returns:
        ``(B,)`` token ids.
    """
    if params.temperature == 0:
        return logits.argmax(dim=-1)
    if uniforms is None:
        raise ValueError("uniforms: required when temperature > 0")
    scaled = logits.float() / params.temperature  # (B, V)
    if params.top_k != -1:
        values, index = scaled.topk(min(params.top_k, scaled.shape[-1]), dim=-1)  # (B, K)
    elif params.top_p < 1:
        values, index = scaled.sort(dim=-1, descending=True, stable=True)  # (B, V)
    else:
        values, index = scaled, None
    probs = torch.softmax(values.double(), dim=-1)  # (B, K)
    if params.top_p < 1:
        # values are sorted: drop a token once the mass of the tokens before it reaches top_p.
        probs = probs.masked_fill(probs.cumsum(dim=-1) - probs >= params.top_p, 0.0)
    cdf = probs.cumsum(dim=-1)  # (B, K)
    targets = (uniforms.to(cdf) * cdf[:, -1]).unsqueeze(-1)  # (B, 1)
    # right=True: the first position whose cdf exceeds the target, never a zero-mass token.
    picks = torch.searchsorted(cdf, targets, right=True).clamp_(max=cdf.shape[-1] - 1)  # (B, 1)
    return (picks if index is None else index.gather(-1, picks)).squeeze(-1)


def resolve_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    """The dtype a generator loads its model in: a torch dtype as given, or one of :data:`DTYPES`
    (``auto`` and ``None``: bf16 where ``device`` multiplies faster in it than in fp32,
    :func:`~resail_pipeline.checkpoints.bf16_faster`; else fp32)."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype is not None and dtype not in DTYPES:
        raise ValueError(f"dtype: must be one of {sorted(DTYPES)}, got {dtype!r}")
    chosen = DTYPES[dtype or "auto"]
    if chosen is None:
        return torch.bfloat16 if bf16_faster(device) else torch.float32
    return chosen


def resolve_compile(compile: bool | str, device: torch.device) -> bool:
    """Whether a generator on ``device`` compiles the forward of a model :mod:`.decoder` runs:
    ``True`` or ``False`` as given; ``"auto"`` where :func:`~.decoder.can_compile` (a CPU with a
    C++ compiler)."""
    if compile not in (True, False, "auto"):
        raise ValueError(f"compile: must be true, false or 'auto', got {compile!r}")
    return can_compile(device) if compile == "auto" else compile


def resolve_cuda_graphs(
    cuda_graphs: bool | str, device: torch.device, preallocate: bool | None = None
) -> bool:
    """Whether a generator on ``device`` decodes through the static step (on a GPU, in CUDA
    graphs): ``True`` or ``False`` as given; ``"auto"`` where ``device`` is a GPU and the cache is
    allocated whole at prefill (``preallocate`` true, or ``None``: a GPU's default)."""
    if not (isinstance(cuda_graphs, bool) or cuda_graphs == "auto"):
        raise ValueError(f"cuda_graphs: must be true, false or 'auto', got {cuda_graphs!r}")
    if cuda_graphs == "auto":
        return device.type == "cuda" and preallocate is not False
    return cuda_graphs


def resolved_cuda_graphs(options: Mapping[str, Any]) -> bool:
    """Whether a generator built with ``options`` (``run.generation.transformers``) on this
    machine decodes in CUDA graphs (:func:`resolve_cuda_graphs`; a record of its outputs states
    it beside :func:`resolved_settings`)."""
    device = resolve_device(options.get("device", "auto"))
    graphs = resolve_cuda_graphs(
        options.get("cuda_graphs", False), device, options.get("preallocate")
    )
    return graphs and device.type == "cuda"


def resolved_settings(options: Mapping[str, Any]) -> tuple[torch.dtype, bool]:
    """The dtype and whether the forward is compiled, for a generator built with ``options``
    (``run.generation.transformers``) on this machine: what a record of its outputs states."""
    device = resolve_device(options.get("device", "auto"))
    return (
        resolve_dtype(options.get("dtype", "auto"), device),
        resolve_compile(options.get("compile", False), device),
    )


@dataclass(frozen=True)
class _CacheShape:
    """What a cache buffer holds per token: layers x key/value x kv_heads x head_dim."""

    layers: int
    heads: int
    head_dim: int
    dtype: torch.dtype
    device: torch.device


class _BufferLayer(DynamicLayer):
    """One layer's cache as a view of a preallocated buffer that forwards fill in place."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, length: int) -> None:
        super().__init__()
        self._keys, self._values = keys, values  # (R, H, C, D)
        self.length = length
        self.device = keys.device
        self.is_initialized = True
        self.keys, self.values = keys[:, :, :length], values[:, :, :length]

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        pass  # allocated by the buffer

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        end = self.length + key_states.shape[-2]
        self._keys[:, :, self.length : end] = key_states
        self._values[:, :, self.length : end] = value_states
        self.length = end
        self.keys, self.values = self._keys[:, :, :end], self._values[:, :, :end]
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length


class _Storage:
    """Flat tensors that cache buffers are cut from, kept for later buffers once one is done.

    On a CPU a fresh tensor of a few hundred MiB gets its pages one fault at a time as it is
    first written, which costs more than filling it, so buffers reuse memory across decode
    batches and calls, and new memory has :data:`_STORAGE_HEADROOM` for the larger buffers of
    later turns. New memory is zeroed; reused memory holds keys and values of earlier
    batches: finite, which is all that masked columns need (their attention weight is exactly 0,
    so what they hold never reaches an output). At most ``keep`` tensors wait, the largest; a GPU
    keeps none (its caching allocator reuses memory already, and training needs it back).
    """

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.free: list[torch.Tensor] = []

    def take(self, numel: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """A flat tensor of at least ``numel`` elements that no other buffer holds."""
        fits = [
            i
            for i, flat in enumerate(self.free)
            if flat.dtype == dtype and flat.device == device and flat.numel() >= numel
        ]
        if fits:
            flat = self.free.pop(min(fits, key=lambda i: self.free[i].numel()))
        else:
            # headroom only where the tensor will wait for later buffers (not on a GPU)
            size = math.ceil(numel * _STORAGE_HEADROOM) if self.keep else numel
            flat = torch.zeros(size, dtype=dtype, device=device)
        return flat

    def give(self, flat: torch.Tensor) -> None:
        """Take back a tensor from :meth:`take`, which its holder no longer uses."""
        self.free.append(flat)
        self.free.sort(key=torch.Tensor.numel, reverse=True)
        del self.free[self.keep :]


class _KVBuffer:
    """The cache of a batch of rows: ``data`` is ``(layers, 2, R, kv_heads, capacity, head_dim)``
    (keys then values; finite where nothing was written, so that masked columns are, see
    :class:`_Storage`), cut from ``storage``; ``mask`` is ``(R, capacity)``, 1 where a column
    holds a row's token. :meth:`release` gives the memory back."""

    def __init__(
        self, memory: torch.Tensor, data: torch.Tensor, mask: torch.Tensor, storage: _Storage
    ) -> None:
        self.data, self.mask, self.storage = data, mask, storage
        self._memory = memory  # what the storage gave, of which data is a view

    @classmethod
    def allocate(
        cls, size: tuple[int, ...], mask: torch.Tensor, dtype: torch.dtype, storage: _Storage
    ) -> _KVBuffer:
        """A buffer of ``size`` (``data``'s shape) from ``storage``, with ``mask``."""
        memory = storage.take(math.prod(size), dtype, mask.device)
        return cls(memory, memory[: math.prod(size)].view(size), mask, storage)

    @classmethod
    def empty(cls, shape: _CacheShape, rows: int, capacity: int, storage: _Storage) -> _KVBuffer:
        return cls.allocate(
            (shape.layers, 2, rows, shape.heads, capacity, shape.head_dim),
            torch.zeros((rows, capacity), dtype=torch.long, device=shape.device),
            shape.dtype,
            storage,
        )

    @property
    def capacity(self) -> int:
        return self.data.shape[4]

    def cache(self, rows: slice, start: int, length: int) -> Cache:
        """A transformers cache over ``rows`` and the columns from ``start`` on, whose first
        ``length`` of those columns are the past (the columns before ``start`` are padding)."""
        layers = [
            _BufferLayer(kv[0, rows, :, start:], kv[1, rows, :, start:], length) for kv in self.data
        ]
        return Cache(layers=layers)

    def select(self, rows: torch.Tensor, capacity: int) -> _KVBuffer:
        """A new buffer of ``rows`` (repeats allowed), in that order, with ``capacity`` columns
        (at least this buffer's)."""
        shape = self.data.shape
        size = (*shape[:2], len(rows), shape[3], capacity, shape[5])
        mask = self.mask.new_zeros((len(rows), capacity))
        mask[:, : self.capacity] = self.mask.index_select(0, rows)
        buffer = _KVBuffer.allocate(size, mask, self.data.dtype, self.storage)
        if capacity == self.capacity:
            torch.index_select(self.data, 2, rows, out=buffer.data)
        else:  # row by row into the strided columns, without a temporary of the whole
            for j, row in enumerate(rows.tolist()):
                buffer.data[:, :, j, :, : self.capacity].copy_(self.data[:, :, row])
        return buffer

    def keep(self, rows: torch.Tensor, columns: slice) -> torch.Tensor:
        """Keep only ``rows`` (ascending) as the first ``len(rows)`` rows, in place: each kept row
        past them moves into a dropped row's place (only its ``columns``, those in use), so that
        a few rows move, not the whole cache. Returns ``(len(rows),)``: the former row each row
        now holds."""
        count = len(rows)
        kept = torch.zeros(self.mask.shape[0], dtype=torch.bool, device=rows.device)
        kept[rows] = True
        holes = (~kept[:count]).nonzero().squeeze(-1)  # dropped rows that kept ones fill
        movers = rows[rows >= count]  # as many kept rows past the first `count`
        # Row by row: each row's columns are one strided block, copied at memory speed, where
        # advanced indexing over the row dimension (one gather and one scatter of every mover)
        # was several times slower on a CPU (docs/generation.md, "Moving rows and fresh memory").
        for hole, mover in zip(holes.tolist(), movers.tolist(), strict=True):
            self.data[:, :, hole, :, columns].copy_(self.data[:, :, mover, :, columns])
        self.mask[holes] = self.mask[movers]
        self.data, self.mask = self.data[:, :, :count], self.mask[:count]
        order = torch.arange(count, device=rows.device)
        order[holes] = movers
        return order

    def reserve(self, capacity: int, limit: int) -> None:
        """Grow to at least ``capacity`` columns: doubling, so that growth is amortised, but never
        past ``limit``, the columns the batch can need (its prompt width and every new token),
        since the old buffer is alive while its contents move to the new one."""
        if capacity <= self.capacity:
            return
        grown = max(capacity, min(2 * self.capacity, limit))
        mask = self.mask.new_zeros((self.mask.shape[0], grown))
        mask[:, : self.capacity] = self.mask
        shape = self.data.shape
        buffer = _KVBuffer.allocate(
            (*shape[:4], grown, shape[5]), mask, self.data.dtype, self.storage
        )
        buffer.data[:, :, :, :, : self.capacity] = self.data
        self.release()
        self.data, self.mask, self._memory = buffer.data, buffer.mask, buffer._memory

    def release(self) -> None:
        """Give the memory back to the storage; the buffer is not used after."""
        self.storage.give(self._memory)


@dataclass
class GenerationStats:
    """What a generator has done since it was built."""

    calls: int = 0
    #: tokens of every prompt of every call
    prompt_tokens: int = 0
    #: prompt tokens a forward encoded (the rest came from identical prompts or shared prefixes)
    encoded_tokens: int = 0
    generated_tokens: int = 0
    seconds: float = 0.0
    #: decode batches whose step was captured in a CUDA graph (``cuda_graphs`` on a GPU)
    graph_captures: int = 0


@dataclass(frozen=True)
class _Prefilled:
    """Rows encoded up to their last prompt token: the buffer (columns ``start`` to ``width``
    filled), each row's next position, and the ``(R, V)`` fp32 logits that predict its first
    new token."""

    buffer: _KVBuffer
    start: int  # the first column any row uses
    width: int
    positions: torch.Tensor  # (R,)
    logits: torch.Tensor  # (R, V)


class TransformersGenerator(Generator):
    """The :class:`~.base.Generator` over a transformers causal LM, on CPU or GPU.

    Args:
        model: a causal LM whose layers all use full attention; used as is (device, dtype), in
            eval mode during a call and left in the train/eval state it had.
        tokenizer: its tokenizer; ``eos_token`` (``<|im_end|>`` for Qwen3 chat models) ends a
            response. Its own padding side is not used.
        policy_id: recorded with every response.
        batch_size: rows (prompt x sample) decoded together; a prompt's rows are never split.
        max_batch_tokens: cache tokens a decode batch may hold at most, counting each row's prompt
            and ``max_new_tokens`` (``None``: no bound; one prompt's rows exceed it alone). What
            bounds the cache's memory where prompts are long (ALFWorld histories on a GPU beside a
            training step): for Qwen3-4B in bf16 a token of cache takes 144 KiB.
        pad_to_multiple_of: a forward's tails are padded up to a multiple of it, bounding the
            number of distinct shapes.
        prefill_tokens: padded tokens per prefill forward at most (one prompt's tail exceeds it
            alone); activations of a few thousand tokens stay in the CPU's caches.
        prefix_reuse: encode each prefix that several prompts share once (see the module notes).
        prefix_cache_tokens: cached tokens kept between calls for later prompts (0: none).
        compile: for the architectures :mod:`.decoder` runs (Llama, Qwen2, Qwen3), compile its
            per-layer functions with ``torch.compile``: ``True``, ``False`` (their eager form,
            which gives transformers' outputs bit for bit), or ``"auto"``
            (:func:`resolve_compile`: compiled on a CPU with a C++ compiler). Other architectures
            run transformers' own forward.
        progress: show a progress bar over decode batches when a call has more than one.
        preallocate: allocate each decode batch's cache whole at prefill (its prompts and
            ``max_new_tokens`` more, for every row) and keep no memory between batches, so that
            a batch never holds more than that, not even while a buffer grows; ``None``: where
            the model is on a GPU. Otherwise (a CPU's default) the room for new tokens starts at
            64 columns and doubles, and freed buffers wait for later batches.
        cuda_graphs: decode each batch through the static step (see the module notes): ``True``,
            ``False``, or ``"auto"`` (:func:`resolve_cuda_graphs`: where the model is on a GPU and
            ``preallocate`` is on). It needs the cache allocated whole (``preallocate``; left
            ``None``, it is on wherever the static step is) and an architecture :mod:`.decoder`
            runs (:func:`~.decoder.static_unsupported`); ``auto`` is off where either is missing.
            On a GPU each batch's step is captured once in a CUDA graph; on a CPU the same step
            runs without one.
    """

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: Any,
        *,
        policy_id: str,
        batch_size: int = 64,
        max_batch_tokens: int | None = None,
        pad_to_multiple_of: int = 16,
        prefill_tokens: int = 4096,
        prefix_reuse: bool = False,
        prefix_cache_tokens: int = 0,
        compile: bool | str = False,
        progress: bool = True,
        preallocate: bool | None = None,
        cuda_graphs: bool | str = False,
    ) -> None:
        self.check_values(
            batch_size=batch_size,
            max_batch_tokens=max_batch_tokens,
            pad_to_multiple_of=pad_to_multiple_of,
            prefill_tokens=prefill_tokens,
            prefix_reuse=prefix_reuse,
            prefix_cache_tokens=prefix_cache_tokens,
            compile=compile,
            preallocate=preallocate,
            cuda_graphs=cuda_graphs,
        )
        device = next(model.parameters()).device
        compiled = resolve_compile(compile, device)
        static = resolve_cuda_graphs(cuda_graphs, device, preallocate)
        if tokenizer.eos_token_id is None:
            raise ValueError("tokenizer: has no eos_token, so a response could never end")
        config = model.config.get_text_config(decoder=True)
        other = sorted(set(getattr(config, "layer_types", None) or ()) - {"full_attention"})
        if other:
            raise ValueError(f"model: layer types {other} are not supported, only full attention")
        self.model = model
        self.tokenizer = tokenizer
        self.policy_id = policy_id
        self.batch_size = batch_size
        self.max_batch_tokens = max_batch_tokens
        self.pad_to_multiple_of = pad_to_multiple_of
        self.prefill_tokens = prefill_tokens
        self.prefix_reuse = prefix_reuse
        self.progress = progress
        self.eos_id: int = tokenizer.eos_token_id
        self.pad_id: int = (
            tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_id
        )
        self.tree = PrefixTree(max_tokens=prefix_cache_tokens)
        self.stats = GenerationStats()
        self._weights: tuple | None = None
        parameters = inspect.signature(model.forward).parameters
        self._cache_argument = "cache" if "cache" in parameters else "past_key_values"
        self.preallocate = (device.type != "cpu" or static) if preallocate is None else preallocate
        self._storage = _Storage(keep=0 if self.preallocate else 2)
        if device.type == "cpu":  # each forward's activations: the pages the last one freed
            keep_freed_memory()
        self._decoder: DecoderForward | None = None
        reason = unsupported(model)
        if reason is None:
            self._decoder = DecoderForward(model, compile=compiled)
        elif compile is True:
            raise ValueError(f"compile: the model cannot run compiled: {reason}")
        reason = static_unsupported(model)
        if static and reason is not None:
            if cuda_graphs is True:
                raise ValueError(f"cuda_graphs: the model cannot decode in static steps: {reason}")
            static = False
        #: whether batches decode through the static step (:class:`~.decoder.StaticStep`)
        self.static_decode = static

    @property
    def compiled(self) -> bool:
        """Whether the forward runs compiled (see ``compile``)."""
        return self._decoder is not None and self._decoder.compiled

    def close(self) -> None:
        """Drop the model and the prefix cache (the caller's own references to a model it passed
        in stay valid), and hand cached GPU memory back."""
        self.model = None
        self._decoder = None
        self._storage = _Storage(keep=0)
        self.tree = PrefixTree(max_tokens=0)
        self._weights = None
        release_device_memory()

    @classmethod
    def check_values(cls, **options: Any) -> None:
        """Raise ``ValueError`` naming the option if a value of ``options`` (those of
        :meth:`option_names`) would be refused, before any model is loaded."""
        for name in ("batch_size", "pad_to_multiple_of", "prefill_tokens"):
            if name in options:
                check_int(name, options[name], low=1)
        check_int("max_batch_tokens", options.get("max_batch_tokens"), low=1, optional=True)
        check_int("prefix_cache_tokens", options.get("prefix_cache_tokens", 0), low=0)
        for name in ("prefix_reuse", "progress"):
            if not isinstance(options.get(name, False), bool):
                raise ValueError(f"{name}: must be true or false, got {options[name]!r}")
        if options.get("preallocate") not in (None, True, False):
            raise ValueError(
                f"preallocate: must be true, false or null, got {options['preallocate']!r}"
            )
        if options.get("prefix_cache_tokens") and not options.get("prefix_reuse"):
            raise ValueError("prefix_cache_tokens: keeps prefixes for prefix_reuse, which is off")
        if options.get("compile", False) not in (True, False, "auto"):
            raise ValueError(f"compile: must be true, false or 'auto', got {options['compile']!r}")
        graphs = options.get("cuda_graphs", False)
        if not (isinstance(graphs, bool) or graphs == "auto"):
            raise ValueError(f"cuda_graphs: must be true, false or 'auto', got {graphs!r}")
        if graphs is True and options.get("preallocate") is False:
            raise ValueError(
                "cuda_graphs: decodes over a cache allocated whole at prefill, but preallocate is "
                "false"
            )
        dtype = options.get("dtype", "auto")
        if not isinstance(dtype, torch.dtype) and dtype is not None and dtype not in DTYPES:
            raise ValueError(f"dtype: must be one of {sorted(DTYPES)}, got {dtype!r}")
        device = options.get("device", "auto")
        if device != "auto":
            try:
                torch.device(device)
            except (RuntimeError, TypeError):
                raise ValueError(f"device: not a torch device name: {device!r}") from None

    @classmethod
    def option_names(cls) -> set[str]:
        """The options :meth:`from_checkpoint` takes (its own and the constructor's)."""
        from resail_pipeline.generation import keyword_names

        return keyword_names(cls.from_checkpoint, cls.__init__) - {"path", "model", "tokenizer"}

    @classmethod
    def from_checkpoint(
        cls,
        path: str | Path,
        *,
        dtype: str | torch.dtype | None = "auto",
        device: str = "auto",
        policy_id: str | None = None,
        **options: Any,
    ) -> TransformersGenerator:
        """Load a local checkpoint on ``device`` (``auto``: the first GPU if there is one, else the
        CPU; ``run.generation.transformers.device``) in ``dtype`` (:func:`resolve_dtype`;
        ``auto``: bf16 where the device multiplies faster in it); ``policy_id`` defaults to the
        one its manifest records."""
        resolved = resolve_device(device)
        model, tokenizer = load_policy(path, dtype=resolve_dtype(dtype, resolved), device=resolved)
        if policy_id is None:
            policy_id = read_checkpoint_info(path).policy_id
        return cls(model, tokenizer, policy_id=policy_id, **options)

    def generate(
        self,
        prompts: Sequence[str],
        params: SamplingParams,
        seeds: Sequence[int] | None = None,
    ) -> list[Generation]:
        """``len(prompts) * params.n`` generations, prompt-major; see the module notes."""
        if self.model is None:
            raise RuntimeError(f"generator of {self.policy_id}: closed")
        stream_seeds = response_seeds(len(prompts), params, seeds)
        encoded = self._encode(prompts, params)
        if not encoded:
            return []
        # Distinct prompts, each with the rows (prompt x sample) it serves.
        rows_of: dict[tuple[int, ...], list[int]] = {}
        for i, ids in enumerate(encoded):
            rows_of.setdefault(tuple(ids), []).extend(range(i * params.n, (i + 1) * params.n))
        distinct = sorted(rows_of, key=lambda ids: -len(ids))  # the largest shapes first
        budget = self.max_batch_tokens or float("inf")
        batches: list[list[tuple[int, ...]]] = [[]]
        rows_in_batch = tokens_in_batch = 0
        for ids in distinct:
            rows = len(rows_of[ids])
            tokens = rows * (len(ids) + params.max_new_tokens)  # the cache these rows may fill
            if batches[-1] and (
                rows_in_batch + rows > self.batch_size or tokens_in_batch + tokens > budget
            ):
                batches.append([])
                rows_in_batch = tokens_in_batch = 0
            batches[-1].append(ids)
            rows_in_batch += rows
            tokens_in_batch += tokens

        by_row: dict[int, Generation] = {}
        start = time.perf_counter()
        bar = tqdm(
            batches, desc="generate", leave=False, disable=not self.progress or len(batches) < 2
        )
        with eval_mode(self.model), torch.inference_mode():
            plan, encoded_tokens = self._plan(distinct)
            for batch in bar:
                batch.sort(key=lambda ids: plan[ids][0].depth - len(ids))  # longest tail first
                tails = [list(ids[plan[ids][0].depth :]) for ids in batch]
                encoded_tokens += sum(map(len, tails))
                rows = [r for ids in batch for r in rows_of[ids]]
                prefilled = self._prefill(
                    [plan[ids][0] for ids in batch],
                    tails,
                    extra=params.max_new_tokens
                    if self.preallocate
                    else min(params.max_new_tokens, _FIRST_DECODE_COLUMNS),
                    keep=[plan[ids] for ids in batch] if self.tree.max_tokens else None,
                    repeats=[len(rows_of[ids]) for ids in batch],
                )
                generated = self._decode(prefilled, [stream_seeds[r] for r in rows], params)
                by_row.update(zip(rows, generated, strict=True))
            self.tree.finish_call()
        results = [by_row[r] for r in range(len(stream_seeds))]
        seconds = time.perf_counter() - start
        prompt_tokens = sum(map(len, encoded))
        generated_tokens = sum(len(g.token_ids) for g in results)
        self.stats.calls += 1
        self.stats.prompt_tokens += prompt_tokens
        self.stats.encoded_tokens += encoded_tokens
        self.stats.generated_tokens += generated_tokens
        self.stats.seconds += seconds
        logger.debug(
            "generated %d responses, %d tokens in %.2f s; encoded %d of %d prompt tokens",
            len(results),
            generated_tokens,
            seconds,
            encoded_tokens,
            prompt_tokens,
        )
        return results

    def _encode(self, prompts: Sequence[str], params: SamplingParams) -> list[list[int]]:
        """Token ids of each prompt, checked for emptiness and for room to generate."""
        if not prompts:
            return []
        encoded = self.tokenizer(list(prompts), add_special_tokens=False)["input_ids"]
        limit = getattr(self.model.config, "max_position_embeddings", None)
        for i, ids in enumerate(encoded):
            if not ids:
                raise ValueError(f"prompts[{i}]: empty prompt")
            if limit is not None and len(ids) + params.max_new_tokens > limit:
                raise ValueError(
                    f"prompts[{i}]: {len(ids)} prompt tokens + max_new_tokens "
                    f"{params.max_new_tokens} exceed the model's {limit} positions"
                )
        return encoded

    def _cache_shape(self) -> _CacheShape:
        config = self.model.config.get_text_config(decoder=True)
        heads = config.num_attention_heads
        parameter = next(self.model.parameters())
        return _CacheShape(
            layers=config.num_hidden_layers,
            heads=getattr(config, "num_key_value_heads", None) or heads,
            head_dim=getattr(config, "head_dim", None) or config.hidden_size // heads,
            dtype=parameter.dtype,
            device=parameter.device,
        )

    def _plan(
        self, prompts: list[tuple[int, ...]]
    ) -> tuple[dict[tuple[int, ...], tuple[Node, Node]], int]:
        """Each distinct prompt's ``(base, end)``: the tree node its tail is encoded from (the
        root: the whole prompt) and the node where its key ends. Shared prefixes that have no
        cache yet are encoded here; also returns how many tokens that took."""
        root = self.tree.root
        if not self.prefix_reuse:
            return {ids: (root, root) for ids in prompts}, 0
        weights = tuple((p.data_ptr(), p._version, p.dtype) for p in self.model.parameters())
        if weights != self._weights:  # a cache is only valid for the weights that computed it
            self.tree.clear()
            self._weights = weights
        # The last token of a prompt is always encoded with its tail: its logits start the reply.
        ends = {ids: self.tree.insert(ids[:-1]) for ids in prompts}
        # A prompt whose shared prefix is short is encoded whole: with nothing before it, its
        # forward needs no mask and attention skips the masked half (see _MIN_REUSED_SHARE).
        # Leaving may shorten the shared prefixes of the others, so repeat until none leaves.
        reusing = dict(ends)
        while short := [
            ids
            for ids, end in reusing.items()
            if PrefixTree.base(end).depth < _MIN_REUSED_SHARE * len(ids)
        ]:
            for ids in short:
                PrefixTree.release(reusing.pop(ids))
        encoded = 0
        for level in self.tree.pending():
            level.sort(key=lambda node: -len(node.tokens))
            for i in range(0, len(level), self.batch_size):
                nodes = level[i : i + self.batch_size]
                encoded += sum(len(node.tokens) for node in nodes)
                self._prefill(
                    [node.parent or root for node in nodes],
                    [list(node.tokens) for node in nodes],
                    extra=0,
                    keep=[(node.parent or root, node) for node in nodes],
                ).buffer.release()
        bases = {ids: PrefixTree.base(end) if ids in reusing else root for ids, end in ends.items()}
        return {ids: (bases[ids], end) for ids, end in ends.items()}, encoded

    def _prefill(
        self,
        bases: list[Node],
        tails: list[list[int]],
        *,
        extra: int,
        keep: list[tuple[Node, Node]] | None = None,
        repeats: list[int] | None = None,
    ) -> _Prefilled:
        """Encode each tail after its base's cached path, in forwards of at most
        ``prefill_tokens`` padded tokens; rows come longest tail first.

        Each forward fills the last ``w`` of the buffer's filled columns, ``w`` its longest tail
        padded. Where its rows have bases, the tails are left-padded (right-aligned) and each
        base sits just before those ``w`` columns: a row reads padding, base, padding, tail, the
        padding masked out. Where no row has a base, the tails are right-padded, so that attention
        is causal with no mask, and each row's logits are read at its last real token. ``extra``
        free columns follow for decoding. With ``keep``, row ``i``'s new cache fills the tree
        nodes from below ``keep[i][0]`` down to ``keep[i][1]`` (a tail's last token, outside the
        key, is not kept); with ``repeats``, row ``i`` of the result is repeated ``repeats[i]``
        times.
        """
        if any(len(a) < len(b) for a, b in itertools.pairwise(tails)):
            raise ValueError("tails: must come longest first")
        shape = self._cache_shape()
        multiple = self.pad_to_multiple_of
        chunks = [
            (rows, math.ceil(len(tails[rows[0]]) / multiple) * multiple)
            for rows in self._prefill_chunks([len(tail) for tail in tails])
        ]
        width = max(chunk_width + max(bases[r].depth for r in rows) for rows, chunk_width in chunks)
        repeated = repeats is not None and any(k != 1 for k in repeats)
        # rows that are repeated get their room for new tokens in the repeated buffer only
        buffer = _KVBuffer.empty(
            shape, len(tails), width + (0 if repeated else extra), self._storage
        )
        logits, starts = [], []
        first = [0] * len(tails)  # the column of each row's first tail token
        for rows, chunk_width in chunks:
            past = width - chunk_width  # columns before this forward's tails
            depths = [bases[r].depth for r in rows]
            lengths = [len(tails[r]) for r in rows]
            input_ids = torch.full((len(rows), chunk_width), self.pad_id, dtype=torch.long)
            span = slice(rows[0], rows[-1] + 1)
            if not any(depths):  # right-padded, causal, no mask
                for i, (r, n) in enumerate(zip(rows, lengths, strict=True)):
                    input_ids[i, :n] = torch.tensor(tails[r])
                    buffer.mask[r, past : past + n] = 1
                    first[r] = past
                starts.append(past)
                logits.append(
                    self._forward(
                        input_ids.to(shape.device),
                        None,
                        None,
                        buffer.cache(span, past, 0),
                        last=torch.tensor(lengths, device=shape.device) - 1,
                    )
                )
                continue
            # left-padded after the bases, padding masked out
            start = past - max(depths)  # before it, only padding
            starts.append(start)
            positions = torch.zeros((len(rows), chunk_width), dtype=torch.long)
            for i, (r, depth, n) in enumerate(zip(rows, depths, lengths, strict=True)):
                if depth:
                    buffer.data[:, :, r, :, past - depth : past] = bases[r].path_kv()
                    buffer.mask[r, past - depth : past] = 1
                buffer.mask[r, width - n : width] = 1
                first[r] = width - n
                input_ids[i, chunk_width - n :] = torch.tensor(tails[r])
                positions[i, chunk_width - n :] = torch.arange(depth, depth + n)
            logits.append(
                self._forward(
                    input_ids.to(shape.device),
                    buffer.mask[span, start:width],
                    positions.to(shape.device),
                    buffer.cache(span, start, past - start),
                )
            )

        for row, (base, end) in enumerate(keep or ()):
            if end.depth > base.depth:
                columns = slice(first[row], first[row] + end.depth - base.depth)
                self.tree.store(base, end, buffer.data[:, :, row, :, columns])
        positions = torch.tensor(
            [base.depth + len(tail) for base, tail in zip(bases, tails, strict=True)],
            device=shape.device,
        )
        prefilled = _Prefilled(buffer, min(starts), width, positions, torch.cat(logits))
        if not repeated:
            return prefilled
        index = torch.repeat_interleave(
            torch.arange(len(tails), device=shape.device),
            torch.tensor(repeats, device=shape.device),
        )
        copies = buffer.select(index, capacity=width + extra)
        buffer.release()
        return _Prefilled(
            copies,
            prefilled.start,
            width,
            prefilled.positions[index],
            prefilled.logits[index],
        )

    def _prefill_chunks(self, lengths: list[int]) -> list[list[int]]:
        """Rows (longest first) cut into consecutive forwards of at most ``prefill_tokens`` padded
        tokens (a row longer than that goes alone), cut where padding would cost more than
        another forward: the partition that minimises padded tokens plus
        :data:`_FORWARD_COST_TOKENS` per forward (dynamic programming over the cut points)."""
        multiple = self.pad_to_multiple_of
        padded = [math.ceil(n / multiple) * multiple for n in lengths]
        # best[i]: the cost of rows i.. ; cut[i]: where the first forward from row i ends
        best = [0.0] * (len(padded) + 1)
        cut = [0] * len(padded)
        for i in range(len(padded) - 1, -1, -1):
            best[i] = math.inf
            for j in range(i + 1, len(padded) + 1):
                tokens = padded[i] * (j - i)  # rows come longest first: row i sets the width
                if j > i + 1 and tokens > self.prefill_tokens:
                    break
                cost = _FORWARD_COST_TOKENS + tokens + best[j]
                if cost < best[i]:
                    best[i], cut[i] = cost, j
        chunks, i = [], 0
        while i < len(padded):
            chunks.append(list(range(i, cut[i])))
            i = cut[i]
        return chunks

    @staticmethod
    def _uniforms(
        seeds: list[int], params: SamplingParams, device: torch.device
    ) -> torch.Tensor | None:
        """``(B, N)`` float64 draws, row ``b``'s from its own stream ``seeds[b]``; ``None`` when
        greedy."""
        if params.temperature == 0:
            return None
        return torch.stack(
            [
                torch.rand(
                    params.max_new_tokens,
                    generator=torch.Generator().manual_seed(s),
                    dtype=torch.float64,
                )
                for s in seeds
            ]
        ).to(device)  # (B, N)

    def _decode(
        self, prefilled: _Prefilled, seeds: list[int], params: SamplingParams
    ) -> list[Generation]:
        """Decode the prefilled rows, one token per step, each with its own uniform stream."""
        if self.static_decode:
            return self._decode_static(prefilled, seeds, params)
        buffer, logits, position = prefilled.buffer, prefilled.logits, prefilled.positions
        batch, steps, device = len(seeds), params.max_new_tokens, logits.device
        uniforms = self._uniforms(seeds, params, device)

        tokens = torch.full((batch, steps), self.pad_id, dtype=torch.long, device=device)  # (B, N)
        logprobs = torch.zeros((batch, steps), dtype=torch.float32, device=device)  # (B, N)
        lengths = torch.zeros(batch, dtype=torch.long, device=device)  # (B,)
        finished = torch.zeros(batch, dtype=torch.bool, device=device)  # (B,)
        # The buffer's rows: which row of the batch each is, and whether it is still decoding. A
        # row that ends stays (its outputs unused) until a quarter of the rows have ended, then
        # they all leave the buffer at once, the live rows past the first ones moving into their
        # places.
        active = torch.arange(batch, device=device)  # (A,)
        alive = torch.ones(batch, dtype=torch.bool, device=device)  # (A,)
        start, width = prefilled.start, prefilled.width
        for k in range(steps):
            draws = None if uniforms is None else uniforms[active, k]  # (A,)
            chosen = choose_tokens(logits, params, draws)  # (A,)
            rows = active[alive]  # (L,) the live rows of the batch
            tokens[rows, k] = chosen[alive]
            chosen_logits = logits.gather(-1, chosen[:, None])[:, 0]  # (A,)
            logprobs[rows, k] = (chosen_logits - logits.logsumexp(dim=-1))[alive]
            lengths[rows] = k + 1
            ended = alive & (chosen == self.eos_id)  # (A,)
            finished[active[ended]] = True
            alive &= ~ended
            if k == steps - 1 or not bool(alive.any()):
                break
            if 4 * int((~alive).sum()) >= len(alive):
                order = buffer.keep(alive.nonzero().squeeze(-1), slice(start, width))  # (A',)
                active, alive, chosen, position = (
                    active[order],
                    alive[order],
                    chosen[order],
                    position[order],
                )
            buffer.reserve(width + 1, limit=prefilled.width + steps)
            buffer.mask[:, width] = 1
            logits = self._forward(
                chosen[:, None],
                buffer.mask[:, start : width + 1],
                position[:, None],
                buffer.cache(slice(None), start, width - start),
            )  # (A, V)
            width += 1
            position = position + 1
        buffer.release()
        return self._generations(tokens, logprobs, lengths, finished)

    def _decode_static(
        self, prefilled: _Prefilled, seeds: list[int], params: SamplingParams
    ) -> list[Generation]:
        """:meth:`_decode` in steps of one shape (``cuda_graphs``): every row stays to the end (a
        row that ended decodes on, its tokens not recorded), each step through one
        :class:`~.decoder.StaticStep` over the buffer's columns from ``start`` to its capacity,
        captured in a CUDA graph where the buffer is on a GPU. Nothing is read back to the host
        but whether a row is still alive."""
        buffer, logits, position = prefilled.buffer, prefilled.logits, prefilled.positions
        batch, steps, device = len(seeds), params.max_new_tokens, logits.device
        start, width = prefilled.start, prefilled.width
        if buffer.capacity < width + steps - 1:
            raise RuntimeError(
                f"static decode: {buffer.capacity} columns, {width + steps - 1} needed"
            )
        uniforms = self._uniforms(seeds, params, device)
        tokens = torch.full((batch, steps), self.pad_id, dtype=torch.long, device=device)  # (B, N)
        logprobs = torch.zeros((batch, steps), dtype=torch.float32, device=device)  # (B, N)
        lengths = torch.zeros(batch, dtype=torch.long, device=device)  # (B,)
        finished = torch.zeros(batch, dtype=torch.bool, device=device)  # (B,)
        alive = torch.ones(batch, dtype=torch.bool, device=device)  # (B,)
        step: StaticStep | None = None
        for k in range(steps):
            chosen = choose_tokens(logits, params, None if uniforms is None else uniforms[:, k])
            chosen_logits = logits.gather(-1, chosen[:, None])[:, 0]  # (B,)
            tokens[:, k] = torch.where(alive, chosen, self.pad_id)
            logprobs[:, k] = torch.where(alive, chosen_logits - logits.logsumexp(dim=-1), 0.0)
            lengths += alive
            ended = alive & (chosen == self.eos_id)  # (B,)
            finished |= ended
            alive &= ~ended
            if k == steps - 1 or not bool(alive.any()):
                break
            if step is None:
                step = StaticStep(
                    self._decoder,
                    buffer.data[:, :, :, :, start:],  # (layers, 2, B, kv_heads, L, D)
                    buffer.mask[:, start:],  # (B, L)
                    graph=device.type == "cuda",
                )
            logits = step(chosen, position, width - start)  # (B, V)
            width += 1
            position = position + 1
        if step is not None and step.captured:
            self.stats.graph_captures += 1
        del step  # the graph and its memory, before the buffer goes back
        buffer.release()
        return self._generations(tokens, logprobs, lengths, finished)

    def _generations(
        self,
        tokens: torch.Tensor,
        logprobs: torch.Tensor,
        lengths: torch.Tensor,
        finished: torch.Tensor,
    ) -> list[Generation]:
        """The batch's generations from its ``(B, N)`` tokens and log-probs, its ``(B,)``
        lengths and end flags."""
        generations = []
        for b in range(tokens.shape[0]):
            ids = tokens[b, : lengths[b]].tolist()
            text_ids = ids[:-1] if finished[b] else ids
            generations.append(
                Generation(
                    text=self.tokenizer.decode(text_ids, skip_special_tokens=False),
                    token_ids=tuple(ids),
                    logprobs=tuple(logprobs[b, : lengths[b]].tolist()),
                    finished=bool(finished[b]),
                )
            )
        return generations

    def _forward(
        self,
        input_ids: torch.Tensor,
        mask: torch.Tensor | None,
        positions: torch.Tensor | None,
        cache: Cache,
        last: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``(B, V)`` fp32 logits at each row's last position (``last``, ``(B,)``: at those),
        filling ``cache`` with ``input_ids``."""
        if self._decoder is not None:
            return self._decoder(input_ids, mask, positions, cache, last)
        keep: int | torch.Tensor = 1
        if last is not None:
            keep, index = torch.unique(last, return_inverse=True)  # (K,), (B,)
        out = self.model(
            input_ids=input_ids,
            attention_mask=mask,
            position_ids=positions,
            use_cache=True,
            logits_to_keep=keep,
            **{self._cache_argument: cache},
        )
        if last is None:
            return out.logits[:, -1].float()  # (B, V)
        return out.logits[torch.arange(len(index)), index].float()  # (B, V)
