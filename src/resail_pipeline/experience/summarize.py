"""The ``summaries`` table of a cycle, and the summaries its consumers may use.

:func:`summarize_trajectories` turns the ``trajectories`` and ``steps`` of a cycle into one
``summaries`` row per trajectory: its accepted summary, or the record of its rejection. It runs once
per cycle; every later node of the cycle reads the table (the catalog keys it by the cycle's
namespace). :func:`usable_summaries` is how the trainer and the evaluation read it: only
trajectories with an accepted summary are kept, with counts logged.

What happens to a trajectory whose model summary was never accepted is
:attr:`SummarizeConfig.on_rejected`: ``drop`` records the rejection and its consumers leave the
trajectory out; ``rules`` puts the rules-based summary in its place, recorded with source
``rules_fallback`` and the model's rejection reasons.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pandas as pd

from resail_pipeline.config import Config, ConfigError, Field, model_validator, one_of
from resail_pipeline.experience.alfworld_rules import walkthrough_planner
from resail_pipeline.experience.evidence import Planner, build_evidence_table, outcome_of
from resail_pipeline.experience.extraction import (
    SOURCE_MODEL,
    SOURCE_RULES,
    Extraction,
    extract_with_model,
    extract_with_rules,
)
from resail_pipeline.experience.validation import validate_summary
from resail_pipeline.generation import Generator, SamplingParams
from resail_pipeline.prompts import Summary
from resail_pipeline.schemas import SCHEMAS, check_columns

logger = logging.getLogger(__name__)

#: What writes the summaries.
SOURCES = (SOURCE_MODEL, SOURCE_RULES)
#: What a trajectory gets whose model summary was never accepted.
ON_REJECTED = ("drop", "rules")
#: ``source`` of a rules-based summary that replaced rejected model attempts.
SOURCE_RULES_FALLBACK = "rules_fallback"
#: Where a rules-based failure summary's corrected plan comes from: ``evidence``, what the
#: trajectory itself shows (the environment's rules and planner); ``walkthrough``, the game's
#: stored planner walkthrough, an oracle that names what the episode never saw (ALFWorld only,
#: for comparison).
CORRECTED_PLANS = ("evidence", "walkthrough")


class SummarizeConfig(Config):
    """How the summaries of a cycle are made. Defaults: the paper's model extraction."""

    source: one_of(*SOURCES) = SOURCE_MODEL
    """``model``: the frozen cycle-start policy writes them (appendix G); ``rules``: built from the
    trajectory itself, for policies too small to write prose."""
    max_attempts: int = Field(8, ge=1)
    """Model extraction: generations per trajectory at most, each with a new seed; generous, so
    that every trajectory gets an accepted summary (those still rejected are counted per cycle in
    train_metrics and the report)."""
    on_rejected: one_of(*ON_REJECTED) = "drop"
    """A trajectory whose model summary was never accepted: ``drop`` (recorded as rejected;
    consumers leave it out) or ``rules`` (the rules-based summary instead)."""
    sampling: SamplingParams = SamplingParams()
    """Model extraction's decoding; every attempt of every trajectory derives its own seed from
    ``sampling.seed`` (see extraction); ``n`` must be 1."""
    corrected_plan: one_of(*CORRECTED_PLANS) = "evidence"
    """Rules-based failure summaries: ``evidence`` (the corrected plan follows from what the
    episode saw) or ``walkthrough`` (the game's stored walkthrough: an oracle, ALFWorld only)."""

    @model_validator(mode="after")
    def _one_summary_per_attempt(self) -> SummarizeConfig:
        if self.sampling.n != 1:
            raise ConfigError(
                f"sampling.n: must be 1 (one summary per attempt), got {self.sampling.n}"
            )
        if self.source == SOURCE_MODEL and self.max_attempts > 1 and self.sampling.temperature == 0:
            raise ConfigError(
                "sampling.temperature: greedy decoding repeats the same text on every retry; "
                f"use temperature > 0 or max_attempts: 1 (got {self.max_attempts})"
            )
        return self


def configured_planner(config: SummarizeConfig, make_env: Callable[[], Any]) -> Planner | None:
    """The planner ``config`` puts in place of the environment's own: the walkthrough of each
    trajectory's game (:func:`~resail_pipeline.experience.alfworld_rules.walkthrough_planner`,
    on an environment from ``make_env``) with ``corrected_plan: walkthrough``; else ``None``.

    Raises:
        ValueError: the environment stores no walkthroughs (naming the field).
    """
    if config.corrected_plan != "walkthrough":
        return None
    return walkthrough_planner(make_env())


def _row(extraction: Extraction) -> dict[str, Any]:
    return {
        "traj_id": extraction.traj_id,
        "outcome": extraction.outcome,
        "summary": extraction.summary,
        "attempts": extraction.attempts,
        "accepted": extraction.accepted,
        "source": extraction.source,
        "rejection_reasons": list(extraction.rejection_reasons),
    }


def _with_rules_fallback(model: Extraction, rules: Extraction) -> Extraction:
    """``model``'s rejection replaced by ``rules``' summary, keeping the model's record."""
    reasons = model.rejection_reasons
    if not rules.accepted:
        reasons += tuple(f"rules fallback: {r}" for r in rules.rejection_reasons)
    return Extraction(
        traj_id=model.traj_id,
        outcome=model.outcome,
        summary=rules.summary,
        attempts=model.attempts,
        accepted=rules.accepted,
        source=SOURCE_RULES_FALLBACK,
        rejection_reasons=reasons,
    )


