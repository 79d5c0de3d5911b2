"""Nodes of the ``bootstrap`` pipeline."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from resail_pipeline.bootstrap.config import BootstrapConfig
from resail_pipeline.initial_policy import resolve_initial_policy
from resail_pipeline.pipelines.common import RunConfig

#: ``params:bootstrap`` keys that are not :class:`BootstrapConfig` fields.
NODE_KEYS = ("build_dir",)


def bootstrap_config(bootstrap_params: Mapping[str, Any], env: str) -> BootstrapConfig:
    """``params:bootstrap`` (without its :data:`NODE_KEYS`) as the initial policy's
    configuration in the run's environment ``env``."""
    fields = {k: v for k, v in bootstrap_params.items() if k not in NODE_KEYS}
    return BootstrapConfig.from_dict({**fields, "env": env})


def bootstrap_node(bootstrap_params: dict[str, Any], run_params: dict[str, Any]) -> pd.DataFrame:
    """The initial policy's manifest: a configured checkpoint, else the shipped reference policy,
    else one built by behaviour cloning on expert demonstrations in the run's environment, built
    with the run's ``env_options`` (cached under ``build_dir``: the same settings reuse the
    built policy)."""
    run = RunConfig.from_params(run_params)
    config = bootstrap_config(bootstrap_params, run.env)
    info = resolve_initial_policy(
        config, bootstrap_params["build_dir"], env_options=run.env_options
    )
    return info.to_frame()
