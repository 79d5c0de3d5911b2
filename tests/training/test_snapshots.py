"""Snapshots of a training run: a killed run's rerun continues to the uninterrupted run's model."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from resail_pipeline.config import ConfigError
from resail_pipeline.training import TrainConfig, write_inputs
from resail_pipeline.training.run import TrainingRun
from resail_pipeline.training.snapshots import Snapshots, run_key


class Killed(Exception):
    """Stands for the signal that ends a process between two updates."""


def weights(path: str | Path) -> dict[str, torch.Tensor]:
    return load_file(str(next(Path(path).glob("*.safetensors"))))


def kill_after(run: TrainingRun, updates: int) -> None:
    """Make ``run`` end, as if killed, right after its snapshot of ``updates`` updates."""
    take = run.snapshots.after_update

    def take_then_die(done, records):
        take(done, records)
        if done == updates:
            raise Killed

    run.snapshots.after_update = take_then_die


def count_updates(run: TrainingRun) -> list[int]:
    """The updates ``run`` computes, noted as it goes."""
    done: list[int] = []
    update = run.trainer.update

    def counted(u, batch):
        done.append(u)
        return update(u, batch)

    run.trainer.update = counted
    return done


SECTIONS = {
    "method": "oel_resail",
    "schedule": {"updates": 3},
    "probe": {"enabled": True},
}


def test_a_killed_run_continues_from_its_last_snapshot_to_the_same_model(make_config, tmp_path):
    whole = TrainingRun(make_config(name="whole", **SECTIONS)).run()

    folder = tmp_path / "snapshots"
    config = make_config(name="killed", run={"snapshots": str(folder)}, **SECTIONS)
    leftover = folder / ".update-000001.k9x2.tmp"  # an earlier write killed midway
    leftover.mkdir(parents=True)
    (leftover / "state.safetensors").write_bytes(b"cut short")
    killed = TrainingRun(config)
    kill_after(killed, 2)
    with pytest.raises(Killed):
        killed.run()
    # the first one replaced, and what the killed write left removed with it
    assert [p.name for p in folder.iterdir()] == ["update-000002"]
    assert not Path(config.run.checkpoint).exists()

    rerun = TrainingRun(config)
    computed = count_updates(rerun)
    outcome = rerun.run()
    assert computed == [2]  # the third update only
    assert not folder.exists()  # published: removed
    for column in ("update", "loss", "loss_sel", "loss_ret", "grad_norm", "num_selected"):
        torch.testing.assert_close(
            torch.tensor(outcome.metrics[column].to_numpy()),
            torch.tensor(whole.metrics[column].to_numpy()),
            rtol=1e-6,
            atol=1e-9,
        )
    assert outcome.selected[["update", "traj_id", "t"]].equals(
        whole.selected[["update", "traj_id", "t"]]
    )
    assert outcome.probe["update"].tolist() == whole.probe["update"].tolist()  # 0-3, once each
    torch.testing.assert_close(
        torch.tensor(outcome.probe["jsd"].to_numpy()),
        torch.tensor(whole.probe["jsd"].to_numpy()),
        rtol=1e-5,
        atol=1e-9,
    )
    a, b = weights(whole.checkpoint.path), weights(outcome.checkpoint.path)
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(b[key], a[key], rtol=1e-6, atol=1e-7)


def test_a_snapshot_of_other_settings_is_not_continued(make_config, tmp_path):
    folder = tmp_path / "snapshots"
    first = TrainingRun(make_config(name="a", run={"snapshots": str(folder)}, **SECTIONS))
    kill_after(first, 1)
    with pytest.raises(Killed):
        first.run()
    other = make_config(
        name="a", run={"snapshots": str(folder)}, optimizer={"lr": 5e-4}, **SECTIONS
    )
    rerun = TrainingRun(other)
    computed = count_updates(rerun)
    rerun.run()
    assert computed == [0, 1, 2]


def test_the_key_holds_settings_world_and_inputs_not_paths(make_config, tmp_path):
    config = make_config(name="a", **SECTIONS)
    inputs = {"policy": "1" * 64, "steps": "2" * 64}
    key = run_key(config, 1, inputs)
    moved = config.replace(
        run=config.run.replace(
            checkpoint="/elsewhere/policy", run_dir="/elsewhere", snapshots="/s"
        ),
        snapshot_every=5,
    )
    assert run_key(moved, 1, inputs) == key
    assert run_key(config, 2, inputs) != key
    assert run_key(config, 1, {**inputs, "steps": "3" * 64}) != key
    other_lr = config.replace(optimizer=config.optimizer.replace(lr=1e-5))
    assert run_key(other_lr, 1, inputs) != key
    # how the processes are launched is not what they compute: another allocation continues
    relaunched = config.engine.replace(rdzv_endpoint="node7:29400", launcher=("srun", "-N2"))
    assert run_key(config.replace(engine=relaunched), 1, inputs) == key
    assert run_key(config.replace(engine=config.engine.replace(zero_stage=3)), 1, inputs) != key


def test_inputs_written_again_have_the_same_sha256(
    tmp_path, sharp_checkpoint, tiny_steps, tiny_summaries, tiny_responses
):
    """The training node writes the run's inputs anew at every rerun; the key needs them equal."""
    manifests = [
        write_inputs(
            tmp_path / name,
            policy=sharp_checkpoint,
            steps=tiny_steps,
            summaries=tiny_summaries,
            responses=tiny_responses,
        )
        for name in ("first", "second")
    ]
    from resail_pipeline.training.data import read_manifest

    first, second = (read_manifest(m, verify=True) for m in manifests)
    assert first.sha256 == second.sha256 and len(first.sha256) == 4


