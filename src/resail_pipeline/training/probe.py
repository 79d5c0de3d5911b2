"""The PI-sensitivity probe (appendix D.3): fixed logged steps, a fixed support, the current student.

The probe set is built once, from the initial policy's reference episodes (those of the fixed
Experience, appendix D.2), by :func:`build_probe_set`: every step of the first
``num_trajectories`` reference trajectories in task order that have an accepted summary, with the
token ids of both views' prompts, of the logged response and, at every response position, of the
initial model's ordinary-view top-``K``. It is a ``probe_set`` table, read back as a
:class:`ProbeSet`.

During training, :class:`SensitivityProbe` is the trainer's hook: at the cycle start and after
every update it measures the current student's PI sensitivity on every probe step, the JSD between
its ordinary and privileged views on the logged response, both reduced to the fixed support plus
one tail category (:func:`probe_sensitivity`, which is
:func:`~resail_pipeline.training.scoring.teacher_targets` on a given support). The support does not
follow the student, so the values of different checkpoints are comparable; training itself uses
the current student's support.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import Tensor, nn
from transformers import PreTrainedModel

from resail_pipeline.objectives import DEFAULT_TOP_K
from resail_pipeline.schemas import SCHEMAS, check_columns
from resail_pipeline.training.data import (
    InputError,
    StepExample,
    TrainingData,
    build_training_data,
    check_lengths,
    check_token_ids,
    usable_steps,
)
from resail_pipeline.training.engine import Engine
from resail_pipeline.training.scoring import sensitivity_batches, teacher_targets

__all__ = [
    "PROBE_COLUMNS",
    "ProbeSet",
    "SensitivityProbe",
    "build_probe_set",
    "empty_probe_set",
    "probe_frame",
    "probe_sensitivity",
]

logger = logging.getLogger(__name__)

#: the trainer's probe rows (the ``probe`` contract without the run's experiment, method, cycle)
PROBE_COLUMNS = ("update", "traj_id", "t", "jsd", "tokens")
_PROBE_DTYPES = {
    "update": "int64",
    "traj_id": "str",
    "t": "int64",
    "jsd": "float64",
    "tokens": "int64",
}


def probe_frame(rows: Sequence[tuple[int, str, int, float, int]] = ()) -> pd.DataFrame:
    """Probe rows ``(update, traj_id, t, jsd, tokens)`` as a frame; no rows give an empty one."""
    return pd.DataFrame(list(rows), columns=list(PROBE_COLUMNS)).astype(_PROBE_DTYPES)


# ----------------------------------------------------------------------------------------------
# the probe set


@dataclass(frozen=True)
class ProbeSet:
    """The fixed probe, ready for the model.

    Attributes:
        data: the probe steps grouped by trajectory; each step's ``response_ids`` is its logged
            response.
        support: ``(traj_id, t) -> Long (T, K)``: the initial model's ordinary-view top-``K`` ids
            at each of the step's ``T`` response positions.
        policy_id: the model whose support it is (the initial policy).
    """

    data: TrainingData
    support: Mapping[tuple[str, int], Tensor]
    policy_id: str

    @property
    def steps(self) -> list[StepExample]:
        """Every probe step, by trajectory, then ``t``."""
        return [s for traj in self.data.trajectories for s in self.data.steps[traj]]

    @property
    def top_k(self) -> int:
        """``K``, the support size."""
        return next(iter(self.support.values())).shape[-1]

    @classmethod
    def from_frame(cls, frame: pd.DataFrame, source: str = "probe_set") -> ProbeSet:
        """Read a ``probe_set`` table; every error names ``source`` and the offending step."""
        check_columns(frame, "probe_set", source=source)
        if frame.empty:
            raise InputError(
                f"{source}: the probe set has no steps (it was built with train.probe.enabled "
                "false, or no reference trajectory had an accepted summary and a non-empty logged "
                "response)"
            )
        keys = list(zip(frame["traj_id"].astype(str), frame["t"].astype(int), strict=True))
        if len(set(keys)) != len(keys):
            raise InputError(f"{source}: a probe step (traj_id, t) appears more than once")
        policies = frame["policy_id"].astype(str).unique()
        if len(policies) != 1:
            raise InputError(f"{source}: the support comes from one model, found {list(policies)}")
        by_traj: dict[str, list[StepExample]] = {}
        support: dict[tuple[str, int], Tensor] = {}
        top_k = None
        for key, row in zip(keys, frame.itertuples(index=False), strict=True):
            response = tuple(int(i) for i in row.response_ids)
            if not response:
                raise InputError(f"{source}: step {key} has an empty response")
            ids = _support_array(row.support, len(response), source, key)
            if top_k is None:
                top_k = ids.shape[1]
            elif ids.shape[1] != top_k:
                raise InputError(
                    f"{source}: step {key} has a top-{ids.shape[1]} support, others top-{top_k}"
                )
            support[key] = torch.from_numpy(ids)
            by_traj.setdefault(key[0], []).append(
                StepExample(
                    traj_id=key[0],
                    t=key[1],
                    prompt="",  # nothing is sampled from a probe step
                    ordinary_ids=tuple(int(i) for i in row.ordinary_ids),
                    privileged_ids=tuple(int(i) for i in row.privileged_ids),
                    response_ids=response,
                )
            )
        trajectories = tuple(sorted(by_traj))
        steps = {traj: tuple(sorted(by_traj[traj], key=lambda s: s.t)) for traj in trajectories}
        data = TrainingData(trajectories=trajectories, steps=steps, dropped=0)
        return cls(data=data, support=support, policy_id=str(policies[0]))

    def check(self, vocab_size: int, max_positions: int) -> None:
        """Raise unless every id is in the model's vocabulary and every step fits its positions."""
        check_token_ids(self.data, vocab_size)
        check_lengths(self.data, max_positions, 0)  # the logged responses at their own length
        for key, ids in self.support.items():
            if int(ids.max()) >= vocab_size:
                raise InputError(
                    f"probe step {key}: support holds ids outside [0, {vocab_size}), the model's "
                    "vocabulary"
                )


