"""Renamed copies of demonstrations: the same tasks over consistently permuted item words.

A small policy trained on the planner's demonstrations of the ``train`` tasks learns their recipes
by heart, and then has no reason to read the crafting commands of its prompt, nor the plan a
summary hands it: on a ``train`` task both only repeat what it knows. On a renamed copy of a task,
the words that qualify items (``oak``, ``pink``, ``polished``, ...) are permuted, one permutation
per task and copy, through the whole text the policy sees and answers: every prompt, every
summary and every expert action. ``oak planks`` may become ``crimson planks``, with the recipe of
the original, so the memorised recipe is wrong and the only way to the expert's action is to read
the commands or the guidance, as on a ``test`` task.

Only *qualifier* words are permuted: words of item names that are never the last word of an item
name (the item's kind: ``planks``, ``dye``, ``slab``) and never occur in the text outside item
names. Kinds stay, so tag ingredients (``planks`` is any ``... planks``) keep their meaning; the
permutation is a bijection, so distinct items stay distinct. Item ids (``minecraft:oak_planks``)
are renamed with the names, as observations quote them.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from resail_pipeline.bootstrap.demonstrations import Demonstration
from resail_pipeline.prompts import render_user_message


def _textcraft_item_names() -> list[str]:
    from resail_pipeline.envs.textcraft import item_ids, item_name

    return [item_name(i) for i in item_ids()]


#: env name -> the names of every item of the environment's data (as observations write them).
ITEM_NAMES: dict[str, Callable[[], list[str]]] = {"textcraft": _textcraft_item_names}


def item_names(env: str) -> list[str]:
    """The item names of ``env``; an environment without a registered list raises naming it."""
    try:
        return ITEM_NAMES[env]()
    except KeyError:
        raise ValueError(f"env: no item names for {env!r}; add them to ITEM_NAMES") from None


#: A word: a run of letters (ids join an item's words with ``_``, after ``minecraft:``).
_LETTERS = re.compile(r"[A-Za-z]+")


def free_words(text: str, names: dict[str, list[tuple[str, ...]]]) -> set[str]:
    """The words of ``text`` outside every occurrence of an item name.

    ``names`` maps a first word to the names (as word tuples) starting with it, longest first; a
    name occurs where its words follow each other joined by single spaces or underscores.
    """
    words = list(_LETTERS.finditer(text))
    free: set[str] = set()
    i = 0
    while i < len(words):
        matched = 0
        for name in names.get(words[i].group(), ()):
            k = len(name)
            if i + k <= len(words) and all(
                words[i + j].group() == name[j]
                and text[words[i + j - 1].end() : words[i + j].start()] in (" ", "_")
                for j in range(1, k)
            ):
                matched = k
                break
        if matched:
            i += matched
        else:
            free.add(words[i].group())
            i += 1
    return free


def qualifier_words(names: Sequence[str], texts: Iterable[str]) -> tuple[str, ...]:
    """The words of ``names`` that may be permuted (see the module docstring), sorted.

    ``texts`` are the texts the renaming will apply to: a word found in them outside every item
    name is left alone.
    """
    kinds = {name.split()[-1] for name in names}
    words = {w for name in names for w in name.split()[:-1]} - kinds
    by_first: dict[str, list[tuple[str, ...]]] = {}
    for name in sorted(set(names), key=lambda n: -len(n.split())):
        parts = tuple(name.split())
        by_first.setdefault(parts[0], []).append(parts)
    free: set[str] = set()
    for text in set(texts):
        free |= free_words(text, by_first)
    return tuple(sorted(words - free))


@dataclass(frozen=True)
class Renaming:
    """A permutation of qualifier words, applied to text word by word (a word: a run of letters).

    Attributes:
        mapping: word -> its replacement (a bijection on its keys).
    """

    mapping: dict[str, str]

    def __post_init__(self) -> None:
        if sorted(self.mapping) != sorted(self.mapping.values()):
            raise ValueError("renaming: the mapping must be a permutation of its words")

    def __call__(self, text: str) -> str:
        mapping = self.mapping
        return _LETTERS.sub(lambda m: mapping.get(m.group(), m.group()), text)


def draw_renaming(words: Sequence[str], rng: random.Random) -> Renaming:
    """A uniformly random permutation of ``words``."""
    shuffled = list(words)
    rng.shuffle(shuffled)
    return Renaming(dict(zip(words, shuffled, strict=True)))


def demonstration_qualifiers(env: str, demos: Sequence[Demonstration]) -> tuple[str, ...]:
    """:func:`qualifier_words` of ``env``'s items over everything ``demos`` show the policy: every
    rendered step message and every summary."""
    texts = (
        text
        for demo in demos
        for text in (demo.summary.text, *(render_user_message(s.history) for s in demo.steps))
    )
    return qualifier_words(item_names(env), texts)


def task_renamings(words: Sequence[str], task_ids: Iterable[int], key: str) -> dict[int, Renaming]:
    """One :func:`draw_renaming` per task, each seeded by ``f"{key}/{task_id}"`` alone."""
    return {t: draw_renaming(words, random.Random(f"{key}/{t}")) for t in sorted(set(task_ids))}
