"""Where GPU work runs: the devices a process may use, memory handed back, work kept off-process.

A GPU process's CUDA context holds memory on its device until the process ends. The Kedro process
runs the trainer's ``torchrun`` between other nodes, so it never creates one itself: generation
runs in worker processes (:mod:`~resail_pipeline.generation.sharded`), and the nodes that load a
model to score run it through :func:`off_process`, which on a GPU machine executes the function in
a fresh process and returns its result.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from typing import Any, TypeVar

import torch

__all__ = ["off_process", "release_device_memory", "visible_devices"]

R = TypeVar("R")


def visible_devices() -> list[str]:
    """The CUDA devices this process may use, as ``CUDA_VISIBLE_DEVICES`` names them (``[]``
    without CUDA), found without creating a CUDA context."""
    if not torch.cuda.is_available():
        return []
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed:
        return [d.strip() for d in listed.split(",") if d.strip()]
    return [str(i) for i in range(torch.cuda.device_count())]


def release_device_memory() -> None:
    """Hand the CUDA caching allocator's free blocks back to the driver (nothing without CUDA)."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        gc.collect()
        torch.cuda.empty_cache()


def off_process(function: Callable[..., R], *args: Any, **kwargs: Any) -> R:
    """``function(*args, **kwargs)``; on a machine with a GPU, in a fresh (spawned) process whose
    CUDA context ends with it. ``function`` must be importable by name, its arguments and result
    picklable (data frames and plain values: they cross a pipe, nothing is stored)."""
    if not visible_devices():
        return function(*args, **kwargs)
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as worker:
        return worker.submit(function, *args, **kwargs).result()
