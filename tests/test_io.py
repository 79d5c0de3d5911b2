"""The one way settings become a key (io.settings_sha256), held to the keys already in use; JSON
files read naming the file; atomic writes of files and folders, flushed before and after the
rename."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from resail_pipeline import io as project_io
from resail_pipeline.io import atomic_path, read_json, settings_sha256


def test_settings_hash_to_their_sorted_json_whatever_the_order():
    settings = {"b": [1, 2], "a": {"y": 0.5, "x": None}}
    expected = hashlib.sha256(b'{"a": {"x": null, "y": 0.5}, "b": [1, 2]}').hexdigest()
    assert settings_sha256(settings) == expected
    assert settings_sha256({"a": {"x": None, "y": 0.5}, "b": [1, 2]}) == expected
    assert settings_sha256({"path": Path("data/x")}) == settings_sha256({"path": "data/x"})


def test_the_keys_in_use_are_unchanged():
    """The default ALFWorld game set's folder (committed data and built policies name it) and
    a journal's key are what they were before the helper."""
    from resail_pipeline.envs.alfworld_games import default_root
    from resail_pipeline.journal import journal_key

    assert default_root().name == "1a772e4581bb"
    assert (
        journal_key(policy="a" * 64, config={"seeds": [0, 1]})
        == (
            hashlib.sha256(
                b'{"config": {"seeds": [0, 1]}, "policy": "' + b"a" * 64 + b'"}'
            ).hexdigest()[:12]
        )
    )


def test_a_file_that_is_not_json_is_named_in_the_error(tmp_path):
    path = tmp_path / "games.json"
    path.write_text('{"settings": {"seed": 0}}')
    assert read_json(path) == {"settings": {"seed": 0}}
    path.write_text('{"settings": {"se')  # cut short
    with pytest.raises(ValueError, match=r"games\.json: not a JSON file \(Unterminated string"):
        read_json(path)
    path.write_bytes(b"\xff\xfe")
    with pytest.raises(ValueError, match=r"games\.json: not a JSON file"):
        read_json(path)


def test_an_atomic_write_replaces_a_file_or_a_folder_whole(tmp_path):
    target = tmp_path / "out" / "table.txt"
    with atomic_path(target) as tmp:
        tmp.write_text("first")
    with atomic_path(target) as tmp:
        tmp.write_text("second")
    assert target.read_text() == "second"
    folder = tmp_path / "checkpoint"
    for weights in ("old", "new"):
        with atomic_path(folder) as tmp:
            (tmp / "sub").mkdir(parents=True)
            (tmp / "sub" / f"{weights}.safetensors").write_text(weights)
    assert [p.name for p in folder.rglob("*.safetensors")] == ["new.safetensors"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint", "out"]  # nothing left


def test_a_failed_atomic_write_leaves_the_old_contents(tmp_path):
    target = tmp_path / "table.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError, match="cut short"), atomic_path(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("cut short")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["table.txt"]


def test_an_atomic_write_is_on_disk_before_its_rename_and_the_rename_after(tmp_path, monkeypatch):
    events: list[str] = []
    real_open, real_replace = project_io.os.open, project_io.os.replace
    names: dict[int, str] = {}

    def open_and_name(path, flags, *args):
        descriptor = real_open(path, flags, *args)
        names[descriptor] = Path(path).name
        return descriptor

    def replace(source, target):
        events.append(f"rename to {Path(target).name}")
        real_replace(source, target)

    monkeypatch.setattr(project_io.os, "open", open_and_name)
    monkeypatch.setattr(project_io.os, "fsync", lambda descriptor: events.append(names[descriptor]))
    monkeypatch.setattr(project_io.os, "replace", replace)
    with atomic_path(tmp_path / "ckpt") as tmp:
        (tmp / "shard").mkdir(parents=True)
        (tmp / "shard" / "model.safetensors").write_text("weights")
        (tmp / "shard" / "latest").symlink_to("gone")  # a broken link: nothing of its own
        os.mkfifo(tmp / "shard" / "pipe")  # opening it to flush would wait for a writer
    # the file, its folder, the written folder (as its temporary name), the rename, the parent
    assert events[:2] == ["model.safetensors", "shard"]
    assert events[2].startswith(".ckpt.") and events[2].endswith(".tmp")
    assert events[3:] == ["rename to ckpt", tmp_path.name]
