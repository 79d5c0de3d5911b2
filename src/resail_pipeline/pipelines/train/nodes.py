"""Nodes of the ``train`` pipeline."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pandas as pd

from resail_pipeline.pipelines.common import RunConfig, policy_info
from resail_pipeline.training import TrainConfig, launch, write_inputs
from resail_pipeline.training.launcher import CONFIG_FILE


def train_node(
    policy: pd.DataFrame,
    steps: pd.DataFrame,
    summaries: pd.DataFrame,
    responses: pd.DataFrame,
    probe_set: pd.DataFrame,
    initial_policy: pd.DataFrame,
    train_params: dict[str, Any],
    run_params: dict[str, Any],
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Write the resolved configuration and the input manifest, run the trainer in a subprocess
    (``torchrun`` where it takes several processes) and return the new checkpoint's manifest, one
    ``train_metrics`` row per update, the selected steps of every update and the PI-sensitivity
    probe's rows (one per update and probe step, update 0 the cycle start; with
    ``train.probe.enabled`` off, no rows: the probe set is then not handed to the trainer).
    GRPO gets the initial policy as its frozen KL reference; ReAct does not train (an error).

    A non-zero exit of the trainer fails the node with the last lines of its log (kept, with the
    run's inputs, in the staging area); the checkpoint is staged and only published by the catalog
    once complete, with the run's configuration and log beside its weights. The trainer's
    snapshots stay in the staging area across reruns: a rerun after a kill continues from the
    last update the killed run completed.
    """
    run = RunConfig.from_params(run_params)
    info = policy_info(policy)
    cycle = info.cycle + 1
    work = run.staging_path(f"cycle_{cycle}")
    config = TrainConfig.from_dict(  # validated here, before anything is written or loaded
        {
            **train_params,
            "method": run.method,
            "run": {
                "checkpoint": str(work / "policy"),
                "run_dir": str(work / "run"),
                "policy_name": f"{run.experiment}-cycle_{cycle}",
                "cycle": cycle,
                "snapshots": str(run.snapshots_path(f"cycle_{cycle}")),
            },
        },
        "train",
    )
    manifest = write_inputs(
        work / "run",
        policy=info.path,
        steps=steps,
        summaries=summaries,
        responses=responses if config.uses_cached_responses else None,
        probe=probe_set if config.probe.enabled else None,
        reference=policy_info(initial_policy).path if config.parent == "grpo" else None,
    )
    config = config.replace(run=config.run.replace(manifest=str(manifest)))
    result = launch(config)
    # the run's configuration and log travel with the model; the input snapshots are catalog copies
    for path in (result.log_path, Path(config.run.run_dir) / CONFIG_FILE):
        shutil.copy2(path, Path(config.run.checkpoint) / path.name)
    shutil.rmtree(config.run.run_dir)
    columns = {"experiment": run.experiment, "method": run.method, "cycle": cycle}
    return (
        result.checkpoint.to_frame(),
        result.metrics.assign(**columns),
        result.selected.assign(**columns),
        result.probe.assign(**columns),
    )
