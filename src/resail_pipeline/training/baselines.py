"""The baselines' updates (appendix B.4, table 7): RFT and EPD by cross-entropy, offline GRPO.

All three train the ordinary view on fixed logged histories, without new environment actions:

- **RFT** fits the successful logged responses (the schedule draws from the successful
  trajectories only, with more passes over them where the update budget asks for more);
- **EPD** fits the responses the frozen cycle-start teacher wrote in the privileged view, cached at
  cycle start (``respond``, like offline SDPO's cache);
- **GRPO** samples a group of responses from the current student at every successful logged step,
  rewards each by exact match of its action with the logged one, and takes verl's clipped
  surrogate on the group-normalised advantages with ``low_var_kl`` to the frozen initial policy.

Per-token terms are averaged over all valid response tokens of the update ("token-mean"): each
micro-batch's mean is weighted by its share of the update's tokens, so micro-batching and data
parallelism change nothing but the cost. (The distillation methods weight per step instead: a
token-mean per response, then ``1/|U|`` or ReSAIL's balancing weights, eqs. 1-2, 5 and 7.)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from resail_pipeline.objectives import cross_entropy_loss, group_advantages, grpo_loss
from resail_pipeline.objectives.divergences import token_logprobs
from resail_pipeline.prompts import parse_action
from resail_pipeline.training.data import StepExample
from resail_pipeline.training.records import PhaseTimer, UpdateRecord
from resail_pipeline.training.scoring import step_seed
from resail_pipeline.training.trainer import UpdateLoop
from resail_pipeline.training.views import ORDINARY, ResponseLogits, view_logits

__all__ = ["CrossEntropyTrainer", "GrpoTrainer", "action_reward", "normalise_action"]


def normalise_action(action: str) -> str:
    """An action compared by type and arguments: case-folded, whitespace collapsed."""
    return " ".join(action.casefold().split())


def action_reward(response: str, logged_action: str) -> float:
    """GRPO's reward: 1 if the response's action equals the logged one (after
    :func:`normalise_action`), else 0, including an unparsable response; reasoning is ignored."""
    action = parse_action(response).action
    if action is None or not logged_action.strip():
        return 0.0
    return float(normalise_action(action) == normalise_action(logged_action))


class _OrdinaryLikelihood(UpdateLoop):
    """What the baselines share: the student's ordinary-view logits on chosen responses."""

    def _student(
        self, steps: Sequence[StepExample], responses: Sequence[Sequence[int]], module=None
    ):
        """The ordinary-view response logits of ``steps`` (with gradient through the engine, or
        without through ``module``)."""
        with torch.set_grad_enabled(module is None), self.engine.autocast():
            return view_logits(
                module if module is not None else self.engine.module,
                steps,
                responses,
                [(ORDINARY,)] * len(steps),
                pad_id=self.pad_id,
                device=self.engine.device,
            )

    def _record(
        self,
        u: int,
        batch: tuple[str, ...],
        steps: Sequence[StepExample],
        traj_index: Tensor,
        loss: float,
        tokens: int,
        grad_norm: float,
        timer: PhaseTimer,
        start: float,
        extra: dict[str, float] | None = None,
    ) -> UpdateRecord:
        """Every step of ``U`` is trained on: all of them count as selected, without a score."""
        return UpdateRecord(
            update=u,
            loss=loss,
            loss_sel=loss,
            loss_ret=0.0,
            num_trajectories=len(batch),
            num_steps=len(steps),
            num_selected=len(steps),
            selected_per_traj=torch.bincount(traj_index, minlength=len(batch)).tolist(),
            score_selected_mean=math.nan,
            score_all_mean=math.nan,
            tokens=tokens,
            grad_norm=grad_norm,
            seconds=timer.breakdown(timer.now() - start),
            selected=[(s.traj_id, s.t, math.nan) for s in steps],
            extra=extra or {},
        )

    def _check_finite(self, u: int, loss: float) -> None:
        if not math.isfinite(loss):
            raise FloatingPointError(f"update {u + 1}: the loss is not finite ({loss})")


class CrossEntropyTrainer(_OrdinaryLikelihood):
    """RFT and EPD: token-mean cross-entropy of each step's fixed response, ordinary view.

    The response is ``StepExample.response_ids``: the logged one with its end token (RFT) or the
    teacher's cached privileged response (EPD).
    """

    def update(self, u: int, batch: tuple[str, ...]) -> UpdateRecord:
        timer = PhaseTimer(self.engine.device)
        start = timer.now()
        with timer("other"):
            steps, traj_index, mine = self._batch_steps(batch)
            total_tokens = max(sum(len(s.response_ids) for s in steps), 1)  # known on every rank
            lengths = {i: len(steps[i].ordinary_ids) + len(steps[i].response_ids) for i in mine}
            parts = self._split(mine, lengths, len(steps))
        loss_sum = 0.0
        with self.memory_phase("training"):
            for k, part in enumerate(parts):
                with self.engine.micro_batch(last=k == len(parts) - 1), timer("optimisation"):
                    if not part:
                        idle = self._idle_forward()
                        if idle is not None:
                            self.engine.backward(idle)
                        continue
                    out = self._student(
                        [steps[i] for i in part], [steps[i].response_ids for i in part]
                    )
                    mean = cross_entropy_loss(
                        out.logits[ORDINARY],
                        out.response_ids,
                        out.mask,
                        self.config.engine.chunk_size,
                    )
                    loss = mean * (int(out.mask.sum()) / total_tokens)
                    loss_sum += float(loss.detach())
                    self.engine.backward(loss * self.engine.world_size)
        with timer("optimisation"):
            (loss,) = self._all_reduce([loss_sum])
            self._check_finite(u, loss)
            grad_norm = self._step()
        return self._record(
            u, batch, steps, traj_index, loss, total_tokens, grad_norm, timer, start
        )


