"""AITZ episodes read from the layout of the public release, one row per logged step.

The layout (AITZ, and the AITZ part of Aguvis stage 2)::

    <root>/<split>/<category>/<episode_id>/<episode_id>.json     a list of step records
    <root>/<split>/<category>/<episode_id>/<episode_id>_<step_id>.png   one screenshot per step

``split`` is ``train`` or ``test``; ``category`` is one of the release's (``general``,
``install``, ``google_apps``, ``single``, ``web_shopping``). Each record has the fields
``episode_id``, ``step_id``, ``instruction``, ``image_path``, ``result_action_type``,
``result_touch_yx``, ``result_lift_yx``, ``result_action_text`` and ``ui_positions`` (lists may be
given as JSON text, as the release does). ``image_path`` is resolved against the root, then the
split folder, then the episode folder (by file name), so both the release's paths and paths
relative to the episode work.

Episodes are kept whole or not at all: an episode longer than ``max_steps`` or with an action the
matcher cannot score (:func:`~resail_pipeline.evaluation.gui_actions.logged_step` refuses it) is
left out and counted, as the paper's data preparation does (appendix A.2: "at most 20 steps and
no unsupported actions").
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from resail_pipeline.evaluation.gui_actions import LOGGED_ACTION_TYPES, GuiAction, logged_step
from resail_pipeline.prompts.gui import describe_action

__all__ = [
    "LAYOUT",
    "EpisodeError",
    "action_from_row",
    "boxes_from_row",
    "read_episodes",
]

logger = logging.getLogger(__name__)

LAYOUT = "<root>/<split>/<category>/<episode_id>/<episode_id>.json (+ one screenshot per step)"


class EpisodeError(ValueError):
    """An episode file is missing, unreadable or lacks a field; the message names the file."""


def _resolve_image(root: Path, split: str, episode_dir: Path, image_path: str) -> Path | None:
    for candidate in (
        root / image_path,
        root / split / image_path,
        episode_dir / Path(image_path).name,
    ):
        if candidate.is_file():
            return candidate
    return None


def _step_rows(
    records: Sequence[Mapping[str, Any]], path: Path, root: Path, split: str, category: str
) -> list[dict[str, Any]] | None:
    """The rows of one episode file (its records sorted by ``step_id``); ``None`` where a step's
    action is of a type the matcher does not score."""
    rows = []
    for index, record in enumerate(records):
        if not isinstance(record, Mapping):
            raise EpisodeError(
                f"{path}: record {index} is a {type(record).__name__}, not an object"
            )
        for field in ("episode_id", "step_id", "instruction", "image_path"):
            if field not in record:
                raise EpisodeError(f"{path}: record {index} has no field {field!r}")
        try:
            code = int(record["result_action_type"])
        except KeyError:
            raise EpisodeError(
                f"{path}: record {index} has no field 'result_action_type'"
            ) from None
        except (TypeError, ValueError):
            raise EpisodeError(
                f"{path}: record {index}: result_action_type must be an integer code, "
                f"got {record['result_action_type']!r}"
            ) from None
        if code not in LOGGED_ACTION_TYPES:
            return None
        try:
            action, boxes = logged_step(record)
        except ValueError as error:
            raise EpisodeError(f"{path}: record {index}: {error}") from None
        image = _resolve_image(root, split, path.parent, str(record["image_path"]))
        if image is None:
            raise EpisodeError(
                f"{path}: record {index}: image_path {record['image_path']!r} is not a file "
                f"under {root}, {root / split} or {path.parent}"
            )
        rows.append(
            {
                "episode_id": str(record["episode_id"]),
                "step_id": int(record["step_id"]),
                "split": split,
                "category": category,
                "instruction": str(record["instruction"]),
                "image_path": str(image.relative_to(root)),
                "action": json.dumps(_action_fields(action)),
                "boxes": json.dumps(boxes),
            }
        )
    rows.sort(key=lambda row: row["step_id"])
    steps = [row["step_id"] for row in rows]
    if steps != list(range(len(rows))):
        raise EpisodeError(f"{path}: step_id must run 0..{len(rows) - 1}, got {steps}")
    return rows


def _action_fields(action: GuiAction) -> dict[str, Any]:
    fields: dict[str, Any] = {"kind": action.kind}
    if action.point is not None:
        fields["point"] = list(action.point)
    if action.direction is not None:
        fields["direction"] = action.direction
    if action.text is not None:
        fields["text"] = action.text
    return fields


def action_from_row(row: Mapping[str, Any]) -> GuiAction:
    """The logged action of a row of :func:`read_episodes` (its ``action`` column)."""
    fields = json.loads(row["action"])
    point = fields.get("point")
    return GuiAction(
        fields["kind"],
        point=tuple(point) if point is not None else None,
        direction=fields.get("direction"),
        text=fields.get("text"),
    )


def boxes_from_row(row: Mapping[str, Any]) -> list[list[float]]:
    """The annotated element boxes ``[y, x, height, width]`` of a row's screen."""
    return json.loads(row["boxes"])


