"""Top-K plus residual-tail distributions and the divergences computed on them.

Every compared distribution is reduced to the probabilities of ``K`` support token ids plus one
tail category holding the remaining mass (paper appendix B.3). Reductions are computed in fp32
and in log space, whatever the dtype of the logits.

The tail is computed as ``log(sum_{v not in S} exp(x_v - c)) - log(sum_v exp(x_v - c))``, ``c``
the largest support logit, rather than as ``log(1 - sum_{v in S} p_v)``. Both are the same number,
but the second cancels catastrophically when the support holds almost all the mass: in fp32 a
teacher tail of 1e-9 comes out as 0 (an infinite KL) or as whatever value a clamp chooses. The
first sums the off-support terms ``exp(x_v - c)`` directly: positive terms, each to fp32 relative
precision (``x_v - c`` is exact for bf16 logits), so the tail keeps that relative precision however
small it is, and the normaliser (the same sum plus the ``K`` support terms) has no cancellation
either. Two log-sum-exps, over all logits and over the off-support ones, are as precise but cost
two exps per entry and full-vocabulary temporaries. The single shift needs two guards, and the
positions that trip either get those log-sum-exps instead: an off-support sum below ``2^-64`` of
the largest support term (a tail under about 5e-20, whose terms could be subnormal floats), and
one that overflows (an off-support mass above ``e^88`` times the largest support term). With
``K = V`` the tail is exactly ``log 0 = -inf``; the divergences below treat ``0 * log 0`` as 0 in
value and in gradient.

Memory and speed: :func:`topk_tail_logprobs` is a custom autograd function that keeps only the
logits it was given (no fp32 copy, no softmax) for backward and recomputes the softmax, again
with one exp per entry. Both passes work block by block in one reused fp32 buffer: blocks of
``chunk_size`` positions and, on CPU, of at most a cache-sized tile (4 MiB of fp32 values per
thread), so that the passes over a block after the first read it from cache. The
full-vocabulary temporaries stay within about two fp32 copies of a block (one outside the rare
log-sum-exp positions), in the forward and in the backward pass, which also returns the gradient
itself in the logits' dtype.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

__all__ = [
    "js_divergence",
    "kl_divergence",
    "masked_token_mean",
    "token_logprobs",
    "topk_support",
    "topk_tail_logprobs",
]

_NEG_INF = float("-inf")
_LN2 = math.log(2.0)
# fp32 values per intra-op thread in a CPU block of the reductions (4 MiB): the passes after the
# first reread the block from the last-level cache, and each parallel operation still has enough
# work per thread that its start-up cost stays small
_CPU_VALUES_PER_THREAD = 1 << 20
# off-support sum, relative to the largest support term, below which a position's normalisers are
# recomputed with log-sum-exps (a tail under about 5e-20): above it, every off-support term that
# carries more than 2^-62 of the sum is a normal float
_TINY_REST = 2.0**-64


# ----------------------------------------------------------------------------------------------
# blocks over the leading dimensions


def _as_3d(x: Tensor) -> Tensor:
    """View ``(..., V)`` as ``(B, T, V)`` without copying where possible."""
    if x.dim() == 1:
        return x.view(1, 1, -1)  # (1, 1, V)
    if x.dim() == 2:
        return x.unsqueeze(0)  # (1, T, V)
    if x.dim() == 3:
        return x
    return x.flatten(0, -3)  # (B, T, V), B = prod of the leading dims but the last one


def _blocks(b: int, t: int, chunk_size: int | None) -> Iterator[tuple[slice, slice]]:
    """Slices ``(rows of B, rows of T)`` that cover ``(B, T)`` with at most ``chunk_size`` positions each.

    Every block is a view of a ``(B, T, V)`` tensor (no copy), whatever its strides.
    """
    if chunk_size is None or b * t <= chunk_size:
        yield slice(0, b), slice(0, t)
        return
    if chunk_size >= t:
        per = chunk_size // t  # whole sequences per block
        for b0 in range(0, b, per):
            yield slice(b0, min(b, b0 + per)), slice(0, t)
        return
    for b0 in range(b):
        for t0 in range(0, t, chunk_size):
            yield slice(b0, b0 + 1), slice(t0, min(t, t0 + chunk_size))


def _check_chunk(chunk_size: int | None) -> None:
    if chunk_size is not None and (isinstance(chunk_size, bool) or int(chunk_size) < 1):
        raise ValueError(
            f"chunk_size: must be None or a positive number of positions, got {chunk_size}"
        )


# ----------------------------------------------------------------------------------------------
# support


def topk_support(logits: Tensor, k: int, chunk_size: int | None = None) -> Tensor:
    """The ``k`` highest-logit token ids at every position, without gradient.

    Args:
        logits: ``(..., V)`` any float dtype.
        k: support size, ``>= 1``; a ``k`` above the vocabulary size ``V`` means all of it
            (the reduction is then exact).
        chunk_size: positions per block (``None``: all at once).

    Returns:
        Long ``(..., min(k, V))``, highest logit first.
    """
    _check_chunk(chunk_size)
    if isinstance(k, bool) or int(k) != k or k < 1:
        raise ValueError(f"top_k: must be a positive integer, got {k!r}")
    k = min(int(k), logits.shape[-1])
    x = _as_3d(logits.detach())  # (B, T, V)
    out = torch.empty((*x.shape[:-1], k), dtype=torch.long, device=x.device)  # (B, T, k)
    with torch.no_grad():
        for bs, ts in _blocks(x.shape[0], x.shape[1], chunk_size):
            out[bs, ts] = torch.topk(x[bs, ts], k, dim=-1).indices  # (b, t, k)
    return out.view((*logits.shape[:-1], k))


def _check_support(logits: Tensor, support: Tensor, *, distinct: bool) -> Tensor:
    if not logits.is_floating_point():
        raise TypeError(f"logits: must be a float tensor, got {logits.dtype}")
    if support.dtype.is_floating_point or support.dtype == torch.bool:
        raise TypeError(f"support: must hold integer token ids, got {support.dtype}")
    if logits.dim() < 1 or support.dim() != logits.dim() or support.shape[:-1] != logits.shape[:-1]:
        raise ValueError(
            f"support: shape {tuple(support.shape)} does not match logits {tuple(logits.shape)}; "
            "expected (..., K) with the same leading dimensions as (..., V)"
        )
    vocab, k = logits.shape[-1], support.shape[-1]
    if k < 1 or k > vocab:
        raise ValueError(f"support: K = {k} must be in [1, {vocab}] (the vocabulary size)")
    support = support.to(torch.long)
    if support.numel():
        lo, hi = int(support.min()), int(support.max())
        if lo < 0 or hi >= vocab:
            raise ValueError(f"support: token ids must be in [0, {vocab}), got [{lo}, {hi}]")
        if distinct and k > 1:
            ordered = support.sort(dim=-1).values  # (..., K)
            if bool((ordered[..., 1:] == ordered[..., :-1]).any()):
                raise ValueError("support: token ids must be distinct at every position")
    return support


# ----------------------------------------------------------------------------------------------
# reduction to K (+ tail) log-probabilities


def _block_rows(vocab: int, chunk_size: int | None, device: torch.device) -> int | None:
    """Positions per block of the reductions: ``chunk_size``, and on CPU at most a cache tile.

    A CPU tile holds about ``_CPU_VALUES_PER_THREAD`` fp32 values per intra-op thread, so each
    thread's share of a block stays in its cache from one pass over the block to the next.
    """
    if device.type != "cpu":
        return chunk_size
    tile = max(1, _CPU_VALUES_PER_THREAD * torch.get_num_threads() // vocab)
    return tile if chunk_size is None else min(tile, chunk_size)


def _scratch(logits: Tensor, rows: int | None) -> Tensor:
    """A flat fp32 buffer for one block of ``rows`` positions of ``(B, T, V)`` logits."""
    b, t, vocab = logits.shape
    n = b * t if rows is None else min(rows, b * t)
    return torch.empty(n * vocab, dtype=torch.float32, device=logits.device)


def _exact_normalisers(
    logits: Tensor,
    support: Tensor,
    shift: Tensor,
    redo: Tensor,
    rows: int | None,
    log_z: Tensor,
    log_rest: Tensor,
) -> None:
    """Overwrite ``log_z`` and ``log_rest`` (relative to ``shift``) at the ``redo`` positions.

    Each is a log-sum-exp, which shifts by its own maximum: exact for any spread of logits.

    Args:
        logits: ``(B, T, V)``.
        support: Long ``(B, T, K)``.
        shift: fp32 ``(B, T, 1)``.
        redo: Bool ``(B, T)``, the positions to recompute.
        rows: positions per block (``None``: all at once).
        log_z: fp32 ``(B, T)``, updated in place.
        log_rest: fp32 ``(B, T)``, updated in place.
    """
    at_b, at_t = redo.nonzero(as_tuple=True)  # (n,), (n,)
    step = at_b.numel() if rows is None else rows
    for i in range(0, at_b.numel(), step):
        at = (at_b[i : i + step], at_t[i : i + step])
        x = logits[at].to(torch.float32).sub_(shift[at])  # (n', V)
        log_z[at] = torch.logsumexp(x, dim=-1)  # (n',)
        log_rest[at] = torch.logsumexp(x.scatter_(-1, support[at], _NEG_INF), dim=-1)  # (n',)


class _SupportLogProbs(torch.autograd.Function):
    """``log p`` of the support ids (and of the tail) from ``(B, T, V)`` logits, in fp32.

    One exp per vocabulary entry in the forward and one in the backward, block by block, in a
    single reused fp32 buffer (for fp32 logits the backward works in the gradient itself). Saves
    only the logits, the support and two ``(B, T)`` normalisers; the backward recomputes the
    softmax.
    """

    @staticmethod
    def forward(ctx, logits: Tensor, support: Tensor, with_tail: bool, chunk_size: int | None):
        b, t, vocab = logits.shape
        k = support.shape[-1]
        picked = logits.gather(-1, support).to(torch.float32)  # (B, T, K), exact
        shift = picked.amax(dim=-1, keepdim=True)  # (B, T, 1): the largest support logit
        shift = torch.where(shift > _NEG_INF, shift, 0.0)  # a masked support shifts by 0
        shifted = picked - shift  # (B, T, K), <= 0
        support_mass = shifted.exp().sum(dim=-1)  # (B, T), in [1, K] (0 if masked)
        rest = torch.empty_like(support_mass)  # (B, T): sum of exp(x_v - shift) off the support
        rows = _block_rows(vocab, chunk_size, logits.device)
        scratch = _scratch(logits, rows)
        for bs, ts in _blocks(b, t, rows):
            x, s = logits[bs, ts], support[bs, ts]  # (b, t, V), (b, t, K)
            e = scratch[: x.numel()].view(x.shape)  # (b, t, V)
            torch.sub(x, shift[bs, ts], out=e).exp_()  # in fp32 whatever the logits' dtype
            torch.sum(e.scatter_(-1, s, 0.0), dim=-1, out=rest[bs, ts])
        log_z = (rest + support_mass).log()  # (B, T), relative to the shift
        log_rest = rest.log()  # (B, T), relative to the shift; -inf when K = V
        # positions the shifted sums cannot represent: an overflowing off-support mass, or one so
        # small that its terms may be subnormal; their normalisers get log-sum-exps of their own
        redo = ~torch.isfinite(rest)  # (B, T)
        if with_tail and k < vocab:
            redo |= rest < _TINY_REST
        if bool(redo.any()):
            _exact_normalisers(logits, support, shift, redo, rows, log_z, log_rest)
        out = torch.empty(b, t, k + int(with_tail), dtype=torch.float32, device=logits.device)
        out[..., :k] = shifted - log_z.unsqueeze(-1)  # (B, T, K)
        if with_tail:
            out[..., k] = log_rest - log_z  # (B, T)
        shift = shift.squeeze(-1)  # (B, T)
        ctx.save_for_backward(logits, support, shift + log_z, shift + log_rest)
        ctx.with_tail = with_tail
        ctx.chunk_size = chunk_size
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: Tensor):
        logits, support, log_z, log_rest = ctx.saved_tensors  # log_z, log_rest: (B, T)
        b, t, vocab = logits.shape
        k = support.shape[-1]
        g = grad_out.to(torch.float32)  # (B, T, K[+1])
        total = g.sum(dim=-1)  # (B, T)
        # d log p_c / d x_v = 1[v = c] - p_v for a support id c, and for the tail
        # d log p_tail / d x_v = 1[v not in S] q_v - p_v with q_v = exp(x_v - log_rest) <= 1.
        # Off the support grad_v = g_tail q_v - total p_v = exp(x_v - log_rest) * scale with
        # scale = g_tail - total p_tail: one exp per entry, with factors <= 1, shifted by
        # log_rest where there is a tail and by log_z (scale = -total) where there is none.
        if ctx.with_tail:
            has_tail = log_rest > _NEG_INF  # (B, T)
            shift = torch.where(has_tail, log_rest, log_z)  # (B, T)
            g_tail = torch.where(has_tail, g[..., k], 0.0)  # (B, T)
            scale = g_tail - total * torch.exp(shift - log_z)  # (B, T)
        else:
            shift, scale = log_z, -total
        shift, scale = shift.unsqueeze(-1), scale.unsqueeze(-1)  # (B, T, 1)
        picked = logits.gather(-1, support).to(torch.float32)  # (B, T, K)
        on_support = g[..., :k] - total.unsqueeze(-1) * (picked - log_z.unsqueeze(-1)).exp()
        on_support = on_support.to(logits.dtype)  # (B, T, K)

        grad = torch.empty_like(logits)  # (B, T, V), the logits' dtype
        rows = _block_rows(vocab, ctx.chunk_size, logits.device)
        scratch = None if grad.dtype == torch.float32 else _scratch(logits, rows)
        for bs, ts in _blocks(b, t, rows):
            x, s, out = logits[bs, ts], support[bs, ts], grad[bs, ts]  # (b, t, V|K|V)
            e = out if scratch is None else scratch[: x.numel()].view(x.shape)  # (b, t, V) fp32
            torch.sub(x, shift[bs, ts], out=e)
            e.scatter_(-1, s, _NEG_INF)  # the support is written below; no exp overflows
            torch.mul(e.exp_(), scale[bs, ts], out=out)  # one rounding to the logits' dtype
            out.scatter_(-1, s, on_support[bs, ts])
        return grad, None, None, None


def topk_tail_logprobs(logits: Tensor, support: Tensor, chunk_size: int | None = None) -> Tensor:
    """Reduce a distribution to ``K`` support tokens plus one residual tail, in log space.

    Args:
        logits: ``(..., V)`` unnormalised scores, any float dtype (fp32, fp16, bf16).
        support: Long ``(..., K)`` distinct token ids per position.
        chunk_size: positions per block (``None``: no limit; on CPU a block is in any case at
            most a cache-sized tile); bounds the full-vocabulary temporaries in forward and
            backward to about ``2 * chunk_size * V`` fp32 values.

    Returns:
        fp32 ``(..., K+1)``: ``log p`` of the ``K`` support ids, then of the tail
        ``1 - sum``; ``-inf`` tail when the support covers the whole vocabulary.
        Differentiable with respect to ``logits``.
    """
    _check_chunk(chunk_size)
    support = _check_support(logits, support, distinct=True)
    out = _SupportLogProbs.apply(_as_3d(logits), _as_3d(support), True, chunk_size)
    return out.view((*logits.shape[:-1], support.shape[-1] + 1))  # (..., K+1)


def token_logprobs(logits: Tensor, token_ids: Tensor, chunk_size: int | None = None) -> Tensor:
    """``log softmax(logits)[token_ids]`` in fp32 without a full-vocabulary log-softmax copy.

    Args:
        logits: ``(..., V)`` any float dtype.
        token_ids: integer ``(...)`` ids, e.g. the sampled response tokens.
        chunk_size: positions per block, as in :func:`topk_tail_logprobs`.

    Returns:
        fp32 ``(...)``, differentiable with respect to ``logits``.
    """
    _check_chunk(chunk_size)
    if token_ids.shape != logits.shape[:-1]:
        raise ValueError(
            f"token_ids: shape {tuple(token_ids.shape)} does not match logits "
            f"{tuple(logits.shape)} without the vocabulary dimension"
        )
    support = _check_support(logits, token_ids.unsqueeze(-1), distinct=False)  # (..., 1)
    out = _SupportLogProbs.apply(_as_3d(logits), _as_3d(support), False, chunk_size)
    return out.view(logits.shape[:-1])


# ----------------------------------------------------------------------------------------------
# divergences on (..., C) log-probabilities


class _KLDivergence(torch.autograd.Function):
    """``KL(p || q)`` over the last dimension, with the gradient of the normalised distributions.

    Both arguments are normalised log-distributions (a :func:`topk_tail_logprobs` reduction, a
    log-softmax). For those, adding any multiple of ``p`` to the gradient with respect to
    ``log p`` (of ``q`` to the one with respect to ``log q``) changes nothing upstream, since
    ``sum_c p_c d(log p_c) = d(sum_c p_c) = 0``. The backward therefore returns the component
    that survives the normalisation, computed directly:

    - ``d KL / d log p_c = p_c (log p_c - log q_c - KL)``, not ``p_c (log p_c - log q_c + 1)``;
    - ``d KL / d log q_c = q_c - p_c``, not ``-p_c``.

    Both are exactly zero where ``p == q``, so a zero divergence moves nothing: autograd's form
    leaves ``p_c - total p_c`` to the normalisation's backward, with ``total = sum_c p_c`` rounded
    away from 1, and an optimiser that normalises the gradient (Adam) turns that rounding into
    steps of up to ``lr`` (a gradient norm of 1e-6 on a loss of exactly 0, measured).
    """

    @staticmethod
    def forward(ctx, logp: Tensor, logq: Tensor) -> Tensor:
        support = logp > _NEG_INF  # (..., C)
        zero = torch.zeros((), dtype=logp.dtype, device=logp.device)
        lp = torch.where(support, logp, zero)  # safe values where p = 0: no NaN anywhere
        lq = torch.where(support, logq, zero)
        terms = torch.where(support, lp.exp() * (lp - lq), zero)  # (..., C)
        kl = terms.sum(dim=-1)  # (...)
        ctx.save_for_backward(logp, logq, kl)
        return kl

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: Tensor) -> tuple[Tensor | None, Tensor | None]:
        logp, logq, kl = ctx.saved_tensors
        support = logp > _NEG_INF  # (..., C): categories with p_c > 0
        zero = torch.zeros((), dtype=logp.dtype, device=logp.device)
        p = torch.where(support, logp, _NEG_INF).exp()  # (..., C), 0 off the support
        g = grad_out.unsqueeze(-1)  # (..., 1)
        grad_p = grad_q = None
        if ctx.needs_input_grad[0]:
            lp = torch.where(support, logp, zero)
            lq = torch.where(support, logq, zero)
            grad_p = torch.where(support, g * p * ((lp - lq) - kl.unsqueeze(-1)), zero)
        if ctx.needs_input_grad[1]:
            grad_q = g * (logq.exp() - p)  # (..., C)
        return grad_p, grad_q


def kl_divergence(logp: Tensor, logq: Tensor) -> Tensor:
    """``KL(p || q) = sum_c p_c (log p_c - log q_c)`` over the last dimension.

    Args:
        logp: ``(..., C)`` log-probabilities of ``p`` (may hold ``-inf``), summing to 1.
        logq: ``(..., C)`` log-probabilities of ``q``, summing to 1.

    Returns:
        ``(...)``. Categories with ``p_c = 0`` contribute exactly 0 (also when ``q_c = 0``);
        ``p_c > 0 = q_c`` gives ``+inf``. Where ``p == q`` the value and the gradient with
        respect to both arguments are exactly 0 (see :class:`_KLDivergence`).
    """
    if logp.shape != logq.shape:
        raise ValueError(f"logq: shape {tuple(logq.shape)} differs from logp {tuple(logp.shape)}")
    return _KLDivergence.apply(logp, logq)


def js_divergence(logp: Tensor, logq: Tensor) -> Tensor:
    """Jensen-Shannon divergence in nats, ``0.5 KL(p || m) + 0.5 KL(q || m)``, ``m = (p + q) / 2``.

    Args:
        logp: ``(..., C)`` log-probabilities, summing to 1.
        logq: ``(..., C)`` log-probabilities, summing to 1.

    Returns:
        ``(...)``, symmetric, in ``[0, ln 2]`` up to rounding; where ``p == q`` exactly 0, in
        value and gradient (``m`` is then exactly ``p``, and each KL's backward is exact there).
    """
    if logp.shape != logq.shape:
        raise ValueError(f"logq: shape {tuple(logq.shape)} differs from logp {tuple(logp.shape)}")
    both_zero = (logp == _NEG_INF) & (logq == _NEG_INF)  # (..., C)
    zero = torch.zeros((), dtype=logp.dtype, device=logp.device)
    a = torch.where(both_zero, zero, logp)
    b = torch.where(both_zero, zero, logq)
    hi, lo = torch.maximum(a, b), torch.minimum(a, b)
    # log((p + q) / 2) = hi + log1p(exp(lo - hi)) - ln 2; exactly log p when q == p
    logm = torch.where(
        both_zero, torch.full_like(a, _NEG_INF), hi + (torch.log1p(torch.exp(lo - hi)) - _LN2)
    )  # (..., C)
    return 0.5 * (kl_divergence(logp, logm) + kl_divergence(logq, logm))


def masked_token_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Per-row mean of ``values`` over the valid tokens of ``mask``.

    Args:
        values: ``(N, T)`` per-token values.
        mask: Bool ``(N, T)``, True at valid response tokens.

    Returns:
        ``(N,)``; rows without a valid token give 0 (finite value, finite gradient).
    """
    if mask.shape != values.shape:
        raise ValueError(
            f"mask: shape {tuple(mask.shape)} differs from values {tuple(values.shape)}"
        )
    mask = mask.to(torch.bool)
    zero = torch.zeros((), dtype=values.dtype, device=values.device)
    total = torch.where(mask, values, zero).sum(dim=-1)  # (N,)
    count = mask.sum(dim=-1).clamp(min=1).to(values.dtype)  # (N,)
    return total / count
