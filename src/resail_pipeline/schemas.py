"""The Parquet data contracts: the columns every hand-off between pipelines must have, and the
kind of value each holds (``bool``, ``int``, ``float``, ``str``, ``list``; ``?``: nulls allowed).

One row per ... is given in each table's comment. Producers may add columns; consumers rely only
on the ones listed, and every reader checks them (:func:`check_columns`): a ``success`` column of
the strings ``"True"``/``"False"`` is an error naming the file, never a trajectory read as a
success. Identifiers:

- ``traj_id``: ``"{cycle}/{env}/{split}/{task_id}/{decoding_seed}"`` for collected episodes, unique
  within a dataset; a trajectory's steps are numbered ``t = 0 .. num_steps - 1``.
- ``policy_id``: the checkpoint that acted or scored, as recorded in its manifest
  (``"{name}@{sha256[:12]}"``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from pandas.api import types as ptypes

#: value kinds of a column; ``?`` after a kind: nulls allowed
BOOL, INT, FLOAT, STR, LIST = "bool", "int", "float", "str", "list"

#: the columns of a logged AITZ step, which the training pool extends
_AITZ_STEPS = {
    "episode_id": STR,
    "step_id": INT,
    "instruction": STR,
    "image_path": STR,
    "action": STR,
    "boxes": STR,
    "history": LIST,
}

#: the two views an evaluation row's ``view`` is one of (appendix D.2): the deployment view, without
#: privileged information, and the view given the task's fixed Experience
VIEW_ORDINARY = "ordinary"
VIEW_PRIVILEGED = "privileged"
VIEWS = (VIEW_ORDINARY, VIEW_PRIVILEGED)

SCHEMAS: dict[str, dict[str, str]] = {
    # one row per task of a cycle's collection or of an evaluation
    "tasks": {"env": STR, "split": STR, "task_id": INT, "seed": INT},
    # one row per trajectory; `task` is the goal / task description shown to the agent
    "trajectories": {
        "traj_id": STR,
        "cycle": INT,
        "method": STR,
        "env": STR,
        "split": STR,
        "task_id": INT,
        "decoding_seed": INT,
        "policy_id": STR,
        "task": STR,
        "success": BOOL,
        "num_steps": INT,
        "end_reason": STR,
    },
    # one row per interaction step; `prompt` is the ordinary-view user message (before the chat
    # template), `admissible_actions` is null where the environment lists none, `action` is ""
    # where the response did not parse; a missing text reads as empty
    "steps": {
        "traj_id": STR,
        "t": INT,
        "observation": STR + "?",
        "admissible_actions": LIST + "?",
        "prompt": STR,
        "response": STR + "?",
        "action": STR + "?",
        "action_valid": BOOL,
        "next_observation": STR + "?",
        "reward": FLOAT,
        "done": BOOL,
    },
    # one row per trajectory; `summary` is the accepted text (empty when rejected)
    "summaries": {
        "traj_id": STR,
        "outcome": STR,
        "summary": STR,
        "attempts": INT,
        "accepted": BOOL,
        "source": STR,
        "rejection_reasons": LIST,
    },
    # one row per (step, sample): training responses with their behaviour log-probs
    "responses": {
        "traj_id": STR,
        "t": INT,
        "sample": INT,
        "response": STR,
        "token_ids": LIST,
        "logprobs": LIST,
        "policy_id": STR,
    },
    # one row per scored step: the frozen teacher's PI sensitivity
    "scores": {"traj_id": STR, "t": INT, "scorer_id": STR, "jsd": FLOAT, "tokens": INT},
    # one row per update
    "train_metrics": {
        "update": INT,
        "loss": FLOAT,
        "loss_sel": FLOAT,
        "loss_ret": FLOAT,
        "num_steps": INT,
        "num_selected": INT,
        "selected_per_traj": LIST,
        "score_selected_mean": FLOAT,
        "score_all_mean": FLOAT,
        "tokens": INT,
        "seconds_response": FLOAT,
        "seconds_scoring": FLOAT,
        "seconds_optimisation": FLOAT,
        "seconds_other": FLOAT,
    },
    # one row per (update, selected step)
    "selected_steps": {"update": INT, "traj_id": STR, "t": INT, "score": FLOAT},
    # one row per checkpoint: where it is and where it came from
    "checkpoints": {
        "policy_id": STR,
        "path": STR,
        "parent_id": STR,
        "method": STR,
        "cycle": INT,
        "sha256": STR,
    },
    # one row per evaluation episode
    "eval_results": {
        "policy_id": STR,
        "cycle": INT,
        "method": STR,
        "env": STR,
        "split": STR,
        "view": STR,
        "decoding_seed": INT,
        "task_id": INT,
        "success": BOOL,
        "num_steps": INT,
    },
    # one row per probe step (appendix D.3), built once from the initial policy's reference
    # episodes: token ids of both views' chat prompts and of the logged response, and `support`,
    # one list of K token ids per response token: the ordinary-view top-K of the initial model
    # `policy_id` at that position
    "probe_set": {
        "traj_id": STR,
        "t": INT,
        "ordinary_ids": LIST,
        "privileged_ids": LIST,
        "response_ids": LIST,
        "support": LIST,
        "policy_id": STR,
    },
    # one row per (update, probe step): the current student's PI sensitivity on the fixed probe
    # (appendix D.3), support fixed to the initial model's ordinary-view top-20 + tail; update 0
    # is the cycle start; `jsd` is the step's mean over its `tokens` response tokens, in nats
    "probe": {
        "experiment": STR,
        "method": STR,
        "cycle": INT,
        "update": INT,
        "traj_id": STR,
        "t": INT,
        "jsd": FLOAT,
        "tokens": INT,
    },
    # one row per (checkpoint, split, view)
    "eval_summary": {
        "policy_id": STR,
        "cycle": INT,
        "method": STR,
        "env": STR,
        "split": STR,
        "view": STR,
        "success_per_seed": LIST,
        "mean": FLOAT,
        "sd": FLOAT,
        "episodes": INT,
    },
    # one row per logged AITZ step of a split; `action`, `boxes`: JSON; `history`: earlier actions
    "aitz_steps": dict(_AITZ_STEPS),
    # one row per step of the training pool; `position`: its episode's place in the draw order
    "aitz_pool": {**_AITZ_STEPS, "position": INT},
    # one row per warm-start update of the initial policy (no rows for a given checkpoint)
    "aitz_warm_start": {"update": INT, "loss": FLOAT},
    # one row per pool step: the initial policy's diagnostic attempt, exact match or not
    "aitz_attempts": {
        "episode_id": STR,
        "step_id": INT,
        "response": STR,
        "token_ids": LIST,
        "correct": BOOL,
    },
    # one row per pool episode; `remark` is empty when `source` is "dropped"
    "aitz_summaries": {"episode_id": STR, "remark": STR, "attempts": INT, "source": STR},
    # one row per scored pool step: PI sensitivity along its attempt's `tokens` tokens, in nats
    "aitz_scores": {"episode_id": STR, "step_id": INT, "jsd": FLOAT, "tokens": INT},
    # one row per scored pool step in pool order: the filter's decision
    "aitz_filter": {"episode_id": STR, "step_id": INT, "jsd": FLOAT, "kept": BOOL},
    # one row per OEL update of a run (`oel` or `oel_sgs`)
    "aitz_train_metrics": {
        "run": STR,
        "update": INT,
        "loss": FLOAT,
        "num_steps": INT,
        "tokens": INT,
        "seconds": FLOAT,
    },
    # one row per monitoring point of a run: accuracy on the fixed subset's non-stop `steps`
    "aitz_curve": {"run": STR, "update": INT, "accuracy": FLOAT, "steps": INT},
}


class SchemaError(ValueError):
    """A table lacks columns its contract requires."""


def _kind_error(series: pd.Series, kind: str) -> str | None:
    """Why ``series`` does not hold values of ``kind`` (``None``: it does)."""
    nullable = kind.endswith("?")
    kind = kind.rstrip("?")
    dtype = series.dtype
    if kind == BOOL:
        return None if ptypes.is_bool_dtype(dtype) else f"dtype {dtype}"
    numeric = ptypes.is_integer_dtype(dtype) or (kind == FLOAT and ptypes.is_float_dtype(dtype))
    if kind in (INT, FLOAT):
        return None if numeric and not ptypes.is_bool_dtype(dtype) else f"dtype {dtype}"
    allowed = (str,) if kind == STR else (list, tuple, np.ndarray)
    if not (ptypes.is_object_dtype(dtype) or ptypes.is_string_dtype(dtype)):
        return f"dtype {dtype}"
    for value in series:
        if not isinstance(value, allowed) and not (nullable and is_null(value)):
            return f"a {type(value).__name__} value {value!r:.60}"
    return None


def is_null(value: object) -> bool:
    """``None``, NaN, ``pd.NA`` or ``NaT``: a missing Parquet value."""
    return value is None or (ptypes.is_scalar(value) and bool(pd.isna(value)))


#: the pandas dtype of an empty column of each kind
_EMPTY_DTYPES = {BOOL: "bool", INT: "int64", FLOAT: "float64", STR: "object", LIST: "object"}


def empty_table(schema: str) -> pd.DataFrame:
    """A table of ``schema`` with no rows: its columns, each of its kind's dtype."""
    return pd.DataFrame(
        {
            column: pd.Series(dtype=_EMPTY_DTYPES[kind.rstrip("?")])
            for column, kind in SCHEMAS[schema].items()
        }
    )


def check_columns(frame: pd.DataFrame, schema: str, source: str = "<frame>") -> pd.DataFrame:
    """Return ``frame`` if it has every column of ``schema`` with values of the column's kind;
    else raise naming what is missing or mistyped (and ``source``). An empty frame's types are
    not checked: it has no value to misread."""
    missing = [c for c in SCHEMAS[schema] if c not in frame.columns]
    if missing:
        raise SchemaError(
            f"{source}: {schema} table is missing column(s) {missing}; "
            f"expected at least {list(SCHEMAS[schema])}"
        )
    if frame.empty:
        return frame
    for column, kind in SCHEMAS[schema].items():
        problem = _kind_error(frame[column], kind)
        if problem is not None:
            raise SchemaError(
                f"{source}: column {column!r} of the {schema} table must hold "
                f"{kind.rstrip('?')} values{' or nulls' if kind.endswith('?') else ''}, "
                f"found {problem}"
            )
    return frame
