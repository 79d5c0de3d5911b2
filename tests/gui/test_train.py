"""The GUI trainer as a process of its own: its job file and command, and under torchrun with two
gloo processes the one-process run."""

from __future__ import annotations

import shutil
import sys
import types
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from resail_pipeline.config import ConfigError, build
from resail_pipeline.gui import offline
from resail_pipeline.gui.config import AitzConfig
from resail_pipeline.gui.train import GuiTrainJob, launch, prepare
from resail_pipeline.schemas import check_columns

OFFLINE = {
    "schedule": {"updates": 2, "trajectories_per_update": 3, "seed": 0},
    # AdamW moves an element with a near-zero gradient by up to lr whatever its rounding: at 1e-4
    # the ranks' summation order shows in the weights below 1e-5, a lost reduction above it
    "optimizer": {"lr": 1e-4},
    "responses": {"temperature": 1.0, "max_new_tokens": 4},
    "evaluation": {"temperature": 1.0, "max_new_tokens": 4},
    "monitor_every": 1,
    "monitor_episodes": 2,
    # three steps per micro-batch: of an update's 7 kept steps, rank 0 takes 4 (two micro-batches)
    # and rank 1 takes 3, then runs an empty one (a real step weighted zero)
    "micro_batch": 3,
}


@pytest.fixture(autouse=True)
def one_thread_per_process(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="module")
def gui_inputs(tmp_path_factory, aitz_root, aitz_train, aitz_test):
    """The tiny policy's checkpoint, a pool of 6 episodes with rules-written remarks, and the
    monitoring subset."""
    from .conftest import tiny_vision_policy

    folder = tmp_path_factory.mktemp("gui-train")
    initial = tiny_vision_policy(aitz_train).save(folder / "initial", name="tiny-vl")
    pool = offline.training_pool(aitz_train, 6, seed=0)
    summaries = pd.DataFrame(
        {
            "episode_id": sorted(pool["episode_id"].unique()),
            "remark": "<remark>\nHow to do:\n1) x\n\nWatch out:\n- y\n</remark>",
            "source": "rules",
        }
    )
    subset = offline.monitoring_subset(aitz_test, 2, seed=0)
    return initial, pool, summaries, subset


def _job(tmp_path: Path, initial, name: str, engine: dict, root: Path) -> GuiTrainJob:
    aitz = build(
        AitzConfig,
        {
            "data": {"root": str(root)},
            "initial": {"device": "cpu", "dtype": "float32", "batch_size": 4},
            "offline": {**OFFLINE, "engine": engine},
        },
        "aitz",
    )
    return GuiTrainJob(
        aitz=aitz,
        run="oel_sgs",
        initial=initial.path,
        run_dir=str(tmp_path / name / "run"),
        checkpoint=str(tmp_path / name / "policy"),
    )


def test_prepare_writes_the_inputs_and_the_command(gui_inputs, tmp_path, aitz_root):
    initial, pool, summaries, subset = gui_inputs
    kept = np.arange(len(pool)) % 2 == 0
    single = prepare(
        _job(tmp_path, initial, "one", {"kind": "single"}, aitz_root), pool, summaries, subset, kept
    )
    assert single.command[:3] == [sys.executable, "-m", "resail_pipeline.gui.train"]
    config_path = Path(single.command[-1])
    job = GuiTrainJob.from_yaml(config_path)
    assert job.engine.resolved and (job.engine.kind, job.engine.world_size) == ("single", 1)
    assert job.aitz.offline.schedule.trajectories_per_update == 3
    run_dir = config_path.parent
    written = pd.read_parquet(run_dir / "pool.parquet")
    assert written["kept"].tolist() == kept.tolist()
    assert written.drop(columns="kept")["episode_id"].tolist() == pool["episode_id"].tolist()
    assert len(pd.read_parquet(run_dir / "monitor.parquet")) == len(subset)
    ddp = prepare(
        _job(tmp_path, initial, "two", {"kind": "ddp", "world_size": 2}, aitz_root),
        pool,
        summaries,
        subset,
    )
    assert ddp.command[1:5] == ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    assert ddp.command[5:7] == ["-m", "resail_pipeline.gui.train"]
    assert "kept" not in pd.read_parquet(Path(ddp.command[-1]).parent / "pool.parquet")


def test_a_job_without_paths_is_refused(gui_inputs, tmp_path, aitz_root):
    job = _job(tmp_path, gui_inputs[0], "one", {"kind": "single"}, aitz_root)
    with pytest.raises(ConfigError, match="initial: required path"):
        job.replace(initial="")
    with pytest.raises(ConfigError, match="checkpoint: required path"):
        job.replace(checkpoint="")


def _weights(path: str) -> dict[str, torch.Tensor]:
    return load_file(str(next(Path(path).glob("*.safetensors"))))


