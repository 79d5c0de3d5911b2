"""Nodes of the ``evaluate`` pipeline."""

from __future__ import annotations

import logging
from typing import Any

import pandas as pd

from resail_pipeline.checkpoints import resolve_device
from resail_pipeline.config import ConfigError, Field, build, model_validator
from resail_pipeline.devices import machine_description, off_process
from resail_pipeline.envs import evaluation_splits
from resail_pipeline.evaluation.evaluate import EvalConfig, build_experience, evaluate_policy
from resail_pipeline.evaluation.stats import action_rates, summarize_eval_results
from resail_pipeline.experience import SummarizeConfig
from resail_pipeline.pipelines.common import RunConfig, policy_info
from resail_pipeline.training import TrainConfig, empty_probe_set
from resail_pipeline.training.run import probe_set_with_frozen

logger = logging.getLogger(__name__)


class EvaluateParams(EvalConfig):
    """``params:evaluate``: the evaluation's configuration and the fixed Experience's seed."""

    splits: tuple[str, ...] | None = None
    """The splits evaluated, each task once per decoding seed and view; null: the environment's
    own evaluation splits (TextCraft's ``test``, ALFWorld's ``id`` and ``ood``)."""

    reference_seed: int = Field(1000, ge=0)
    """Decoding seed of the initial policy's reference episodes, one per evaluation task, whose
    summaries make the fixed Experience of the privileged view; none of ``decoding_seeds``."""

    @model_validator(mode="after")
    def _reference_apart(self) -> EvaluateParams:
        """The initial policy's ordinary episodes at a decoding seed equal to ``reference_seed``
        would be its reference episodes again: the privileged view would be paired with the very
        episodes its summaries describe."""
        if self.reference_seed in self.decoding_seeds:
            raise ConfigError(
                f"reference_seed: {self.reference_seed} is one of decoding_seeds "
                f"{list(self.decoding_seeds)}; the reference episodes must be other episodes"
            )
        return self


def evaluate_section(params: dict[str, Any], env: str) -> EvaluateParams:
    """``params:evaluate`` checked, in environment ``env``: ``splits: null`` is the environment's
    own evaluation splits (:func:`~resail_pipeline.envs.evaluation_splits`: TextCraft's ``test``,
    ALFWorld's ``id`` and ``ood``)."""
    fields = dict(params)
    if fields.get("splits") is None:
        fields["splits"] = evaluation_splits(env)
    return build(EvaluateParams, fields, "evaluate")


def eval_config(params: dict[str, Any], env: str) -> EvalConfig:
    """``params:evaluate`` as the evaluation's configuration in environment ``env`` (without
    ``reference_seed``)."""
    checked = evaluate_section(params, env)
    return EvalConfig(**{k: v for k, v in checked if k in EvalConfig.model_fields})


def evaluate_node(
    checkpoint: pd.DataFrame,
    experience: pd.DataFrame,
    evaluate_params: dict[str, Any],
    run_params: dict[str, Any],
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The checkpoint on the test split under every decoding seed and view.

    Returns ``eval_results`` (one row per episode), ``eval_summary`` (success per seed, mean and
    sample SD per view; the shares of valid and repeated actions,
    :func:`~resail_pipeline.evaluation.stats.action_rates`; the ``machine`` and the
    ``generation`` settings they were measured with) and ``eval_steps`` (every step, for
    inspection).
    """
    run = RunConfig.from_params(run_params)
    config = eval_config(evaluate_params, run.env)
    info = policy_info(checkpoint)
    method = "react" if info.cycle == 0 else run.method
    make_env = run.environment(*config.splits)
    journal = run.journal(
        f"evaluate-cycle_{info.cycle}",
        policy=info.sha256,
        config=config.deciding(),
        generation=run.generation_record(),
    )
    with run.generator(info) as generator:
        results, steps = evaluate_policy(
            make_env,
            generator,
            config,
            cycle=info.cycle,
            method=method,
            experience=experience if config.privileged else None,
            journal=journal,
        )
    journal.finish()  # removed once the catalog has saved the results (hooks.JournalHook)
    # how the policy acted, kept beside its success where the per-step table may stay local
    rates = action_rates(results, steps)[["split", "view", "valid", "repeated"]]
    rates = rates.rename(columns={"valid": "valid_actions", "repeated": "repeated_actions"})
    # what the figures depend on beyond the policy: bf16 kernels round differently per processor
    summary = (
        summarize_eval_results(results)
        .merge(rates, on=["split", "view"], how="left")
        .assign(
            machine=machine_description(resolve_device("auto")),
            generation=run.generation_record(),
        )
    )
    return results, summary, steps


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
    config = eval_config(evaluate_params, run.env)
    summarize = build(SummarizeConfig, summarize_params, "summarize")
    make_env = run.environment(*config.splits)
    info = policy_info(checkpoint)
    seed = evaluate_section(evaluate_params, run.env).reference_seed
    journal = run.journal(
        "reference",
        policy=info.sha256,
        config=config.deciding(),
        reference_seed=seed,
        generation=run.generation_record(),
    )
    with run.generator(info) as generator:
        outputs = build_experience(
            make_env, generator, config, summarize, decoding_seed=seed, journal=journal
        )
    journal.finish()  # removed once the catalog has saved the episodes (hooks.JournalHook)
    return outputs


def probe_set_node(
    checkpoint: pd.DataFrame,
    reference_trajectories: pd.DataFrame,
    reference_steps: pd.DataFrame,
    experience: pd.DataFrame,
    train_params: dict[str, Any],
) -> pd.DataFrame:
    """The PI-sensitivity probe's fixed set (appendix D.3): the steps of the first
    ``train.probe.num_trajectories`` reference trajectories in task order with an accepted
    Experience, their logged responses, and the initial model's ordinary-view top-K support
    (``train.probe.top_k``) at every response position, computed on the device and in the
    precision the trainer runs in. With ``train.probe.enabled`` off nothing reads it: it is kept
    empty, without loading the model."""
    config = TrainConfig.from_dict(train_params, "train")
    if not config.probe.enabled:
        logger.info("train.probe.enabled is false: the probe set is left empty")
        return empty_probe_set()
    info = policy_info(checkpoint)
    return off_process(  # on a GPU machine in its own process: Kedro's holds no CUDA context
        probe_set_with_frozen,
        info.path,
        info.policy_id,
        config,
        reference_trajectories,
        reference_steps,
        experience,
    )
