"""Pure functions from model text to what the pipeline needs: the action, the visible text.

Nothing here raises on model output: text that does not parse is an invalid action.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_THINKING = re.compile(r"<thinking>.*?(?:</thinking>|\Z)", re.DOTALL)
# Qwen3's native thinking block, in case a chat template leaves one in the response.
_NATIVE_THINK = re.compile(r"<think>.*?(?:</think>|\Z)", re.DOTALL)
_ACTION = re.compile(r"<action>(.*?)</action>", re.DOTALL)
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


def parse_action(text: str) -> ParsedAction:
    """The action inside the last ``<action>...</action>`` outside the reasoning block.

    >>> parse_action("<thinking>x</thinking> <action> get 1  oak logs </action>").action
    'get 1 oak logs'
    >>> parse_action("no tag").valid
    False
    """
    matches = _ACTION.findall(strip_thinking(text))
    if not matches:
        return ParsedAction(None)
    action = _SPACES.sub(" ", matches[-1]).strip()
    return ParsedAction(action or None)
