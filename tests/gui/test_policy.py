"""The vision-language policy: prompts with screenshots, seeded sampling, response logits."""

from __future__ import annotations

import sys
import types

import pytest
import torch

from resail_pipeline.checkpoints import CheckpointError
from resail_pipeline.config import ConfigError, build
from resail_pipeline.generation import Generator, is_vision_checkpoint, make_generator
from resail_pipeline.generation.base import SamplingParams, derive_seed, vision_token_ids
from resail_pipeline.gui.config import AitzConfig
from resail_pipeline.gui.experiment import open_generator
from resail_pipeline.gui.policy import PromptedGenerator, VisionEncoder, VisionPolicy
from resail_pipeline.prompts import gui
from resail_pipeline.prompts.render import gui_action_messages, gui_summary_messages


def _prompts(policy, root, steps, count=3):
    rows = list(steps.head(count).itertuples())
    return [
        policy.encode(gui_action_messages(r.instruction, list(r.history)), [root / r.image_path])
        for r in rows
    ]


def test_encode_expands_each_image_to_its_merged_patches(vision_policy, aitz_root, aitz_train):
    prompt = _prompts(vision_policy, aitz_root, aitz_train, 1)[0]
    config = vision_policy.model.config
    grid = prompt.image_grid_thw
    assert grid.shape == (1, 3)
    pads = prompt.input_ids.count(config.image_token_id)
    assert pads == int(grid.prod()) // 4  # 2 x 2 patches merge into one token
    assert prompt.pixel_values.shape[0] == int(grid.prod())
    start = prompt.input_ids.index(config.vision_start_token_id)
    assert prompt.input_ids[start + 1 + pads] == config.vision_end_token_id
    text = vision_policy.tokenizer.decode(prompt.input_ids)
    assert gui.IMAGE_PLACEHOLDER not in text
    assert '"name": "mobile_use"' in text  # the tool, as the chat template lists it
    assert "<|unk|>" not in text


def test_encode_needs_one_image_per_placeholder(vision_policy, aitz_root, aitz_train):
    row = aitz_train.iloc[0]
    messages = gui_summary_messages("Go", [("press Back", "x"), ("press Home", "y")])
    image = aitz_root / row["image_path"]
    with pytest.raises(ValueError, match=r"2 image placeholder\(s\), got 1 image"):
        vision_policy.encode(messages, [image])
    prompt = vision_policy.encode(messages, [image, image])
    assert prompt.image_grid_thw.shape == (2, 3)


def test_sampling_is_per_response_seed(vision_policy, aitz_root, aitz_train):
    prompts = _prompts(vision_policy, aitz_root, aitz_train)
    params = SamplingParams(temperature=1.0, max_new_tokens=8)
    together = vision_policy.generate(prompts, params, seeds=[7, 8, 9])
    alone = vision_policy.generate(prompts[1:2], params, seeds=[8])
    assert alone[0].token_ids == together[1].token_ids
    again = vision_policy.generate(prompts[:1], params, seeds=[7])
    assert again[0].token_ids == together[0].token_ids
    assert all(0 < len(g.token_ids) <= 8 for g in together)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_batched_decoding_equals_one_prompt_at_a_time(
    vision_policy, aitz_root, aitz_train, temperature
):
    # prompts of different lengths (left padding), one with two screenshots
    prompts = _prompts(vision_policy, aitz_root, aitz_train, 5)
    two = gui_summary_messages("Go", [("press Back", "x"), ("press Home", "y")])
    image = aitz_root / aitz_train["image_path"].iloc[0]
    prompts.append(vision_policy.encode(two, [image, image]))
    assert len({len(p.input_ids) for p in prompts}) > 2
    params = SamplingParams(temperature=temperature, max_new_tokens=6)
    vision_policy.batch_size = 16
    batched = vision_policy.generate(prompts, params, seeds=list(range(6)))
    vision_policy.batch_size = 1
    alone = vision_policy.generate(prompts, params, seeds=list(range(6)))
    assert [g.token_ids for g in batched] == [g.token_ids for g in alone]


