"""A run's figures in MLflow, beside the Parquet tables that stay their source of truth.

A Kedro run (:class:`~resail_pipeline.hooks.TrackingHook`) opens one MLflow run and logs into it,
as the run writes its datasets:

- its parameters, every section flattened to dotted keys (``train.optimizer.lr``);
- each cycle's training metrics, one step per update, counted over the run's cycles (update ``u``
  of cycle ``r`` is step ``(r - 1) * updates + u``): the losses, the selected steps and their
  scores, the tokens and each phase's seconds (``train/<column>``), the cycle at each step
  (``train/cycle``);
- each evaluation's success per split and view at the cycle's step (``success/<split>/<view>``,
  its mean over decoding seeds, and ``.../sd``);
- the report's figures and tables as artifacts (``report/``).

The store is local by default: an SQLite file (``tracking.uri``, under the data folder), with the
artifacts beside it; ``mlflow ui --backend-store-uri sqlite:///<it>`` shows it (the ``mlflow``
package: the ``tracking`` extra installs only its client). ``tracking.enabled: false`` turns it
off; without the ``tracking`` extra nothing is logged, said once.
"""

from __future__ import annotations

import importlib.util
import logging
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from resail_pipeline.config import Config, ConfigError, Field, model_validator

__all__ = ["Tracker", "TrackingConfig", "flat_params"]

logger = logging.getLogger(__name__)

#: MLflow's longest parameter value; longer ones are cut, saying so
MAX_PARAM_CHARS = 6000
#: what MLflow refuses in a key (it takes letters, digits, ``_-. :/``): written as ``_``
_KEY = re.compile(r"[^\w\-. :/]")
#: the train_metrics columns logged, one metric each (the rest are lists or ids)
TRAIN_COLUMNS = (
    "loss",
    "loss_sel",
    "loss_ret",
    "num_steps",
    "num_selected",
    "score_selected_mean",
    "score_all_mean",
    "tokens",
    "seconds_response",
    "seconds_scoring",
    "seconds_optimisation",
    "seconds_other",
)


class TrackingConfig(Config):
    """``params:tracking``."""

    enabled: bool = True
    """Log the run to MLflow (where the ``tracking`` extra is installed)."""
    uri: str = Field("data/09_tracking/mlflow.db", min_length=1)
    """The store: a path (an SQLite file, created with its folder, the artifacts beside it) or
    any MLflow tracking URI."""
    experiment: str = Field("resail-pipeline", min_length=1)
    """The MLflow experiment the runs are filed under."""

    @model_validator(mode="after")
    def _not_blank(self) -> TrackingConfig:
        for name in ("uri", "experiment"):
            value = getattr(self, name)
            if not value.strip():
                raise ConfigError(f"{name}: must be a non-empty string, got {value!r}")
        return self

    @property
    def store_file(self) -> Path | None:
        """The SQLite file :attr:`uri` names where it is a bare path; ``None`` for a URI."""
        if "://" in self.uri or self.uri.startswith("sqlite:"):
            return None
        return Path(self.uri).resolve()

    @property
    def tracking_uri(self) -> str:
        """:attr:`uri` as MLflow takes it: a bare path becomes an SQLite URI (absolute)."""
        return self.uri if self.store_file is None else f"sqlite:///{self.store_file}"

    @property
    def artifact_root(self) -> str | None:
        """Where a new experiment keeps its artifacts: beside a local store's file."""
        return None if self.store_file is None else self.store_file.with_name("artifacts").as_uri()


