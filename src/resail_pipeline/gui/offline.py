"""PI sensitivity as an offline data filter on AITZ (section 4.3, appendices A.2 and B).

The experiment, each stage a function over DataFrames (one row per step or episode):

1. :func:`training_pool`: a fixed seed samples and orders the training episodes (``updates x
   trajectories_per_update`` of them), shared by both runs; :func:`monitoring_subset` fixes the
   test episodes accuracy is monitored on.
2. :func:`diagnose`: the initial policy's ordinary response at every step of the pool (its
   *diagnostic attempts*), each marked correct or not by the exact-match rule.
3. :func:`summarize`: one remark per episode from the initial policy, asked with the
   conservative GUI summary prompt (failed steps shown with their screenshot and attempt); a
   summary is accepted when it has the form asked for, retried up to ``summary_attempts`` times,
   and otherwise written from the logged actions (``on_rejected: rules``) or the episode is
   dropped (``drop``); the table counts each.
4. :func:`score_steps`: every step's PI sensitivity under the initial policy (eq. 3), along its
   diagnostic response.
5. :func:`keep_top_fraction`: the filter, fixed before training: the global top ``keep`` share of
   steps by score, ties to the lower index.
6. :func:`train_oel`: OEL for ``updates`` updates of ``trajectories_per_update`` episodes each,
   the frozen initial policy's privileged view distilled into the student's ordinary view along
   one fresh student response per step; the filtered run's loss is over its kept steps only (the
   others keep their place in the histories). Accuracy on the monitoring subset (stop steps
   excluded, one decoding seed) at update 0 and every ``monitor_every`` updates. It runs on one
   of the text trainer's engines (:mod:`resail_pipeline.training.engine`): in one process, or on
   every rank under torchrun (:mod:`resail_pipeline.gui.train`), each rank sampling, scoring and
   monitoring a strided share of the steps.

Stages 2 and 3 only generate: they take any generator of the protocol over the initial policy
(its transformers :class:`~resail_pipeline.gui.policy.VisionPolicy`, or vLLM's behind a
:class:`~resail_pipeline.gui.policy.PromptedGenerator`).
"""

from __future__ import annotations

import copy
import logging
import math
import random
import time
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from resail_pipeline.config import (
    Config,
    ConfigError,
    Field,
    Number,
    model_validator,
    one_of,
)
from resail_pipeline.evaluation.gui_actions import actions_match, predicted_action
from resail_pipeline.generation.base import SamplingParams, derive_seed
from resail_pipeline.gui.episodes import action_from_row, boxes_from_row
from resail_pipeline.gui.policy import VisionLogits, VisionPolicy, VisionPrompt
from resail_pipeline.objectives.baselines import cross_entropy_loss
from resail_pipeline.objectives.distillation import oel_loss, pi_sensitivity
from resail_pipeline.objectives.selection import select_steps
from resail_pipeline.prompts.gui import accepted_remark, describe_action, rule_remark, tool_call
from resail_pipeline.prompts.render import gui_action_messages, gui_summary_messages
from resail_pipeline.training.config import EngineConfig, OptimizerConfig, ScheduleConfig
from resail_pipeline.training.engine import Engine, TorchEngine

if TYPE_CHECKING:
    from resail_pipeline.training.snapshots import Snapshots

__all__ = [
    "ON_REJECTED",
    "MonitoredCurve",
    "OfflineConfig",
    "clone_policy",
    "diagnose",
    "keep_top_fraction",
    "monitor_accuracy",
    "monitor_hits",
    "monitoring_subset",
    "score_steps",
    "single_engine",
    "summarize",
    "train_oel",
    "training_pool",
    "warm_start",
]

logger = logging.getLogger(__name__)

#: what happens to an episode whose summaries were all rejected
ON_REJECTED = ("rules", "drop")