def _support_array(value: Any, length: int, source: str, key: tuple[str, int]) -> np.ndarray:
    """A step's support as int64 ``(T, K)``, checked: one row of distinct ids per response token."""
    try:
        ids = np.asarray([np.asarray(p, dtype=np.int64) for p in value], dtype=np.int64)
    except (TypeError, ValueError):
        raise InputError(
            f"{source}: step {key}: support must hold one list of K token ids per response token"
        ) from None
    if ids.ndim != 2 or ids.shape[0] != length or ids.shape[1] < 1:
        raise InputError(
            f"{source}: step {key}: support has shape {ids.shape}, expected ({length}, K): one "
            "list of K token ids per response token"
        )
    ordered = np.sort(ids, axis=1)  # (T, K)
    if (ordered[:, 0] < 0).any() or (ordered[:, 1:] == ordered[:, :-1]).any():
        raise InputError(f"{source}: step {key}: support ids must be distinct and non-negative")
    return ids


def empty_probe_set() -> pd.DataFrame:
    """A probe set without steps: what :func:`build_probe_set` returns when no trajectory
    qualifies, and what is kept where the probe is off (it is then never read)."""
    return pd.DataFrame(columns=[*SCHEMAS["probe_set"], "task_id", "response"])


def build_probe_set(
    model: PreTrainedModel,
    tokenizer: Any,
    trajectories: pd.DataFrame,
    steps: pd.DataFrame,
    summaries: pd.DataFrame,
    *,
    policy_id: str,
    num_trajectories: int = 16,
    top_k: int = DEFAULT_TOP_K,
    micro_batch_steps: int = 8,
    chunk_size: int | None = None,
    precision: str = "fp32",
    compile: bool = False,
) -> pd.DataFrame:
    """The probe set: fixed logged steps and the initial model's support at each response position.

    Trajectories are taken in task order (``task_id``, then ``traj_id``): the first
    ``num_trajectories`` with an accepted summary and a non-empty logged response. Every step of
    theirs is kept except those whose logged response is empty (no token to compare). A logged
    response is ``steps.response`` tokenised with ``tokenizer`` (the log holds text, without the
    end-of-sequence token); the privileged view carries the trajectory's accepted summary.

    Args:
        model: the initial policy; run without gradient, its weights untouched (an attention
            implementation that cannot take a 4-D mask is switched to sdpa).
        tokenizer: its tokenizer.
        trajectories: ``trajectories`` of the reference episodes (their ``task_id`` orders them).
        steps: their ``steps``.
        summaries: their summaries, the fixed Experience (``summaries`` schema).
        policy_id: the model's ``policy_id``, recorded with the support.
        num_trajectories: how many trajectories (fewer qualifying is a warning).
        top_k: support size ``K``.
        micro_batch_steps: steps per forward.
        chunk_size: positions per block in the full-vocabulary reductions.
        precision: ``fp32`` or ``bf16`` (autocast).
        compile: run the forward compiled (:class:`~.views.ResponseLogits`).

    Returns:
        A frame with the ``probe_set`` schema, one row per probe step by trajectory and ``t``,
        plus the step's ``task_id`` and logged ``response`` text; no rows (and a warning) when no
        trajectory qualifies, so that a run without the probe never fails for it.

    Raises:
        InputError: a step's ids do not fit the model.
    """
    if isinstance(num_trajectories, bool) or num_trajectories < 1:
        raise ValueError(f"num_trajectories: must be a positive integer, got {num_trajectories!r}")
    if micro_batch_steps < 1:
        raise ValueError(f"micro_batch_steps: must be >= 1, got {micro_batch_steps}")
    check_columns(trajectories, "trajectories", source="trajectories")
    candidates = usable_steps(steps, summaries)  # steps of trajectories with an accepted summary
    candidates = candidates.assign(traj_id=candidates["traj_id"].astype(str))
    logged = [str(r) for r in candidates["response"]]
    tokens = tokenizer(logged, add_special_tokens=False)["input_ids"] if logged else []
    candidates = candidates.assign(response_ids=[tuple(ids) for ids in tokens])
    candidates = candidates[candidates["response_ids"].map(len) > 0]

    in_task_order = trajectories.assign(traj_id=trajectories["traj_id"].astype(str)).sort_values(
        ["task_id", "traj_id"]
    )["traj_id"]
    present = set(candidates["traj_id"])
    chosen = [traj for traj in dict.fromkeys(in_task_order) if traj in present][:num_trajectories]
    if not chosen:  # an error only where the probe is enabled (see ProbeSet.from_frame)
        logger.warning(
            "probe set: no reference trajectory has an accepted summary and a non-empty logged "
            "response; the probe set is empty"
        )
        return empty_probe_set()
    if len(chosen) < num_trajectories:
        logger.warning(
            "probe set: only %d trajectories qualify, %d asked for", len(chosen), num_trajectories
        )
    picked = candidates[candidates["traj_id"].isin(set(chosen))]
    keys = list(zip(picked["traj_id"], picked["t"].astype(int), strict=True))
    logged_ids = dict(zip(keys, picked["response_ids"], strict=True))
    data = build_training_data(picked, summaries, tokenizer)  # both views' prompt ids
    with_responses = {
        traj: tuple(replace(s, response_ids=logged_ids[(traj, s.t)]) for s in traj_steps)
        for traj, traj_steps in data.steps.items()
    }
    data = replace(data, steps=with_responses)
    check_token_ids(data, model.config.vocab_size)
    check_lengths(data, model.config.max_position_embeddings, 0)

    examples = [s for traj in data.trajectories for s in data.steps[traj]]
    support: list[list[list[int]]] = []
    weighted, total = 0.0, 0
    batches = sensitivity_batches(
        model,
        examples,
        pad_id=tokenizer.pad_token_id,
        top_k=top_k,
        micro_batch_steps=micro_batch_steps,
        chunk_size=chunk_size,
        precision=precision,
        compile=compile,
        desc="probe support",
    )
    for chunk, targets in batches:
        counts = targets.mask.sum(dim=1)  # (n,)
        weighted += float((targets.scores * counts).sum())
        total += int(counts.sum())
        for i, step in enumerate(chunk):
            support.append(targets.support[i, : len(step.response_ids)].tolist())  # (T_i, K)
    logger.info(
        "probe set: %d trajectories, %d steps, %d response tokens; PI sensitivity of %s on its "
        "own support: %.4g nats",
        len(chosen),
        len(examples),
        total,
        policy_id,
        weighted / total,
    )
    task_ids = dict(zip(trajectories["traj_id"].astype(str), trajectories["task_id"], strict=True))
    texts = dict(zip(keys, picked["response"], strict=True))
    return pd.DataFrame(
        {
            "traj_id": [s.traj_id for s in examples],
            "t": [s.t for s in examples],
            "task_id": [task_ids[s.traj_id] for s in examples],
            "response": [str(texts[(s.traj_id, s.t)]) for s in examples],
            "ordinary_ids": [list(s.ordinary_ids) for s in examples],
            "privileged_ids": [list(s.privileged_ids) for s in examples],
            "response_ids": [list(s.response_ids) for s in examples],
            "support": support,
            "policy_id": policy_id,
        }
    )


