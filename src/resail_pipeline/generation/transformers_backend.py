"""Batched sampling from a live transformers model: left padding, KV cache, fp32 log-probs.

The trainer wraps its current student in a :class:`TransformersGenerator` to sample fresh
responses between updates; pipelines build one from a checkpoint with
:meth:`TransformersGenerator.from_checkpoint`.

What is guaranteed:

- The same prompts, params and seeds give identical outputs on the same hardware, dtype and
  ``batch_size``.
- Every response draws its uniforms from its own stream (:func:`~.base.response_seeds`), so the
  random choices do not depend on which other prompts share the call or the micro-batch. Under
  another grouping the batched kernels return the same log-probs up to rounding (about 1e-6 in
  fp32 on CPU), so a sampled token can differ only where its uniform falls within that rounding
  of a boundary of the cumulative distribution: rare for a trained policy, a few times per
  thousand tokens for a random model's near-uniform one. Greedy ties are as rare.

Cost and memory: prompts are sorted by length and cut into micro-batches of ``batch_size`` rows
(a prompt's ``n`` samples share one prefill), each left-padded to a multiple of
``pad_to_multiple_of`` tokens so that few distinct prefill shapes occur; only the last position's
logits are computed at prefill, and a row that ends leaves the batch and its cache.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm
from transformers import DynamicCache, PreTrainedModel

from resail_pipeline.checkpoints import load_policy, read_checkpoint_info
from resail_pipeline.generation.base import Generation, SamplingParams, response_seeds

logger = logging.getLogger(__name__)


@contextmanager
def eval_mode(model: torch.nn.Module) -> Iterator[None]:
    """Put every module of ``model`` in eval mode; restore each module's own flag on exit."""
    flags = [(module, module.training) for module in model.modules()]
    model.eval()
    try:
        yield
    finally:
        for module, training in flags:
            module.training = training


def choose_tokens(
    logits: torch.Tensor, params: SamplingParams, uniforms: torch.Tensor | None
) -> torch.Tensor:
    """The next token of each row: greedy, or sampled by inverse CDF from one uniform per row.

    Temperature scales the logits, then top-k keeps the ``top_k`` largest, then top-p keeps the
    smallest set of the remaining (renormalised) tokens whose mass reaches ``top_p``.

    Args:
        logits: ``(B, V)`` next-token logits.
        params: the decoding settings.
        uniforms: ``(B,)`` float64 draws in ``[0, 1)``; unused (may be ``None``) when greedy.

    Returns:
        ``(B,)`` token ids.
    """
    if params.temperature == 0:
        return logits.argmax(dim=-1)
    if uniforms is None:
        raise ValueError("uniforms: required when temperature > 0")
    scaled = logits.float() / params.temperature  # (B, V)
    if params.top_k != -1:
        values, index = scaled.topk(min(params.top_k, scaled.shape[-1]), dim=-1)  # (B, K)
    elif params.top_p < 1:
        values, index = scaled.sort(dim=-1, descending=True, stable=True)  # (B, V)
    else:
        values, index = scaled, None
    probs = torch.softmax(values.double(), dim=-1)  # (B, K)
    if params.top_p < 1:
        # values are sorted: drop a token once the mass of the tokens before it reaches top_p.
        probs = probs.masked_fill(probs.cumsum(dim=-1) - probs >= params.top_p, 0.0)
    cdf = probs.cumsum(dim=-1)  # (B, K)
    targets = (uniforms.to(cdf) * cdf[:, -1]).unsqueeze(-1)  # (B, 1)
    # right=True: the first position whose cdf exceeds the target, never a zero-mass token.
    picks = torch.searchsorted(cdf, targets, right=True).clamp_(max=cdf.shape[-1] - 1)  # (B, 1)
    return (picks if index is None else index.gather(-1, picks)).squeeze(-1)


