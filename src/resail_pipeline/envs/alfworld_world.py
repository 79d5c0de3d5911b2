"""What an ALFWorld episode's text reveals: the task, the room, and the world the actions showed.

ALFWorld's text is regular: the opening lists the room's receptacles and states the task in one of
the six templates of ALFWorld's goal library (:data:`TASKS`), and every accepted action answers in
one of a few forms ("You arrive at desk 1. On the desk 1, you see a mug 1.", "You open the fridge
1. The fridge 1 is open. In it, you see nothing.", "You pick up the mug 1 from the desk 1.", ...).
:class:`World` follows those answers: where each object was seen, which receptacles were searched,
found closed or opened, what the agent took, cleaned, heated, cooled, switched on and put where,
and where it stands. Two things read it: the rules-based summaries
(:mod:`resail_pipeline.experience.alfworld_rules`) and the searching expert of the initial
policy's demonstrations (:func:`search_plan`), which acts on what an agent without the game's
hidden state can know.

ALFRED's placement rules (which receptacle may hold which object, which receptacles open) come
from the ``alfworld`` package where it is installed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache

#: Sentence patterns of the six task types (ALFWorld's goal library), specialised ones first.
TASKS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (kind, re.compile(pattern))
    for kind, pattern in (
        ("clean", r"^(?:put a clean (?P<a>\w+) in|clean some (?P<b>\w+) and put it in) (?P<r>\w+)$"),
        ("heat", r"^(?:put a hot (?P<a>\w+) in|heat some (?P<b>\w+) and put it in) (?P<r>\w+)$"),
        ("cool", r"^(?:put a cool (?P<a>\w+) in|cool some (?P<b>\w+) and put it in) (?P<r>\w+)$"),
        ("two", r"^(?:put two (?P<a>\w+) in|find two (?P<b>\w+) and put them in) (?P<r>\w+)$"),
        ("look", r"^(?:look at (?P<a>\w+) under the|examine the (?P<b>\w+) with the) (?P<r>\w+)$"),
        ("place", r"^put (?:a|some) (?P<a>\w+) (?:in|on) (?P<r>\w+)$"),
    )
)  # fmt: skip
#: Task kind -> (appliance class, verb) for the state-change tasks.
APPLIANCES = {
    "clean": ("sinkbasin", "clean"),
    "heat": ("microwave", "heat"),
    "cool": ("fridge", "cool"),
}
#: Task kind -> its procedure's steps, in order.
PROCEDURES = {
    "place": ("find a {obj}", "take it", "put it in/on a {recep}"),
    "two": ("find a {obj}", "take it", "put it in/on a {recep}", "find a second {obj}",
            "take it", "put it in/on the {recep}"),
    "look": ("find a {obj}", "take it", "find a {recep}", "switch the {recep} on holding the {obj}"),
    "clean": ("find a {obj}", "take it", "clean it with a sinkbasin", "put it in/on a {recep}"),
    "heat": ("find a {obj}", "take it", "heat it with a microwave", "put it in/on a {recep}"),
    "cool": ("find a {obj}", "take it", "cool it with a fridge", "put it in/on a {recep}"),
}  # fmt: skip

#: What precedes the task sentence in every opening text.
TASK_PREFIX = "Your task is to: "
_NAME = r"[a-z]+ \d+"
_ROOM = re.compile(r"Looking quickly around you, you see (?P<items>.*?)\.(?:\s|$)")
_ARRIVE = re.compile(rf"^You arrive at (?P<r>{_NAME})\.")
_OPEN = re.compile(rf"^You open the (?P<r>{_NAME})\.")
_ON = re.compile(rf"On the (?P<r>{_NAME}), you see (?P<items>[^.]*)\.")
_IN = re.compile(rf"The (?P<r>{_NAME}) is open\. In it, you see (?P<items>[^.]*)\.")
_CLOSED = re.compile(rf"The (?P<r>{_NAME}) is closed\.")
_TAKE = re.compile(rf"^You pick up the (?P<o>{_NAME}) from the (?P<r>{_NAME})\.")
_MOVE = re.compile(rf"^You (?:move|put) the (?P<o>{_NAME}) (?:to|in|on) the (?P<r>{_NAME})\.")
_TREAT = re.compile(rf"^You (?P<v>clean|heat|cool) the (?P<o>{_NAME}) using the (?P<r>{_NAME})\.")
_TURN_ON = re.compile(rf"^You turn on the (?P<o>{_NAME})\.")
_CLOSE = re.compile(rf"^You close the (?P<r>{_NAME})\.")


@dataclass(frozen=True)
class Task:
    """A task as its sentence states it: ``kind`` (a key of :data:`PROCEDURES`), the object class
    and the receptacle class it goes to (the lamp's class for ``look``)."""

    kind: str
    obj: str
    recep: str

    def procedure(self) -> list[str]:
        steps = (step.format(obj=self.obj, recep=self.recep) for step in PROCEDURES[self.kind])
        return [re.sub(r"\ba (?=[aeiou])", "an ", step) for step in steps]


def parse_task(sentence: str) -> Task | None:
    """The task of ``sentence`` (final period optional); ``None`` when no template matches."""
    text = " ".join(sentence.split()).rstrip(".").lower()
    for kind, pattern in TASKS:
        if match := pattern.match(text):
            return Task(kind, match.group("a") or match.group("b"), match.group("r"))
    return None


def task_sentence(initial_observation: str) -> str:
    """What follows "Your task is to: " on its line in the opening text (``""`` if there is no
    such line)."""
    return initial_observation.partition(TASK_PREFIX)[2].split("\n", 1)[0].strip()


def names(items: str) -> list[str]:
    """``"a mug 1, a pen 2, and a cd 1"`` -> ``["mug 1", "pen 2", "cd 1"]``; ``"nothing"`` -> []."""
    return re.findall(rf"\b(?:an?\s+)({_NAME})\b", items)


def class_of(name: str) -> str:
    """``"mug 1"`` -> ``"mug"``."""
    return name.rsplit(" ", 1)[0]


def room_receptacles(initial_observation: str) -> list[str]:
    """The receptacles the opening text lists, in its order."""
    match = _ROOM.search(" ".join(initial_observation.split()))
    return names(match.group("items")) if match else []


@dataclass
class World:
    """What the episode's accepted actions revealed.

    Attributes:
        receptacles: the room's receptacles (the opening text), in its order.
        contents: receptacle -> the objects last seen in it (searched receptacles only).
        closed: receptacles closed when last seen (found closed, or closed by the agent).
        opened: receptacles the agent opened.
        seen_at: object -> the receptacle it was first seen in.
        taken_from: object -> the receptacle it was last picked up from.
        holding: the object in hand at the end, if any.
        treated: object -> the treatments done to it ("clean", "heat", "cool"), with where.
        placed: object -> the receptacle it was last put in (while it stays there).
        switched_on: (lamp, the object held then or ``None``), in order.
        at: the receptacle the agent stood at last.
    """

    receptacles: list[str]
    contents: dict[str, list[str]] = field(default_factory=dict)
    closed: set[str] = field(default_factory=set)
    opened: set[str] = field(default_factory=set)
    seen_at: dict[str, str] = field(default_factory=dict)
    taken_from: dict[str, str] = field(default_factory=dict)
    holding: str | None = None
    treated: dict[str, dict[str, str]] = field(default_factory=dict)
    placed: dict[str, str] = field(default_factory=dict)
    switched_on: list[tuple[str, str | None]] = field(default_factory=list)
    at: str | None = None

    def observe(self, observation: str) -> None:
        """Update from the result of one accepted action."""
        text = " ".join(observation.split())
        if match := _ARRIVE.match(text):
            self.at = match.group("r")
        if match := _OPEN.match(text):
            self.opened.add(match.group("r"))
        for match in _CLOSED.finditer(text):
            self.closed.add(match.group("r"))
        for match in (*_ON.finditer(text), *_IN.finditer(text)):
            receptacle, items = match.group("r", "items")
            self.contents[receptacle] = names(items)
            self.closed.discard(receptacle)
            for obj in self.contents[receptacle]:
                self.seen_at.setdefault(obj, receptacle)
        if match := _TAKE.match(text):
            obj, receptacle = match.group("o", "r")
            self.seen_at.setdefault(obj, receptacle)
            self.taken_from[obj] = receptacle
            self.placed.pop(obj, None)
            held = self.contents.get(receptacle, [])
            if obj in held:
                held.remove(obj)
            self.holding = obj
        elif match := _MOVE.match(text):
            obj, receptacle = match.group("o", "r")
            self.placed[obj] = receptacle
            self.contents.setdefault(receptacle, []).append(obj)
            if self.holding == obj:
                self.holding = None
        elif match := _TREAT.match(text):
            verb, obj, where = match.group("v", "o", "r")
            self.treated.setdefault(obj, {})[verb] = where
        elif match := _TURN_ON.match(text):
            self.switched_on.append((match.group("o"), self.holding))
        elif match := _CLOSE.match(text):
            self.closed.add(match.group("r"))

    def of_class(self, cls: str) -> list[str]:
        """Objects of class ``cls`` the episode saw, in the order it saw them."""
        return [obj for obj in self.seen_at if class_of(obj) == cls]

    def receptacles_of(self, cls: str) -> list[str]:
        """The room's receptacles of class ``cls`` (with any seen that the room list lacks)."""
        listed = [r for r in self.receptacles if class_of(r) == cls]
        return listed + [r for r in self.contents if class_of(r) == cls and r not in listed]

    def where(self, obj: str) -> str | None:
        """Where ``obj`` is as far as the episode knows (``None`` while held)."""
        if obj == self.holding:
            return None
        return self.placed.get(obj) or self.seen_at.get(obj)


@cache
def _alfred() -> tuple[dict[str, frozenset[str]], frozenset[str]] | None:
    """ALFRED's rules in lower-case class names: receptacle -> the objects it may hold, and the
    receptacles that open; ``None`` where the ``alfworld`` package is not installed."""
    try:
        from alfworld.gen import constants
    except ImportError:
        return None
    holds = {
        receptacle.lower(): frozenset(obj.lower() for obj in objects)
        for receptacle, objects in constants.VAL_RECEPTACLE_OBJECTS.items()
    }
    return holds, frozenset(cls.lower() for cls in constants.OPENABLE_CLASS_LIST)


def can_hold(receptacle_cls: str, obj_cls: str) -> bool:
    """Whether a receptacle of ``receptacle_cls`` may hold an ``obj_cls`` (ALFRED's rule; true
    for any pair without the ``alfworld`` package)."""
    rules = _alfred()
    return rules is None or obj_cls in rules[0].get(receptacle_cls, frozenset())


def opens(receptacle_cls: str) -> bool:
    """Whether a receptacle of ``receptacle_cls`` opens and closes (false for every class without
    the ``alfworld`` package: the plan then opens only what the episode found closed)."""
    rules = _alfred()
    return rules is not None and receptacle_cls in rules[1]


def done_flags(task: Task, world: World, obj: str) -> tuple[bool, bool, bool]:
    """Whether ``obj`` was taken, treated as ``task`` needs (true where it needs nothing) and put
    in place (after its treatment)."""
    appliance = APPLIANCES.get(task.kind)
    treated = appliance is None or appliance[1] in world.treated.get(obj, {})
    placed = treated and class_of(world.placed.get(obj, "")) == task.recep
    return obj in world.taken_from, treated, placed


def progress(task: Task, world: World) -> list[bool]:
    """Which of ``task``'s procedure steps (:meth:`Task.procedure`) the episode did."""
    rows = [(obj, *done_flags(task, world, obj)) for obj in world.of_class(task.obj)]
    taken = [row for row in rows if row[1]]
    if task.kind == "two":
        placed = sum(1 for row in rows if row[3])
        return [len(rows) >= 1, len(taken) >= 1, placed >= 1,
                len(rows) >= 2, len(taken) >= 2, placed >= 2]  # fmt: skip
    if task.kind == "look":
        lamp_seen = bool(world.of_class(task.recep)) or bool(world.receptacles_of(task.recep))
        lit = any(
            class_of(lamp) == task.recep and held is not None and class_of(held) == task.obj
            for lamp, held in world.switched_on
        )
        return [bool(rows), bool(taken), lamp_seen, lit]
    flags = [bool(rows), bool(taken)]
    if task.kind in APPLIANCES:
        flags.append(any(row[1] and row[2] for row in rows))
    return [*flags, any(row[3] for row in rows)]


def first_of(world: World, cls: str) -> str | None:
    """The receptacle of class ``cls`` to use: the first the room lists (or the episode saw)."""
    found = world.receptacles_of(cls)
    return found[0] if found else None


def unsearched(task: Task, world: World) -> list[str]:
    """The room's receptacles not yet searched that can hold a task object, in the room's order
    (the task's own receptacle class left out: the object has to leave it)."""
    return searchable(world, task.obj, exclude=task.recep)


def searchable(world: World, obj_cls: str, *, exclude: str = "") -> list[str]:
    """The room's receptacles not yet searched that can hold an ``obj_cls``, in the room's order,
    those of class ``exclude`` left out."""
    return [
        r
        for r in world.receptacles
        if r not in world.contents and class_of(r) != exclude and can_hold(class_of(r), obj_cls)
    ]


def reach(world: World, receptacle: str, at: str | None, *, into: bool = False) -> list[str]:
    """The commands that bring an agent standing at ``at`` to ``receptacle``: ``go to`` unless it
    stands there, then ``open`` where the episode found it closed or, when something is to go
    ``into`` it, where it opens and the episode never saw it open."""
    commands = [] if at == receptacle else [f"go to {receptacle}"]
    never_open = receptacle not in world.contents and receptacle not in world.opened
    if receptacle in world.closed or (into and never_open and opens(class_of(receptacle))):
        commands.append(f"open {receptacle}")
    return commands


def search_plan(task: Task, world: World) -> list[str]:
    """The commands an agent that knows only what it has seen takes next, first one first.

    Something in hand that the task does not need goes back where the agent stands. A task
    object the episode has seen is fetched (its receptacle opened where it was found closed),
    treated at the room's first appliance of the kind, and put in the room's first receptacle of
    the task's class (opened first where it opens and was never seen open), or, for ``look``,
    taken to the lamp and the lamp switched on. Where no task object (or lamp) has been seen, the
    next step is the search: the first receptacle in the room's order not yet searched that can
    hold one, opened once reached if it is closed. The plan goes only as far as what was seen
    determines it; ``[]`` where the task is done or nothing is left to search.
    """
    plan: list[str] = []
    at = world.at

    def go(receptacle: str, *, into: bool = False) -> None:
        nonlocal at
        plan.extend(reach(world, receptacle, at, into=into))
        at = receptacle

    def search(obj_cls: str, exclude: str = "") -> list[str]:
        places = searchable(world, obj_cls, exclude=exclude)
        places = places or [r for r in world.receptacles if r not in world.contents]
        if places:
            go(places[0])
        return plan

    if all(progress(task, world)):
        return []
    done = [obj for obj in world.of_class(task.obj) if done_flags(task, world, obj)[2]]
    held = world.holding
    if held is not None and (class_of(held) != task.obj or held in done):
        if at is None:
            return []
        plan.append(f"move {held} to {at}")
        held = None
    if held is not None:
        obj = held
    else:
        known = [o for o in world.of_class(task.obj) if o not in done and world.where(o)]
        if not known:
            return search(task.obj, exclude=task.recep)
        obj = known[0]
        source = world.where(obj) or ""
        go(source)
        plan.append(f"take {obj} from {source}")
    appliance = APPLIANCES.get(task.kind)
    if appliance is not None and appliance[1] not in world.treated.get(obj, {}):
        where = first_of(world, appliance[0])
        if where is None:
            return search(appliance[0])
        go(where)
        plan.append(f"{appliance[1]} {obj} with {where}")
    if task.kind == "look":
        lamps = world.of_class(task.recep)
        if not lamps:
            return search(task.recep)
        go(world.where(lamps[0]) or "")
        plan.append(f"use {lamps[0]}")
        return plan
    target = first_of(world, task.recep)
    if target is None:
        return plan
    go(target, into=True)
    plan.append(f"move {obj} to {target}")
    return plan
