"""TextCraft's expert: the exact planner (:mod:`~resail_pipeline.envs.planner`), replanning from
the inventory it simulates, and the mistakes a small policy makes in TextCraft (a wrong quantity,
a craft whose ingredients are not held yet, fetching a craftable item, naming a tag instead of a
concrete item, a distractor recipe, repeating the last craft, an information-only step, a
response without an action)."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from resail_pipeline.envs import Environment
from resail_pipeline.envs.base import NO_ACTION, Observation, StepResult, draw_mistake_of
from resail_pipeline.envs.planner import CraftingProblem, parse_problem, plan

__all__ = ["MISTAKES", "MistakeContext", "SimulationMismatch", "TextCraftExpert", "draw_mistake"]


class PlannerEnvironment(Environment, Protocol):
    """TextCraft's environment: it also reports the items held."""

    def inventory(self) -> dict[str, int]:
        """Item name (as the crafting commands write it) -> count held now."""
        ...


@dataclass(frozen=True)
class MistakeContext:
    """What a mistake is drawn from.

    Attributes:
        problem: the episode's goal and crafting commands.
        inventory: the items held now.
        plan: the planner's remaining plan from ``inventory`` (non-empty).
        accepted: the accepted actions so far, oldest first.
    """

    problem: CraftingProblem
    inventory: dict[str, int]
    plan: tuple[str, ...]
    accepted: tuple[str, ...]


#: A mistake kind: the mistaken action (:data:`NO_ACTION` for a response without one), or
#: ``None`` when the kind does not apply in this context.
Mistake = Callable[[MistakeContext, random.Random], "str | None"]


def _split_craft(action: str) -> tuple[int, str, list[tuple[int, str]]] | None:
    """``craft N out using n1 in1, n2 in2`` -> ``(N, out, [(n1, in1), ...])``."""
    if not action.startswith("craft ") or " using " not in action:
        return None
    head, _, tail = action[len("craft ") :].partition(" using ")
    count, _, output = head.partition(" ")
    ingredients = []
    for part in tail.split(", "):
        n, _, name = part.partition(" ")
        if not n.isdigit() or not name:
            return None
        ingredients.append((int(n), name))
    if not count.isdigit():
        return None
    return int(count), output, ingredients


def _join_craft(count: int, output: str, ingredients: Sequence[tuple[int, str]]) -> str:
    return f"craft {count} {output} using " + ", ".join(f"{n} {name}" for n, name in ingredients)


def _other_count(n: int, rng: random.Random) -> int:
    return rng.choice([m for m in (n - 1, n + 1, 2 * n, n + 2) if m >= 1 and m != n])


def wrong_quantity(ctx: MistakeContext, rng: random.Random) -> str | None:
    """The next planned action with one quantity changed."""
    action = ctx.plan[0]
    if action.startswith("get "):
        n, _, item = action[len("get ") :].partition(" ")
        return f"get {_other_count(int(n), rng)} {item}"
    craft = _split_craft(action)
    if craft is None:
        return None
    count, output, ingredients = craft
    which = rng.randrange(len(ingredients) + 1)
    if which == len(ingredients):
        return _join_craft(_other_count(count, rng), output, ingredients)
    changed = list(ingredients)
    n, name = changed[which]
    changed[which] = (_other_count(n, rng), name)
    return _join_craft(count, output, changed)


def premature_craft(ctx: MistakeContext, rng: random.Random) -> str | None:
    """A later craft of the plan whose ingredients are not all held yet."""
    later = [a for a in dict.fromkeys(ctx.plan[1:]) if a.startswith("craft ")]
    rejected = [a for a in later if ctx.problem.apply(ctx.inventory, a) is None]
    return rng.choice(rejected) if rejected else None


def get_craftable(ctx: MistakeContext, rng: random.Random) -> str | None:
    """Fetching an item that only a crafting command produces (the environment refuses)."""
    needed = [a for a in ctx.plan if a.startswith("craft ")]
    outputs = [c[1] for a in needed if (c := _split_craft(a)) is not None]
    if not outputs:
        return None
    return f"get {rng.choice([1, 1, 2, 4])} {rng.choice(outputs)}"


def tag_instead_of_item(ctx: MistakeContext, rng: random.Random) -> str | None:
    """A planned craft naming the tag (``planks``) instead of the concrete item it stands for."""
    for action in ctx.plan:
        craft = _split_craft(action)
        if craft is None:
            continue
        count, output, ingredients = craft
        for recipe in ctx.problem.producers.get(output, ()):
            names = [name for name, _ in recipe.ingredients]
            tags = [name for name in names if ctx.problem.tag_members(name)]
            if tags and len(names) == len(ingredients):
                generic = [(n, name) for (n, _), name in zip(ingredients, names, strict=True)]
                return _join_craft(count, output, generic)
    return None