class OfflineConfig(Config):
    """The experiment's settings (the paper's: 100 updates x 16 trajectories, keep 0.8)."""

    schedule: ScheduleConfig = ScheduleConfig()
    """Updates, trajectories per update (the pool is their product) and the seed of every
    draw."""
    optimizer: OptimizerConfig = OptimizerConfig()
    """AdamW's settings for the student."""
    responses: SamplingParams = SamplingParams()
    """The student's fresh responses during training."""
    evaluation: SamplingParams = SamplingParams()
    """The diagnostic attempts, the summaries and the monitoring (paper: temperature 0.4)."""
    keep: Number = Field(0.8, gt=0, le=1)
    """The filtered run's global share of steps kept, in (0, 1]."""
    monitor_every: int = Field(10, ge=1)
    """Updates between measurements of accuracy on the monitoring subset (update 0 and the last
    update are always measured)."""
    monitor_episodes: int = Field(101, ge=1)
    """Test episodes in the monitoring subset."""
    summary_attempts: int = Field(3, ge=1)
    """Rounds in which an episode's summary is asked of the initial policy before
    ``on_rejected`` decides."""
    on_rejected: one_of(*ON_REJECTED) = "rules"
    """An episode whose summaries were all rejected: ``rules`` (a summary written from its
    logged actions) or ``drop`` (left out)."""
    micro_batch: int = Field(8, ge=1)
    """Steps per forward pass (on each rank)."""
    top_k: int = Field(20, ge=1)
    """Top-K of the divergences' support."""
    engine: EngineConfig = EngineConfig()
    """The trainer's engine, processes and precision (the text trainer's: single, ddp,
    deepspeed)."""
    snapshot_every: int = Field(1, ge=1)
    """Updates between snapshots of a run (student, AdamW, metrics, curve) from which a rerun of
    a killed run continues; the last update's is always taken (training/snapshots.py)."""

    @model_validator(mode="after")
    def _gui_engine(self) -> OfflineConfig:
        engine = self.engine
        for name in ("micro_batch_steps", "chunk_size"):
            if getattr(engine, name) is not None:
                raise ConfigError(
                    f"engine.{name}: the GUI trainer's micro-batches are offline.micro_batch and "
                    f"its logits are not cut into blocks; leave it null, got {getattr(engine, name)!r}"
                )
        if engine.kind == "deepspeed" and engine.zero_stage == 3:
            raise ConfigError(
                "engine.zero_stage: the GUI trainer runs ZeRO stage 1 or 2 (stage 3 partitions "
                "the vision tower, which its in-loop sampling does not gather); got 3"
            )
        return self

    @property
    def pool_size(self) -> int:
        return self.schedule.updates * self.schedule.trajectories_per_update


def _episodes(steps: pd.DataFrame) -> list[str]:
    return sorted(steps["episode_id"].unique())


def training_pool(steps: pd.DataFrame, size: int, seed: int) -> pd.DataFrame:
    """The steps of ``size`` training episodes sampled without replacement by ``seed``, in the
    sampled order (the order the updates draw them), with their ``position`` in the pool."""
    episodes = _episodes(steps)
    if size > len(episodes):
        raise ValueError(
            f"schedule: updates x trajectories_per_update = {size} episodes, but the training "
            f"split has {len(episodes)}"
        )
    order = random.Random(seed).sample(episodes, size)
    position = {episode: i for i, episode in enumerate(order)}
    pool = steps[steps["episode_id"].isin(position)].copy()
    pool["position"] = pool["episode_id"].map(position)
    return pool.sort_values(["position", "step_id"], kind="stable").reset_index(drop=True)


def monitoring_subset(steps: pd.DataFrame, episodes: int, seed: int) -> pd.DataFrame:
    """The steps of a fixed random subset of ``episodes`` test episodes (all, if fewer)."""
    names = _episodes(steps)
    chosen = set(random.Random(seed).sample(names, min(episodes, len(names))))
    subset = steps[steps["episode_id"].isin(chosen)]
    return subset.sort_values(["episode_id", "step_id"], kind="stable").reset_index(drop=True)


def _prompts(
    policy: VisionPolicy, steps: pd.DataFrame, root: Path, remarks: dict[str, str] | None = None
) -> list[VisionPrompt]:
    """Each step's action prompt (its episode's logged history, whichever rows ``steps``
    holds): ordinary, or privileged with its episode's remark."""
    return [
        policy.encode(
            gui_action_messages(
                row.instruction,
                list(row.history),
                remarks[row.episode_id] if remarks is not None else None,
            ),
            [root / row.image_path],
        )
        for row in steps.itertuples()
    ]


def _seeds(steps: pd.DataFrame, seed: int) -> list[int]:
    """One decoding seed per step, from ``seed``, the episode and the step (not the row order)."""
    return [
        derive_seed(seed, zlib.crc32(row.episode_id.encode()), row.step_id)
        for row in steps.itertuples()
    ]


