"""Project pipelines, found by folder name under ``pipelines/``."""

from __future__ import annotations

from kedro.framework.project import find_pipelines
from kedro.pipeline import Pipeline


def register_pipelines() -> dict[str, Pipeline]:
    """Every pipeline folder is a ``--pipelines`` name; ``__default__`` is the ``cycle`` pipeline."""
    pipelines = find_pipelines(raise_errors=True)
    pipelines["__default__"] = pipelines.get("cycle", Pipeline([]))
    return pipelines
