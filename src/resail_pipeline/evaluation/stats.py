"""Success rates per decoding seed and their mean and sample standard deviation; what the
actions were (valid, repeated); paired differences with their intervals, the privileged view's
lead among them; the power of a paired comparison.

The paper reports each checkpoint's success as the mean and the *sample* standard deviation
(``n - 1`` in the denominator) of the per-seed success rates over three decoding seeds
(appendix A.3). Rates here are fractions in ``[0, 1]``; the report turns them into percent.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist

import numpy as np
import pandas as pd

from resail_pipeline.schemas import VIEW_ORDINARY, VIEW_PRIVILEGED, check_columns

#: The columns an evaluation is grouped by: one summary row per (checkpoint, split, view).
SUMMARY_KEYS = ("policy_id", "cycle", "method", "env", "split", "view")


def mean_and_sd(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (``ddof = 1``) of ``values``.

    >>> [round(x, 6) for x in mean_and_sd([0.5, 0.6, 0.7])]
    [0.6, 0.1]

    One value has no sample SD: it is returned as ``nan``. An empty sequence raises.
    """
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1 or array.size == 0:
        raise ValueError(f"values: expected a non-empty 1-d sequence, got shape {array.shape}")
    mean = float(array.mean())
    sd = float(array.std(ddof=1)) if array.size > 1 else math.nan
    return mean, sd


def summarize_eval_results(results: pd.DataFrame) -> pd.DataFrame:
    """The ``eval_summary`` table of an ``eval_results`` table.

    For each (checkpoint, split, view) the success rate of every decoding seed is the fraction of
    its episodes that succeeded; ``mean`` and ``sd`` are taken over those per-seed rates (sample
    SD). Every seed of a group must cover the same tasks, each once, so that seeds differ only in
    decoding.

    Returns:
        One row per group with ``success_per_seed`` (list, ordered by ``seeds``), ``seeds``,
        ``mean``, ``sd``, ``episodes`` (all episodes of the group, over every seed) and ``tasks``
        (episodes per seed).
    """
    check_columns(results, "eval_results", source="eval_results")
    if results.empty:
        raise ValueError("eval_results: no episodes to summarise")
    twice = results.duplicated([*SUMMARY_KEYS, "task_id", "decoding_seed"])
    if twice.any():
        first = results[twice].iloc[0]
        raise ValueError(
            f"eval_results: {int(twice.sum())} episode(s) recorded twice, e.g. task "
            f"{first['task_id']} with decoding seed {first['decoding_seed']} in "
            f"{first['split']}/{first['view']}; each is played once"
        )
    rows = []
    for key, group in results.groupby(list(SUMMARY_KEYS), sort=True, dropna=False):
        tasks_per_seed = {
            seed: frozenset(g["task_id"]) for seed, g in group.groupby("decoding_seed", sort=True)
        }
        if len(set(tasks_per_seed.values())) != 1:
            raise ValueError(
                f"eval_results: decoding seeds of {dict(zip(SUMMARY_KEYS, key, strict=True))} "
                "were run on different task ids; seeds must share the same tasks"
            )
        per_seed = group.groupby("decoding_seed", sort=True)["success"].mean()
        mean, sd = mean_and_sd(per_seed.to_list())
        rows.append(
            {
                **dict(zip(SUMMARY_KEYS, key, strict=True)),
                "success_per_seed": [float(x) for x in per_seed.to_list()],
                "seeds": [int(s) for s in per_seed.index],
                "mean": mean,
                "sd": sd,
                "episodes": len(group),
                "tasks": len(next(iter(tasks_per_seed.values()))),
            }
        )
    return pd.DataFrame(rows)


#: bootstrap resamples of the tasks behind every paired interval
BOOTSTRAP_RESAMPLES = 10_000


