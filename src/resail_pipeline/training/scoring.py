"""The frozen teacher's view of a batch of steps: its distributions on the support and its PI sensitivity.

:func:`teacher_targets` is the one place the teacher is scored: the trainer calls it online at
every update (support: the current student's ordinary top-``K``), and :func:`score_steps` calls it
offline over a cycle's cached responses (support: the scorer's own ordinary top-``K``, which is
the student's at cycle start, when both are ``pi_r``). The PI-sensitivity probe
(:mod:`~resail_pipeline.training.probe`) calls it on the current student, frozen between
updates, with the initial model's support. The sensitivity is paper eq. 3 on the
Top-``K``-plus-tail distributions (appendix B.3), computed with the objectives library.

:func:`sample_responses` builds the cycle-start caches: offline SDPO's (one ordinary-view response
per logged step from the cycle-start policy, with its behaviour log-probs) and EPD's (the same
policy as the teacher, answering in the privileged view).
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pandas as pd
import torch
from torch import Tensor, nn
from tqdm.auto import tqdm
from transformers import PreTrainedModel

from resail_pipeline.generation import Generator, SamplingParams
from resail_pipeline.generation.base import derive_seed
from resail_pipeline.objectives import (
    DEFAULT_TOP_K,
    js_divergence,
    masked_token_mean,
    topk_support,
    topk_tail_logprobs,
)
from resail_pipeline.prompts import add_privileged, chat_prompt
from resail_pipeline.schemas import check_columns
from resail_pipeline.training.data import StepExample, accepted_summaries, build_training_data
from resail_pipeline.training.engine import autocast
from resail_pipeline.training.views import ORDINARY, PRIVILEGED, ResponseLogits, view_logits

__all__ = [
    "TeacherTargets",
    "sample_responses",
    "score_steps",
    "sensitivity_batches",
    "step_seed",
    "teacher_targets",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TeacherTargets:
    """The frozen teacher on a batch of steps, reduced to the support (no gradient).

    Attributes:
        support: Long ``(N, T, K)`` token ids of every compared distribution.
        privileged: fp32 ``(N, T, K+1)`` teacher log-probs, privileged view.
        ordinary: fp32 ``(N, T, K+1)`` teacher log-probs, ordinary view; ``None`` if not asked.
        scores: fp32 ``(N,)`` PI sensitivity (token-mean JSD of the two views); ``None`` without
            the ordinary view.
        mask: Bool ``(N, T)`` valid response tokens.
    """

    support: Tensor
    privileged: Tensor
    ordinary: Tensor | None
    scores: Tensor | None
    mask: Tensor


def teacher_targets(
    teacher: nn.Module,
    steps: Sequence[StepExample],
    responses: Sequence[Sequence[int]],
    *,
    support: Tensor | None,
    ordinary: bool,
    pad_id: int,
    device: torch.device,
    precision: str = "fp32",
    top_k: int = DEFAULT_TOP_K,
    chunk_size: int | None = None,
) -> TeacherTargets:
    """Score ``steps`` with the frozen teacher, both views packed in one forward.

    Args:
        teacher: a :class:`ResponseLogits` around the frozen teacher (or a model scored like one,
            without gradient).
        steps: the steps.
        responses: each step's response tokens.
        support: Long ``(N, T, K)`` support (the current student's ordinary top-``K``); ``None``
            takes the teacher's own ordinary top-``top_k``.
        ordinary: also compute the ordinary view (for the sensitivity scores).
        pad_id: padding token id.
        device: where the forward runs.
        precision: ``fp32`` or ``bf16`` (autocast).
        top_k: support size when ``support`` is ``None``.
        chunk_size: positions per block in the full-vocabulary reductions.
    """
    ordinary = ordinary or support is None
    views = (ORDINARY, PRIVILEGED) if ordinary else (PRIVILEGED,)
    with torch.no_grad(), autocast(device, precision):
        out = view_logits(
            teacher, steps, responses, [views] * len(steps), pad_id=pad_id, device=device
        )
        if support is None:
            support = topk_support(out.logits[ORDINARY], top_k, chunk_size)  # (N, T, K)
        privileged = topk_tail_logprobs(out.logits[PRIVILEGED], support, chunk_size)  # (N, T, K+1)
        ordinary_lp = scores = None
        if ordinary:
            ordinary_lp = topk_tail_logprobs(out.logits[ORDINARY], support, chunk_size)
            scores = masked_token_mean(js_divergence(ordinary_lp, privileged), out.mask)  # (N,)
    return TeacherTargets(
        support=support, privileged=privileged, ordinary=ordinary_lp, scores=scores, mask=out.mask
    )


def sensitivity_batches(
    model: PreTrainedModel,
    examples: Sequence[StepExample],
    *,
    pad_id: int,
    top_k: int = DEFAULT_TOP_K,
    micro_batch_steps: int = 16,
    chunk_size: int | None = None,
    precision: str = "fp32",
    compile: bool = False,
    desc: str = "score",
) -> Iterator[tuple[Sequence[StepExample], TeacherTargets]]:
    """``(chunk, targets)`` over ``examples`` in chunks of ``micro_batch_steps``: the frozen
    ``model``'s two views of each step's own response on its own ordinary top-``top_k``, and their
    PI sensitivity (``targets.scores``). Shared by the scores and the probe's fixed support;
    ``compile``: the forward compiled (:class:`~.views.ResponseLogits`)."""
    if micro_batch_steps < 1:
        raise ValueError(f"micro_batch_steps: must be >= 1, got {micro_batch_steps}")
    device = next(model.parameters()).device
    scorer = ResponseLogits(model, compile=compile)
    starts = range(0, len(examples), micro_batch_steps)
    for start in tqdm(starts, desc=desc, disable=len(starts) < 2):
        chunk = examples[start : start + micro_batch_steps]
        yield (
            chunk,
            teacher_targets(
                scorer,
                chunk,
                [s.response_ids for s in chunk],
                support=None,  # the model's own ordinary top-K
                ordinary=True,
                pad_id=pad_id,
                device=device,
                precision=precision,
                top_k=top_k,
                chunk_size=chunk_size,
            ),
        )


def score_steps(
    model: PreTrainedModel,
    tokenizer,
    steps: pd.DataFrame,
    summaries: pd.DataFrame,
    responses: pd.DataFrame,
    *,
    scorer_id: str,
    top_k: int = DEFAULT_TOP_K,
    micro_batch_steps: int = 16,
    max_response_tokens: int | None = None,
    chunk_size: int | None = None,
    precision: str = "fp32",
    compile: bool = False,
) -> pd.DataFrame:
    """The frozen scorer's PI sensitivity of every step with an accepted summary and a response.

    Steps are scored in micro-batches of similar length (a batch is as wide as its longest
    packed row), and returned in trajectory order.

    Args:
        model: the scorer (the cycle-start policy); run without gradient, its weights untouched
            (an attention implementation that cannot take a 4-D mask is switched to sdpa).
        tokenizer: its tokenizer.
        steps: ``steps`` frame.
        summaries: ``summaries`` frame; steps of trajectories without an accepted one are not scored.
        responses: ``responses`` frame; the ``sample == 0`` response of each step is scored.
        scorer_id: recorded in every row (the scorer's ``policy_id``).
        top_k: support size: the scorer's ordinary top-``K`` at every response position.
        micro_batch_steps: steps per forward.
        max_response_tokens: score only the first tokens of each response.
        chunk_size: positions per block in the full-vocabulary reductions.
        precision: ``fp32`` or ``bf16`` (autocast).
        compile: run the forward compiled (:class:`~.views.ResponseLogits`).

    Returns:
        A frame with the ``scores`` schema: ``traj_id, t, scorer_id, jsd, tokens``.
    """
    if micro_batch_steps < 1:  # before any expensive work
        raise ValueError(f"micro_batch_steps: must be >= 1, got {micro_batch_steps}")
    check_columns(responses, "responses", source="responses")
    data = build_training_data(
        steps, summaries, tokenizer, responses=responses, max_response_tokens=max_response_tokens
    )
    examples = [s for traj in data.trajectories for s in data.steps[traj]]
    order = {(s.traj_id, s.t): k for k, s in enumerate(examples)}
    by_length = sorted(examples, key=lambda s: len(s.privileged_ids) + len(s.response_ids))
    rows = []
    batches = sensitivity_batches(
        model,
        by_length,
        pad_id=tokenizer.pad_token_id,
        top_k=top_k,
        micro_batch_steps=micro_batch_steps,
        chunk_size=chunk_size,
        precision=precision,
        compile=compile,
    )
    for chunk, targets in batches:
        tokens = targets.mask.sum(dim=1).tolist()
        for step, jsd, n in zip(chunk, targets.scores.tolist(), tokens, strict=True):
            rows.append((step.traj_id, step.t, scorer_id, float(jsd), int(n)))
    rows.sort(key=lambda row: order[(row[0], row[1])])
    logger.info("scored %d steps with %s", len(rows), scorer_id)
    return pd.DataFrame(rows, columns=["traj_id", "t", "scorer_id", "jsd", "tokens"])


def step_seed(seed: int, traj_id: str, t: int, *extra: int) -> int:
    """A sampling seed of one step, independent of batching and of the other steps."""
    return derive_seed(seed, zlib.crc32(traj_id.encode()), t, *extra)


def sample_responses(
    generator: Generator,
    steps: pd.DataFrame,
    params: SamplingParams,
    summaries: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """One response per step from ``generator``: the cache of offline SDPO (ordinary view) or,
    with ``summaries``, of EPD (the privileged view: the step's prompt with its trajectory's
    accepted summary, appendix G; every step needs one).

    Each step samples from its own seed (:func:`step_seed` of ``params.seed``), so a step's
    response does not depend on which other steps are sampled with it.

    Returns:
        A frame with the ``responses`` schema (``sample`` is 0) and ``view``.
    """
    check_columns(steps, "steps", source="steps")
    if params.n != 1:
        raise ValueError(f"params.n: one response per step, got {params.n}")
    traj_ids = steps["traj_id"].astype(str).tolist()
    ts = steps["t"].astype(int).tolist()
    users = [str(p) for p in steps["prompt"]]
    view = ORDINARY
    if summaries is not None:
        view = PRIVILEGED
        accepted = accepted_summaries(summaries, "summaries")
        missing = sorted(set(traj_ids) - set(accepted))
        if missing:
            raise ValueError(
                f"summaries: no accepted summary for trajectory {missing[0]!r}, whose steps "
                "are to be answered in the privileged view"
            )
        users = [add_privileged(u, accepted[traj]) for u, traj in zip(users, traj_ids, strict=True)]
    prompts = [chat_prompt(generator.tokenizer, u) for u in users]
    seeds = [step_seed(params.seed, traj, t) for traj, t in zip(traj_ids, ts, strict=True)]
    generations = generator.generate(prompts, params, seeds=seeds)
    return pd.DataFrame(
        {
            "traj_id": traj_ids,
            "t": ts,
            "sample": 0,
            "response": [g.text for g in generations],
            "token_ids": [list(g.token_ids) for g in generations],
            "logprobs": [list(g.logprobs) for g in generations],
            "policy_id": generator.policy_id,
            "view": view,
        }
    )
