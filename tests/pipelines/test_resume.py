"""A rerun after a cycle's published files were damaged: the preflight and the catalog either
recompute what is missing or refuse in one line, never read the damage."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

CONF = Path(__file__).resolve().parents[2] / "conf"
RUN = {"env": "textcraft", "method": "oel", "experiment": "oel"}


def _catalog(tmp_path: Path, tiny_checkpoint: Path):
    """Cycle 1's checkpoint published in ``tmp_path``, and cycle 2's collection made with it."""
    from kedro.config import OmegaConfigLoader
    from kedro.io import DataCatalog, MemoryDataset

    from resail_pipeline.checkpoints import MANIFEST_NAME, read_checkpoint_info, write_manifest
    from resail_pipeline.datasets import CheckpointDataset
    from resail_pipeline.pipelines.collect.nodes import collect_config, settings_of
    from resail_pipeline.pipelines.common import RunConfig
    from resail_pipeline.settings import CONFIG_LOADER_ARGS

    staging = tmp_path / "staging"
    params = OmegaConfigLoader(str(CONF), **CONFIG_LOADER_ARGS)["parameters"]
    params.update(run={**RUN, "staging_dir": str(staging)})
    trained = shutil.copytree(tiny_checkpoint, staging / "cycle_1" / "policy")
    manifest = json.loads((trained / MANIFEST_NAME).read_text())
    write_manifest(trained, {**manifest, "cycle": 1})  # as the trainer writes it
    info = read_checkpoint_info(trained)
    checkpoint = CheckpointDataset(str(tmp_path / "cycle_1" / "checkpoint.parquet"), str(staging))
    checkpoint.save(info.to_frame())
    run = RunConfig.from_params(params["run"])
    settings = settings_of(collect_config(params["collect"], params["train"], run), run, info)
    tasks = pd.DataFrame({"env": "textcraft", "split": "train", "task_id": [2], "seed": [5]})
    datasets = {
        "parameters": MemoryDataset(params),
        "cycle_1.checkpoint": checkpoint,
        "cycle_2.tasks": MemoryDataset(tasks.assign(settings=json.dumps(settings))),
    }
    return DataCatalog(datasets)


def test_a_truncated_checkpoint_row_under_a_later_collection_is_rebuilt_not_refused(
    tmp_path, tiny_checkpoint
):
    """A truncated cycle_1/checkpoint.parquet counted as missing, and the preflight then stopped
    in a 165-line ValueError ("a collection exists, but not the policy that made it") where the
    documentation promised a rerun: the row is rebuilt from the published model's manifest."""
    from kedro.pipeline import Pipeline, node

    from resail_pipeline.hooks import PreflightHook

    catalog = _catalog(tmp_path, tiny_checkpoint)
    row = tmp_path / "cycle_1" / "checkpoint.parquet"
    before = pd.read_parquet(row)
    row.write_bytes(row.read_bytes()[: row.stat().st_size // 2])
    reader = Pipeline([node(lambda x: x, "cycle_2.tasks", "cycle_2.out", name="reader")])
    hook = PreflightHook()
    try:
        hook.before_pipeline_run({}, reader, catalog)
    finally:
        hook.after_pipeline_run()
    pd.testing.assert_frame_equal(pd.read_parquet(row), before)


def test_the_remedy_for_changed_weights_names_every_later_cycle(tmp_path, tiny_checkpoint):
    """ "Remove this cycle's outputs and rerun" left the next cycle's collection, which the
    preflight then refused: the remedy names the later cycles too."""
    from kedro.io import DatasetError

    from resail_pipeline.checkpoints import CheckpointError
    from resail_pipeline.cli import user_error

    catalog = _catalog(tmp_path, tiny_checkpoint)
    weights = next((tmp_path / "cycle_1" / "policy").glob("*.safetensors"))
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(DatasetError) as error:
        catalog.load("cycle_1.checkpoint")
    cause = user_error(error.value)  # what the command prints, on one line
    assert isinstance(cause, CheckpointError) and "\n" not in str(cause)
    assert "remove the outputs of cycle 1 and of every later cycle" in str(cause)


def test_a_collection_without_its_policy_is_one_line_saying_what_to_remove(
    tmp_path, tiny_checkpoint
):
    """Removing only cycle 1's outputs (the tool's old advice) left cycle 2's collection: a
    165-line ValueError. It is one line, naming the later cycles to remove."""
    from kedro.pipeline import Pipeline, node

    from resail_pipeline.checkpoints import CheckpointError
    from resail_pipeline.hooks import PreflightHook

    catalog = _catalog(tmp_path, tiny_checkpoint)
    shutil.rmtree(tmp_path / "cycle_1")
    reader = Pipeline([node(lambda x: x, "cycle_2.tasks", "cycle_2.out", name="reader")])
    hook = PreflightHook()
    with pytest.raises(CheckpointError) as error:
        hook.before_pipeline_run({}, reader, catalog)
    hook.after_pipeline_run()
    assert "\n" not in str(error.value)
    assert "remove the outputs of cycle 2 and of every later cycle" in str(error.value)
