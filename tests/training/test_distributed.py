"""Data parallelism on CPU: torchrun with two gloo processes gives the one-process update."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from resail_pipeline.training import launch
from resail_pipeline.training.launcher import collect, prepare


@pytest.fixture(autouse=True)
def one_thread_per_process(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


def checkpoint_tensors(path: str) -> dict[str, torch.Tensor]:
    return load_file(str(next(Path(path).glob("*.safetensors"))))


def assert_same_training(one, two, atol: float = 1e-6):
    """Same batches, selections and losses (to ``atol``; measured on the tiny model: about 1e-7),
    nearly the same weights."""
    for column in ("num_steps", "num_selected", "tokens"):
        assert two.metrics[column].tolist() == one.metrics[column].tolist()
    for column in ("loss", "loss_sel", "loss_ret"):
        torch.testing.assert_close(
            torch.tensor(two.metrics[column].to_numpy(), dtype=torch.float64),
            torch.tensor(one.metrics[column].to_numpy(), dtype=torch.float64),
            rtol=0,
            atol=atol,
        )
    assert two.selected[["update", "traj_id", "t"]].equals(one.selected[["update", "traj_id", "t"]])
    a, b = checkpoint_tensors(one.checkpoint.path), checkpoint_tensors(two.checkpoint.path)
    worst = max((a[k] - b[k]).abs().max().item() for k in a)
    assert worst <= 10 * atol, f"weights differ by up to {worst:.2e}"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("method", "micro_batch_steps"),
    [("sdpo_resail", None), ("oel_resail", None), ("sdpo_resail", 1)],
)
def test_torchrun_ddp_on_two_cpu_processes_matches_one_process(
    method, micro_batch_steps, make_config
):
    """Fresh OEL samples are seeded per step, so sharding does not change them; with one step per
    micro-batch, scoring runs first and DDP accumulates over micro-batches (no_sync)."""
    sections = {"method": method, "schedule": {"trajectories_per_update": 3}}
    one = launch(make_config(name="one", engine={"kind": "single"}, **sections))
    two = launch(
        make_config(
            name="two",
            engine={"kind": "ddp", "world_size": 2, "micro_batch_steps": micro_batch_steps},
            **sections,
        )
    )
    assert "engine ddp x 2" in two.log_path.read_text()
    assert_same_training(one, two)


@pytest.mark.slow
@pytest.mark.parametrize("micro_batch_steps", [None, 1])
def test_deepspeed_zero2_on_two_cpu_processes_matches_one_process(micro_batch_steps, make_config):
    pytest.importorskip("deepspeed")
    sections = {"method": "sdpo_resail", "schedule": {"trajectories_per_update": 3}}
    one = launch(make_config(name="one", engine={"kind": "single"}, **sections))
    engine = {
        "kind": "deepspeed",
        "world_size": 2,
        "zero_stage": 2,
        "micro_batch_steps": micro_batch_steps,
    }
    two = launch(make_config(name="zero2", engine=engine, **sections))
    assert "engine deepspeed x 2" in two.log_path.read_text()
    assert_same_training(one, two)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["oel_resail", "grpo"])
def test_deepspeed_zero3_on_two_cpu_processes_matches_one_process(method, make_config):
    """ZeRO-3 gathers the student's parameters in every forward, a collective. With one step per
    micro-batch and three steps, one rank has an empty micro-batch in the no-grad scoring pass
    and fewer prompts to sample for (OEL's fresh responses, GRPO's groups): it must neither skip
    a forward nor decode a different number of tokens through the partitioned student."""
    pytest.importorskip("deepspeed")
    sections = {"method": method, "schedule": {"trajectories_per_update": 3}}
    one = launch(make_config(name="one", engine={"kind": "single"}, **sections))
    engine = {"kind": "deepspeed", "world_size": 2, "zero_stage": 3, "micro_batch_steps": 1}
    three = launch(make_config(name="zero3", engine=engine, **sections))
    assert "engine deepspeed x 2" in three.log_path.read_text()
    assert_same_training(one, three)


@pytest.mark.slow
def test_the_probe_under_torchrun_is_the_one_process_probe(make_config):
    """Each rank measures a strided share of the probe steps and the shares are gathered; with one
    step per micro-batch one rank has an empty micro-batch and forwards a single token."""
    sections = {
        "method": "oel_resail",
        "schedule": {"trajectories_per_update": 3},
        "probe": {"enabled": True, "micro_batch_steps": 1},
    }
    one = launch(make_config(name="one", engine={"kind": "single"}, **sections))
    two = launch(make_config(name="two", engine={"kind": "ddp", "world_size": 2}, **sections))
    assert_same_training(one, two)
    assert len(one.probe) == 3 * 5  # updates 0, 1, 2 x the five probe steps
    columns = ["update", "traj_id", "t", "tokens"]
    assert two.probe[columns].equals(one.probe[columns])
    torch.testing.assert_close(
        torch.tensor(two.probe["jsd"].to_numpy()),
        torch.tensor(one.probe["jsd"].to_numpy()),
        rtol=1e-5,
        atol=1e-7,
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_nodes_meeting_through_c10d_match_one_process(make_config, tmp_path):
    """Two torchrun agents, as ``srun`` starts one per node, each with one gloo process, meet at
    a c10d rendezvous on 127.0.0.1: the update is the one-process update."""
    sections = {"method": "sdpo_resail", "schedule": {"trajectories_per_update": 3}}
    one = launch(make_config(name="one", engine={"kind": "single"}, **sections))
    engine = {  # world_size derived: one process per node without GPUs
        "kind": "ddp",
        "nodes": 2,
        "rdzv_endpoint": f"127.0.0.1:{_free_port()}",
    }
    job = prepare(make_config(name="nodes", engine=engine, **sections))
    assert "--nnodes=2" in job.command and "--nproc_per_node=1" in job.command
    logs = [tmp_path / f"agent{i}.log" for i in range(2)]
    agents = [
        subprocess.Popen(job.command, env=job.env, stdout=path.open("w"), stderr=subprocess.STDOUT)
        for path in logs
    ]
    codes = [agent.wait(timeout=900) for agent in agents]
    assert codes == [0, 0], "\n".join(path.read_text()[-2000:] for path in logs)
    two = collect(job)
    assert "engine ddp x 2" in "".join(path.read_text() for path in logs)
    assert_same_training(one, two)


@pytest.mark.slow
def test_zero3_with_parameters_really_partitioned_matches_one_process(
    tmp_path, tiny_tokenizer, tiny_model_config, tiny_steps, tiny_summaries, tiny_responses
):
    """A student wider than DeepSpeed's persistence threshold (100,000 elements), so that ZeRO-3
    partitions its weights over the two ranks and each holds empty tensors outside the modules
    that gather them: OEL + ReSAIL's update (its scoring, sampling and training) is the
    one-process update."""
    pytest.importorskip("deepspeed")
    import copy

    from resail_pipeline.checkpoints import save_policy
    from resail_pipeline.modeling import build_qwen3
    from resail_pipeline.training import TrainConfig, write_inputs

    from .conftest import base_config

    config = copy.deepcopy(tiny_model_config)
    config.update({"hidden_size": 320, "intermediate_size": 640, "head_dim": 80})
    config.initializer_range = 0.2
    wide = save_policy(build_qwen3(config, seed=0), tiny_tokenizer, tmp_path / "wide", name="w")
    assert config.hidden_size * config.intermediate_size > 100_000  # partitioned under ZeRO-3
    manifest = write_inputs(
        tmp_path / "inputs",
        policy=wide.path,
        steps=tiny_steps,
        summaries=tiny_summaries,
        responses=tiny_responses,
    )

    def make(name, engine):
        data = base_config(
            method="oel_resail", schedule={"trajectories_per_update": 3}, engine=engine
        )
        data["run"] = {
            "manifest": str(manifest),
            "checkpoint": str(tmp_path / name / "policy"),
            "run_dir": str(tmp_path / name),
            "policy_name": name,
            "cycle": 1,
        }
        return TrainConfig.from_dict(data)

    one = launch(make("one", {"kind": "single"}))
    engine = {"kind": "deepspeed", "world_size": 2, "zero_stage": 3, "micro_batch_steps": 1}
    three = launch(make("zero3", engine))
    assert "engine deepspeed x 2" in three.log_path.read_text()
    # ten times the width: losses of about 4.7 agree to about 3e-6 (the model's own forward
    # against the functional one, two ranks against one)
    assert_same_training(one, three, atol=1e-5)


@pytest.mark.slow
def test_a_zero3_student_gathers_its_weights_module_by_module():
    """Under ZeRO-3 the student runs the model's own modules, whose weights DeepSpeed gathers
    as each runs: a forward never holds the whole model gathered (the functional forward, which
    reads every weight itself, held 99.6% of it at once)."""
    pytest.importorskip("deepspeed")
    script = Path(__file__).with_name("_zero3_gather.py")
    env = {**os.environ, "MASTER_PORT": str(_free_port()), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (share,) = [
        float(line.split()[1]) for line in done.stdout.splitlines() if line.startswith("gathered ")
    ]
    assert 0 < share < 0.5
