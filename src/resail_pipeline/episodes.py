"""What a rollout runs and what it returns: an episode's spec, its steps, the finished episode.

Plain records, below both :mod:`resail_pipeline.rollout` (which plays them, and is where callers
take them from) and :mod:`resail_pipeline.journal` (which keeps them).
"""

from __future__ import annotations

from dataclasses import dataclass

from resail_pipeline.prompts import Summary

__all__ = ["Episode", "EpisodeSpec", "StepRecord"]


@dataclass(frozen=True)
class EpisodeSpec:
    """One episode to run.

    Attributes:
        traj_id: unique within a run; see :mod:`resail_pipeline.schemas` for the convention.
        task_id: the environment's task.
        decoding_seed: seeds every response of the episode (step ``t`` uses
            ``derive_seed(decoding_seed, t)``).
        summary: when given, every step is generated from the privileged view with this
            summary (dual-view evaluation); the recorded prompts stay ordinary-view.
    """

    traj_id: str
    task_id: int
    decoding_seed: int
    summary: Summary | None = None

    def __post_init__(self) -> None:
        if not self.traj_id:
            raise ValueError("traj_id: must be a non-empty string")
        if self.decoding_seed < 0:
            raise ValueError(f"decoding_seed: must be >= 0, got {self.decoding_seed}")


@dataclass(frozen=True)
class StepRecord:
    """One executed step, as the ``steps`` table records it.

    Attributes:
        t: the step index, from 0.
        observation: the observation the action was taken on.
        admissible_actions: the admissible actions at that observation, where listed.
        prompt: the ordinary-view user message, before the chat template.
        response: the raw model text.
        action: the parsed action, ``""`` when the response did not parse.
        action_valid: the action parsed and the environment accepted it.
        next_observation: the observation after the step.
        reward: the environment's reward for the step.
        done: the episode ended at this step.
    """

    t: int
    observation: str
    admissible_actions: tuple[str, ...] | None
    prompt: str
    response: str
    action: str
    action_valid: bool
    next_observation: str
    reward: float
    done: bool


@dataclass(frozen=True)
class Episode:
    """A finished episode.

    Attributes:
        spec: what was asked for.
        env: the environment's registry name.
        task: the task description shown to the agent.
        policy_id: the generator's policy.
        steps: the executed steps, in order.
        success: the task was completed.
        end_reason: one of ``END_SUCCESS``, ``END_STEP_LIMIT``, ``END_ENV_DONE``.
    """

    spec: EpisodeSpec
    env: str
    task: str
    policy_id: str
    steps: tuple[StepRecord, ...]
    success: bool
    end_reason: str

    @property
    def num_steps(self) -> int:
        return len(self.steps)
