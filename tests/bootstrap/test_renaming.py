"""Renamed copies of demonstrations: permuted item qualifiers, consistent over everything of a task."""

from __future__ import annotations

import random

import pytest

from resail_pipeline.bootstrap.renaming import (
    Renaming,
    draw_renaming,
    item_names,
    qualifier_words,
)

NAMES = ["oak planks", "birch planks", "oak log", "light gray dye", "gray dye", "stick", "red dye"]


def test_qualifiers_are_never_an_items_kind_nor_free_text():
    # "red" also occurs outside any item name, so it stays; kinds (planks, log, dye) never move
    texts = ["Goal: craft oak planks.", "a red flag", "Crafted 1 minecraft:light_gray_dye"]
    assert qualifier_words(NAMES, texts) == ("birch", "gray", "light", "oak")


def test_a_renaming_is_applied_word_by_word_to_names_and_ids():
    rename = Renaming({"oak": "birch", "birch": "oak", "gray": "light", "light": "gray"})
    text = "craft 4 oak planks using 1 oak log; Crafted 4 minecraft:oak_planks; [birch planks]"
    assert rename(text) == (
        "craft 4 birch planks using 1 birch log; Crafted 4 minecraft:birch_planks; [oak planks]"
    )
    # whole words only, and distinct items stay distinct
    assert rename("oaken light gray dye, gray dye") == "oaken gray light dye, light dye"


def test_a_renaming_must_be_a_permutation():
    with pytest.raises(ValueError, match="permutation"):
        Renaming({"oak": "birch", "birch": "birch"})


def test_draws_are_reproducible_permutations():
    words = ("birch", "gray", "light", "oak")
    a, b = draw_renaming(words, random.Random(3)), draw_renaming(words, random.Random(3))
    assert a == b and sorted(a.mapping.values()) == list(words)
    assert draw_renaming((), random.Random(0))("oak planks") == "oak planks"


def test_textcraft_items_are_named_and_unknown_environments_are_refused():
    names = item_names("textcraft")
    assert "oak planks" in names and len(names) == len(set(names)) > 500
    with pytest.raises(ValueError, match="no item names for 'alfworld'"):
        item_names("alfworld")


def test_each_tasks_renaming_depends_on_its_key_and_id_alone():
    from resail_pipeline.bootstrap.renaming import task_renamings

    words = ("birch", "gray", "light", "oak", "pink", "red")
    some = task_renamings(words, [3, 1, 3], "0/renamed/0")
    more = task_renamings(words, [1, 2, 3], "0/renamed/0")
    assert sorted(some) == [1, 3] and some[3] == more[3] and some[1] == more[1]
    other = task_renamings(words, [1, 2, 3], "0/renamed/1")
    assert [other[t] for t in (1, 2, 3)] != [more[t] for t in (1, 2, 3)]


def test_the_qualifiers_of_demonstrations_leave_their_free_words_alone():
    from resail_pipeline.bootstrap.demonstrations import collect_demonstrations
    from resail_pipeline.bootstrap.renaming import demonstration_qualifiers

    demos = collect_demonstrations(
        "textcraft",
        [1],
        episodes_per_task=2,
        mistake_rate=0.3,
        stalled_share=0.5,
        seed=0,
        progress=False,
    )
    words = demonstration_qualifiers("textcraft", demos)
    assert "acacia" in words and "oak" in words
    assert not {"the", "target", "planks", "craft"} & set(words)
