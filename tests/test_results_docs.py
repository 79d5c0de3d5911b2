"""The results pages' paired-difference tables hold what the committed report computed.

The narrative of ``docs/results-*.md`` is written by hand; every difference and interval its
grid tables quote is checked here against the report the study drew
(``data/08_reporting/<data folder>/paired_differences.csv``, committed with the data it was
computed from), so that a table edited by hand, or left behind by a rerun, fails.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
#: a difference and its interval as the pages write them: ``-2.0 [-6.3, 2.3]`` (``+`` and bold
#: allowed)
CELL = re.compile(r"^\**([+-]?\d+\.\d) \[(-?\d+\.\d), (-?\d+\.\d)\]\**$")
#: ALFWorld's columns: (benchmark, view)
ALFWORLD_COLUMNS = {
    "ID": ("ALFWorld (ID)", "ordinary"),
    "ID (with PI)": ("ALFWorld (ID)", "privileged"),
    "OOD": ("ALFWorld (OOD)", "ordinary"),
    "OOD (with PI)": ("ALFWorld (OOD)", "privileged"),
}


def _tables(page: Path) -> list[list[list[str]]]:
    """Every Markdown table of ``page``: its rows (header first, the rule left out) of cells."""
    tables, rows = [], []
    for line in [*page.read_text().splitlines(), ""]:
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not all(set(c) <= set(":- ") for c in cells):
                rows.append(cells)
        elif rows:
            tables.append(rows)
            rows = []
    return tables


def _quoted(page: Path) -> list[tuple[str, str, str, int, str]]:
    """``(comparison, benchmark, view, cycle, cell)`` of every paired difference in ``page``'s
    tables of either layout: a comparison per row and a column per split and view (ALFWorld), or
    a comparison and view per row and a column per cycle (TextCraft)."""
    found = []
    for header, *rows in _tables(page):
        if header[:2] == ["Comparison", "Cycle"]:
            comparison = ""
            for row in rows:
                comparison = row[0] or comparison
                for name, cell in zip(header[2:], row[2:], strict=True):
                    benchmark, view = ALFWORLD_COLUMNS[name]
                    found.append((comparison, benchmark, view, int(row[1]), cell))
        elif header[:2] == ["", "view"] and all(h.startswith("Cycle ") for h in header[2:]):
            for row in rows:
                for name, cell in zip(header[2:], row[2:], strict=True):
                    cycle = int(name.removeprefix("Cycle "))
                    found.append((row[0], "TextCraft", row[1], cycle, cell))
    return found


@pytest.mark.parametrize(
    ("page", "folder"),
    [
        ("results-alfworld-cpu.md", "alfworld-study"),
        ("results-textcraft-cpu.md", "textcraft-study"),
    ],
)
def test_every_quoted_paired_difference_is_the_reports(page, folder):
    report = pd.read_csv(ROOT / "data" / "08_reporting" / folder / "paired_differences.csv")
    index = report.set_index(["Comparison", "Benchmark", "View", "Cycle"])
    quoted = _quoted(ROOT / "docs" / page)
    assert len(quoted) >= 30, f"{page}: expected its grid tables"
    for comparison, benchmark, view, cycle, cell in quoted:
        where = f"{page}: {comparison}, {benchmark} {view}, cycle {cycle}"
        match = CELL.match(cell)
        assert match, f"{where}: {cell!r} is no difference with its interval"
        row = index.loc[(comparison, benchmark, view, cycle)]
        assert abs(float(match[1]) - row["Difference (pp)"]) <= 0.05 + 1e-9, where
        assert f"[{match[2]}, {match[3]}]" == row["95% CI (pp)"], where
