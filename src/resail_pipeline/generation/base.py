"""The generation protocol: batched prompts in, texts + token ids + log-probs out.

Backends (transformers on CPU, vLLM on GPU) implement :class:`Generator`; callers never branch
on the backend. A prompt is a chat-formatted text (the text agents) or a :class:`VisionPrompt`
(the GUI agent: token ids with each image's pads already expanded, and the images themselves).

Randomness is keyed per response, not per call: response ``j`` of prompt ``i`` draws from its own
stream, seeded by :func:`response_seeds`. A prompt's responses therefore do not depend on which
other prompts share the call, which lets a rollout batch many episodes and still give each
episode the trajectory it would have had alone.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from resail_pipeline.config import Config, ConfigError, Field, Number, model_validator


class SamplingParams(Config):
    """Decoding settings. ``temperature == 0`` is greedy; ``top_k == -1`` means no top-k.

    ``seed`` makes a call reproducible: the same prompts, params and seed give the same outputs
    on the same backend and hardware.
    """

    temperature: Number = Field(0.4, ge=0)
    """Sampling temperature; 0 is greedy."""
    top_p: Number = Field(1.0, gt=0, le=1)
    """Nucleus sampling mass."""
    top_k: int = Field(-1, ge=-1)
    """Top-k truncation of sampling; -1: off."""
    max_new_tokens: int = Field(1024, ge=1)
    """Response tokens at most."""
    seed: int = Field(0, ge=0)
    """The call's seed (see :func:`response_seeds`)."""
    n: int = Field(1, ge=1)
    """Samples per prompt (GRPO groups); outputs are grouped prompt-major."""

    @model_validator(mode="after")
    def _top_k_or_off(self) -> SamplingParams:
        if self.top_k == 0:
            raise ConfigError("top_k: must be a positive integer, or -1 (off), got 0")
        return self


@dataclass(frozen=True)
class VisionPrompt:
    """An encoded vision-language prompt: token ids (image pads expanded) and its images.

    The transformers backend reads the pixels its image processor made (``pixel_values``,
    ``image_grid_thw``); vLLM takes the ``images`` themselves and runs the checkpoint's own image
    processor, which gives the same patches.

    Attributes:
        input_ids: the prompt's token ids, each image's pad token repeated once per merged patch.
        pixel_values: ``(patches, channels * temporal * patch * patch)`` of all its images.
        image_grid_thw: ``(images, 3)`` each image's patch grid (time, height, width).
        images: the RGB images (PIL), in the order of their placeholders.
    """

    input_ids: tuple[int, ...]
    pixel_values: Any = None
    image_grid_thw: Any = None
    images: tuple[Any, ...] = ()


#: the configuration fields of a vision-language model's placeholder tokens (Qwen3-VL's)
VISION_TOKEN_FIELDS = (
    "image_token_id",
    "video_token_id",
    "vision_start_token_id",
    "vision_end_token_id",
)


def vision_token_ids(config: Any) -> tuple[int, ...]:
    """The ids of a vision-language model's image and video placeholders (``config``: its
    transformers configuration), which no response may hold: the model takes every image pad of
    a sequence it scores (prompt and response) for one of the prompt's images, and fails when
    their count and the images' patches differ. Both backends suppress them when decoding a
    :class:`VisionPrompt`."""
    ids = {getattr(config, name, None) for name in VISION_TOKEN_FIELDS}
    return tuple(sorted(int(i) for i in ids if i is not None))


#: what a :class:`Generator` takes: chat-formatted texts, or encoded vision-language prompts
Prompt = str | VisionPrompt


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
    """Generates responses to prompts in batches: chat-formatted texts, or (a vision-language
    checkpoint) :class:`VisionPrompt` objects."""

    #: the checkpoint's ``policy_id``, recorded with every response.
    policy_id: str
    #: the policy's tokenizer; callers format prompts with ``prompts.chat_prompt(tokenizer, ...)``.
    tokenizer: Any

    def generate(
        self,
        prompts: Sequence[Prompt],
        params: SamplingParams,
        seeds: Sequence[int] | None = None,
    ) -> list[Generation]:
        """``len(prompts) * params.n`` generations, prompt-major, in the order of ``prompts``.

        ``seeds`` gives each prompt its own seed (overriding ``params.seed``); see
        :func:`response_seeds` for the stream every response draws from.
        """
        ...

    def close(self) -> None:
        """Release the model and what it holds (a vLLM engine and its workers, cached GPU
        memory); the generator is unusable after, and a second call does nothing. Nodes close
        their generator when they return, so that the next node (the trainer's torchrun
        processes, another engine) finds the devices free, whatever the garbage collector does.
        """
        ...

    def __enter__(self) -> Generator:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def derive_seed(*parts: int) -> int:
    """A 63-bit seed hashed from integers in ``[0, 2**64)``, e.g. ``derive_seed(episode_seed, t)``.

    Each part is hashed as 8 fixed bytes (BLAKE2b), so nearby inputs give unrelated seeds, inputs
    of different lengths never collide, and the value is the same on every platform.
    """
    if not parts or any(not 0 <= p < 2**64 for p in parts):
        raise ValueError(f"seed parts: expected one or more integers in [0, 2**64), got {parts}")
    data = b"".join(int(p).to_bytes(8, "little") for p in parts)
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little") >> 1


def response_seeds(
    num_prompts: int, params: SamplingParams, seeds: Sequence[int] | None = None
) -> list[int]:
    """The seed of every response of a call, prompt-major (``num_prompts * params.n`` values).

    Response ``j`` of prompt ``i`` uses ``derive_seed(s_i, j)``, where ``s_i`` is ``seeds[i]``
    when given, else ``derive_seed(params.seed, i)``.
    """
    return [
        derive_seed(seed, j)
        for seed in prompt_seeds(num_prompts, params, seeds)
        for j in range(params.n)
    ]


def prompt_seeds(
    num_prompts: int, params: SamplingParams, seeds: Sequence[int] | None = None
) -> list[int]:
    """Each prompt's seed in a call: ``seeds[i]`` when given, else ``derive_seed(params.seed, i)``
    (``i``: the prompt's place in the whole call, so that a call split into parts keeps them)."""
    if seeds is None:
        return [derive_seed(params.seed, i) for i in range(num_prompts)]
    if len(seeds) != num_prompts:
        raise ValueError(f"seeds: expected one per prompt ({num_prompts}), got {len(seeds)}")
    return list(seeds)
