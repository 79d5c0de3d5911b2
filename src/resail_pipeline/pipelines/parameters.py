"""Every pipeline's parameters, checked in one place before the first node runs.

Each section is read by the same function its nodes read it with, so that an error is the one a
node would raise, only hours earlier: ``evaluate.temperature: -1`` fails before cycle 1 collects,
not after it trains. A top-level key that is no section (``trian`` for ``train``) is an error too.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from resail_pipeline.checkpoints import CheckpointError, load_tokenizer
from resail_pipeline.config import (
    Config,
    ConfigError,
    FolderName,
    build,
    check_int,
    field_docs,
)
from resail_pipeline.experience import SummarizeConfig, configured_planner
from resail_pipeline.experience.extraction import SOURCE_MODEL
from resail_pipeline.generation.cuda import GpuInfo
from resail_pipeline.gui.config import AitzConfig
from resail_pipeline.initial_policy import requested_policy
from resail_pipeline.pipelines.bootstrap.nodes import BootstrapParams, bootstrap_config
from resail_pipeline.pipelines.collect.nodes import CollectParams, collect_config
from resail_pipeline.pipelines.common import RunConfig
from resail_pipeline.pipelines.evaluate.nodes import EvaluateParams, eval_config
from resail_pipeline.pipelines.report.nodes import ReportConfig
from resail_pipeline.pipelines.score.nodes import ScoreParams
from resail_pipeline.prompt_budget import (
    PROMPT_ORDINARY,
    PROMPT_PRIVILEGED,
    PROMPT_SUMMARY,
    PromptEstimate,
    check_prompt_budget,
    estimate_prompt_lengths,
)
from resail_pipeline.schemas import VIEW_PRIVILEGED
from resail_pipeline.tracking import TrackingConfig
from resail_pipeline.training import TrainConfig
from resail_pipeline.training.memory import ModelShape, check_fits, plan_memory

#: the parameter sections, ``params:<section>`` of the pipelines, and the model of each
SECTION_MODELS: dict[str, type[Config]] = {
    "run": RunConfig,
    "bootstrap": BootstrapParams,
    "collect": CollectParams,
    "summarize": SummarizeConfig,
    "score": ScoreParams,
    "train": TrainConfig,
    "evaluate": EvaluateParams,
    "report": ReportConfig,
    "aitz": AitzConfig,
    "tracking": TrackingConfig,
}
SECTIONS = tuple(SECTION_MODELS)


class RuntimeParams(Config):
    """The top-level keys that are no section, set on the command line (``--params``) or in an
    environment's parameters."""

    data_tag: FolderName = ""
    """Appended to the environment's data folder, ``data/<layer>/<env><data_tag>/``: another
    run's data beside the default's (conf/smoke: ``-smoke``); the catalog and the staging folders
    follow it (:class:`~resail_pipeline.hooks.RunConfigLoader`)."""


RUNTIME_KEYS = tuple(RuntimeParams.model_fields)

logger = logging.getLogger(__name__)


def check_parameters(params: Mapping[str, Any]) -> None:
    """Raise :class:`ConfigError` naming the first bad parameter (``section.field: ...``) of ``params``,
    the whole parameter tree of a run."""
    unknown = sorted(set(params) - set(SECTIONS) - set(RUNTIME_KEYS))
    if unknown:
        raise ConfigError(
            f"parameters: unknown top-level key(s) {unknown}; the sections are {list(SECTIONS)}"
        )
    missing = [section for section in SECTIONS if not isinstance(params.get(section), Mapping)]
    if missing:
        raise ConfigError(f"parameters: section(s) {missing} missing or not a mapping")
    build(RuntimeParams, {key: params[key] for key in RUNTIME_KEYS if key in params})
    run = RunConfig.from_params(dict(params["run"]))
    bootstrap_config(params["bootstrap"], run.env)
    collect_config(dict(params["collect"]), dict(params["train"]), run)
    build(SummarizeConfig, dict(params["summarize"]), "summarize")
    build(ScoreParams, dict(params["score"]), "score")
    TrainConfig.from_dict({**params["train"], "method": run.method}, "train")
    eval_config(dict(params["evaluate"]), run.env)
    build(AitzConfig, dict(params["aitz"]), "aitz")
    build(TrackingConfig, dict(params["tracking"]), "tracking")
    build(ReportConfig, dict(params["report"]), "report")


