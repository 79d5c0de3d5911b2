"""The launcher: the trainer as a subprocess, its log streamed, its failures carrying the log's tail."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from resail_pipeline.checkpoints import read_checkpoint_info
from resail_pipeline.training import TrainConfig, TrainingFailed, launch
from resail_pipeline.training.launcher import command


@pytest.fixture(autouse=True)
def one_thread_per_process(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


def test_command_lines():
    single = TrainConfig.from_dict(
        {"engine": {"kind": "single", "world_size": 1, "precision": "fp32"}}
    )
    assert command(single, "c.yaml") == [
        sys.executable,
        "-m",
        "resail_pipeline.training",
        "--config",
        "c.yaml",
    ]
    ddp = TrainConfig.from_dict({"engine": {"kind": "ddp", "world_size": 2, "precision": "fp32"}})
    assert command(ddp, "c.yaml") == [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        "-m",
        "resail_pipeline.training",
        "--config",
        "c.yaml",
    ]
    with pytest.raises(ValueError, match="resolve the engine"):
        command(TrainConfig(), "c.yaml")


def test_launch_trains_and_returns_the_checkpoint_and_metrics(make_config, caplog):
    config = make_config(method="sdpo_resail", engine={"kind": "auto"})
    with caplog.at_level("INFO", logger="resail_pipeline.training.launcher"):
        result = launch(config)
    assert result.config.engine.kind == "single" and result.config.engine.world_size == 1
    assert TrainConfig.from_yaml(Path(config.run.run_dir) / "train_config.yaml") == result.config
    assert result.checkpoint == read_checkpoint_info(config.run.checkpoint)
    assert result.checkpoint.method == "sdpo_resail"
    assert len(result.checkpoint.sha256) == 64
    assert result.metrics["update"].tolist() == [0, 1]
    assert len(result.selected) == result.metrics["num_selected"].sum()
    log = result.log_path.read_text()
    assert "update 2/2" in log and "published" in log
    assert "[trainer]" in caplog.text and "update 2/2" in caplog.text


def test_a_crash_fails_with_the_trainers_last_lines_and_publishes_nothing(
    make_config, nan_manifest
):
    config = make_config(method="sdpo", run={"manifest": str(nan_manifest)})
    with pytest.raises(TrainingFailed) as failure:
        launch(config, tail_lines=15)
    message = str(failure.value)
    assert "exited with status 1" in message
    # the recorded traceback first, whole, then the log's last lines
    first, _, tail = message.partition("; last lines of")
    assert "error.json" in first and "Traceback (most recent call last)" in first
    assert "FloatingPointError: update 1: the loss is not finite" in first
    assert "FloatingPointError: update 1: the loss is not finite" in tail
    assert len(tail.splitlines()) <= 16
    checkpoint = Path(config.run.checkpoint)
    assert not checkpoint.exists() and not list(checkpoint.parent.glob(".policy*"))
    assert "Traceback" in (checkpoint.parent / "train.log").read_text()


def test_a_missing_manifest_fails_before_launching(make_config, tmp_path):
    config = make_config(run={"manifest": str(tmp_path / "nowhere.yaml")})
    with pytest.raises(ValueError, match=r"nowhere\.yaml: no such file"):
        launch(config)
    assert not (Path(config.run.run_dir) / "train.log").exists()


def test_the_first_failure_is_read_from_the_error_file(tmp_path):
    from resail_pipeline.training.launcher import first_failure

    path = tmp_path / "error.json"
    assert first_failure(path) == ""  # nothing recorded (e.g. a rank killed by a signal)
    stack = "Traceback (most recent call last):\n" + "".join(f"  line {i}\n" for i in range(50))
    stack += "ValueError: rank 1 failed"
    record = {
        "message": {"message": "ValueError: rank 1 failed", "extraInfo": {"py_callstack": stack}}
    }
    path.write_text(json.dumps({**record, "errorCode": 1}))  # torchrun's copy adds errorCode
    text = first_failure(path, max_lines=5)
    assert text.endswith("ValueError: rank 1 failed") and len(text.splitlines()) == 6
    path.write_text(json.dumps({"message": "Signal 9 (SIGKILL) received by PID 7"}))
    assert first_failure(path) == "; first failure: Signal 9 (SIGKILL) received by PID 7"
    path.write_text("{not json")
    assert first_failure(path) == ""


def test_the_command_starts_one_torchrun_agent_per_node(tmp_path):
    from resail_pipeline.training import TrainConfig
    from resail_pipeline.training.launcher import command

    config = TrainConfig.from_dict(
        {
            "engine": {
                "kind": "ddp",
                "world_size": 4,
                "precision": "fp32",
                "nodes": 2,
                "rdzv_endpoint": "10.0.0.1:29400",
                "launcher": ["srun", "--nodes=2", "--ntasks-per-node=1"],
            },
            "run": {"run_dir": str(tmp_path / "run")},
        }
    )
    cmd = command(config, "config.yaml")
    assert cmd[:3] == ["srun", "--nodes=2", "--ntasks-per-node=1"]
    assert cmd[4:7] == ["-m", "torch.distributed.run", "--nnodes=2"]
    assert "--rdzv-backend=c10d" in cmd and "--rdzv-endpoint=10.0.0.1:29400" in cmd
    assert "--nproc_per_node=2" in cmd and "--standalone" not in cmd
    assert cmd[-4:] == ["-m", "resail_pipeline.training", "--config", "config.yaml"]
    ids = {a for a in cmd if a.startswith("--rdzv-id=")}
    assert ids == {a for a in command(config, "other.yaml") if a.startswith("--rdzv-id=")}


def test_the_trainer_dies_with_the_process_that_launched_it(tmp_path, process_alive):
    """A SIGKILL of the Kedro process must not leave its trainer running: the child the launcher
    starts gets SIGTERM when its parent dies (here a parent started for the purpose)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    pid_file = tmp_path / "child.pid"
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time\n"
            "from resail_pipeline.io import tied_to_this_process\n"
            "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'],\n"
            "                         preexec_fn=tied_to_this_process())\n"
            f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
            "time.sleep(120)\n",
        ]
    )
    try:
        deadline = time.monotonic() + 60
        while not pid_file.exists() or not pid_file.read_text():
            assert time.monotonic() < deadline, "the parent never started its child"
            time.sleep(0.1)
        child = int(pid_file.read_text())
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 10
        while process_alive(child):
            assert time.monotonic() < deadline, f"the child {child} outlived its parent"
            time.sleep(0.1)
    finally:
        parent.kill()


def test_the_trainer_uses_expandable_segments_unless_told_otherwise(tmp_path, monkeypatch):
    from resail_pipeline.training.launcher import ALLOCATOR_CONF, job_env

    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    assert job_env(tmp_path / "error.json")["PYTORCH_CUDA_ALLOC_CONF"] == ALLOCATOR_CONF
    assert ALLOCATOR_CONF == "expandable_segments:True"
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:512")
    assert job_env(tmp_path / "error.json")["PYTORCH_CUDA_ALLOC_CONF"] == "max_split_size_mb:512"
