"""The generator of small ALFWorld games, checked through the real engine and the adapter."""

from __future__ import annotations

import dataclasses
import faulthandler
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys

import pytest

pytest.importorskip("alfworld")

from alfworld.gen import constants

from resail_pipeline.config import ConfigError
from resail_pipeline.envs import END_SUCCESS
from resail_pipeline.envs.alfworld import (
    SPLIT_DIRS,
    SPLITS,
    AlfWorldEnv,
    AlfWorldGameError,
    GameEngine,
    split_games,
)
from resail_pipeline.envs.alfworld_games import (
    DEFAULT_ROOT,
    LOCK_FILE,
    MANIFEST,
    SETTINGS_FILE,
    STAGING,
    TASK_TYPES,
    GameGenConfig,
    GameSpec,
    Placement,
    check_candidate,
    default_root,
    draw_stream,
    ensure_games,
    game_data,
    game_identity,
    games_sha256,
    load_room,
    main,
    problem_text,
    sample_game,
    solve,
    task_options,
    write_game,
    write_games,
)

pytestmark = pytest.mark.alfworld

TRAIN_SCENES = sorted(constants.TRAIN_SCENE_NUMBERS)
TEST_SCENES = sorted(constants.TEST_SCENE_NUMBERS)
#: sha256 of game 0's files in the splits that existed before ``dev`` and ``clone``, at seed 0
#: with 8 receptacles, as the generator wrote them then (and as the games.json of the set drawn
#: with 8 receptacles covers them).
GAME_0_BEFORE_DEV_AND_CLONE = {
    "train/pick_and_place_simple-DishSponge-None-SinkBasin-23/trial_s0_00000": (
        "328b56946867afab118199a03e9a709d6899498fa1191ecfc720f4da70365fc9",
        "7915762dc6c11e5afdb283c7e01288f11cd137ca4cc3279eafb3cf1b67f25213",
    ),
    "valid_seen/pick_and_place_simple-Cloth-None-Drawer-427/trial_s0_00000": (
        "632e52cff28cb17af1c5ac9cba2e021927be180af3b2f146dc49e70096e7052a",
        "a5400a9d75e8ad17caca87b5fd237d32005897a1f62aefeb1662512918902b39",
    ),
    "valid_unseen/pick_and_place_simple-Bowl-None-DiningTable-201/trial_s0_00000": (
        "ad717f5f79ea318b2e8946e973b7dde19ebc385f3cc1f0e96de80d7d75eafa20",
        "52db5e2a4b40097018b68bda97eb49e74b83da52b891488f924cb836964e0811",
    ),
}


def tiny(**counts: int) -> GameGenConfig:
    """A set of one game per split, or ``counts`` games where given."""
    return GameGenConfig(**{split: counts.pop(split, 1) for split in SPLITS}, **counts)


@pytest.fixture(scope="module")
def one_per_split(tmp_path_factory):
    """One game in every split at seed 0, full rooms, written once for the module."""
    out = tmp_path_factory.mktemp("alfworld") / "games"
    return out, write_games(out, tiny(seed=0))


@pytest.fixture(scope="module")
def eight_per_room(tmp_path_factory):
    """One game in every split at seed 0 with 8 receptacles (the draw of the sets before full
    rooms), written once for the module."""
    out = tmp_path_factory.mktemp("alfworld") / "games"
    return out, write_games(out, tiny(seed=0, max_receptacles=8), workers=1)


def _play(env: AlfWorldEnv, task_id: int) -> str | None:
    env.reset(task_id)
    result = None
    for action in env.walkthrough(task_id):
        result = env.step(action)
        assert result.action_valid
    return None if result is None else result.end_reason


