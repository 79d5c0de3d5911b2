"""Invariants of the training path on a tiny random Qwen3, each one a property that a defect would
break: a zero loss moves nothing, cross-entropy sees exactly the response and its end token, and
GRPO without a reward difference has nothing to follow.

The comparisons of student and teacher below are bit-exact on purpose: both run the same weights
on the same token ids in the same layout, so every kernel sees the same shapes and rounds the same
way on any processor; what the tests hold is that nothing between those logits and the weights
turns rounding into a step.
"""

from __future__ import annotations

import pytest
import torch

from resail_pipeline.generation.decoder import can_compile
from resail_pipeline.packing import PADDING
from resail_pipeline.training import data as training_data
from resail_pipeline.training.run import TrainingRun

from .test_baselines import ScriptedGenerator
from .test_trainer import weights


@pytest.fixture()
def no_summary(monkeypatch):
    """The privileged prompt made equal to the ordinary one: the summary removed."""
    monkeypatch.setattr(training_data, "add_privileged", lambda prompt, summary: prompt)


@pytest.mark.parametrize(
    ("method", "compiled"),
    [("oel", False), ("sdpo", False), ("oel_resail", False), ("sdpo_resail", False), ("oel", True)],
)
def test_a_zero_loss_leaves_every_weight_bit_identical(
    method, compiled, no_summary, make_config, sharp_checkpoint
):
    """Compiled, the student's forward (with autograd) and the teacher's (without) are two graphs
    of the same functions; they must still round alike."""
    if compiled and not can_compile(torch.device("cpu")):
        pytest.skip("no C++ compiler for torch.compile here")
    # weight decay off: decoupled decay moves weights whatever the loss
    config = make_config(
        method=method, schedule={"updates": 1, "trajectories_per_update": 3}, compile=compiled
    )
    run = TrainingRun(config)
    step = run.data.steps[run.data.trajectories[0]][0]
    assert step.privileged_ids == step.ordinary_ids
    outcome = run.run()
    metrics = outcome.metrics
    assert metrics["loss"].tolist() == [0.0]
    assert metrics["loss_sel"].tolist() == [0.0] and metrics["loss_ret"].tolist() == [0.0]
    assert metrics["grad_norm"].tolist() == [0.0]
    start, after = weights(sharp_checkpoint), weights(config.run.checkpoint)
    changed = [k for k in start if not torch.equal(start[k], after[k])]
    assert changed == []


def test_a_zero_loss_with_the_old_kl_backward_would_move_the_weights(
    no_summary, make_config, sharp_checkpoint
):
    """The test above can fail: autograd's KL backward (``p (log p - log q + 1)``) on the same
    inputs leaves a rounding gradient that AdamW turns into steps."""

    def autograd_kl(logp, logq):
        support = logp > float("-inf")
        zero = torch.zeros((), dtype=logp.dtype)
        lp, lq = torch.where(support, logp, zero), torch.where(support, logq, zero)
        return torch.where(support, lp.exp() * (lp - lq), zero).sum(-1)

    config = make_config(method="oel", schedule={"updates": 1, "trajectories_per_update": 3})
    run = TrainingRun(config)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("resail_pipeline.training.trainer.kl_divergence", autograd_kl)
        outcome = run.run()
    assert outcome.metrics["loss"].tolist() == [0.0]
    assert outcome.metrics["grad_norm"][0] > 0
    start, after = weights(sharp_checkpoint), weights(config.run.checkpoint)
    assert any(not torch.equal(start[k], after[k]) for k in start)


class _PositionGradients:
    """Records each forward's input ids and segments and the gradient of the decoder's last
    hidden states (the functional forward's: the rows' tokens without padding, one after the
    other)."""

    def __init__(self, response_logits) -> None:
        self.inputs: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.hidden: list[torch.Tensor] = []
        response_logits.register_forward_pre_hook(self._inputs)
        response_logits.model.get_decoder().norm.register_forward_hook(self._hidden)

    def _inputs(self, module, args):
        self.inputs.append((args[0].detach().clone(), args[1].detach().clone()))  # (R, L) each

    def _hidden(self, module, args, output):
        if output.requires_grad:
            output.retain_grad()
            self.hidden.append(output)  # (N, H)


@pytest.mark.parametrize("method", ["rft", "epd"])
def test_cross_entropy_covers_the_response_and_its_end_token_and_nothing_else(
    method, make_config, tiny_tokenizer
):
    config = make_config(
        method=method,
        schedule={"updates": 1, "trajectories_per_update": 2},
        responses={"max_tokens": 64},  # RFT's logged responses whole, with their end token
    )
    run = TrainingRun(config)
    record = _PositionGradients(run.trainer.engine.inner)
    batch = run.schedule[0]
    steps = [s for traj in batch for s in run.data.steps[traj]]
    outcome = run.run()
    if method == "rft":  # the logged response is followed by the end token
        assert all(s.response_ids[-1] == tiny_tokenizer.eos_token_id for s in steps)
    assert outcome.metrics["tokens"].tolist() == [sum(len(s.response_ids) for s in steps)]

    ((input_ids, segment),), (hidden,) = record.inputs, record.hidden
    moved = torch.zeros(segment.shape, dtype=torch.bool)  # (R, L): outputs that reached the loss
    moved[segment != PADDING] = hidden.grad.abs().sum(-1) > 0
    assert input_ids.shape[0] == len(steps)
    for row, ids in zip(moved, input_ids.tolist(), strict=True):
        # the row is one step's prompt followed by its response
        step = next(
            s
            for s in steps
            if ids[: len(s.ordinary_ids) + len(s.response_ids)]
            == [*s.ordinary_ids, *s.response_ids]
        )
        n, z = len(step.ordinary_ids), step.response_ids
        # by hand: position p predicts token p + 1, so the loss sees positions n-1 .. n+|z|-2,
        # the last of them predicting the final response token (the end token for RFT)
        expected = torch.zeros_like(row)
        expected[n - 1 : n - 1 + len(z)] = True
        assert torch.equal(row, expected), (step.traj_id, step.t)


def test_grpo_with_equal_rewards_in_every_group_leaves_the_weights(
    make_config, tiny_tokenizer, sharp_checkpoint
):
    # every sample of every group writes the logged action: reward 1 everywhere, advantage 0
    texts = ["<action>get 1 oak logs</action>"] * 2 + ["<action> get 1 oak logs </action>"] * 2
    config = make_config(method="grpo", grpo={"samples": 4}, schedule={"updates": 1})
    run = TrainingRun(config)
    run.trainer.generator = ScriptedGenerator(tiny_tokenizer, texts)
    outcome = run.run()
    metrics = outcome.metrics
    assert metrics["reward_mean"].tolist() == [1.0]
    assert metrics["loss"].tolist() == [0.0] and metrics["kl"].tolist() == [0.0]
    assert metrics["grad_norm"].tolist() == [0.0]
    start, after = weights(sharp_checkpoint), weights(config.run.checkpoint)
    assert all(torch.equal(start[k], after[k]) for k in start)
