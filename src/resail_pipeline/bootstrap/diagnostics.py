"""Does a policy read its guidance? A teacher-forced check of the privileged view, no rollout.

Rolling a policy out in both views (:func:`~.reference.evaluate_and_record`) is what the targets
are measured by, but it generates every step of every episode and mixes many effects.
:func:`guidance_use` asks one narrow question on the planner's own demonstrations: at each step of
a demonstration (with injected mistakes), how likely is the planner's next action under the
policy, in the ordinary view and in the privileged view whose insert is the failure analysis of a
stalled demonstration of the same task, a summary whose corrected plan spells the answer out? A
policy that reads the plan scores higher in the privileged view; one that ignores it scores the
same or lower. The first steps are also scored apart: there the answer is the plan's first
action, a copy that needs no tracking of progress through the plan.

Where a step is missed, the greedy response is decoded and the miss classified (:data:`MISSES`):
no action, the planner's action with other quantities, an action the episode already took (a
loop), a step of the task's plan not taken yet (skipping ahead), or anything else (and, rarely,
the planner's action in a response that does not end after it). Repeats and skips are failures
to track progress through a plan the policy may well have read.

With ``renamed``, each task's text goes through a random permutation of item qualifiers
(:mod:`~.renaming`), so a memorised recipe does not help either view. With ``without_commands``
as well, the crafting commands are taken out of every message (:mod:`~.drills`): the plan is then
the only source of the answer, and the privileged view's score is the policy's rate of copying it.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass

import torch
from tqdm.auto import tqdm

from resail_pipeline.bootstrap.demonstrations import (
    RESPONSE_MAX_NEW_TOKENS,
    collect_demonstrations,
    demonstration_response,
)
from resail_pipeline.bootstrap.drills import without_crafting_commands
from resail_pipeline.bootstrap.renaming import demonstration_qualifiers, task_renamings
from resail_pipeline.envs.base import NO_ACTION
from resail_pipeline.envs.planner import plan_from_observation
from resail_pipeline.objectives.divergences import token_logprobs
from resail_pipeline.prompts import (
    Summary,
    add_privileged,
    chat_prompt,
    parse_action,
    render_user_message,
)

VIEWS = ("ordinary", "privileged")

#: The kinds of a missed step, in the order :func:`classify_miss` tests them.
MISSES = ("format", "no_action", "quantity", "repeat", "skip", "off_plan")

_NUMBER = re.compile(r"\d+")


@dataclass(frozen=True)
class ViewFit:
    """How well one view predicts the planner's actions.

    Attributes:
        view: ``ordinary`` or ``privileged``.
        steps: demonstration steps scored.
        exact: share of steps whose whole response is the greedy (argmax) continuation.
        logp: mean log-probability of a step's response (nats, summed over its tokens).
        first_exact: ``exact`` over the first step of each demonstration alone.
        misses: share of steps missed, by kind (:data:`MISSES`); with ``exact`` they sum to 1.
    """

    view: str
    steps: int
    exact: float
    logp: float
    first_exact: float
    misses: dict[str, float]


def classify_miss(
    action: str | None, expert: str, plan: Sequence[str], tried: Collection[str]
) -> str:
    """The kind (:data:`MISSES`) of the greedy ``action`` of a response that missed the planner's.

    ``plan`` is the task's plan from the start, ``tried`` the actions the episode already took.
    The first kind that applies wins: ``format`` (the expert's action, in a response that is not
    the expert's: it does not end there), ``no_action`` (no parsable action), ``quantity`` (the
    expert's action with other numbers), ``repeat`` (in ``tried``), ``skip`` (in ``plan``, so a
    step not taken yet), ``off_plan``.
    """
    if action == expert:
        return "format"
    if action is None:
        return "no_action"
    if _NUMBER.sub("N", action) == _NUMBER.sub("N", expert):
        return "quantity"
    if action in tried:
        return "repeat"
    if action in plan:
        return "skip"
    return "off_plan"


@torch.inference_mode()
def _response_fit(model, tokenizer, message: str, response: str) -> tuple[bool, float]:
    prompt = tokenizer(chat_prompt(tokenizer, message), add_special_tokens=False).input_ids
    target = tokenizer(response, add_special_tokens=False).input_ids
    logits = model(torch.tensor([prompt + target])).logits[0, len(prompt) - 1 : -1]
    logp = token_logprobs(logits, torch.tensor(target))
    return logits.argmax(-1).tolist() == target, logp.sum().item()


@torch.inference_mode()
def _greedy_action(model, tokenizer, message: str) -> str | None:
    prompt = tokenizer(chat_prompt(tokenizer, message), add_special_tokens=False).input_ids
    out = model.generate(
        torch.tensor([prompt]),
        attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
        max_new_tokens=RESPONSE_MAX_NEW_TOKENS,
        do_sample=False,
        pad_token_id=tokenizer.pad_token_id,
    )
    return parse_action(tokenizer.decode(out[0, len(prompt) :], skip_special_tokens=True)).action


def guidance_use(
    model,
    tokenizer,
    env: str,
    task_ids: Sequence[int],
    *,
    renamed: bool = False,
    without_commands: bool = False,
    mistake_rate: float = 0.15,
    seed: int = 0,
    progress: bool = True,
) -> list[ViewFit]:
    """The ordinary and privileged :class:`ViewFit` over one demonstration of each task."""
    demos = collect_demonstrations(
        env,
        task_ids,
        episodes_per_task=2,
        mistake_rate=mistake_rate,
        stalled_share=0.5,
        seed=seed,
        progress=False,
    )
    guides = {d.task_id: d.summary for d in demos if d.stalled}
    played = [d for d in demos if not d.stalled and d.task_id in guides]
    if not played:
        raise ValueError(f"task_ids: the planner solves none of {list(task_ids)[:10]}")
    # without ``renamed`` every task's renaming permutes no word
    words = demonstration_qualifiers(env, demos) if renamed else ()
    renamings = task_renamings(words, (d.task_id for d in played), f"{seed}/guidance")
    scores: dict[str, list[tuple[bool, float]]] = {view: [] for view in VIEWS}
    misses: dict[str, Counter[str]] = {view: Counter() for view in VIEWS}
    plans = {  # each task's plan from the start, renamed as its prompts are
        d.task_id: [renamings[d.task_id](a) for a in plan_from_observation(d.initial.text) or []]
        for d in played
    }
    steps = [(d, s) for d in played for s in d.steps]
    first = [s is d.steps[0] for d, s in steps]
    for demo, step in tqdm(steps, desc="guidance use", unit="step", disable=not progress):
        rename = renamings[demo.task_id]
        guide = guides[demo.task_id]
        message = rename(render_user_message(step.history))
        if without_commands:
            message = without_crafting_commands(message)
        views = (message, add_privileged(message, Summary(guide.outcome, rename(guide.text))))
        expert = rename(step.expert)
        response = demonstration_response(expert) + tokenizer.eos_token
        for view, text in zip(VIEWS, views, strict=True):
            fit = _response_fit(model, tokenizer, text, response)
            scores[view].append(fit)
            if not fit[0]:
                tried = {rename(t.action) for t in step.history.turns} - {NO_ACTION}
                action = _greedy_action(model, tokenizer, text)
                misses[view][classify_miss(action, expert, plans[demo.task_id], tried)] += 1
    return [
        ViewFit(
            view,
            len(fits),
            sum(ok for ok, _ in fits) / len(fits),
            sum(lp for _, lp in fits) / len(fits),
            sum(ok for (ok, _), f in zip(fits, first, strict=True) if f) / len(played),
            {kind: misses[view][kind] / len(fits) for kind in MISSES},
        )
        for view, fits in scores.items()
    ]
