"""scripts/grid_power.py, premise_power.py and grid_progress.py on tiny grids, run as a user runs
them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd

from resail_pipeline.evaluation.stats import summarize_eval_results

ROOT = Path(__file__).resolve().parents[1]


def _results(folder: Path, successes: dict[int, list[bool]], split: str = "test") -> None:
    """``folder/eval_results.parquet``: task ``t`` with one episode per decoding seed, ordinary
    view, ``successes[t][seed]``."""
    cycle, method = int(folder.name.removeprefix("cycle_") or 0), folder.parent.name
    rows = [
        {
            **{"policy_id": f"{method}@{cycle}", "cycle": cycle, "method": method},
            **{"env": "alfworld", "split": split, "view": "ordinary", "num_steps": 3},
            **{"task_id": t, "decoding_seed": s, "success": won},
        }
        for t, per_seed in successes.items()
        for s, won in enumerate(per_seed)
    ]
    folder.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(folder / "eval_results.parquet", index=False)
    summary = summarize_eval_results(pd.DataFrame(rows))
    summary.to_parquet(folder / "eval_summary.parquet", index=False)


def _run(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / script), *args],
        capture_output=True,
        text=True,
        check=False,
    )


def test_grid_power_gives_each_contrasts_standard_error_over_its_paired_games(tmp_path):
    parent = {t: [t % 2 == 0, t % 2 == 0] for t in range(8)}  # half the games, both seeds
    resail = {t: [t % 4 != 3, t % 2 == 0] for t in range(8)}  # games 1 and 5 gain on seed 0
    _results(tmp_path / "oel" / "cycle_1", parent)
    _results(tmp_path / "oel_resail" / "cycle_1", resail)
    done = _run("grid_power.py", "--grid", str(tmp_path))
    assert done.returncode == 0, done.stderr
    row = done.stdout.splitlines()[1].split()
    # per-game differences 0.5 on two of eight games: mean 12.5 points, SD 0.2315, SE 0.0818
    assert row[-4:] == ["8", "12.5", "8.18", "22.9"]
    # a ReSAIL evaluation cut short is refused, naming its cell, not paired on what is left
    _results(tmp_path / "oel_resail" / "cycle_1", {t: resail[t] for t in range(5)})
    done = _run("grid_power.py", "--grid", str(tmp_path))
    assert done.returncode == 1
    assert "oel_resail - oel, cycle 1, test, ordinary: results, baseline: not paired" in done.stderr


def test_premise_power_leaves_out_a_pair_that_does_not_vary(tmp_path):
    grid = tmp_path / "grid"
    # cycle 1 varies (a ratio to learn from); cycle 2 fails every game in both arms (none)
    _results(grid / "oel" / "cycle_1", {t: [t % 2 == 0] for t in range(8)}, split="id")
    _results(grid / "oel_resail" / "cycle_1", {t: [t % 4 == 0] for t in range(8)}, split="id")
    for name in ("oel", "oel_resail"):
        _results(grid / name / "cycle_2", {t: [False] for t in range(8)}, split="id")
    baseline = tmp_path / "shared" / "cycle_0"
    _results(baseline, {t: [t % 2 == 0, t % 3 == 0] for t in range(16)}, split="dev")
    out = tmp_path / "power.json"
    done = _run(
        "premise_power.py",
        *("--grid", str(grid), "--baseline", str(baseline / "eval_results.parquet")),
        *("--out", str(out)),
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert [row["ratio"] for row in report["prior_ratios"]] == [0.4286, None]
    assert report["ratio"] == 0.4286 and "of 1 pairs" in done.stdout


def test_grid_progress_reads_the_cells_evaluated_so_far(tmp_path):
    _results(tmp_path / "shared" / "cycle_0", {t: [t < 4, t < 4] for t in range(8)})
    _results(tmp_path / "oel" / "cycle_1", {t: [t < 6, t < 4] for t in range(8)})
    _results(tmp_path / "oel" / "cycle_2", {t: [t < 2, t < 2] for t in range(8)})
    (tmp_path / "oel_resail" / "cycle_1").mkdir(parents=True)  # trained, not yet evaluated
    out = tmp_path / "reporting" / "progress.md"
    done = _run("grid_progress.py", "--grid", str(tmp_path), "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert out.read_text() == done.stdout
    lines = done.stdout.splitlines()
    # the initial policy's row first, then each experiment's cycles (seeds 75% and 50%: SD 17.7)
    assert [line for line in lines if line.startswith(("| shared", "| oel"))] == [
        "| shared | 0 | 50.0 (0.0) |",
        "| oel | 1 | 62.5 (17.7) |",
        "| oel | 2 | 25.0 (0.0) |",
    ]
    # cycle 1 and 2 against cycle 0, then cycle 2 against cycle 1: games 2 to 5 lost
    assert [line.split(" | ")[0] for line in lines if line.startswith("| OEL")] == [
        "| OEL - ReAct",
        "| OEL - ReAct",
        "| OEL - previous cycle",
    ]
    last = lines[-1].split(" | ")
    assert last[3:5] == ["2", "-37.5"] and last[-2:] == ["0 / 4", "0.125 |"]
    # a cell whose episodes its summary does not count is refused, naming it
    cut = pd.read_parquet(tmp_path / "oel" / "cycle_2" / "eval_results.parquet").iloc[:-1]
    cut.to_parquet(tmp_path / "oel" / "cycle_2" / "eval_results.parquet", index=False)
    done = _run("grid_progress.py", "--grid", str(tmp_path))
    assert done.returncode == 1 and "oel cycle 2 alfworld/test ordinary has 15" in done.stderr
    # a grid whose only evaluation is cycle 0's has nothing to read yet; a path not a folder
    _results(tmp_path / "fresh" / "shared" / "cycle_0", {t: [t < 4] for t in range(8)})
    fresh = _run("grid_progress.py", "--grid", str(tmp_path / "fresh"))
    assert fresh.returncode == 1 and "no trained cycle's eval_results.parquet yet" in fresh.stderr
    wrong = _run("grid_progress.py", "--grid", str(tmp_path / "nowhere"))
    assert wrong.returncode == 1 and "nowhere is not a folder" in wrong.stderr
