"""Snapshots of a training run, for the rerun of a killed run to continue where it stopped.

A cycle's training takes an hour or more on CPU at table 4's budget; without these, a run
killed at its last update starts again from the first. After every ``snapshot_every`` updates,
rank 0 writes the run's state to ``run.snapshots``:

- ``state.safetensors``: the student's weights and AdamW's per-parameter state
  (:meth:`~resail_pipeline.training.engine.Engine.training_state`); under DeepSpeed, whose
  optimiser state is partitioned over the ranks, DeepSpeed's own checkpoint instead, each rank
  writing its partition into the same folder (:meth:`~.engine.Engine.save_state`; the folder must
  be on a filesystem every node sees);
- ``state.json``: the run's key, the updates done, AdamW's parameter groups, the update records
  so far and the other rows the run has kept so far (the probe's; the GUI trainer's monitored
  accuracy).

Each snapshot is written into a temporary folder and renamed into place (``update-000012``,
``io.atomic_path``), then the others are removed, so a kill at any moment leaves at least one
complete snapshot. A rerun loads the latest one only if its key matches: a hash of the resolved
configuration (output paths and how the processes are launched aside), the world size and the sha256
of every input, so that a snapshot is never continued with other data, another method or other
settings; one that does not match is left unused, saying why, and replaced by the run's first
snapshot. The ranks compare the snapshot each chose before any of them loads it, and refuse to go on
where they differ. Nothing else of the run is stateful across updates: every random draw of update
``u`` is seeded from ``(schedule.seed, u)``, so a continued run takes the same batches, responses
and selections as an uninterrupted one, and ends with the same weights to the rounding of the
processor.

The text trainer (:mod:`resail_pipeline.training.run`) and the GUI trainer
(:mod:`resail_pipeline.gui.train`) both keep their runs' snapshots here.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import torch
from safetensors.torch import load_file, save_file

from resail_pipeline.io import atomic_path, replace_directory, settings_sha256
from resail_pipeline.training.config import TrainConfig
from resail_pipeline.training.engine import Engine
from resail_pipeline.training.records import UpdateRecord

__all__ = [
    "STATE_FILE",
    "TENSORS_FILE",
    "KeptRows",
    "Snapshots",
    "computed_engine",
    "keeps_snapshots",
    "run_key",
    "settings_key",
]

logger = logging.getLogger(__name__)

TENSORS_FILE = "state.safetensors"
STATE_FILE = "state.json"
_PREFIX = "update-"


class KeptRows(Protocol):
    """What a run records besides its updates, kept with each snapshot (the probe's rows)."""

    @property
    def rows(self) -> Sequence[tuple[Any, ...]]: ...

    def restore_rows(self, rows: list[tuple[Any, ...]]) -> None: ...


def keeps_snapshots(folder: str, engine: Engine, kind: str) -> bool:
    """Whether a run asked to keep snapshots in ``folder`` (empty: not asked) can, under
    ``engine`` (of configured ``kind``); where it gives no state to keep, the log says so."""
    if not folder:
        return False
    if not engine.resumable:
        logger.info(
            "snapshots: none under %s (it gives no state to keep); a rerun of a killed run "
            "starts from its first update",
            kind,
        )
        return False
    return True


def settings_key(settings: dict[str, Any], world_size: int, inputs: dict[str, str]) -> str:
    """What a snapshot must have been taken under to be continued: ``settings`` (a run's
    configuration without its output paths), the world size and the inputs' sha256."""
    return settings_sha256(
        {"config": settings, "world_size": world_size, "inputs": dict(sorted(inputs.items()))}
    )


#: the engine's settings that say how its processes are started, not what they compute: a rerun
#: on another allocation (another head node for the rendezvous, another launcher) continues the run
LAUNCH_ONLY = ("rdzv_endpoint", "launcher")


def computed_engine(engine: dict[str, Any]) -> dict[str, Any]:
    """An engine's settings (:class:`~resail_pipeline.training.config.EngineConfig` as data)
    without :data:`LAUNCH_ONLY`: what a snapshot's key holds of them."""
    return {k: v for k, v in engine.items() if k not in LAUNCH_ONLY}


def run_key(config: TrainConfig, world_size: int, inputs: dict[str, str]) -> str:
    """:func:`settings_key` of a text training run: its configuration without its output paths,
    the snapshot frequency and how its processes are launched (:func:`computed_engine`)."""
    settings = config.to_dict()
    settings.pop("snapshot_every", None)
    settings["run"] = {
        k: v
        for k, v in settings["run"].items()
        if k not in ("manifest", "checkpoint", "run_dir", "snapshots")
    }
    settings["engine"] = computed_engine(settings["engine"])
    return settings_key(settings, world_size, inputs)


class Snapshots:
    """The snapshots of one run in ``folder``.

    Args:
        folder: where they are written (created when the first is).
        key: :func:`run_key` of the run.
        every: updates between snapshots (the last update's is always taken).
        updates: the run's number of updates.
        engine: the student's engine (:attr:`~Engine.resumable`).
        probe: what else the run records, whose rows travel with the snapshot, if anything (the
            PI-sensitivity probe; the GUI trainer's monitored accuracy).
        read_record: an update record from its JSON form (the text trainer's
            :class:`UpdateRecord` by default; a record that is a mapping is written as it is).
    """

    def __init__(
        self,
        folder: str | os.PathLike,
        key: str,
        *,
        every: int,
        updates: int,
        engine: Engine,
        probe: KeptRows | None = None,
        read_record: Callable[[dict[str, Any]], Any] | None = None,
    ) -> None:
        if every < 1:
            raise ValueError(f"every: must be at least 1, got {every!r}")
        if not engine.resumable:
            raise ValueError(f"engine: {type(engine).__name__} gives no state to snapshot")
        self.folder = Path(folder)
        self.key = key
        self.every = every
        self.updates = updates
        self.engine = engine
        self.probe = probe
        self.read_record = read_record or _record

    def latest(self) -> Path | None:
        """The most advanced complete snapshot in the folder, if any."""
        if not self.folder.is_dir():
            return None
        done = sorted(p for p in self.folder.glob(f"{_PREFIX}*") if (p / STATE_FILE).is_file())
        return done[-1] if done else None

    def restore(self) -> tuple[int, list[Any]]:
        """Load the latest matching snapshot into the engine and the probe; return the updates it
        had done and their records (``0, []``: none to continue from). Every rank calls it, and
        every rank must choose the same snapshot (:meth:`_check_every_rank_agrees`)."""
        latest = self.latest()
        raw = None if latest is None else (latest / STATE_FILE).read_bytes()
        state = None if raw is None else json.loads(raw)
        if state is not None and state["key"] != self.key:
            logger.warning(
                "snapshots: %s was taken by a run with other settings or inputs; the run starts "
                "from its first update (its first snapshot replaces that one)",
                latest,
            )
            state = None
        self._check_every_rank_agrees(None if state is None else (state["updates"], raw))
        if state is None:
            return 0, []
        if self.engine.collective_state:
            self.engine.load_state(latest)
        else:
            self.engine.load_training_state(load_file(latest / TENSORS_FILE), state["optimizer"])
        records = [self.read_record(r) for r in state["records"]]
        if self.probe is not None:
            self.probe.restore_rows([tuple(row) for row in state["probe"]])
        logger.info(
            "continuing after update %d of %d from the snapshot %s",
            state["updates"],
            self.updates,
            latest,
        )
        return state["updates"], records

    def _check_every_rank_agrees(self, chosen: tuple[int, bytes] | None) -> None:
        """Refuse to go on where the ranks would continue from different snapshots (a folder that
        not every node sees, or one written to while they read it): each would load other
        weights, or wait in a collective the others never call. ``chosen``: this rank's choice,
        the updates it had done and its ``state.json`` as read (``None``: none). A collective,
        before any load."""
        if self.engine.world_size == 1:
            return
        mine = torch.zeros(self.engine.world_size, 2, dtype=torch.int64)
        if chosen is not None:
            updates, state = chosen
            digest = int(hashlib.sha256(state).hexdigest()[:15], 16)  # 60 bits: fits an int64
            mine[self.engine.rank] = torch.tensor([updates, digest])
        every = self.engine.sum_over_ranks(mine).tolist()
        if any(row != every[0] for row in every):
            done = [row[0] for row in every]
            differ = "" if len(set(done)) > 1 else ", their state.json differing"
            raise RuntimeError(
                f"snapshots: the ranks would continue {self.folder} from different snapshots "
                f"(updates done, by rank: {done}{differ}); every rank must see the same folder "
                "(a file system shared by every node)"
            )

    def after_update(self, done: int, records: Sequence[Any]) -> None:
        """Take a snapshot if ``done`` updates call for one (rank 0 writes; the others pass)."""
        if done % self.every and done != self.updates:
            return
        if self.engine.collective_state:
            self._take_collectively(done, records)
            return
        if self.engine.rank != 0:  # the state is the same on every rank
            return
        tensors, optimizer = self.engine.training_state()
        target = self.folder / f"{_PREFIX}{done:06d}"
        with atomic_path(target) as staging:
            staging.mkdir()
            save_file(tensors, staging / TENSORS_FILE)
            (staging / STATE_FILE).write_text(json.dumps(self._state(done, records, optimizer)))
        self._keep_only(target)

    def _take_collectively(self, done: int, records: Sequence[Any]) -> None:
        """Every rank writes its partition into one staging folder; rank 0 then adds the run's
        state and renames the folder into place."""
        target = self.folder / f"{_PREFIX}{done:06d}"
        staging = self.folder / f".{target.name}.partial"  # one name that every rank knows
        if self.engine.rank == 0:
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir(parents=True)
        self.engine.barrier()
        self.engine.save_state(staging)
        self.engine.barrier()
        if self.engine.rank == 0:
            (staging / STATE_FILE).write_text(json.dumps(self._state(done, records, None)))
            replace_directory(staging, target)
            self._keep_only(target)
        self.engine.barrier()

    def _state(self, done: int, records: Sequence[Any], optimizer: Any) -> dict[str, Any]:
        return {
            "key": self.key,
            "updates": done,
            "optimizer": optimizer,
            "records": [
                dataclasses.asdict(r) if dataclasses.is_dataclass(r) else dict(r) for r in records
            ],
            "probe": [] if self.probe is None else [list(row) for row in self.probe.rows],
        }

    def _keep_only(self, target: Path) -> None:
        """Remove every snapshot but ``target`` (older ones, another run's) and what a write
        killed midway left (``.update-*``: staging folders, which nothing continues)."""
        for other in [*self.folder.glob(f"{_PREFIX}*"), *self.folder.glob(f".{_PREFIX}*")]:
            if other != target:
                shutil.rmtree(other, ignore_errors=True)

    def remove(self) -> None:
        """Delete the folder (the run is published: nothing left to continue)."""
        if self.engine.rank == 0:
            shutil.rmtree(self.folder, ignore_errors=True)


def _record(row: dict[str, Any]) -> UpdateRecord:
    """An :class:`UpdateRecord` from its JSON form (tuples came back as lists)."""
    return UpdateRecord(**{**row, "selected": [tuple(s) for s in row["selected"]]})