def test_the_command_writes_the_official_layout_and_every_game_wins(tmp_path):
    out = tmp_path / "games"
    main(["--out", str(out), "--n", "1", "--seed", "3"])
    games = sorted(p.relative_to(out) for p in out.rglob("game.tw-pddl"))
    assert [g.parts[:2] for g in games] == [
        ("json_2.1.1", "clone"),
        ("json_2.1.1", "dev"),
        ("json_2.1.1", "train"),
        ("json_2.1.1", "valid_seen"),
        ("json_2.1.1", "valid_unseen"),
    ]
    env = AlfWorldEnv(data_path=out)
    for split in SPLITS:
        scenes = TEST_SCENES if split == "ood" else TRAIN_SCENES
        (task_id,) = env.task_ids(split)
        assert task_id == 100_000 * SPLITS.index(split)
        folder = env.game_file(task_id).parent
        meta = json.loads((folder / "traj_data.json").read_text())
        assert meta["task_type"] == TASK_TYPES[0] == "pick_and_place_simple"
        assert meta["scene"]["scene_num"] in scenes
        assert folder.parent.name.startswith(
            f"{TASK_TYPES[0]}-{meta['pddl_params']['object_target']}"
        )
        assert _play(env, task_id) == END_SUCCESS
    assert not list(out.glob(".staging*"))  # each game moved into place whole
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["games"] == {"train": 1, "id": 1, "ood": 1, "dev": 1, "clone": 1}
    assert manifest["settings"]["seed"] == 3 and len(manifest["files"]) == 5
    assert [f.split("/")[1] for f in manifest["files"]] == [SPLIT_DIRS[s] for s in SPLITS]
    assert manifest["sha256"] == games_sha256(out, [out / f for f in manifest["files"]])


def _count_drawn_games(monkeypatch) -> list[tuple[str, int]]:
    """The real game writer, patched to note each (split, index) it draws in the list returned."""
    from resail_pipeline.envs import alfworld_games

    drawn: list[tuple[str, int]] = []
    real = alfworld_games.write_game

    def counting(root, split, index, *args):
        drawn.append((split, index))
        return real(root, split, index, *args)

    monkeypatch.setattr(alfworld_games, "write_game", counting)
    return drawn


def test_writing_resumes_extends_and_refuses_another_draw(tmp_path, monkeypatch):
    """A second call keeps the games there and writes only the missing ones; a larger set
    extends a smaller one game for game; other draw settings, or fewer games than a split
    holds, are refused before any game is drawn."""
    out = tmp_path / "games"
    small = tiny(seed=5)
    first = write_games(out, small, workers=1)
    contents = {g: g.read_bytes() for g in first}
    drawn = _count_drawn_games(monkeypatch)
    assert write_games(out, small, workers=1) == first and drawn == []  # complete: nothing redrawn
    shutil.rmtree(first[0].parent)  # a game removed by hand from a complete set: drawn again
    assert write_games(out, small, workers=1) == first and drawn == [("train", 0)]
    assert all(g.read_bytes() == contents[g] for g in first)
    drawn.clear()
    (out / MANIFEST).unlink()  # as if killed before the manifest
    larger = tiny(train=2, seed=5)
    games = write_games(out, larger, workers=1)
    assert drawn == [("train", 1)] and len(games) == 6
    assert all(g.read_bytes() == contents[g] for g in first)  # the first games kept as they were
    assert json.loads((out / MANIFEST).read_text())["games"]["train"] == 2
    with pytest.raises(ConfigError, match=r"games were drawn with other settings \(seed: 5\)"):
        write_games(out, tiny(train=2, seed=6))
    with pytest.raises(ConfigError, match=r"^train: .* holds 2 train games, more than the 1"):
        write_games(out, small)
    assert drawn == [("train", 1)]


def test_an_extension_cut_short_leaves_no_manifest_vouching_for_the_set(
    one_per_split, tmp_path, monkeypatch
):
    """A set extended in place (the default folder, when counts grow) loses its manifest before
    its first new game lands: a run killed mid-way leaves a folder no smaller set accepts as its
    own (the adapter plays every game of a split folder). A split folder left empty resumes."""
    from resail_pipeline.envs import alfworld_games

    out = tmp_path / "games"
    shutil.copytree(one_per_split[0], out)
    real = alfworld_games.place_game

    def killed_after_one(*args):  # fake: a run killed once its first new game is in place
        real(*args)
        raise KeyboardInterrupt

    monkeypatch.setattr(alfworld_games, "place_game", killed_after_one)
    with pytest.raises(KeyboardInterrupt):
        write_games(out, tiny(train=3, seed=0), workers=1)
    assert not (out / MANIFEST).exists()
    split_games.cache_clear()
    with pytest.raises(ConfigError, match=r"^train: .* holds 2 train games, more than the 1"):
        ensure_games(out, tiny(seed=0))
    monkeypatch.setattr(alfworld_games, "place_game", real)
    for task in (out / "json_2.1.1" / SPLIT_DIRS["dev"]).iterdir():  # a split folder emptied
        shutil.rmtree(task)
    drawn = _count_drawn_games(monkeypatch)
    games = write_games(out, tiny(train=3, seed=0), workers=1)
    assert drawn == [("train", 2), ("dev", 0)] and len(games) == 7
    assert json.loads((out / MANIFEST).read_text())["games"]["train"] == 3


