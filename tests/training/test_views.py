"""Packed views: one forward over a shared prefix equals separate forwards of each view."""

from __future__ import annotations

import pytest
import torch

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
    assert packed.attention_mask.dim() == 2  # one branch: the model's own causal masking
    out = forward_views(module, packed)[0, 0]  # (T, V)
    torch.testing.assert_close(out, separate_logits(tiny_model, [3, 4, 5, 6], [7, 8, 9]))


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_packed_views_equal_separate_forwards(tiny_model, attention):
    tiny_model.set_attn_implementation(attention)
    module = ResponseLogits(tiny_model)
    assert tiny_model.config._attn_implementation == attention
    generator = torch.Generator().manual_seed(0)
    rows = []
    for n_prefix, n_ord, n_priv, n_resp in [(6, 3, 8, 4), (2, 1, 5, 2), (9, 4, 2, 5)]:
        prefix = torch.randint(4, 60, (n_prefix,), generator=generator).tolist()
        ordinary = prefix + torch.randint(4, 60, (n_ord,), generator=generator).tolist()
        privileged = prefix + torch.randint(60, 90, (n_priv,), generator=generator).tolist()
        response = torch.randint(4, 90, (n_resp,), generator=generator).tolist()
        rows.append(ViewRow(prompts=(ordinary, privileged), response=response))
    rows.append(ViewRow(prompts=([5, 6, 7],), response=[8, 9]))  # a row with one view
    packed = pack_rows(rows, pad_id=0)
    assert packed.attention_mask.shape[1] == 1 and packed.attention_mask.dim() == 4
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
