"""The generator of small ALFWorld games, checked through the real engine and the adapter."""

from __future__ import annotations

import dataclasses
import json
import random

import pytest

pytest.importorskip("alfworld")

from alfworld.gen import constants

from resail_pipeline.config import ConfigError
from resail_pipeline.envs import END_SUCCESS
from resail_pipeline.envs.alfworld import AlfWorldEnv, AlfWorldGameError, GameEngine
from resail_pipeline.envs.alfworld_games import (
    MANIFEST,
    TASK_TYPES,
    GameGenConfig,
    GameSpec,
    Placement,
    ensure_games,
    game_data,
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
        ("json_2.1.1", "train"),
        ("json_2.1.1", "valid_seen"),
        ("json_2.1.1", "valid_unseen"),
    ]
    env = AlfWorldEnv(data_path=out)
    for split, scenes in (("train", TRAIN_SCENES), ("id", TRAIN_SCENES), ("ood", TEST_SCENES)):
        (task_id,) = env.task_ids(split)
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
    assert manifest["games"] == {"train": 1, "id": 1, "ood": 1}
    assert manifest["settings"]["seed"] == 3 and len(manifest["files"]) == 3
    assert manifest["sha256"] == games_sha256(out, [out / f for f in manifest["files"]])


def test_writing_resumes_extends_and_refuses_another_draw(tmp_path, monkeypatch):
    """A second call keeps the games there and writes only the missing ones; a larger set
    extends a smaller one game for game; other draw settings, or fewer games than a split
    holds, are refused before any game is drawn."""
    from resail_pipeline.envs import alfworld_games

    out = tmp_path / "games"
    small = GameGenConfig(train=1, id=1, ood=1, seed=5)
    first = write_games(out, small)
    contents = {g: g.read_bytes() for g in first}
    drawn = []
    real = alfworld_games.write_game

    def counting(root, split, index, *args):  # the real writer, counted
        drawn.append((split, index))
        return real(root, split, index, *args)

    monkeypatch.setattr(alfworld_games, "write_game", counting)
    assert write_games(out, small) == first and drawn == []  # complete: nothing redrawn
    (out / MANIFEST).unlink()  # as if killed before the manifest
    larger = GameGenConfig(train=2, id=1, ood=1, seed=5)
    games = write_games(out, larger)
    assert drawn == [("train", 1)] and len(games) == 4
    assert all(g.read_bytes() == contents[g] for g in first)  # the first games kept as they were
    assert json.loads((out / MANIFEST).read_text())["games"]["train"] == 2
    with pytest.raises(ConfigError, match=r"games were drawn with other settings \(seed: 5\)"):
        write_games(out, GameGenConfig(train=2, id=1, ood=1, seed=6))
    with pytest.raises(ConfigError, match=r"^train: .* holds 2 train games, more than the 1"):
        write_games(out, small)
    assert drawn == [("train", 1)]


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
    assert set(first.receptacles) <= set(room.receptacles)
    assert len(first.receptacles) <= config.max_receptacles
    assert "Fridge" in {r.cls for r in first.receptacles}
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
    ("field", "value"),
    [("train", 0), ("max_receptacles", 2), ("distractors", -1), ("max_plan_length", 31)],
)
def test_config_ranges(field, value):
    with pytest.raises(ValueError, match=f"{field}: must be"):
        GameGenConfig(**{field: value})


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("id", 0, "must be a positive integer"),
        ("ood", 1.5, "must be a positive integer"),
        ("max_receptacles", 2, "must be an integer >= 3"),
        ("distractors", 1.5, "must be a non-negative integer"),
        ("max_plan_length", 31, "must be <= 30"),
        ("seed", -1, "must be a non-negative integer"),
    ],
)
def test_the_generator_configuration_names_a_bad_field(field, value, message):
    with pytest.raises(ConfigError, match=rf"^{field}: {message}"):
        GameGenConfig(**{field: value})


def test_the_main_jobs_set_is_written_once_then_reused(tmp_path, monkeypatch):
    from resail_pipeline.envs import alfworld_games

    out, config = tmp_path / "games", GameGenConfig(train=1, id=1, ood=1, seed=2)
    assert (
        ensure_games(out, config) == out
        and len(json.loads((out / MANIFEST).read_text())["files"]) == 3
    )

    def no_writing(*args):  # fake: fails if the set is written again
        raise AssertionError("written again")

    monkeypatch.setattr(alfworld_games, "write_games", no_writing)
    assert ensure_games(out, config) == out
    with pytest.raises(AssertionError, match="written again"):
        ensure_games(out, GameGenConfig(train=2, id=1, ood=1, seed=2))  # another set: written
