"""The AITZ experiment's stages as the pipeline runs them: each takes the configuration and
tables, loads what it needs, and returns tables (and checkpoints, published by the caller).

Generation from the frozen initial policy goes through the backend ``generation.backend`` names
(:func:`open_generator`); training runs in a process of its own (:mod:`resail_pipeline.gui.train`:
``python -m``, or torchrun for ``offline.engine`` ``ddp`` or ``deepspeed``)."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pandas as pd
from transformers import PreTrainedTokenizerFast

from resail_pipeline.checkpoints import (
    CheckpointError,
    CheckpointInfo,
    check_checkpoint,
    read_checkpoint_info,
    resolve_device,
)
from resail_pipeline.generation import make_generator
from resail_pipeline.generation.transformers_backend import resolve_dtype
from resail_pipeline.gui import offline
from resail_pipeline.gui.config import AitzConfig, InitialConfig
from resail_pipeline.gui.episodes import action_from_row, read_episodes
from resail_pipeline.gui.policy import PromptedGenerator, VisionEncoder, VisionPolicy
from resail_pipeline.gui.synthetic import write_synthetic
from resail_pipeline.gui.train import CONFIG_FILE, GuiTrainJob, launch
from resail_pipeline.io import fresh_staging_path
from resail_pipeline.modeling.vision import (
    build_qwen3_vl,
    build_vision_tokenizer,
    small_image_processor,
    small_qwen3_vl_config,
)
from resail_pipeline.prompts import gui

__all__ = [
    "build_initial_policy",
    "filter_steps",
    "gui_tokenizer",
    "load_policy",
    "open_generator",
    "read_splits",
    "run_oel",
    "score_steps",
]

logger = logging.getLogger(__name__)


def read_splits(config: AitzConfig) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The ``train`` and ``test`` steps; synthetic episodes are written first where asked."""
    data = config.data
    if data.source == "synthetic":
        write_synthetic(data.root, data.synthetic)
    return (
        read_episodes(data.root, "train", max_steps=data.max_steps),
        read_episodes(data.root, "test", max_steps=data.max_steps),
    )


def load_policy(initial: InitialConfig, path: str | Path) -> VisionPolicy:
    device = resolve_device(initial.device)
    policy = VisionPolicy.load(path, device, resolve_dtype(initial.dtype, device))
    policy.batch_size = initial.batch_size
    return policy


def open_generator(config: AitzConfig, path: str | Path) -> VisionPolicy | PromptedGenerator:
    """A generator over the checkpoint at ``path`` with ``generation.backend`` (through
    :func:`~resail_pipeline.generation.make_generator`, which serves a Qwen3-VL checkpoint with
    either backend), able to encode its prompts."""
    initial = config.initial
    if config.generation.backend == "transformers":
        options = {"device": initial.device, "dtype": initial.dtype}
    else:  # a prompt too long for the engine is refused naming this experiment's settings
        options = {
            **config.generation.vllm,
            "settings": "aitz.generation.vllm",
            "episode_length": "aitz.data.max_steps",
        }
    logger.info("generation: %s over %s", config.generation.backend, path)
    generator = make_generator(config.generation.backend, path, **options)
    if isinstance(generator, VisionPolicy):
        generator.batch_size = initial.batch_size
        return generator
    return PromptedGenerator(VisionEncoder.load(path), generator, initial.batch_size)


def _staging(config: AitzConfig, label: str) -> Path:
    return fresh_staging_path(config.staging_dir, f"{label}-")


def gui_tokenizer(steps: pd.DataFrame) -> PreTrainedTokenizerFast:
    """A word tokenizer for the small model: the GUI templates as single tokens, and the words of
    the episodes' instructions, of their actions as tool calls and in the progress's words, and of
    a rule-written remark."""
    actions = [action_from_row(row._asdict()) for row in steps.itertuples()]
    texts = [
        *steps["instruction"].unique(),
        *(gui.tool_call(a) + "\n" + gui.describe_action(a) for a in actions),
        gui.PROGRESS_NONE,
        gui.rule_remark([]),
    ]
    return build_vision_tokenizer(
        texts, phrases=gui.template_phrases(), tools=[gui.TOOL_DEFINITION]
    )


