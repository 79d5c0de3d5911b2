"""Launch the trainer as a subprocess: ``torchrun`` on GPUs or for data parallelism, plain
``python -m`` for one CPU process.

The GUI agent's trainer (:mod:`resail_pipeline.gui.train`) is launched the same way, through
:func:`module_command` and :func:`run_job`.

The launcher resolves the configuration for this machine (``auto`` engine, world size and
precision), writes it into the run directory, streams the trainer's output line by line to the
``logging`` logger and to a log file, and on a non-zero exit raises :class:`TrainingFailed`
carrying the first failure's traceback (the trainer records it in ``error.json``; under torchrun,
the first rank that failed) and the log's last lines, where the ranks' output interleaves. On success it returns the published checkpoint's manifest row, the
run's metrics and the PI-sensitivity probe's rows.
"""

from __future__ import annotations

import collections
import hashlib
import json
import logging
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from resail_pipeline.checkpoints import CheckpointInfo, read_checkpoint_info
from resail_pipeline.devices import off_process
from resail_pipeline.io import tied_to_this_process
from resail_pipeline.training.config import EngineConfig, TrainConfig
from resail_pipeline.training.data import read_manifest
from resail_pipeline.training.run import (
    METRICS_FILE,
    PROBE_FILE,
    SELECTED_FILE,
    resolve_for_machine,
)

__all__ = [
    "CONFIG_FILE",
    "ERROR_FILE",
    "LOG_FILE",
    "Job",
    "TrainResult",
    "TrainingFailed",
    "collect",
    "command",
    "first_failure",
    "job_env",
    "launch",
    "module_command",
    "prepare",
    "run_job",
]

logger = logging.getLogger(__name__)

CONFIG_FILE = "train_config.yaml"
LOG_FILE = "train.log"
#: where the trainer (every rank under torchrun: the first failure) records an uncaught error
ERROR_FILE = "error.json"


class TrainingFailed(RuntimeError):
    """The trainer exited non-zero; the message carries the last lines of its log."""


@dataclass(frozen=True)
class TrainResult:
    """A finished training run.

    Attributes:
        checkpoint: the new checkpoint's manifest row (path, parent, method, cycle, sha256).
        metrics: one ``train_metrics`` row per update.
        selected: one ``selected_steps`` row per (update, selected step).
        probe: one probe row per (update, probe step), update 0 being the cycle start; no rows
            with the probe off.
        config: the resolved configuration the trainer ran with.
        log_path: the trainer's log.
    """

    checkpoint: CheckpointInfo
    metrics: pd.DataFrame
    selected: pd.DataFrame
    probe: pd.DataFrame
    config: TrainConfig
    log_path: Path


def command(config: TrainConfig, config_path: str | Path) -> list[str]:
    """The trainer's command line for a resolved ``config`` (:func:`module_command` of
    ``resail_pipeline.training``)."""
    return module_command(
        config.engine, "resail_pipeline.training", config_path, config.run.run_dir
    )


def module_command(
    engine: EngineConfig, module: str, config_path: str | Path, run_dir: str | Path
) -> list[str]:
    """The command line of the trainer ``module`` (``--config config_path``) under a resolved
    ``engine``.

    ``single`` runs ``python -m <module>``; ``ddp`` and ``deepspeed`` run the same module under
    torchrun: ``--standalone`` on one node, else an agent per node that meets the others at
    ``engine.rdzv_endpoint`` (c10d, its id from ``run_dir``), behind ``engine.launcher`` (e.g.
    ``srun``).
    """
    if not engine.resolved:
        raise ValueError("config: resolve the engine before building its command")
    entry = ["-m", module, "--config", str(config_path)]
    if engine.kind == "single":
        return [sys.executable, *entry]
    torchrun = [sys.executable, "-m", "torch.distributed.run"]
    if engine.nodes == 1:
        torchrun += ["--standalone"]
    else:
        run_id = hashlib.sha256(str(Path(run_dir).resolve()).encode()).hexdigest()
        torchrun += [
            f"--nnodes={engine.nodes}",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint={engine.rdzv_endpoint}",
            f"--rdzv-id={run_id[:16]}",
        ]
    return [*engine.launcher, *torchrun, f"--nproc_per_node={engine.processes_per_node}", *entry]


def first_failure(error_file: Path, max_lines: int = 30) -> str:
    """The recorded error's traceback (its last ``max_lines`` lines) as a message part, or ``""``
    where none was recorded (a process killed by a signal writes none)."""
    try:
        message = json.loads(error_file.read_text())["message"]
    except (OSError, ValueError, KeyError, TypeError):
        return ""
    if isinstance(message, str):  # torchrun's own errors are recorded as plain text
        return f"; first failure: {message}"
    stack = str(message.get("extraInfo", {}).get("py_callstack", "")).rstrip().splitlines()
    return f"; first failure ({error_file}):\n" + "\n".join(stack[-max_lines:])


