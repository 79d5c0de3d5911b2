"""ALFWorld's experts: the engine's planner, which knows where every object is, and the searching
expert, which acts on what the episode has shown; and the mistakes a small policy makes in
ALFWorld (going to or opening the wrong receptacle, taking an object the task does not need, a
step before its time, an information-only step, a response without an action)."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from resail_pipeline.envs.alfworld_world import World, parse_task, room_receptacles, search_plan
from resail_pipeline.envs.base import NO_ACTION, Observation, StepResult, draw_mistake_of

__all__ = [
    "ALFWORLD_IDLE",
    "ALFWORLD_MISTAKES",
    "AlfWorldContext",
    "AlfWorldExpert",
    "AlfWorldSearchExpert",
]


#: ALFWorld commands that only report (no change to the game).
ALFWORLD_INFORMATION = ("look", "inventory")


class AlfWorldExpert:
    """ALFWorld's planner expert: the engine's plan from the state the game is in
    (:attr:`~resail_pipeline.envs.alfworld.AlfWorldEnv.expert_plan`, an environment built with
    ``expert=True``); its mistakes are :data:`ALFWORLD_MISTAKES`. It knows the game's hidden state
    (where every object is), so it goes straight to the object."""

    def __init__(self, env: Any) -> None:
        if not getattr(env, "expert", False):
            raise ValueError("env: ALFWorld demonstrations need make_env('alfworld', expert=True)")
        self.env = env
        self._offered: tuple[str, ...] = ()
        self._accepted: list[str] = []

    def start(self, task_id: int, initial: Observation) -> tuple[str, ...] | None:
        self._offered, self._accepted = tuple(initial.admissible_actions or ()), []
        return self.env.expert_plan or None

    def plan(self) -> tuple[str, ...]:
        return self.env.expert_plan

    def mistake(
        self, plan: tuple[str, ...], rng: random.Random, *, no_progress: bool
    ) -> tuple[str, str]:
        ctx = AlfWorldContext(plan, self._offered, tuple(self._accepted))
        kinds = {
            k: v for k, v in ALFWORLD_MISTAKES.items() if not no_progress or k in ALFWORLD_IDLE
        }
        drawn = draw_mistake_of(kinds, ctx, rng)
        if drawn is None:
            raise AssertionError("an information step always applies")
        return drawn

    def executed(self, action: str, result: StepResult, *, relabelled: bool) -> None:
        self._offered = tuple(result.admissible_actions or ())
        if result.action_valid:
            self._accepted.append(action)

    def informed(self) -> str:
        return ""


class AlfWorldSearchExpert(AlfWorldExpert):
    """ALFWorld's searching expert: it acts on what the episode has shown, as an agent without the
    game's hidden state must (:func:`~resail_pipeline.envs.alfworld_world.search_plan`: fetch a
    task object it has seen, else search the receptacles not yet searched that can hold one, in
    the room's order); its mistakes are the planner expert's. Its informed action
    (:meth:`informed`) is the planner's, which knows where the objects are: the privileged view,
    whose summary of another episode of the same game says where they were, learns that one.
    Where the search finds nothing left to do (the task sentence unread, every receptacle
    searched), it follows the planner."""

    def start(self, task_id: int, initial: Observation) -> tuple[str, ...] | None:
        if super().start(task_id, initial) is None:
            return None
        self._world = World(room_receptacles(initial.text))
        self._task = parse_task(initial.task)
        return self.plan()

    def plan(self) -> tuple[str, ...]:
        searched = search_plan(self._task, self._world) if self._task is not None else []
        return tuple(searched) or self.env.expert_plan

    def executed(self, action: str, result: StepResult, *, relabelled: bool) -> None:
        super().executed(action, result, relabelled=relabelled)
        if result.action_valid:
            self._world.observe(result.observation)

    def informed(self) -> str:
        planner = self.env.expert_plan
        return planner[0] if planner else ""


@dataclass(frozen=True)
class AlfWorldContext:
    """What an ALFWorld mistake is drawn from.

    Attributes:
        plan: the expert's plan from the state now (non-empty).
        offered: the admissible actions now.
        accepted: the accepted actions so far, oldest first.
    """

    plan: tuple[str, ...]
    offered: tuple[str, ...]
    accepted: tuple[str, ...]


def _offered_off_plan(ctx: AlfWorldContext, verb: str, rng: random.Random) -> str | None:
    """An admissible ``verb ...`` action that is not the plan's next one."""
    options = [a for a in ctx.offered if a.startswith(verb) and a != ctx.plan[0]]
    return rng.choice(options) if options else None


def wrong_place(ctx: AlfWorldContext, rng: random.Random) -> str | None:
    """Going to a receptacle the plan does not go to next (searching the wrong place)."""
    return _offered_off_plan(ctx, "go to ", rng)


def open_wrong(ctx: AlfWorldContext, rng: random.Random) -> str | None:
    """Opening a receptacle that is not the plan's next one."""
    return _offered_off_plan(ctx, "open ", rng)


def take_wrong(ctx: AlfWorldContext, rng: random.Random) -> str | None:
    """Taking an object the task does not need (it must be put down again)."""
    return _offered_off_plan(ctx, "take ", rng)


def premature_step(ctx: AlfWorldContext, rng: random.Random) -> str | None:
    """A later step of the plan, before what it needs is done (the game refuses it)."""
    later = [a for a in dict.fromkeys(ctx.plan[1:]) if a not in ctx.offered]
    return rng.choice(later) if later else None


def examine(ctx: AlfWorldContext, rng: random.Random) -> str | None:
    """An information-only step: looking around, the inventory, or examining something."""
    options = [*ALFWORLD_INFORMATION, *(a for a in ctx.offered if a.startswith("examine "))]
    return rng.choice(options)


def alfworld_no_action(ctx: AlfWorldContext, rng: random.Random) -> str:
    """A response without a parsable action (an invalid step)."""
    return NO_ACTION


#: ALFWorld's mistake kinds and their relative weights.
ALFWORLD_MISTAKES: dict[
    str, tuple[Callable[[AlfWorldContext, random.Random], str | None], float]
] = {
    "wrong_place": (wrong_place, 3.0),
    "open_wrong": (open_wrong, 1.0),
    "take_wrong": (take_wrong, 1.5),
    "premature_step": (premature_step, 2.0),
    "examine": (examine, 1.0),
    "no_action": (alfworld_no_action, 0.5),
}
#: The kinds a stalled episode may make: none takes an object, so none brings the goal nearer.
ALFWORLD_IDLE = ("wrong_place", "open_wrong", "premature_step", "examine", "no_action")
