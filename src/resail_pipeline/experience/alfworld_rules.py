"""ALFWorld's rules-based summaries: what the episode revealed and what to do next.

A reflecting agent that played an ALFWorld game knows three things a new attempt can use: the
procedure of its task (find the object, take it, clean, heat or cool it, put it in place; or take
it to a lamp and switch the lamp on) and which of its steps were done; where each object it saw
was, and which receptacles it searched; and, after a failure, the steps that follow from what it
saw. The summary says that, in the two appendix-G formats, built from the episode alone:

- The task comes from its sentence (the six templates of ALFWorld's goal library, :data:`TASKS`),
  the room's receptacles from the opening text, and the world from every accepted action's result
  (:class:`World`: where each object was seen, which receptacles were opened and what they held,
  which were found closed, what the agent took, cleaned, heated, cooled, switched on and put where).
- Success ("Guidance summary"). *Minimal plan*: the procedure done with the objects and
  receptacles the episode used, one action a step (a receptacle opened where the episode opened
  it). *Critical actions*: the plan's steps that act on the task's object or lamp (take, clean,
  heat, cool, use, move). *Checks*: the procedure, and where the task's objects were. *Avoid*: how
  many actions were rejected and how many the episode repeated, counted.
- Failure ("Failure analysis"). *Failure diagnosis*: the procedure, the steps done and the first
  step not done, how the episode ended and whether it stopped progressing. *Useful evidence*: where
  each object seen was, which receptacles were searched without the task's object, which were
  found closed and never opened, which are still unsearched. *Corrected plan*: the next steps from
  where the episode ended, as far as what it saw determines them (:func:`corrected_plan`): put down
  an object in hand that the task does not need, go where a task object was seen (or search the
  unsearched receptacles that can hold one, named), take it, treat it, put it in place. *Avoid*:
  counted, as in a success.

With an oracle planner (:func:`walkthrough_planner`: the game's stored walkthrough, chosen by
``summarize.corrected_plan: walkthrough``) a failure's corrected plan is that walkthrough instead;
it names locations the episode never saw, so it is for comparison, not the default.

What a summary never holds: an action the episode took :data:`LOOP_REPEATS` or more times, or one
that was rejected (:func:`looped_actions`). A small policy copies a quoted action from its context
whatever the words around it say, so a quoted loop invites its own repetition. Where such an action
is still a step of a plan (the agent looped at the receptacle it must later go back to, say), the
step is said in words (:func:`in_words`: "head to desk 1", "pick up the mug 1 from the countertop
1"). Observations are never quoted.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from resail_pipeline.envs.alfworld_world import (
    APPLIANCES,
    Task,
    World,
    class_of,
    done_flags,
    first_of,
    parse_task,
    progress,
    reach,
    room_receptacles,
    task_sentence,
    unsearched,
)
from resail_pipeline.experience.evidence import Evidence, Planner, ending_text

#: Times an action may occur in an episode before it counts as looped and is never quoted.
LOOP_REPEATS = 3
#: Receptacles named in one list of a summary at most (the rest are counted).
LIST_NAMES = 10


def read_world(evidence: Evidence) -> World:
    """The :class:`World` of ``evidence``: the opening text, then every accepted action's result."""
    world = World(room_receptacles(evidence.initial_observation))
    for record in evidence.records:
        if record.valid:
            world.observe(record.observation)
    return world


def quotes(text: str, action: str) -> bool:
    """Whether ``text`` holds ``action`` as a whole command: not inside a longer name, and not
    the start of another command that names an instance (``go to shelf``, a command the game
    rejects, is not quoted by ``go to shelf 2``)."""
    return re.search(rf"(?<![\w]){re.escape(action)}(?![\w]|\s\d)", text) is not None


def looped_actions(evidence: Evidence) -> frozenset[str]:
    """The actions a summary of ``evidence`` may not quote: those taken :data:`LOOP_REPEATS` or
    more times, and those rejected."""
    counts = Counter(r.action for r in evidence.records if r.action)
    rejected = {r.action for r in evidence.records if r.action and not r.valid}
    return frozenset(a for a, n in counts.items() if n >= LOOP_REPEATS) | rejected


