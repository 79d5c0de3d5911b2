"""The ``cycle`` pipeline: bootstrap, then collect -> summarize -> score -> train -> evaluate per cycle."""

from resail_pipeline.pipelines.cycle.pipeline import create_pipeline

__all__ = ["create_pipeline"]
