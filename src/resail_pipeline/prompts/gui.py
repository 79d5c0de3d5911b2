"""GUI agent templates for AITZ (appendix G, "GUI action input" and "GUI summary input").

The action call is a system message, the ``mobile_use`` tool definition and a multimodal user
message; the image position is marked by ``IMAGE_PLACEHOLDER`` for the caller to replace with
its processor's image token(s). Ordinary and privileged views differ only in the guideline.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from resail_pipeline.evaluation.gui_actions import GuiAction, predicted_action

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

#: where a rendered prompt puts one of its call's screenshots
IMAGE_PLACEHOLDERS = (IMAGE_PLACEHOLDER, SUMMARY_IMAGE_PLACEHOLDER)
#: the last character of every image placeholder (:func:`without_placeholders` relies on it)
_PLACEHOLDER_END = ">"


def without_placeholders(text: str) -> str:
    """Model-written ``text`` (an attempt, a remark) with every image placeholder taken out. In a
    rendered prompt each placeholder is a slot for one of the call's screenshots: one written by
    the model would be a slot no image fills. Taking one out can join the text around it into
    another, so none is left in the result, nested ones included.

    One pass, linear in the text: the text is copied piece by piece up to each ``>`` (every
    placeholder ends in one), and a placeholder the copy then ends with is dropped from it. The
    end of the copy after a drop was checked when it was written, so one check per ``>`` is
    enough.
    """
    if not any(placeholder in text for placeholder in IMAGE_PLACEHOLDERS):
        return text
    kept: list[str] = []
    pieces = text.split(_PLACEHOLDER_END)
    for i, piece in enumerate(pieces):
        kept.extend(piece)
        if i == len(pieces) - 1:
            break
        kept.append(_PLACEHOLDER_END)
        for placeholder in IMAGE_PLACEHOLDERS:
            if len(kept) >= len(placeholder) and "".join(kept[-len(placeholder) :]) == placeholder:
                del kept[-len(placeholder) :]
                break
    return "".join(kept)


# --- Rendering ---------------------------------------------------------------------------------

#: ``mobile_use`` system-button names of the control commands
_BUTTON_NAMES = {"back": "Back", "home": "Home", "enter": "Enter"}


def _coordinate(point: tuple[float, float]) -> list[int]:
    """``(y, x)`` in ``[0, 1]`` as the tool's normalised ``[x, y]`` in ``0..999``."""
    return [round(point[1] * 999), round(point[0] * 999)]


def tool_arguments(action: GuiAction) -> dict[str, object]:
    """The ``mobile_use`` arguments that perform ``action`` (a scroll as a swipe across the
    middle of the screen in its direction)."""
    if action.kind == "tap":
        if action.point is None:
            raise ValueError("action.point: a tap needs its point")
        return {"action": "click", "coordinate": _coordinate(action.point)}
    if action.kind == "scroll":
        start, end = _SWIPES[action.direction or ""]
        return {
            "action": "swipe",
            "coordinate": _coordinate(start),
            "coordinate2": _coordinate(end),
        }
    if action.kind == "type":
        return {"action": "type", "text": action.text or ""}
    if action.kind in _BUTTON_NAMES:
        return {"action": "system_button", "button": _BUTTON_NAMES[action.kind]}
    return {"action": "terminate", "status": "success"}


#: a scroll's swipe, ``(start, end)`` as ``(y, x)``, per direction the finger moves
_SWIPES = {
    "up": ((0.8, 0.5), (0.3, 0.5)),
    "down": ((0.3, 0.5), (0.8, 0.5)),
    "left": ((0.5, 0.8), (0.5, 0.2)),
    "right": ((0.5, 0.2), (0.5, 0.8)),
}


def tool_call(action: GuiAction) -> str:
    """``action`` as the model writes it: a ``<tool_call>`` block calling ``mobile_use``."""
    call = {"name": "mobile_use", "arguments": tool_arguments(action)}
    return f"<tool_call>\n{json.dumps(call)}\n</tool_call>"


def describe_action(action: GuiAction) -> str:
    """A logged action in words, as the task progress and the summary input list it."""
    if action.kind == "tap":
        x, y = _coordinate(action.point) if action.point else (0, 0)
        return f"click at [{x}, {y}]"
    if action.kind == "scroll":
        return f"swipe {action.direction}"
    if action.kind == "type":
        return f'type "{action.text or ""}"'
    if action.kind in _BUTTON_NAMES:
        return f"press {_BUTTON_NAMES[action.kind]}"
    return "terminate (task complete)"


#: the opening of a remark: the tag, then the first heading and the end of its line
_REMARK_HOW = re.compile(r"<remark>\s*How to do:[^\S\n]*\n")
#: the second heading and the end of its line
_REMARK_WATCH = re.compile(r"Watch out:[^\S\n]*\n")
_REMARK_END = "</remark>"


def accepted_remark(text: str) -> str | None:
    """The ``<remark>`` block of a summary response, or ``None`` when it lacks one of the form
    asked for (both headings, each followed by a line).

    The first opening, the first second heading after it, the first closing tag after that: what
    ``<remark>\\s*How to do:\\s*\\n.*?Watch out:\\s*\\n.*?</remark>`` finds, in time linear in the
    text (the single expression backtracked to cubic time over repeated headers, and model output
    is untrusted). Where the first opening has no second heading or closing tag after it, no later
    one has either.
    """
    opening = _REMARK_HOW.search(text)
    if opening is None:
        return None
    watch = _REMARK_WATCH.search(text, opening.end())
    if watch is None:
        return None
    end = text.find(_REMARK_END, watch.end())
    return None if end < 0 else text[opening.start() : end + len(_REMARK_END)]


def rule_remark(steps: Sequence[tuple[GuiAction, str | None]]) -> str:
    """A remark written from the logged actions alone (for a policy that cannot yet write one):
    the route, then a warning at each failed step."""
    route = "\n".join(f"{i}) {describe_action(a)}" for i, (a, _) in enumerate(steps, start=1))
    warnings = [
        f"- At step {i}, {describe_action(a)}; do not {describe_action(p) if p else 'guess'}."
        for i, (a, attempt) in enumerate(steps, start=1)
        if attempt is not None
        for p in [predicted_action(attempt)]
    ] or ["- Follow the route step by step."]
    return f"<remark>\nHow to do:\n{route}\n\nWatch out:\n" + "\n".join(warnings) + "\n</remark>"


def template_phrases() -> list[str]:
    """The literal text of every GUI template, split at its fields: what each prompt repeats
    verbatim (a small model's tokenizer makes each one token)."""
    templates = (
        ACTION_SYSTEM,
        ACTION_USER,
        GUIDELINE_BLOCK,
        SUMMARY_SYSTEM,
        SUMMARY_USER_HEAD,
        SUMMARY_STEP_CORRECT,
        SUMMARY_STEP_FAILED,
        SUMMARY_USER_TAIL,
        IMAGE_PLACEHOLDER,
        SUMMARY_IMAGE_PLACEHOLDER,
    )
    return [piece for t in templates for piece in re.split(r"\{[a-z_]+\}", t) if piece.strip()]