def test_the_last_game_of_a_pools_set_is_drawn_by_a_pool(one_per_split, tmp_path, monkeypatch):
    """A set asked of two workers with one game missing draws it in a worker process, as the
    whole set was drawn, not in the writing process."""
    from resail_pipeline.envs import alfworld_games

    out, games = tmp_path / "games", one_per_split[1]
    shutil.copytree(one_per_split[0], out)
    shutil.rmtree(out / games[0].parent.relative_to(one_per_split[0]).parent)  # train's game
    (out / MANIFEST).unlink()

    def not_here(*args, **kwargs):  # fake: an engine started in the writing process
        raise AssertionError("drawn in the writing process")

    monkeypatch.setattr(alfworld_games, "GameEngine", not_here)
    split_games.cache_clear()
    written = write_games(out, tiny(seed=0), workers=2)
    assert [g.relative_to(out) for g in written] == [g.relative_to(one_per_split[0]) for g in games]
    assert written[0].read_bytes() == games[0].read_bytes()


@pytest.mark.parametrize("folder", ["removable/games", "games/Sliced"])
def test_a_folder_alfworld_would_find_no_games_in_is_refused_before_drawing(
    tmp_path, monkeypatch, folder
):
    """ALFWorld's collector skips every path holding "movable" or "Sliced": a set written under
    ``/mnt/removable`` was drawn in full, then found empty."""
    from resail_pipeline.envs import alfworld_games

    monkeypatch.setattr(alfworld_games, "place_game", lambda *a: pytest.fail("drawn"))
    word = "movable" if "movable" in folder else "Sliced"
    with pytest.raises(
        ConfigError, match=rf"ALFWorld skips every game whose path contains '{word}'"
    ):
        write_games(tmp_path / folder, tiny(seed=0), workers=1)
    assert not (tmp_path / folder).exists()


def test_the_set_is_the_same_whatever_the_number_of_workers(one_per_split, tmp_path):
    """Two worker processes write, file for file, the set one process writes in-process (the
    module's set, written with one worker per core: compared here with a single worker's)."""
    out, games = one_per_split
    alone = write_games(tmp_path / "games", tiny(seed=0), workers=1)
    assert [g.relative_to(tmp_path / "games") for g in alone] == [g.relative_to(out) for g in games]
    for mine, theirs in zip(alone, games, strict=True):
        assert mine.read_bytes() == theirs.read_bytes()
    two = write_games(tmp_path / "two", tiny(seed=0), workers=2)
    assert [g.read_bytes() for g in two] == [g.read_bytes() for g in alone]
    assert not (tmp_path / "two" / STAGING).exists()
    with pytest.raises(ConfigError, match=r"^workers: "):
        write_games(tmp_path / "none", tiny(seed=0), workers=-1)


def test_every_task_type_yields_a_solvable_game_in_unseen_rooms(tmp_path):
    config = GameGenConfig(ood=len(TASK_TYPES))
    engine = GameEngine(plan=True)
    for index in range(len(TASK_TYPES)):
        write_game(tmp_path, "ood", index, TEST_SCENES, engine, config)
    env = AlfWorldEnv(data_path=tmp_path)
    ids = env.task_ids("ood")
    types = sorted(env.game_file(t).parent.parent.name.split("-")[0] for t in ids)
    assert types == sorted(TASK_TYPES)
    for task_id in ids:
        assert 0 < len(env.walkthrough(task_id)) <= config.max_plan_length
        assert _play(env, task_id) == END_SUCCESS


