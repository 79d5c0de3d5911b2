"""The main job end to end on the smoke configuration, in a scratch copy of the project.

One run is killed during cycle 2 and started again: the second run finishes without redoing
cycle 1. Then the report is written and the exploration notebook executes top to bottom.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
KEDRO = [sys.executable, "-m", "kedro"]
FIGURES = ("fig1a_success", "fig3_dual_view", "fig4_sweeps", "fig5a_cost", "fig6_sensitivity")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """The project's code and configuration, with a data folder of its own."""
    path = tmp_path_factory.mktemp("project")
    for name in ("pyproject.toml", "conf", "reference"):
        if (ROOT / name).exists():
            (path / name).symlink_to(ROOT / name)
    (path / "src").mkdir()  # Kedro wants the source folder inside the project
    (path / "src" / "resail_pipeline").symlink_to(ROOT / "src" / "resail_pipeline")
    # a real folder: Jupyter resolves its working directory, and the notebook finds the project
    # by walking up from it
    (path / "notebooks").mkdir()
    shutil.copy(ROOT / "notebooks" / "explore_cycle.ipynb", path / "notebooks")
    return path


def _env() -> dict[str, str]:
    # a wide console, so that log lines are not wrapped
    return {
        **os.environ,
        "KEDRO_DISABLE_TELEMETRY": "true",
        "PYTHONHASHSEED": "0",
        "COLUMNS": "200",
    }


def _kedro(project: Path, *args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*KEDRO, *args],
        cwd=project,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _data(project: Path, layer: str, *parts: str) -> Path:
    return project / "data" / layer / "textcraft-smoke" / Path(*parts)


def test_smoke_run_resumes_reports_and_explores(project, execute_notebook):
    command = [*KEDRO, "run", "--env", "smoke", "--pipelines", "cycle", "--only-missing-outputs"]
    # 1. start the main job and kill it once cycle 2 has begun
    cycle_2_started = _data(project, "02_intermediate", "oel_resail", "cycle_2", "steps.parquet")
    with subprocess.Popen(
        command,
        cwd=project,
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    ) as first:
        deadline = time.monotonic() + 1500
        while not cycle_2_started.exists():
            assert first.poll() is None, "the run ended before cycle 2 began"
            assert time.monotonic() < deadline, "cycle 2 did not begin in time"
            time.sleep(1)
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()

    cycle_1 = {
        path: path.stat().st_mtime_ns
        for path in project.glob("data/*/textcraft-smoke/oel_resail/cycle_1/**/*")
        if path.is_file()
    }
    checkpoint_1 = _data(project, "06_models", "oel_resail", "cycle_1", "checkpoint.parquet")
    assert checkpoint_1 in cycle_1
    assert not _data(project, "06_models", "oel_resail", "cycle_3", "checkpoint.parquet").exists()

    # 2. the same command again continues from what exists
    second = subprocess.run(
        command, cwd=project, env=_env(), capture_output=True, text=True, timeout=1800
    )
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    log = second.stdout + second.stderr
    ran = set(re.findall(r"node (\S+) finished in", log))
    assert not any(name.startswith(("cycle_0.", "cycle_1.")) for name in ran), ran
    assert "cycle_3.train_node" in ran
    for path, mtime in cycle_1.items():
        assert path.stat().st_mtime_ns == mtime, f"{path} was rewritten"
    for r in range(4):
        folder = "shared" if r == 0 else "oel_resail"
        summary = pd.read_parquet(
            _data(project, "07_model_output", folder, f"cycle_{r}", "eval_summary.parquet")
        )
        # one row per view (the smoke configuration evaluates both), two decoding seeds each
        assert list(summary["cycle"]) == [r, r]
        assert sorted(summary["view"]) == ["ordinary", "privileged"]
        assert all(len(per_seed) == 2 for per_seed in summary["success_per_seed"])

    # 3. the report: table 1 and the four figures
    report = _kedro(project, "run", "--env", "smoke", "--pipelines", "report", timeout=600)
    assert report.returncode == 0, report.stderr[-3000:]
    reporting = project / "data" / "08_reporting" / "textcraft-smoke"
    table = (reporting / "main_results.md").read_text()
    assert "ReAct" in table and "Cycle 3" in table
    for name in FIGURES:
        assert (reporting / f"{name}.png").read_bytes()[:4] == b"\x89PNG"

    # 3b. every run is in the MLflow store (the tracking extra): its parameters, the losses of
    # every update and the success of every cycle, the report's figures
    if importlib.util.find_spec("mlflow") is not None:
        _check_tracking(project, cycles=3)

    # 4. the notebook executes top to bottom on the smoke data
    notebook = execute_notebook(
        project / "notebooks" / "explore_cycle.ipynb",
        project / "executed.ipynb",
        {**_env(), "KEDRO_ENV": "smoke"},
    )
    assert notebook.returncode == 0, notebook.stderr[-3000:]