def _generate(
    policy: VisionPolicy,
    prompts: list[VisionPrompt],
    params: SamplingParams,
    seeds: list[int],
    label: str,
) -> list:
    """``policy.generate`` (any generator of the protocol with a ``batch_size``) one batch at a
    time, with a progress bar."""
    outputs = []
    size = policy.batch_size
    for start in tqdm(range(0, len(prompts), size), desc=label, leave=False):
        end = start + size
        outputs += policy.generate(prompts[start:end], params, seeds[start:end])
    return outputs


def diagnose(
    policy: VisionPolicy, steps: pd.DataFrame, root: Path, config: OfflineConfig
) -> pd.DataFrame:
    """The initial policy's ordinary response at every step: columns ``episode_id``, ``step_id``,
    ``response``, ``token_ids`` and ``correct`` (exact match with the logged action)."""
    prompts = _prompts(policy, steps, Path(root))
    seeds = _seeds(steps, config.schedule.seed)
    outputs = _generate(policy, prompts, config.evaluation, seeds, "diagnose")
    rows = []
    for row, output in zip(steps.itertuples(), outputs, strict=True):
        logged = action_from_row(row._asdict())
        rows.append(
            {
                "episode_id": row.episode_id,
                "step_id": row.step_id,
                "response": output.text,
                "token_ids": list(output.token_ids),
                "correct": actions_match(
                    logged, predicted_action(output.text), boxes_from_row(row._asdict())
                ),
            }
        )
    return pd.DataFrame(rows)


def summarize(
    policy: VisionPolicy,
    steps: pd.DataFrame,
    attempts: pd.DataFrame,
    root: Path,
    config: OfflineConfig,
) -> pd.DataFrame:
    """One remark per episode: columns ``episode_id``, ``remark`` (empty when dropped),
    ``attempts``, ``accepted`` (the policy's own summary was accepted) and ``source``
    (``policy``, ``rules`` or ``dropped``). Every episode still without a remark is asked again
    in the next round, up to ``summary_attempts`` rounds; each try has its own seed."""
    root = Path(root)
    merged = steps.merge(attempts, on=["episode_id", "step_id"], validate="one_to_one")
    episodes, listed, prompts = [], [], []
    for episode, group in merged.groupby("episode_id", sort=True):
        group = group.sort_values("step_id")
        steps_listed = [
            (action_from_row(row._asdict()), None if row.correct else row.response)
            for row in group.itertuples()
        ]
        described = [(describe_action(action), attempt) for action, attempt in steps_listed]
        images = [root / row.image_path for row in group.itertuples() if not row.correct]
        messages = gui_summary_messages(group["instruction"].iloc[0], described)
        episodes.append(episode)
        listed.append(steps_listed)
        prompts.append(policy.encode(messages, images))
    remarks: list[str | None] = [None] * len(episodes)
    tries = [0] * len(episodes)
    for round_ in range(config.summary_attempts):
        pending = [i for i, remark in enumerate(remarks) if remark is None]
        if not pending:
            break
        seeds = [derive_seed(config.schedule.seed, i, round_) for i in pending]
        outputs = _generate(
            policy,
            [prompts[i] for i in pending],
            config.evaluation,
            seeds,
            f"summarize {round_ + 1}",
        )
        for i, output in zip(pending, outputs, strict=True):
            remarks[i] = accepted_remark(output.text)
            tries[i] += 1
    rows = []
    for episode, steps_listed, remark, tried in zip(episodes, listed, remarks, tries, strict=True):
        if remark is not None:
            source = "policy"
        elif config.on_rejected == "rules":
            remark, source = rule_remark(steps_listed), "rules"
        else:
            remark, source = "", "dropped"
        rows.append(
            {
                "episode_id": episode,
                "remark": remark,
                "attempts": tried,
                "accepted": source == "policy",
                "source": source,
            }
        )
    table = pd.DataFrame(rows)
    counts = table["source"].value_counts().to_dict()
    logger.info("summaries: %s", ", ".join(f"{n} {source}" for source, n in sorted(counts.items())))
    return table


def _remarks(summaries: pd.DataFrame) -> dict[str, str]:
    return {row.episode_id: row.remark for row in summaries.itertuples() if row.source != "dropped"}


