"""Pieces shared by the text-agent templates of appendix G: the privileged insert.

Ordinary inputs omit the insert; privileged inputs append one outcome-matched summary after a
blank line, at the end of the user message, exactly as the appendix-G boxes lay them out.
"""

from __future__ import annotations

OUTCOME_SUCCESS = "success"
OUTCOME_FAILURE = "failure"
OUTCOMES = (OUTCOME_SUCCESS, OUTCOME_FAILURE)

PRIVILEGED_INSERT_SUCCESS = (
    "A successful trajectory for the current task:\n"
    "\n"
    "{summary}\n"
    "\n"
    "Use this information as a reference and continue solving the original task."
)

PRIVILEGED_INSERT_FAILURE = (
    "A failed trajectory for the current task:\n"
    "\n"
    "{summary}\n"
    "\n"
    "Use this information as a reference and continue solving the original task."
)

PRIVILEGED_INSERTS = {
    OUTCOME_SUCCESS: PRIVILEGED_INSERT_SUCCESS,
    OUTCOME_FAILURE: PRIVILEGED_INSERT_FAILURE,
}

#: Between the ordinary message and the privileged insert.
INSERT_SEPARATOR = "\n\n"
