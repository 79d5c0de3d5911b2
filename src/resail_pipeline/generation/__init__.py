"""Generation backends behind one protocol, built by name from a registry.

>>> generator = make_generator("transformers", "data/06_models/initial", batch_size=8)
>>> generator.generate([chat_prompt(generator.tokenizer, message)], SamplingParams())

A vision-language checkpoint (Qwen3-VL, the GUI agent) is served by the same backends: vLLM's
generator takes its :class:`~.base.VisionPrompt` objects as they are, and transformers' is the
GUI path's :class:`~resail_pipeline.gui.policy.VisionPolicy` (:data:`VISION_GENERATORS`).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from resail_pipeline.config import ConfigError
from resail_pipeline.generation.base import (
    Generation,
    Generator,
    Prompt,
    SamplingParams,
    VisionPrompt,
    derive_seed,
    response_seeds,
)

# name -> "module:class". Backends are imported on first use: the transformers one pulls in
# torch, the vLLM one needs the `gpu` extra.
GENERATOR_REGISTRY: dict[str, str] = {
    "transformers": "resail_pipeline.generation.transformers_backend:TransformersGenerator",
    "vllm": "resail_pipeline.generation.vllm_backend:VLLMGenerator",
}

#: backend -> (the package it needs, the project's extra that installs it)
BACKEND_PACKAGES: dict[str, tuple[str, str]] = {"vllm": ("vllm", "gpu")}
#: ``from_checkpoint`` options the pipeline passes itself (from the policy's manifest), never set
#: in a run's configuration
RUN_SUPPLIED_OPTIONS = ("policy_id",)

#: name -> "module:class" where a backend serves a vision-language checkpoint with another class
#: than its text one (vLLM's serves both)
VISION_GENERATORS: dict[str, str] = {
    "transformers": "resail_pipeline.gui.policy:VisionPolicy",
}


def _backend_class(backend: str, *, vision: bool = False) -> Any:
    if backend not in GENERATOR_REGISTRY:
        raise ValueError(
            f"backend: unknown generation backend {backend!r}; "
            f"choose one of {sorted(GENERATOR_REGISTRY)}"
        )
    target = VISION_GENERATORS.get(backend) if vision else None
    module_name, _, class_name = (target or GENERATOR_REGISTRY[backend]).partition(":")
    return getattr(importlib.import_module(module_name), class_name)


#: ``model_type`` values (a checkpoint's ``config.json``) of the vision-language models served
VISION_MODEL_TYPES = ("qwen3_vl",)


def is_vision_checkpoint(checkpoint: str | Path) -> bool:
    """Whether ``checkpoint`` holds a vision-language model (its ``config.json`` names one)."""
    from resail_pipeline.checkpoints import check_checkpoint

    try:
        config = json.loads((check_checkpoint(checkpoint) / "config.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and config.get("model_type") in VISION_MODEL_TYPES


def keyword_names(*functions: Callable[..., Any]) -> set[str]:
    """The keyword parameters ``functions`` accept by name (not ``self``, not ``**kwargs``)."""
    kinds = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return {
        name
        for function in functions
        for name, parameter in inspect.signature(function).parameters.items()
        if parameter.kind in kinds and name not in ("self", "cls")
    }


def default_option(backend: str, name: str) -> Any:
    """The value ``backend`` gives its option ``name`` when a run leaves it unset (the default of
    its ``from_checkpoint``), e.g. vLLM's ``dtype``; without importing the backend's package."""
    parameter = inspect.signature(_backend_class(backend).from_checkpoint).parameters.get(name)
    if parameter is None or parameter.default is inspect.Parameter.empty:
        raise ValueError(f"{name}: the {backend} backend has no default for it")
    return parameter.default


def check_installed(backend: str) -> None:
    """Raise a :class:`ConfigError` naming the extra to install where ``backend`` needs a package
    this machine does not have (vLLM without the ``gpu`` extra); before anything is loaded."""
    needed = BACKEND_PACKAGES.get(backend)
    if needed is not None and importlib.util.find_spec(needed[0]) is None:
        package, extra = needed
        raise ConfigError(
            f"backend: {backend} needs the {package} package, which is not installed here; "
            f"install the `{extra}` extra (pip install -e '.[{extra}]') on a GPU machine, or "
            "choose transformers"
        )


def check_options(
    backend: str, options: Mapping[str, Any], source: str = "options", *, vision: bool = False
) -> None:
    """Raise, naming ``source`` and each key, if ``backend`` does not take an option of
    ``options``, or (where the backend can check them, ``check_values``) would refuse its value;
    before anything is loaded. A backend that cannot list its options here (vLLM without the
    ``gpu`` extra installed) accepts any. ``vision``: for a vision-language checkpoint."""
    cls = _backend_class(backend, vision=vision)
    known = cls.option_names()
    if known is None:
        return
    unknown = sorted(set(options) - known)
    if unknown:
        raise ConfigError(
            f"{source}: the {backend} backend takes no option(s) {unknown}; known: {sorted(known)}"
        )
    check_values = getattr(cls, "check_values", None)
    if check_values is not None:
        try:
            check_values(**options)
        except ValueError as error:
            raise ConfigError(f"{source}.{error}") from None


def make_generator(backend: str, checkpoint: str | Path, **options: Any) -> Generator:
    """The ``backend`` generator over a local checkpoint, text or vision-language (read from its
    ``config.json``); ``options`` go to ``from_checkpoint``."""
    vision = is_vision_checkpoint(checkpoint)
    check_options(backend, options, vision=vision)
    return _backend_class(backend, vision=vision).from_checkpoint(checkpoint, **options)


__all__ = [
    "BACKEND_PACKAGES",
    "GENERATOR_REGISTRY",
    "RUN_SUPPLIED_OPTIONS",
    "VISION_GENERATORS",
    "VISION_MODEL_TYPES",
    "Generation",
    "Generator",
    "Prompt",
    "SamplingParams",
    "VisionPrompt",
    "check_installed",
    "check_options",
    "default_option",
    "derive_seed",
    "is_vision_checkpoint",
    "keyword_names",
    "make_generator",
    "response_seeds",
]
