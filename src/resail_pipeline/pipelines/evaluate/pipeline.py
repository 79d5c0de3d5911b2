"""``evaluate``: a checkpoint -> eval_results, eval_summary, eval_steps.

``initial_policy_pipeline`` evaluates the initial policy (cycle 0) and builds the fixed Experience
and the PI-sensitivity probe set from its reference episodes; ``base_pipeline`` evaluates a
cycle's final checkpoint. Standalone,
``kedro run --pipelines=evaluate`` does both for cycles 0 and 1; ``--namespaces=cycle_0`` keeps
only the initial policy.
"""

from __future__ import annotations

from kedro.pipeline import Pipeline, node

from resail_pipeline.pipelines.common import cycle_namespace, in_cycle
from resail_pipeline.pipelines.evaluate.nodes import evaluate_node, experience_node, probe_set_node


def base_pipeline() -> Pipeline:
    return Pipeline(
        [
            node(
                evaluate_node,
                inputs=["checkpoint", "experience", "params:evaluate", "params:run"],
                outputs=["eval_results", "eval_summary", "eval_steps"],
                name="evaluate_node",
            )
        ]
    )


def initial_policy_pipeline() -> Pipeline:
    """The fixed Experience, the probe set and the evaluation of the shared initial policy
    (``cycle_0``)."""
    experience = Pipeline(
        [
            node(
                experience_node,
                inputs=["checkpoint", "params:evaluate", "params:summarize", "params:run"],
                outputs=["reference_trajectories", "reference_steps", "experience"],
                name="experience_node",
            ),
            node(
                probe_set_node,
                inputs=[
                    "checkpoint",
                    "reference_trajectories",
                    "reference_steps",
                    "experience",
                    "params:train",
                ],
                outputs="probe_set",
                name="probe_set_node",
            ),
        ]
    )
    return Pipeline(
        experience,
        namespace=cycle_namespace(0),
        parameters={"params:evaluate", "params:summarize", "params:run", "params:train"},
    ) + in_cycle(base_pipeline(), 0)


def create_pipeline(**kwargs) -> Pipeline:
    return initial_policy_pipeline() + in_cycle(base_pipeline(), 1)
