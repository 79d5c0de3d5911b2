"""GUI prompts against appendix G ("GUI action input", "GUI summary input"), filled in by hand."""

from __future__ import annotations

import json

import pytest

from resail_pipeline.evaluation.gui_actions import GuiAction, predicted_action
from resail_pipeline.prompts import gui
from resail_pipeline.prompts.render import (
    gui_action_messages,
    gui_summary_messages,
    render_gui_action,
    render_gui_summary,
)

REMARK = "<remark>\nHow to do:\n1) Tap Settings.\n\nWatch out:\n- Do not tap Back.\n</remark>"

ORDINARY = """\
The user query: Turn on Wi-Fi

Task progress (operations already completed on the current device):
Step 1: click Home
Step 2: swipe up
Choose the next action from the current screenshot.
<IMAGE: CURRENT_SCREENSHOT>"""

PRIVILEGED_FIRST_STEP = """\
The user query: Turn on Wi-Fi

Use this task guideline when choosing the next action:
<remark>
How to do:
1) Tap Settings.

Watch out:
- Do not tap Back.
</remark>

Task progress (operations already completed on the current device):
None
Choose the next action from the current screenshot.
<IMAGE: CURRENT_SCREENSHOT>"""

SUMMARY = """\
Summarize this successful GUI trajectory into a short guideline for the student model.

User query: Turn on Wi-Fi

The student was tested independently at every step. Correct steps are text-only route context. \
A screenshot is shown only for a failed step, together with the student's attempted action and \
the correct action. Focus on the failed steps and the difference between the attempt and the \
correct action.

For failed steps, "WRONG attempt — DO NOT DO" is negative evidence shown only to diagnose the \
mistake. "CORRECT action — DO THIS" is the authority. Build the route only from correct-step \
actions and CORRECT actions. A wrong attempt may appear only as an explicit "do not" warning \
followed by the correct alternative.

Step 1 — student handled correctly
Action: click Home
Step 2 — student failed
<IMAGE: SCREENSHOT_AT_THIS_STEP>

CORRECT action — DO THIS: open Settings
WRONG attempt — DO NOT DO: system_button Back

Briefly cover the demonstrated route only; do not invent intermediate actions. Spend most detail \
on failed steps. Preserve text that must be typed, distinguish taps, swipes, system buttons, \
waiting, and completion, and state what visible UI cue should trigger each uncertain action. \
Include one useful fallback. Before answering, verify that every failed step's CORRECT action is \
represented and no WRONG attempt is written as a positive instruction. Do not include \
coordinates or tool calls.

Output only:
<remark>
How to do:
1) ...

Watch out:
- ...
</remark>
"""


def test_action_input_in_both_views():
    assert render_gui_action("Turn on Wi-Fi", ["click Home", "swipe up"]) == ORDINARY
    assert render_gui_action("Turn on Wi-Fi", [], remark=REMARK) == PRIVILEGED_FIRST_STEP


def test_summary_input():
    steps = [("click Home", None), ("open Settings", "system_button Back")]
    assert render_gui_summary("Turn on Wi-Fi", steps) == SUMMARY


def test_system_messages_and_tool():
    assert gui.ACTION_SYSTEM.startswith("You are a GUI agent. Use the mobile_use tool")
    assert gui.ACTION_SYSTEM.endswith("If finishing, use action=terminate in the tool call.")
    assert gui.SUMMARY_SYSTEM.endswith("Keep the required output format exactly.")
    tool = gui.TOOL_DEFINITION["function"]
    assert tool["name"] == "mobile_use"
    assert tool["parameters"]["properties"]["action"]["enum"] == [
        "click",
        "long_press",
        "swipe",
        "type",
        "answer",
        "system_button",
        "open",
        "wait",
        "terminate",
    ]
    assert json.loads(gui.TOOL_DEFINITION_JSON) == gui.TOOL_DEFINITION


# --- rendering ---------------------------------------------------------------------------------


_ACTIONS = [
    GuiAction("tap", point=(0.25, 0.75)),
    GuiAction("scroll", direction="up"),
    GuiAction("scroll", direction="left"),
    GuiAction("type", text="pizza near me"),
    GuiAction("back"),
    GuiAction("home"),
    GuiAction("enter"),
    GuiAction("stop"),
]


@pytest.mark.parametrize("action", _ACTIONS, ids=lambda a: f"{a.kind}-{a.direction}")
def test_tool_call_reads_back_as_the_same_action(action):
    read = predicted_action(gui.tool_call(action))
    assert read is not None and read.kind == action.kind
    assert read.direction == action.direction and read.text == action.text
    if action.point is not None:  # 0..999 integers: within one unit
        assert read.point == pytest.approx(action.point, abs=1 / 999)


def test_messages_are_system_plus_the_rendered_user_message():
    messages = gui_action_messages("Turn on Wi-Fi", ["click Home", "swipe up"])
    assert messages == [
        {"role": "system", "content": gui.ACTION_SYSTEM},
        {"role": "user", "content": ORDINARY},
    ]
    steps = [("click Home", None), ("open Settings", "system_button Back")]
    summary = gui_summary_messages("Turn on Wi-Fi", steps)
    assert summary == [
        {"role": "system", "content": gui.SUMMARY_SYSTEM},
        {"role": "user", "content": SUMMARY},
    ]


