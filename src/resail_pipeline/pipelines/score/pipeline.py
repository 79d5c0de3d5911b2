"""``score``: steps + summaries + the cycle-start policy -> responses, scores.

Standalone it scores cycle 1.
"""

from __future__ import annotations

from kedro.pipeline import Pipeline, node

from resail_pipeline.pipelines.common import POLICY, in_cycle
from resail_pipeline.pipelines.score.nodes import respond_node, score_node


def base_pipeline() -> Pipeline:
    return Pipeline(
        [
            node(
                respond_node,
                inputs=[
                    "steps",
                    "summaries",
                    POLICY,
                    "params:train",
                    "params:score",
                    "params:run",
                ],
                outputs="responses",
                name="respond_node",
            ),
            node(
                score_node,
                inputs=[
                    "steps",
                    "summaries",
                    "responses",
                    POLICY,
                    "params:train",
                    "params:score",
                    "params:run",
                ],
                outputs="scores",
                name="score_node",
            ),
        ]
    )


def create_pipeline(**kwargs) -> Pipeline:
    return in_cycle(base_pipeline(), 1)
