"""The memory plan of a training rank: the paper's Qwen3 shapes against an 80 GB GPU, and the plan
held against the peak the CPU allocator counts for the real trainer on small shapes."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch
import yaml

from resail_pipeline.config import ConfigError
from resail_pipeline.training import TrainConfig
from resail_pipeline.training.memory import (
    GIB,
    MemoryPlan,
    ModelShape,
    allocator_peak,
    check_fits,
    main,
    measurement_inputs,
    plan_memory,
)
from resail_pipeline.training.run import TrainingRun

ROOT = Path(__file__).resolve().parents[2]
SHAPES = ROOT / "reference" / "shapes"
H100 = int(79.6 * GIB)  # an 80 GB H100 as CUDA reports it
# the longest prompt planned for: a 30-step TextCraft episode with a 1,024-token summary
PROMPT_TOKENS = 4096


def _paper_train(**engine) -> TrainConfig:
    data = yaml.safe_load((ROOT / "conf" / "paper-textcraft" / "parameters.yml").read_text())
    train = {**data["train"], "method": "oel_resail"}
    train["engine"] = {**train["engine"], **engine}
    return TrainConfig.from_dict(train, "train").resolve(num_gpus=8, bf16_supported=True)


def test_the_shapes_are_the_published_qwen3_models():
    eight, four = (ModelShape.from_checkpoint(SHAPES / name) for name in ("Qwen3-8B", "Qwen3-4B"))
    assert round(eight.parameters / 1e9, 2) == 8.19 and round(four.parameters / 1e9, 2) == 4.02
    assert (eight.layers, eight.hidden, eight.kv_heads, eight.vocab) == (36, 4096, 8, 151936)
    # 144 KiB of bf16 cache per token, as conf/paper's max_batch_tokens comment says
    assert eight.cache_per_token * 2 == 144 * 1024 == four.cache_per_token * 2


def test_qwen3_8b_is_refused_under_the_old_settings_and_fits_under_the_shipped_ones():
    shape = ModelShape.from_checkpoint(SHAPES / "Qwen3-8B")
    old = plan_memory(
        _paper_train(micro_batch_steps=8, chunk_size=None), shape, prompt_tokens=PROMPT_TOKENS
    )
    with pytest.raises(ConfigError, match=r"^train\.engine: one training rank needs about .*GiB"):
        check_fits(old, H100, device="an H100")
    new = plan_memory(_paper_train(), shape, prompt_tokens=PROMPT_TOKENS)
    check_fits(new, H100, device="an H100")
    parts = dict(new.fixed)
    # bf16 student and teacher, ZeRO-2's fp32 gradient partition (and a bf16 reduce bucket),
    # fp32 master weights and moments over 8 ranks
    assert parts["student weights"] == parts["frozen weights"] == 2 * shape.parameters
    assert parts["gradients"] == 4 * shape.parameters // 8 + 2 * 500_000_000
    assert parts["optimiser"] == 12 * shape.parameters // 8
    assert 60 * GIB < new.peak < old.peak - 20 * GIB
    # Qwen3-4B fits either way
    four = ModelShape.from_checkpoint(SHAPES / "Qwen3-4B")
    old_four = plan_memory(
        _paper_train(micro_batch_steps=8, chunk_size=None), four, prompt_tokens=PROMPT_TOKENS
    )
    check_fits(old_four, H100, device="an H100")


def test_the_plan_counts_what_each_engine_keeps():
    shape = ModelShape.from_checkpoint(SHAPES / "Qwen3-4B")
    p = shape.parameters

    slack = shape.tensors * 2**20  # up to 1 MiB per tensor of a per-tensor copy
    assert shape.tensors == 36 * 11 + 2  # 11 per layer, the embeddings (tied) and final norm

    def plan(method: str, **engine) -> MemoryPlan:
        config = TrainConfig.from_dict(
            {"method": method, "engine": {"micro_batch_steps": 1, **engine}}
        ).resolve(num_gpus=0, bf16_supported=False)
        return plan_memory(config, shape, prompt_tokens=100)

    single = plan("rft", kind="single", precision="fp32")
    assert dict(single.fixed) == {
        "student weights": 4 * p,
        "frozen weights": 0,  # cross-entropy has no teacher
        "gradients": 4 * p,
        "optimiser": 8 * p,
        "sampler's student copy": 0,  # ZeRO-3's only
        "allocator rounding": 4 * slack,  # weights, gradients, two moments
    }
    # the multi-tensor AdamW step: one fp32 temporary of every moment, per tensor
    assert single.stepping == (("optimiser step", 4 * p + slack),)
    assert dict(single.training)["autocast copies"] == 0
    assert single.peak == (
        sum(b for _, b in single.fixed) + max(4 * p + slack, sum(b for _, b in single.training))
    )
    ddp = plan("oel", kind="ddp", world_size=2, precision="bf16")
    assert dict(ddp.fixed)["frozen weights"] == 4 * p and dict(ddp.fixed)["gradients"] == 8 * p
    assert dict(ddp.fixed)["allocator rounding"] == 5 * slack  # and the teacher's weights
    assert dict(ddp.training)["autocast copies"] == 2 * p  # autocast's cache, per micro-batch
    zero3 = plan("grpo", kind="deepspeed", world_size=4, zero_stage=3, precision="bf16")
    fixed = dict(zero3.fixed)
    assert fixed["student weights"] == 2 * p // 4 and fixed["frozen weights"] == 2 * p
    # the partitions are flat: the reference and the sampler's whole copy of the student only
    assert fixed["allocator rounding"] == 2 * slack and fixed["sampler's student copy"] == 2 * p
    assert zero3.stepping == (("optimiser step", 4 * (p // 4)),)
    # its modules gather their weights as they run, up to 1e9 parameters live at once; the
    # model's own forward, whose two-branch rows carry a tree mask
    training = dict(zero3.training)
    assert training["gathered weights"] == 2 * min(p, 1_000_000_000)
    zero2 = dict(plan("grpo", kind="deepspeed", world_size=4, precision="bf16").training)
    assert zero2["gathered weights"] == 0
    # a CPU trainer's allocator gives every tensor its size
    cpu = TrainConfig.from_dict({"method": "rft", "engine": {"micro_batch_steps": 1}})
    cpu = cpu.resolve(num_gpus=0, bf16_supported=False)
    on_cpu = plan_memory(cpu, shape, prompt_tokens=100, cuda=False)
    assert dict(on_cpu.fixed)["allocator rounding"] == 0
    assert on_cpu.stepping == (("optimiser step", 4 * p),)


def test_checkpointing_chunking_and_smaller_micro_batches_each_lower_the_training_phase():
    shape = ModelShape.from_checkpoint(SHAPES / "Qwen3-8B")

    def training(**engine) -> int:
        plan = plan_memory(_paper_train(**engine), shape, prompt_tokens=PROMPT_TOKENS)
        return sum(b for _, b in plan.training)

    base = training(micro_batch_steps=8, chunk_size=None, gradient_checkpointing=False)
    assert training(micro_batch_steps=8, chunk_size=None) < base
    assert training(micro_batch_steps=8, chunk_size=1024, gradient_checkpointing=False) < base
    assert training(micro_batch_steps=4, chunk_size=None, gradient_checkpointing=False) < base


def test_bad_input_is_named():
    shape = ModelShape.from_checkpoint(SHAPES / "Qwen3-4B")
    with pytest.raises(ConfigError, match=r"^train\.engine: resolve"):
        plan_memory(TrainConfig(), shape, prompt_tokens=100)
    unsized = TrainConfig.from_dict({"engine": {"micro_batch_steps": None}}).resolve(
        num_gpus=0, bf16_supported=False
    )
    with pytest.raises(ConfigError, match=r"^train\.engine\.micro_batch_steps: null"):
        plan_memory(unsized, shape, prompt_tokens=100)
    assert plan_memory(unsized, shape, prompt_tokens=100, steps_per_update=8).peak > 0
    with pytest.raises(ConfigError, match=r"no config\.json"):
        ModelShape.from_checkpoint(ROOT / "conf")


def test_the_command_logs_the_plan_and_exits_with_one_line(caplog):
    caplog.set_level(logging.INFO, logger="resail_pipeline.training.memory")
    main(
        [
            str(ROOT / "conf" / "paper" / "parameters.yml"),
            "--model",
            str(SHAPES / "Qwen3-8B"),
            "--prompt-tokens",
            str(PROMPT_TOKENS),
        ]
    )
    out = "\n".join(
        r.getMessage() for r in caplog.records if r.name == "resail_pipeline.training.memory"
    )
    assert "student weights 15.3" in out and out.splitlines()[-1].startswith("fits: ")
    with pytest.raises(SystemExit, match=r"^error: train\.engine: one training rank"):
        main(
            [
                str(ROOT / "conf" / "paper" / "parameters.yml"),
                "--model",
                str(SHAPES / "Qwen3-8B"),
                "--prompt-tokens",
                "16384",
            ]
        )


# ----------------------------------------------------------------------------------------------
# the plan against the allocator


@pytest.mark.parametrize(
    ("method", "width", "layers", "words", "response", "checkpointing"),
    [("sdpo_resail", 64, 2, 200, 32, False), ("oel_resail", 128, 3, 120, 48, True)],
)
def test_the_plan_is_within_a_quarter_of_the_trainers_measured_peak(
    tmp_path, tiny_tokenizer, method, width, layers, words, response, checkpointing
):
    """One update of the real trainer (single engine, fp32, one micro-batch of 8 rows of equal
    length) under the profiler; the plan, with the longest privileged prompt, is compared with
    the allocator's peak (the model loads inside the run, so its weights are counted too)."""
    from resail_pipeline.checkpoints import save_policy
    from resail_pipeline.modeling import build_qwen3, small_qwen3_config

    model_config = small_qwen3_config(
        len(tiny_tokenizer),
        hidden_size=width,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=2 * width,
        pad_token_id=tiny_tokenizer.pad_token_id,
        eos_token_id=tiny_tokenizer.eos_token_id,
    )
    save_policy(build_qwen3(model_config, seed=0), tiny_tokenizer, tmp_path / "policy", name="p")
    manifest = measurement_inputs(
        tmp_path, tmp_path / "policy", tiny_tokenizer, words=words, response=response
    )
    config = TrainConfig.from_dict(
        {
            "method": method,
            "resail": {"rho": 0.5, "lambda": 0.5, "top_k": 5},
            "schedule": {"updates": 1, "trajectories_per_update": 4, "seed": 0},
            "optimizer": {"lr": 1e-3, "weight_decay": 0.0},
            "engine": {
                "kind": "single",
                "precision": "fp32",
                "micro_batch_steps": 8,
                "gradient_checkpointing": checkpointing,
            },
            "responses": {"max_tokens": response, "batch_size": 8},
            "run": {
                "manifest": str(manifest),
                "checkpoint": str(tmp_path / "out"),
                "run_dir": str(tmp_path / "run"),
                "policy_name": "x",
                "cycle": 1,
            },
        }
    )
    run = TrainingRun(config)
    steps = [s for traj in run.data.trajectories for s in run.data.steps[traj]]
    lengths = [len(s.privileged_ids) for s in steps]
    assert len(steps) == 8 and max(lengths) <= 1.1 * min(lengths)  # rows of about one length
    prompt_tokens = max(lengths)

    _, measured = allocator_peak(run.run, torch.device("cpu"), tmp_path / "trace.json")
    plan = plan_memory(
        config.resolve(num_gpus=0, bf16_supported=False),
        ModelShape.from_config(model_config),
        prompt_tokens=prompt_tokens,
        insert_tokens=max(len(s.privileged_ids) - len(s.ordinary_ids) for s in steps),
        cuda=False,
    )
    # within a quarter, and never below: a plan that errs must err high
    assert measured <= plan.peak <= 1.25 * measured, (plan.describe(), plan.peak / measured)


