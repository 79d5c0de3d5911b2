"""The :class:`~.base.Generator` over vLLM, for GPU nodes (the optional ``gpu`` extra).

``vllm`` is imported only when a generator is built, so this module imports anywhere. Prompts
are tokenized here exactly as the transformers backend does (no special tokens added), each
response is its own request with the seed of :func:`~.base.response_seeds`, and the engine is
asked for raw log-probs, i.e. those of the model before temperature, top-k and top-p. The
engine's automatic prefix caching (shared prompt prefixes encoded once, within a call and across
calls) is turned on explicitly, whatever the installed version's default.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from resail_pipeline.checkpoints import check_checkpoint, read_checkpoint_info
from resail_pipeline.devices import release_device_memory
from resail_pipeline.generation.base import (
    Generation,
    Generator,
    SamplingParams,
    response_seeds,
)


class VLLMGenerator(Generator):
    """Generation with a ``vllm.LLM`` engine.

    Args:
        llm: the engine; it must have been built with ``logprobs_mode="raw_logprobs"`` (as
            :meth:`from_checkpoint` does) for ``Generation.logprobs`` to be behaviour log-probs.
        policy_id: recorded with every response.
        progress: show vLLM's progress bar.
    """

    def __init__(self, llm: Any, *, policy_id: str, progress: bool = True) -> None:
        self.llm = llm
        self.tokenizer = llm.get_tokenizer()
        if self.tokenizer.eos_token_id is None:
            raise ValueError("tokenizer: has no eos_token, so a response could never end")
        self.policy_id = policy_id
        self.progress = progress
        model_config = getattr(getattr(llm, "llm_engine", None), "model_config", None)
        #: the engine's context length: a prompt and its new tokens must fit in it
        self.max_model_len: int | None = getattr(model_config, "max_model_len", None)

    @classmethod
    def option_names(cls) -> set[str] | None:
        """The options :meth:`from_checkpoint` takes: its own and ``vllm.EngineArgs``' fields;
        ``None`` where vLLM is not installed (nothing to check against)."""
        try:
            from vllm import EngineArgs
        except ImportError:
            return None
        import dataclasses

        from resail_pipeline.generation import keyword_names

        fixed = {"model", "trust_remote_code", "logprobs_mode", "generation_config"}
        engine = {f.name for f in dataclasses.fields(EngineArgs)} - fixed
        return (keyword_names(cls.from_checkpoint) - {"path"}) | engine

    @classmethod
    def from_checkpoint(
        cls,
        path: str | Path,
        *,
        dtype: str = "bfloat16",
        policy_id: str | None = None,
        seed: int = 0,
        progress: bool = True,
        enable_prefix_caching: bool = True,
        **engine_options: Any,
    ) -> VLLMGenerator:
        """Start an engine on a local checkpoint; ``engine_options`` go to ``vllm.LLM``.

        ``policy_id`` defaults to the one the checkpoint's manifest records. The model's own
        ``generation_config.json`` defaults are ignored: only :class:`SamplingParams` decide.
        """
        from vllm import LLM

        llm = LLM(
            model=str(check_checkpoint(path)),
            dtype=dtype,
            seed=seed,
            trust_remote_code=False,
            logprobs_mode="raw_logprobs",
            generation_config="vllm",
            enable_prefix_caching=enable_prefix_caching,
            **engine_options,
        )
        if policy_id is None:
            policy_id = read_checkpoint_info(path).policy_id
        return cls(llm, policy_id=policy_id, progress=progress)

    def close(self) -> None:
        """Shut the engine's core (its worker processes and their GPU memory) down, then vLLM's
        distributed state."""
        if self.llm is None:
            return
        engine_core = getattr(self.llm.llm_engine, "engine_core", None)
        if engine_core is not None:
            engine_core.shutdown()
        self.llm = None
        from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

        cleanup_dist_env_and_memory()
        release_device_memory()

    def check_lengths(self, encoded: Sequence[Sequence[int]], max_new_tokens: int) -> None:
        """Refuse, before any request runs, a call whose longest prompt and its ``max_new_tokens``
        exceed the engine's ``max_model_len`` (vLLM would fail the whole call on it, after the
        other requests had run), naming the setting and the lengths."""
        if self.max_model_len is None or not encoded:
            return
        longest = max(len(ids) for ids in encoded)
        if longest + max_new_tokens > self.max_model_len:
            raise ValueError(
                f"run.generation.vllm.max_model_len: {self.max_model_len} tokens, but a prompt of "
                f"{longest} tokens with {max_new_tokens} new ones needs {longest + max_new_tokens}; "
                "raise it (up to the model's max_position_embeddings) or shorten the episodes "
                "(run.env_options.max_steps)"
            )

    def generate(
        self,
        prompts: Sequence[str],
        params: SamplingParams,
        seeds: Sequence[int] | None = None,
    ) -> list[Generation]:
        """``len(prompts) * params.n`` generations, prompt-major (one request per response)."""
        if self.llm is None:
            raise RuntimeError(f"generator of {self.policy_id}: closed")
        if not prompts:
            return []
        from vllm import SamplingParams as VLLMSamplingParams

        stream_seeds = response_seeds(len(prompts), params, seeds)
        encoded = self.tokenizer(list(prompts), add_special_tokens=False)["input_ids"]
        self.check_lengths(encoded, params.max_new_tokens)
        eos_id = self.tokenizer.eos_token_id
        requests = [{"prompt_token_ids": encoded[r // params.n]} for r in range(len(stream_seeds))]
        request_params = [
            VLLMSamplingParams(
                n=1,
                temperature=params.temperature,
                top_p=params.top_p,
                top_k=params.top_k,
                max_tokens=params.max_new_tokens,
                seed=seed,
                stop_token_ids=[eos_id],
                logprobs=0,  # only the sampled token's log-prob
                detokenize=False,
            )
            for seed in stream_seeds
        ]
        # vLLM 0.32 divides by the bar's elapsed time, which a bar disabled by TQDM_DISABLE keeps
        # at zero: no bar where tqdm is disabled
        bar = self.progress and not os.environ.get("TQDM_DISABLE")
        outputs = self.llm.generate(requests, request_params, use_tqdm=bar)
        generations = []
        for output in outputs:
            (completion,) = output.outputs
            ids = tuple(completion.token_ids)
            finished = completion.finish_reason == "stop"
            generations.append(
                Generation(
                    text=self.tokenizer.decode(
                        ids[:-1] if finished else ids, skip_special_tokens=False
                    ),
                    token_ids=ids,
                    logprobs=tuple(
                        step[token].logprob
                        for step, token in zip(completion.logprobs, ids, strict=True)
                    ),
                    finished=finished,
                )
            )
        return generations
