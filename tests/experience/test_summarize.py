"""The summaries table: rules and model sources, the fallback, Parquet, and what consumers read."""

from __future__ import annotations

import logging

import pandas as pd
import pytest

from resail_pipeline.config import ConfigError, build
from resail_pipeline.datasets import AtomicParquetDataset
from resail_pipeline.envs import make_env
from resail_pipeline.experience.evidence import build_evidence_table
from resail_pipeline.experience.summarize import (
    SummarizeConfig,
    configured_planner,
    summarize_trajectories,
    usable_summaries,
)
from resail_pipeline.experience.validation import validate_summary
from resail_pipeline.generation import SamplingParams
from resail_pipeline.generation.transformers_backend import TransformersGenerator
from resail_pipeline.prompts import add_privileged
from resail_pipeline.schemas import SCHEMAS, SchemaError

from ._episodes import EPISODES, tables
from ._fakes import GOOD_FAILURE, FakeGenerator, is_success_prompt

RULES = SummarizeConfig(source="rules")


def test_rules_summaries_round_trip_through_parquet(tmp_path):
    trajectories, steps = tables(*EPISODES)
    summaries = summarize_trajectories(trajectories, steps, RULES)
    assert list(summaries.columns) == list(SCHEMAS["summaries"])
    assert summaries["traj_id"].tolist() == trajectories["traj_id"].tolist()
    assert summaries["outcome"].tolist() == ["success", "failure", "success", "failure"]
    assert summaries["accepted"].all()
    assert (summaries["source"] == "rules").all()
    assert (summaries["attempts"] == 1).all()

    dataset = AtomicParquetDataset(str(tmp_path / "summaries.parquet"), schema="summaries")
    dataset.save(summaries)
    reread = dataset.load()
    evidence = {e.traj_id: e for e in build_evidence_table(trajectories, steps)}
    for row in reread.itertuples():
        verdict = validate_summary(row.summary, row.outcome, evidence[row.traj_id])
        assert verdict.accepted, (row.traj_id, verdict.reasons)
        assert verdict.summary.text == row.summary


def test_model_rejections_are_recorded_not_raised(tiny_tokenizer):
    trajectories, steps = tables(*EPISODES)
    generator = FakeGenerator(
        tiny_tokenizer, lambda p, a: "no summary" if is_success_prompt(p) else GOOD_FAILURE
    )
    config = SummarizeConfig(source="model", max_attempts=2)
    summaries = summarize_trajectories(trajectories, steps, config, generator)
    assert summaries["accepted"].tolist() == [False, True, False, True]
    assert summaries["attempts"].tolist() == [2, 1, 2, 1]
    assert summaries["source"].tolist() == ["model"] * 4
    assert summaries.loc[0, "summary"] == ""
    assert (
        summaries.loc[0, "rejection_reasons"][0]
        == "attempt 1: missing_heading: expected 'Guidance summary:'"
    )
    assert summaries.loc[1, "rejection_reasons"] == []


def test_rules_fallback_replaces_rejected_model_summaries(tiny_tokenizer):
    trajectories, steps = tables(*EPISODES)
    generator = FakeGenerator(
        tiny_tokenizer, lambda p, a: "no summary" if is_success_prompt(p) else GOOD_FAILURE
    )
    config = SummarizeConfig(source="model", max_attempts=2, on_rejected="rules")
    summaries = summarize_trajectories(trajectories, steps, config, generator)
    assert summaries["accepted"].all()
    assert summaries["source"].tolist() == ["rules_fallback", "model", "rules_fallback", "model"]
    assert summaries.loc[0, "attempts"] == 2  # the model's attempts
    assert summaries.loc[0, "summary"].startswith("Guidance summary:\n- Minimal plan: `get 1 dark")
    assert len(summaries.loc[0, "rejection_reasons"]) > 0  # the model's rejections are kept


def test_usable_summaries_drop_the_rejected_and_log_counts(tiny_tokenizer, caplog):
    trajectories, steps = tables(*EPISODES)
    generator = FakeGenerator(
        tiny_tokenizer, lambda p, a: "no summary" if is_success_prompt(p) else GOOD_FAILURE
    )
    summaries = summarize_trajectories(
        trajectories, steps, SummarizeConfig(source="model", max_attempts=1), generator
    )
    with caplog.at_level(logging.INFO, logger="resail_pipeline.experience.summarize"):
        kept, by_id = usable_summaries(trajectories, summaries)
    assert kept["traj_id"].tolist() == [trajectories["traj_id"][1], trajectories["traj_id"][3]]
    assert list(kept.columns) == list(trajectories.columns)
    assert set(by_id) == set(kept["traj_id"])
    assert "kept 2 of 4 trajectories; dropped 2 whose summary was never accepted" in caplog.text
    # the privileged view takes the accepted text as its insert
    summary = by_id[kept["traj_id"][0]]
    message = add_privileged("ordinary message", summary)
    assert message == (
        "ordinary message\n\nA failed trajectory for the current task:\n\n"
        + summaries.loc[1, "summary"]
        + "\n\nUse this information as a reference and continue solving the original task."
    )


