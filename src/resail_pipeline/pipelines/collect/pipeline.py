"""``collect``: policy -> tasks, trajectories, steps (standalone: cycle 1 from the initial policy)."""

from __future__ import annotations

from kedro.pipeline import Pipeline, node

from resail_pipeline.pipelines.collect.nodes import collect_node
from resail_pipeline.pipelines.common import POLICY, in_cycle


def base_pipeline() -> Pipeline:
    return Pipeline(
        [
            node(
                collect_node,
                inputs=[POLICY, "params:collect", "params:train", "params:run"],
                outputs=["tasks", "trajectories", "steps"],
                name="collect_node",
            )
        ]
    )


def create_pipeline(**kwargs) -> Pipeline:
    return in_cycle(base_pipeline(), 1)
