"""The GUI agent's OEL run (section 4.3) in a process of its own, launched as the text trainer is.

One process (CPU, or one device)::

    python -m resail_pipeline.gui.train --config <run_dir>/gui_train.yaml

Data parallel, one process per device (DeepSpeed ZeRO-2 with GPUs; DDP over gloo on CPU)::

    torchrun --standalone --nproc_per_node=8 -m resail_pipeline.gui.train \\
        --config <run_dir>/gui_train.yaml

The configuration is a :class:`GuiTrainJob` in YAML: the ``aitz`` parameters (the engine is
``offline.engine``, the text trainer's :class:`~resail_pipeline.training.config.EngineConfig`),
the initial checkpoint, and the Parquet inputs :func:`prepare` writes into the run directory.
Every rank loads the frozen teacher and the student, builds the engine
(:func:`~resail_pipeline.training.engine.build_engine`) and runs
:func:`~resail_pipeline.gui.offline.train_oel` on its share of each update's steps; rank 0 then
writes the metrics and the curve into the run directory and publishes the student at the
checkpoint path (written whole or not at all). :func:`launch` runs it from the pipeline's node
through :mod:`resail_pipeline.training.launcher` and reads back what rank 0 wrote.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import yaml
from torch.distributed.elastic.multiprocessing.errors import record

from resail_pipeline.checkpoints import (
    CheckpointInfo,
    enable_activation_checkpointing,
    read_checkpoint_info,
)
from resail_pipeline.config import Config, ConfigError, build, model_validator, to_data
from resail_pipeline.devices import off_process
from resail_pipeline.generation.transformers_backend import resolve_dtype
from resail_pipeline.gui import offline
from resail_pipeline.gui.config import AitzConfig
from resail_pipeline.gui.policy import VisionLogits, VisionPolicy
from resail_pipeline.io import atomic_path, sha256_file, write_parquet
from resail_pipeline.training.config import EngineConfig
from resail_pipeline.training.engine import (
    Engine,
    barrier,
    build_engine,
    init_distributed,
    run_rank,
)
from resail_pipeline.training.launcher import (
    ERROR_FILE,
    LOG_FILE,
    Job,
    job_env,
    module_command,
    run_job,
)
from resail_pipeline.training.run import resolve_engine, resolve_engine_for_process
from resail_pipeline.training.snapshots import (
    Snapshots,
    computed_engine,
    keeps_snapshots,
    settings_key,
)

__all__ = [
    "CONFIG_FILE",
    "CURVE_FILE",
    "METRICS_FILE",
    "GuiTrainJob",
    "GuiTrainResult",
    "job_key",
    "launch",
    "prepare",
    "train",
]

logger = logging.getLogger(__name__)

CONFIG_FILE = "gui_train.yaml"
#: where the run's engine sits in the configuration (named by its errors)
ENGINE_FIELD = "aitz.offline.engine"
METRICS_FILE = "train_metrics.parquet"
CURVE_FILE = "curve.parquet"
#: the run's inputs in the run directory: the pool (with the filter's ``kept`` column for the
#: filtered run), the summaries and the monitoring subset
POOL_FILE, SUMMARIES_FILE, MONITOR_FILE = "pool.parquet", "summaries.parquet", "monitor.parquet"


class GuiTrainJob(Config):
    """One OEL run of the AITZ experiment, as the trainer process reads it."""

    aitz: AitzConfig
    """The ``aitz`` parameters (``offline.engine`` resolved by :func:`prepare`)."""
    run: str = "oel"
    """``oel`` | ``oel_sgs``: the run's name (the filtered run trains on the pool's kept steps
    only)."""
    initial: str = ""
    """The initial policy's checkpoint: the frozen teacher and the student's start."""
    run_dir: str = ""
    """Where the run's inputs, metrics, curve and log are written."""
    checkpoint: str = ""
    """Where the final student is published."""
    snapshots: str = ""
    """Where the run keeps its snapshots, the same for every rerun, so that one continues where a
    killed run stopped (training/snapshots.py); empty: none."""

    @model_validator(mode="after")
    def _paths(self) -> GuiTrainJob:
        for name in ("initial", "run_dir", "checkpoint"):
            if not getattr(self, name):
                raise ConfigError(f"{name}: required path, got {getattr(self, name)!r}")
        return self

    @property
    def engine(self) -> EngineConfig:
        return self.aitz.offline.engine

    def to_yaml(self, path: Path) -> Path:
        with atomic_path(path) as tmp:
            tmp.write_text(yaml.safe_dump(to_data(self), sort_keys=False))
        return path

    @classmethod
    def from_yaml(cls, path: str | Path) -> GuiTrainJob:
        return build(cls, yaml.safe_load(Path(path).read_text()) or {}, "")


