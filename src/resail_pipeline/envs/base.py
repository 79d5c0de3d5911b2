"""The environment protocol shared by every adapter.

An environment runs one episode at a time::

    env = make_env("textcraft")
    obs = env.reset(task_id)             # Observation
    result = env.step("get 1 oak logs")  # StepResult
    result = env.step(None)              # an unparsable response: invalid, consumes a step

Adapters hold no prompt text: rendering lives in :mod:`resail_pipeline.prompts`.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

#: Reasons an episode ends, as written to the ``end_reason`` column.
END_SUCCESS = "success"
END_STEP_LIMIT = "step_limit"
END_ENV_DONE = "env_done"


@dataclass(frozen=True)
class Observation:
    """What the agent sees after ``reset``.

    Attributes:
        text: the observation as the environment prints it (normalised by the adapter).
        task: the task description or goal sentence extracted from the initial observation.
        admissible_actions: the admissible actions where the environment lists them
            (ALFWorld, without ``help``); ``None`` where it does not (TextCraft).
        commands: episode-level context re-inserted in later prompts (TextCraft's crafting
            commands, one per entry); empty where the environment has none.
    """

    text: str
    task: str
    admissible_actions: tuple[str, ...] | None = None
    commands: tuple[str, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class StepResult:
    """The outcome of one ``step``.

    Attributes:
        observation: the next observation text (normalised).
        reward: the environment's reward for this step.
        done: the episode is over (success, step limit, or the environment ended it).
        success: the task was completed at this step.
        action_valid: the action parsed and the environment accepted it.
        admissible_actions: the admissible actions for the next step, where listed.
        end_reason: one of ``END_*`` when ``done``, else ``None``.
    """

    observation: str
    reward: float
    done: bool
    success: bool
    action_valid: bool
    admissible_actions: tuple[str, ...] | None = None
    end_reason: str | None = None


@runtime_checkable
class Environment(Protocol):
    """One episode at a time; ``reset`` is cheap and deterministic in ``task_id``."""

    #: registry name, e.g. ``"textcraft"``; also selects the prompt templates.
    name: str
    #: steps before the episode is cut (invalid actions consume a step).
    max_steps: int
    #: the most episodes of this environment a rollout keeps alive at once where its settings
    #: name no cap (``max_live: null``); ``None``: no limit. An environment whose instances hold
    #: heavy resources sets one.
    live_limit: int | None

    def task_ids(self, split: str) -> list[int]:
        """The task ids of ``split`` in a fixed order; unknown splits raise ``ValueError``."""
        ...

    def reset(self, task_id: int) -> Observation:
        """Start the episode of ``task_id``; the same id gives the same initial state."""
        ...

    def step(self, action: str | None) -> StepResult:
        """Apply ``action``; ``None`` (unparsable model output) is invalid and uses a step."""
        ...


#: The executed "action" of a response without a parsable action.
NO_ACTION = ""


class Expert(Protocol):
    """What :func:`play` needs of an environment's expert, for one episode at a time."""

    def start(self, task_id: int, initial: Observation) -> tuple[str, ...] | None:
        """Begin the episode ``initial`` opens; its plan from the start, ``None`` if none."""
        ...

    def plan(self) -> tuple[str, ...]:
        """The expert's plan from the state the episode is in (non-empty until it is won)."""
        ...

    def mistake(
        self, plan: tuple[str, ...], rng: random.Random, *, no_progress: bool
    ) -> tuple[str, str]:
        """``(kind, action)`` of one mistake here, ``plan`` being :meth:`plan`; with
        ``no_progress`` only one that brings the goal no nearer."""
        ...

    def executed(self, action: str, result: StepResult, *, relabelled: bool) -> None:
        """Follow the step that executed ``action`` with ``result``."""
        ...

    def informed(self) -> str:
        """The privileged view's target here where it differs from ``plan()[0]``, else ``""``."""
        ...


def draw_mistake_of(
    kinds: Mapping[str, tuple[Callable[[Any, random.Random], str | None], float]],
    ctx: Any,
    rng: random.Random,
    accept: Callable[[str], bool] | None = None,
) -> tuple[str, str] | None:
    """``(kind, action)`` of a mistake, kinds drawn by weight without replacement until one gives
    an action (``None``: it does not apply in ``ctx``) that ``accept`` takes (any, without one);
    ``None`` if none does.
    Each environment's expert draws its own kinds with it."""
    left = dict(kinds)
    while left:
        names = list(left)
        name = rng.choices(names, weights=[left[n][1] for n in names])[0]
        action = left.pop(name)[0](ctx, rng)
        if action is not None and (accept is None or accept(action)):
            return name, action
    return None
