"""Environment adapters behind one protocol, built by name from a registry.

>>> env = make_env("textcraft")
>>> obs = env.reset(env.task_ids("test")[0])
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping
from typing import Any

from resail_pipeline.config import ConfigError
from resail_pipeline.envs.base import (
    END_ENV_DONE,
    END_STEP_LIMIT,
    END_SUCCESS,
    Environment,
    Observation,
    StepResult,
)

# name -> "module:factory". Modules are imported on first use so that an optional
# environment (ALFWorld needs the `alfworld` extra) costs nothing when it is not chosen.
ENV_REGISTRY: dict[str, str] = {
    "textcraft": "resail_pipeline.envs.textcraft:TextCraftEnv",
    "alfworld": "resail_pipeline.envs.alfworld:AlfWorldEnv",
}


def check_env_name(name: str) -> str:
    """Return ``name`` if it is a registered environment, else raise a ``ConfigError`` naming it."""
    if name not in ENV_REGISTRY:
        raise ConfigError(
            f"env: unknown environment {name!r}; choose one of {sorted(ENV_REGISTRY)}"
        )
    return name


def _factory(name: str) -> Any:
    module_name, _, factory = ENV_REGISTRY[check_env_name(name)].partition(":")
    return getattr(importlib.import_module(module_name), factory)


def check_env_options(name: str, options: Mapping[str, Any], source: str = "env_options") -> None:
    """Raise a ``ConfigError`` naming ``source`` if the ``name`` adapter takes no option of
    ``options``, without building it (their values are checked when it is built)."""
    parameters = inspect.signature(_factory(name)).parameters
    known = sorted(p for p in parameters if p != "self")
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise ConfigError(
            f"{source}: the {name} environment takes no option(s) {unknown}; known: {known}"
        )


def make_env(name: str, **kwargs: Any) -> Environment:
    """Build the environment registered as ``name`` with adapter-specific ``kwargs``."""
    return _factory(name)(**kwargs)


__all__ = [
    "END_ENV_DONE",
    "END_STEP_LIMIT",
    "END_SUCCESS",
    "ENV_REGISTRY",
    "Environment",
    "Observation",
    "StepResult",
    "check_env_name",
    "check_env_options",
    "make_env",
]
