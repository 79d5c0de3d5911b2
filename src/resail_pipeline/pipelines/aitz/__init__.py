"""The ``aitz`` pipeline: PI sensitivity as an offline data filter for a GUI agent."""

from resail_pipeline.pipelines.aitz.pipeline import create_pipeline

__all__ = ["create_pipeline"]
