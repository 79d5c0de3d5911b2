"""Property-based fuzzing of what reads model output: the action parser and the summary validator
never raise and return well-formed results, on generated text and on hostile text up to 1 MB
(their worst-case times: benchmarks/parsers.py)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from resail_pipeline.experience.validation import validate_summary
from resail_pipeline.prompts import parse_action, strip_thinking

# the pieces model output is made of, so that tags and fields meet far more often than in
# uniformly random text
PIECES = [
    "<action>",
    "</action>",
    "<thinking>",
    "</thinking>",
    "<think>",
    "</think>",
    "Guidance summary:",
    "Failure analysis:",
    "- Minimal plan:",
    "- Checks:",
    "* **Avoid:**",
    "- ",
    ":",
    "\n",
    "  ",
    "get 1 oak logs",
    "craft 4 oak planks using 1 oak logs",
]
TEXT = st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=20)), max_size=60).map("".join)
# one piece repeated to a length of up to 1 MB, then a tail that may close what it opened
HOSTILE = st.builds(
    lambda piece, size, tail: (piece * (size // len(piece) + 1))[:size] + tail,
    st.sampled_from([*PIECES, " ", "-"]),
    st.integers(min_value=1, max_value=1 << 20),
    st.sampled_from(["", "x", "</action>", "\n- Checks: x"]),
)


def _check(text: str) -> None:
    parsed = parse_action(text)
    assert parsed.action is None or (parsed.action and parsed.action == parsed.action.strip())
    assert isinstance(strip_thinking(text), str)
    for outcome in ("success", "failure"):
        verdict = validate_summary(text, outcome)
        assert verdict.accepted == (verdict.summary is not None) == (not verdict.reasons)


@settings(max_examples=10_000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(TEXT)
def test_generated_model_output_never_breaks_the_readers(text):
    _check(text)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(HOSTILE)
def test_hostile_output_up_to_a_megabyte_never_breaks_the_readers(text):
    _check(text)
