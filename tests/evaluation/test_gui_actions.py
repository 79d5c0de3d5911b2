"""AITZ exact-match: each rule of the screen-wise matcher on hand-made cases, and its edges."""

from __future__ import annotations

import json

import pytest

from resail_pipeline.evaluation.gui_actions import (
    GuiAction,
    actions_match,
    exact_match_accuracy,
    logged_action,
    logged_step,
    predicted_action,
)


def call(**arguments) -> str:
    body = json.dumps({"name": "mobile_use", "arguments": arguments})
    return f"Thought: t.\nAction: a.\n<tool_call>{body}</tool_call>"


def test_logged_dual_point_actions_are_taps_or_scrolls_by_length():
    assert logged_action(4, (0.5, 0.5), (0.52, 0.51)) == GuiAction("tap", point=(0.5, 0.5))
    assert logged_action(4, (0.5, 0.5), (0.5, 0.539)).kind == "tap"  # either side of 0.04
    assert logged_action(4, (0.5, 0.5), (0.5, 0.541)).kind == "scroll"
    assert logged_action(4, (0.8, 0.5), (0.2, 0.55)) == GuiAction("scroll", direction="up")
    assert logged_action(4, (0.2, 0.5), (0.8, 0.45)).direction == "down"
    assert logged_action(4, (0.5, 0.9), (0.45, 0.1)).direction == "left"
    assert logged_action(4, (0.5, 0.1), (0.55, 0.9)).direction == "right"


def test_logged_other_actions():
    assert logged_action(3, text="Paris") == GuiAction("type", text="Paris")
    kinds = [logged_action(code).kind for code in (5, 6, 7, 10, 11)]
    assert kinds == ["back", "home", "enter", "stop", "stop"]
    with pytest.raises(ValueError, match="no AITW action has code 9"):
        logged_action(9)
    with pytest.raises(ValueError, match="needs both"):
        logged_action(4, (0.5, 0.5))


def test_predictions_are_read_from_the_tool_call():
    assert predicted_action(call(action="click", coordinate=[999, 0])) == GuiAction(
        "tap", point=(0.0, 1.0)
    )
    assert predicted_action(call(action="long_press", coordinate=[0, 999], time=1)).point == (
        1.0,
        0.0,
    )
    swipe = call(action="swipe", coordinate=[500, 800], coordinate2=[500, 200])
    assert predicted_action(swipe) == GuiAction("scroll", direction="up")
    assert predicted_action(call(action="type", text="hi")) == GuiAction("type", text="hi")
    assert [
        predicted_action(call(action="system_button", button=b)).kind
        for b in ("Back", "Home", "Enter")
    ] == ["back", "home", "enter"]
    assert predicted_action(call(action="terminate", status="success")) == GuiAction("stop")


@pytest.mark.parametrize(
    "response",
    [
        "no tool call",
        "<tool_call>{not json</tool_call>",
        "<tool_call>[1, 2]</tool_call>",
        call(action="click", coordinate=[1000, 5]),  # off the 0..999 screen
        call(action="click", coordinate=[5]),
        call(action="click", coordinate=[True, 5]),
        call(action="swipe", coordinate=[5, 5], coordinate2=[5, 5]),
        call(action="type"),
        call(action="system_button", button="Menu"),
        call(action="answer", text="x"),
        call(action="open", text="Maps"),
        call(action="wait", time=2),
        None,
        "<tool_call>" + "[" * 1000 + "</tool_call>",  # deeper than the JSON parser's stack
        "<tool_call>" + '{"a":' * 5000 + "1" + "}" * 5000 + "</tool_call>",
    ],
)
def test_unreadable_or_unknown_predictions_are_invalid(response):
    assert predicted_action(response) is None


BOX = (
    0.1,
    0.1,
    0.1,
    0.2,
)  # (y, x, height, width): enlarged 1.4x, y in [0.08, 0.22], x in [0.06, 0.34]


@pytest.mark.parametrize(
    ("predicted", "match"),
    [
        ((0.15, 0.2), True),  # near
        ((0.22, 0.34), True),  # the enlarged box's corner: edges count, though 0.17 away
        ((0.2201, 0.34), False),  # just outside the enlarged box, and beyond the distance
        ((0.24, 0.06), True),  # outside the box, but within 0.14 of the logged tap
    ],
)
def test_taps_match_in_one_enlarged_box_or_within_the_distance(predicted, match):
    logged = GuiAction("tap", point=(0.12, 0.12))
    assert actions_match(logged, GuiAction("tap", point=predicted), [BOX]) is match


