"""``train``: the cycle-start policy + steps, summaries (+ cached responses, + the shared probe set,
+ the initial policy) -> checkpoint, train_metrics, selected_steps, probe. Standalone it trains
cycle 1."""

from __future__ import annotations

from kedro.pipeline import Pipeline, node

from resail_pipeline.pipelines.common import POLICY, in_cycle
from resail_pipeline.pipelines.train.nodes import train_node


def base_pipeline() -> Pipeline:
    return Pipeline(
        [
            node(
                train_node,
                inputs=[
                    POLICY,
                    "steps",
                    "summaries",
                    "responses",
                    "probe_set",
                    "initial_policy",
                    "params:train",
                    "params:run",
                ],
                outputs=["checkpoint", "train_metrics", "selected_steps", "probe"],
                name="train_node",
            )
        ]
    )


def create_pipeline(**kwargs) -> Pipeline:
    return in_cycle(base_pipeline(), 1)