#: Command pattern -> the same step in words, none of which reproduces a command.
_WORDS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern), words)
    for pattern, words in (
        (r"^go to (.+)$", r"head to \1"),
        (r"^open (.+)$", r"open the \1 up"),
        (r"^close (.+)$", r"shut the \1"),
        (r"^take (.+) from (.+)$", r"pick up the \1 from the \2"),
        (r"^move (.+) to (.+)$", r"put the \1 in/on the \2"),
        (r"^(clean|heat|cool) (.+) with (.+)$", r"\1 the \2 in the \3"),
        (r"^use (.+)$", r"switch on the \1"),
        (r"^examine (.+)$", r"look over the \1"),
    )
)


def in_words(action: str) -> str:
    """``action`` said in words, without its command text."""
    for pattern, words in _WORDS:
        if pattern.match(action):
            return pattern.sub(words, action)
    return "the step that follows"


class Plan:
    """Steps of a plan: commands, quoted unless looped (then in words), and steps in words."""

    def __init__(self, looped: frozenset[str]) -> None:
        self.looped = looped
        self.steps: list[tuple[str, str]] = []  # (kind, text): kind "action" or "words"

    def act(self, *actions: str) -> None:
        self.steps.extend(("action", a) for a in actions)

    def say(self, words: str) -> None:
        self.steps.append(("words", words))

    @property
    def actions(self) -> list[str]:
        return [text for kind, text in self.steps if kind == "action"]

    def text(self) -> str:
        def render(kind: str, text: str) -> str:
            if kind == "words":
                return text
            return in_words(text) if text in self.looped else f"`{text}`"

        return ", then ".join(render(kind, text) for kind, text in self.steps)


def _a(noun: str) -> str:
    """``noun`` with its indefinite article."""
    return f"{'an' if noun[:1] in 'aeiou' else 'a'} {noun}"


def _listed(items: Sequence[str]) -> str:
    more = f" and {len(items) - LIST_NAMES} more" if len(items) > LIST_NAMES else ""
    return ", ".join(items[:LIST_NAMES]) + more


def _go(plan: Plan, world: World, receptacle: str, at: str | None, *, into: bool = False) -> str:
    """Add :func:`~resail_pipeline.envs.alfworld_world.reach`'s steps to ``plan``; returns
    ``receptacle``, where the agent then stands."""
    plan.act(*reach(world, receptacle, at, into=into))
    return receptacle


def _finish(plan: Plan, task: Task, world: World, obj: str | None, at: str | None) -> None:
    """Steps from holding ``obj`` (``None``: a task object not yet seen) to its part of the task
    done: the treatment, then the place or the lamp."""
    thing = obj or f"the {task.obj}"
    appliance = APPLIANCES.get(task.kind)
    if appliance is not None and (obj is None or appliance[1] not in world.treated.get(obj, {})):
        where = first_of(world, appliance[0])
        if where is None:
            plan.say(f"find {_a(appliance[0])} and {appliance[1]} {thing} with it")
        else:
            at = _go(plan, world, where, at)
            if obj is None:
                plan.say(f"{appliance[1]} the {task.obj} in the {where}")
            else:
                plan.act(f"{appliance[1]} {obj} with {where}")
    if task.kind == "look":
        lamps = world.of_class(task.recep)
        if not lamps:
            plan.say(f"find {_a(task.recep)} and switch it on while holding {thing}")
            return
        _go(plan, world, world.where(lamps[0]) or lamps[0], at)
        plan.act(f"use {lamps[0]}")
        return
    target = first_of(world, task.recep)
    if target is None:
        plan.say(f"find {_a(task.recep)} and put {thing} in/on it")
        return
    _go(plan, world, target, at, into=True)
    if obj is None:
        plan.say(f"put the {task.obj} in/on the {target}")
    else:
        plan.act(f"move {obj} to {target}")


