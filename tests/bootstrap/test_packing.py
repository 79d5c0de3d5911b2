"""Packed rows compute exactly what their sequences compute one by one."""

from __future__ import annotations

import random

import pytest
import torch

from resail_pipeline.bootstrap.cloning import batch_loss, batch_losses
from resail_pipeline.bootstrap.demonstrations import collect_demonstrations
from resail_pipeline.bootstrap.packing import (
    Branch,
    PackedRow,
    collate,
    group_steps,
    guided_groups,
    pack_rows,
    plan_batches,
)
from resail_pipeline.bootstrap.vocabulary import train_tokenizer
from resail_pipeline.prompts import add_privileged, chat_prompt, render_user_message


def _rows(vocab: int) -> list[PackedRow]:
    rng = random.Random(0)

    def ids(n: int) -> tuple[int, ...]:
        return tuple(rng.randrange(4, vocab) for _ in range(n))

    return [
        PackedRow(ids(9), (Branch(ids(5), 2, 3.0, False), Branch(ids(7), 4, 1.0, True))),
        PackedRow(ids(4), (Branch(ids(3), 0, 1.0, False),)),
    ]


def _separate_losses(model, rows: list[PackedRow]) -> tuple[torch.Tensor, torch.Tensor]:
    """The weighted mean response and prompt cross-entropies, each sequence run on its own."""
    totals, weights = torch.zeros(2), torch.zeros(2)
    for row in rows:
        for ids, prompt_len, w in row.sequences():
            logits = model(input_ids=torch.tensor([ids])).logits[0]  # (T, V)
            losses = torch.nn.functional.cross_entropy(
                logits[:-1], torch.tensor(ids[1:]), reduction="none"
            )  # (T - 1,): token t + 1 predicted at t
            parts = (losses[prompt_len - 1 :], losses[: prompt_len - 1])
            totals = totals + w * torch.stack([p.sum() for p in parts])
            weights = weights + w * torch.tensor([float(len(p)) for p in parts])
    response, prompt = totals / weights
    return response, prompt


def _separate_loss(model, rows: list[PackedRow]) -> torch.Tensor:
    """The weighted mean response cross-entropy, each sequence run on its own."""
    return _separate_losses(model, rows)[0]


def test_packed_loss_equals_separate_sequences(tiny_model):
    rows = _rows(tiny_model.config.vocab_size)
    batch = collate(rows, pad_id=0)
    assert batch.input_ids.shape == (2, 24)  # 21 tokens padded to a multiple of 8
    assert batch.target.numel() == 3 + 3 + 3
    with torch.no_grad():
        packed = batch_loss(tiny_model, batch)
        separate = _separate_loss(tiny_model, rows)
    assert packed.item() == pytest.approx(separate.item(), rel=1e-5)


def test_prompt_targets_add_every_prompt_token_as_separate_sequences_weigh_them(tiny_model):
    rows = _rows(tiny_model.config.vocab_size)
    plain = collate(rows, pad_id=0)
    batch = collate(rows, pad_id=0, prompt_targets=True)
    assert torch.equal(batch.input_ids, plain.input_ids)
    # every token but each row's first is a target; the responses' are those of the plain batch
    assert batch.target.numel() == (9 + 5 + 7 - 1) + (4 + 3 - 1)
    assert torch.equal(batch.target[batch.response], plain.target)
    assert torch.equal(batch.weight[batch.response], plain.weight)
    # a trunk token stands for every branch that repeats it: 3 + 1 occurrences in the first row
    assert batch.weight[:8].tolist() == [4.0] * 8
    with torch.no_grad():
        response, prompt = batch_losses(tiny_model, batch)
        expected = _separate_losses(tiny_model, rows)
        objective = batch_loss(tiny_model, batch, prompt_weight=0.5)
    assert response.item() == pytest.approx(expected[0].item(), rel=1e-5)
    assert prompt.item() == pytest.approx(expected[1].item(), rel=1e-5)
    assert objective.item() == pytest.approx(response.item() + 0.5 * prompt.item(), rel=1e-6)
    with torch.no_grad():
        assert batch_losses(tiny_model, plain)[1].item() == 0.0  # no prompt targets collated


