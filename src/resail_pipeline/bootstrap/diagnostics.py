"""Does a policy read its guidance? A teacher-forced check of the privileged view, in a minute.

Rolling a policy out in both views (:func:`~.reference.evaluate_and_record`) is what the targets
are measured by, but it takes half an hour on CPU and mixes many effects. :func:`guidance_use`
asks one narrow question on the planner's own demonstrations: at each step of a demonstration
(with injected mistakes), how likely is the planner's next action under the policy, in the ordinary
view and in the privileged view whose insert is the failure analysis of a stalled demonstration
of the same task, a summary whose corrected plan spells the answer out? A policy that reads the
plan scores higher in the privileged view; one that ignores it scores the same or lower. The first
steps are also scored apart: there the answer is the plan's first action, a copy that needs no
tracking of progress through the plan.

With ``renamed``, each task's text goes through a random permutation of item qualifiers
(:mod:`~.renaming`), so a memorised recipe does not help either view. With ``without_commands``
as well, the crafting commands are taken out of every message (:mod:`~.drills`): the plan is then
the only source of the answer, and the privileged view's score is the policy's rate of copying it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from tqdm.auto import tqdm

from resail_pipeline.bootstrap.demonstrations import collect_demonstrations, demonstration_response
from resail_pipeline.bootstrap.drills import without_crafting_commands
from resail_pipeline.bootstrap.renaming import demonstration_qualifiers, task_renamings
from resail_pipeline.objectives.divergences import token_logprobs
from resail_pipeline.prompts import Summary, add_privileged, chat_prompt, render_user_message

VIEWS = ("ordinary", "privileged")


@dataclass(frozen=True)
class ViewFit:
    """How well one view predicts the planner's actions.

    Attributes:
        view: ``ordinary`` or ``privileged``.
        steps: demonstration steps scored.
        exact: share of steps whose whole response is the greedy (argmax) continuation.
        logp: mean log-probability of a step's response (nats, summed over its tokens).
        first_exact: ``exact`` over the first step of each demonstration alone.
    """

    view: str
    steps: int
    exact: float
    logp: float
    first_exact: float


@torch.inference_mode()
def _response_fit(model, tokenizer, message: str, response: str) -> tuple[bool, float]:
    prompt = tokenizer(chat_prompt(tokenizer, message), add_special_tokens=False).input_ids
    target = tokenizer(response, add_special_tokens=False).input_ids
    logits = model(torch.tensor([prompt + target])).logits[0, len(prompt) - 1 : -1]
    logp = token_logprobs(logits, torch.tensor(target))
    return logits.argmax(-1).tolist() == target, logp.sum().item()


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
    steps = [(d, s) for d in played for s in d.steps]
    first = [s is d.steps[0] for d, s in steps]
    for demo, step in tqdm(steps, desc="guidance use", unit="step", disable=not progress):
        rename = renamings[demo.task_id]
        guide = guides[demo.task_id]
        message = rename(render_user_message(step.history))
        if without_commands:
            message = without_crafting_commands(message)
        views = (message, add_privileged(message, Summary(guide.outcome, rename(guide.text))))
        response = demonstration_response(rename(step.expert)) + tokenizer.eos_token
        for view, text in zip(VIEWS, views, strict=True):
            scores[view].append(_response_fit(model, tokenizer, text, response))
    return [
        ViewFit(
            view,
            len(fits),
            sum(ok for ok, _ in fits) / len(fits),
            sum(lp for _, lp in fits) / len(fits),
            sum(ok for (ok, _), f in zip(fits, first, strict=True) if f) / len(played),
        )
        for view, fits in scores.items()
    ]
