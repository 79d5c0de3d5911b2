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
    import json

    from resail_pipeline.checkpoints import MANIFEST_NAME, write_manifest

    staging = tmp_path / "staging"
    info = _staged(tiny_checkpoint, staging)
    info = CheckpointInfo(**{**info.to_row(), "cycle": 2})
    manifest = json.loads((staging / "run" / MANIFEST_NAME).read_text())
    write_manifest(staging / "run", {**manifest, "cycle": 2})  # as the trainer writes it
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


def _edit_manifest(policy: Path, drop: str | None) -> None:
    """Double the model's ``rope_theta`` (its weights untouched), then delete the checkpoint's
    manifest (``drop`` None) or only its key ``drop``: the issue's reproduction."""
    import json

    from resail_pipeline.checkpoints import MANIFEST_NAME, write_manifest

    config = json.loads((policy / "config.json").read_text())
    theta = config.get("rope_theta") or config.get("rope_parameters", {}).get("rope_theta")
    (policy / "config.json").write_text(json.dumps({**config, "rope_theta": 2 * (theta or 1e4)}))
    manifest = json.loads((policy / MANIFEST_NAME).read_text())
    if drop is None:
        (policy / MANIFEST_NAME).unlink()
    else:
        write_manifest(policy, {k: v for k, v in manifest.items() if k != drop})


@pytest.mark.parametrize(
    ("drop", "missing"),
    [(None, "resail_manifest.json is missing"), ("files_sha256", "has no files_sha256")],
)
def test_a_published_model_without_its_manifest_or_files_hash_is_refused(published, drop, missing):
    """Deleting the manifest, or only its files_sha256, switched the config check off: an edited
    rope_theta was evaluated under the old policy id."""
    dataset, folder = published
    _edit_manifest(folder / "policy", drop)
    with pytest.raises(DatasetError) as error:
        dataset.load()
    message = str(error.value.__cause__)
    assert isinstance(error.value.__cause__, CheckpointError)
    assert str(folder / "policy") in message and missing in message
    assert "remove the outputs of cycle 2 and of every later cycle" in message
    assert "\n" not in message


def test_a_checkpoint_given_by_path_may_have_no_manifest(tmp_path, tiny_checkpoint):
    """bootstrap.checkpoint (any local Hugging Face directory) or the AITZ initial.path has no
    manifest of ours and is recorded where it lies; a manifest of ours cut short is refused."""
    import json

    from resail_pipeline.checkpoints import MANIFEST_NAME

    foreign = shutil.copytree(tiny_checkpoint, tmp_path / "foreign")
    manifest = json.loads((foreign / MANIFEST_NAME).read_text())
    (foreign / MANIFEST_NAME).unlink()
    staging = tmp_path / "staging"
    dataset = CheckpointDataset(str(tmp_path / "cycle_0" / "checkpoint.parquet"), str(staging))
    for method in ("", "react"):  # as the bootstrap and the AITZ pipelines record it
        info = read_checkpoint_info(foreign, method=method)
        dataset.save(info.to_frame())
        assert CheckpointInfo.from_frame(dataset.load()).path == str(foreign)
    del manifest["files_sha256"]
    (foreign / MANIFEST_NAME).write_text(json.dumps({**manifest, "policy_id": info.policy_id}))
    with pytest.raises(DatasetError) as error:
        dataset.load()
    assert f"{foreign}: its resail_manifest.json has no files_sha256" in str(error.value.__cause__)
    assert "every experiment of this data folder starts from it" in str(error.value.__cause__)


def test_a_truncated_manifest_row_is_rebuilt_from_the_published_model(published, caplog):
    """A truncated cycle_2/checkpoint.parquet counted as missing, so cycle 2 would train again
    under cycle 3's collection (the preflight refused that in 165 lines): its row is a copy of the
    model's own manifest, rebuilt from it, written again and verified like any other."""
    import logging

    dataset, folder = published
    manifest = folder / "checkpoint.parquet"
    before = dataset.load()
    manifest.write_bytes(manifest.read_bytes()[: manifest.stat().st_size // 2])
    assert dataset.exists()
    with caplog.at_level(logging.WARNING):
        pd.testing.assert_frame_equal(dataset.load(), before)
    assert "rebuilt from" in caplog.text and "treated as missing" not in caplog.text
    assert pd.read_parquet(manifest)["path"].iloc[0] == "policy"  # written again, as published

    # with no model beside it, the row is missing and its node runs again
    manifest.write_bytes(manifest.read_bytes()[:10])
    shutil.rmtree(folder / "policy")
    assert not dataset.exists()


def test_a_rebuilt_row_is_verified_like_any_other(published):
    dataset, folder = published
    manifest = folder / "checkpoint.parquet"
    manifest.write_bytes(b"PAR1 not a parquet file")
    weights = next((folder / "policy").glob("*.safetensors"))
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(DatasetError) as error:
        dataset.load()
    assert "changed since they were published" in str(error.value.__cause__)


def test_a_publish_killed_after_the_model_moved_leaves_no_row(
    published, tiny_checkpoint, monkeypatch
):
    """Killed between the new model's move and its row: the earlier row named a model no longer
    there and its node was skipped; no row is left now, so the node runs again."""
    from resail_pipeline.datasets import checkpoint

    dataset, folder = published
    again = _staged(tiny_checkpoint, dataset._staging, "rerun")
    move = checkpoint.replace_directory

    def move_then_die(source, target):
        move(source, target)
        raise KeyboardInterrupt("killed")

    monkeypatch.setattr(checkpoint, "replace_directory", move_then_die)
    with pytest.raises(KeyboardInterrupt):
        dataset.save(CheckpointInfo(**{**again.to_row(), "cycle": 2}).to_frame())
    assert not dataset.exists()
    assert sorted(p.name for p in folder.iterdir()) == ["policy"]  # the new model, whole


def test_a_missing_published_model_is_refused_naming_the_row(published):
    dataset, folder = published
    shutil.rmtree(folder / "policy")
    with pytest.raises(DatasetError) as error:
        dataset.load()
    message = str(error.value.__cause__)
    assert message.startswith(f"{folder / 'checkpoint.parquet'}: checkpoint ")
    assert "no such directory" in message and "remove the outputs of cycle 2" in message


def test_a_published_model_whose_manifest_names_no_policy_is_refused(published):
    import json

    from resail_pipeline.checkpoints import MANIFEST_NAME, write_manifest

    dataset, folder = published
    manifest = json.loads((folder / "policy" / MANIFEST_NAME).read_text())
    write_manifest(folder / "policy", {k: v for k, v in manifest.items() if k != "policy_id"})
    with pytest.raises(DatasetError) as error:
        dataset.load()
    assert "is unnamed (its manifest records no policy_id)" in str(error.value.__cause__)
