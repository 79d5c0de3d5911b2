"""The report: table 1 in the paper's format, the cost table, and the four figures."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from matplotlib.container import BarContainer, ErrorbarContainer

from resail_pipeline.config import ConfigError
from resail_pipeline.datasets import FigureDataset
from resail_pipeline.evaluation.report import (
    COST_COMPONENTS,
    PAPER_TABLES,
    ablation_table,
    collection_table,
    comparisons,
    cost_figure,
    cost_table,
    dual_view_figure,
    format_cell,
    main_results_table,
    paired_differences_table,
    paper_comparison,
    paper_figures,
    rejected_summaries_note,
    sensitivity_figure,
    sensitivity_per_update,
    success_figure,
    table_to_markdown,
    training_seeds_table,
)
from resail_pipeline.evaluation.stats import mean_and_sd
from resail_pipeline.schemas import SCHEMAS, SchemaError

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def summary_row(
    experiment: str,
    method: str,
    cycle: int,
    per_seed: list[float],
    env: str = "textcraft",
    split: str = "test",
    view: str = "ordinary",
) -> dict:
    """One ``eval_summary`` row; cycle 0 rows are the initial checkpoint ``initial@0``."""
    mean, sd = mean_and_sd(per_seed)
    return {
        "policy_id": "initial@0" if cycle == 0 else f"{experiment}-{cycle}@0",
        "cycle": cycle,
        "method": method,
        "env": env,
        "split": split,
        "view": view,
        "success_per_seed": per_seed,
        "mean": mean,
        "sd": sd,
        "episodes": 10 * len(per_seed),
        "experiment": experiment,
    }


@pytest.fixture()
def eval_summary() -> pd.DataFrame:
    """A hand-written example: two benchmarks, two cycles, methods in scrambled order."""
    ood = {"env": "alfworld", "split": "ood"}
    return pd.DataFrame(
        [
            summary_row("mystery", "mystery", 1, [0.1, 0.2, 0.3]),
            summary_row("oel_resail", "oel_resail", 2, [0.70, 0.70, 0.70]),
            summary_row("oel", "oel", 1, [0.50, 0.55, 0.60]),
            summary_row("oel", "oel", 1, [0.90, 0.90, 0.90], view="privileged"),
            summary_row("oel", "oel", 2, [0.40, 0.40, 0.43]),
            summary_row("oel", "react", 0, [0.60, 0.62, 0.64]),
            summary_row("oel_resail", "react", 0, [0.60, 0.62, 0.64]),  # the same C0, again
            summary_row("oel", "react", 0, [0.40, 0.40, 0.40], **ood),
            summary_row("oel", "oel", 1, [0.50, 0.50, 0.50], **ood),
            summary_row("custom_x", "oel_resail", 1, [0.30, 0.30, 0.36]),
            summary_row("oel_resail", "oel_resail", 1, [0.64, 0.66, 0.65]),
            summary_row("sdpo_resail", "sdpo_resail", 1, [0.61]),
            summary_row("rft", "rft", 2, [0.50, 0.52, 0.54]),
        ]
    )


def test_cells_are_percent_mean_and_sd_with_one_decimal():
    assert format_cell(0.6133, 0.0153) == "61.3 (1.5)"
    assert format_cell(0.4, 0.0) == "40.0 (0.0)"
    assert format_cell(0.61, math.nan) == "61.0 (--)"


def test_main_table_reproduces_the_hand_written_example(eval_summary):
    expected = pd.DataFrame(
        [
            ["ReAct", "40.0 (0.0)", "40.0 (0.0)", "62.0 (2.0)", "62.0 (2.0)"],
            ["RFT", "--", "--", "--", "52.0 (2.0)"],
            ["SDPO + ReSAIL", "--", "--", "61.0 (--)", "--"],
            ["OEL", "50.0 (0.0)", "--", "55.0 (5.0)", "41.0 (1.7)"],
            ["+ ReSAIL", "--", "--", "65.0 (1.0)", "70.0 (0.0)"],
            ["custom_x", "--", "--", "32.0 (3.5)", "--"],
            ["mystery", "--", "--", "20.0 (10.0)", "--"],
        ],
        columns=[
            "Method",
            "ALFWorld (OOD), Cycle 1",
            "ALFWorld (OOD), Cycle 2",
            "TextCraft, Cycle 1",
            "TextCraft, Cycle 2",
        ],
    )
    pd.testing.assert_frame_equal(main_results_table(eval_summary), expected)


def test_main_table_follows_the_paper_order_and_shows_react_flat_at_every_cycle():
    rows = [
        summary_row(m, m, c, [0.5, 0.5, 0.5])
        for m in ["oel_resail", "oel", "sdpo_resail", "sdpo", "epd", "grpo", "rft"]
        for c in (1, 2, 3)
    ]
    rows.append(summary_row("initial", "react", 0, [0.4, 0.4, 0.4]))
    table = main_results_table(pd.DataFrame(rows))
    assert table["Method"].tolist() == [
        "ReAct",
        "RFT",
        "GRPO",
        "EPD",
        "SDPO",
        "+ ReSAIL",
        "OEL",
        "+ ReSAIL",
    ]
    assert table.iloc[0, 1:].tolist() == ["40.0 (0.0)"] * 3  # never updated
    assert list(table.columns[1:]) == [f"TextCraft, Cycle {c}" for c in (1, 2, 3)]


def test_main_table_markdown_and_csv(tmp_path):
    table = main_results_table(
        pd.DataFrame(
            [
                summary_row("initial", "react", 0, [0.60, 0.62, 0.64]),
                summary_row("oel", "oel", 1, [0.50, 0.55, 0.60]),
            ]
        )
    )
    assert table_to_markdown(table) == (
        "| Method | TextCraft, Cycle 1 |\n"
        "| :--- | :---: |\n"
        "| ReAct | 62.0 (2.0) |\n"
        "| OEL | 55.0 (5.0) |\n"
    )


def test_a_value_that_rounds_to_zero_is_printed_without_a_sign():
    table = pd.DataFrame({"Comparison": ["a", "b", "c"], "Difference (pp)": [-1e-16, -0.04, -0.06]})
    assert table_to_markdown(table).splitlines()[2:] == [
        "| a | 0.0 |",
        "| b | 0.0 |",
        "| c | -0.1 |",
    ]


def test_a_sign_tests_p_value_keeps_three_decimals_in_markdown():
    table = pd.DataFrame(
        {"Difference (pp)": [-3.91], "Sign test p": [0.00201], "grid: sign test p": [0.125]}
    )
    assert table_to_markdown(table).splitlines()[2] == "| -3.9 | 0.002 | 0.125 |"


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        (lambda f: f.iloc[:0], ValueError, "eval_summary: no rows"),
        (lambda f: f[f["view"] == "privileged"], ValueError, "no ordinary-view rows"),
        (lambda f: f.drop(columns="experiment"), SchemaError, "experiment"),
        (lambda f: f.drop(columns="sd"), SchemaError, "sd"),
        (lambda f: f.assign(view="with_pi"), ValueError, "unknown value"),
        (lambda f: f.assign(sd=f["sd"] * math.sqrt(2 / 3)), ValueError, "sample SD"),
        (lambda f: pd.concat([f, f.iloc[[2]]]), ValueError, "one evaluation per cell"),
        (lambda f: f.assign(policy_id=f["policy_id"] + f["experiment"]), ValueError, "one shared"),
        (
            lambda f: f.assign(method=f["method"].where(f["cycle"] != 2, "react")),
            ValueError,
            "cycle 0",
        ),
        (
            lambda f: f.iloc[[1, 2]].assign(experiment="one_name"),
            ValueError,
            "several methods",
        ),
    ],
)
def test_main_table_rejects_bad_input_naming_it(eval_summary, change, error, message):
    with pytest.raises(error, match=message):
        main_results_table(change(eval_summary))


def _errorbars(ax) -> list[ErrorbarContainer]:
    return [c for c in ax.containers if isinstance(c, ErrorbarContainer)]


def _legend_labels(figure) -> list[str]:
    return [t.get_text() for t in figure.legends[0].get_texts()]


def test_success_figure_has_one_error_bar_line_per_method_from_c0(eval_summary):
    figure = success_figure(eval_summary)
    axes = figure.axes
    assert [ax.get_title() for ax in axes] == ["ALFWorld (OOD)", "TextCraft"]
    assert _legend_labels(figure) == [
        "RFT",
        "SDPO + ReSAIL",
        "OEL",
        "OEL + ReSAIL",
        "custom_x",
        "mystery",
        "ReAct (initial model, no update)",
    ]
    ood, textcraft = axes
    assert [c.get_label() for c in _errorbars(ood)] == ["OEL", "ReAct (initial model, no update)"]
    assert len(_errorbars(textcraft)) == 7
    oel = _errorbars(textcraft)[2]
    assert oel.get_label() == "OEL"
    x, y = oel.lines[0].get_xdata(), oel.lines[0].get_ydata()
    assert x[0] == 0 and np.allclose(np.round(x[1:]), [1, 2])  # from C0, dodged from C1 on
    assert np.allclose(y, [62.0, 55.0, 41.0])
    low_high = [segment[:, 1] for segment in oel.lines[2][0].get_segments()]
    assert np.allclose(low_high[1], [50.0, 60.0])  # C1: 55 ± 5
    assert ood.get_ylabel() == "Success rate (%)" and "C0" in ood.get_xlabel()
    assert [t.get_text() for t in textcraft.get_xticklabels()] == ["C0", "C1", "C2"]
    react = _errorbars(textcraft)[-1]  # never updated: flat from C0 to the last cycle
    assert react.get_label() == "ReAct (initial model, no update)"
    assert np.allclose(react.lines[0].get_xdata(), [0, 1, 2])
    assert np.allclose(react.lines[0].get_ydata(), [62.0] * 3)


def test_a_full_grid_gets_a_colour_each_and_a_legend_that_leaves_the_panel_its_width():
    # the study's eleven experiments (seven methods, four ablations) and ReAct, in one panel
    names = ["rft", "grpo", "epd", "sdpo", "sdpo_resail", "oel", "oel_resail"]
    ablations = [f"oel_resail-{v}" for v in ("a_none", "b_ordinary", "c_bottom", "d_random")]
    rows = [summary_row("oel", "react", 0, [0.60, 0.62])]
    rows += [summary_row(n, n, 1, [0.50, 0.55]) for n in names]
    rows += [summary_row(n, "oel_resail", 1, [0.50, 0.55]) for n in ablations]
    figure = success_figure(pd.DataFrame(rows))
    figure.canvas.draw()
    lines = _errorbars(figure.axes[0])
    assert len(lines) == 12
    colours = {tuple(line.lines[0].get_color()) for line in lines[:-1]}
    assert len(colours) == 11  # no two experiments share a colour
    (legend,) = figure.legends
    width = figure.bbox.width
    assert legend.get_window_extent().width <= width  # the legend fits the figure
    assert figure.axes[0].get_window_extent().width >= 0.6 * width  # and the panel keeps its size


def test_figures_draw_only_the_experiments_given(eval_summary):
    """The paper's figure 1a shows table 1's methods, its figure 3 the retention views: a grid
    with ablations draws those rows, ReAct always."""
    figure = success_figure(eval_summary, experiments={"oel", "not_run"})
    assert _legend_labels(figure) == ["OEL", "ReAct (initial model, no update)"]
    assert [c.get_label() for c in _errorbars(figure.axes[1])] == [
        "OEL",
        "ReAct (initial model, no update)",
    ]
    figure = dual_view_figure(eval_summary, experiments={"oel_resail", "rft"})
    assert _legend_labels(figure) == ["RFT", "OEL + ReSAIL", "ReAct (initial model, no update)"]

    def colour(figure, label):
        lines = [c for ax in figure.axes for c in ax.containers if c.get_label() == label]
        return tuple(lines[0].lines[0].get_color())

    # an experiment keeps its colour whichever others a figure draws
    every = success_figure(eval_summary)
    assert colour(figure, "OEL + ReSAIL") == colour(every, "OEL + ReSAIL")
    assert _legend_labels(success_figure(eval_summary, experiments=None)) == _legend_labels(
        success_figure(eval_summary)
    )


def test_dual_view_figure_has_both_views_and_says_when_one_is_missing(eval_summary):
    figure = dual_view_figure(eval_summary)
    titles = [ax.get_title() for ax in figure.axes]
    assert titles == [
        "ALFWorld (OOD): ordinary view (without PI)",
        "ALFWorld (OOD): privileged view (with PI): no data",
        "TextCraft: ordinary view (without PI)",
        "TextCraft: privileged view (with PI)",
    ]
    privileged = figure.axes[3]
    assert [c.get_label() for c in _errorbars(privileged)] == ["OEL"]  # no privileged C0 here
    assert np.allclose(_errorbars(privileged)[0].lines[0].get_ydata(), [90.0])
    assert "ReAct (initial model, no update)" in _legend_labels(figure)


def _probe(experiment: str, cycles: int, updates: int, jsd: float) -> list[dict]:
    return [
        {
            "experiment": experiment,
            "method": experiment,
            "cycle": c,
            "update": u,
            "traj_id": traj,
            "t": 0,
            "jsd": jsd / (1 + u),
            "tokens": 10,
        }
        for c in range(1, cycles + 1)
        for u in range(updates + 1)
        for traj in ("a", "b")
    ]


def test_sensitivity_is_token_weighted_and_placed_on_one_axis_across_cycles():
    probe = pd.DataFrame(
        [
            {"traj_id": "long", "jsd": 0.1, "tokens": 30, "cycle": 1, "update": 0},
            {"traj_id": "short", "jsd": 0.4, "tokens": 10, "cycle": 1, "update": 0},
            {"traj_id": "long", "jsd": 0.2, "tokens": 30, "cycle": 1, "update": 3},
            {"traj_id": "long", "jsd": 0.3, "tokens": 5, "cycle": 2, "update": 0},
            {"traj_id": "long", "jsd": 0.5, "tokens": 5, "cycle": 2, "update": 1},
        ]
    ).assign(experiment="oel", method="oel", t=0)
    per_update = sensitivity_per_update(probe)
    assert per_update["jsd"].tolist() == pytest.approx([0.175, 0.2, 0.3, 0.5])  # not 0.25
    assert per_update["tokens"].tolist() == [40, 30, 5, 5]
    assert per_update["steps"].tolist() == [2, 1, 1, 1]
    assert per_update["position"].tolist() == [0, 3, 3, 4]  # cycle 2 starts where 1 ended


def test_sensitivity_rejects_bad_probe_rows():
    probe = pd.DataFrame(_probe("oel", 1, 1, 0.2))
    with pytest.raises(SchemaError, match="probe"):
        sensitivity_per_update(probe.drop(columns="tokens"))
    with pytest.raises(ValueError, match="repeat a probe step"):
        sensitivity_per_update(pd.concat([probe, probe.iloc[[0]]]))
    with pytest.raises(ValueError, match="no response tokens"):
        sensitivity_per_update(probe.assign(tokens=0))
    with pytest.raises(ValueError, match="'jsd' must be finite"):
        sensitivity_per_update(probe.assign(jsd=math.nan))


def test_sensitivity_figure_draws_one_line_per_method_and_the_cycle_boundaries():
    probe = pd.DataFrame(_probe("oel_resail", 3, 5, 0.1) + _probe("oel", 3, 5, 0.2))
    figure = sensitivity_figure(probe)
    (ax,) = figure.axes
    curves = [line for line in ax.lines if not line.get_label().startswith("_")]
    assert [line.get_label() for line in curves] == ["OEL", "OEL + ReSAIL"]
    assert all(len(line.get_xdata()) == 18 for line in curves)
    oel = curves[0]
    assert oel.get_ydata()[0] == pytest.approx(0.2) and oel.get_xdata()[-1] == 15
    boundaries = [line.get_xdata()[0] for line in ax.lines if line not in curves]
    assert boundaries == [5, 10]
    assert [t.get_text().strip() for t in ax.texts] == ["Cycle 1", "Cycle 2", "Cycle 3"]
    assert "nats" in ax.get_ylabel() and "Update" in ax.get_xlabel()
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["OEL", "OEL + ReSAIL"]


def _train_metrics() -> pd.DataFrame:
    rows = []
    for experiment, scoring in [("oel_resail", 6.0), ("oel", 2.0)]:
        for cycle in (1, 2):
            for update in (1, 2):
                rows.append(
                    {
                        "experiment": experiment,
                        "cycle": cycle,
                        "update": update,
                        "seconds_response": 10.0,
                        "seconds_scoring": scoring,
                        "seconds_optimisation": 4.0 * cycle,
                        "seconds_other": 1.0,
                    }
                )
    return pd.DataFrame(rows)


def test_cost_table_sums_each_component_over_a_cycle():
    table = cost_table(_train_metrics())
    assert table["Method"].tolist() == ["OEL", "OEL", "OEL + ReSAIL", "OEL + ReSAIL"]
    assert table["Cycle"].tolist() == [1, 2, 1, 2]
    assert table.columns.tolist()[2:] == [*COST_COMPONENTS.values(), "Total"]
    assert table.iloc[0, 2:].tolist() == [20.0, 4.0, 8.0, 2.0, 34.0]
    assert table.iloc[3, 2:].tolist() == [20.0, 12.0, 16.0, 2.0, 50.0]
    assert table_to_markdown(table).splitlines()[2] == "| OEL | 1 | 20.0 | 4.0 | 8.0 | 2.0 | 34.0 |"
    with pytest.raises(ValueError, match="train_metrics: no rows"):
        cost_table(_train_metrics().iloc[:0])
    with pytest.raises(SchemaError, match="seconds_scoring"):
        cost_table(_train_metrics().drop(columns="seconds_scoring"))
    with pytest.raises(ValueError, match="finite and >= 0"):
        cost_table(_train_metrics().assign(seconds_other=-1.0))


def test_cost_figure_stacks_the_four_components_per_method_and_cycle():
    figure = cost_figure(_train_metrics())
    assert [ax.get_title() for ax in figure.axes] == ["Cycle 1", "Cycle 2"]
    second = figure.axes[1]
    bars = [c for c in second.containers if isinstance(c, BarContainer)]
    assert [b.get_label() for b in bars] == list(COST_COMPONENTS.values())
    assert all(len(b) == 2 for b in bars)
    tops = [[p.get_y() + p.get_height() for p in b] for b in bars]
    assert tops[-1] == pytest.approx([34.0 + 8.0, 50.0])  # OEL, OEL + ReSAIL in cycle 2
    assert [t.get_text() for t in second.get_xticklabels()] == ["OEL", "OEL + ReSAIL"]
    assert second.get_ylabel() == "Wall time (seconds)"
    assert _legend_labels(figure) == ["Other", "Optimization", "Scoring", "Response"]


@pytest.mark.parametrize(
    ("build", "columns"),
    [
        (success_figure, SCHEMAS["eval_summary"]),
        (dual_view_figure, SCHEMAS["eval_summary"]),
        (sensitivity_figure, SCHEMAS["probe"]),
        (cost_figure, ()),
    ],
)
def test_figures_without_data_say_so_in_their_title(build, columns, tmp_path):
    figure = build(pd.DataFrame(columns=list(columns)))
    assert "no data" in figure.get_suptitle()
    FigureDataset(str(tmp_path / "empty.png")).save(figure)
    assert (tmp_path / "empty.png").read_bytes().startswith(PNG_SIGNATURE)


def test_figures_of_one_method_and_one_cycle_without_c0():
    partial = pd.DataFrame([summary_row("oel", "oel", 1, [0.5, 0.6, 0.7])])
    (ax,) = success_figure(partial).axes
    (curve,) = _errorbars(ax)
    assert curve.lines[0].get_xdata().tolist() == [1.0] and curve.get_label() == "OEL"
    only_privileged = partial.assign(view="privileged")
    assert "no ordinary-view rows" in success_figure(only_privileged).get_suptitle()
    assert dual_view_figure(only_privileged).axes[0].get_title().endswith("no data")
    (ax,) = sensitivity_figure(pd.DataFrame(_probe("oel", 1, 0, 0.1))).axes
    assert not [line for line in ax.lines if line.get_label().startswith("_")]  # no boundary


def test_every_figure_of_full_data_saves_as_a_png(eval_summary, tmp_path):
    probe = pd.DataFrame(_probe("oel", 2, 3, 0.2))
    figures = {
        "fig1a_success.png": success_figure(eval_summary),
        "fig3_dual_view.png": dual_view_figure(eval_summary),
        "fig5a_cost.png": cost_figure(_train_metrics()),
        "fig6_sensitivity.png": sensitivity_figure(probe),
    }
    for name, figure in figures.items():
        assert "no data" not in figure.get_suptitle(), name
        FigureDataset(str(tmp_path / name)).save(figure)
        assert (tmp_path / name).read_bytes().startswith(PNG_SIGNATURE)
    assert "+ ReSAIL" in table_to_markdown(main_results_table(eval_summary))
    with pytest.raises(ValueError, match="eval_summary: no rows"):
        main_results_table(eval_summary.iloc[:0])


def test_report_reads_its_inputs_after_a_parquet_round_trip(eval_summary, tmp_path):
    eval_summary.to_parquet(tmp_path / "eval_summary.parquet")
    probe = pd.DataFrame(_probe("oel", 1, 2, 0.2))
    probe.to_parquet(tmp_path / "probe.parquet")
    loaded = pd.read_parquet(tmp_path / "eval_summary.parquet")
    assert isinstance(loaded["success_per_seed"].iloc[0], np.ndarray)  # lists come back as arrays
    pd.testing.assert_frame_equal(main_results_table(loaded), main_results_table(eval_summary))
    pd.testing.assert_frame_equal(
        sensitivity_per_update(pd.read_parquet(tmp_path / "probe.parquet")),
        sensitivity_per_update(probe),
    )


def _episode_rows(
    experiment: str,
    cycle: int,
    view: str,
    success: dict[int, list[bool]],
    method: str | None = None,
) -> list:
    method = (method or experiment) if cycle else "react"
    return [
        {
            "policy_id": f"{experiment}-{cycle}@0",
            "cycle": cycle,
            "method": method,
            "env": "textcraft",
            "split": "test",
            "view": view,
            "decoding_seed": seed,
            "task_id": task,
            "success": ok,
            "num_steps": 4,
            "experiment": experiment,
        }
        for task, per_seed in success.items()
        for seed, ok in enumerate(per_seed)
    ]


def test_comparisons_pair_each_variant_with_its_parent_first_then_each_ablation():
    methods = {
        "oel_resail-selection_bottom": "oel_resail",
        "oel": "oel",
        "rft": "rft",
        "oel_resail": "oel_resail",
        "sdpo-x": "sdpo",
    }
    # variant -> parent first, then ablations in the given order, then each ablation of a
    # ReSAIL variant against the variant's parent; the one compared with need not be present
    # (no "sdpo" run here)
    assert comparisons(methods) == [
        ("oel_resail", "oel"),
        ("oel_resail-selection_bottom", "oel_resail"),
        ("sdpo-x", "sdpo"),
        ("oel_resail-selection_bottom", "oel"),
    ]
    assert comparisons({"rft": "rft", "oel": "oel"}) == []


def test_paired_differences_compare_each_variant_with_its_parent_or_full_method():
    parent = {0: [False, False], 1: [True, False], 2: [False, False], 3: [True, True]}
    variant = {0: [True, True], 1: [True, False], 2: [True, False], 3: [True, True]}
    initial = {0: [False, False], 1: [False, False], 2: [False, False], 3: [True, True]}
    results = pd.DataFrame(
        _episode_rows("shared", 0, "ordinary", initial)
        + _episode_rows("oel", 1, "ordinary", parent)
        + _episode_rows("oel_resail", 1, "ordinary", variant)
        + _episode_rows("oel_resail", 2, "ordinary", variant)  # no parent at cycle 2: no row
        + _episode_rows("oel", 1, "privileged", variant)
        + _episode_rows("oel_resail", 1, "privileged", variant)
        + _episode_rows("sdpo_resail", 1, "ordinary", variant)  # no sdpo run: no row
        + _episode_rows("oel_resail-retention_none", 2, "ordinary", parent, "oel_resail")
        + _episode_rows("oel_resail-retention_none", 3, "ordinary", variant, "oel_resail")
    )
    table = paired_differences_table(results)
    # against the initial model (only its ordinary view was evaluated), then variant - parent,
    # then the ablation against the full method (at cycle 2 only: the full method has no cycle 3)
    assert table[["Comparison", "View", "Cycle"]].values.tolist() == [
        ["SDPO + ReSAIL - ReAct", "ordinary", 1],
        ["OEL - ReAct", "ordinary", 1],
        ["OEL + ReSAIL - ReAct", "ordinary", 1],
        ["OEL + ReSAIL - ReAct", "ordinary", 2],
        ["oel_resail-retention_none - ReAct", "ordinary", 2],
        ["oel_resail-retention_none - ReAct", "ordinary", 3],
        ["OEL + ReSAIL - OEL", "ordinary", 1],
        ["OEL + ReSAIL - OEL", "privileged", 1],
        ["oel_resail-retention_none - OEL + ReSAIL", "ordinary", 2],
    ]
    assert table["Difference (pp)"].tolist() == pytest.approx(
        [50.0, 12.5, 50.0, 50.0, 12.5, 50.0, 37.5, 0.0, -37.5]
    )
    assert table["95% CI (pp)"].iloc[-2] == "[0.0, 0.0]" and (table["Tasks"] == 4).all()
    # OEL + ReSAIL - OEL at cycle 1 (ordinary): tasks 0 and 2 gained, none lost
    assert table["Gained / lost"].iloc[-3] == "2 / 0" and table["Sign test p"].iloc[-3] == 0.5
    assert table["Gained / lost"].iloc[-2] == "0 / 0" and table["Sign test p"].iloc[-2] == 1.0
    # an ablation of OEL + ReSAIL against OEL too, where OEL reached its cycle: what the parts
    # it keeps add to OEL (here at cycle 1, where OEL + ReSAIL itself has no ablation run)
    kept = pd.DataFrame(
        _episode_rows("oel", 1, "ordinary", parent)
        + _episode_rows("oel_resail-sgs_only", 1, "ordinary", variant, "oel_resail")
    )
    assert paired_differences_table(kept)[["Comparison", "Difference (pp)"]].values.tolist() == [
        ["oel_resail-sgs_only - OEL", 37.5]
    ]
    # each experiment against its own previous cycle, after the report's pairs, where asked:
    # OEL + ReSAIL's cycle 2 repeats its cycle 1 (a difference of 0), the ablation's cycle 3 gains
    # games 0 and 2 over its cycle 2; no experiment's cycle 1 has a previous one of its own
    # (cycle 0 is the initial model's row)
    successive = paired_differences_table(results, successive=True)
    assert successive.iloc[: len(table)].equals(table)
    assert successive.iloc[len(table) :][
        ["Comparison", "View", "Cycle", "Difference (pp)"]
    ].values.tolist() == [
        ["OEL + ReSAIL - previous cycle", "ordinary", 2, 0.0],
        ["oel_resail-retention_none - previous cycle", "ordinary", 3, 37.5],
    ]
    low, high = (float(x) for x in table["95% CI (pp)"].iloc[-3].strip("[]").split(", "))
    assert 0.0 <= low < 37.5 < high <= 100.0
    assert paired_differences_table(results.iloc[:0]).empty
    # an evaluation cut short is refused, naming the comparison that cannot be paired
    cut = results.drop(results.index[(results["experiment"] == "oel") & (results["task_id"] == 3)])
    with pytest.raises(
        ValueError, match=r"^eval_results: OEL - ReAct, TextCraft, ordinary, 1: .*not paired"
    ):
        paired_differences_table(cut)


def test_training_seeds_put_each_seeds_difference_beside_their_mean_and_spread():
    initial = {0: [False, False], 1: [False, False], 2: [False, False], 3: [True, True]}
    parent = {0: [False, False], 1: [True, False], 2: [False, False], 3: [True, True]}
    variant = {0: [True, True], 1: [True, False], 2: [True, False], 3: [True, True]}
    seed_0 = pd.DataFrame(
        _episode_rows("shared", 0, "ordinary", initial)
        + _episode_rows("oel", 1, "ordinary", parent)
        + _episode_rows("oel_resail", 1, "ordinary", variant)
        + _episode_rows("oel", 2, "ordinary", parent)
    ).assign(training_seed=0)
    # seed 1: the variant no better than the parent at cycle 1; it has not reached cycle 2, and
    # seed 2 has reached cycle 1 of OEL only; both, and seed 0 not, evaluated OEL with PI
    with_pi = _episode_rows("shared", 0, "privileged", initial) + _episode_rows(
        "oel", 1, "privileged", parent
    )
    seed_1 = pd.DataFrame(
        _episode_rows("shared", 0, "ordinary", initial)
        + _episode_rows("oel", 1, "ordinary", parent)
        + _episode_rows("oel_resail", 1, "ordinary", parent)
        + with_pi
    ).assign(training_seed=1)
    seed_2 = pd.DataFrame(
        _episode_rows("shared", 0, "ordinary", initial)
        + _episode_rows("oel", 1, "ordinary", initial)
        + with_pi
    ).assign(training_seed=2)
    table = training_seeds_table(pd.concat([seed_0, seed_1, seed_2], ignore_index=True))
    assert table.columns.tolist() == [
        *["Comparison", "Benchmark", "View", "Cycle", "Training seeds"],
        *["Seed 0 (pp)", "Seed 1 (pp)", "Seed 2 (pp)", "Mean (pp)", "95% CI over tasks (pp)"],
        *["SD over seeds (pp)", "Tasks"],
    ]
    rows = table.set_index(["Comparison", "View", "Cycle"])
    lead = rows.loc[("OEL + ReSAIL - OEL", "ordinary", 1)]
    # per task, seed 0: 1, 0, 0.5, 0 (37.5); seed 1: 0 everywhere; the mean of the two 18.75
    assert (lead["Seed 0 (pp)"], lead["Seed 1 (pp)"]) == (37.5, 0.0)
    assert lead["Mean (pp)"] == pytest.approx(18.75)
    assert lead["SD over seeds (pp)"] == pytest.approx(37.5 / math.sqrt(2))  # sample SD of two
    assert lead["Training seeds"] == "0, 1" and lead["Tasks"] == 4
    low, high = (float(x) for x in lead["95% CI over tasks (pp)"].strip("[]").split(", "))
    assert 0.0 <= low < 18.75 < high <= 50.0
    assert np.isnan(lead["Seed 2 (pp)"])  # not reached by seed 2: the others'
    # three seeds: 12.5, 12.5 and 0 -> mean 8.33, sample SD 7.22
    three = rows.loc[("OEL - ReAct", "ordinary", 1)]
    assert three["Training seeds"] == "0, 1, 2"
    assert three["SD over seeds (pp)"] == pytest.approx(12.5 / math.sqrt(3))
    assert three["Mean (pp)"] == pytest.approx(25 / 3)
    assert rows.loc[("OEL - ReAct", "privileged", 1), "Training seeds"] == "1, 2"
    # only the cells at least two seeds reached (OEL's cycle 2 is seed 0's alone), in the
    # report's order, whichever seeds reached them: every experiment against the initial model,
    # then variant - parent
    assert table[["Comparison", "View", "Cycle"]].values.tolist() == [
        ["OEL - ReAct", "ordinary", 1],
        ["OEL - ReAct", "privileged", 1],
        ["OEL + ReSAIL - ReAct", "ordinary", 1],
        ["OEL + ReSAIL - OEL", "ordinary", 1],
    ]
    with pytest.raises(SchemaError, match=r"missing column\(s\) \['training_seed'\]"):
        training_seeds_table(seed_0.drop(columns="training_seed"))


def _collected(experiment: str, method: str, cycle: int, success: list[int]) -> list[dict]:
    """``trajectories`` rows of one cycle's corpus on ``train``: task ``i`` succeeds iff
    ``success[i]``, task 0 drawn a second time (failing) as a budget above the split's size does."""
    tasks = [*range(len(success)), 0]
    return [
        {
            "traj_id": f"cycle_{cycle}/textcraft/train/{task}/{k}",
            "cycle": cycle,
            "method": method,
            "env": "textcraft",
            "split": "train",
            "task_id": task,
            "decoding_seed": 100 * cycle + k,
            "policy_id": f"{experiment}@{cycle}",
            "task": "craft x",
            "success": bool(ok),
            "num_steps": 5,
            "end_reason": "done",
            "experiment": experiment,
            "namespace": f"cycle_{cycle}",
        }
        for k, (task, ok) in enumerate(zip(tasks, [*success, 0], strict=True))
    ]


