"""Model extraction: batched over pending trajectories, retried with new seeds up to the bound."""

from __future__ import annotations

import pytest

from resail_pipeline.experience.evidence import build_evidence_table
from resail_pipeline.experience.extraction import (
    extract_with_model,
    extract_with_rules,
    traj_key,
)
from resail_pipeline.generation import SamplingParams, derive_seed

from ._episodes import TEXTCRAFT_FAILURE, TEXTCRAFT_PLAN, TEXTCRAFT_SUCCESS, tables
from ._fakes import GOOD_FAILURE, GOOD_SUCCESS, FakeGenerator, is_success_prompt


@pytest.fixture()
def evidence():
    return build_evidence_table(*tables(TEXTCRAFT_SUCCESS, TEXTCRAFT_FAILURE))


def test_prompts_are_chat_formatted_with_thinking_disabled(tiny_tokenizer, evidence):
    generator = FakeGenerator(tiny_tokenizer, lambda p, a: "")
    extract_with_model(evidence, generator, SamplingParams(), max_attempts=1)
    (call,) = generator.calls
    prompts = call.prompts
    assert prompts[0].startswith(
        "<|im_start|>user\nYou are writing concise guidance from one completed"
    )
    assert prompts[0].endswith("<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert "one failed trajectory" in prompts[1]


def test_accepted_summaries_stop_being_generated(tiny_tokenizer, evidence):
    # the success summary is good at once; the failure summary only from the third attempt on
    def respond(prompt: str, attempt: int) -> str:
        if is_success_prompt(prompt):
            return GOOD_SUCCESS
        return GOOD_FAILURE if attempt >= 3 else "I do not know."

    generator = FakeGenerator(tiny_tokenizer, respond)
    results = extract_with_model(evidence, generator, SamplingParams(seed=5), max_attempts=4)
    assert [len(call.prompts) for call in generator.calls] == [2, 1, 1]
    assert all(call.params == SamplingParams(seed=5) for call in generator.calls)
    success, failure = results
    assert (success.accepted, success.attempts, success.rejection_reasons) == (True, 1, ())
    assert success.summary.startswith("Guidance summary:\n- Minimal plan: logs, planks, button")
    assert (failure.accepted, failure.attempts, failure.source) == (True, 3, "model")
    assert failure.summary.startswith("Failure analysis:\n- Failure diagnosis: no dark oak planks")
    # the reasons of both rejected attempts are kept
    assert [r.split(": ", 2)[:2] for r in failure.rejection_reasons] == [
        ["attempt 1", "missing_heading"],
        ["attempt 1", "unexpected_line"],
        *[["attempt 1", "missing_field"]] * 4,
        ["attempt 2", "missing_heading"],
        ["attempt 2", "unexpected_line"],
        *[["attempt 2", "missing_field"]] * 4,
    ]


def test_every_attempt_of_every_trajectory_has_its_own_seed(tiny_tokenizer, evidence):
    generator = FakeGenerator(tiny_tokenizer, lambda p, a: "no summary")
    extract_with_model(evidence, generator, SamplingParams(seed=5), max_attempts=2)
    success, failure = (traj_key(e.traj_id) for e in evidence)
    assert [call.seeds for call in generator.calls] == [
        [derive_seed(5, 1, success), derive_seed(5, 1, failure)],
        [derive_seed(5, 2, success), derive_seed(5, 2, failure)],
    ]
    # a trajectory's seeds do not depend on the others summarised with it
    alone = FakeGenerator(tiny_tokenizer, lambda p, a: "no summary")
    extract_with_model(evidence[1:], alone, SamplingParams(seed=5), max_attempts=2)
    assert [call.seeds for call in alone.calls] == [
        [derive_seed(5, 1, failure)],
        [derive_seed(5, 2, failure)],
    ]


@pytest.mark.parametrize("max_attempts", [1, 3])
def test_retries_stop_at_the_bound(tiny_tokenizer, evidence, max_attempts):
    generator = FakeGenerator(
        tiny_tokenizer, lambda p, a: "<thinking>Guidance summary: ...", finished=False
    )
    results = extract_with_model(evidence, generator, SamplingParams(), max_attempts=max_attempts)
    assert len(generator.calls) == max_attempts
    assert len({seed for call in generator.calls for seed in call.seeds}) == 2 * max_attempts
    for result in results:
        assert (result.accepted, result.attempts, result.summary) == (False, max_attempts, "")
        assert result.rejection_reasons == tuple(
            reason
            for attempt in range(1, max_attempts + 1)
            for reason in (
                f"attempt {attempt}: empty: no text outside the <thinking> block",
                f"attempt {attempt}: truncated: no end of sequence within the token limit",
            )
        )


def test_copied_trajectories_are_rejected_and_retried(tiny_tokenizer, evidence):
    copy = GOOD_SUCCESS.replace(
        "- Checks: the button is crafted",
        "- Checks: `get 1 dark oak logs` -> Got 1 dark oak logs; `inventory` -> "
        "Inventory: [dark oak logs] (1)",
    )
    generator = FakeGenerator(tiny_tokenizer, lambda p, a: copy if a == 1 else GOOD_SUCCESS)
    (result,) = extract_with_model(evidence[:1], generator, SamplingParams(), max_attempts=2)
    assert (result.accepted, result.attempts) == (True, 2)
    assert result.rejection_reasons[0].startswith("attempt 1: copied_evidence: 3 consecutive")


def test_bad_arguments_are_refused_before_generating(tiny_tokenizer, evidence):
    generator = FakeGenerator(tiny_tokenizer, lambda p, a: GOOD_SUCCESS)
    with pytest.raises(ValueError, match="max_attempts: must be >= 1"):
        extract_with_model(evidence, generator, SamplingParams(), max_attempts=0)
    with pytest.raises(ValueError, match=r"sampling\.n: one summary per trajectory"):
        extract_with_model(evidence, generator, SamplingParams(n=2), max_attempts=1)
    assert generator.calls == []


def test_a_generator_that_loses_prompts_is_an_error(tiny_tokenizer, evidence):
    generator = FakeGenerator(tiny_tokenizer, lambda p, a: GOOD_SUCCESS)
    generator.generate = lambda prompts, params, seeds=None: []
    with pytest.raises(RuntimeError, match="0 generations for 2 prompts"):
        extract_with_model(evidence, generator, SamplingParams(), max_attempts=1)


def test_rules_extraction_is_one_validated_attempt(evidence):
    results = extract_with_rules(evidence, planner=lambda _observation: TEXTCRAFT_PLAN)
    assert [(r.accepted, r.attempts, r.source, r.rejection_reasons) for r in results] == [
        (True, 1, "rules", ()),
        (True, 1, "rules", ()),
    ]
    assert [r.outcome for r in results] == ["success", "failure"]
