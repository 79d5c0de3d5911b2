"""Cross-entropy (RFT, EPD) and offline GRPO."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from resail_pipeline.objectives import cross_entropy_loss, group_advantages, grpo_loss, low_var_kl


def test_cross_entropy_is_the_mean_token_nll_over_valid_tokens():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 4, 10, generator=gen, requires_grad=True)
    targets = torch.tensor([[3, 1, 4, -100], [5, 9, -100, -100]])
    mask = targets >= 0
    loss = cross_entropy_loss(logits, targets, mask, chunk_size=3)
    expected = F.cross_entropy(
        logits.detach().reshape(-1, 10), targets.reshape(-1), ignore_index=-100
    )
    torch.testing.assert_close(loss, expected, atol=1e-6, rtol=0)
    loss.backward()
    assert (logits.grad[~mask] == 0).all() and torch.isfinite(logits.grad).all()
    assert torch.equal(targets[0, 3], torch.tensor(-100))  # the input is not modified


def test_cross_entropy_of_an_empty_mask_is_zero_and_bf16_works():
    logits = torch.randn(2, 3, 6).to(torch.bfloat16).requires_grad_()
    targets = torch.zeros(2, 3, dtype=torch.long)
    loss = cross_entropy_loss(logits, targets, torch.zeros(2, 3, dtype=torch.bool))
    loss.backward()
    assert loss.item() == 0.0 and (logits.grad == 0).all()
    full = cross_entropy_loss(logits.detach(), targets, torch.ones(2, 3, dtype=torch.bool))
    expected = F.cross_entropy(logits.detach().float().reshape(-1, 6), targets.reshape(-1))
    torch.testing.assert_close(full, expected, atol=1e-6, rtol=0)


def test_group_advantages_use_the_sample_sd():
    rewards = torch.tensor([[1.0, 0, 0, 0, 1, 0, 0, 0], [1.0, 1, 1, 1, 1, 1, 1, 1]])
    adv = group_advantages(rewards)
    sd = math.sqrt((2 * 0.75**2 + 6 * 0.25**2) / 7)  # n - 1 = 7
    torch.testing.assert_close(adv[0, 0], torch.tensor(0.75 / (sd + 1e-6)))
    torch.testing.assert_close(adv[0, 1], torch.tensor(-0.25 / (sd + 1e-6)))
    assert torch.equal(adv[1], torch.zeros(8))  # equal rewards: no signal
    with pytest.raises(ValueError, match="rewards"):
        group_advantages(torch.ones(3, 1))


def test_low_var_kl_values_and_clamp():
    logp = torch.zeros(4)
    ref = torch.tensor([0.0, 1.0, -1.0, 5.0])
    expected = torch.tensor([0.0, math.e - 2.0, math.exp(-1.0), 10.0])  # e^5 - 6 clamps to 10
    torch.testing.assert_close(low_var_kl(logp, ref), expected)


def test_grpo_clips_the_ratio_to_the_asymmetric_range():
    # four tokens, one per sample: (A, ratio) = (+1, 1.5), (+1, 0.5), (-1, 0.5), (-1, 1.5)
    old = torch.zeros(4, 1)
    logp = torch.tensor([[math.log(1.5)], [math.log(0.5)], [math.log(0.5)], [math.log(1.5)]])
    logp.requires_grad_()
    adv = torch.tensor([1.0, 1.0, -1.0, -1.0])
    mask = torch.ones(4, 1, dtype=torch.bool)
    terms = grpo_loss(logp, old, logp.detach(), adv, mask, beta=0.0)
    per_token = torch.tensor([-1.28, -0.5, 0.8, 1.5])  # clipped, unclipped, clipped, unclipped
    torch.testing.assert_close(terms.pg_loss, per_token.mean())
    assert terms.clip_fraction == 0.5
    terms.loss.backward()
    # clipped tokens get no gradient; unclipped ones get -A * ratio / 4
    torch.testing.assert_close(logp.grad.squeeze(1), torch.tensor([0.0, -0.5, 0.0, 1.5]) / 4)


def test_grpo_adds_the_reference_kl_with_beta_and_masks_padding():
    logp = torch.tensor([[0.0, -1.0, 7.0]], requires_grad=True)
    old = logp.detach().clone()
    ref = torch.tensor([[1.0, -1.0, -50.0]])
    mask = torch.tensor([[True, True, False]])
    terms = grpo_loss(logp, old, ref, torch.tensor([2.0]), mask)
    kl = (math.e - 2.0 + 0.0) / 2
    torch.testing.assert_close(terms.kl, torch.tensor(kl))
    torch.testing.assert_close(terms.pg_loss, torch.tensor(-2.0))  # ratio 1, A = 2
    torch.testing.assert_close(terms.loss, torch.tensor(-2.0 + 0.01 * kl))
    terms.loss.backward()
    assert logp.grad[0, 2] == 0.0
    with pytest.raises(ValueError, match="advantages"):
        grpo_loss(logp, old, ref, torch.ones(2), mask)
