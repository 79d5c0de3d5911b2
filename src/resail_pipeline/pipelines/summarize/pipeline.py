"""``summarize``: trajectories + steps (+ the cycle-start policy) -> summaries.

Computed once per cycle; every later node of the cycle reads ``<cycle>.summaries``.
Standalone it summarises cycle 1.
"""

from __future__ import annotations

from kedro.pipeline import Pipeline, node

from resail_pipeline.pipelines.common import POLICY, in_cycle
from resail_pipeline.pipelines.summarize.nodes import summarize_node


def base_pipeline() -> Pipeline:
    return Pipeline(
        [
            node(
                summarize_node,
                inputs=["trajectories", "steps", POLICY, "params:summarize", "params:run"],
                outputs="summaries",
                name="summarize_node",
            )
        ]
    )


def create_pipeline(**kwargs) -> Pipeline:
    return in_cycle(base_pipeline(), 1)
