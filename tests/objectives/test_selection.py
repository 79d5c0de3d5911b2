"""Sensitivity-guided selection and trajectory-level balancing."""

from __future__ import annotations

import math

import pytest
import torch

from resail_pipeline.objectives import (
    num_selected,
    select_steps,
    trajectory_balanced_mean,
    trajectory_weights,
)


@pytest.mark.parametrize(
    ("rho", "n", "k"),
    [(0.25, 9, 3), (0.1, 30, 3), (0.05, 1, 1), (0.05, 21, 2), (1.0, 7, 7), (0.5, 0, 0), (1, 4, 4)],
)
def test_k_is_the_ceiling_of_rho_times_n(rho, n, k):
    assert num_selected(rho, n) == k
    assert select_steps(torch.arange(n, dtype=torch.float32), rho, "top").shape == (k,)


def test_ties_go_to_the_lower_index_for_top_and_bottom():
    scores = torch.tensor([0.5, 0.9, 0.5, 0.9, 0.1, 0.5])
    assert select_steps(scores, 1 / 6, "top").tolist() == [1]
    assert select_steps(scores, 1 / 3, "top").tolist() == [1, 3]
    assert select_steps(scores, 0.4, "top").tolist() == [0, 1, 3]  # K = 3: of the 0.5s, index 0
    assert select_steps(scores, 2 / 3, "top").tolist() == [0, 1, 2, 3]
    assert select_steps(scores, 0.5, "bottom").tolist() == [0, 2, 4]
    assert select_steps(scores, 0.2, "bottom").tolist() == [0, 4]


def test_selection_returns_sorted_long_indices_without_gradient():
    scores = torch.tensor([0.3, 0.1, 0.8, 0.4], requires_grad=True)
    out = select_steps(scores, 0.5, "top")
    assert out.dtype == torch.long and out.tolist() == [2, 3]
    assert not out.requires_grad


def test_empty_update_batch_gives_an_empty_selection():
    for strategy in ("top", "bottom", "random"):
        out = select_steps(torch.empty(0), 0.3, strategy)
        assert out.shape == (0,) and out.dtype == torch.long


def test_random_selection_is_reproducible_distinct_and_sized():
    scores = torch.zeros(20)
    first = select_steps(scores, 0.25, "random", torch.Generator().manual_seed(7))
    again = select_steps(scores, 0.25, "random", torch.Generator().manual_seed(7))
    other = select_steps(scores, 0.25, "random", torch.Generator().manual_seed(8))
    assert torch.equal(first, again)
    assert not torch.equal(first, other)
    assert first.shape == (5,) and len(set(first.tolist())) == 5
    assert torch.equal(first, first.sort().values)


@pytest.mark.parametrize("rho", [0.0, -0.1, 1.5, math.nan, True])
def test_rho_outside_the_unit_interval_is_rejected(rho):
    with pytest.raises(ValueError, match="rho"):
        select_steps(torch.ones(4), rho, "top")


def test_unknown_strategy_and_nan_scores_are_rejected():
    with pytest.raises(ValueError, match="strategy"):
        select_steps(torch.ones(4), 0.5, "middle")
    with pytest.raises(ValueError, match="scores"):
        select_steps(torch.tensor([0.1, math.nan]), 0.5, "top")
    with pytest.raises(ValueError, match="scores"):
        select_steps(torch.ones(2, 2), 0.5, "top")


def test_trajectory_balanced_mean_by_hand():
    # trajectories 0, 1, 2, 3 (|B| = 4) with 2, 3, 1, 0 steps
    values = torch.tensor([0.2, 0.4, 1.0, 0.6, 0.8, 0.3], requires_grad=True)
    traj = torch.tensor([0, 0, 1, 1, 1, 2])
    mask = torch.tensor([True, True, False, True, True, False])
    out = trajectory_balanced_mean(values, traj, mask, 4)
    expected = ((0.2 + 0.4) / 2 + (0.6 + 0.8) / 2 + 0.0) / 4  # no renormalisation over survivors
    assert abs(out.item() - expected) < 1e-7
    out.backward()
    torch.testing.assert_close(values.grad, torch.tensor([1 / 8, 1 / 8, 0, 1 / 8, 1 / 8, 0]))
    weights = trajectory_weights(traj, mask, 4)
    assert abs(float((weights * values.detach()).sum()) - expected) < 1e-7


def test_trajectory_balanced_mean_of_nothing_is_a_finite_zero_with_zero_gradient():
    values = torch.tensor([0.5, 1.5], requires_grad=True)
    out = trajectory_balanced_mean(values, torch.tensor([0, 1]), torch.tensor([False, False]), 2)
    assert out.item() == 0.0
    out.backward()
    assert torch.equal(values.grad, torch.zeros(2))
    empty = torch.empty(0, requires_grad=True)
    out = trajectory_balanced_mean(
        empty, torch.empty(0, dtype=torch.long), torch.empty(0, dtype=torch.bool), 0
    )
    out.backward()
    assert out.item() == 0.0


def test_trajectory_index_is_checked_against_the_batch_size():
    values, mask = torch.ones(3), torch.ones(3, dtype=torch.bool)
    with pytest.raises(ValueError, match="traj_index"):
        trajectory_balanced_mean(values, torch.tensor([0, 1, 2]), mask, 2)
    with pytest.raises(ValueError, match="traj_index"):
        trajectory_balanced_mean(values, torch.tensor([0, 1]), mask, 2)
    with pytest.raises(TypeError, match="traj_index"):
        trajectory_balanced_mean(values, torch.tensor([0.0, 1.0, 1.0]), mask, 2)
    with pytest.raises(ValueError, match="num_trajectories"):
        trajectory_balanced_mean(values, torch.tensor([0, 0, 0]), mask, -1)
