"""GUI agent templates for AITZ (appendix G, "GUI action input" and "GUI summary input").

The action call is a system message, the ``mobile_use`` tool definition and a multimodal user
message; the image position is marked by ``IMAGE_PLACEHOLDER`` for the caller to replace with
its processor's image token(s). Ordinary and privileged views differ only in the guideline.
"""

from __future__ import annotations

import json

ACTION_SYSTEM = """You are a GUI agent. Use the mobile_use tool to complete the user's task from the current screenshot and prior action history.

# Response format

Response format for every step:
1) Thought: one concise sentence explaining the next move (no multi-step reasoning).
2) Action: a short imperative describing what to do in the UI.
3) A single <tool_call>...</tool_call> block containing only the JSON object.

Rules:
- Output exactly in the order: Thought, Action, <tool_call>.
- Be brief: one sentence for Thought, one for Action.
- Use normalized integer coordinates from 0 to 999.
- Do not output anything else outside those three parts.
- If finishing, use action=terminate in the tool call."""

#: The ``mobile_use`` tool definition, as JSON text (``TOOL_DEFINITION`` is the parsed object).
TOOL_DEFINITION_JSON = """{
  "type": "function",
  "function": {
    "name": "mobile_use",
    "description": "Use a touchscreen to interact with a mobile device. You can click, type, swipe, press system buttons, wait, and finish the task. Some applications take time to load, so wait when the UI has not settled. Coordinates are normalized integers from 0 to 999, where (0, 0) is the top-left corner; target the center of an element.",
    "parameters": {
      "type": "object",
      "properties": {
        "action": {
          "type": "string",
          "description": "Action to perform: click a point; long_press a point; swipe from coordinate to coordinate2; type into the active field; answer the user; press a system_button; open an app by name; wait; or terminate with status.",
          "enum": ["click", "long_press", "swipe", "type", "answer",
                   "system_button", "open", "wait", "terminate"]
        },
        "coordinate": {
          "type": "array", "items": {"type": "integer"},
          "description": "Required for click, long_press, and swipe: normalized [x,y]."
        },
        "coordinate2": {
          "type": "array", "items": {"type": "integer"},
          "description": "Required for swipe: normalized ending [x,y]."
        },
        "text": {
          "type": "string", "description": "Required for type, answer, and open."
        },
        "time": {
          "type": "number", "description": "Required for long_press and wait."
        },
        "button": {
          "type": "string", "enum": ["Back", "Home", "Menu", "Enter"],
          "description": "Required for system_button."
        },
        "status": {
          "type": "string", "enum": ["success", "failure"],
          "description": "Required for terminate."
        }
      },
      "required": ["action"]
    }
  }
}"""
TOOL_DEFINITION = json.loads(TOOL_DEFINITION_JSON)

IMAGE_PLACEHOLDER = "<IMAGE: CURRENT_SCREENSHOT>"

ACTION_USER = (
    "The user query: {instruction}\n"
    "\n"
    "{guideline_block}"
    "Task progress (operations already completed on the current device):\n"
    "{progress}\n"
    "Choose the next action from the current screenshot.\n"
    "{image}"
)

#: The privileged-view insert; ``{remark}`` is the accepted ``<remark>...</remark>`` block.
GUIDELINE_BLOCK = "Use this task guideline when choosing the next action:\n{remark}\n\n"

PROGRESS_RECORD = "Step {index}: {action}"
PROGRESS_NONE = "None"

SUMMARY_SYSTEM = """You are a conservative GUI error-correction summarizer. Correct-step actions and lines marked CORRECT action are the only ground truth. Lines marked WRONG attempt are prohibited negative evidence. Never turn a wrong attempt into a recommended or prerequisite operation, and never infer extra operations from the user query, screenshots, or task-world knowledge. If the demonstrated route appears incomplete or unusual, summarize only its shown correct actions. Keep the required output format exactly."""

SUMMARY_USER_HEAD = """Summarize this successful GUI trajectory into a short guideline for the student model.

User query: {instruction}

The student was tested independently at every step. Correct steps are text-only route context. A screenshot is shown only for a failed step, together with the student's attempted action and the correct action. Focus on the failed steps and the difference between the attempt and the correct action.

For failed steps, "WRONG attempt — DO NOT DO" is negative evidence shown only to diagnose the mistake. "CORRECT action — DO THIS" is the authority. Build the route only from correct-step actions and CORRECT actions. A wrong attempt may appear only as an explicit "do not" warning followed by the correct alternative.

"""

SUMMARY_STEP_CORRECT = "Step {index} — student handled correctly\nAction: {action}\n"

SUMMARY_STEP_FAILED = (
    "Step {index} — student failed\n"
    "{image}\n"
    "\n"
    "CORRECT action — DO THIS: {action}\n"
    "WRONG attempt — DO NOT DO: {attempt}\n"
)

SUMMARY_USER_TAIL = """
Briefly cover the demonstrated route only; do not invent intermediate actions. Spend most detail on failed steps. Preserve text that must be typed, distinguish taps, swipes, system buttons, waiting, and completion, and state what visible UI cue should trigger each uncertain action. Include one useful fallback. Before answering, verify that every failed step's CORRECT action is represented and no WRONG attempt is written as a positive instruction. Do not include coordinates or tool calls.

Output only:
<remark>
How to do:
1) ...

Watch out:
- ...
</remark>
"""

SUMMARY_IMAGE_PLACEHOLDER = "<IMAGE: SCREENSHOT_AT_THIS_STEP>"
