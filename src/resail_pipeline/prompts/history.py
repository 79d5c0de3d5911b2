"""The interaction history of one episode, kept apart from the environment and the templates.

Only what the templates show is kept: the initial observation, then one (observation, action)
record per executed step, where the observation is the one the action was taken on. Earlier
reasoning is never stored.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from resail_pipeline.envs.base import Observation, StepResult


@dataclass(frozen=True)
class Turn:
    """One executed step: the observation the agent acted on and the action it took."""

    observation: str
    action: str


@dataclass(frozen=True)
class EpisodeHistory:
    """Everything the prompt of the next step is rendered from.

    Attributes:
        env: environment name (selects the templates).
        initial: the observation returned by ``reset``.
        turns: executed steps, oldest first.
        current_observation: the observation the next action is taken on.
        admissible_actions: the admissible actions now, where the environment lists them.
    """

    env: str
    initial: Observation
    turns: tuple[Turn, ...] = field(default_factory=tuple)
    current_observation: str = ""
    admissible_actions: tuple[str, ...] | None = None

    @classmethod
    def start(cls, env: str, initial: Observation) -> EpisodeHistory:
        return cls(
            env=env,
            initial=initial,
            current_observation=initial.text,
            admissible_actions=initial.admissible_actions,
        )

    @property
    def step_count(self) -> int:
        """Steps already taken before the next one."""
        return len(self.turns)

    def advance(self, action: str, result: StepResult) -> EpisodeHistory:
        """The history after executing ``action`` (its text as executed, ``""`` if none parsed)."""
        return replace(
            self,
            turns=(*self.turns, Turn(self.current_observation, action)),
            current_observation=result.observation,
            admissible_actions=result.admissible_actions,
        )
