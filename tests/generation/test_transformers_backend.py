"""The transformers generation backend on the tiny random Qwen3."""

from __future__ import annotations

import copy

import pytest
import torch

from resail_pipeline.generation import (
    Generator,
    SamplingParams,
    derive_seed,
    make_generator,
)
from resail_pipeline.generation.decoder import can_compile, uncached_autocast
from resail_pipeline.generation.transformers_backend import (
    _STORAGE_HEADROOM,
    TransformersGenerator,
    choose_tokens,
    resolve_cuda_graphs,
    resolved_cuda_graphs,
)
from resail_pipeline.prompts import chat_prompt

from ._compare import assert_same_generations

MESSAGES = [
    "Goal: craft wooden pickaxe.",
    "Your current observation is: Crafting commands: craft 4 oak planks using 1 oak logs",
    "Inventory: [oak planks] (4)",
    "You should first reason step-by-step. This reasoning process MUST be enclosed within "
    "<thinking> </thinking> tags. Then choose exactly one action.",
    "get 1 oak logs",
]
GREEDY = SamplingParams(temperature=0.0, max_new_tokens=10)
SAMPLED = SamplingParams(temperature=1.0, max_new_tokens=10, seed=7)


@pytest.fixture()
def prompts(tiny_tokenizer) -> list[str]:
    return [chat_prompt(tiny_tokenizer, m) for m in MESSAGES]


def make(model, tokenizer, batch_size: int = 4, **options) -> TransformersGenerator:
    return TransformersGenerator(
        model, tokenizer, policy_id="tiny@test", batch_size=batch_size, progress=False, **options
    )


def full_forward_logprobs(model, tokenizer, prompt: str, token_ids) -> torch.Tensor:
    """``(N, V)`` log-softmax at the positions that predicted ``token_ids``, unpadded, no cache."""
    ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logits = model(torch.tensor([ids + list(token_ids)])).logits[0].float()  # (P + N, V)
    return torch.log_softmax(logits[len(ids) - 1 : -1], dim=-1)  # (N, V)


def test_it_is_a_generator_with_the_tokenizer(tiny_model, tiny_tokenizer):
    generator = make(tiny_model, tiny_tokenizer)
    assert isinstance(generator, Generator)
    assert generator.tokenizer is tiny_tokenizer
    assert generator.generate([], SAMPLED) == []


def test_n_samples_per_prompt_come_prompt_major_with_matching_lengths(
    tiny_model, tiny_tokenizer, prompts
):
    params = SamplingParams(temperature=1.0, max_new_tokens=6, n=3, seed=1)
    out = make(tiny_model, tiny_tokenizer).generate(prompts[:2], params)
    assert len(out) == 6
    for g in out:
        assert 1 <= len(g.token_ids) <= 6
        assert len(g.logprobs) == len(g.token_ids)
        assert all(lp <= 0.0 for lp in g.logprobs)
    # Response j of prompt i is the one a call for prompt i alone draws for its j-th sample.
    seed_1 = derive_seed(params.seed, 1)
    alone = make(tiny_model, tiny_tokenizer).generate(prompts[1:2], params, seeds=[seed_1])
    assert [g.token_ids for g in out[3:]] == [g.token_ids for g in alone]
    # Micro-batches smaller than n still keep a prompt's samples together.
    narrow = make(tiny_model, tiny_tokenizer, batch_size=2).generate(prompts[:2], params)
    assert [g.token_ids for g in narrow] == [g.token_ids for g in out]
    # The samples of one prompt differ: each has its own stream.
    assert len({g.token_ids for g in out[:3]}) == 3


def test_greedy_tokens_are_the_argmax_and_logprobs_match_a_full_forward(
    tiny_model, tiny_tokenizer, prompts
):
    out = make(tiny_model, tiny_tokenizer).generate(prompts, GREEDY)
    for prompt, g in zip(prompts, out, strict=True):
        reference = full_forward_logprobs(tiny_model, tiny_tokenizer, prompt, g.token_ids)
        assert g.token_ids == tuple(reference.argmax(dim=-1).tolist())
        chosen = reference.gather(-1, torch.tensor(g.token_ids)[:, None])[:, 0]
        torch.testing.assert_close(torch.tensor(g.logprobs), chosen, atol=1e-5, rtol=0)


