"""Packed views: one forward over a shared prefix equals separate forwards of each view."""

from __future__ import annotations

import pytest
import torch

from resail_pipeline.generation.decoder import can_compile
from resail_pipeline.training.views import (
    ORDINARY,
    PRIVILEGED,
    ResponseLogits,
    ViewRow,
    forward_views,
    pack_rows,
    view_logits,
)


def separate_logits(model, prompt, response):
    """``(T, V)`` logits predicting ``response`` from a plain forward of ``prompt + response``."""
    ids = torch.tensor([list(prompt) + list(response)])
    logits = model(input_ids=ids).logits[0]  # (L, V)
    return logits[len(prompt) - 1 : len(prompt) - 1 + len(response)]


def test_response_logits_equal_the_full_forward(tiny_model):
    module = ResponseLogits(tiny_model)
    row = ViewRow(prompts=([3, 4, 5, 6],), response=[7, 8, 9])
    packed = pack_rows([row], pad_id=0)
    assert packed.segment.tolist() == [[1] * 7]  # one branch, no trunk
    out = forward_views(module, packed)[0, 0]  # (T, V)
    torch.testing.assert_close(out, separate_logits(tiny_model, [3, 4, 5, 6], [7, 8, 9]))


def _mixed_rows(generator: torch.Generator) -> list[ViewRow]:
    """Rows of two views over a shared prefix, of different lengths (so some are padded)."""
    rows = []
    for n_prefix, n_ord, n_priv, n_resp in [(6, 3, 8, 4), (2, 1, 5, 2), (9, 4, 2, 5)]:
        prefix = torch.randint(4, 60, (n_prefix,), generator=generator).tolist()
        ordinary = prefix + torch.randint(4, 60, (n_ord,), generator=generator).tolist()
        privileged = prefix + torch.randint(60, 90, (n_priv,), generator=generator).tolist()
        response = torch.randint(4, 90, (n_resp,), generator=generator).tolist()
        rows.append(ViewRow(prompts=(ordinary, privileged), response=response))
    return rows


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_packed_views_equal_separate_forwards(tiny_model, attention):
    tiny_model.set_attn_implementation(attention)
    module = ResponseLogits(tiny_model)
    assert tiny_model.config._attn_implementation == attention
    rows = _mixed_rows(torch.Generator().manual_seed(0))
    rows.append(ViewRow(prompts=([5, 6, 7],), response=[8, 9]))  # a row with one view
    packed = pack_rows(rows, pad_id=0)
    assert int(packed.segment.max()) == 2  # trees: the model's own forward under the tree mask
    out = forward_views(module, packed)  # (R, 2, T, V)
    for i, row in enumerate(rows):
        n = len(row.response)
        for j, prompt in enumerate(row.prompts):
            expected = separate_logits(tiny_model, prompt, row.response)
            torch.testing.assert_close(out[i, j, :n], expected, atol=1e-5, rtol=1e-5)


def test_packing_shares_the_prefix():
    prefix = list(range(10, 40))
    row = ViewRow(prompts=([*prefix, 1, 2], [*prefix, 3, 4, 5]), response=[6, 7])
    packed = pack_rows([row], pad_id=0)
    # 30 shared + (2 + 2) ordinary + (3 + 2) privileged, instead of 34 + 35
    assert packed.input_ids.shape == (1, 39)
    assert packed.position_ids[0, 30:34].tolist() == [30, 31, 32, 33]
    assert packed.position_ids[0, 34:].tolist() == [30, 31, 32, 33, 34]


