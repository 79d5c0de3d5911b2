"""GUI prompts against appendix G ("GUI action input", "GUI summary input"), filled in by hand."""

from __future__ import annotations

import json

from resail_pipeline.prompts import gui
from resail_pipeline.prompts.render import render_gui_action, render_gui_summary

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
