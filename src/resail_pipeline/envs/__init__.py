"""Environment adapters behind one protocol, built by name from a registry.

>>> env = make_env("textcraft")
>>> obs = env.reset(env.task_ids("test")[0])
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping
from pathlib import Path
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


#: name -> ``"module:function"`` that provides the data an environment reads, for an adapter built
#: with the given options (see :func:`provide_env_data`). Environments whose data ships with their
#: package (TextCraft) have no entry.
ENV_DATA: dict[str, str] = {
    "alfworld": "resail_pipeline.envs.alfworld_games:provide_default_games",
}


#: name -> the splits a policy is reported on (appendix D.2), each apart: TextCraft's ``test``;
#: ALFWorld's ``id`` (valid_seen) and ``ood`` (valid_unseen), the paper's two ALFWorld columns.
EVALUATION_SPLITS: dict[str, tuple[str, ...]] = {
    "textcraft": ("test",),
    "alfworld": ("id", "ood"),
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


def provide_env_data(name: str, options: Mapping[str, Any]) -> Path | None:
    """Make sure the data that ``name`` environments built with ``options`` read is there, before
    the first one is built: ALFWorld, where the options name no ``data_path`` and
    ``ALFWORLD_DATA`` is unset, gets the generated default set (written on first use, then
    reused; :func:`~resail_pipeline.envs.alfworld_games.provide_default_games`). Returns the data
    root provided, ``None`` where there was nothing to do."""
    if check_env_name(name) not in ENV_DATA:
        return None
    module_name, _, function = ENV_DATA[name].partition(":")
    return getattr(importlib.import_module(module_name), function)(options)


def evaluation_splits(name: str) -> tuple[str, ...]:
    """The splits a ``name`` policy is evaluated on (:data:`EVALUATION_SPLITS`)."""
    return EVALUATION_SPLITS[check_env_name(name)]


def make_env(name: str, **kwargs: Any) -> Environment:
    """Build the environment registered as ``name`` with adapter-specific ``kwargs``."""
    return _factory(name)(**kwargs)


__all__ = [
    "END_ENV_DONE",
    "END_STEP_LIMIT",
    "END_SUCCESS",
    "ENV_DATA",
    "ENV_REGISTRY",
    "EVALUATION_SPLITS",
    "Environment",
    "Observation",
    "StepResult",
    "check_env_name",
    "check_env_options",
    "evaluation_splits",
    "make_env",
    "provide_env_data",
]
