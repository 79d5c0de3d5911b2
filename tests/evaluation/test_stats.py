"""Success rates per decoding seed: mean and sample SD (n - 1), as the paper reports them."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from resail_pipeline.evaluation.stats import action_rates, mean_and_sd, summarize_eval_results
from resail_pipeline.schemas import SchemaError


def test_sd_is_the_sample_sd_with_n_minus_1():
    mean, sd = mean_and_sd([0.5, 0.6, 0.7])
    assert mean == pytest.approx(0.6) and sd == pytest.approx(0.1)
    _, sd_two = mean_and_sd([0.0, 1.0])
    assert sd_two == pytest.approx(math.sqrt(0.5))  # the population SD would be 0.5


def test_one_seed_has_no_sd_and_no_values_raise():
    mean, sd = mean_and_sd([0.25])
    assert mean == 0.25 and math.isnan(sd)
    with pytest.raises(ValueError, match="non-empty 1-d"):
        mean_and_sd([])
    with pytest.raises(ValueError, match="non-empty 1-d"):
        mean_and_sd([[0.1, 0.2]])


def _episodes(successes: dict[int, list[bool]], **keys) -> list[dict]:
    """Episodes of one (checkpoint, split, view): ``successes[seed][task]``."""
    group = {
        "policy_id": "p@0",
        "cycle": 1,
        "method": "oel",
        "env": "textcraft",
        "split": "test",
        "view": "ordinary",
    } | keys
    return [
        group | {"decoding_seed": seed, "task_id": task, "success": ok, "num_steps": 3}
        for seed, row in successes.items()
        for task, ok in enumerate(row)
    ]


def test_summary_takes_per_seed_rates_then_their_mean_and_sample_sd():
    results = pd.DataFrame(
        _episodes({2: [False, False], 0: [True, False], 1: [True, True]})
        + _episodes({0: [True, True], 1: [True, False]}, view="privileged")
    )
    summary = summarize_eval_results(results)
    assert summary["view"].tolist() == ["ordinary", "privileged"]
    ordinary = summary.iloc[0]
    assert ordinary["seeds"] == [0, 1, 2]
    assert ordinary["success_per_seed"] == [0.5, 1.0, 0.0]
    assert ordinary["mean"] == pytest.approx(0.5) and ordinary["sd"] == pytest.approx(0.5)
    assert ordinary["episodes"] == 6 and ordinary["tasks"] == 2
    privileged = summary.iloc[1]
    assert privileged["success_per_seed"] == [1.0, 0.5]
    assert privileged["sd"] == pytest.approx(math.sqrt(0.125))


def test_summary_rejects_seeds_on_different_tasks_missing_columns_and_no_rows():
    results = pd.DataFrame(_episodes({0: [True, False], 1: [True]}))
    with pytest.raises(ValueError, match="different task ids"):
        summarize_eval_results(results)
    with pytest.raises(SchemaError, match="missing column"):
        summarize_eval_results(results.drop(columns="view"))
    with pytest.raises(ValueError, match="no episodes"):
        summarize_eval_results(results.iloc[:0])
    twice = pd.DataFrame(_episodes({0: [True, False, True]})).assign(task_id=[0, 1, 1])
    with pytest.raises(ValueError, match=r"1 episode\(s\) recorded twice, e.g. task 1 with"):
        summarize_eval_results(twice)  # a rate over three rows of two tasks


def _paired_episodes(success: dict[int, list[bool]]) -> pd.DataFrame:
    """``eval_results`` rows: task -> success per decoding seed."""
    return pd.DataFrame(
        [
            {
                "policy_id": "p",
                "cycle": 1,
                "method": "oel",
                "env": "textcraft",
                "split": "test",
                "view": "ordinary",
                "decoding_seed": seed,
                "task_id": task,
                "success": ok,
                "num_steps": 3,
            }
            for task, per_seed in success.items()
            for seed, ok in enumerate(per_seed)
        ]
    )


def test_paired_difference_is_the_mean_task_difference_with_a_bootstrap_interval():
    from resail_pipeline.evaluation.stats import paired_difference

    base = _paired_episodes(
        {0: [False, False], 1: [True, False], 2: [False, False], 3: [True, True]}
    )
    better = _paired_episodes(
        {0: [True, True], 1: [True, False], 2: [True, False], 3: [True, True]}
    )
    # per-task differences: 1, 0, 0.5, 0 -> mean 0.375, the difference of the rates 7/8 - 3/8
    out = paired_difference(better, base, resamples=2000, seed=1)
    assert out["difference"] == pytest.approx(0.375) and out["tasks"] == 4
    # resampled means of four values in {0, 0.5, 1} lie on a grid of 1/8 within [0, 1]
    assert 0.0 <= out["low"] < 0.375 < out["high"] <= 1.0
    assert out == paired_difference(better, base, resamples=2000, seed=1)  # seeded
    same = paired_difference(base, base, resamples=100)
    assert (same["difference"], same["low"], same["high"]) == (0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="not paired"):
        paired_difference(better, base.iloc[1:], resamples=10)
    with pytest.raises(ValueError, match="resamples: at least 1, got 0"):
        paired_difference(better, base, resamples=0)
    # tasks 0 and 2 gained, none lost: a sign test over two tasks cannot tell (p = 0.5)
    assert (out["gained"], out["lost"], out["sign_p"]) == (2, 0, 0.5)


def test_the_percentile_interval_is_the_one_worked_by_hand():
    """Two tasks whose differences are -1 and 0: a resample's mean is -1, -0.5 or 0 with
    probabilities 1/4, 1/2, 1/4, so the 95% interval is [-1, 0] and the 40% one (the 30th and
    70th percentiles) [-0.5, -0.5]; one task has no interval over tasks (nan bounds)."""
    from resail_pipeline.evaluation.stats import paired_difference

    base = _paired_episodes({0: [True], 1: [False]})
    worse = _paired_episodes({0: [False], 1: [False]})
    wide = paired_difference(worse, base, resamples=4000)
    assert (wide["difference"], wide["low"], wide["high"]) == (-0.5, -1.0, 0.0)
    narrow = paired_difference(worse, base, resamples=4000, level=0.4)
    assert (narrow["low"], narrow["high"]) == (-0.5, -0.5)
    one = paired_difference(worse.iloc[:1], base.iloc[:1])  # not a zero-width interval
    assert one["difference"] == -1.0 and np.isnan(one["low"]) and np.isnan(one["high"])


def test_an_interval_resting_on_few_tasks_comes_with_its_sign_test():
    """Four of 256 tasks gain, none loses: every resample that draws one of them lifts the mean,
    and only about 1.8% draw none, so the 95% percentile interval lies above zero; the exact sign
    test over the four tasks that differ says p = 0.125."""
    from resail_pipeline.evaluation.stats import paired_difference, sign_test

    tasks = range(256)
    base = pd.DataFrame({"task_id": tasks, "decoding_seed": 0, "success": False})
    better = base.assign(success=[t < 4 for t in tasks])
    for frame in (base, better):
        frame["policy_id"], frame["cycle"], frame["method"] = "p@0", 0, "react"
        frame["env"], frame["split"], frame["view"], frame["num_steps"] = (
            "alfworld",
            "id",
            "ordinary",
            3,
        )
    out = paired_difference(better, base)
    assert out["low"] > 0 and (out["gained"], out["lost"]) == (4, 0)
    assert out["sign_p"] == pytest.approx(0.125)
    assert sign_test(16, 2) == pytest.approx(0.0013, abs=5e-5) and sign_test(3, 3) == 1.0
    with pytest.raises(ValueError, match="gained, lost: counts >= 0"):
        sign_test(-1, 2)


def test_a_replicated_difference_averages_each_tasks_difference_over_the_replicates():
    from resail_pipeline.evaluation.stats import replicated_difference

    base = _paired_episodes({0: [False, False], 1: [True, False], 2: [False, False]})
    first = _paired_episodes({0: [True, True], 1: [True, False], 2: [True, False]})
    second = _paired_episodes({0: [False, False], 1: [True, True], 2: [True, True]})
    # one replicate: per task 1, 0, 0.5 -> 0.5
    assert replicated_difference([(first, base)], resamples=500)["difference"] == pytest.approx(0.5)
    # per task: first 1, 0, 0.5; second 0, 0.5, 1 -> averaged 0.5, 0.25, 0.75 -> mean 0.5
    out = replicated_difference([(first, base), (second, base)], resamples=2000, seed=2)
    assert out["difference"] == pytest.approx(0.5) and out["tasks"] == 3
    # resampled means of three values in {0.25, 0.5, 0.75} lie within them
    assert 0.25 <= out["low"] < 0.5 < out["high"] <= 0.75
    with pytest.raises(ValueError, match="replicate 1 has other tasks than replicate 0"):
        replicated_difference([(first, base), (second.iloc[2:], base.iloc[2:])])
    with pytest.raises(ValueError, match="pairs: no replicate"):
        replicated_difference([])


def test_the_privileged_lead_pairs_the_views_of_each_split_evaluated_in_both():
    from resail_pipeline.evaluation.stats import paired_difference, privileged_lead

    # split `id`: privileged wins tasks 0-1 on both seeds where ordinary wins task 0 on seed 0
    ordinary = _episodes({0: [True, False, False], 1: [False, False, False]}, split="id")
    privileged = _episodes({0: [True, True, False], 1: [True, True, False]}, split="id")
    privileged = [row | {"view": "privileged"} for row in privileged]
    ood = _episodes({0: [True, True]}, split="ood")  # one view only: left out
    results = pd.DataFrame(ordinary + privileged + ood)
    lead = privileged_lead(results)
    assert lead.columns.tolist() == [
        *("split", "tasks", "difference", "low", "high", "gained", "lost", "sign_p")
    ]
    assert lead["split"].tolist() == ["id"] and lead["tasks"].tolist() == [3]
    # tasks 0 and 1 gained, none lost: the sign test's p is 2 * (1/2)^2
    assert lead[["gained", "lost", "sign_p"]].iloc[0].tolist() == [2, 0, 0.5]
    # per task: 1 - 0.5, 1 - 0, 0 - 0 -> 0.5
    assert lead["difference"].iloc[0] == pytest.approx(0.5)
    expected = paired_difference(
        pd.DataFrame(privileged), pd.DataFrame(ordinary)
    )  # the view led, then the view it leads
    assert (lead["low"].iloc[0], lead["high"].iloc[0]) == (expected["low"], expected["high"])
    assert privileged_lead(pd.DataFrame(ood)).empty
    one = results[(results["split"] == "id") & (results["task_id"] == 0)]
    assert privileged_lead(one).empty  # one task: no interval over tasks, so no lead
    with pytest.raises(SchemaError, match="missing column"):
        privileged_lead(results.drop(columns="view"))


def test_task_difference_pairs_tasks_whatever_their_seeds_and_episode_counts():
    from resail_pipeline.evaluation.stats import task_difference

    # two collections of tasks 0-2: task 0 twice in the first, task 2 twice in the second
    first = pd.DataFrame(
        {"task_id": [0, 0, 1, 2], "decoding_seed": [11, 12, 13, 14], "success": [1, 0, 1, 0]}
    )
    second = pd.DataFrame(
        {"task_id": [0, 1, 2, 2], "decoding_seed": [21, 22, 23, 24], "success": [1, 0, 1, 1]}
    )
    # per task: 0.5 - 1, 1 - 0, 0 - 1 -> mean -1/6 (the difference of the rates would be -1/4)
    out = task_difference(first, second, resamples=2000, seed=3)
    assert out["difference"] == pytest.approx(-1 / 6) and out["tasks"] == 3
    assert -1.0 <= out["low"] < -1 / 6 < out["high"] <= 1.0
    assert out == task_difference(first, second, resamples=2000, seed=3)  # seeded
    same = task_difference(first, first.assign(decoding_seed=[1, 2, 3, 4]), resamples=50)
    assert (same["difference"], same["low"], same["high"]) == (0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="not the same tasks"):
        task_difference(first, second[second["task_id"] != 1], resamples=10)
    with pytest.raises(ValueError, match=r"baseline: missing column\(s\) \['success'\]"):
        task_difference(first, second.drop(columns="success"), resamples=10)
    with pytest.raises(ValueError, match="level"):
        task_difference(first, second, level=1.0)


def _tasks(successes, seeds=1):
    """``eval_results``-like rows: task ``t`` succeeds in ``successes[t]`` of ``seeds`` seeds."""
    rows = [
        {"task_id": task, "decoding_seed": seed, "success": seed < wins}
        for task, wins in enumerate(successes)
        for seed in range(seeds)
    ]
    return pd.DataFrame(rows)


def test_variance_ratio_is_one_minus_the_correlation_of_two_policies_tasks():
    from resail_pipeline.evaluation.stats import variance_ratio

    half = _tasks([t % 2 for t in range(40)])
    assert variance_ratio(half, half) == 0  # the same tasks solved: pairing removes it all
    flipped = _tasks([1 - t % 2 for t in range(40)])
    assert variance_ratio(half, flipped) == pytest.approx(2.0)  # r = -1: 1 - r
    shifted = _tasks([t % 2 if t < 20 else 1 - t % 2 for t in range(40)])
    assert variance_ratio(half, shifted) == pytest.approx(1.0, abs=0.03)  # about unrelated
    with pytest.raises(ValueError, match="not the same tasks"):
        variance_ratio(half, _tasks([1] * 10))
    with pytest.raises(ValueError, match="no task varies"):
        variance_ratio(_tasks([1] * 40), _tasks([1] * 40))
    with pytest.raises(ValueError, match="needs at least 2, got 1") as one:  # not "flat"
        variance_ratio(_tasks([1]), _tasks([0]))
    assert type(one.value) is ValueError
    with pytest.raises(ValueError, match=r"results: 1 episode\(s\) without success"):
        nulls = pd.DataFrame({"task_id": [0, 1, 2], "success": [1.0, None, 0.0]})
        variance_ratio(nulls, _tasks([1, 1, 0]))  # the mean of task 1 would skip it


def test_minimum_detectable_effect_and_the_tasks_it_takes():
    from resail_pipeline.evaluation.stats import minimum_detectable_effect, tasks_for_effect

    baseline = _tasks([2 * (t % 2) for t in range(100)], seeds=2)  # per-task means 0 or 1
    variance = pd.Series([t % 2 for t in range(100)], dtype=float).var(ddof=1)
    z = 1.959964 + 0.841621
    expected = z * (0.25 * 2 * variance / 100) ** 0.5
    assert minimum_detectable_effect(baseline, ratio=0.25) == pytest.approx(expected, rel=1e-5)
    # four times the tasks halve it
    quarter = minimum_detectable_effect(baseline, ratio=0.25, tasks=400)
    assert quarter == pytest.approx(expected / 2, rel=1e-5)
    needed = tasks_for_effect(baseline, 0.04, ratio=0.25)
    assert minimum_detectable_effect(baseline, ratio=0.25, tasks=needed) <= 0.04
    assert minimum_detectable_effect(baseline, ratio=0.25, tasks=needed - 1) > 0.04
    with pytest.raises(ValueError, match="ratio"):
        minimum_detectable_effect(baseline, ratio=0.0)
    with pytest.raises(ValueError, match="effect"):
        tasks_for_effect(baseline, 4.0, ratio=0.25)  # a fraction, not points


def test_power_takes_every_variance_ratio_and_refuses_a_baseline_that_does_not_vary():
    """A ratio above 1 (policies succeeding on different tasks: pairing widens the difference) is
    a ratio :func:`variance_ratio` gives, up to 2; a baseline without variance over its tasks
    sizes nothing, and says so rather than giving an effect of 0 (or NaN for one task)."""
    from resail_pipeline.evaluation.stats import minimum_detectable_effect, tasks_for_effect

    baseline = _tasks([t % 2 for t in range(100)])
    unrelated = minimum_detectable_effect(baseline, ratio=1.0)
    assert minimum_detectable_effect(baseline, ratio=2.0) == pytest.approx(unrelated * 2**0.5)
    assert tasks_for_effect(baseline, 0.2, ratio=1.5) > tasks_for_effect(baseline, 0.2, ratio=1.0)
    with pytest.raises(ValueError, match=r"ratio: must be in \(0, 2\]"):
        minimum_detectable_effect(baseline, ratio=2.5)
    for flat in (_tasks([0] * 100), _tasks([1])):  # every task fails; one task
        with pytest.raises(ValueError, match="baseline: no variance over its"):
            minimum_detectable_effect(flat, ratio=0.5, tasks=100)
        with pytest.raises(ValueError, match="baseline: no variance over its"):
            tasks_for_effect(flat, 0.04, ratio=0.5)


def _steps(traj_id: str, actions: list[tuple[str | None, bool]]) -> list[dict]:
    """The steps of one episode: ``(action, accepted)`` each (``None``: no action parsed)."""
    return [
        {
            "traj_id": traj_id,
            "t": t,
            "observation": "",
            "admissible_actions": None,
            "prompt": "",
            "response": "",
            "action": action,
            "action_valid": valid,
            "next_observation": "",
            "reward": 0.0,
            "done": False,
        }
        for t, (action, valid) in enumerate(actions)
    ]


def test_action_rates_count_valid_steps_and_repeats_within_an_episode():
    """Valid: of every step; repeated: of every step after an episode's first, an action equal to
    the step before's (no action twice counts), never across two episodes."""
    results = pd.DataFrame(
        _episodes({0: [False, True]}, split="id")
        + _episodes({0: [False]}, split="id", view="privileged")
    )
    results["traj_id"] = ["a", "b", "c"]
    steps = pd.DataFrame(
        # listed out of order: t orders an episode's steps
        _steps("a", [("go to desk 1", True), ("go to desk 1", False), (None, False)])[::-1]
        + _steps("b", [("go to desk 1", True), ("take pen 1 from desk 1", True)])
        + _steps("c", [(None, False), (None, False), ("look", True), ("look", True)])
    )
    rates = action_rates(results, steps).set_index(["split", "view"])
    ordinary, privileged = rates.loc[("id", "ordinary")], rates.loc[("id", "privileged")]
    assert (ordinary["episodes"], ordinary["steps"]) == (2, 5)
    assert ordinary["valid"] == pytest.approx(3 / 5)
    assert ordinary["repeated"] == pytest.approx(1 / 3)  # a: 1 of 2; b: 0 of 1 (not a's last)
    assert privileged["valid"] == pytest.approx(2 / 4)
    assert privileged["repeated"] == pytest.approx(2 / 3)


def test_action_rates_refuse_steps_of_episodes_they_do_not_know():
    results = pd.DataFrame(_episodes({0: [True]}))
    results["traj_id"] = ["a"]
    steps = pd.DataFrame(_steps("a", [("look", True)]) + _steps("z", [("look", True)]))
    with pytest.raises(ValueError, match=r"eval_steps: 1 episodes not in eval_results, e\.g\. z"):
        action_rates(results, steps)
    with pytest.raises(SchemaError, match="eval_steps"):
        action_rates(results, steps.drop(columns="action_valid"))
