"""``aitz``: PI sensitivity as an offline filter on AITZ (OEL vs OEL + SGS, figure 5b)."""

from __future__ import annotations

from kedro.pipeline import Pipeline, node

from resail_pipeline.pipelines.aitz.nodes import (
    diagnose_node,
    episodes_node,
    filter_node,
    initial_policy_node,
    pool_node,
    report_node,
    score_node,
    summarize_node,
    train_node,
)

INITIAL = "aitz.initial.checkpoint"


def create_pipeline(**kwargs) -> Pipeline:
    common = ["aitz.pool", "aitz.summaries", "aitz.test_steps", INITIAL, "params:aitz"]
    return Pipeline(
        [
            node(
                episodes_node,
                "params:aitz",
                ["aitz.train_steps", "aitz.test_steps"],
                name="aitz_episodes_node",
            ),
            node(
                pool_node, ["aitz.train_steps", "params:aitz"], "aitz.pool", name="aitz_pool_node"
            ),
            node(
                initial_policy_node,
                ["aitz.train_steps", "aitz.pool", "params:aitz"],
                [INITIAL, "aitz.initial.warm_start"],
                name="aitz_initial_policy_node",
            ),
            node(
                diagnose_node,
                ["aitz.pool", INITIAL, "params:aitz"],
                "aitz.attempts",
                name="aitz_diagnose_node",
            ),
            node(
                summarize_node,
                ["aitz.pool", "aitz.attempts", INITIAL, "params:aitz"],
                "aitz.summaries",
                name="aitz_summarize_node",
            ),
            node(
                score_node,
                ["aitz.pool", "aitz.attempts", "aitz.summaries", INITIAL, "params:aitz"],
                "aitz.scores",
                name="aitz_score_node",
            ),
            node(
                filter_node,
                ["aitz.pool", "aitz.scores", "params:aitz"],
                "aitz.filter",
                name="aitz_filter_node",
            ),
            node(
                train_node,
                common,
                ["aitz.oel.checkpoint", "aitz.oel.train_metrics", "aitz.oel.curve"],
                name="aitz_train_oel_node",
            ),
            node(
                train_node,
                [*common, "aitz.filter"],
                ["aitz.oel_sgs.checkpoint", "aitz.oel_sgs.train_metrics", "aitz.oel_sgs.curve"],
                name="aitz_train_oel_sgs_node",
            ),
            node(
                report_node,
                ["aitz.oel.curve", "aitz.oel_sgs.curve"],
                ["aitz.report.fig5b_accuracy", "aitz.report.accuracy_md"],
                name="aitz_report_node",
            ),
        ]
    )
