"""The checkpoint dataset publishes staged model directories beside their manifests."""

from __future__ import annotations

import shutil

import pytest

from resail_pipeline.checkpoints import CheckpointError, CheckpointInfo, read_checkpoint_info
from resail_pipeline.datasets import CheckpointDataset


def _staged(tiny_checkpoint, staging, name="run"):
    path = staging / name
    shutil.copytree(tiny_checkpoint, path)
    return read_checkpoint_info(path)


def test_a_staged_directory_moves_beside_the_manifest(tmp_path, tiny_checkpoint):
    staging = tmp_path / "staging"
    info = _staged(tiny_checkpoint, staging)
    dataset = CheckpointDataset(str(tmp_path / "c1" / "checkpoint.parquet"), str(staging))
    dataset.save(info.to_frame())
    assert not (staging / "run").exists()
    loaded = CheckpointInfo.from_frame(dataset.load())
    assert loaded.path == str(tmp_path / "c1" / "policy")
    assert loaded.sha256 == info.sha256
    # a rerun replaces the model in place
    again = _staged(tiny_checkpoint, staging, "rerun")
    dataset.save(again.to_frame())
    assert CheckpointInfo.from_frame(dataset.load()).path == str(tmp_path / "c1" / "policy")
    assert sorted(p.name for p in (tmp_path / "c1").iterdir()) == ["checkpoint.parquet", "policy"]


def test_a_checkpoint_outside_staging_is_recorded_where_it_is(tmp_path, tiny_checkpoint):
    dataset = CheckpointDataset(str(tmp_path / "c0" / "checkpoint.parquet"), str(tmp_path / "s"))
    dataset.save(read_checkpoint_info(tiny_checkpoint).to_frame())
    assert CheckpointInfo.from_frame(dataset.load()).path == str(tiny_checkpoint)
    assert tiny_checkpoint.is_dir()


def test_a_missing_model_directory_is_refused(tmp_path, tiny_checkpoint):
    info = read_checkpoint_info(tiny_checkpoint)
    frame = info.to_frame().assign(path=str(tmp_path / "nowhere"))
    dataset = CheckpointDataset(str(tmp_path / "c" / "checkpoint.parquet"), str(tmp_path))
    with pytest.raises(Exception, match="no such directory"):
        dataset.save(frame)
    with pytest.raises(CheckpointError, match="no such directory"):
        CheckpointInfo.from_frame(frame)
