"""Model text to actions: a pure function that never raises."""

from __future__ import annotations

import random

import pytest

from resail_pipeline.prompts import parse_action, strip_thinking


@pytest.mark.parametrize(
    ("text", "action"),
    [
        ("<thinking>need logs</thinking>\n<action>get 1 oak logs</action>", "get 1 oak logs"),
        (
            "<action>  craft 4 oak planks\n using 1 oak logs </action>",
            "craft 4 oak planks using 1 oak logs",
        ),
        ("<action>a</action> then <action>b</action>", "b"),  # the last tag counts
        ("<thinking><action>inside</action></thinking>", None),  # reasoning is not an action
        ("<thinking>unclosed <action>x</action>", None),  # an unclosed block runs to the end
        ("<think>\n\n</think>\n\n<action>inventory</action>", "inventory"),
        ("<action></action>", None),
        ("<action>   </action>", None),
        ("get 1 oak logs", None),
        ("<action>get 1 oak logs", None),
        ("", None),
    ],
)
def test_parse_action(text, action):
    parsed = parse_action(text)
    assert parsed.action == action
    assert parsed.valid == (action is not None)


def test_strip_thinking_keeps_what_is_outside():
    assert strip_thinking("a<thinking>b</thinking>c<think>d</think>e") == "ace"


def test_random_text_never_raises():
    rng = random.Random(0)
    pieces = ["<action>", "</action>", "<thinking>", "</thinking>", "<think>", "x", " ", "\n", "é"]
    for _ in range(2000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
        parsed = parse_action(text)
        assert parsed.action is None or (parsed.action and parsed.action == parsed.action.strip())


# Hostile model output, each as long as a long generation can get (about 128 KB): the scans are
# linear in it (benchmarks/parsers.py prints the worst case; the regular expression that found
# tags here took 17.5 s on the first one).
HOSTILE = [
    ("<action>" * 16_000, None),
    ("<action>" * 16_000 + "get 1 oak logs</action>", "<action>" * 15_999 + "get 1 oak logs"),
    ("</action>" * 16_000 + "<action>x</action>", "x"),
    ("<thinking>" * 16_000 + "<action>x</action>", None),  # an unclosed block runs to the end
    ("<action>a</action>" * 8_000, "a"),
]


@pytest.mark.parametrize(("text", "action"), HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_output_parses_in_one_pass(text, action):
    parsed = parse_action(text)
    assert parsed.action == (action if action is None else " ".join(action.split()))


def test_tags_pair_left_to_right_and_none_is_invalid():
    assert parse_action("<action>a<action>b</action>").action == "a<action>b"
    assert parse_action("<action>a</action> and <action> b </action>").action == "b"
    assert parse_action("<action></action>").valid is False
    assert parse_action(None).valid is False  # its declared input: str | None
