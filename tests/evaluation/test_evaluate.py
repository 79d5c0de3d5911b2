"""Evaluation runs on the real TextCraft adapter with the tiny random policy."""

from __future__ import annotations

import pandas as pd
import pytest

from resail_pipeline.envs import make_env
from resail_pipeline.evaluation.evaluate import (
    EvalConfig,
    build_experience,
    evaluate_policy,
    experience_by_task,
    reference_episodes,
    spread,
)
from resail_pipeline.evaluation.stats import summarize_eval_results
from resail_pipeline.experience import SummarizeConfig
from resail_pipeline.generation import SamplingParams
from resail_pipeline.generation.transformers_backend import TransformersGenerator
from resail_pipeline.prompts import OUTCOME_FAILURE


@pytest.fixture()
def generator(tiny_model, tiny_tokenizer):
    return TransformersGenerator(tiny_model, tiny_tokenizer, policy_id="tiny@0", progress=False)


def _textcraft():
    return make_env("textcraft", max_steps=2)


def test_config_checks_fields():
    with pytest.raises(ValueError, match="views"):
        EvalConfig(views=("ordinary", "oracle"))
    with pytest.raises(ValueError, match="decoding_seeds"):
        EvalConfig(decoding_seeds=(1, 1))
    with pytest.raises(ValueError, match="num_tasks"):
        EvalConfig(num_tasks=0)
    with pytest.raises(ValueError, match="temperature"):
        EvalConfig(temperature=-1.0)
    with pytest.raises(ValueError, match="splits"):
        EvalConfig(splits=())


def test_both_views_share_tasks_and_initial_states(generator):
    config = EvalConfig(
        num_tasks=3, decoding_seeds=(0, 1), views=("ordinary", "privileged"), max_new_tokens=4
    )
    tasks = spread(make_env("textcraft").task_ids("test"), 3)
    experience = pd.DataFrame(
        {
            "task_id": tasks[:2],
            "traj_id": ["r0", "r1"],
            "outcome": [OUTCOME_FAILURE] * 2,
            "summary": ["Failure analysis:\n- Failure diagnosis: x"] * 2,
            "accepted": [True, True],
        }
    )
    results, steps = evaluate_policy(
        _textcraft, generator, config, cycle=0, method="react", experience=experience
    )
    ordinary = results[results["view"] == "ordinary"]
    privileged = results[results["view"] == "privileged"]
    # the third task's summary was dropped: it is left out of both views, which stay paired
    assert len(ordinary) == 4 and set(ordinary["task_id"]) == set(tasks[:2])
    assert len(privileged) == 4 and set(privileged["task_id"]) == set(tasks[:2])
    assert (results["num_steps"] == 2).all() and not results["success"].any()
    assert set(steps["traj_id"]) == set(results["traj_id"])
    # the initial observation of a task is the same under every view and seed
    first = steps[steps["t"] == 0].merge(results[["traj_id", "task_id"]], on="traj_id")
    assert (first.groupby("task_id")["observation"].nunique() == 1).all()
    summary = summarize_eval_results(results)
    assert sorted(summary["view"]) == ["ordinary", "privileged"]
    assert (summary["mean"] == 0.0).all()


def test_privileged_view_needs_experience(generator):
    config = EvalConfig(num_tasks=1, decoding_seeds=(0,), views=("privileged",))
    with pytest.raises(ValueError, match="experience"):
        evaluate_policy(_textcraft, generator, config, cycle=0, method="react")
    other_task = pd.DataFrame(
        {
            "task_id": [-1],
            "traj_id": ["r"],
            "outcome": [OUTCOME_FAILURE],
            "summary": ["Failure analysis:\n- Failure diagnosis: x"],
            "accepted": [True],
        }
    )
    with pytest.raises(ValueError, match="none of the 1 evaluation tasks has an accepted summary"):
        evaluate_policy(
            _textcraft, generator, config, cycle=0, method="react", experience=other_task
        )


def test_a_rejected_model_summary_of_the_experience_falls_back_to_the_rules(generator):
    # the tiny random policy writes no valid summary: with on_rejected "drop" a cycle would lose
    # every trajectory, the fixed Experience none
    config = EvalConfig(num_tasks=2, max_new_tokens=4)
    summarize = SummarizeConfig(
        source="model",
        max_attempts=1,
        on_rejected="drop",
        sampling=SamplingParams(temperature=0.7, max_new_tokens=8, seed=0),
    )
    trajectories, _, experience = build_experience(
        _textcraft, generator, config, summarize, decoding_seed=7
    )
    assert experience["accepted"].all()
    assert set(experience["source"]) == {"rules_fallback"}
    assert set(experience_by_task(experience)) == set(trajectories["task_id"])


def test_experience_table_is_checked():
    with pytest.raises(ValueError, match="missing column"):
        experience_by_task(pd.DataFrame({"task_id": [1]}))
    table = pd.DataFrame(
        {
            "task_id": [1, 1, 2],
            "traj_id": ["a", "b", "c"],
            "outcome": ["success"] * 3,
            "summary": ["s"] * 3,
            "accepted": [True, True, False],
        }
    )
    assert list(experience_by_task(table.iloc[1:])) == [1]  # the rejected row gives nothing
    with pytest.raises(ValueError, match="more than one summary"):
        experience_by_task(table)


def test_reference_episodes_cover_each_task_once(generator):
    config = EvalConfig(num_tasks=2, max_new_tokens=4)
    trajectories, steps = reference_episodes(_textcraft, generator, config, decoding_seed=1000)
    assert list(trajectories["task_id"]) == spread(make_env("textcraft").task_ids("test"), 2)
    assert (trajectories["decoding_seed"] == 1000).all()
    assert set(steps["traj_id"]) == set(trajectories["traj_id"])


def test_each_split_is_evaluated_and_summarised_apart(generator):
    config = EvalConfig(
        splits=("train", "test"), num_tasks=2, decoding_seeds=(0,), max_new_tokens=4
    )
    results, _ = evaluate_policy(_textcraft, generator, config, cycle=0, method="react")
    env = make_env("textcraft")
    assert list(results["split"]) == ["train"] * 2 + ["test"] * 2
    assert list(results["task_id"]) == spread(env.task_ids("train"), 2) + spread(
        env.task_ids("test"), 2
    )
    assert sorted(summarize_eval_results(results)["split"]) == ["test", "train"]


def test_build_experience_summarises_the_reference_episodes(generator):
    config = EvalConfig(num_tasks=2, max_new_tokens=4)
    trajectories, steps, experience = build_experience(
        _textcraft, generator, config, SummarizeConfig(source="rules"), decoding_seed=7
    )
    assert set(steps["traj_id"]) == set(trajectories["traj_id"])
    assert list(experience["traj_id"]) == list(trajectories["traj_id"])
    assert list(experience["task_id"]) == list(trajectories["task_id"])
    assert experience["accepted"].all()  # the rules always write a valid summary
    by_task = experience_by_task(experience)
    assert set(by_task) == set(trajectories["task_id"])
    assert all(s.text.startswith("Failure analysis:") for s in by_task.values())


def test_a_subset_of_tasks_is_spread_over_the_split():
    ids = list(range(100, 110))
    assert spread(ids, None) == ids
    assert spread(ids, 10) == ids
    assert spread(ids, 3) == [100, 103, 106]
    assert spread(ids, 1) == [100]
    # TextCraft's test ids are sorted by recipe depth: a subset reaches the deep end
    test = make_env("textcraft").task_ids("test")
    assert spread(test, 4) == [test[0], test[25], test[50], test[75]]
