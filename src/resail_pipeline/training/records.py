"""What one update did (:class:`UpdateRecord`, a ``train_metrics`` row and its
``selected_steps`` rows) and the wall time of its phases (:class:`PhaseTimer`).

Below both the update loop (:mod:`.trainer`, which makes the records) and its snapshots
(:mod:`.snapshots`, which keep them).
"""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = ["PHASES", "PhaseTimer", "UpdateRecord"]

#: the cost categories of table 6; "other" is the residual of the update's wall time
PHASES = ("response", "scoring", "optimisation", "other")


@dataclass(frozen=True)
class UpdateRecord:
    """What one update did: the ``train_metrics`` row and the ``selected_steps`` rows.

    Attributes:
        update: 0-based update index.
        loss: ``L_sel + lambda L_ret`` (the parents: their uniform mean of ``l_dist``).
        loss_sel: ``L_sel``.
        loss_ret: ``L_ret`` (0 without retention).
        num_trajectories: ``|B|``.
        num_steps: ``|U|``.
        num_selected: ``K``.
        selected_per_traj: selected steps of each trajectory of ``B``.
        score_selected_mean: mean sensitivity of the selected steps (NaN where not scored).
        score_all_mean: mean sensitivity over ``U`` (NaN where not scored).
        tokens: valid response tokens over ``U``.
        grad_norm: global gradient norm before clipping.
        seconds: seconds per phase of :data:`PHASES` (rank 0's clock).
        selected: ``(traj_id, t, score)`` of each selected step.
        extra: further ``train_metrics`` columns of the method (e.g. GRPO's mean reward).
    """

    update: int
    loss: float
    loss_sel: float
    loss_ret: float
    num_trajectories: int
    num_steps: int
    num_selected: int
    selected_per_traj: list[int]
    score_selected_mean: float
    score_all_mean: float
    tokens: int
    grad_norm: float
    seconds: dict[str, float]
    selected: list[tuple[str, int, float]] = field(default_factory=list)
    extra: dict[str, float] = field(default_factory=dict)

    def metrics_row(self) -> dict[str, Any]:
        """One ``train_metrics`` row (its schema's columns, plus ``num_trajectories`` and ``grad_norm``)."""
        return {
            "update": self.update,
            "loss": self.loss,
            "loss_sel": self.loss_sel,
            "loss_ret": self.loss_ret,
            "num_trajectories": self.num_trajectories,
            "num_steps": self.num_steps,
            "num_selected": self.num_selected,
            "selected_per_traj": self.selected_per_traj,
            "score_selected_mean": self.score_selected_mean,
            "score_all_mean": self.score_all_mean,
            "tokens": self.tokens,
            "grad_norm": self.grad_norm,
            **{f"seconds_{phase}": self.seconds[phase] for phase in PHASES},
            **self.extra,
        }

    def selected_rows(self) -> list[dict[str, Any]]:
        return [
            {"update": self.update, "traj_id": traj, "t": t, "score": score}
            for traj, t, score in self.selected
        ]


class PhaseTimer:
    """Wall time per phase; with CUDA, the device is synchronised at every boundary."""

    def __init__(self, device: torch.device) -> None:
        self._cuda = device.type == "cuda"
        self.seconds: dict[str, float] = defaultdict(float)

    def now(self) -> float:
        """The clock, after the device has finished its queued work."""
        if self._cuda:
            torch.cuda.synchronize()
        return time.perf_counter()

    @contextlib.contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        start = self.now()
        try:
            yield
        finally:
            self.seconds[phase] += self.now() - start

    def breakdown(self, total: float) -> dict[str, float]:
        """Seconds of each phase, ``other`` being the rest of ``total``."""
        out = {phase: self.seconds.get(phase, 0.0) for phase in PHASES if phase != "other"}
        out["other"] = max(total - sum(out.values()), 0.0)
        return out
