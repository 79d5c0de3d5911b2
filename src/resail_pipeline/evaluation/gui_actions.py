"""AITZ's exact-match (EM) action accuracy: a predicted GUI action against the logged one.

The screen-wise rule of the Android-in-the-Wild action matcher, which AITZ's evaluation follows
(appendix A: "the official screen-wise rule for the category and its associated arguments"):

- the **category** must match: tap, scroll, type, the control commands (back, home, enter) and
  stop; a prediction the matcher cannot read, or of a category AITZ never logs (``answer``,
  ``open``, ``wait``, the ``Menu`` button), matches nothing;
- a **tap** matches when the two points lie in one of the screen's annotated element boxes, each
  box enlarged to :data:`BOX_AUGMENT` times its width and height about its centre (edges
  included), or when they lie within :data:`TAP_DISTANCE` of each other (coordinates normalised to
  ``[0, 1]``);
- a **scroll** matches by direction: the main axis of the drag (the larger of its vertical and
  horizontal extents) and its sign;
- a **type** matches by text: equal, or one contained in the other, after lower-casing and
  collapsing white space;
- a **control command** matches by name.

Steps whose logged action is ``stop`` are left out of the accuracy; the accuracy is the share of the
remaining steps whose prediction matches (an invalid prediction scores zero).

Logged actions come as the AITW records give them (:func:`logged_action`: an action-type code,
touch and lift points as ``(y, x)`` in ``[0, 1]``, typed text); a drag shorter than
:data:`SWIPE_DISTANCE` is a tap. Predictions come as the model writes them (:func:`predicted_action`:
a ``mobile_use`` tool call of appendix G, coordinates ``[x, y]`` in ``0..999``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "BOX_AUGMENT",
    "KINDS",
    "LOGGED_ACTION_TYPES",
    "SWIPE_DISTANCE",
    "TAP_DISTANCE",
    "GuiAction",
    "actions_match",
    "exact_match_accuracy",
    "logged_action",
    "logged_step",
    "predicted_action",
]

#: the enlargement of every annotated element box (width and height, about its centre)
BOX_AUGMENT = 1.4
#: two taps within this distance match, in screen fractions
TAP_DISTANCE = 0.14
#: a logged drag shorter than this is a tap, in screen fractions
SWIPE_DISTANCE = 0.04
#: the action categories the matcher knows
KINDS = ("tap", "scroll", "type", "back", "home", "enter", "stop")
#: AITW action-type codes of the logged actions
_LOGGED_KINDS = {3: "type", 4: "drag", 5: "back", 6: "home", 7: "enter", 10: "stop", 11: "stop"}
#: the action-type codes :func:`logged_action` reads (others are unsupported)
LOGGED_ACTION_TYPES = frozenset(_LOGGED_KINDS)
#: ``mobile_use`` system buttons the matcher knows
_BUTTONS = {"back": "back", "home": "home", "enter": "enter"}
_OPEN, _CLOSE = "<tool_call>", "</tool_call>"
#: the predicted coordinates' scale (appendix G: normalised integers 0..999)
_COORDINATE_SCALE = 999.0


@dataclass(frozen=True)
class GuiAction:
    """One action. ``point``: a tap's ``(y, x)`` in ``[0, 1]``; ``direction``: a scroll's
    ``up``/``down``/``left``/``right`` (the way the finger moves); ``text``: what is typed."""

    kind: str
    point: tuple[float, float] | None = None
    direction: str | None = None
    text: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind: must be one of {KINDS}, got {self.kind!r}")


def _direction(start: Sequence[float], end: Sequence[float]) -> str:
    """The main axis and sign of a drag from ``start`` to ``end`` (both ``(y, x)``)."""
    dy, dx = end[0] - start[0], end[1] - start[1]
    if abs(dy) >= abs(dx):
        return "down" if dy > 0 else "up"
    return "right" if dx > 0 else "left"


def logged_action(
    action_type: int,
    touch_yx: Sequence[float] | None = None,
    lift_yx: Sequence[float] | None = None,
    text: str | None = None,
) -> GuiAction:
    """A logged AITW/AITZ action: its type code, touch and lift points ``(y, x)`` in ``[0, 1]``
    (dual-point actions) and typed text."""
    kind = _LOGGED_KINDS.get(action_type)
    if kind is None:
        raise ValueError(f"action_type: no AITW action has code {action_type!r}")
    if kind != "drag":
        return GuiAction(kind, text=text if kind == "type" else None)
    if touch_yx is None or lift_yx is None:
        raise ValueError("touch_yx, lift_yx: a dual-point action needs both")
    if math.dist(touch_yx, lift_yx) <= SWIPE_DISTANCE:
        return GuiAction("tap", point=(float(touch_yx[0]), float(touch_yx[1])))
    return GuiAction("scroll", direction=_direction(touch_yx, lift_yx))


def _listed(record: Mapping[str, Any], key: str) -> Any:
    """A field the AITZ release stores as a JSON string (``"[0.5, 0.2]"``) or as a list."""
    value = record.get(key)
    if isinstance(value, str):
        try:
            return json.loads(value) if value.strip() else None
        except json.JSONDecodeError:
            raise ValueError(f"{key}: not a JSON list, got {value[:80]!r}") from None
    return value


def logged_step(record: Mapping[str, Any]) -> tuple[GuiAction, list[list[float]]]:
    """The logged action and the annotated element boxes of one step of an AITZ episode file
    (``<split>/<category>/<episode_id>/<episode_id>.json``, a list of such records): the fields
    ``result_action_type``, ``result_touch_yx``, ``result_lift_yx``, ``result_action_text`` and
    ``ui_positions`` (boxes ``[y, x, height, width]``), lists given as JSON text or as lists."""
    if "result_action_type" not in record:
        raise ValueError("result_action_type: missing from the step record")
    action = logged_action(
        int(record["result_action_type"]),
        _listed(record, "result_touch_yx"),
        _listed(record, "result_lift_yx"),
        record.get("result_action_text"),
    )
    boxes = _listed(record, "ui_positions") or []
    return action, [[float(v) for v in box] for box in boxes]


def _point(value: object) -> tuple[float, float] | None:
    """``[x, y]`` in ``0..999`` as ``(y, x)`` in ``[0, 1]``; ``None`` if it is not one."""
    if not isinstance(value, list | tuple) or len(value) != 2:
        return None
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in value):
        return None
    x, y = (float(v) / _COORDINATE_SCALE for v in value)
    if not (0.0 <= x <= 1.0 and 0.0 <= y <= 1.0):
        return None
    return (y, x)


def predicted_action(response: str) -> GuiAction | None:
    """The action of a model response (its first ``<tool_call>``), or ``None`` where there is no
    readable action the matcher knows (which scores zero)."""
    if not isinstance(response, str):
        return None
    # the first opening tag and the first closing tag after it (where the first opening has no
    # closing tag after it, no later one has): linear, where searching for
    # <tool_call>(.*?)</tool_call> rescanned the rest of the text from every opening tag
    start = response.find(_OPEN)
    end = -1 if start < 0 else response.find(_CLOSE, start + len(_OPEN))
    if end < 0:
        return None
    try:
        call = json.loads(response[start + len(_OPEN) : end])
    except (json.JSONDecodeError, RecursionError):  # nesting deeper than the parser's stack
        return None
    arguments = call.get("arguments") if isinstance(call, dict) else None
    if not isinstance(arguments, dict):
        return None
    action = arguments.get("action")
    if action in ("click", "long_press"):
        point = _point(arguments.get("coordinate"))
        return GuiAction("tap", point=point) if point else None
    if action == "swipe":
        start, end = _point(arguments.get("coordinate")), _point(arguments.get("coordinate2"))
        if start is None or end is None or start == end:
            return None
        return GuiAction("scroll", direction=_direction(start, end))
    if action == "type":
        text = arguments.get("text")
        return GuiAction("type", text=text) if isinstance(text, str) else None
    if action == "system_button":
        button = _BUTTONS.get(str(arguments.get("button", "")).lower())
        return GuiAction(button) if button else None
    if action == "terminate":
        return GuiAction("stop")
    return None  # answer, open, wait: no AITZ step is logged as one


def _in_box(point: tuple[float, float], box: Sequence[float]) -> bool:
    """Whether ``point`` ``(y, x)`` lies in ``box`` ``(y, x, height, width)`` enlarged by
    :data:`BOX_AUGMENT` about its centre (edges included)."""
    y, x, height, width = box
    dy, dx = height * (BOX_AUGMENT - 1) / 2, width * (BOX_AUGMENT - 1) / 2
    return y - dy <= point[0] <= y + height + dy and x - dx <= point[1] <= x + width + dx


def _normal_text(text: str | None) -> str:
    return " ".join((text or "").lower().split())


def actions_match(
    logged: GuiAction,
    predicted: GuiAction | None,
    boxes: Sequence[Sequence[float]] = (),
) -> bool:
    """Whether ``predicted`` matches ``logged`` on a screen whose annotated element boxes are
    ``boxes`` (each ``(y, x, height, width)`` in ``[0, 1]``)."""
    if predicted is None or predicted.kind != logged.kind:
        return False
    if logged.kind == "tap":
        a, b = logged.point, predicted.point
        if a is None or b is None:
            return False
        same_box = any(_in_box(a, box) and _in_box(b, box) for box in boxes)
        return same_box or math.dist(a, b) <= TAP_DISTANCE
    if logged.kind == "scroll":
        return predicted.direction == logged.direction
    if logged.kind == "type":
        a, b = _normal_text(logged.text), _normal_text(predicted.text)
        return bool(a and b) and (a == b or a in b or b in a)
    return True  # the control commands and stop match by name


def exact_match_accuracy(
    logged: Sequence[GuiAction],
    predicted: Sequence[GuiAction | None],
    boxes: Sequence[Sequence[Sequence[float]]],
) -> float:
    """The share of steps, ``stop`` steps left out, whose prediction matches (per step: the logged
    action, the prediction or ``None``, the screen's boxes)."""
    if not len(logged) == len(predicted) == len(boxes):
        raise ValueError(
            f"logged, predicted, boxes: lengths differ ({len(logged)}, {len(predicted)}, "
            f"{len(boxes)})"
        )
    scored = [
        actions_match(a, b, screen)
        for a, b, screen in zip(logged, predicted, boxes, strict=True)
        if a.kind != "stop"
    ]
    if not scored:
        raise ValueError("logged: every step is a stop; nothing to score")
    return sum(scored) / len(scored)
