"""ALFWorld (the ``alfworld`` package, 0.4.2) behind the environment protocol.

Games are played in ALFWorld's real text engine: TextWorld's PDDL environment (Fast Downward
underneath) wrapped in ALFWorld's ``AlfredDemangler`` (no shuffling) and ``AlfredInfos``, the
stack ``AlfredTWEnv.init_env`` builds for evaluation, driven one game at a time. The games of a
split are the ones ``AlfredTWEnv.collect_game_files`` itself accepts: folders holding a
``traj_data.json`` of one of the six task types and a ``game.tw-pddl`` marked solvable, "movable"
and "Sliced" tasks skipped.

Data lives under ``$ALFWORLD_DATA/json_2.1.1/{train,valid_seen,valid_unseen}``, the layout
``alfworld-download`` writes; :mod:`resail_pipeline.envs.alfworld_games` writes generated games in
the same layout. Splits: ``train``, ``id`` (valid_seen: seen rooms) and ``ood`` (valid_unseen:
unseen rooms), and two that only the generated set has (:data:`GENERATED_SPLITS`, in the folders
``dev`` and ``clone``, games of seen rooms that no other split shares): ``dev``, where a learning
rate is chosen, and ``clone``, the games an initial policy is behaviour-cloned on. Asking ALFWorld's
own data for one of them fails at once, saying how to generate it. A task id is
``TASK_ID_STRIDE * k + i`` for the ``k``-th split of :data:`SPLITS` and the ``i``-th of its games
sorted by path, so an id names the same game wherever the same data is installed.
``task_ids("train")`` and ``task_ids("clone")`` are every game of the split; the other splits'
are fixed sets of :data:`TEST_SIZE` games each, a sample drawn with :data:`TEST_SAMPLE_SEED` and
listed in id order (every game when the split has fewer).

Episodes follow the paper (appendices A.3 and G): the task is the sentence after
"Your task is to: " in the opening text, ``help`` is never offered, and an episode ends on success
or after :data:`MAX_STEPS` steps. Every step counts: an unparsable response reaches the engine as
an empty command and an action that was not offered (spaces around it aside: the engine strips
them); the engine answers "Nothing happens." to both (``help`` prints its help text) and
the step is marked invalid.

What the adapter works around:

- ``fast_downward.pddl2sas``, run on every load and reset of a game not yet translated (below),
  overwrites ``sys.argv``; it is restored.
- Fast Downward calls ``exit()`` on some malformed problems (e.g. a name declared both an object
  type and a receptacle type); that ``SystemExit``, like any other failure to load or reset a
  game, becomes an :class:`AlfWorldGameError` naming the game file.
- Each engine loads a private copy of ``libdownward.so`` that cannot be unloaded safely
  (``close_lib`` followed by interpreter exit crashes the process). Engines are therefore pooled: an
  episode takes an idle engine at ``reset`` and hands it back when it ends (or its reset fails: an
  engine loads each game anew), so a process holds as many engines as it ever ran episodes at once,
  and adapters are cheap to create. Each copy takes 34 MB of the temporary directory (memory where
  that is a tmpfs) until the process ends, so a rollout keeps at most :data:`LIVE_LIMIT` episodes
  alive unless its settings say otherwise (:attr:`AlfWorldEnv.live_limit`): an evaluation of 1,536
  episodes started all at once would otherwise hold 52 GB of copies.
- TextWorld translates a game's PDDL into Fast Downward's task twice (for play and for the planner)
  at every load and again at every reset, most of an episode's start, and a game is played many
  times in a process (each view and decoding seed of an evaluation). The translation is kept per
  game (:data:`TRANSLATIONS_KEPT`, least recently used out): the same text translates to the same
  task, and nothing that reads the task changes it.
- TextWorld answers a command it does not accept by recomputing the admissible commands of the
  unchanged state (every command's text derived again from the game's grammar, most of a step's
  cost), and most of a weak policy's actions are such commands. :meth:`GameEngine.step` answers
  them itself, with what the engine would return: "Nothing happens." and the state before.
- Importing ``alfworld`` sets ``ALFWORLD_DATA`` to ``~/.cache/alfworld`` when it is unset; the
  variable is restored after the import, so a missing data set is reported the same way whatever
  was imported first.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import operator
import os
import random
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from functools import cache, lru_cache
from pathlib import Path
from types import ModuleType
from typing import Any

from resail_pipeline.config import ConfigError, check_int
from resail_pipeline.envs.alfworld_world import TASK_PREFIX, task_sentence
from resail_pipeline.envs.base import END_STEP_LIMIT, END_SUCCESS, Observation, StepResult

logger = logging.getLogger(__name__)

#: Environment variable naming the data root, as ALFWorld's own scripts use it.
ALFWORLD_DATA = "ALFWORLD_DATA"
#: Folder under the data root that holds the split folders.
DATA_DIR = "json_2.1.1"
#: Our split names, in task-id order (a new split goes last, so that no task id changes).
SPLITS = ("train", "id", "ood", "dev", "clone")
#: The splits of ALFWorld's own data (``alfworld-download``).
OFFICIAL_SPLITS = ("train", "id", "ood")
#: The splits only the generated set has (:mod:`resail_pipeline.envs.alfworld_games`).
GENERATED_SPLITS = ("dev", "clone")
#: The splits whose task ids are every game; the others' are a fixed sample of ``test_size``.
FULL_SPLITS = ("train", "clone")
#: Split name -> its folder under :data:`DATA_DIR` (ALFWorld's own names for the official ones).
SPLIT_DIRS = {
    "train": "train",
    "id": "valid_seen",
    "ood": "valid_unseen",
    "dev": "dev",
    "clone": "clone",
}
#: Split name -> the ``train_eval`` mode under which ``AlfredTWEnv`` reads that folder.
_TRAIN_EVAL = {
    "train": "train",
    "id": "eval_in_distribution",
    "ood": "eval_out_of_distribution",
    "dev": "eval_in_distribution",
    "clone": "train",
}
#: Task ids of the k-th split start at ``k * TASK_ID_STRIDE`` (the largest split has 3,553 games).
TASK_ID_STRIDE = 100_000
#: Steps before an episode is cut (paper appendix A.3).
MAX_STEPS = 30
#: Games in the fixed test set of each split but ``train`` and ``clone``: 256, every game of the
#: generated set's ``id``, ``ood`` and ``dev`` (the paper's appendix A.1 plays 128 ID and 128 OOD).
TEST_SIZE = 256
#: Episodes alive at once in a rollout that names no cap (``max_live: null``): engines, each with
#: its own copy of Fast Downward's library, held until the process ends (see the module docstring).
LIVE_LIMIT = 64
#: Games whose Fast Downward translation a process keeps, least recently used out (about 0.4 MB a
#: game of the default set): every game of an evaluation of `id` and `ood` (512), with room.
TRANSLATIONS_KEPT = 1024
#: Seed of the draw that fixes each evaluation split's test set.
TEST_SAMPLE_SEED = 0
#: The command removed from the admissible actions (paper appendix G).
HELP = "help"
#: The engine's answer to a command it does not accept.
NOTHING_HAPPENS = "Nothing happens."
#: The game file inside each game folder.
GAME_FILE = "game.tw-pddl"

HOW_TO_GET_GAMES = (
    "Get the official games with `pip install 'resail_pipeline[alfworld]'` then `alfworld-download` "
    "(it writes to $ALFWORLD_DATA, by default ~/.cache/alfworld) and `export "
    "ALFWORLD_DATA=~/.cache/alfworld`; or write generated games with `python -m "
    "resail_pipeline.envs.alfworld_games --out data/01_raw/alfworld_games/mine` and `export "
    "ALFWORLD_DATA=data/01_raw/alfworld_games/mine`."
)


class AlfWorldGameError(RuntimeError):
    """A game file the ALFWorld engine cannot load, reset or play."""


def resolve_data_root(data_path: str | os.PathLike | None = None) -> Path:
    """The data root: ``data_path`` if given, else ``$ALFWORLD_DATA``; it must be a directory.

    Raises:
        FileNotFoundError: neither is set, or the folder does not exist; the message says how to
            get games.
    """
    if data_path is None:
        value = os.environ.get(ALFWORLD_DATA)
        if not value:
            raise FileNotFoundError(
                f"ALFWorld data not found: {ALFWORLD_DATA} is not set and no data_path was given. "
                + HOW_TO_GET_GAMES
            )
        source, root = ALFWORLD_DATA, Path(value)
    else:
        source, root = "data_path", Path(data_path)
    root = root.expanduser().absolute()
    if not root.is_dir():
        raise FileNotFoundError(
            f"ALFWorld data not found: {source}={root} is not a directory. " + HOW_TO_GET_GAMES
        )
    return root


def split_dir(root: Path, split: str) -> Path:
    """The folder of ``split`` under the data root ``root``."""
    if split not in SPLIT_DIRS:
        raise ValueError(f"split: unknown ALFWorld split {split!r}; choose one of {SPLITS}")
    return root / DATA_DIR / SPLIT_DIRS[split]


def _no_games(root: Path, split: str) -> FileNotFoundError:
    if split in GENERATED_SPLITS:
        return FileNotFoundError(
            f"ALFWorld split {split!r}: no games under {split_dir(root, split)} (data root "
            f"{root}); only the generated game set has this split, ALFWorld's own data does not: "
            "write the set, or extend one written before the split existed, with `python -m "
            "resail_pipeline.envs.alfworld_games --out DIR` and point ALFWORLD_DATA (or "
            "data_path) at DIR."
        )
    return FileNotFoundError(
        f"ALFWorld data not found: no playable games ({GAME_FILE} beside traj_data.json) under "
        f"{split_dir(root, split)} for split {split!r} (data root {root}). " + HOW_TO_GET_GAMES
    )


#: what ALFWorld's game collector skips wherever it occurs in a game's folder path
#: (``AlfredTWEnv.collect_game_files``): a data root below such a folder holds no games for it
SKIPPED_IN_PATH = ("movable", "Sliced")


def check_data_folder(root: str | os.PathLike) -> Path:
    """``root``, made absolute as the adapter hands it to ALFWorld (links not followed), where
    ALFWorld would find games under it; a path that holds one of :data:`SKIPPED_IN_PATH`
    (``/mnt/removable``, say) is refused, naming it, before a set is written there or a model
    loaded."""
    path = Path(root).expanduser().absolute()
    skipped = [word for word in SKIPPED_IN_PATH if word in str(path)]
    if skipped:
        raise ConfigError(
            f"{path}: ALFWorld skips every game whose path contains {skipped[0]!r}; use a folder "
            "whose path does not"
        )
    return path


def check_alfworld_data(
    data_path: str | os.PathLike | None = None, splits: Iterable[str] = OFFICIAL_SPLITS
) -> Path:
    """The data root, checked to hold games for every split in ``splits`` (by default ALFWorld's
    own three); call it before loading any model. Cheap: it stops at the first game file of each
    split and never starts the engine.

    Raises:
        FileNotFoundError: the root is unset or missing, or a split has no game; the message names
            ``ALFWORLD_DATA``, the folder, and how to get games (``alfworld-download``).
        ValueError: an unknown split name, or a root ALFWorld would find no games under
            (:func:`check_data_folder`).
    """
    root = resolve_data_root(data_path)
    check_data_folder(root)
    for split in splits:
        if next(split_dir(root, split).rglob(GAME_FILE), None) is None:
            raise _no_games(root, split)
    return root


@cache
def _alfred_tw_env() -> ModuleType:
    """ALFWorld's TextWorld module, imported without its side effect on ``ALFWORLD_DATA``."""
    before = os.environ.get(ALFWORLD_DATA)
    from alfworld.agents.environment import alfred_tw_env

    if before is None:
        os.environ.pop(ALFWORLD_DATA, None)
    else:
        os.environ[ALFWORLD_DATA] = before
    return alfred_tw_env


