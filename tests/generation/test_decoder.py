"""The functional decoder forward against transformers' own, and the cache buffer's memory."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM
from transformers.integrations import sdpa_attention

from resail_pipeline.generation import SamplingParams
from resail_pipeline.generation.decoder import (
    DecoderForward,
    _compiled,
    _one_query_attention,
    can_compile,
    unsupported,
)
from resail_pipeline.generation.transformers_backend import (
    TransformersGenerator,
    _KVBuffer,
    _Storage,
)
from resail_pipeline.prompts import chat_prompt

MESSAGES = [
    "Goal: craft wooden pickaxe.",
    "Your current observation is: Crafting commands: craft 4 oak planks using 1 oak logs",
    "Inventory: [oak planks] (4)",
    "Goal: craft wooden pickaxe. Inventory: [oak planks] (4)",
]
#: Whether the installed transformers routes one-query grouped attention as the forward does
#: (queries of a group stacked, as 5.24 does); 5.19 repeats the keys, which rounds differently.
SAME_ROUTE = hasattr(sdpa_attention, "pack_gqa")
GREEDY = SamplingParams(temperature=0.0, max_new_tokens=8)
SAMPLED = SamplingParams(temperature=1.0, max_new_tokens=8, seed=5, n=2)


def tiny(architecture: str, tokenizer) -> torch.nn.Module:
    """A tiny random decoder of ``architecture`` (2 layers, width 32, grouped queries)."""
    sizes = dict(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(0)
    if architecture == "qwen2":  # biases on q, k and v
        return Qwen2ForCausalLM(Qwen2Config(**sizes)).eval()
    return LlamaForCausalLM(LlamaConfig(**sizes, attention_bias=True)).eval()


def transformers_forward(generator: TransformersGenerator) -> TransformersGenerator:
    """``generator`` running the model's own forward instead of :class:`DecoderForward`."""
    generator._decoder = None
    return generator


def make(model, tokenizer, **options) -> TransformersGenerator:
    return TransformersGenerator(model, tokenizer, policy_id="tiny", progress=False, **options)


