"""MLflow tracking: what a run logs, where, and the switch that turns it off."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from resail_pipeline.config import ConfigError
from resail_pipeline.tracking import Tracker, TrackingConfig, flat_params

mlflow = pytest.importorskip("mlflow")


def _train_metrics(updates: int) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "update": list(range(updates)),
            "loss": [1.0 / (u + 1) for u in range(updates)],
            "loss_sel": [0.5] * updates,
            "loss_ret": [float("nan")] * updates,  # OEL: no retention
            "num_selected": [3] * updates,
            "seconds_response": [1.5] * updates,
        }
    )


def _eval_summary(cycle: int) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "cycle": [cycle, cycle],
            "split": ["test", "test"],
            "view": ["ordinary", "privileged"],
            "mean": [0.25, 0.5],
            "sd": [0.05, float("nan")],
        }
    )


def _run(tmp_path: Path):
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}")
    (experiment,) = client.search_experiments(filter_string="name = 'resail-pipeline'")
    (run,) = client.search_runs([experiment.experiment_id])
    return client, run


def test_a_run_logs_its_parameters_updates_success_and_figures(tmp_path):
    config = TrackingConfig(uri=str(tmp_path / "store" / "mlflow.db"))
    tracker = Tracker(config, "textcraft-smoke/oel_resail", {"kedro.env": "smoke"})
    assert tracker.active
    tracker.log_params({"train": {"optimizer": {"lr": 1e-5}, "method": "oel"}, "data_tag": ""})
    tracker.log_train_metrics(_train_metrics(3), cycle=2, updates=3)
    tracker.log_eval_summary(_eval_summary(2), step=6)
    figure = tmp_path / "fig1a_success.png"
    figure.write_bytes(b"\x89PNG")
    tracker.log_artifact(figure)
    tracker.end()

    client, run = _run(tmp_path)
    assert run.info.run_name == "textcraft-smoke/oel_resail" and run.info.status == "FINISHED"
    assert run.data.params == {"train.optimizer.lr": "1e-05", "train.method": "oel", "data_tag": ""}
    assert run.data.tags["kedro.env"] == "smoke"
    loss = client.get_metric_history(run.info.run_id, "train/loss")
    assert [(m.step, m.value) for m in loss] == [(3, 1.0), (4, 0.5), (5, pytest.approx(1 / 3))]
    assert client.get_metric_history(run.info.run_id, "train/loss_ret") == []  # NaN: not logged
    assert {m.step for m in client.get_metric_history(run.info.run_id, "train/cycle")} == {3, 4, 5}
    success = client.get_metric_history(run.info.run_id, "success/test/privileged")
    assert [(m.step, m.value) for m in success] == [(6, 0.5)]
    assert run.data.metrics["success/test/ordinary/sd"] == 0.05
    assert "success/test/privileged/sd" not in run.data.metrics  # one seed: no SD
    artifacts = [a.path for a in client.list_artifacts(run.info.run_id, "report")]
    assert artifacts == ["report/fig1a_success.png"]
    # the artifacts lie beside the store, not in the working directory
    assert (tmp_path / "store" / "artifacts").is_dir() and not Path("mlruns").exists()


def test_the_switch_turns_tracking_off_and_a_failed_run_is_marked(tmp_path):
    off = Tracker(TrackingConfig(enabled=False, uri=str(tmp_path / "off" / "x.db")), "run")
    off.log_params({"a": 1})
    off.log_train_metrics(_train_metrics(2), cycle=1, updates=2)
    off.end()
    assert not off.active and not (tmp_path / "off").exists()
    failed = Tracker(TrackingConfig(uri=str(tmp_path / "store" / "mlflow.db")), "failing")
    failed.end(failed=True)
    assert _run(tmp_path)[1].info.status == "FAILED"


def test_bad_settings_are_named_and_parameters_flatten():
    with pytest.raises(ConfigError, match=r"^uri: must be a non-empty string"):
        TrackingConfig(uri=" ")
    with pytest.raises(ConfigError, match=r"^enabled"):
        TrackingConfig(enabled="yes")
    assert flat_params({"a": {"b": [1, 2], "c": {}}, "d": "x" * 7000, "T (2)": 1}) == {
        "a.b": "[1, 2]",
        "a.c": "{}",
        "d": "x" * 5997 + "...",
        "T _2_": "1",
    }
    assert TrackingConfig(uri="sqlite:///elsewhere.db").artifact_root is None


def test_the_hook_logs_a_kedro_runs_datasets_as_they_are_saved(tmp_path):
    """The project's hook, over the project's own parameters with the store in a temporary
    folder: parameters when the run starts, a cycle's training metrics and evaluation as they
    are saved, the report's files, the run ended with the pipeline."""
    from types import SimpleNamespace

    from kedro.config import OmegaConfigLoader

    from resail_pipeline.hooks import TrackingHook
    from resail_pipeline.settings import CONFIG_LOADER_ARGS

    root = Path(__file__).resolve().parents[1]
    params = OmegaConfigLoader(str(root / "conf"), **CONFIG_LOADER_ARGS)["parameters"]
    params["tracking"] = {**params["tracking"], "uri": str(tmp_path / "store" / "mlflow.db")}
    table = tmp_path / "main_results.md"
    table.write_text("| method |\n")

    class FakeCatalog:  # fake: the two calls the hook makes of Kedro's catalog
        def load(self, name):
            assert name == "parameters"
            return params

        def get(self, name):
            assert name == "report.main_results_md"
            return SimpleNamespace(_describe=lambda: {"filepath": str(table)})

    hook, catalog = TrackingHook(), FakeCatalog()
    hook.before_pipeline_run({"env": "local", "pipeline_names": ["cycle"]}, None, catalog)
    updates = params["train"]["schedule"]["updates"]
    hook.after_dataset_saved("cycle_1.train_metrics", _train_metrics(updates), None)
    hook.after_dataset_saved("cycle_1.eval_summary", _eval_summary(1), None)
    hook.after_dataset_saved("cycle_1.trajectories", pd.DataFrame(), None)  # not tracked
    hook.after_dataset_saved("report.main_results_md", "| method |\n", None)
    hook.after_pipeline_run({}, None, catalog)

    client, run = _run(tmp_path)
    assert run.info.status == "FINISHED"
    assert run.data.params["train.schedule.updates"] == str(updates)
    assert run.data.params["run.env"] == "textcraft"
    steps = [m.step for m in client.get_metric_history(run.info.run_id, "train/loss")]
    assert steps == list(range(updates))
    success = client.get_metric_history(run.info.run_id, "success/test/ordinary")
    assert [m.step for m in success] == [updates]  # cycle 1 ends after its updates
    assert [a.path for a in client.list_artifacts(run.info.run_id, "report")] == [
        "report/main_results.md"
    ]
