"""One generator per GPU of a node, behind the one :class:`~.base.Generator` protocol.

:class:`ShardedGenerator` starts ``shards`` worker processes, each with its own generator of one
backend over the same checkpoint (worker ``k`` sees only the node's ``k``-th GPU), and splits every
``generate`` call over them: contiguous blocks of the prompts, gathered back in order. Every
response draws from its own seed (the call's per-prompt seeds are fixed here, before the split:
:func:`~.base.prompt_seeds`), so the outputs are those one generator gives, whatever the number
of shards. Every rollout and summary goes through ``generate``, so collection, the evaluations,
the fixed Experience's episodes, the summaries and the cached responses all use every GPU, while
the environments stay in the calling process. The calling process (Kedro's) never touches a GPU
itself: the engines, and their CUDA contexts, live and die with the workers.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from resail_pipeline.checkpoints import load_tokenizer, read_checkpoint_info
from resail_pipeline.devices import pin_worker, visible_devices
from resail_pipeline.generation.base import Generation, Generator, SamplingParams, prompt_seeds
from resail_pipeline.io import die_with

__all__ = ["ShardedGenerator"]

logger = logging.getLogger(__name__)

#: the worker's generator, built by :func:`_start` when its process starts
_GENERATOR: Generator | None = None


def _start(
    backend: str,
    path: str,
    policy_id: str,
    options: dict[str, Any],
    device: str | None,
    threads: int,
    parent: int,
) -> None:
    """Worker initialiser: die with ``parent`` (the process that started it, however that one
    dies), pin the worker to its GPU (or its share of the CPU cores), then build its generator."""
    global _GENERATOR
    die_with(parent)
    pin_worker(device, threads)
    from resail_pipeline.generation import make_generator

    _GENERATOR = make_generator(backend, path, policy_id=policy_id, **options)


def _generate(prompts: list[str], params: SamplingParams, seeds: list[int]) -> list[Generation]:
    assert _GENERATOR is not None, "the worker's generator was not started"
    return _GENERATOR.generate(prompts, params, seeds=seeds)


def _stop() -> None:
    if _GENERATOR is not None:
        _GENERATOR.close()


class ShardedGenerator(Generator):
    """``shards`` generators of ``backend`` over ``path``, one worker process each.

    Args:
        backend: a registered backend name (``transformers``, ``vllm``).
        path: the checkpoint directory.
        shards: worker processes; with GPUs, at most one per visible GPU.
        policy_id: recorded with every response (default: the checkpoint's manifest's).
        options: the backend's options (``run.generation.<backend>``), given to every worker.
    """

    def __init__(
        self,
        backend: str,
        path: str | Path,
        *,
        shards: int,
        policy_id: str | None = None,
        **options: Any,
    ) -> None:
        if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
            raise ValueError(f"shards: must be a positive integer, got {shards!r}")
        devices = visible_devices()
        if devices and shards > len(devices):
            raise ValueError(f"shards: {shards} generators but {len(devices)} GPU(s) visible")
        self.policy_id = policy_id or read_checkpoint_info(path).policy_id
        self.tokenizer = load_tokenizer(path)
        self.shards = shards
        threads = max(1, (os.cpu_count() or 1) // shards)
        logger.info(
            "generation: %d %s workers over %s%s",
            shards,
            backend,
            path,
            f" (GPUs {', '.join(devices[:shards])})" if devices else "",
        )
        context = get_context("spawn")  # a fresh interpreter: no CUDA state inherited
        self._workers: list[ProcessPoolExecutor] | None = [
            ProcessPoolExecutor(
                max_workers=1,
                mp_context=context,
                initializer=_start,
                initargs=(
                    backend,
                    str(path),
                    self.policy_id,
                    dict(options),
                    devices[k] if devices else None,
                    threads,
                    os.getpid(),
                ),
            )
            for k in range(shards)
        ]

    def generate(
        self,
        prompts: Sequence[str],
        params: SamplingParams,
        seeds: Sequence[int] | None = None,
    ) -> list[Generation]:
        """``len(prompts) * params.n`` generations, prompt-major: each shard's contiguous block of
        the prompts, with the per-prompt seeds of the whole call."""
        if self._workers is None:
            raise RuntimeError(f"generator of {self.policy_id}: closed")
        seeds = prompt_seeds(len(prompts), params, seeds)  # fixed for the whole call, then split
        size = -(-len(prompts) // self.shards)  # ceil: the first shards take one more
        futures: list[Future] = []
        for k, worker in enumerate(self._workers):
            block = slice(k * size, (k + 1) * size)
            if prompts[block]:
                futures.append(
                    worker.submit(_generate, list(prompts[block]), params, list(seeds[block]))
                )
        try:
            return [generation for future in futures for generation in future.result()]
        except BrokenProcessPool:
            raise RuntimeError(
                f"generation of {self.policy_id}: a worker process failed to start or died; "
                "its own error is in the log above"
            ) from None

    def close(self) -> None:
        """Close every worker's generator, then end the workers."""
        if self._workers is None:
            return
        workers, self._workers = self._workers, None
        for future in [worker.submit(_stop) for worker in workers]:
            future.result()
        for worker in workers:
            worker.shutdown(wait=True)