def test_greedy_decoding_agrees_with_transformers_generate(vision_policy, aitz_root, aitz_train):
    prompt = _prompts(vision_policy, aitz_root, aitz_train, 2)[1]
    ours = vision_policy.generate([prompt], SamplingParams(temperature=0, max_new_tokens=6))[0]
    inputs = vision_policy.model_inputs([prompt.input_ids], [prompt])
    theirs = vision_policy.model.generate(
        **inputs,
        do_sample=False,
        max_new_tokens=6,
        eos_token_id=-1,
        pad_token_id=0,
        suppress_tokens=list(vision_token_ids(vision_policy.model.config)),
    )[0, len(prompt.input_ids) :].tolist()
    eos = vision_policy.tokenizer.eos_token_id
    assert list(ours.token_ids) == (theirs[: theirs.index(eos) + 1] if eos in theirs else theirs)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_response_never_holds_a_vision_placeholder(
    vision_policy, aitz_root, aitz_train, temperature
):
    """A model that favours the image pad above all (a hook on its head, for the test) still
    answers without one, and the response is scored: the model would take a response's pad for
    one of the prompt's images and fail on the count."""
    config = vision_policy.model.config
    placeholders = vision_token_ids(config)
    assert config.image_token_id in placeholders and config.vision_start_token_id in placeholders

    def favour_placeholders(module, inputs, output):
        output[..., list(placeholders)] += 1e4
        return output

    hook = vision_policy.model.lm_head.register_forward_hook(favour_placeholders)
    try:
        prompts = _prompts(vision_policy, aitz_root, aitz_train, 2)
        params = SamplingParams(temperature=temperature, max_new_tokens=5)
        out = vision_policy.generate(prompts, params, seeds=[1, 2])
        assert all(len(g.token_ids) == 5 for g in out)  # no end token among the favoured
        assert not {t for g in out for t in g.token_ids} & set(placeholders)
        with torch.no_grad():
            logits, mask = vision_policy.response_logits(prompts, [g.token_ids for g in out])
        assert logits.shape[:2] == (2, 5) and bool(mask.all())
    finally:
        hook.remove()


def test_batched_response_logits_equal_one_at_a_time(vision_policy, aitz_root, aitz_train):
    prompts = _prompts(vision_policy, aitz_root, aitz_train)
    responses = [[5, 6, 7], [8], [9, 10]]
    with torch.no_grad():
        logits, mask = vision_policy.response_logits(prompts, responses)
        assert logits.shape[:2] == (3, 3)
        assert mask.tolist() == [[True] * 3, [True, False, False], [True, True, False]]
        for i, response in enumerate(responses):
            alone, _ = vision_policy.response_logits(prompts[i : i + 1], [response])
            torch.testing.assert_close(
                alone[0, : len(response)], logits[i, : len(response)], atol=1e-5, rtol=1e-5
            )
    with pytest.raises(ValueError, match="at least one token"):
        vision_policy.response_logits(prompts[:1], [[]])


def test_save_and_load_keep_the_policy(vision_policy, aitz_root, aitz_train, tmp_path):
    info = vision_policy.save(tmp_path / "policy", name="tiny")
    assert list((tmp_path / "policy").glob("*.safetensors"))
    assert info.policy_id.startswith("tiny@")
    loaded = VisionPolicy.load(tmp_path / "policy")
    assert loaded.policy_id == info.policy_id
    prompts = _prompts(vision_policy, aitz_root, aitz_train, 1)
    reloaded = _prompts(loaded, aitz_root, aitz_train, 1)
    assert reloaded[0].input_ids == prompts[0].input_ids
    with torch.no_grad():
        a, _ = vision_policy.response_logits(prompts, [[5, 6]])
        b, _ = loaded.response_logits(reloaded, [[5, 6]])
    torch.testing.assert_close(a, b)


