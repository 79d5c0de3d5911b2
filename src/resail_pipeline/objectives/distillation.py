"""Token-level distillation terms per interaction step: ``l_dist``, ``l_ret`` and the sensitivity ``s``.

Inputs are response-position logits per view, aligned on the same response tokens ``z``: row
``i`` of every tensor is one step of ``U`` and position ``k`` predicts ``z_k`` from ``z_{<k}``.

- ``l_dist(i)  = mean_k KL( student ordinary   || teacher privileged )``   (paper eq. 1)
- ``s(i)       = mean_k JSD( teacher ordinary,    teacher privileged )``   (eq. 3, no gradient)
- ``l_ret(i)   = mean_k KL( student privileged || teacher privileged )``   (eq. 6)
- ``l_ret_ordinary(i) = mean_k KL( student ordinary || teacher ordinary )`` (the ablation view)

All four distributions are reduced to the same support: the current ordinary-view student's
top-``K`` ids at every position (detached), plus one tail category (appendix B.3). Teacher
logits are always detached: gradients reach only the student.

The parents' objectives over the same terms: OEL is the uniform mean of ``l_dist`` over
``U``; offline SDPO is the same with token-level truncated importance sampling weights applied
to the token KLs before reduction (:func:`truncated_is_weights`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from resail_pipeline.objectives.divergences import (
    js_divergence,
    kl_divergence,
    masked_token_mean,
    token_logprobs,
    topk_support,
    topk_tail_logprobs,
)

__all__ = [
    "TokenDivergences",
    "oel_loss",
    "pi_sensitivity",
    "sdpo_loss",
    "token_divergences",
    "token_sensitivity",
    "truncated_is_weights",
    "uniform_step_mean",
]

#: default support size (appendix B.3: Top-20 plus the residual tail)
DEFAULT_TOP_K = 20
#: SDPO's cap on each truncated importance-sampling ratio (appendix B.4)
DEFAULT_IS_CAP = 2.0


@dataclass(frozen=True)
class TokenDivergences:
    """Per-step values over ``U`` (all ``(N,)``, fp32); ``None`` where the view was not given.

    Attributes:
        l_dist: KL(student ordinary || teacher privileged), token-averaged, with gradient;
            multiplied by the token weights (SDPO's TIS) before averaging when they were given.
        sensitivity: JSD(teacher ordinary, teacher privileged), token-averaged, no gradient.
        l_ret: KL(student privileged || teacher privileged), token-averaged, with gradient.
        l_ret_ordinary: KL(student ordinary || teacher ordinary), token-averaged, with gradient.
        tokens: Long number of valid response tokens per step.
        support: Long ``(N, T, K)`` token ids every distribution was reduced to.
    """

    l_dist: Tensor
    sensitivity: Tensor | None
    l_ret: Tensor | None
    l_ret_ordinary: Tensor | None
    tokens: Tensor
    support: Tensor


def _check_views(mask: Tensor, **views: Tensor | None) -> None:
    if mask.dim() != 2:
        raise ValueError(f"mask: expected (N, T), got shape {tuple(mask.shape)}")
    if mask.dtype != torch.bool:
        raise TypeError(f"mask: must be a bool tensor, got {mask.dtype}")
    shape = None
    for name, logits in views.items():
        if logits is None:
            continue
        if logits.dim() != 3 or logits.shape[:2] != mask.shape:
            raise ValueError(
                f"{name}: expected (N, T, V) with (N, T) = {tuple(mask.shape)}, got {tuple(logits.shape)}"
            )
        if shape is not None and logits.shape != shape:
            raise ValueError(
                f"{name}: shape {tuple(logits.shape)} differs from the other views {tuple(shape)}"
            )
        shape = logits.shape


def token_divergences(
    student_ord_logits: Tensor,
    teacher_ord_logits: Tensor | None,
    teacher_priv_logits: Tensor,
    mask: Tensor,
    *,
    student_priv_logits: Tensor | None = None,
    top_k: int = DEFAULT_TOP_K,
    support: Tensor | None = None,
    token_weights: Tensor | None = None,
    chunk_size: int | None = None,
) -> TokenDivergences:
    """Per-step ``l_dist``, ``s``, ``l_ret`` (and its ordinary-view variant) on a shared support.

    Args:
        student_ord_logits: ``(N, T, V)`` current student, ordinary view, at response positions.
        teacher_ord_logits: ``(N, T, V)`` frozen teacher, ordinary view; ``None`` skips ``s``
            and ``l_ret_ordinary``.
        teacher_priv_logits: ``(N, T, V)`` frozen teacher, privileged view.
        mask: Bool ``(N, T)`` valid response tokens.
        student_priv_logits: ``(N, T, V)`` current student, privileged view; ``None`` skips ``l_ret``.
        top_k: support size ``K`` when ``support`` is not given.
        support: Long ``(N, T, K)`` fixed support (e.g. the initial model's ordinary top-20 for
            the diagnostics probe); default: top-``K`` of ``student_ord_logits``, detached.
        token_weights: ``(N, T)`` non-negative per-token weights applied to the ``l_dist`` token
            KLs before averaging (SDPO's TIS); detached.
        chunk_size: positions per block for the full-vocabulary reductions (``None``: all at once).

    Returns:
        :class:`TokenDivergences`.
    """
    _check_views(
        mask,
        student_ord_logits=student_ord_logits,
        teacher_ord_logits=teacher_ord_logits,
        teacher_priv_logits=teacher_priv_logits,
        student_priv_logits=student_priv_logits,
    )
    if token_weights is not None:
        if token_weights.shape != mask.shape:
            raise ValueError(
                f"token_weights: shape {tuple(token_weights.shape)} differs from mask {tuple(mask.shape)}"
            )
        token_weights = token_weights.detach().to(torch.float32)
    if support is None:
        support = topk_support(student_ord_logits, top_k, chunk_size)  # (N, T, K)
    else:
        support = support.detach()

    s_ord = topk_tail_logprobs(student_ord_logits, support, chunk_size)  # (N, T, K+1)
    t_priv = topk_tail_logprobs(teacher_priv_logits.detach(), support, chunk_size)  # (N, T, K+1)
    kl_dist = kl_divergence(s_ord, t_priv)  # (N, T)
    if token_weights is not None:
        kl_dist = kl_dist * token_weights
    l_dist = masked_token_mean(kl_dist, mask)  # (N,)

    sensitivity = l_ret_ordinary = l_ret = None
    if teacher_ord_logits is not None:
        t_ord = topk_tail_logprobs(teacher_ord_logits.detach(), support, chunk_size)  # (N, T, K+1)
        sensitivity = masked_token_mean(js_divergence(t_ord, t_priv), mask).detach()
        l_ret_ordinary = masked_token_mean(kl_divergence(s_ord, t_ord), mask)
    if student_priv_logits is not None:
        s_priv = topk_tail_logprobs(student_priv_logits, support, chunk_size)  # (N, T, K+1)
        l_ret = masked_token_mean(kl_divergence(s_priv, t_priv), mask)
    return TokenDivergences(
        l_dist=l_dist,
        sensitivity=sensitivity,
        l_ret=l_ret,
        l_ret_ordinary=l_ret_ordinary,
        tokens=mask.sum(dim=-1),
        support=support,
    )


def token_sensitivity(
    ord_logits: Tensor,
    priv_logits: Tensor,
    *,
    support: Tensor | None = None,
    top_k: int = DEFAULT_TOP_K,
    chunk_size: int | None = None,
) -> Tensor:
    """Per-token PI sensitivity ``JSD(pi(.|h, z<k), pi(.|h, c, z<k))`` of one model, no gradient.

    Args:
        ord_logits: ``(N, T, V)`` ordinary view.
        priv_logits: ``(N, T, V)`` privileged view.
        support: Long ``(N, T, K)`` fixed support (the probe: the initial model's ordinary
            top-20); default: top-``K`` of ``ord_logits``.
        top_k: support size when ``support`` is not given.
        chunk_size: positions per block (``None``: all at once).

    Returns:
        fp32 ``(N, T)`` in nats (values at padding positions are meaningless; mask them).
    """
    if ord_logits.shape != priv_logits.shape:
        raise ValueError(
            f"priv_logits: shape {tuple(priv_logits.shape)} differs from ord_logits {tuple(ord_logits.shape)}"
        )
    with torch.no_grad():
        if support is None:
            support = topk_support(ord_logits, top_k, chunk_size)  # (N, T, K)
        p = topk_tail_logprobs(ord_logits.detach(), support, chunk_size)  # (N, T, K+1)
        q = topk_tail_logprobs(priv_logits.detach(), support, chunk_size)  # (N, T, K+1)
        return js_divergence(p, q)  # (N, T)


def pi_sensitivity(
    ord_logits: Tensor,
    priv_logits: Tensor,
    mask: Tensor,
    *,
    support: Tensor | None = None,
    top_k: int = DEFAULT_TOP_K,
    chunk_size: int | None = None,
) -> Tensor:
    """PI sensitivity per step (paper eq. 3): the token-averaged JSD between the two views.

    Args:
        ord_logits: ``(N, T, V)`` ordinary view at response positions.
        priv_logits: ``(N, T, V)`` privileged view at the same positions.
        mask: Bool ``(N, T)`` valid response tokens.
        support: Long ``(N, T, K)`` fixed support; default: top-``K`` of ``ord_logits``.
        top_k: support size when ``support`` is not given.
        chunk_size: positions per block (``None``: all at once).

    Returns:
        fp32 ``(N,)`` in nats, 0 for steps without a valid token; no gradient.
    """
    _check_views(mask, ord_logits=ord_logits, priv_logits=priv_logits)
    per_token = token_sensitivity(
        ord_logits, priv_logits, support=support, top_k=top_k, chunk_size=chunk_size
    )  # (N, T)
    return masked_token_mean(per_token, mask)


def truncated_is_weights(
    current_logp: Tensor,
    old_logp: Tensor,
    behaviour_logp: Tensor,
    cap: float = DEFAULT_IS_CAP,
) -> Tensor:
    """SDPO's token-level truncated importance-sampling weights, without gradient.

    ``w_k = min(pi_cur / pi_old, cap) * min(pi_old / mu, cap)`` per sampled token, where
    ``pi_old`` is the old actor (refreshed before each update) and ``mu`` the cycle-start policy
    that sampled the cached responses. Log-ratios are clamped to ``[-20, 20]`` before ``exp``.

    Args:
        current_logp: ``(N, T)`` log-probs of the response tokens under the current student
            (see :func:`~resail_pipeline.objectives.divergences.token_logprobs`).
        old_logp: ``(N, T)`` the same under the old actor.
        behaviour_logp: ``(N, T)`` the same under the cycle-start policy (cached with the response).
        cap: upper bound on each ratio (``> 0``).

    Returns:
        fp32 ``(N, T)`` weights in ``[0, cap**2]``.
    """
    if not cap > 0:
        raise ValueError(f"cap: must be > 0, got {cap}")
    if not current_logp.shape == old_logp.shape == behaviour_logp.shape:
        raise ValueError(
            "current_logp, old_logp, behaviour_logp: shapes differ "
            f"({tuple(current_logp.shape)}, {tuple(old_logp.shape)}, {tuple(behaviour_logp.shape)})"
        )
    cur, old, beh = (x.detach().to(torch.float32) for x in (current_logp, old_logp, behaviour_logp))
    ratio_cur = (cur - old).clamp(-20.0, 20.0).exp().clamp(max=cap)  # (N, T)
    ratio_old = (old - beh).clamp(-20.0, 20.0).exp().clamp(max=cap)  # (N, T)
    return ratio_cur * ratio_old


def uniform_step_mean(values: Tensor) -> Tensor:
    """The parents' reduction: the uniform mean over the steps of ``U``; 0 when ``U`` is empty.

    The empty case keeps the graph (``sum`` of nothing), so ``backward`` gives zero gradients.
    """
    if values.dim() != 1:
        raise ValueError(f"values: expected (N,), got shape {tuple(values.shape)}")
    if values.numel() == 0:
        return values.sum()
    return values.mean()


def oel_loss(
    student_ord_logits: Tensor,
    teacher_priv_logits: Tensor,
    mask: Tensor,
    *,
    top_k: int = DEFAULT_TOP_K,
    chunk_size: int | None = None,
) -> tuple[Tensor, Tensor]:
    """OEL: the uniform mean over ``U`` of ``l_dist`` (paper eq. 2).

    Returns:
        ``(loss, l_dist)``: scalar and per-step ``(N,)``.
    """
    terms = token_divergences(
        student_ord_logits, None, teacher_priv_logits, mask, top_k=top_k, chunk_size=chunk_size
    )
    return uniform_step_mean(terms.l_dist), terms.l_dist


def sdpo_loss(
    student_ord_logits: Tensor,
    teacher_priv_logits: Tensor,
    mask: Tensor,
    response_ids: Tensor,
    old_logp: Tensor,
    behaviour_logp: Tensor,
    *,
    cap: float = DEFAULT_IS_CAP,
    top_k: int = DEFAULT_TOP_K,
    chunk_size: int | None = None,
) -> tuple[Tensor, Tensor]:
    """Offline SDPO: ``l_dist`` with TIS weights on the token KLs, uniform mean over ``U``.

    Args:
        student_ord_logits: ``(N, T, V)`` current student, ordinary view.
        teacher_priv_logits: ``(N, T, V)`` frozen teacher, privileged view.
        mask: Bool ``(N, T)`` valid response tokens.
        response_ids: Long ``(N, T)`` the cached response tokens (any id at padding).
        old_logp: ``(N, T)`` their log-probs under the old actor.
        behaviour_logp: ``(N, T)`` their log-probs under the cycle-start policy.
        cap: cap on each importance ratio.
        top_k: support size.
        chunk_size: positions per block (``None``: all at once).

    Returns:
        ``(loss, l_dist)``: scalar and the TIS-weighted per-step ``(N,)``.
    """
    with torch.no_grad():
        current = token_logprobs(student_ord_logits.detach(), response_ids, chunk_size)  # (N, T)
    weights = truncated_is_weights(current, old_logp, behaviour_logp, cap)
    terms = token_divergences(
        student_ord_logits,
        None,
        teacher_priv_logits,
        mask,
        top_k=top_k,
        token_weights=weights,
        chunk_size=chunk_size,
    )
    return uniform_step_mean(terms.l_dist), terms.l_dist