def corrected_plan(task: Task, world: World, looped: frozenset[str]) -> str:
    """The next steps from where the episode ended, as far as what it saw determines them: an
    object in hand that the task does not need put down where the agent stands, then, for each
    task object still to be put in place, fetch it (where it was seen, else search the
    unsearched receptacles that can hold one, named), then :func:`_finish` it."""
    plan = Plan(looped)
    flags = progress(task, world)
    if all(flags):
        return "every step of the procedure was done; nothing is left to do"
    done = [obj for obj in world.of_class(task.obj) if done_flags(task, world, obj)[2]]
    wanted = (2 if task.kind == "two" else 1) - len(done)
    candidates = [obj for obj in world.of_class(task.obj) if obj not in done]
    held, at = world.holding, world.at
    if held in candidates:  # the one in hand first
        candidates.remove(held)
        candidates.insert(0, held)
    elif held is not None:  # hands free before anything is taken
        if at is None:
            plan.say(f"put the {held} down")
        else:
            plan.act(f"move {held} to {at}")
    for obj in candidates[:wanted]:
        if obj != held:
            at = _go(plan, world, world.where(obj) or "", at)
            plan.act(f"take {obj} from {world.where(obj)}")
        _finish(plan, task, world, obj, at)
        at = None
    if wanted > len(candidates):  # a task object the episode never saw
        remaining = unsearched(task, world)
        places = f": {_listed(remaining)}" if remaining else ""
        plan.say(f"search the receptacles not yet searched for {_a(task.obj)}{places}")
        plan.say(f"take the {task.obj} from where it is")
        _finish(plan, task, world, None, None)
    return plan.text()


def _where_seen(task: Task, world: World) -> str:
    """Where the task's objects (and its lamp) were, then the other objects seen."""
    relevant = [f"{o} was in/on {w}" for o, w in world.seen_at.items()
                if class_of(o) in (task.obj, task.recep)]  # fmt: skip
    others = [f"{o} in/on {w}" for o, w in world.seen_at.items()
              if class_of(o) not in (task.obj, task.recep)]  # fmt: skip
    text = "; ".join(relevant) if relevant else f"no {task.obj} was seen"
    if others:
        text += f"; also seen: {_listed(others)}"
    return text


def _searched(task: Task, world: World) -> str:
    """Receptacles searched without a task object (none was ever seen in them, taken ones
    included), found closed and never opened, and not yet searched."""
    had_one = {r for o, r in (*world.seen_at.items(), *world.taken_from.items())
               if class_of(o) == task.obj}  # fmt: skip
    empty = [r for r, items in world.contents.items()
             if r not in had_one and not any(class_of(i) == task.obj for i in items)]  # fmt: skip
    unopened = sorted(r for r in world.closed if r not in world.contents)
    parts = []
    if empty:
        parts.append(f"searched without {_a(task.obj)}: {_listed(empty)}")
    if unopened:
        parts.append(f"found closed and not opened: {_listed(unopened)}")
    remaining = unsearched(task, world)
    if remaining:
        parts.append(f"not yet searched that can hold {_a(task.obj)}: {_listed(remaining)}")
    return "; ".join(parts)


def _counts(evidence: Evidence) -> str:
    """How many actions were rejected and how many distinct ones were repeated: counts only."""
    total = len(evidence.records)
    rejected = sum(1 for r in evidence.records if not r.valid)
    counts = Counter(r.action for r in evidence.records if r.action)
    repeated = sum(1 for n in counts.values() if n >= LOOP_REPEATS)
    parts = [f"rejected actions ({rejected} of {total})" if rejected else "no action was rejected"]
    if repeated:
        parts.append(f"repeating an action ({repeated} repeated {LOOP_REPEATS} or more times)")
    return "; ".join(parts)


def _stalled(evidence: Evidence, world: World) -> str:
    """``"; its last N actions ... changed nothing"`` where the episode ended on a run of
    :data:`LOOP_REPEATS` or more actions each rejected or taken more than once in the episode,
    else ``""``."""
    seen: Counter[str] = Counter(r.action for r in evidence.records)
    run = 0
    for record in reversed(evidence.records):
        if record.valid and seen[record.action] < 2:
            break
        run += 1
    if run < LOOP_REPEATS:
        return ""
    where = f" at {world.at}" if world.at else ""
    return f"; its last {run} actions{where} were rejected or repeated and changed nothing"


