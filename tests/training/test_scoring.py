"""Scoring: the teacher's PI sensitivity equals the objectives library on separate forwards."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from resail_pipeline.checkpoints import load_policy
from resail_pipeline.generation import SamplingParams
from resail_pipeline.objectives import pi_sensitivity, topk_support
from resail_pipeline.schemas import check_columns
from resail_pipeline.training import sample_responses, score_steps, teacher_targets
from resail_pipeline.training.data import build_training_data
from resail_pipeline.training.views import ResponseLogits

from ._reference import response_mask, separate_view_logits


@pytest.fixture(scope="module")
def policy(sharp_checkpoint):
    return load_policy(sharp_checkpoint)


def test_score_steps_is_eq_3_on_the_scorers_own_support(
    policy, tiny_steps, tiny_summaries, tiny_responses
):
    model, tokenizer = policy
    scores = score_steps(
        model,
        tokenizer,
        tiny_steps,
        tiny_summaries,
        tiny_responses,
        scorer_id="tiny@0",
        top_k=5,
        micro_batch_steps=3,
    )
    check_columns(scores, "scores")
    assert sorted(scores["traj_id"].unique()) == [
        "t0",
        "t1",
        "t2",
        "t3",
    ]  # t4 has no accepted summary
    assert (scores["scorer_id"] == "tiny@0").all()

    data = build_training_data(tiny_steps, tiny_summaries, tokenizer, responses=tiny_responses)
    steps = [s for traj in data.trajectories for s in data.steps[traj]]
    responses = [s.response_ids for s in steps]
    with torch.no_grad():
        ordinary = separate_view_logits(model, steps, responses, "ordinary")
        privileged = separate_view_logits(model, steps, responses, "privileged")
    expected = pi_sensitivity(ordinary, privileged, response_mask(responses), top_k=5)
    got = scores.set_index(["traj_id", "t"]).loc[[(s.traj_id, s.t) for s in steps]]
    torch.testing.assert_close(
        torch.tensor(got["jsd"].to_numpy()).float(), expected, atol=1e-7, rtol=1e-4
    )
    assert float(expected.min()) > 1e-4
    assert got["tokens"].tolist() == [len(z) for z in responses]
    assert (got["jsd"] > 0).all()


def test_teacher_targets_on_a_given_support(policy, tiny_steps, tiny_summaries, tiny_responses):
    model, tokenizer = policy
    data = build_training_data(tiny_steps, tiny_summaries, tokenizer, responses=tiny_responses)
    steps = list(data.steps["t0"])
    responses = [s.response_ids for s in steps]
    with torch.no_grad():
        ordinary = separate_view_logits(model, steps, responses, "ordinary")
        privileged = separate_view_logits(model, steps, responses, "privileged")
    # a support that is not the teacher's own top-K: the lowest-logit ids
    support = topk_support(-ordinary, 4)
    targets = teacher_targets(
        ResponseLogits(model),
        steps,
        responses,
        support=support,
        ordinary=True,
        pad_id=tokenizer.pad_token_id,
        device=torch.device("cpu"),
    )
    mask = targets.mask
    expected = pi_sensitivity(ordinary, privileged, mask, support=support)
    torch.testing.assert_close(targets.scores, expected, atol=1e-7, rtol=1e-4)
    assert float(expected.min()) > 1e-4
    assert targets.privileged.shape == (*support.shape[:2], 5)
    # each row of log-probs is a distribution over K + 1 categories
    total = targets.privileged.exp().sum(-1)[mask]
    torch.testing.assert_close(total, torch.ones_like(total))

    no_ordinary = teacher_targets(
        ResponseLogits(model),
        steps,
        responses,
        support=support,
        ordinary=False,
        pad_id=tokenizer.pad_token_id,
        device=torch.device("cpu"),
    )
    assert no_ordinary.scores is None and no_ordinary.ordinary is None
    torch.testing.assert_close(no_ordinary.privileged, targets.privileged)


def test_sampled_responses_do_not_depend_on_batching(sharp_checkpoint, tiny_steps):
    from resail_pipeline.generation.transformers_backend import TransformersGenerator

    generator = TransformersGenerator.from_checkpoint(
        sharp_checkpoint, batch_size=3, progress=False
    )
    params = SamplingParams(temperature=1.0, max_new_tokens=4, seed=11)
    everything = sample_responses(generator, tiny_steps, params)
    check_columns(everything, "responses")
    assert len(everything) == len(tiny_steps) and (everything["sample"] == 0).all()
    assert all(
        len(ids) == len(lp)
        for ids, lp in zip(everything["token_ids"], everything["logprobs"], strict=True)
    )
    assert all(max(lp) <= 0 for lp in everything["logprobs"])
    some = sample_responses(generator, tiny_steps.iloc[[7, 2]], params)
    pd.testing.assert_frame_equal(
        some.reset_index(drop=True), everything.iloc[[7, 2]].reset_index(drop=True)
    )
    with pytest.raises(ValueError, match=r"params\.n"):
        sample_responses(generator, tiny_steps, SamplingParams(n=2))


def test_epds_teacher_answers_in_the_privileged_view(sharp_checkpoint, tiny_steps, tiny_summaries):
    """EPD's cache: the cycle-start policy answers each step's prompt with its trajectory's
    summary inserted (appendix G), from the step's own seed."""
    from resail_pipeline.generation.transformers_backend import TransformersGenerator
    from resail_pipeline.prompts import Summary, add_privileged, chat_prompt
    from resail_pipeline.training import usable_steps
    from resail_pipeline.training.scoring import step_seed

    generator = TransformersGenerator.from_checkpoint(
        sharp_checkpoint, batch_size=4, dtype="float32", progress=False
    )
    params = SamplingParams(temperature=1.0, max_new_tokens=4, seed=11)
    steps = usable_steps(tiny_steps, tiny_summaries)
    cached = sample_responses(generator, steps, params, summaries=tiny_summaries)
    assert (cached["view"] == "privileged").all() and len(cached) == len(steps)

    summary = tiny_summaries.set_index("traj_id").loc["t1"]
    step = steps[(steps.traj_id == "t1") & (steps.t == 1)].iloc[0]
    prompt = add_privileged(step.prompt, Summary(outcome=summary.outcome, text=summary.summary))
    (direct,) = generator.generate(
        [chat_prompt(generator.tokenizer, prompt)], params, seeds=[step_seed(11, "t1", 1)]
    )
    row = cached[(cached.traj_id == "t1") & (cached.t == 1)].iloc[0]
    assert list(row["token_ids"]) == list(direct.token_ids)
    ordinary = sample_responses(generator, steps, params)
    assert (ordinary["view"] == "ordinary").all()
    assert (ordinary["response"] != cached["response"]).any()  # the views differ

    with pytest.raises(ValueError, match="no accepted summary for trajectory 't4'"):
        sample_responses(generator, tiny_steps, params, summaries=tiny_summaries)


