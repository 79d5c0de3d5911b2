"""Small Qwen3-VL models built from a config (random init), with a word tokenizer and an image
processor made here: the GUI path's model on a machine that cannot download one.

The tokenizer is :func:`~resail_pipeline.modeling.tokenizer.build_word_tokenizer`'s with the
vision tokens added and a chat template that lists tools the way Qwen3's does, so prompts are
written the same way for this model and for a released Qwen3-VL checkpoint.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import torch
from transformers import PreTrainedTokenizerFast, Qwen3VLConfig, Qwen3VLForConditionalGeneration

try:  # transformers 5: the Pillow implementation, which needs no torchvision
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil as _ImageProcessor,
    )
except ImportError:  # transformers 4.57+: its one implementation is the Pillow one
    from transformers import Qwen2VLImageProcessor as _ImageProcessor

from resail_pipeline.modeling.tokenizer import build_word_tokenizer

__all__ = [
    "IMAGE_PAD",
    "TOOLS_CHAT_TEMPLATE",
    "VISION_END",
    "VISION_START",
    "build_qwen3_vl",
    "build_vision_tokenizer",
    "small_image_processor",
    "small_qwen3_vl_config",
    "tools_block",
    "with_vision_tokens",
]

VISION_START = "<|vision_start|>"
VISION_END = "<|vision_end|>"
IMAGE_PAD = "<|image_pad|>"
VIDEO_PAD = "<|video_pad|>"

_TOOLS_HEAD = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
_TOOLS_TAIL = (
    "\n</tools>\n\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
)

#: Qwen3's message layout with its tools block (in the system message, after its text).
TOOLS_CHAT_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] + '\\n\\n' }}{%- endif %}"
    "{{- " + repr(_TOOLS_HEAD) + " }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- " + repr(_TOOLS_TAIL) + " + '<|im_end|>\\n' }}"
    "{%- set start = 1 if messages[0]['role'] == 'system' else 0 %}"
    "{%- else %}{%- set start = 0 %}{%- endif %}"
    "{%- for message in messages[start:] %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def tools_block(tools: Sequence[dict[str, Any]]) -> str:
    """The text :data:`TOOLS_CHAT_TEMPLATE` writes for ``tools`` after the system message's text."""
    listed = "".join("\n" + json.dumps(tool, ensure_ascii=False) for tool in tools)
    return _TOOLS_HEAD + listed + _TOOLS_TAIL


def build_vision_tokenizer(
    texts: Iterable[str],
    phrases: Iterable[str] = (),
    tools: Sequence[dict[str, Any]] = (),
    vocab_size: int = 4096,
) -> PreTrainedTokenizerFast:
    """A word tokenizer over ``texts`` (``phrases`` and the tools block of ``tools`` as single
    tokens) with the vision tokens and :data:`TOOLS_CHAT_TEMPLATE`."""
    phrases = [*phrases, tools_block(tools)] if tools else list(phrases)
    tokenizer = build_word_tokenizer(texts, vocab_size=vocab_size, phrases=phrases)
    tokenizer.add_special_tokens(
        {
            "additional_special_tokens": [
                "<|im_start|>",
                VISION_START,
                VISION_END,
                IMAGE_PAD,
                VIDEO_PAD,
            ]
        }
    )
    tokenizer.chat_template = TOOLS_CHAT_TEMPLATE
    return tokenizer


def small_image_processor(max_pixels: int = 224 * 384) -> _ImageProcessor:
    """Qwen3-VL's image preprocessing (16-pixel patches, 2x2 merged into one token) capped at
    ``max_pixels`` per image."""
    return _ImageProcessor(
        patch_size=16,
        merge_size=2,
        temporal_patch_size=2,
        min_pixels=32 * 32,
        max_pixels=max_pixels,
        image_mean=[0.5, 0.5, 0.5],
        image_std=[0.5, 0.5, 0.5],
    )


def small_qwen3_vl_config(
    tokenizer: PreTrainedTokenizerFast,
    *,
    hidden_size: int = 128,
    num_hidden_layers: int = 2,
    num_attention_heads: int = 2,
    intermediate_size: int = 384,
    vision_hidden_size: int = 64,
    vision_depth: int = 2,
    **text_overrides: Any,
) -> Qwen3VLConfig:
    """A small Qwen3-VL config over ``tokenizer``'s vocabulary: head size 64, interleaved M-RoPE,
    DeepStack features from every vision block, tied embeddings."""
    head_dim = hidden_size // num_attention_heads
    quarter = head_dim // 2 // 4
    text = {
        "vocab_size": len(tokenizer),
        "hidden_size": hidden_size,
        "intermediate_size": intermediate_size,
        "num_hidden_layers": num_hidden_layers,
        "num_attention_heads": num_attention_heads,
        "num_key_value_heads": num_attention_heads,
        "head_dim": head_dim,
        "max_position_embeddings": 8192,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 10000.0,
            "mrope_section": [head_dim // 2 - 2 * quarter, quarter, quarter],
            "mrope_interleaved": True,
        },
        "tie_word_embeddings": True,
        **text_overrides,
    }
    vision = {
        "depth": vision_depth,
        "hidden_size": vision_hidden_size,
        "intermediate_size": 2 * vision_hidden_size,
        "num_heads": 2,
        "out_hidden_size": hidden_size,
        "patch_size": 16,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "deepstack_visual_indexes": list(range(vision_depth)),
        "num_position_embeddings": 576,
    }
    config = Qwen3VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=True)
    return with_vision_tokens(config, tokenizer)


def with_vision_tokens(config: Qwen3VLConfig, tokenizer: PreTrainedTokenizerFast) -> Qwen3VLConfig:
    """``config`` reading ``tokenizer``'s vision tokens (image and video pads, vision start and end)
    and its padding and end tokens; its vocabulary stays (it must hold the tokenizer's).

    Raises:
        ValueError: a vocabulary smaller than the tokenizer, or a tokenizer without vision tokens.
    """
    text = config.text_config
    if text.vocab_size < len(tokenizer):
        raise ValueError(
            f"vocab_size: {text.vocab_size} is smaller than the tokenizer's {len(tokenizer)} tokens"
        )
    names = [IMAGE_PAD, VIDEO_PAD, VISION_START, VISION_END]
    ids = tokenizer.convert_tokens_to_ids(names)
    missing = [n for n, i in zip(names, ids, strict=True) if i in (None, tokenizer.unk_token_id)]
    if missing:
        raise ValueError(f"tokenizer: no vision token {', '.join(missing)}")
    config.image_token_id, config.video_token_id = ids[0], ids[1]
    config.vision_start_token_id, config.vision_end_token_id = ids[2], ids[3]
    text.pad_token_id, text.eos_token_id, text.bos_token_id = (
        tokenizer.pad_token_id,
        tokenizer.eos_token_id,
        None,
    )
    return config


def build_qwen3_vl(config: Qwen3VLConfig, seed: int = 0) -> Qwen3VLForConditionalGeneration:
    """A randomly initialised model, reproducible in ``seed``."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen3VLForConditionalGeneration(config)
    model.generation_config.pad_token_id = config.text_config.pad_token_id
    model.generation_config.eos_token_id = config.text_config.eos_token_id
    return model
