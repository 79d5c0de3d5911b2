"""Qwen3-architecture models built from a config (random init), for the embedded default."""

from __future__ import annotations

from typing import Any

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM


def small_qwen3_config(
    vocab_size: int,
    *,
    hidden_size: int = 256,
    num_hidden_layers: int = 4,
    num_attention_heads: int = 4,
    num_key_value_heads: int = 4,
    intermediate_size: int = 768,
    max_position_embeddings: int = 4096,
    pad_token_id: int = 0,
    eos_token_id: int | None = None,
    **overrides: Any,
) -> Qwen3Config:
    """A small Qwen3 config: RoPE, RMSNorm, SwiGLU, tied embeddings."""
    return Qwen3Config(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=num_key_value_heads,
        head_dim=hidden_size // num_attention_heads,
        intermediate_size=intermediate_size,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=True,
        pad_token_id=pad_token_id,
        eos_token_id=eos_token_id,
        bos_token_id=None,
        **overrides,
    )


def build_qwen3(config: Qwen3Config, seed: int = 0) -> Qwen3ForCausalLM:
    """A randomly initialised model, reproducible in ``seed``."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen3ForCausalLM(config)
    model.generation_config.pad_token_id = config.pad_token_id
    model.generation_config.eos_token_id = config.eos_token_id
    return model
