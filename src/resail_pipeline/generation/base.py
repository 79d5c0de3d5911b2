"""The generation protocol: batched prompts in, texts + token ids + log-probs out.

Backends (transformers on CPU, vLLM on GPU) implement :class:`Generator`; callers never branch
on the backend.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class SamplingParams:
    """Decoding settings. ``temperature == 0`` is greedy; ``top_k == -1`` means no top-k.

    ``seed`` makes a call reproducible: the same prompts, params and seed give the same outputs
    on the same backend and hardware.
    """

    temperature: float = 0.4
    top_p: float = 1.0
    top_k: int = -1
    max_new_tokens: int = 1024
    seed: int = 0
    #: samples per prompt (GRPO groups); outputs are grouped prompt-major.
    n: int = 1

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature: must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p: must be in (0, 1], got {self.top_p}")
        if self.top_k == 0 or self.top_k < -1:
            raise ValueError(f"top_k: must be -1 (off) or positive, got {self.top_k}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens: must be >= 1, got {self.max_new_tokens}")
        if self.n < 1:
            raise ValueError(f"n: must be >= 1, got {self.n}")


@dataclass(frozen=True)
class Generation:
    """One sampled response.

    Attributes:
        text: the decoded response, without the end-of-sequence token.
        token_ids: the generated ids, including the end-of-sequence token if one was produced.
        logprobs: the behaviour log-probability of each generated id under the sampling
            distribution's underlying model (temperature 1, untruncated), same length.
        finished: an end-of-sequence token was produced before ``max_new_tokens``.
    """

    text: str
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...] = field(default_factory=tuple)
    finished: bool = True


@runtime_checkable
class Generator(Protocol):
    """Generates chat-formatted prompt texts in batches."""

    #: the checkpoint's ``policy_id``, recorded with every response.
    policy_id: str

    def generate(self, prompts: list[str], params: SamplingParams) -> list[Generation]:
        """``len(prompts) * params.n`` generations, prompt-major, in the order of ``prompts``."""
        ...
