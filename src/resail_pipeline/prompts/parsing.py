"""Pure functions from model text to what the pipeline needs: the action, the visible text.

Nothing here raises on model output: text that does not parse is an invalid action. Model output
is untrusted input, so every function runs in time linear in its length (plain scans, no regular
expression that backtracks over unbounded input).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_THINKING = re.compile(r"<thinking>.*?(?:</thinking>|\Z)", re.DOTALL)
# Qwen3's native thinking block, in case a chat template leaves one in the response.
_NATIVE_THINK = re.compile(r"<think>.*?(?:</think>|\Z)", re.DOTALL)
_OPEN, _CLOSE = "<action>", "</action>"
_SPACES = re.compile(r"\s+")


@dataclass(frozen=True)
class ParsedAction:
    """``action`` is the whitespace-normalised text of the action tag, ``None`` if unparsable."""

    action: str | None

    @property
    def valid(self) -> bool:
        return self.action is not None


def strip_thinking(text: str) -> str:
    """Remove ``<thinking>`` (and native ``<think>``) blocks; an unclosed block runs to the end."""
    return _NATIVE_THINK.sub("", _THINKING.sub("", text))


def parse_action(text: str | None) -> ParsedAction:
    """The action inside the last ``<action>...</action>`` outside the reasoning block.

    Tags pair left to right, each ``<action>`` with the first ``</action>`` after it (so in
    ``<action>a<action>b</action>`` the action is ``a<action>b``); ``None`` or text without a pair
    is an invalid action.

    >>> parse_action("<thinking>x</thinking> <action> get 1  oak logs </action>").action
    'get 1 oak logs'
    >>> parse_action("no tag").valid
    False
    """
    if not isinstance(text, str):
        return ParsedAction(None)
    visible = strip_thinking(text)
    last, start = None, 0
    while (opening := visible.find(_OPEN, start)) != -1:
        closing = visible.find(_CLOSE, opening + len(_OPEN))
        if closing == -1:
            break
        last, start = visible[opening + len(_OPEN) : closing], closing + len(_CLOSE)
    if last is None:
        return ParsedAction(None)
    action = _SPACES.sub(" ", last).strip()
    return ParsedAction(action or None)