def test_collection_table_compares_each_cycles_corpus_with_the_initial_policys():
    frame = pd.DataFrame(
        _collected("shared", "bootstrap", 1, [1, 1, 0, 0])  # the initial policy: 2 of 5
        + _collected("rft", "rft", 2, [0, 1, 0, 0])  # after RFT's cycle 1: 1 of 5
        + _collected("oel", "oel", 2, [1, 1, 1, 0])
        + _collected("oel", "oel", 3, [1, 1, 0, 0])[1:]  # task 0 once only: still the same tasks
    )
    table = collection_table(frame)
    assert table[["Method", "Policy of cycle", "Trajectories"]].values.tolist() == [
        ["ReAct", 0, 5],
        ["RFT", 1, 5],
        ["OEL", 1, 5],
        ["OEL", 2, 4],
    ]
    assert table["Success (%)"].tolist() == pytest.approx([40.0, 20.0, 60.0, 25.0])
    # per task, each task's trajectories averaged (initial: 0.5, 1, 0, 0): RFT 0, 1, 0, 0 -> -12.5;
    # OEL after cycle 1: 0.5, 1, 1, 0 -> +25; after cycle 2: 0, 1, 0, 0 -> -12.5
    assert table["Difference (pp)"].iloc[1:].tolist() == pytest.approx([-12.5, 25.0, -12.5])
    assert np.isnan(table["Difference (pp)"].iloc[0]) and table["95% CI (pp)"].iloc[0] == "--"
    low, high = (float(x) for x in table["95% CI (pp)"].iloc[1].strip("[]").split(", "))
    assert -50.0 <= low < -12.5 < high <= 0.0
    markdown = table_to_markdown(table)
    assert "| ReAct | textcraft (train) | 0 | 5 | 40.0 | -- | -- |" in markdown
    # a corpus of other tasks (a budget that samples the split) has no difference
    other = _collected("oel", "oel", 4, [1, 1, 1, 1, 1])
    extra = collection_table(pd.concat([frame, pd.DataFrame(other)], ignore_index=True))
    assert extra["Policy of cycle"].iloc[-1] == 3 and extra["95% CI (pp)"].iloc[-1] == "--"
    assert collection_table(frame.iloc[:0]).empty
    with pytest.raises(SchemaError, match=r"trajectories: missing column\(s\) \['success'\]"):
        collection_table(frame.drop(columns="success"))


