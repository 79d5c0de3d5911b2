"""Batched episodes: many environments stepped together, one ``generate`` call per turn.

Every episode owns one environment. At each turn the live episodes' user messages are rendered
from their histories, formatted with the policy's chat template and sent to the generator in a
single call; each response is parsed into an action and executed, and episodes that end drop out
of the next turn::

    episodes = run_episodes(lambda: make_env("textcraft"), specs, generator, params)
    trajectories, steps = episodes_to_frames(episodes, cycle=1, method="oel_resail", split="train")

The response at step ``t`` of an episode is sampled with seed ``derive_seed(decoding_seed, t)``,
and the generator keys its randomness per prompt, so an episode's trajectory depends on its
``decoding_seed``, not on which other episodes run beside it (up to the rounding of batched
kernels, which can differ with a batch's make-up and tip a sampled token). That also makes
``max_live`` (how many episodes, and so environments, are alive at once; the next starts when one
ends) a matter of memory and speed only: the episodes are the same under any cap, to that rounding.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pandas as pd
from tqdm.auto import tqdm

from resail_pipeline.config import Config, Field, Number, model_validator
from resail_pipeline.envs.base import (
    END_ENV_DONE,
    END_STEP_LIMIT,
    END_SUCCESS,
    Environment,
    StepResult,
)
from resail_pipeline.episodes import Episode, EpisodeSpec, StepRecord
from resail_pipeline.generation.base import Generator, SamplingParams, derive_seed
from resail_pipeline.prompts import (
    EpisodeHistory,
    add_privileged,
    chat_prompt,
    parse_action,
    render_user_message,
)
from resail_pipeline.schemas import SCHEMAS

if TYPE_CHECKING:
    from resail_pipeline.journal import EpisodeJournal

logger = logging.getLogger(__name__)


class RolloutSettings(Config):
    """How a configuration that rolls episodes out (collection, evaluation) decodes, and how many
    episodes it keeps alive at once. Decoding defaults are the paper's (appendix A.3).
    """

    temperature: Number = Field(0.4, ge=0)
    """Sampling temperature; 0 is greedy."""
    top_p: Number = Field(1.0, gt=0, le=1)
    """Nucleus sampling mass."""
    top_k: int = Field(-1, ge=-1)
    """Top-k truncation of sampling; -1: off."""
    max_new_tokens: int = Field(1024, ge=1)
    """Response tokens per step at most."""
    max_live: int | None = Field(None, ge=1)
    """Episodes alive at once (each holds an environment; a turn's generate call has one prompt
    per live episode); null: the environment's own limit (``live_limit``), else all of them."""

    @model_validator(mode="after")
    def _samples(self) -> RolloutSettings:
        self.sampling()  # top_k as every sampler checks it
        return self

    def deciding(self) -> dict[str, Any]:
        """These settings as data, but for what does not change the episodes: ``max_live`` (the
        same episodes under any cap, see the module notes). What keys a rollout's records and
        its journal, so that a rerun with another cap (after running out of memory) resumes."""
        return self.model_dump(exclude={"max_live"})

    def sampling(self) -> SamplingParams:
        return SamplingParams(
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            max_new_tokens=self.max_new_tokens,
        )

    def roll_out(
        self,
        make_env: Callable[[], Environment],
        episodes: Sequence[EpisodeSpec],
        generator: Generator,
        *,
        progress: bool = True,
        journal: EpisodeJournal | None = None,
    ) -> list[Episode]:
        """:func:`run_episodes` under these settings."""
        return run_episodes(
            make_env,
            episodes,
            generator,
            self.sampling(),
            max_live=self.max_live,
            progress=progress,
            journal=journal,
        )


