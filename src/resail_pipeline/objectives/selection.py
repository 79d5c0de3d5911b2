"""Sensitivity-guided selection (SGS) and trajectory-level balancing (TLB), paper eqs. 4, 5 and 7.

Steps of the update batch ``U`` are indexed ``0 .. N-1`` in a fixed order (the trainer's order of
``U``); ``traj_index[i]`` is the position in the trajectory batch ``B`` of the trajectory that
step ``i`` belongs to.
"""

from __future__ import annotations

import math
from decimal import Decimal

import torch
from torch import Tensor

from resail_pipeline.config import check_number

__all__ = [
    "SELECTION_STRATEGIES",
    "check_rho",
    "check_trajectory_index",
    "num_selected",
    "select_steps",
    "trajectory_balanced_mean",
    "trajectory_weights",
]

#: strategies of :func:`select_steps`: ReSAIL's ``top`` and the ablation's ``bottom`` / ``random``
SELECTION_STRATEGIES = ("top", "bottom", "random")


def check_rho(rho: float) -> float:
    """Return ``rho`` as a float if it lies in ``(0, 1]``; else raise naming the field."""
    check_number("rho", rho, low=0, high=1, low_open=True)
    return float(rho)


def num_selected(rho: float, n: int) -> int:
    """``K = ceil(rho * n)``, with ``rho`` read as the decimal it is written as.

    ``0.1 * 30`` is ``3.0000000000000004`` in binary floating point; reading ``rho`` through
    its shortest decimal representation gives ``K = 3``, as the formula means.
    """
    rho = check_rho(rho)
    if n < 0:
        raise ValueError(f"n: must be >= 0, got {n}")
    return min(n, math.ceil(Decimal(repr(rho)) * n))


def select_steps(
    scores: Tensor,
    rho: float,
    strategy: str,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Select ``K = ceil(rho * N)`` steps of ``U`` by score (paper eq. 4).

    Args:
        scores: ``(N,)`` PI-sensitivity scores (detached here: selection carries no gradient).
        rho: selection ratio in ``(0, 1]``.
        strategy: ``"top"`` (highest scores, ReSAIL), ``"bottom"`` (lowest) or ``"random"``
            (uniform without replacement, scores unused). Ties go to the lower index first.
        generator: random source for ``"random"`` (a CPU generator); ``None`` uses torch's global one.

    Returns:
        Long ``(K,)`` selected indices into ``U``, ascending; empty when ``N = 0``.
    """
    rho = check_rho(rho)
    if strategy not in SELECTION_STRATEGIES:
        raise ValueError(f"strategy: must be one of {SELECTION_STRATEGIES}, got {strategy!r}")
    if scores.dim() != 1:
        raise ValueError(f"scores: expected (N,), got shape {tuple(scores.shape)}")
    scores = scores.detach()
    n = scores.shape[0]
    k = num_selected(rho, n)
    if k == 0:
        return torch.empty(0, dtype=torch.long, device=scores.device)
    if strategy == "random":
        order = torch.randperm(n, generator=generator).to(scores.device)  # (N,)
    else:
        if not bool(torch.isfinite(scores).all()):
            raise ValueError("scores: must be finite to rank steps (found NaN or inf)")
        # a stable sort keeps equal scores in index order, in both directions
        order = torch.sort(scores, descending=strategy == "top", stable=True).indices  # (N,)
    return order[:k].sort().values


def check_trajectory_index(traj_index: Tensor, num_trajectories: int, n: int) -> Tensor:
    """Return ``traj_index`` as Long ``(n,)`` if its values lie in ``[0, num_trajectories)``."""
    if (
        isinstance(num_trajectories, bool)
        or int(num_trajectories) != num_trajectories
        or num_trajectories < 0
    ):
        raise ValueError(
            f"num_trajectories: must be a non-negative integer, got {num_trajectories!r}"
        )
    if traj_index.shape != (n,):
        raise ValueError(f"traj_index: expected ({n},), got shape {tuple(traj_index.shape)}")
    if traj_index.dtype.is_floating_point or traj_index.dtype == torch.bool:
        raise TypeError(
            f"traj_index: must hold integer trajectory positions, got {traj_index.dtype}"
        )
    if n and (int(traj_index.min()) < 0 or int(traj_index.max()) >= num_trajectories):
        raise ValueError(
            f"traj_index: values must be in [0, num_trajectories={num_trajectories}), "
            f"got [{int(traj_index.min())}, {int(traj_index.max())}]"
        )
    return traj_index.to(torch.long)


def trajectory_weights(traj_index: Tensor, mask: Tensor, num_trajectories: int) -> Tensor:
    """Per-step coefficients of the trajectory-balanced mean: ``mask_i / (|B| * m_tau(i))``.

    ``sum_i w_i * values_i`` equals :func:`trajectory_balanced_mean`, so a trainer can split
    the steps into micro-batches and accumulate gradients exactly.

    Args:
        traj_index: Long ``(N,)`` trajectory of each step, in ``[0, num_trajectories)``.
        mask: Bool ``(N,)`` steps that count (selected steps for ``L_sel``, all for ``L_ret``).
        num_trajectories: ``|B|``, the number of trajectories in the batch (not only those with
            steps).

    Returns:
        fp32 ``(N,)``; zero where ``mask`` is False.
    """
    if mask.dim() != 1 or mask.dtype != torch.bool:
        raise ValueError(f"mask: expected a bool (N,) tensor, got {mask.dtype} {tuple(mask.shape)}")
    n = mask.shape[0]
    traj_index = check_trajectory_index(traj_index, num_trajectories, n)
    if n == 0:
        return torch.zeros(0, dtype=torch.float32, device=mask.device)
    counts = torch.zeros(num_trajectories, dtype=torch.float32, device=mask.device)  # (B,)
    counts.index_add_(0, traj_index, mask.to(torch.float32))
    per_step = counts.gather(0, traj_index).clamp(min=1.0)  # (N,) m_tau of each step's trajectory
    return mask.to(torch.float32) / (per_step * num_trajectories)


def trajectory_balanced_mean(
    values: Tensor,
    traj_index: Tensor,
    mask: Tensor,
    num_trajectories: int,
) -> Tensor:
    """``(1/|B|) * sum_{tau: m_tau > 0} (1/m_tau) * sum_{t masked in tau} values`` (eqs. 5 and 7).

    Trajectories without a masked step contribute 0; there is no renormalisation over the
    trajectories that have one.

    Args:
        values: ``(N,)`` per-step values.
        traj_index: Long ``(N,)`` trajectory of each step, in ``[0, num_trajectories)``.
        mask: Bool ``(N,)`` steps that count.
        num_trajectories: ``|B|``.

    Returns:
        Scalar in ``values``' dtype; 0 (still attached to the graph of ``values``) when no step
        is masked.
    """
    if values.dim() != 1 or values.shape != mask.shape:
        raise ValueError(
            f"values: expected (N,) like mask {tuple(mask.shape)}, got shape {tuple(values.shape)}"
        )
    weights = trajectory_weights(traj_index, mask, num_trajectories).to(values.dtype)  # (N,)
    zero = torch.zeros((), dtype=values.dtype, device=values.device)
    return (weights * torch.where(mask, values, zero)).sum()
