"""The fixed text of the prompts: literal template fragments that every rendered prompt repeats.

A tokenizer trained for one environment can make each fragment a single token
(:func:`resail_pipeline.modeling.build_word_tokenizer` ``phrases=``): the per-step prompts then
cost a few tokens of boilerplate instead of a hundred, and stay exactly the same text.
"""

from __future__ import annotations

import string
from collections.abc import Iterable

from resail_pipeline.prompts import alfworld, textcraft
from resail_pipeline.prompts.common import PRIVILEGED_INSERTS
from resail_pipeline.prompts.summaries import (
    FAILURE_FIELDS,
    FAILURE_HEADING,
    FIELD_LINE,
    SUCCESS_FIELDS,
    SUCCESS_HEADING,
)

#: The tags a response is written in (the templates ask for them; parsing reads them).
RESPONSE_TAGS = ("<thinking>", "</thinking>", "<action>", "</action>")

#: env name -> the templates of its per-step user messages.
STEP_TEMPLATES: dict[str, tuple[str, ...]] = {
    "textcraft": (
        textcraft.FIRST_STEP,
        textcraft.LATER_STEP,
        textcraft.COMMAND_BLOCK,
        textcraft.HISTORY_RECORD,
    ),
    "alfworld": (
        alfworld.FIRST_STEP,
        alfworld.LATER_STEP,
        alfworld.HISTORY_RECORD,
    ),
}


def literal_fragments(template: str) -> list[str]:
    """The literal text between the ``{fields}`` of a ``str.format`` template, in order.

    Fragments with fewer than two visible characters (separators such as ``"\\n"`` or ``", "``)
    are left out: a token for them saves nothing.

    >>> literal_fragments("Goal: {goal}\\nStep {n}, {m}: '{x}'")
    ['Goal: ', '\\nStep ', ": '"]
    """
    pieces = (literal for literal, *_ in string.Formatter().parse(template))
    return [p for p in pieces if len("".join(p.split())) >= 2]


def summary_fragments() -> list[str]:
    """The headings and ``- Field: `` labels of both canonical summary formats."""
    out = []
    for heading, fields in ((SUCCESS_HEADING, SUCCESS_FIELDS), (FAILURE_HEADING, FAILURE_FIELDS)):
        labels = [FIELD_LINE.format(field=field, value="") for field in fields]
        out.append(f"{heading}\n{labels[0]}")
        out.extend(f"\n{label}" for label in labels[1:])
    return out


def prompt_phrases(env: str, extra: Iterable[str] = ()) -> tuple[str, ...]:
    """Every fixed fragment of ``env``'s step prompts, privileged inserts and summaries, plus the
    response tags and ``extra``; sorted and without duplicates."""
    try:
        templates = STEP_TEMPLATES[env]
    except KeyError:
        raise ValueError(f"env: no prompt templates for {env!r}") from None
    fragments = [f for t in templates for f in literal_fragments(t)]
    fragments += [f for t in PRIVILEGED_INSERTS.values() for f in literal_fragments(t)]
    fragments += summary_fragments()
    return tuple(sorted({*fragments, *RESPONSE_TAGS, *extra}))
