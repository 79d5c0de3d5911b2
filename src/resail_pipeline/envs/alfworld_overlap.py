"""How far an ALFWorld split is from ``train``: what its games share with ``train``'s, verbatim.

Every game of a data root (the generated set or ALFWorld's own, ``json_2.1.1/<split>``) is
opened the way an episode starts, in ALFWorld's engine (:class:`~resail_pipeline.envs.alfworld.
GameEngine`: load, reset), and a split is compared with ``train`` on:

- ``same_opening``: the share of its games whose opening text (the engine's text after reset,
  "-= Welcome to TextWorld, ALFRED! =- ... Your task is to: ...", stripped) is, verbatim, the
  opening of a ``train`` game;
- ``same_receptacles``: the share whose opening receptacle list (the text after
  :data:`RECEPTACLES_PREFIX` up to the period: every receptacle of the game, named and numbered)
  is, verbatim, a ``train`` game's;
- ``new_words`` and ``new_task_words``: the words (runs of lower-case letters or digits) of its
  opening texts, and of its task sentences alone, that no ``train`` opening, or task sentence,
  holds;
- ``new_receptacle_classes`` and ``new_object_classes``: the receptacle and object classes its
  games' PDDL problems declare (``receptacleType``, ``objectType``) that no ``train`` game's does.

A split compared with itself shares everything: shares of 1.0 and nothing new. Splits a data root
does not have (``dev`` and ``clone`` in ALFWorld's own data) are left out. Games are opened by
``workers`` processes, each with its own engine; the result does not depend on their number.
"""

from __future__ import annotations

import multiprocessing
import os
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import Any

from tqdm import tqdm

from resail_pipeline.config import check_int
from resail_pipeline.envs.alfworld import GameEngine, split_dir, split_games, task_of
from resail_pipeline.io import read_json

#: The splits compared with ``train``, in this order.
COMPARED_SPLITS = ("id", "ood", "dev", "clone")
#: What precedes the receptacle list in every opening text.
RECEPTACLES_PREFIX = "Looking quickly around you, you see "
#: New words (or classes) a table cell names before it says how many more there are.
SHOWN = 5
_WORD = re.compile(r"[a-z0-9]+")
_DECLARED = re.compile(r"\((receptacleType|objectType) [^\s?()][^\s()]* (\w+)Type\)")


@dataclass(frozen=True)
class Opening:
    """How a game opens: the engine's text after reset and the classes its problem declares."""

    text: str
    task: str
    receptacles: str
    receptacle_classes: frozenset[str]
    object_classes: frozenset[str]


@dataclass(frozen=True)
class SplitOverlap:
    """A split compared with ``train`` (see the module docstring); word and class lists sorted."""

    split: str
    games: int
    train_games: int
    same_opening: float
    same_receptacles: float
    new_words: tuple[str, ...]
    new_task_words: tuple[str, ...]
    new_receptacle_classes: tuple[str, ...]
    new_object_classes: tuple[str, ...]


def words(text: str) -> set[str]:
    """The words of ``text``: its runs of letters or digits, lower-cased."""
    return set(_WORD.findall(text.lower()))


def receptacle_list(text: str) -> str:
    """The receptacle list of an opening text: what follows :data:`RECEPTACLES_PREFIX`, up to the
    period (``""`` where the text has none)."""
    start = text.find(RECEPTACLES_PREFIX)
    if start < 0:
        return ""
    return text[start + len(RECEPTACLES_PREFIX) :].split(".", 1)[0]


def declared_classes(game_file: Path) -> tuple[frozenset[str], frozenset[str]]:
    """The receptacle classes and the object classes ``game_file``'s PDDL problem declares."""
    game = read_json(game_file)
    if not isinstance(game, dict) or "pddl_problem" not in game:
        raise ValueError(f"{game_file}: no pddl_problem (not an ALFWorld game file)")
    problem = game["pddl_problem"]
    found: dict[str, set[str]] = {"receptacleType": set(), "objectType": set()}
    for kind, cls in _DECLARED.findall(problem):
        found[kind].add(cls)
    return frozenset(found["receptacleType"]), frozenset(found["objectType"])


def read_opening(game_file: Path, engine: GameEngine) -> Opening:
    """How ``game_file`` opens in ``engine``."""
    engine.load(game_file)
    text = engine.reset().feedback.strip()
    task = task_of(text, game_file)
    receptacle_classes, object_classes = declared_classes(game_file)
    return Opening(text, task, receptacle_list(text), receptacle_classes, object_classes)


