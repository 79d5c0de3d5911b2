"""The teacher-forced guidance check: both views of every demonstrated step, optionally renamed."""

from __future__ import annotations

import pytest

from resail_pipeline.bootstrap import diagnostics
from resail_pipeline.bootstrap.diagnostics import guidance_use


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


def test_no_solvable_task_is_an_error(tiny_model, tiny_tokenizer, monkeypatch):
    monkeypatch.setattr(diagnostics, "collect_demonstrations", lambda *a, **k: [])
    with pytest.raises(ValueError, match="task_ids: the planner solves none"):
        guidance_use(tiny_model, tiny_tokenizer, "textcraft", [0], progress=False)
