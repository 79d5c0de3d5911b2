"""Synthetic AITZ-layout episodes: Pillow screenshots of a small phone, scripted actions.

Each episode starts on a home screen of app icons and follows one of three scripts, every step
logged as AITZ logs it (action-type code, touch and lift points ``[y, x]`` in ``[0, 1]``, typed
text, the screen's element boxes ``[y, x, height, width]``):

- **search** (category ``google_apps``): tap the app, tap its search field, type the query,
  press enter, stop;
- **open** (``general``): tap the app, swipe up while the item is below the fold, tap the item,
  stop;
- **return** (``single``): tap the app, tap an item, press back, press home, stop.

The files are real: the same reader, scorer and model path run on them as on the release.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path

from PIL import Image, ImageDraw

from resail_pipeline.config import Config, Field
from resail_pipeline.io import atomic_path

__all__ = ["APPS", "SyntheticConfig", "write_synthetic"]

APPS = ("Settings", "Gmail", "Maps", "Chrome", "Clock", "Calendar", "Notes", "Photos")
_ITEMS = (
    "Inbox",
    "Starred",
    "Drafts",
    "Alarms",
    "Timer",
    "Wi-Fi",
    "Bluetooth",
    "Display",
    "Sound",
    "Battery",
    "Storage",
    "Albums",
    "Favorites",
    "Trash",
    "Bookmarks",
    "History",
    "Downloads",
    "Events",
    "Reminders",
    "Contacts",
    "Archive",
    "Labels",
    "Offline",
    "Traffic",
)
_QUERIES = (
    "weather today",
    "pizza near me",
    "flights to paris",
    "coffee shops",
    "news",
    "bus times",
    "hiking trails",
    "movie tickets",
    "gas station",
    "pharmacy",
    "library hours",
    "museum",
)
WIDTH, HEIGHT = 216, 384
_ICON_COLUMNS, _ICON_ROWS = 2, 4
_VISIBLE_ROWS, _LIST_ITEMS = 6, 10
_TITLE_H, _SEARCH_H, _ROW_H = 40, 36, 44
_KEYS = {"type": 3, "tap": 4, "scroll": 4, "back": 5, "home": 6, "enter": 7, "stop": 10}


class SyntheticConfig(Config):
    """How many episodes of each split; ``seed`` fixes every choice."""

    train_episodes: int = Field(64, ge=1)
    """Episodes written into the ``train`` split."""
    test_episodes: int = Field(16, ge=1)
    """Episodes written into the ``test`` split."""
    seed: int = Field(0, ge=0)
    """Fixes every choice of the generator: apps, scripts, items and queries."""


Box = tuple[int, int, int, int]  # left, top, right, bottom in pixels


def _box_fraction(box: Box) -> list[float]:
    left, top, right, bottom = box
    return [top / HEIGHT, left / WIDTH, (bottom - top) / HEIGHT, (right - left) / WIDTH]


def _centre(box: Box) -> list[float]:
    left, top, right, bottom = box
    return [round((top + bottom) / 2 / HEIGHT, 4), round((left + right) / 2 / WIDTH, 4)]


class _Screen:
    """One screenshot under construction and its element boxes."""

    def __init__(self) -> None:
        self.image = Image.new("RGB", (WIDTH, HEIGHT), (250, 250, 250))
        self.draw = ImageDraw.Draw(self.image)
        self.boxes: list[Box] = []

    def element(self, box: Box, label: str, fill: tuple[int, int, int]) -> Box:
        self.draw.rectangle(box, fill=fill, outline=(60, 60, 60))
        self.draw.text((box[0] + 6, box[1] + (box[3] - box[1]) // 2 - 5), label, fill=(0, 0, 0))
        self.boxes.append(box)
        return box


def _home() -> tuple[_Screen, dict[str, Box]]:
    screen = _Screen()
    screen.draw.rectangle((0, 0, WIDTH, 24), fill=(30, 30, 30))
    icons = {}
    cell_w, cell_h = WIDTH // _ICON_COLUMNS, 72
    for index, app in enumerate(APPS):
        col, row = index % _ICON_COLUMNS, index // _ICON_COLUMNS
        left, top = col * cell_w + 12, 48 + row * (cell_h + 12)
        icons[app] = screen.element(
            (left, top, left + cell_w - 24, top + cell_h), app, (180, 210, 250)
        )
    return screen, icons


def _app(
    app: str, items: Sequence[str], first: int, query: str = ""
) -> tuple[_Screen, Box, list[Box]]:
    """An app's screen: title, search field (showing ``query``), list from item ``first``."""
    screen = _Screen()
    screen.element((0, 0, WIDTH, _TITLE_H), app, (120, 170, 230))
    search = screen.element(
        (8, _TITLE_H + 6, WIDTH - 8, _TITLE_H + 6 + _SEARCH_H), query or "Search", (255, 255, 255)
    )
    rows = []
    top = _TITLE_H + _SEARCH_H + 16
    for item in items[first : first + _VISIBLE_ROWS]:
        rows.append(screen.element((8, top, WIDTH - 8, top + _ROW_H - 6), item, (235, 235, 235)))
        top += _ROW_H
    return screen, search, rows


