"""Where GPU work runs: the devices a process may use, memory handed back, work kept off-process.

A GPU process's CUDA context holds memory on its device until the process ends. The Kedro process
runs the trainer's ``torchrun`` between other nodes, so it never creates one itself: generation
runs in worker processes (:mod:`~resail_pipeline.generation.sharded`), and the nodes that load a
model to score run it through :func:`off_process`, which on a GPU machine executes the function in
a fresh process and returns its result, or through :func:`in_shards`, which runs one part of the
work per GPU, each in a process of its own. On a CPU, :func:`keep_freed_memory` keeps the memory a
step frees for the next one (a training step's, a generator's forward's). :class:`DeviceMemory`
measures a CUDA device's peak memory while a block runs.
"""

from __future__ import annotations

import ctypes
import gc
import os
import platform
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from typing import Any, TypeVar

import torch

__all__ = [
    "KEEP_FREED_MEMORY_ENV",
    "DeviceMemory",
    "amx_kernels",
    "in_shards",
    "keep_freed_memory",
    "machine_description",
    "machine_header",
    "matmul_rate",
    "matmul_rates",
    "off_process",
    "pin_worker",
    "processor",
    "release_device_memory",
    "separate_compile_cache",
    "visible_devices",
]

R = TypeVar("R")


#: CPU features that decide which kernels run and how they round, strongest first
_ISA_FLAGS = (
    ("amx_bf16", "AMX"),
    ("avx512_bf16", "AVX-512 BF16"),
    ("avx512f", "AVX-512"),
    ("avx2", "AVX2"),
)
#: variables that hold kernels below what the processor has (to stand for an older one)
_ISA_CAPS = ("ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "ATEN_CPU_CAPABILITY")


def _isa_caps() -> list[str]:
    """The variables of :data:`_ISA_CAPS` set in this process, as ``NAME=value``."""
    return [f"{name}={os.environ[name]}" for name in _ISA_CAPS if os.environ.get(name)]


def _cpu() -> tuple[str, set[str]]:
    """The CPU's model name and feature flags (``/proc/cpuinfo``; elsewhere, no flags)."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and value.strip():
                    model = value.strip()
                elif key.strip() == "flags":
                    flags = set(value.split())
                    break
    except OSError:  # not Linux
        pass
    return model, flags


def processor() -> str:
    """The CPU a figure was measured on: model, the instruction sets that decide its kernels, and
    any variable that holds the kernels below them, e.g. ``"Intel(R) Xeon(R) Processor; AMX,
    AVX-512 BF16, AVX-512, AVX2; ONEDNN_MAX_CPU_ISA=AVX2"``."""
    model, flags = _cpu()
    isa = ", ".join(name for flag, name in _ISA_FLAGS if flag in flags) or "ISA unknown"
    return "; ".join([model, isa, *_isa_caps()])


def amx_kernels() -> bool:
    """Whether oneDNN's bf16 kernels use AMX tiles here: the CPU has them and
    ``ONEDNN_MAX_CPU_ISA``, if set, does not hold the kernels below them."""
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA", "").upper()
    return "amx_bf16" in _cpu()[1] and (cap in ("", "ALL", "DEFAULT") or "AMX" in cap)


def separate_compile_cache() -> None:
    """Give compiled kernels a cache of their own where kernels are held below the processor's.

    Inductor keys its on-disk cache without the variables of :data:`_ISA_CAPS`: kernels compiled
    with ``ATEN_CPU_CAPABILITY=avx2`` and loaded by a process without it crashed it (a
    segmentation fault in the first compiled forward). With any of them set, and no cache folder
    chosen, the cache goes to a folder named after them, beside the default one.
    """
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    caps = _isa_caps()
    # inductor itself writes its default into the variable the first time it looks it up
    if (
        caps
        and os.environ.get("TORCHINDUCTOR_CACHE_DIR", default_cache_dir()) == default_cache_dir()
    ):
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = f"{default_cache_dir()}-{'-'.join(caps)}"


def matmul_rate(dtype: torch.dtype, size: int = 2048, seconds: float = 1.0) -> float:
    """Measured FLOP/s of a ``(size, size) @ (size, size)`` product on the CPU in ``dtype``, over
    about ``seconds``. Where one product would take longer than that (bf16 on a processor that
    emulates it), the cube's side is halved until it fits."""
    while True:
        a = torch.randn(size, size).to(dtype)
        b = torch.randn(size, size).to(dtype)
        start = time.perf_counter()
        a @ b  # warm-up: kernel selection, first touch
        if time.perf_counter() - start <= seconds or size <= 128:
            break
        size //= 2
    rounds, start = 0, time.perf_counter()
    while rounds == 0 or time.perf_counter() - start < seconds:
        a @ b
        rounds += 1
    return 2 * size**3 * rounds / (time.perf_counter() - start)


#: the dtypes whose matrix products :func:`matmul_rates` times
GEMM_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def matmul_rates(rounds: int = 3, seconds: float = 0.1) -> dict[torch.dtype, float]:
    """The best of ``rounds`` :func:`matmul_rate` timings of each dtype of :data:`GEMM_DTYPES`,
    the dtypes timed in turn within a round: a single timing can read far below the machine's
    rate (a fresh process's first products, or products timed while another process starts, as
    at the start of a Kedro run)."""
    best = dict.fromkeys(GEMM_DTYPES.values(), 0.0)
    for _ in range(rounds):
        for dtype, rate in best.items():
            best[dtype] = max(rate, matmul_rate(dtype, seconds=seconds))
    return best


def machine_header() -> str:
    """One line for a benchmark's output: the processor, its GEMM rates, the threads."""
    measured = matmul_rates()
    rates = ", ".join(f"{name} {measured[dtype] / 1e9:.0f}" for name, dtype in GEMM_DTYPES.items())
    return (
        f"processor: {processor()}; GEMM GFLOP/s: {rates}; "
        f"{torch.get_num_threads()} torch threads, torch {torch.__version__}"
    )


def machine_description(device: torch.device | None = None) -> str:
    """The CPU (model and instruction sets), thread count and torch build a policy was trained or
    evaluated with (and the GPU, if one): what a manifest records as its machine."""
    gpu = ""
    if device is not None and device.type == "cuda":
        gpu = f"{torch.cuda.get_device_name(device)}, "
    return (
        f"{gpu}{processor()} ({os.cpu_count()} cores), {torch.get_num_threads()} torch threads, "
        f"torch {torch.__version__}, {platform.system()} {platform.release()}"
    )


def visible_devices() -> list[str]:
    """The CUDA devices this process may use, as ``CUDA_VISIBLE_DEVICES`` names them (``[]``
    without CUDA), found without creating a CUDA context."""
    if not torch.cuda.is_available():
        return []
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed:
        return [d.strip() for d in listed.split(",") if d.strip()]
    return [str(i) for i in range(torch.cuda.device_count())]


#: glibc's ``mallopt`` parameters (``malloc.h``)
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4
#: the free memory at the top of the heap that glibc keeps: ``mallopt`` takes an ``int``
_KEPT_TOP = 2**31 - 1
#: the same setting as :func:`keep_freed_memory`, in the environment of a process glibc starts
KEEP_FREED_MEMORY_ENV = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(_KEPT_TOP)}


