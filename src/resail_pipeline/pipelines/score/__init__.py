"""The ``score`` pipeline: cycle-start responses and the frozen teacher's PI sensitivity."""

from resail_pipeline.pipelines.score.pipeline import base_pipeline, create_pipeline

__all__ = ["base_pipeline", "create_pipeline"]
