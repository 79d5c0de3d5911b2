"""The one way settings become a key (io.settings_sha256), held to the keys already in use; JSON
files read naming the file."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from resail_pipeline.io import read_json, settings_sha256


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
