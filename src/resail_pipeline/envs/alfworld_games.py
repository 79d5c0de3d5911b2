"""Solvable ALFWorld games built from the ``alfworld`` wheel's own room layouts.

For machines where the official games (``alfworld-download``) are not installed. The games are
written in the official folder layout, so the adapter reads them like the real data::

    python -m resail_pipeline.envs.alfworld_games --out data/01_raw/alfworld_games/mine
    export ALFWORLD_DATA=data/01_raw/alfworld_games/mine

By default the set mirrors the official split: 1,024 ``train`` games (enough that the cycles
collect on games they have not seen), 256 ``valid_seen`` (ID) and 256 ``valid_unseen`` (OOD); and
it adds two splits the official data does not have: 256 ``dev`` games, on which a learning rate is
chosen, and 512 ``clone`` games, on which an initial policy is behaviour-cloned, so that cloning
sees no game of the other splits. ``--n`` writes that many games to every split instead (smoke
runs, tests), ``--train``, ``--id``, ... that many of one split. Game ``i`` of a split has task
type ``i mod 6`` (the six ALFWorld task types). A game is built from one room of
``alfworld/gen/layouts`` (its receptacles with their positions, and the object classes present):
``valid_unseen`` rooms come from the scenes the wheel's ALFRED generator sets apart for testing
(``constants.TEST_SCENE_NUMBERS``: 6 of the 30 of each room kind) and every other split's from its
training scenes, so that no ``valid_unseen`` room is seen in any other split, as the official
split holds its unseen rooms out (not necessarily the same rooms), and each task type only uses
the room kinds ALFRED allows it (``constants.GOALS_VALID``). The game keeps every receptacle of the
room, as ALFWorld's own games keep every receptacle of the scene (the ones the task needs first,
then the others in the room's order, no draw), or, where ``max_receptacles`` is an integer, the ones
the task needs and a draw of the others up to that many (with 8, the set
``reference/alfworld-initial`` was built on, file for file). It places the task's object(s) away
from the target receptacle type and adds a few other objects, each only where ALFRED allows it
(``constants.VAL_RECEPTACLE_OBJECTS``; desk lamps stand on a desk, dresser or side table). Goals and
task sentences come from ALFWorld's goal library; the domain and text grammar are the wheel's
``alfred.pddl`` and ``alfred.twl2``.

A candidate is kept only if the real engine loads it, its goal does not already hold at the start,
the planner finds a plan of at most ``max_plan_length`` steps within :data:`PLANNER_MEMORY` of
memory, and playing that plan through the engine wins. The plan is stored as the game's
walkthrough; a rejected candidate is redrawn.

Generation is deterministic in ``seed``, game by game: every candidate of game ``i`` of a split is
drawn from a random stream named by the seed, the split, ``i`` and the attempt, so game ``i`` does
not depend on how many games any split has (a larger set extends a smaller one, and a set written
before ``dev`` and ``clone`` existed gains them, its own games kept), and no two splits share a
draw: two games of different splits could only be the same game (:func:`game_identity`) if two
independent draws agreed in every choice, which the writer checks before it writes the manifest.
Writing resumes: each game appears in its folder only once it is checked, the games already there
are kept, and the set's manifest (``games.json``: the generation settings, the games of each split
and the sha256 over all of them) is written last, when every game is in place. A folder holding
games made with other settings is refused; the main job's set therefore lives in a folder named
by its drawing settings (:func:`default_root`), beside the sets drawn with others.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import multiprocessing
import os
import random
import resource
import shutil
import signal
import time
import traceback
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from pathlib import Path
from types import ModuleType
from typing import Any

from tqdm import tqdm

from resail_pipeline.config import Config, ConfigError, Field, check_int
from resail_pipeline.envs.alfworld import (
    ALFWORLD_DATA,
    DATA_DIR,
    GAME_FILE,
    SPLITS,
    AlfWorldGameError,
    GameEngine,
    check_data_folder,
    split_dir,
    split_games,
)
from resail_pipeline.io import (
    ProcessLock,
    atomic_path,
    read_json,
    replace_directory,
    settings_sha256,
    sha256_file,
)

logger = logging.getLogger(__name__)

#: The six task types, in the order game ``i`` of a split cycles through them.
TASK_TYPES = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)
#: Under which the main job keeps the generated set when the run names no ALFWorld data, in a
#: folder named by its drawing settings (:func:`default_root`).
DEFAULT_ROOT = Path("data") / "01_raw" / "alfworld_games"
#: The trajectory data beside each game file.
TRAJ_FILE = "traj_data.json"
#: The set's manifest under the data root: settings, games per split, files and sha256.
MANIFEST = "games.json"
#: The generation settings under the data root, written before the first game.
SETTINGS_FILE = "games_settings.json"
#: Where games are drawn before they move into place, one folder per game being drawn.
STAGING = ".staging"
#: Held by the process that writes the set (:class:`~resail_pipeline.io.ProcessLock`): another waits.
LOCK_FILE = ".writing.lock"
#: Address space, in bytes, that checking one candidate may add to the process that draws it (the
#: engine's translation of the problem and the planner's search): a candidate whose planner needs
#: more is rejected, as a game the planner expert could not replan either (:func:`check_candidate`).
PLANNER_MEMORY = 1 << 30
#: Task type -> (appliance receptacle class, object property it needs), for the state-change tasks.
APPLIANCES = {
    "pick_clean_then_place_in_recep": ("SinkBasin", "Cleanable"),
    "pick_heat_then_place_in_recep": ("Microwave", "Heatable"),
    "pick_cool_then_place_in_recep": ("Fridge", "Coolable"),
}
#: The lamp of ``look_at_obj_in_light`` and the receptacle classes it may stand on.
LAMP = "DeskLamp"
LAMP_RECEPTACLES = ("Desk", "Dresser", "SideTable")
#: Receptacle and object type constants the domain's actions name; every problem declares them.
DOMAIN_RTYPES = ("Fridge", "Microwave", "SinkBasin")
DOMAIN_OTYPES = ("ButterKnife", "Knife")
#: ALFRED's mangling of ids into PDDL names (``PlannedGameState.fix_pddl_str_chars``, which
#: cannot be imported without OpenCV); characters are replaced all at once.
PDDL_CHARS = {"-": "_minus_", "#": "-", "|": "_bar_", "+": "_plus_", ".": "_dot_", ",": "_comma_"}
_PDDL_TABLE = str.maketrans(PDDL_CHARS)
#: Grid step of the layouts, in metres.
GRID = 0.25
#: Split -> the ALFRED scenes its rooms are drawn from (valid_unseen holds unseen rooms).
SPLIT_SCENES = {"train": "train", "id": "train", "ood": "test", "dev": "train", "clone": "train"}

#: A navigation pose in grid units: (x, z, rotation / 90 degrees, camera horizon in degrees).
Location = tuple[int, int, int, int]


class GameGenConfig(Config):
    """How many games to build and how large."""

    train: int = Field(1024, ge=1)
    """Games of the train split (the cycles collect on them)."""
    id: int = Field(256, ge=1)
    """Games of valid_seen, the ID evaluation split (training scenes, new games)."""
    ood: int = Field(256, ge=1)
    """Games of valid_unseen, the OOD evaluation split (test scenes)."""
    dev: int = Field(256, ge=1)
    """Games of dev, where a learning rate is chosen (training scenes, new games)."""
    clone: int = Field(512, ge=1)
    """Games of clone, the initial policy's behaviour cloning (training scenes, new games)."""
    seed: int = Field(0, ge=0)
    """Seed of every random draw; the same seed gives the same games."""
    max_receptacles: int | None = Field(None, ge=3)
    """Receptacles kept from the room (the ones the task needs are always kept); null keeps every
    receptacle of the room, as ALFWorld's own games keep every receptacle of the scene."""
    distractors: int = Field(3, ge=0)
    """Objects placed besides the task's own."""
    max_plan_length: int = Field(20, ge=1, le=30)
    """Longest planner walkthrough accepted (episodes are cut at 30 steps)."""
    max_attempts: int = Field(40, ge=1)
    """Candidates drawn for one game before giving up."""

    def games(self, split: str) -> int:
        """Games of ``split`` (one of :data:`~resail_pipeline.envs.alfworld.SPLITS`)."""
        if split not in SPLITS:
            raise ValueError(f"split: unknown ALFWorld split {split!r}; choose one of {SPLITS}")
        return int(getattr(self, split))

    def drawing(self) -> dict[str, int | None]:
        """The settings every game's draw depends on (all but the counts)."""
        return {k: v for k, v in self.model_dump().items() if k not in SPLITS}