@cache
def split_games(root: Path, split: str) -> tuple[Path, ...]:
    """The game files of ``split`` under ``root``, sorted by path, as ``AlfredTWEnv`` finds them.

    Read once per process and shared by every adapter. Raises ``FileNotFoundError`` if there are
    none, before the engine is imported when the split's folder does not exist.
    """
    folder = split_dir(root, split)
    if not folder.is_dir():
        raise _no_games(root, split)
    alfred = _alfred_tw_env()
    config = {
        "env": {"goal_desc_human_anns_prob": 0, "task_types": sorted(alfred.TASK_TYPES)},
        "dataset": {
            "data_path": str(folder),
            "eval_id_data_path": str(folder),
            "eval_ood_data_path": str(folder),
            "num_train_games": -1,
            "num_eval_games": -1,
        },
    }
    with contextlib.redirect_stdout(io.StringIO()) as printed:  # the class prints its counts
        found = alfred.AlfredTWEnv(config, train_eval=_TRAIN_EVAL[split]).game_files
    for line in printed.getvalue().splitlines():
        logger.debug("AlfredTWEnv: %s", line)
    games = tuple(sorted(Path(f) for f in found))
    if not games:
        raise _no_games(root, split)
    logger.info("alfworld: %d games in split %r under %s", len(games), split, folder)
    return games


