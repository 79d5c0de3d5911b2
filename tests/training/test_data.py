"""Inputs: the manifest and its hashes, usable trajectories, cached responses, the schedule."""

from __future__ import annotations

import logging

import pandas as pd
import pytest

from resail_pipeline.prompts import Summary, add_privileged, chat_prompt
from resail_pipeline.schemas import SchemaError
from resail_pipeline.training import InputError, read_manifest, usable_steps, write_inputs
from resail_pipeline.training.data import batch_schedule, build_training_data


def test_manifest_records_and_checks_every_file(
    tmp_path, tiny_checkpoint, tiny_steps, tiny_summaries
):
    path = write_inputs(
        tmp_path, policy=tiny_checkpoint, steps=tiny_steps, summaries=tiny_summaries
    )
    manifest = read_manifest(path)
    assert manifest.responses is None
    assert set(manifest.sha256) == {"policy", "steps", "summaries"}
    pd.testing.assert_frame_equal(pd.read_parquet(manifest.steps), tiny_steps)

    tiny_steps.head(2).to_parquet(manifest.steps)  # the file changes after the manifest
    with pytest.raises(InputError, match=r"steps: .* changed since the manifest"):
        read_manifest(path)


def test_the_probe_set_is_an_optional_input_with_its_hash(
    tmp_path, tiny_checkpoint, tiny_steps, tiny_summaries, tiny_probe_set
):
    inputs = {"policy": tiny_checkpoint, "steps": tiny_steps, "summaries": tiny_summaries}
    with pytest.raises(SchemaError, match=r"probe: probe_set table is missing .*\['support'\]"):
        write_inputs(tmp_path, **inputs, probe=tiny_probe_set.drop(columns="support"))
    path = write_inputs(tmp_path, **inputs, probe=tiny_probe_set)
    manifest = read_manifest(path)
    assert set(manifest.sha256) == {"policy", "steps", "summaries", "probe"}
    pd.testing.assert_frame_equal(pd.read_parquet(manifest.probe), tiny_probe_set)

    tiny_probe_set.head(2).to_parquet(manifest.probe)
    with pytest.raises(InputError, match=r"probe: .* changed since the manifest"):
        read_manifest(path)


def test_write_inputs_checks_schemas_first(tmp_path, tiny_checkpoint, tiny_steps, tiny_summaries):
    with pytest.raises(SchemaError, match=r"steps.*missing column\(s\) \['prompt'\]"):
        write_inputs(
            tmp_path,
            policy=tiny_checkpoint,
            steps=tiny_steps.drop(columns="prompt"),
            summaries=tiny_summaries,
        )
    assert not (tmp_path / "inputs.yaml").exists()


def test_trajectories_without_an_accepted_summary_are_dropped(
    tiny_tokenizer, tiny_steps, tiny_summaries, caplog
):
    with caplog.at_level(logging.INFO):
        data = build_training_data(tiny_steps, tiny_summaries, tiny_tokenizer)
    assert data.trajectories == ("t0", "t1", "t2", "t3")
    assert data.dropped == 1 and data.num_steps == 8
    assert "5 trajectories with steps: 4 usable, 1 dropped" in caplog.text
    assert list(usable_steps(tiny_steps, tiny_summaries)["traj_id"].unique()) == [
        "t0",
        "t1",
        "t2",
        "t3",
    ]
    assert len(tiny_steps) == 10  # the input frame is left as it was


def test_views_are_the_chat_formatted_ordinary_and_privileged_prompts(
    tiny_tokenizer, tiny_steps, tiny_summaries
):
    data = build_training_data(tiny_steps, tiny_summaries, tiny_tokenizer)
    step = data.steps["t1"][1]
    message = tiny_steps.query("traj_id == 't1' and t == 1")["prompt"].item()
    summary = tiny_summaries.query("traj_id == 't1'")
    privileged = add_privileged(
        message, Summary(summary["outcome"].item(), summary["summary"].item())
    )
    assert step.prompt == chat_prompt(tiny_tokenizer, message)
    encode = lambda text: tuple(tiny_tokenizer(text, add_special_tokens=False)["input_ids"])  # noqa: E731
    assert step.ordinary_ids == encode(chat_prompt(tiny_tokenizer, message))
    assert step.privileged_ids == encode(chat_prompt(tiny_tokenizer, privileged))
    assert step.response_ids == ()


def test_cached_responses_are_attached_and_cut(tiny_tokenizer, tiny_steps, tiny_summaries):
    responses = pd.DataFrame(
        {
            "traj_id": tiny_steps["traj_id"],
            "t": tiny_steps["t"],
            "sample": 0,
            "response": "x",
            "token_ids": [[5, 6, 7, 8]] * len(tiny_steps),
            "logprobs": [[-1.0, -2.0, -3.0, -4.0]] * len(tiny_steps),
            "policy_id": "tiny@0",
        }
    )
    data = build_training_data(
        tiny_steps, tiny_summaries, tiny_tokenizer, responses=responses, max_response_tokens=3
    )
    step = data.steps["t0"][2]
    assert step.response_ids == (5, 6, 7) and step.behaviour_logprobs == (-1.0, -2.0, -3.0)

    missing = responses[~((responses["traj_id"] == "t2") & (responses["t"] == 1))]
    with pytest.raises(InputError, match=r"no cached response for step \(traj_id='t2', t=1\)"):
        build_training_data(tiny_steps, tiny_summaries, tiny_tokenizer, responses=missing)
    ragged = responses.assign(logprobs=[[-1.0]] * len(responses))
    with pytest.raises(InputError, match="4 token ids but 1 logprobs"):
        build_training_data(tiny_steps, tiny_summaries, tiny_tokenizer, responses=ragged)


def test_malformed_inputs_are_errors(tiny_tokenizer, tiny_steps, tiny_summaries):
    with pytest.raises(InputError, match=r"step \(traj_id='t0', t=1\) appears twice"):
        build_training_data(
            pd.concat([tiny_steps, tiny_steps.iloc[[1]]]), tiny_summaries, tiny_tokenizer
        )
    rejected = tiny_summaries.assign(accepted=False)
    with pytest.raises(
        InputError, match="no step belongs to a trajectory with an accepted summary"
    ):
        build_training_data(tiny_steps, rejected, tiny_tokenizer)


def test_schedule_draws_without_replacement_within_a_pass():
    trajs = [f"t{i}" for i in range(12)]
    batches = batch_schedule(trajs, updates=3, per_update=4, seed=7)
    assert [len(b) for b in batches] == [4, 4, 4]
    assert sorted(t for b in batches for t in b) == sorted(trajs)
    assert batches == batch_schedule(trajs, updates=3, per_update=4, seed=7)
    assert batches != batch_schedule(trajs, updates=3, per_update=4, seed=8)


def test_schedule_starts_a_new_pass_when_the_corpus_runs_out(caplog):
    trajs = ["a", "b", "c", "d", "e"]
    with caplog.at_level(logging.WARNING):
        batches = batch_schedule(trajs, updates=4, per_update=2, seed=0)
    # a pass of 5 gives batches of 2, 2, 1; the fourth batch opens the second pass
    assert [len(b) for b in batches] == [2, 2, 1, 2]
    assert sorted(t for b in batches[:3] for t in b) == trajs
    assert all(len(set(b)) == len(b) for b in batches)
    assert "2 passes" in caplog.text
