"""Per-step l_dist, sensitivity and retention terms from the four views; OEL and SDPO parents."""

from __future__ import annotations

import math

import pytest
import torch

from resail_pipeline.objectives import (
    oel_loss,
    pi_sensitivity,
    sdpo_loss,
    token_divergences,
    token_logprobs,
    topk_support,
    truncated_is_weights,
)

from ._reference import reference_jsd, reference_kl, reference_step_mean, reference_topk_tail

N, T, V = 3, 4, 12
MASK = torch.tensor(
    [[True, True, True, False], [True, True, False, False], [True, True, True, True]]
)


def make_views(seed: int = 0, requires_grad: bool = True) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    names = ("student_ord", "student_priv", "teacher_ord", "teacher_priv")
    return {
        name: (torch.randn(N, T, V, generator=gen) * 2.0).requires_grad_(requires_grad)
        for name in names
    }


def test_per_step_terms_match_a_full_vocabulary_reference():
    views = make_views()
    terms = token_divergences(
        views["student_ord"],
        views["teacher_ord"],
        views["teacher_priv"],
        MASK,
        student_priv_logits=views["student_priv"],
        top_k=5,
    )
    support = topk_support(views["student_ord"], 5)
    assert torch.equal(terms.support, support)
    assert terms.tokens.tolist() == [3, 2, 4]
    ref = {name: reference_topk_tail(x.detach(), support) for name, x in views.items()}
    expected = {
        "l_dist": reference_kl(ref["student_ord"], ref["teacher_priv"]),
        "sensitivity": reference_jsd(ref["teacher_ord"], ref["teacher_priv"]),
        "l_ret": reference_kl(ref["student_priv"], ref["teacher_priv"]),
        "l_ret_ordinary": reference_kl(ref["student_ord"], ref["teacher_ord"]),
    }
    for name, per_token in expected.items():
        got = getattr(terms, name)
        assert got.shape == (N,) and got.dtype == torch.float32
        torch.testing.assert_close(
            got.detach().double(), reference_step_mean(per_token, MASK), atol=1e-6, rtol=1e-6
        )
    assert not terms.sensitivity.requires_grad


def test_identical_views_give_zero_everywhere():
    x = make_views()["student_ord"]
    terms = token_divergences(x, x, x, MASK, student_priv_logits=x)
    for value in (terms.l_dist, terms.sensitivity, terms.l_ret, terms.l_ret_ordinary):
        assert torch.equal(value.detach(), torch.zeros(N))


def test_gradients_reach_only_the_student_and_only_valid_positions():
    views = make_views()
    terms = token_divergences(
        views["student_ord"],
        views["teacher_ord"],
        views["teacher_priv"],
        MASK,
        student_priv_logits=views["student_priv"],
    )
    (terms.l_dist.sum() + terms.l_ret.sum() + terms.l_ret_ordinary.sum()).backward()
    assert views["teacher_ord"].grad is None and views["teacher_priv"].grad is None
    for name in ("student_ord", "student_priv"):
        grad = views[name].grad
        assert torch.isfinite(grad).all()
        assert (grad[MASK].abs().sum(-1) > 0).all()  # every valid position moves
        assert (grad[~MASK] == 0).all()  # padding does not


def test_empty_masks_give_finite_zeros_and_no_nan_gradient():
    views = make_views()
    mask = MASK.clone()
    mask[1] = False
    terms = token_divergences(
        views["student_ord"],
        views["teacher_ord"],
        views["teacher_priv"],
        mask,
        student_priv_logits=views["student_priv"],
    )
    assert terms.l_dist[1].item() == 0.0 and terms.sensitivity[1].item() == 0.0
    terms.l_dist.sum().backward()
    assert torch.isfinite(views["student_ord"].grad).all()
    assert (views["student_ord"].grad[1] == 0).all()
    # no steps at all
    empty = torch.zeros(0, T, V, requires_grad=True)
    loss, l_dist = oel_loss(empty, torch.zeros(0, T, V), torch.zeros(0, T, dtype=torch.bool))
    loss.backward()
    assert loss.item() == 0.0 and l_dist.shape == (0,) and empty.grad.shape == (0, T, V)


def test_full_vocabulary_support_gives_the_exact_token_averaged_kl():
    views = make_views(requires_grad=False)
    terms = token_divergences(
        views["student_ord"], views["teacher_ord"], views["teacher_priv"], MASK, top_k=V
    )
    lp = torch.log_softmax(views["student_ord"].double(), -1)
    lq = torch.log_softmax(views["teacher_priv"].double(), -1)
    exact = reference_step_mean((lp.exp() * (lp - lq)).sum(-1), MASK)
    torch.testing.assert_close(terms.l_dist.double(), exact, atol=1e-6, rtol=1e-6)


