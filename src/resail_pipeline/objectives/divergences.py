"""Top-K plus residual-tail distributions and the divergences computed on them.

Every compared distribution is reduced to the probabilities of ``K`` support token ids plus one
tail category holding the remaining mass (paper appendix B.3). Reductions are computed in fp32
and in log space, whatever the dtype of the logits.

The tail is ``log(sum_{v not in S} exp(x_v)) - logsumexp(x)``: a log-sum-exp over the
non-support logits rather than ``log(1 - sum_{v in S} p_v)``. Both are the same number, but the
second cancels catastrophically when the support holds almost all the mass: in fp32 a teacher tail
of 1e-9 comes out as 0 (an infinite KL) or as whatever value a clamp chooses, while the first is
exact to fp32 precision. With ``K = V`` the tail is exactly ``log 0 = -inf``; the divergences
below treat ``0 * log 0`` as 0 in value and in gradient.

Memory: :func:`topk_tail_logprobs` is a custom autograd function that keeps only the logits it
was given (no fp32 copy, no softmax) for backward and recomputes the softmax block by block. With
``chunk_size`` the full-vocabulary temporaries never exceed about two fp32 copies of
``chunk_size`` rows, in the forward and in the backward pass.
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


class _SupportLogProbs(torch.autograd.Function):
    """``log p`` of the support ids (and of the tail) from ``(B, T, V)`` logits, in fp32.

    Saves only the logits, the support and two ``(B, T)`` normalisers; the backward recomputes
    the softmax block by block.
    """

    @staticmethod
    def forward(ctx, logits: Tensor, support: Tensor, with_tail: bool, chunk_size: int | None):
        b, t, _ = logits.shape
        k = support.shape[-1]
        out = torch.empty(b, t, k + int(with_tail), dtype=torch.float32, device=logits.device)
        log_z = torch.empty(b, t, dtype=torch.float32, device=logits.device)  # (B, T)
        log_rest = torch.empty_like(log_z) if with_tail else log_z  # (B, T) log-mass off support
        for bs, ts in _blocks(b, t, chunk_size):
            x = logits[bs, ts].to(torch.float32, copy=True)  # (b, t, V), our own buffer
            s = support[bs, ts]  # (b, t, K)
            lz = torch.logsumexp(x, dim=-1)  # (b, t)
            log_z[bs, ts] = lz
            out[bs, ts, :k] = x.gather(-1, s) - lz.unsqueeze(-1)  # (b, t, K)
            if with_tail:
                x.scatter_(-1, s, _NEG_INF)  # (b, t, V): the support removed
                lr = torch.logsumexp(x, dim=-1)  # (b, t); -inf when the support is everything
                log_rest[bs, ts] = lr
                out[bs, ts, k] = lr - lz
            del x
        ctx.save_for_backward(logits, support, log_z, log_rest)
        ctx.with_tail = with_tail
        ctx.chunk_size = chunk_size
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: Tensor):
        logits, support, log_z, log_rest = ctx.saved_tensors
        k = support.shape[-1]
        grad = torch.empty_like(logits)  # (B, T, V), the logits' dtype
        b, t, _ = logits.shape
        for bs, ts in _blocks(b, t, ctx.chunk_size):
            g = grad_out[bs, ts].to(torch.float32)  # (b, t, K[+1])
            s = support[bs, ts]  # (b, t, K)
            x = logits[bs, ts].to(torch.float32, copy=True)  # (b, t, V)
            lz = log_z[bs, ts].unsqueeze(-1)  # (b, t, 1)
            total = g.sum(dim=-1, keepdim=True)  # (b, t, 1)
            tail_part = None
            if ctx.with_tail:
                lr = log_rest[bs, ts].unsqueeze(-1)  # (b, t, 1)
                has_tail = torch.isfinite(lr)
                # d log p_tail / d x_v = 1[v not in S] exp(x_v - log_rest) - p_v; every factor <= 1
                w = torch.where(has_tail, g[..., k:], torch.zeros_like(lr))  # (b, t, 1)
                tail_part = (x - torch.where(has_tail, lr, lz)).exp_()  # (b, t, V)
                tail_part.scatter_(-1, s, 0.0)
                tail_part.mul_(w)
            # d log p_c / d x_v = 1[v = c] - p_v
            x.sub_(lz).exp_().mul_(total.neg())  # (b, t, V): -sum(g) * softmax
            if tail_part is not None:
                x.add_(tail_part)
                del tail_part
            x.scatter_add_(-1, s, g[..., :k])
            grad[bs, ts] = x
            del x
        return grad, None, None, None


def topk_tail_logprobs(logits: Tensor, support: Tensor, chunk_size: int | None = None) -> Tensor:
    """Reduce a distribution to ``K`` support tokens plus one residual tail, in log space.

    Args:
        logits: ``(..., V)`` unnormalised scores, any float dtype (fp32, fp16, bf16).
        support: Long ``(..., K)`` distinct token ids per position.
        chunk_size: positions per block (``None``: all at once); bounds the full-vocabulary
            temporaries in forward and backward to about ``2 * chunk_size * V`` fp32 values.

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
        chunk_size: positions per block (``None``: all at once).

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


def kl_divergence(logp: Tensor, logq: Tensor) -> Tensor:
    """``KL(p || q) = sum_c p_c (log p_c - log q_c)`` over the last dimension.

    Args:
        logp: ``(..., C)`` log-probabilities of ``p`` (may hold ``-inf``).
        logq: ``(..., C)`` log-probabilities of ``q``.

    Returns:
        ``(...)``. Categories with ``p_c = 0`` contribute exactly 0 and no gradient (also when
        ``q_c = 0``); ``p_c > 0 = q_c`` gives ``+inf``.
    """
    if logp.shape != logq.shape:
        raise ValueError(f"logq: shape {tuple(logq.shape)} differs from logp {tuple(logp.shape)}")
    support = logp > _NEG_INF  # (..., C)
    zero = torch.zeros((), dtype=logp.dtype, device=logp.device)
    lp = torch.where(support, logp, zero)  # safe values where p = 0, so no NaN in any gradient
    lq = torch.where(support, logq, zero)
    terms = torch.where(support, lp.exp() * (lp - lq), zero)  # (..., C)
    return terms.sum(dim=-1)


def js_divergence(logp: Tensor, logq: Tensor) -> Tensor:
    """Jensen-Shannon divergence in nats, ``0.5 KL(p || m) + 0.5 KL(q || m)``, ``m = (p + q) / 2``.

    Args:
        logp: ``(..., C)`` log-probabilities.
        logq: ``(..., C)`` log-probabilities.

    Returns:
        ``(...)``, symmetric, in ``[0, ln 2]`` up to rounding.
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