def test_usable_summaries_refuse_summaries_of_other_trajectories():
    trajectories, steps = tables(*EPISODES)
    summaries = summarize_trajectories(trajectories, steps, RULES)
    with pytest.raises(ValueError, match=r"summaries: no row for 1 of 4 trajectories"):
        usable_summaries(trajectories, summaries.iloc[1:])
    with pytest.raises(ValueError, match=r"summaries\.traj_id: duplicated"):
        usable_summaries(trajectories, pd.concat([summaries, summaries.iloc[:1]]))
    flipped = summaries.assign(outcome=summaries["outcome"].iloc[::-1].tolist())
    with pytest.raises(ValueError, match=r"summaries\.outcome: trajectory .* is a success"):
        usable_summaries(trajectories, flipped)
    edited = summaries.copy()
    edited.loc[2, "summary"] = "Guidance summary:\n- Minimal plan: x"
    with pytest.raises(ValueError, match=r"summaries\.summary: the accepted summary of .*missing"):
        usable_summaries(trajectories, edited)
    with pytest.raises(
        SchemaError, match=r"summaries: summaries table is missing .*\['accepted'\]"
    ):
        usable_summaries(trajectories, summaries.drop(columns=["accepted"]))


def test_bad_input_fails_before_any_summary_is_made(tiny_tokenizer):
    trajectories, steps = tables(*EPISODES)
    generator = FakeGenerator(tiny_tokenizer, lambda p, a: GOOD_FAILURE)
    model = SummarizeConfig(source="model")
    with pytest.raises(ValueError, match="generator: source 'model' needs"):
        summarize_trajectories(trajectories, steps, model)
    with pytest.raises(
        SchemaError, match=r"steps: steps table is missing column\(s\) \['action'\]"
    ):
        summarize_trajectories(trajectories, steps.drop(columns=["action"]), model, generator)
    with pytest.raises(ValueError, match="is incomplete"):
        summarize_trajectories(trajectories, steps.iloc[1:], model, generator)
    assert generator.calls == []


def test_no_trajectories_give_an_empty_table():
    trajectories, steps = tables(*EPISODES)
    summaries = summarize_trajectories(trajectories.iloc[:0], steps.iloc[:0], RULES)
    assert summaries.empty
    assert list(summaries.columns) == list(SCHEMAS["summaries"])


def test_config_from_parameters():
    config = build(
        SummarizeConfig,
        {
            "source": "model",
            "max_attempts": 2,
            "sampling": {"temperature": 0.7, "max_new_tokens": 64},
        },
        "summarize",
    )
    assert config == SummarizeConfig(
        source="model", max_attempts=2, sampling=SamplingParams(temperature=0.7, max_new_tokens=64)
    )
    assert build(SummarizeConfig, {}) == SummarizeConfig()
    with pytest.raises(ConfigError, match=r"^summarize: unknown key\(s\) \['retries'\]"):
        build(SummarizeConfig, {"retries": 2}, "summarize")
    with pytest.raises(ConfigError, match=r"^summarize\.sampling: unknown key\(s\) \['temp'\]"):
        build(SummarizeConfig, {"sampling": {"temp": 1.0}}, "summarize")
    with pytest.raises(
        ConfigError, match=r"^summarize\.sampling\.top_p: must be a finite number, got '1'"
    ):
        build(SummarizeConfig, {"sampling": {"top_p": "1"}}, "summarize")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"source": "oracle"}, "source: must be one of"),
        ({"max_attempts": 0}, "max_attempts: must be a positive integer"),
        ({"max_attempts": 2.0}, "max_attempts: must be a positive integer"),
        ({"on_rejected": "keep"}, "on_rejected: must be one of"),
        ({"corrected_plan": "oracle"}, "corrected_plan: must be one of"),
        ({"sampling": SamplingParams(n=2)}, r"sampling\.n: must be 1"),
        ({"sampling": SamplingParams(temperature=0.0)}, r"sampling\.temperature: greedy decoding"),
    ],
)
def test_config_range_checks(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SummarizeConfig(**kwargs)


def test_the_walkthrough_planner_is_built_only_where_asked_and_possible():
    textcraft = lambda: make_env("textcraft")  # noqa: E731
    assert configured_planner(SummarizeConfig(), textcraft) is None
    with pytest.raises(ValueError, match=r"^summarize\.corrected_plan: 'walkthrough' needs"):
        configured_planner(SummarizeConfig(corrected_plan="walkthrough"), textcraft)


def test_greedy_decoding_is_allowed_with_a_single_attempt():
    config = SummarizeConfig(max_attempts=1, sampling=SamplingParams(temperature=0.0))
    assert config.sampling.temperature == 0.0


def test_the_tiny_model_run_records_rejections(tiny_model, tiny_tokenizer, tmp_path):
    trajectories, steps = tables(*EPISODES)
    generator = TransformersGenerator(tiny_model, tiny_tokenizer, policy_id="tiny", batch_size=4)
    sampling = SamplingParams(temperature=1.0, max_new_tokens=12, seed=3)
    config = SummarizeConfig(source="model", max_attempts=2, sampling=sampling)
    summaries = summarize_trajectories(trajectories, steps, config, generator)
    # a random model writes no acceptable summary: every attempt is used and every rejection kept
    assert not summaries["accepted"].any()
    assert (summaries["attempts"] == 2).all()
    for reasons in summaries["rejection_reasons"]:
        assert {r.split(":")[0] for r in reasons} == {"attempt 1", "attempt 2"}
    dataset = AtomicParquetDataset(str(tmp_path / "summaries.parquet"), schema="summaries")
    dataset.save(summaries)
    kept, by_id = usable_summaries(trajectories, dataset.load())
    assert kept.empty and by_id == {}

    fallback = SummarizeConfig(
        source="model", max_attempts=1, on_rejected="rules", sampling=sampling
    )
    summaries = summarize_trajectories(trajectories, steps, fallback, generator)
    assert summaries["accepted"].all()
    assert (summaries["source"] == "rules_fallback").all()
    kept, by_id = usable_summaries(trajectories, summaries)
    assert len(kept) == len(by_id) == 4