# ----------------------------------------------------------------------------------------------
# the measurement


def probe_sensitivity(
    module: nn.Module,
    steps: Sequence[StepExample],
    supports: Sequence[Tensor],
    *,
    pad_id: int,
    device: torch.device,
    precision: str = "fp32",
    chunk_size: int | None = None,
) -> tuple[Tensor, Tensor]:
    """The PI sensitivity of ``module`` on probe steps over their fixed supports, without gradient.

    Args:
        module: a :class:`~resail_pipeline.training.views.ResponseLogits` (the current student).
        steps: the steps, each with its logged response in ``response_ids``.
        supports: each step's Long ``(T_i, K)`` support.
        pad_id: padding token id.
        device: where the forward runs.
        precision: ``fp32`` or ``bf16`` (autocast).
        chunk_size: positions per block in the full-vocabulary reductions.

    Returns:
        fp32 ``(n,)``: each step's JSD between the two views in nats, averaged over its response
        tokens; Long ``(n,)``: those token counts.
    """
    if len(steps) != len(supports):
        raise ValueError(f"steps, supports: lengths differ ({len(steps)}, {len(supports)})")
    responses = [s.response_ids for s in steps]
    t_max = max(len(z) for z in responses)
    k = supports[0].shape[-1]
    # padding positions get the distinct ids 0 .. K-1: masked out, but a valid support
    support = torch.arange(k).expand(len(steps), t_max, k).clone()  # (n, T, K)
    for i, ids in enumerate(supports):
        support[i, : ids.shape[0]] = ids
    targets = teacher_targets(
        module,
        steps,
        responses,
        support=support.to(device),
        ordinary=True,
        pad_id=pad_id,
        device=device,
        precision=precision,
        chunk_size=chunk_size,
    )
    return targets.scores.float().cpu(), targets.mask.sum(dim=1).cpu()