@dataclass(frozen=True)
class Job:
    """A training run ready to start: its resolved configuration (written into the run directory;
    a :class:`TrainConfig`, or the GUI trainer's job), the command, the environment, and where its
    log and recorded error go."""

    config: Any
    command: list[str]
    env: dict[str, str]
    log_path: Path
    error_file: Path


def prepare(config: TrainConfig, log_path: str | Path | None = None) -> Job:
    """Check the manifest, resolve ``config`` for this machine and write it; nothing starts."""
    config.run.check_set()
    read_manifest(config.run.manifest, verify=False)  # exists and parses, before anything starts
    resolved = off_process(resolve_for_machine, config)  # no CUDA context in this process
    run_dir = Path(resolved.run.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    config_path = resolved.to_yaml(run_dir / CONFIG_FILE)
    log_path = Path(log_path) if log_path is not None else run_dir / LOG_FILE
    log_path.parent.mkdir(parents=True, exist_ok=True)
    error_file = run_dir / ERROR_FILE
    return Job(resolved, command(resolved, config_path), job_env(error_file), log_path, error_file)


#: the trainer's CUDA allocator: segments that grow in place instead of new blocks beside freed
#: ones of another size (without them, fragmentation took a large part of the memory plan's
#: margin on an H200: docs/gpu.md, :data:`~.memory.USABLE_SHARE`)
ALLOCATOR_CONF = "expandable_segments:True"


def job_env(error_file: Path) -> dict[str, str]:
    """The trainer's environment: this one, unbuffered, with torchrun's error file at
    ``error_file`` (removed first: a rerun's failure is its own), and, unless the environment
    sets the allocator's configuration itself, CUDA's caching allocator on expandable segments
    (:data:`ALLOCATOR_CONF`)."""
    error_file.unlink(missing_ok=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TORCHELASTIC_ERROR_FILE": str(error_file)}
    env.setdefault("TORCH_EXTENSIONS_DIR", str(Path.cwd() / ".cache" / "torch_extensions"))
    env.setdefault("PYTORCH_CUDA_ALLOC_CONF", ALLOCATOR_CONF)
    return env


def collect(job: Job) -> TrainResult:
    """What a finished run published (rank 0, in the run directory and at the checkpoint)."""
    run_dir = Path(job.config.run.run_dir)
    return TrainResult(
        checkpoint=read_checkpoint_info(job.config.run.checkpoint),
        metrics=pd.read_parquet(run_dir / METRICS_FILE),
        selected=pd.read_parquet(run_dir / SELECTED_FILE),
        probe=pd.read_parquet(run_dir / PROBE_FILE),
        config=job.config,
        log_path=job.log_path,
    )


def launch(
    config: TrainConfig, log_path: str | Path | None = None, *, tail_lines: int = 40
) -> TrainResult:
    """Run the trainer for ``config`` in a subprocess and collect what it published.

    Args:
        config: the run's configuration; its manifest must exist (see
            :func:`~resail_pipeline.training.data.write_inputs`).
        log_path: the trainer's log file; default ``<run_dir>/train.log``.
        tail_lines: how many of the log's last lines a failure carries.

    Returns:
        :class:`TrainResult`.

    Raises:
        TrainingFailed: the trainer exited non-zero (nothing was published at the checkpoint path).
    """
    job = prepare(config, log_path)
    run_job(job, tail_lines=tail_lines)
    return collect(job)


def run_job(job: Job, *, tail_lines: int = 40) -> None:
    """Run ``job``'s command, its output streamed to the log file and the logger.

    Raises:
        TrainingFailed: the trainer exited non-zero, with the first failure's traceback and the
            log's last ``tail_lines`` lines.
    """
    logger.info("training: %s (log: %s)", " ".join(job.command), job.log_path)
    tail: collections.deque[str] = collections.deque(maxlen=tail_lines)
    with (
        open(job.log_path, "w") as log,
        subprocess.Popen(
            job.command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=job.env,
            preexec_fn=tied_to_this_process(),  # one prctl call in the child
        ) as process,
    ):
        for line in process.stdout:
            line = line.rstrip("\n")
            log.write(line + "\n")
            log.flush()
            tail.append(line)
            logger.info("[trainer] %s", line)
        returncode = process.wait()
    if returncode != 0:
        raise TrainingFailed(
            f"the trainer exited with status {returncode}"
            + first_failure(job.error_file)
            + f"; last lines of {job.log_path}:\n"
            + "\n".join(tail)
        )
