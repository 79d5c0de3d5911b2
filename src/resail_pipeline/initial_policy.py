"""The initial policy at run time: which one a run uses, and that it stays the one published.

Apart from the builder (:mod:`resail_pipeline.bootstrap.build`), which is imported only when a
policy has to be built, so that the pipelines and the trainer load none of its machinery:

- :func:`resolve_initial_policy`: ``bootstrap.checkpoint``, else the shipped reference policy,
  else one built (cached), the first two verified before they are published;
- :func:`check_published`: a run asks for the policy already published for its data folder.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from resail_pipeline.bootstrap.config import BootstrapConfig, shipped_policy
from resail_pipeline.checkpoints import (
    MANIFEST_NAME,
    CheckpointError,
    CheckpointInfo,
    check_checkpoint,
    read_checkpoint_info,
    read_manifest,
    verify_files,
    verify_weights,
    weights_sha256,
)
from resail_pipeline.config import ConfigError

__all__ = ["check_published", "requested_policy", "resolve_initial_policy", "verify_reference"]

logger = logging.getLogger(__name__)


def verify_reference(path: str | Path) -> CheckpointInfo:
    """The shipped reference policy's info, after checking its weights and its other files
    (config, tokenizer, chat template) against its manifest, which must be there and record
    both."""
    try:  # the manifest and its files_sha256 included
        path = verify_files(check_checkpoint(path))
    except CheckpointError as error:
        raise CheckpointError(f"reference policy: {error}; restore it as shipped") from None
    expected = (read_manifest(path) or {}).get("sha256")
    info = read_checkpoint_info(path)  # its sha256 is the weights' own, hashed here
    if info.sha256 != expected:
        raise CheckpointError(
            f"reference policy {path}: weights sha256 {info.sha256[:12]} does not match the "
            f"manifest's {str(expected)[:12]}"
        )
    return info


def requested_policy(config: BootstrapConfig) -> Path | None:
    """The directory ``config`` asks for as the initial policy: ``checkpoint``, else the shipped
    ``reference``; ``None`` for a build (``reference: null``, found by its configuration and code).

    Raises:
        ConfigError: ``checkpoint`` names no checkpoint directory (one with a ``config.json``);
            ``reference`` names no directory (a typo must not silently build a policy,
            or silently reuse the one published before), or the policy was built here for
            another environment than ``config.env`` (its manifest says which).
    """
    if config.checkpoint is not None:
        field, policy = "bootstrap.checkpoint", Path(config.checkpoint)
        if not (policy / "config.json").is_file():
            what = "no directory" if not policy.is_dir() else "a directory without config.json"
            raise ConfigError(
                f"bootstrap.checkpoint: {policy} is {what}; give a local Hugging Face "
                "causal-LM checkpoint directory, or null for the shipped policy"
            )
    elif config.reference is None:
        return None
    elif not Path(config.reference).is_dir():
        shipped = shipped_policy(config.env)
        remedy = (
            f"`make reference REFERENCE_ENV={config.env}` builds it"
            if Path(config.reference) == Path(shipped)
            else f"give the shipped policy's directory ({shipped})"
        )
        raise ConfigError(
            f"bootstrap.reference: no policy directory {config.reference}; {remedy}, or null to "
            "build one in the run"
        )
    else:
        field, policy = "bootstrap.reference", Path(config.reference)
    built_for = built_environment(policy)
    if built_for is not None and built_for != config.env:
        raise ConfigError(
            f"{field}: {policy} was built for {built_for}, and this run plays {config.env}; give "
            f"a policy of {config.env} (or null to build one)"
        )
    return policy


def built_environment(policy: Path) -> str | None:
    """The environment a policy built by :mod:`resail_pipeline.bootstrap` was built for, read
    from its manifest's configuration; ``None`` for any other checkpoint (a trained cycle, a
    foreign model)."""
    manifest = policy / MANIFEST_NAME
    if not manifest.is_file():
        return None
    configuration = json.loads(manifest.read_text()).get("configuration")
    return configuration.get("env") if isinstance(configuration, dict) else None


def check_published(published: CheckpointInfo, config: BootstrapConfig) -> None:
    """Raise unless the initial policy ``config`` asks for is the one already ``published`` for
    the data folder (every experiment's cycles start from it): another directory, or the same
    directory with other weights, is an error that says how to start from another policy; the
    shipped reference must still have its manifest and the config, tokenizer and template files
    it records (:func:`~resail_pipeline.checkpoints.verify_files`). A build is not compared (its
    key includes the code, which may change under the same recipe)."""
    requested = requested_policy(config)
    if requested is None:
        return
    if requested.resolve() != Path(published.path).resolve():
        raise ConfigError(
            f"bootstrap: this data folder's initial policy is {published.path} "
            f"({published.policy_id}), and this run asks for {requested}. Every experiment of a "
            "data folder starts from the same policy; to start from another, give the run its "
            "own folder (--params data_tag=-<name>)."
        )
    if config.checkpoint is None:  # the shipped reference: its manifest and files as shipped
        try:
            verify_files(requested)
        except CheckpointError as error:
            raise CheckpointError(f"bootstrap.reference: {error}; restore it as shipped") from None
    sha256 = weights_sha256(check_checkpoint(requested))
    if sha256 != published.sha256:
        raise ConfigError(
            f"bootstrap: the weights in {requested} changed (sha256 {sha256[:12]}) since they were "
            f"published as {published.policy_id}; restore them, or start a new data folder "
            "(--params data_tag=-<name>)."
        )


def resolve_initial_policy(
    config: BootstrapConfig,
    out_dir: str | Path,
    *,
    env_options: Mapping[str, Any] | None = None,
    command: str | None = None,
    progress: bool = True,
) -> CheckpointInfo:
    """The initial policy, first match wins: ``config.checkpoint``, the shipped reference
    ``config.reference`` (which must exist), else (``reference: null``) one built (or reused) in
    its configuration's own folder under ``out_dir``
    (:func:`~resail_pipeline.bootstrap.build.configuration_folder`), in the environment built with
    ``env_options`` (a run's ``run.env_options``). A given directory's
    weights are checked against its config (:func:`~resail_pipeline.checkpoints.verify_weights`)
    before it is returned to be published."""
    requested = requested_policy(config)
    if config.checkpoint is not None:
        logger.info("bootstrap: using the configured checkpoint %s", requested)
        return read_checkpoint_info(verify_weights(requested))
    if requested is not None:
        logger.info("bootstrap: using the shipped reference policy %s", requested)
        return verify_reference(verify_weights(requested))
    # the builder, only to build
    from resail_pipeline.bootstrap.build import (
        BuildEnvironment,
        build_initial_policy,
        configuration_folder,
    )

    folder = configuration_folder(config, BuildEnvironment.resolve(config.env, env_options))
    return build_initial_policy(
        config, Path(out_dir) / folder, env_options=env_options, command=command, progress=progress
    )