def test_sampling_is_deterministic_and_respects_the_room():
    config = GameGenConfig()
    first = sample_game(random.Random("x"), "pick_cool_then_place_in_recep", TRAIN_SCENES, config)
    again = sample_game(random.Random("x"), "pick_cool_then_place_in_recep", TRAIN_SCENES, config)
    assert first == again and problem_text(first, "p") == problem_text(again, "p")
    room = load_room(first.scene)
    assert first.scene in TRAIN_SCENES and room.kind == "Kitchen"
    assert config.max_receptacles is None  # full rooms: every receptacle, the needed ones first
    assert len(first.receptacles) == len(room.receptacles) and set(first.receptacles) == set(
        room.receptacles
    )
    assert first.receptacles[0].cls == first.parent_target
    assert first.receptacles[1].cls == "Fridge"
    needed = {first.receptacles[0], first.receptacles[1], first.objects[0].receptacle}
    rest = [r for r in room.receptacles if r not in needed]
    assert list(first.receptacles[len(needed) :]) == rest  # then the others, in the room's order
    eight = GameGenConfig(max_receptacles=8)
    few = sample_game(random.Random("x"), "pick_cool_then_place_in_recep", TRAIN_SCENES, eight)
    assert len(few.receptacles) == 8 and set(few.receptacles) <= set(room.receptacles)
    assert few.receptacles[:2] == first.receptacles[:2]
    target = [o for o in first.objects if o.cls == first.object_target]
    assert target and all(o.receptacle.cls != first.parent_target for o in target)
    for o in first.objects:  # every object starts where ALFRED allows it
        assert o.cls in constants.VAL_RECEPTACLE_OBJECTS[o.receptacle.cls]
    obj, parent = first.object_target.lower(), first.parent_target.lower()
    assert first.sentence in {
        f"put a cool {obj} in {parent}",
        f"cool some {obj} and put it in {parent}",
    }
    assert task_options(room, "look_at_obj_in_light") == []  # kitchens have no desk lamp tasks


def test_a_type_declared_twice_is_refused_before_the_engine():
    spec = sample_game(random.Random(0), "pick_and_place_simple", TRAIN_SCENES, GameGenConfig())
    shelf = spec.receptacles[0]  # an object named after a receptacle class
    clash = dataclasses.replace(
        spec, objects=(*spec.objects, Placement(f"{shelf.cls}|99", shelf.cls, shelf))
    )
    with pytest.raises(
        ValueError, match=rf"both as receptacle and object types: \['{shelf.cls}'\]"
    ):
        problem_text(clash, "p")


def _spec(task_type: str, **changes) -> GameSpec:
    spec = sample_game(random.Random(1), task_type, TRAIN_SCENES, GameGenConfig())
    return dataclasses.replace(spec, **changes)


def test_unsolvable_and_already_won_candidates_are_rejected(tmp_path):
    engine = GameEngine(plan=True)
    heat = _spec("pick_heat_then_place_in_recep")
    no_microwave = dataclasses.replace(
        heat, receptacles=tuple(r for r in heat.receptacles if r.cls != "Microwave")
    )
    path = tmp_path / "game.tw-pddl"
    path.write_text(json.dumps(game_data(no_microwave, "t")))
    with pytest.raises(AlfWorldGameError) as error:  # the planner's own failure
        engine.load(path)
        engine.reset()
    assert isinstance(error.value.__cause__, KeyError)
    assert solve(engine, path, max_plan_length=20) is None

    simple = _spec("pick_and_place_simple")
    parent = next(r for r in simple.receptacles if r.cls == simple.parent_target)
    placed = tuple(
        dataclasses.replace(o, receptacle=parent) if o.cls == simple.object_target else o
        for o in simple.objects
    )
    path.write_text(json.dumps(game_data(dataclasses.replace(simple, objects=placed), "t")))
    assert solve(engine, path, max_plan_length=20) is None  # the goal holds at the start

    path.write_text(json.dumps(game_data(simple, "t")))
    plan = solve(engine, path, max_plan_length=20)
    assert plan is not None and plan[-1].startswith("move ")
    assert solve(engine, path, max_plan_length=len(plan) - 1) is None


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("train", 0, "must be a positive integer"),
        ("id", 0, "must be a positive integer"),
        ("clone", 0, "must be a positive integer"),
        ("distractors", -1, "must be a non-negative integer"),
        ("ood", 1.5, "must be a positive integer"),
        ("dev", -1, "must be a positive integer"),
        ("clone", 2.5, "must be a positive integer"),
        ("max_receptacles", 2, "must be an integer >= 3"),
        ("distractors", 1.5, "must be a non-negative integer"),
        ("max_plan_length", 31, r"must be an integer in \[1, 30\], got 31"),
        ("seed", -1, "must be a non-negative integer"),
    ],
)
def test_the_generator_configuration_names_a_bad_field(field, value, message):
    with pytest.raises(ConfigError, match=rf"^{field}: {message}"):
        GameGenConfig(**{field: value})


