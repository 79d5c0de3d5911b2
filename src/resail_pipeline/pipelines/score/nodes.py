"""Nodes of the ``score`` pipeline."""

from __future__ import annotations

import logging
from typing import Any

import pandas as pd

from resail_pipeline.config import Config, Field, build
from resail_pipeline.devices import in_shards, off_process
from resail_pipeline.io import settings_sha256
from resail_pipeline.pipelines.common import RunConfig, policy_info
from resail_pipeline.schemas import empty_table
from resail_pipeline.training import TrainConfig, sample_responses, usable_steps
from resail_pipeline.training.run import score_with_frozen

logger = logging.getLogger(__name__)


class ScoreParams(Config):
    """``params:score``."""

    seed: int = Field(0, ge=0)
    """Seeds the cached cycle-start responses (sampled as ``train.responses``)."""
    micro_batch_steps: int = Field(16, ge=1)
    """Steps per scoring forward."""


def cycle_start_key(
    train_params: dict[str, Any], score_params: dict[str, Any], run_params: dict[str, Any]
) -> str:
    """The name of the folder that holds cycle 1's cached responses and scores.

    Both are made by the initial policy on the shared cycle-1 corpus, so every experiment of a
    data folder whose settings for them agree can share them: the lr candidates of a budget check,
    every method that caches ordinary-view responses. The name is the view the responses are
    sampled in (``none`` for a method that reads no cached responses: its tables are empty, and
    never shared with a method that reads them) and a hash of every setting that could change
    either table: all
    of ``train`` but what cannot (the method beyond its view, the optimizer, the schedule, the
    probe, GRPO's settings, the ReSAIL switches other than the scoring support ``top_k``, whether
    the in-loop sampler decodes in CUDA graphs), all of ``score``, and the run's settings but its
    method, experiment and staging folder. A setting added later is counted in, so that two
    experiments never share by mistake.
    """
    run = RunConfig.from_params(run_params)
    config = TrainConfig.from_dict({**train_params, "method": run.method}, "train")
    train = config.model_dump()
    for name in ("method", "optimizer", "schedule", "probe", "grpo", "run"):
        del train[name]
    train["resail"] = {"top_k": config.resail.top_k}
    del train["responses"]["cuda_graphs"]  # the trainer's own sampler: neither table reads it
    view = config.cached_response_view if config.uses_cached_responses else "none"
    settings = {
        "view": config.cached_response_view,
        "train": train,
        "score": build(ScoreParams, score_params, "score").model_dump(),
        "run": {
            k: v
            for k, v in run.model_dump().items()
            if k not in ("method", "experiment", "staging_dir")
        },
    }
    return f"{view}-{settings_sha256(settings)[:12]}"


def respond_node(
    steps: pd.DataFrame,
    summaries: pd.DataFrame,
    policy: pd.DataFrame,
    train_params: dict[str, Any],
    score_params: dict[str, Any],
    run_params: dict[str, Any],
) -> pd.DataFrame:
    """One response per usable step from the cycle-start policy, with its behaviour log-probs,
    sampled as the trainer samples (``train.responses``): in the ordinary view (offline SDPO's
    cache, and what the scores are computed on), or for EPD in the privileged view (the teacher's
    responses it fits). None for a method whose trainer reads no cached responses (OEL, GRPO,
    RFT and their ReSAIL versions sample their own during training): an empty table."""
    run = RunConfig.from_params(run_params)
    config = TrainConfig.from_dict({**train_params, "method": run.method}, "train")
    if not config.uses_cached_responses:
        logger.info("respond: %s reads no cached responses; none sampled", run.method)
        return empty_table("responses")
    score = build(ScoreParams, score_params, "score")
    params = config.responses.sampling_params(seed=score.seed)
    privileged = config.cached_response_view == "privileged"
    with run.generator(policy_info(policy)) as generator:
        return sample_responses(
            generator,
            usable_steps(steps, summaries),
            params,
            summaries=summaries if privileged else None,
        )


def score_node(
    steps: pd.DataFrame,
    summaries: pd.DataFrame,
    responses: pd.DataFrame,
    policy: pd.DataFrame,
    train_params: dict[str, Any],
    score_params: dict[str, Any],
    run_params: dict[str, Any],
) -> pd.DataFrame:
    """The frozen cycle-start teacher's PI sensitivity of every step over its cached response (the
    function the trainer scores with online, on the device and in the precision it trains in: bf16
    weights without autocast under DeepSpeed in bf16, fp32 weights under autocast otherwise).

    Split by trajectory over ``run.shards`` worker processes as generation is (one per GPU on a
    GPU node), each scoring its block; on a GPU machine with one process, in a process of its own:
    Kedro's holds no CUDA context. No cached responses (:func:`respond_node`): nothing to score,
    an empty table, and no model loaded.
    """
    if responses.empty:
        return empty_table("scores")
    info = policy_info(policy)
    scorer = (info.path, info.policy_id, TrainConfig.from_dict(train_params, "train"))
    micro_batch_steps = build(ScoreParams, score_params, "score").micro_batch_steps
    workers = RunConfig.from_params(run_params).workers
    if workers < 2:
        return off_process(
            score_with_frozen,
            *scorer,
            steps,
            summaries,
            responses,
            micro_batch_steps=micro_batch_steps,
        )
    parts = [
        (*scorer, *(frame[frame["traj_id"].isin(block)] for frame in (steps, summaries, responses)))
        for block in trajectory_blocks(steps, workers)
    ]
    return pd.concat(
        in_shards(score_with_frozen, parts, micro_batch_steps=micro_batch_steps),
        ignore_index=True,
    )


def trajectory_blocks(steps: pd.DataFrame, count: int) -> list[list[str]]:
    """The trajectory ids of ``steps``, sorted (the order the scores come in), in at most ``count``
    contiguous blocks of nearly equal step counts (none empty)."""
    sizes = steps.groupby("traj_id", sort=True).size()
    total, blocks, current, filled = int(sizes.sum()), [], [], 0
    for traj_id, size in sizes.items():
        current.append(str(traj_id))
        filled += int(size)
        if filled >= total * (len(blocks) + 1) / count and len(blocks) < count - 1:
            blocks.append(current)
            current = []
    if current:
        blocks.append(current)
    return blocks
