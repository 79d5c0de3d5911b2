"""The shipped reference policy: its dual-view evaluation, recorded in its manifest, and shipping.

The evaluation is the appendix-D.2 protocol that the ``evaluate`` pipeline runs for cycle 0: one
ordinary-view reference episode of the policy per test task (decoding seed ``reference_seed``),
summarised by the rules (successful and failed kept) into the fixed Experience; then every test
task under every decoding seed, in the ordinary view and in the privileged view with that fixed
Experience. The test tasks are those of the environment the policy was built for (its manifest's
configuration), on that environment's evaluation splits (TextCraft: ``test``; ALFWorld: ``id``
and ``ood``, each reported apart; :mod:`~resail_pipeline.bootstrap.environments`).
:func:`record_evaluation` adds the resulting table to the policy's manifest, which also holds the
command, configuration, training-data hash, time, machine and weights sha256 of its build.
"""

from __future__ import annotations

import json
import logging
import math
import shutil
import time
from pathlib import Path
from typing import Any

import pandas as pd

from resail_pipeline.checkpoints import (
    MANIFEST_NAME,
    CheckpointError,
    check_checkpoint,
    read_checkpoint_info,
    weights_sha256,
    write_manifest,
)
from resail_pipeline.config import ConfigError
from resail_pipeline.devices import machine_description
from resail_pipeline.envs import make_env, provide_env_data
from resail_pipeline.evaluation.evaluate import (
    EvalConfig,
    build_experience,
    evaluate_policy,
)
from resail_pipeline.evaluation.stats import (
    action_rates,
    privileged_lead,
    summarize_eval_results,
)
from resail_pipeline.experience import SummarizeConfig
from resail_pipeline.generation import make_generator
from resail_pipeline.generation.transformers_backend import resolved_settings
from resail_pipeline.io import atomic_path, write_parquet
from resail_pipeline.journal import EpisodeJournal, journal_key
from resail_pipeline.schemas import VIEW_ORDINARY, VIEW_PRIVILEGED

logger = logging.getLogger(__name__)

#: The manifest key under which a shipped policy keeps the manifests of the stages it continues.
LINEAGE_KEY = "lineage"