def assert_same_run(one, two):
    """Same steps, tokens and curve; losses to fp32 rounding; nearly the same weights."""
    for column in ("update", "num_steps", "tokens"):
        assert two.metrics[column].tolist() == one.metrics[column].tolist()
    torch.testing.assert_close(
        torch.tensor(two.metrics["loss"].to_numpy()),
        torch.tensor(one.metrics["loss"].to_numpy()),
        rtol=1e-5,
        atol=1e-6,
    )
    pd.testing.assert_frame_equal(two.curve, one.curve)
    a, b = _weights(one.checkpoint.path), _weights(two.checkpoint.path)
    assert a.keys() == b.keys()
    for key in a:
        assert a[key].shape == b[key].shape
        torch.testing.assert_close(b[key], a[key], rtol=0, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize(
    "engine",
    [{"kind": "ddp", "world_size": 2}, {"kind": "deepspeed", "world_size": 2, "zero_stage": 2}],
    ids=["ddp", "zero2"],
)
def test_torchrun_on_two_cpu_processes_matches_one_process(engine, gui_inputs, tmp_path, aitz_root):
    """The filtered run (half the pool's steps kept) in one process, then under torchrun with two
    gloo processes: each rank samples and scores its share of every update's steps, and both
    reduce to the one-process update."""
    if engine["kind"] == "deepspeed":
        pytest.importorskip("deepspeed")
    initial, pool, summaries, subset = gui_inputs
    kept = np.arange(len(pool)) % 2 == 0
    one = launch(
        _job(tmp_path, initial, "one", {"kind": "single"}, aitz_root), pool, summaries, subset, kept
    )
    two = launch(
        _job(tmp_path, initial, engine["kind"], engine, aitz_root), pool, summaries, subset, kept
    )
    assert f"engine {engine['kind']} x 2" in two.log_path.read_text()
    check_columns(one.metrics, "aitz_train_metrics")
    check_columns(two.curve, "aitz_curve")
    assert one.metrics["update"].tolist() == [1, 2]
    assert one.curve["update"].tolist() == [0, 1, 2]
    assert one.metrics["num_steps"].sum() == int(kept.sum())
    assert (one.metrics["loss"] > 0).all() and (one.metrics["tokens"] > 0).all()
    assert two.checkpoint.parent_id == initial.policy_id and two.checkpoint.method == "oel_sgs"
    assert (Path(two.checkpoint.path) / "preprocessor_config.json").is_file()
    assert_same_run(one, two)


def test_a_killed_run_continues_from_its_snapshot(gui_inputs, tmp_path, aitz_root, monkeypatch):
    """The GUI trainer (in this process, one engine) stopped after update 1's snapshot, then
    rerun: it continues at update 2, ends as the uninterrupted run, and removes its snapshots once
    published. A snapshot taken under other settings is not continued."""
    from resail_pipeline.gui import train as gui_train

    initial, pool, summaries, subset = gui_inputs
    kept = np.arange(len(pool)) % 2 == 0
    real = offline.monitor_hits
    monitored = []  # the updates monitored: 0, then after every update (monitor_every 1)

    def counted(policy, *args, **kwargs):
        monitored.append(len(monitored))
        if len(monitored) == stop_at:
            raise KeyboardInterrupt("killed")
        return real(policy, *args, **kwargs)

    monkeypatch.setattr(offline, "monitor_hits", counted)

    def run(name: str, snapshots: Path | None = None, lr: float = 1e-4):
        monitored.clear()
        job = _job(tmp_path, initial, name, {"kind": "single"}, aitz_root)
        optimizer = job.aitz.offline.optimizer.replace(lr=lr)
        aitz = job.aitz.replace(offline=job.aitz.offline.replace(optimizer=optimizer))
        job = job.replace(aitz=aitz, snapshots=str(snapshots or ""))
        info = gui_train.train(prepare(job, pool, summaries, subset, kept).config)
        run_dir = Path(job.run_dir)
        return types.SimpleNamespace(
            checkpoint=info,
            metrics=pd.read_parquet(run_dir / "train_metrics.parquet"),
            curve=pd.read_parquet(run_dir / "curve.parquet"),
        )

    stop_at = None
    whole = run("whole")
    folder = tmp_path / "oel_sgs.snapshots"
    stop_at = 3  # while monitoring update 2: update 1's snapshot is the latest
    with pytest.raises(KeyboardInterrupt):
        run("killed", folder)
    assert [p.name for p in folder.iterdir()] == ["update-000001"]
    stop_at = None
    shutil.copytree(folder, tmp_path / "copy.snapshots")
    run("other-lr", tmp_path / "copy.snapshots", lr=2e-4)
    assert len(monitored) == 3  # started over: updates 0, 1 and 2 monitored
    resumed = run("resumed", folder)
    assert len(monitored) == 1  # update 2 only
    assert not folder.exists()  # published: nothing left to continue
    assert resumed.metrics["update"].tolist() == [1, 2]
    assert_same_run(whole, resumed)