def test_ablation_table_has_one_row_per_variant_and_both_views():
    rows = [
        summary_row("initial", "react", 0, [0.4, 0.4, 0.4]),
        summary_row("oel_resail", "oel_resail", 1, [0.5, 0.6, 0.7]),
        summary_row("oel_resail", "oel_resail", 1, [0.8, 0.8, 0.8], view="privileged"),
        summary_row("oel_resail-retention_none", "oel_resail", 1, [0.3, 0.3, 0.3]),
    ]
    spec = {
        "None": "oel_resail-retention_none",
        "Ordinary": "oel_resail-retention_ordinary",  # not run: dashes
        "Privileged (ours)": "oel_resail",
    }
    table = ablation_table(pd.DataFrame(rows), spec)
    assert table.columns.tolist() == [
        "Variant",
        "TextCraft, Cycle 1",
        "TextCraft, Cycle 1 (with PI)",
    ]
    assert table.values.tolist() == [
        ["None", "30.0 (0.0)", "--"],
        ["Ordinary", "--", "--"],
        ["Privileged (ours)", "60.0 (10.0)", "80.0 (0.0)"],
    ]
    # a grid part-way: a cycle two variants reached is shown, the one behind dashed there; a
    # cycle only one reached (the full method's later cycles) compares nothing and is left out
    later = [
        summary_row("oel_resail", "oel_resail", 2, [0.5, 0.5, 0.5]),
        summary_row("oel_resail", "oel_resail", 3, [0.4, 0.4, 0.4]),
        summary_row("oel_resail-retention_ordinary", "oel_resail", 1, [0.2, 0.2, 0.2]),
        summary_row("oel_resail-retention_ordinary", "oel_resail", 2, [0.1, 0.1, 0.1]),
    ]
    table = ablation_table(pd.DataFrame(rows + later), spec)
    assert table.columns.tolist()[:3] == ["Variant", "TextCraft, Cycle 1", "TextCraft, Cycle 2"]
    assert table.values.tolist()[0][:3] == ["None", "30.0 (0.0)", "--"]
    assert table.values.tolist()[1][:3] == ["Ordinary", "20.0 (0.0)", "10.0 (0.0)"]
    assert "TextCraft, Cycle 3" not in table.columns
    # no two variants share a cycle: every cycle shown, each dashed where its variant lacks it
    apart = [rows[3], summary_row("oel_resail", "oel_resail", 2, [0.5, 0.5, 0.5])]
    table = ablation_table(pd.DataFrame(apart), spec)
    assert table.columns.tolist() == ["Variant", "TextCraft, Cycle 1", "TextCraft, Cycle 2"]
    assert table.values.tolist()[0] == ["None", "30.0 (0.0)", "--"]