def keep_freed_memory() -> bool:
    """Have glibc's ``malloc`` keep the memory a process frees for its next allocations.

    By default glibc maps every block above a threshold (at most 32 MB) fresh from the kernel and
    unmaps it when it is freed, and hands the top of its heap back beyond another. On a CPU each
    large activation of a training step (one layer's MLP activations over a teacher's 22,000
    tokens, 22,000 x 768 fp32 values, are 68 MB) is then faulted in again, page by page, zeroed by
    the kernel, at every step (``benchmarks/train_update_cost.py --side-by-side`` times the earlier
    trainer with glibc's default, and with ``--same-allocator`` with this setting:
    docs/training.md). With every block taken from the heap and up to 2 GiB of its free top kept,
    later steps reuse the same pages: the heap grows for the first few steps (a freed block does
    not always fit the next one's alignment) until its free blocks join into ones that do, and the
    resident set then stays near that peak instead of falling between steps. A generator on a CPU
    sets it too, for the same page faults in its forwards (an evaluation with and without it:
    docs/generation.md, "Choosing the dtype"). Process-wide; returns whether glibc took the
    setting (``False`` with another C library, where nothing changes).
    """
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc (macOS, Windows)
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, _KEPT_TOP))


def release_device_memory() -> None:
    """Hand the CUDA caching allocator's free blocks back to the driver (nothing without CUDA)."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        gc.collect()
        torch.cuda.empty_cache()


class DeviceMemory:
    """Peak memory of a CUDA device while a block runs (nothing on the CPU).

    Two figures: the device's used memory (every process on it, the trainer's subprocesses
    included), polled every ``interval`` seconds, and this process's peak allocation by torch.
    """

    def __init__(self, device: Any, interval: float = 0.1) -> None:
        self.device = device
        self.interval = interval
        self.before_mib = self.peak_mib = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    def _used_mib(self) -> float:
        free, total = torch.cuda.mem_get_info(self.device)
        return (total - free) / 2**20

    def _poll(self) -> None:
        while not self._stop.wait(self.interval):
            self.peak_mib = max(self.peak_mib, self._used_mib())

    def __enter__(self) -> DeviceMemory:
        if self.cuda:
            torch.cuda.reset_peak_memory_stats(self.device)
            self.before_mib = self.peak_mib = self._used_mib()
            self._thread = threading.Thread(target=self._poll, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self.peak_mib = max(self.peak_mib, self._used_mib())

    def figures(self) -> dict[str, float] | None:
        """``device_used_before``, ``device_used_peak`` and ``process_allocated_peak`` in MiB."""
        if not self.cuda:
            return None
        return {
            "device_used_before": round(self.before_mib, 1),
            "device_used_peak": round(self.peak_mib, 1),
            "process_allocated_peak": round(
                torch.cuda.max_memory_allocated(self.device) / 2**20, 1
            ),
        }


def off_process(function: Callable[..., R], *args: Any, **kwargs: Any) -> R:
    """``function(*args, **kwargs)``; on a machine with a GPU, in a fresh (spawned) process whose
    CUDA context ends with it. ``function`` must be importable by name, its arguments and result
    picklable (data frames and plain values: they cross a pipe, nothing is stored)."""
    if not visible_devices():
        return function(*args, **kwargs)
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as worker:
        return worker.submit(function, *args, **kwargs).result()


def pin_worker(device: str | None, threads: int) -> None:
    """Initialiser of a worker process: it sees only GPU ``device`` (``None``: no GPU) and computes
    on ``threads`` CPU threads (its share of the cores)."""
    if device is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = device
    torch.set_num_threads(threads)


def in_shards(
    function: Callable[..., R], parts: Sequence[tuple[Any, ...]], **kwargs: Any
) -> list[R]:
    """``[function(*part, **kwargs) for part in parts]``, the parts at once, each in a fresh
    (spawned) process of its own: part ``k`` on the ``k``-th visible GPU, or, without GPUs, on its
    share of the CPU cores. As for :func:`off_process`, ``function`` must be importable by name
    and what crosses the pipe picklable."""
    devices = visible_devices()
    if not parts:
        return []
    if devices and len(parts) > len(devices):
        raise ValueError(f"shards: {len(parts)} parts but {len(devices)} GPU(s) visible")
    threads = max(1, (os.cpu_count() or 1) // len(parts))
    context = get_context("spawn")
    workers = [
        ProcessPoolExecutor(
            max_workers=1,
            mp_context=context,
            initializer=pin_worker,
            initargs=(devices[k] if devices else None, threads),
        )
        for k in range(len(parts))
    ]
    try:
        futures = [
            w.submit(function, *part, **kwargs) for w, part in zip(workers, parts, strict=True)
        ]
        return [future.result() for future in futures]
    finally:
        for worker in workers:
            worker.shutdown(wait=True, cancel_futures=True)
