"""The AITZ layout reader and the synthetic episode generator."""

from __future__ import annotations

import json
import shutil

import pytest
from PIL import Image

from resail_pipeline.config import ConfigError
from resail_pipeline.evaluation.gui_actions import actions_match
from resail_pipeline.gui.episodes import (
    EpisodeError,
    action_from_row,
    boxes_from_row,
    read_episodes,
)
from resail_pipeline.gui.synthetic import SyntheticConfig, write_synthetic
from resail_pipeline.schemas import check_columns


def _episode_file(root, split="train", category="general", episode="E1"):
    return root / split / category / episode / f"{episode}.json"


def _write_episode(root, records, split="train", category="general", episode="E1"):
    path = _episode_file(root, split, category, episode)
    path.parent.mkdir(parents=True, exist_ok=True)
    for record in records:
        Image.new("RGB", (8, 16)).save(path.parent / record["image_path"])
    path.write_text(json.dumps(records))
    return path


def _record(step, action_type=4, touch="[0.5, 0.5]", lift="[0.5, 0.5]", text="", **extra):
    return {
        "episode_id": "E1",
        "step_id": step,
        "instruction": "Open Gmail",
        "image_path": f"E1_{step}.png",
        "result_action_type": action_type,
        "result_touch_yx": touch,
        "result_lift_yx": lift,
        "result_action_text": text,
        "ui_positions": "[[0.4, 0.4, 0.2, 0.2]]",
        **extra,
    }


def test_reads_release_layout_in_step_order(tmp_path):
    records = [_record(1, action_type=10), _record(0)]  # out of order on disk
    _write_episode(tmp_path, records)
    steps = read_episodes(tmp_path, "train")
    check_columns(steps, "aitz_steps")
    assert list(steps["step_id"]) == [0, 1]
    assert list(steps["category"]) == ["general", "general"]
    assert steps["image_path"].iloc[0] == "train/general/E1/E1_0.png"
    first = steps.iloc[0]
    assert action_from_row(first).kind == "tap"
    assert action_from_row(first).point == (0.5, 0.5)
    assert boxes_from_row(first) == [[0.4, 0.4, 0.2, 0.2]]
    assert action_from_row(steps.iloc[1]).kind == "stop"


def test_missing_split_names_the_layout(tmp_path):
    with pytest.raises(
        EpisodeError, match=r"test: no such folder.*<split>/<category>/<episode_id>"
    ):
        read_episodes(tmp_path, "test")


def test_missing_field_names_file_and_field(tmp_path):
    record = _record(0)
    del record["instruction"]
    path = _write_episode(tmp_path, [record])
    with pytest.raises(EpisodeError, match=rf"{path}: record 0 has no field 'instruction'"):
        read_episodes(tmp_path, "train")


def test_missing_image_is_an_error(tmp_path):
    path = _write_episode(tmp_path, [_record(0)])
    (path.parent / "E1_0.png").unlink()
    with pytest.raises(EpisodeError, match=r"image_path 'E1_0\.png' is not a file"):
        read_episodes(tmp_path, "train")


def test_step_ids_must_be_contiguous(tmp_path):
    _write_episode(tmp_path, [_record(0), _record(2)])
    with pytest.raises(EpisodeError, match=r"step_id must run 0..1, got \[0, 2\]"):
        read_episodes(tmp_path, "train")


def test_unsupported_and_long_episodes_are_left_out(tmp_path):
    _write_episode(tmp_path, [_record(0), _record(1, action_type=10)], episode="E1")
    unsupported = [dict(_record(0), episode_id="E2", image_path="E2_0.png", result_action_type=8)]
    _write_episode(tmp_path, unsupported, episode="E2")
    long = [dict(_record(i), episode_id="E3", image_path=f"E3_{i}.png") for i in range(3)]
    _write_episode(tmp_path, long, episode="E3")
    steps = read_episodes(tmp_path, "train", max_steps=2)
    assert set(steps["episode_id"]) == {"E1"}


def test_synthetic_episodes_are_scored_by_their_own_boxes(aitz_root, aitz_train):
    check_columns(aitz_train, "aitz_steps")
    assert aitz_train["episode_id"].nunique() == 12
    assert set(aitz_train["category"]) <= {"general", "google_apps", "single"}
    for row in aitz_train.itertuples():
        action = action_from_row(row._asdict())
        assert (aitz_root / row.image_path).is_file()
        if action.kind == "tap":  # the logged point lies in one of the screen's boxes
            boxes = boxes_from_row(row._asdict())
            y, x = action.point
            assert any(b[0] <= y <= b[0] + b[2] and b[1] <= x <= b[1] + b[3] for b in boxes)
            assert actions_match(action, action, boxes)
    # every episode ends with one stop
    last = aitz_train.groupby("episode_id").tail(1)
    assert all(action_from_row(row._asdict()).kind == "stop" for row in last.itertuples())


def test_synthetic_is_deterministic_and_reruns_keep_files(tmp_path):
    config = SyntheticConfig(train_episodes=3, test_episodes=1, seed=5)
    write_synthetic(tmp_path / "a", config)
    write_synthetic(tmp_path / "b", config)
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*.json"))
    for name in files:
        assert (tmp_path / "a" / name).read_text() == (tmp_path / "b" / name).read_text()
    stamp = (tmp_path / "a" / "train" / ".synthetic.json").stat().st_mtime_ns
    write_synthetic(tmp_path / "a", config)
    assert (tmp_path / "a" / "train" / ".synthetic.json").stat().st_mtime_ns == stamp
    shutil.rmtree(tmp_path / "b")


@pytest.mark.parametrize("field", ["train_episodes", "test_episodes"])
def test_synthetic_config_checks_sizes(field):
    with pytest.raises(ConfigError, match=field):
        SyntheticConfig(**{field: 0})
