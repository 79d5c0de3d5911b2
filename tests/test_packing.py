"""The shared packing: trunk + branches -> ids, positions, segments, masks, predictor columns."""

from __future__ import annotations

import pytest
import torch

from resail_pipeline.packing import (
    PADDING,
    TRUNK,
    TreeRow,
    common_prefix_length,
    lay_out,
    tree_lengths,
)


def test_a_row_is_laid_out_trunk_then_branches_with_restarted_positions():
    batch = lay_out([TreeRow([5, 6], [[7, 8, 9], [10]]), TreeRow([1], [[2]])], pad_id=0)
    assert batch.input_ids.tolist() == [[5, 6, 7, 8, 9, 10], [1, 2, 0, 0, 0, 0]]
    assert batch.position_ids.tolist() == [[0, 1, 2, 3, 4, 2], [0, 1, 0, 0, 0, 0]]
    assert batch.segment.tolist() == [[TRUNK, TRUNK, 1, 1, 1, 2], [TRUNK, 1, *[PADDING] * 4]]
    assert batch.branch_starts == ((2, 5), (1,)) and batch.trunk_lengths == (2, 1)
    assert lay_out([TreeRow([1], [[2]])], 0, pad_to_multiple_of=8).input_ids.shape == (1, 8)


def test_each_token_sees_the_trunk_and_its_own_branch_causally():
    mask = lay_out([TreeRow([5, 6], [[7, 8], [9]]), TreeRow([1], [])], pad_id=0).tree_mask()
    assert mask.shape == (2, 1, 5, 5) and mask.dtype == torch.bool
    expected = [
        [1, 0, 0, 0, 0],
        [1, 1, 0, 0, 0],
        [1, 1, 1, 0, 0],  # branch 0 sees the trunk and itself
        [1, 1, 1, 1, 0],
        [1, 1, 0, 0, 1],  # branch 1 sees the trunk, not branch 0
    ]
    assert mask[0, 0].int().tolist() == expected
    pads = [[1, 0, 0, 0, 0], *([0] * k + [1] + [0] * (4 - k) for k in range(1, 5))]
    assert mask[1, 0].int().tolist() == pads  # a padding query sees itself only
    assert batch_padding([TreeRow([1], [[2]]), TreeRow([3], [])]) == [[1, 1], [1, 0]]


def batch_padding(rows):
    return lay_out(rows, pad_id=0).padding_mask().tolist()


def test_predictors_are_the_token_before_or_the_trunks_last():
    batch = lay_out([TreeRow([5, 6], [[7, 8, 9], [10, 11]])], pad_id=0)
    assert batch.predictors(0, 0, range(3)) == [1, 2, 3]
    assert batch.predictors(0, 1, [0, 1]) == [1, 5]
    empty = lay_out([TreeRow([], [[7, 8]])], pad_id=0)
    assert empty.predictors(0, 0, [1]) == [0]
    with pytest.raises(ValueError, match="no predictor without a trunk"):
        empty.predictors(0, 0, [0])


def test_a_packed_branch_computes_what_its_separate_sequence_does():
    torch.manual_seed(0)
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(
        vocab_size=32,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=16,
        attn_implementation="sdpa",
    )
    model = Qwen3ForCausalLM(config).eval()
    trunk, branches = [3, 4, 5], [[6, 7], [8, 9, 10]]
    batch = lay_out([TreeRow(trunk, branches)], pad_id=0)
    with torch.no_grad():
        packed = model(
            input_ids=batch.input_ids,
            attention_mask=batch.tree_mask(),
            position_ids=batch.position_ids,
        ).logits[0]
        for b, branch in enumerate(branches):
            alone = model(input_ids=torch.tensor([trunk + branch])).logits[0]
            start = batch.branch_starts[0][b]
            columns = [start + k for k in range(len(branch))]
            torch.testing.assert_close(packed[columns], alone[len(trunk) :], atol=1e-5, rtol=1e-4)


def test_common_prefix_length():
    assert common_prefix_length([[1, 2, 3], [1, 2, 4], [1, 2]]) == 2
    assert common_prefix_length([[1, 2]]) == 2
    assert common_prefix_length([[1], [2]]) == 0


def test_tree_lengths_read_trunk_and_branches_from_the_segments():
    batch = lay_out(
        [TreeRow([5, 6], [[7, 8], [9]]), TreeRow([], [[1, 2, 3]]), TreeRow([4], [[5]])], pad_id=0
    )
    assert tree_lengths(batch.segment) == [(2, 2, 1), (0, 3), (1, 1)]
