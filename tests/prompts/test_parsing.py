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
