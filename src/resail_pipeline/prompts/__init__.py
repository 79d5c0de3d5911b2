"""Prompt templates of appendix G, view rendering, and parsing of model output.

Templates are named ``str.format`` constants, one module per environment (``textcraft``,
``alfworld``, ``gui``) plus the summary prompts (``summaries``); they are filled in one place,
:mod:`resail_pipeline.prompts.render`.
"""

from resail_pipeline.prompts.chat import chat_prompt
from resail_pipeline.prompts.common import OUTCOME_FAILURE, OUTCOME_SUCCESS, OUTCOMES
from resail_pipeline.prompts.history import EpisodeHistory, Turn
from resail_pipeline.prompts.parsing import ParsedAction, parse_action, strip_thinking
from resail_pipeline.prompts.render import (
    Summary,
    add_privileged,
    privileged_insert,
    render_user_message,
)

__all__ = [
    "OUTCOMES",
    "OUTCOME_FAILURE",
    "OUTCOME_SUCCESS",
    "EpisodeHistory",
    "ParsedAction",
    "Summary",
    "Turn",
    "add_privileged",
    "chat_prompt",
    "parse_action",
    "privileged_insert",
    "render_user_message",
    "strip_thinking",
]