@pytest.mark.parametrize("architecture", ["qwen3", "qwen2", "llama"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("prefix_reuse", [False, True])
def test_eager_forward_gives_transformers_outputs_bit_for_bit(
    architecture, dtype, prefix_reuse, tiny_model, tiny_tokenizer
):
    model = tiny_model if architecture == "qwen3" else tiny(architecture, tiny_tokenizer)
    model = model.to(dtype)
    prompts = [chat_prompt(tiny_tokenizer, m) for m in MESSAGES]
    options = dict(batch_size=3, prefill_tokens=64, prefix_reuse=prefix_reuse)
    ours = make(model, tiny_tokenizer, **options)
    assert isinstance(ours._decoder, DecoderForward) and not ours._decoder.compiled
    theirs = transformers_forward(make(model, tiny_tokenizer, **options))
    for params in (GREEDY, SAMPLED):
        got, want = ours.generate(prompts, params), theirs.generate(prompts, params)
        if SAME_ROUTE:
            # exact on any processor: both run the same kernels on the same shapes at the same
            # batch positions, so they round alike; what differs is only who calls them
            assert got == want
            continue
        assert [g.token_ids for g in got] == [g.token_ids for g in want]
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g.logprobs, w.logprobs, atol=1e-5, rtol=0)


def test_compiled_forward_agrees_with_eager_within_rounding(tiny_model, tiny_tokenizer):
    if not can_compile(torch.device("cpu")):
        pytest.skip("no C++ compiler for torch.compile here")
    prompts = [chat_prompt(tiny_tokenizer, m) for m in MESSAGES]
    compiled = make(tiny_model, tiny_tokenizer, batch_size=3, compile=True)
    assert compiled._decoder.compiled
    eager = make(tiny_model, tiny_tokenizer, batch_size=3)
    for got, want in zip(
        compiled.generate(prompts, GREEDY), eager.generate(prompts, GREEDY), strict=True
    ):
        assert got.token_ids == want.token_ids
        torch.testing.assert_close(
            torch.tensor(got.logprobs), torch.tensor(want.logprobs), atol=1e-4, rtol=0
        )


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_one_query_attention_agrees_with_sdpa_over_a_masked_grouped_cache_view(compiled, dtype):
    if compiled and not can_compile(torch.device("cpu")):
        pytest.skip("no C++ compiler for torch.compile here")
    torch.manual_seed(0)
    rows, heads, kv_heads, dim, capacity, length = 5, 4, 2, 16, 40, 29
    cache = torch.randn(2, rows, kv_heads, capacity, dim, dtype=dtype)
    keys, values = cache[0, :, :, :length], cache[1, :, :, :length]  # views, as the buffer's
    q = torch.randn(rows, heads, 1, dim, dtype=dtype)
    mask = torch.ones(rows, 1, 1, length, dtype=torch.bool)
    mask[1, ..., :7] = False  # a row after padding
    mask[3, ..., 10:20] = False
    attend = _compiled(_one_query_attention) if compiled else _one_query_attention
    for m in (mask, None):
        got = attend(q, keys, values, m, 0.25)
        assert got.shape == (rows, heads, 1, dim) and got.dtype == dtype
        expanded = [x.double().repeat_interleave(heads // kv_heads, dim=1) for x in (keys, values)]
        want = torch.nn.functional.scaled_dot_product_attention(
            q.double(), *expanded, attn_mask=m, scale=0.25
        )
        # fp32 accumulation: within the output dtype's own rounding of the exact result
        tolerance = 1e-5 if dtype == torch.float32 else 1e-2
        torch.testing.assert_close(got.double(), want, atol=tolerance, rtol=0)


def test_compiled_bf16_decoding_without_amx_takes_the_loop_and_agrees_with_eager(
    tiny_model, tiny_tokenizer, monkeypatch
):
    import resail_pipeline.generation.decoder as decoder

    if not can_compile(torch.device("cpu")):
        pytest.skip("no C++ compiler for torch.compile here")
    model = copy.deepcopy(tiny_model).to(torch.bfloat16)
    monkeypatch.setattr(decoder, "amx_kernels", lambda: True)
    assert DecoderForward(model, compile=True)._one_query is None  # AMX: SDPA's kernel stays
    monkeypatch.setattr(decoder, "amx_kernels", lambda: False)
    assert DecoderForward(tiny_model, compile=True)._one_query is None  # fp32: SDPA's kernel
    assert DecoderForward(model, compile=False)._one_query is None  # eager: transformers' route
    compiled = make(model, tiny_tokenizer, batch_size=3, compile=True)
    assert compiled._decoder._one_query is not None
    prompts = [chat_prompt(tiny_tokenizer, m) for m in MESSAGES]
    eager = make(model, tiny_tokenizer, batch_size=3)
    for got, want in zip(
        compiled.generate(prompts, GREEDY), eager.generate(prompts, GREEDY), strict=True
    ):
        assert got.token_ids == want.token_ids
        torch.testing.assert_close(
            torch.tensor(got.logprobs), torch.tensor(want.logprobs), atol=0.1, rtol=0
        )


def test_other_architectures_run_transformers_forward(tiny_model, tiny_tokenizer, monkeypatch):
    # the model shares its config with the session's checkpoints: set it back afterwards
    monkeypatch.setattr(tiny_model.config, "hidden_act", "gelu")
    assert unsupported(tiny_model) == "hidden_act 'gelu' is not silu"
    assert make(tiny_model, tiny_tokenizer)._decoder is None
    assert make(tiny_model, tiny_tokenizer, compile="auto")._decoder is None
    with pytest.raises(ValueError, match="compile: the model cannot run compiled"):
        make(tiny_model, tiny_tokenizer, compile=True)
    with pytest.raises(ValueError, match="model: hidden_act"):
        DecoderForward(tiny_model)


def test_compile_option_is_checked(tiny_model, tiny_tokenizer):
    with pytest.raises(ValueError, match="compile: must be true, false or 'auto'"):
        make(tiny_model, tiny_tokenizer, compile="yes")


def test_buffers_reuse_memory_and_what_it_held_never_reaches_an_output(tiny_model, tiny_tokenizer):
    prompts = [chat_prompt(tiny_tokenizer, m) for m in MESSAGES]
    generator = make(tiny_model, tiny_tokenizer, batch_size=3)
    first = generator.generate(prompts, SAMPLED)
    assert generator._storage.free  # kept for the next call
    memory = {flat.data_ptr() for flat in generator._storage.free}
    generator.generate(prompts[::-1], GREEDY)  # other rows in the reused memory
    assert {flat.data_ptr() for flat in generator._storage.free} & memory
    # exact on any processor: the same prompts at the same batch positions, the same kernels;
    # only the memory differs, and a stale value reaching an output would change the numbers
    assert generator.generate(prompts, SAMPLED) == first
    assert make(tiny_model, tiny_tokenizer, batch_size=3).generate(prompts, SAMPLED) == first


def test_storage_hands_out_the_smallest_fit_and_keeps_the_largest():
    storage = _Storage(keep=2)
    small, large = (
        storage.take(10, torch.float32, torch.device("cpu")),
        storage.take(100, torch.float32, torch.device("cpu")),
    )
    assert small.numel() == 13 and not small.any()  # new memory is zeroed, with headroom
    assert large.numel() == 125
    storage.give(large)
    storage.give(small)
    assert storage.take(8, torch.float32, torch.device("cpu")) is small
    assert storage.take(120, torch.float32, torch.device("cpu")) is large  # a larger one fits
    assert storage.take(8, torch.bfloat16, torch.device("cpu")).dtype == torch.bfloat16
    for numel in (1, 2, 3):
        storage.give(torch.zeros(numel))
    assert [flat.numel() for flat in storage.free] == [3, 2]
    none = _Storage(keep=0)
    assert none.take(10, torch.float32, torch.device("cpu")).numel() == 10  # none kept: no room
    none.give(torch.zeros(4))
    assert none.free == []


def test_keep_moves_later_rows_into_dropped_places():
    storage = _Storage(keep=0)
    mask = torch.ones(5, 6, dtype=torch.long)
    buffer = _KVBuffer.allocate((1, 2, 5, 1, 6, 1), mask, torch.float32, storage)
    buffer.data.copy_(torch.arange(5.0)[None, None, :, None, None, None].expand_as(buffer.data))
    buffer.mask.copy_(torch.arange(5)[:, None].expand(5, 6))
    order = buffer.keep(torch.tensor([1, 3, 4]), slice(2, 6))
    assert order.tolist() == [3, 1, 4]  # dropped rows 0 and 2 take rows 3 and 4; row 1 stays
    assert buffer.data.shape[2] == 3 and buffer.mask.shape[0] == 3
    assert buffer.data[0, 0, :, 0, 2:, 0].tolist() == [[3.0] * 4, [1.0] * 4, [4.0] * 4]
    assert buffer.data[0, 0, :, 0, :2, 0].tolist() == [[0.0] * 2, [1.0] * 2, [2.0] * 2]  # unused
    assert buffer.mask[:, 0].tolist() == [3, 1, 4]
