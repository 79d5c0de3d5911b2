"""Planner demonstrations with injected mistakes: the behaviour-cloning data of the initial policy.

An episode is played in the real environment by the exact planner
(:mod:`resail_pipeline.envs.planner`). Before each step a mistake is injected with probability
``mistake_rate``: an action of one of the kinds the environment's expert draws, the errors a
small policy makes (a wrong quantity, a craft whose ingredients are not held yet, fetching a craftable item,
naming a tag instead of a concrete item, a distractor recipe, repeating the last craft, an
information-only step, a response without an action). The planner then replans from the real
inventory, so the episode shows how to recover.

Every step records the action that was executed and the *expert* action: the first action of the
planner's plan from the inventory held at that step. Behaviour cloning trains the expert action at
every step, mistaken or not, on the prompt rendered from the history so far (which contains the
earlier mistakes and their results).

A *relabelled* episode (:func:`relabel_episodes`, DAgger) executes the actions a policy took in
one of its own episodes instead: every step is labelled with the planner's action from the
inventory held there, so the data covers the states the policy reaches (its loops and dead ends)
and how to go on from them.

A *stalled* demonstration stops following the plan after a given number of steps and only makes
mistakes until the step limit: its failure, like a weak policy's, ends at the step limit with
partial progress. Stalled demonstrations give the privileged view the "Failure analysis" summaries
that it meets at evaluation time.

The expert is the environment's own (:data:`~resail_pipeline.envs.experts.EXPERTS`): TextCraft's
exact planner, which replans from the inventory it simulates
(:mod:`~resail_pipeline.envs.textcraft_expert`), and ALFWorld's planner, which the engine asks for
a plan from the state the game is in after every step (:mod:`~resail_pipeline.envs.alfworld_expert`).
Each expert also draws the mistakes of its environment.
"""

from __future__ import annotations

import json
import logging
import random
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import pandas as pd
from tqdm.auto import tqdm

from resail_pipeline.envs import Environment
from resail_pipeline.envs.base import Expert, Observation, StepResult
from resail_pipeline.envs.experts import EXPERTS, expert_env
from resail_pipeline.experience.evidence import Evidence, build_evidence
from resail_pipeline.experience.rules import rules_summary
from resail_pipeline.io import atomic_path
from resail_pipeline.prompts import OUTCOME_FAILURE, OUTCOME_SUCCESS, EpisodeHistory, Summary

logger = logging.getLogger(__name__)

#: The response a demonstration teaches: empty reasoning, then the action.
RESPONSE_TEMPLATE = "<thinking></thinking>\n<action>{action}</action>"

#: New tokens a rollout of a built policy allows per response (its on-policy episodes, the
#: ``evaluate`` command): a response in :data:`RESPONSE_TEMPLATE` is about 13 tokens.
RESPONSE_MAX_NEW_TOKENS = 48


#: The policy id recorded for planner demonstrations.
PLANNER_POLICY_ID = "planner"

#: The mistake kind of a relabelled policy step whose action is not the planner's.
POLICY_MISTAKE = "policy"


def demonstration_response(action: str) -> str:
    """The response text that executes ``action``."""
    return RESPONSE_TEMPLATE.format(action=action)


@dataclass(frozen=True)
class DemoStep:
    """One executed step of a demonstration.

    Attributes:
        history: the history the step was taken from (its prompt is rendered from it).
        expert: the planner's action from the inventory held at this step (the training target).
        action: the executed action (:data:`NO_ACTION` for a response without one).
        mistake: the mistake kind executed, ``""`` when the expert action was executed.
        valid: the environment accepted the executed action.
        observation: the observation the executed action produced.
        informed: the action of an expert that knows what the privileged view tells, the
            privileged view's training target where it differs from ``expert`` (ALFWorld's
            searching expert, :class:`~resail_pipeline.envs.alfworld_expert.AlfWorldSearchExpert`:
            the planner's action, which knows where the objects are); ``""``: the same as
            ``expert``.
    """

    history: EpisodeHistory
    expert: str
    action: str
    mistake: str
    valid: bool
    observation: str
    informed: str = ""

    @property
    def privileged_expert(self) -> str:
        """The privileged view's training target."""
        return self.informed or self.expert


