"""The vLLM backend against the transformers backend, on a CUDA device with the ``gpu`` extra."""

from __future__ import annotations

import pytest
import torch

from resail_pipeline.generation import SamplingParams, derive_seed, make_generator
from resail_pipeline.prompts import chat_prompt

pytestmark = pytest.mark.gpu

MESSAGES = ["Goal: craft wooden pickaxe.", "Inventory: [oak planks] (4)", "get 1 oak logs"]


@pytest.fixture(scope="module")
def gpu_checkpoint(tmp_path_factory, tiny_tokenizer):
    """A small random Qwen3 whose head size the GPU attention kernels accept."""
    pytest.importorskip("vllm")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from resail_pipeline.checkpoints import save_policy
    from resail_pipeline.modeling import build_qwen3, small_qwen3_config

    config = small_qwen3_config(
        len(tiny_tokenizer),
        hidden_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=512,
        pad_token_id=tiny_tokenizer.pad_token_id,
        eos_token_id=tiny_tokenizer.eos_token_id,
    )
    path = tmp_path_factory.mktemp("checkpoints") / "gpu"
    save_policy(build_qwen3(config, seed=0), tiny_tokenizer, path, name="gpu")
    return path


@pytest.fixture(scope="module")
def vllm_generator(gpu_checkpoint):
    return make_generator(
        "vllm", gpu_checkpoint, dtype="float32", gpu_memory_utilization=0.3, progress=False
    )


def test_greedy_matches_the_transformers_backend(gpu_checkpoint, vllm_generator):
    reference = make_generator("transformers", gpu_checkpoint, device="cuda", progress=False)
    prompts = [chat_prompt(vllm_generator.tokenizer, m) for m in MESSAGES]
    params = SamplingParams(temperature=0.0, max_new_tokens=8)
    ours, theirs = vllm_generator.generate(prompts, params), reference.generate(prompts, params)
    assert vllm_generator.policy_id == reference.policy_id
    for a, b in zip(ours, theirs, strict=True):
        assert a.token_ids == b.token_ids
        torch.testing.assert_close(
            torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-3, rtol=0
        )


def test_sampling_is_seeded_per_response(vllm_generator):
    prompts = [chat_prompt(vllm_generator.tokenizer, m) for m in MESSAGES]
    params = SamplingParams(temperature=1.0, max_new_tokens=8, n=2, seed=5)
    first = vllm_generator.generate(prompts, params)
    assert len(first) == 6
    assert vllm_generator.generate(prompts, params) == first
    alone = vllm_generator.generate(prompts[2:], params, seeds=[derive_seed(params.seed, 2)])
    assert [g.token_ids for g in alone] == [g.token_ids for g in first[4:]]
    assert all(len(g.logprobs) == len(g.token_ids) for g in first)