class SensitivityProbe:
    """The trainer's hook: the current student's PI sensitivity on the probe set (appendix D.3).

    Called with the number of updates done (0: the cycle start), it measures every probe step with
    the student's unwrapped module, without gradient, and keeps one row per step. Under data
    parallelism each rank takes a strided share of the steps, in as many micro-batches as every
    other rank (a rank with an empty micro-batch forwards one token: ZeRO-3 gathers parameters
    in every forward), and the shares are summed over ranks, so that every rank holds every row.

    Args:
        probe: the probe set.
        engine: the student's engine.
        pad_id: padding token id.
        micro_batch_steps: probe steps per forward on one rank.
        chunk_size: positions per block in the full-vocabulary reductions.
    """

    def __init__(
        self,
        probe: ProbeSet,
        engine: Engine,
        *,
        pad_id: int,
        micro_batch_steps: int,
        chunk_size: int | None = None,
    ) -> None:
        if micro_batch_steps < 1:
            raise ValueError(f"micro_batch_steps: must be >= 1, got {micro_batch_steps}")
        self.probe = probe
        self.engine = engine
        self.pad_id = pad_id
        self.chunk_size = chunk_size
        self._steps = probe.steps
        self._supports = [probe.support[(s.traj_id, s.t)] for s in self._steps]
        # this rank's strided share, longest first so that a micro-batch pads little
        share = range(engine.rank, len(self._steps), engine.world_size)
        mine = sorted(share, key=lambda i: -_length(self._steps[i]))
        largest_share = math.ceil(len(self._steps) / engine.world_size)
        count = max(1, math.ceil(largest_share / micro_batch_steps))
        self._parts = [p.tolist() for p in np.array_split(np.asarray(mine, dtype=int), count)]
        self._rows: list[tuple[int, str, int, float, int]] = []

    def __call__(self, updates: int) -> None:
        """Measure the student as it is after ``updates`` updates; a collective on every rank."""
        n = len(self._steps)
        jsd = torch.zeros(n, dtype=torch.float64)
        tokens = torch.zeros(n, dtype=torch.float64)
        engine = self.engine
        for part in self._parts:
            if not part:
                if engine.world_size > 1:
                    engine.idle_forward(self.pad_id, with_grad=False)
                continue
            values, counts = probe_sensitivity(
                engine.inner,
                [self._steps[i] for i in part],
                [self._supports[i] for i in part],
                pad_id=self.pad_id,
                device=engine.device,
                precision="fp32" if engine.casts_parameters else engine.precision,
                chunk_size=self.chunk_size,
            )
            jsd[part] = values.double()
            tokens[part] = counts.double()
        jsd, tokens = engine.sum_over_ranks(torch.stack([jsd, tokens]))  # (2, N): every row
        for step, value, count in zip(self._steps, jsd.tolist(), tokens.tolist(), strict=True):
            self._rows.append((updates, step.traj_id, step.t, value, int(count)))
        logger.info(
            "probe after %d update(s): PI sensitivity %.5g nats over %d response tokens",
            updates,
            float((jsd * tokens).sum() / tokens.sum()),
            int(tokens.sum()),
        )

    def frame(self) -> pd.DataFrame:
        """One row per (update, probe step) measured so far: ``update, traj_id, t, jsd, tokens``."""
        return probe_frame(self._rows)

    @property
    def rows(self) -> list[tuple[int, str, int, float, int]]:
        """The rows of :meth:`frame` as tuples, in the order measured."""
        return list(self._rows)

    def restore_rows(self, rows: list[tuple[int, str, int, float, int]]) -> None:
        """Start from ``rows`` measured by an earlier run of the same cycle (its snapshot)."""
        self._rows = [(int(u), str(traj), int(t), float(v), int(n)) for u, traj, t, v, n in rows]


def _length(step: StepExample) -> int:
    """Tokens of the step's longer branch (the privileged prompt) and its response."""
    return len(step.privileged_ids) + len(step.response_ids)