def test_sampled_logprobs_are_untempered_and_untruncated(tiny_model, tiny_tokenizer, prompts):
    params = SamplingParams(temperature=0.5, top_p=0.9, top_k=5, max_new_tokens=8, seed=3, n=2)
    out = make(tiny_model, tiny_tokenizer).generate(prompts, params)
    for prompt, g in zip([p for p in prompts for _ in range(2)], out, strict=True):
        reference = full_forward_logprobs(tiny_model, tiny_tokenizer, prompt, g.token_ids)
        chosen = reference.gather(-1, torch.tensor(g.token_ids)[:, None])[:, 0]
        torch.testing.assert_close(torch.tensor(g.logprobs), chosen, atol=1e-5, rtol=0)
        # Every sampled token was among the 5 most likely ones.
        top5 = reference.topk(5, dim=-1).indices
        assert all(t in row for t, row in zip(g.token_ids, top5.tolist(), strict=True))


def test_left_padded_batches_give_the_unbatched_greedy_output(tiny_model, tiny_tokenizer, prompts):
    lengths = {len(tiny_tokenizer(p)["input_ids"]) for p in prompts}
    assert len(lengths) == len(prompts)  # the batch really needs padding
    batched = make(tiny_model, tiny_tokenizer, batch_size=5).generate(prompts, GREEDY)
    alone = [make(tiny_model, tiny_tokenizer).generate([p], GREEDY)[0] for p in prompts]
    for b, a in zip(batched, alone, strict=True):
        assert b.token_ids == a.token_ids
        torch.testing.assert_close(
            torch.tensor(b.logprobs), torch.tensor(a.logprobs), atol=1e-5, rtol=0
        )


def test_same_seed_same_output_other_seed_other_output(tiny_model, tiny_tokenizer, prompts):
    generator = make(tiny_model, tiny_tokenizer)
    first = generator.generate(prompts, SAMPLED)
    assert generator.generate(prompts, SAMPLED) == first
    other = generator.generate(prompts, SamplingParams(temperature=1.0, max_new_tokens=10, seed=8))
    assert [g.token_ids for g in other] != [g.token_ids for g in first]


def test_sampled_output_does_not_depend_on_grouping(tiny_model, tiny_tokenizer, prompts):
    prompt_seeds = [derive_seed(SAMPLED.seed, i) for i in range(len(prompts))]
    reference = make(tiny_model, tiny_tokenizer, batch_size=5).generate(prompts, SAMPLED)
    # Other micro-batch sizes, and each prompt alone with its seed, give the same responses.
    for batch_size in (1, 2, 3):
        regrouped = make(tiny_model, tiny_tokenizer, batch_size=batch_size)
        assert [g.token_ids for g in regrouped.generate(prompts, SAMPLED)] == [
            g.token_ids for g in reference
        ]
    reordered = make(tiny_model, tiny_tokenizer).generate(
        prompts[::-1], SAMPLED, seeds=prompt_seeds[::-1]
    )
    assert [g.token_ids for g in reordered[::-1]] == [g.token_ids for g in reference]


