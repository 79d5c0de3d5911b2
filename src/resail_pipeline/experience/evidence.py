"""The evidence a summary is written from: task snapshot + numbered action/result records.

Appendix G ("Text Experience Extraction", evidence limits): each action and each resulting
observation is capped at 240 and 480 characters; the task snapshot is at most the first four
non-empty lines, each capped at 240 characters. The records are laid out with
:data:`~resail_pipeline.prompts.summaries.EVIDENCE_RECORD` and the outcome-specific prompt
(:data:`SUCCESS_PROMPT` / :data:`FAILURE_PROMPT`).

Definitions used throughout (tested at N - 1, N and N + 1 characters):

- *Normalise*: every run of whitespace (spaces, tabs, newlines) becomes one space and the ends are
  stripped, so that one record is exactly two prompt lines.
- *Cap at N*: the normalised text is cut to its first N characters; nothing is appended, so a
  capped text is at most N characters long.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from resail_pipeline.envs.base import END_ENV_DONE, END_STEP_LIMIT
from resail_pipeline.prompts.common import OUTCOME_FAILURE, OUTCOME_SUCCESS
from resail_pipeline.prompts.summaries import EVIDENCE_RECORD, FAILURE_PROMPT, SUCCESS_PROMPT
from resail_pipeline.schemas import check_columns, is_null

#: Characters kept of each executed action.
ACTION_CHARS = 240
#: Characters kept of each resulting observation.
OBSERVATION_CHARS = 480
#: Non-empty lines kept in the task snapshot.
SNAPSHOT_LINES = 4
#: Characters kept of each snapshot line.
SNAPSHOT_LINE_CHARS = 240

PROMPTS = {OUTCOME_SUCCESS: SUCCESS_PROMPT, OUTCOME_FAILURE: FAILURE_PROMPT}


def normalise(text: Any) -> str:
    """``text`` with whitespace runs collapsed to one space and the ends stripped; null -> ``""``."""
    return " ".join(_raw_text(text).split())


def cap(text: Any, limit: int) -> str:
    """The normalised ``text`` cut to its first ``limit`` characters (no ellipsis is added)."""
    if limit < 1:
        raise ValueError(f"limit: must be >= 1, got {limit}")
    return normalise(text)[:limit]


def task_snapshot(initial_observation: Any) -> tuple[str, ...]:
    """The task snapshot (appendix G): the first :data:`SNAPSHOT_LINES` non-empty lines of the
    initial observation as the environment printed them, in their order, each normalised and
    capped at :data:`SNAPSHOT_LINE_CHARS`.

    For TextCraft that is "Crafting commands:" and the first three commands (the goal line comes
    after the command list); for ALFWorld the welcome banner, the room description and the task.
    """
    lines = [normalise(line) for line in str(initial_observation or "").splitlines()]
    lines = [line for line in lines if line]
    return tuple(line[:SNAPSHOT_LINE_CHARS] for line in lines[:SNAPSHOT_LINES])


@dataclass(frozen=True)
class EvidenceRecord:
    """One executed step as the summary prompt shows it.

    Attributes:
        action: the executed action, normalised and capped (``""`` if none parsed).
        observation: the observation the action produced, normalised and capped.
        valid: the environment accepted the action (not shown in the prompt; used by the rules).
    """

    action: str
    observation: str
    valid: bool


@dataclass(frozen=True)
class Evidence:
    """Everything a summary of one trajectory is written from, with the limits applied.

    Attributes:
        traj_id: the trajectory.
        env: environment name (selects the rules-based extractor's env rules).
        outcome: ``"success"`` or ``"failure"`` (from the trajectory's ``success``).
        snapshot: the task snapshot lines (see :func:`task_snapshot`).
        records: one record per executed step, in order.
        initial_observation: the full, uncapped initial observation (for planners; never shown).
        end_reason: why the episode ended (``trajectories.end_reason``).
        task_id: the trajectory's task (for planners that read the task's game; never shown).
    """

    traj_id: str
    env: str
    outcome: str
    snapshot: tuple[str, ...]
    records: tuple[EvidenceRecord, ...]
    initial_observation: str = ""
    end_reason: str = ""
    task_id: int | None = None

    def snapshot_text(self) -> str:
        return "\n".join(self.snapshot)

    def records_text(self) -> str:
        """The numbered records, laid out with ``EVIDENCE_RECORD`` and joined by newlines."""
        return "\n".join(
            EVIDENCE_RECORD.format(index=i, action=r.action, observation=r.observation)
            for i, r in enumerate(self.records, start=1)
        )

    def prompt(self) -> str:
        """The outcome-specific summary prompt (the user message, before chat formatting)."""
        return PROMPTS[self.outcome].format(
            task_snapshot=self.snapshot_text(), evidence=self.records_text()
        )

    def units(self) -> tuple[tuple[str, str], ...]:
        """The evidence as ``(kind, text)`` pieces in prompt order, for the copy check.

        Kinds: ``"snapshot"``, ``"action"``, ``"observation"``.
        """
        pieces: list[tuple[str, str]] = [("snapshot", line) for line in self.snapshot]
        for r in self.records:
            pieces.append(("action", r.action))
            pieces.append(("observation", r.observation))
        return tuple(pieces)


#: A planner: the evidence of a trajectory -> the actions of a plan, or ``None`` when it finds none.
Planner = Callable[[Evidence], "Sequence[str] | None"]


def ending_text(evidence: Evidence) -> str:
    """How the episode ended, in words, with its number of steps."""
    n = len(evidence.records)
    if evidence.end_reason == END_STEP_LIMIT:
        return f"the episode hit the step limit after {n} steps"
    if evidence.end_reason == END_ENV_DONE:
        return f"the environment ended the episode after {n} steps"
    return f"the episode ended ({evidence.end_reason or 'no reason recorded'}) after {n} steps"


def _raw_text(value: Any) -> str:
    """``value`` as text, unnormalised; null -> ``""``."""
    return "" if is_null(value) else str(value)


def _is_true(value: Any) -> bool:
    return not is_null(value) and bool(value)


def outcome_of(success: Any) -> str:
    """The summary outcome of a trajectory from its ``success`` value (null counts as failure)."""
    return OUTCOME_SUCCESS if _is_true(success) else OUTCOME_FAILURE


def build_evidence(trajectory: Mapping[str, Any], steps: pd.DataFrame) -> Evidence:
    """The evidence of one complete trajectory from its ``trajectories`` row and ``steps`` rows.

    ``steps`` must hold exactly the steps ``t = 0 .. num_steps - 1`` of this trajectory; the
    initial observation is the ``observation`` of ``t = 0`` and each record's result is the
    step's ``next_observation``. Raises ``ValueError`` naming the trajectory otherwise.
    """
    traj_id = str(trajectory["traj_id"])
    num_steps = int(trajectory["num_steps"])
    ts = sorted(int(t) for t in steps["t"])
    if num_steps < 1:
        raise ValueError(f"trajectories.num_steps: trajectory {traj_id!r} has {num_steps} steps")
    if ts != list(range(num_steps)):
        raise ValueError(
            f"steps.t: trajectory {traj_id!r} is incomplete: expected steps 0..{num_steps - 1} "
            f"(num_steps={num_steps}), found {ts[:8]}{'...' if len(ts) > 8 else ''}"
        )
    ordered = steps.sort_values("t", kind="stable")
    initial = _raw_text(ordered["observation"].iloc[0])
    records = tuple(
        EvidenceRecord(
            action=cap(action, ACTION_CHARS),
            observation=cap(observation, OBSERVATION_CHARS),
            valid=_is_true(valid),
        )
        for action, observation, valid in zip(
            ordered["action"], ordered["next_observation"], ordered["action_valid"], strict=True
        )
    )
    return Evidence(
        traj_id=traj_id,
        env=str(trajectory["env"]),
        outcome=outcome_of(trajectory["success"]),
        snapshot=task_snapshot(initial),
        records=records,
        initial_observation=initial,
        end_reason=normalise(trajectory["end_reason"]),
        task_id=None if is_null(trajectory.get("task_id")) else int(trajectory["task_id"]),
    )


def build_evidence_table(trajectories: pd.DataFrame, steps: pd.DataFrame) -> list[Evidence]:
    """The evidence of every trajectory, in the order of ``trajectories``.

    Checks the columns of both frames, duplicate ``traj_id``s and that every trajectory's steps
    are complete before anything is built; steps of other trajectories are ignored.
    """
    check_columns(trajectories, "trajectories", source="trajectories")
    check_columns(steps, "steps", source="steps")
    duplicated = trajectories["traj_id"][trajectories["traj_id"].duplicated()].tolist()
    if duplicated:
        raise ValueError(f"trajectories.traj_id: duplicated ids {duplicated[:5]}")
    duplicated_steps = steps[steps.duplicated(["traj_id", "t"])]
    if len(duplicated_steps):
        first = duplicated_steps.iloc[0]
        raise ValueError(
            f"steps.(traj_id, t): duplicated step t={first['t']} of trajectory {first['traj_id']!r}"
        )
    groups = {traj_id: group for traj_id, group in steps.groupby("traj_id", sort=False)}
    empty = steps.iloc[0:0]
    return [
        build_evidence(row, groups.get(row["traj_id"], empty))
        for row in trajectories.to_dict("records")
    ]
