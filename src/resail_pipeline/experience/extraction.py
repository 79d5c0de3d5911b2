"""Summary extraction, one :class:`Extraction` per trajectory: by the model, or by the rules.

Model extraction (appendix G): the frozen cycle-start policy writes each summary from the
outcome-specific prompt, through any :class:`~resail_pipeline.generation.Generator`. All
trajectories still lacking an accepted summary are generated together, one batched call per
attempt. Attempt ``a`` of a trajectory samples with its own seed
``derive_seed(sampling.seed, a, traj_key(traj_id))``: every retry draws anew, and a trajectory's
summary does not depend on which other trajectories are summarised with it. After
``max_attempts`` attempts a trajectory that never passed the validator is recorded as rejected,
with the reasons of every attempt.

Rules extraction builds the summary from the trajectory itself (:mod:`.rules`) and puts it through
the same validator.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from resail_pipeline.experience.evidence import Evidence
from resail_pipeline.experience.rules import Planner, rules_summary
from resail_pipeline.experience.validation import validate_summary
from resail_pipeline.generation import Generator, SamplingParams, derive_seed
from resail_pipeline.prompts import chat_prompt

logger = logging.getLogger(__name__)

SOURCE_MODEL = "model"
SOURCE_RULES = "rules"

#: Rejection reason added when a generation stopped at ``max_new_tokens`` without ending.
REASON_TRUNCATED = "truncated"


@dataclass(frozen=True)
class Extraction:
    """The summary of one trajectory, or the record of its rejection.

    Attributes:
        traj_id: the trajectory.
        outcome: ``"success"`` or ``"failure"``.
        summary: the accepted text as written (without thinking); ``""`` when never accepted.
        attempts: texts produced and validated (generations for the model, 1 for the rules).
        accepted: one text passed the validator.
        source: what wrote the accepted text (``"model"`` or ``"rules"``), or what tried.
        rejection_reasons: every rejected attempt's reasons, each prefixed ``"attempt <a>: "``.
    """

    traj_id: str
    outcome: str
    summary: str
    attempts: int
    accepted: bool
    source: str
    rejection_reasons: tuple[str, ...] = ()


def traj_key(traj_id: str) -> int:
    """A 64-bit integer hashed from ``traj_id`` (BLAKE2b), the trajectory's part of its seeds."""
    return int.from_bytes(hashlib.blake2b(traj_id.encode(), digest_size=8).digest(), "little")


def extract_with_rules(
    evidence: Sequence[Evidence], planner: Planner | None = None
) -> list[Extraction]:
    """The rules-based summary of every trajectory, validated like a generated one.

    ``planner`` overrides each environment's registered planner (see :func:`rules_summary`).
    """
    results = []
    for item in evidence:
        verdict = validate_summary(rules_summary(item, planner), item.outcome, item)
        results.append(
            Extraction(
                traj_id=item.traj_id,
                outcome=item.outcome,
                summary=verdict.summary.text if verdict.summary else "",
                attempts=1,
                accepted=verdict.accepted,
                source=SOURCE_RULES,
                rejection_reasons=tuple(f"attempt 1: {r}" for r in verdict.reasons),
            )
        )
    return results


def extract_with_model(
    evidence: Sequence[Evidence],
    generator: Generator,
    sampling: SamplingParams,
    max_attempts: int,
) -> list[Extraction]:
    """Summaries written by ``generator``'s policy, retried with new seeds until accepted.

    Args:
        evidence: the trajectories to summarise.
        generator: the frozen cycle-start policy; its ``tokenizer`` applies the chat template
            (:func:`~resail_pipeline.prompts.chat_prompt`, thinking disabled).
        sampling: decoding settings; ``n`` must be 1 (the seeds are derived from ``seed``).
        max_attempts: generations per trajectory at most (``>= 1``).

    Returns:
        One :class:`Extraction` per trajectory, in the order of ``evidence``.
    """
    if max_attempts < 1:
        raise ValueError(f"max_attempts: must be >= 1, got {max_attempts}")
    if sampling.n != 1:
        raise ValueError(f"sampling.n: one summary per trajectory and attempt, got n={sampling.n}")
    prompts = [chat_prompt(generator.tokenizer, item.prompt()) for item in evidence]
    keys = [traj_key(item.traj_id) for item in evidence]
    summaries: dict[int, str] = {}
    attempts = [0] * len(evidence)
    reasons: list[list[str]] = [[] for _ in evidence]
    pending = list(range(len(evidence)))
    for attempt in range(1, max_attempts + 1):
        if not pending:
            break
        logger.info(
            "summaries: attempt %d/%d, generating %d of %d",
            attempt,
            max_attempts,
            len(pending),
            len(evidence),
        )
        outputs = generator.generate(
            [prompts[i] for i in pending],
            sampling,
            seeds=[derive_seed(sampling.seed, attempt, keys[i]) for i in pending],
        )
        if len(outputs) != len(pending):
            raise RuntimeError(
                f"generator {generator.policy_id!r}: {len(outputs)} generations "
                f"for {len(pending)} prompts"
            )
        rejected = []
        for i, output in zip(pending, outputs, strict=True):
            attempts[i] = attempt
            verdict = validate_summary(output.text, evidence[i].outcome, evidence[i])
            if verdict.summary is not None:
                summaries[i] = verdict.summary.text
                continue
            found = list(verdict.reasons)
            if not output.finished:
                found.append(f"{REASON_TRUNCATED}: no end of sequence within the token limit")
            reasons[i] += [f"attempt {attempt}: {r}" for r in found]
            rejected.append(i)
        pending = rejected
    logger.info(
        "summaries: %d of %d accepted after at most %d attempts (policy %s)",
        len(summaries),
        len(evidence),
        max_attempts,
        generator.policy_id,
    )
    return [
        Extraction(
            traj_id=item.traj_id,
            outcome=item.outcome,
            summary=summaries.get(i, ""),
            attempts=attempts[i],
            accepted=i in summaries,
            source=SOURCE_MODEL,
            rejection_reasons=tuple(reasons[i]),
        )
        for i, item in enumerate(evidence)
    ]