def test_the_main_jobs_set_is_written_once_then_reused(tmp_path, monkeypatch):
    from resail_pipeline.envs import alfworld_games

    out, config = tmp_path / "games", tiny(seed=2)
    assert (
        ensure_games(out, config) == out
        and len(json.loads((out / MANIFEST).read_text())["files"]) == 5
    )

    def no_writing(*args):  # fake: fails if the set is written again
        raise AssertionError("written again")

    monkeypatch.setattr(alfworld_games, "write_games", no_writing)
    assert ensure_games(out, config) == out
    with pytest.raises(AssertionError, match="written again"):
        ensure_games(out, tiny(clone=2, seed=2))  # another set: written


def test_a_second_writer_waits_for_the_first_then_draws_nothing_again(
    one_per_split, tmp_path, monkeypatch, while_lock_held
):
    """Two processes writing one set (a report drawn beside a running grid) once removed each
    other's staging under their workers; the second now waits for the first's lock, then finds
    every game written (and clears what a killed writer left)."""
    from resail_pipeline.envs import alfworld_games

    out, events = tmp_path / "games", []
    shutil.copytree(one_per_split[0], out)
    (out / STAGING / "train-0").mkdir(parents=True)  # what a killed writer left

    def no_drawing(*args):  # fake: fails if a game is drawn again
        raise AssertionError("drawn again")

    monkeypatch.setattr(alfworld_games, "place_game", no_drawing)
    checking = alfworld_games._check_existing

    def noting(*args):  # the real check, noted: the second writer got past the lock
        events.append("entered")
        return checking(*args)

    monkeypatch.setattr(alfworld_games, "_check_existing", noting)
    while_lock_held(  # the first writer; half a second to get past its lock, were it not held
        out / LOCK_FILE, lambda: len(write_games(out, tiny(seed=0), workers=1)), events
    )
    assert events == ["released", "entered", len(SPLITS)] and not (out / STAGING).exists()


def test_the_default_set_adds_dev_and_clone_of_training_scenes():
    config = GameGenConfig()
    assert [config.games(s) for s in SPLITS] == [1024, 256, 256, 256, 512]
    assert "dev" not in config.drawing() and "clone" not in config.drawing()
    with pytest.raises(ValueError, match="unknown ALFWorld split 'test'"):
        config.games("test")


def test_every_split_draws_from_its_own_stream():
    """Splits of the same scenes draw different candidates for the same game index and attempt:
    the stream is named by the split, not by its scenes."""
    config = GameGenConfig()
    for index, task_type in enumerate(TASK_TYPES):
        for attempt in range(2):
            specs = [
                sample_game(draw_stream(config, s, index, attempt), task_type, TRAIN_SCENES, config)
                for s in ("train", "id", "dev", "clone")
            ]
            assert len(set(specs)) == 4, (index, attempt)
    again = draw_stream(config, "clone", 3, 1).random()
    assert again == draw_stream(config, "clone", 3, 1).random()


