"""The ReSAIL objective: a hand-computed batch (eqs. 4-8), the switches, parent equality."""

from __future__ import annotations

import math

import pytest
import torch

from resail_pipeline.objectives import (
    ResailConfig,
    oel_loss,
    resail_loss,
    resail_objective,
    sdpo_loss,
    token_divergences,
    token_logprobs,
    truncated_is_weights,
)
from resail_pipeline.schemas import SCHEMAS

# three trajectories with 2, 3 and 1 steps: U = 6 steps
TRAJ = torch.tensor([0, 0, 1, 1, 1, 2])
L_DIST = [0.2, 0.4, 1.0, 0.6, 0.8, 0.3]
L_RET = [0.1, 0.3, 0.5, 0.7, 0.9, 0.6]
SCORES = [0.05, 0.30, 0.10, 0.30, 0.25, 0.25]


def per_step(values: list[float]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32, requires_grad=True)


def test_hand_computed_batch_for_eqs_4_to_8():
    config = ResailConfig(selection="top", rho=0.5, balancing=True, retention="privileged", lam=0.5)
    l_dist, l_ret = per_step(L_DIST), per_step(L_RET)
    loss, record = resail_objective(
        l_dist, TRAJ, 3, config, scores=torch.tensor(SCORES), l_ret=l_ret
    )
    # eq. 4: K = ceil(0.5 * 6) = 3; scores 0.30 (steps 1, 3), then 0.25 tied (steps 4, 5) -> step 4
    assert record.selected.tolist() == [1, 3, 4]
    assert record.selected_per_traj.tolist() == [1, 2, 0]
    assert (record.num_steps, record.num_selected, record.num_trajectories) == (6, 3, 3)
    # eq. 5: (1/|B|) * (0.4/1 + (0.6 + 0.8)/2); trajectory 3 has no selected step and gives 0
    loss_sel = (0.4 + (0.6 + 0.8) / 2) / 3
    # eq. 7: (1/|B|) * ((0.1 + 0.3)/2 + (0.5 + 0.7 + 0.9)/3 + 0.6/1), over all of U
    loss_ret = ((0.1 + 0.3) / 2 + (0.5 + 0.7 + 0.9) / 3 + 0.6) / 3
    assert abs(record.loss_sel - loss_sel) < 1e-6
    assert abs(record.loss_ret - loss_ret) < 1e-6
    # eq. 8
    assert abs(loss.item() - (loss_sel + 0.5 * loss_ret)) < 1e-6
    assert abs(record.loss - loss.item()) < 1e-7
    assert abs(record.score_selected_mean - (0.30 + 0.30 + 0.25) / 3) < 1e-6
    assert abs(record.score_all_mean - sum(SCORES) / 6) < 1e-6
    loss.backward()
    expected_dist = torch.tensor([0, 1 / 3, 0, 1 / 6, 1 / 6, 0])
    expected_ret = 0.5 * torch.tensor([1 / 6, 1 / 6, 1 / 9, 1 / 9, 1 / 9, 1 / 3])
    torch.testing.assert_close(l_dist.grad, expected_dist, atol=1e-7, rtol=0)
    torch.testing.assert_close(l_ret.grad, expected_ret, atol=1e-7, rtol=0)


def test_bottom_and_uniform_variants_by_hand():
    scores = torch.tensor(SCORES)
    bottom = ResailConfig(selection="bottom", rho=0.5, balancing=True, retention="none")
    loss, record = resail_objective(per_step(L_DIST), TRAJ, 3, bottom, scores=scores)
    assert record.selected.tolist() == [0, 2, 4]  # 0.05, 0.10, then the tie 0.25 -> step 4
    assert abs(loss.item() - (0.2 + (1.0 + 0.8) / 2) / 3) < 1e-6
    assert record.loss_ret == 0.0
    uniform = ResailConfig(selection="top", rho=0.5, balancing=False, retention="none")
    loss, record = resail_objective(per_step(L_DIST), TRAJ, 3, uniform, scores=scores)
    assert abs(loss.item() - (0.4 + 0.6 + 0.8) / 3) < 1e-6  # TLB off: uniform over selected


