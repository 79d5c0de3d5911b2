"""Nodes of the ``evaluate`` pipeline."""

from __future__ import annotations

from typing import Any

import pandas as pd

from resail_pipeline.evaluation.evaluate import EvalConfig, build_experience, evaluate_policy
from resail_pipeline.evaluation.stats import summarize_eval_results
from resail_pipeline.experience import SummarizeConfig
from resail_pipeline.pipelines.common import RunConfig, dataclass_from_params, policy_info

#: ``params:evaluate`` keys that are not :class:`EvalConfig` fields.
_REFERENCE_KEYS = ("reference_seed",)


def _eval_config(params: dict[str, Any]) -> EvalConfig:
    fields = {k: v for k, v in params.items() if k not in _REFERENCE_KEYS}
    return dataclass_from_params(EvalConfig, fields, "evaluate")


def evaluate_node(
    checkpoint: pd.DataFrame,
    experience: pd.DataFrame,
    evaluate_params: dict[str, Any],
    run_params: dict[str, Any],
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The checkpoint on the test split under every decoding seed and view.

    Returns ``eval_results`` (one row per episode), ``eval_summary`` (success per seed, mean and
    sample SD per view) and ``eval_steps`` (every step, for inspection).
    """
    run = RunConfig.from_params(run_params)
    config = _eval_config(evaluate_params)
    info = policy_info(checkpoint)
    method = "react" if info.cycle == 0 else run.method
    make_env = run.environment(*config.splits)
    results, steps = evaluate_policy(
        make_env,
        run.generator(info),
        config,
        cycle=info.cycle,
        method=method,
        experience=experience if config.privileged else None,
    )
    return results, summarize_eval_results(results), steps


def experience_node(
    checkpoint: pd.DataFrame,
    evaluate_params: dict[str, Any],
    summarize_params: dict[str, Any],
    run_params: dict[str, Any],
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The fixed Experience (appendix D.2): one reference episode of the initial policy per test
    task, ordinary view, summarised as a cycle's trajectories are.

    Returns the reference ``trajectories`` and ``steps`` and the ``experience`` table (their
    ``summaries`` with each trajectory's ``task_id``).
    """
    run = RunConfig.from_params(run_params)
    config = _eval_config(evaluate_params)
    summarize = SummarizeConfig.from_dict(summarize_params)
    make_env = run.environment(*config.splits)
    return build_experience(
        make_env,
        run.generator(policy_info(checkpoint)),
        config,
        summarize,
        decoding_seed=int(evaluate_params["reference_seed"]),
    )