def test_existing_splits_keep_their_games(eight_per_room):
    """Adding dev and clone, then full rooms, leaves every game of train, id and ood drawn with 8
    receptacles byte for byte as before."""
    out, games = eight_per_room
    data = out / "json_2.1.1"
    for folder, (game_sha, traj_sha) in GAME_0_BEFORE_DEV_AND_CLONE.items():
        assert hashlib.sha256((data / folder / "game.tw-pddl").read_bytes()).hexdigest() == game_sha
        assert hashlib.sha256((data / folder / "traj_data.json").read_bytes()).hexdigest() == (
            traj_sha
        )
    assert sorted(str(g.parent.relative_to(data)) for g in games[:3]) == sorted(
        GAME_0_BEFORE_DEV_AND_CLONE
    )


def test_no_two_splits_share_a_game(one_per_split, tmp_path):
    out, games = one_per_split
    by_split = {s: [g for g in games if g.parts[-4] == SPLIT_DIRS[s]] for s in SPLITS}
    assert all(len(g) == 1 for g in by_split.values())
    identities = [game_identity(g) for g in games]
    assert len(set(identities)) == len(games)
    for game in games:  # the train, dev and clone game are drawn from the same scenes
        meta = json.loads((game.parent / "traj_data.json").read_text())
        scenes = TEST_SCENES if game.parts[-4] == "valid_unseen" else TRAIN_SCENES
        assert meta["scene"]["scene_num"] in scenes
    problems = [json.loads(g.read_text())["pddl_problem"].split("\n", 1)[1] for g in games]
    assert len(set(problems)) == len(games)  # the same objects, places and goal nowhere twice

    # The identity ignores the trial name only: train's game as clone game 1 (another trial) is
    # the same game, and a set holding it is refused before its manifest.
    copy = tmp_path / "games"
    shutil.copytree(out, copy)
    train = by_split["train"][0]
    twin = copy / "json_2.1.1" / "clone" / train.parent.parent.name / "trial_s0_00001"
    shutil.copytree(train.parent, twin)
    text = train.read_text()
    (twin / "game.tw-pddl").write_text(text.replace("plan_trial_s0_00000", "plan_trial_s0_00001"))
    assert (twin / "game.tw-pddl").read_text() != text
    assert game_identity(twin / "game.tw-pddl") == game_identity(train)
    (copy / MANIFEST).unlink()
    split_games.cache_clear()
    with pytest.raises(RuntimeError, match=r"trial_s0_00001 are the same game"):
        write_games(copy, tiny(clone=2, seed=0))
    assert not (copy / MANIFEST).exists()


def test_a_set_written_before_dev_and_clone_is_extended(one_per_split, tmp_path, monkeypatch):
    """Rerunning on a set that has train, id and ood only writes the dev and clone games (the
    ones a fresh set has) and keeps the others as they are."""
    out, games = one_per_split
    old = tmp_path / "games"
    shutil.copytree(out, old)
    for split in ("dev", "clone"):
        shutil.rmtree(old / "json_2.1.1" / SPLIT_DIRS[split])
    manifest = json.loads((old / MANIFEST).read_text())
    for split in ("dev", "clone"):  # the manifest as the generator wrote it then
        del manifest["settings"][split], manifest["games"][split]
    manifest["files"] = manifest["files"][:3]
    (old / MANIFEST).write_text(json.dumps(manifest))
    assert set(json.loads((old / SETTINGS_FILE).read_text())) == {
        "seed",
        "max_receptacles",
        "distractors",
        "max_plan_length",
        "max_attempts",
    }
    drawn = _count_drawn_games(monkeypatch)
    split_games.cache_clear()
    assert ensure_games(old, tiny(seed=0), workers=1) == old
    assert drawn == [("dev", 0), ("clone", 0)]
    extended = json.loads((old / MANIFEST).read_text())
    fresh = json.loads((out / MANIFEST).read_text())
    assert extended["files"] == fresh["files"] and extended["sha256"] == fresh["sha256"]
    for game in games:  # kept, and redrawn game for game
        assert (old / game.relative_to(out)).read_bytes() == game.read_bytes()


