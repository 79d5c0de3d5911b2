"""Every pipeline's parameters, checked in one place before the first node runs.

Each section is read by the same function its nodes read it with, so that an error is the one a
node would raise, only hours earlier: ``evaluate.temperature: -1`` fails before cycle 1 collects,
not after it trains. A top-level key that is no section (``trian`` for ``train``) is an error too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from resail_pipeline.bootstrap.config import BootstrapConfig
from resail_pipeline.config import ConfigError, build, check_folder_name
from resail_pipeline.experience import SummarizeConfig
from resail_pipeline.gui.config import AitzConfig
from resail_pipeline.pipelines.bootstrap.nodes import NODE_KEYS as BOOTSTRAP_NODE_KEYS
from resail_pipeline.pipelines.collect.nodes import collect_config
from resail_pipeline.pipelines.common import RunConfig
from resail_pipeline.pipelines.evaluate.nodes import eval_config
from resail_pipeline.pipelines.report.nodes import REPORT_KEYS
from resail_pipeline.pipelines.score.nodes import ScoreParams
from resail_pipeline.training import TrainConfig

#: the parameter sections: ``params:<section>`` of the pipelines
SECTIONS = (
    "run",
    "bootstrap",
    "collect",
    "summarize",
    "score",
    "train",
    "evaluate",
    "report",
    "aitz",
)
#: top-level keys that are no section: the data folder's tag, given on the command line
RUNTIME_KEYS = ("data_tag",)


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
    if "data_tag" in params:
        check_folder_name(params["data_tag"], "data_tag", empty=True)
    run = RunConfig.from_params(dict(params["run"]))
    bootstrap = {k: v for k, v in params["bootstrap"].items() if k not in BOOTSTRAP_NODE_KEYS}
    BootstrapConfig.from_dict({**bootstrap, "env": run.env})
    collect_config(dict(params["collect"]), dict(params["train"]), run)
    build(SummarizeConfig, dict(params["summarize"]), "summarize")
    build(ScoreParams, dict(params["score"]), "score")
    TrainConfig.from_dict({**params["train"], "method": run.method}, "train")
    eval_config(dict(params["evaluate"]))
    build(AitzConfig, dict(params["aitz"]), "aitz")
    extra = sorted(set(params["report"]) - set(REPORT_KEYS))
    if extra:
        raise ConfigError(f"report: unknown parameter(s) {extra}; known: {list(REPORT_KEYS)}")
