"""The summary validator: what it accepts, each malformed case it rejects, the copy rule."""

from __future__ import annotations

import re

import pytest

from resail_pipeline.experience.evidence import build_evidence_table
from resail_pipeline.experience.validation import (
    COPY_LONG_CHARS,
    REASON_COPIED,
    REASON_DUPLICATE_FIELD,
    REASON_EMPTY,
    REASON_EMPTY_FIELD,
    REASON_EXTRA_HEADING,
    REASON_MISSING_FIELD,
    REASON_MISSING_HEADING,
    REASON_UNEXPECTED_LINE,
    REASON_UNKNOWN_FIELD,
    REASON_WRONG_HEADING,
    validate_summary,
)

from ._episodes import ALFWORLD_SUCCESS, TEXTCRAFT_FAILURE, TEXTCRAFT_SUCCESS, Episode, tables

SUCCESS = (
    "<thinking>\nThe planks had to be crafted first.\n</thinking>\n"
    "\n"
    "Guidance summary:\n"
    "- Minimal plan: `get 1 dark oak logs`, `craft 4 dark oak planks using 1 dark oak logs`, "
    "`craft 1 dark oak button using 1 dark oak planks`\n"
    "- Critical actions: craft the planks before the button\n"
    "- Checks: the button is crafted from dark oak planks, not planks\n"
    "- Avoid: `craft 1 dark oak button using 1 planks`\n"
)
SUCCESS_CANONICAL = "\n".join(
    line for line in SUCCESS.split("</thinking>\n")[1].strip().splitlines() if line
)

FAILURE = (
    "<thinking>short</thinking>\n"
    "Failure analysis:\n"
    "- Failure diagnosis: the button was crafted from planks that were never made\n"
    "- Useful evidence: `get 1 dark oak logs` worked\n"
    "- Corrected plan: craft 4 dark oak planks from the logs, then the button\n"
    "- Avoid: repeating a craft that returned Could not find enough items\n"
)


def evidence_of(episode: Episode):
    return build_evidence_table(*tables(episode))[0]


def codes(verdict) -> list[str]:
    return [reason.split(":", 1)[0] for reason in verdict.reasons]


def test_accepts_a_well_formed_success_summary_in_canonical_form():
    verdict = validate_summary(SUCCESS, "success", evidence_of(TEXTCRAFT_SUCCESS))
    assert verdict.accepted, verdict.reasons
    assert verdict.reasons == ()
    assert verdict.summary.outcome == "success"
    assert verdict.summary.text == SUCCESS_CANONICAL


def test_accepts_a_well_formed_failure_summary():
    verdict = validate_summary(FAILURE, "failure", evidence_of(TEXTCRAFT_FAILURE))
    assert verdict.accepted, verdict.reasons
    assert verdict.summary.text.splitlines() == [
        "Failure analysis:",
        "- Failure diagnosis: the button was crafted from planks that were never made",
        "- Useful evidence: `get 1 dark oak logs` worked",
        "- Corrected plan: craft 4 dark oak planks from the logs, then the button",
        "- Avoid: repeating a craft that returned Could not find enough items",
    ]


def test_accepts_markdown_lists_under_a_field_and_any_field_order():
    text = (
        "**Failure analysis:**\n"
        "* **Useful evidence:** `get 1 dark oak logs` worked\n"
        "- Failure diagnosis:\n"
        "  the planks were never crafted,\n"
        "  so the button could not be made\n"
        "- Corrected plan:\n"
        "1. `craft 4 dark oak planks using 1 dark oak logs`\n"
        "2. `craft 1 dark oak button using 1 dark oak planks`\n"
        "- Avoid: `craft 1 dark oak button using 1 planks`\n"
    )
    verdict = validate_summary(f"<thinking>plan first</thinking>\n{text}", "failure")
    assert verdict.accepted, verdict.reasons
    # accepted as the model wrote it, once the thinking block is removed: never rewritten
    assert verdict.summary.text == text.strip()
    assert validate_summary(verdict.summary.text, "failure").summary == verdict.summary