def dual_view_evaluation(
    policy: str | Path,
    config: EvalConfig,
    *,
    reference_seed: int,
    env: str,
    generation: dict[str, Any] | None = None,
    journal: EpisodeJournal | None = None,
    known_sha256: str | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Evaluate ``policy`` in both views with a fixed Experience of its own reference episodes,
    on ``config.splits`` of the environment ``env``.

    ``generation`` holds options of the transformers generator (``dtype``, ``batch_size``, ...);
    ``journal`` keeps the reference and evaluation episodes as they finish, and gives back those
    of an interrupted run (:mod:`resail_pipeline.journal`); ``known_sha256``: the weights' hash,
    already computed by the caller (:func:`~resail_pipeline.checkpoints.read_checkpoint_info`).
    Returns ``(eval_summary, eval_results, eval_steps, experience)``: one summary row per split
    and view, one result row per episode, every step of those episodes, and the fixed Experience
    (one rules-based summary per test task).
    """
    info = read_checkpoint_info(check_checkpoint(policy), known_sha256=known_sha256)

    def environment():
        return make_env(env)

    with make_generator(
        "transformers", info.path, policy_id=info.policy_id, **(generation or {})
    ) as generator:
        logger.info("generating in %s", generator.model.dtype)
        _, _, experience = build_experience(
            environment,
            generator,
            config,
            SummarizeConfig(source="rules"),
            decoding_seed=reference_seed,
            journal=journal,
        )
        both = config.replace(views=(VIEW_ORDINARY, VIEW_PRIVILEGED))
        results, steps = evaluate_policy(
            environment,
            generator,
            both,
            cycle=0,
            method="react",
            experience=experience,
            journal=journal,
        )
    return summarize_eval_results(results), results, steps, experience


def evaluation_record(
    eval_summary: pd.DataFrame,
    eval_results: pd.DataFrame,
    eval_steps: pd.DataFrame,
    experience: pd.DataFrame,
    config: EvalConfig,
    *,
    reference_seed: int,
    seconds: float,
    command: str,
    dtype: str,
    compiled: bool = False,
) -> dict[str, Any]:
    """What the manifest keeps of an evaluation: the protocol (with the precision the policy
    generated in, and whether its forward ran compiled), the table (and the same apart by the
    reference episode's outcome, :func:`by_reference_outcome`), the privileged view's paired lead
    (:func:`~resail_pipeline.evaluation.stats.privileged_lead`), how the policy acted (its valid
    and repeated actions, :func:`~resail_pipeline.evaluation.stats.action_rates`), where and how
    long."""
    rows = [
        {
            "split": row["split"],
            "view": row["view"],
            "success_per_seed": [round(float(x), 4) for x in row["success_per_seed"]],
            "mean": round(float(row["mean"]), 4),
            "sd": round(float(row["sd"]), 4),
            "tasks": int(row["tasks"]),
        }
        for row in eval_summary.sort_values(["split", "view"]).to_dict("records")
    ]
    return {
        "command": command,
        "protocol": {
            "splits": list(config.splits),
            "decoding_seeds": list(config.decoding_seeds),
            "temperature": config.temperature,
            "top_p": config.top_p,
            "top_k": config.top_k,
            "max_new_tokens": config.max_new_tokens,
            "reference_seed": reference_seed,
            "dtype": dtype,
            "compiled": compiled,
            "experience": "rules-based summaries of one ordinary-view reference episode per "
            f"task of {', '.join(config.splits)} (successful and failed kept)",
            "experience_outcomes": experience["outcome"].value_counts().to_dict(),
        },
        "table": rows,
        "by_reference_outcome": by_reference_outcome(eval_results, experience),
        "privileged_lead": [
            {**row, **{k: round(float(row[k]), 4) for k in ("difference", "low", "high")}}
            for row in privileged_lead(eval_results).to_dict("records")
        ],
        "actions": [
            {**row, "valid": _rounded(row["valid"]), "repeated": _rounded(row["repeated"])}
            for row in action_rates(eval_results, eval_steps).to_dict("records")
        ],
        "seconds": round(seconds, 1),
        "machine": machine_description(),
    }


def _rounded(share: float) -> float | None:
    """A share as the manifest keeps it: 4 decimals; ``None`` for one of nothing (``nan``)."""
    return None if math.isnan(share) else round(float(share), 4)


def by_reference_outcome(
    eval_results: pd.DataFrame, experience: pd.DataFrame
) -> list[dict[str, Any]]:
    """Success per split and view, apart for the tasks whose reference episode succeeded and
    failed.

    The two kinds of fixed summary differ in what they give: a success summary replays the
    policy's own plan, a failure analysis the planner's corrected one. One row per (split,
    outcome, view): ``tasks``, ``episodes``, ``successes`` and their ``mean``.
    """
    outcomes = experience.set_index("task_id")["outcome"]
    episodes = eval_results.assign(outcome=eval_results["task_id"].map(outcomes))
    if episodes["outcome"].isna().any():
        missing = sorted(
            int(t) for t in episodes.loc[episodes["outcome"].isna(), "task_id"].unique()
        )
        raise ValueError(f"experience: no summary for the evaluated tasks {missing}")
    return [
        {
            "split": split,
            "outcome": outcome,
            "view": view,
            "tasks": int(group["task_id"].nunique()),
            "episodes": len(group),
            "successes": int(group["success"].sum()),
            "mean": round(float(group["success"].mean()), 4),
        }
        for (split, outcome, view), group in episodes.groupby(
            ["split", "outcome", "view"], sort=True
        )
    ]


def _manifest_path(policy: str | Path) -> Path:
    """The manifest of a built policy, which keeps its evaluation; raise naming it if missing."""
    path = check_checkpoint(policy) / MANIFEST_NAME
    if not path.is_file():
        raise FileNotFoundError(
            f"policy: {path} is missing; evaluate a built policy (its manifest keeps the result), "
            "not a bare checkpoint or a training state"
        )
    return path


def record_evaluation(policy: str | Path, record: dict[str, Any]) -> None:
    """Add ``record`` to the policy's manifest under ``evaluation`` (the file is replaced whole)."""
    path = _manifest_path(policy)
    manifest = json.loads(path.read_text())
    manifest["evaluation"] = record
    write_manifest(path.parent, manifest)


def markdown_table(record: dict[str, Any]) -> str:
    """The evaluation as a Markdown table: success (%) per view, mean (sample SD) over seeds;
    per split and view where more than one split was evaluated (ALFWorld's ``id`` and ``ood``)."""
    seeds = record["protocol"]["decoding_seeds"]
    by_split = len({row.get("split") for row in record["table"]}) > 1
    keys = ["split", "view"] if by_split else ["view"]
    head = "| " + " | ".join(keys) + " | " + " | ".join(f"seed {s}" for s in seeds)
    rule = "|---" * (len(seeds) + len(keys) + 1) + "|"
    lines = [head + " | mean (SD) |", rule]
    for row in record["table"]:
        names = " | ".join(str(row[k]) for k in keys)
        per_seed = " | ".join(f"{100 * x:.1f}" for x in row["success_per_seed"])
        lines.append(f"| {names} | {per_seed} | {100 * row['mean']:.1f} ({100 * row['sd']:.1f}) |")
    return "\n".join(lines)


def lineage(policy: str | Path) -> list[dict[str, Any]]:
    """The manifests of the builds that ``policy`` continues, nearest first.

    A build with a ``warm_start`` records the path and weights sha256 of the policy it continued;
    that policy's manifest is read from the path, after checking that the weights there are
    still the ones trained from, and so on back to a build from scratch (or a bare checkpoint,
    which has no manifest and so no lineage). A manifest that already holds its lineage (a
    shipped policy) ends the walk with it.
    """
    own = Path(policy) / MANIFEST_NAME
    manifest = json.loads(own.read_text()) if own.is_file() else {}
    if LINEAGE_KEY in manifest:
        return manifest[LINEAGE_KEY]
    stages: list[dict[str, Any]] = []
    while (start := manifest.get("warm_start")) is not None:
        path = check_checkpoint(start["path"])
        actual = weights_sha256(path)
        if actual != start["sha256"]:
            raise CheckpointError(
                f"warm_start: {path} holds weights sha256 {actual[:12]}, not the "
                f"{start['sha256'][:12]} that {policy} was trained from; put that policy back "
                "there to ship with its lineage"
            )
        if not (path / MANIFEST_NAME).is_file():
            raise CheckpointError(f"warm_start: {path / MANIFEST_NAME} is missing")
        manifest = json.loads((path / MANIFEST_NAME).read_text())
        stages.append({key: value for key, value in manifest.items() if key != LINEAGE_KEY})
        if LINEAGE_KEY in manifest:
            return stages + manifest[LINEAGE_KEY]
    return stages


def ship(policy: str | Path, destination: str | Path) -> Path:
    """Copy a built policy directory to ``destination`` (atomically, replacing what was there).

    A policy that continues other builds ships with their manifests (:func:`lineage`) in its
    own, under ``lineage``: the command, configuration, training data and time of every stage.
    """
    source = check_checkpoint(policy)
    stages = lineage(source)  # read before the copy: a stage may live at the destination
    destination = Path(destination)
    with atomic_path(destination) as tmp:
        shutil.copytree(source, tmp)
        if stages:
            manifest = json.loads((tmp / MANIFEST_NAME).read_text())
            write_manifest(tmp, {**manifest, LINEAGE_KEY: stages})
    logger.info("shipped %s to %s (%d earlier stages)", source, destination, len(stages))
    return destination


def policy_env(policy: str | Path) -> str:
    """The environment a built policy was built for (its manifest's ``configuration.env``).

    Raises:
        FileNotFoundError: the policy has no manifest (:func:`_manifest_path`).
        ConfigError: the manifest names no environment (a checkpoint not built here).
    """
    path = _manifest_path(policy)
    env = json.loads(path.read_text()).get("configuration", {}).get("env")
    if not isinstance(env, str):
        raise ConfigError(
            f"env: {path} names no environment (configuration.env); give the one to evaluate in"
        )
    return env


def evaluate_and_record(
    policy: str | Path,
    config: EvalConfig,
    *,
    reference_seed: int,
    command: str,
    env: str | None = None,
    generation: dict[str, Any] | None = None,
    results: str | Path | None = None,
    journal: str | Path | None = None,
) -> dict[str, Any]:
    """:func:`dual_view_evaluation` of ``policy`` in ``env`` (by default the one it was built
    for, :func:`policy_env`; ``generation``: the generator's options), recorded in its manifest;
    returns the record. The environment's data is found, or generated, as a build finds it
    (:func:`~resail_pipeline.envs.provide_env_data`: ALFWorld's ``ALFWORLD_DATA``, else the
    generated default set).

    With ``results``, that directory also receives the episodes behind the table, as Parquet:
    ``eval_results.parquet`` (one row per episode: view, decoding seed, task, success, steps) and
    ``eval_steps.parquet`` (every step of those episodes) and ``experience.parquet`` (the fixed
    summary of each task, with its reference episode's outcome), for breakdowns the table does not
    give (say, by the outcome of the reference episode).

    With ``journal``, a folder under it (named by the policy's weights and every setting of the
    evaluation) keeps the episodes as they finish: a run killed anywhere, started again with the
    same arguments, plays only the episodes it had not finished, and the record's ``seconds``
    count the interrupted runs' rollouts too. The folder is removed once the record is written.
    """
    _manifest_path(policy)  # where the result goes, checked before any rollout
    env = env or policy_env(policy)
    results = None if results is None else Path(results)
    if results is not None and results.exists() and not results.is_dir():
        raise NotADirectoryError(f"results: {results} exists and is not a directory")
    data = provide_env_data(env, {})
    started = time.perf_counter()
    # resolved once: the generator runs as the record says
    dtype, compiled = resolved_settings(generation or {})
    generation = {**(generation or {}), "dtype": dtype, "compile": compiled}
    episodes = sha256 = None
    if journal is not None:
        sha256 = read_checkpoint_info(check_checkpoint(policy)).sha256  # hashed once, passed on
        key = journal_key(
            policy=sha256,
            env=env,
            env_data=str(data),
            config=config.deciding(),
            reference_seed=reference_seed,
            generation=generation,
        )
        episodes = EpisodeJournal(Path(journal) / f"evaluate-{key}")
    eval_summary, eval_results, eval_steps, experience = dual_view_evaluation(
        policy,
        config,
        reference_seed=reference_seed,
        env=env,
        generation=generation,
        journal=episodes,
        known_sha256=sha256,
    )
    if results is not None:
        frames = {"eval_results": eval_results, "eval_steps": eval_steps, "experience": experience}
        for name, frame in frames.items():
            write_parquet(frame, results / f"{name}.parquet")
        logger.info("evaluation episodes and Experience written to %s", results)
    record = evaluation_record(
        eval_summary,
        eval_results,
        eval_steps,
        experience,
        config,
        reference_seed=reference_seed,
        seconds=time.perf_counter() - started + (episodes.resumed_seconds if episodes else 0.0),
        command=command,
        dtype=str(dtype).removeprefix("torch."),
        compiled=compiled,
    )
    logger.info("evaluation of %s:\n%s", policy, markdown_table(record))
    for row in record["by_reference_outcome"]:
        logger.info(
            "%s tasks whose reference episode ended in %s (%d): %s view %d of %d episodes (%.1f%%)",
            row["split"],
            row["outcome"],
            row["tasks"],
            row["view"],
            row["successes"],
            row["episodes"],
            100 * row["mean"],
        )
    for row in record["privileged_lead"]:
        logger.info(
            "%s: the privileged view leads by %+.1f points, 95%% interval [%+.1f, %+.1f] over %d "
            "tasks",
            row["split"],
            100 * row["difference"],
            100 * row["low"],
            100 * row["high"],
            row["tasks"],
        )
    for row in record["actions"]:
        repeated = "no" if row["repeated"] is None else f"{100 * row['repeated']:.1f}%"
        logger.info(
            "%s, %s view: %.1f%% of %d actions valid, %s of the later ones repeating the one "
            "before",
            row["split"],
            row["view"],
            100 * row["valid"],
            row["steps"],
            repeated,
        )
    record_evaluation(policy, record)
    if episodes is not None:
        episodes.remove()
    return record
