"""The baselines of table 7 on a tiny random Qwen3: each response source and loss against a hand
computation, and what the run publishes."""

from __future__ import annotations

import contextlib
import math

import pytest
import torch

from resail_pipeline.generation import Generation
from resail_pipeline.schemas import check_columns
from resail_pipeline.training import ConfigError
from resail_pipeline.training.baselines import action_reward, normalise_action
from resail_pipeline.training.run import TrainingRun

from ._reference import padded, response_mask, separate_view_logits
from .test_trainer import weights

SUCCESSES = ("t0", "t2")  # the successful trajectories with an accepted summary (conftest)


@pytest.mark.parametrize(
    ("response", "logged", "reward"),
    [
        ("<action>get 1 oak logs</action>", "get 1 oak logs", 1.0),
        ("<thinking>craft</thinking><action>  Get 1  OAK logs </action>", "get 1 oak logs", 1.0),
        ("<action>get 2 oak logs</action>", "get 1 oak logs", 0.0),  # an argument differs
        ("<action>craft 1 oak logs</action>", "get 1 oak logs", 0.0),  # the type differs
        ("get 1 oak logs", "get 1 oak logs", 0.0),  # no action tag: invalid
        ("<thinking><action>get 1 oak logs</action></thinking>", "get 1 oak logs", 0.0),
        ("<action>get 1 oak logs</action>", "", 0.0),  # the logged response did not parse
    ],
)
def test_grpo_reward_is_exact_action_match(response, logged, reward):
    assert action_reward(response, logged) == reward
    assert normalise_action(" Craft  4\tOak planks ") == "craft 4 oak planks"


def test_react_never_trains(make_config):
    with pytest.raises(ConfigError, match="never trains"):
        TrainingRun(make_config(method="react"))


def _hand_cross_entropy(run: TrainingRun, batch: tuple[str, ...]) -> float:
    """Token-mean NLL of each step's fixed response over the batch, from plain forwards."""
    steps = [s for traj in batch for s in run.data.steps[traj]]
    responses = [s.response_ids for s in steps]
    model = run.trainer.engine.inner.model
    with torch.no_grad():
        logits = separate_view_logits(model, steps, responses, "ordinary")  # (N, T, V)
    mask = response_mask(responses)
    ids = padded(responses, mask.shape).long()
    nll = -torch.log_softmax(logits.double(), -1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)
    return float(nll[mask].mean())


def test_rft_fits_the_successful_logged_responses(make_config, tiny_tokenizer, tiny_steps):
    config = make_config(method="rft", schedule={"updates": 3, "trajectories_per_update": 2})
    run = TrainingRun(config)
    # only the successes, their logged response and the end token as the target
    assert run.data.trajectories == SUCCESSES
    step = run.data.steps["t0"][0]
    logged = tiny_steps.loc[(tiny_steps.traj_id == "t0") & (tiny_steps.t == 0), "response"].item()
    expected = tiny_tokenizer(logged, add_special_tokens=False).input_ids
    assert step.response_ids == tuple([*expected, tiny_tokenizer.eos_token_id][:5])
    # three updates of two from two successes: the successes are reused, one pass per update
    assert len(run.schedule) == 3 and all(set(b) == set(SUCCESSES) for b in run.schedule)

    hand = _hand_cross_entropy(run, run.schedule[0])
    outcome = run.run()
    metrics = outcome.metrics
    assert metrics["loss"][0] == pytest.approx(hand, rel=1e-5)
    assert metrics["num_selected"].tolist() == metrics["num_steps"].tolist()
    assert metrics["score_all_mean"].isna().all() and metrics["loss_ret"].eq(0).all()
    assert metrics["loss"].iloc[-1] < metrics["loss"].iloc[0]  # the same targets, fitted
    assert set(outcome.selected["traj_id"]) == set(SUCCESSES)


def test_epd_fits_the_cached_responses(make_config, tiny_responses):
    config = make_config(method="epd", schedule={"updates": 1, "trajectories_per_update": 3})
    run = TrainingRun(config)
    cached = tiny_responses.set_index(["traj_id", "t"])["token_ids"]
    for traj in run.data.trajectories:
        for step in run.data.steps[traj]:
            assert step.response_ids == tuple(cached[(traj, step.t)][:5])
    hand = _hand_cross_entropy(run, run.schedule[0])
    outcome = run.run()
    assert outcome.metrics["loss"][0] == pytest.approx(hand, rel=1e-5)


def test_rft_without_a_success_publishes_the_policy_unchanged(
    make_config, sharp_checkpoint, tmp_path, tiny_steps, tiny_summaries
):
    from resail_pipeline.training import write_inputs

    failures = tiny_summaries.assign(outcome="failure")
    manifest = write_inputs(
        tmp_path / "failures", policy=sharp_checkpoint, steps=tiny_steps, summaries=failures
    )
    config = make_config(method="rft", run={"manifest": str(manifest)})
    outcome = TrainingRun(config).run()
    assert outcome.metrics.empty
    check_columns(outcome.metrics, "train_metrics")  # no rows, but the contract's columns
    before, after = weights(sharp_checkpoint), weights(config.run.checkpoint)
    assert all(torch.equal(before[k], after[k]) for k in before)


