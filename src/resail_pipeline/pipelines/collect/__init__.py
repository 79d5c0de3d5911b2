"""The ``collect`` pipeline: the cycle-start policy acts on the cycle's tasks."""

from resail_pipeline.pipelines.collect.pipeline import base_pipeline, create_pipeline

__all__ = ["base_pipeline", "create_pipeline"]