def test_the_report_says_how_many_summaries_were_rejected():
    metrics = pd.DataFrame(
        {
            "experiment": ["oel", "oel", "oel", "rft"],
            "cycle": [1, 1, 2, 1],
            "rejected_summaries": [2, 2, 0, 1],
        }
    )
    note = rejected_summaries_note(metrics)
    assert "3 trajectories were left out" in note and "OEL cycle 1: 2, RFT cycle 1: 1" in note
    none = rejected_summaries_note(metrics.assign(rejected_summaries=0))
    assert "none was left out" in none and "3 trained cycle(s)" in none
    assert rejected_summaries_note(metrics.drop(columns="rejected_summaries")) == ""


def test_gui_accuracy_table_is_one_row_per_run_in_percent():
    from resail_pipeline.evaluation.report.tables import gui_accuracy_table

    curves = pd.DataFrame(
        {
            "run": ["oel", "oel", "oel_sgs", "oel_sgs"],
            "update": [0, 10, 0, 10],
            "accuracy": [0.5, 0.25, 0.5, 0.75],
            "steps": [8, 8, 8, 8],
        }
    )
    table = gui_accuracy_table(curves)
    assert list(table.columns) == ["Run", "update 0", "update 10"]
    assert table["Run"].tolist() == ["OEL", "OEL + SGS"]
    assert table[["update 0", "update 10"]].to_numpy().tolist() == [[50.0, 25.0], [50.0, 75.0]]