def test_tap_distance_and_boxes_that_must_hold_both_points():
    logged = GuiAction("tap", point=(0.5, 0.5))
    assert actions_match(logged, GuiAction("tap", point=(0.6399, 0.5)))  # either side of 0.14
    assert not actions_match(logged, GuiAction("tap", point=(0.6401, 0.5)))
    far = GuiAction("tap", point=(0.15, 0.2))
    assert not actions_match(logged, far, [BOX])  # the prediction's box does not hold the log's


def test_scrolls_types_and_commands():
    up = GuiAction("scroll", direction="up")
    assert actions_match(up, GuiAction("scroll", direction="up"))
    assert not actions_match(up, GuiAction("scroll", direction="down"))
    typed = GuiAction("type", text="New  York")
    assert actions_match(typed, GuiAction("type", text=" new york "))
    assert actions_match(typed, GuiAction("type", text="new york city"))  # containment
    assert actions_match(typed, GuiAction("type", text="york"))
    assert not actions_match(typed, GuiAction("type", text="boston"))
    assert not actions_match(GuiAction("type", text=""), GuiAction("type", text=""))
    assert actions_match(GuiAction("back"), GuiAction("back"))
    assert not actions_match(GuiAction("back"), GuiAction("home"))
    assert not actions_match(up, GuiAction("tap", point=(0.5, 0.5)))  # the category first
    assert not actions_match(up, None)


def test_accuracy_leaves_stop_steps_out_and_scores_invalid_predictions_zero():
    logged = [GuiAction("back"), GuiAction("stop"), GuiAction("scroll", direction="up")]
    predicted = [GuiAction("back"), None, None]
    assert exact_match_accuracy(logged, predicted, [[], [], []]) == 0.5
    with pytest.raises(ValueError, match="every step is a stop"):
        exact_match_accuracy([GuiAction("stop")], [GuiAction("stop")], [[]])
    with pytest.raises(ValueError, match="lengths differ"):
        exact_match_accuracy(logged, predicted[:2], [[], [], []])


def test_a_step_record_of_the_aitz_release_as_the_scorer_reads_it():
    record = {
        "episode_id": "e1",
        "step_id": 0,
        "instruction": "open the settings",
        "image_path": "general/e1/e1_0.png",
        "ui_positions": "[[0.1, 0.1, 0.1, 0.2], [0.5, 0.5, 0.05, 0.05]]",
        "result_action_type": 4,
        "result_action_text": "",
        "result_touch_yx": "[0.12, 0.12]",
        "result_lift_yx": "[0.12, 0.12]",
    }
    action, boxes = logged_step(record)
    assert action == GuiAction("tap", point=(0.12, 0.12)) and boxes[0] == [0.1, 0.1, 0.1, 0.2]
    listed = {**record, "ui_positions": [[0.1, 0.1, 0.1, 0.2]], "result_touch_yx": [0.12, 0.12]}
    assert logged_step(listed)[0] == action
    typed = logged_step({"result_action_type": 3, "result_action_text": "wifi", "ui_positions": ""})
    assert typed == (GuiAction("type", text="wifi"), [])
    with pytest.raises(ValueError, match="result_touch_yx: not a JSON list"):
        logged_step({**record, "result_touch_yx": "[0.1,"})
    with pytest.raises(ValueError, match="result_action_type: missing"):
        logged_step({"ui_positions": "[]"})


@pytest.mark.parametrize(
    "response",
    [
        '<tool_call>{"arguments": {"action": "terminate"}}</tool_call>',
        'x<tool_call><tool_call>{"arguments": {"action": "terminate"}}</tool_call></tool_call>',
        '<tool_call>{"arguments": {"action": "terminate"}}',
        "</tool_call><tool_call>",
        '</tool_call><tool_call>{"arguments": {"action": "terminate"}}</tool_call>',
        "<tool_call>" * 50,
        "",
    ],
)
def test_the_tool_call_is_the_one_the_lazy_pattern_finds(response):
    """The linear scan finds the text the replaced <tool_call>(.*?)</tool_call> found."""
    import re

    found = re.search(r"<tool_call>(.*?)</tool_call>", response, re.DOTALL)
    want = None if found is None else predicted_action(f"<tool_call>{found.group(1)}</tool_call>")
    assert predicted_action(response) == want