def test_load_refuses_a_folder_without_weights(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(CheckpointError, match="safetensors"):
        VisionPolicy.load(tmp_path)


def test_a_vision_checkpoint_is_served_by_the_protocols_backends(
    vision_policy, aitz_root, aitz_train, tmp_path, tiny_checkpoint
):
    """make_generator reads the model type: the transformers backend of a Qwen3-VL checkpoint is
    the VisionPolicy, with its options checked; the encoder alone encodes as the policy does."""
    vision_policy.save(tmp_path / "policy", name="tiny")
    assert is_vision_checkpoint(tmp_path / "policy") and not is_vision_checkpoint(tiny_checkpoint)
    generator = make_generator(
        "transformers", tmp_path / "policy", device="cpu", dtype="float32", batch_size=3
    )
    assert isinstance(generator, VisionPolicy) and generator.batch_size == 3
    assert isinstance(generator, Generator)
    with pytest.raises(ConfigError, match=r"takes no option\(s\) \['compile'\]"):
        make_generator("transformers", tmp_path / "policy", compile=True)
    encoder = VisionEncoder.load(tmp_path / "policy")
    ours, theirs = (_prompts(p, aitz_root, aitz_train, 2) for p in (encoder, vision_policy))
    assert [p.input_ids for p in ours] == [p.input_ids for p in theirs]
    assert all(len(p.images) == 1 and p.images[0].mode == "RGB" for p in ours)
    torch.testing.assert_close(ours[1].pixel_values, theirs[1].pixel_values)
    params = SamplingParams(temperature=1.0, max_new_tokens=5)
    prompted = PromptedGenerator(encoder, generator, batch_size=2)
    assert prompted.generate(ours, params, [1, 2]) == generator.generate(theirs, params, [1, 2])


def test_the_gui_experiment_opens_vllm_naming_its_own_settings(
    vision_policy, tmp_path, monkeypatch
):
    """A prompt too long for the engine is refused naming aitz's settings, not the text
    agents' (a fake engine stands in for vLLM: only the options it is started with matter)."""
    vision_policy.save(tmp_path / "policy", name="tiny")
    started = {}

    class FakeEngine:
        def __init__(self, **options):
            started.update(options)

        def get_tokenizer(self):
            return vision_policy.tokenizer

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=FakeEngine))
    config = build(
        AitzConfig,
        {
            "generation": {"backend": "vllm", "vllm": {"max_model_len": 64}},
            "initial": {"path": str(tmp_path / "policy")},
        },
        "aitz",
    )
    generator = open_generator(config, tmp_path / "policy")
    assert isinstance(generator, PromptedGenerator) and started["max_model_len"] == 64
    assert generator.generator.settings == "aitz.generation.vllm"
    assert generator.generator.episode_length == "aitz.data.max_steps"
    assert "settings" not in started and "episode_length" not in started


@pytest.fixture(scope="module")
def vllm_vision(tmp_path_factory, aitz_train):
    """The tiny Qwen3-VL saved as a checkpoint and served by vLLM (its CPU build where torch has
    no CUDA: ``make rehearse`` installs it), beside the same checkpoint in transformers."""
    pytest.importorskip("vllm")
    try:  # vLLM's Qwen3-VL imports transformers' image processor, which imports torchvision
        import torchvision  # noqa: F401
    except (ImportError, RuntimeError, OSError) as error:  # a CUDA build beside CPU torch
        pytest.skip(f"vLLM's Qwen3-VL needs a torchvision that loads here ({error})")
    from .conftest import tiny_vision_policy

    path = tmp_path_factory.mktemp("vl") / "policy"
    tiny_vision_policy(aitz_train).save(path, name="tiny-vl")
    options = {"dtype": "float32", "max_model_len": 4096, "progress": False}
    if not torch.cuda.is_available():  # the CPU build (conf/rehearsal-aitz's settings)
        options.update(
            gpu_memory_utilization=0.1,
            max_num_batched_tokens=65536,
            enable_chunked_prefill=False,
        )
    served = make_generator("vllm", path, **options)
    yield served, VisionPolicy.load(path), path
    served.close()


