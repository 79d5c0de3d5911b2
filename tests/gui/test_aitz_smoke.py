"""``kedro run --env smoke --pipelines=aitz`` end to end in a scratch copy of the project, then
the exploration notebook top to bottom on its data."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def test_smoke_run_draws_both_accuracy_curves(tmp_path, execute_notebook):
    for name in ("pyproject.toml", "conf"):
        (tmp_path / name).symlink_to(ROOT / name)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "resail_pipeline").symlink_to(ROOT / "src" / "resail_pipeline")
    (tmp_path / "notebooks").mkdir()  # a real folder: the notebook finds the project from it
    shutil.copy(ROOT / "notebooks" / "explore_aitz.ipynb", tmp_path / "notebooks")
    env = {**os.environ, "KEDRO_DISABLE_TELEMETRY": "true", "PYTHONHASHSEED": "0"}
    result = subprocess.run(
        [sys.executable, "-m", "kedro", "run", "--env", "smoke", "--pipelines=aitz"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = tmp_path / "data" / "07_model_output" / "aitz-smoke"
    curves = {run: pd.read_parquet(out / run / "curve.parquet") for run in ("oel", "oel_sgs")}
    for curve in curves.values():
        assert curve["update"].tolist() == [0, 2, 4]
        assert curve["accuracy"].between(0, 1).all()
    # both runs start from the same initial policy, monitored on the same steps and seed
    assert curves["oel"]["accuracy"].iloc[0] == curves["oel_sgs"]["accuracy"].iloc[0]
    assert curves["oel"]["steps"].nunique() == 1
    feature = tmp_path / "data" / "04_feature" / "aitz-smoke"
    table = pd.read_parquet(feature / "filter.parquet")
    assert int(table["kept"].sum()) == int(np.ceil(0.8 * len(table)))
    kept_scores = table.loc[table["kept"], "jsd"]
    assert kept_scores.min() >= table.loc[~table["kept"], "jsd"].max()
    report = tmp_path / "data" / "08_reporting" / "aitz-smoke"
    assert (report / "fig5b_accuracy.png").stat().st_size > 10_000
    assert "| OEL + SGS |" in (report / "accuracy.md").read_text()
    for run in ("oel", "oel_sgs"):
        assert list(
            (tmp_path / "data" / "06_models" / "aitz-smoke" / run / "policy").glob("*.safetensors")
        )

    notebook = execute_notebook(
        tmp_path / "notebooks" / "explore_aitz.ipynb",
        tmp_path / "executed.ipynb",
        {**env, "KEDRO_ENV": "smoke"},
    )
    assert notebook.returncode == 0, notebook.stderr[-3000:]