@dataclass(frozen=True)
class GuiTrainResult:
    """A finished run: the published checkpoint, one row per update, one per monitoring point."""

    checkpoint: CheckpointInfo
    metrics: pd.DataFrame
    curve: pd.DataFrame
    log_path: Path


def prepare(
    job: GuiTrainJob,
    pool: pd.DataFrame,
    summaries: pd.DataFrame,
    monitor: pd.DataFrame,
    kept: np.ndarray | None = None,
) -> Job:
    """Write the inputs and the resolved job into ``job.run_dir``; nothing starts."""
    # no CUDA context in this process
    engine = off_process(resolve_engine, job.engine, ENGINE_FIELD)
    job = job.replace(aitz=job.aitz.replace(offline=job.aitz.offline.replace(engine=engine)))
    run_dir = Path(job.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    pool = pool if kept is None else pool.assign(kept=np.asarray(kept, dtype=bool))
    write_parquet(pool, run_dir / POOL_FILE)
    write_parquet(summaries, run_dir / SUMMARIES_FILE)
    write_parquet(monitor, run_dir / MONITOR_FILE)
    config_path = job.to_yaml(run_dir / CONFIG_FILE)
    error_file = run_dir / ERROR_FILE
    return Job(
        job,
        module_command(engine, "resail_pipeline.gui.train", config_path, run_dir),
        job_env(error_file),
        run_dir / LOG_FILE,
        error_file,
    )


def launch(
    job: GuiTrainJob,
    pool: pd.DataFrame,
    summaries: pd.DataFrame,
    monitor: pd.DataFrame,
    kept: np.ndarray | None = None,
) -> GuiTrainResult:
    """Run the trainer for ``job`` in a subprocess (``python -m``, or torchrun for ``ddp`` and
    ``deepspeed``) and read back what it published.

    Raises:
        TrainingFailed: the trainer exited non-zero (nothing was published at the checkpoint).
    """
    prepared = prepare(job, pool, summaries, monitor, kept)
    run_job(prepared)
    run_dir = Path(job.run_dir)
    return GuiTrainResult(
        checkpoint=read_checkpoint_info(job.checkpoint),
        metrics=pd.read_parquet(run_dir / METRICS_FILE),
        curve=pd.read_parquet(run_dir / CURVE_FILE),
        log_path=prepared.log_path,
    )


def train(job: GuiTrainJob) -> CheckpointInfo | None:
    """The run on this rank (see the module docstring); the published checkpoint on rank 0."""
    config = job.aitz
    engine_config = resolve_engine_for_process(job.engine, ENGINE_FIELD)
    rank, world_size, device = init_distributed(engine_config.kind)
    run_dir = Path(job.run_dir)
    pool = pd.read_parquet(run_dir / POOL_FILE)
    kept = pool.pop("kept").to_numpy(dtype=bool) if "kept" in pool.columns else None
    summaries = pd.read_parquet(run_dir / SUMMARIES_FILE)
    subset = pd.read_parquet(run_dir / MONITOR_FILE)
    root = Path(config.data.root)

    torch.manual_seed(config.offline.schedule.seed)
    # DeepSpeed in bf16 holds bf16 parameters (fp32 optimiser state); the other engines train
    # the model in the dtype the policy is loaded in (initial.dtype), as one process always has
    if engine_config.bf16_parameters:
        dtype = torch.bfloat16
    elif engine_config.kind == "deepspeed":
        dtype = torch.float32
    else:
        dtype = resolve_dtype(config.initial.dtype, device)
    teacher = VisionPolicy.load(job.initial, device, dtype)
    student = VisionPolicy.load(job.initial, device, dtype)
    teacher.batch_size = student.batch_size = config.initial.batch_size
    teacher.model.requires_grad_(False)
    if engine_config.gradient_checkpointing:
        enable_activation_checkpointing(student.model)
    engine = build_engine(
        VisionLogits(student.model),
        engine_config,
        config.offline.optimizer,
        rank=rank,
        world_size=world_size,
        device=device,
    )
    student.model = engine.sampling_model()
    curve = offline.MonitoredCurve()
    snapshots = _snapshots(job, engine, world_size, curve)
    logger.info(
        "%s on %d steps of %d episodes: %d updates x %d, engine %s x %d, %s",
        job.run,
        len(pool),
        pool["episode_id"].nunique(),
        config.offline.schedule.updates,
        config.offline.schedule.trajectories_per_update,
        engine_config.kind,
        world_size,
        engine_config.precision,
    )
    metrics, monitored = offline.train_oel(
        student,
        teacher,
        pool,
        summaries,
        kept,
        lambda policy, r, w: offline.monitor_hits(
            policy, subset, root, config.offline, rank=r, world_size=w
        ),
        root,
        config.offline,
        run=job.run,
        engine=engine,
        snapshots=snapshots,
        curve=curve,
    )
    info = None
    if rank == 0:
        write_parquet(metrics, run_dir / METRICS_FILE)
        write_parquet(monitored, run_dir / CURVE_FILE)
        parent = read_checkpoint_info(job.initial)
        info = student.save(
            job.checkpoint,
            name=f"aitz-{job.run}",
            parent_id=parent.policy_id,
            method=job.run,
            cycle=1,
        )
        logger.info("published %s at %s", info.policy_id, info.path)
    if world_size > 1:
        barrier(device)
    if snapshots is not None:  # published: nothing left to continue
        snapshots.remove()
    return info


def _snapshots(
    job: GuiTrainJob, engine: Engine, world_size: int, curve: offline.MonitoredCurve
) -> Snapshots | None:
    """The run's snapshots at ``job.snapshots`` (``None`` without, or under an engine whose
    optimiser state is partitioned: DeepSpeed), keyed to the job and its inputs' contents."""
    if not keeps_snapshots(job.snapshots, engine, job.engine.kind):
        return None
    run_dir = Path(job.run_dir)
    inputs = {
        name: sha256_file(run_dir / name) for name in (POOL_FILE, SUMMARIES_FILE, MONITOR_FILE)
    }
    inputs["initial"] = read_checkpoint_info(job.initial).sha256
    offline_config = job.aitz.offline
    return Snapshots(
        job.snapshots,
        job_key(job, world_size, inputs),
        every=offline_config.snapshot_every,
        updates=offline_config.schedule.updates,
        engine=engine,
        probe=curve,
        read_record=dict,
    )


def job_key(job: GuiTrainJob, world_size: int, inputs: dict[str, str]) -> str:
    """What a snapshot of ``job`` must have been taken under to be continued
    (:func:`~resail_pipeline.training.snapshots.settings_key`): the job without its paths, the
    snapshot frequency and how its processes are launched, the world size, and the inputs'
    sha256."""
    settings = to_data(job)
    for name in ("run_dir", "checkpoint", "snapshots"):
        settings.pop(name)
    offline = settings["aitz"]["offline"]
    offline.pop("snapshot_every")
    offline["engine"] = computed_engine(offline["engine"])
    return settings_key(settings, world_size, inputs)


@record  # an error ends in TORCHELASTIC_ERROR_FILE; torchrun reports the first failing rank's
def main(argv: list[str] | None = None) -> int:
    return run_rank(
        argv,
        prog="python -m resail_pipeline.gui.train",
        description=__doc__.split("\n\n")[0],
        config_help="the run's GuiTrainJob YAML file",
        start=lambda path: train(GuiTrainJob.from_yaml(path)),
    )


if __name__ == "__main__":
    sys.exit(main())
