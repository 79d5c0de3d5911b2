"""The ReSAIL objective: SGS + TLB + privileged retention on top of a parent's ``l_dist``.

``L = L_sel + lambda * L_ret`` (paper eqs. 4-8), where

- ``L_sel`` is the distillation loss over the selected steps ``C`` of ``U``: the
  trajectory-balanced mean (TLB, eq. 5) or, with balancing off, the uniform mean over ``C``;
- ``L_ret`` is the retention loss over **all** steps of ``U`` with the trajectory-level reduction
  of eq. 7, whatever the balancing switch (the retention view picks which KL: privileged
  ``KL(pi_S(.|h,c) || pi_T(.|h,c))``, ordinary ``KL(pi_S(.|h) || pi_T(.|h))``, or none).

Parent equality: ``ResailConfig.off()`` (selection ``none`` = all of ``U``, balancing off,
retention ``none``) gives exactly the parent's uniform mean of ``l_dist`` over ``U``, so
``+ ReSAIL`` is a switch on either parent (pass SDPO's TIS weights as ``token_weights``).
With balancing on, ``rho = 1`` is *not* the uniform mean: steps are weighted per trajectory
(appendix B.3).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor

from resail_pipeline.config import Config, Field, Number, one_of
from resail_pipeline.objectives.distillation import DEFAULT_TOP_K, token_divergences
from resail_pipeline.objectives.selection import (
    SELECTION_STRATEGIES,
    check_trajectory_index,
    select_steps,
    trajectory_balanced_mean,
)

__all__ = [
    "RETENTION_VIEWS",
    "SELECTIONS",
    "ResailConfig",
    "ResailRecord",
    "resail_loss",
    "resail_objective",
]

#: selection switches: a strategy of :func:`select_steps`, or ``none`` (all of ``U``)
SELECTIONS = (*SELECTION_STRATEGIES, "none")
#: retention views: ReSAIL's ``privileged``, the ablation's ``ordinary``, or ``none``
RETENTION_VIEWS = ("privileged", "ordinary", "none")


class ResailConfig(Config):
    """The ReSAIL switches. Defaults: the paper's full method with TextCraft's rho and lambda."""

    selection: one_of(*SELECTIONS) = "top"
    """Which steps of ``U`` are distilled: ``top`` (SGS), ``bottom``, ``random``, or ``none``
    (all of ``U``)."""
    rho: Number = Field(0.25, gt=0, le=1)
    """Selection ratio: ``K = ceil(rho * |U|)``; unused with selection ``none``."""
    balancing: bool = True
    """TLB: average the selected losses within each trajectory, then divide by ``|B|`` (eq. 5);
    off: the uniform mean over the selected steps."""
    retention: one_of(*RETENTION_VIEWS) = "privileged"
    """Retention view: ``privileged`` (PR, eq. 6), ``ordinary`` (the ablation's control), or
    ``none``."""
    lam: Number = Field(1.0, ge=0, alias="lambda")
    """Retention weight ``lambda``; ignored when retention is ``none``."""
    top_k: int = Field(DEFAULT_TOP_K, ge=1)
    """Support size ``K`` of the top-K plus tail distributions."""

    @classmethod
    def off(cls, top_k: int = DEFAULT_TOP_K) -> ResailConfig:
        """The parent's objective: all of ``U``, uniform mean, no retention."""
        return cls(
            selection="none", rho=1.0, balancing=False, retention="none", lam=0.0, top_k=top_k
        )

    @property
    def uses_retention(self) -> bool:
        """Whether ``L_ret`` enters the loss."""
        return self.retention != "none" and self.lam > 0

    @property
    def needs_scores(self) -> bool:
        """Whether selection ranks steps by sensitivity."""
        return self.selection in ("top", "bottom")


@dataclass(frozen=True)
class ResailRecord:
    """What one ReSAIL loss evaluation selected and computed, for logging (no gradients).

    Attributes:
        loss: ``L_sel + lambda * L_ret`` (``L_sel`` alone without retention).
        loss_sel: ``L_sel``.
        loss_ret: ``L_ret`` (0 when not computed).
        num_steps: ``|U|``.
        num_selected: ``K``.
        num_trajectories: ``|B|``.
        selected: Long ``(K,)`` ascending indices into ``U``.
        selected_per_traj: Long ``(|B|,)`` selected steps per trajectory (``m_tau``).
        scores: ``(N,)`` sensitivity scores, or ``None`` where none were computed.
        score_selected_mean: mean score of the selected steps (NaN without scores or selection).
        score_all_mean: mean score over ``U`` (NaN without scores or steps).
        tokens: valid response tokens over ``U``, where known.
        support_size: ``K`` of the top-``K`` plus tail distributions, where known.
    """

    loss: float
    loss_sel: float
    loss_ret: float
    num_steps: int
    num_selected: int
    num_trajectories: int
    selected: Tensor
    selected_per_traj: Tensor
    scores: Tensor | None
    score_selected_mean: float
    score_all_mean: float
    tokens: int | None = None
    support_size: int | None = None

    def as_metrics(self) -> dict[str, Any]:
        """The ``train_metrics`` columns this record fills (see ``schemas.SCHEMAS``)."""
        return {
            "loss": self.loss,
            "loss_sel": self.loss_sel,
            "loss_ret": self.loss_ret,
            "num_steps": self.num_steps,
            "num_selected": self.num_selected,
            "selected_per_traj": [int(c) for c in self.selected_per_traj.tolist()],
            "score_selected_mean": self.score_selected_mean,
            "score_all_mean": self.score_all_mean,
            "tokens": self.tokens,
        }


def _mean_or_nan(x: Tensor | None) -> float:
    if x is None or x.numel() == 0:
        return float("nan")
    return float(x.float().mean())


def resail_objective(
    l_dist: Tensor,
    traj_index: Tensor,
    num_trajectories: int,
    config: ResailConfig,
    *,
    scores: Tensor | None = None,
    l_ret: Tensor | None = None,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, ResailRecord]:
    """ReSAIL from per-step values (eqs. 4-8): select, balance, retain, combine.

    Args:
        l_dist: ``(N,)`` per-step distillation losses over ``U`` (with gradient), already
            carrying the parent's token corrections (SDPO's TIS).
        traj_index: Long ``(N,)`` trajectory of each step, in ``[0, num_trajectories)``.
        num_trajectories: ``|B|``, the trajectories in the batch (also those without steps).
        config: the switches.
        scores: ``(N,)`` sensitivity per step; required by selection ``top`` / ``bottom``,
            logged when given; never differentiated.
        l_ret: ``(N,)`` per-step retention losses of the configured view; required when
            ``config.uses_retention``.
        generator: random source for selection ``random``.

    Returns:
        ``(loss, record)``; ``U`` empty gives a zero loss attached to the graph of ``l_dist``.
    """
    if l_dist.dim() != 1:
        raise ValueError(f"l_dist: expected (N,), got shape {tuple(l_dist.shape)}")
    n = l_dist.shape[0]
    if scores is not None:
        if scores.shape != (n,):
            raise ValueError(f"scores: expected ({n},), got shape {tuple(scores.shape)}")
        scores = scores.detach()
    elif config.needs_scores and n:
        raise ValueError(
            f"scores: selection {config.selection!r} needs per-step sensitivity scores"
        )
    if l_ret is not None and l_ret.shape != (n,):
        raise ValueError(f"l_ret: expected ({n},), got shape {tuple(l_ret.shape)}")
    if config.uses_retention and l_ret is None:
        raise ValueError(f"l_ret: retention {config.retention!r} with lam > 0 needs per-step l_ret")

    if config.selection == "none":
        selected = torch.arange(n, device=l_dist.device)  # (N,)
    else:
        ranking = scores if scores is not None else torch.zeros(n, device=l_dist.device)
        selected = select_steps(ranking, config.rho, config.selection, generator)  # (K,)
    chosen = torch.zeros(n, dtype=torch.bool, device=l_dist.device)  # (N,)
    chosen[selected] = True

    if n == 0:
        loss_sel = l_dist.sum()  # 0, attached to the graph
    elif config.balancing:
        loss_sel = trajectory_balanced_mean(l_dist, traj_index, chosen, num_trajectories)
    else:
        check_trajectory_index(traj_index, num_trajectories, n)
        loss_sel = l_dist[selected].mean()

    loss = loss_sel
    loss_ret = torch.zeros((), dtype=l_dist.dtype, device=l_dist.device)
    if l_ret is not None and config.retention != "none":
        everything = torch.ones(n, dtype=torch.bool, device=l_dist.device)
        loss_ret = trajectory_balanced_mean(l_ret, traj_index, everything, num_trajectories)
        if config.uses_retention:
            loss = loss_sel + config.lam * loss_ret

    per_traj = (
        torch.bincount(traj_index[selected].to(torch.long), minlength=int(num_trajectories))
        if n
        else torch.zeros(int(num_trajectories), dtype=torch.long, device=l_dist.device)
    )
    record = ResailRecord(
        loss=float(loss.detach()),
        loss_sel=float(loss_sel.detach()),
        loss_ret=float(loss_ret.detach()),
        num_steps=n,
        num_selected=int(selected.numel()),
        num_trajectories=int(num_trajectories),
        selected=selected.detach().cpu(),
        selected_per_traj=per_traj.cpu(),
        scores=None if scores is None else scores.cpu(),
        score_selected_mean=_mean_or_nan(None if scores is None else scores[selected]),
        score_all_mean=_mean_or_nan(scores),
        support_size=config.top_k,
    )
    return loss, record


def resail_loss(
    student_ord_logits: Tensor,
    teacher_ord_logits: Tensor | None,
    teacher_priv_logits: Tensor,
    mask: Tensor,
    traj_index: Tensor,
    num_trajectories: int,
    config: ResailConfig,
    *,
    student_priv_logits: Tensor | None = None,
    token_weights: Tensor | None = None,
    generator: torch.Generator | None = None,
    chunk_size: int | None = None,
) -> tuple[Tensor, ResailRecord]:
    """One ReSAIL loss evaluation from response-position logits of the four views.

    Scores are the frozen teacher's sensitivity on the current student's ordinary top-``K``
    support; selection is recomputed here, at every call, and held fixed in backpropagation.

    Args:
        student_ord_logits: ``(N, T, V)`` current student, ordinary view (with gradient).
        teacher_ord_logits: ``(N, T, V)`` frozen teacher, ordinary view; required for
            selection ``top`` / ``bottom`` and retention ``ordinary``, logged otherwise.
        teacher_priv_logits: ``(N, T, V)`` frozen teacher, privileged view.
        mask: Bool ``(N, T)`` valid response tokens.
        traj_index: Long ``(N,)`` trajectory of each step of ``U`` in the batch.
        num_trajectories: ``|B|``.
        config: the switches.
        student_priv_logits: ``(N, T, V)`` current student, privileged view (with gradient);
            required for retention ``privileged`` with ``lam > 0``.
        token_weights: ``(N, T)`` the parent's token corrections on ``l_dist`` (SDPO's TIS).
        generator: random source for selection ``random``.
        chunk_size: positions per block for the full-vocabulary reductions.

    Returns:
        ``(loss, record)``.
    """
    needs_teacher_ord = config.needs_scores or (
        config.uses_retention and config.retention == "ordinary"
    )
    if teacher_ord_logits is None and needs_teacher_ord:
        raise ValueError(
            f"teacher_ord_logits: needed for selection {config.selection!r} / retention "
            f"{config.retention!r}"
        )
    if student_priv_logits is None and config.uses_retention and config.retention == "privileged":
        raise ValueError("student_priv_logits: needed for privileged retention with lam > 0")
    terms = token_divergences(
        student_ord_logits,
        teacher_ord_logits,
        teacher_priv_logits,
        mask,
        student_priv_logits=student_priv_logits if config.retention == "privileged" else None,
        top_k=config.top_k,
        token_weights=token_weights,
        chunk_size=chunk_size,
    )
    l_ret = {"privileged": terms.l_ret, "ordinary": terms.l_ret_ordinary, "none": None}[
        config.retention
    ]
    loss, record = resail_objective(
        terms.l_dist,
        traj_index,
        num_trajectories,
        config,
        scores=terms.sensitivity,
        l_ret=l_ret,
        generator=generator,
    )
    return loss, replace(record, tokens=int(terms.tokens.sum()))
