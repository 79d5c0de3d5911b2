"""The longest prompts a run at the paper's settings sends, in Qwen3's tokens
(reference/tokenizers/qwen3): 30-step episodes, summaries of up to 1,024 tokens, on TextCraft and on
ALFWorld's default game set (generated first where missing)::

    .venv/bin/python scripts/qwen3_prompts.py

The privileged figure is the ``--prompt-tokens`` a memory plan of the paper's settings needs
(``python -m resail_pipeline.training.memory``).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from transformers import AutoTokenizer

from resail_pipeline.envs import make_env, provide_env_data
from resail_pipeline.prompt_budget import estimate_prompt_lengths

QWEN3 = Path(__file__).resolve().parents[1] / "reference" / "tokenizers" / "qwen3"
#: the splits the paper's runs collect and evaluate on
SPLITS = {"textcraft": ("train", "test"), "alfworld": ("train", "id", "ood")}


def main() -> None:
    tokenizer = AutoTokenizer.from_pretrained(QWEN3, trust_remote_code=False)
    for env, splits in SPLITS.items():
        options: dict = {}
        provide_env_data(env, options)
        factory = partial(make_env, env, max_steps=30, **options)
        estimate = estimate_prompt_lengths(factory, splits, tokenizer, summary_tokens=1024)
        print(
            f"{env}: ordinary {estimate.ordinary}, privileged {estimate.privileged}, summary "
            f"prompt {estimate.summary_prompt} tokens ({estimate.episodes} expert episodes)"
        )


if __name__ == "__main__":
    main()