@torch.no_grad()
def score_steps(
    policy: VisionPolicy,
    steps: pd.DataFrame,
    attempts: pd.DataFrame,
    summaries: pd.DataFrame,
    root: Path,
    config: OfflineConfig,
) -> pd.DataFrame:
    """PI sensitivity (eq. 3) of every step of an episode with a remark, under ``policy``, along
    its diagnostic response: columns ``episode_id``, ``step_id``, ``jsd``, ``tokens``."""
    remarks = _remarks(summaries)
    kept = steps[steps["episode_id"].isin(remarks)].reset_index(drop=True)
    merged = kept.merge(attempts, on=["episode_id", "step_id"], validate="one_to_one")
    policy.model.eval()
    rows = []
    size = config.micro_batch
    for start in tqdm(range(0, len(merged), size), desc="score", leave=False):
        chunk = merged.iloc[start : start + size]
        responses = [list(ids) for ids in chunk["token_ids"]]
        ordinary, mask = policy.response_logits(_prompts(policy, chunk, Path(root)), responses)
        privileged, _ = policy.response_logits(
            _prompts(policy, chunk, Path(root), remarks), responses
        )
        jsd = pi_sensitivity(ordinary, privileged, mask, top_k=config.top_k)
        for row, value, tokens in zip(
            chunk.itertuples(), jsd.tolist(), mask.sum(-1).tolist(), strict=True
        ):
            rows.append(
                {
                    "episode_id": row.episode_id,
                    "step_id": row.step_id,
                    "jsd": value,
                    "tokens": tokens,
                }
            )
    return pd.DataFrame(rows)


def keep_top_fraction(scores: Sequence[float] | np.ndarray, keep: float) -> np.ndarray:
    """A bool mask keeping the ``ceil(keep * n)`` highest scores (ties to the lower index)."""
    values = torch.tensor(np.asarray(scores, dtype=np.float64))
    mask = np.zeros(len(values), dtype=bool)
    mask[select_steps(values, keep, "top").numpy()] = True
    return mask


@torch.no_grad()
def monitor_hits(
    policy: VisionPolicy,
    steps: pd.DataFrame,
    root: Path,
    config: OfflineConfig,
    *,
    rank: int = 0,
    world_size: int = 1,
) -> tuple[int, int]:
    """Exact matches of ``policy`` on the ``rank``-th strided share (of ``world_size``) of the
    non-stop steps of ``steps``, with ground-truth prior actions and one decoding seed per step;
    returns ``(hits, steps scored)`` of the share. The shares of all ranks add up to the whole."""
    keep = [action_from_row(row._asdict()).kind != "stop" for row in steps.itertuples()]
    scored = steps[keep]
    if scored.empty:
        raise ValueError("monitoring subset: every step is a stop; nothing to score")
    share = scored.iloc[rank::world_size]
    if share.empty:
        return 0, 0
    # histories come from the whole episodes; only the non-stop steps are asked
    prompts = _prompts(policy, share, Path(root))
    outputs = _generate(
        policy, prompts, config.evaluation, _seeds(share, config.schedule.seed), "monitor"
    )
    hits = [
        actions_match(
            action_from_row(row._asdict()),
            predicted_action(output.text),
            boxes_from_row(row._asdict()),
        )
        for row, output in zip(share.itertuples(), outputs, strict=True)
    ]
    return sum(hits), len(hits)


def monitor_accuracy(
    policy: VisionPolicy, steps: pd.DataFrame, root: Path, config: OfflineConfig
) -> tuple[float, int]:
    """Exact-match accuracy of ``policy`` on ``steps`` (stop steps excluded), with ground-truth
    prior actions and one decoding seed per step; returns ``(accuracy, steps scored)``."""
    hits, scored = monitor_hits(policy, steps, root, config)
    return hits / scored, scored


def single_engine(student: VisionPolicy, config: OfflineConfig) -> Engine:
    """The one-process engine over ``student``'s model (AdamW, on the model's device)."""
    return TorchEngine(
        VisionLogits(student.model),
        config.optimizer,
        rank=0,
        world_size=1,
        device=student.device,
        precision="fp32",
    )


class MonitoredCurve:
    """A run's monitored accuracy so far, one row ``(run, update, accuracy, steps)`` per
    monitoring point; its rows travel with the run's snapshots
    (:class:`~resail_pipeline.training.snapshots.KeptRows`)."""

    COLUMNS = ("run", "update", "accuracy", "steps")

    def __init__(self) -> None:
        self.rows: list[tuple[str, int, float, int]] = []

    def restore_rows(self, rows: list[tuple[Any, ...]]) -> None:
        self.rows = [(str(r), int(u), float(a), int(n)) for r, u, a, n in rows]

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.rows, columns=list(self.COLUMNS))