@dataclass
class _LiveEpisode:
    """The mutable state of an episode while it runs."""

    spec: EpisodeSpec
    env: Environment
    history: EpisodeHistory
    steps: list[StepRecord] = field(default_factory=list)

    def messages(self) -> tuple[str, str]:
        """The next step's ordinary-view user message, and the one the policy is shown."""
        ordinary = render_user_message(self.history)
        if self.spec.summary is None:
            return ordinary, ordinary
        return ordinary, add_privileged(ordinary, self.spec.summary)

    def step(self, ordinary: str, response: str, policy_id: str) -> Episode | None:
        """Execute the action in ``response`` and record the step; the episode if it ended.

        A response without a parsable action is executed as ``None``.
        """
        action = parse_action(response).action
        result = self.env.step(action)
        t = len(self.steps)
        end_reason = _end_reason(result, t + 1, self.env.max_steps)
        self.steps.append(
            StepRecord(
                t=t,
                observation=self.history.current_observation,
                admissible_actions=self.history.admissible_actions,
                prompt=ordinary,
                response=response,
                action=action or "",
                action_valid=result.action_valid,
                next_observation=result.observation,
                reward=float(result.reward),
                done=end_reason is not None,
            )
        )
        self.history = self.history.advance(action or "", result)
        if end_reason is None:
            return None
        return Episode(
            spec=self.spec,
            env=self.env.name,
            task=self.history.initial.task,
            policy_id=policy_id,
            steps=tuple(self.steps),
            success=result.success,
            end_reason=end_reason,
        )


def run_episodes(
    make_env: Callable[[], Environment],
    episodes: Sequence[EpisodeSpec],
    generator: Generator,
    params: SamplingParams,
    *,
    max_live: int | None = None,
    progress: bool = True,
    journal: EpisodeJournal | None = None,
) -> list[Episode]:
    """Run ``episodes`` together to their end; results in the order of ``episodes``.

    An unparsable response is passed to the environment as ``None``: an invalid action that
    consumes a step. An episode also ends after ``env.max_steps`` steps, should its
    environment not end it by then.

    Args:
        make_env: builds one environment; called once per episode.
        episodes: the episodes to run; ``traj_id`` values must be unique.
        generator: the policy.
        params: decoding settings; ``params.seed`` is unused (each episode has its own seed) and
            ``params.n`` must be 1.
        max_live: at most this many episodes run at once, started in order as others end;
            ``None``: the environment's own limit (its ``live_limit``, read from the first
            environment built), all of them where it has none. The results do not depend on it
            (up to rounding).
        progress: show a progress bar over finished episodes, with the turn and the episodes
            live (most episodes end together near the step limit, so the count alone stalls).
        journal: where finished episodes are kept as they end, and where those of an earlier,
            interrupted run of the same episodes and policy are taken from instead of being
            played again (:mod:`resail_pipeline.journal`).
    """
    if params.n != 1:
        raise ValueError(f"params.n: a rollout takes one response per step, got n={params.n}")
    duplicates = sorted(t for t, k in Counter(spec.traj_id for spec in episodes).items() if k > 1)
    if duplicates:
        raise ValueError(f"episodes: duplicate traj_id(s) {duplicates}")

    if max_live is not None and max_live < 1:
        raise ValueError(f"max_live: must be a positive integer or None, got {max_live}")

    def begin(spec: EpisodeSpec) -> _LiveEpisode:
        env = make_env()
        return _LiveEpisode(spec, env, EpisodeHistory.start(env.name, env.reset(spec.task_id)))

    start = time.perf_counter()
    finished: dict[str, Episode] = {}
    if journal is not None:
        finished = journal.resume(episodes, generator.policy_id)
    waiting = (spec for spec in episodes if spec.traj_id not in finished)
    live = [begin(spec) for spec in itertools.islice(waiting, 1)]
    if max_live is None and live:
        max_live = live[0].env.live_limit
    rest = None if max_live is None else max_live - 1
    live += [begin(spec) for spec in itertools.islice(waiting, rest)]
    earlier = dict(finished)
    turn = 0
    bar = tqdm(
        total=len(episodes), initial=len(earlier), desc="episodes", unit="ep", disable=not progress
    )
    with bar:
        while live:
            turn += 1
            bar.set_postfix(turn=turn, live=len(live))
            messages = [episode.messages() for episode in live]
            generations = generator.generate(
                [chat_prompt(generator.tokenizer, shown) for _, shown in messages],
                params,
                seeds=[
                    derive_seed(episode.spec.decoding_seed, len(episode.steps)) for episode in live
                ],
            )
            still_live = []
            for episode, (ordinary, _), generation in zip(live, messages, generations, strict=True):
                done = episode.step(ordinary, generation.text, generator.policy_id)
                if done is None:
                    still_live.append(episode)
                else:
                    finished[done.spec.traj_id] = done
                    if journal is not None:
                        journal.add(done)
                    bar.update()
            live = still_live + [
                begin(spec) for spec in itertools.islice(waiting, len(live) - len(still_live))
            ]

    if journal is not None:
        journal.flush()
    results = [finished[spec.traj_id] for spec in episodes]
    steps = sum(e.num_steps for e in results) - sum(e.num_steps for e in earlier.values())
    seconds = time.perf_counter() - start
    logger.info(
        "rollout: %d episodes%s, success rate %.3f, %d env-steps in %.1f s (%.2f steps/s)",
        len(results),
        f" ({len(earlier)} resumed from the journal)" if earlier else "",
        sum(e.success for e in results) / max(len(results), 1),
        steps,
        seconds,
        steps / max(seconds, 1e-9),
    )
    return results