@pytest.mark.parametrize(
    ("text", "outcome", "expected"),
    [
        pytest.param(
            SUCCESS.replace(
                "- Checks: the button is crafted from dark oak planks, not planks\n", ""
            ),
            "success",
            [REASON_MISSING_FIELD],
            id="missing field",
        ),
        pytest.param(
            SUCCESS.replace(
                "- Checks: the button is crafted from dark oak planks, not planks", "- Checks:"
            ),
            "success",
            [REASON_EMPTY_FIELD],
            id="empty field",
        ),
        pytest.param(
            SUCCESS.replace(
                "- Checks: the button is crafted from dark oak planks, not planks", "- Checks: ..."
            ),
            "success",
            [REASON_EMPTY_FIELD],
            id="template placeholder",
        ),
        pytest.param(
            SUCCESS.replace("Guidance summary:", "Failure analysis:"),
            "success",
            [REASON_WRONG_HEADING, REASON_MISSING_HEADING],
            id="wrong heading for the outcome",
        ),
        pytest.param(
            SUCCESS,
            "failure",
            [REASON_WRONG_HEADING, REASON_MISSING_HEADING]
            + [REASON_UNKNOWN_FIELD] * 3  # "Avoid" is a field of both
            + [REASON_MISSING_FIELD] * 3,
            id="success summary for a failure",
        ),
        pytest.param(
            SUCCESS + "\nNotes:\n",
            "success",
            [REASON_EXTRA_HEADING],
            id="extra heading after the fields",
        ),
        pytest.param(
            SUCCESS.replace("- Avoid:", "## Details\n- Avoid:"),
            "success",
            [REASON_EXTRA_HEADING],
            id="extra markdown heading",
        ),
        pytest.param(
            SUCCESS.replace("</thinking>\n", "</thinking>\nSummary:\n"),
            "success",
            [REASON_EXTRA_HEADING],
            id="extra heading before",
        ),
        pytest.param(
            SUCCESS + "Guidance summary:\n",
            "success",
            [REASON_EXTRA_HEADING],
            id="heading twice",
        ),
        pytest.param(
            SUCCESS.replace("</thinking>\n", "</thinking>\nHere is what I found.\n"),
            "success",
            [REASON_UNEXPECTED_LINE],
            id="prose before the heading",
        ),
        pytest.param(
            SUCCESS + "This completes the summary.\n",
            "success",
            [REASON_UNEXPECTED_LINE],
            id="prose after the fields",
        ),
        pytest.param(
            SUCCESS + "- Notes: none\n",
            "success",
            [REASON_UNKNOWN_FIELD],
            id="fifth field",
        ),
        pytest.param(
            SUCCESS.replace("- Checks:", "- Corrected plan:"),
            "success",
            [REASON_UNKNOWN_FIELD, REASON_MISSING_FIELD],
            id="the other outcome's field",
        ),
        pytest.param(
            SUCCESS + "- Avoid: nothing else\n",
            "success",
            [REASON_DUPLICATE_FIELD],
            id="duplicate field",
        ),
        pytest.param(
            "<thinking>\n" + SUCCESS.split("</thinking>\n")[1] + "</thinking>\n",
            "success",
            [REASON_EMPTY],
            id="summary only inside thinking",
        ),
        pytest.param(
            "<thinking>\n" + SUCCESS.split("</thinking>\n")[1],
            "success",
            [REASON_EMPTY],
            id="unclosed thinking",
        ),
        pytest.param("", "success", [REASON_EMPTY], id="empty text"),
    ],
)
def test_rejects_each_malformed_case(text, outcome, expected):
    verdict = validate_summary(text, outcome)
    assert not verdict.accepted
    assert verdict.summary is None
    assert codes(verdict) == expected, verdict.reasons


def test_reasons_name_what_is_wrong():
    verdict = validate_summary(SUCCESS.replace("- Checks:", "- Corrected plan:"), "success")
    assert verdict.reasons == (
        "unknown_field: 'Corrected plan' is not one of "
        "['Minimal plan', 'Critical actions', 'Checks', 'Avoid']",
        "missing_field: 'Checks'",
    )


def test_a_closing_tag_without_its_opening_hides_what_precedes_it():
    text = "The planks first.\n</thinking>\n" + SUCCESS.split("</thinking>\n")[1]
    assert validate_summary(text, "success").accepted


def with_fields(outcome_heading: str, *values: str) -> str:
    names = (
        ("Minimal plan", "Critical actions", "Checks", "Avoid")
        if outcome_heading.startswith("Guidance")
        else ("Failure diagnosis", "Useful evidence", "Corrected plan", "Avoid")
    )
    return "\n".join(
        [outcome_heading, *(f"- {n}: {v}" for n, v in zip(names, values, strict=True))]
    )


def test_copied_records_are_rejected_however_they_are_numbered():
    evidence = evidence_of(TEXTCRAFT_SUCCESS)
    copied = (
        "1) `get 1 dark oak logs` -> Got 1 dark oak logs; "
        "2) `inventory` -> Inventory: [dark oak logs] (1)"
    )
    verdict = validate_summary(
        with_fields("Guidance summary:", copied, "x", "y", "z"), "success", evidence
    )
    assert codes(verdict) == [REASON_COPIED]
    assert "action/observation/action" in verdict.reasons[0]
    # the record labels of the prompt do not hide a copy either
    labelled = "Action: `get 1 dark oak logs` Result: Got 1 dark oak logs Action: `inventory`"
    verdict = validate_summary(
        with_fields("Guidance summary:", "a", labelled, "y", "z"), "success", evidence
    )
    assert codes(verdict) == [REASON_COPIED]


