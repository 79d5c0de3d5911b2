"""The initial policy's tokenizer, trained on the environment's own text.

Its corpus is every prompt the demonstrations render (ordinary view at every step, and the
privileged insert of each demonstration's summary), the demonstration responses, the environment's
own text (:data:`ENV_TEXTS`: every item name of its data, so that no word of a held-out task is
unknown; for ALFWorld also the engine's messages and the task sentences), and the rules-based
summaries of the forms planner demonstrations rarely take (:func:`rare_summaries`), so that no
fixed word of a summary is unknown either. The fixed fragments of the templates are single tokens
(:func:`resail_pipeline.prompts.phrases.prompt_phrases`), as is the empty think block that the chat
template opens each reply with.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace

from transformers import PreTrainedTokenizerFast

from resail_pipeline.bootstrap.demonstrations import Demonstration, demonstration_response
from resail_pipeline.envs import END_ENV_DONE, END_STEP_LIMIT
from resail_pipeline.experience.evidence import EvidenceRecord
from resail_pipeline.experience.rules import env_rules, rules_summary
from resail_pipeline.modeling import build_word_tokenizer
from resail_pipeline.modeling.tokenizer import EMPTY_THINK_BLOCK
from resail_pipeline.prompts import (
    OUTCOME_FAILURE,
    OUTCOME_SUCCESS,
    Summary,
    privileged_insert,
    render_user_message,
)
from resail_pipeline.prompts.phrases import prompt_phrases


def _textcraft_items() -> list[str]:
    """Each item as the text writes it: ``[name]`` in an inventory, the id after ``Crafted``, and
    `` name`` after a quantity."""
    from resail_pipeline.envs.textcraft import item_ids, item_name

    return [f"[{item_name(i)}] {i} {item_name(i)}" for i in item_ids()]


def _alfworld_items() -> list[str]:
    """Every ALFRED object and receptacle class as the game writes it (``desklamp``,
    ``sinkbasin``), and the instance numbers that follow them."""
    from alfworld.gen import constants

    names = sorted({name.lower() for name in (*constants.OBJECTS, *constants.RECEPTACLES)})
    return [" ".join(names), " ".join(str(i) for i in range(1, 51))]


#: A right-hand side of the engine's text grammar (a JSON string in ``alfred.twl2``).
_GRAMMAR_RHS = re.compile(r'"rhs":\s*("(?:[^"\\]|\\.)*")')
#: What the engine fills in: ``{o.name}`` (a name), ``#look.feedback#`` (another rule).
_GRAMMAR_SLOT = re.compile(r"\{[^{}]*\}|#[^#\s]*#")


def _alfworld_texts() -> list[str]:
    """:func:`_alfworld_items`, every message of the engine's text grammar (``alfred.twl2``: what
    it answers to each command, ``You heat the ...``, ``This is a normal ...``) and every task
    sentence of ALFWorld's goal library (``cool some ... and put it in ...``), their slots taken
    out: the words a game of any task type can show, though the demonstrations of one task type
    never do."""
    from importlib.resources import files

    from alfworld.gen import goal_library

    grammar = (files("alfworld") / "data" / "alfred.twl2").read_text()
    messages = [json.loads(m) for m in _GRAMMAR_RHS.findall(grammar)]
    sentences = [t for goal in goal_library.gdict.values() for t in goal["templates"]]
    words = {
        word
        for text in messages + sentences
        for word in _GRAMMAR_SLOT.sub(" ", text.replace("UNKNOWN GOAL", "")).split()
    }
    # each word as it starts a line or a quote ("close") and as it follows a space (" The")
    return [*_alfworld_items(), *(f"{word}\n {word}" for word in sorted(words))]


#: env name -> lines of the environment's own text that its policy must read whatever the
#: demonstrations show: every item of its data (so that no word of a held-out task is unknown)
#: and, for ALFWorld, the engine's messages and the task sentences.
ENV_TEXTS: dict[str, Callable[[], list[str]]] = {
    "textcraft": _textcraft_items,
    "alfworld": _alfworld_texts,
}


def rare_summaries(demo: Demonstration) -> list[Summary]:
    """Rules-based summaries, on ``demo``'s evidence, of the forms demonstrations rarely take.

    A policy's own episodes take them: no accepted action, or no parsable one (named as such only
    where there is no plan); nothing rejected; only information actions; the planner finding no
    plan; an ending other than the step limit.
    Each form's fixed wording then reaches the tokenizer's corpus.
    """
    evidence = demo.evidence
    observation = evidence.records[0].observation
    unparsed = EvidenceRecord("", observation, False)
    info = sorted(env_rules(demo.env).information_actions)
    accepted = [r for r in evidence.records if r.valid and r.action and r.action not in info]
    looked = [EvidenceRecord(a, observation, True) for a in info[:1]]
    variants = [
        (OUTCOME_FAILURE, (unparsed,), END_STEP_LIMIT, _no_plan),  # without a plan, quoted
        (OUTCOME_FAILURE, (*looked, *accepted[:1]), END_ENV_DONE, None),
        (OUTCOME_FAILURE, evidence.records, "", _no_plan),
        (OUTCOME_SUCCESS, (unparsed,), END_ENV_DONE, None),
        (OUTCOME_SUCCESS, (*looked, *accepted[-1:]), END_ENV_DONE, None),
        (OUTCOME_SUCCESS, tuple(accepted[-1:]), END_ENV_DONE, None),
    ]
    return [
        Summary(
            outcome,
            rules_summary(
                replace(evidence, outcome=outcome, records=records, end_reason=end),
                planner=planner,
            ),
        )
        for outcome, records, end, planner in variants
        if records
    ]


def _no_plan(_observation: str) -> None:
    return None


def environment_corpus(env: str, demos: Sequence[Demonstration]) -> Iterator[str]:
    """The tokenizer's training text (see the module docstring)."""
    try:
        texts = ENV_TEXTS[env]
    except KeyError:
        raise ValueError(f"env: no vocabulary for {env!r}; add it to ENV_TEXTS") from None
    yield from texts()
    for demo in demos:
        for step in demo.steps:
            yield render_user_message(step.history)
            yield demonstration_response(step.expert)
    for demo in demos:
        yield privileged_insert(demo.summary)
    if demos:
        yield from (privileged_insert(summary) for summary in rare_summaries(demos[0]))


def train_tokenizer(
    env: str,
    demos: Sequence[Demonstration],
    *,
    vocab_size: int,
    min_frequency: int = 1,
) -> PreTrainedTokenizerFast:
    """A word-level tokenizer for ``env`` with the template fragments as single tokens."""
    return build_word_tokenizer(
        environment_corpus(env, demos),
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        phrases=prompt_phrases(env, extra=(EMPTY_THINK_BLOCK,)),
    )
