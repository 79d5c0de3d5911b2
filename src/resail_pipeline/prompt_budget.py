"""The longest prompt a run can send, estimated before it starts, against the engine's context.

vLLM refuses a request whose prompt and ``max_new_tokens`` exceed its ``max_model_len``
(:meth:`~resail_pipeline.generation.vllm_backend.VLLMGenerator.check_lengths` says so at call
time), and a prompt grows with its episode: every later-step prompt carries the whole history.
The prompt that would not fit is that of a long episode's last step, hours into a run. This
module estimates that prompt's length from what the run is configured with, so that the run can
be refused before its first node (:func:`check_prompt_budget`).

How the estimate is built, per environment (:func:`estimate_prompt_lengths`):

1. Expert episodes. The environment's expert (:data:`PLANS`: TextCraft's planner,
   :mod:`resail_pipeline.envs.planner`; ALFWorld's stored walkthrough) plays a few tasks of
   every split the run uses, evenly spaced over the split's fixed order, its first and last
   task included (TextCraft orders its goals by recipe depth, so the deepest is played). Before
   every action the environment's information-only actions are taken too (TextCraft
   ``inventory``; ALFWorld ``look``, ``inventory``, ``help``) and one unparsable response, so
   that their answers (the inventory listing, the room, the help text, the feedback on no
   action) are among the observations. The episodes run without a step limit.
2. The worst case. The initial observation with the most tokens (with its task and, TextCraft,
   its crafting commands); the observation with the most tokens and the action with the most
   tokens, taken apart, so that the two may come from different steps and tasks; the
   admissible-action list with the most tokens, where the environment shows one.
3. The ordinary view. The history of a ``max_steps``-step episode's last step: ``max_steps - 1``
   turns, the first taken on the initial observation, every other one the longest observation
   and action, the current observation the longest; rendered with the environment's own
   templates (:func:`~resail_pipeline.prompts.render_user_message`) and the policy's chat
   template (:func:`~resail_pipeline.prompts.chat_prompt`), then tokenized as the generator
   tokenizes (no special tokens added). The first step's prompt (the initial observation whole)
   is counted too; the longer of the two is the estimate.
4. The privileged view. The ordinary message with the longer of the two outcome inserts
   (appendix G) around an empty summary, plus the longest summary the run allows: the summary is
   what is left of one generation once its thinking is removed, so at most
   ``summarize.sampling.max_new_tokens`` tokens where the policy writes the summaries; and the
   rules-based summary (:func:`~resail_pipeline.experience.rules_summary`) of worst-case
   trajectories (every step the longest action and observation; a success, a failure whose
   corrected plan is as long as the longest expert plan or ``max_steps``, a failure ending on a
   rejected action), which stands in for a rejected model summary in the fixed Experience
   whatever the configuration. The longer of the two counts.
5. The summary prompt, where the policy writes the summaries: the appendix-G prompt of the
   worst-case trajectory, with its evidence limits (actions and results capped in characters).

The estimate errs high where it can (maxima combined whether or not they occur together), but it
is no proof: an observation the experts never see (one that echoes a long malformed action, say)
can be longer. vLLM's own check at call time still stands behind it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from resail_pipeline.config import ConfigError
from resail_pipeline.envs.base import (
    END_STEP_LIMIT,
    END_SUCCESS,
    Environment,
    Observation,
    StepResult,
)
from resail_pipeline.experience.evidence import (
    ACTION_CHARS,
    OBSERVATION_CHARS,
    Evidence,
    EvidenceRecord,
    cap,
    task_snapshot,
)
from resail_pipeline.experience.rules import env_rules, rules_summary
from resail_pipeline.prompts import EpisodeHistory, Summary, Turn, add_privileged, chat_prompt
from resail_pipeline.prompts.common import OUTCOME_FAILURE, OUTCOME_SUCCESS, OUTCOMES
from resail_pipeline.prompts.render import render_user_message

__all__ = [
    "PLANS",
    "PROMPT_ORDINARY",
    "PROMPT_PRIVILEGED",
    "PROMPT_SUMMARY",
    "ExpertEpisode",
    "PlanSource",
    "PromptEstimate",
    "check_prompt_budget",
    "estimate_prompt_lengths",
    "play_expert",
    "spread_with_last",
]

logger = logging.getLogger(__name__)

#: Tasks each split contributes to the estimate by default.
TASKS_PER_SPLIT = 8
#: The step limit the expert episodes run under: none that matters.
UNLIMITED_STEPS = 10_000

#: The prompts a run sends, as :class:`PromptEstimate` names them.
PROMPT_ORDINARY = "ordinary view"
PROMPT_PRIVILEGED = "privileged view"
PROMPT_SUMMARY = "summary prompt"


@dataclass(frozen=True)
class PlanSource:
    """How an environment's tasks are solved without a model, for the estimate: a whole plan from
    the start (not the interactive experts of :mod:`resail_pipeline.envs.experts`, which replan
    after every step and are slower).

    Attributes:
        plan: ``(env, task_id, initial observation) -> actions``, or ``None`` where no plan is
            found (the task then contributes its initial observation only).
        probes: actions that change nothing, taken before every planned action so that their
            answers are among the observations; ``None`` stands for an unparsable response.
    """

    plan: Callable[[Any, int, Observation], Sequence[str] | None]
    probes: tuple[str | None, ...] = ()


def _textcraft_plan(_env: Any, _task_id: int, initial: Observation) -> Sequence[str] | None:
    from resail_pipeline.envs.planner import plan_from_observation

    return plan_from_observation(initial.text)


def _alfworld_walkthrough(env: Any, task_id: int, _initial: Observation) -> Sequence[str]:
    return env.walkthrough(task_id)


#: env name -> its expert.
PLANS: dict[str, PlanSource] = {
    "textcraft": PlanSource(plan=_textcraft_plan, probes=("inventory", None)),
    "alfworld": PlanSource(plan=_alfworld_walkthrough, probes=("look", "inventory", "help", None)),
}


@dataclass(frozen=True)
class ExpertEpisode:
    """What one expert episode showed.

    Attributes:
        task_id: the task.
        initial: the observation ``reset`` returned.
        plan: the expert's actions (empty where it found none).
        observations: every observation after a step, probes included.
        admissible: every admissible-action list shown, the initial one included.
    """

    task_id: int
    initial: Observation
    plan: tuple[str, ...]
    observations: tuple[str, ...]
    admissible: tuple[tuple[str, ...], ...]


def spread_with_last(ids: Sequence[int], n: int) -> list[int]:
    """At most ``n`` of ``ids`` evenly spaced over their order, the first and the last included."""
    if n < 1:
        raise ValueError(f"n: must be >= 1, got {n}")
    if len(ids) <= n:
        return list(ids)
    if n == 1:
        return [ids[-1]]
    picked = (ids[round(k * (len(ids) - 1) / (n - 1))] for k in range(n))
    return list(dict.fromkeys(picked))


def play_expert(env: Environment, expert: PlanSource, task_id: int) -> ExpertEpisode:
    """Play ``expert`` on ``task_id`` in ``env`` (built without a step limit that matters)."""
    initial = env.reset(task_id)
    plan = tuple(expert.plan(env, task_id, initial) or ())
    observations: list[str] = []
    admissible = [initial.admissible_actions] if initial.admissible_actions else []

    def record(result: StepResult) -> None:
        observations.append(result.observation)
        if result.admissible_actions:
            admissible.append(result.admissible_actions)

    done = not plan
    for action in plan:
        for probe in expert.probes:
            record(env.step(probe))
        result = env.step(action)
        record(result)
        if result.done:
            done = True
            break
    if not done:  # a plan that did not end the episode: its last state is probed too
        for probe in expert.probes:
            record(env.step(probe))
    return ExpertEpisode(task_id, initial, plan, tuple(observations), tuple(admissible))


@dataclass(frozen=True)
class PromptEstimate:
    """The estimated longest prompt of each kind a run can send, in the run's tokens.

    Attributes:
        env: the environment.
        max_steps: the episodes' step limit the prompts are built for.
        episodes: expert episodes the worst case was drawn from.
        ordinary: the ordinary-view prompt.
        privileged: the privileged-view prompt, with a summary of ``summary_tokens``.
        summary_tokens: the longest summary the run allows.
        summary_prompt: the prompt the policy writes a summary from.
    """

    env: str
    max_steps: int
    episodes: int
    ordinary: int
    privileged: int
    summary_tokens: int
    summary_prompt: int

    def lengths(self) -> dict[str, int]:
        """Each prompt kind (``PROMPT_*``) -> its estimated length."""
        return {
            PROMPT_ORDINARY: self.ordinary,
            PROMPT_PRIVILEGED: self.privileged,
            PROMPT_SUMMARY: self.summary_prompt,
        }

    def describe(self) -> str:
        """One line for the log."""
        return (
            f"{self.env}, {self.max_steps}-step episodes ({self.episodes} expert episodes): "
            f"ordinary view {self.ordinary} tokens, privileged view {self.privileged} (a summary "
            f"of {self.summary_tokens}), summary prompt {self.summary_prompt}"
        )


def _count(tokenizer: Any, text: str) -> int:
    """Tokens of ``text`` as the generators encode a prompt (no special tokens added)."""
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def _prompt_tokens(tokenizer: Any, message: str) -> int:
    return _count(tokenizer, chat_prompt(tokenizer, message))


def _longest(tokenizer: Any, texts: Iterable[str], default: str = "") -> str:
    return max(texts, key=lambda text: (_count(tokenizer, text), len(text)), default=default)


def _worst_histories(
    env_name: str,
    initial: Observation,
    observation: str,
    action: str,
    admissible: tuple[str, ...] | None,
    max_steps: int,
) -> list[EpisodeHistory]:
    """The first step's history and the last step's of a ``max_steps``-step worst-case episode."""
    first = EpisodeHistory(
        env=env_name,
        initial=initial,
        current_observation=initial.text,
        admissible_actions=admissible,
    )
    if max_steps < 2:
        return [first]
    turns = (Turn(initial.text, action),) + (Turn(observation, action),) * (max_steps - 2)
    last = EpisodeHistory(
        env=env_name,
        initial=initial,
        turns=turns,
        current_observation=observation,
        admissible_actions=admissible,
    )
    return [first, last]


def _worst_evidence(
    env_name: str, initial: Observation, observation: str, action: str, max_steps: int
) -> list[Evidence]:
    """Worst-case trajectories as summaries see them: every step the longest action and result,
    a success, a failure with every action accepted, and one ending on a rejected action."""
    record = EvidenceRecord(cap(action, ACTION_CHARS), cap(observation, OBSERVATION_CHARS), True)
    rejected = EvidenceRecord(record.action, record.observation, False)
    accepted = (record,) * max_steps
    ending_rejected = (record,) * (max_steps - 1) + (rejected,)
    snapshot = task_snapshot(initial.text)

    def evidence(outcome: str, records: tuple[EvidenceRecord, ...], end: str) -> Evidence:
        return Evidence(
            traj_id="worst-case",
            env=env_name,
            outcome=outcome,
            snapshot=snapshot,
            records=records,
            initial_observation=initial.text,
            end_reason=end,
        )

    return [
        evidence(OUTCOME_SUCCESS, accepted, END_SUCCESS),
        evidence(OUTCOME_FAILURE, accepted, END_STEP_LIMIT),
        evidence(OUTCOME_FAILURE, ending_rejected, END_STEP_LIMIT),
    ]


def estimate_prompt_lengths(
    make_env: Callable[..., Environment],
    splits: Sequence[str],
    tokenizer: Any,
    *,
    summary_tokens: int | None = None,
    tasks_per_split: int = TASKS_PER_SPLIT,
) -> PromptEstimate:
    """The longest prompt of each kind a run can send (see the module docstring).

    Args:
        make_env: builds the run's environment; called once with its step limit and once with
            ``max_steps=UNLIMITED_STEPS`` for the expert episodes.
        splits: the splits the run draws tasks from.
        tokenizer: the policy's tokenizer, with its chat template.
        summary_tokens: the longest summary the policy may write (its ``max_new_tokens``);
            ``None`` where the policy writes none (only rules-based summaries are counted).
        tasks_per_split: tasks played per split.
    """
    env = make_env()
    name, max_steps = env.name, env.max_steps
    if name not in PLANS:
        raise ValueError(f"env: no plan for {name!r} to estimate its prompts; add one to PLANS")
    expert = PLANS[name]
    player = make_env(max_steps=UNLIMITED_STEPS)
    tasks = dict.fromkeys(
        task for split in splits for task in spread_with_last(env.task_ids(split), tasks_per_split)
    )
    episodes = [play_expert(player, expert, task) for task in tasks]
    close = getattr(player, "close", None)
    if close is not None:
        close()
    if not episodes:
        raise ValueError(f"splits: no task to play in {list(splits)}")

    initial = max(
        (e.initial for e in episodes),
        key=lambda obs: (_count(tokenizer, obs.text), len(obs.text)),
    )
    observation = _longest(tokenizer, (o for e in episodes for o in e.observations))
    action = _longest(tokenizer, (a for e in episodes for a in e.plan))
    lists = [actions for e in episodes for actions in e.admissible]
    admissible = (
        max(lists, key=lambda a: (_count(tokenizer, "\n".join(a)), len(a))) if lists else None
    )
    messages = [
        render_user_message(history)
        for history in _worst_histories(name, initial, observation, action, admissible, max_steps)
    ]
    ordinary = max(_prompt_tokens(tokenizer, m) for m in messages)

    # a failure's corrected plan: the environment's planner, as long as the longest expert plan
    plan = [action] * max(max(len(e.plan) for e in episodes), max_steps)
    planner = (lambda _text: plan) if env_rules(name).planner is not None else None
    evidence = _worst_evidence(name, initial, observation, action, max_steps)
    rules = max(_count(tokenizer, rules_summary(item, planner).strip()) for item in evidence)
    summary = max(rules, summary_tokens or 0)
    privileged = max(
        _prompt_tokens(tokenizer, add_privileged(m, Summary(outcome, "")))
        for m in messages
        for outcome in OUTCOMES
    )
    summary_prompt = max(_prompt_tokens(tokenizer, item.prompt()) for item in evidence)
    return PromptEstimate(
        env=name,
        max_steps=max_steps,
        episodes=len(episodes),
        ordinary=ordinary,
        privileged=privileged + summary,
        summary_tokens=summary,
        summary_prompt=summary_prompt,
    )


def check_prompt_budget(
    estimate: PromptEstimate,
    max_model_len: int,
    new_tokens: Mapping[str, int],
    views: Iterable[str] = (PROMPT_ORDINARY, PROMPT_PRIVILEGED, PROMPT_SUMMARY),
    *,
    field: str = "run.generation.vllm.max_model_len",
) -> None:
    """Raise :class:`ConfigError` where the longest of ``views`` (``PROMPT_*``, the prompts the run
    sends) and the most new tokens any generating section asks for (``new_tokens``: its field ->
    its ``max_new_tokens``) would not fit in ``max_model_len``, naming the fields and figures."""
    if not new_tokens:
        return
    lengths = estimate.lengths()
    view = max(views, key=lambda v: lengths[v])
    prompt, most = lengths[view], max(new_tokens.values())
    asking = [name for name, tokens in new_tokens.items() if tokens == most]
    if prompt + most > max_model_len:
        raise ConfigError(
            f"{field}: {max_model_len} tokens, but {estimate.env}'s longest prompt is estimated at "
            f"{prompt} tokens ({view} of a {estimate.max_steps}-step episode) and "
            f"{', '.join(asking)} ask(s) for up to {most} new ones: {prompt + most} needed; raise "
            "it (up to the model's max_position_embeddings), or lower the new tokens or "
            "run.env_options.max_steps"
        )
    logger.info(
        "%s: %d tokens hold the longest prompt, %d (%s of a %d-step episode), and %d new ones",
        field,
        max_model_len,
        prompt,
        view,
        estimate.max_steps,
        most,
    )
