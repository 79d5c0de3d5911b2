"""Generation backends behind one protocol, built by name from a registry.

>>> generator = make_generator("transformers", "data/06_models/initial", batch_size=8)
>>> generator.generate([chat_prompt(generator.tokenizer, message)], SamplingParams())
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from resail_pipeline.config import ConfigError
from resail_pipeline.generation.base import (
    Generation,
    Generator,
    SamplingParams,
    derive_seed,
    response_seeds,
)

# name -> "module:class". Backends are imported on first use: the transformers one pulls in
# torch, the vLLM one needs the `gpu` extra.
GENERATOR_REGISTRY: dict[str, str] = {
    "transformers": "resail_pipeline.generation.transformers_backend:TransformersGenerator",
    "vllm": "resail_pipeline.generation.vllm_backend:VLLMGenerator",
}


def _backend_class(backend: str) -> Any:
    if backend not in GENERATOR_REGISTRY:
        raise ValueError(
            f"backend: unknown generation backend {backend!r}; "
            f"choose one of {sorted(GENERATOR_REGISTRY)}"
        )
    module_name, _, class_name = GENERATOR_REGISTRY[backend].partition(":")
    return getattr(importlib.import_module(module_name), class_name)


def keyword_names(*functions: Callable[..., Any]) -> set[str]:
    """The keyword parameters ``functions`` accept by name (not ``self``, not ``**kwargs``)."""
    kinds = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return {
        name
        for function in functions
        for name, parameter in inspect.signature(function).parameters.items()
        if parameter.kind in kinds and name not in ("self", "cls")
    }


def check_options(backend: str, options: Mapping[str, Any], source: str = "options") -> None:
    """Raise, naming ``source`` and each key, if ``backend`` does not take an option of
    ``options``, or (where the backend can check them, ``check_values``) would refuse its value;
    before anything is loaded. A backend that cannot list its options here (vLLM without the
    ``gpu`` extra installed) accepts any."""
    cls = _backend_class(backend)
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
    """The ``backend`` generator over a local checkpoint; ``options`` go to ``from_checkpoint``."""
    check_options(backend, options)
    return _backend_class(backend).from_checkpoint(checkpoint, **options)


__all__ = [
    "GENERATOR_REGISTRY",
    "Generation",
    "Generator",
    "SamplingParams",
    "check_options",
    "derive_seed",
    "keyword_names",
    "make_generator",
    "response_seeds",
]
