"""One cycle of training (algorithm 1): responses, teacher scoring, selection, the method's loss, AdamW.

Each update takes the next trajectory batch ``B`` of the schedule and forms ``U`` from all their
steps, in a fixed order (trajectory position in ``B``, then ``t``). Under data parallelism every
rank takes a strided share of ``U``; the per-step weights of the loss are computed over the whole
of ``U`` on every rank (:func:`select`), so the sum of the ranks' weighted losses is exactly the
one-process loss and the engines' gradient average (times the world size) its gradient.

Per update:

1. **responses**: OEL samples one fresh ordinary-view response per step from the current student;
   offline SDPO reuses the response cached at cycle start (with its behaviour log-probs).
2. **scoring**: the current student's ordinary view gives the support (its top-``K`` ids at every
   response position) and the old-actor log-probs; the frozen teacher gives its privileged (and,
   for ReSAIL, ordinary) distributions on that support and the PI sensitivity of every step
   (:func:`~resail_pipeline.training.scoring.teacher_targets`).
3. **selection**: SGS over the whole of ``U`` from the gathered scores; TLB and retention
   weights per step (``objectives.select_steps`` and ``objectives.trajectory_weights``).
4. **optimisation**: ``l_dist`` (with SDPO's TIS weights on the token KLs) and ``l_ret`` per
   step, weighted and summed, backward, one AdamW step.

Steps 2-4 share one student forward whenever the weights do not wait for all scores (the parents,
selection ``none`` or ``random``) or the rank's share fits in one micro-batch: the student's
views (ordinary, and privileged for retention) are then packed over their shared prefix and kept
for backward. Otherwise scoring runs without gradient over all micro-batches first, and each
micro-batch is then recomputed with gradient for the views its weights need (the ordinary view
only at selected steps).
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor
from tqdm.auto import tqdm

from resail_pipeline.generation.base import derive_seed
from resail_pipeline.objectives import (
    DEFAULT_IS_CAP,
    ResailConfig,
    kl_divergence,
    masked_token_mean,
    select_steps,
    token_logprobs,
    topk_support,
    topk_tail_logprobs,
    trajectory_weights,
    truncated_is_weights,
)
from resail_pipeline.training.config import TrainConfig
from resail_pipeline.training.data import StepExample, TrainingData
from resail_pipeline.training.engine import Engine
from resail_pipeline.training.records import PhaseTimer, UpdateRecord
from resail_pipeline.training.scoring import TeacherTargets, step_seed, teacher_targets
from resail_pipeline.training.views import (
    ORDINARY,
    PRIVILEGED,
    ResponseLogits,
    ViewLogits,
    view_logits,
)

if TYPE_CHECKING:
    from resail_pipeline.training.snapshots import Snapshots

__all__ = ["Selection", "Trainer", "UpdateLoop", "select"]

logger = logging.getLogger(__name__)


# ----------------------------------------------------------------------------------------------
# selection and weights over the whole of U


@dataclass(frozen=True)
class Selection:
    """Which steps of ``U`` are distilled, and every step's loss coefficients.

    Attributes:
        chosen: Bool ``(N,)`` the selected steps (all of ``U`` with selection ``none``).
        w_sel: fp32 ``(N,)`` coefficient of ``l_dist``: TLB's ``1 / (|B| m_tau)``, or ``1 / K``
            without balancing; 0 off the selection.
        w_ret: fp32 ``(N,)`` coefficient of ``l_ret`` before ``lambda``: ``1 / (|B| |U(tau)|)``
            with retention, else 0.
    """

    chosen: Tensor
    w_sel: Tensor
    w_ret: Tensor


def select(
    objective: ResailConfig,
    traj_index: Tensor,
    num_trajectories: int,
    scores: Tensor | None = None,
    generator: torch.Generator | None = None,
) -> Selection:
    """SGS, TLB and the retention weights over ``U`` (paper eqs. 4, 5 and 7).

    ``sum_i w_sel_i l_dist_i + lambda sum_i w_ret_i l_ret_i`` equals
    ``objectives.resail_objective`` on the same per-step values; with ``ResailConfig.off()`` it
    is the parents' uniform mean over ``U``.

    Args:
        objective: the switches.
        traj_index: Long ``(N,)`` position in ``B`` of each step's trajectory.
        num_trajectories: ``|B|``.
        scores: ``(N,)`` sensitivity; required by selection ``top`` / ``bottom``.
        generator: random source of selection ``random`` (the same on every rank).
    """
    n = traj_index.shape[0]
    if objective.selection == "none":
        chosen = torch.ones(n, dtype=torch.bool)
    else:
        if objective.needs_scores and scores is None:
            raise ValueError(f"scores: selection {objective.selection!r} ranks steps by score")
        ranking = scores if scores is not None else torch.zeros(n)
        chosen = torch.zeros(n, dtype=torch.bool)
        chosen[select_steps(ranking.cpu(), objective.rho, objective.selection, generator)] = True
    if objective.balancing:
        w_sel = trajectory_weights(traj_index, chosen, num_trajectories)
    else:
        w_sel = chosen.to(torch.float32) / max(int(chosen.sum()), 1)
    if objective.uses_retention:
        w_ret = trajectory_weights(traj_index, torch.ones(n, dtype=torch.bool), num_trajectories)
    else:
        w_ret = torch.zeros(n)
    return Selection(chosen=chosen, w_sel=w_sel, w_ret=w_ret)


# ----------------------------------------------------------------------------------------------
# the loop


@dataclass
class _Scored:
    """A micro-batch after scoring: teacher targets and, when fused, the student's live views."""

    rows: list[int]
    targets: TeacherTargets
    old_logp: Tensor | None
    student: ViewLogits | None = None  # with its graph, until the micro-batch's backward