def test_the_report_checks_each_summarys_episode_count_against_its_rows():
    """A 0-row or truncated eval_results file would drop its cycle from the paired differences,
    or pair it on fewer tasks, in silence."""
    from resail_pipeline.evaluation.report import check_episode_counts
    from resail_pipeline.evaluation.stats import summarize_eval_results

    cells = {"shared": 0, "oel": 1, "oel_resail": 1}
    results = pd.DataFrame(
        [
            row
            for experiment, cycle in cells.items()
            for row in _episode_rows(
                experiment, cycle, "ordinary", {0: [True], 1: [False], 2: [True]}
            )
        ]
    )
    summaries = pd.concat(
        summarize_eval_results(group.drop(columns="experiment")).assign(experiment=experiment)
        for experiment, group in results.groupby("experiment")
    )
    check_episode_counts(summaries, results)
    empty = results[results["experiment"] != "oel"]  # oel's file has no rows
    with pytest.raises(ValueError, match=r"oel cycle 1 textcraft/test ordinary has 0 episode rows"):
        check_episode_counts(summaries, empty)
    truncated = results.drop(index=results.index[-1])
    with pytest.raises(ValueError, match=r"has 2 episode rows, its eval_summary counts 3"):
        check_episode_counts(summaries, truncated)
    with pytest.raises(ValueError, match=r"eval_summary: no summary of oel cycle 1"):
        check_episode_counts(summaries[summaries["experiment"] != "oel"], results)


