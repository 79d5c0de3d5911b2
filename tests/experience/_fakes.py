"""A scripted generator and well-formed summary texts (test-only)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from resail_pipeline.generation import Generation, SamplingParams

GOOD_SUCCESS = (
    "<thinking>planks first</thinking>\nGuidance summary:\n- Minimal plan: logs, planks, button\n"
    "- Critical actions: craft the planks\n- Checks: the button is crafted\n- Avoid: plain planks"
)
GOOD_FAILURE = (
    "Failure analysis:\n- Failure diagnosis: no dark oak planks\n- Useful evidence: logs\n"
    "- Corrected plan: planks, then button\n- Avoid: plain planks"
)


@dataclass(frozen=True)
class Call:
    """One ``generate`` call as the fake received it."""

    prompts: list[str]
    params: SamplingParams
    seeds: list[int] | None


class FakeGenerator:
    """Answers each prompt with ``respond(prompt, call_number)`` (1-based); records every call."""

    policy_id = "fake@000000000000"

    def __init__(self, tokenizer, respond: Callable[[str, int], str], finished: bool = True):
        self.tokenizer = tokenizer
        self.respond = respond
        self.finished = finished
        self.calls: list[Call] = []

    def generate(
        self,
        prompts: Sequence[str],
        params: SamplingParams,
        seeds: Sequence[int] | None = None,
    ) -> list[Generation]:
        self.calls.append(Call(list(prompts), params, None if seeds is None else list(seeds)))
        return [
            Generation(
                text=self.respond(p, len(self.calls)), token_ids=(1,), finished=self.finished
            )
            for p in prompts
        ]


def is_success_prompt(prompt: str) -> bool:
    """Whether ``prompt`` asks for the summary of a successful trajectory."""
    return "one completed trajectory" in prompt