def _success_plan(task: Task, world: World, looped: frozenset[str]) -> Plan:
    """The minimal plan of a success: the procedure done with the objects that completed it."""
    plan = Plan(looped)
    if task.kind == "look":
        used = [held for lamp, held in world.switched_on
                if held is not None and class_of(held) == task.obj][:1]  # fmt: skip
    else:
        used = [obj for obj in world.of_class(task.obj) if done_flags(task, world, obj)[2]]
        used = used[: 2 if task.kind == "two" else 1]
    at: str | None = None

    def go(receptacle: str) -> None:  # as the episode did it: opened where it opened it
        nonlocal at
        if receptacle != at:
            plan.act(f"go to {receptacle}")
            if receptacle in world.opened:
                plan.act(f"open {receptacle}")
        at = receptacle

    for obj in used:
        source = world.taken_from.get(obj) or world.seen_at[obj]
        go(source)
        plan.act(f"take {obj} from {source}")
        appliance = APPLIANCES.get(task.kind)
        if appliance is not None:
            go(world.treated[obj][appliance[1]])
            plan.act(f"{appliance[1]} {obj} with {at}")
        if task.kind == "look":
            lamp = next(lamp for lamp, held in world.switched_on if held == obj)
            go(world.where(lamp) or lamp)
            plan.act(f"use {lamp}")
        else:
            go(world.placed[obj])
            plan.act(f"move {obj} to {at}")
    return plan


def success_fields(evidence: Evidence, planner: Planner | None = None) -> list[str]:
    """The four "Guidance summary" values of an ALFWorld success, in template order (``planner``
    is not used: a success's plan is the episode's own)."""
    looped = looped_actions(evidence)
    world = read_world(evidence)
    task = parse_task(task_sentence(evidence.initial_observation))
    plan = _success_plan(task, world, looped) if task is not None else Plan(looped)
    if not plan.steps:
        minimal = "the task was completed, but its steps could not be read from the results"
        return [minimal, "none beyond the plan", minimal, _counts(evidence)]
    critical = Plan(looped)
    critical.act(*(a for a in plan.actions if not a.startswith(("go to ", "open "))))
    checks = (
        f"the procedure ({'; '.join(task.procedure())}) was done in that order; "
        f"{_where_seen(task, world)}"
    )
    avoid = f"{_counts(evidence)}; steps beyond the minimal plan are not needed"
    return [plan.text(), critical.text(), checks, avoid]


def failure_fields(evidence: Evidence, planner: Planner | None = None) -> list[str]:
    """The four "Failure analysis" values of an ALFWorld failure, in template order.

    ``planner``: where given (the oracle, :func:`walkthrough_planner`), the corrected plan is its
    plan; else :func:`corrected_plan` from what the episode saw.
    """
    looped = looped_actions(evidence)
    world = read_world(evidence)
    task = parse_task(task_sentence(evidence.initial_observation))
    ending = ending_text(evidence)
    oracle = planner(evidence) if planner is not None else None
    if oracle:
        plan = Plan(looped)
        plan.act(*oracle)
        corrected = plan.text()
    if task is None:
        diagnosis = (
            f"the task sentence is not one of ALFWorld's templates; {ending} without success"
        )
        useful = f"seen: {_listed([f'{o} in/on {w}' for o, w in world.seen_at.items()])}"
        if not oracle:
            corrected = "not derivable from the evidence: the task could not be read"
        return [diagnosis, useful, corrected, _counts(evidence)]
    steps = task.procedure()
    flags = progress(task, world)
    done = [step for step, flag in zip(steps, flags, strict=True) if flag]
    missing = (
        next(step for step, flag in zip(steps, flags, strict=True) if not flag)
        if not all(flags)
        else "none (the task's check did not pass)"
    )
    diagnosis = (
        f"the task needs: {'; '.join(steps)}; done: {', '.join(done) or 'none'}; first step not "
        f"done: {missing}; {ending} without success{_stalled(evidence, world)}"
    )
    searched = _searched(task, world)
    useful = _where_seen(task, world) + (f"; {searched}" if searched else "")
    if not oracle:
        corrected = corrected_plan(task, world, looped)
    avoid = f"{_counts(evidence)}; acting again where an action changed nothing"
    return [diagnosis, useful, corrected, avoid]


def walkthrough_planner(env: Any) -> Planner:
    """The oracle planner: each trajectory's game's stored walkthrough (``env.walkthrough``), by
    the evidence's ``task_id``. It knows locations no episode saw; offered for comparison."""
    if not callable(getattr(env, "walkthrough", None)):
        raise ValueError(
            "summarize.corrected_plan: 'walkthrough' needs an environment that stores its games' "
            f"walkthroughs (alfworld); {getattr(env, 'name', type(env).__name__)} has none"
        )

    def plan(evidence: Evidence) -> Sequence[str] | None:
        if evidence.task_id is None:
            return None
        return env.walkthrough(evidence.task_id)

    return plan
