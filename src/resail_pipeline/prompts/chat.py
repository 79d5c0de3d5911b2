"""Chat formatting of a user message through the model's own chat template, thinking disabled."""

from __future__ import annotations

from typing import Any


def chat_prompt(tokenizer: Any, user_message: str, system: str | None = None) -> str:
    """The prompt text the model is conditioned on, ending where the assistant's reply starts.

    Uses the tokenizer's chat template with ``enable_thinking=False`` (Qwen3 then opens the reply
    with an empty think block); templates that ignore the flag are unaffected.
    """
    messages = [] if system is None else [{"role": "system", "content": system}]
    messages.append({"role": "user", "content": user_message})
    return tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True, enable_thinking=False
    )