def action_rates(results: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """How an evaluation's policy acted, per split and view: of every step, the share whose action
    the environment accepted (``valid``), and of every step after an episode's first, the share
    that repeated the step before's action, response without an action included (``repeated``):
    a policy that loops repeats, whatever the game makes of it.

    Args:
        results: its ``eval_results`` (which episode is of which split and view).
        steps: its ``eval_steps`` (every step of those episodes).

    Returns:
        One row per (split, view): ``episodes``, ``steps``, ``valid``, ``repeated`` (fractions).
    """
    check_columns(results, "eval_results", source="eval_results")
    check_columns(steps, "steps", source="eval_steps")
    unknown = set(steps["traj_id"]) - set(results["traj_id"])
    if unknown:
        raise ValueError(
            f"eval_steps: {len(unknown)} episodes not in eval_results, e.g. {min(unknown)}"
        )
    ordered = steps.sort_values(["traj_id", "t"])
    action = ordered["action"].fillna("")
    previous = action.groupby(ordered["traj_id"]).shift()  # NaN at an episode's first step
    frame = ordered.assign(
        repeated=(action == previous).where(previous.notna()),  # NaN where there is none
    ).merge(results[["traj_id", "split", "view"]], on="traj_id", how="left")
    rows = [
        {
            "split": split,
            "view": view,
            "episodes": group["traj_id"].nunique(),
            "steps": len(group),
            "valid": float(group["action_valid"].mean()),
            "repeated": float(group["repeated"].astype(float).mean()),
        }
        for (split, view), group in frame.groupby(["split", "view"], sort=True)
    ]
    return pd.DataFrame(rows, columns=["split", "view", "episodes", "steps", "valid", "repeated"])


def paired_difference(
    results: pd.DataFrame,
    baseline: pd.DataFrame,
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    level: float = 0.95,
    seed: int = 0,
) -> dict[str, float]:
    """The paired difference in success of ``results`` over ``baseline`` and its bootstrap interval.

    Both are ``eval_results`` of one split and view, run on the same tasks with the same decoding
    seeds. Each task's success is averaged over its seeds; the difference is the mean over tasks
    of (task success in ``results`` - in ``baseline``), which equals the difference of the two
    mean success rates where every task has the same decoding seeds. The interval is the
    percentile bootstrap over tasks (tasks resampled with replacement, the seeds of a task kept
    together), seeded for reproducibility.

    Returns:
        ``difference``, ``low``, ``high`` (fractions), ``tasks`` (the number of tasks), and
        ``gained``, ``lost`` and ``sign_p`` (:func:`sign_test`).
    """
    return replicated_difference([(results, baseline)], resamples=resamples, level=level, seed=seed)


def replicated_difference(
    pairs: Sequence[tuple[pd.DataFrame, pd.DataFrame]],
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    level: float = 0.95,
    seed: int = 0,
) -> dict[str, float]:
    """The paired difference of :func:`paired_difference`, averaged over replicates of a
    comparison (e.g. its training seeds), and its bootstrap interval over tasks.

    Each ``(results, baseline)`` pair is one replicate, paired by task and decoding seed as in
    :func:`paired_difference`; every replicate must hold the same tasks. Each task's difference is
    averaged over its decoding seeds, then over the replicates; the interval is the percentile
    bootstrap over tasks of that average, conditional on the replicates: the shift one training
    run gives every task alike is not in it (the spread of the replicates' own differences
    shows it, to be reported beside it). One pair is :func:`paired_difference`.

    Returns:
        ``difference``, ``low``, ``high`` (fractions), ``tasks`` (the number of tasks), and
        ``gained``, ``lost`` and ``sign_p`` (:func:`sign_test`) of the averaged differences.
    """
    if not pairs:
        raise ValueError("pairs: no replicate to average")
    per_task = [paired_per_task(results, baseline) for results, baseline in pairs]
    for k, other in enumerate(per_task[1:], start=1):
        if not other.index.equals(per_task[0].index):
            raise ValueError(
                f"pairs: replicate {k} has other tasks than replicate 0 ({len(other)} vs "
                f"{len(per_task[0])}, {len(other.index.symmetric_difference(per_task[0].index))} "
                "unmatched)"
            )
    mean = np.mean([series.to_numpy() for series in per_task], axis=0)  # (tasks,)
    return _over_tasks(mean, resamples=resamples, level=level, seed=seed)


def paired_per_task(results: pd.DataFrame, baseline: pd.DataFrame) -> pd.Series:
    """Each task's difference in success of ``results`` over ``baseline``, paired by decoding seed
    and averaged over them (a series by ``task_id``, sorted): what :func:`paired_difference`
    resamples.

    Raises:
        ValueError: a frame without episodes or with an episode twice, or the two not holding the
            same ``(task_id, decoding_seed)`` episodes.
    """
    for frame, name in ((results, "results"), (baseline, "baseline")):
        check_columns(frame, "eval_results", source=name)
        if frame.empty:
            raise ValueError(f"{name}: no episodes")
    keys = ["task_id", "decoding_seed"]
    a = results.set_index(keys)["success"].astype(float).sort_index()
    b = baseline.set_index(keys)["success"].astype(float).sort_index()
    if a.index.has_duplicates or b.index.has_duplicates:
        raise ValueError("results, baseline: one episode per (task_id, decoding_seed) is expected")
    if not a.index.equals(b.index):
        unmatched = len(a.index.symmetric_difference(b.index))
        raise ValueError(
            "results, baseline: not paired; both must hold the same (task_id, decoding_seed) "
            f"episodes ({len(a)} vs {len(b)}, {unmatched} unmatched)"
        )
    return (a - b).groupby(level="task_id").mean()


def privileged_lead(results: pd.DataFrame) -> pd.DataFrame:
    """Per split, the privileged view's success minus the ordinary view's, paired by task and
    decoding seed, with its 95% bootstrap interval over tasks (:func:`paired_difference`): what
    the premise asks of a policy that teaches itself (a lead whose interval lies above zero).

    Args:
        results: an evaluation's ``eval_results``; splits evaluated in one view only, or on one
            task only, are left out.

    Returns:
        One row per split evaluated in both views: ``split``, ``tasks``, ``difference``, ``low``,
        ``high`` (fractions), and the tasks the privileged view ``gained`` and ``lost`` with their
        sign test's ``sign_p`` (the interval alone is too narrow where few tasks differ).
    """
    check_columns(results, "eval_results", source="eval_results")
    rows = []
    for split, episodes in results.groupby("split", sort=True):
        views = dict(tuple(episodes.groupby("view")))
        # one task has no interval over tasks (a smoke run's): its lead is not a lead
        if {VIEW_ORDINARY, VIEW_PRIVILEGED} <= views.keys() and episodes["task_id"].nunique() > 1:
            try:
                lead = paired_difference(views[VIEW_PRIVILEGED], views[VIEW_ORDINARY])
            except ValueError as error:  # "results" is the privileged view, "baseline" the other
                raise ValueError(f"{split}, privileged vs ordinary view: {error}") from None
            rows.append({"split": split, **lead})
    columns = ["split", "tasks", "difference", "low", "high", "gained", "lost", "sign_p"]
    return pd.DataFrame(rows, columns=columns)


def task_difference(
    results: pd.DataFrame,
    baseline: pd.DataFrame,
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    level: float = 0.95,
    seed: int = 0,
) -> dict[str, float]:
    """The difference in success of ``results`` over ``baseline`` over the same tasks, whatever
    the decoding seeds, and its bootstrap interval.

    For two samples of one task set whose episodes were not decoded with the same seeds, e.g.
    the trajectories two cycles collect on ``train`` (each task once or twice, each trajectory
    with a seed of its own). Each task's episodes are averaged first; the difference is the mean
    over tasks of (task success in ``results`` - in ``baseline``), its interval the percentile
    bootstrap over tasks as in :func:`paired_difference`. Where a task has more episodes in one
    sample than another, this weights tasks equally, unlike the difference of the two rates.

    Returns:
        As :func:`paired_difference`.
    """
    a, b = _per_task(results, "results"), _per_task(baseline, "baseline")
    if not a.index.equals(b.index):
        raise ValueError(
            "results, baseline: not the same tasks "
            f"({len(a)} vs {len(b)}, {len(a.index.symmetric_difference(b.index))} unmatched)"
        )
    return _over_tasks((a - b).to_numpy(), resamples=resamples, level=level, seed=seed)


def _over_tasks(
    per_task: np.ndarray, *, resamples: int, level: float, seed: int
) -> dict[str, float]:
    """The mean of the per-task differences ``per_task`` (tasks,), its percentile-bootstrap
    interval at ``level`` (tasks resampled with replacement, seeded), how many tasks gained and
    lost, and the exact two-sided sign test over those (:func:`sign_test`): the percentile
    interval is too narrow where few tasks differ (four of 256, all one way, put it above zero;
    the sign test gives p = 0.125). One task has no interval over tasks: ``nan`` bounds."""
    if not 0 < level < 1:
        raise ValueError(f"level: must be in (0, 1), got {level}")
    if resamples < 1:
        raise ValueError(f"resamples: at least 1, got {resamples}")
    low = high = math.nan  # one task: every resample would be it, an interval of zero width
    if per_task.size > 1:
        rng = np.random.default_rng(seed)
        draws = rng.integers(0, per_task.size, size=(resamples, per_task.size))
        means = per_task[draws].mean(axis=1)  # (resamples,)
        tail = 100 * (1 - level) / 2
        low, high = np.percentile(means, [tail, 100 - tail])
    gained, lost = int((per_task > 0).sum()), int((per_task < 0).sum())
    return {
        "difference": float(per_task.mean()),
        "low": float(low),
        "high": float(high),
        "tasks": int(per_task.size),
        "gained": gained,
        "lost": lost,
        "sign_p": sign_test(gained, lost),
    }


def sign_test(gained: int, lost: int) -> float:
    """The exact two-sided sign test's p-value of ``gained`` tasks against ``lost`` ones (tasks
    without a difference left out): the chance, were gains and losses equally likely, of a split
    at least as uneven; 1.0 where no task differs.

    >>> round(sign_test(7, 1), 4), sign_test(0, 0)
    (0.0703, 1.0)
    """
    if gained < 0 or lost < 0:
        raise ValueError(f"gained, lost: counts >= 0, got {gained}, {lost}")
    n = gained + lost
    tail = sum(math.comb(n, k) for k in range(min(gained, lost) + 1))
    return min(1.0, 2 * tail / 2**n)


def _per_task(frame: pd.DataFrame, name: str) -> pd.Series:
    """Each task's mean success over its episodes (``eval_results`` of one split and view)."""
    missing = sorted({"task_id", "success"} - set(frame.columns))
    if missing:
        raise ValueError(f"{name}: missing column(s) {missing}")
    if frame.empty:
        raise ValueError(f"{name}: no episodes")
    if frame["success"].isna().any():  # a mean would skip the episode in silence
        raise ValueError(f"{name}: {int(frame['success'].isna().sum())} episode(s) without success")
    return frame.groupby("task_id")["success"].mean().astype(float).sort_index()


class FlatTasksError(ValueError):
    """No task varies in success in either of two evaluations: their variance ratio is
    undefined (:func:`variance_ratio`)."""


def variance_ratio(results: pd.DataFrame, other: pd.DataFrame) -> float:
    """How much pairing shrinks the variance of a difference between two policies on one task set.

    ``Var(x_t - y_t) / (Var(x_t) + Var(y_t))`` over tasks ``t``, with ``x_t`` and ``y_t`` each
    task's mean success in ``results`` and ``other`` (``eval_results`` of one split and view on the
    same tasks): 1 for unrelated policies, 0 for policies that succeed on the same tasks, up to 2
    for policies that succeed on opposite ones. It is ``1 - r`` where both have the same variance
    and ``r`` is the correlation of their tasks' successes.

    Raises:
        ValueError: other tasks, or fewer than two; :class:`FlatTasksError`: no variance in
            either.
    """
    a, b = _per_task(results, "results"), _per_task(other, "other")
    if not a.index.equals(b.index):
        raise ValueError(f"results, other: not the same tasks ({len(a)} vs {len(b)})")
    if len(a) < 2:  # no variance over tasks at all, which is not a flat pair
        raise ValueError(f"results, other: a variance over tasks needs at least 2, got {len(a)}")
    total = a.var(ddof=1) + b.var(ddof=1)
    if not total > 0:
        raise FlatTasksError("results, other: no task varies in success; the ratio is undefined")
    return float((a - b).var(ddof=1) / total)


def minimum_detectable_effect(
    baseline: pd.DataFrame,
    *,
    ratio: float,
    tasks: int | None = None,
    level: float = 0.95,
    power: float = 0.8,
) -> float:
    """The smallest paired difference between two policies that a two-sided test at ``level``
    detects with probability ``power``, as a fraction.

    Both policies are taken to vary over tasks as ``baseline`` does (each task's mean success
    over its episodes: an ``eval_results`` of one split and view, e.g. cycle 0's), and pairing to
    shrink the variance of their difference by ``ratio`` (:func:`variance_ratio`, measured on
    earlier pairs): the difference's standard error over ``tasks`` tasks (default: ``baseline``'s)
    is ``sqrt(ratio * 2 * Var(x_t) / tasks)``, times ``z(1 - (1 - level) / 2) + z(power)``.

    >>> frame = pd.DataFrame({"task_id": range(100), "success": [t % 2 == 0 for t in range(100)]})
    >>> round(100 * minimum_detectable_effect(frame, ratio=0.5), 1)
    14.1
    """
    variance, size = _task_variance(baseline, ratio)
    tasks = size if tasks is None else tasks
    if tasks < 2:
        raise ValueError(f"tasks: at least 2, got {tasks}")
    return detection_z(level, power) * math.sqrt(ratio * 2 * variance / tasks)


def tasks_for_effect(
    baseline: pd.DataFrame,
    effect: float,
    *,
    ratio: float,
    level: float = 0.95,
    power: float = 0.8,
) -> int:
    """The fewest tasks at which :func:`minimum_detectable_effect` is at most ``effect`` (a
    fraction), under the same assumptions."""
    if not 0 < effect < 1:
        raise ValueError(f"effect: must be in (0, 1), got {effect}")
    variance, _ = _task_variance(baseline, ratio)
    needed = ratio * 2 * variance * (detection_z(level, power) / effect) ** 2
    return max(2, math.ceil(needed))


def _task_variance(baseline: pd.DataFrame, ratio: float) -> tuple[float, int]:
    """The variance over tasks of ``baseline``'s success (each task's mean over its episodes) and
    its number of tasks, for the power of a difference whose variance pairing scales by ``ratio``
    (:func:`variance_ratio`: in (0, 2]). A baseline that does not vary (every task alike, or one
    task) has no power to give: a detectable effect of 0 would be wrong, not small."""
    if not 0 < ratio <= 2:
        raise ValueError(f"ratio: must be in (0, 2] (a variance ratio), got {ratio}")
    per_task = _per_task(baseline, "baseline")
    variance = float(per_task.var(ddof=1))
    if not variance > 0:  # NaN for one task
        raise ValueError(
            f"baseline: no variance over its {per_task.size} task(s) (every task succeeds "
            "alike); it cannot size a difference"
        )
    return variance, int(per_task.size)


def detection_z(level: float, power: float) -> float:
    """``z(1 - (1 - level) / 2) + z(power)`` of the standard normal distribution: the standard
    errors a true difference must span to be detected by a two-sided test at ``level`` with
    probability ``power`` (2.80 at 95% and 80%)."""
    if not 0 < level < 1 or not 0 < power < 1:
        raise ValueError(f"level, power: must be in (0, 1), got {level}, {power}")
    normal = NormalDist()
    return normal.inv_cdf(1 - (1 - level) / 2) + normal.inv_cdf(power)