@pytest.mark.slow
def test_vllm_serves_the_vision_checkpoint_as_transformers_does(vllm_vision, aitz_root, aitz_train):
    """vLLM expands each image's single pad back to the prompt's own ids; greedy responses are
    the transformers policy's token for token, with its raw log-probs; sampling is seeded per
    response, whatever else shares the call."""
    served, policy, _ = vllm_vision
    prompts = _prompts(policy, aitz_root, aitz_train, 3)
    two = gui_summary_messages("Go", [("press Back", "x"), ("press Home", "y")])
    image = aitz_root / aitz_train["image_path"].iloc[0]
    prompts.append(policy.encode(two, [image, image]))
    requests, _ = served._requests(prompts)
    from vllm import SamplingParams as VLLMSamplingParams

    echoed = served.llm.generate(requests, VLLMSamplingParams(max_tokens=1), use_tqdm=False)
    assert [list(o.prompt_token_ids) for o in echoed] == [list(p.input_ids) for p in prompts]

    greedy = SamplingParams(temperature=0.0, max_new_tokens=6)
    ours, theirs = served.generate(prompts, greedy), policy.generate(prompts, greedy)
    assert [g.token_ids for g in ours] == [g.token_ids for g in theirs]
    assert [g.text for g in ours] == [g.text for g in theirs]
    with torch.no_grad():
        logits, _ = policy.response_logits(prompts, [g.token_ids for g in ours])
    logp = torch.log_softmax(logits.float(), -1)  # (N, T, V)
    for row, generation in enumerate(ours):
        ids = torch.tensor(generation.token_ids)
        expected = logp[row, : len(ids)].gather(-1, ids[:, None]).squeeze(-1)
        torch.testing.assert_close(torch.tensor(generation.logprobs), expected, atol=1e-3, rtol=0)

    sampled = SamplingParams(temperature=1.0, max_new_tokens=6, seed=3)
    first = served.generate(prompts, sampled)
    assert served.generate(prompts, sampled) == first
    alone = served.generate(prompts[2:3], sampled, seeds=[derive_seed(sampled.seed, 2)])
    assert alone[0].token_ids == first[2].token_ids


def test_a_published_qwen3_vl_shape_reads_the_gui_tokenizers_tokens(aitz_train):
    """reference/shapes' Qwen3-VL-4B (the paper's GUI model) over the GUI tokenizer: its
    parameters as published, its vision, padding and end tokens the tokenizer's, its vocabulary
    kept; a vocabulary smaller than the tokenizer, or a tokenizer without vision tokens, is named."""
    from pathlib import Path

    from transformers import AutoConfig, AutoTokenizer, Qwen3VLForConditionalGeneration

    from resail_pipeline.gui.experiment import gui_tokenizer
    from resail_pipeline.modeling.vision import IMAGE_PAD, VISION_END, with_vision_tokens

    shape = Path(__file__).resolve().parents[2] / "reference" / "shapes" / "Qwen3-VL-4B-Instruct"
    tokenizer = gui_tokenizer(aitz_train)
    config = with_vision_tokens(AutoConfig.from_pretrained(shape), tokenizer)
    assert config.image_token_id == tokenizer.convert_tokens_to_ids(IMAGE_PAD) != 151655
    assert config.vision_end_token_id == tokenizer.convert_tokens_to_ids(VISION_END)
    assert config.text_config.eos_token_id == tokenizer.eos_token_id
    assert config.text_config.vocab_size == 151936
    with torch.device("meta"):
        model = Qwen3VLForConditionalGeneration(config)
    assert sum(p.numel() for p in model.parameters()) == 4_437_815_808

    small = AutoConfig.from_pretrained(shape)
    small.text_config.vocab_size = len(tokenizer) - 1
    with pytest.raises(ValueError, match=r"vocab_size: .* smaller than the tokenizer"):
        with_vision_tokens(small, tokenizer)
    text_only = AutoTokenizer.from_pretrained(
        Path(__file__).resolve().parents[2] / "reference" / "textcraft-initial"
    )
    with pytest.raises(ValueError, match=r"tokenizer: no vision token <\|image_pad\|>"):
        with_vision_tokens(AutoConfig.from_pretrained(shape), text_only)
