"""How far a split is from train: openings read through the real engine, on the hand-written
games (ALFWorld's own layout) and on tiny generated sets."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("alfworld")

from resail_pipeline.envs.alfworld import SPLIT_DIRS, GameEngine, split_games
from resail_pipeline.envs.alfworld_games import GameGenConfig, write_games
from resail_pipeline.envs.alfworld_overlap import (
    Opening,
    as_json,
    compare,
    markdown_table,
    read_opening,
    read_openings,
    receptacle_list,
    split_overlap,
    words,
)

pytestmark = pytest.mark.alfworld

FIXTURE_DATA = Path(__file__).parent / "alfworld_data"
OPENING = (
    "-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room. Looking quickly "
    "around you, you see a bed 1, a desk 1, a drawer 1, and a shelf 1.\n\nYour task is to: put a "
    "mug in shelf."
)


@pytest.fixture(scope="module")
def two_per_split(tmp_path_factory):
    """Two games in every split at seed 0 (full rooms), written once for the module."""
    out = tmp_path_factory.mktemp("alfworld") / "games"
    write_games(out, GameGenConfig(**dict.fromkeys(("train", "id", "ood", "dev", "clone"), 2)))
    return out


def test_the_opening_is_read_through_the_engine():
    game = split_games(FIXTURE_DATA, "train")[0]
    opening = read_opening(game, GameEngine())
    assert opening.text == OPENING and opening.task == "put a mug in shelf."
    assert opening.receptacles == "a bed 1, a desk 1, a drawer 1, and a shelf 1"
    assert opening.receptacle_classes == {"Bed", "Desk", "Drawer", "Shelf"}
    assert opening.object_classes == {"Mug", "Pencil", "Pillow"}  # not the goal's variables
    assert receptacle_list("no list here") == ""
    assert words("Put a Mug in shelf 12.") == {"put", "a", "mug", "in", "shelf", "12"}


def test_a_file_that_is_no_game_is_named(tmp_path):
    from resail_pipeline.envs.alfworld_overlap import declared_classes

    other = tmp_path / "game.tw-pddl"
    other.write_text(json.dumps({"walkthrough": []}))
    with pytest.raises(ValueError, match=r"game\.tw-pddl: no pddl_problem"):
        declared_classes(other)


def test_a_split_against_itself_shares_everything():
    openings = read_openings(FIXTURE_DATA, ["train", "id"], workers=1)
    same = compare("train", openings["train"], openings["train"])
    assert same.same_opening == same.same_receptacles == 1.0 and same.games == 2
    assert same.new_words == same.new_task_words == ()
    assert same.new_receptacle_classes == same.new_object_classes == ()
    # train's first game alone: the other one's words and classes are new, its list is not
    half = compare("train", openings["train"], openings["train"][:1])
    assert half.same_opening == half.same_receptacles == 0.5
    assert "tomato" in half.new_words and "cool" in half.new_task_words
    assert "Fridge" in half.new_receptacle_classes and "Tomato" in half.new_object_classes
    with pytest.raises(ValueError, match="nothing to compare"):
        compare("id", openings["id"], [])


def test_alfworlds_own_layout_is_compared_split_by_split():
    """The hand-written games lie in ALFWorld's own layout: no dev or clone, so only id and ood
    are compared; no opening or receptacle list of theirs is train's."""
    rows = split_overlap(FIXTURE_DATA, workers=1)
    assert [r.split for r in rows] == ["id", "ood"]
    ids, ood = rows
    assert (ids.games, ids.train_games, ids.same_opening, ids.same_receptacles) == (2, 2, 0.0, 0.0)
    assert ids.new_receptacle_classes == ("GarbageCan", "Microwave", "SideTable", "SinkBasin")
    assert ids.new_object_classes == ("Apple", "CD", "Cup")
    assert ids.new_task_words == ("cabinet", "clean", "drawer", "pencil", "plate", "two")
    assert ood.new_receptacle_classes == ("Dresser", "GarbageCan", "Microwave")
    assert "desklamp" in ood.new_task_words and "desklamp" in ood.new_words
    table = markdown_table({"fixture": rows})
    assert table.splitlines()[2].startswith("| fixture | `id` | 2 | 0.0% | 0.0% | 9 (2, clean,")
    assert json.loads(json.dumps(as_json({"fixture": rows})))["fixture"][1]["split"] == "ood"


def test_a_split_copied_from_train_is_train(two_per_split, tmp_path):
    """valid_seen replaced by a copy of train: its openings and receptacle lists are all train's
    and nothing in it is new, read by two worker processes as by one."""
    root = tmp_path / "games"
    shutil.copytree(two_per_split, root)
    data = root / "json_2.1.1"
    shutil.rmtree(data / SPLIT_DIRS["id"])
    shutil.copytree(data / SPLIT_DIRS["train"], data / SPLIT_DIRS["id"])
    split_games.cache_clear()
    rows = split_overlap(root, ["id", "ood"], workers=2)
    assert rows == split_overlap(root, ["id", "ood"], workers=1)
    copied, ood = rows
    assert copied.same_opening == copied.same_receptacles == 1.0
    assert copied.new_words == copied.new_receptacle_classes == copied.new_object_classes == ()
    assert ood.games == 2 and ood.same_opening == 0.0  # rooms of test scenes: never train's
    assert isinstance(read_openings(root, ["ood"], workers=1)["ood"][0], Opening)