def read_episodes(root: str | Path, split: str, *, max_steps: int | None = 20) -> pd.DataFrame:
    """Every step of every usable episode of ``split`` under ``root``, one row per step.

    Columns: ``episode_id``, ``step_id``, ``split``, ``category``, ``instruction``,
    ``image_path`` (relative to ``root``), ``action`` (the logged action as JSON: ``kind`` and,
    as applicable, ``point`` ``[y, x]`` in ``[0, 1]``, ``direction``, ``text``), ``boxes``
    (the screen's element boxes as JSON) and ``history`` (the episode's earlier logged actions,
    in words, as the action prompt lists them: a row carries its own history, whatever subset
    of steps it is taken into). Rows are ordered by episode id, then step.

    Raises:
        EpisodeError: ``root/split`` is not a folder, holds no episode, or an episode file is
            malformed (the message names the file and the field).
    """
    root = Path(root)
    folder = root / split
    if not folder.is_dir():
        raise EpisodeError(
            f"{folder}: no such folder; AITZ data is expected as {LAYOUT} "
            "(docs/evaluation.md says where to get it)"
        )
    rows: list[dict[str, Any]] = []
    skipped: dict[str, int] = {}
    files = sorted(folder.glob("*/*/*.json"))
    for path in files:
        category, episode_dir = path.parent.parent.name, path.parent
        if path.stem != episode_dir.name:
            continue  # not an episode file
        try:
            records = json.loads(path.read_text())
        except json.JSONDecodeError as error:
            raise EpisodeError(f"{path}: not JSON ({error})") from None
        if not isinstance(records, list) or not records:
            raise EpisodeError(f"{path}: expected a non-empty list of step records")
        if max_steps is not None and len(records) > max_steps:
            skipped["longer than max_steps"] = skipped.get("longer than max_steps", 0) + 1
            continue
        episode = _step_rows(records, path, root, split, category)
        if episode is None:
            skipped["an unsupported action"] = skipped.get("an unsupported action", 0) + 1
            continue
        rows.extend(episode)
    if not rows:
        raise EpisodeError(f"{folder}: no episode found; expected {LAYOUT}")
    for reason, count in skipped.items():
        logger.info("%s: %d episodes left out (%s)", folder, count, reason)
    frame = pd.DataFrame(rows).sort_values(["episode_id", "step_id"], kind="stable")
    frame = frame.reset_index(drop=True)
    frame["history"] = _histories(frame)
    return frame


def _histories(frame: pd.DataFrame) -> list[list[str]]:
    """Per row: its episode's earlier logged actions in words (rows in episode, step order)."""
    histories, history, episode = [], [], None
    for row in frame.itertuples():
        if row.episode_id != episode:
            history, episode = [], row.episode_id
        histories.append(list(history))
        history.append(describe_action(action_from_row(row._asdict())))
    return histories