def read_walkthrough(game_file: Path) -> tuple[str, ...]:
    """The walkthrough stored in ``game_file``: the commands that win the game from its start."""
    walkthrough = json.loads(Path(game_file).read_text()).get("walkthrough")
    if not isinstance(walkthrough, list) or not all(isinstance(c, str) for c in walkthrough):
        raise AlfWorldGameError(f"{game_file}: no walkthrough (a list of commands) in the game")
    return tuple(walkthrough)


@dataclass(frozen=True)
class EngineState:
    """What the engine reports after a reset or a step.

    Attributes:
        feedback: the engine's text.
        admissible_commands: the commands the engine accepts now, sorted, ``help`` included.
        won: the goal holds.
        walkthrough: the game's walkthrough (or, if it stores none, the planner's plan from the
            start); only after ``reset`` of an engine built with ``plan=True``, else ``None``.
        expert_plan: the planner's plan from the state now (empty once won), after every reset and
            step of an engine built with ``expert=True``, else ``None``.
    """

    feedback: str
    admissible_commands: tuple[str, ...]
    won: bool
    walkthrough: tuple[str, ...] | None = None
    expert_plan: tuple[str, ...] | None = None


@contextlib.contextmanager
def _engine_call(game_file: Path) -> Iterator[None]:
    """Keep ``sys.argv`` and turn any failure (``SystemExit`` included) into an
    :class:`AlfWorldGameError` naming ``game_file``."""
    argv = list(sys.argv)
    try:
        yield
    except (Exception, SystemExit) as error:
        raise AlfWorldGameError(
            f"{game_file}: the ALFWorld engine failed on this game ({type(error).__name__}: {error})"
        ) from error
    finally:
        sys.argv = argv