@dataclass(frozen=True)
class Demonstration:
    """One planner episode.

    Attributes:
        task_id: the environment's task.
        episode: the episode's index among the demonstrations of its task.
        env: the environment's registry name.
        initial: the observation of ``reset``.
        steps: the executed steps, in order.
        success: the goal was crafted.
        end_reason: why the episode ended (``END_*``).
        stalled: the episode stopped following the plan at some point (see the module docstring).
        guide: the summary every step of the episode was generated with (a policy's episode
            rolled out in the privileged view), ``None`` for an episode played without one.
    """

    task_id: int
    episode: int
    env: str
    initial: Observation
    steps: tuple[DemoStep, ...]
    success: bool
    end_reason: str
    stalled: bool = False
    guide: Summary | None = None

    @property
    def traj_id(self) -> str:
        """``"0/{env}/train/{task_id}/{episode}"``: cycle 0, the train split."""
        return f"0/{self.env}/train/{self.task_id}/{self.episode}"

    def trajectory_row(self) -> dict[str, object]:
        """The ``trajectories`` row of this episode."""
        return {
            "traj_id": self.traj_id,
            "cycle": 0,
            "method": "bootstrap",
            "env": self.env,
            "split": "train",
            "task_id": self.task_id,
            "decoding_seed": self.episode,
            "policy_id": PLANNER_POLICY_ID,
            "task": self.initial.task,
            "success": self.success,
            "num_steps": len(self.steps),
            "end_reason": self.end_reason,
        }

    def step_rows(self) -> list[dict[str, object]]:
        """The ``steps`` rows of this episode, with the ``expert`` and ``mistake`` columns added."""
        return [
            {
                "traj_id": self.traj_id,
                "t": t,
                "observation": s.history.current_observation,
                "admissible_actions": None,
                "prompt": "",
                "response": demonstration_response(s.action) if s.action else "",
                "action": s.action,
                "action_valid": s.valid,
                "next_observation": s.observation,
                "reward": 1.0 if (self.success and t == len(self.steps) - 1) else 0.0,
                "done": t == len(self.steps) - 1,
                "expert": s.expert,
                "mistake": s.mistake,
            }
            for t, s in enumerate(self.steps)
        ]

    @cached_property
    def evidence(self) -> Evidence:
        """What a summary of this episode is written from (as for any collected trajectory)."""
        return build_evidence(self.trajectory_row(), pd.DataFrame(self.step_rows()))

    @cached_property
    def summary(self) -> Summary:
        """The rules-based summary of this episode (appendix-G format, outcome-matched)."""
        outcome = OUTCOME_SUCCESS if self.success else OUTCOME_FAILURE
        return Summary(outcome=outcome, text=rules_summary(self.evidence))


def play(
    env: Environment,
    task_id: int,
    *,
    episode: int,
    mistake_rate: float = 0.0,
    rng: random.Random | None = None,
    stall_after: int | None = None,
    actions: Sequence[str] | None = None,
    expert: Expert | None = None,
) -> Demonstration | None:
    """Play one demonstration of ``task_id``; ``None`` if the expert finds no plan for it.

    Args:
        env: the environment (reset here).
        task_id: the task.
        episode: the demonstration's index among those of its task.
        mistake_rate: probability of injecting a mistake before each step.
        rng: the random source of mistakes; needed when there are any to draw.
        stall_after: make only mistakes after this many steps (a failure at the step limit).
        actions: execute these actions in order instead of the expert's and the mistakes (a
            recorded episode of a policy, relabelled: every step still records the expert's
            action from the state there as its expert action; an executed action that is not
            the expert's is recorded as mistake :data:`POLICY_MISTAKE`). The episode must end
            (success or step limit) on the last of them.
        expert: the environment's expert (:data:`EXPERTS`); by default the one of ``env.name``
            over ``env``.
    """
    if actions is None and rng is None and (mistake_rate > 0 or stall_after is not None):
        raise ValueError("rng: drawing mistakes (mistake_rate > 0 or stall_after) needs one")
    if expert is None:
        expert = EXPERTS[env.name][0](env)
    initial = env.reset(task_id)
    if expert.start(task_id, initial) is None:
        return None
    history = EpisodeHistory.start(env.name, initial)
    steps: list[DemoStep] = []
    while True:
        remaining = expert.plan()
        stalled = stall_after is not None and len(steps) >= stall_after
        mistake, action = "", remaining[0]
        if actions is not None:
            if len(steps) == len(actions):
                raise ValueError(
                    f"actions: task {task_id}: the {len(actions)} recorded actions end before "
                    "the episode does"
                )
            action = actions[len(steps)]
            mistake = "" if action == remaining[0] else POLICY_MISTAKE
        elif stalled or (rng is not None and rng.random() < mistake_rate):
            mistake, action = expert.mistake(remaining, rng, no_progress=stalled)
        informed = expert.informed()
        informed = "" if informed == remaining[0] else informed
        result = env.step(action)
        executed = action or ""
        expert.executed(executed, result, relabelled=actions is not None)
        steps.append(
            DemoStep(
                history,
                remaining[0],
                executed,
                mistake,
                result.action_valid,
                result.observation,
                informed,
            )
        )
        history = history.advance(executed, result)
        if result.done and actions is not None and len(steps) < len(actions):
            raise ValueError(
                f"actions: task {task_id}: the episode ended after {len(steps)} of the "
                f"{len(actions)} recorded actions (not the episode they were recorded in)"
            )
        if result.done:
            return Demonstration(
                task_id=task_id,
                episode=episode,
                env=env.name,
                initial=initial,
                steps=tuple(steps),
                success=result.success,
                end_reason=result.end_reason or "",
                stalled=stall_after is not None,
            )