def test_chunked_terms_equal_unchunked():
    views = make_views(requires_grad=False)
    args = (views["student_ord"], views["teacher_ord"], views["teacher_priv"], MASK)
    whole = token_divergences(*args, student_priv_logits=views["student_priv"])
    for chunk in (1, 3, 5):
        part = token_divergences(*args, student_priv_logits=views["student_priv"], chunk_size=chunk)
        for name in ("l_dist", "sensitivity", "l_ret", "l_ret_ordinary"):
            torch.testing.assert_close(getattr(part, name), getattr(whole, name), atol=1e-6, rtol=0)


def test_probe_sensitivity_uses_the_fixed_support_it_is_given():
    views = make_views(requires_grad=False)
    initial = make_views(seed=9, requires_grad=False)["student_ord"]
    fixed = topk_support(initial, 4)  # the initial model's ordinary top-4
    probe = pi_sensitivity(views["student_ord"], views["student_priv"], MASK, support=fixed)
    ref = reference_jsd(
        reference_topk_tail(views["student_ord"], fixed),
        reference_topk_tail(views["student_priv"], fixed),
    )
    torch.testing.assert_close(probe.double(), reference_step_mean(ref, MASK), atol=1e-6, rtol=0)
    own = pi_sensitivity(views["student_ord"], views["student_priv"], MASK, top_k=4)
    assert (probe - own).abs().max() > 1e-3  # the support matters


def test_truncated_importance_ratios_are_capped_at_two():
    cur = torch.tensor([[math.log(5.0), math.log(1.5), 0.0]], requires_grad=True)
    old = torch.zeros(1, 3)
    beh = torch.tensor([[math.log(0.5), 0.0, -math.log(3.0)]])  # old / mu = 2, 1, 3
    w = truncated_is_weights(cur, old, beh)
    torch.testing.assert_close(w, torch.tensor([[2.0 * 2.0, 1.5 * 1.0, 1.0 * 2.0]]))
    assert not w.requires_grad
    with pytest.raises(ValueError, match="cap"):
        truncated_is_weights(cur, old, beh, cap=0.0)


def test_sdpo_applies_tis_to_token_terms_before_reduction():
    views = make_views(requires_grad=False)
    gen = torch.Generator().manual_seed(3)
    ids = torch.randint(0, V, (N, T), generator=gen)
    current = token_logprobs(views["student_ord"], ids)
    # on-policy (old actor = behaviour = current): the weights are 1 and SDPO is OEL
    plain, _ = oel_loss(views["student_ord"], views["teacher_priv"], MASK)
    same, _ = sdpo_loss(views["student_ord"], views["teacher_priv"], MASK, ids, current, current)
    torch.testing.assert_close(same, plain, atol=1e-7, rtol=0)
    # current / old = 3 everywhere: capped at 2; old / mu = 1/2 on the first step's tokens only
    old = current - math.log(3.0)
    beh = old.clone()
    beh[0] = old[0] + math.log(2.0)
    loss, l_dist = sdpo_loss(views["student_ord"], views["teacher_priv"], MASK, ids, old, beh)
    kl = reference_kl(
        reference_topk_tail(views["student_ord"], topk_support(views["student_ord"], 20)),
        reference_topk_tail(views["teacher_priv"], topk_support(views["student_ord"], 20)),
    )
    weights = torch.full((N, T), 2.0, dtype=torch.float64)
    weights[0] = 1.0
    expected = reference_step_mean(kl * weights, MASK)
    torch.testing.assert_close(l_dist.double(), expected, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(loss.double(), expected.mean(), atol=1e-6, rtol=1e-6)


def test_mismatched_inputs_are_rejected_naming_the_argument():
    views = make_views(requires_grad=False)
    with pytest.raises(ValueError, match="teacher_priv_logits"):
        token_divergences(views["student_ord"], None, views["teacher_priv"][:, :2], MASK)
    with pytest.raises(ValueError, match="token_weights"):
        token_divergences(
            views["student_ord"], None, views["teacher_priv"], MASK, token_weights=torch.ones(N)
        )
    with pytest.raises(TypeError, match="mask"):
        token_divergences(views["student_ord"], None, views["teacher_priv"], MASK.float())
