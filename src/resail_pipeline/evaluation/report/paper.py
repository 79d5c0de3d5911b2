"""The paper's published success rates beside a grid's own.

:data:`PRINTED` holds, as the paper prints them for Qwen3-4B (mean and SD over three decoding
seeds, in %): table 1 (ALFWorld ID and OOD, TextCraft; ReAct, printed under cycle 1 as the
unchanged initial model, is cycle 0 here), table 2 (the components, OEL on ALFWorld), table 3
((a) the selection rule at cycle 1, (b) the retention view at cycle 3), and the appendix's
hyperparameter sweeps (the selection ratio at cycle 1, the retention weight at cycle 3) and
dual-view table (OEL + ReSAIL by retention view on ALFWorld OOD, both views). ``report.paper``
names the experiment of a grid that runs each row's setting, and :func:`paper_comparison`
sets the two side by side.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from resail_pipeline.config import ConfigError
from resail_pipeline.evaluation.report.frames import (
    INITIAL_METHOD,
    METHOD_LABELS,
    MISSING,
    benchmark_label,
    checked_eval_summary,
    format_cell,
    rows_where,
)

#: table -> its title and its rows, id -> label, in the paper's order
PAPER_TABLES: dict[str, tuple[str, dict[str, str]]] = {
    "1": (
        "Table 1: success without PI over cycles",
        {m: label for m, label in METHOD_LABELS.items() if m != "oel_sgs"},  # AITZ's own
    ),
    "2": (
        "Table 2: ReSAIL's components (selection SGS, balancing TLB, retention PR) on OEL",
        {
            "none": "none (OEL)",
            "sgs": "SGS",
            "tlb": "TLB",
            "pr": "PR",
            "sgs+tlb": "SGS + TLB",
            "sgs+tlb+pr": "SGS + TLB + PR (OEL + ReSAIL)",
        },
    ),
    "3(a)": (
        "Table 3(a): step selection at cycle 1 (OEL + ReSAIL)",
        {"random": "Random", "bottom": "Bottom", "top": "Top (ours)"},
    ),
    "3(b)": (
        "Table 3(b): retention view at cycle 3 (OEL + ReSAIL)",
        {"none": "None", "ordinary": "Ordinary", "privileged": "Privileged (ours)"},
    ),
    "rho": (
        "Selection ratio rho at cycle 1 (appendix, hyperparameter results (a))",
        {"1%": "1%", "5%": "5%", "25%": "25%", "50%": "50%", "100%": "100%"},
    ),
    "lambda": (
        "Retention weight lambda at cycle 3 (appendix, hyperparameter results (b))",
        {"0": "0", "1/100": "0.01", "1/10": "0.1", "1/2": "0.5", "1": "1"},  # ids without dots
    ),
    "dual": (
        "Both views (appendix, dual-view table): OEL + ReSAIL by retention view",
        {
            "initial": "Shared initial model",
            "none": "None",
            "ordinary": "Ordinary",
            "privileged": "Privileged (PR)",
        },
    ),
}

#: the paper's printed cells: table, row id, env/split, view, the first cycle, then mean (SD) of
#: that cycle and the next ones
PRINTED = """
1      react       alfworld/id     ordinary    0  40.1 (2.3)
1      react       alfworld/ood    ordinary    0  39.6 (1.8)
1      react       textcraft/test  ordinary    0  61.3 (1.5)
1      rft         alfworld/id     ordinary    1  43.2 (2.7)  44.8 (4.4)  41.9 (6.6)
1      rft         alfworld/ood    ordinary    1  39.3 (4.6)  42.2 (1.4)  43.2 (3.9)
1      rft         textcraft/test  ordinary    1  59.7 (0.6)  62.3 (5.5)  60.7 (2.5)
1      grpo        alfworld/id     ordinary    1  39.1 (2.1)  36.5 (1.2)  37.5 (2.3)
1      grpo        alfworld/ood    ordinary    1  45.1 (1.2)  42.2 (1.6)  50.3 (2.0)
1      grpo        textcraft/test  ordinary    1  60.3 (1.2)  58.7 (2.3)  56.7 (2.3)
1      epd         alfworld/id     ordinary    1  45.6 (1.2)  36.7 (3.4)  22.1 (0.5)
1      epd         alfworld/ood    ordinary    1  43.2 (2.7)  31.5 (3.2)  18.2 (3.5)
1      epd         textcraft/test  ordinary    1  63.3 (0.6)  62.0 (2.6)  62.3 (3.5)
1      sdpo        alfworld/id     ordinary    1  52.3 (1.6)  53.4 (2.0)  58.9 (1.6)
1      sdpo        alfworld/ood    ordinary    1  44.8 (1.6)  50.5 (1.6)  44.3 (0.5)
1      sdpo        textcraft/test  ordinary    1  62.7 (2.3)  64.7 (0.6)  60.3 (4.5)
1      sdpo_resail alfworld/id     ordinary    1  66.4 (2.1)  72.1 (1.6)  72.4 (0.9)
1      sdpo_resail alfworld/ood    ordinary    1  56.5 (2.5)  61.5 (2.0)  64.3 (1.8)
1      sdpo_resail textcraft/test  ordinary    1  64.7 (1.2)  66.3 (2.9)  67.3 (1.2)
1      oel         alfworld/id     ordinary    1  54.9 (4.7)  56.5 (2.0)  47.4 (1.2)
1      oel         alfworld/ood    ordinary    1  47.1 (2.5)  46.1 (2.1)  38.5 (1.2)
1      oel         textcraft/test  ordinary    1  62.0 (3.6)  54.7 (1.5)  43.7 (1.5)
1      oel_resail  alfworld/id     ordinary    1  62.2 (2.0)  70.1 (3.2)  74.2 (1.4)
1      oel_resail  alfworld/ood    ordinary    1  57.3 (4.0)  63.5 (4.7)  67.2 (2.3)
1      oel_resail  textcraft/test  ordinary    1  63.3 (1.5)  64.0 (3.6)  64.0 (2.6)
2      none        alfworld/id     ordinary    1  54.9 (4.7)  56.5 (2.0)  47.4 (1.2)
2      none        alfworld/ood    ordinary    1  47.1 (2.5)  46.1 (2.1)  38.5 (1.2)
2      sgs         alfworld/id     ordinary    1  66.4 (4.8)  69.0 (4.6)  50.5 (3.2)
2      sgs         alfworld/ood    ordinary    1  61.5 (5.9)  56.5 (2.5)  37.8 (2.5)
2      tlb         alfworld/id     ordinary    1  56.5 (1.6)  60.2 (2.1)  59.9 (2.4)
2      tlb         alfworld/ood    ordinary    1  51.3 (1.6)  50.8 (2.7)  50.8 (3.1)
2      pr          alfworld/id     ordinary    1  52.9 (4.4)  55.2 (0.9)  64.3 (1.6)
2      pr          alfworld/ood    ordinary    1  49.0 (2.0)  49.7 (1.6)  53.9 (2.1)
2      sgs+tlb     alfworld/id     ordinary    1  65.9 (3.0)  68.5 (0.5)  56.5 (3.0)
2      sgs+tlb     alfworld/ood    ordinary    1  60.4 (3.0)  58.9 (1.6)  45.6 (1.6)
2      sgs+tlb+pr  alfworld/id     ordinary    1  62.2 (2.0)  70.1 (3.2)  74.2 (1.4)
2      sgs+tlb+pr  alfworld/ood    ordinary    1  57.3 (4.0)  63.5 (4.7)  67.2 (2.3)
3(a)   random      alfworld/id     ordinary    1  49.7 (3.9)
3(a)   random      alfworld/ood    ordinary    1  45.8 (4.4)
3(a)   bottom      alfworld/id     ordinary    1  40.1 (3.2)
3(a)   bottom      alfworld/ood    ordinary    1  40.4 (4.3)
3(a)   top         alfworld/id     ordinary    1  62.2 (2.0)
3(a)   top         alfworld/ood    ordinary    1  57.3 (4.0)
3(b)   none        alfworld/id     ordinary    3  56.5 (3.0)
3(b)   none        alfworld/ood    ordinary    3  45.6 (1.6)
3(b)   ordinary    alfworld/id     ordinary    3  72.9 (2.4)
3(b)   ordinary    alfworld/ood    ordinary    3  65.9 (3.5)
3(b)   privileged  alfworld/id     ordinary    3  74.2 (1.4)
3(b)   privileged  alfworld/ood    ordinary    3  67.2 (2.3)
rho    1%          alfworld/id     ordinary    1  60.9 (2.1)
rho    1%          alfworld/ood    ordinary    1  54.2 (3.2)
rho    5%          alfworld/id     ordinary    1  62.2 (2.0)
rho    5%          alfworld/ood    ordinary    1  57.3 (4.0)
rho    25%         alfworld/id     ordinary    1  60.4 (4.3)
rho    25%         alfworld/ood    ordinary    1  53.6 (5.5)
rho    50%         alfworld/id     ordinary    1  56.5 (1.8)
rho    50%         alfworld/ood    ordinary    1  54.7 (2.8)
rho    100%        alfworld/id     ordinary    1  56.8 (3.0)
rho    100%        alfworld/ood    ordinary    1  50.3 (2.4)
lambda 0           alfworld/id     ordinary    3  56.5 (3.0)
lambda 0           alfworld/ood    ordinary    3  45.6 (1.6)
lambda 1/100       alfworld/id     ordinary    3  63.0 (1.8)
lambda 1/100       alfworld/ood    ordinary    3  49.7 (3.2)
lambda 1/10        alfworld/id     ordinary    3  66.7 (2.0)
lambda 1/10        alfworld/ood    ordinary    3  56.8 (1.6)
lambda 1/2         alfworld/id     ordinary    3  74.2 (1.4)
lambda 1/2         alfworld/ood    ordinary    3  67.2 (2.3)
lambda 1           alfworld/id     ordinary    3  72.1 (2.0)
lambda 1           alfworld/ood    ordinary    3  63.3 (0.8)
dual   initial     alfworld/ood    ordinary    0  39.6 (1.8)
dual   initial     alfworld/ood    privileged  0  49.2 (2.1)
dual   none        alfworld/ood    ordinary    1  60.4 (3.0)  58.9 (1.6)  45.6 (1.6)
dual   none        alfworld/ood    privileged  1  61.5 (3.3)  52.6 (0.9)  44.8 (3.9)
dual   ordinary    alfworld/ood    ordinary    1  52.1 (1.6)  66.7 (0.9)  65.9 (3.5)
dual   ordinary    alfworld/ood    privileged  1  54.7 (1.6)  61.5 (1.8)  62.2 (3.3)
dual   privileged  alfworld/ood    ordinary    1  57.3 (4.0)  63.5 (4.7)  67.2 (2.3)
dual   privileged  alfworld/ood    privileged  1  58.9 (0.5)  69.8 (2.3)  70.3 (0.8)
"""

_COLUMNS = ("table", "row", "env", "split", "view", "cycle", "mean", "sd")


def paper_figures() -> pd.DataFrame:
    """:data:`PRINTED` as rows of :data:`_COLUMNS`, one per cell, ``mean`` and ``sd`` in %."""
    rows = []
    for line in PRINTED.strip().splitlines():
        table, row, benchmark, view, first, *cells = line.split()
        env, split = benchmark.split("/")
        for k, (mean, sd) in enumerate(zip(cells[::2], cells[1::2], strict=True)):
            rows.append(
                (table, row, env, split, view, int(first) + k, float(mean), float(sd.strip("()")))
            )
    return pd.DataFrame(rows, columns=list(_COLUMNS))


def check_paper_rows(experiments: Mapping[str, Mapping[str, str]]) -> None:
    """Raise :class:`ConfigError` (naming ``paper.<table>``) where ``experiments`` names a table
    or a row the paper does not have, or sets a row the paper prints at cycle 0 only (the shared
    initial model) beside an experiment other than ``react``."""
    paper = paper_figures()
    for table, rows in experiments.items():
        if table not in PAPER_TABLES:
            raise ConfigError(f"paper: no paper table {table!r}; one of {list(PAPER_TABLES)}")
        unknown = sorted(set(rows) - set(PAPER_TABLES[table][1]))
        if unknown:
            raise ConfigError(
                f"paper.{table}: the paper's table has no row {unknown[0]!r}; its rows are "
                f"{list(PAPER_TABLES[table][1])}"
            )
        for row, experiment in rows.items():
            cycles = paper.loc[(paper["table"] == table) & (paper["row"] == row), "cycle"]
            if set(cycles) == {0} and experiment != INITIAL_METHOD:
                raise ConfigError(
                    f"paper.{table}.{row}: the paper prints the initial model there (cycle 0): "
                    f"{INITIAL_METHOD!r}, got {experiment!r}"
                )


def paper_comparison(
    eval_summary: pd.DataFrame,
    experiments: Mapping[str, Mapping[str, str]],
    *,
    source: str = "eval_summary",
) -> dict[str, pd.DataFrame]:
    """The paper's tables beside ``eval_summary``'s success, title -> table.

    ``experiments`` maps a table of :data:`PAPER_TABLES` to ``{row id: experiment}``, the
    experiment that runs the row's setting (``react``: the shared initial model, cycle 0 of any
    experiment). A table appears where ``eval_summary`` holds any of its benchmarks; it has one
    row per paper row, benchmark and view there, in the paper's order, and two columns per cycle
    the paper prints, ``"Cycle r, here"`` and ``"Cycle r, paper"``, as ``"mean (SD)"`` in %
    (:func:`format_cell`); ``--`` where a side has nothing: a row no experiment runs, or one not
    evaluated at that cycle.

    Raises:
        ConfigError: ``experiments`` names a table or row the paper does not have.
    """
    check_paper_rows(experiments)
    frame = checked_eval_summary(eval_summary, source) if not eval_summary.empty else None
    here = set() if frame is None else set(zip(frame["env"], frame["split"], strict=True))
    paper = paper_figures()
    tables = {}
    for table, (title, labels) in PAPER_TABLES.items():
        printed = paper[paper["table"] == table]
        cycles = sorted(printed["cycle"].unique())
        mapped = experiments.get(table, {})
        out = []
        for row, label in labels.items():
            for (env, split, view), cells in printed[printed["row"] == row].groupby(
                ["env", "split", "view"], sort=False
            ):
                if (env, split) not in here:
                    continue
                line = {"Row": label, "Benchmark": benchmark_label(env, split), "View": view}
                for cycle in cycles:
                    at = cells[cells["cycle"] == cycle]
                    ours = _here(frame, mapped.get(row), env, split, view, cycle)
                    line[f"Cycle {cycle}, here"] = ours
                    line[f"Cycle {cycle}, paper"] = (
                        MISSING
                        if at.empty
                        else format_cell(at["mean"].iloc[0] / 100, at["sd"].iloc[0] / 100)
                    )
                out.append(line)
        if out:
            tables[title] = pd.DataFrame(out)
    return tables


def _here(
    frame: pd.DataFrame | None, experiment: str | None, env: str, split: str, view: str, cycle: int
) -> str:
    """The cell of ``experiment`` at ``cycle`` (``react``: the shared cycle 0 only), or ``--``."""
    if frame is None or experiment is None or (experiment == INITIAL_METHOD) != (cycle == 0):
        return MISSING
    rows = rows_where(frame, cycle=cycle, env=env, split=split, view=view)
    if cycle > 0:
        rows = rows_where(rows, experiment=experiment)
    if rows.empty:
        return MISSING
    return format_cell(float(rows["mean"].iloc[0]), float(rows["sd"].iloc[0]))
