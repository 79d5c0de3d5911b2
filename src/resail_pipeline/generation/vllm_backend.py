"""The :class:`~.base.Generator` over vLLM, for GPU nodes (the optional ``gpu`` extra).

``vllm`` is imported only when a generator is built, so this module imports anywhere. Prompts
are tokenized here exactly as the transformers backend does (no special tokens added), or come
encoded with their images (:class:`~.base.VisionPrompt`, a Qwen3-VL checkpoint), each
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
    Prompt,
    SamplingParams,
    VisionPrompt,
    response_seeds,
    vision_token_ids,
)


class VLLMGenerator(Generator):
    """Generation with a ``vllm.LLM`` engine.

    Args:
        llm: the engine; it must have been built with ``logprobs_mode="raw_logprobs"`` (as
            :meth:`from_checkpoint` does) for ``Generation.logprobs`` to be behaviour log-probs.
        policy_id: recorded with every response.
        progress: show vLLM's progress bar.
        settings: where the caller's configuration holds the engine's options, and
        episode_length: the setting that shortens its prompts; both named when a prompt is too
            long (the text agents' by default; the GUI agent's are ``aitz.generation.vllm`` and
            ``aitz.data.max_steps``).
    """

    def __init__(
        self,
        llm: Any,
        *,
        policy_id: str,
        progress: bool = True,
        settings: str = "run.generation.vllm",
        episode_length: str = "run.env_options.max_steps",
    ) -> None:
        self.llm = llm
        self.settings = settings
        self.episode_length = episode_length
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
        settings: str = "run.generation.vllm",
        episode_length: str = "run.env_options.max_steps",
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
        return cls(
            llm,
            policy_id=policy_id,
            progress=progress,
            settings=settings,
            episode_length=episode_length,
        )

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
                f"{self.settings}.max_model_len: {self.max_model_len} tokens, but a prompt of "
                f"{longest} tokens with {max_new_tokens} new ones needs {longest + max_new_tokens}; "
                "raise it (up to the model's max_position_embeddings) or shorten the episodes "
                f"({self.episode_length})"
            )

    def _requests(self, prompts: Sequence[Prompt]) -> tuple[list[dict[str, Any]], list[list[int]]]:
        """One request per prompt, and each prompt's token ids as the model reads them.

        Texts are tokenized here as the transformers backend does. A :class:`VisionPrompt` goes
        as its token ids with its images (``multi_modal_data``), each image's run of pad tokens
        collapsed to one pad: vLLM takes a token prompt as not yet expanded and repeats every
        image's pad once per merged patch itself (:func:`collapse_image_pads`), which gives back
        the prompt's own ids.
        """
        texts = [p for p in prompts if isinstance(p, str)]
        encoded = iter(
            self.tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else []
        )
        requests, model_ids = [], []
        for prompt in prompts:
            if isinstance(prompt, VisionPrompt):
                ids = list(prompt.input_ids)
                request: dict[str, Any] = {"prompt_token_ids": ids}
                if prompt.images:
                    request["prompt_token_ids"] = collapse_image_pads(ids, self._image_pad())
                    request["multi_modal_data"] = {"image": list(prompt.images)}
                requests.append(request)
            else:
                ids = next(encoded)
                requests.append({"prompt_token_ids": ids})
            model_ids.append(ids)
        return requests, model_ids

    def _image_pad(self) -> int:
        """The id of the model's image pad token (``config.json``'s ``image_token_id``)."""
        config = self.llm.llm_engine.model_config.hf_config
        pad = getattr(config, "image_token_id", None)
        if pad is None:
            raise ValueError(
                f"prompts: images given, but the model of {self.policy_id} takes none "
                f"({type(config).__name__} names no image_token_id)"
            )
        return int(pad)

    def generate(
        self,
        prompts: Sequence[Prompt],
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
        encoded, model_ids = self._requests(prompts)
        self.check_lengths(model_ids, params.max_new_tokens)
        eos_id = self.tokenizer.eos_token_id
        rows = range(len(stream_seeds))
        requests = [encoded[r // params.n] for r in rows]
        # a vision-language prompt's response is decoded as the transformers backend decodes it,
        # its placeholder tokens suppressed as there (vLLM's logit bias is at most 100 in size)
        skip_special = [isinstance(prompts[r // params.n], VisionPrompt) for r in rows]
        suppressed = (
            {i: -100.0 for i in vision_token_ids(self.llm.llm_engine.model_config.hf_config)}
            if any(skip_special)
            else {}
        )
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
                logit_bias=suppressed if skip else None,
            )
            for seed, skip in zip(stream_seeds, skip_special, strict=True)
        ]
        # vLLM 0.32 divides by the bar's elapsed time, which a bar disabled by TQDM_DISABLE keeps
        # at zero: no bar where tqdm is disabled
        bar = self.progress and not os.environ.get("TQDM_DISABLE")
        outputs = self.llm.generate(requests, request_params, use_tqdm=bar)
        generations = []
        for output, skip in zip(outputs, skip_special, strict=True):
            (completion,) = output.outputs
            ids = tuple(completion.token_ids)
            finished = completion.finish_reason == "stop"
            generations.append(
                Generation(
                    text=self.tokenizer.decode(
                        ids[:-1] if finished else ids, skip_special_tokens=skip
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


def collapse_image_pads(ids: Sequence[int], pad: int) -> list[int]:
    """``ids`` with every run of ``pad`` (one image's expanded pads) cut to a single ``pad``."""
    out: list[int] = []
    for token in ids:
        if token == pad and out and out[-1] == pad:
            continue
        out.append(token)
    return out
