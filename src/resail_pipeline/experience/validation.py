"""Acceptance of a generated summary (appendix G).

After the ``<thinking>`` block is removed, an accepted summary has the heading matching the
trajectory's outcome and exactly its four fields, each with a non-empty value; no text before the
heading, no extra heading and no copied trajectory. Validation accepts or rejects; it does not
rewrite: an accepted summary is inserted into the privileged prompt as the model wrote it once the
thinking block is removed (appendix B.1). The rules-based summaries are written in the canonical
form, one line per field in template order (:func:`canonical_text`)::

    Guidance summary:
    - Minimal plan: ...
    - Critical actions: ...
    - Checks: ...
    - Avoid: ...

Layout. A *field line* is an unindented ``- Name: value`` (``*`` bullets and markdown bold around
the name are accepted). A field's value may go on over *continuation lines*: indented lines or
list items (``- x``, ``1. x``) that follow it; they are joined to the value with single spaces.
An unindented ``- Name: value`` line whose name is not one of the outcome's four fields is an
unknown field; a short line ending in ``:`` or a markdown ``#`` line is a heading. Field order is
not checked.

Every rejection reason is a string ``"<code>: <detail>"`` with one of the ``REASON_*`` codes.

Copied trajectory. The prompt asks the model to use the evidence "but do not copy the full task,
observations, or command list", while quoting exact action strings is encouraged. The evidence is
read as the sequence of its pieces in prompt order (snapshot lines, then action, result, action,
result, ...; see :meth:`Evidence.units`). A summary copies the trajectory when

1. it reproduces :data:`COPY_RUN` (3) consecutive non-empty pieces verbatim and adjacent: one
   after the other, separated by at most :data:`COPY_GAP` (40) characters that are no letters
   except the record labels "Action", "Result", "Observation" (so renumbering, backticks, quotes
   and arrows do not hide a copy). Three pieces are more than one record (action + result), the
   least a diagnosis needs to quote, and a list of actions alone never matches (results lie
   between them); or
2. it contains, verbatim, one snapshot line or observation of at least :data:`COPY_LONG_CHARS`
   (160) characters: a room description or inventory dump, never a diagnosis.

Comparison is on whitespace-normalised text and case-sensitive.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from resail_pipeline.experience.evidence import Evidence, normalise
from resail_pipeline.prompts.common import OUTCOME_FAILURE, OUTCOME_SUCCESS, OUTCOMES
from resail_pipeline.prompts.parsing import strip_thinking
from resail_pipeline.prompts.render import Summary
from resail_pipeline.prompts.summaries import (
    FAILURE_FIELDS,
    FAILURE_HEADING,
    FIELD_LINE,
    SUCCESS_FIELDS,
    SUCCESS_HEADING,
)

HEADINGS = {OUTCOME_SUCCESS: SUCCESS_HEADING, OUTCOME_FAILURE: FAILURE_HEADING}
FIELDS = {OUTCOME_SUCCESS: SUCCESS_FIELDS, OUTCOME_FAILURE: FAILURE_FIELDS}

REASON_EMPTY = "empty"  # nothing outside the <thinking> block
REASON_MISSING_HEADING = "missing_heading"
REASON_WRONG_HEADING = "wrong_heading"  # the other outcome's heading
REASON_EXTRA_HEADING = "extra_heading"  # any other heading line, or the heading twice
REASON_MISSING_FIELD = "missing_field"
REASON_EMPTY_FIELD = "empty_field"
REASON_DUPLICATE_FIELD = "duplicate_field"
REASON_UNKNOWN_FIELD = "unknown_field"  # includes the other outcome's fields
REASON_UNEXPECTED_LINE = "unexpected_line"  # text before the heading or outside the fields
REASON_COPIED = "copied_evidence"
REASON_TOO_LONG = "too_long"  # more visible text than any summary of the template has

#: Visible characters a summary may have: four fields of a few sentences take under 2,000; the
#: cap (four times a 1,024-token generation) keeps a runaway generation from costing more than it
#: is worth to read.
MAX_SUMMARY_CHARS = 16_384

#: Consecutive evidence pieces that, copied adjacently, count as a copied trajectory.
COPY_RUN = 3
#: Characters of non-letters (or record labels) allowed between adjacent copied pieces.
COPY_GAP = 40
#: A single snapshot line or observation at least this long may not be copied verbatim.
COPY_LONG_CHARS = 160

# "- Field: value" (also "* Field:" and markdown bold around the name), unindented.
#: the longest field name a field line may have
_FIELD_NAME_CHARS = 60
# A heading line: a short label ending in ":" with nothing after it, or a markdown heading.
_HEADING = re.compile(r"^(?:#{1,6}\s*\S.*|[^\s:-][^:]{0,60}:)$")
# A list item continuing a field's value: "- x", "* x", "+ x", "1. x", "2) x".
_LIST_ITEM = re.compile(r"^(?:[-*+]|\d{1,3}[.)])\s")
# Values that are the template's placeholder, not content.
_PLACEHOLDERS = frozenset({"...", "\u2026", "<...>", "[...]", "-"})
_DECORATION = "*_#` "
_GAP = rf"(?:[\W\d_]|(?i:action|result|observation)){{0,{COPY_GAP}}}"
_STRAY_CLOSE = "</thinking>"


@dataclass(frozen=True)
class Validation:
    """The verdict on one generated text.

    Attributes:
        accepted: the text passed every check.
        reasons: the rejection reasons (``"<code>: <detail>"``), empty when accepted.
        summary: the accepted summary as written, without its thinking block and surrounding
            whitespace; ``None`` when rejected.
    """

    accepted: bool
    reasons: tuple[str, ...]
    summary: Summary | None = None


def canonical_text(outcome: str, values: Mapping[str, str] | Sequence[str]) -> str:
    """The heading of ``outcome`` and one ``- Field: value`` line per field, values normalised.

    ``values`` maps each field name to its value, or lists the values in template order.
    """
    fields = FIELDS[outcome]
    if not isinstance(values, Mapping):
        values = dict(zip(fields, values, strict=True))
    lines = [HEADINGS[outcome]]
    lines += [FIELD_LINE.format(field=f, value=normalise(values[f])) for f in fields]
    return "\n".join(lines)


def visible_text(text: str) -> str:
    """``text`` without its reasoning: ``<thinking>`` blocks removed (an unclosed block runs to
    the end), and, when a closing ``</thinking>`` is left without its opening tag, everything up to
    and including it."""
    visible = strip_thinking(text or "")
    if _STRAY_CLOSE in visible:
        visible = visible.rsplit(_STRAY_CLOSE, 1)[1]
    return visible


def _field(line: str) -> tuple[str, str] | None:
    """``(name, value)`` of a field line ``- Name: value`` (``*`` bullets too), else ``None``.

    The name is the text between the bullet and the first colon, without surrounding whitespace
    (a name of only whitespace is kept as one space), at most 60 characters. A scan, linear in the
    line (the regular expression it replaces backtracked cubically over a long run of spaces).
    """
    if not line or line[0] not in "-*":
        return None
    head, colon, value = line[1:].partition(":")
    if not colon or not head:
        return None
    name = head.strip() or head[:1]
    if len(name) > _FIELD_NAME_CHARS:
        return None
    return name, value


def _undecorate(line: str) -> str:
    return line.strip(_DECORATION)


def _heading_of(line: str) -> str | None:
    """The outcome whose heading ``line`` is (markdown decoration ignored), else ``None``."""
    bare = _undecorate(line).lower()
    for outcome, heading in HEADINGS.items():
        if bare in (heading.lower(), heading[:-1].lower()):
            return outcome
    return None


def _short(line: str, width: int = 60) -> str:
    return line if len(line) <= width else line[: width - 3] + "..."


def copied_evidence(text: str, evidence: Evidence) -> list[str]:
    """The copy-rule violations of ``text`` against ``evidence`` (see the module docstring)."""
    flat = normalise(text)
    units = evidence.units()
    found: list[str] = []
    for kind, piece in units:
        if kind != "action" and len(piece) >= COPY_LONG_CHARS and piece in flat:
            found.append(f"{REASON_COPIED}: a {len(piece)}-character {kind} copied verbatim")
            break
    for start in range(len(units) - COPY_RUN + 1):
        window = units[start : start + COPY_RUN]
        pieces = [piece for _, piece in window]
        if not all(piece and piece in flat for piece in pieces):  # cheap filter before the regex
            continue
        if re.search(_GAP.join(re.escape(piece) for piece in pieces), flat):
            kinds = "/".join(kind for kind, _ in window)
            found.append(
                f"{REASON_COPIED}: {COPY_RUN} consecutive evidence pieces ({kinds}) copied "
                f"verbatim, starting with {_short(pieces[0], 40)!r}"
            )
            break
    return found


def _body_reasons(lines: list[str], outcome: str) -> tuple[list[str], dict[str, str]]:
    """Check the lines after the heading; return the reasons and the field values found."""
    fields = FIELDS[outcome]
    reasons: list[str] = []
    values: dict[str, list[str]] = {}
    current: str | None = None  # the field that continuation lines extend
    for raw in lines:
        line = raw.strip()
        if _heading_of(line) is not None:
            current = None  # a repeated or wrong heading: reported by the caller
            continue
        indented = raw[:1].isspace()
        field = None if indented else _field(line)
        if field is not None:
            name = _undecorate(field[0])
            canonical = next((f for f in fields if f.lower() == name.lower()), None)
            current = None
            if canonical is None:
                reasons.append(f"{REASON_UNKNOWN_FIELD}: {name!r} is not one of {list(fields)}")
            elif canonical in values:
                reasons.append(f"{REASON_DUPLICATE_FIELD}: {canonical!r}")
            else:
                values[canonical] = [field[1].strip(" *_")]
                current = canonical
        elif current is not None and (indented or _LIST_ITEM.match(line)):
            values[current].append(line)
        else:
            code = REASON_EXTRA_HEADING if _HEADING.match(line) else REASON_UNEXPECTED_LINE
            reasons.append(f"{code}: {_short(line)!r}")
            current = None
    joined = {name: normalise(" ".join(parts)) for name, parts in values.items()}
    for name in fields:
        if name not in joined:
            reasons.append(f"{REASON_MISSING_FIELD}: {name!r}")
        elif not joined[name] or joined[name].lower() in _PLACEHOLDERS:
            reasons.append(f"{REASON_EMPTY_FIELD}: {name!r}")
    return reasons, joined


def validate_summary(text: str, outcome: str, evidence: Evidence | None = None) -> Validation:
    """Accept or reject ``text`` as the summary of a trajectory with ``outcome``.

    Pure: the same arguments give the same verdict. Without ``evidence`` the copy rule is skipped.
    """
    if outcome not in OUTCOMES:
        raise ValueError(f"outcome: expected one of {OUTCOMES}, got {outcome!r}")
    visible = visible_text(text)
    if len(visible) > MAX_SUMMARY_CHARS:
        return Validation(
            False,
            (f"{REASON_TOO_LONG}: {len(visible)} visible characters, at most {MAX_SUMMARY_CHARS}",),
        )
    lines = [line.rstrip() for line in visible.splitlines() if line.strip()]
    if not lines:
        return Validation(False, (f"{REASON_EMPTY}: no text outside the <thinking> block",))

    heading = HEADINGS[outcome]
    reasons: list[str] = []
    own = [i for i, line in enumerate(lines) if _heading_of(line.strip()) == outcome]
    other = [line for line in lines if _heading_of(line.strip()) not in (None, outcome)]
    if other:
        reasons.append(
            f"{REASON_WRONG_HEADING}: {_undecorate(other[0].strip())!r} in a {outcome} summary "
            f"(expected {heading!r})"
        )
    if not own:
        reasons.append(f"{REASON_MISSING_HEADING}: expected {heading!r}")
    elif len(own) > 1:
        reasons.append(f"{REASON_EXTRA_HEADING}: {heading!r} appears {len(own)} times")
    start = own[0] + 1 if own else 0
    for before in lines[: own[0]] if own else ():
        line = before.strip()
        if _heading_of(line) is None:
            code = REASON_EXTRA_HEADING if _HEADING.match(line) else REASON_UNEXPECTED_LINE
            reasons.append(f"{code}: {_short(line)!r} before {heading!r}")

    body_reasons, _ = _body_reasons(lines[start:], outcome)
    reasons += body_reasons
    if evidence is not None:
        reasons += copied_evidence("\n".join(lines), evidence)
    if reasons:
        return Validation(False, tuple(reasons))
    return Validation(True, (), Summary(outcome, visible_text(text).strip()))
