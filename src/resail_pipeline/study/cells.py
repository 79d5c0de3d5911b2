"""The data folder's cells: whether an experiment is evaluated, cycle 0 taken from another
folder, a cell's paired differences in the grid beside those of its rerun, and the grid's beside
those of its training seeds."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from resail_pipeline.config import ConfigError
from resail_pipeline.io import atomic_path
from resail_pipeline.pipelines.common import SHARED_FOLDER
from resail_pipeline.study.plan import (
    TRAINING_SEED_SUFFIX,
    Experiment,
    StudyPlan,
    data_folder,
    resolved_params,
    training_seed_of,
)

logger = logging.getLogger(__name__)


#: what the evaluation of a cycle writes, under ``07_model_output/<folder>/<experiment>/cycle_<r>``
#: (the catalog's ``eval_*`` datasets): the last node of the cycle pipeline
EVALUATION_FILES = ("eval_results.parquet", "eval_summary.parquet", "eval_steps.parquet")


def evaluated(cycle: Path) -> bool:
    """Whether a cycle's folder of model outputs (``<data folder>/<experiment>/cycle_<k>``) holds
    every evaluation file: the evaluation node saves ``eval_results`` first, so that file alone
    may be what a run killed mid-save left."""
    return all((cycle / name).is_file() for name in EVALUATION_FILES)


def finished(experiment: Experiment, outputs: Path) -> bool:
    """Whether ``experiment``'s last cycle is :func:`evaluated` under ``outputs`` (the data folder
    of ``07_model_output``): its run would have nothing left to do."""
    return evaluated(outputs / experiment.name / f"cycle_{experiment.cycles}")


#: what a cell's evaluation reads besides its checkpoints: the initial policy and the fixed
#: Experience of cycle 0, per data layer
_SHARED_INPUTS = (
    ("06_models", "shared/cycle_0"),
    ("03_primary", "shared/cycle_0/experience.parquet"),
)
#: all of cycle 0, per data layer: the initial policy's record, its reference episodes, the
#: fixed Experience, the probe set and the initial policy's evaluation
_CYCLE_0 = tuple(
    (layer, "shared/cycle_0")
    for layer in ("02_intermediate", "03_primary", "04_feature", "06_models", "07_model_output")
)
#: the evaluation settings a plan may set, and the column of ``eval_results`` each one decides
_EVALUATION_COLUMNS = {
    "evaluate.splits": "split",
    "evaluate.views": "view",
    "evaluate.decoding_seeds": "decoding_seed",
}


def _copy_missing(data: Path, parts: Sequence[tuple[str, str]], source: str, target: str) -> None:
    """Copy each ``(layer, part)`` of ``data/<layer>/<source>`` to ``data/<layer>/<target>``
    where it is missing there, each moved into place whole."""
    for layer, part in parts:
        destination = data / layer / target / part
        origin = data / layer / source / part
        if destination.exists() or not origin.exists():
            continue
        with atomic_path(destination) as tmp:
            (shutil.copytree if origin.is_dir() else shutil.copy2)(origin, tmp)


def take_cycle_0(plan: StudyPlan, env: str, project: Path) -> bool:
    """Copy cycle 0 of the folder ``plan.cycle_0_from`` names into the plan's own, if the plan
    names one and its own folder has no evaluation of cycle 0 yet (see the module notes): the
    evaluation is copied last, so a folder without it holds at most a copy cut short, which is
    completed (what it holds is kept). Returns whether it copied.

    Raises:
        ConfigError: the source folder has no evaluated cycle 0, or its episodes were played with
            other splits, views, decoding seeds or numbers of tasks than the plan's runs would
            play (the plan's settings, else the environment's).
    """
    if plan.cycle_0_from is None:
        return False
    run_env, tag = data_folder(plan, env, project)
    data = project / "data"
    last_layer, last_part = _CYCLE_0[-1]  # the evaluation, copied last
    if (data / last_layer / f"{run_env}{tag}" / last_part).exists():
        return False
    source = f"{run_env}{plan.cycle_0_from}"
    cycle_0 = data / "07_model_output" / source / SHARED_FOLDER / "cycle_0"
    if not evaluated(cycle_0):
        raise ConfigError(f"cycle_0_from: {cycle_0}: no evaluation there; nothing to take")
    results = cycle_0 / "eval_results.parquet"
    played = pd.read_parquet(results, columns=[*_EVALUATION_COLUMNS.values(), "task_id"])
    settings = resolved_params(plan, env, project)  # the plan's, else the environment's
    for key, column in _EVALUATION_COLUMNS.items():
        values = sorted(played[column].unique().tolist())
        wanted = settings.get(key)
        if wanted is not None and values != sorted(wanted):
            raise ConfigError(
                f"cycle_0_from: {results}: played with {column} {values}; the plan's runs "
                f"play {key} {wanted}"
            )
    tasks = {split: int(n) for split, n in played.groupby("split")["task_id"].nunique().items()}
    wanted = settings.get("evaluate.num_tasks")
    if wanted is not None and set(tasks.values()) != {wanted}:
        raise ConfigError(
            f"cycle_0_from: {results}: played on {tasks} tasks per split; the plan's runs "
            f"play evaluate.num_tasks {wanted}"
        )
    _copy_missing(data, _CYCLE_0, source, f"{run_env}{tag}")
    logger.info("study: cycle 0 taken from %s", source)
    return True


def _cell_names(plan: StudyPlan, name: str) -> list[Experiment]:
    """The plan's experiment ``name`` after the one the report compares it with at the same
    cycle, where there is one: a ReSAIL variant's parent, an ablation's full method (the
    experiment named after its method)."""
    from resail_pipeline.evaluation.report import comparisons

    entries = {e.name: e for e in plan.experiments}  # the last entry: the most cycles
    if name not in entries:
        raise ConfigError(f"--rerun: no experiment {name!r} in the plan; it has {sorted(entries)}")
    pairs = comparisons({name: entries[name].method})  # the first: its parent or full method
    against = pairs[0][1] if pairs else None
    names = [name] if against is None else [against, name]
    missing = [n for n in names if n not in entries]
    if missing:
        raise ConfigError(f"--rerun: {name!r} is compared with {missing[0]!r}, not in the plan")
    return [entries[n] for n in names]


def _results(paths: Sequence[Path]) -> pd.DataFrame:
    """The files ``paths`` (``<experiment>/cycle_<r>/<name>.parquet``, e.g. ``eval_results``),
    concatenated, each row with its ``experiment`` (``shared`` for cycle 0)."""
    frames = [pd.read_parquet(path).assign(experiment=path.parent.parent.name) for path in paths]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def grid_cells(outputs: Path, name: str = "eval_results") -> pd.DataFrame:
    """Every ``<experiment>/cycle_<r>/<name>.parquet`` of ``outputs`` (a data folder's model
    outputs), concatenated, each row with its ``experiment``."""
    return _results(sorted(outputs.glob(f"*/cycle_*/{name}.parquet")))


def _cell_results(outputs: Path, names: Sequence[str], cycle: int) -> pd.DataFrame:
    """The ``eval_results`` of the initial policy and of ``names`` at ``cycle`` in ``outputs``,
    with their ``experiment``."""
    cells = [(SHARED_FOLDER, 0), *((name, cycle) for name in names)]
    return _results([outputs / n / f"cycle_{c}" / "eval_results.parquet" for n, c in cells])


def compare_cells(grid: pd.DataFrame, rerun: pd.DataFrame) -> pd.DataFrame:
    """The paired differences of a cell's comparisons in the grid and in its rerun, side by side.

    Both are ``eval_results`` of the initial policy and the cell's experiments, with their
    ``experiment``; each gives every comparison the report makes among them (each experiment
    against the initial policy, the ReSAIL variant against its parent, an ablation against its
    full method; not an ablation against the parent, which a rerun does not evaluate) per
    benchmark and view, with its 95% interval over tasks and the decoding seeds it was measured over.
    """
    from resail_pipeline.evaluation.report import paired_differences_table

    keys = ["Comparison", "Benchmark", "View", "Cycle"]
    sides = []
    for frame, side in ((grid, "grid"), (rerun, "rerun")):
        table = paired_differences_table(frame, source=side).drop(columns="Tasks")
        seeds = ", ".join(str(s) for s in sorted(frame["decoding_seed"].unique()))
        sides.append(
            table.rename(
                columns={
                    "Difference (pp)": f"{side}: seeds {seeds} (pp)",
                    "95% CI (pp)": f"{side}: 95% CI (pp)",
                    "Gained / lost": f"{side}: gained / lost",
                    "Sign test p": f"{side}: sign test p",
                }
            )
        )
    order = pd.concat([side[keys] for side in sides]).drop_duplicates()  # the report's order
    return order.merge(sides[0], on=keys, how="left").merge(sides[1], on=keys, how="left")


def _write_table(reporting: Path, stem: str, table: pd.DataFrame, text: str) -> None:
    """``table`` to ``reporting/<stem>.csv`` and ``text`` to ``reporting/<stem>.md``, each
    moved into place whole."""
    reporting.mkdir(parents=True, exist_ok=True)
    with atomic_path(reporting / f"{stem}.csv") as tmp:
        table.to_csv(tmp, index=False)
    with atomic_path(reporting / f"{stem}.md") as tmp:
        tmp.write_text(text)
    logger.info("study: %s", reporting / f"{stem}.md")


def _write_comparison(table: pd.DataFrame, reporting: Path, names: list[str], cycle: int) -> None:
    from resail_pipeline.evaluation.report import table_to_markdown

    text = (
        f"# Cycle {cycle} of {', '.join(names)}, evaluated again\n\n"
        "Paired differences in success (percentage points), 95% percentile-bootstrap intervals "
        "over tasks: the grid's beside the rerun's, each column naming its decoding seeds.\n\n"
        f"{table_to_markdown(table, float_format='+.1f')}\n"
    )
    # one pair per cell: cells of one folder keep theirs
    _write_table(reporting, f"rerun-{names[-1]}-cycle_{cycle}", table, text)


def write_training_seeds(plan: StudyPlan, env: str, project: Path) -> pd.DataFrame:
    """The paired differences of the plan's grid beside those of every training seed it was
    trained again with (:func:`~resail_pipeline.study.plan.with_training_seed`),
    their mean over seeds with its interval over tasks and their SD over seeds
    (:func:`~resail_pipeline.evaluation.report.training_seeds_table`), to
    ``data/08_reporting/<the grid's folder>/training-seeds.md`` and ``.csv``.

    Returns:
        The table; empty (and nothing written) where the grid was trained with no other seed or
        no cell is evaluated under two seeds.
    """
    from resail_pipeline.evaluation.report import table_to_markdown, training_seeds_table

    run_env, tag = data_folder(plan, env, project)
    outputs = project / "data" / "07_model_output"
    prefix = f"{run_env}{tag}{TRAINING_SEED_SUFFIX}"
    others = {
        int(folder.name.removeprefix(prefix)): folder
        for folder in sorted(outputs.glob(f"{prefix}*"))
        if folder.name.removeprefix(prefix).isdecimal()
    }
    if not others:
        return pd.DataFrame()
    folders = {training_seed_of(plan, env, project): outputs / f"{run_env}{tag}", **others}
    frames = [grid_cells(folder).assign(training_seed=seed) for seed, folder in folders.items()]
    frames = [frame for frame in frames if not frame.empty]
    if not frames:
        return pd.DataFrame()
    results = pd.concat(frames, ignore_index=True)
    seeds = sorted(int(seed) for seed in results["training_seed"].unique())
    table = training_seeds_table(results, source=f"{run_env}{tag} and its training seeds")
    if table.empty:
        logger.info("training seeds: no cell evaluated under two training seeds yet")
        return table
    text = (
        f"# The grid's paired differences under training seeds {seeds}\n\n"
        "Each training seed's paired difference in success (percentage points; decoding seeds "
        "averaged), their mean with its 95% percentile-bootstrap interval over tasks (each task's "
        "difference averaged over the seeds that reached the cell; the training runs held fixed, "
        "so the shift one run gives every task is not in it), and their sample SD over training "
        "seeds, which is.\n\n"
        f"{table_to_markdown(table, float_format='.1f')}\n"
    )
    _write_table(
        project / "data" / "08_reporting" / f"{run_env}{tag}", "training-seeds", table, text
    )
    return table
