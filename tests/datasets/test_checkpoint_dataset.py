"""The checkpoint dataset publishes staged model directories beside their manifests."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest
from kedro.io import DatasetError

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


@pytest.fixture()
def published(tmp_path, tiny_checkpoint):
    """Cycle 2's checkpoint, published from staging, and its dataset."""
    staging = tmp_path / "staging"
    info = _staged(tiny_checkpoint, staging)
    info = CheckpointInfo(**{**info.to_row(), "cycle": 2})
    dataset = CheckpointDataset(
        str(tmp_path / "x" / "cycle_2" / "checkpoint.parquet"), str(staging)
    )
    dataset.save(info.to_frame())
    return dataset, tmp_path / "x" / "cycle_2"


def _edit_row(folder, **values):
    frame = pd.read_parquet(folder / "checkpoint.parquet").assign(**values)
    frame.to_parquet(folder / "checkpoint.parquet", index=False)


def test_a_published_model_is_recorded_beside_its_manifest_and_moves_with_it(published, tmp_path):
    _, folder = published
    assert pd.read_parquet(folder / "checkpoint.parquet")["path"].iloc[0] == "policy"
    moved = shutil.move(tmp_path / "x", tmp_path / "y")
    again = CheckpointDataset(str(Path(moved) / "cycle_2" / "checkpoint.parquet"), str(tmp_path))
    assert CheckpointInfo.from_frame(again.load()).path == str(Path(moved) / "cycle_2" / "policy")


def test_flipped_weights_are_refused_when_loaded(published):
    dataset, folder = published
    weights = next((folder / "policy").glob("*.safetensors"))
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(DatasetError) as error:
        dataset.load()
    assert isinstance(error.value.__cause__, CheckpointError)
    assert "changed since they were published" in str(error.value.__cause__)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"sha256": "0" * 64}, "the manifest says 000000000000"),
        ({"cycle": 0}, "records cycle 0 in the folder of cycle 2"),
        ({"policy_id": "other@0123456789ab"}, "records policy other@0123456789ab, the model"),
    ],
)
def test_an_edited_manifest_row_is_refused_when_loaded(published, values, message):
    dataset, folder = published
    _edit_row(folder, **values)
    with pytest.raises(DatasetError) as error:
        dataset.load()
    assert message in str(error.value.__cause__)


def test_a_row_naming_another_model_is_refused_when_loaded(published, tiny_checkpoint):
    dataset, folder = published
    _edit_row(folder, path=str(tiny_checkpoint))  # another policy's directory, same weights
    with pytest.raises(DatasetError) as error:
        dataset.load()
    assert "the model published with this manifest is" in str(error.value.__cause__)


def test_an_edited_chat_template_is_refused_when_loaded(published):
    dataset, folder = published
    template = folder / "policy" / "chat_template.jinja"
    if not template.exists():  # the tokenizer's own config carries it
        template = folder / "policy" / "tokenizer_config.json"
    template.write_text(template.read_text() + " ")
    with pytest.raises(DatasetError) as error:
        dataset.load()
    assert "config, tokenizer or chat template files changed" in str(error.value.__cause__)