def test_describe_action_is_what_the_progress_lists():
    assert gui.describe_action(GuiAction("tap", point=(0.5, 0.2))) == "click at [200, 500]"
    assert gui.describe_action(GuiAction("type", text="news")) == 'type "news"'
    assert gui.describe_action(GuiAction("scroll", direction="down")) == "swipe down"
    assert gui.describe_action(GuiAction("enter")) == "press Enter"


def test_rule_remark_is_accepted_and_names_the_wrong_attempt():
    wrong = gui.tool_call(GuiAction("back"))
    remark = gui.rule_remark(
        [(GuiAction("tap", point=(0.5, 0.5)), None), (GuiAction("home"), wrong)]
    )
    assert gui.accepted_remark(remark) == remark
    assert "- At step 2, press Home; do not press Back." in remark


@pytest.mark.parametrize(
    "text",
    ["no remark here", "<remark>How to do:\n1) x\n</remark>", "<remark>Watch out:\n- y\n</remark>"],
)
def test_remark_without_both_parts_is_rejected(text):
    assert gui.accepted_remark(text) is None


def test_template_phrases_are_literal_template_text():
    phrases = gui.template_phrases()
    assert gui.ACTION_SYSTEM in phrases
    assert all("{" not in p or "JSON" in p for p in phrases)
    assert "The user query: " in phrases


PARSED_REMARK = "<remark>\nHow to do:\n1) open\n\nWatch out:\n- x\n</remark>"


@pytest.mark.parametrize(
    "text",
    [
        PARSED_REMARK,
        f"before {PARSED_REMARK} after </remark>",
        "<remark> How to do:  \n a Watch out: \n b</remark>",
        "<remark>How to do: x\nWatch out:\n</remark>",  # text after the heading on its line
        "<remark>How to do:\nWatch out: x\nWatch out:\n</remark>",
        "<remark>How to do:\n<remark>How to do:\nWatch out:\n</remark>",
        "<remark>nothing</remark>" + PARSED_REMARK,
        "<remark>How to do:\nWatch out:\n",
        "<remark>How to do:\n" * 30,
        "<remark>How to do:\nWatch out:\n" * 30,
        "",
    ],
)
def test_the_remark_is_the_one_the_single_pattern_finds(text):
    """The linear scan returns what the replaced expression, which backtracked to cubic time over
    repeated headers, returned."""
    import re

    pattern = r"<remark>\s*How to do:\s*\n.*?Watch out:\s*\n.*?</remark>"
    found = re.search(pattern, text, re.DOTALL)
    assert gui.accepted_remark(text) == (found.group(0) if found else None)


@pytest.mark.parametrize(
    ("written", "kept"),
    [
        ("tap <IMAGE: CURRENT_SCREENSHOT> now", "tap  now"),
        ("<IMAGE: SCREENSHOT_AT_THIS_STEP>", ""),
        # taking the inner one out joins the outer halves into another: taken out too
        ("a<IMAGE: CURRENT_<IMAGE: SCREENSHOT_AT_THIS_STEP>SCREENSHOT>b", "ab"),
        ("no placeholder <IMAGE> here", "no placeholder <IMAGE> here"),
    ],
)
def test_model_written_text_loses_its_image_placeholders(written, kept):
    assert gui.without_placeholders(written) == kept


def test_placeholders_nested_thousands_deep_are_all_taken_out():
    # each one taken out joins the halves around it into the next (the time: benchmarks/parsers.py)
    head, tail = gui.IMAGE_PLACEHOLDER[:7], gui.IMAGE_PLACEHOLDER[7:]
    assert gui.without_placeholders("x" + head * 2_000 + tail * 2_000 + "y") == "xy"
    # the one-pass scan relies on every placeholder ending in the same character
    assert {p[-1] for p in gui.IMAGE_PLACEHOLDERS} == {gui._PLACEHOLDER_END}


def test_a_prompt_has_one_image_slot_per_screenshot_whatever_the_model_wrote():
    """An attempt or a remark holding a placeholder would add a slot no screenshot fills."""
    attempt = f"click {gui.SUMMARY_IMAGE_PLACEHOLDER} then {gui.IMAGE_PLACEHOLDER}"
    summary = render_gui_summary("Go", [("press Back", attempt), ("press Home", None)])
    assert summary.count(gui.SUMMARY_IMAGE_PLACEHOLDER) == 1
    assert gui.IMAGE_PLACEHOLDER not in summary
    assert "click  then " in summary
    remark = REMARK.replace("Tap Settings.", f"Tap {gui.IMAGE_PLACEHOLDER}.")
    action = render_gui_action("Turn on Wi-Fi", ["click Home"], remark)
    assert action.count(gui.IMAGE_PLACEHOLDER) == 1
    assert action.endswith(gui.IMAGE_PLACEHOLDER)