def test_environments_that_name_no_data_get_the_default_set(tmp_path, monkeypatch):
    """The one mechanism the Kedro hook and the initial-policy builder share: only ALFWorld
    options that name no data (no data_path, ALFWORLD_DATA unset) get the generated set, and
    ALFWORLD_DATA names it from then on."""
    from resail_pipeline.envs import alfworld_games, provide_env_data

    made = []

    def fake_ensure_games():  # fake: the default set's folder without its half hour of engine
        made.append(True)
        return tmp_path / "games"

    monkeypatch.setattr(alfworld_games, "ensure_games", fake_ensure_games)
    monkeypatch.setenv("ALFWORLD_DATA", "")  # unset, and restored after the test
    assert provide_env_data("textcraft", {}) is None
    assert provide_env_data("alfworld", {"data_path": str(tmp_path / "mine")}) is None
    assert made == [] and not os.environ["ALFWORLD_DATA"]
    root = (tmp_path / "games").resolve()
    assert provide_env_data("alfworld", {"max_steps": 20, "data_path": None}) == root
    assert made == [True] and os.environ["ALFWORLD_DATA"] == str(root)
    assert provide_env_data("alfworld", {}) is None  # named now: kept
    assert made == [True]
    with pytest.raises(ConfigError, match="env: unknown environment 'minecraft'"):
        provide_env_data("minecraft", {})


def test_the_fingerprint_of_splits_follows_their_games_not_their_folder(one_per_split, tmp_path):
    from resail_pipeline.envs.alfworld_games import splits_sha256

    out, _ = one_per_split
    here = splits_sha256(AlfWorldEnv(data_path=out), ["clone"])
    copy = tmp_path / "moved"
    shutil.copytree(out, copy)
    split_games.cache_clear()
    moved = AlfWorldEnv(data_path=copy)
    assert splits_sha256(moved, ["clone"]) == here
    assert splits_sha256(moved, ["train"]) != here
    (game,) = split_games(copy, "clone")
    game.write_text(game.read_text().replace("Your task is to", "Your task is to:"))
    assert splits_sha256(moved, ["clone"]) != here


def test_full_rooms_list_every_receptacle_of_the_scene(one_per_split):
    """Every game of the default draw declares every receptacle of its room, and the engine
    opens it with all of them in its receptacle list."""
    from resail_pipeline.envs.alfworld_overlap import read_opening

    _, games = one_per_split
    engine = GameEngine()
    for game in games:
        scene = json.loads((game.parent / "traj_data.json").read_text())["scene"]["scene_num"]
        problem = json.loads(game.read_text())["pddl_problem"]
        receptacles = load_room(scene).receptacles
        assert problem.count("- receptacle\n") == len(receptacles), game
        opening = read_opening(game, engine)
        assert len(opening.receptacles.split(", ")) == len(receptacles), opening.text
        assert {r.cls for r in receptacles} == opening.receptacle_classes


