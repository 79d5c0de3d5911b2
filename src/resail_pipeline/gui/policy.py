"""A vision-language policy: chat prompts with screenshots, sampled responses, and response logits.

One class serves a released Qwen3-VL checkpoint read from a local directory and the small model
:mod:`resail_pipeline.modeling.vision` builds: prompts are rendered by the tokenizer's own chat
template (the ``mobile_use`` tool passed as a tool), each image placeholder of
:mod:`resail_pipeline.prompts.gui` is replaced by the vision tokens, and the image-pad token is
repeated once per merged patch of its image, which is what the model's processor does.

:class:`VisionPolicy` is the transformers backend of the generation protocol for a Qwen3-VL
checkpoint (``make_generator("transformers", path)``); vLLM serves the same checkpoint through
its own backend (``make_generator("vllm", path)``), the prompts encoded here by
:class:`VisionEncoder` either way.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from PIL import Image
from torch import Tensor, nn
from transformers import (
    AutoConfig,
    AutoImageProcessor,
    DynamicCache,
    Qwen3VLForConditionalGeneration,
)

from resail_pipeline.checkpoints import (
    CheckpointError,
    CheckpointInfo,
    check_checkpoint,
    load_tokenizer,
    read_checkpoint_info,
    resolve_device,
    save_policy,
)
from resail_pipeline.devices import release_device_memory
from resail_pipeline.generation.base import (
    Generation,
    Generator,
    SamplingParams,
    VisionPrompt,
    response_seeds,
    vision_token_ids,
)
from resail_pipeline.generation.transformers_backend import choose_tokens, resolve_dtype
from resail_pipeline.prompts.gui import IMAGE_PLACEHOLDERS, TOOL_DEFINITION

__all__ = ["PromptedGenerator", "VisionEncoder", "VisionLogits", "VisionPolicy", "VisionPrompt"]

logger = logging.getLogger(__name__)


class VisionEncoder:
    """Prompts as a Qwen3-VL checkpoint reads them: the chat template with the ``mobile_use``
    tool, each image placeholder replaced by the vision tokens, the pad token repeated once per
    merged patch of its image. Needs the tokenizer, the image processor and the model's
    configuration, not its weights.
    """

    def __init__(self, tokenizer: Any, image_processor: Any, config: Any) -> None:
        self.tokenizer = tokenizer
        self.image_processor = image_processor
        self._image_token = config.image_token_id
        self._vision_start, self._vision_end = (
            config.vision_start_token_id,
            config.vision_end_token_id,
        )
        self._merge = image_processor.merge_size**2

    @classmethod
    def load(cls, path: str | Path) -> VisionEncoder:
        """The encoder of a local checkpoint directory (no weights are read)."""
        path = check_checkpoint(path)
        try:
            config = AutoConfig.from_pretrained(str(path), trust_remote_code=False)
            image_processor = AutoImageProcessor.from_pretrained(str(path), trust_remote_code=False)
        except (OSError, ValueError) as error:
            raise CheckpointError(
                f"checkpoint {path}: not a Qwen3-VL checkpoint ({error})"
            ) from None
        return cls(load_tokenizer(path), image_processor, config)

    def encode(
        self, messages: Sequence[dict[str, str]], images: Sequence[str | Path | Image.Image]
    ) -> VisionPrompt:
        """Render ``messages`` (with the ``mobile_use`` tool) and put ``images``, in order, where
        their placeholders stand; the number of placeholders must equal ``len(images)``."""
        text = self.tokenizer.apply_chat_template(
            list(messages), tools=[TOOL_DEFINITION], add_generation_prompt=True, tokenize=False
        )
        pieces = [text]
        for placeholder in IMAGE_PLACEHOLDERS:
            pieces = [part for piece in pieces for part in _split_keep(piece, placeholder)]
        slots = sum(piece in IMAGE_PLACEHOLDERS for piece in pieces)
        if slots != len(images):
            raise ValueError(
                f"images: the prompt has {slots} image placeholder(s), got {len(images)} image(s)"
            )
        if not images:
            return VisionPrompt(tuple(self.tokenizer(text, add_special_tokens=False)["input_ids"]))
        rgb = tuple(_rgb(image) for image in images)
        pixels = self.image_processor(images=list(rgb), return_tensors="pt")
        grids = pixels["image_grid_thw"]
        ids: list[int] = []
        image = 0
        for piece in pieces:
            if piece in IMAGE_PLACEHOLDERS:
                pads = int(grids[image].prod()) // self._merge
                ids += [self._vision_start, *[self._image_token] * pads, self._vision_end]
                image += 1
            elif piece:
                ids += self.tokenizer(piece, add_special_tokens=False)["input_ids"]
        return VisionPrompt(tuple(ids), pixels["pixel_values"], grids, rgb)


class VisionLogits(nn.Module):
    """A Qwen3-VL model as the training engines wrap it: model inputs by keyword in, logits out
    (``self.model`` is the Hugging Face model, as the engines expect of what they wrap)."""

    def __init__(self, model: Qwen3VLForConditionalGeneration) -> None:
        super().__init__()
        self.model = model

    def forward(self, **inputs: Tensor) -> Tensor:
        return self.model(**inputs).logits


class VisionPolicy(Generator):
    """A Qwen3-VL model with its tokenizer and image processor: the transformers backend of the
    generation protocol for a vision-language checkpoint, and the response logits training and
    scoring read."""

    def __init__(
        self,
        model: Qwen3VLForConditionalGeneration,
        tokenizer: Any,
        image_processor: Any,
        policy_id: str = "",
        batch_size: int = 16,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.image_processor = image_processor
        self.policy_id = policy_id
        #: responses decoded together by :meth:`generate`
        self.batch_size = batch_size
        # the cache's keyword: ``past_key_values`` up to transformers 5.2x, then ``cache``
        self._cache_key = (
            "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
        )
        self.encoder = VisionEncoder(tokenizer, image_processor, model.config)
        self._image_token = model.config.image_token_id
        # never sampled: a response's image pad would be taken for an image's when it is scored
        self._suppressed = list(vision_token_ids(model.config))

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def close(self) -> None:
        """Drop the model and hand cached GPU memory back (as a text generator's ``close``)."""
        self.model = None
        release_device_memory()

    @classmethod
    def load(
        cls, path: str | Path, device: str | torch.device = "cpu", dtype: torch.dtype | None = None
    ) -> VisionPolicy:
        """The policy of a local checkpoint directory (safetensors only, no remote code)."""
        path = check_checkpoint(path)
        try:
            model = Qwen3VLForConditionalGeneration.from_pretrained(
                str(path),
                trust_remote_code=False,
                use_safetensors=True,
                dtype=dtype or torch.float32,
            )
            image_processor = AutoImageProcessor.from_pretrained(str(path), trust_remote_code=False)
        except (OSError, ValueError) as error:
            raise CheckpointError(
                f"checkpoint {path}: not a Qwen3-VL checkpoint ({error})"
            ) from None
        tokenizer = load_tokenizer(path)
        info = read_checkpoint_info(path)
        return cls(
            model.to(resolve_device(device)).eval(), tokenizer, image_processor, info.policy_id
        )

    @classmethod
    def from_checkpoint(
        cls,
        path: str | Path,
        *,
        device: str = "auto",
        dtype: str = "auto",
        batch_size: int = 16,
        policy_id: str | None = None,
    ) -> VisionPolicy:
        """The generator ``make_generator("transformers", path, ...)`` builds for a Qwen3-VL
        checkpoint: ``dtype`` one of ``auto``, ``float32``, ``bfloat16`` (``auto``: bf16 where
        ``device`` multiplies faster in it, :func:`~.transformers_backend.resolve_dtype`)."""
        resolved = resolve_device(device)
        policy = cls.load(path, resolved, resolve_dtype(dtype, resolved))
        policy.batch_size = batch_size
        if policy_id is not None:
            policy.policy_id = policy_id
        return policy

    @classmethod
    def option_names(cls) -> set[str]:
        """The options :meth:`from_checkpoint` takes."""
        from resail_pipeline.generation import keyword_names

        return keyword_names(cls.from_checkpoint) - {"path"}

    def save(
        self, path: str | Path, *, name: str, parent_id: str = "", method: str = "", cycle: int = 0
    ) -> CheckpointInfo:
        """Publish the policy at ``path`` (atomically, with its manifest)."""
        info = save_policy(
            self.model,
            self.tokenizer,
            path,
            name=name,
            parent_id=parent_id,
            method=method,
            cycle=cycle,
            image_processor=self.image_processor,
        )
        self.policy_id = info.policy_id
        return info

    # -- prompts -------------------------------------------------------------------------------

    def encode(
        self, messages: Sequence[dict[str, str]], images: Sequence[str | Path | Image.Image]
    ) -> VisionPrompt:
        """:meth:`VisionEncoder.encode` with this policy's tokenizer and image processor."""
        return self.encoder.encode(messages, images)

    def model_inputs(
        self,
        sequences: Sequence[Sequence[int]],
        prompts: Sequence[VisionPrompt],
        *,
        left: bool = False,
    ) -> dict[str, Tensor]:
        """Model inputs for ``sequences`` (right-padded, or left-padded for generation) whose
        images are ``prompts``'."""
        width = max(len(s) for s in sequences)
        pad = self.tokenizer.pad_token_id
        ids = torch.full((len(sequences), width), pad, dtype=torch.long)
        attention = torch.zeros((len(sequences), width), dtype=torch.long)
        for row, sequence in enumerate(sequences):
            place = slice(width - len(sequence), width) if left else slice(0, len(sequence))
            ids[row, place] = torch.tensor(sequence, dtype=torch.long)
            attention[row, place] = 1
        inputs: dict[str, Tensor] = {
            "input_ids": ids,
            "attention_mask": attention,
            "mm_token_type_ids": (ids == self._image_token).long() * attention,
        }
        with_images = [p for p in prompts if p.pixel_values is not None]
        if with_images:
            inputs["pixel_values"] = torch.cat([p.pixel_values for p in with_images])
            inputs["image_grid_thw"] = torch.cat([p.image_grid_thw for p in with_images])
        device = self.device
        dtype = next(self.model.parameters()).dtype
        return {
            key: value.to(device, dtype=dtype if key == "pixel_values" else value.dtype)
            for key, value in inputs.items()
        }

    # -- generation ----------------------------------------------------------------------------

    @torch.no_grad()
    def generate(
        self,
        prompts: Sequence[VisionPrompt],
        params: SamplingParams,
        seeds: Sequence[int] | None = None,
    ) -> list[Generation]:
        """``len(prompts) * params.n`` responses, prompt-major, decoded ``batch_size`` at a time.

        Each response samples by inverse CDF from its own stream of uniforms
        (:func:`~resail_pipeline.generation.base.response_seeds`, as the text backend does), so
        it does not depend on which other prompts share its batch.
        """
        every_seed = response_seeds(len(prompts), params, seeds)
        rows = [(prompts[i // params.n], seed) for i, seed in enumerate(every_seed)]
        self.model.eval()
        outputs: list[Generation] = []
        for start in range(0, len(rows), self.batch_size):
            outputs += self._decode(rows[start : start + self.batch_size], params)
        return outputs

    def _decode(
        self, rows: list[tuple[VisionPrompt, int]], params: SamplingParams
    ) -> list[Generation]:
        """One left-padded batch: prefill with the images, then one token per step."""
        prompts = [prompt for prompt, _ in rows]
        steps, eos = params.max_new_tokens, self.tokenizer.eos_token_id
        inputs = self.model_inputs([p.input_ids for p in prompts], prompts, left=True)
        mask = inputs["attention_mask"]
        positions, deltas = self.model.model.get_rope_index(
            inputs["input_ids"],
            mm_token_type_ids=inputs["mm_token_type_ids"],
            image_grid_thw=inputs.get("image_grid_thw"),
            attention_mask=mask,
        )  # (3, B, L), (B, 1)
        cache = DynamicCache(config=self.model.config)
        logits = self.model(
            **inputs, position_ids=positions, **{self._cache_key: cache}, logits_to_keep=1
        ).logits[:, -1]  # (B, V)
        uniforms = None
        if params.temperature > 0:
            uniforms = torch.stack(
                [
                    torch.rand(
                        steps, generator=torch.Generator().manual_seed(seed), dtype=torch.float64
                    )
                    for _, seed in rows
                ]
            ).to(logits.device)  # (B, N)
        tokens: list[list[int]] = [[] for _ in rows]
        alive = torch.ones(len(rows), dtype=torch.bool, device=logits.device)  # (B,)
        for k in range(steps):
            scores = logits.float()
            scores[:, self._suppressed] = float("-inf")
            chosen = choose_tokens(scores, params, None if uniforms is None else uniforms[:, k])
            for b in alive.nonzero().squeeze(-1).tolist():
                tokens[b].append(int(chosen[b]))
            alive &= chosen != eos
            if k == steps - 1 or not bool(alive.any()):
                break
            mask = torch.cat([mask, mask.new_ones((len(rows), 1))], dim=1)  # (B, L + k + 1)
            position = (mask.sum(-1, keepdim=True) - 1 + deltas).unsqueeze(0).expand(3, -1, -1)
            logits = self.model(
                input_ids=chosen[:, None],
                attention_mask=mask,
                position_ids=position,
                **{self._cache_key: cache},
            ).logits[:, -1]
        return [self._generation(ids, eos) for ids in tokens]

    def _generation(self, ids: list[int], eos: int) -> Generation:
        finished = bool(ids) and ids[-1] == eos
        body = ids[:-1] if finished else ids
        return Generation(
            text=self.tokenizer.decode(body, skip_special_tokens=True),
            token_ids=tuple(ids),
            finished=finished,
        )

    # -- scoring -------------------------------------------------------------------------------

    def response_logits(
        self,
        prompts: Sequence[VisionPrompt],
        responses: Sequence[Sequence[int]],
        forward: Callable[..., Tensor] | None = None,
    ) -> tuple[Tensor, Tensor]:
        """Logits at every response position, with gradient when the model is in grad mode.

        ``forward`` takes the model inputs by keyword and returns the logits: a training engine's
        wrapper of :class:`VisionLogits` (DDP, DeepSpeed), so that the backward is reduced over
        the ranks; ``None``: the model itself.

        Returns:
            ``(logits, mask)``: ``(N, T, V)`` where row ``i`` position ``k`` predicts
            ``responses[i][k]``, and the bool ``(N, T)`` mask of real response tokens
            (``T`` = the longest response).
        """
        if len(prompts) != len(responses):
            raise ValueError(
                f"responses: expected one per prompt ({len(prompts)}), got {len(responses)}"
            )
        if any(len(r) == 0 for r in responses):
            raise ValueError("responses: every response needs at least one token")
        sequences = [list(p.input_ids) + list(r) for p, r in zip(prompts, responses, strict=True)]
        inputs = self.model_inputs(sequences, prompts)
        # (N, L, V)
        logits = self.model(**inputs).logits if forward is None else forward(**inputs)
        longest = max(len(r) for r in responses)
        out = logits.new_zeros((len(prompts), longest, logits.shape[-1]))
        mask = torch.zeros((len(prompts), longest), dtype=torch.bool, device=logits.device)
        for row, (prompt, response) in enumerate(zip(prompts, responses, strict=True)):
            start = len(prompt.input_ids) - 1
            out[row, : len(response)] = logits[row, start : start + len(response)]
            mask[row, : len(response)] = True
        return out, mask


class PromptedGenerator(Generator):
    """A generator of any backend over a vision-language checkpoint, with the checkpoint's
    :class:`VisionEncoder`: what the GUI stages that only generate (diagnostic attempts,
    summaries) take, as they take a :class:`VisionPolicy`.

    Args:
        encoder: encodes the prompts.
        generator: generates from them (e.g. ``make_generator("vllm", path)``).
        batch_size: prompts per call of :meth:`generate` from the stages (a progress bar's step).
    """

    def __init__(self, encoder: VisionEncoder, generator: Generator, batch_size: int = 16) -> None:
        self.encoder = encoder
        self.generator = generator
        self.batch_size = batch_size
        self.tokenizer = encoder.tokenizer
        self.policy_id = generator.policy_id

    def encode(
        self, messages: Sequence[dict[str, str]], images: Sequence[str | Path | Image.Image]
    ) -> VisionPrompt:
        return self.encoder.encode(messages, images)

    def generate(
        self,
        prompts: Sequence[VisionPrompt],
        params: SamplingParams,
        seeds: Sequence[int] | None = None,
    ) -> list[Generation]:
        return self.generator.generate(prompts, params, seeds)

    def close(self) -> None:
        self.generator.close()


def _split_keep(text: str, separator: str) -> list[str]:
    """``text`` split at ``separator``, the separators kept as their own pieces."""
    parts = text.split(separator)
    pieces = [parts[0]]
    for part in parts[1:]:
        pieces += [separator, part]
    return pieces


def _rgb(image: str | Path | Image.Image) -> Image.Image:
    if isinstance(image, Image.Image):
        return image.convert("RGB")
    with Image.open(image) as opened:
        return opened.convert("RGB")
