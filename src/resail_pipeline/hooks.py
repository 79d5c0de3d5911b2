"""Project hooks: cross-cutting concerns kept out of the nodes."""

from __future__ import annotations

import logging
import time
from typing import Any

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
