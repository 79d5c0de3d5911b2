"""The teacher-forced guidance check: both views of every demonstrated step, optionally renamed."""

from __future__ import annotations

import re

import pytest

from resail_pipeline.bootstrap import diagnostics
from resail_pipeline.bootstrap.diagnostics import MISSES, classify_miss, guidance_use


def test_both_views_of_every_step_are_scored(tiny_model, tiny_tokenizer, monkeypatch):
    calls = []

    def plan_reader(model, tokenizer, message, response):  # a fake policy that reads the plan
        calls.append((message, response))
        return "- Corrected plan: " in message, -1.0

    monkeypatch.setattr(diagnostics, "_response_fit", plan_reader)
    fits = guidance_use(tiny_model, tiny_tokenizer, "textcraft", [1, 2], progress=False)
    assert [f.view for f in fits] == ["ordinary", "privileged"]
    assert fits[0].steps == fits[1].steps == len(calls) // 2 > 2
    assert (fits[0].exact, fits[1].exact) == (0.0, 1.0) and fits[0].logp == -1.0
    assert (fits[0].first_exact, fits[1].first_exact) == (0.0, 1.0)
    ordinary, privileged = calls[0::2], calls[1::2]
    for (plain, response), (guided, same) in zip(ordinary, privileged, strict=True):
        assert guided.startswith(plain) and "Failure analysis:" in guided and response == same
        assert response.endswith(tiny_tokenizer.eos_token) and "<action>" in response


def test_first_steps_are_scored_apart(tiny_model, tiny_tokenizer, monkeypatch):
    def first_step_reader(model, tokenizer, message, response):  # right with no history only
        return "Prior to this step" not in message, -1.0

    monkeypatch.setattr(diagnostics, "_response_fit", first_step_reader)
    fits = guidance_use(tiny_model, tiny_tokenizer, "textcraft", [1, 2], progress=False)
    for fit in fits:
        assert fit.first_exact == 1.0
        assert fit.exact == pytest.approx(2 / fit.steps)  # one first step per task


def test_a_renamed_check_renames_prompt_response_and_guidance(
    tiny_model, tiny_tokenizer, monkeypatch
):
    calls = {False: [], True: []}
    for renamed in (False, True):

        def record(model, tokenizer, message, response, renamed=renamed):
            calls[renamed].append((message, response))
            return False, -1.0

        monkeypatch.setattr(diagnostics, "_response_fit", record)
        guidance_use(tiny_model, tiny_tokenizer, "textcraft", [3], renamed=renamed, progress=False)
    assert len(calls[True]) == len(calls[False])
    changed = [a != b for a, b in zip(calls[False], calls[True], strict=True)]
    assert all(changed)


def test_without_commands_only_the_plan_tells_the_answer(tiny_model, tiny_tokenizer, monkeypatch):
    calls = []

    def record(model, tokenizer, message, response):
        calls.append(message)
        return False, -1.0

    monkeypatch.setattr(diagnostics, "_response_fit", record)
    guidance_use(
        tiny_model, tiny_tokenizer, "textcraft", [1, 2], without_commands=True, progress=False
    )
    ordinary, privileged = calls[0::2], calls[1::2]
    assert ordinary and len(ordinary) == len(privileged)
    for message in calls:
        assert "Crafting commands:" not in message
        assert "Available crafting commands for this episode:" not in message
    assert all("- Corrected plan: `" in m for m in privileged)


def test_real_scores_are_probabilities(tiny_model, tiny_tokenizer):
    fits = guidance_use(tiny_model, tiny_tokenizer, "textcraft", [0], progress=False)
    for fit in fits:
        assert 0.0 <= fit.exact <= 1.0 and fit.logp < 0.0 and fit.steps >= 1
        assert list(fit.misses) == list(MISSES)
        assert fit.exact + sum(fit.misses.values()) == pytest.approx(1.0)


PLAN = [
    "get 1 oak logs",
    "craft 4 oak planks using 1 oak logs",
    "craft 1 oak button using 1 oak planks",
]


@pytest.mark.parametrize(
    ("action", "tried", "kind"),
    [
        ("craft 4 oak planks using 1 oak logs", [], "format"),
        (None, [], "no_action"),
        ("craft 8 oak planks using 2 oak logs", [], "quantity"),
        # taken before: a loop, whether or not the plan has it
        ("get 1 oak logs", ["get 1 oak logs"], "repeat"),
        ("get 3 sand", ["get 1 oak logs", "get 3 sand"], "repeat"),
        ("craft 1 oak button using 1 oak planks", ["get 1 oak logs"], "skip"),
        ("get 1 oak logs", [], "skip"),
        ("craft 1 stick using 2 oak planks", ["get 1 oak logs"], "off_plan"),
        ("get 2 oak logs", ["get 1 oak logs"], "off_plan"),
    ],
)
def test_a_miss_is_classified_by_the_first_kind_that_applies(action, tried, kind):
    expert = "craft 4 oak planks using 1 oak logs"
    assert classify_miss(action, expert, PLAN, tried) == kind


def test_misses_are_classified_from_the_greedy_action(tiny_model, tiny_tokenizer, monkeypatch):
    """Fakes of both model calls: every ordinary step is hit, every privileged step missed by
    taking the episode's first action again (on a first step, an action no plan has)."""
    greedy_calls = []

    def fit(model, tokenizer, message, response):
        return "Failure analysis:" not in message, -1.0

    def first_action_again(model, tokenizer, message):
        greedy_calls.append(message)
        first = re.search(r"Action 1: '([^']+)'", message)
        return first[1] if first else "get 1 bedrock"

    monkeypatch.setattr(diagnostics, "_response_fit", fit)
    monkeypatch.setattr(diagnostics, "_greedy_action", first_action_again)
    ordinary, privileged = guidance_use(
        tiny_model, tiny_tokenizer, "textcraft", [1, 2], progress=False
    )
    assert ordinary.exact == 1.0 and set(ordinary.misses.values()) == {0.0}
    assert privileged.exact == 0.0 and len(greedy_calls) == privileged.steps
    first_steps = 2 / privileged.steps
    assert privileged.misses["off_plan"] == pytest.approx(first_steps)
    assert privileged.misses["repeat"] == pytest.approx(1.0 - first_steps)
