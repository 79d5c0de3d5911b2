"""TrainConfig: the paper's defaults, YAML round trip, and errors that name the field."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from resail_pipeline.objectives import ResailConfig
from resail_pipeline.training import ConfigError, TrainConfig
from resail_pipeline.training.config import EngineConfig


def test_weight_decay_default_is_the_projects():
    base = Path(__file__).resolve().parents[2] / "conf" / "base" / "parameters_train.yml"
    optimizer = yaml.safe_load(base.read_text())["train"]["optimizer"]
    assert TrainConfig().optimizer.weight_decay == optimizer["weight_decay"] == 0.0


def test_defaults_are_the_papers():
    config = TrainConfig()
    assert config.method == "oel_resail"
    assert config.optimizer.lr == 1e-6
    assert (config.schedule.updates, config.schedule.trajectories_per_update) == (30, 8)
    assert (config.resail.rho, config.resail.lam, config.resail.top_k) == (0.25, 1.0, 20)
    assert config.resail.selection == "top" and config.resail.retention == "privileged"
    assert config.resail.balancing is True
    assert config.probe.enabled is False  # a diagnostic: off unless asked for
    assert (config.probe.num_trajectories, config.probe.top_k) == (16, 20)


@pytest.mark.parametrize(
    ("method", "parent", "cached", "objective"),
    [
        ("oel", "oel", False, ResailConfig.off()),
        ("sdpo", "sdpo", True, ResailConfig.off()),
        ("oel_resail", "oel", False, ResailConfig()),
        ("sdpo_resail", "sdpo", True, ResailConfig()),
    ],
)
def test_method_decides_responses_and_objective(method, parent, cached, objective):
    config = TrainConfig(method=method)
    assert config.parent == parent
    assert config.uses_cached_responses is cached
    assert config.objective() == objective
    assert config.distills and config.trains


@pytest.mark.parametrize(
    ("method", "source", "view", "successes", "samples"),
    [  # table 7
        ("react", None, "ordinary", False, False),
        ("rft", "logged", "ordinary", True, False),
        ("grpo", "student_groups", "ordinary", True, True),
        ("epd", "teacher_cache", "privileged", False, False),
        ("sdpo", "student_cache", "ordinary", False, False),
        ("oel", "student", "ordinary", False, True),
    ],
)
def test_each_method_has_the_response_source_of_table_7(method, source, view, successes, samples):
    config = TrainConfig(method=method)
    assert config.response_source == source
    assert config.uses_cached_responses is (source in ("teacher_cache", "student_cache"))
    assert config.cached_response_view == view
    assert config.successes_only is successes
    assert config.samples_responses is samples
    assert config.trains is (method != "react")
    assert config.distills is (method in ("oel", "sdpo"))


def test_grpo_defaults_are_the_papers():
    grpo = TrainConfig(method="grpo").grpo
    assert (grpo.samples, grpo.clip_low, grpo.clip_high, grpo.kl_beta) == (8, 0.2, 0.28, 0.01)


def test_yaml_round_trip_keeps_every_field(tmp_path):
    config = TrainConfig.from_dict(
        {
            "method": "sdpo_resail",
            "resail": {"selection": "bottom", "rho": 0.05, "balancing": False, "lambda": 0.5},
            "optimizer": {"betas": [0.9, 0.98], "grad_clip": None},
            "engine": {"kind": "deepspeed", "zero_stage": 3, "micro_batch_steps": 4},
            "probe": {"enabled": True, "num_trajectories": 4, "micro_batch_steps": 2},
            "run": {"manifest": "m.yaml", "checkpoint": "ckpt", "run_dir": "run", "cycle": 2},
        }
    )
    assert config.resail.lam == 0.5 and config.optimizer.betas == (0.9, 0.98)
    path = config.to_yaml(tmp_path / "config.yaml")
    assert "lambda: 0.5" in path.read_text()
    assert TrainConfig.from_yaml(path) == config


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"method": "ppo"}, "method"),
        ({"grpo": {"samples": 1}}, "grpo.samples"),
        ({"grpo": {"clip_low": 1.0}}, "grpo.clip_low"),
        ({"grpo": {"kl_beta": -0.1}}, "grpo.kl_beta"),
        ({"resail": {"rho": 0.0}}, "resail.rho"),
        ({"resail": {"rho": 1.5}}, "resail.rho"),
        ({"resail": {"lambda": -1.0}}, "resail.lambda"),
        ({"resail": {"selection": "best"}}, "resail.selection"),
        ({"resail": {"retention": "both"}}, "resail.retention"),
        ({"resail": {"balancing": "yes"}}, "resail.balancing"),
        ({"resail": {"top_k": 0}}, "resail.top_k"),
        ({"schedule": {"updates": 0}}, "schedule.updates"),
        ({"schedule": {"trajectories_per_update": -2}}, "schedule.trajectories_per_update"),
        ({"optimizer": {"lr": 0}}, "optimizer.lr"),
        ({"optimizer": {"betas": [0.9, 1.0]}}, "optimizer.betas[1]"),
        ({"optimizer": {"weight_decay": -0.1}}, "optimizer.weight_decay"),
        ({"engine": {"kind": "fsdp"}}, "engine.kind"),
        ({"engine": {"zero_stage": 4}}, "engine.zero_stage"),
        ({"engine": {"precision": "fp16"}}, "engine.precision"),
        ({"engine": {"kind": "single", "world_size": 2}}, "engine.world_size"),
        ({"engine": {"micro_batch_steps": 0}}, "engine.micro_batch_steps"),
        ({"responses": {"temperature": 0}}, "responses.temperature"),
        ({"responses": {"top_p": 0}}, "responses.top_p"),
        ({"responses": {"max_tokens": 0}}, "responses.max_tokens"),
        ({"responses": {"max_batch_tokens": 0}}, "responses.max_batch_tokens"),
        ({"responses": {"cuda_graphs": "yes"}}, "responses.cuda_graphs"),
        ({"probe": {"enabled": "yes"}}, "probe.enabled"),
        ({"probe": {"num_trajectories": 0}}, "probe.num_trajectories"),
        ({"probe": {"top_k": 0}}, "probe.top_k"),
        ({"probe": {"micro_batch_steps": 0}}, "probe.micro_batch_steps"),
        ({"schedule": {"epochs": 2}}, "schedule"),
        ({"trainer": {}}, "TrainConfig"),
    ],
)
def test_bad_values_name_their_field(data, field):
    with pytest.raises(ConfigError) as error:
        TrainConfig.from_dict(data)
    assert str(error.value).startswith(f"{field}:"), str(error.value)


def test_bad_yaml_names_the_file(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("method: oel\nresail:\n  rho: 2\n")
    with pytest.raises(ConfigError, match=rf"{path}: resail\.rho"):
        TrainConfig.from_yaml(path)


def test_run_paths_are_required_to_run():
    with pytest.raises(ConfigError, match=r"run\.manifest"):
        TrainConfig().run.check_set()


@pytest.mark.parametrize(
    ("engine", "num_gpus", "bf16", "expected"),
    [
        (EngineConfig(), 0, False, ("single", 1, "fp32")),
        (EngineConfig(world_size=2), 0, False, ("ddp", 2, "fp32")),
        (EngineConfig(), 8, True, ("deepspeed", 8, "bf16")),
        (EngineConfig(), 2, False, ("deepspeed", 2, "fp32")),
        (EngineConfig(kind="ddp", precision="bf16"), 0, False, ("ddp", 1, "bf16")),
    ],
)
def test_auto_resolves_by_hardware(engine, num_gpus, bf16, expected):
    resolved = engine.resolve(num_gpus=num_gpus, bf16_supported=bf16)
    assert (resolved.kind, resolved.world_size, resolved.precision) == expected
    assert resolved.resolved


def test_more_processes_than_gpus_is_an_error():
    with pytest.raises(ConfigError, match=r"engine\.world_size"):
        TrainConfig(engine=EngineConfig(world_size=4)).resolve(num_gpus=2, bf16_supported=True)


def test_nodes_split_the_world_and_meet_at_a_rendezvous():
    engine = EngineConfig(kind="deepspeed", nodes=2, rdzv_endpoint="head:29400")
    resolved = engine.resolve(num_gpus=8, bf16_supported=True)
    assert (resolved.world_size, resolved.processes_per_node) == (16, 8)  # one per GPU of each
    with pytest.raises(ConfigError, match="12 processes per node but only 8 GPU"):
        engine.replace(world_size=24).resolve(num_gpus=8, bf16_supported=True)
    # a one-node world size over two nodes would leave half of each node's GPUs idle
    with pytest.raises(ConfigError, match=r"world_size: 8 over 2 nodes is 4 processes per node"):
        engine.replace(world_size=8).resolve(num_gpus=8, bf16_supported=True)
    one_node = engine.replace(nodes=1, rdzv_endpoint=None, world_size=4)
    assert one_node.resolve(num_gpus=8, bf16_supported=True).world_size == 4  # a subset: allowed
    with pytest.raises(ConfigError, match="rdzv_endpoint: 2 nodes meet at a host:port"):
        EngineConfig(kind="ddp", nodes=2)
    with pytest.raises(ConfigError, match="world_size: 3 processes do not split over 2 nodes"):
        EngineConfig(kind="ddp", nodes=2, rdzv_endpoint="h:1", world_size=3)
    with pytest.raises(ConfigError, match="nodes: the single engine"):
        EngineConfig(kind="single", nodes=2, rdzv_endpoint="h:1")
    with pytest.raises(ConfigError, match=r"launcher\[1\]: must be a string, got 2"):
        EngineConfig(launcher=("srun", 2))
    config = TrainConfig.from_dict({"engine": {"launcher": ["srun", "--ntasks-per-node=1"]}})
    assert config.engine.launcher == ("srun", "--ntasks-per-node=1")
    assert TrainConfig.from_dict(config.to_dict()) == config