def default_root(config: GameGenConfig | None = None) -> Path:
    """Where the main job keeps the set drawn with ``config``'s settings (default: the default
    set): a folder of :data:`DEFAULT_ROOT` named by the first 12 hex digits of the sha256 of
    :meth:`GameGenConfig.drawing` as sorted JSON. Sets drawn with other settings (8 receptacles a
    game, say) lie beside it, and counts that grow extend the set in place."""
    return DEFAULT_ROOT / settings_sha256((config or GameGenConfig()).drawing())[:12]


@dataclass(frozen=True)
class Receptacle:
    """A receptacle of a room: its layout id (e.g. ``Cabinet|+00.68|+00.50|-02.20``), class and
    the pose from which it is reached."""

    id: str
    cls: str
    location: Location


@dataclass(frozen=True)
class Room:
    """One ALFRED scene as the wheel's layouts describe it."""

    scene: int
    kind: str
    receptacles: tuple[Receptacle, ...]
    object_classes: frozenset[str]
    points: tuple[tuple[float, float], ...]


@dataclass(frozen=True)
class Placement:
    """An object of a game: id, class and the receptacle it starts in."""

    id: str
    cls: str
    receptacle: Receptacle


@dataclass(frozen=True)
class GameSpec:
    """Everything a game file and its ``traj_data.json`` are written from."""

    task_type: str
    scene: int
    object_target: str
    parent_target: str
    toggle_target: str
    receptacles: tuple[Receptacle, ...]
    objects: tuple[Placement, ...]
    start: Location
    sentence: str


