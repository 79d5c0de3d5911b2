"""What the report's tables and figures both read: names and order, input checks, selections.

The method and benchmark names the paper prints and the order of its rows; the checks every input
passes (columns present, one checkpoint per cycle-0 cell); the per-cycle costs; and the probe's
per-update sensitivity (figure 6's data).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping

import numpy as np
import pandas as pd

from resail_pipeline.evaluation.stats import mean_and_sd
from resail_pipeline.schemas import VIEWS, SchemaError, check_columns

logger = logging.getLogger(__name__)

#: Method key -> the name the paper prints, in table 1's row order.
METHOD_LABELS: dict[str, str] = {
    "react": "ReAct",
    "rft": "RFT",
    "grpo": "GRPO",
    "epd": "EPD",
    "sdpo": "SDPO",
    "sdpo_resail": "SDPO + ReSAIL",
    "oel": "OEL",
    "oel_resail": "OEL + ReSAIL",
    "oel_sgs": "OEL + SGS",  # AITZ: the offline filter alone (appendix B)
}
#: The method of the unchanged initial policy.
INITIAL_METHOD = "react"
#: ReSAIL variant -> its parent; directly after its parent the table prints the variant "+ ReSAIL".
RESAIL_PARENTS: dict[str, str] = {"sdpo_resail": "sdpo", "oel_resail": "oel"}
#: (env, split) -> benchmark name, in table 1's column order; other pairs follow as "env (split)".
BENCHMARK_LABELS: dict[tuple[str, str], str] = {
    ("alfworld", "id"): "ALFWorld (ID)",
    ("alfworld", "ood"): "ALFWorld (OOD)",
    ("textcraft", "test"): "TextCraft",
}
#: ``train_metrics`` column -> cost component, in the stacking order of figure 5a.
COST_COMPONENTS: dict[str, str] = {
    "seconds_response": "Response",
    "seconds_scoring": "Scoring",
    "seconds_optimisation": "Optimization",
    "seconds_other": "Other",
}
#: The ``train_metrics`` columns the cost table and figure rely on.
COST_COLUMNS = ("experiment", "cycle", *COST_COMPONENTS)
#: Legend entry of the shared initial model in the figures: ReAct, never updated.
INITIAL_LABEL = "ReAct (initial model, no update)"
#: A cell with nothing to show.
MISSING = "--"

_BENCHMARK_KEYS = ("env", "split")
_CELL_KEYS = ("experiment", "cycle", "env", "split", "view")
_PROBE_UPDATE_KEYS = ("experiment", "method", "cycle", "update")


def method_label(name: str) -> str:
    """The paper's name for a method key (``"oel_resail"`` -> ``"OEL + ReSAIL"``); others as given."""
    return METHOD_LABELS.get(name, name)


def benchmark_label(env: str, split: str) -> str:
    """``"ALFWorld (OOD)"``, ``"TextCraft"``, ...; an unknown pair reads ``"env (split)"``."""
    return BENCHMARK_LABELS.get((env, split), f"{env} ({split})")


def format_cell(mean: float, sd: float) -> str:
    """A table-1 cell: ``"mean (SD)"`` of fractions, in percent with one decimal.

    >>> format_cell(0.6133, 0.0153)
    '61.3 (1.5)'

    A single seed has no sample SD: its cell reads ``"61.3 (--)"``.
    """
    sd_text = MISSING if math.isnan(sd) else f"{100 * sd:.1f}"
    return f"{100 * mean:.1f} ({sd_text})"


def _method_rank(method: str) -> int:
    order = list(METHOD_LABELS)
    return order.index(method) if method in METHOD_LABELS else len(order)


def ordered_experiments(methods: Mapping[str, str]) -> list[str]:
    """Experiments in table-1 order of their method; an experiment named after its method first."""
    return sorted(methods, key=lambda e: (_method_rank(methods[e]), e != methods[e], e))


