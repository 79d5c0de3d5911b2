"""The ``summarize`` pipeline: one experience summary (the PI) per collected trajectory."""

from resail_pipeline.pipelines.summarize.pipeline import base_pipeline, create_pipeline

__all__ = ["base_pipeline", "create_pipeline"]