def build_initial_policy(
    config: AitzConfig, train: pd.DataFrame, pool: pd.DataFrame
) -> tuple[CheckpointInfo, pd.DataFrame]:
    """The initial policy's checkpoint and its warm start's losses (no rows for a given one).

    With ``initial.path`` the checkpoint is recorded as it is. Without, the small Qwen3-VL is
    built over a tokenizer of the GUI templates and the training episodes' text, and
    behaviour-cloned on the training episodes outside the pool (the pool is what both runs
    train on), then staged.
    """
    initial = config.initial
    if initial.path is not None:
        model_type = json.loads((check_checkpoint(initial.path) / "config.json").read_text()).get(
            "model_type"
        )
        if model_type != "qwen3_vl":
            raise CheckpointError(
                f"initial.path: {initial.path} holds a {model_type!r} model, not a Qwen3-VL (qwen3_vl) one"
            )
        no_losses = pd.DataFrame(
            {"update": pd.Series(dtype="int64"), "loss": pd.Series(dtype="float64")}
        )
        return read_checkpoint_info(initial.path, method="react"), no_losses
    warm = initial.warm_start
    outside = train[~train["episode_id"].isin(set(pool["episode_id"]))]
    tokenizer = gui_tokenizer(train)
    model = build_qwen3_vl(
        small_qwen3_vl_config(
            tokenizer,
            hidden_size=warm.hidden_size,
            num_hidden_layers=warm.num_hidden_layers,
            num_attention_heads=warm.hidden_size // 64,
        ),
        seed=warm.seed,
    )
    policy = VisionPolicy(
        model.to(resolve_device(initial.device)),
        tokenizer,
        small_image_processor(),
        batch_size=initial.batch_size,
    )
    losses = offline.warm_start(
        policy, outside, Path(config.data.root), warm.updates, warm.batch, warm.lr, warm.seed
    )
    info = policy.save(_staging(config, "initial"), name="aitz-initial", method="react")
    return info, losses


def score_steps(
    config: AitzConfig,
    path: str | Path,
    pool: pd.DataFrame,
    attempts: pd.DataFrame,
    summaries: pd.DataFrame,
) -> pd.DataFrame:
    """PI sensitivity of the pool's steps under the initial policy at ``path``
    (:func:`~resail_pipeline.gui.offline.score_steps`), loaded on ``initial.device``."""
    with load_policy(config.initial, path) as policy:
        return offline.score_steps(
            policy, pool, attempts, summaries, Path(config.data.root), config.offline
        )


def filter_steps(pool: pd.DataFrame, scores: pd.DataFrame, keep: float) -> pd.DataFrame:
    """The pool's scored steps in pool order with ``jsd`` and ``kept``: the global top ``keep``
    share by score, ties to the earlier step of the pool (fixed before training)."""
    scored = pool[["episode_id", "step_id", "position"]].merge(
        scores[["episode_id", "step_id", "jsd"]],
        on=["episode_id", "step_id"],
        validate="one_to_one",
    )
    scored = scored.sort_values(["position", "step_id"], kind="stable").reset_index(drop=True)
    scored["kept"] = offline.keep_top_fraction(scored["jsd"].to_numpy(), keep)
    logger.info(
        "filter: %d of %d steps kept (keep %s)", int(scored["kept"].sum()), len(scored), keep
    )
    return scored


def run_oel(
    config: AitzConfig,
    initial: CheckpointInfo,
    pool: pd.DataFrame,
    summaries: pd.DataFrame,
    test: pd.DataFrame,
    run: str,
    filtered: pd.DataFrame | None = None,
) -> tuple[CheckpointInfo, pd.DataFrame, pd.DataFrame]:
    """One OEL run from the initial policy (``filtered``: the filter's table; its loss is then
    over kept steps only), in the trainer's own process(es): the staged final checkpoint, the
    per-update metrics and the monitoring curve. A rerun of a killed run continues from its
    last snapshot (in ``staging_dir``, under the engines that give one)."""
    subset = offline.monitoring_subset(
        test, config.offline.monitor_episodes, config.offline.schedule.seed
    )
    kept = None
    if filtered is not None:
        flags = pool[["episode_id", "step_id"]].merge(
            filtered[["episode_id", "step_id", "kept"]], on=["episode_id", "step_id"], how="left"
        )
        kept = flags["kept"].fillna(False).to_numpy(dtype=bool)
    work = _staging(config, run)
    job = GuiTrainJob(
        aitz=config,
        run=run,
        initial=initial.path,
        run_dir=str(work / "run"),
        checkpoint=str(work / "policy"),
        # the same folder for every rerun (not matched by the staging clean-up of `run-`)
        snapshots=str(Path(config.staging_dir) / f"{run}.snapshots"),
    )
    result = launch(job, pool, summaries, subset, kept)
    # the run's configuration and log travel with the model; its inputs are catalog copies
    for path in (result.log_path, Path(job.run_dir) / CONFIG_FILE):
        shutil.copy2(path, Path(job.checkpoint) / path.name)
    shutil.rmtree(job.run_dir)
    return result.checkpoint, result.metrics, result.curve