def distractor_craft(ctx: MistakeContext, rng: random.Random) -> str | None:
    """A listed crafting command that the plan does not use, as written in the list."""
    used = {c[1] for a in ctx.plan if (c := _split_craft(a)) is not None}
    others = [r.command for r in ctx.problem.recipes if r.output not in used]
    return rng.choice(others) if others else None


def repeat_last_craft(ctx: MistakeContext, rng: random.Random) -> str | None:
    """The last accepted craft once more (often after its ingredients are used up)."""
    crafts = [a for a in ctx.accepted if a.startswith("craft ")]
    return crafts[-1] if crafts else None


def check_inventory(ctx: MistakeContext, rng: random.Random) -> str:
    """An information-only step: valid, but no progress."""
    return "inventory"


def no_action(ctx: MistakeContext, rng: random.Random) -> str:
    """A response without a parsable action (an invalid step)."""
    return NO_ACTION


#: Mistake kinds and their relative weights.
MISTAKES: dict[str, tuple[Mistake, float]] = {
    "wrong_quantity": (wrong_quantity, 3.0),
    "premature_craft": (premature_craft, 3.0),
    "get_craftable": (get_craftable, 1.5),
    "tag_instead_of_item": (tag_instead_of_item, 1.0),
    "distractor_craft": (distractor_craft, 1.5),
    "repeat_last_craft": (repeat_last_craft, 2.0),
    "check_inventory": (check_inventory, 1.0),
    "no_action": (no_action, 0.5),
}


def draw_mistake(
    ctx: MistakeContext, rng: random.Random, *, no_progress: bool = False
) -> tuple[str, str]:
    """``(kind, action)`` of one applicable mistake, kinds drawn by weight without replacement.

    With ``no_progress`` only mistakes that change nothing qualify (rejected actions, information
    steps, responses without an action): a stalled episode must not stumble into its goal.
    """

    def idle(action: str) -> bool:
        return (
            action in (NO_ACTION, "inventory") or ctx.problem.apply(ctx.inventory, action) is None
        )

    drawn = draw_mistake_of(MISTAKES, ctx, rng, idle if no_progress else None)
    if drawn is None:
        raise AssertionError("check_inventory always applies")
    return drawn


class SimulationMismatch(RuntimeError):
    """The environment accepted an action that the planner's simulation of the recipes rejects."""


class TextCraftExpert:
    """TextCraft's exact planner (:mod:`resail_pipeline.envs.planner`), replanning from the
    inventory it simulates; its mistakes are :data:`MISTAKES`."""

    def __init__(self, env: PlannerEnvironment) -> None:
        self.env = env
        self._problem: CraftingProblem | None = None
        self._inventory: dict[str, int] = {}
        self._accepted: list[str] = []
        self._task_id = -1

    def start(self, task_id: int, initial: Observation) -> tuple[str, ...] | None:
        self._problem = parse_problem(initial.text)
        self._inventory, self._accepted, self._task_id = {}, [], task_id
        clean = None if self._problem is None else plan(self._problem)
        return None if clean is None else tuple(clean)

    def plan(self) -> tuple[str, ...]:
        remaining = plan(self._problem, self._inventory)
        if remaining is None:
            raise RuntimeError(f"task {self._task_id}: the planner lost its plan")
        return tuple(remaining)

    def mistake(
        self, plan: tuple[str, ...], rng: random.Random, *, no_progress: bool
    ) -> tuple[str, str]:
        ctx = MistakeContext(self._problem, self._inventory, plan, tuple(self._accepted))
        return draw_mistake(ctx, rng, no_progress=no_progress)

    def executed(self, action: str, result: StepResult, *, relabelled: bool) -> None:
        if not result.action_valid:
            return
        after = self._problem.apply(self._inventory, action)
        if after is None and relabelled:
            # a policy may craft from the game's whole recipe book, beyond the listed commands
            # the planner simulates: the environment's own inventory keeps the labels exact
            after = self.env.inventory()
        if after is None:
            raise SimulationMismatch(
                f"task {self._task_id}: the environment accepted {action!r}, the planner's "
                "simulation rejects it"
            )
        self._inventory = after
        self._accepted.append(action)

    def informed(self) -> str:
        return ""
