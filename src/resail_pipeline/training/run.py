"""One cycle's training in this process: check inputs, load models, train, publish.

Everything that can be checked without a model is checked first: the configuration, the
manifest and the sha256 of every input, the Parquet schemas, the summaries and cached responses.
Only then are the student and the frozen teacher loaded from the cycle-start checkpoint.

Outputs (rank 0): ``train_metrics.parquet``, ``selected_steps.parquet`` and ``probe.parquet``
(the PI-sensitivity probe's rows; empty with the probe off) in ``run.run_dir``, then the final
student as a Hugging Face checkpoint at ``run.checkpoint``, written to a temporary directory and
renamed into place only when complete. A run that fails leaves no checkpoint there. With
``run.snapshots`` set, the run's state is kept there as it goes (``training/snapshots.py``), and a
rerun of a killed run continues from its last snapshot.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch
import torch.distributed as dist
from transformers import AutoConfig, PreTrainedModel

from resail_pipeline.checkpoints import (
    CheckpointInfo,
    bf16_native,
    enable_activation_checkpointing,
    load_model,
    load_policy,
    load_tokenizer,
    read_checkpoint_info,
    save_policy,
)
from resail_pipeline.config import ConfigError
from resail_pipeline.devices import keep_freed_memory
from resail_pipeline.io import write_parquet
from resail_pipeline.prompts import OUTCOME_SUCCESS
from resail_pipeline.schemas import SCHEMAS
from resail_pipeline.training.baselines import CrossEntropyTrainer, GrpoTrainer
from resail_pipeline.training.config import EngineConfig, TrainConfig
from resail_pipeline.training.data import (
    InputError,
    TrainingData,
    batch_schedule,
    build_training_data,
    check_lengths,
    check_token_ids,
    read_manifest,
    read_table,
)
from resail_pipeline.training.engine import Engine, barrier, build_engine, init_distributed
from resail_pipeline.training.probe import ProbeSet, SensitivityProbe, build_probe_set, probe_frame
from resail_pipeline.training.records import UpdateRecord
from resail_pipeline.training.scoring import score_steps
from resail_pipeline.training.snapshots import Snapshots, keeps_snapshots, run_key
from resail_pipeline.training.trainer import Trainer, UpdateLoop
from resail_pipeline.training.views import ResponseLogits

__all__ = [
    "METRICS_FILE",
    "PROBE_FILE",
    "SELECTED_FILE",
    "TrainOutcome",
    "TrainingRun",
    "load_frozen",
    "make_trainer",
    "probe_set_with_frozen",
    "resolve_engine",
    "resolve_engine_for_process",
    "resolve_for_machine",
    "resolve_for_process",
    "score_with_frozen",
]

logger = logging.getLogger(__name__)

METRICS_FILE = "train_metrics.parquet"
SELECTED_FILE = "selected_steps.parquet"
PROBE_FILE = "probe.parquet"


@dataclass(frozen=True)
class TrainOutcome:
    """What a run produced.

    Attributes:
        checkpoint: the published checkpoint's manifest row (rank 0; ``None`` on other ranks).
        metrics: one ``train_metrics`` row per update, each with the cycle's count of
            ``rejected_summaries`` (trajectories left out for want of an accepted summary).
        selected: one ``selected_steps`` row per (update, selected step).
        probe: one probe row per (update, probe step), update 0 being the cycle start; no rows
            with the probe off.
    """

    checkpoint: CheckpointInfo | None
    metrics: pd.DataFrame
    selected: pd.DataFrame
    probe: pd.DataFrame


def resolve_engine(engine: EngineConfig, field: str = "engine") -> EngineConfig:
    """``engine`` with ``auto`` resolved for the GPUs torch sees here (none: the CPU); an error
    names the setting as ``field`` (where the engine sits in its configuration)."""
    cuda = torch.cuda.is_available()
    try:
        return engine.resolve(
            num_gpus=torch.cuda.device_count() if cuda else 0,
            bf16_supported=cuda and bf16_native(torch.device("cuda")),
        )
    except ConfigError as error:
        raise ConfigError(f"{field}.{error}") from None


def resolve_for_machine(config: TrainConfig) -> TrainConfig:
    """``config`` with ``auto`` resolved for the GPUs torch sees here (none: the CPU)."""
    return config.replace(engine=resolve_engine(config.engine))


def load_frozen(path: str, engine: EngineConfig) -> tuple[PreTrainedModel, Any]:
    """A frozen policy (model, tokenizer) on the first GPU if there is one, held as the trainer
    holds its frozen teacher under ``engine`` (resolved): bf16 weights under DeepSpeed in bf16,
    fp32 otherwise. Score its forwards under ``engine.autocast_precision``, as the trainer does,
    so that scores computed outside the trainer (the scores node, the probe set) are its own."""
    dtype = torch.bfloat16 if engine.bf16_parameters else torch.float32
    return load_policy(path, dtype=dtype, device="auto")


def score_with_frozen(
    path: str,
    policy_id: str,
    config: TrainConfig,
    steps: pd.DataFrame,
    summaries: pd.DataFrame,
    responses: pd.DataFrame,
    *,
    micro_batch_steps: int,
) -> pd.DataFrame:
    """:func:`~.scoring.score_steps` with the frozen policy at ``path``, on the device and in the
    precision the trainer (``config``, resolved here) runs it (see :func:`load_frozen`)."""
    config = resolve_for_machine(config)
    model, tokenizer = load_frozen(path, config.engine)
    return score_steps(
        model,
        tokenizer,
        steps,
        summaries,
        responses,
        scorer_id=policy_id,
        top_k=config.resail.top_k,
        micro_batch_steps=micro_batch_steps,
        max_response_tokens=config.responses.max_tokens,
        chunk_size=config.engine.chunk_size,
        precision=config.engine.autocast_precision,
        compile=compiles(config, next(model.parameters()).device),
    )


def probe_set_with_frozen(
    path: str,
    policy_id: str,
    config: TrainConfig,
    trajectories: pd.DataFrame,
    steps: pd.DataFrame,
    experience: pd.DataFrame,
) -> pd.DataFrame:
    """:func:`~.probe.build_probe_set` with the frozen initial policy at ``path``, on the device and
    in the precision the trainer (``config``, resolved here) runs it."""
    config = resolve_for_machine(config)
    model, tokenizer = load_frozen(path, config.engine)
    return build_probe_set(
        model,
        tokenizer,
        trajectories,
        steps,
        experience,
        policy_id=policy_id,
        num_trajectories=config.probe.num_trajectories,
        top_k=config.probe.top_k,
        micro_batch_steps=config.probe.micro_batch_steps,
        chunk_size=config.engine.chunk_size,
        precision=config.engine.autocast_precision,
        compile=compiles(config, next(model.parameters()).device),
    )


def compiles(config: TrainConfig, device: torch.device) -> bool:
    """Whether forwards on ``device`` run compiled under ``config.compile`` (``auto``: on a CPU
    with a C++ compiler; see :class:`~.views.ResponseLogits`)."""
    from resail_pipeline.generation.transformers_backend import resolve_compile

    return resolve_compile(config.compile, device)


def resolve_engine_for_process(engine: EngineConfig, field: str = "engine") -> EngineConfig:
    """``engine`` with ``auto`` resolved for this process; checks the world size torchrun gave.
    Errors name the setting as ``field``."""
    launched = int(os.environ.get("WORLD_SIZE", "1"))
    if engine.world_size is None and "WORLD_SIZE" in os.environ:
        engine = engine.replace(world_size=launched)
    if not engine.resolved:
        engine = resolve_engine(engine, field)
    if engine.world_size != launched:
        raise ConfigError(
            f"{field}.world_size: configured {engine.world_size} processes, "
            f"but {launched} were started"
        )
    if engine.kind == "single" and launched > 1:
        raise ConfigError(
            f"{field}.kind: single runs one process; use ddp or deepspeed under torchrun"
        )
    return engine


def resolve_for_process(config: TrainConfig) -> TrainConfig:
    """``config`` with ``auto`` resolved for this process; checks the world size torchrun gave."""
    return config.replace(engine=resolve_engine_for_process(config.engine))


class TrainingRun:
    """One cycle's training on this rank: inputs checked, models loaded, engine built.

    Args:
        config: the configuration (``run.manifest``, ``run.checkpoint`` and ``run.run_dir`` set).
    """

    def __init__(self, config: TrainConfig) -> None:
        config.run.check_set()
        if not config.trains:
            raise ConfigError(
                f"method: {config.method!r} is the initial policy and never trains; its results "
                "are cycle 0's evaluation"
            )
        config = resolve_for_process(config)
        self.config = config
        self.rank, self.world_size, self.device = init_distributed(config.engine.kind)
        if self.device.type == "cpu":  # activations are host memory: reuse it step after step
            keep_freed_memory()

        # inputs, before any model is loaded: rank 0 checks every file against its sha256 (the
        # policy's weights are 8-16 GB at the paper's scale), the other ranks wait for it
        manifest = read_manifest(config.run.manifest, verify=self.rank == 0)
        if self.world_size > 1:
            barrier(self.device)
        if config.uses_cached_responses and manifest.responses is None:
            raise InputError(
                f"responses: method {config.method!r} trains on responses cached at cycle start; "
                f"the manifest {config.run.manifest} lists none"
            )
        self.manifest = manifest
        self.parent = read_checkpoint_info(manifest.policy, known_sha256=manifest.sha256["policy"])
        self.tokenizer = load_tokenizer(manifest.policy)
        responses = None
        if config.uses_cached_responses:
            responses = read_table(manifest.responses, "responses")
        self.data = build_training_data(
            read_table(manifest.steps, "steps"),
            read_table(manifest.summaries, "summaries"),
            self.tokenizer,
            responses=responses,
            logged_responses=config.response_source == "logged",
            outcome=OUTCOME_SUCCESS if config.successes_only else None,
            max_response_tokens=config.responses.max_tokens,
            sources=manifest.files(),
        )
        model_config = AutoConfig.from_pretrained(manifest.policy, trust_remote_code=False)
        check_token_ids(self.data, model_config.vocab_size)
        check_lengths(self.data, model_config.max_position_embeddings, config.responses.max_tokens)
        probe_set = None
        if config.probe.enabled:
            probe_set = _read_probe_set(config, manifest.probe)
            probe_set.check(model_config.vocab_size, model_config.max_position_embeddings)
        schedule = config.schedule
        self.schedule: list[tuple[str, ...]] = []
        if self.data.trajectories:
            self.schedule = batch_schedule(
                self.data.trajectories,
                schedule.updates,
                schedule.trajectories_per_update,
                schedule.seed,
            )
        else:  # RFT and GRPO learn from successes only
            logger.warning(
                "%s: the corpus has no successful trajectory to learn from; the cycle-start "
                "policy is published unchanged",
                config.method,
            )

        # models: the student starts from the cycle-start policy; the distillation methods' frozen
        # teacher is that policy too, GRPO's frozen KL reference is the initial policy
        torch.manual_seed(schedule.seed)
        engine_config = config.engine
        dtype = torch.bfloat16 if engine_config.bf16_parameters else torch.float32
        student = load_model(manifest.policy, dtype=dtype)
        if engine_config.gradient_checkpointing:
            enable_activation_checkpointing(student)
        student.train()
        # resolved for the device the models run on (the student is moved there by the engine)
        compiled = compiles(config, self.device)
        frozen = None
        if config.distills or config.parent == "grpo":
            path = manifest.policy if config.distills else (manifest.reference or manifest.policy)
            frozen = ResponseLogits(
                load_model(path, dtype=dtype, device=self.device), compile=compiled
            )
        functional = engine_config.functional_student
        engine = build_engine(
            ResponseLogits(student, compile=compiled and functional, functional=functional),
            engine_config,
            config.optimizer,
            rank=self.rank,
            world_size=self.world_size,
            device=self.device,
        )
        generator = None
        if config.samples_responses:
            from resail_pipeline.generation.transformers_backend import TransformersGenerator

            generator = TransformersGenerator(
                engine.sampling_model(),
                self.tokenizer,
                policy_id=f"{self.parent.policy_id}+{config.method}",
                batch_size=config.responses.batch_size,
                max_batch_tokens=config.responses.max_batch_tokens,
                compile=compiled,
                cuda_graphs=config.responses.cuda_graphs,
                progress=False,
            )
        self.trainer = make_trainer(config, self.data, engine, self.tokenizer, frozen, generator)
        self.probe = None
        if probe_set is not None:
            self.probe = SensitivityProbe(
                probe_set,
                engine,
                pad_id=self.tokenizer.pad_token_id,
                micro_batch_steps=config.probe.micro_batch_steps,
                chunk_size=engine_config.chunk_size,
            )
        self.snapshots = None
        if keeps_snapshots(config.run.snapshots, engine, engine_config.kind) and self.schedule:
            self.snapshots = Snapshots(
                config.run.snapshots,
                run_key(config, self.world_size, dict(manifest.sha256)),
                every=config.snapshot_every,
                updates=len(self.schedule),
                engine=engine,
                probe=self.probe,
            )
        logger.info(
            "%s on %d trajectories (%d steps): %d updates x %d, engine %s x %d, %s",
            config.method,
            len(self.data.trajectories),
            self.data.num_steps,
            schedule.updates,
            schedule.trajectories_per_update,
            engine_config.kind,
            self.world_size,
            engine_config.precision,
        )

    def run(self) -> TrainOutcome:
        """Train (with the probe as the trainer's hook, if enabled), then publish the metrics, the
        probe's rows and the checkpoint; returns what was written."""
        records = self.trainer.train(
            self.schedule, after_update=self.probe, snapshots=self.snapshots
        )
        metrics, selected = _frames(records)
        # trajectories of the corpus left out because their summary was rejected (every row)
        metrics = metrics.assign(rejected_summaries=self.data.rejected)
        probe = self.probe.frame() if self.probe is not None else probe_frame()
        checkpoint = self._publish(metrics, selected, probe)
        if dist.is_initialized():
            barrier(self.device)
        if self.snapshots is not None:  # published: nothing left to continue
            self.snapshots.remove()
        return TrainOutcome(checkpoint=checkpoint, metrics=metrics, selected=selected, probe=probe)

    def _publish(
        self, metrics: pd.DataFrame, selected: pd.DataFrame, probe: pd.DataFrame
    ) -> CheckpointInfo | None:
        state = self.trainer.engine.consolidated_state_dict()  # a collective under ZeRO-3
        if self.rank != 0:
            return None
        run_dir = Path(self.config.run.run_dir)
        write_parquet(metrics, run_dir / METRICS_FILE)
        write_parquet(selected, run_dir / SELECTED_FILE)
        write_parquet(probe, run_dir / PROBE_FILE)
        model = self.trainer.engine.inner.model
        info = save_policy(
            model,
            self.tokenizer,
            self.config.run.checkpoint,
            name=self.config.run.policy_name,
            parent_id=self.parent.policy_id,
            method=self.config.method,
            cycle=self.config.run.cycle,
            extra={"train_config": self.config.to_dict(), "inputs": dict(self.manifest.sha256)},
            state_dict=state,
        )
        logger.info("published %s at %s", info.policy_id, info.path)
        return info


def make_trainer(
    config: TrainConfig,
    data: TrainingData,
    engine: Engine,
    tokenizer,
    frozen: ResponseLogits | None,
    generator=None,
) -> UpdateLoop:
    """The update loop of ``config.method``: distillation (the teacher ``frozen``), cross-entropy
    (RFT, EPD) or GRPO (the KL reference ``frozen``)."""
    if config.distills:
        return Trainer(config, data, engine, frozen, tokenizer, generator)
    if config.parent == "grpo":
        return GrpoTrainer(config, data, engine, tokenizer, frozen, generator)
    return CrossEntropyTrainer(config, data, engine, tokenizer)


def _read_probe_set(config: TrainConfig, path: str | None) -> ProbeSet:
    """The manifest's probe set, checked against ``probe.top_k``."""
    if path is None:
        raise InputError(
            f"probe: probe.enabled is set, but the manifest {config.run.manifest} lists no probe set"
        )
    probe_set = ProbeSet.from_frame(read_table(path, "probe_set"), source=path)
    if probe_set.top_k != config.probe.top_k:
        raise InputError(
            f"probe.top_k: configured {config.probe.top_k}, but the probe set {path} holds the "
            f"initial model's top-{probe_set.top_k}"
        )
    return probe_set


def _frames(records: list[UpdateRecord]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The ``train_metrics`` and ``selected_steps`` rows; with no update, no rows but the columns."""
    columns = [*SCHEMAS["train_metrics"], "num_trajectories", "grad_norm"]
    metrics = pd.DataFrame([r.metrics_row() for r in records]) if records else None
    if metrics is None:
        metrics = pd.DataFrame(columns=columns)
    selected = pd.DataFrame(
        [row for r in records for row in r.selected_rows()],
        columns=["update", "traj_id", "t", "score"],
    )
    return metrics, selected