def flat_params(params: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """``params`` as one level of dotted keys, each value as MLflow stores it (a string, cut at
    :data:`MAX_PARAM_CHARS`); a character MLflow refuses in a key becomes ``_``."""
    flat: dict[str, str] = {}
    for key, value in params.items():
        name = f"{prefix}{_KEY.sub('_', str(key))}"
        if isinstance(value, Mapping) and value:
            flat.update(flat_params(value, f"{name}."))
        else:
            text = str(value)
            flat[name] = (
                text if len(text) <= MAX_PARAM_CHARS else text[: MAX_PARAM_CHARS - 3] + "..."
            )
    return flat


class Tracker:
    """One MLflow run of a Kedro run; every method does nothing where tracking is off.

    Args:
        config: ``params:tracking``.
        name: the run's name (its data folder and experiment).
        tags: recorded with the run.
    """

    def __init__(self, config: TrackingConfig, name: str, tags: Mapping[str, str] = ()) -> None:
        self.config = config
        self.run_id: str | None = None
        if not config.enabled:
            return
        if importlib.util.find_spec("mlflow") is None:
            logger.info(
                "tracking: MLflow is not installed; nothing is tracked "
                "(pip install -e '.[tracking]', or set tracking.enabled: false)"
            )
            return
        import mlflow

        if config.store_file is not None:
            config.store_file.parent.mkdir(parents=True, exist_ok=True)
        mlflow.set_tracking_uri(config.tracking_uri)
        client = mlflow.MlflowClient()
        experiment = client.get_experiment_by_name(config.experiment)
        experiment_id = (
            experiment.experiment_id
            if experiment is not None
            else client.create_experiment(config.experiment, artifact_location=config.artifact_root)
        )
        run = client.create_run(experiment_id, run_name=name, tags=dict(tags))
        self.client, self.run_id = client, run.info.run_id
        logger.info("tracking: MLflow run %s (%s) in %s", name, self.run_id, config.tracking_uri)

    @property
    def active(self) -> bool:
        return self.run_id is not None

    def log_params(self, params: Mapping[str, Any]) -> None:
        """Every parameter, flattened (:func:`flat_params`)."""
        if not self.active:
            return
        from mlflow.entities import Param

        items = [Param(k, v) for k, v in flat_params(params).items()]
        for start in range(0, len(items), 100):  # MLflow's batch limit
            self.client.log_batch(self.run_id, params=items[start : start + 100])

    def log_train_metrics(self, metrics: pd.DataFrame, cycle: int, updates: int) -> None:
        """A cycle's ``train_metrics``, one step per update, counted over the run's cycles."""
        if not self.active or metrics.empty:
            return
        from mlflow.entities import Metric

        rows = []
        for row in metrics.itertuples(index=False):
            step = (cycle - 1) * updates + int(row.update)
            rows.append(Metric("train/cycle", cycle, 0, step))
            for column in TRAIN_COLUMNS:
                value = getattr(row, column, None)
                if value is not None and not (isinstance(value, float) and math.isnan(value)):
                    rows.append(Metric(f"train/{column}", float(value), 0, step))
        self._log_metrics(rows)

    def log_eval_summary(self, summary: pd.DataFrame, step: int) -> None:
        """An evaluation's success per split and view (mean over decoding seeds, and its sample
        SD where there are two seeds or more) at ``step``."""
        if not self.active or summary.empty:
            return
        from mlflow.entities import Metric

        rows = []
        for row in summary.itertuples(index=False):
            name = f"success/{row.split}/{row.view}"
            rows.append(Metric(name, float(row.mean), 0, step))
            if not math.isnan(float(row.sd)):
                rows.append(Metric(f"{name}/sd", float(row.sd), 0, step))
        self._log_metrics(rows)

    def log_artifact(self, path: str | Path, folder: str = "report") -> None:
        """A file the run wrote (a figure, a table)."""
        if self.active and Path(path).is_file():
            self.client.log_artifact(self.run_id, str(path), folder)

    def end(self, failed: bool = False) -> None:
        """Close the run, ``FAILED`` where the Kedro run failed."""
        if self.active:
            self.client.set_terminated(self.run_id, "FAILED" if failed else "FINISHED")
            self.run_id = None

    def _log_metrics(self, rows: list[Any]) -> None:
        for start in range(0, len(rows), 1000):  # MLflow's batch limit
            self.client.log_batch(self.run_id, metrics=rows[start : start + 1000])
