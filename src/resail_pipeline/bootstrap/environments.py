"""What building an initial policy covers in each environment, in one place.

:data:`BUILDABLE_ENVS` maps every environment the builder can build a policy for to its
:class:`BuildableEnv`: the splits its demonstrations are drawn from and its policy is evaluated
on, the ``data`` settings of the recipe it cannot honour, and what (besides the builder's own
code) shapes its built policy, for the build's cache key. A configuration that asks an
environment for a setting it cannot honour is refused when it is made
(:class:`~resail_pipeline.bootstrap.config.BootstrapConfig`), before any work.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from resail_pipeline.config import ConfigError

#: A data fingerprint: ``(environment, splits)`` -> sha256 of the files those splits' tasks
#: are read from.
DataFingerprint = Callable[[Any, Sequence[str]], str]


@dataclass(frozen=True)
class BuildableEnv:
    """How the builder treats one environment.

    Attributes:
        demonstration_splits: the splits the demonstrations are drawn from, never one a policy
            is evaluated on (ALFWorld's ``clone`` games are also apart from those the cycles
            collect on and choose a rate on; the shipped TextCraft policy was cloned on the
            cycles' own ``train`` and ``dev`` tasks). A built policy is evaluated on the
            environment's :data:`~resail_pipeline.envs.EVALUATION_SPLITS`, as every policy is.
        clone_option: the adapter option that sets a ``clone`` split apart from the cycles'
            tasks (TextCraft's ``clone_tasks``); where a build's options set it, the
            demonstrations are drawn from ``clone`` alone (:meth:`splits`).
        unsupported: ``data`` settings (:class:`~.config.DemonstrationSettings` fields) that
            must stay 0 here, each with the reason.
        sources: the environment's own modules under the package whose code shapes its policy.
        packages: the distributions that provide the environment (their versions count).
        data_sha256: ``"module:function"`` of a :data:`DataFingerprint`, for an environment whose
            tasks are read from data files (ALFWorld's games); ``None`` when they ship with a
            package (covered by its version).
    """

    demonstration_splits: tuple[str, ...]
    clone_option: str | None = None
    unsupported: tuple[tuple[str, str], ...] = ()
    sources: tuple[str, ...] = ()
    packages: tuple[str, ...] = ()
    data_sha256: str | None = None

    def splits(self, options: Mapping[str, Any]) -> tuple[str, ...]:
        """The demonstration splits of the environment built with ``options``."""
        if self.clone_option is not None and options.get(self.clone_option):
            return ("clone",)
        return self.demonstration_splits

    def data_fingerprint(self) -> DataFingerprint | None:
        """The function :attr:`data_sha256` names, or ``None``."""
        if self.data_sha256 is None:
            return None
        module_name, _, name = self.data_sha256.partition(":")
        return getattr(importlib.import_module(module_name), name)


#: Why renamed copies and copying drills are TextCraft's alone.
_TEXTCRAFT_TEXT = (
    "rewrite TextCraft's item names and crafting commands (bootstrap/renaming.py, "
    "bootstrap/drills.py), which {env} does not have"
)

#: Environment -> what building its initial policy covers. TextCraft: demonstrations of every
#: non-test task (its ``dev`` is carved from the cycles' collection tasks, not the initial policy's;
#: the shipped policy's recipe was built on both), or of its ``clone`` tasks alone where the
#: adapter's ``clone_tasks`` sets them apart from ``train``. ALFWorld: the generated ``clone``
#: games, which no other split shares, so that cloning never sees a game the cycles collect on,
#: choose a rate on or test.
BUILDABLE_ENVS: dict[str, BuildableEnv] = {
    "textcraft": BuildableEnv(
        demonstration_splits=("train", "dev"),
        clone_option="clone_tasks",
        unsupported=(
            (
                "searching_expert",
                "the searching expert acts on what ALFWorld's rooms show (envs/alfworld_world.py); "
                "{env}'s planner already acts on the observation alone",
            ),
        ),
        sources=("envs/textcraft.py", "envs/textcraft_expert.py"),
        packages=("textcraft",),
    ),
    "alfworld": BuildableEnv(
        demonstration_splits=("clone",),
        unsupported=(
            ("renamed_copies", "renamed copies " + _TEXTCRAFT_TEXT),
            ("copying_drills", "copying drills " + _TEXTCRAFT_TEXT),
        ),
        sources=(
            "envs/alfworld.py",
            "envs/alfworld_expert.py",
            "envs/alfworld_world.py",
            "experience/alfworld_rules.py",
        ),
        packages=("alfworld", "textworld"),
        data_sha256="resail_pipeline.envs.alfworld_games:splits_sha256",
    ),
}


def buildable(env: str) -> BuildableEnv:
    """``env``'s entry of :data:`BUILDABLE_ENVS`; one without raises naming the field."""
    try:
        return BUILDABLE_ENVS[env]
    except KeyError:
        raise ConfigError(
            f"env: an initial policy can only be built for {sorted(BUILDABLE_ENVS)}; set "
            f"bootstrap.checkpoint to a local checkpoint for {env!r}"
        ) from None


def check_supported(env: str, data: Any) -> None:
    """Raise a ``ConfigError`` naming the first ``data`` setting (a
    :class:`~.config.DemonstrationSettings`) that ``env`` cannot honour; nothing for an
    environment the builder does not cover (it is refused when a build is asked for)."""
    support = BUILDABLE_ENVS.get(env)
    if support is None:
        return
    for name, reason in support.unsupported:
        value = getattr(data, name)
        if value:
            off = "false" if isinstance(value, bool) else "0"
            raise ConfigError(
                f"data.{name}: must be {off} for {env} (got {value}): " + reason.format(env=env)
            )
