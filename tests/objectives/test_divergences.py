"""Top-K plus tail reductions and the KL / JSD computed on them."""

from __future__ import annotations

import math

import pytest
import torch

from resail_pipeline.objectives import (
    js_divergence,
    kl_divergence,
    masked_token_mean,
    token_logprobs,
    topk_support,
    topk_tail_logprobs,
)

from ._reference import reference_topk_tail

LN2 = math.log(2.0)
NEG_INF = float("-inf")


def exact_kl(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    lp, lq = torch.log_softmax(x.double(), -1), torch.log_softmax(y.double(), -1)
    return (lp.exp() * (lp - lq)).sum(-1)


def exact_jsd(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    p, q = torch.softmax(x.double(), -1), torch.softmax(y.double(), -1)
    m = 0.5 * (p + q)
    return 0.5 * (p * (p / m).log()).sum(-1) + 0.5 * (q * (q / m).log()).sum(-1)


@pytest.fixture()
def logits() -> torch.Tensor:
    return torch.randn(2, 5, 11, generator=torch.Generator().manual_seed(0)) * 3.0


@pytest.mark.parametrize("k", [1, 3, 10])
def test_topk_plus_tail_sums_to_one_and_matches_the_full_softmax(logits, k):
    support = topk_support(logits, k)
    out = topk_tail_logprobs(logits, support)
    assert out.shape == (2, 5, k + 1)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.exp().sum(-1), torch.ones(2, 5), atol=1e-6, rtol=0)
    torch.testing.assert_close(
        out.double(), reference_topk_tail(logits, support), atol=1e-6, rtol=0
    )
    # the support is the highest logits, highest first
    assert torch.equal(support, logits.argsort(dim=-1, descending=True)[..., :k])


def test_a_support_larger_than_the_vocabulary_is_the_whole_vocabulary(logits):
    support = topk_support(logits, 20)
    assert support.shape == (2, 5, 11)
    assert (topk_tail_logprobs(logits, support)[..., -1] == NEG_INF).all()


def test_topk_tail_works_for_any_leading_shape(logits):
    support = topk_support(logits, 4)
    full = topk_tail_logprobs(logits, support)
    assert torch.equal(topk_tail_logprobs(logits[0, 0], support[0, 0]), full[0, 0])  # (V,)
    assert torch.equal(topk_tail_logprobs(logits[1], support[1]), full[1])  # (T, V)
    four_d = topk_tail_logprobs(logits.view(2, 5, 1, 11), support.view(2, 5, 1, 4))
    assert torch.equal(four_d.view(2, 5, 5), full)


def test_tail_stays_finite_and_exact_when_the_support_holds_almost_all_mass():
    logits = torch.zeros(3, 50)
    logits[:, 7] = torch.tensor([30.0, 40.0, 80.0])  # tail masses ~ 49 e^-30, 49 e^-40, 49 e^-80
    support = topk_support(logits, 1)
    out = topk_tail_logprobs(logits, support)
    assert torch.isfinite(out).all()
    expected_tail = math.log(49.0) - torch.tensor([30.0, 40.0, 80.0], dtype=torch.float64)
    torch.testing.assert_close(out[:, 1].double(), expected_tail, rtol=1e-6, atol=1e-5)
    # a KL that needs the tiny tail: a flat student against the peaked teacher
    student = topk_tail_logprobs(torch.zeros(3, 50), support)
    kl = kl_divergence(student, out)
    assert torch.isfinite(kl).all() and (kl > 20).all()


def test_chunked_forward_and_backward_match_unchunked_on_a_non_contiguous_view():
    gen = torch.Generator().manual_seed(1)
    base = torch.randn(3, 9, 13, generator=gen, requires_grad=True)
    weights = torch.randn(3, 7, 6, generator=gen)
    sliced = base[:, 1:-1]  # (3, 7, 13), not viewable as (21, 13)
    support = topk_support(sliced, 5)
    results = []
    for chunk in (None, 1, 3, 7, 10, 1000):
        base.grad = None
        out = topk_tail_logprobs(sliced, support, chunk_size=chunk)
        (out * weights).sum().backward()
        results.append((out.detach(), base.grad.clone()))
    ref_out, ref_grad = results[0]
    for out, grad in results[1:]:
        torch.testing.assert_close(out, ref_out, atol=1e-6, rtol=0)
        torch.testing.assert_close(grad, ref_grad, atol=1e-6, rtol=0)
    assert (ref_grad[:, 0] == 0).all() and (ref_grad[:, -1] == 0).all()  # outside the slice


def test_gradient_matches_autograd_through_a_full_log_softmax(logits):
    x = logits.clone().requires_grad_()
    x_ref = logits.clone().double().requires_grad_()
    support = topk_support(logits, 4)
    weights = torch.randn(2, 5, 5, generator=torch.Generator().manual_seed(2))
    (topk_tail_logprobs(x, support) * weights).sum().backward()
    (reference_topk_tail(x_ref, support) * weights.double()).sum().backward()
    torch.testing.assert_close(x.grad.double(), x_ref.grad, atol=1e-5, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_logits_are_reduced_in_fp32(logits, dtype):
    low = logits.to(dtype).requires_grad_()
    support = topk_support(low, 4)
    out = topk_tail_logprobs(low, support)
    assert out.dtype == torch.float32
    # the same as reducing the upcast values: nothing is computed in half precision
    torch.testing.assert_close(
        out, topk_tail_logprobs(low.detach().float(), support), atol=1e-6, rtol=0
    )
    torch.testing.assert_close(out.exp().sum(-1), torch.ones(2, 5), atol=1e-6, rtol=0)
    out[..., 0].sum().backward()
    assert low.grad.dtype == dtype and torch.isfinite(low.grad).all()


def test_identical_inputs_give_zero(logits):
    support = topk_support(logits, 6)
    lp = topk_tail_logprobs(logits, support)
    assert torch.equal(kl_divergence(lp, lp), torch.zeros(2, 5))
    assert torch.equal(js_divergence(lp, lp), torch.zeros(2, 5))


def test_jsd_is_symmetric_nonnegative_and_bounded_by_ln2(logits):
    other = torch.randn(2, 5, 11, generator=torch.Generator().manual_seed(3)) * 5.0
    support = topk_support(logits, 3)
    lp, lq = topk_tail_logprobs(logits, support), topk_tail_logprobs(other, support)
    forward, backward = js_divergence(lp, lq), js_divergence(lq, lp)
    torch.testing.assert_close(forward, backward, atol=1e-7, rtol=0)
    assert (forward > 0).all() and (forward <= LN2 + 1e-6).all()
    # disjoint supports reach ln 2 exactly, without NaN
    disjoint = js_divergence(torch.tensor([0.0, NEG_INF]), torch.tensor([NEG_INF, 0.0]))
    torch.testing.assert_close(disjoint, torch.tensor(LN2), atol=1e-7, rtol=0)


def test_kl_is_asymmetric_and_matches_its_definition():
    lp = torch.tensor([0.7, 0.2, 0.1]).log()
    lq = torch.tensor([0.2, 0.3, 0.5]).log()
    expected = 0.7 * math.log(0.7 / 0.2) + 0.2 * math.log(0.2 / 0.3) + 0.1 * math.log(0.1 / 0.5)
    torch.testing.assert_close(kl_divergence(lp, lq), torch.tensor(expected), atol=1e-6, rtol=0)
    reverse = 0.2 * math.log(0.2 / 0.7) + 0.3 * math.log(0.3 / 0.2) + 0.5 * math.log(0.5 / 0.1)
    torch.testing.assert_close(kl_divergence(lq, lp), torch.tensor(reverse), atol=1e-6, rtol=0)
    assert abs(reverse - expected) > 0.04
    assert kl_divergence(torch.tensor([0.0, NEG_INF]), torch.tensor([NEG_INF, 0.0])) == float("inf")


def test_full_vocabulary_support_gives_the_exact_divergences_without_nan_gradients():
    gen = torch.Generator().manual_seed(4)
    x = (torch.randn(4, 3, 8, generator=gen) * 2).requires_grad_()
    y = (torch.randn(4, 3, 8, generator=gen) * 2).requires_grad_()
    support = topk_support(x, 8)  # K = V
    lp, lq = topk_tail_logprobs(x, support), topk_tail_logprobs(y, support)
    assert (lp[..., -1] == NEG_INF).all() and (lq[..., -1] == NEG_INF).all()  # log 0 tails
    kl, jsd = kl_divergence(lp, lq), js_divergence(lp, lq)
    torch.testing.assert_close(kl.double(), exact_kl(x.detach(), y.detach()), atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(jsd.double(), exact_jsd(x.detach(), y.detach()), atol=1e-6, rtol=0)
    (kl.sum() + jsd.sum()).backward()
    assert torch.isfinite(x.grad).all() and torch.isfinite(y.grad).all()
    x_ref, y_ref = x.detach().double().requires_grad_(), y.detach().double().requires_grad_()
    (exact_kl(x_ref, y_ref).sum() + exact_jsd(x_ref, y_ref).sum()).backward()
    torch.testing.assert_close(x.grad.double(), x_ref.grad, atol=1e-5, rtol=0)
    torch.testing.assert_close(y.grad.double(), y_ref.grad, atol=1e-5, rtol=0)


def test_zero_probability_categories_give_no_nan_gradient():
    logp = torch.tensor([[0.0, NEG_INF], [math.log(0.5), math.log(0.5)]], requires_grad=True)
    logq = torch.tensor([[NEG_INF, 0.0], [NEG_INF, 0.0]], requires_grad=True)
    js_divergence(logp, logq).sum().backward()
    assert torch.isfinite(logp.grad).all() and torch.isfinite(logq.grad).all()
    logp.grad = None
    logq_both = torch.tensor([[0.0, NEG_INF]], requires_grad=True)
    kl_divergence(logp[:1], logq_both).sum().backward()
    assert torch.isfinite(logp.grad).all() and torch.isfinite(logq_both.grad).all()


def test_token_logprobs_equals_log_softmax_gather():
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(2, 4, 9, generator=gen, requires_grad=True)
    ids = torch.randint(0, 9, (2, 4), generator=gen)
    out = token_logprobs(x, ids, chunk_size=3)
    ref = torch.log_softmax(x.double(), -1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(out.double(), ref, atol=1e-6, rtol=0)
    out.sum().backward()
    x_ref = x.detach().double().requires_grad_()
    torch.log_softmax(x_ref, -1).gather(-1, ids.unsqueeze(-1)).sum().backward()
    torch.testing.assert_close(x.grad.double(), x_ref.grad, atol=1e-6, rtol=0)


def test_masked_token_mean_handles_empty_rows():
    values = torch.tensor([[1.0, 2.0, 9.0], [5.0, 6.0, 7.0]], requires_grad=True)
    mask = torch.tensor([[True, True, False], [False, False, False]])
    out = masked_token_mean(values, mask)
    torch.testing.assert_close(out, torch.tensor([1.5, 0.0]))
    out.sum().backward()
    torch.testing.assert_close(values.grad, torch.tensor([[0.5, 0.5, 0.0], [0.0, 0.0, 0.0]]))


def test_bad_supports_are_rejected_naming_the_argument(logits):
    good = topk_support(logits, 3)
    with pytest.raises(ValueError, match="support"):
        topk_tail_logprobs(logits, good[:, :4])
    with pytest.raises(ValueError, match="support"):
        topk_tail_logprobs(logits, good.masked_fill(torch.ones_like(good, dtype=torch.bool), 11))
    with pytest.raises(ValueError, match="distinct"):
        topk_tail_logprobs(logits, torch.zeros_like(good))
    with pytest.raises(TypeError, match="support"):
        topk_tail_logprobs(logits, good.float())
    with pytest.raises(ValueError, match="top_k"):
        topk_support(logits, 0)
    with pytest.raises(ValueError, match="chunk_size"):
        topk_tail_logprobs(logits, good, chunk_size=0)


# ----------------------------------------------------------------------------------------------
# precision at the edges: tiny tails, extreme spreads, K = V, half-precision logits


def _logits_with_tails(tails: list[float], vocab: int = 64, k: int = 4) -> torch.Tensor:
    """``(len(tails), vocab)`` logits whose top-``k`` support leaves about ``tails[i]`` off it."""
    gen = torch.Generator().manual_seed(6)
    rows = []
    for tail in tails:
        off = torch.rand(vocab - k, generator=gen, dtype=torch.float64) * 4.0 - 2.0
        on = torch.rand(k, generator=gen, dtype=torch.float64)
        # tail / (1 - tail) = sum(exp(off)) / sum(exp(on + lift))
        lift = math.log(off.exp().sum() / on.exp().sum() * (1.0 - tail) / tail)
        rows.append(torch.cat([on + lift, off]))
    return torch.stack(rows)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("chunk_size", [None, 1])
def test_tiny_tails_keep_their_value_to_fp32_precision(dtype, chunk_size):
    tails = [1e-3, 1e-9, 1e-15, 1e-19, 1e-21, 1e-30, 1e-40]  # around the exact-recompute cutoff
    logits = _logits_with_tails(tails).to(dtype)  # rounding moves the tails a little
    support = topk_support(logits, 4)
    out = topk_tail_logprobs(logits, support, chunk_size=chunk_size)
    expected = reference_topk_tail(logits, support)  # fp64 on the same (rounded) values
    assert torch.isfinite(out).all()
    # logits up to about 95 carry an fp32 rounding of 2^-17 = 7.6e-6: the tolerance in log space
    torch.testing.assert_close(out.double(), expected, atol=8e-6, rtol=0)
    # so each tail probability has the relative precision of fp32, not 0 or a clamp
    torch.testing.assert_close(out[:, -1].double().exp(), expected[:, -1].exp(), atol=0, rtol=8e-6)
    teacher = out[1, -1].exp().item()
    assert 0.5e-9 < teacher < 2e-9


def test_tiny_tail_gradients_match_the_full_softmax():
    logits = _logits_with_tails([1e-2, 1e-12, 1e-25, 1e-40]).float()
    support = topk_support(logits, 4)
    weights = torch.randn(4, 5, generator=torch.Generator().manual_seed(7))
    x, x_ref = logits.clone().requires_grad_(), logits.double().requires_grad_()
    (topk_tail_logprobs(x, support, chunk_size=2) * weights).sum().backward()
    (reference_topk_tail(x_ref, support) * weights.double()).sum().backward()
    torch.testing.assert_close(x.grad.double(), x_ref.grad, atol=1e-5, rtol=0)


def test_extreme_logit_spreads_give_exact_finite_log_probabilities_and_gradients():
    gen = torch.Generator().manual_seed(8)
    logits = torch.randn(4, 32, generator=gen)
    logits[0, 3] = 1e4  # support far above the rest: a tail near e^-1e4
    logits[1] = torch.linspace(-1e4, 1e4, 32)  # spread over 2e4
    logits[2, :4] = -1e4  # a support (below) far under the rest: its sums overflow
    logits[3] = torch.randn(32, generator=gen) * 3e3
    support = topk_support(logits, 4)
    support[2] = torch.arange(4)
    x, x_ref = logits.clone().requires_grad_(), logits.double().requires_grad_()
    out = topk_tail_logprobs(x, support)
    expected = reference_topk_tail(x_ref, support)
    assert torch.isfinite(out).all()
    # fp32 logits of magnitude 1e4 carry an absolute rounding of 1e-3: relative tolerance
    torch.testing.assert_close(out.double(), expected, atol=1e-5, rtol=1e-6)
    weights = torch.randn(4, 5, generator=gen)
    (out * weights).sum().backward()
    (expected * weights.double()).sum().backward()
    assert torch.isfinite(x.grad).all()
    torch.testing.assert_close(x.grad.double(), x_ref.grad, atol=1e-2, rtol=0)
    # the extreme tails enter a KL without infinities
    kl = kl_divergence(topk_tail_logprobs(torch.zeros(4, 32), support), out.detach())
    assert torch.isfinite(kl).all() and (kl > 100).all()


def test_token_logprobs_of_a_token_far_below_the_rest():
    logits = torch.zeros(2, 16)
    logits[0, 5] = -1e4  # the shifted sum by this token's logit overflows
    logits[1, 5] = 50.0
    ids = torch.tensor([5, 5])
    expected = torch.log_softmax(logits.double(), -1)[:, 5]
    torch.testing.assert_close(token_logprobs(logits, ids).double(), expected, atol=1e-5, rtol=1e-6)


@pytest.mark.parametrize("chunk_size", [None, 2])
def test_full_vocabulary_support_in_bf16_has_a_log_zero_tail_and_exact_gradients(chunk_size):
    gen = torch.Generator().manual_seed(9)
    x = (torch.randn(2, 3, 8, generator=gen) * 4).to(torch.bfloat16).requires_grad_()
    support = topk_support(x, 8)
    out = topk_tail_logprobs(x, support, chunk_size=chunk_size)
    assert (out[..., -1] == NEG_INF).all()
    torch.testing.assert_close(out[..., :-1].exp().sum(-1), torch.ones(2, 3), atol=1e-6, rtol=0)
    weights = torch.randn(2, 3, 9, generator=gen)
    weights[..., -1] = 0.0  # the loss never reads the empty tail
    (out * weights).sum().backward()
    x_ref = x.detach().double().requires_grad_()
    (reference_topk_tail(x_ref, support)[..., :-1] * weights[..., :-1].double()).sum().backward()
    torch.testing.assert_close(x.grad.double(), x_ref.grad.bfloat16().double(), atol=0, rtol=1e-2)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_gradients_are_the_fp32_gradients_rounded_once(dtype):
    gen = torch.Generator().manual_seed(10)
    low = (torch.randn(3, 4, 50, generator=gen) * 4).to(dtype).requires_grad_()
    high = low.detach().float().requires_grad_()
    support = topk_support(low, 5)
    weights = torch.randn(3, 4, 6, generator=gen)
    out_low, out_high = topk_tail_logprobs(low, support), topk_tail_logprobs(high, support)
    assert torch.equal(out_low, out_high)
    (out_low * weights).sum().backward()
    (out_high * weights).sum().backward()
    assert torch.equal(low.grad, high.grad.to(dtype))


def test_masked_logits_give_zero_probabilities_and_finite_gradients():
    logits = torch.tensor([[NEG_INF, NEG_INF, 1.0, 2.0, NEG_INF], [3.0, NEG_INF, 1.0, 2.0, 0.0]])
    x = logits.clone().requires_grad_()
    support = torch.tensor([[0, 1], [0, 1]])  # a fully masked support, and a partly masked one
    out = topk_tail_logprobs(x, support)
    expected = reference_topk_tail(logits, support)
    assert torch.equal(out.isinf(), expected.isinf())
    torch.testing.assert_close(out.double(), expected, atol=1e-6, rtol=0)
    kl_divergence(out, topk_tail_logprobs(torch.zeros(2, 5), support)).sum().backward()
    assert torch.isfinite(x.grad).all()