def test_scoring_split_over_two_worker_processes_gives_the_one_process_scores(
    sharp_checkpoint, tiny_steps, tiny_summaries, tiny_responses
):
    """``run.shards: 2`` on a CPU: two spawned scorers, one block of trajectories each."""
    from resail_pipeline.checkpoints import read_checkpoint_info
    from resail_pipeline.pipelines.score.nodes import score_node, trajectory_blocks

    assert trajectory_blocks(tiny_steps, 2) == [["t0", "t1"], ["t2", "t3", "t4"]]  # 5 + 5 steps
    policy = read_checkpoint_info(sharp_checkpoint).to_frame()
    train = {"resail": {"top_k": 5}, "engine": {"kind": "single", "precision": "fp32"}}
    frames = {
        shards: score_node(
            tiny_steps,
            tiny_summaries,
            tiny_responses,
            policy,
            train,
            {"micro_batch_steps": 3},
            {"env": "textcraft", "method": "oel", "shards": shards},
        )
        for shards in (1, 2)
    }
    one, two = frames[1], frames[2]
    assert two[["traj_id", "t", "scorer_id", "tokens"]].equals(
        one[["traj_id", "t", "scorer_id", "tokens"]]
    )
    assert sorted(set(two["traj_id"])) == ["t0", "t1", "t2", "t3"]  # t4 has no accepted summary
    # other batch compositions round differently
    torch.testing.assert_close(
        torch.tensor(two["jsd"].to_numpy()),
        torch.tensor(one["jsd"].to_numpy()),
        atol=1e-7,
        rtol=1e-5,
    )