class TransformersGenerator:
    """The :class:`~.base.Generator` over a transformers causal LM, on CPU or GPU.

    Args:
        model: a causal LM; used as is (device, dtype), in eval mode during a call and left in
            the train/eval state it had.
        tokenizer: its tokenizer; ``eos_token`` (``<|im_end|>`` for Qwen3 chat models) ends a
            response. Its own padding side is not used: prompts are always left-padded.
        policy_id: recorded with every response.
        batch_size: rows (prompt x sample) per forward pass; a prompt's ``n`` samples are never
            split, so a micro-batch holds ``max(1, batch_size // n)`` prompts.
        pad_to_multiple_of: prompt lengths in a micro-batch are padded up to a multiple of it,
            bounding the number of distinct shapes.
        progress: show a progress bar over micro-batches when a call has more than one.
    """

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: Any,
        *,
        policy_id: str,
        batch_size: int = 8,
        pad_to_multiple_of: int = 32,
        progress: bool = True,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size: must be >= 1, got {batch_size}")
        if pad_to_multiple_of < 1:
            raise ValueError(f"pad_to_multiple_of: must be >= 1, got {pad_to_multiple_of}")
        if tokenizer.eos_token_id is None:
            raise ValueError("tokenizer: has no eos_token, so a response could never end")
        self.model = model
        self.tokenizer = tokenizer
        self.policy_id = policy_id
        self.batch_size = batch_size
        self.pad_to_multiple_of = pad_to_multiple_of
        self.progress = progress
        self.eos_id: int = tokenizer.eos_token_id
        self.pad_id: int = (
            tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_id
        )

    @classmethod
    def from_checkpoint(
        cls,
        path: str | Path,
        *,
        dtype: torch.dtype | None = None,
        device: str = "auto",
        policy_id: str | None = None,
        **options: Any,
    ) -> TransformersGenerator:
        """Load a local checkpoint on ``device`` (``auto``: the first GPU if there is one, else the
        CPU; ``run.generation.device``); ``policy_id`` defaults to the one its manifest records."""
        model, tokenizer = load_policy(path, dtype=dtype, device=device)
        if policy_id is None:
            policy_id = read_checkpoint_info(path).policy_id
        return cls(model, tokenizer, policy_id=policy_id, **options)

    def generate(
        self,
        prompts: Sequence[str],
        params: SamplingParams,
        seeds: Sequence[int] | None = None,
    ) -> list[Generation]:
        """``len(prompts) * params.n`` generations, prompt-major; see the module notes."""
        stream_seeds = response_seeds(len(prompts), params, seeds)
        encoded = self._encode(prompts, params)
        # Longest first, so that the largest shapes come first and memory peaks early; a
        # prompt's n samples share its micro-batch and its prefill.
        order = sorted(range(len(encoded)), key=lambda i: -len(encoded[i]))
        per_chunk = max(1, self.batch_size // params.n)
        chunks = [order[i : i + per_chunk] for i in range(0, len(order), per_chunk)]
        by_row: dict[int, Generation] = {}
        start = time.perf_counter()
        bar = tqdm(
            chunks, desc="generate", leave=False, disable=not self.progress or len(chunks) < 2
        )
        with eval_mode(self.model), torch.inference_mode():
            for chunk in bar:
                rows = [i * params.n + j for i in chunk for j in range(params.n)]
                generated = self._generate_chunk(
                    [encoded[i] for i in chunk], [stream_seeds[r] for r in rows], params
                )
                by_row.update(zip(rows, generated, strict=True))
        results = [by_row[r] for r in range(len(stream_seeds))]
        tokens = sum(len(g.token_ids) for g in results)
        seconds = time.perf_counter() - start
        logger.debug(
            "generated %d responses, %d tokens in %.2f s (%.0f tokens/s)",
            len(results),
            tokens,
            seconds,
            tokens / max(seconds, 1e-9),
        )
        return results

    def _encode(self, prompts: Sequence[str], params: SamplingParams) -> list[list[int]]:
        """Token ids of each prompt, checked for emptiness and for room to generate."""
        if not prompts:
            return []
        encoded = self.tokenizer(list(prompts), add_special_tokens=False)["input_ids"]
        limit = getattr(self.model.config, "max_position_embeddings", None)
        for i, ids in enumerate(encoded):
            if not ids:
                raise ValueError(f"prompts[{i}]: empty prompt")
            if limit is not None and len(ids) + params.max_new_tokens > limit:
                raise ValueError(
                    f"prompts[{i}]: {len(ids)} prompt tokens + max_new_tokens "
                    f"{params.max_new_tokens} exceed the model's {limit} positions"
                )
        return encoded

    def _generate_chunk(
        self, prompts: list[list[int]], seeds: list[int], params: SamplingParams
    ) -> list[Generation]:
        """Decode one micro-batch of prompts, ``params.n`` rows each, one token per step."""
        cache, logits, mask, position = self._prefill(prompts, params.n)
        batch, steps, device = len(seeds), params.max_new_tokens, logits.device
        uniforms = None
        if params.temperature > 0:
            uniforms = torch.stack(
                [
                    torch.rand(
                        steps, generator=torch.Generator().manual_seed(s), dtype=torch.float64
                    )
                    for s in seeds
                ]
            ).to(device)  # (B, N)

        tokens = torch.full((batch, steps), self.pad_id, dtype=torch.long, device=device)  # (B, N)
        logprobs = torch.zeros((batch, steps), dtype=torch.float32, device=device)  # (B, N)
        lengths = torch.zeros(batch, dtype=torch.long, device=device)  # (B,)
        finished = torch.zeros(batch, dtype=torch.bool, device=device)  # (B,)
        active = torch.arange(batch, device=device)  # (A,) the rows still decoding
        for k in range(steps):
            draws = None if uniforms is None else uniforms[active, k]  # (A,)
            chosen = choose_tokens(logits, params, draws)  # (A,)
            tokens[active, k] = chosen
            chosen_logits = logits.gather(-1, chosen[:, None])[:, 0]  # (A,)
            logprobs[active, k] = chosen_logits - logits.logsumexp(dim=-1)
            lengths[active] = k + 1
            ended = chosen == self.eos_id  # (A,)
            finished[active[ended]] = True
            if k == steps - 1 or bool(ended.all()):
                break
            if bool(ended.any()):  # rows that ended leave the batch and the cache
                keep = (~ended).nonzero().squeeze(-1)  # (A',)
                cache.batch_select_indices(keep)
                active, chosen, mask, position = (
                    active[keep],
                    chosen[keep],
                    mask[keep],
                    position[keep],
                )
            mask = torch.cat([mask, mask.new_ones((len(active), 1))], dim=-1)  # (A, W + k + 1)
            position = position + 1  # (A, 1)
            logits = self._next_logits(chosen[:, None], mask, position, cache)  # (A, V)

        generations = []
        for b in range(batch):
            ids = tokens[b, : lengths[b]].tolist()
            text_ids = ids[:-1] if finished[b] else ids
            generations.append(
                Generation(
                    text=self.tokenizer.decode(text_ids, skip_special_tokens=False),
                    token_ids=tuple(ids),
                    logprobs=tuple(logprobs[b, : lengths[b]].tolist()),
                    finished=bool(finished[b]),
                )
            )
        return generations

    def _prefill(
        self, prompts: list[list[int]], n: int
    ) -> tuple[DynamicCache, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Run the left-padded prompts once and repeat the result for their ``n`` samples.

        Returns:
            the cache, the ``(B, V)`` next-token logits, the ``(B, W)`` attention mask and the
            ``(B, 1)`` position of each row's last token, ``B = len(prompts) * n``.
        """
        device = next(self.model.parameters()).device
        multiple = self.pad_to_multiple_of
        width = math.ceil(max(map(len, prompts)) / multiple) * multiple
        input_ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)  # (P, W)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)  # (P, W)
        for i, ids in enumerate(prompts):
            input_ids[i, width - len(ids) :] = torch.tensor(ids)
            mask[i, width - len(ids) :] = 1
        input_ids, mask = input_ids.to(device), mask.to(device)
        positions = (mask.cumsum(dim=-1) - 1).clamp(min=0)  # (P, W)
        cache = DynamicCache(config=self.model.config)
        logits = self._next_logits(input_ids, mask, positions, cache)  # (P, V)
        position = positions[:, -1:]  # (P, 1)
        if n > 1:
            cache.batch_repeat_interleave(n)
            logits = logits.repeat_interleave(n, dim=0)  # (B, V)
            mask = mask.repeat_interleave(n, dim=0)  # (B, W)
            position = position.repeat_interleave(n, dim=0)  # (B, 1)
        return cache, logits, mask, position

    def _next_logits(
        self,
        input_ids: torch.Tensor,
        mask: torch.Tensor,
        positions: torch.Tensor,
        cache: DynamicCache,
    ) -> torch.Tensor:
        """``(B, V)`` fp32 logits at the last position, extending ``cache`` with ``input_ids``."""
        out = self.model(
            input_ids=input_ids,
            attention_mask=mask,
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        return out.logits[:, -1].float()  # (B, V)