def demonstration_record(demo: Demonstration) -> dict[str, Any]:
    """``demo`` as plain JSON data, from which :func:`demonstration_from_record` rebuilds it
    equal. Each step keeps what it added to the history (the history itself is rebuilt by
    :meth:`EpisodeHistory.advance`, as :func:`play` built it), so a record grows with the steps,
    not with their square."""
    steps = []
    for i, step in enumerate(demo.steps):
        after = demo.steps[i + 1].history.admissible_actions if i + 1 < len(demo.steps) else None
        steps.append(
            {
                "expert": step.expert,
                "action": step.action,
                "mistake": step.mistake,
                "valid": step.valid,
                "observation": step.observation,
                "admissible_after": None if after is None else list(after),
                "informed": step.informed,
            }
        )
    initial = demo.initial
    return {
        "task_id": demo.task_id,
        "episode": demo.episode,
        "env": demo.env,
        "initial": {
            "text": initial.text,
            "task": initial.task,
            "admissible_actions": (
                None if initial.admissible_actions is None else list(initial.admissible_actions)
            ),
            "commands": list(initial.commands),
        },
        "steps": steps,
        "success": demo.success,
        "end_reason": demo.end_reason,
        "stalled": demo.stalled,
        "guide": None
        if demo.guide is None
        else {"outcome": demo.guide.outcome, "text": demo.guide.text},
    }


def demonstration_from_record(record: Mapping[str, Any]) -> Demonstration:
    """The demonstration :func:`demonstration_record` wrote."""
    initial = record["initial"]
    admissible = initial["admissible_actions"]
    observation = Observation(
        text=initial["text"],
        task=initial["task"],
        admissible_actions=None if admissible is None else tuple(admissible),
        commands=tuple(initial["commands"]),
    )
    history = EpisodeHistory.start(record["env"], observation)
    steps = []
    for step in record["steps"]:
        steps.append(
            DemoStep(
                history,
                step["expert"],
                step["action"],
                step["mistake"],
                step["valid"],
                step["observation"],
                step.get("informed", ""),
            )
        )
        after = step["admissible_after"]
        result = StepResult(
            observation=step["observation"],
            reward=0.0,
            done=False,
            success=False,
            action_valid=step["valid"],
            admissible_actions=None if after is None else tuple(after),
        )
        history = history.advance(step["action"], result)
    guide = record["guide"]
    return Demonstration(
        task_id=record["task_id"],
        episode=record["episode"],
        env=record["env"],
        initial=observation,
        steps=tuple(steps),
        success=record["success"],
        end_reason=record["end_reason"],
        stalled=record["stalled"],
        guide=None if guide is None else Summary(guide["outcome"], guide["text"]),
    )