def check_budgets(params: Mapping[str, Any]) -> None:
    """Raise :class:`ConfigError` where a budget does not fit the environment's splits.

    Builds the run's environment (so missing ALFWorld data fails here) and compares every split
    name and count with what the environment has: ``collect.split`` and ``evaluate.splits`` must
    exist, ``evaluate.num_tasks`` must not exceed any evaluated split (evaluation runs each task
    once per seed), an update cannot draw more trajectories than a cycle collects, and
    ``summarize.corrected_plan: walkthrough`` needs an environment that stores walkthroughs. A
    collection larger than its split is allowed: tasks recur, each repeat a trajectory of its own
    (:mod:`resail_pipeline.collection`), which is logged.
    """
    run = RunConfig.from_params(dict(params["run"]))
    collect = collect_config(dict(params["collect"]), dict(params["train"]), run)
    evaluate = eval_config(dict(params["evaluate"]), run.env)
    schedule = TrainConfig.from_dict({**params["train"], "method": run.method}, "train").schedule
    env = run.environment()()
    try:
        configured_planner(
            build(SummarizeConfig, dict(params["summarize"]), "summarize"), lambda: env
        )
    except ValueError as error:
        raise ConfigError(str(error)) from None
    sizes: dict[str, int] = {}
    for field, split in [("collect.split", collect.split)] + [
        ("evaluate.splits", s) for s in evaluate.splits
    ]:
        try:
            sizes[split] = len(env.task_ids(split))
        except ValueError as error:
            raise ConfigError(f"{field}: {error}") from None
    for split in evaluate.splits:
        if evaluate.num_tasks is not None and evaluate.num_tasks > sizes[split]:
            raise ConfigError(
                f"evaluate.num_tasks: {evaluate.num_tasks} is more than the {sizes[split]} tasks "
                f"of {run.env}'s {split!r} split; give at most {sizes[split]}, or null for all"
            )
    if schedule.trajectories_per_update > collect.num_trajectories:
        raise ConfigError(
            f"train.schedule.trajectories_per_update: {schedule.trajectories_per_update} is more "
            f"than the {collect.num_trajectories} trajectories a cycle collects "
            "(collect.num_trajectories); lower it, or collect more"
        )
    available = sizes[collect.split]
    if collect.num_trajectories > available:
        repeats = collect.num_trajectories - available
        logger.info(
            "collect.num_trajectories: %d trajectories per cycle from the %d tasks of %s's %r "
            "split: each task runs %d time(s) per cycle, %d of them once more",
            collect.num_trajectories,
            available,
            run.env,
            collect.split,
            collect.num_trajectories // available,
            repeats % available,
        )


@dataclass(frozen=True)
class RunPrompts:
    """The longest prompts of a run (:func:`estimate_run_prompts`) and the policy that counted them.

    Attributes:
        policy: the initial policy's folder (its tokenizer counted the tokens).
        estimate: the estimated longest prompt of each kind.
    """

    policy: Path
    estimate: PromptEstimate


def estimate_run_prompts(params: Mapping[str, Any]) -> RunPrompts | None:
    """The longest prompt of each kind the run can send, in its initial policy's tokens.

    Estimated from the run's environment, splits and step limit with the initial policy's
    tokenizer (``bootstrap.checkpoint``, else the shipped ``bootstrap.reference``) by
    :func:`~resail_pipeline.prompt_budget.estimate_prompt_lengths`, the privileged view with the
    longest summary the run allows. ``None`` where the run builds its initial policy (its
    tokenizer does not exist yet).

    Raises:
        ConfigError: the policy's tokenizer cannot be loaded, naming the field.
    """
    run = RunConfig.from_params(dict(params["run"]))
    bootstrap = bootstrap_config(params["bootstrap"], run.env)
    policy = requested_policy(bootstrap)
    if policy is None:
        logger.info(
            "prompts: not estimated before the run: the initial policy is built by it, and its "
            "tokenizer does not exist yet (the context length and memory plan are not checked)"
        )
        return None
    source = "bootstrap.checkpoint" if bootstrap.checkpoint is not None else "bootstrap.reference"
    try:
        tokenizer = load_tokenizer(policy)
    except (CheckpointError, OSError, ValueError) as error:
        raise ConfigError(
            f"{source}: the prompts are counted in this policy's tokens before the run, and its "
            f"tokenizer could not be loaded ({error})"
        ) from None
    collect = collect_config(dict(params["collect"]), dict(params["train"]), run)
    evaluate = eval_config(dict(params["evaluate"]), run.env)
    summarize = build(SummarizeConfig, dict(params["summarize"]), "summarize")
    writes_summaries = summarize.source == SOURCE_MODEL
    estimate = estimate_prompt_lengths(
        run.environment(),
        list(dict.fromkeys([collect.split, *evaluate.splits])),
        tokenizer,
        summary_tokens=summarize.sampling.max_new_tokens if writes_summaries else None,
    )
    logger.info("prompt estimate with %s's tokenizer: %s", policy, estimate.describe())
    return RunPrompts(policy=Path(policy), estimate=estimate)


