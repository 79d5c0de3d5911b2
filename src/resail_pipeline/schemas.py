"""The Parquet data contracts: the columns every hand-off between pipelines must have.

One row per ... is given in each table's comment. Producers may add columns; consumers rely only
on the ones listed. Identifiers:

- ``traj_id``: ``"{cycle}/{env}/{split}/{task_id}/{decoding_seed}"`` for collected episodes, unique
  within a dataset; a trajectory's steps are numbered ``t = 0 .. num_steps - 1``.
- ``policy_id``: the checkpoint that acted or scored, as recorded in its manifest
  (``"{name}@{sha256[:12]}"``).
"""

from __future__ import annotations

import pandas as pd

SCHEMAS: dict[str, tuple[str, ...]] = {
    # one row per task of a cycle's collection or of an evaluation
    "tasks": ("env", "split", "task_id", "seed"),
    # one row per trajectory; `task` is the goal / task description shown to the agent
    "trajectories": (
        "traj_id",
        "cycle",
        "method",
        "env",
        "split",
        "task_id",
        "decoding_seed",
        "policy_id",
        "task",
        "success",
        "num_steps",
        "end_reason",
    ),
    # one row per interaction step; `prompt` is the ordinary-view user message (before the chat
    # template), `admissible_actions` is null where the environment lists none
    "steps": (
        "traj_id",
        "t",
        "observation",
        "admissible_actions",
        "prompt",
        "response",
        "action",
        "action_valid",
        "next_observation",
        "reward",
        "done",
    ),
    # one row per trajectory; `summary` is the accepted text (empty when rejected)
    "summaries": (
        "traj_id",
        "outcome",
        "summary",
        "attempts",
        "accepted",
        "source",
        "rejection_reasons",
    ),
    # one row per (step, sample): training responses with their behaviour log-probs
    "responses": (
        "traj_id",
        "t",
        "sample",
        "response",
        "token_ids",
        "logprobs",
        "policy_id",
    ),
    # one row per scored step: the frozen teacher's PI sensitivity
    "scores": ("traj_id", "t", "scorer_id", "jsd", "tokens"),
    # one row per update
    "train_metrics": (
        "update",
        "loss",
        "loss_sel",
        "loss_ret",
        "num_steps",
        "num_selected",
        "selected_per_traj",
        "score_selected_mean",
        "score_all_mean",
        "tokens",
        "seconds_response",
        "seconds_scoring",
        "seconds_optimisation",
        "seconds_other",
    ),
    # one row per (update, selected step)
    "selected_steps": ("update", "traj_id", "t", "score"),
    # one row per checkpoint: where it is and where it came from
    "checkpoints": ("policy_id", "path", "parent_id", "method", "cycle", "sha256"),
    # one row per evaluation episode
    "eval_results": (
        "policy_id",
        "cycle",
        "method",
        "env",
        "split",
        "view",
        "decoding_seed",
        "task_id",
        "success",
        "num_steps",
    ),
    # one row per (update, probe step): the current student's PI sensitivity on the fixed probe
    # (appendix D.3), support fixed to the initial model's ordinary-view top-20 + tail; update 0
    # is the cycle start; `jsd` is the step's mean over its `tokens` response tokens, in nats
    "probe": ("experiment", "method", "cycle", "update", "traj_id", "t", "jsd", "tokens"),
    # one row per (checkpoint, split, view)
    "eval_summary": (
        "policy_id",
        "cycle",
        "method",
        "env",
        "split",
        "view",
        "success_per_seed",
        "mean",
        "sd",
        "episodes",
    ),
}


class SchemaError(ValueError):
    """A table lacks columns its contract requires."""


def check_columns(frame: pd.DataFrame, schema: str, source: str = "<frame>") -> pd.DataFrame:
    """Return ``frame`` if it has every column of ``schema``; else raise naming what is missing."""
    missing = [c for c in SCHEMAS[schema] if c not in frame.columns]
    if missing:
        raise SchemaError(
            f"{source}: {schema} table is missing column(s) {missing}; "
            f"expected at least {list(SCHEMAS[schema])}"
        )
    return frame
