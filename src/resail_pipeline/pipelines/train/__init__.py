"""The ``train`` pipeline: one cycle of the method, run by the trainer under torchrun."""

from resail_pipeline.pipelines.train.pipeline import base_pipeline, create_pipeline

__all__ = ["base_pipeline", "create_pipeline"]