def test_the_plans_description_adds_up():
    plan = MemoryPlan(
        fixed=(("weights", 2 * GIB), ("optimiser", 0)),
        training=(("activations", GIB),),
        sampling=(("sampling cache", 3 * GIB),),
    )
    assert plan.peak == 5 * GIB
    assert plan.describe() == (
        "weights 2.0 + max(training (activations 1.0), sampling (sampling cache 3.0)) = 5.0 GiB"
    )
    stepped = MemoryPlan(
        fixed=(("weights", 2 * GIB),),
        training=(("activations", GIB),),
        stepping=(("optimiser step", 4 * GIB),),
    )
    assert stepped.peak == 6 * GIB and list(stepped.phases) == ["training", "step"]
    assert stepped.describe() == (
        "weights 2.0 + max(training (activations 1.0), step (optimiser step 4.0)) = 6.0 GiB"
    )
    alone = MemoryPlan(fixed=(("weights", 2 * GIB),), training=(("activations", GIB),))
    assert alone.describe() == "weights 2.0 + training (activations 1.0) = 3.0 GiB"


@pytest.mark.parametrize("static", [False, True], ids=["dynamic", "static"])
@pytest.mark.parametrize("samples", [1, 4])
def test_the_sampler_never_holds_more_than_its_plan(tmp_path, tiny_tokenizer, samples, static):
    """A decode batch sampled to its full response length, with the cache allocated whole at
    prefill (a GPU's default), holds at most what :func:`sampling_terms` plans; GRPO's groups
    (``samples`` rows per prompt) too, and the static step of ``cuda_graphs`` (here without a
    graph), which attends over the whole buffer. A cache that grows while its old buffer is alive
    would hold up to twice its own size."""
    from resail_pipeline.generation import SamplingParams
    from resail_pipeline.generation.transformers_backend import TransformersGenerator
    from resail_pipeline.modeling import build_qwen3, small_qwen3_config
    from resail_pipeline.training.memory import sampling_terms

    config = small_qwen3_config(
        len(tiny_tokenizer),
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        intermediate_size=128,
        pad_token_id=tiny_tokenizer.pad_token_id,
        eos_token_id=tiny_tokenizer.eos_token_id,
    )
    model = build_qwen3(config, seed=0).eval()
    with torch.no_grad():  # no row ends early: the end token's logit is 0, the largest far above
        model.lm_head.weight.mul_(100.0)
        model.lm_head.weight[tiny_tokenizer.eos_token_id] = 0.0
    rows, response = 8, 192
    words = [w for w in tiny_tokenizer.get_vocab() if w.isalpha()]
    prompts = [" ".join(words[i : i + 96]) for i in range(rows // samples)]
    generator = TransformersGenerator(
        model,
        tiny_tokenizer,
        policy_id="p",
        batch_size=rows,
        preallocate=True,
        cuda_graphs=static,
        progress=False,
    )
    assert generator.static_decode is static
    params = SamplingParams(temperature=1.0, max_new_tokens=response, n=samples, seed=0)
    generations, measured = allocator_peak(
        lambda: generator.generate(prompts, params), torch.device("cpu"), tmp_path / "trace.json"
    )
    assert [len(g.token_ids) for g in generations] == [response] * rows
    prompt_tokens = max(
        len(tiny_tokenizer(p, add_special_tokens=False)["input_ids"]) for p in prompts
    )
    planned = sampling_terms(
        ModelShape.from_config(config),
        rows=rows,
        prompt_tokens=prompt_tokens,
        response=response,
        cache_bytes=4,
        samples=samples,
    )
    plan = sum(b for _, b in planned)
    assert measured <= plan <= 1.5 * measured, (planned, measured)