def _three_cycles(probed: bool = True) -> dict[str, pd.DataFrame]:
    """Every per-cycle input of the report for ``oel`` over three cycles, and ``rft`` over two
    with the probe off (``probed``: whether ``oel`` has probe rows)."""
    summaries = [summary_row("shared", "react", 0, [0.4])]
    metrics, probe, corpus = [], [], _collected("shared", "bootstrap", 1, [1, 0])
    for experiment, cycles in (("oel", 3), ("rft", 2)):
        summaries += [summary_row(experiment, experiment, c, [0.5]) for c in range(1, cycles + 1)]
        metrics += [{"experiment": experiment, "cycle": c} for c in range(1, cycles + 1)]
        corpus += [
            row for c in range(2, cycles + 1) for row in _collected(experiment, experiment, c, [1])
        ]
    if probed:
        probe = _probe("oel", 3, 1, 0.1)
    return {
        "eval_summary": pd.DataFrame(summaries),
        "train_metrics": pd.DataFrame(metrics),
        "probe": pd.DataFrame(probe, columns=list(SCHEMAS["probe"])),
        "trajectories": pd.DataFrame(corpus),
    }


@pytest.mark.parametrize(
    ("name", "cycle", "file"),
    [
        ("train_metrics", 2, "oel/cycle_2/train_metrics.parquet"),
        ("probe", 2, "oel/cycle_2/probe.parquet"),
        ("trajectories", 2, "oel/cycle_2/trajectories.parquet"),
        ("trajectories", 3, "oel/cycle_3/trajectories.parquet"),
        ("trajectories", 1, "shared/cycle_1/trajectories.parquet"),
        ("eval_summary", 2, "oel/cycle_2/eval_summary.parquet"),
        ("train_metrics", 3, "oel/cycle_3/train_metrics.parquet"),
    ],
)
def test_a_cycle_one_input_lacks_is_an_error_naming_its_file(name, cycle, file):
    """An empty but schema-valid file dropped its cycle in silence: the report said "2 trained
    cycle(s)" without a cost row, figure 6 without a cycle, the collection table without a row."""
    from resail_pipeline.evaluation.report import check_cycles_covered

    inputs = _three_cycles()
    check_cycles_covered(**inputs)  # everything there
    frame = inputs[name]
    experiment = "shared" if name == "trajectories" and cycle == 1 else "oel"
    inputs[name] = frame[~((frame["experiment"] == experiment) & (frame["cycle"] == cycle))]
    with pytest.raises(ValueError, match=rf"^{name} files: {file} has no rows or is missing"):
        check_cycles_covered(**inputs)