def _check_in_a_new_process(game_file, planner_memory: int) -> list[str] | None:
    """:func:`check_candidate` with ``PLANNER_MEMORY = planner_memory`` in a new process, whose
    address space, unlike this one's, has no room left free by earlier games."""
    code = (
        "import json; from pathlib import Path\n"
        "from resail_pipeline.envs import alfworld_games as g\n"
        f"g.PLANNER_MEMORY = {planner_memory}\n"
        f"game = Path({str(game_file)!r})\n"
        "print(json.dumps(g.check_candidate(g.GameEngine(plan=True), game, 20)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.splitlines()[-1])


def test_a_check_that_needs_more_memory_than_allowed_rejects_the_candidate(tmp_path, monkeypatch):
    """The check runs in a child process whose address space may grow by PLANNER_MEMORY: a
    candidate it cannot check within that is rejected, as the planner's failure is; any other
    failure of the check stops the writer."""
    from resail_pipeline.envs import alfworld_games

    engine = GameEngine(plan=True)
    path = tmp_path / "game.tw-pddl"
    path.write_text(json.dumps(game_data(_spec("pick_and_place_simple"), "t")))
    plan = check_candidate(engine, path, max_plan_length=20)
    assert plan is not None and plan == solve(GameEngine(plan=True), path, max_plan_length=20)
    assert check_candidate(engine, path, max_plan_length=len(plan) - 1) is None
    assert _check_in_a_new_process(path, 1 << 30) == plan
    assert _check_in_a_new_process(path, 1 << 20) is None  # 1 MiB: not even the translation

    def broken(*args):  # fake: a bug in the check
        raise ValueError("a bug")

    monkeypatch.setattr(alfworld_games, "solve", broken)
    with pytest.raises(RuntimeError, match="checking the candidate failed"):
        check_candidate(engine, path, max_plan_length=20)
    # the search aborting at the limit rejects; a kill (the kernel out of memory) stops the set

    def aborted(*args):  # fake: the search aborting in the child, without pytest's traceback
        faulthandler.disable()
        os.abort()

    monkeypatch.setattr(alfworld_games, "solve", aborted)
    assert check_candidate(engine, path, max_plan_length=20) is None
    killed = lambda *args: os.kill(os.getpid(), signal.SIGKILL)  # noqa: E731 (fake: the child)
    monkeypatch.setattr(alfworld_games, "solve", killed)
    with pytest.raises(RuntimeError, match=r"candidate was killed \(signal 9\)"):
        check_candidate(engine, path, max_plan_length=20)


def test_the_default_set_lives_in_a_folder_named_by_its_drawing_settings(tmp_path, monkeypatch):
    """A machine holding a set drawn with other settings (an older default) in the default
    folder gets the default set beside it, not a refusal; growing counts extend it in place."""
    from resail_pipeline.envs import alfworld_games

    drawing = json.dumps(GameGenConfig().drawing(), sort_keys=True)
    root = DEFAULT_ROOT / hashlib.sha256(drawing.encode()).hexdigest()[:12]
    assert default_root() == default_root(GameGenConfig()) == root
    assert default_root(GameGenConfig(id=3, clone=5)) == root
    assert default_root(GameGenConfig(max_receptacles=8)) not in (root, DEFAULT_ROOT)

    monkeypatch.chdir(tmp_path)
    older = GameGenConfig(max_receptacles=8)  # as the old default set's folder holds it
    (DEFAULT_ROOT / "json_2.1.1").mkdir(parents=True)
    (DEFAULT_ROOT / SETTINGS_FILE).write_text(json.dumps(older.drawing()))
    with pytest.raises(ConfigError, match=r"other settings \(max_receptacles: 8\)"):
        write_games(DEFAULT_ROOT, tiny(seed=0))
    written = []

    def recording(out, config, workers):  # fake: notes where the set is written
        written.append((out, config))

    monkeypatch.setattr(alfworld_games, "write_games", recording)
    assert ensure_games() == root and written == [(root, GameGenConfig())]
    assert ensure_games(config=older) == default_root(older)


def test_the_command_draws_full_rooms_unless_given_a_number(tmp_path, monkeypatch, capsys):
    from resail_pipeline.envs import alfworld_games

    asked = []
    monkeypatch.setattr(
        alfworld_games, "write_games", lambda out, config: asked.append(config) or []
    )
    main(["--out", str(tmp_path)])
    main(["--out", str(tmp_path), "--max-receptacles"])
    main(["--out", str(tmp_path), "--n", "2", "--max-receptacles", "8"])
    main(["--out", str(tmp_path), "--max-receptacles", "8", "--id", "128", "--ood", "128"])
    main(["--out", str(tmp_path), "--max-attempts", "80", "--max-plan-length", "25"])
    main(["--out", str(tmp_path), "--distractors", "0"])
    assert asked[0] == asked[1] == GameGenConfig()
    assert asked[4] == GameGenConfig(max_attempts=80, max_plan_length=25)
    assert asked[5] == GameGenConfig(distractors=0)
    assert asked[2] == GameGenConfig(**dict.fromkeys(SPLITS, 2), max_receptacles=8)
    assert asked[3] == GameGenConfig(id=128, ood=128, max_receptacles=8)
    with pytest.raises(SystemExit):
        main(["--out", str(tmp_path), "--n", "2", "--dev", "3"])
    assert "--n and --dev: give the games of every split or of each" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="max_receptacles: must be an integer >= 3"):
        main(["--out", str(tmp_path), "--max-receptacles", "2"])
    with pytest.raises(SystemExit, match=r"max_plan_length: must be an integer in \[1, 30\]"):
        main(["--out", str(tmp_path), "--max-plan-length", "31"])
