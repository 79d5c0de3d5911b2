"""Small Qwen3-architecture policies built here: a word-level tokenizer and a model config."""

from resail_pipeline.modeling.model import build_qwen3, small_qwen3_config
from resail_pipeline.modeling.tokenizer import CHAT_TEMPLATE, build_word_tokenizer

__all__ = ["CHAT_TEMPLATE", "build_qwen3", "build_word_tokenizer", "small_qwen3_config"]