def test_an_experiment_without_the_probe_needs_no_probe_rows():
    from resail_pipeline.evaluation.report import check_cycles_covered

    check_cycles_covered(**_three_cycles(probed=False))  # train.probe.enabled off throughout


def test_a_cycle_that_learns_from_successes_of_a_corpus_without_one_needs_no_metrics_rows():
    """RFT on a corpus without a success makes no update and writes an empty metrics file (the
    trainer publishes the policy unchanged): that cycle is covered; OEL's, and RFT's own cycle 2
    on a corpus with a success, still need their rows."""
    from resail_pipeline.evaluation.report import check_cycles_covered

    inputs = _three_cycles()
    corpus = inputs["trajectories"]
    failed = corpus.assign(success=corpus["success"].where(corpus["cycle"] != 1, False))
    metrics = inputs["train_metrics"]
    without = metrics[~((metrics["experiment"] == "rft") & (metrics["cycle"] == 1))]
    check_cycles_covered(**{**inputs, "trajectories": failed, "train_metrics": without})
    # the same corpus with a success: RFT's cycle 1 made updates, so its rows are missing
    with pytest.raises(ValueError, match=r"^train_metrics files: rft/cycle_1/train_metrics"):
        check_cycles_covered(**{**inputs, "train_metrics": without})
    # OEL learns from failures too: its cycle 1 updated on the failed corpus
    no_oel = metrics[~((metrics["experiment"] == "oel") & (metrics["cycle"] == 1))]
    with pytest.raises(ValueError, match=r"^train_metrics files: oel/cycle_1/train_metrics"):
        check_cycles_covered(**{**inputs, "trajectories": failed, "train_metrics": no_oel})


def test_the_sweep_figure_puts_each_value_at_its_cycle_in_order():
    from resail_pipeline.evaluation.report import Sweep, sweep_figure

    rows = [
        summary_row("oel_resail", "oel_resail", 1, [0.5, 0.7]),  # rho 0.05
        summary_row("oel_resail-rho_25", "oel_resail", 1, [0.2, 0.2]),
        summary_row("oel_resail-rho_25", "oel_resail", 2, [0.9, 0.9]),  # another cycle: not shown
        summary_row("oel_resail", "oel_resail", 1, [0.4], view="privileged"),
    ]
    rho = Sweep(
        cycle=1,
        points=[(0.05, "oel_resail"), (0.1, "oel_resail-rho_10"), (0.25, "oel_resail-rho_25")],
    )
    lam = Sweep(cycle=3, points=[(0.5, "oel_resail")])
    figure = sweep_figure(pd.DataFrame(rows), {"selection ratio": rho, "retention weight": lam})
    left, right = figure.axes[:2]
    assert [t.get_text() for t in left.get_xticklabels()] == ["0.05", "0.1", "0.25"]
    ordinary, privileged = left.containers  # one error-bar line per benchmark and view
    assert ordinary.lines[0].get_xdata().tolist() == [0, 2]  # rho 0.1 not evaluated: left out
    assert ordinary.lines[0].get_ydata().tolist() == pytest.approx([60.0, 20.0])
    assert privileged.lines[0].get_ydata().tolist() == pytest.approx([40.0])
    assert ordinary.get_label() == "TextCraft, ordinary" and left.get_title().endswith("(cycle 1)")
    assert right.get_title() == "retention weight: no data"  # nothing at cycle 3
    assert "no sweep" in sweep_figure(pd.DataFrame(rows), {}).get_suptitle()
    with pytest.raises(ValueError, match="points"):
        Sweep(cycle=1, points=[])


# the paper's printed tables beside a grid's (report.paper)

ALFWORLD_ID = {"env": "alfworld", "split": "id"}
ALFWORLD_OOD = {"env": "alfworld", "split": "ood"}