@cache
def kept_translations() -> Any:
    """Have Fast Downward translate each game once per process (see the module docstring).

    Replaces ``fast_downward.pddl2sas``, which TextWorld's ``PddlState`` calls at every load and
    reset, by a memo over the translation (its ``verbose`` calls, which print the translator's
    output, still translate). Returns the memo, an ``lru_cache`` of :data:`TRANSLATIONS_KEPT`
    games' two translations (``cache_info``, ``cache_clear``).
    """
    import fast_downward

    translate = fast_downward.pddl2sas

    @lru_cache(maxsize=2 * TRANSLATIONS_KEPT)
    def translated(domain: str, problem: str, optimize: bool) -> tuple[Any, str]:
        return translate(domain, problem, optimize=optimize)

    def pddl2sas(
        domain: str, problem: str, verbose: bool = False, optimize: bool = False
    ) -> tuple[Any, str]:
        if verbose:
            return translate(domain, problem, verbose=True, optimize=optimize)
        return translated(domain, problem, bool(optimize))

    fast_downward.pddl2sas = pddl2sas
    return translated


class GameEngine:
    """ALFWorld's engine for one game at a time: TextWorld's ``PddlEnv`` wrapped in
    ``AlfredDemangler(shuffle=False)`` and ``AlfredInfos``, as ``AlfredTWEnv.init_env`` builds it.

    Args:
        plan: also report the game's walkthrough at ``reset``, from the game file or, where it
            stores none, from the planner (used to build and check games).
        expert: also report, after every reset and step, the planner's plan from the state the
            game is in (ALFWorld's planner expert, ``policy_commands``; a planner run per call):
            what an expert does next, whatever was done before.
    """

    def __init__(self, plan: bool = False, expert: bool = False):
        alfred = _alfred_tw_env()
        kept_translations()
        import textworld
        from textworld.envs import PddlEnv

        extras = ["gamefile", "walkthrough"] if plan else ["gamefile"]
        infos = textworld.EnvInfos(
            won=True, admissible_commands=True, policy_commands=expert, extras=extras
        )
        self._plan = plan
        self.expert = expert
        self._env = alfred.AlfredInfos(alfred.AlfredDemangler(PddlEnv(infos), shuffle=False))
        self.game_file: Path | None = None
        self._now: EngineState | None = None  # the state after the last reset or step

    def load(self, game_file: Path) -> None:
        """Load ``game_file``, replacing the game loaded before."""
        self.game_file = None
        self._now = None
        with _engine_call(game_file):
            self._env.load(str(game_file))
        self.game_file = Path(game_file)

    def reset(self) -> EngineState:
        """Start the loaded game from its initial state."""
        if self.game_file is None:
            raise RuntimeError("reset: no game loaded; call load(game_file) first")
        with _engine_call(self.game_file):
            state = self._env.reset()
            walkthrough = tuple(state["extra.walkthrough"]) if self._plan else None
        self._now = self._state(state, walkthrough)
        return self._now

    def step(self, command: str) -> EngineState:
        """Execute ``command``; text the game does not accept leaves the state unchanged.

        Such text is answered here, as the engine answers it ("Nothing happens.", the same
        admissible commands, and the same plan, from the same state), without the engine's
        recomputing them (see the module docstring).
        """
        if self._now is None:
            raise RuntimeError("step: no game started; call reset() first")
        if command.strip() not in self._now.admissible_commands:
            return replace(self._now, feedback=NOTHING_HAPPENS, walkthrough=None)
        state, _, _ = self._env.step(command)
        self._now = self._state(state, None)
        return self._now

    def _state(self, state: Any, walkthrough: tuple[str, ...] | None) -> EngineState:
        won = bool(state["won"])
        expert_plan = None
        if self.expert:
            expert_plan = () if won else tuple(state["policy_commands"] or ())
            if not won and not expert_plan:  # the planner's search failed: no plan, not a win
                raise AlfWorldGameError(
                    f"{self.game_file}: the planner found no plan from the state the game is in"
                )
        return EngineState(
            feedback=state.feedback,
            admissible_commands=tuple(state["admissible_commands"]),
            won=won,
            walkthrough=walkthrough,
            expert_plan=expert_plan,
        )