def test_view_logits_serves_each_row_its_views(tiny_model, tiny_tokenizer):
    from resail_pipeline.training.data import StepExample

    def step(ordinary, privileged):
        return StepExample("t", 0, "", tuple(ordinary), tuple(privileged))

    steps = [step([3, 4, 5], [3, 4, 6, 7]), step([3, 8], [3, 9, 9]), step([5, 5, 5], [5, 5, 6])]
    responses = [[10, 11], [12], [13, 14, 15]]
    views = [(ORDINARY, PRIVILEGED), (PRIVILEGED,), ()]
    out = view_logits(ResponseLogits(tiny_model), steps, responses, views, pad_id=0, device="cpu")
    assert out.rows[ORDINARY].tolist() == [0] and out.rows[PRIVILEGED].tolist() == [0, 1]
    assert out.mask.tolist() == [[True, True, False], [True, False, False], [True, True, True]]
    assert out.logits[PRIVILEGED].shape[:2] == (2, 3)
    torch.testing.assert_close(
        out.logits[PRIVILEGED][1, :1],
        separate_logits(tiny_model, [3, 9, 9], [12]),
        atol=1e-5,
        rtol=1e-5,
    )
    torch.testing.assert_close(
        out.logits[ORDINARY][0, :2],
        separate_logits(tiny_model, [3, 4, 5], [10, 11]),
        atol=1e-5,
        rtol=1e-5,
    )


def _logits_and_gradients(model, module, rows):
    """The valid response logits of ``rows`` through ``module`` and the gradients of the model's
    weights of their summed log-normalisers."""
    model.zero_grad()
    out = forward_views(module, pack_rows(rows, pad_id=0))  # (R, nb, T, V)
    valid = torch.zeros(out.shape[:3], dtype=torch.bool)
    for i, row in enumerate(rows):
        valid[i, : len(row.prompts), : len(row.response)] = True
    out[valid].float().logsumexp(-1).sum().backward()
    return out[valid].detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


def _assert_close(got, want, tolerance):
    torch.testing.assert_close(got[0], want[0], atol=tolerance, rtol=tolerance)
    assert got[1].keys() == want[1].keys()
    for name in want[1]:
        torch.testing.assert_close(got[1][name], want[1][name], atol=tolerance, rtol=10 * tolerance)


@pytest.mark.parametrize("branches", [1, 2])
def test_the_functional_forward_gives_the_models_logits_and_gradients(tiny_model, branches):
    """The decoder's functional forward over the rows without their padding (the rollouts'
    forward, attention per tree) against the model's own over the padded rows, with gradient:
    one-branch rows (padding mask) and packed two-branch rows (tree mask)."""
    rows = _mixed_rows(torch.Generator().manual_seed(1))
    if branches == 1:
        rows = [ViewRow(prompts=r.prompts[:1], response=r.response) for r in rows]
    assert int(pack_rows(rows, pad_id=0).segment.max()) == branches
    functional = ResponseLogits(tiny_model)
    assert functional._decoder is not None and not functional.compiled
    own = ResponseLogits(tiny_model, functional=False)
    assert own._decoder is None
    _assert_close(
        _logits_and_gradients(tiny_model, functional, rows),
        _logits_and_gradients(tiny_model, own, rows),
        1e-5,
    )


def test_the_compiled_forward_and_backward_agree_with_eager_within_rounding(tiny_model):
    if not can_compile(torch.device("cpu")):
        pytest.skip("no C++ compiler for torch.compile here")
    rows = _mixed_rows(torch.Generator().manual_seed(2))
    rows.append(ViewRow(prompts=([5, 6, 7],), response=[8, 9]))
    compiled = ResponseLogits(tiny_model, compile=True)
    assert compiled.compiled
    _assert_close(
        _logits_and_gradients(tiny_model, compiled, rows),
        _logits_and_gradients(tiny_model, ResponseLogits(tiny_model), rows),
        1e-5,
    )


def test_only_the_functional_forward_compiles(tiny_model):
    with pytest.raises(ValueError, match="compile: only the functional forward"):
        ResponseLogits(tiny_model, compile=True, functional=False)


def test_the_tree_forward_refuses_lengths_that_do_not_add_up(tiny_model):
    decoder = ResponseLogits(tiny_model)._decoder
    with pytest.raises(ValueError, match="trees: lengths do not add up"):
        decoder.tree_hidden_states(torch.tensor([5, 6, 7]), torch.arange(3), [(1, 1)])