def _cell(table: str, row: str, split: str, cycle: int, view: str = "ordinary") -> tuple:
    paper = paper_figures()
    at = paper[
        (paper["table"] == table)
        & (paper["row"] == row)
        & (paper["split"] == split)
        & (paper["view"] == view)
        & (paper["cycle"] == cycle)
    ]
    assert len(at) == 1
    return float(at["mean"].iloc[0]), float(at["sd"].iloc[0])


def test_the_printed_cells_are_read_as_the_paper_prints_them():
    paper = paper_figures()
    assert len(paper) == 154
    assert set(paper["table"]) == set(PAPER_TABLES)
    assert not paper.duplicated(["table", "row", "env", "split", "view", "cycle"]).any()
    for table, (_, rows) in PAPER_TABLES.items():  # every row printed, every printed row named
        assert set(paper.loc[paper["table"] == table, "row"]) == set(rows)
    assert _cell("1", "react", "ood", 0) == (39.6, 1.8)  # printed under cycle 1: cycle 0 here
    assert _cell("1", "oel", "ood", 3) == (38.5, 1.2)
    assert _cell("1", "oel_resail", "test", 1) == (63.3, 1.5)
    assert _cell("2", "sgs", "id", 2) == (69.0, 4.6)
    assert _cell("3(a)", "bottom", "ood", 1) == (40.4, 4.3)
    assert _cell("3(b)", "ordinary", "id", 3) == (72.9, 2.4)
    assert _cell("rho", "100%", "ood", 1) == (50.3, 2.4)
    assert _cell("lambda", "1/100", "id", 3) == (63.0, 1.8)
    assert _cell("dual", "privileged", "ood", 3, view="privileged") == (70.3, 0.8)
    # one run printed in several tables reads the same in each
    same_runs = [
        [("1", "oel_resail"), ("2", "sgs+tlb+pr"), ("3(a)", "top"), ("3(b)", "privileged"),
         ("rho", "5%"), ("lambda", "1/2"), ("dual", "privileged")],
        [("2", "sgs+tlb"), ("3(b)", "none"), ("lambda", "0"), ("dual", "none")],
        [("1", "oel"), ("2", "none")],
        [("1", "react"), ("dual", "initial")],
    ]  # fmt: skip
    keys = ["env", "split", "view", "cycle"]
    for run in same_runs:
        printed = [paper[(paper["table"] == t) & (paper["row"] == r)] for t, r in run]
        for other in printed[1:]:
            merged = other.merge(printed[0], on=keys)
            assert len(merged) > 0  # the cells both print
            assert (merged["mean_x"] == merged["mean_y"]).all()
            assert (merged["sd_x"] == merged["sd_y"]).all()


def _grid() -> pd.DataFrame:
    return pd.DataFrame(
        [
            summary_row("oel", "oel", 0, [0.2, 0.2], **ALFWORLD_OOD),
            summary_row("oel", "oel", 0, [0.1, 0.3], **ALFWORLD_OOD, view="privileged"),
            summary_row("oel", "oel", 0, [0.3, 0.3], **ALFWORLD_ID),
            summary_row("oel_resail", "oel_resail", 1, [0.5, 0.7], **ALFWORLD_OOD),
            summary_row("oel", "oel", 1, [0.4, 0.4], **ALFWORLD_OOD),
        ]
    )


def test_the_paper_and_the_grid_sit_side_by_side_row_by_row():
    tables = paper_comparison(
        _grid(),
        {"1": {"react": "react", "oel": "oel", "oel_resail": "oel_resail"}, "dual": {}},
    )
    table_1 = tables[PAPER_TABLES["1"][0]]
    assert table_1.columns.tolist()[:5] == [
        "Row",
        "Benchmark",
        "View",
        "Cycle 0, here",
        "Cycle 0, paper",
    ]
    assert "TextCraft" not in set(table_1["Benchmark"])  # not evaluated here: no rows
    by_row = table_1.set_index(["Row", "Benchmark"])
    assert by_row.loc[("ReAct", "ALFWorld (OOD)"), "Cycle 0, here"] == "20.0 (0.0)"
    assert by_row.loc[("ReAct", "ALFWorld (OOD)"), "Cycle 0, paper"] == "39.6 (1.8)"
    assert by_row.loc[("ReAct", "ALFWorld (OOD)"), "Cycle 1, here"] == "--"
    resail = by_row.loc[("OEL + ReSAIL", "ALFWorld (OOD)")]
    assert (resail["Cycle 1, here"], resail["Cycle 1, paper"]) == ("60.0 (14.1)", "57.3 (4.0)")
    assert resail["Cycle 2, here"] == "--" and resail["Cycle 2, paper"] == "63.5 (4.7)"
    assert by_row.loc[("OEL + ReSAIL", "ALFWorld (ID)"), "Cycle 1, here"] == "--"
    assert by_row.loc[("RFT", "ALFWorld (ID)"), "Cycle 1, here"] == "--"  # no experiment named
    # the paper's other tables over a benchmark evaluated here, their rows unmapped: paper only
    dual = tables[PAPER_TABLES["dual"][0]]
    assert dual["Benchmark"].unique().tolist() == ["ALFWorld (OOD)"]
    assert (dual.filter(like="here") == "--").all().all()
    assert len(tables) == len(PAPER_TABLES)


def test_the_initial_model_is_compared_at_cycle_0_in_both_views():
    tables = paper_comparison(_grid(), {"dual": {"initial": "react"}})
    dual = tables[PAPER_TABLES["dual"][0]].set_index(["Row", "View"])
    assert dual.loc[("Shared initial model", "privileged"), "Cycle 0, here"] == "20.0 (14.1)"
    assert dual.loc[("Shared initial model", "privileged"), "Cycle 0, paper"] == "49.2 (2.1)"


def test_a_grid_without_the_papers_benchmarks_has_no_table():
    textcraft = pd.DataFrame([summary_row("oel", "oel", 1, [0.5])])
    tables = paper_comparison(textcraft, {"1": {"oel": "oel"}})
    assert list(tables) == [PAPER_TABLES["1"][0]]  # tables 2, 3 and the appendix are ALFWorld's
    assert tables[PAPER_TABLES["1"][0]]["Benchmark"].unique().tolist() == ["TextCraft"]
    assert paper_comparison(pd.DataFrame(), {}) == {}


@pytest.mark.parametrize(
    ("experiments", "message"),
    [
        ({"4": {}}, r"paper: no paper table '4'; one of \['1', '2'"),
        ({"3(a)": {"middle": "x"}}, r"paper\.3\(a\): the paper's table has no row 'middle'"),
        ({"dual": {"initial": "oel"}}, r"paper\.dual\.initial: the paper prints the initial model"),
    ],
)
def test_an_unknown_table_or_row_is_refused(experiments, message):
    with pytest.raises(ConfigError, match=message):
        paper_comparison(_grid(), experiments)