def test_copied_snapshot_lines_are_rejected():
    evidence = evidence_of(TEXTCRAFT_SUCCESS)
    copied = (
        "Crafting commands: craft 1 dark oak fence gate using 4 stick, 2 dark oak planks, "
        "craft 3 dark oak sign using 6 dark oak planks, 1 stick"
    )
    verdict = validate_summary(
        with_fields("Guidance summary:", "a", "b", copied, "z"), "success", evidence
    )
    assert codes(verdict) == [REASON_COPIED]
    assert "snapshot/snapshot/snapshot" in verdict.reasons[0]


def test_quoting_actions_and_one_record_is_not_a_copy():
    evidence = evidence_of(TEXTCRAFT_SUCCESS)
    plan = ", then ".join(
        f"`{a}`"
        for a in (
            "get 1 dark oak logs",
            "craft 4 dark oak planks using 1 dark oak logs",
            "craft 1 dark oak button using 1 dark oak planks",
        )
    )
    # even joined without words: the results lie between the actions in the evidence
    bare = "; ".join(f"`{r.action}`" for r in evidence.records)
    diagnosis = (
        "`craft 1 dark oak button using 1 planks` -> "
        "Could not find enough items to craft minecraft:dark_oak_button"
    )
    text = with_fields("Guidance summary:", plan, bare, diagnosis, "`inventory` is not needed")
    verdict = validate_summary(text, "success", evidence)
    assert verdict.accepted, verdict.reasons


@pytest.mark.parametrize("delta", [-1, 0])
def test_a_long_observation_may_not_be_copied_verbatim(delta):
    room = "You see " + ", ".join(f"a drawer {i}" for i in range(40))
    room = room[: COPY_LONG_CHARS + delta]
    episode = Episode(
        traj_id="c/alfworld/train/1/0",
        env="alfworld",
        task=ALFWORLD_SUCCESS.task,
        initial=ALFWORLD_SUCCESS.initial,
        success=True,
        end_reason="success",
        steps=(("look", True, room),),
    )
    text = with_fields("Guidance summary:", "`look`", "`look`", f'it said "{room}"', "nothing")
    verdict = validate_summary(text, "success", evidence_of(episode))
    assert verdict.accepted is (delta < 0)
    if delta == 0:
        assert verdict.reasons == (
            f"copied_evidence: a {COPY_LONG_CHARS}-character observation copied verbatim",
        )


def test_unknown_outcome_is_an_error():
    with pytest.raises(ValueError, match="outcome: expected one of"):
        validate_summary(SUCCESS, "partial")


# the regular expression the field scan replaced, for equivalence on ordinary lines
_OLD_FIELD = re.compile(r"^[-*]\s*(?P<name>[^:]{1,60}?)\s*:(?P<value>.*)$")


@pytest.mark.parametrize(
    "line",
    [
        "- Minimal plan: get 1 oak logs",
        "* **Checks:** the inventory",
        "-Avoid:x",
        "- : empty name",
        "-:",
        "-   :   spaces only",
        "- a: b: c",
        "- " + "n" * 60 + ": value",
        "- " + "n" * 61 + ": too long a name",
        "-   " + "n" * 60 + "   : padded",
        "- no colon here",
        "+ Minimal plan: another bullet",
        "Minimal plan: no bullet",
        "",
    ],
)
def test_the_field_scan_reads_lines_as_the_expression_did(line):
    from resail_pipeline.experience.validation import _field

    old = _OLD_FIELD.match(line)
    assert _field(line) == (None if old is None else (old["name"], old["value"]))


@pytest.mark.parametrize("size", [10_000, 100_000])
def test_a_long_run_of_spaces_is_rejected_in_one_pass(size):
    """``"-" + " " * 10_000 + "x"`` took 9.4 s, and 100,000 spaces more than 100 s, with the
    expression (benchmarks/parsers.py prints the worst case now)."""
    verdict = validate_summary("-" + " " * size + "x", "success")
    assert not verdict.accepted
    verdict = validate_summary("Guidance summary:\n- Checks:" + " " * size + "x", "success")
    assert not verdict.accepted
    if size > 16_384:  # beyond the cap, rejected before any line is read
        assert verdict.reasons == (f"too_long: {size + 28} visible characters, at most 16384",)
    else:
        assert any(r.startswith("missing_field") for r in verdict.reasons)


def test_the_cap_counts_visible_text_only():
    from resail_pipeline.experience.validation import MAX_SUMMARY_CHARS

    thinking = "<thinking>" + "x" * 2 * MAX_SUMMARY_CHARS + "</thinking>\n"
    assert validate_summary(thinking + SUCCESS, "success").accepted
