"""The vLLM backend: its request mapping (everywhere), and against the transformers backend on a
CUDA device with the ``gpu`` extra."""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass

import pytest
import torch

from resail_pipeline.generation import (
    SamplingParams,
    VisionPrompt,
    derive_seed,
    make_generator,
    response_seeds,
)
from resail_pipeline.generation.vllm_backend import VLLMGenerator, collapse_image_pads
from resail_pipeline.prompts import chat_prompt

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


@pytest.mark.gpu
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


@pytest.mark.gpu
def test_sampling_is_seeded_per_response(vllm_generator):
    prompts = [chat_prompt(vllm_generator.tokenizer, m) for m in MESSAGES]
    params = SamplingParams(temperature=1.0, max_new_tokens=8, n=2, seed=5)
    first = vllm_generator.generate(prompts, params)
    assert len(first) == 6
    assert vllm_generator.generate(prompts, params) == first
    alone = vllm_generator.generate(prompts[2:], params, seeds=[derive_seed(params.seed, 2)])
    assert [g.token_ids for g in alone] == [g.token_ids for g in first[4:]]
    assert all(len(g.logprobs) == len(g.token_ids) for g in first)


@dataclass
class FakeLogprob:
    logprob: float


@dataclass
class FakeCompletion:
    token_ids: list[int]
    logprobs: list[dict[int, FakeLogprob]]
    finish_reason: str


class FakeLLM:
    """Stands in for ``vllm.LLM``: answers each request with a scripted completion."""

    def __init__(self, tokenizer, completions):
        self.tokenizer, self.completions, self.requests = tokenizer, completions, None

    def get_tokenizer(self):
        return self.tokenizer

    def generate(self, requests, sampling_params, use_tqdm):
        self.requests = list(zip(requests, sampling_params, strict=True))
        self.use_tqdm = use_tqdm
        return [types.SimpleNamespace(outputs=[c]) for c in self.completions]


def test_requests_and_outputs_map_to_the_protocol(tiny_tokenizer, monkeypatch):
    fake_vllm = types.SimpleNamespace(SamplingParams=lambda **kwargs: kwargs)
    monkeypatch.setitem(sys.modules, "vllm", fake_vllm)
    eos = tiny_tokenizer.eos_token_id
    word = tiny_tokenizer.convert_tokens_to_ids("craft")
    completions = [
        FakeCompletion([word, eos], [{word: FakeLogprob(-0.5)}, {eos: FakeLogprob(-0.1)}], "stop"),
        FakeCompletion(
            [word, word], [{word: FakeLogprob(-1.0)}, {word: FakeLogprob(-2.0)}], "length"
        ),
        FakeCompletion([eos], [{eos: FakeLogprob(-0.2)}], "stop"),
        FakeCompletion([word], [{word: FakeLogprob(-0.3)}], "length"),
    ]
    llm = FakeLLM(tiny_tokenizer, completions)
    generator = VLLMGenerator(llm, policy_id="tiny@0", progress=False)
    prompts = [chat_prompt(tiny_tokenizer, m) for m in MESSAGES[:2]]
    params = SamplingParams(temperature=0.4, top_k=-1, max_new_tokens=2, n=2, seed=3)
    out = generator.generate(prompts, params)

    ids = tiny_tokenizer(prompts, add_special_tokens=False)["input_ids"]
    assert [r["prompt_token_ids"] for r, _ in llm.requests] == [ids[0], ids[0], ids[1], ids[1]]
    assert [p["seed"] for _, p in llm.requests] == response_seeds(2, params)
    first = llm.requests[0][1]
    assert (first["n"], first["temperature"], first["top_k"], first["max_tokens"]) == (
        1,
        0.4,
        -1,
        2,
    )
    assert first["stop_token_ids"] == [eos] and first["logprobs"] == 0
    assert [g.token_ids for g in out] == [tuple(c.token_ids) for c in completions]
    assert [g.logprobs for g in out] == [(-0.5, -0.1), (-1.0, -2.0), (-0.2,), (-0.3,)]
    assert [g.finished for g in out] == [True, False, True, False]
    text = tiny_tokenizer.decode
    assert [g.text for g in out] == [text([word]), text([word, word]), "", text([word])]
    assert generator.generate([], params) == []