@pytest.mark.alfworld
def test_an_alfworld_smoke_run_builds_its_policy_and_evaluates_id_and_ood(project, tmp_path):
    """ALFWorld through the whole cycle pipeline: a tiny generated game set (the run's
    data_path), an initial policy built in the run, every checkpoint evaluated on the ID and OOD
    splits in both views, and the report's ALFWorld columns."""
    pytest.importorskip("alfworld")
    from resail_pipeline.envs.alfworld_games import GameGenConfig, write_games

    games = tmp_path / "games"
    write_games(games, GameGenConfig(train=4, id=4, ood=4, dev=1, clone=4))
    params = f"run.env=alfworld,bootstrap.reference=null,run.env_options.data_path={games}"
    run = _kedro(project, "run", "--env", "smoke", "--pipelines", "cycle", "--params", params)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    data = project / "data" / "07_model_output" / "alfworld-smoke"
    for r in range(4):
        folder = "shared" if r == 0 else "oel_resail"
        summary = pd.read_parquet(data / folder / f"cycle_{r}" / "eval_summary.parquet")
        assert sorted(zip(summary["split"], summary["view"], strict=True)) == [
            ("id", "ordinary"),
            ("id", "privileged"),
            ("ood", "ordinary"),
            ("ood", "privileged"),
        ]
        assert set(summary["env"]) == {"alfworld"} and set(summary["cycle"]) == {r}
        assert all(len(per_seed) == 2 for per_seed in summary["success_per_seed"])

    report = _kedro(project, "run", "--env", "smoke", "--pipelines", "report", "--params", params)
    assert report.returncode == 0, report.stderr[-3000:]
    table = (project / "data" / "08_reporting" / "alfworld-smoke" / "main_results.md").read_text()
    assert "ALFWorld (ID)" in table and "ALFWorld (OOD)" in table and "Cycle 3" in table


def _check_tracking(project: Path, cycles: int) -> None:
    """The smoke runs' MLflow store holds what tracking.py says it logs."""
    import mlflow

    params = yaml.safe_load((project / "conf" / "smoke" / "parameters.yml").read_text())
    updates = params["train"]["schedule"]["updates"]
    client = mlflow.MlflowClient(f"sqlite:///{project / 'data' / '09_tracking' / 'mlflow.db'}")
    (experiment,) = client.search_experiments(filter_string="name = 'resail-pipeline'")
    runs = client.search_runs([experiment.experiment_id])
    # the killed cycle run (never ended), the one that continued it, the report
    assert sorted(r.info.status for r in runs) == ["FINISHED", "FINISHED", "RUNNING"]
    assert all(r.data.params["run.method"] == "oel_resail" for r in runs)
    losses = [m.step for r in runs for m in client.get_metric_history(r.info.run_id, "train/loss")]
    assert sorted(losses) == list(range(cycles * updates))
    success = {
        m.step
        for r in runs
        for m in client.get_metric_history(r.info.run_id, "success/test/ordinary")
    }
    assert success == {cycle * updates for cycle in range(cycles + 1)}
    figures = {a.path for r in runs for a in client.list_artifacts(r.info.run_id, "report")}
    assert {f"report/{name}.png" for name in FIGURES} <= figures