@dataclass
class _Sums:
    """This rank's shares of the logged sums of an update."""

    loss_sel: float = 0.0
    loss_ret: float = 0.0
    tokens: int = 0


class UpdateLoop:
    """The loop every method shares: one update per trajectory batch, logged, with a hook.

    A method implements :meth:`update`; the helpers split a rank's steps into micro-batches (the
    same number on every rank), run the idle forward of a rank without steps and sum over ranks.

    Args:
        config: the resolved configuration.
        data: the cycle's usable trajectories and steps.
        engine: the student's engine.
        tokenizer: the policy's tokenizer.
    """

    def __init__(
        self, config: TrainConfig, data: TrainingData, engine: Engine, tokenizer: Any
    ) -> None:
        self.config = config
        self.data = data
        self.engine = engine
        self.tokenizer = tokenizer
        self.pad_id = tokenizer.pad_token_id
        #: entered around each memory phase of an update, with its name: ``sampling`` (the fresh
        #: responses), ``training`` (the micro-batches' forwards and backwards, the teacher's
        #: scoring among them) and ``step`` (the optimiser step), the phases of the memory plan
        #: (:attr:`~resail_pipeline.training.memory.MemoryPlan.phases`); nothing by default, an
        #: instrument sets it to measure them (the GPU check's time and allocator peak per phase)
        self.memory_phase: Callable[[str], contextlib.AbstractContextManager[Any]] = _unmeasured

    def train(
        self,
        schedule: Sequence[tuple[str, ...]],
        after_update: Callable[[int], None] | None = None,
        snapshots: Snapshots | None = None,
    ) -> list[UpdateRecord]:
        """Run one update per batch of ``schedule``; returns the records (the same on every rank).

        Args:
            schedule: the trajectory batch of every update.
            after_update: a hook called on every rank with the number of updates done: 0 at the
                cycle start, then after every update (e.g. the PI-sensitivity probe). It runs
                outside the updates, so its time is in none of their cost categories.
            snapshots: the run's snapshots: the updates of the latest one are not run again (nor
                is the hook called for them), and one is taken after the hook as they ask.
        """
        start, records = (0, []) if snapshots is None else snapshots.restore()
        if after_update is not None and start == 0:
            after_update(0)
        bar = tqdm(
            range(start, len(schedule)),
            desc="train",
            initial=start,
            total=len(schedule),
            disable=self.engine.rank != 0,
        )
        for u in bar:
            record = self.update(u, schedule[u])
            records.append(record)
            logger.info(
                "update %d/%d: loss %.5g (sel %.5g, ret %.5g), |U| %d, K %d, grad norm %.3g, "
                "seconds %s%s",
                u + 1,
                len(schedule),
                record.loss,
                record.loss_sel,
                record.loss_ret,
                record.num_steps,
                record.num_selected,
                record.grad_norm,
                {k: round(v, 3) for k, v in record.seconds.items()},
                "".join(f", {k} {v:.4g}" for k, v in record.extra.items()),
            )
            if after_update is not None:
                after_update(u + 1)
            if snapshots is not None:
                snapshots.after_update(u + 1, records)
        return records

    def update(self, u: int, batch: tuple[str, ...]) -> UpdateRecord:
        """One update on trajectory batch ``batch``."""
        raise NotImplementedError

    def _batch_steps(self, batch: tuple[str, ...]) -> tuple[list[StepExample], Tensor, list[int]]:
        """``U`` in its fixed order, each step's position in ``B`` (Long ``(N,)``), this rank's share."""
        steps = [s for traj in batch for s in self.data.steps[traj]]
        traj_index = torch.tensor(
            [b for b, traj in enumerate(batch) for _ in self.data.steps[traj]], dtype=torch.long
        )
        mine = list(range(self.engine.rank, len(steps), self.engine.world_size))
        return steps, traj_index, mine

    def _split(self, mine: Sequence[int], lengths: Sequence[int], total: int) -> list[list[int]]:
        """This rank's rows ``mine`` in micro-batches of ``engine.micro_batch_steps``, sorted by
        ``lengths`` (indexed by row) so that a micro-batch pads little; every rank gets the same
        number of them (``total`` rows over all ranks)."""
        size = self.config.engine.micro_batch_steps
        largest_share = math.ceil(total / self.engine.world_size)
        count = 1 if size is None else max(1, math.ceil(largest_share / size))
        order = sorted(mine, key=lambda i: -lengths[i])
        return [part.tolist() for part in np.array_split(np.asarray(order, dtype=int), count)]

    def _step(self) -> float:
        """The optimiser step (:meth:`Engine.step`), as the ``step`` memory phase."""
        with self.memory_phase("step"):
            return self.engine.step()

    def _idle_forward(self) -> Tensor | None:
        """A zero loss from a one-token forward through the engine, for a rank without steps.

        DDP's and DeepSpeed's collectives are matched across ranks, so a rank with nothing to do
        in a micro-batch still runs a forward and a backward; one process needs neither.
        """
        if self.engine.world_size == 1:
            return None
        return self.engine.idle_forward(self.pad_id, with_grad=True)

    def _all_reduce(self, values: list[float]) -> list[float]:
        """Sums over ranks, in fp64."""
        return self.engine.sum_over_ranks(torch.tensor(values, dtype=torch.float64)).tolist()


