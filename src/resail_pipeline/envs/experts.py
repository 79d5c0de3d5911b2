"""The environments' experts: what plays the demonstrations an initial policy is cloned from.

An expert (:class:`~resail_pipeline.envs.base.Expert`) follows one episode at a time: its plan
from the state the episode is in, the mistakes a small policy makes there (each environment draws
its own), and what the privileged view should do where that differs. :data:`EXPERTS` holds each
environment's: TextCraft's exact planner (:mod:`~resail_pipeline.envs.textcraft_expert`),
ALFWorld's planner and its searching expert (:mod:`~resail_pipeline.envs.alfworld_expert`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from resail_pipeline.envs import Environment, make_env
from resail_pipeline.envs.alfworld_expert import AlfWorldExpert, AlfWorldSearchExpert
from resail_pipeline.envs.base import Expert
from resail_pipeline.envs.textcraft_expert import TextCraftExpert

__all__ = ["EXPERTS", "PLANNER_ENVS", "SEARCHING_EXPERTS", "expert_env"]

#: Environment name -> (its expert, the options its environment is built with for it).
EXPERTS: dict[str, tuple[Callable[[Any], Expert], dict[str, Any]]] = {
    "textcraft": (TextCraftExpert, {}),
    "alfworld": (AlfWorldExpert, {"expert": True}),
}
#: Environment name -> its searching expert (``data.searching_expert``), built like its expert.
SEARCHING_EXPERTS: dict[str, Callable[[Any], Expert]] = {"alfworld": AlfWorldSearchExpert}
#: Environments with an expert, the only ones demonstrations can be played in.
PLANNER_ENVS = tuple(EXPERTS)


def expert_env(
    env_name: str, env_options: Mapping[str, Any] | None = None, *, searching: bool = False
) -> tuple[Environment, Expert]:
    """``env_name``'s environment, built with ``env_options`` (the adapter's options: where
    ALFWorld's data is, say) and those its expert needs, and the expert (its searching expert,
    :data:`SEARCHING_EXPERTS`, with ``searching``)."""
    if env_name not in EXPERTS:
        raise ValueError(
            f"env: {env_name!r} has no expert to demonstrate with (only {PLANNER_ENVS}); "
            "configure an initial policy checkpoint instead"
        )
    factory, options = EXPERTS[env_name]
    if searching:
        if env_name not in SEARCHING_EXPERTS:
            raise ValueError(f"data.searching_expert: {env_name!r} has no searching expert")
        factory = SEARCHING_EXPERTS[env_name]
    env = make_env(env_name, **{**(env_options or {}), **options})
    return env, factory(env)