def summarize_trajectories(
    trajectories: pd.DataFrame,
    steps: pd.DataFrame,
    config: SummarizeConfig,
    generator: Generator | None = None,
    *,
    planner: Planner | None = None,
) -> pd.DataFrame:
    """One ``summaries`` row per trajectory, in the order of ``trajectories``.

    Args:
        trajectories: the cycle's ``trajectories`` table (complete episodes).
        steps: the cycle's ``steps`` table; every trajectory's steps ``0 .. num_steps - 1``.
        config: source, attempts, fallback and decoding.
        generator: the frozen cycle-start policy; required with ``source: model``.
        planner: overrides each environment's registered planner in the rules-based summaries.

    Returns:
        The ``summaries`` table (``schemas.SCHEMAS["summaries"]``): ``summary`` is the canonical
        accepted text or ``""``; ``rejection_reasons`` lists every rejected attempt's reasons.

    Raises:
        SchemaError: a table lacks a column (before any summary is made).
        ValueError: duplicated or incomplete trajectories, or ``source: model`` without a
            generator (before any summary is made).
    """
    if config.source == SOURCE_MODEL and generator is None:
        raise ValueError("generator: source 'model' needs the cycle-start policy's generator")
    evidence = build_evidence_table(trajectories, steps)
    if config.source == SOURCE_RULES:
        results = extract_with_rules(evidence, planner)
    else:
        results = extract_with_model(evidence, generator, config.sampling, config.max_attempts)
        if config.on_rejected == "rules":
            rejected = [i for i, r in enumerate(results) if not r.accepted]
            fallback = extract_with_rules([evidence[i] for i in rejected], planner)
            for i, rules in zip(rejected, fallback, strict=True):
                results[i] = _with_rules_fallback(results[i], rules)

    table = pd.DataFrame([_row(r) for r in results], columns=list(SCHEMAS["summaries"]))
    table = table.astype({"attempts": "int64", "accepted": "bool"})
    by_source = table.loc[table["accepted"], "source"].value_counts().to_dict()
    logger.info(
        "summaries: %d of %d trajectories accepted %s; %d rejected (on_rejected=%s)",
        int(table["accepted"].sum()),
        len(table),
        by_source,
        int((~table["accepted"]).sum()),
        config.on_rejected,
    )
    return table


def usable_summaries(
    trajectories: pd.DataFrame, summaries: pd.DataFrame
) -> tuple[pd.DataFrame, dict[str, Summary]]:
    """The trajectories that have an accepted summary, and each one's :class:`Summary`.

    Trajectories whose summary was never accepted are dropped (with ``on_rejected: rules`` the
    fallback already gave them one) and the counts are logged. Each accepted text is checked
    again (heading, fields; the copy rule needs the steps and was applied when it was made).

    Args:
        trajectories: the ``trajectories`` table the summaries were made from.
        summaries: the ``summaries`` table of the same cycle.

    Returns:
        ``(kept, by_id)``: the kept rows of ``trajectories`` (a new frame, original order) and
        ``traj_id -> Summary``, ready for :func:`~resail_pipeline.prompts.add_privileged`.

    Raises:
        SchemaError: a table lacks a column.
        ValueError: a trajectory without a summaries row, a duplicated row, an outcome that
            contradicts the trajectory, or an accepted text that does not pass the validator;
            each names the trajectory.
    """
    check_columns(trajectories, "trajectories", source="trajectories")
    check_columns(summaries, "summaries", source="summaries")
    duplicated = summaries["traj_id"][summaries["traj_id"].duplicated()].tolist()
    if duplicated:
        raise ValueError(f"summaries.traj_id: duplicated ids {duplicated[:5]}")
    rows = summaries.set_index("traj_id")
    missing = [t for t in trajectories["traj_id"] if t not in rows.index]
    if missing:
        raise ValueError(
            f"summaries: no row for {len(missing)} of {len(trajectories)} trajectories "
            f"(first: {missing[:3]}); were the summaries made from these trajectories?"
        )

    by_id: dict[str, Summary] = {}
    for traj_id, success in zip(trajectories["traj_id"], trajectories["success"], strict=True):
        row = rows.loc[traj_id]
        outcome = outcome_of(success)
        if row["outcome"] != outcome:
            raise ValueError(
                f"summaries.outcome: trajectory {traj_id!r} is a {outcome} but its summary row "
                f"says {row['outcome']!r}"
            )
        if not bool(row["accepted"]):
            continue
        verdict = validate_summary(row["summary"], outcome)
        if verdict.summary is None:
            raise ValueError(
                f"summaries.summary: the accepted summary of {traj_id!r} does not pass the "
                f"validator: {'; '.join(verdict.reasons)}"
            )
        by_id[traj_id] = verdict.summary

    kept = trajectories[trajectories["traj_id"].isin(list(by_id))].reset_index(drop=True)
    logger.info(
        "summaries: kept %d of %d trajectories; dropped %d whose summary was never accepted",
        len(kept),
        len(trajectories),
        len(trajectories) - len(kept),
    )
    return kept, by_id
