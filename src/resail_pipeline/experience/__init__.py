"""Experience summaries: evidence limits, validation, rules-based and model extraction.

The layers, bottom up:

- :mod:`.evidence`: the task snapshot and the numbered action/result records of a trajectory,
  with the appendix-G limits, and the outcome-specific prompt;
- :mod:`.validation`: acceptance of a summary text and its canonical form;
- :mod:`.rules`: summaries built from the trajectory itself (``source: rules``), with
  :mod:`.alfworld_rules`, ALFWorld's own (what the episode saw and what follows from it);
- :mod:`.extraction`: model extraction with bounded retries, and rules extraction;
- :mod:`.summarize`: the ``summaries`` table of a cycle and the summaries its consumers may use.
"""

from resail_pipeline.experience.evidence import (
    Evidence,
    EvidenceRecord,
    build_evidence,
    build_evidence_table,
)
from resail_pipeline.experience.extraction import (
    Extraction,
    extract_with_model,
    extract_with_rules,
)
from resail_pipeline.experience.rules import rules_summary
from resail_pipeline.experience.summarize import (
    SummarizeConfig,
    configured_planner,
    summarize_trajectories,
    usable_summaries,
)
from resail_pipeline.experience.validation import Validation, validate_summary

__all__ = [
    "Evidence",
    "EvidenceRecord",
    "Extraction",
    "SummarizeConfig",
    "Validation",
    "build_evidence",
    "build_evidence_table",
    "configured_planner",
    "extract_with_model",
    "extract_with_rules",
    "rules_summary",
    "summarize_trajectories",
    "usable_summaries",
    "validate_summary",
]