def test_the_engine_starts_with_prefix_caching_and_raw_logprobs(
    tiny_checkpoint, tiny_tokenizer, monkeypatch
):
    started = {}

    def fake_engine(**options):
        started.update(options)
        return FakeLLM(tiny_tokenizer, [])

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=fake_engine))
    generator = VLLMGenerator.from_checkpoint(tiny_checkpoint, max_model_len=512)
    assert started["enable_prefix_caching"] is True
    assert started["logprobs_mode"] == "raw_logprobs" and started["trust_remote_code"] is False
    assert started["max_model_len"] == 512 and started["model"] == str(tiny_checkpoint)
    assert generator.policy_id.startswith("tiny@")
    VLLMGenerator.from_checkpoint(tiny_checkpoint, enable_prefix_caching=False)
    assert started["enable_prefix_caching"] is False


def test_close_shuts_the_engine_down_once(tiny_tokenizer, monkeypatch):
    cleanups = []
    parallel_state = types.ModuleType("vllm.distributed.parallel_state")
    parallel_state.cleanup_dist_env_and_memory = lambda: cleanups.append(1)
    monkeypatch.setitem(sys.modules, "vllm", types.ModuleType("vllm"))
    monkeypatch.setitem(sys.modules, "vllm.distributed", types.ModuleType("vllm.distributed"))
    monkeypatch.setitem(sys.modules, "vllm.distributed.parallel_state", parallel_state)
    llm = FakeLLM(tiny_tokenizer, [])
    shutdowns = []
    llm.llm_engine = types.SimpleNamespace(
        engine_core=types.SimpleNamespace(shutdown=lambda: shutdowns.append(1))
    )
    with VLLMGenerator(llm, policy_id="tiny@0", progress=False) as generator:
        assert generator.llm is llm
    assert generator.llm is None and shutdowns == [1] and cleanups == [1]
    generator.close()
    assert shutdowns == [1] and cleanups == [1]
    with pytest.raises(RuntimeError, match="tiny@0: closed"):
        generator.generate(["x"], SamplingParams())


def test_a_prompt_longer_than_max_model_len_is_refused_before_any_request(
    tiny_tokenizer, monkeypatch
):
    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(SamplingParams=dict))
    llm = FakeLLM(tiny_tokenizer, [])
    prompts = [chat_prompt(tiny_tokenizer, m) for m in MESSAGES[:2]]
    longest = max(
        len(ids) for ids in tiny_tokenizer(prompts, add_special_tokens=False)["input_ids"]
    )
    llm.llm_engine = types.SimpleNamespace(
        model_config=types.SimpleNamespace(max_model_len=longest + 3)
    )
    generator = VLLMGenerator(llm, policy_id="tiny@0", progress=False)
    assert generator.max_model_len == longest + 3
    with pytest.raises(
        ValueError,
        match=rf"^run\.generation\.vllm\.max_model_len: {longest + 3} tokens, but a prompt of "
        rf"{longest} tokens with 4 new ones needs {longest + 4}.*\(run\.env_options\.max_steps\)$",
    ):
        generator.generate(prompts, SamplingParams(max_new_tokens=4))
    assert llm.requests is None  # nothing was sent
    # another caller's settings are the ones named (the GUI agent's)
    gui = VLLMGenerator(
        llm,
        policy_id="tiny@0",
        progress=False,
        settings="aitz.generation.vllm",
        episode_length="aitz.data.max_steps",
    )
    with pytest.raises(
        ValueError, match=r"^aitz\.generation\.vllm\.max_model_len: .*\(aitz\.data\.max_steps\)$"
    ):
        gui.generate(prompts, SamplingParams(max_new_tokens=4))
    llm.completions = [FakeCompletion([5], [{5: FakeLogprob(-1.0)}], "length")] * 2
    assert len(generator.generate(prompts, SamplingParams(max_new_tokens=3))) == 2