#: Engines of finished episodes, reused by later ones (see the module docstring), by whether they
#: report the expert's plan.
_IDLE_ENGINES: dict[bool, list[GameEngine]] = {False: [], True: []}


def task_of(text: str, game_file: Path) -> str:
    """The task sentence of ``game_file``'s opening ``text`` (:func:`task_sentence`).

    Raises:
        AlfWorldGameError: the text has no task sentence.
    """
    if TASK_PREFIX not in text:
        raise AlfWorldGameError(f"{game_file}: the opening text has no {TASK_PREFIX!r}")
    return task_sentence(text)


def _offered(commands: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(c for c in commands if c != HELP)


class AlfWorldEnv:
    """One ALFWorld episode at a time (see the module docstring).

    Args:
        data_path: the data root; ``$ALFWORLD_DATA`` when omitted.
        max_steps: steps before an episode is cut.
        test_size: games in the fixed set of each split but ``train`` and ``clone``.
        expert: after every reset and step, know the planner's plan from the state the game is
            in (:attr:`expert_plan`; demonstrations that recover from mistakes need it). Costs a
            planner call per step.
    """

    name = "alfworld"
    live_limit = LIVE_LIMIT

    def __init__(
        self,
        data_path: str | os.PathLike | None = None,
        max_steps: int = MAX_STEPS,
        test_size: int = TEST_SIZE,
        expert: bool = False,
    ):
        check_int("max_steps", max_steps, low=1)
        check_int("test_size", test_size, low=1)
        if not isinstance(expert, bool):
            raise ConfigError(f"expert: must be true or false, got {expert!r}")
        self.data_root = resolve_data_root(data_path)
        self.max_steps = max_steps
        self.test_size = test_size
        self.expert = expert
        self.task_id: int | None = None
        self._engine: GameEngine | None = None
        self._expert_plan: tuple[str, ...] | None = None
        self._offered: tuple[str, ...] = ()
        self._steps = 0
        self._done = True

    def task_ids(self, split: str) -> list[int]:
        games = split_games(self.data_root, split)
        offset = SPLITS.index(split) * TASK_ID_STRIDE
        indices: Iterable[int] = range(len(games))
        if split not in FULL_SPLITS and len(games) > self.test_size:
            indices = sorted(random.Random(TEST_SAMPLE_SEED).sample(indices, self.test_size))
        return [offset + i for i in indices]

    def game_file(self, task_id: int) -> Path:
        """The game file of ``task_id``."""
        limit = len(SPLITS) * TASK_ID_STRIDE
        if (
            isinstance(task_id, bool)
            or not hasattr(task_id, "__index__")
            or not 0 <= task_id < limit
        ):
            raise ValueError(f"task_id: must be an integer in [0, {limit}), got {task_id!r}")
        k, index = divmod(operator.index(task_id), TASK_ID_STRIDE)
        games = split_games(self.data_root, SPLITS[k])
        if index >= len(games):
            raise ValueError(
                f"task_id: {task_id} is past the {len(games)} games of split {SPLITS[k]!r}"
            )
        return games[index]

    def walkthrough(self, task_id: int) -> tuple[str, ...]:
        """The stored walkthrough of ``task_id``'s game: commands that win it from the start."""
        return read_walkthrough(self.game_file(task_id))

    def reset(self, task_id: int) -> Observation:
        try:
            game_file = self.game_file(task_id)
            if self._engine is None:
                idle = _IDLE_ENGINES[self.expert]
                self._engine = idle.pop() if idle else GameEngine(expert=self.expert)
            self._engine.load(game_file)
            state = self._engine.reset()
            if state.won:
                raise AlfWorldGameError(f"{game_file}: the goal already holds before any action")
            text = state.feedback.strip()
            task = task_of(text, game_file)
        except BaseException:
            self.close()  # the episode before is over either way; an engine loads anew
            raise
        self._expert_plan = state.expert_plan
        self._offered = _offered(state.admissible_commands)
        self._steps = 0
        self._done = False
        self.task_id = task_id
        return Observation(text=text, task=task, admissible_actions=self._offered)

    def step(self, action: str | None) -> StepResult:
        if self._done or self._engine is None:
            raise RuntimeError("step: the episode is over; call reset(task_id) first")
        self._steps += 1
        command = "" if action is None else action.strip()  # as the engine reads it
        valid = command in self._offered
        state = self._engine.step(command)
        self._offered = _offered(state.admissible_commands)
        self._expert_plan = state.expert_plan
        end_reason = None
        if state.won:
            end_reason = END_SUCCESS
        elif self._steps >= self.max_steps:
            end_reason = END_STEP_LIMIT
        if end_reason is not None:
            self.close()
        return StepResult(
            observation=state.feedback.strip(),
            reward=1.0 if state.won else 0.0,
            done=end_reason is not None,
            success=state.won,
            action_valid=valid,
            admissible_actions=self._offered,
            end_reason=end_reason,
        )

    @property
    def expert_plan(self) -> tuple[str, ...]:
        """The planner's plan from the state the episode is in (empty once won).

        Raises:
            RuntimeError: the environment was built without ``expert=True``, or no episode has
                started.
        """
        if not self.expert:
            raise RuntimeError("expert_plan: build the environment with expert=True")
        if self._expert_plan is None:
            raise RuntimeError("expert_plan: no episode has started; call reset(task_id) first")
        return self._expert_plan

    def close(self) -> None:
        """End the current episode (if any) and hand its engine back to the pool."""
        if self._engine is not None:
            _IDLE_ENGINES[self._engine.expert].append(self._engine)
            self._engine = None
        self._done = True