def test_a_row_without_a_trunk_is_refused():
    with pytest.raises(ValueError, match="trunk"):
        collate([PackedRow((), (Branch((7, 8), 1, 1.0, False),))], pad_id=0)


def test_branches_see_the_trunk_and_themselves_only():
    row = PackedRow((5, 6), (Branch((7, 8), 1, 1.0, False), Branch((9,), 0, 1.0, True)))
    batch = collate([row], pad_id=0, pad_to_multiple_of=1)
    mask = batch.attention_mask[0, 0]
    assert batch.position_ids[0].tolist() == [0, 1, 2, 3, 2]
    # the second branch (index 4) sees the trunk (0, 1) and itself, never the first branch
    assert mask[4].tolist() == [True, True, False, False, True]
    assert mask[3].tolist() == [True, True, True, True, False]
    # targets: token 8 predicted from 7's position, 9 from the trunk's last position
    assert batch.source.tolist() == [2, 1]
    assert batch.target.tolist() == [8, 9]


def test_a_batch_moves_to_a_device_whole():
    row = PackedRow((5, 6), (Branch((7, 8), 1, 2.0, False),))
    batch = collate([row], pad_id=0)
    moved = batch.to("meta")  # the tensors' device without a GPU
    for name, tensor in vars(moved).items():
        assert tensor.device.type == "meta", name
        assert (
            tensor.shape == getattr(batch, name).shape
            and tensor.dtype == getattr(batch, name).dtype
        )


def test_plan_batches_respects_the_token_budget():
    lengths = [10, 50, 20, 40, 30, 200]
    batches = plan_batches(lengths, token_budget=80, rng=random.Random(0))
    assert sorted(i for b in batches for i in b) == list(range(6))
    for b in batches:
        assert len(b) == 1 or len(b) * max(lengths[i] for i in b) <= 80
    with pytest.raises(ValueError, match="token_budget"):
        plan_batches(lengths, token_budget=0, rng=random.Random(0))


def _demonstrations(task_ids: list[int]):
    """Planner demonstrations of ``task_ids`` with mistakes and a stalled one per task, the
    tokenizer trained on them, and the trained (not stalled) ones."""
    demos = collect_demonstrations(
        "textcraft",
        task_ids,
        episodes_per_task=4,
        mistake_rate=0.3,
        stalled_share=0.25,
        seed=0,
        progress=False,
    )
    tokenizer = train_tokenizer("textcraft", demos, vocab_size=4096)
    return demos, tokenizer, [d for d in demos if not d.stalled]


def test_rows_hold_exactly_the_pipeline_prompts_and_responses():
    """Every packed sequence is chat_prompt(tok, render_user_message(h[, summary])) + response."""
    demos, tokenizer, trained = _demonstrations([1])
    groups = group_steps(trained, demos, privileged_share=1.0, seed=0)
    assert sum(g.count for g in groups) == sum(len(d.steps) for d in trained)
    assert all(sum(g.summaries.values()) == g.count for g in groups)  # share 1: every occurrence
    assert all(g.ordinary == g.count for g in groups)  # ordinary_share 1 by default
    rows = pack_rows(groups, tokenizer, max_branches=3)
    assert all(1 <= len(r.branches) <= 3 for r in rows)
    expected = set()
    for group in groups:
        views = [group.message] + [add_privileged(group.message, s) for s in group.summaries]
        for message in views:
            expected.add(chat_prompt(tokenizer, message) + group.response + tokenizer.eos_token)
    packed = {tokenizer.decode(ids) for row in rows for ids, _, _ in row.sequences()}
    assert packed == expected
    for row in rows:
        for ids, prompt_len, _ in row.sequences():
            assert tokenizer.decode(ids[prompt_len:]).startswith("<thinking></thinking>")
    # the stalled demonstration is guidance only: its last steps (stuck) are never trained on
    stalled = next(d for d in demos if d.stalled)
    assert render_user_message(stalled.steps[-1].history) not in {g.message for g in groups}


