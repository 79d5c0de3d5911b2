"""The ``evaluate`` pipeline: success on the fixed test split, with and without the fixed Experience."""

from resail_pipeline.pipelines.evaluate.pipeline import (
    base_pipeline,
    create_pipeline,
    initial_policy_pipeline,
)

__all__ = ["base_pipeline", "create_pipeline", "initial_policy_pipeline"]
