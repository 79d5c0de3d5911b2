"""``kedro run``: a configuration error is one line and exit status 2, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from pyarrow.lib import ArrowException

from resail_pipeline.checkpoints import CheckpointError
from resail_pipeline.cli import one_line_errors
from resail_pipeline.config import ConfigError
from resail_pipeline.gui.episodes import EpisodeError
from resail_pipeline.schemas import SchemaError

ROOT = Path(__file__).resolve().parents[1]


def _command(error: Exception) -> click.Command:
    @click.command()
    @click.option("--value", default=1)
    def fake_run(value: int) -> None:
        raise error

    return fake_run


@pytest.mark.parametrize(
    "error",
    [
        ConfigError("train.resail.rho: must be in (0, 1], got 2"),
        CheckpointError("x: gone"),
        EpisodeError("data/01_raw/aitz/train: no such folder"),
    ],
)
def test_user_errors_print_one_line(error):
    result = CliRunner().invoke(one_line_errors(_command(error)), ["--value", "3"])
    assert result.exit_code == 2
    assert result.output == f"Error: {error}\n"


def test_other_errors_keep_their_traceback():
    result = CliRunner().invoke(one_line_errors(_command(RuntimeError("bug"))), [])
    assert isinstance(result.exception, RuntimeError)


def test_a_user_error_wrapped_by_kedros_dataset_loading_is_unwrapped():
    from kedro.io import DatasetError

    def load() -> None:
        try:
            raise CheckpointError("data/06_models/cycle_2: sha256 differs from its manifest")
        except CheckpointError as error:
            raise DatasetError("Failed while loading data from dataset cycle_2.policy") from error

    @click.command()
    def fake_run() -> None:
        load()

    result = CliRunner().invoke(one_line_errors(fake_run), [])
    assert result.exit_code == 2
    assert result.output == "Error: data/06_models/cycle_2: sha256 differs from its manifest\n"

    @click.command()
    def other() -> None:
        raise DatasetError("bad file")

    assert isinstance(CliRunner().invoke(one_line_errors(other), []).exception, DatasetError)


def _not_parquet() -> Exception:
    """What pyarrow raises reading a file that is no Parquet (a disk filled mid-write)."""
    import tempfile

    import pyarrow.parquet as pq

    with tempfile.NamedTemporaryFile(suffix=".parquet") as file:
        file.write(b"not a parquet file")
        file.flush()
        try:
            pq.read_table(file.name)
        except ArrowException as error:
            return error
    raise AssertionError("pyarrow read a file that is no Parquet")


@pytest.mark.parametrize(
    "cause",
    [
        SchemaError("trajectories: missing column(s) ['success']"),
        PermissionError(13, "Permission denied", "data/07_model_output/x/eval_results.parquet"),
        _not_parquet(),
    ],
)
def test_a_dataset_file_that_breaks_its_schema_or_cannot_be_written_is_one_line(cause):
    from kedro.io import DatasetError

    @click.command()
    def fake_run() -> None:  # fake: a node's dataset failing as Kedro reports it
        try:
            raise cause
        except (SchemaError, OSError, ArrowException) as error:
            raise DatasetError(
                "Failed while saving data to dataset AtomicParquetDataset(filepath=data/x.parquet)."
                f"\n{error}"
            ) from error

    result = CliRunner().invoke(one_line_errors(fake_run), [])
    assert result.exit_code == 2
    (line,) = result.output.splitlines()
    assert line.startswith("Error: Failed while saving data to dataset AtomicParquetDataset(")
    assert line.endswith(" ".join(str(cause).split()))


@pytest.mark.parametrize(
    "error",
    [
        SchemaError("data/02_intermediate/x/steps.parquet: steps table is missing column(s) ['t']"),
        PermissionError(13, "Permission denied", "data/06_models/.staging/textcraft/run"),
    ],
)
def test_a_file_error_raised_in_a_node_is_one_line(error):
    result = CliRunner().invoke(one_line_errors(_command(error)), [])
    assert result.exit_code == 2
    assert result.output == f"Error: {' '.join(str(error).split())}\n"


@pytest.mark.parametrize("option", ["--pipelines=cylce", "--pipelines=cycle,bogus"])
def test_an_unknown_pipeline_is_one_line_naming_the_pipelines(option):
    from kedro.framework.cli.project import run

    result = CliRunner().invoke(one_line_errors(run), [option])
    assert result.exit_code == 2
    (line,) = result.output.splitlines()
    assert line.startswith("Error: --pipelines: no pipeline named '")
    assert "cylce" in line or "bogus" in line
    assert "the pipelines are aitz, bootstrap, collect, cycle," in line


@pytest.mark.parametrize("value", ["0", "abc", "-1", ""])
def test_a_bad_number_of_cycles_is_one_line(value, monkeypatch):
    from kedro.framework.cli.project import run

    monkeypatch.setenv("RESAIL_CYCLES", value)
    result = CliRunner().invoke(one_line_errors(run), ["--pipelines=cycle"])
    assert result.exit_code == 2
    assert result.output.splitlines() == [
        f"Error: RESAIL_CYCLES: expected a positive integer, got {value!r}"
    ]


def test_the_guarded_run_keeps_kedros_options():
    from kedro.framework.cli.project import run

    guarded = one_line_errors(run)
    assert [p.name for p in guarded.params] == [p.name for p in run.params]
    assert run.callback is not guarded.callback  # Kedro's own command is left as it was


@pytest.mark.parametrize(
    ("params", "line"),
    [
        ("evaluate.temperature=-1", "Error: evaluate.temperature: must be >= 0, got -1"),
        ("trian.resail.rho=0.5", "Error: parameters: unknown top-level key(s) ['trian']"),
    ],
)
def test_kedro_run_prints_a_configuration_error_as_one_line(params, line):
    env = {**os.environ, "KEDRO_DISABLE_TELEMETRY": "true"}
    done = subprocess.run(
        [sys.executable, "-m", "kedro", "run", "--pipelines=cycle", "--params", params],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 2, output
    assert output.rstrip().splitlines()[-1].startswith(line)
    assert "Traceback" not in output


def test_missing_aitz_data_is_one_line_naming_the_layout(tmp_path):
    missing = tmp_path / "aitz"
    params = f"aitz.data.source=release,aitz.data.root={missing}"
    done = subprocess.run(
        [sys.executable, "-m", "kedro", "run", "--pipelines=aitz", "--params", params],
        cwd=ROOT,
        env={**os.environ, "KEDRO_DISABLE_TELEMETRY": "true"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 2, output
    last = output.rstrip().splitlines()[-1]
    assert last.startswith(f"Error: {missing / 'train'}: no such folder"), last
    assert "<split>/<category>/<episode_id>" in last and "Traceback" not in output
