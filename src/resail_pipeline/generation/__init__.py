"""Generation backends behind one protocol, built by name from a registry.

>>> generator = make_generator("transformers", "data/06_models/initial", batch_size=8)
>>> generator.generate([chat_prompt(generator.tokenizer, message)], SamplingParams())
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

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


def make_generator(backend: str, checkpoint: str | Path, **options: Any) -> Generator:
    """The ``backend`` generator over a local checkpoint; ``options`` go to ``from_checkpoint``."""
    if backend not in GENERATOR_REGISTRY:
        raise ValueError(
            f"backend: unknown generation backend {backend!r}; "
            f"choose one of {sorted(GENERATOR_REGISTRY)}"
        )
    module_name, _, class_name = GENERATOR_REGISTRY[backend].partition(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    return cls.from_checkpoint(checkpoint, **options)


__all__ = [
    "GENERATOR_REGISTRY",
    "Generation",
    "Generator",
    "SamplingParams",
    "derive_seed",
    "make_generator",
    "response_seeds",
]