def train_oel(
    student: VisionPolicy,
    teacher: VisionPolicy,
    pool: pd.DataFrame,
    summaries: pd.DataFrame,
    kept: np.ndarray | None,
    monitor: Callable[[VisionPolicy, int, int], tuple[int, int]],
    root: Path,
    config: OfflineConfig,
    *,
    run: str,
    engine: Engine | None = None,
    snapshots: Snapshots | None = None,
    curve: MonitoredCurve | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """OEL on the pool (``kept``: the filter's mask over the pool's rows; ``None``: every step).

    Every rank runs this with the same arguments: each update's steps are the same on every rank,
    and rank ``r`` of ``w`` samples, scores and backpropagates the steps ``r, r + w, ...`` of it,
    in the same number of micro-batches as every other rank (a rank with none forwards a real
    step times zero, so that every parameter takes part in the reduction). Each step's loss is
    divided by the update's step count on every rank, so the engines' gradient average times the
    world size is the one-process gradient; fresh responses are seeded per step and update, so
    they do not depend on the sharding.

    Args:
        student: the policy trained; its model is ``engine``'s (``engine.sampling_model()``).
        teacher: the frozen initial policy.
        monitor: ``monitor(policy, rank, world_size)``: ``(hits, steps)`` of the rank's share of
            the monitoring subset (:func:`monitor_hits`); summed over the ranks.
        engine: the student's engine; ``None``: :func:`single_engine` (one process).
        snapshots: the run's snapshots (their kept rows: ``curve``): the updates of the latest
            one are not run again, and one is taken after every update they ask for. Every
            draw of an update is seeded from the schedule's seed and the update, so a continued
            run is the uninterrupted one.
        curve: where the monitored accuracy is recorded (``None``: a new one).

    Returns:
        ``(metrics, curve)``: one row per update (``run``, ``update``, ``loss``, ``num_steps``,
        ``tokens``, ``seconds``), and one per monitoring point (``run``, ``update``,
        ``accuracy``, ``steps``); the same on every rank.
    """
    root = Path(root)
    engine = engine if engine is not None else single_engine(student, config)
    rank, world = engine.rank, engine.world_size
    remarks = _remarks(summaries)
    usable = pool["episode_id"].isin(remarks).to_numpy()
    active = usable & (kept if kept is not None else True)
    schedule = config.schedule
    teacher.model.eval()
    curve = curve if curve is not None else MonitoredCurve()
    start, metrics = (0, []) if snapshots is None else snapshots.restore()

    def record(update: int) -> None:
        engine.module.eval()
        hits, scored = engine.sum_over_ranks(
            torch.tensor(monitor(student, rank, world), dtype=torch.float64)
        ).tolist()
        accuracy = hits / scored
        curve.rows.append((run, update, accuracy, int(scored)))
        logger.info("%s: update %d, accuracy %.4f on %d steps", run, update, accuracy, scored)

    if start == 0:
        record(0)
    updates = range(start + 1, schedule.updates + 1)
    for update in tqdm(updates, desc=run, initial=start, total=schedule.updates, disable=rank != 0):
        started = time.perf_counter()
        lo, hi = (
            (update - 1) * schedule.trajectories_per_update,
            update * schedule.trajectories_per_update,
        )
        in_batch = pool["position"].between(lo, hi - 1).to_numpy()
        batch = pool[in_batch & active]
        sums = torch.zeros(2, dtype=torch.float64)  # this rank's loss, tokens
        if not batch.empty:
            n = len(batch)
            mine = batch.iloc[rank::world]
            engine.sync_sampling_model()
            responses: list[list[int]] = []
            ordinary, privileged = [], []
            if not mine.empty:
                ordinary = _prompts(student, mine, root)
                privileged = _prompts(teacher, mine, root, remarks)
                seeds = [derive_seed(s, update) for s in _seeds(mine, schedule.seed)]
                engine.module.eval()
                responses = [
                    list(g.token_ids) or [student.tokenizer.eos_token_id]
                    for g in student.generate(ordinary, config.responses, seeds)
                ]
            engine.module.train()
            # every rank runs as many micro-batches as the rank with the most steps
            size = config.micro_batch
            parts = [range(i, min(i + size, len(mine))) for i in range(0, len(mine), size)]
            count = math.ceil(math.ceil(n / world) / size)
            parts += [range(0)] * (count - len(parts))
            for k, part in enumerate(parts):
                with engine.micro_batch(last=k == count - 1), engine.autocast():
                    if len(part):
                        chosen = slice(part.start, part.stop)
                        loss, tokens = _micro_batch_loss(
                            engine,
                            student,
                            teacher,
                            ordinary[chosen],
                            privileged[chosen],
                            responses[chosen],
                            config.top_k,
                        )
                        # the uniform mean over the update's steps (times the world size:
                        # the engines average the ranks' gradients)
                        engine.backward(loss / n * world)
                        sums += torch.tensor(
                            [float(loss.detach()) / n, tokens], dtype=torch.float64
                        )
                    else:  # a real step of the update, weighted zero: every parameter reduced
                        loss, _ = _micro_batch_loss(
                            engine,
                            student,
                            teacher,
                            *_first_step(student, teacher, batch, root, remarks),
                            config.top_k,
                        )
                        engine.backward(loss * 0.0)
            engine.step()
        loss_value, tokens = engine.sum_over_ranks(sums).tolist()
        engine.module.eval()
        metrics.append(
            {
                "run": run,
                "update": update,
                "loss": loss_value,
                "num_steps": len(batch),
                "tokens": int(tokens),
                "seconds": time.perf_counter() - started,
            }
        )
        if update % config.monitor_every == 0 or update == schedule.updates:
            record(update)
        if snapshots is not None:
            snapshots.after_update(update, metrics)
    return pd.DataFrame(metrics), curve.frame()


def _micro_batch_loss(
    engine: Engine,
    student: VisionPolicy,
    teacher: VisionPolicy,
    ordinary: list[VisionPrompt],
    privileged: list[VisionPrompt],
    responses: list[list[int]],
    top_k: int,
) -> tuple[torch.Tensor, int]:
    """The sum of ``l_dist`` over the micro-batch's steps (with gradient through the engine), and
    its response tokens."""
    with torch.no_grad():
        teacher_logits, _ = teacher.response_logits(privileged, responses)
    student_logits, mask = student.response_logits(ordinary, responses, engine.module)
    _, l_dist = oel_loss(student_logits, teacher_logits, mask, top_k=top_k)
    return l_dist.sum(), int(mask.sum())


def _first_step(
    student: VisionPolicy,
    teacher: VisionPolicy,
    batch: pd.DataFrame,
    root: Path,
    remarks: dict[str, str],
) -> tuple[list[VisionPrompt], list[VisionPrompt], list[list[int]]]:
    """The update's first step as a micro-batch of one, with a one-token response (the end of
    sequence): what a rank without steps forwards."""
    first = batch.iloc[:1]
    eos = [[student.tokenizer.eos_token_id]]
    return _prompts(student, first, root), _prompts(teacher, first, root, remarks), eos


def warm_start(
    policy: VisionPolicy,
    steps: pd.DataFrame,
    root: Path,
    updates: int,
    batch: int,
    lr: float,
    seed: int,
) -> pd.DataFrame:
    """Behaviour cloning of the logged actions (each written as its ``mobile_use`` call): makes
    a randomly initialised model an initial policy that acts, for runs without a released one.
    Returns one row per update (``update``, ``loss``)."""
    root = Path(root)
    optimizer = torch.optim.AdamW(policy.model.parameters(), lr=lr)
    rng = random.Random(seed)
    eos = policy.tokenizer.eos_token_id
    prompts = _prompts(policy, steps, root)
    targets = [
        policy.tokenizer(tool_call(action_from_row(row._asdict())), add_special_tokens=False)[
            "input_ids"
        ]
        + [eos]
        for row in steps.itertuples()
    ]
    rows = []
    policy.model.train()
    for update in tqdm(range(1, updates + 1), desc="warm start"):
        chosen = rng.sample(range(len(prompts)), min(batch, len(prompts)))
        logits, mask = policy.response_logits(
            [prompts[i] for i in chosen], [targets[i] for i in chosen]
        )
        target = torch.zeros(mask.shape, dtype=torch.long)
        for row, i in enumerate(chosen):
            target[row, : len(targets[i])] = torch.tensor(targets[i])
        loss = cross_entropy_loss(logits, target.to(logits.device), mask)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        rows.append({"update": update, "loss": float(loss.detach())})
    policy.model.eval()
    return pd.DataFrame(rows)


def clone_policy(policy: VisionPolicy) -> VisionPolicy:
    """An independent copy (the student beside its frozen teacher)."""
    return VisionPolicy(
        copy.deepcopy(policy.model),
        policy.tokenizer,
        policy.image_processor,
        policy.policy_id,
        policy.batch_size,
    )
