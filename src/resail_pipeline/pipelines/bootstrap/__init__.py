"""The ``bootstrap`` pipeline: the initial policy (cycle 0)."""

from resail_pipeline.pipelines.bootstrap.pipeline import create_pipeline

__all__ = ["create_pipeline"]
