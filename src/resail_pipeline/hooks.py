"""Project hooks: cross-cutting concerns kept out of the nodes."""

from __future__ import annotations

import gc
import logging
import time
from typing import Any

import torch
from kedro.framework.hooks import hook_impl

logger = logging.getLogger(__name__)


class NodeTimingHook:
    """Logs each node's wall time, so a long run shows where its time went."""

    def __init__(self) -> None:
        self._started: dict[str, float] = {}

    @hook_impl
    def before_node_run(self, node: Any) -> None:
        self._started[node.name] = time.perf_counter()

    @hook_impl
    def after_node_run(self, node: Any) -> None:
        started = self._started.pop(node.name, None)
        if started is not None:
            logger.info("node %s finished in %.1f s", node.name, time.perf_counter() - started)


class DeviceMemoryHook:
    """Hands the GPU's cached memory back after every node.

    The nodes that load a model in the Kedro process (collection, responses, scoring, evaluation)
    drop it when they return, but torch's caching allocator keeps its blocks reserved; the training
    node's torchrun processes, started later, would find the device that much fuller.
    """

    @hook_impl
    def after_node_run(self, node: Any) -> None:
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            gc.collect()
            torch.cuda.empty_cache()
