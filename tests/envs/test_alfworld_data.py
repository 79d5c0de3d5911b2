"""Finding ALFWorld data, and the error when there is none; no engine needed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from resail_pipeline.envs import make_env
from resail_pipeline.envs.alfworld import (
    ALFWORLD_DATA,
    AlfWorldEnv,
    check_alfworld_data,
    resolve_data_root,
)

FIXTURE_DATA = Path(__file__).parent / "alfworld_data"


def test_unset_variable_says_what_is_missing_and_how_to_get_games(monkeypatch):
    monkeypatch.delenv(ALFWORLD_DATA, raising=False)
    for attempt in (check_alfworld_data, AlfWorldEnv, lambda: make_env("alfworld")):
        with pytest.raises(FileNotFoundError) as error:
            attempt()
        message = str(error.value)
        assert "ALFWORLD_DATA is not set" in message
        assert "alfworld-download" in message
        assert "python -m resail_pipeline.envs.alfworld_games" in message


def test_a_folder_without_games_names_the_split_folder(monkeypatch, tmp_path):
    monkeypatch.setenv(ALFWORLD_DATA, str(tmp_path))
    with pytest.raises(FileNotFoundError) as error:
        check_alfworld_data()
    message = str(error.value)
    assert str(tmp_path / "json_2.1.1" / "train") in message
    assert "split 'train'" in message and "alfworld-download" in message

    with pytest.raises(FileNotFoundError, match=r"data_path=.*nowhere is not a directory"):
        check_alfworld_data(tmp_path / "nowhere")


def test_every_requested_split_must_hold_a_game(monkeypatch, tmp_path):
    monkeypatch.delenv(ALFWORLD_DATA, raising=False)
    game = tmp_path / "json_2.1.1" / "train" / "task" / "trial"
    game.mkdir(parents=True)
    (game / "game.tw-pddl").write_text("{}")
    assert check_alfworld_data(tmp_path, splits=["train"]) == tmp_path
    with pytest.raises(FileNotFoundError, match="valid_seen for split 'id'"):
        check_alfworld_data(tmp_path)
    with pytest.raises(ValueError, match="split: unknown ALFWorld split 'test'"):
        check_alfworld_data(tmp_path, splits=["test"])


def test_the_fixture_data_passes_and_the_variable_is_read(monkeypatch):
    monkeypatch.setenv(ALFWORLD_DATA, str(FIXTURE_DATA))
    assert check_alfworld_data() == FIXTURE_DATA
    assert resolve_data_root() == FIXTURE_DATA
    assert resolve_data_root(str(FIXTURE_DATA)) == FIXTURE_DATA


def test_dev_and_clone_of_official_data_say_the_generated_set_has_them(monkeypatch):
    """ALFWorld's own layout (the fixture) has no dev or clone folder: asking for either fails
    with one line naming the split and how to generate it, before the engine is imported."""
    from resail_pipeline.envs import alfworld

    def no_engine():  # fake: fails if the engine would be imported
        raise AssertionError("the engine was imported")

    monkeypatch.setattr(alfworld, "_alfred_tw_env", no_engine)
    env = AlfWorldEnv(data_path=FIXTURE_DATA)
    for split in ("dev", "clone"):
        for ask in (env.task_ids, lambda s: check_alfworld_data(FIXTURE_DATA, [s])):
            with pytest.raises(FileNotFoundError) as error:
                ask(split)
            message = str(error.value)
            assert "\n" not in message
            assert message.startswith(f"ALFWorld split {split!r}: no games under ")
            assert str(FIXTURE_DATA / "json_2.1.1" / split) in message
            assert "only the generated game set has this split" in message
            assert "python -m resail_pipeline.envs.alfworld_games --out DIR" in message
    assert check_alfworld_data(FIXTURE_DATA) == FIXTURE_DATA  # the default: the official splits


def test_the_check_never_imports_the_engine():
    code = (
        "import sys;"
        "from resail_pipeline.envs.alfworld import check_alfworld_data;"
        f"check_alfworld_data({str(FIXTURE_DATA)!r});"
        "print(sorted(m for m in ('alfworld', 'textworld', 'torch') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=os.environ
    )
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("field", ["max_steps", "test_size"])
@pytest.mark.parametrize("value", [0, -1, True, 2.5])
def test_bad_sizes_are_refused(field, value):
    with pytest.raises(ValueError, match=f"{field}: must be a positive integer"):
        AlfWorldEnv(data_path=FIXTURE_DATA, **{field: value})
