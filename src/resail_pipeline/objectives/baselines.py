"""The baselines' objectives (appendix B.4): cross-entropy (RFT, EPD) and offline GRPO.

GRPO follows verl's conventions: group advantages ``(r - mean) / (sd + 1e-6)`` with the sample
SD (``n - 1``), the clipped PPO surrogate with ratio range ``[1 - 0.2, 1 + 0.28]``, and a
``low_var_kl`` penalty to the frozen reference with ``beta = 0.01``; per-token terms are
averaged over all valid tokens of the batch ("token-mean").
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from resail_pipeline.objectives.divergences import token_logprobs

__all__ = [
    "GrpoTerms",
    "cross_entropy_loss",
    "group_advantages",
    "grpo_loss",
    "low_var_kl",
]


def _token_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``values`` over the True entries of ``mask``; 0 (attached) when there are none."""
    zero = torch.zeros((), dtype=values.dtype, device=values.device)
    return torch.where(mask, values, zero).sum() / mask.sum().clamp(min=1).to(values.dtype)


def _check_mask(mask: Tensor, shape: torch.Size, name: str = "mask") -> None:
    if mask.dtype != torch.bool:
        raise TypeError(f"{name}: must be a bool tensor, got {mask.dtype}")
    if mask.shape != shape:
        raise ValueError(f"{name}: expected shape {tuple(shape)}, got {tuple(mask.shape)}")


def cross_entropy_loss(
    logits: Tensor,
    target_ids: Tensor,
    mask: Tensor,
    chunk_size: int | None = None,
) -> Tensor:
    """Mean token NLL of target responses (RFT, EPD), ordinary view.

    Args:
        logits: ``(N, T, V)`` at the positions that predict ``target_ids``.
        target_ids: integer ``(N, T)`` target tokens (any value at padding, e.g. -100).
        mask: Bool ``(N, T)`` valid target tokens.
        chunk_size: positions per block (``None``: all at once).

    Returns:
        Scalar fp32: ``sum(NLL * mask) / sum(mask)``; 0 (attached) for an empty mask.
    """
    if logits.dim() != 3:
        raise ValueError(f"logits: expected (N, T, V), got shape {tuple(logits.shape)}")
    _check_mask(mask, logits.shape[:2])
    if target_ids.shape != mask.shape:
        raise ValueError(
            f"target_ids: expected shape {tuple(mask.shape)}, got {tuple(target_ids.shape)}"
        )
    safe_ids = target_ids.masked_fill(~mask, 0)  # a new tensor: padding ids become 0
    logp = token_logprobs(logits, safe_ids, chunk_size)  # (N, T)
    return _token_mean(-logp, mask)


def group_advantages(rewards: Tensor, eps: float = 1e-6) -> Tensor:
    """GRPO advantages ``(r_i - mean) / (sd + eps)`` per group, ``sd`` the sample SD (``n - 1``).

    Args:
        rewards: ``(G, n)`` rewards of ``n >= 2`` samples in each of ``G`` groups.
        eps: added to the SD (groups with equal rewards get advantage 0).

    Returns:
        fp32 ``(G, n)``.
    """
    if rewards.dim() != 2:
        raise ValueError(f"rewards: expected (G, n), got shape {tuple(rewards.shape)}")
    if rewards.shape[1] < 2:
        raise ValueError(
            f"rewards: need n >= 2 samples per group for a sample SD, got {rewards.shape[1]}"
        )
    r = rewards.to(torch.float32)
    return (r - r.mean(dim=1, keepdim=True)) / (r.std(dim=1, correction=1, keepdim=True) + eps)


def low_var_kl(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """verl's ``low_var_kl`` per token: ``exp(ref - logp) - (ref - logp) - 1``.

    The log-ratio is clamped to ``[-20, 20]`` and the result to ``[-10, 10]``, as verl does.
    """
    if logp.shape != ref_logp.shape:
        raise ValueError(
            f"ref_logp: shape {tuple(ref_logp.shape)} differs from logp {tuple(logp.shape)}"
        )
    kl = (ref_logp - logp).clamp(-20.0, 20.0)
    return (kl.exp() - kl - 1.0).clamp(-10.0, 10.0)


@dataclass(frozen=True)
class GrpoTerms:
    """The parts of one GRPO loss evaluation.

    Attributes:
        loss: ``pg_loss + beta * kl`` (scalar, with gradient).
        pg_loss: clipped surrogate, token-mean (scalar, with gradient).
        kl: ``low_var_kl`` to the reference, token-mean (scalar, with gradient).
        clip_fraction: share of valid tokens where the clipped branch was taken (float).
    """

    loss: Tensor
    pg_loss: Tensor
    kl: Tensor
    clip_fraction: float


def grpo_loss(
    logp: Tensor,
    old_logp: Tensor,
    ref_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    beta: float = 0.01,
) -> GrpoTerms:
    """Offline GRPO: clipped PPO surrogate plus ``beta * low_var_kl`` to a frozen reference.

    Args:
        logp: ``(M, T)`` log-probs of the sampled tokens under the current policy (with gradient).
        old_logp: ``(M, T)`` the same under the policy that sampled them.
        ref_logp: ``(M, T)`` the same under the frozen reference (base model).
        advantages: ``(M,)`` per-sample (or ``(M, T)`` per-token) advantages.
        mask: Bool ``(M, T)`` valid response tokens.
        clip_low: the ratio is clipped below at ``1 - clip_low``.
        clip_high: the ratio is clipped above at ``1 + clip_high``.
        beta: weight of the KL penalty (not part of rewards or advantages).

    Returns:
        :class:`GrpoTerms`.
    """
    _check_mask(mask, logp.shape)
    if old_logp.shape != logp.shape or ref_logp.shape != logp.shape:
        raise ValueError(
            f"old_logp, ref_logp: expected shape {tuple(logp.shape)}, got "
            f"{tuple(old_logp.shape)} and {tuple(ref_logp.shape)}"
        )
    if not 0 <= clip_low < 1:
        raise ValueError(f"clip_low: must be in [0, 1), got {clip_low}")
    if not clip_high >= 0:
        raise ValueError(f"clip_high: must be >= 0, got {clip_high}")
    if not beta >= 0:
        raise ValueError(f"beta: must be >= 0, got {beta}")
    if advantages.shape == logp.shape[:1]:
        advantages = advantages.unsqueeze(1)  # (M, 1), broadcast over tokens
    elif advantages.shape != logp.shape:
        raise ValueError(
            f"advantages: expected ({logp.shape[0]},) or {tuple(logp.shape)}, got {tuple(advantages.shape)}"
        )
    adv = advantages.detach().to(torch.float32)
    logp = logp.to(torch.float32)
    ratio = (logp - old_logp.detach().to(torch.float32)).clamp(-20.0, 20.0).exp()  # (M, T)
    unclipped = -adv * ratio  # (M, T)
    clipped = -adv * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)  # (M, T)
    pg = torch.maximum(unclipped, clipped)  # (M, T)
    pg_loss = _token_mean(pg, mask)
    kl = _token_mean(low_var_kl(logp, ref_logp.detach().to(torch.float32)), mask)
    with torch.no_grad():
        clip_fraction = float(_token_mean((clipped > unclipped).to(torch.float32), mask))
    return GrpoTerms(loss=pg_loss + beta * kl, pg_loss=pg_loss, kl=kl, clip_fraction=clip_fraction)