def collect_demonstrations(
    env_name: str,
    task_ids: Sequence[int],
    *,
    episodes_per_task: int,
    mistake_rate: float,
    stalled_share: float,
    seed: int,
    env_options: Mapping[str, Any] | None = None,
    progress: bool = True,
    cache_dir: Path | None = None,
    searching: bool = False,
) -> list[Demonstration]:
    """``episodes_per_task`` demonstrations of every task the planner solves, task-major.

    A share ``stalled_share`` of each task's episodes (rounded, at least one when the share is
    positive) is stalled after a uniformly drawn number of planned steps. The demonstrations of a
    task depend only on ``seed``, the task id and the settings, not on the other tasks.
    ``env_options`` are the environment adapter's options (:func:`expert_env`).

    With ``cache_dir``, each task's demonstrations are written there once played (one JSON file
    per task, atomically) and read back instead of played again, so that an interrupted
    collection resumes where it stopped (ALFWorld's expert plans at every step: about a second a
    demonstration). The caller keys the folder by everything the demonstrations depend on.
    ``searching``: played by the environment's searching expert
    (:data:`~resail_pipeline.envs.experts.SEARCHING_EXPERTS`).
    """
    env, expert = expert_env(env_name, env_options, searching=searching)
    stalled = round(stalled_share * episodes_per_task)
    if stalled_share > 0:
        stalled = max(1, stalled)
    out: list[Demonstration] = []
    skipped = []
    for task_id in tqdm(task_ids, desc="demonstrations", unit="task", disable=not progress):
        cached = None if cache_dir is None else Path(cache_dir) / f"{task_id}.json"
        if cached is not None and cached.is_file():
            records = json.loads(cached.read_text())["demonstrations"]
            if records is None:
                skipped.append(task_id)
            else:
                out += [demonstration_from_record(r) for r in records]
            continue
        rng = random.Random(f"{seed}/{task_id}")
        clean = expert.start(task_id, env.reset(task_id))
        demos: list[Demonstration] | None = None
        if clean is None:
            skipped.append(task_id)
        else:
            demos = []
            for episode in range(episodes_per_task):
                stall_after = rng.randrange(len(clean)) if episode < stalled else None
                rate = mistake_rate if stall_after is None else 0.0
                demo = play(
                    env,
                    task_id,
                    episode=episode,
                    mistake_rate=rate,
                    rng=rng,
                    stall_after=stall_after,
                    expert=expert,
                )
                if demo is not None:
                    demos.append(demo)
            out += demos
        if cached is not None:
            records = None if demos is None else [demonstration_record(d) for d in demos]
            with atomic_path(cached) as tmp:
                tmp.write_text(json.dumps({"task_id": task_id, "demonstrations": records}))
    if skipped:
        logger.info("demonstrations: the expert finds no plan for tasks %s; skipped", skipped)
    return out


def relabel_episodes(
    env_name: str,
    episodes: Sequence[tuple[int, Sequence[str]]],
    *,
    first_episode: int,
    env_options: Mapping[str, Any] | None = None,
    progress: bool = True,
) -> list[Demonstration]:
    """Recorded policy episodes replayed and relabelled by the planner (DAgger).

    ``episodes`` are ``(task_id, actions)`` pairs, the actions a policy executed in order
    (``""`` for a response without one). Each is replayed in a fresh episode of the real
    environment, and every step records the planner's action from the inventory held there as
    its expert action: the states the policy itself reaches, its loops and dead ends included,
    labelled with the way on (after a craft the planner's simulation cannot follow, one from the
    game's recipe book that the task does not list, from the environment's own inventory). The
    ``k``-th episode of a task gets the index ``first_episode + k`` (keep it clear of the planner
    demonstrations of that task). Tasks the planner cannot solve are skipped. ``env_options`` are
    the environment adapter's options (:func:`expert_env`).
    """
    env, expert = expert_env(env_name, env_options)
    seen: dict[int, int] = defaultdict(int)
    out: list[Demonstration] = []
    for task_id, actions in tqdm(episodes, desc="relabel", unit="episode", disable=not progress):
        index = first_episode + seen[task_id]
        seen[task_id] += 1
        demo = play(env, task_id, episode=index, actions=actions, expert=expert)
        if demo is not None:
            out.append(demo)
    return out
