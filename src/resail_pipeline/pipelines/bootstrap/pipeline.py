"""``bootstrap``: parameters -> ``cycle_0.checkpoint``, the policy every cycle starts from."""

from __future__ import annotations

from kedro.pipeline import Pipeline, node

from resail_pipeline.pipelines.bootstrap.nodes import bootstrap_node
from resail_pipeline.pipelines.common import cycle_namespace


def create_pipeline(**kwargs) -> Pipeline:
    return Pipeline(
        [
            node(
                bootstrap_node,
                inputs=["params:bootstrap", "params:run"],
                outputs="checkpoint",
                name="bootstrap_node",
            )
        ],
        namespace=cycle_namespace(0),
        parameters={"params:bootstrap", "params:run"},
    )