def test_rho_one_with_balancing_is_not_the_uniform_mean():
    config = ResailConfig(selection="top", rho=1.0, balancing=True, retention="none")
    loss, record = resail_objective(per_step(L_DIST), TRAJ, 3, config, scores=torch.tensor(SCORES))
    assert record.num_selected == 6
    balanced = ((0.2 + 0.4) / 2 + (1.0 + 0.6 + 0.8) / 3 + 0.3) / 3  # = 0.4667
    uniform = sum(L_DIST) / 6  # = 0.55
    assert abs(loss.item() - balanced) < 1e-6
    assert abs(balanced - uniform) > 0.05


def test_selection_none_with_balancing_is_the_balanced_mean_over_all_of_u():
    config = ResailConfig(selection="none", balancing=True, retention="none")
    loss, record = resail_objective(per_step(L_DIST), TRAJ, 4, config)  # |B| = 4, one without steps
    assert record.selected.tolist() == list(range(6))
    assert record.selected_per_traj.tolist() == [2, 3, 1, 0]
    assert abs(loss.item() - ((0.2 + 0.4) / 2 + (1.0 + 0.6 + 0.8) / 3 + 0.3) / 4) < 1e-6
    assert math.isnan(record.score_all_mean)


def test_ordinary_retention_uses_the_same_reduction():
    config = ResailConfig(selection="top", rho=0.5, retention="ordinary", lam=2.0)
    l_ret = per_step(L_RET)
    loss, record = resail_objective(
        per_step(L_DIST), TRAJ, 3, config, scores=torch.tensor(SCORES), l_ret=l_ret
    )
    loss_ret = ((0.1 + 0.3) / 2 + (0.5 + 0.7 + 0.9) / 3 + 0.6) / 3
    assert abs(record.loss_ret - loss_ret) < 1e-6
    assert abs(loss.item() - (record.loss_sel + 2.0 * loss_ret)) < 1e-6


def test_random_selection_is_reproducible_with_a_generator():
    config = ResailConfig(selection="random", rho=0.5, retention="none")
    picks = [
        resail_objective(
            per_step(L_DIST), TRAJ, 3, config, generator=torch.Generator().manual_seed(s)
        )[1].selected.tolist()
        for s in (1, 1, 2)
    ]
    assert picks[0] == picks[1] and picks[0] != picks[2]
    assert len(picks[0]) == 3 and len(set(picks[0])) == 3


def test_empty_update_batch_gives_a_zero_loss_that_backpropagates():
    config = ResailConfig()
    l_dist, l_ret = per_step([]), per_step([])
    loss, record = resail_objective(
        l_dist, torch.empty(0, dtype=torch.long), 3, config, scores=torch.empty(0), l_ret=l_ret
    )
    loss.backward()
    assert loss.item() == 0.0 and record.num_selected == 0 and record.num_steps == 0
    assert record.selected_per_traj.tolist() == [0, 0, 0]
    # and from logits
    student = torch.zeros(0, 5, 9, requires_grad=True)
    student_priv = torch.zeros(0, 5, 9, requires_grad=True)
    teacher = torch.zeros(0, 5, 9)
    loss, record = resail_loss(
        student,
        teacher,
        teacher,
        torch.zeros(0, 5, dtype=torch.bool),
        torch.empty(0, dtype=torch.long),
        2,
        config,
        student_priv_logits=student_priv,
    )
    loss.backward()
    assert loss.item() == 0.0 and record.tokens == 0
    assert student.grad is not None and not torch.isnan(student.grad).any()