class Trainer(UpdateLoop):
    """The distillation methods' updates (OEL, offline SDPO and their ReSAIL versions) on one rank.

    Args:
        config: the resolved configuration.
        data: the cycle's usable trajectories and steps.
        engine: the student's engine.
        teacher: the frozen teacher (cycle-start policy) in a :class:`ResponseLogits`.
        tokenizer: the policy's tokenizer.
        generator: samples OEL's fresh responses from the live student (``None`` for SDPO).
    """

    def __init__(
        self,
        config: TrainConfig,
        data: TrainingData,
        engine: Engine,
        teacher: ResponseLogits,
        tokenizer: Any,
        generator: Any | None = None,
    ) -> None:
        if not config.distills:
            raise ValueError(f"method: {config.method!r} does not distil; see make_trainer")
        if config.samples_responses and generator is None:
            raise ValueError(f"generator: method {config.method!r} samples fresh responses")
        super().__init__(config, data, engine, tokenizer)
        self.teacher = teacher.eval().requires_grad_(False)
        self.generator = generator
        self.objective = config.objective()
        self._retain = self.objective.retention if self.objective.uses_retention else "none"
        # the teacher's ordinary view: for selection, ordinary retention, and ReSAIL's logged scores
        self._teacher_ordinary = (
            config.uses_resail or self.objective.needs_scores or self._retain == "ordinary"
        )

    def update(self, u: int, batch: tuple[str, ...]) -> UpdateRecord:
        """One update of algorithm 1 on trajectory batch ``batch``."""
        timer = PhaseTimer(self.engine.device)
        start = timer.now()
        with timer("other"):
            steps, traj_index, mine = self._batch_steps(batch)  # U, in a fixed order
        with timer("response"), self.memory_phase("sampling"):
            responses = self._responses(u, steps, mine)
        with timer("other"):
            parts = self._micro_batches(steps, mine, responses)
        with self.memory_phase("training"):
            selection, scores, sums = self._accumulate(
                u, steps, traj_index, len(batch), parts, responses, timer
            )

        with timer("optimisation"):
            totals = self._all_reduce([sums.loss_sel, sums.loss_ret, float(sums.tokens)])
            loss_sel, loss_ret, tokens = totals
            loss = loss_sel + self.objective.lam * loss_ret
            if not math.isfinite(loss):
                raise FloatingPointError(
                    f"update {u + 1}: the loss is not finite ({loss}); L_sel {loss_sel}, "
                    f"L_ret {loss_ret}"
                )
            grad_norm = self._step()

        with timer("other"):
            chosen = selection.chosen.nonzero().flatten().tolist()
            score_list = scores.tolist() if scores is not None else [math.nan] * len(steps)
            per_traj = torch.bincount(traj_index[selection.chosen], minlength=len(batch))
        return UpdateRecord(
            update=u,
            loss=loss,
            loss_sel=loss_sel,
            loss_ret=loss_ret if self.objective.uses_retention else 0.0,
            num_trajectories=len(batch),
            num_steps=len(steps),
            num_selected=len(chosen),
            selected_per_traj=per_traj.tolist(),
            score_selected_mean=_mean([score_list[i] for i in chosen]),
            score_all_mean=_mean(score_list),
            tokens=int(tokens),
            grad_norm=grad_norm,
            seconds=timer.breakdown(timer.now() - start),
            selected=[(steps[i].traj_id, steps[i].t, score_list[i]) for i in chosen],
        )

    # ------------------------------------------------------------------------------------------
    # responses and micro-batches

    def _responses(
        self, u: int, steps: Sequence[StepExample], mine: Sequence[int]
    ) -> dict[int, tuple[tuple[int, ...], tuple[float, ...]]]:
        """``step index -> (response ids, behaviour log-probs)`` for this rank's steps."""
        if self.config.uses_cached_responses:
            return {i: (steps[i].response_ids, steps[i].behaviour_logprobs) for i in mine}
        self.engine.sync_sampling_model()  # every rank, whatever its share (ZeRO-3: a collective)
        if not mine:
            return {}
        seed = self.config.schedule.seed
        params = self.config.responses.sampling_params(seed=seed)
        # one seed per step and update (overriding params.seed): a step's sample does not
        # depend on the sharding or on the other steps
        seeds = [step_seed(seed, steps[i].traj_id, steps[i].t, u) for i in mine]
        generations = self.generator.generate([steps[i].prompt for i in mine], params, seeds=seeds)
        return {i: (tuple(g.token_ids), ()) for i, g in zip(mine, generations, strict=True)}

    def _micro_batches(
        self, steps: Sequence[StepExample], mine: Sequence[int], responses: dict
    ) -> list[list[int]]:
        """This rank's steps in micro-batches; every rank gets the same number of them."""
        lengths = {i: len(steps[i].privileged_ids) + len(responses[i][0]) for i in mine}
        return self._split(mine, lengths, len(steps))

    # ------------------------------------------------------------------------------------------
    # scoring, selection, loss

    def _accumulate(
        self,
        u: int,
        steps: Sequence[StepExample],
        traj_index: Tensor,
        num_trajectories: int,
        parts: list[list[int]],
        responses: dict,
        timer: PhaseTimer,
    ) -> tuple[Selection, Tensor | None, _Sums]:
        """Score, select and accumulate this rank's gradient; returns selection, scores, sums."""
        objective = self.objective
        random = torch.Generator().manual_seed(derive_seed(self.config.schedule.seed, u, 1))
        selection = None
        if not objective.needs_scores:
            with timer("scoring"):
                selection = select(objective, traj_index, num_trajectories, None, random)
        fused = not objective.needs_scores or len(parts) == 1
        local_scores = torch.zeros(len(steps))
        scores = None
        sums = _Sums()
        scored: list[_Scored] = []
        for k, part in enumerate(parts):
            with (
                self.engine.micro_batch(last=k == len(parts) - 1)
                if fused
                else contextlib.nullcontext()
            ):
                state = self._score(part, steps, responses, timer, with_grad=fused)
                if state is not None and state.targets.scores is not None:
                    local_scores[state.rows] = state.targets.scores.float().cpu()
                if not fused:
                    if state is None and self.engine.world_size > 1:
                        # the others forward the student without gradient (ZeRO-3 gathers)
                        with timer("scoring"):
                            self.engine.idle_forward(self.pad_id, with_grad=False)
                    scored.append(state)
                    continue
                # a rank without steps forwards where the others do (DDP's forward may communicate)
                idle = self._idle_forward() if state is None else None
                if selection is None:  # needs_scores with one micro-batch: gather now
                    with timer("scoring"):
                        scores = self.engine.sum_over_ranks(local_scores)
                        selection = select(objective, traj_index, num_trajectories, scores, random)
                with timer("optimisation"):
                    self._backward(state, responses, selection, sums, idle)

        if self._teacher_ordinary and scores is None:
            with timer("scoring"):
                scores = self.engine.sum_over_ranks(local_scores)
        if not fused:
            with timer("scoring"):
                selection = select(objective, traj_index, num_trajectories, scores, random)
            for k, state in enumerate(scored):
                with self.engine.micro_batch(last=k == len(scored) - 1), timer("optimisation"):
                    idle = None
                    if state is not None:
                        state.student = self._student_views(
                            state.rows, steps, responses, selection, with_grad=True
                        )
                    if state is None or not state.student.logits:
                        idle = self._idle_forward()
                    self._backward(state, responses, selection, sums, idle)
        return selection, scores, sums

    def _views(self, rows: Sequence[int], selection: Selection | None) -> list[tuple[str, ...]]:
        """The student views each row needs: all of them when fused (``selection`` ``None``)."""
        views = []
        for i in rows:
            ordinary = selection is None or bool(selection.chosen[i]) or self._retain == "ordinary"
            view = ((ORDINARY,) if ordinary else ()) + (
                (PRIVILEGED,) if self._retain == "privileged" else ()
            )
            views.append(view)
        return views

    def _student_views(
        self,
        rows: Sequence[int],
        steps: Sequence[StepExample],
        responses: dict,
        selection: Selection | None,
        *,
        with_grad: bool,
    ) -> ViewLogits:
        """The student's response logits for ``rows``: with gradient through the engine, or not."""
        module = self.engine.module if with_grad else self.engine.inner
        views = self._views(rows, selection) if with_grad else [(ORDINARY,)] * len(rows)
        with torch.set_grad_enabled(with_grad), self.engine.autocast():
            return view_logits(
                module,
                [steps[i] for i in rows],
                [responses[i][0] for i in rows],
                views,
                pad_id=self.pad_id,
                device=self.engine.device,
            )

    def _score(
        self,
        rows: list[int],
        steps: Sequence[StepExample],
        responses: dict,
        timer: PhaseTimer,
        *,
        with_grad: bool,
    ) -> _Scored | None:
        """The student's support (and, fused, its live views) and the teacher's targets."""
        if not rows:
            return None
        chunk = self.config.engine.chunk_size
        with timer("optimisation" if with_grad else "scoring"):
            student = self._student_views(rows, steps, responses, None, with_grad=with_grad)
            ordinary = student.logits[ORDINARY].detach()  # (n, T, V)
            support = topk_support(ordinary, self.objective.top_k, chunk)  # (n, T, K)
            old_logp = None
            if self.config.uses_cached_responses:
                # the old actor is the student at the start of this update
                old_logp = token_logprobs(ordinary, student.response_ids, chunk)  # (n, T)
        with timer("scoring"):
            targets = teacher_targets(
                self.teacher,
                [steps[i] for i in rows],
                [responses[i][0] for i in rows],
                support=support,
                ordinary=self._teacher_ordinary,
                pad_id=self.pad_id,
                device=self.engine.device,
                precision="fp32" if self.engine.casts_parameters else self.engine.precision,
                chunk_size=chunk,
            )
        return _Scored(
            rows=rows, targets=targets, old_logp=old_logp, student=student if with_grad else None
        )

    def _backward(
        self,
        state: _Scored | None,
        responses: dict,
        selection: Selection,
        sums: _Sums,
        idle: Tensor | None,
    ) -> None:
        """This micro-batch's weighted loss, scaled to the engines' gradient average, backward.

        ``idle`` is the zero loss of :meth:`_idle_forward` when the micro-batch has no step (or
        no step with weight) on this rank.
        """
        if state is not None:
            sums.tokens += int(state.targets.mask.sum())
        if state is None or not state.student.logits:
            if idle is not None:
                self.engine.backward(idle)
            return
        loss_sel, loss_ret = self._micro_batch_loss(state, responses, selection)
        loss = loss_sel + self.objective.lam * loss_ret
        sums.loss_sel += float(loss_sel.detach())
        sums.loss_ret += float(loss_ret.detach())
        self.engine.backward(loss * self.engine.world_size)
        state.student = None  # free the graph

    def _micro_batch_loss(
        self, state: _Scored, responses: dict, selection: Selection
    ) -> tuple[Tensor, Tensor]:
        """``(sum_i w_sel_i l_dist_i, sum_i w_ret_i l_ret_i)`` over the micro-batch's rows."""
        chunk = self.config.engine.chunk_size
        targets, student = state.targets, state.student
        rows = torch.tensor(state.rows, dtype=torch.long)
        device = self.engine.device
        w_sel = selection.w_sel[rows].to(device)  # (n,)
        w_ret = selection.w_ret[rows].to(device)  # (n,)
        zero = torch.zeros((), device=device)
        loss_sel, loss_ret = zero, zero

        if ORDINARY in student.logits:
            r = student.rows[ORDINARY]  # rows of the micro-batch with the ordinary view
            logits = student.logits[ORDINARY]  # (n_o, T, V)
            needed = w_sel[r] > 0
            if self._retain == "ordinary":
                needed = torch.ones_like(needed)
            if bool(needed.any()):
                if not bool(needed.all()):
                    logits, r = logits[needed], r[needed]  # (n_d, T, V), (n_d,)
                mask = targets.mask[r]  # (n_d, T)
                s_ord = topk_tail_logprobs(logits, targets.support[r], chunk)  # (n_d, T, K+1)
                kl = kl_divergence(s_ord, targets.privileged[r])  # (n_d, T)
                if self.config.uses_cached_responses:
                    behaviour = _pad_rows([responses[state.rows[i]][1] for i in r.tolist()], mask)
                    current = token_logprobs(logits.detach(), student.response_ids[r], chunk)
                    kl = kl * truncated_is_weights(
                        current, state.old_logp[r], behaviour, DEFAULT_IS_CAP
                    )
                loss_sel = (w_sel[r] * masked_token_mean(kl, mask)).sum()
                if self._retain == "ordinary":
                    l_ret = masked_token_mean(kl_divergence(s_ord, targets.ordinary[r]), mask)
                    loss_ret = (w_ret[r] * l_ret).sum()
        if PRIVILEGED in student.logits:
            r = student.rows[PRIVILEGED]
            s_priv = topk_tail_logprobs(
                student.logits[PRIVILEGED], targets.support[r], chunk
            )  # (n_p, T, K+1)
            l_ret = masked_token_mean(kl_divergence(s_priv, targets.privileged[r]), targets.mask[r])
            loss_ret = (w_ret[r] * l_ret).sum()
        if not loss_sel.requires_grad and not loss_ret.requires_grad:
            # no row carries weight: keep the graph so that every rank runs a backward
            loss_sel = loss_sel + _graph_zero(student)
        return loss_sel, loss_ret


def _unmeasured(phase: str) -> contextlib.AbstractContextManager[None]:
    """:attr:`UpdateLoop.memory_phase` where nothing measures the phases."""
    return contextlib.nullcontext()


def _pad_rows(rows: Sequence[Sequence[float]], mask: Tensor) -> Tensor:
    """``(n, T)`` fp32 from ragged rows (0 at padding)."""
    out = torch.zeros(mask.shape, dtype=torch.float32)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row[: mask.shape[1]], dtype=torch.float32)
    return out.to(mask.device)


def _graph_zero(student: ViewLogits) -> Tensor:
    """0, attached to the student's graph."""
    logits = next(iter(student.logits.values()))
    return logits.float().sum() * 0.0


def _mean(values: Sequence[float]) -> float:
    """The mean; NaN for no values or where a value is unknown (NaN)."""
    if not values or any(math.isnan(v) for v in values):
        return math.nan
    return float(np.mean(values))