def _end_reason(result: StepResult, steps_taken: int, max_steps: int) -> str | None:
    """Why the episode ends after this step, or ``None`` if it goes on."""
    if result.done:
        return result.end_reason or (END_SUCCESS if result.success else END_ENV_DONE)
    if steps_taken >= max_steps:
        return END_STEP_LIMIT
    return None


#: trajectory columns that an episode knows; the caller supplies the rest of the schema.
_EPISODE_FIELDS = (
    "traj_id",
    "env",
    "task_id",
    "decoding_seed",
    "policy_id",
    "task",
    "success",
    "num_steps",
    "end_reason",
)


def episodes_to_frames(
    episodes: Sequence[Episode], **trajectory_fields: Any
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The ``trajectories`` and ``steps`` tables of ``episodes``.

    Args:
        episodes: finished episodes.
        trajectory_fields: columns with one value for every trajectory row that the episodes do
            not carry: at least ``cycle``, ``method`` and ``split``; more (e.g. ``view``) are
            added as extra columns.

    Returns:
        ``(trajectories, steps)``, with the columns of their schemas first.
    """
    clashes = sorted(set(trajectory_fields) & set(_EPISODE_FIELDS))
    if clashes:
        raise ValueError(f"trajectory_fields: {clashes} come from the episodes, not the caller")
    missing = [
        c
        for c in SCHEMAS["trajectories"]
        if c not in _EPISODE_FIELDS and c not in trajectory_fields
    ]
    if missing:
        raise ValueError(f"trajectory_fields: missing {missing}")

    columns = [
        *SCHEMAS["trajectories"],
        *(c for c in trajectory_fields if c not in SCHEMAS["trajectories"]),
    ]
    trajectories = pd.DataFrame(
        [
            {
                **trajectory_fields,
                "traj_id": e.spec.traj_id,
                "env": e.env,
                "task_id": e.spec.task_id,
                "decoding_seed": e.spec.decoding_seed,
                "policy_id": e.policy_id,
                "task": e.task,
                "success": e.success,
                "num_steps": e.num_steps,
                "end_reason": e.end_reason,
            }
            for e in episodes
        ],
        columns=columns,
    )
    steps = pd.DataFrame(
        [
            {
                "traj_id": e.spec.traj_id,
                "t": s.t,
                "observation": s.observation,
                "admissible_actions": (
                    None if s.admissible_actions is None else list(s.admissible_actions)
                ),
                "prompt": s.prompt,
                "response": s.response,
                "action": s.action,
                "action_valid": s.action_valid,
                "next_observation": s.next_observation,
                "reward": s.reward,
                "done": s.done,
            }
            for e in episodes
            for s in e.steps
        ],
        columns=list(SCHEMAS["steps"]),
    )
    return trajectories, steps


def sample_tasks(task_ids: Sequence[int], n: int, seed: int) -> list[int]:
    """``n`` distinct task ids drawn without replacement, in a fixed order for ``seed``.

    Tasks are ordered by a seeded hash of their id (:func:`derive_seed`), so the draw is stable
    across platforms and library versions, and the draw of ``n`` is a prefix of that of ``n + 1``.
    """
    if len(set(task_ids)) != len(task_ids):
        raise ValueError("task_ids: contains duplicates")
    if not 0 <= n <= len(task_ids):
        raise ValueError(f"n: must be in [0, {len(task_ids)}] (the number of tasks), got {n}")
    if seed < 0:
        raise ValueError(f"seed: must be >= 0, got {seed}")
    if any(task_id < 0 for task_id in task_ids):
        raise ValueError("task_ids: must be non-negative")
    ranked = sorted(task_ids, key=lambda task_id: derive_seed(seed, task_id))
    return [int(task_id) for task_id in ranked[:n]]