def test_a_cache_token_budget_splits_batches_and_changes_no_output(
    tiny_model, tiny_tokenizer, prompts, monkeypatch
):
    params = SamplingParams(temperature=1.0, max_new_tokens=5, seed=4, n=2)
    reference = make(tiny_model, tiny_tokenizer, batch_size=64).generate(prompts, params)
    bounded = make(tiny_model, tiny_tokenizer, batch_size=64, max_batch_tokens=40)
    batches = []  # the rows of every decode batch, and their prompts' lengths
    decode = bounded._decode
    monkeypatch.setattr(
        bounded,
        "_decode",
        lambda prefilled, seeds, p: batches.append(len(seeds)) or decode(prefilled, seeds, p),
    )
    assert [g.token_ids for g in bounded.generate(prompts, params)] == [
        g.token_ids for g in reference
    ]
    lengths = sorted(
        (len(ids) for ids in tiny_tokenizer(list(prompts), add_special_tokens=False)["input_ids"]),
        reverse=True,
    )
    assert sum(batches) == 2 * len(prompts) and len(batches) > 1
    row = 0
    for rows in batches:  # each batch's prompts x (prompt + new tokens) within 40, or one prompt
        cost = sum(2 * (n + 5) for n in lengths[row // 2 : (row + rows) // 2])
        assert rows == 2 or cost <= 40
        row += rows
    with pytest.raises(ValueError, match="max_batch_tokens"):
        make(tiny_model, tiny_tokenizer, max_batch_tokens=0)


def test_generation_stops_at_eos_per_row(tiny_model, tiny_tokenizer, prompts):
    eos = tiny_tokenizer.eos_token_id
    decode_steps = []
    # One decode batch, longest prompt first: row 0 is the longest prompt.
    generator = make(tiny_model, tiny_tokenizer, batch_size=2)
    forward = generator._forward

    def eos_for_row_0_at_step_2(input_ids, *args, **kwargs):
        logits = forward(input_ids, *args, **kwargs)  # (B, V)
        if input_ids.shape[1] == 1:  # a decode step (prompts are encoded in >= 16)
            decode_steps.append(logits.shape)
            if len(decode_steps) == 2:  # the forward that yields token index 2
                logits[0, eos] = 1e4
        return logits

    generator._forward = eos_for_row_0_at_step_2
    out = generator.generate(prompts[3:5], GREEDY)
    ended, running = out
    assert ended.finished and len(ended.token_ids) == 3 and ended.token_ids[-1] == eos
    assert len(ended.logprobs) == 3 and ended.logprobs[-1] == pytest.approx(0.0, abs=1e-4)
    assert ended.text == tiny_tokenizer.decode(ended.token_ids[:2])
    assert not running.finished and len(running.token_ids) == GREEDY.max_new_tokens
    # Once row 0 has left the batch, row 1 goes on exactly as it would alone.
    (alone,) = make(tiny_model, tiny_tokenizer).generate(prompts[4:5], GREEDY)
    assert running.token_ids == alone.token_ids


def test_all_rows_ending_stops_the_loop(tiny_model, tiny_tokenizer, prompts):
    eos = tiny_tokenizer.eos_token_id

    def always_eos(module, inputs, output):
        output = output.clone()
        output[..., eos] = 1e4
        return output

    handle = tiny_model.lm_head.register_forward_hook(always_eos)
    try:
        out = make(tiny_model, tiny_tokenizer).generate(prompts, GREEDY)
    finally:
        handle.remove()
    assert all(g.token_ids == (eos,) and g.text == "" and g.finished for g in out)


def test_model_runs_in_eval_mode_and_keeps_its_own_state(tiny_model, tiny_tokenizer, prompts):
    tiny_model.train()
    tiny_model.model.layers[1].eval()  # a mixed state must survive too
    before = {name: m.training for name, m in tiny_model.named_modules()}
    seen = []
    handle = tiny_model.lm_head.register_forward_pre_hook(lambda m, args: seen.append(m.training))
    try:
        make(tiny_model, tiny_tokenizer).generate(prompts[:2], GREEDY)
    finally:
        handle.remove()
    assert seen and not any(seen)
    assert {name: m.training for name, m in tiny_model.named_modules()} == before
    assert all(p.grad is None for p in tiny_model.parameters())


@pytest.mark.parametrize(
    ("params", "allowed"),
    [
        (SamplingParams(temperature=1.0, top_k=1), {0}),
        (SamplingParams(temperature=1.0, top_k=2), {0, 1}),
        (SamplingParams(temperature=1.0, top_p=0.4), {0}),
        (SamplingParams(temperature=1.0, top_p=0.6), {0, 1}),
        (SamplingParams(temperature=1.0, top_p=0.8), {0, 1, 2}),  # of the tied pair, the first
        (SamplingParams(temperature=1.0), {0, 1, 2, 3}),
    ],
)
def test_choose_tokens_follows_top_k_and_top_p(params, allowed):
    logits = torch.log(torch.tensor([[0.5, 0.25, 0.125, 0.125]])).repeat(400, 1)  # (400, 4)
    uniforms = (torch.arange(400, dtype=torch.float64) + 0.5) / 400  # an even grid in [0, 1)
    picks = choose_tokens(logits, params, uniforms)
    assert set(picks.tolist()) == allowed
    # Inverse-CDF draws on an even grid reproduce the renormalised probabilities.
    kept = torch.tensor([0.5, 0.25, 0.125, 0.125])[sorted(allowed)]
    expected = kept / kept.sum()
    counts = torch.bincount(picks, minlength=4)[sorted(allowed)].double() / 400
    torch.testing.assert_close(counts, expected.double(), atol=1 / 400, rtol=0)


def test_temperature_sharpens_the_sampling_distribution():
    logits = torch.log(torch.tensor([[0.6, 0.4]])).repeat(1000, 1)  # (1000, 2)
    uniforms = (torch.arange(1000, dtype=torch.float64) + 0.5) / 1000
    picks = choose_tokens(logits, SamplingParams(temperature=0.5), uniforms)
    expected = 0.6**2 / (0.6**2 + 0.4**2)  # softmax(log p / 0.5)
    assert (picks == 0).double().mean().item() == pytest.approx(expected, abs=1e-3)


def test_greedy_choice_is_the_argmax_and_needs_no_uniforms():
    logits = torch.tensor([[0.1, 2.0, -1.0], [3.0, 0.0, 2.9]])
    assert choose_tokens(logits, GREEDY, None).tolist() == [1, 0]
    with pytest.raises(ValueError, match="uniforms"):
        choose_tokens(logits, SAMPLED, None)


def test_bad_input_is_named(tiny_model, tiny_tokenizer, prompts):
    generator = make(tiny_model, tiny_tokenizer)
    with pytest.raises(ValueError, match=r"prompts\[1\]: empty"):
        generator.generate([prompts[0], ""], GREEDY)
    with pytest.raises(ValueError, match=r"prompts\[0\].*exceed"):
        generator.generate([prompts[0]], SamplingParams(temperature=0, max_new_tokens=5000))
    with pytest.raises(ValueError, match="seeds"):
        generator.generate(prompts, GREEDY, seeds=[1, 2])
    with pytest.raises(ValueError, match="batch_size"):
        make(tiny_model, tiny_tokenizer, batch_size=0)
    with pytest.raises(ValueError, match="pad_to_multiple_of"):
        make(tiny_model, tiny_tokenizer, pad_to_multiple_of=0)


def test_from_checkpoint_and_the_registry_load_the_saved_policy(
    tiny_checkpoint, tiny_model, tiny_tokenizer, prompts
):
    loaded = make_generator("transformers", tiny_checkpoint, batch_size=2, progress=False)
    assert isinstance(loaded, TransformersGenerator)
    assert loaded.policy_id.startswith("tiny@")
    live = make(tiny_model, tiny_tokenizer).generate(prompts, SAMPLED)
    assert [g.token_ids for g in loaded.generate(prompts, SAMPLED)] == [g.token_ids for g in live]


def test_unknown_backend_is_named(tiny_checkpoint):
    with pytest.raises(ValueError, match="backend: unknown generation backend 'sglang'"):
        make_generator("sglang", tiny_checkpoint)


# Raw prompts (no chat template) that share prefixes at the token level: two endings of one
# history, a prompt that is a prefix of another, a duplicate, and one that shares nothing.
HISTORY = (
    "You are an expert agent operating in TextCraft, a text-only Minecraft crafting environment. "
    "Your current observation is: Crafting commands: craft 4 oak planks using 1 oak logs"
)
SHARED_PROMPTS = [
    HISTORY + " Inventory: [oak planks] (4)",
    HISTORY + " get 1 oak logs",
    HISTORY,
    HISTORY + " get 1 oak logs",
    "Goal: craft wooden pickaxe.",
    HISTORY + " Inventory: [oak planks] (4) Crafted 4 minecraft:oak_planks",
]


def test_prefix_reuse_gives_the_greedy_tokens_and_logprobs_of_whole_prompts(
    tiny_model, tiny_tokenizer
):
    params = SamplingParams(temperature=0.0, max_new_tokens=8)
    reuse = make(tiny_model, tiny_tokenizer, batch_size=3, prefill_tokens=64, prefix_reuse=True)
    whole = make(tiny_model, tiny_tokenizer, batch_size=3, prefill_tokens=64)
    shared, alone = reuse.generate(SHARED_PROMPTS, params), whole.generate(SHARED_PROMPTS, params)
    for prompt, a, b in zip(SHARED_PROMPTS, shared, alone, strict=True):
        assert a.token_ids == b.token_ids
        torch.testing.assert_close(
            torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4, rtol=0
        )
        reference = full_forward_logprobs(tiny_model, tiny_tokenizer, prompt, a.token_ids)
        assert a.token_ids == tuple(reference.argmax(dim=-1).tolist())
    assert shared[1] == shared[3]  # the duplicate
    # The history is encoded once; without reuse only the duplicate is saved.
    lengths = [len(ids) for ids in tiny_tokenizer(SHARED_PROMPTS)["input_ids"]]
    history = len(tiny_tokenizer(HISTORY)["input_ids"])
    assert whole.stats.prompt_tokens == reuse.stats.prompt_tokens == sum(lengths)
    assert whole.stats.encoded_tokens == sum(lengths) - lengths[3]
    assert reuse.stats.encoded_tokens <= whole.stats.encoded_tokens - 2 * (history - 1)


def test_a_prompt_that_shares_little_is_encoded_whole(tiny_model, tiny_tokenizer):
    """A shared prefix under a quarter of a prompt is not worth a masked forward."""
    generator = make(tiny_model, tiny_tokenizer, prefix_reuse=True)
    long_tail = " ".join(["oak planks"] * 40)
    prompts = ["Goal: craft " + long_tail, "Goal: craft wooden " + long_tail]
    generator.generate(prompts, GREEDY)
    assert generator.stats.encoded_tokens == generator.stats.prompt_tokens


def test_samples_and_duplicates_share_their_prompt(tiny_model, tiny_tokenizer):
    params = SamplingParams(temperature=1.0, max_new_tokens=6, n=2, seed=4)
    generator = make(tiny_model, tiny_tokenizer, batch_size=4)
    out = generator.generate([SHARED_PROMPTS[1], SHARED_PROMPTS[1]], params, seeds=[11, 11])
    # the duplicate sits at other batch positions: tokens equal, log-probs to rounding
    assert_same_generations(out[:2], out[2:])
    assert out[0].token_ids != out[1].token_ids
    assert generator.stats.encoded_tokens == len(tiny_tokenizer(SHARED_PROMPTS[1])["input_ids"])


def test_prefix_cache_between_calls_serves_prompts_that_extend_earlier_ones(
    tiny_model, tiny_tokenizer
):
    params = SamplingParams(temperature=0.0, max_new_tokens=6)
    cached = make(tiny_model, tiny_tokenizer, prefix_reuse=True, prefix_cache_tokens=10_000)
    cached.generate(SHARED_PROMPTS[:3], params)
    assert cached.tree.cached_tokens > 0
    first = cached.stats.encoded_tokens
    later = [SHARED_PROMPTS[0] + " get 1 oak logs", HISTORY + " Goal: craft wooden pickaxe."]
    out = cached.generate(later, params)
    fresh = make(tiny_model, tiny_tokenizer).generate(later, params)
    for a, b in zip(out, fresh, strict=True):
        assert a.token_ids == b.token_ids
        torch.testing.assert_close(
            torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4, rtol=0
        )
    # only what the earlier prompts' keys did not cover is encoded again
    new_tokens = len(tiny_tokenizer(" get 1 oak logs")["input_ids"]) + len(
        tiny_tokenizer(" Goal: craft wooden pickaxe.")["input_ids"]
    )
    assert cached.stats.encoded_tokens - first <= new_tokens + 2
    assert cached.tree.cached_tokens <= 10_000


def test_the_cache_is_dropped_when_the_weights_change(tiny_model, tiny_tokenizer):
    params = SamplingParams(temperature=0.0, max_new_tokens=6)
    cached = make(tiny_model, tiny_tokenizer, prefix_reuse=True, prefix_cache_tokens=10_000)
    cached.generate(SHARED_PROMPTS[:2], params)
    with torch.no_grad():
        tiny_model.model.layers[0].mlp.up_proj.weight.mul_(1.5)  # an optimiser step, in place
    encoded = cached.stats.encoded_tokens
    out = cached.generate(SHARED_PROMPTS[:2], params)
    assert cached.stats.encoded_tokens - encoded == encoded  # nothing served from the cache
    fresh = make(tiny_model, tiny_tokenizer).generate(SHARED_PROMPTS[:2], params)
    assert [g.token_ids for g in out] == [g.token_ids for g in fresh]
    torch.testing.assert_close(
        torch.tensor([lp for g in out for lp in g.logprobs]),
        torch.tensor([lp for g in fresh for lp in g.logprobs]),
        atol=1e-4,
        rtol=0,
    )


def test_small_prefill_forwards_give_the_same_output(tiny_model, tiny_tokenizer, prompts):
    params = SamplingParams(temperature=0.0, max_new_tokens=6)
    wide = make(tiny_model, tiny_tokenizer, batch_size=8).generate(prompts, params)
    narrow = make(tiny_model, tiny_tokenizer, batch_size=8, prefill_tokens=1, pad_to_multiple_of=1)
    assert [g.token_ids for g in narrow.generate(prompts, params)] == [g.token_ids for g in wide]


@pytest.mark.parametrize(
    ("lengths", "budget"),
    [([40, 38, 20, 5, 3, 1], 64), ([200, 10, 10], 64), ([16] * 10, 48), ([7], 1)],
)
def test_prefill_forwards_cover_every_row_once_within_the_budget(
    tiny_model, tiny_tokenizer, lengths, budget
):
    generator = make(tiny_model, tiny_tokenizer, prefill_tokens=budget, pad_to_multiple_of=8)
    chunks = generator._prefill_chunks(lengths)
    assert [r for chunk in chunks for r in chunk] == list(range(len(lengths)))
    for chunk in chunks:
        padded = -(-lengths[chunk[0]] // 8) * 8
        assert len(chunk) == 1 or padded * len(chunk) <= budget


def test_dtype_auto_follows_the_device(monkeypatch):
    from resail_pipeline.generation import transformers_backend

    cpu = torch.device("cpu")
    monkeypatch.setattr(transformers_backend, "bf16_faster", lambda device: True)
    assert transformers_backend.resolve_dtype("auto", cpu) is torch.bfloat16
    assert transformers_backend.resolve_dtype(None, cpu) is torch.bfloat16
    monkeypatch.setattr(transformers_backend, "bf16_faster", lambda device: False)
    assert transformers_backend.resolve_dtype("auto", cpu) is torch.float32
    assert transformers_backend.resolve_dtype("bfloat16", cpu) is torch.bfloat16
    assert transformers_backend.resolve_dtype(torch.float16, cpu) is torch.float16
    with pytest.raises(ValueError, match="dtype: must be one of"):
        transformers_backend.resolve_dtype("fp8", cpu)


def test_a_cpu_generator_keeps_the_memory_its_forwards_free(
    monkeypatch, tiny_model, tiny_tokenizer
):
    from resail_pipeline.generation import transformers_backend

    calls = []
    monkeypatch.setattr(transformers_backend, "keep_freed_memory", lambda: calls.append(1))
    make(tiny_model, tiny_tokenizer)
    assert calls == [1]


def test_options_are_checked(tiny_model, tiny_tokenizer):
    with pytest.raises(ValueError, match="prefill_tokens"):
        make(tiny_model, tiny_tokenizer, prefill_tokens=0)
    with pytest.raises(ValueError, match="prefix_cache_tokens: must be a non-negative integer"):
        make(tiny_model, tiny_tokenizer, prefix_reuse=True, prefix_cache_tokens=-5)
    with pytest.raises(ValueError, match="prefix_cache_tokens"):
        make(tiny_model, tiny_tokenizer, prefix_cache_tokens=100)
    tiny_model.config.layer_types = ["sliding_attention", "full_attention"]
    try:
        with pytest.raises(ValueError, match="sliding_attention"):
            make(tiny_model, tiny_tokenizer)
    finally:
        tiny_model.config.layer_types = ["full_attention", "full_attention"]


def test_a_closed_generator_drops_the_model_but_not_the_callers(tiny_model, tiny_tokenizer):
    params = SamplingParams(temperature=0.0, max_new_tokens=3)
    with TransformersGenerator(tiny_model, tiny_tokenizer, policy_id="tiny@0") as generator:
        assert len(generator.generate(["Goal: craft stick."], params)) == 1
    assert generator.model is None
    with pytest.raises(RuntimeError, match="tiny@0: closed"):
        generator.generate(["Goal: craft stick."], params)
    generator.close()  # a second close does nothing
    again = TransformersGenerator(tiny_model, tiny_tokenizer, policy_id="tiny@0")
    assert again.generate(["Goal: craft stick."], params)[
        0
    ].token_ids  # the caller's model lives on


def test_the_cache_grows_no_further_than_the_batch_can_need(tiny_model, tiny_tokenizer):
    """Doubling from 64 free columns to 100 new tokens would reserve about 130 columns past the
    prompt; the batch can need only its prompt width and 100."""
    generator = make(tiny_model, tiny_tokenizer, batch_size=2, pad_to_multiple_of=1)
    prompt = chat_prompt(tiny_tokenizer, MESSAGES[0])
    steps = 100
    params = SamplingParams(temperature=1.0, max_new_tokens=steps, seed=3, n=2)
    out = generator.generate([prompt], params, seeds=[5])
    assert max(len(g.token_ids) for g in out) > 64  # it did grow past the first reservation
    shape = generator._cache_shape()
    width = len(tiny_tokenizer(prompt)["input_ids"])
    per_column = shape.layers * 2 * 2 * shape.heads * shape.head_dim  # 2 rows
    needed = per_column * (width + steps)
    assert max(flat.numel() for flat in generator._storage.free) <= needed * _STORAGE_HEADROOM


def test_a_preallocated_cache_gives_the_same_tokens_and_keeps_nothing(
    tiny_model, tiny_tokenizer, prompts
):
    """``preallocate`` (a GPU's default) changes where the cache lives, not what is generated:
    greedy and seeded samples, with several samples per prompt, are the growing cache's; one
    allocation per batch, none kept after."""
    for params in (
        SamplingParams(temperature=0.0, max_new_tokens=80),
        SamplingParams(temperature=1.0, max_new_tokens=80, seed=2, n=3),
    ):
        growing = make(tiny_model, tiny_tokenizer, batch_size=8).generate(prompts, params)
        whole = make(tiny_model, tiny_tokenizer, batch_size=8, preallocate=True)
        assert whole.preallocate and not whole._storage.keep
        out = whole.generate(prompts, params)
        assert [g.token_ids for g in out] == [g.token_ids for g in growing]
        for a, b in zip(out, growing, strict=True):
            assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
        assert whole._storage.free == []
    assert not make(tiny_model, tiny_tokenizer).preallocate  # the CPU's default: it grows
    with pytest.raises(ValueError, match="preallocate: must be true, false or null"):
        make(tiny_model, tiny_tokenizer, preallocate="yes")


#: the token whose head row, scaled, becomes the end token's in :func:`ending_model`: the greedy
#: rows of ``prompts`` that reach it end there (two of five within 24 tokens), the others run on
ENDS_AT = 97


@pytest.fixture()
def ending_model(tiny_model_config, tiny_tokenizer):
    """A tiny random Qwen3 with weights 25 times the default scale, whose greedy tokens vary with
    the context (the default's repeat one token), and whose end token is drawn wherever
    :data:`ENDS_AT` would be."""
    from resail_pipeline.modeling import build_qwen3

    config = copy.deepcopy(tiny_model_config)
    config.initializer_range = 0.5
    model = build_qwen3(config, seed=0).eval()
    with torch.no_grad():
        head = model.get_output_embeddings().weight  # tied to the embeddings
        head[tiny_tokenizer.eos_token_id] = 1.2 * head[ENDS_AT]
    return model


@pytest.mark.parametrize(
    ("params", "options"),
    [
        (SamplingParams(temperature=0.0, max_new_tokens=24), {}),
        (SamplingParams(temperature=1.0, max_new_tokens=24, seed=5, n=2), {}),
        (SamplingParams(temperature=0.0, max_new_tokens=12), {"prefix_reuse": True}),
        (SamplingParams(temperature=0.0, max_new_tokens=24), {"compile": True}),
    ],
    ids=["greedy", "sampled", "prefix-reuse", "compiled"],
)
def test_the_static_decode_gives_the_dynamic_decodes_tokens(
    ending_model, tiny_tokenizer, prompts, params, options
):
    """``cuda_graphs`` (on a CPU: the static step, without a graph) keeps every row to the end
    and attends over the whole buffer; its tokens, end flags and lengths are the dynamic
    decode's, which drops ended rows, and its log-probs agree to rounding: prompts of different
    lengths, rows that end early and rows that run to ``max_new_tokens``, repeated rows, rows
    encoded after a shared prefix (padding between prefix and tail), and the per-layer functions
    compiled."""
    if options.get("compile") and not can_compile(torch.device("cpu")):
        pytest.skip("no C++ compiler for torch.compile here")
    texts = SHARED_PROMPTS if options.get("prefix_reuse") else prompts
    dynamic = make(ending_model, tiny_tokenizer, batch_size=8, preallocate=True, **options)
    static = make(ending_model, tiny_tokenizer, batch_size=8, cuda_graphs=True, **options)
    assert static.static_decode and static.preallocate and not dynamic.static_decode
    want, got = dynamic.generate(texts, params), static.generate(texts, params)
    assert [(g.token_ids, g.finished) for g in got] == [(g.token_ids, g.finished) for g in want]
    for a, b in zip(got, want, strict=True):
        assert a.text == b.text
        torch.testing.assert_close(
            torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4, rtol=0
        )
    if params.temperature == 0 and texts is prompts:  # what the comparison covers
        lengths = [len(g.token_ids) for g in want]
        assert [g.finished for g in want] == [False, False, True, False, True]
        assert lengths[2] < params.max_new_tokens and lengths[4] < params.max_new_tokens
        assert len({g.token_ids[:3] for g in want}) == len(want)  # rows that differ
    assert static.stats.graph_captures == 0  # no graph on a CPU
    assert static._storage.free == []  # the buffers went back


def test_the_static_decode_option_is_checked(tiny_model, tiny_tokenizer, prompts):
    with pytest.raises(ValueError, match="cuda_graphs: must be true, false or 'auto', got 'yes'"):
        make(tiny_model, tiny_tokenizer, cuda_graphs="yes")
    with pytest.raises(ValueError, match="cuda_graphs: must be true, false or 'auto', got 1"):
        TransformersGenerator.check_values(cuda_graphs=1)
    with pytest.raises(ValueError, match=r"cuda_graphs: .* allocated whole at prefill, but "):
        make(tiny_model, tiny_tokenizer, cuda_graphs=True, preallocate=False)
    # auto: on a GPU with the cache allocated whole; a CPU decodes dynamically
    auto = make(tiny_model, tiny_tokenizer, cuda_graphs="auto")
    assert not auto.static_decode and not auto.preallocate
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert resolve_cuda_graphs("auto", cuda) and resolve_cuda_graphs("auto", cuda, True)
    assert not resolve_cuda_graphs("auto", cuda, False) and not resolve_cuda_graphs("auto", cpu)
    assert resolve_cuda_graphs(True, cpu) and not resolve_cuda_graphs(False, cuda)
    assert not resolved_cuda_graphs({"device": "cpu", "cuda_graphs": True})  # no graph on a CPU
    # a rotary embedding that reads its positions back cannot be captured
    tiny_model.model.rotary_emb.rope_type = "dynamic"
    with pytest.raises(ValueError, match="cuda_graphs: the model cannot decode in static steps"):
        make(tiny_model, tiny_tokenizer, cuda_graphs=True)


def test_a_graph_is_captured_under_the_callers_autocast_without_its_cache():
    """A captured graph must hold the casts of the weights, not autocast's cached copies, which
    the cache frees when the caller's region ends."""
    cpu = torch.device("cpu")
    with uncached_autocast(cpu):
        assert not torch.is_autocast_enabled("cpu")  # none to keep
    with torch.autocast("cpu", dtype=torch.bfloat16), uncached_autocast(cpu):
        assert torch.is_autocast_enabled("cpu") and not torch.is_autocast_cache_enabled()
        assert torch.get_autocast_dtype("cpu") == torch.bfloat16