def comparisons(methods: Mapping[str, str]) -> list[tuple[str, str]]:
    """(experiment, the experiment it is compared with at the same cycle) for ``methods``
    (experiment -> method), in the report's order: each ReSAIL variant with its parent (the
    experiments named after the two methods), then, in the order of ``methods``, each other
    experiment of a method with the one named after it (an ablation with its full method: what
    the parts it changes are worth), then each such experiment of a ReSAIL variant with the
    variant's parent (what the parts it keeps add to the parent: the paper's table 2 as paired
    contrasts). The experiment compared with need not be in ``methods``."""
    parents = [(e, parent) for e, parent in RESAIL_PARENTS.items() if e in methods]
    ablations = [(e, method) for e, method in methods.items() if e != method]
    kept = [(e, RESAIL_PARENTS[method]) for e, method in ablations if method in RESAIL_PARENTS]
    return parents + ablations + kept


def experiment_methods(frame: pd.DataFrame, source: str) -> dict[str, str]:
    """experiment -> method of ``frame``'s rows; one experiment must be one method."""
    methods: dict[str, str] = {}
    for experiment, group in frame.groupby("experiment", sort=True):
        distinct = sorted(group["method"].unique())
        if len(distinct) != 1:
            raise ValueError(
                f"{source}: experiment {experiment!r} has rows of several methods {distinct}; "
                "tag each run with its own experiment name"
            )
        methods[str(experiment)] = str(distinct[0])
    return methods


def ordered_benchmarks(frame: pd.DataFrame) -> list[tuple[str, str]]:
    known = list(BENCHMARK_LABELS)
    pairs = {(str(e), str(s)) for e, s in frame[list(_BENCHMARK_KEYS)].itertuples(index=False)}
    return sorted(pairs, key=lambda p: (known.index(p) if p in known else len(known), p))


