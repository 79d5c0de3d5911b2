"""``report``: every evaluation, training metric, probe row and collected trajectory of the
environment -> the report."""

from __future__ import annotations

from kedro.pipeline import Pipeline, node

from resail_pipeline.pipelines.report.nodes import report_node


def create_pipeline(**kwargs) -> Pipeline:
    return Pipeline(
        [
            node(
                report_node,
                inputs=[
                    "report.eval_summaries",
                    "report.eval_results",
                    "report.train_metrics",
                    "report.probe",
                    "report.trajectories",
                    "params:report",
                ],
                outputs=[
                    "report.main_results_md",
                    "report.main_results_csv",
                    "report.paired_differences_md",
                    "report.paired_differences_csv",
                    "report.ablations_md",
                    "report.paper_comparison_md",
                    "report.collection_md",
                    "report.cost_breakdown_md",
                    "report.cost_breakdown_csv",
                    "report.fig1a_success",
                    "report.fig3_dual_view",
                    "report.fig4_sweeps",
                    "report.fig5a_cost",
                    "report.fig6_sensitivity",
                ],
                name="report_node",
            )
        ]
    )