def _constants() -> ModuleType:
    from alfworld.gen import constants

    return constants


def _goal_library() -> ModuleType:
    from alfworld.gen import goal_library

    return goal_library


def pddl_name(text: str) -> str:
    """``text`` as a PDDL name, mangled the way ALFRED's own problems are."""
    return text.translate(_PDDL_TABLE)


def _location_name(location: Location) -> str:
    return pddl_name("loc|{}|{}|{}|{}".format(*location))


def _room_kind(scene: int) -> str:
    return next(kind for kind, scenes in _constants().SCENE_TYPE.items() if scene in scenes)


def _layouts() -> Path:
    return Path(str(files("alfworld") / "gen" / "layouts"))


@cache
def load_room(scene: int) -> Room:
    """Scene ``scene`` from the wheel's layouts: ``FloorPlan<scene>-{openable,objects}.json`` and
    the reachable grid points of ``FloorPlan<scene>-layout.npy``."""
    import numpy as np

    c = _constants()
    static = c.RECEPTACLES - c.MOVABLE_RECEPTACLES_SET
    poses = json.loads((_layouts() / f"FloorPlan{scene}-openable.json").read_text())
    receptacles = []
    for key, (x, z, rotation, horizon) in sorted(poses.items()):
        parts = key.split("|")
        cls = parts[4] if len(parts) > 4 else parts[0]  # "Sink|x|y|z|SinkBasin" is a SinkBasin
        if cls not in static or not cls.startswith(parts[0]):
            continue  # a movable receptacle, or a mislabelled basin ("Bathtub|...|SinkBasin")
        location = (round(x / GRID), round(z / GRID), int(rotation) // 90 % 4, int(horizon))
        receptacles.append(Receptacle(key, cls, location))
    classes = json.loads((_layouts() / f"FloorPlan{scene}-objects.json").read_text())
    points = np.load(_layouts() / f"FloorPlan{scene}-layout.npy")  # (P, 2) x, z in metres
    return Room(
        scene=scene,
        kind=_room_kind(scene),
        receptacles=tuple(receptacles),
        object_classes=frozenset(classes),
        points=tuple((float(x), float(z)) for x, z in points),
    )


def _pickupable() -> frozenset[str]:
    """Object classes ALFRED lets an agent move between receptacles (sliced pieces excluded)."""
    values = set().union(*_constants().VAL_RECEPTACLE_OBJECTS.values())
    return frozenset(v for v in values if not v.endswith("Sliced"))


def _holds(receptacle_cls: str, object_cls: str) -> bool:
    return object_cls in _constants().VAL_RECEPTACLE_OBJECTS.get(receptacle_cls, ())


def task_options(room: Room, task_type: str) -> list[tuple[str, str, str]]:
    """The (object, parent receptacle class, toggle) triples ``task_type`` can use in ``room``:
    the object is present and movable, has the property the task needs, can start somewhere that
    is not of the parent's class and can be put into the parent."""
    c = _constants()
    if room.kind not in c.GOALS_VALID[task_type]:
        return []
    classes = {r.cls for r in room.receptacles}
    movable = sorted(_pickupable() & room.object_classes)
    if task_type == "look_at_obj_in_light":
        if LAMP not in room.object_classes or not classes & set(LAMP_RECEPTACLES):
            return []
        return [(o, "", LAMP) for o in movable if any(_holds(r, o) for r in classes)]
    appliance, needs = APPLIANCES.get(task_type, (None, None))
    if appliance is not None and appliance not in classes:
        return []
    options = []
    for parent in sorted(classes - {appliance}):
        for obj in movable:
            has_property = needs is None or obj in c.VAL_ACTION_OBJECTS[needs]
            has_source = any(_holds(r, obj) for r in classes - {parent})
            if has_property and has_source and _holds(parent, obj):
                options.append((obj, parent, ""))
    return options


def _pick(rng: random.Random, receptacles: Sequence[Receptacle], cls: str) -> Receptacle:
    return rng.choice([r for r in receptacles if r.cls == cls])


def sample_game(
    rng: random.Random, task_type: str, scenes: Sequence[int], config: GameGenConfig
) -> GameSpec:
    """Draw one candidate game of ``task_type`` in one of ``scenes`` (not yet checked)."""
    hosts = [s for s in scenes if task_options(load_room(s), task_type)]
    if not hosts:
        raise ValueError(f"no room among {len(scenes)} scenes can host a {task_type} task")
    room = load_room(rng.choice(hosts))
    obj, parent, toggle = rng.choice(task_options(room, task_type))
    appliance = APPLIANCES.get(task_type, ("", ""))[0]

    # The receptacles the task needs, then the room's others (in the room's order), or a draw of
    # them up to max_receptacles.
    needed: list[Receptacle] = []
    if parent:
        needed.append(_pick(rng, room.receptacles, parent))
    if appliance:
        needed.append(_pick(rng, room.receptacles, appliance))
    if toggle:
        lamp_classes = sorted({r.cls for r in room.receptacles} & set(LAMP_RECEPTACLES))
        lamp_holder = _pick(rng, room.receptacles, rng.choice(lamp_classes))
        needed.append(lamp_holder)
    sources = [r for r in room.receptacles if r.cls != parent and _holds(r.cls, obj)]
    copies = 2 if task_type == "pick_two_obj_and_place" else 1
    starts = [rng.choice(sources) for _ in range(copies)]
    needed += starts
    needed = list(dict.fromkeys(needed))
    others = [r for r in room.receptacles if r not in needed]
    if config.max_receptacles is None:
        kept = tuple(needed + others)
    else:
        extra = max(0, config.max_receptacles - len(needed))
        kept = tuple(needed + rng.sample(others, min(extra, len(others))))

    placements = [(obj, start) for start in starts]
    if toggle:
        placements.append((toggle, lamp_holder))
    others_cls = sorted((_pickupable() & room.object_classes) - {obj})
    for cls in rng.sample(others_cls, min(config.distractors, len(others_cls))):
        holders = [r for r in kept if _holds(r.cls, cls)]
        if holders:
            placements.append((cls, rng.choice(holders)))
    objects = tuple(
        Placement(f"{cls}|{k:02d}", cls, receptacle)
        for k, (cls, receptacle) in enumerate(placements, start=1)
    )

    taken = {r.location for r in kept}
    points = list(room.points)
    rng.shuffle(points)
    poses = ((round(x / GRID), round(z / GRID), rng.randrange(4), 30) for x, z in points)
    start = next((pose for pose in poses if pose not in taken), None)
    if start is None:
        raise ValueError(f"scene {room.scene}: no free grid point for the agent to start on")
    template = rng.choice(_goal_library().gdict[task_type]["templates"])
    sentence = template.format(
        obj=obj.lower(), recep=parent.lower(), toggle=toggle.lower(), mrecep=""
    )
    return GameSpec(
        task_type=task_type,
        scene=room.scene,
        object_target=obj,
        parent_target=parent,
        toggle_target=toggle,
        receptacles=kept,
        objects=objects,
        start=start,
        sentence=sentence,
    )


def problem_text(spec: GameSpec, name: str) -> str:
    """The PDDL problem of ``spec``, named ``name``, for the wheel's ``alfred.pddl`` domain."""
    c = _constants()
    rtypes = sorted({r.cls for r in spec.receptacles} | set(DOMAIN_RTYPES))
    otypes = sorted({o.cls for o in spec.objects} | set(DOMAIN_OTYPES))
    if clash := set(rtypes) & set(otypes):
        # Fast Downward exits the process on a name declared with two types.
        raise ValueError(f"types declared both as receptacle and object types: {sorted(clash)}")
    locations = sorted({r.location for r in spec.receptacles} | {spec.start})
    objects = [
        "agent1 - agent",
        *(f"{t}Type - otype" for t in otypes),
        *(f"{t}Type - rtype" for t in rtypes),
        *(f"{pddl_name(o.id)} - object" for o in spec.objects),
        *(f"{pddl_name(r.id)} - receptacle" for r in spec.receptacles),
        *(f"{_location_name(loc)} - location" for loc in locations),
    ]
    init = ["(= (total-cost) 0)", f"(atLocation agent1 {_location_name(spec.start)})"]
    for r in spec.receptacles:
        name_r = pddl_name(r.id)
        init += [
            f"(receptacleType {name_r} {r.cls}Type)",
            f"(receptacleAtLocation {name_r} {_location_name(r.location)})",
        ]
        if r.cls in c.OPENABLE_CLASS_SET:
            init.append(f"(openable {name_r})")
    properties = {
        "cleanable": c.VAL_ACTION_OBJECTS["Cleanable"],
        "heatable": c.VAL_ACTION_OBJECTS["Heatable"],
        "coolable": c.VAL_ACTION_OBJECTS["Coolable"],
        "sliceable": c.VAL_ACTION_OBJECTS["Sliceable"],
        "isReceptacleObject": c.MOVABLE_RECEPTACLES_SET,
    }
    for o in spec.objects:
        name_o = pddl_name(o.id)
        init += [
            f"(objectType {name_o} {o.cls}Type)",
            f"(inReceptacle {name_o} {pddl_name(o.receptacle.id)})",
            f"(objectAtLocation {name_o} {_location_name(o.receptacle.location)})",
            f"(toggleable {name_o})" if o.cls == LAMP else f"(pickupable {name_o})",
        ]
        init += [f"({p} {name_o})" for p, classes in properties.items() if o.cls in classes]
    for rt in sorted({r.cls for r in spec.receptacles}):
        init += [f"(canContain {rt}Type {ot}Type)" for ot in otypes if _holds(rt, ot)]
    goal = (
        _goal_library()
        .gdict[spec.task_type]["pddl"]
        .format(
            obj=spec.object_target,
            recep=spec.parent_target,
            toggle=spec.toggle_target,
            mrecep="",
        )
    )
    lines = [f"(define (problem {name})", "    (:domain alfred)", "    (:objects"]
    lines += [f"        {line}" for line in objects]
    lines += ["    )", "    (:init"]
    lines += [f"        {line}" for line in init]
    lines += ["    )", goal.replace("#", "-").strip()]  # the goal closes the define
    return "\n".join(lines) + "\n"


def traj_data(spec: GameSpec, trial: str) -> dict[str, Any]:
    """The ``traj_data.json`` ALFWorld reads for a game (task type and PDDL parameters)."""
    return {
        "task_id": trial,
        "task_type": spec.task_type,
        "pddl_params": {
            "object_target": spec.object_target,
            "parent_target": spec.parent_target,
            "mrecep_target": "",
            "toggle_target": spec.toggle_target,
            "object_sliced": False,
        },
        "scene": {"floor_plan": f"FloorPlan{spec.scene}", "scene_num": spec.scene},
    }


def game_data(spec: GameSpec, trial: str) -> dict[str, Any]:
    """The ``game.tw-pddl`` content of ``spec``, before its walkthrough is known."""
    data = files("alfworld") / "data"
    grammar = (data / "alfred.twl2").read_text().replace("UNKNOWN GOAL", spec.sentence)
    return {
        "pddl_domain": (data / "alfred.pddl").read_text(),
        "grammar": grammar,
        "pddl_problem": problem_text(spec, f"plan_{trial}"),
        "solvable": False,
        "walkthrough": None,
    }


def solve(engine: GameEngine, game_file: Path, max_plan_length: int) -> list[str] | None:
    """The planner's walkthrough of ``game_file`` if playing it through the engine wins in at
    most ``max_plan_length`` steps, else ``None`` (the engine's reason is logged)."""
    try:
        engine.load(game_file)
        state = engine.reset()
    except AlfWorldGameError as error:
        logger.debug("rejected %s: %s", game_file.parent.name, error)
        return None
    plan = list(state.walkthrough or ())
    if state.won or not plan or len(plan) > max_plan_length:
        logger.debug("rejected %s: won=%s, plan of %d", game_file.parent.name, state.won, len(plan))
        return None
    for step, command in enumerate(plan, start=1):
        if command not in state.admissible_commands:
            logger.debug(
                "rejected %s: step %d of its plan is not admissible", game_file.parent.name, step
            )
            return None
        state = engine.step(command)
        if state.won:
            return plan[:step]
    logger.debug("rejected %s: its plan ends without winning", game_file.parent.name)
    return None


def check_candidate(engine: GameEngine, game_file: Path, max_plan_length: int) -> list[str] | None:
    """:func:`solve`, run in a child process (a fork, so ``engine`` is its copy) whose address
    space may grow by :data:`PLANNER_MEMORY` beyond the parent's: the walkthrough, or ``None``
    where :func:`solve` rejects the candidate or the child runs out of that memory (Fast Downward's
    search then aborts the process, or Python raises ``MemoryError``). The limit is on memory, not
    time, so a machine's speed does not change which candidates pass. With several workers the
    parent is a worker that never loads a game itself, so it has little room free that a child
    could use besides the limit; with one (``workers=1``) it is the writing process, whose larger
    heap can leave a child more, so a candidate close to the limit may pass there and not with
    more workers."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child; it never returns from here
        status, stderr = 1, os.dup(2)
        try:
            os.close(read)
            with open(f"/proc/{os.getpid()}/statm") as statm:  # pages of address space
                used = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
            _, hard = resource.getrlimit(resource.RLIMIT_AS)
            limit = used + PLANNER_MEMORY
            limit = limit if hard == resource.RLIM_INFINITY else min(limit, hard)
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core file where the search aborts
            os.dup2(os.open(os.devnull, os.O_WRONLY), 2)  # nor its "std::bad_alloc" on stderr
            with os.fdopen(write, "w") as pipe:
                json.dump(solve(engine, game_file, max_plan_length), pipe)
            status = 0
        except MemoryError:
            status = 2
        except BaseException:
            os.write(stderr, traceback.format_exc().encode())
        finally:
            os._exit(status)
    os.close(write)
    with os.fdopen(read) as pipe:
        text = pipe.read()
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code == 1:
        raise RuntimeError(f"{game_file}: checking the candidate failed (its traceback above)")
    if code in (-signal.SIGKILL, -signal.SIGTERM):  # not the limit: the machine, or a person
        raise RuntimeError(
            f"{game_file}: the check of the candidate was killed (signal {-code}), perhaps by the "
            "kernel out of memory; rejecting it would change the set; rerun, and the set resumes"
        )
    if code != 0:  # 2: MemoryError; another signal (negative): the search aborted at the limit
        logger.debug(
            "rejected %s: its check exceeded its memory (exit code %d)", game_file.parent.name, code
        )
        return None
    return json.loads(text)


def write_games(out: Path, config: GameGenConfig, workers: int | None = None) -> list[Path]:
    """Write ``config``'s games under ``out/json_2.1.1``, resuming what is there, then the set's
    manifest (:data:`MANIFEST`). Returns the game files, split by split in the order of
    :data:`~resail_pipeline.envs.alfworld.SPLITS`.

    The missing games are drawn by ``workers`` processes (default: one per core this process may
    use, at most one per game), each with its own engine; a game is drawn from its own stream
    (:func:`draw_stream`), so the set is the same file for file whatever ``workers`` is, but for
    a candidate whose check needs close to :data:`PLANNER_MEMORY` (:func:`check_candidate`).

    Raises:
        ConfigError: ``out`` holds games drawn with other settings, or more games in a split than
            ``config`` asks for (the adapter plays every game of a split folder), or its path is
            one where ALFWorld finds no games
            (:func:`~resail_pipeline.envs.alfworld.check_data_folder`).
        RuntimeError: two of the games are the same game (:func:`game_identity`).
    """
    out = Path(out)
    check_data_folder(out)  # before minutes of drawing that ALFWorld would not find
    if workers is not None:
        check_int("workers", workers, low=1)
    # one writer at a time: a second one removed the first's staging under its workers; it now
    # waits, then writes only what is still missing
    lock = ProcessLock(out / LOCK_FILE)
    lock.acquire(wait=True)
    try:
        return _write_games(out, config, workers)
    finally:
        lock.release()


def _write_games(out: Path, config: GameGenConfig, workers: int | None) -> list[Path]:
    """:func:`write_games` under its lock."""
    _check_existing(out, config)
    shutil.rmtree(out / STAGING, ignore_errors=True)  # what a killed run was writing
    if _complete(out, config):  # complete (perhaps while this call waited for the lock)
        listed = [out / name for name in read_json(out / MANIFEST)["files"]]
        if all(game.is_file() for game in listed):  # else a game removed since: drawn again
            return listed
    jobs = [(split, i) for split in SPLITS for i in range(config.games(split))]
    written = {split: _written(out, split) for split in SPLITS}
    missing = [(split, i) for split, i in jobs if _trial(config, i) not in written[split]]
    started = time.perf_counter()
    if missing:
        # a manifest left in place would vouch for the set while games land, and after a kill
        (out / MANIFEST).unlink(missing_ok=True)
        requested = workers or len(os.sched_getaffinity(0))
        # in this process only where asked for: the last game of a pool's set is a pool's too
        in_process, workers = requested == 1, min(requested, len(missing))
        logger.info(
            "alfworld games: %d of %d to write under %s (%d there), %d worker(s)",
            len(missing),
            len(jobs),
            out,
            len(jobs) - len(missing),
            workers,
        )
        _write_settings(out, config)
        progress = tqdm(total=len(missing), desc="alfworld games", unit="game")
        if in_process:
            engine = GameEngine(plan=True)
            for split, index in missing:
                place_game(out, split, index, config, engine)
                progress.update()
        else:
            spawn = multiprocessing.get_context("spawn")  # no fork of a parent holding threads
            with ProcessPoolExecutor(workers, mp_context=spawn) as pool:
                pending = [pool.submit(place_game, out, s, i, config) for s, i in missing]
                try:
                    for done in as_completed(pending):
                        done.result()  # a game no attempt could solve stops the set here
                        progress.update()
                except BaseException:
                    pool.shutdown(cancel_futures=True)  # games not yet started are not drawn
                    raise
        progress.close()
        shutil.rmtree(out / STAGING)
    split_games.cache_clear()  # the folders have changed since this process read them
    games = [game for split in SPLITS for game in split_games(out, split)]
    if len(games) != len(jobs):
        raise RuntimeError(f"ALFWorld finds {len(games)} of the {len(jobs)} games written")
    _check_distinct(games)
    manifest = {
        "settings": config.model_dump(),
        "games": {split: config.games(split) for split in SPLITS},
        "files": [str(game.relative_to(out)) for game in games],
        "sha256": games_sha256(out, games),
        "seconds": round(time.perf_counter() - started, 1),
    }
    with atomic_path(out / MANIFEST) as tmp:
        tmp.write_text(json.dumps(manifest, indent=1))
    return games


def ensure_games(
    root: str | Path | None = None,
    config: GameGenConfig | None = None,
    workers: int | None = None,
) -> Path:
    """The generated set at ``root`` (default: :func:`default_root` of ``config``): returned as it
    is when its manifest (:data:`MANIFEST`) says it holds ``config``'s games (the default set:
    full rooms; train 1,024, id 256, ood 256, dev 256, clone 512), else written or completed first
    by ``workers`` processes (:func:`write_games`, which resumes: a set written without some
    splits gains them, its games kept)."""
    config = config or GameGenConfig()
    root = default_root(config) if root is None else Path(root)
    if _complete(root, config):
        return root
    started = time.perf_counter()
    write_games(root, config, workers)
    logger.info("alfworld games: the set under %s took %.0f s", root, time.perf_counter() - started)
    return root


def provide_default_games(options: Mapping[str, Any]) -> Path | None:
    """The default set, for ALFWorld environments built with ``options`` where no data is named.

    Where ``options`` names no ``data_path`` (absent or null) and ``ALFWORLD_DATA`` is unset (no
    official games on this machine), the generated set that mirrors the official split, with its
    ``dev`` and ``clone`` splits, is kept in :func:`default_root` under the working directory
    (written on first use, resumed if cut short, and extended when it lacks a split:
    :func:`ensure_games`), and ``ALFWORLD_DATA`` names it for this process and the workers it starts. Returns that root;
    ``None``, doing nothing, where the data is named.
    """
    if options.get("data_path") is not None or os.environ.get(ALFWORLD_DATA):
        return None
    root = ensure_games().resolve()
    os.environ[ALFWORLD_DATA] = str(root)
    logger.info("alfworld: %s=%s (generated games; docs/environments.md)", ALFWORLD_DATA, root)
    return root


def splits_sha256(env: Any, splits: Sequence[str]) -> str:
    """:func:`games_sha256` of every game of ``splits`` (in that order) under the data root of
    ``env`` (an :class:`~resail_pipeline.envs.alfworld.AlfWorldEnv`): what was played on those
    splits, wherever the root lies."""
    root = env.data_root
    return games_sha256(root, [game for split in splits for game in split_games(root, split)])


def games_sha256(root: Path, games: Sequence[Path]) -> str:
    """One sha256 over every game's files (game and trajectory data), each named by its path
    under ``root``, in the order given."""
    digest = hashlib.sha256()
    for game in games:
        for file in (game, game.parent / TRAJ_FILE):
            digest.update(str(file.relative_to(root)).encode())
            digest.update(sha256_file(file).encode())
    return digest.hexdigest()


def game_identity(game_file: Path) -> str:
    """sha256 of what makes ``game_file`` the game it is: the file with its trial name (which
    only names the PDDL problem) taken out, so that two games of any splits or indices have the
    same identity exactly when their rooms, objects, start, goal and sentence are the same."""
    trial = Path(game_file).parent.name
    text = Path(game_file).read_text().replace(f"plan_{trial}", "plan_")
    return hashlib.sha256(text.encode()).hexdigest()


def _check_distinct(games: Sequence[Path]) -> None:
    """Raise if two of ``games`` are the same game (:func:`game_identity`)."""
    seen: dict[str, Path] = {}
    for game in games:
        key = game_identity(game)
        if key in seen:
            raise RuntimeError(
                f"{seen[key].parent} and {game.parent} are the same game; splits must not share "
                "games: write the set with another seed, to a new folder"
            )
        seen[key] = game


def _trial(config: GameGenConfig, index: int) -> str:
    return f"trial_s{config.seed}_{index:05d}"


def _complete(root: Path, config: GameGenConfig) -> bool:
    """Whether ``root``'s manifest says it holds ``config``'s games: written whole (a writer
    removes the manifest before it adds a game, and writes it again once the set is complete)."""
    manifest = root / MANIFEST
    return manifest.is_file() and read_json(manifest).get("settings") == config.model_dump()


def _written(root: Path, split: str) -> set[str]:
    """The trials (``trial_s<seed>_<index>``) of ``split`` a previous call left whole."""
    return {game.parent.name for game in split_dir(root, split).glob(f"*/*/{GAME_FILE}")}


def _check_existing(out: Path, config: GameGenConfig) -> None:
    """Refuse a folder whose games were drawn with other settings or outnumber the asked ones."""
    settings = out / SETTINGS_FILE
    if settings.is_file():
        there = read_json(settings)
        differ = sorted(k for k, v in config.drawing().items() if there.get(k) != v)
        if differ:
            raise ConfigError(
                f"{out}: its games were drawn with other settings ({', '.join(differ)}: "
                f"{', '.join(f'{there.get(k)!r}' for k in differ)}); write to a new folder"
            )
    elif (out / DATA_DIR).is_dir():
        raise ConfigError(
            f"{out}: holds ALFWorld games this generator did not write ({SETTINGS_FILE} is "
            "missing); write to a new folder"
        )
    for split in SPLITS:
        there = len(_written(out, split))
        if there > config.games(split):
            raise ConfigError(
                f"{split}: {out} holds {there} {split} games, more than the "
                f"{config.games(split)} asked for; ask for at least as many, or a new folder"
            )


def _write_settings(out: Path, config: GameGenConfig) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with atomic_path(out / SETTINGS_FILE) as tmp:
        tmp.write_text(json.dumps(config.drawing(), indent=1))


def draw_stream(config: GameGenConfig, split: str, index: int, attempt: int) -> random.Random:
    """The random stream of candidate ``attempt`` of game ``index`` of ``split``. It is named by
    the split itself, not by the scenes the split draws from: splits that share scenes never share
    a draw."""
    return random.Random(f"alfworld-games/{config.seed}/{split}/{index}/{attempt}")


def place_game(
    out: Path, split: str, index: int, config: GameGenConfig, engine: GameEngine | None = None
) -> Path:
    """Draw game ``index`` of ``split`` (:func:`write_game`) in a staging folder of its own under
    ``out`` and move it into place whole, once checked. ``engine`` defaults to one kept for the
    life of the process (a worker's). Returns the game file in place."""
    c = _constants()
    scenes = {"train": c.TRAIN_SCENE_NUMBERS, "test": c.TEST_SCENE_NUMBERS}[SPLIT_SCENES[split]]
    staging = out / STAGING / f"{split}-{index}"
    shutil.rmtree(staging, ignore_errors=True)
    written = write_game(staging, split, index, sorted(scenes), engine or _process_engine(), config)
    folder = written.parent  # staging/json_2.1.1/<split>/<task>/<trial>
    place = out / folder.relative_to(staging)
    place.parent.mkdir(parents=True, exist_ok=True)
    replace_directory(folder, place)  # flushed: a game in place is a whole game after a crash
    shutil.rmtree(staging, ignore_errors=True)
    return place / GAME_FILE


@cache
def _process_engine() -> GameEngine:
    """The planning engine of a worker process, started on its first game."""
    return GameEngine(plan=True)


def write_game(
    root: Path,
    split: str,
    index: int,
    scenes: Sequence[int],
    engine: GameEngine,
    config: GameGenConfig,
) -> Path:
    """Draw candidates for game ``index`` of ``split`` until one passes :func:`solve`; write it
    under ``root`` and return its game file."""
    task_type = TASK_TYPES[index % len(TASK_TYPES)]
    trial = _trial(config, index)
    for attempt in range(config.max_attempts):
        spec = sample_game(draw_stream(config, split, index, attempt), task_type, scenes, config)
        target = spec.parent_target or spec.toggle_target
        task = f"{task_type}-{spec.object_target}-None-{target}-{spec.scene}"
        folder = split_dir(root, split) / task / trial
        folder.mkdir(parents=True)
        game = game_data(spec, trial)
        (folder / GAME_FILE).write_text(json.dumps(game))
        (folder / TRAJ_FILE).write_text(json.dumps(traj_data(spec, trial)))
        walkthrough = check_candidate(engine, folder / GAME_FILE, config.max_plan_length)
        if walkthrough is not None:
            game.update(solvable=True, walkthrough=walkthrough)
            (folder / GAME_FILE).write_text(json.dumps(game))
            return folder / GAME_FILE
        shutil.rmtree(folder)
        if not any(folder.parent.iterdir()):
            folder.parent.rmdir()
    raise RuntimeError(
        f"no solvable {task_type} game for split {split!r} #{index} in {config.max_attempts} "
        "attempts; raise max_attempts or max_plan_length (the command's --max-attempts, "
        "--max-plan-length)"
    )


#: The integer drawing settings the command line sets as they are (``--max-plan-length``, ...)
_DRAWING_OPTIONS = ("distractors", "max_plan_length", "max_attempts")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m resail_pipeline.envs.alfworld_games", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--out", type=Path, required=True, help="data root to write (resumed)")
    defaults = GameGenConfig()
    parser.add_argument("--n", type=int, default=None, help="games in every split")
    for split in SPLITS:
        parser.add_argument(
            f"--{split}",
            type=int,
            default=None,
            help=f"games of {split} (default {defaults.games(split)})",
        )
    parser.add_argument(
        "--seed",
        type=int,
        default=defaults.seed,
        help=f"seed of every draw (default {defaults.seed})",
    )
    parser.add_argument(
        "--max-receptacles",
        type=int,
        nargs="?",
        default=None,
        const=None,
        metavar="N",
        help="receptacles per game, the needed ones first; without N (the default) every "
        "receptacle of the room",
    )
    for name in _DRAWING_OPTIONS:
        parser.add_argument(
            f"--{name.replace('_', '-')}",
            type=int,
            default=getattr(defaults, name),
            metavar="N",
            help=f"{GameGenConfig.model_fields[name].description} (default %(default)s)",
        )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    each = {split: getattr(args, split) for split in SPLITS if getattr(args, split) is not None}
    if args.n is not None and each:
        parser.error(f"--n and --{next(iter(each))}: give the games of every split or of each")
    counts = each if args.n is None else {split: args.n for split in SPLITS}
    try:
        drawing = {name: getattr(args, name) for name in _DRAWING_OPTIONS}
        config = GameGenConfig(
            **counts, seed=args.seed, max_receptacles=args.max_receptacles, **drawing
        )
        games = write_games(args.out, config)
    except ConfigError as error:
        raise SystemExit(f"error: {error}") from None
    logger.info("wrote %d games under %s (%s)", len(games), args.out, MANIFEST)


if __name__ == "__main__":
    main()
