"""Text experience extraction templates (appendix G, "Text summary: successful / failed").

The field names are part of the contract checked by the summary validator
(:mod:`resail_pipeline.experience`).
"""

from __future__ import annotations

SUCCESS_HEADING = "Guidance summary:"
SUCCESS_FIELDS = ("Minimal plan", "Critical actions", "Checks", "Avoid")

FAILURE_HEADING = "Failure analysis:"
FAILURE_FIELDS = ("Failure diagnosis", "Useful evidence", "Corrected plan", "Avoid")

SUCCESS_PROMPT = (
    "You are writing concise guidance from one completed trajectory.\n"
    "This guidance will be inserted into a future prompt for the same interactive task.\n"
    "\n"
    "Output ONLY this format:\n"
    "<thinking>\n"
    "...\n"
    "</thinking>\n"
    "\n"
    "Guidance summary:\n"
    "- Minimal plan: ...\n"
    "- Critical actions: ...\n"
    "- Checks: ...\n"
    "- Avoid: ...\n"
    "\n"
    "Rules:\n"
    "- Use the complete trajectory as evidence, but do not copy the full task, observations, or "
    "command list.\n"
    "- Use exact action strings in backticks when they are critical.\n"
    "- Keep it concise and do not invent facts absent from the evidence.\n"
    "- Think briefly inside <thinking> before writing the guidance summary.\n"
    "\n"
    "Task snapshot:\n"
    "{task_snapshot}\n"
    "\n"
    "Successful trajectory evidence:\n"
    "{evidence}"
)

FAILURE_PROMPT = (
    "You are writing concise guidance from one failed trajectory.\n"
    "This guidance will be inserted into a future prompt for the same interactive task.\n"
    "\n"
    "Output ONLY this format:\n"
    "<thinking>\n"
    "...\n"
    "</thinking>\n"
    "\n"
    "Failure analysis:\n"
    "- Failure diagnosis: ...\n"
    "- Useful evidence: ...\n"
    "- Corrected plan: ...\n"
    "- Avoid: ...\n"
    "\n"
    "Rules:\n"
    "- Use the complete failed trajectory as evidence, but do not copy the full task, "
    "observations, or command list.\n"
    "- Distinguish useful partial progress from the action pattern that caused failure.\n"
    "- Use exact action strings in backticks when they are critical.\n"
    "- Keep it concise and do not invent facts absent from the evidence.\n"
    "- Think briefly inside <thinking> before writing the failure analysis.\n"
    "\n"
    "Task snapshot:\n"
    "{task_snapshot}\n"
    "\n"
    "Unsuccessful trajectory evidence:\n"
    "{evidence}"
)

#: One numbered evidence record; records are joined by newlines.
EVIDENCE_RECORD = "{index}. Action: `{action}`\n   Result: {observation}"

#: A summary body: the heading, then one "- Field: value" line per field.
FIELD_LINE = "- {field}: {value}"