def test_an_ordinary_share_keeps_the_privileged_draws_and_drops_ordinary_views():
    demos, tokenizer, trained = _demonstrations([1, 2])
    both = group_steps(trained, demos, privileged_share=0.5, seed=0)
    assert group_steps(trained, demos, privileged_share=0.5, seed=0, ordinary_share=1.0) == both
    occurrences = sum(g.count for g in both)
    half = group_steps(trained, demos, privileged_share=0.5, seed=0, ordinary_share=0.5)
    assert sum(g.count for g in half) == occurrences
    assert 0.25 * occurrences < sum(g.ordinary for g in half) < 0.75 * occurrences
    alone = group_steps(trained, demos, privileged_share=1.0, seed=0, ordinary_share=0.0)
    assert all(g.ordinary == 0 for g in alone)
    rows = pack_rows(alone, tokenizer, max_branches=4)
    assert rows and all(b.privileged for r in rows for b in r.branches)
    assert sum(b.weight for r in rows for b in r.branches) == occurrences


def test_a_renamed_copy_renames_prompt_response_and_guidance_alike():
    from resail_pipeline.bootstrap.renaming import Renaming
    from resail_pipeline.prompts.render import Summary

    demos = collect_demonstrations(
        "textcraft",
        [1],
        episodes_per_task=3,
        mistake_rate=0.0,
        stalled_share=0.34,
        seed=0,
        progress=False,
    )
    trained = [d for d in demos if not d.stalled]
    plain = group_steps(trained, demos, privileged_share=1.0, seed=0)
    goal = trained[0].initial.task.removeprefix("craft ").split()[0]
    other = "crimson" if goal != "crimson" else "warped"
    rename = Renaming({goal: other, other: goal})
    renamed = group_steps(trained, demos, privileged_share=1.0, seed=0, rename=lambda _: rename)
    assert len(renamed) == len(plain)
    for a, b in zip(plain, renamed, strict=True):
        assert (b.message, b.response, b.count) == (rename(a.message), rename(a.response), a.count)
        assert b.summaries == {
            Summary(s.outcome, rename(s.text)): n for s, n in a.summaries.items()
        }
    assert f"craft {other}" in renamed[0].message and f"craft {goal}" not in renamed[0].message


def test_guided_episodes_are_trained_with_their_own_summary_alone():
    import dataclasses

    demos, tokenizer, trained = _demonstrations([1, 2])
    guides = {1: demos[0].summary, 2: demos[-1].summary}
    guided = [dataclasses.replace(d, guide=guides[d.task_id]) for d in trained]
    groups = guided_groups(guided + guided[:1])  # the first episode twice: its steps count twice
    assert all(g.ordinary == 0 for g in groups)
    assert all(sum(g.summaries.values()) == g.count for g in groups)
    total = sum(len(d.steps) for d in guided) + len(guided[0].steps)
    assert sum(g.count for g in groups) == total
    for demo in guided:
        for step in demo.steps:
            message = render_user_message(step.history)
            assert any(g.message == message and g.summaries[demo.guide] for g in groups)
    # one summary per group: the same step reached under another summary is another group
    assert all(len(g.summaries) == 1 for g in groups)
    assert {next(iter(g.summaries)) for g in groups} == set(guides.values())
    rows = pack_rows(groups, tokenizer, max_branches=4)
    assert all(b.privileged for r in rows for b in r.branches)
    assert sum(b.weight for r in rows for b in r.branches) == total
    with pytest.raises(ValueError, match=r"guide: episode 0/textcraft/train/1/\d+ was not"):
        guided_groups(trained[:1])