def make_batch(seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    n, t, v = 6, 5, 30

    def logits(scale: float) -> torch.Tensor:
        return (torch.randn(n, t, v, generator=gen) * scale).requires_grad_()

    views = {
        "student_ord": logits(2.0),
        "student_priv": logits(2.0),
        "teacher_ord": logits(2.0),
        "teacher_priv": logits(3.0),
    }
    lengths = torch.tensor([5, 3, 4, 1, 5, 2])
    mask = torch.arange(t).unsqueeze(0) < lengths.unsqueeze(1)  # (N, T)
    return views, mask


def test_resail_loss_from_logits_equals_the_objective_on_its_per_step_terms():
    views, mask = make_batch()
    config = ResailConfig(selection="top", rho=0.5, retention="privileged", lam=0.7, top_k=8)
    loss, record = resail_loss(
        views["student_ord"],
        views["teacher_ord"],
        views["teacher_priv"],
        mask,
        TRAJ,
        3,
        config,
        student_priv_logits=views["student_priv"],
    )
    terms = token_divergences(
        views["student_ord"],
        views["teacher_ord"],
        views["teacher_priv"],
        mask,
        student_priv_logits=views["student_priv"],
        top_k=8,
    )
    expected, expected_record = resail_objective(
        terms.l_dist, TRAJ, 3, config, scores=terms.sensitivity, l_ret=terms.l_ret
    )
    torch.testing.assert_close(loss, expected, atol=1e-7, rtol=0)
    assert torch.equal(record.selected, expected_record.selected)
    torch.testing.assert_close(record.scores, terms.sensitivity)
    assert record.tokens == int(mask.sum()) and record.support_size == 8
    loss.backward()
    # the teacher and the scores carry no gradient; both student views do
    assert views["teacher_ord"].grad is None and views["teacher_priv"].grad is None
    assert torch.isfinite(views["student_ord"].grad).all()
    assert views["student_priv"].grad.abs().sum() > 0
    assert not record.scores.requires_grad
    # only selected steps feed the ordinary student's gradient (no ordinary retention here)
    unselected = sorted(set(range(6)) - set(record.selected.tolist()))
    assert (views["student_ord"].grad[unselected] == 0).all()
    assert set(record.as_metrics()) <= set(SCHEMAS["train_metrics"])


def test_switched_off_resail_equals_the_oel_parent_exactly():
    views, mask = make_batch(1)
    parent, _ = oel_loss(views["student_ord"], views["teacher_priv"], mask)
    off, record = resail_loss(
        views["student_ord"], None, views["teacher_priv"], mask, TRAJ, 3, ResailConfig.off()
    )
    assert torch.equal(off, parent)
    assert record.num_selected == 6 and record.loss_ret == 0.0


def test_switched_off_resail_equals_the_sdpo_parent_exactly():
    views, mask = make_batch(2)
    gen = torch.Generator().manual_seed(5)
    ids = torch.randint(0, 30, mask.shape, generator=gen)
    current = token_logprobs(views["student_ord"].detach(), ids)
    old = current - torch.rand(mask.shape, generator=gen)  # ratios up to e > 2: some capped
    beh = old + torch.randn(mask.shape, generator=gen)
    parent, _ = sdpo_loss(views["student_ord"], views["teacher_priv"], mask, ids, old, beh)
    weights = truncated_is_weights(current, old, beh)
    off, _ = resail_loss(
        views["student_ord"],
        None,
        views["teacher_priv"],
        mask,
        TRAJ,
        3,
        ResailConfig.off(),
        token_weights=weights,
    )
    assert torch.equal(off, parent)


def test_missing_views_are_reported_before_any_work():
    views, mask = make_batch()
    with pytest.raises(ValueError, match="teacher_ord_logits"):
        resail_loss(
            views["student_ord"], None, views["teacher_priv"], mask, TRAJ, 3, ResailConfig()
        )
    with pytest.raises(ValueError, match="student_priv_logits"):
        resail_loss(
            views["student_ord"],
            views["teacher_ord"],
            views["teacher_priv"],
            mask,
            TRAJ,
            3,
            ResailConfig(),
        )
    with pytest.raises(ValueError, match="scores"):
        resail_objective(per_step(L_DIST), TRAJ, 3, ResailConfig(retention="none"))
    with pytest.raises(ValueError, match="l_ret"):
        resail_objective(per_step(L_DIST), TRAJ, 3, ResailConfig(), scores=torch.tensor(SCORES))


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"rho": 0.0}, "rho"),
        ({"rho": 1.01}, "rho"),
        ({"lam": -0.5}, "lam"),
        ({"lam": float("inf")}, "lam"),
        ({"selection": "best"}, "selection"),
        ({"retention": "teacher"}, "retention"),
        ({"balancing": "yes"}, "balancing"),
        ({"top_k": 0}, "top_k"),
    ],
)
def test_config_errors_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        ResailConfig(**kwargs)


def test_config_defaults_and_parent_switches():
    config = ResailConfig()
    assert (config.selection, config.rho, config.balancing) == ("top", 0.25, True)
    assert (config.retention, config.lam, config.top_k) == ("privileged", 1.0, 20)
    off = ResailConfig.off()
    assert not off.uses_retention and not off.needs_scores
    assert not ResailConfig(retention="none", lam=1.0).uses_retention