@cache
def _process_engine() -> GameEngine:
    return GameEngine()


def _opening(game_file: Path) -> Opening:
    """:func:`read_opening` with the engine of this (worker) process."""
    return read_opening(game_file, _process_engine())


def read_openings(
    root: Path, splits: Sequence[str], workers: int | None = None
) -> dict[str, list[Opening]]:
    """The openings of every game of each of ``splits`` under ``root``, in the order of
    :func:`~resail_pipeline.envs.alfworld.split_games`, read by ``workers`` processes (default:
    one per core this process may use; 1 reads them in this process)."""
    if workers is not None:
        check_int("workers", workers, low=1)
    games = {split: split_games(Path(root), split) for split in splits}
    files = [game for split in splits for game in games[split]]
    workers = min(workers or len(os.sched_getaffinity(0)), max(len(files), 1))
    spawn = multiprocessing.get_context("spawn")  # no fork of a parent holding threads
    pool = ProcessPoolExecutor(workers, mp_context=spawn) if workers > 1 else None
    try:
        chunk = max(1, min(16, len(files) // (8 * workers)))
        read = map(_opening, files) if pool is None else pool.map(_opening, files, chunksize=chunk)
        openings = list(tqdm(read, total=len(files), desc="alfworld openings", unit="game"))
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    out, start = {}, 0
    for split in splits:
        out[split] = openings[start : start + len(games[split])]
        start += len(games[split])
    return out


def compare(split: str, openings: Sequence[Opening], train: Sequence[Opening]) -> SplitOverlap:
    """``split``'s games (their ``openings``) against ``train``'s."""
    if not openings or not train:
        raise ValueError(f"{split}: nothing to compare ({len(openings)} games, {len(train)} train)")
    texts = {o.text for o in train}
    lists = {o.receptacles for o in train}

    def new(of: Callable[[Opening], Collection[str]]) -> tuple[str, ...]:
        theirs = set().union(*(of(o) for o in train))
        return tuple(sorted(set().union(*(of(o) for o in openings)) - theirs))

    return SplitOverlap(
        split=split,
        games=len(openings),
        train_games=len(train),
        same_opening=sum(o.text in texts for o in openings) / len(openings),
        same_receptacles=sum(o.receptacles in lists for o in openings) / len(openings),
        new_words=new(lambda o: words(o.text)),
        new_task_words=new(lambda o: words(o.task)),
        new_receptacle_classes=new(lambda o: o.receptacle_classes),
        new_object_classes=new(lambda o: o.object_classes),
    )


def split_overlap(
    root: str | Path, splits: Sequence[str] = COMPARED_SPLITS, workers: int | None = None
) -> list[SplitOverlap]:
    """Each of ``splits`` that ``root`` has, compared with its ``train`` split (see the module
    docstring); the games are opened by ``workers`` processes (:func:`read_openings`)."""
    root = Path(root)
    present = [s for s in dict.fromkeys(splits) if s != "train" and split_dir(root, s).is_dir()]
    openings = read_openings(root, ["train", *present], workers)
    return [compare(s, openings[s], openings["train"]) for s in present]


def _few(values: Sequence[str]) -> str:
    if not values:
        return "0"
    more = f", +{len(values) - SHOWN}" if len(values) > SHOWN else ""
    return f"{len(values)} ({', '.join(values[:SHOWN])}{more})"


def markdown_table(sets: Mapping[str, Sequence[SplitOverlap]]) -> str:
    """One row per set and split: the shares in percent, then each new list as its count and
    first few (:data:`SHOWN`)."""
    lines = [
        "| set | split | games | same opening | same receptacle list | new words (opening) "
        "| new words (task) | new receptacle classes | new object classes |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, rows in sets.items():
        for r in rows:
            cells = [
                name,
                f"`{r.split}`",
                f"{r.games:,}",
                f"{100 * r.same_opening:.1f}%",
                f"{100 * r.same_receptacles:.1f}%",
                _few(r.new_words),
                _few(r.new_task_words),
                _few(r.new_receptacle_classes),
                _few(r.new_object_classes),
            ]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def as_json(sets: Mapping[str, Sequence[SplitOverlap]]) -> dict[str, Any]:
    """``sets`` as JSON-ready dicts, every word and class listed."""
    return {name: [asdict(r) for r in rows] for name, rows in sets.items()}