class ScriptedGenerator:
    """A fake generator for this test only: every prompt gets the same scripted group of texts,
    tokenised with the end token, so that the rewards are known."""

    def __init__(self, tokenizer, texts: list[str]) -> None:
        self.tokenizer = tokenizer
        self.policy_id = "scripted"
        self.texts = texts
        self.calls = []

    def generate(self, prompts, params, seeds=None):
        self.calls.append((len(prompts), params.n))
        assert params.n == len(self.texts)
        out = []
        for _ in prompts:
            for text in self.texts:
                ids = self.tokenizer(text, add_special_tokens=False).input_ids
                out.append(Generation(text=text, token_ids=(*ids, self.tokenizer.eos_token_id)))
        return out


def test_grpo_loss_is_the_group_normalised_surrogate(make_config, tiny_tokenizer):
    texts = ["<action>get 1 oak logs</action>", "<action>get 2 oak logs</action>", "x", "y"]
    config = make_config(
        method="grpo",
        grpo={"samples": 4},
        schedule={"updates": 2, "trajectories_per_update": 2},
        engine={"micro_batch_steps": 3},
    )
    run = TrainingRun(config)
    run.trainer.generator = ScriptedGenerator(tiny_tokenizer, texts)
    outcome = run.run()
    metrics = outcome.metrics

    # by hand: rewards (1, 0, 0, 0) in every group; A = (r - mean) / (sample SD + 1e-6)
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0])
    sd = math.sqrt(((rewards - 0.25) ** 2).sum() / 3)
    advantages = (rewards - 0.25) / (sd + 1e-6)
    lengths = torch.tensor(
        [len(tiny_tokenizer(t, add_special_tokens=False).input_ids) + 1 for t in texts]
    )
    # first update: the student is the reference and the sampler, so the ratio is 1, the KL 0, and
    # the token-mean surrogate is -sum_i A_i |z_i| / sum_i |z_i| (every step has the same group)
    expected = float(-(advantages * lengths).sum() / lengths.sum())
    assert metrics["loss"][0] == pytest.approx(expected, rel=1e-5)
    assert metrics["kl"][0] == pytest.approx(0.0, abs=1e-6)
    assert metrics["clip_fraction"][0] == 0.0
    assert metrics["reward_mean"].tolist() == [0.25, 0.25]
    assert metrics["kl"][1] > 0  # the student has moved away from the reference
    # one call per update: every step of U (all successes), a group of 4 each
    steps = [sum(len(run.data.steps[t]) for t in batch) for batch in run.schedule]
    assert run.trainer.generator.calls == [(n, 4) for n in steps]
    assert set(outcome.selected["traj_id"]) <= set(SUCCESSES)


def test_the_in_loop_sampler_decodes_as_responses_cuda_graphs_says(make_config):
    """``train.responses.cuda_graphs`` reaches the trainer's sampler: ``auto`` decodes as before
    on a CPU; ``true`` through the static step (on a CPU, without a graph), with the same
    groups, so the same update."""
    outcomes = {}
    for graphs in ("auto", True):
        config = make_config(
            f"graphs-{graphs}",
            method="grpo",
            grpo={"samples": 2},
            schedule={"updates": 1},
            responses={"cuda_graphs": graphs},
        )
        run = TrainingRun(config)
        assert run.trainer.generator.static_decode is (graphs is True)
        outcomes[graphs] = run.run().metrics
    for column in ("loss", "reward_mean", "kl"):
        assert outcomes[True][column].tolist() == pytest.approx(outcomes["auto"][column].tolist())


def test_grpo_samples_groups_from_the_student(make_config, sharp_checkpoint):
    config = make_config(method="grpo", grpo={"samples": 2}, schedule={"updates": 1})
    run = TrainingRun(config)
    outcome = run.run()
    metrics = outcome.metrics
    assert math.isfinite(metrics["loss"][0]) and metrics["reward_mean"][0] == 0.0
    # a random model never writes the logged action: every advantage is 0, the KL is 0 at the
    # first update, so nothing moves but through the (zero) gradient
    assert metrics["loss"][0] == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize(
    ("method", "phases"),
    [
        ("oel_resail", ["sampling", "training", "step"]),  # samples in the loop
        ("sdpo", ["sampling", "training", "step"]),  # its cached responses: nothing sampled
        ("rft", ["training", "step"]),
        ("grpo", ["sampling", "training", "step"]),
    ],
)
def test_every_trainer_marks_its_memory_phases(make_config, method, phases):
    """Each update enters the memory plan's phases once each, in order, through
    ``memory_phase``: what an instrument measures (the GPU check's time and peak per phase)."""
    sections = {"grpo": {"samples": 2}} if method == "grpo" else {}
    run = TrainingRun(make_config(method=method, schedule={"updates": 2}, **sections))
    entered: list[str] = []
    run.trainer.memory_phase = lambda name: entered.append(name) or contextlib.nullcontext()
    run.run()
    assert entered == phases * 2