def test_snapshot_settings_are_checked():
    with pytest.raises(ConfigError, match="snapshot_every"):
        TrainConfig.from_dict({"snapshot_every": 0}, "train")

    class FakeDeepSpeedEngine:  # what Snapshots reads of an engine without training state
        resumable = False
        rank = 0

    with pytest.raises(ValueError, match="engine: FakeDeepSpeedEngine gives no state"):
        Snapshots("unused", "key", every=1, updates=3, engine=FakeDeepSpeedEngine())


class FakeTwoRankEngine:
    """Stands for rank 0 of two with one flat training state; ``other`` says what rank 1 chose:
    the same snapshot, none, or another one with as many updates (its row of the gathered
    choices)."""

    resumable = True
    collective_state = False
    rank, world_size = 0, 2

    def __init__(self, other: str) -> None:
        self.other = other
        self.loaded = False

    def training_state(self):
        return {"model.w": torch.arange(3.0)}, {"lr": 1e-5}

    def load_training_state(self, tensors, groups):
        self.loaded = True

    def sum_over_ranks(self, local):
        gathered = local.clone()  # rank 0's row; rank 1 adds its own (zeros where it chose none)
        if self.other != "none":
            gathered[1] = local[0] + torch.tensor([0, 0 if self.other == "same" else 1])
        return gathered


@pytest.mark.parametrize(
    ("other", "refusal"),
    [
        ("same", None),
        ("none", r"\(updates done, by rank: \[2, 0\]\)"),
        ("another", r"\(updates done, by rank: \[2, 2\], their state.json differing\)"),
    ],
)
def test_ranks_that_chose_different_snapshots_do_not_go_on(tmp_path, other, refusal):
    folder = tmp_path / "snapshots"
    engine = FakeTwoRankEngine(other)
    kept = Snapshots(folder, "key", every=1, updates=3, engine=engine, read_record=dict)
    kept.after_update(2, [{"loss": 0.5}, {"loss": 0.4}])
    if refusal is None:
        assert kept.restore() == (2, [{"loss": 0.5}, {"loss": 0.4}]) and engine.loaded
        return
    with pytest.raises(RuntimeError, match=f"from different snapshots {refusal}"):
        kept.restore()
    assert not engine.loaded  # refused before anything was loaded


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (children, theirs, ...), read from Linux's ``/proc``."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:  # ended meanwhile
                continue
            parents[int(entry.name)] = int(stat[stat.rindex(")") + 2 :].split()[1])
    found, frontier = [], [pid]
    while frontier:
        children = [child for child, parent in parents.items() if parent in frontier]
        found += children
        frontier = children
    return found


@pytest.mark.slow
@pytest.mark.parametrize(
    "engine",
    [{"kind": "ddp", "world_size": 2}, {"kind": "deepspeed", "world_size": 2, "zero_stage": 2}],
    ids=["ddp", "deepspeed"],
)
def test_a_killed_two_rank_run_continues_from_its_last_snapshot(engine, make_config, tmp_path):
    """Two ranks over gloo snapshot after every update (DDP: rank 0 the flat state; ZeRO-2:
    DeepSpeed's own checkpoint, each rank its partition); SIGKILL of the whole run after its
    second snapshot, then a rerun: both ranks agree on the snapshot, continue after update 2 and
    end with the uninterrupted run's losses and weights."""
    if engine["kind"] == "deepspeed":
        pytest.importorskip("deepspeed")
    import contextlib
    import os
    import signal
    import subprocess
    import time

    from resail_pipeline.training import launch
    from resail_pipeline.training.launcher import prepare

    sections = {**SECTIONS, "schedule": {"updates": 5}, "probe": {"enabled": False}}
    whole = launch(make_config(name="whole", engine=engine, **sections))

    folder = tmp_path / "snapshots"
    config = make_config(name="killed", engine=engine, run={"snapshots": str(folder)}, **sections)
    job = prepare(config)
    env = {**job.env, "OMP_NUM_THREADS": "1"}
    with open(tmp_path / "killed.log", "w") as log:
        process = subprocess.Popen(
            job.command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        deadline = time.monotonic() + 900
        while not (folder / "update-000002" / "state.json").is_file():
            assert process.poll() is None, (tmp_path / "killed.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "no second snapshot in 15 minutes"
            time.sleep(0.02)
        # the agent and its ranks (torchrun starts them in sessions of their own)
        for victim in [*descendants(process.pid), process.pid]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(victim, signal.SIGKILL)
        process.wait()
    assert not Path(config.run.checkpoint).exists()
    kept = sorted(p.name for p in folder.glob("update-*"))
    assert kept and kept[-1] >= "update-000002"

    rerun = launch(config)
    text = rerun.log_path.read_text()
    assert "continuing after update" in text, text[-2000:]
    assert not folder.exists()  # published: removed
    for column in ("update", "loss", "loss_sel", "loss_ret", "num_selected"):
        torch.testing.assert_close(
            torch.tensor(rerun.metrics[column].to_numpy(), dtype=torch.float64),
            torch.tensor(whole.metrics[column].to_numpy(), dtype=torch.float64),
            rtol=1e-6,
            atol=1e-7,
        )
    a, b = weights(whole.checkpoint.path), weights(rerun.checkpoint.path)
    for key in a:
        torch.testing.assert_close(b[key], a[key], rtol=1e-5, atol=1e-6)
