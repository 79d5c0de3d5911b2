"""The forward of a Llama-family decoder (Llama, Qwen2, Qwen3) as plain tensor functions over the
transformers model's own weights, which :class:`~.transformers_backend.TransformersGenerator`
(rollouts, the trainer's in-loop sampling) and
:class:`~resail_pipeline.training.views.ResponseLogits` (the trainer's and the scorers' forward)
run in place of ``model(...)`` for those architectures.

On a CPU the shipped policy's forward (4 layers of width 256) spends less of its time in matmuls
than in the elementwise work around them (RMSNorm's fp32 round trip, rotary embeddings, SwiGLU,
residuals) and in the model's per-call machinery (mask construction, cache objects). Here a
layer is two functions over the tokens flattened to ``(N, hidden)``: the work before attention
(norm, q/k/v projections, q/k norms, rotary) and the work after it (output projection, residual,
norm, MLP, residual); attention itself is one ``scaled_dot_product_attention`` over the caller's
cache. Eager, these compute what transformers computes, op for op: the same outputs, bit for bit
(as of transformers 5.24; 5.19 repeats keys for grouped-query decoding, which rounds differently).
Compiled (``torch.compile``; on CPU, inductor's C++ loops), each function becomes a few fused
loops that keep intermediates in fp32: outputs agree to about 1e-6 in fp32, and in bf16 they
round differently (the unfused ops round every intermediate to bf16). Compiled in bf16 on a CPU
without AMX, decoding's one-query attention runs as such loops too (:func:`_one_query_attention`),
in place of SDPA's kernel.

:meth:`DecoderForward.step` is a decoding step of fixed shape over a cache allocated whole (every
column a decode batch may fill, from its prefill on): each row's new key and value go to a column
given as a tensor, attention spans every column under the mask of those filled, and nothing is
read back to the host. :class:`StaticStep` runs it from persistent input tensors; on a GPU it
captures the step once per decode batch in a CUDA graph and replays it, so that a step is one
graph launch in place of every kernel's own launch from Python.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import shutil
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F

from resail_pipeline.devices import amx_kernels, separate_compile_cache

logger = logging.getLogger(__name__)

#: ``model_type`` values whose decoder layers this forward reproduces.
ARCHITECTURES = ("llama", "qwen2", "qwen3")


class _Layer(NamedTuple):
    """One decoder layer's weights (``None``: the architecture has no such bias or norm)."""

    input_norm: torch.Tensor
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    o: torch.Tensor
    q_bias: torch.Tensor | None
    k_bias: torch.Tensor | None
    v_bias: torch.Tensor | None
    o_bias: torch.Tensor | None
    q_norm: torch.Tensor | None
    k_norm: torch.Tensor | None
    post_norm: torch.Tensor
    gate: torch.Tensor
    up: torch.Tensor
    down: torch.Tensor

    @classmethod
    def of(cls, layer: torch.nn.Module) -> _Layer:
        attention, mlp = layer.self_attn, layer.mlp
        q_norm, k_norm = getattr(attention, "q_norm", None), getattr(attention, "k_norm", None)
        return cls(
            input_norm=layer.input_layernorm.weight,
            q=attention.q_proj.weight,
            k=attention.k_proj.weight,
            v=attention.v_proj.weight,
            o=attention.o_proj.weight,
            q_bias=attention.q_proj.bias,
            k_bias=attention.k_proj.bias,
            v_bias=attention.v_proj.bias,
            o_bias=attention.o_proj.bias,
            q_norm=None if q_norm is None else q_norm.weight,
            k_norm=None if k_norm is None else k_norm.weight,
            post_norm=layer.post_attention_layernorm.weight,
            gate=mlp.gate_proj.weight,
            up=mlp.up_proj.weight,
            down=mlp.down_proj.weight,
        )


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """transformers' ``LlamaRMSNorm``/``Qwen3RMSNorm``: normalised in fp32, scaled in ``x``'s dtype."""
    dtype = x.dtype
    x = x.float()
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x.to(dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding of ``(N, heads, D)`` by ``(N, D)`` angles (transformers' halves layout)."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos[:, None] + rotated * sin[:, None]


def _before_attention(
    h: torch.Tensor,
    w: _Layer,
    cos: torch.Tensor,
    sin: torch.Tensor,
    eps: float,
    heads: int,
    kv_heads: int,
    head_dim: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Queries ``(N, heads, D)``, keys and values ``(N, kv_heads, D)`` of hidden states ``(N, H)``."""
    n = h.shape[0]
    x = _rms_norm(h, w.input_norm, eps)
    q = F.linear(x, w.q, w.q_bias).view(n, heads, head_dim)
    k = F.linear(x, w.k, w.k_bias).view(n, kv_heads, head_dim)
    v = F.linear(x, w.v, w.v_bias).view(n, kv_heads, head_dim)
    if w.q_norm is not None:
        q = _rms_norm(q, w.q_norm, eps)
    if w.k_norm is not None:
        k = _rms_norm(k, w.k_norm, eps)
    return _rotate(q, cos, sin), _rotate(k, cos, sin), v


def _after_attention(
    h: torch.Tensor, attended: torch.Tensor, w: _Layer, eps: float
) -> torch.Tensor:
    """The layer's output ``(N, H)`` from its input ``h`` and the attention output ``(N, heads*D)``."""
    h = h + F.linear(attended, w.o, w.o_bias)
    x = _rms_norm(h, w.post_norm, eps)
    return h + F.linear(F.silu(F.linear(x, w.gate)) * F.linear(x, w.up), w.down)


def _attention(
    q: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor | None,
    scale: float,
) -> torch.Tensor:
    """``(B, heads, T, D)`` attention of queries ``(B, heads, T, D)`` over ``(B, kv_heads, L, D)``
    keys and values, causal where ``mask`` is ``None`` and ``T > 1``. Grouped queries take
    transformers' SDPA route (same kernels, same rounding): without a mask, SDPA's own grouping;
    one query per row, the heads of a group stacked as its queries (each key read once per group);
    otherwise keys and values repeated per head."""
    rows, heads, width, dim = q.shape
    groups = heads // keys.shape[1]
    if groups > 1 and mask is None:
        return F.scaled_dot_product_attention(
            q, keys, values, is_causal=width > 1, scale=scale, enable_gqa=True
        )
    if groups > 1 and width == 1:
        packed = q.reshape(rows, heads // groups, groups, dim)
        attended = F.scaled_dot_product_attention(packed, keys, values, attn_mask=mask, scale=scale)
        return attended.reshape(rows, heads, 1, dim)
    if groups > 1:
        keys, values = (
            x[:, :, None].expand(-1, -1, groups, -1, -1).reshape(rows, heads, -1, dim)
            for x in (keys, values)
        )
    return F.scaled_dot_product_attention(
        q, keys, values, attn_mask=mask, is_causal=mask is None and width > 1, scale=scale
    )


def _one_query_attention(
    q: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor | None,
    scale: float,
) -> torch.Tensor:
    """``(B, heads, 1, D)`` attention of one query per row over ``(B, kv_heads, L, D)`` keys and
    values (``mask``: ``(B, 1, 1, L)``, true where a column is attended; ``None``: all), written as
    products, sums and a softmax in fp32 rather than matrix products: compiled, each becomes a loop
    that reads the cache once, in its own dtype, and accumulates in fp32. Decoding one token reads
    the whole cache for little arithmetic; on a CPU without AMX, SDPA's kernel does it over a bf16
    cache several times slower than this loop (docs/generation.md, "Without AMX: decoding's
    loop", measures both)."""
    rows, heads, _, dim = q.shape
    groups = heads // keys.shape[1]
    grouped = q.reshape(rows, keys.shape[1], groups, dim)  # the heads that share a key head
    scores = (grouped[:, :, :, None].float() * keys[:, :, None].float()).sum(-1) * scale
    if mask is not None:  # scores: (B, kv_heads, groups, L)
        scores = scores.masked_fill(~mask.reshape(rows, 1, 1, -1), float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    attended = (weights[..., None] * values[:, :, None].float()).sum(-2)  # (B, kv, groups, D)
    return attended.to(q.dtype).reshape(rows, heads, 1, dim)


def _tree_attention(
    trees: Sequence[Sequence[int]], device: torch.device
) -> Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor, float], torch.Tensor]:
    """The attention of packed trees (the layout of :meth:`DecoderForward.tree_hidden_states`),
    as an ``attend(layer index, q, k, v, scale)`` of :meth:`DecoderForward._layers`: queries
    ``(N, heads, D)`` over keys and values ``(N, kv_heads, D)`` to ``(N, heads * D)``. Each tree's
    trunk and first branch are one causal sequence (SDPA's causal kernel, which skips the blocks
    above the diagonal); each further branch attends to the trunk and causally to itself, so no
    query meets a key of another branch or tree and nothing is padded. The sequences' sizes and
    the further branches' masks are laid out once for every layer; each layer splits its tokens
    into those sequences once (a split's backward is one concatenation, where a slice's would
    write a zero tensor of all ``N`` tokens per sequence)."""
    sizes = [n for trunk, first, *others in trees for n in (trunk + first, *others)]
    masks = [
        torch.arange(trunk + length, device=device)
        <= trunk + torch.arange(length, device=device)[:, None]  # (length, trunk + length)
        for trunk, _, *others in trees
        for length in others
    ]

    def attend(
        layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float
    ) -> torch.Tensor:  # the same for every layer
        pieces = [x.split(sizes) for x in (q, k, v)]  # per tensor: (T, heads or kv_heads, D)
        out, index, masked = [], 0, iter(masks)
        for trunk, _, *others in trees:
            chain = (x[index][None].transpose(1, 2) for x in pieces)  # (1, heads, T, D)
            out.append(_attention(*chain, None, scale)[0].transpose(0, 1))  # (T, heads, D)
            for offset in range(1, 1 + len(others)):
                queries = pieces[0][index + offset][None].transpose(1, 2)  # (1, heads, n, D)
                keys, values = (
                    torch.cat((x[index][:trunk], x[index + offset]))[None].transpose(1, 2)
                    for x in pieces[1:]
                )  # (1, kv_heads, trunk + n, D)
                attended = _attention(queries, keys, values, next(masked), scale)
                out.append(attended[0].transpose(0, 1))
            index += 1 + len(others)
        return torch.cat(out).flatten(1)

    return attend


#: graphs dynamo keeps per compiled function: one process may run these functions in both dtypes,
#: with and without autograd, at several thread counts and in both the generator's and the tree
#: forward's layouts; past dynamo's default of 8 it would run every further variant eager,
#: silently slower, and a trainer's student and teacher could then round apart
RECOMPILE_LIMIT = 64


@functools.cache
def _compiled(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` compiled once per process, for every shape (the token count is dynamic)."""
    separate_compile_cache()
    config = torch._dynamo.config
    config.recompile_limit = max(config.recompile_limit, RECOMPILE_LIMIT)
    return torch.compile(function, dynamic=True)


def unsupported(model: torch.nn.Module) -> str | None:
    """Why :class:`DecoderForward` cannot run ``model`` (``None``: it can)."""
    config = model.config.get_text_config(decoder=True)
    if config.model_type not in ARCHITECTURES:
        return f"model_type {config.model_type!r} is not one of {ARCHITECTURES}"
    if getattr(config, "hidden_act", None) != "silu":
        return f"hidden_act {config.hidden_act!r} is not silu"
    if getattr(config, "mlp_bias", False):
        return "the MLP has biases"
    decoder = getattr(model, "model", None)
    needed = ("embed_tokens", "layers", "norm", "rotary_emb")
    if decoder is None or not all(hasattr(decoder, name) for name in needed):
        return "the model does not have the Llama-family module layout"
    return None


def static_unsupported(model: torch.nn.Module) -> str | None:
    """Why :meth:`DecoderForward.step` cannot run ``model`` in a CUDA graph (``None``: it can):
    :func:`unsupported`'s reasons, and rotary embeddings that recompute their frequencies from the
    positions at every forward (``dynamic``, ``longrope``), which reads a value back to the host."""
    reason = unsupported(model)
    if reason is not None:
        return reason
    rope = str(getattr(model.model.rotary_emb, "rope_type", "default"))
    if "dynamic" in rope or rope == "longrope":
        return f"rope_type {rope!r} recomputes its frequencies from the positions at every forward"
    return None


def can_compile(device: torch.device) -> bool:
    """Whether ``compile="auto"`` compiles on ``device``: on a CPU with a C++ compiler (inductor
    generates C++ there); elsewhere ``auto`` runs eager (GPU rollouts go through vLLM)."""
    if device.type != "cpu":
        return False
    from torch._inductor import cpp_builder

    try:
        compiler = cpp_builder.get_cpp_compiler()
    except RuntimeError:
        return False
    return shutil.which(compiler) is not None


class DecoderForward:
    """``model``'s forward for generation, given a transformers ``Cache`` whose layers take the new
    keys and values (``update``) and report how many columns precede them (``length``), and over
    packed trees of whole sequences without a cache (:meth:`tree_hidden_states`: training and
    scoring, where autograd runs through the compiled functions as through the eager ones).

    Args:
        model: a causal LM for which :func:`unsupported` returns ``None``.
        compile: run the two per-layer functions compiled (see the module notes).
    """

    def __init__(self, model: torch.nn.Module, *, compile: bool = False) -> None:
        reason = unsupported(model)
        if reason is not None:
            raise ValueError(f"model: {reason}")
        config = model.config.get_text_config(decoder=True)
        self.model = model
        self.compiled = compile
        self.heads = config.num_attention_heads
        self.kv_heads = getattr(config, "num_key_value_heads", None) or self.heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        self.eps = config.rms_norm_eps
        self._before = _compiled(_before_attention) if compile else _before_attention
        self._after = _compiled(_after_attention) if compile else _after_attention
        # decoding over a bf16 cache on a CPU without AMX: see _one_query_attention (in fp32
        # SDPA is as fast, and keeps fp32's outputs; with AMX its kernel and outputs stay)
        parameter = next(model.parameters())
        self._one_query = (
            _compiled(_one_query_attention)
            if compile
            and parameter.device.type == "cpu"
            and parameter.dtype != torch.float32
            and not amx_kernels()
            else None
        )

    def __call__(
        self,
        input_ids: torch.Tensor,
        mask: torch.Tensor | None,
        positions: torch.Tensor | None,
        cache: Any,
        last: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``(B, V)`` fp32 logits at each row's last column (``last``, ``(B,)``: at those).

        Args:
            input_ids: ``(B, T)`` new tokens.
            mask: ``(B, past + T)``, 1 where a column (cached, then new) holds a token; ``None``
                (or all ones with nothing cached or one new token): every row's tokens start at
                column 0, causal.
            positions: ``(B, T)`` position ids; ``None``: ``past`` onwards.
            cache: the layers' caches; ``cache.layers[i].length`` columns precede the new ones.
        """
        decoder = self.model.model
        rows, width = input_ids.shape
        past = cache.layers[0].length
        if positions is None:
            positions = torch.arange(past, past + width, device=input_ids.device).expand(rows, -1)
        h, cos, sin = self._embed(input_ids, positions)
        attention_mask = None
        if mask is not None and ((width > 1 and past > 0) or not bool(mask.all())):
            # (transformers drops an all-ones mask too: SDPA's kernels round differently with one)
            attention_mask = mask[:, None, None, : past + width].bool()  # (B, 1, 1, past + T)
            if width > 1:
                columns = torch.arange(past + width, device=mask.device)
                causal = columns <= past + torch.arange(width, device=mask.device)[:, None]
                attention_mask = attention_mask & causal  # (B, 1, T, past + T)
        h = self._layers(h, cos, sin, self._rows(rows, attention_mask, cache)).view(rows, width, -1)
        h = h[:, -1] if last is None else h[torch.arange(rows, device=h.device), last]  # (B, H)
        return self.model.lm_head(decoder.norm(h)).float()

    def step(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        column: torch.Tensor,
        mask: torch.Tensor,
        cache: torch.Tensor,
    ) -> torch.Tensor:
        """``(B, V)`` fp32 logits of one new token per row, in a forward of fixed shape whose
        every input is a tensor and which reads nothing back to the host: what a CUDA graph can
        capture once and replay for every step of a decode batch (:class:`StaticStep`).

        The new keys and values are written at ``column`` (``index_copy_`` on the column
        dimension), which ``mask`` marks as filled, and attention spans all ``L`` columns, those
        not yet filled masked out (their weight is exactly 0, so what they hold, finite, never
        reaches an output). It computes what :meth:`__call__` computes for one token per row over
        the filled columns; the longer span rounds differently (about 1e-6 in fp32).

        Args:
            input_ids: ``(B, 1)`` new tokens.
            positions: ``(B, 1)`` their position ids.
            column: ``(1,)`` the column of the new tokens, in ``mask`` and ``cache``.
            mask: ``(B, L)``, 1 where a column holds a token; the step sets ``column`` to 1.
            cache: ``(layers, 2, B, kv_heads, L, D)``, keys then values of every layer.
        """
        rows = input_ids.shape[0]
        heads, dim = self.heads, self.head_dim
        mask.index_fill_(1, column, 1)
        attention_mask = mask[:, None, None, :].bool()  # (B, 1, 1, L)
        h, cos, sin = self._embed(input_ids, positions)  # (B, H), (B, D), (B, D)

        def attend(
            index: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float
        ) -> torch.Tensor:
            keys, values = cache[index, 0], cache[index, 1]  # (B, kv_heads, L, D) each
            keys.index_copy_(2, column, k[:, :, None])  # k: (B, kv_heads, D)
            values.index_copy_(2, column, v[:, :, None])
            queries = q.view(rows, 1, heads, dim).transpose(1, 2)  # (B, heads, 1, D)
            if self._one_query is not None:
                attended = self._one_query(queries, keys, values, attention_mask, scale)
            else:
                attended = _attention(queries, keys, values, attention_mask, scale)
            return attended.transpose(1, 2).reshape(rows, heads * dim)

        h = self._layers(h, cos, sin, attend)  # (B, H)
        return self.model.lm_head(self.model.model.norm(h)).float()

    def tree_hidden_states(
        self, input_ids: torch.Tensor, positions: torch.Tensor, trees: Sequence[Sequence[int]]
    ) -> torch.Tensor:
        """``(N, H)`` final-norm hidden states of packed trees given without padding: the
        tokens of tree after tree, each a trunk followed by its branches (``trees``: each tree's
        trunk and branch lengths), every branch attending causally to its trunk and itself (see
        :mod:`resail_pipeline.packing`). A forward of tree rows without the padding of a batch
        of rows or the masked blocks of a tree mask: what the trainer and the scorers run.

        Args:
            input_ids: ``(N,)`` tokens.
            positions: ``(N,)`` position ids (each branch continuing its trunk's).
            trees: per tree, ``(trunk length, branch lengths...)``, summing to ``N``.
        """
        if sum(sum(tree) for tree in trees) != input_ids.shape[0]:
            raise ValueError("trees: lengths do not add up to the tokens given")
        h, cos, sin = self._embed(input_ids, positions)
        h = self._layers(h, cos, sin, _tree_attention(trees, input_ids.device))
        return self.model.model.norm(h)

    def _embed(
        self, input_ids: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The embeddings ``(N, H)`` of the ``N = B * T`` tokens and their rotary ``cos``, ``sin``
        ``(N, D)``."""
        decoder = self.model.model
        h = decoder.embed_tokens(input_ids).view(input_ids.numel(), -1)  # (N, H)
        cos, sin = decoder.rotary_emb(h, positions.reshape(1, -1))  # (1, N, D) each
        return h, cos[0], sin[0]

    def _layers(
        self,
        h: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        attend: Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor, float], torch.Tensor],
    ) -> torch.Tensor:
        """``(N, H)`` hidden states after the last layer (before the final norm) from the
        embeddings ``h`` ``(N, H)``; ``attend(layer index, q, k, v, scale)`` maps the layer's
        queries ``(N, heads, D)``, keys and values ``(N, kv_heads, D)`` to its attention output
        ``(N, heads * D)``."""
        for index, module in enumerate(self.model.model.layers):
            weights = _Layer.of(module)
            q, k, v = self._before(
                h, weights, cos, sin, self.eps, self.heads, self.kv_heads, self.head_dim
            )
            h = self._after(h, attend(index, q, k, v, module.self_attn.scaling), weights, self.eps)
        return h

    def _rows(
        self, rows: int, mask: torch.Tensor | None, cache: Any | None
    ) -> Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor, float], torch.Tensor]:
        """Attention of ``rows`` rows of equal width, masked by ``mask`` (``None``: causal), the
        new keys and values going through ``cache`` when one is given."""
        heads, kv_heads, dim = self.heads, self.kv_heads, self.head_dim

        def attend(
            index: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float
        ) -> torch.Tensor:
            width = q.shape[0] // rows
            keys = k.view(rows, width, kv_heads, dim).transpose(1, 2)
            values = v.view(rows, width, kv_heads, dim).transpose(1, 2)
            if cache is not None:
                keys, values = cache.layers[index].update(keys, values)  # (B, kv, past + T, D)
            queries = q.view(rows, width, heads, dim).transpose(1, 2)
            if width == 1 and self._one_query is not None:
                attended = self._one_query(queries, keys, values, mask, scale)
            else:
                attended = _attention(queries, keys, values, mask, scale)  # (B, heads, T, D)
            return attended.transpose(1, 2).reshape(rows * width, heads * dim)

        return attend


def uncached_autocast(device: torch.device) -> contextlib.AbstractContextManager:
    """The caller's autocast on ``device`` (if any) without its cache of cast weights: a CUDA graph
    captured under the cache would hold copies that the cache frees when the caller's autocast
    region ends, where without it the graph holds the casts themselves (PyTorch's CUDA-graph
    notes ask for ``cache_enabled=False``)."""
    if not torch.is_autocast_enabled(device.type):
        return contextlib.nullcontext()
    dtype = torch.get_autocast_dtype(device.type)
    return torch.autocast(device.type, dtype=dtype, cache_enabled=False)


#: eager runs of a decode step on a side stream before it is captured, as PyTorch's CUDA-graph
#: recipe prescribes: what runs lazily on a first call (library handles, kernels loaded, compiled
#: code's first launch) happens there, not during the capture
GRAPH_WARMUP_STEPS = 3


class StaticStep:
    """The decode steps of one batch through :meth:`DecoderForward.step`, from persistent input
    tensors: each call copies the step's tokens, positions and column into them, then runs the step.

    With ``graph`` (a cache on a GPU), the first call runs the step :data:`GRAPH_WARMUP_STEPS`
    times on a side stream, then captures it in a ``torch.cuda.CUDAGraph``, which that call and
    every later one replays. The warm-up runs compute the first step itself, writing the same
    values to the same column each time, so they change nothing. The graph holds the addresses of
    the cache, the mask, the weights and the input tensors: it serves this batch alone (each
    batch's cache is allocated afresh) and its memory goes back when the object is dropped.
    Compiled per-layer functions (``compile``) are captured as the kernels inductor generated for
    them, launched like any other, so the graph replays the fused kernels. Without ``graph`` the
    same function runs each call, eagerly (the CPU's path).

    Args:
        forward: the decoder.
        cache: ``(layers, 2, B, kv_heads, L, D)`` the batch's keys and values, written in place.
        mask: ``(B, L)`` the batch's filled columns, updated in place.
        graph: capture the step in a CUDA graph (the cache must be on a GPU).
    """

    def __init__(
        self, forward: DecoderForward, cache: torch.Tensor, mask: torch.Tensor, *, graph: bool
    ) -> None:
        rows, device = mask.shape[0], mask.device
        if graph and device.type != "cuda":
            raise ValueError(f"graph: a CUDA graph needs the cache on a GPU, not {device}")
        self.tokens = torch.zeros((rows, 1), dtype=torch.long, device=device)  # (B, 1)
        self.positions = torch.zeros((rows, 1), dtype=torch.long, device=device)  # (B, 1)
        self.column = torch.zeros(1, dtype=torch.long, device=device)  # (1,)
        self._run = functools.partial(
            forward.step, self.tokens, self.positions, self.column, mask, cache
        )
        self.graphed = graph
        self._graph: Any = None  # torch.cuda.CUDAGraph once captured
        self._logits: torch.Tensor | None = None  # the graph's output

    @property
    def captured(self) -> bool:
        """Whether the step has been captured in a CUDA graph."""
        return self._graph is not None

    def __call__(self, tokens: torch.Tensor, positions: torch.Tensor, column: int) -> torch.Tensor:
        """``(B, V)`` fp32 logits of ``tokens`` ``(B,)`` at ``positions`` ``(B,)``, their keys and
        values written at ``column``. With a graph this is the graph's output tensor, which the
        next call overwrites."""
        self.tokens.copy_(tokens[:, None])
        self.positions.copy_(positions[:, None])
        self.column.fill_(column)
        if not self.graphed:
            return self._run()
        if self._graph is None:
            self._capture()
        self._graph.replay()
        return self._logits

    def _capture(self) -> None:
        """Warm up on a side stream, then capture the step (PyTorch's recipe), under the
        caller's autocast without its cache (:func:`uncached_autocast`)."""
        device = self.tokens.device
        current = torch.cuda.current_stream(device)
        side = torch.cuda.Stream(device)
        side.wait_stream(current)
        with torch.cuda.stream(side), uncached_autocast(device):
            for _ in range(GRAPH_WARMUP_STEPS):
                self._run()
        current.wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        try:
            # thread_local: CUDA calls of other threads (a memory monitor, a communication
            # thread) during the capture are theirs, not an error of the capture
            with (
                torch.cuda.graph(graph, capture_error_mode="thread_local"),
                uncached_autocast(device),
            ):
                logits = self._run()
        except RuntimeError as error:
            raise RuntimeError(
                f"cuda_graphs: capturing the decode step in a CUDA graph failed ({error}); "
                "set cuda_graphs to false to decode without graphs"
            ) from error
        self._graph, self._logits = graph, logits
