"""An exact TextCraft planner that works from the observation alone.

TextCraft shows the crafting commands of the goal's recipe tree (plus distractors) and the goal:

    Crafting commands:
    craft 4 oak planks using 1 oak logs
    craft 4 stick using 2 planks
    ...

    Goal: craft wooden pickaxe.

:func:`parse_problem` reads that text into a :class:`CraftingProblem`; :func:`plan` returns the
actions that craft the goal from a given inventory (``get`` for every item no command produces,
then each ``craft`` as often as the quantities need), or ``None`` when the listed commands cannot
produce it. A craft command only accepts the exact recipe quantities, so a recipe is repeated
rather than scaled. An ingredient that is a tag (``planks``, ``wool``) is satisfied by a concrete
item whose name ends with the tag word and that some command produces (``oak planks``); the
executed command names the concrete item.

The same problem also simulates actions (:meth:`CraftingProblem.apply`), so a caller that injects
mistakes can track the inventory and replan from it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

__all__ = ["CraftingProblem", "Recipe", "parse_problem", "plan", "plan_from_observation"]

_COMMAND = re.compile(r"^craft (\d+) (.+?) using (.+)$")
_INGREDIENT = re.compile(r"^(\d+) (.+)$")
_GOAL = re.compile(r"Goal: craft (.+?)\.?\s*$", re.MULTILINE)
_GET = re.compile(r"^get (\d+) (.+)$")

#: Inventory: item name (as the commands write it) -> count.
Inventory = Mapping[str, int]


@dataclass(frozen=True)
class Recipe:
    """One crafting command: ``craft <count> <output> using <n1> <in1>, <n2> <in2>``."""

    output: str
    count: int
    ingredients: tuple[tuple[str, int], ...]

    @property
    def command(self) -> str:
        inputs = ", ".join(f"{n} {name}" for name, n in self.ingredients)
        return f"craft {self.count} {self.output} using {inputs}"

    def concrete(self, choice: Mapping[str, str]) -> str:
        """The command with tag ingredients replaced by the concrete items in ``choice``."""
        inputs = ", ".join(f"{n} {choice.get(name, name)}" for name, n in self.ingredients)
        return f"craft {self.count} {self.output} using {inputs}"


@dataclass(frozen=True)
class CraftingProblem:
    """The goal and the crafting commands of one TextCraft episode."""

    goal: str
    recipes: tuple[Recipe, ...]

    @cached_property
    def producers(self) -> dict[str, tuple[Recipe, ...]]:
        """Item -> the commands that produce it, in listed order."""
        out: dict[str, list[Recipe]] = {}
        for recipe in self.recipes:
            out.setdefault(recipe.output, []).append(recipe)
        return {item: tuple(rs) for item, rs in out.items()}

    def requires(self, item: str) -> frozenset[str]:
        """Every ingredient name that some way of producing ``item`` may use, transitively."""
        seen: set[str] = set()
        stack = [item]
        while stack:
            for recipe in self.producers.get(stack.pop(), ()):
                for name, _ in recipe.ingredients:
                    if name not in seen:
                        seen.add(name)
                        stack.append(name)
        return frozenset(seen)

    def tag_members(self, name: str) -> tuple[str, ...]:
        """The items that stand for ``name`` when it is a tag (``planks``): produced items whose
        name ends with it and whose recipes do not need ``name`` itself. ``name`` is a tag iff it
        has members; ``glass`` has none (every stained glass is made of glass), so it is fetched."""
        if name in self.producers:
            return ()
        return tuple(
            sorted(
                item
                for item in self.producers
                if item.endswith(" " + name) and name not in self.requires(item)
            )
        )

    def apply(self, inventory: Inventory, action: str) -> dict[str, int] | None:
        """The inventory after ``action`` as the environment would execute it, or ``None`` if it
        would be rejected (an unknown command, missing ingredients, getting a craftable item)."""
        inv = dict(inventory)
        action = action.strip()
        if action == "inventory":
            return inv
        if match := _GET.match(action):
            count, item = int(match[1]), match[2]
            if item in self.producers:
                return None
            inv[item] = inv.get(item, 0) + count
            return inv
        if match := _COMMAND.match(action):
            output, used = match[2], _parse_ingredients(match[3])
            if used is None:
                return None
            for recipe in self.producers.get(output, ()):
                choice = self._matches(recipe, used)
                if choice is None:
                    continue
                for name, n in used:
                    if inv.get(name, 0) < n:
                        return None
                for name, n in used:
                    inv[name] -= n
                    if inv[name] == 0:
                        del inv[name]
                inv[output] = inv.get(output, 0) + recipe.count
                return inv
        return None

    def _matches(self, recipe: Recipe, used: Sequence[tuple[str, int]]) -> dict[str, str] | None:
        if len(used) != len(recipe.ingredients):
            return None
        choice: dict[str, str] = {}
        for (name, n), (given, m) in zip(recipe.ingredients, used, strict=True):
            if n != m or not (given == name or given in self.tag_members(name)):
                return None
            choice[name] = given
        return choice


def _parse_ingredients(text: str) -> tuple[tuple[str, int], ...] | None:
    ingredients = []
    for part in text.split(","):
        match = _INGREDIENT.match(part.strip())
        if match is None:
            return None
        ingredients.append((match[2], int(match[1])))
    return tuple(ingredients)


def parse_problem(observation: str) -> CraftingProblem | None:
    """The goal and commands of an initial TextCraft observation; ``None`` if it has no goal."""
    goal = _GOAL.search(observation)
    if goal is None:
        return None
    recipes = []
    for line in observation.splitlines():
        match = _COMMAND.match(line.strip())
        if match is None:
            continue
        ingredients = _parse_ingredients(match[3])
        if ingredients is not None:
            recipes.append(Recipe(match[2], int(match[1]), ingredients))
    return CraftingProblem(goal=goal[1].strip(), recipes=tuple(recipes))


class _Planner:
    """Depth-first expansion with the cheapest recipe per item (fewest actions, then listed order)."""

    def __init__(self, problem: CraftingProblem):
        self.problem = problem
        self._cost: dict[str, float] = {}

    def cost(self, item: str, visiting: frozenset[str] = frozenset()) -> float:
        """Actions to make one batch of ``item`` from nothing (``inf`` if impossible)."""
        if item in self._cost:
            return self._cost[item]
        if item in visiting:
            return math.inf
        recipes = self.problem.producers.get(item)
        members = self.problem.tag_members(item)
        if recipes is None:
            # a tag takes its cheapest member; anything else is a base item, one `get`
            best = min((self.cost(m, visiting | {item}) for m in members), default=1.0)
        else:
            best = min(
                1.0 + sum(self.cost(name, visiting | {item}) for name, _ in r.ingredients)
                for r in recipes
            )
        if best < math.inf:  # an infinite cost may only reflect this call's `visiting` set
            self._cost[item] = best
        return best

    def recipe_for(self, item: str) -> Recipe | None:
        recipes = self.problem.producers.get(item, ())
        feasible = [r for r in recipes if self.cost_of(r) < math.inf]
        return min(feasible, key=self.cost_of) if feasible else None

    def cost_of(self, recipe: Recipe) -> float:
        return 1.0 + sum(self.cost(name) for name, _ in recipe.ingredients)

    def concrete(self, name: str) -> str | None:
        """The item to get or craft for ingredient ``name`` (a tag becomes its cheapest member)."""
        if name in self.problem.producers:
            return name
        members = self.problem.tag_members(name)
        if not members:
            return name
        feasible = [m for m in members if self.cost(m) < math.inf]
        return min(feasible, key=self.cost) if feasible else None

    def gather(
        self,
        recipe: Recipe,
        choice: Mapping[str, str],
        batches: int,
        inv: dict[str, int],
        out: list[str],
        depth: int,
    ) -> bool:
        """Obtain every ingredient of ``batches`` crafts of ``recipe``.

        Making one ingredient can consume another that was gathered first (sticks are made of
        planks), so gathering repeats until all are held at once.
        """
        for _ in range(len(recipe.ingredients) + 1):
            for name, n in recipe.ingredients:
                if not self.obtain(choice[name], n * batches, inv, out, depth + 1):
                    return False
            if all(inv.get(choice[name], 0) >= n * batches for name, n in recipe.ingredients):
                return True
        return False

    def obtain(self, item: str, need: int, inv: dict[str, int], out: list[str], depth: int) -> bool:
        """Append actions to ``out`` until ``inv`` holds ``need`` of ``item``."""
        if depth > 64:
            return False
        have = inv.get(item, 0)
        if have >= need:
            return True
        recipe = self.recipe_for(item)
        if recipe is None:
            if item in self.problem.producers:
                return False
            out.append(f"get {need - have} {item}")
            inv[item] = need
            return True
        batches = math.ceil((need - have) / recipe.count)
        choice: dict[str, str] = {}
        for name, _ in recipe.ingredients:
            concrete = self.concrete(name)
            if concrete is None:
                return False
            choice[name] = concrete
        if not self.gather(recipe, choice, batches, inv, out, depth):
            return False
        command = recipe.concrete(choice)
        for _ in range(batches):
            for name, n in recipe.ingredients:
                inv[choice[name]] -= n
            out.append(command)
        inv[item] = have + batches * recipe.count
        return True


def plan(problem: CraftingProblem, inventory: Inventory | None = None) -> list[str] | None:
    """Actions that craft ``problem.goal`` starting from ``inventory``; ``None`` if none is found.

    Every action of the result is accepted by :meth:`CraftingProblem.apply` in order, and the last
    one crafts the goal (an empty list when the goal is already held is never returned: crafting
    is what completes a TextCraft task, so the goal is crafted once more).
    """
    planner = _Planner(problem)
    inv = {k: v for k, v in (inventory or {}).items() if v > 0}
    recipe = planner.recipe_for(problem.goal)
    if recipe is None:
        return None
    out: list[str] = []
    choice = {name: planner.concrete(name) for name, _ in recipe.ingredients}
    if any(c is None for c in choice.values()):
        return None
    if not planner.gather(recipe, choice, 1, inv, out, depth=0):
        return None
    out.append(recipe.concrete(choice))
    # The simulation must accept every action: a plan that the rules reject is no plan.
    state: dict[str, int] | None = {k: v for k, v in (inventory or {}).items() if v > 0}
    for action in out:
        state = problem.apply(state, action)
        if state is None:
            return None
    return out


def plan_from_observation(observation: str) -> list[str] | None:
    """:func:`plan` from an initial TextCraft observation and an empty inventory."""
    problem = parse_problem(observation)
    return None if problem is None else plan(problem)
