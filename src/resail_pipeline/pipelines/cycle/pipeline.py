"""The main job: the five stages of a cycle unrolled for cycles 1..N under ``cycle_1`` .. ``cycle_N``.

Cycle ``r`` starts from ``cycle_<r-1>.checkpoint`` (``cycle_0`` is the initial policy written by
``bootstrap``) and publishes ``cycle_<r>.checkpoint``, so kedro-viz draws one lineage from the
initial policy to the last evaluation. The initial policy is evaluated too (``cycle_0.eval_*``,
with the fixed Experience built from its reference episodes), so that every method's curve starts
from the shared initial model.

The number of cycles shapes the graph, so it is fixed when pipelines are registered:
``RESAIL_CYCLES`` (default 3, the paper's), e.g. ``RESAIL_CYCLES=5 kedro run --pipelines=cycle``.
"""

from __future__ import annotations

import os

from kedro.pipeline import Pipeline

from resail_pipeline.config import ConfigError
from resail_pipeline.pipelines import bootstrap, collect, evaluate, score, summarize, train
from resail_pipeline.pipelines.common import in_cycle

DEFAULT_CYCLES = 3


def num_cycles() -> int:
    """``RESAIL_CYCLES`` (default :data:`DEFAULT_CYCLES`); anything but a positive integer raises
    a :class:`~resail_pipeline.config.ConfigError` naming the variable."""
    value = os.environ.get("RESAIL_CYCLES", str(DEFAULT_CYCLES))
    if not value.isdigit() or int(value) < 1:
        raise ConfigError(f"RESAIL_CYCLES: expected a positive integer, got {value!r}")
    return int(value)


def cycle_stages() -> Pipeline:
    """One cycle over un-namespaced names: ``policy`` in, ``checkpoint`` and evaluation out."""
    return (
        collect.base_pipeline()
        + summarize.base_pipeline()
        + score.base_pipeline()
        + train.base_pipeline()
        + evaluate.base_pipeline()
    )


def create_pipeline(**kwargs) -> Pipeline:
    stages = cycle_stages()
    cycles = sum((in_cycle(stages, r) for r in range(1, num_cycles() + 1)), Pipeline([]))
    return bootstrap.create_pipeline() + evaluate.initial_policy_pipeline() + cycles
