"""A word-level tokenizer trained on an environment's own text.

Environment text has few distinct words (TextCraft: under a thousand), so one token per word,
with its leading space, keeps sequences short and decodes back to the exact text: a pre-tokenizer
splits text into `` ?word``, `` ?digit``, `` ?symbol`` and whitespace runs, and the decoder
concatenates. Digits are single tokens so that any quantity can be written.

Fixed phrases (the literal text of prompt templates, which every prompt repeats) can be added as
single tokens: they are matched in the text before it is split into words, longest first, and
decode to themselves, so encoding stays lossless while prompts get much shorter.
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

UNK = "<|unk|>"
PAD = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = (PAD, IM_START, IM_END, UNK)

#: What the chat template opens a reply with when thinking is disabled.
EMPTY_THINK_BLOCK = "<think>\n\n</think>\n\n"

# Qwen3's message layout; with enable_thinking=False the reply opens with an empty think block.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- endif %}"
    "{%- endif %}"
)

_PIECES = Regex(r" ?[A-Za-z]+| ?[0-9]| ?[^\sA-Za-z0-9]|\n|[^\S\n]+")


def build_word_tokenizer(
    texts: Iterable[str],
    vocab_size: int = 4096,
    min_frequency: int = 1,
    phrases: Iterable[str] = (),
) -> PreTrainedTokenizerFast:
    """Train a word-level tokenizer on ``texts`` and wrap it for ``transformers``.

    The result has a chat template, ``<|im_end|>`` as end-of-sequence and ``<|endoftext|>`` as
    padding (left padding, for batched generation). The chat template's own words are always in
    the vocabulary. Each of ``phrases`` becomes one token (see the module docstring); words are
    counted in the text that remains around them, so the words next to a phrase are known in the
    form they take there.
    """
    phrases = sorted({p for p in phrases if p}, key=lambda p: (-len(p), p))
    if phrases:
        texts = (_cut_phrases(text, phrases) for text in texts)
    tokenizer = Tokenizer(models.WordLevel(unk_token=UNK))
    tokenizer.pre_tokenizer = pre_tokenizers.Split(_PIECES, behavior="isolated")
    tokenizer.decoder = decoders.Fuse()
    trainer = trainers.WordLevelTrainer(
        vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=list(SPECIAL_TOKENS)
    )
    # The chat template's words and every digit, with and without a leading space.
    always = "user\nassistant\nsystem\n<think>\n\n</think>\n\n<thinking> </thinking>\n"
    always += "0123456789 0 1 2 3 4 5 6 7 8 9"
    tokenizer.train_from_iterator([always, *texts], trainer=trainer)
    tokenizer.add_tokens([AddedToken(p, normalized=False, special=False) for p in phrases])
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        unk_token=UNK,
        pad_token=PAD,
        eos_token=IM_END,
        additional_special_tokens=[IM_START],
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )
    wrapped.chat_template = CHAT_TEMPLATE
    return wrapped


def _cut_phrases(text: str, phrases: list[str]) -> str:
    """``text`` with every phrase (longest first) replaced by a line break, which starts a word."""
    for phrase in phrases:
        text = text.replace(phrase, "\n")
    return text