def require(frame: pd.DataFrame, columns: Iterable[str], source: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise SchemaError(
            f"{source}: missing column(s) {missing}; the report needs {list(columns)}"
        )


def checked_eval_summary(eval_summary: pd.DataFrame, source: str) -> pd.DataFrame:
    """A copy of ``eval_summary`` checked for the report: columns, views, cycles, statistics.

    ``mean`` and ``sd`` must be the mean and sample SD (``n - 1``) of ``success_per_seed``;
    cells are unique per (experiment, cycle, env, split, view) from cycle 1 on; all cycle 0 rows
    of one (env, split, view) come from one checkpoint, the shared initial model.
    """
    check_columns(eval_summary, "eval_summary", source=source)
    require(eval_summary, ("experiment",), source)
    frame = eval_summary.copy()
    unknown = sorted(set(frame["view"]) - set(VIEWS))
    if unknown:
        raise ValueError(f"{source}: column 'view' has unknown value(s) {unknown}; use {VIEWS}")
    if (frame["cycle"] < 0).any():
        raise ValueError(f"{source}: column 'cycle' must be >= 0 (0 is the initial model)")
    frame["cycle"] = frame["cycle"].astype(int)
    for row in frame.itertuples(index=False):
        mean, sd = mean_and_sd(list(row.success_per_seed))
        if not (math.isclose(mean, row.mean, abs_tol=1e-9) and _same_sd(sd, row.sd)):
            raise ValueError(
                f"{source}: {row.experiment!r} cycle {row.cycle} {row.env}/{row.split} "
                f"{row.view}: mean/sd ({row.mean}, {row.sd}) are not the mean and sample SD "
                f"(n - 1) of success_per_seed {list(row.success_per_seed)}"
            )
    trained = frame[frame["cycle"] > 0]
    duplicated = trained[trained.duplicated(list(_CELL_KEYS), keep=False)]
    if not duplicated.empty:
        first = duplicated.iloc[0]
        raise ValueError(
            f"{source}: {len(duplicated)} rows share (experiment, cycle, env, split, view), e.g. "
            f"{tuple(first[k] for k in _CELL_KEYS)}; one evaluation per cell is expected"
        )
    initial_trained = trained[trained["method"] == INITIAL_METHOD]
    if not initial_trained.empty:
        raise ValueError(
            f"{source}: method {INITIAL_METHOD!r} has rows at cycle(s) "
            f"{sorted(initial_trained['cycle'].unique())}; it is the unchanged initial policy, "
            "evaluated at cycle 0"
        )
    for key, group in frame[frame["cycle"] == 0].groupby(["env", "split", "view"]):
        policies = sorted(group["policy_id"].unique())
        if len(policies) != 1:
            raise ValueError(
                f"{source}: cycle 0 of {'/'.join(key)} holds {len(policies)} checkpoints "
                f"{policies}; the report compares methods from one shared initial model"
            )
    return frame


def check_episode_counts(
    eval_summary: pd.DataFrame,
    eval_results: pd.DataFrame,
    *,
    sources: tuple[str, str] = ("eval_summary", "eval_results"),
) -> None:
    """Raise where an evaluation's episodes are not the ones its summary counted.

    Every (experiment, cycle, env, split, view) cell of ``eval_summary`` must have as many rows in
    ``eval_results`` as its ``episodes``, and every cell of ``eval_results`` a summary: a 0-row or
    truncated ``eval_results`` file would otherwise drop its cycle from the paired differences, or
    pair them on fewer tasks, in silence.
    """
    keys = list(_CELL_KEYS)
    for frame, source in ((eval_summary, sources[0]), (eval_results, sources[1])):
        require(frame, keys, source)
    counted = eval_summary.groupby(keys)["episodes"].sum().astype(int)
    present = eval_results.groupby(keys).size().reindex(counted.index, fill_value=0)
    for key, want in counted.items():
        if present[key] != want:
            cell = dict(zip(keys, key, strict=True))
            raise ValueError(
                f"{sources[1]}: {cell['experiment']} cycle {cell['cycle']} "
                f"{cell['env']}/{cell['split']} {cell['view']} has {present[key]} episode rows, "
                f"its {sources[0]} counts {want}; rerun that evaluation"
            )
    unsummarised = set(eval_results.groupby(keys).size().index) - set(counted.index)
    if unsummarised:
        cell = dict(zip(keys, sorted(unsummarised)[0], strict=True))
        raise ValueError(
            f"{sources[0]}: no summary of {cell['experiment']} cycle {cell['cycle']} "
            f"{cell['env']}/{cell['split']} {cell['view']}, whose episodes are in {sources[1]}"
        )


#: the report's per-cycle inputs -> the file of each in a cycle's folder
_CYCLE_FILES = {
    "eval_summary": "eval_summary.parquet",
    "train_metrics": "train_metrics.parquet",
    "probe": "probe.parquet",
    "trajectories": "trajectories.parquet",
}


def trained_cycles(
    eval_summary: pd.DataFrame,
    train_metrics: pd.DataFrame,
    probe: pd.DataFrame,
    trajectories: pd.DataFrame,
) -> dict[tuple[str, int], list[str]]:
    """(experiment, cycle) of every cycle an experiment trained -> the inputs that show it: its
    evaluation, training metrics or probe rows at cycle ``r >= 1``, or its collection at cycle
    ``r + 1`` (made by cycle ``r``'s policy). Each frame has ``experiment`` and ``cycle``."""
    shown: dict[tuple[str, int], list[str]] = {}
    for name, frame, offset in (
        ("eval_summary", eval_summary, 0),
        ("train_metrics", train_metrics, 0),
        ("probe", probe, 0),
        ("trajectories", trajectories, -1),
    ):
        if not frame.empty:
            require(frame, ("experiment", "cycle"), f"{name} files")
        for experiment, cycle in sorted(_cells(frame)):
            if cycle + offset >= 1:
                shown.setdefault((experiment, cycle + offset), []).append(name)
    return dict(sorted(shown.items()))


def _cells(frame: pd.DataFrame) -> set[tuple[str, int]]:
    """The (experiment, cycle) pairs of ``frame``'s rows."""
    if frame.empty:
        return set()
    pairs = frame[["experiment", "cycle"]].drop_duplicates()
    return {(str(e), int(c)) for e, c in pairs.itertuples(index=False)}


def check_cycles_covered(
    eval_summary: pd.DataFrame,
    train_metrics: pd.DataFrame,
    probe: pd.DataFrame,
    trajectories: pd.DataFrame,
) -> None:
    """Raise where a report input lacks a cycle it should cover, naming its file.

    Every cycle ``r`` an experiment trained (:func:`trained_cycles`) must have its evaluation
    (``<experiment>/cycle_<r>/eval_summary.parquet``), its per-update training metrics
    (``train_metrics.parquet``) and the corpus it trained on (``trajectories.parquet``: cycle 1's
    is every experiment's, in ``shared/cycle_1``); probe rows too, for an experiment that has
    any (``train.probe.enabled`` may be off for a whole experiment, which then has none). An
    empty but schema-valid file would otherwise drop its cycle from a table or a figure in silence
    ("2 trained cycle(s)", no cost row). A method that learns from successes only, on a corpus
    without one, makes no update and writes no metrics row; that cycle needs none. Each frame has
    ``experiment`` and ``cycle``; the trajectories' ``experiment`` is their folder (``shared``
    for cycle 1).

    Raises:
        ValueError: naming the file, the cycle and the inputs that show it was trained.
    """
    frames = {
        "eval_summary": eval_summary,
        "train_metrics": train_metrics,
        "probe": probe,
        "trajectories": trajectories,
    }
    trained = trained_cycles(*frames.values())  # checks the columns first
    present = {name: _cells(frame) for name, frame in frames.items()}
    probed = {experiment for experiment, _ in present["probe"]}
    idle = _without_updates(eval_summary, trajectories)
    for (experiment, cycle), shown in trained.items():
        for name, file in _CYCLE_FILES.items():
            if name == "probe" and experiment not in probed:
                continue
            if name == "train_metrics" and (experiment, cycle) in idle:
                continue  # no update, so no row: the policy was published unchanged
            folder = "shared" if name == "trajectories" and cycle == 1 else experiment
            if (folder, cycle) not in present[name]:
                raise ValueError(
                    f"{name} files: {folder}/cycle_{cycle}/{file} has no rows or is missing, "
                    f"though the {' and '.join(shown)} files show that {experiment!r} trained "
                    f"cycle {cycle}; {_remedy(name, cycle)}"
                )


def _without_updates(
    eval_summary: pd.DataFrame, trajectories: pd.DataFrame
) -> set[tuple[str, int]]:
    """The (experiment, cycle) cells that trained without an update: a method that learns from
    successes only (:func:`~resail_pipeline.training.config.learns_from_successes_only`) on a
    corpus without a successful trajectory (cycle 1's is ``shared``), whose ``train_metrics``
    file has no rows."""
    from resail_pipeline.training.config import learns_from_successes_only

    trained = eval_summary[eval_summary["cycle"] >= 1] if not eval_summary.empty else eval_summary
    if trained.empty or trajectories.empty:
        return set()
    succeeded = trajectories.groupby(["experiment", "cycle"])["success"].any()
    idle = set()
    for experiment, method in experiment_methods(trained, "eval_summary files").items():
        if not learns_from_successes_only(method):
            continue
        for cycle in trained.loc[trained["experiment"] == experiment, "cycle"].unique():
            corpus = ("shared" if cycle == 1 else experiment, int(cycle))
            if corpus in succeeded.index and not succeeded[corpus]:
                idle.add((experiment, int(cycle)))
    return idle


def _remedy(name: str, cycle: int) -> str:
    """What to do where input ``name`` lacks ``cycle``."""
    if name == "eval_summary":
        return (
            "rerun that evaluation (remove the cycle's eval_* files, then run the cycle pipeline "
            "with --only-missing-outputs)"
        )
    if name == "trajectories" and cycle == 1:
        return "restore it: every experiment's cycle 1 trained on it"
    return (
        "rerun that cycle (remove its outputs and those of every later cycle, then run the cycle "
        "pipeline with --only-missing-outputs)"
    )


def _same_sd(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, abs_tol=1e-9)


def initial_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """The shared initial model's rows: cycle 0, one per (env, split, view)."""
    initial = frame[frame["cycle"] == 0]
    return initial.drop_duplicates(["env", "split", "view"]).reset_index(drop=True)


def rows_where(frame: pd.DataFrame, **values: object) -> pd.DataFrame:
    """The rows of ``frame`` whose columns equal ``values``."""
    mask = np.ones(len(frame), dtype=bool)
    for column, value in values.items():
        mask &= (frame[column] == value).to_numpy()
    return frame[mask]


def cycle_costs(train_metrics: pd.DataFrame, source: str) -> pd.DataFrame:
    """Seconds per (experiment, cycle) and component, in method then cycle order."""
    require(train_metrics, COST_COLUMNS, source)
    seconds = train_metrics[list(COST_COMPONENTS)].to_numpy(dtype=np.float64)
    if not np.isfinite(seconds).all() or (seconds < 0).any():
        raise ValueError(f"{source}: columns {list(COST_COMPONENTS)} must be finite and >= 0")
    totals = train_metrics.groupby(["experiment", "cycle"], as_index=False)[
        list(COST_COMPONENTS)
    ].sum()
    totals["cycle"] = totals["cycle"].astype(int)
    return in_method_order(totals, {e: e for e in totals["experiment"].unique()}, ["cycle"])


def in_method_order(
    frame: pd.DataFrame, methods: Mapping[str, str], then: list[str]
) -> pd.DataFrame:
    """``frame`` sorted by its experiments' table-1 order, then by ``then``; index reset."""
    rank = {e: i for i, e in enumerate(ordered_experiments(methods))}
    ranked = frame.assign(_rank=frame["experiment"].map(rank))
    return ranked.sort_values(["_rank", *then]).drop(columns="_rank").reset_index(drop=True)


def sensitivity_per_update(probe: pd.DataFrame, *, source: str = "probe") -> pd.DataFrame:
    """The probe's PI sensitivity per update, averaged over all response tokens (appendix D.3).

    A probe row's ``jsd`` is its step's mean over ``tokens`` response tokens, so an update's
    value is ``sum(jsd * tokens) / sum(tokens)`` over its probe steps: longer responses weigh more.

    Returns:
        One row per (experiment, method, cycle, update) in method, cycle and update order, with
        ``jsd`` (nats), ``tokens``, ``steps`` and ``position``: the update's place on one axis
        through all cycles. Cycle ``r``'s update ``u`` lies at ``u`` plus the last update of every
        earlier cycle, so a cycle's start (update 0) falls on the end of the cycle before it.

    Raises:
        SchemaError: a column of the ``probe`` contract is missing.
        ValueError: negative cycle, update or tokens; non-finite ``jsd``; a repeated
            (experiment, cycle, update, traj_id, t); an update without response tokens.
    """
    check_columns(probe, "probe", source=source)
    for column in ("cycle", "update", "tokens"):
        if (probe[column] < 0).any():
            raise ValueError(f"{source}: column {column!r} must be >= 0")
    if not np.isfinite(probe["jsd"].to_numpy(dtype=np.float64)).all():
        raise ValueError(f"{source}: column 'jsd' must be finite")
    step_keys = ["experiment", "cycle", "update", "traj_id", "t"]
    repeated = probe[probe.duplicated(step_keys, keep=False)]
    if not repeated.empty:
        raise ValueError(
            f"{source}: {len(repeated)} rows repeat a probe step of one update, e.g. "
            f"{tuple(repeated.iloc[0][step_keys])}"
        )
    methods = experiment_methods(probe, source)
    weighted = probe.assign(weighted=probe["jsd"] * probe["tokens"])
    per_update = weighted.groupby(list(_PROBE_UPDATE_KEYS), as_index=False).agg(
        weighted=("weighted", "sum"), tokens=("tokens", "sum"), steps=("t", "size")
    )
    empty = per_update[per_update["tokens"] == 0]
    if not empty.empty:
        first = empty.iloc[0]
        raise ValueError(
            f"{source}: update {first['update']} of cycle {first['cycle']} of "
            f"{first['experiment']!r} has no response tokens; its sensitivity is undefined"
        )
    per_update["jsd"] = per_update.pop("weighted") / per_update["tokens"]
    last_update = per_update.groupby("cycle")["update"].max().sort_index()
    offsets = last_update.cumsum().shift(1, fill_value=0)  # cycle -> position of its update 0
    per_update["position"] = per_update["update"] + per_update["cycle"].map(offsets)
    return in_method_order(per_update, methods, ["cycle", "update"])