class GrpoTrainer(_OrdinaryLikelihood):
    """Offline GRPO (appendix B.4): groups sampled at every successful logged step.

    Args:
        config, data, engine, tokenizer: as for every method (:class:`UpdateLoop`).
        reference: the frozen initial policy in a :class:`ResponseLogits` (``low_var_kl``).
        generator: samples the groups from the live student.
    """

    def __init__(self, config, data, engine, tokenizer, reference: ResponseLogits, generator):
        super().__init__(config, data, engine, tokenizer)
        if generator is None:
            raise ValueError("generator: GRPO samples its groups from the current student")
        self.reference = reference.eval().requires_grad_(False)
        self.generator = generator

    def _groups(
        self, u: int, steps: Sequence[StepExample], mine: Sequence[int]
    ) -> tuple[list[tuple[int, tuple[int, ...]]], Tensor, Tensor]:
        """This rank's sampled rows ``(step index, response ids)``, their rewards and advantages
        (fp32 ``(R,)`` each, ``R = len(mine) * samples``)."""
        group = self.config.grpo.samples
        self.engine.sync_sampling_model()  # every rank, whatever its share (ZeRO-3: a collective)
        if not mine:
            return [], torch.zeros(0), torch.zeros(0)
        params = self.config.responses.sampling_params(self.config.schedule.seed).replace(n=group)
        seeds = [
            step_seed(self.config.schedule.seed, steps[i].traj_id, steps[i].t, u) for i in mine
        ]
        generations = self.generator.generate([steps[i].prompt for i in mine], params, seeds=seeds)
        rows, rewards = [], []
        for k, i in enumerate(mine):
            for g in generations[k * group : (k + 1) * group]:
                rows.append((i, tuple(g.token_ids)))
                rewards.append(action_reward(g.text, steps[i].action))
        reward = torch.tensor(rewards, dtype=torch.float32)
        advantages = group_advantages(reward.view(len(mine), group)).flatten()
        return rows, reward, advantages

    def update(self, u: int, batch: tuple[str, ...]) -> UpdateRecord:
        timer = PhaseTimer(self.engine.device)
        start = timer.now()
        grpo = self.config.grpo
        with timer("other"):
            steps, traj_index, mine = self._batch_steps(batch)
        with timer("response"), self.memory_phase("sampling"):
            rows, rewards, advantages = self._groups(u, steps, mine)
        with timer("other"):
            local = [float(sum(len(z) for _, z in rows)), float(rewards.sum()), float(len(rows))]
            total_tokens, reward_sum, num_rows = self._all_reduce(local)
            total_tokens = max(total_tokens, 1.0)
            lengths = [len(steps[i].ordinary_ids) + len(z) for i, z in rows]
            # the largest rank's share of rows, times the world size: the same count on every rank
            world = self.engine.world_size
            largest = math.ceil(len(steps) / world) * grpo.samples
            parts = self._split(range(len(rows)), lengths, largest * world)
        sums = {"loss": 0.0, "pg": 0.0, "kl": 0.0, "clipped": 0.0}
        with self.memory_phase("training"):
            for k, part in enumerate(parts):
                with self.engine.micro_batch(last=k == len(parts) - 1):
                    if not part:
                        with timer("optimisation"):
                            idle = self._idle_forward()
                            if idle is not None:
                                self.engine.backward(idle)
                        continue
                    part_steps = [steps[rows[r][0]] for r in part]
                    part_responses = [rows[r][1] for r in part]
                    chunk = self.config.engine.chunk_size
                    with timer("scoring"):
                        ref = self._student(part_steps, part_responses, module=self.reference)
                        ref_logp = token_logprobs(ref.logits[ORDINARY], ref.response_ids, chunk)
                    with timer("optimisation"):
                        out = self._student(part_steps, part_responses)
                        # (n, T)
                        logp = token_logprobs(out.logits[ORDINARY], out.response_ids, chunk)
                        # one optimiser step per update: the sampling policy is the student itself
                        terms = grpo_loss(
                            logp,
                            logp.detach(),
                            ref_logp,
                            advantages[part].to(logp.device),
                            out.mask,
                            clip_low=grpo.clip_low,
                            clip_high=grpo.clip_high,
                            beta=grpo.kl_beta,
                        )
                        share = int(out.mask.sum()) / total_tokens
                        sums["loss"] += float(terms.loss.detach()) * share
                        sums["pg"] += float(terms.pg_loss.detach()) * share
                        sums["kl"] += float(terms.kl.detach()) * share
                        sums["clipped"] += terms.clip_fraction * share
                        self.engine.backward(terms.loss * share * self.engine.world_size)
        with timer("optimisation"):
            loss, pg, kl, clipped = self._all_reduce(list(sums.values()))
            self._check_finite(u, loss)
            grad_norm = self._step()
        extra = {
            "reward_mean": reward_sum / max(num_rows, 1.0),
            "pg_loss": pg,
            "kl": kl,
            "clip_fraction": clipped,
        }
        return self._record(
            u, batch, steps, traj_index, loss, int(total_tokens), grad_norm, timer, start, extra
        )
