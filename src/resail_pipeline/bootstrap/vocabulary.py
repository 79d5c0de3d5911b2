"""The initial policy's tokenizer, trained on the environment's own text.

Its corpus is every prompt the demonstrations render (ordinary view at every step, and the
privileged insert of each demonstration's summary), the demonstration responses, and every item name of the environment's data, so
that no word of a held-out task is unknown. The fixed fragments of the templates are single tokens
(:func:`resail_pipeline.prompts.phrases.prompt_phrases`), as is the empty think block that the chat
template opens each reply with.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from transformers import PreTrainedTokenizerFast

from resail_pipeline.bootstrap.demonstrations import Demonstration, demonstration_response
from resail_pipeline.modeling import build_word_tokenizer
from resail_pipeline.modeling.tokenizer import EMPTY_THINK_BLOCK
from resail_pipeline.prompts import privileged_insert, render_user_message
from resail_pipeline.prompts.phrases import prompt_phrases


def _textcraft_items() -> list[str]:
    """Each item as the text writes it: ``[name]`` in an inventory, the id after ``Crafted``, and
    `` name`` after a quantity."""
    from resail_pipeline.envs.textcraft import item_ids, item_name

    return [f"[{item_name(i)}] {i} {item_name(i)}" for i in item_ids()]


#: env name -> lines naming every item of the environment's data.
ITEM_TEXTS: dict[str, Callable[[], list[str]]] = {"textcraft": _textcraft_items}


def environment_corpus(env: str, demos: Sequence[Demonstration]) -> Iterator[str]:
    """The tokenizer's training text (see the module docstring)."""
    try:
        items = ITEM_TEXTS[env]
    except KeyError:
        raise ValueError(f"env: no item vocabulary for {env!r}; add it to ITEM_TEXTS") from None
    yield from items()
    for demo in demos:
        for step in demo.steps:
            yield render_user_message(step.history)
            yield demonstration_response(step.expert)
    for demo in demos:
        yield privileged_insert(demo.summary)


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
