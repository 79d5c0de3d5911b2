"""The ``report`` pipeline: table 1, the cost table and figures 1a, 3, 5a and 6 from the catalog."""

from resail_pipeline.pipelines.report.pipeline import create_pipeline

__all__ = ["create_pipeline"]