def test_no_progress_bar_where_tqdm_is_disabled(tiny_tokenizer, monkeypatch):
    """vLLM 0.32 divides by a bar's elapsed time, zero for a bar TQDM_DISABLE turned off."""
    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(SamplingParams=lambda **k: k))
    eos = tiny_tokenizer.eos_token_id
    llm = FakeLLM(tiny_tokenizer, [FakeCompletion([eos], [{eos: FakeLogprob(-0.2)}], "stop")])
    generator = VLLMGenerator(llm, policy_id="tiny@0", progress=True)
    prompts = [chat_prompt(tiny_tokenizer, MESSAGES[0])]
    params = SamplingParams(temperature=0.0, max_new_tokens=1)
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    generator.generate(prompts, params)
    assert llm.use_tqdm is True
    monkeypatch.setenv("TQDM_DISABLE", "1")
    generator.generate(prompts, params)
    assert llm.use_tqdm is False


def test_a_vision_prompt_goes_with_its_images_and_one_pad_per_image(tiny_tokenizer, monkeypatch):
    """vLLM expands every image's pad itself: each run of pads goes as one, the images beside;
    the length check counts the expanded prompt, as the model reads it."""
    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(SamplingParams=lambda **k: k))
    eos = tiny_tokenizer.eos_token_id
    pad, start, end, word = 900, 901, 902, 5
    images = ("screen-a", "screen-b")  # stand-ins: the generator passes them through untouched
    ids = (word, start, pad, pad, pad, end, word, start, pad, pad, end)
    prompt = VisionPrompt(ids, images=images)
    completions = [
        FakeCompletion([word, eos], [{word: FakeLogprob(-0.5)}, {eos: FakeLogprob(-0.1)}], "stop")
    ]
    llm = FakeLLM(tiny_tokenizer, completions * 3)
    llm.llm_engine = types.SimpleNamespace(
        model_config=types.SimpleNamespace(
            max_model_len=len(ids) + 2,
            hf_config=types.SimpleNamespace(
                image_token_id=pad, vision_start_token_id=start, vision_end_token_id=end
            ),
        )
    )
    generator = VLLMGenerator(llm, policy_id="vl@0", progress=False)
    text_prompt = chat_prompt(tiny_tokenizer, MESSAGES[0])[:5]
    params = SamplingParams(temperature=1.0, max_new_tokens=2, seed=4)
    out = generator.generate([prompt, VisionPrompt((word, word)), text_prompt], params)
    (request, _), (plain, _), (text, _) = llm.requests
    assert request["prompt_token_ids"] == [word, start, pad, end, word, start, pad, end]
    assert request["multi_modal_data"] == {"image": list(images)}
    assert plain == {"prompt_token_ids": [word, word]}  # no image: nothing to expand
    assert text == {
        "prompt_token_ids": tiny_tokenizer(text_prompt, add_special_tokens=False)["input_ids"]
    }
    assert [p["seed"] for _, p in llm.requests] == response_seeds(3, params)
    # no placeholder in a vision prompt's response (it would be taken for an image's)
    suppressed = {pad: -100.0, start: -100.0, end: -100.0}
    assert [p["logit_bias"] for _, p in llm.requests] == [suppressed, suppressed, None]
    assert out[0].token_ids == (word, eos) and out[0].logprobs == (-0.5, -0.1)
    assert out[0].text == tiny_tokenizer.decode([word], skip_special_tokens=True)
    with pytest.raises(ValueError, match=rf"a prompt of {len(ids)} tokens with 3 new ones"):
        generator.generate([prompt], SamplingParams(max_new_tokens=3))


def test_collapse_image_pads_keeps_everything_but_repeats():
    assert collapse_image_pads([1, 7, 7, 7, 2, 7, 3, 7, 7], 7) == [1, 7, 2, 7, 3, 7]
    assert collapse_image_pads([1, 2], 7) == [1, 2]
    assert collapse_image_pads([], 7) == []
