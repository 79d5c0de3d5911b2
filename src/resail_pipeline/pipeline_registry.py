"""Project pipelines, found by folder name under ``pipelines/``."""

from __future__ import annotations

from importlib import resources

from kedro.framework.project import find_pipelines
from kedro.pipeline import Pipeline


def pipeline_names() -> list[str]:
    """The ``--pipelines`` names: every folder of ``pipelines/`` (as :func:`find_pipelines`
    finds them), and ``__default__``, without importing any of them."""
    package = resources.files("resail_pipeline.pipelines")
    folders = [
        entry.name
        for entry in package.iterdir()
        if entry.is_dir() and not entry.name.startswith((".", "_"))
    ]
    return [*sorted(folders), "__default__"]


def register_pipelines() -> dict[str, Pipeline]:
    """Every pipeline folder is a ``--pipelines`` name; ``__default__`` is the ``cycle`` pipeline."""
    pipelines = find_pipelines(raise_errors=True)
    pipelines["__default__"] = pipelines.get("cycle", Pipeline([]))
    return pipelines
