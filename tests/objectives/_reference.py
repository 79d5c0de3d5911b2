"""Naive full-vocabulary references for the objectives tests (fp64, test-only)."""

from __future__ import annotations

import torch

NEG_INF = float("-inf")


def reference_topk_tail(logits: torch.Tensor, support: torch.Tensor) -> torch.Tensor:
    """``(..., K+1)`` log-probs from a full-vocabulary log-softmax in fp64."""
    logp = torch.log_softmax(logits.double(), dim=-1)  # (..., V)
    off_support = torch.ones_like(logp, dtype=torch.bool).scatter(-1, support, False)
    tail = torch.logsumexp(logp.masked_fill(~off_support, NEG_INF), dim=-1, keepdim=True)
    return torch.cat([logp.gather(-1, support), tail], dim=-1)


def reference_kl(lp: torch.Tensor, lq: torch.Tensor) -> torch.Tensor:
    p = lp.exp()
    return torch.where(p > 0, p * (lp - lq), torch.zeros_like(p)).sum(-1)


def reference_jsd(lp: torch.Tensor, lq: torch.Tensor) -> torch.Tensor:
    lm = torch.log(0.5 * (lp.exp() + lq.exp()))
    return 0.5 * reference_kl(lp, lm) + 0.5 * reference_kl(lq, lm)


def reference_step_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-row mean over valid tokens, 0 for rows without one."""
    out = []
    for row, valid in zip(values, mask, strict=True):
        out.append(row[valid].mean() if valid.any() else torch.zeros((), dtype=row.dtype))
    return torch.stack(out)
