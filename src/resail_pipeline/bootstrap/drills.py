"""Copying drills: demonstration steps whose only route to the answer is the summary's plan.

The privileged view is meant to be better because the policy copies from the summary it is
given; a small policy trained on ordinary prompts that also list the crafting commands finds the
commands (or recipes known by heart) an easier route to the expert's action, and leaves the
plan unread. A drill is a demonstration step in the privileged view alone, renamed (so no recipe
is known by heart: :mod:`~.renaming`) and with the crafting commands taken out of its message
(:func:`without_crafting_commands`), so that the plan of the summary (a failure analysis's
corrected plan, a success's minimal plan) is the one place the answer can come from. The message is
also shorter by the command list, so a drill costs less than the step it comes from.
"""

from __future__ import annotations

import re

from resail_pipeline.prompts import textcraft

_COMMAND_HEADERS = (
    textcraft.OBSERVATION_COMMANDS_HEADER,
    textcraft.COMMAND_BLOCK.split("\n", 1)[0],
)

#: A command list: its header, then its lines (every crafting command starts with ``craft ``).
_COMMAND_LIST = re.compile(
    "(?:" + "|".join(re.escape(h) for h in _COMMAND_HEADERS) + r")\n(?:craft [^\n]*(?:\n|$))*"
)


def without_crafting_commands(message: str) -> str:
    """``message`` (a rendered TextCraft user message) without its crafting-command lists.

    The first step's observation lists them after ``Crafting commands:``; a later step's prompt
    after ``Available crafting commands for this episode:``. Each list goes with its header; the
    rest of the text is unchanged, and a text without a list is returned as is.
    """
    return _COMMAND_LIST.sub("", message)