def _results(app: str, query: str) -> _Screen:
    screen, _, _ = _app(app, [f"{query} {n}" for n in range(1, _VISIBLE_ROWS + 1)], 0, query)
    return screen


def _step(
    kind: str, *, touch: list[float] | None = None, lift: list[float] | None = None, text: str = ""
) -> dict:
    touch = touch if touch is not None else [-1.0, -1.0]
    return {
        "result_action_type": _KEYS[kind],
        "result_touch_yx": json.dumps(touch),
        "result_lift_yx": json.dumps(lift if lift is not None else touch),
        "result_action_text": text,
    }


def _episode(
    rng: random.Random, app_items: dict[str, list[str]]
) -> tuple[str, str, list[tuple[_Screen, dict]]]:
    """(category, instruction, [(screen, logged action)]) of one scripted episode."""
    app = rng.choice(APPS)
    items = app_items[app]
    home, icons = _home()
    steps: list[tuple[_Screen, dict]] = [(home, _step("tap", touch=_centre(icons[app])))]
    script = rng.choice(("search", "open", "return"))
    if script == "search":
        query = rng.choice(_QUERIES)
        screen, search, _ = _app(app, items, 0)
        steps.append((screen, _step("tap", touch=_centre(search))))
        steps.append((screen, _step("type", text=query)))
        typed, _, _ = _app(app, items, 0, query)
        steps.append((typed, _step("enter")))
        steps.append((_results(app, query), _step("stop")))
        return "google_apps", f"Search for {query} in {app}", steps
    index = rng.randrange(_LIST_ITEMS)
    first = 0
    while index >= first + _VISIBLE_ROWS:
        screen, _, _ = _app(app, items, first)
        steps.append((screen, _step("scroll", touch=[0.8, 0.5], lift=[0.4, 0.5])))
        first += _VISIBLE_ROWS // 2
    screen, _, rows = _app(app, items, first)
    steps.append((screen, _step("tap", touch=_centre(rows[index - first]))))
    opened, _, _ = _app(items[index], [f"{items[index]} detail {n}" for n in range(1, 4)], 0)
    if script == "open":
        steps.append((opened, _step("stop")))
        return "general", f"Open {items[index]} in {app}", steps
    steps.append((opened, _step("back")))
    steps.append((screen, _step("home")))
    steps.append((home, _step("stop")))
    return "single", f"Open {items[index]} in {app}, then go back to the home screen", steps


def _write_split(folder: Path, split: str, count: int, seed: int) -> None:
    rng = random.Random(f"{seed}/{split}")
    app_items = {app: random.Random(f"{seed}/{app}").sample(_ITEMS, _LIST_ITEMS) for app in APPS}
    for number in range(count):
        category, instruction, steps = _episode(rng, app_items)
        episode_id = f"SYN-{split}-{number:05d}"
        episode_dir = folder / category / episode_id
        episode_dir.mkdir(parents=True)
        records = []
        for step_id, (screen, action) in enumerate(steps):
            image_name = f"{episode_id}_{step_id}.png"
            screen.image.save(episode_dir / image_name)
            records.append(
                {
                    "episode_id": episode_id,
                    "episode_length": len(steps),
                    "step_id": step_id,
                    "instruction": instruction,
                    "image_path": f"{split}/{category}/{episode_id}/{image_name}",
                    "image_width": WIDTH,
                    "image_height": HEIGHT,
                    "ui_positions": json.dumps([_box_fraction(box) for box in screen.boxes]),
                    **action,
                }
            )
        (episode_dir / f"{episode_id}.json").write_text(json.dumps(records, indent=1))


def write_synthetic(root: str | Path, config: SyntheticConfig) -> Path:
    """Write ``train`` and ``test`` splits under ``root`` in the AITZ layout; return ``root``.

    A split already written with the same configuration is kept (a rerun does nothing); each split
    is written whole into a temporary folder and renamed into place.
    """
    root = Path(root)
    for split, count in (("train", config.train_episodes), ("test", config.test_episodes)):
        folder = root / split
        stamp = folder / ".synthetic.json"
        wanted = json.dumps(config.model_dump(), sort_keys=True)
        if stamp.is_file() and stamp.read_text() == wanted:
            continue
        with atomic_path(folder) as tmp:
            tmp.mkdir()
            _write_split(tmp, split, count, config.seed)
            (tmp / ".synthetic.json").write_text(wanted)
    return root
