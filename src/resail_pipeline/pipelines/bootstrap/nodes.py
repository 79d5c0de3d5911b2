"""Nodes of the ``bootstrap`` pipeline."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from resail_pipeline.bootstrap.config import BootstrapConfig
from resail_pipeline.config import Field, build
from resail_pipeline.initial_policy import resolve_initial_policy
from resail_pipeline.pipelines.common import RunConfig


class BootstrapParams(BootstrapConfig):
    """``params:bootstrap``: the initial policy's configuration (its ``env`` is the run's) and
    where the node keeps the policies it builds."""

    build_dir: str = Field("data/06_models/bootstrap", min_length=1)
    """Folder of the built policies, one folder per configuration: the same settings reuse a
    build, other settings never replace it."""


def bootstrap_config(params: Mapping[str, Any], env: str) -> BootstrapConfig:
    """``params:bootstrap`` as the initial policy's configuration in the run's environment
    ``env`` (without the node's ``build_dir``)."""
    checked = build(BootstrapParams, {**params, "env": env}, "bootstrap")
    return BootstrapConfig(**{k: v for k, v in checked if k in BootstrapConfig.model_fields})


def bootstrap_node(bootstrap_params: dict[str, Any], run_params: dict[str, Any]) -> pd.DataFrame:
    """The initial policy's manifest: a configured checkpoint, else the shipped reference policy,
    else one built by behaviour cloning on expert demonstrations in the run's environment, built
    with the run's ``env_options`` (cached under ``build_dir``: the same settings reuse the
    built policy)."""
    run = RunConfig.from_params(run_params)
    build_dir = build(BootstrapParams, {**bootstrap_params, "env": run.env}, "bootstrap").build_dir
    info = resolve_initial_policy(
        bootstrap_config(bootstrap_params, run.env), build_dir, env_options=run.env_options
    )
    return info.to_frame()