def check_context_length(params: Mapping[str, Any], prompts: RunPrompts | None) -> None:
    """Raise :class:`ConfigError` where the longest prompt the run can send and its new tokens
    would not fit in ``run.generation.vllm.max_model_len``; nothing unless ``run.backend`` is vllm
    and ``max_model_len`` is set, or where no estimate exists (``prompts`` ``None``).

    Only the prompts the run sends count: the ordinary view always; the privileged view where
    ``evaluate.views`` has it or the method caches privileged-view responses (EPD); the summary
    prompt where the policy writes the summaries. The new tokens are the most any generating
    section asks for: ``collect.max_new_tokens``, ``evaluate.max_new_tokens``, with
    ``summarize.source: model`` ``summarize.sampling.max_new_tokens``, and where the method
    caches responses at cycle start ``train.responses.max_tokens``.
    """
    run = RunConfig.from_params(dict(params["run"]))
    max_model_len = run.generation_options.get("max_model_len")
    if run.backend != "vllm" or max_model_len is None:
        return
    check_int("run.generation.vllm.max_model_len", max_model_len, low=1)
    if prompts is None:
        return
    collect = collect_config(dict(params["collect"]), dict(params["train"]), run)
    evaluate = eval_config(dict(params["evaluate"]), run.env)
    summarize = build(SummarizeConfig, dict(params["summarize"]), "summarize")
    train = TrainConfig.from_dict({**params["train"], "method": run.method}, "train")
    writes_summaries = summarize.source == SOURCE_MODEL
    new_tokens = {
        "collect.max_new_tokens": collect.max_new_tokens,
        "evaluate.max_new_tokens": evaluate.max_new_tokens,
    }
    if writes_summaries:
        new_tokens["summarize.sampling.max_new_tokens"] = summarize.sampling.max_new_tokens
    if train.uses_cached_responses:
        new_tokens["train.responses.max_tokens"] = train.responses.max_tokens
    views = [PROMPT_ORDINARY]
    if VIEW_PRIVILEGED in evaluate.views or (
        train.uses_cached_responses and train.cached_response_view == VIEW_PRIVILEGED
    ):
        views.append(PROMPT_PRIVILEGED)
    if writes_summaries:
        views.append(PROMPT_SUMMARY)
    check_prompt_budget(prompts.estimate, max_model_len, new_tokens, views)


def check_training_memory(
    params: Mapping[str, Any], prompts: RunPrompts | None, gpus: Sequence[GpuInfo]
) -> None:
    """Raise :class:`ConfigError` where one training rank's planned peak does not fit a GPU.

    The plan (:func:`~resail_pipeline.training.memory.plan_memory`) is made for the engine as it
    resolves on ``gpus``, the initial policy's shape and the longest privileged prompt of
    ``prompts``, and compared with the smallest of them; nothing is checked without GPUs, without
    an estimate, or for a method that does not train.

    Args:
        params: the run's parameters.
        prompts: the run's longest prompts (:func:`estimate_run_prompts`).
        gpus: the GPUs visible to the trainer.
    """
    if not gpus or prompts is None:
        return
    run = RunConfig.from_params(dict(params["run"]))
    train = TrainConfig.from_dict({**params["train"], "method": run.method}, "train")
    if not train.trains:
        return
    config = train.resolve(num_gpus=len(gpus), bf16_supported=all(g.bf16 for g in gpus))
    plan = plan_memory(
        config,
        ModelShape.from_checkpoint(prompts.policy),
        prompt_tokens=prompts.estimate.privileged,
        insert_tokens=max(0, prompts.estimate.privileged - prompts.estimate.ordinary),
    )
    logger.info("memory plan of one training rank: %s", plan.describe())
    check_fits(plan, min(g.memory for g in gpus), device="the smallest visible GPU")


def _markdown(text: str) -> str:
    """A docstring's reStructuredText as a Markdown table cell."""
    text = re.sub(r":\w+:`~?(?:[\w.]+\.)?([^`]+)`", r"`\1`", text)  # :mod:`~a.b.c` -> `c`
    return text.replace("``", "`").replace("|", "\\|")


def _value(value: Any) -> str:
    if value is None:
        return "null"
    if value == "":
        return '""'
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list | dict):
        return yaml.safe_dump(value, default_flow_style=True, width=10**6).strip()
    return str(value)


def parameter_reference(params: Mapping[str, Any], env: str = "base") -> str:
    """The reference of every parameter (Markdown): per section, each field's key, type, default
    (the model's), value in ``params`` (the parameters of configuration environment ``env``) and
    description, all taken from the models of :data:`SECTION_MODELS`."""
    lines = [
        "# Parameters",
        "",
        "Every parameter of the pipelines, generated from the configuration models by",
        f"`.venv/bin/python scripts/parameter_reference.py --env {env}` (a test holds this page",
        "equal to its output). *Default* is the model's (the paper's setting where the paper",
        f"states one); *conf/{env}* is what that configuration sets, where it differs.",
    ]
    for section, model in {**SECTION_MODELS, "": RuntimeParams}.items():
        title = f"`{section}`" if section else "Top-level keys"
        lines += ["", f"## {title}", "", " ".join(_markdown(model.__doc__ or "").split()), ""]
        lines += [f"| key | type | default | conf/{env} | meaning |", "|---|---|---|---|---|"]
        for row in field_docs(model, section):
            value: Any = params
            for part in row.key.split("."):
                value = value.get(part, _UNSET) if isinstance(value, Mapping) else _UNSET
            shown = "" if value is _UNSET or value == row.default else f"`{_value(value)}`"
            lines.append(
                f"| `{row.key}` | {row.kind} | `{_value(row.default)}` | {shown} | "
                f"{_markdown(row.description)} |"
            )
    return "\n".join(lines) + "\n"


_UNSET = object()
