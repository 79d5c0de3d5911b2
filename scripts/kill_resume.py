"""Kill the smoke run at random points and rerun it: nothing is lost, nothing half-published.

    python scripts/kill_resume.py --kills 10 --seed 0        # make kill-check

First a reference run of the smoke configuration, uninterrupted, in its own data folder
(``data_tag=-kill-reference``, reused when complete). Then, for each of ``--kills`` rounds, a fresh
data folder (``-kill-<k>``): the run starts, and at a random moment within the reference's wall time
one process gets ``SIGKILL``, chosen at random: the Kedro process, a trainer process (a torchrun
worker) the next time one runs, or a trainer process once it has taken a snapshot (so that the
rerun continues the cycle from it). After each kill, every checkpoint the catalog has published must
hold the weights its manifest names (nothing half-written is ever published). The rerun
(``--only-missing-outputs``, as ``make run``) must complete; then nothing but the experiment's
lock file may be left in staging, and the datasets must equal the reference's: every checkpoint
by ``policy_id``, every evaluation row. Prints one line per round and exits non-zero if any check
failed.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from resail_pipeline.checkpoints import (
    CheckpointError,
    CheckpointInfo,
    verify_weights,
    weights_sha256,
)
from resail_pipeline.datasets.checkpoint import with_published_path
from resail_pipeline.io import atomic_path

logger = logging.getLogger("kill_resume")

ROOT = Path(__file__).resolve().parents[1]
ENV_NAME = "textcraft"
STAGING = ROOT / "data" / "06_models" / ".staging"
TRAINER = "resail_pipeline.training"


@dataclass
class Round:
    number: int
    target: str
    planned_s: float
    killed_at_s: float | None = None
    node: str = ""
    exit_after_kill: int | None = None
    rerun_exit: int | None = None
    failures: list[str] = field(default_factory=list)


def _command(tag: str) -> list[str]:
    kedro = str(Path(sys.executable).with_name("kedro"))
    return [
        kedro,
        "run",
        "--env",
        "smoke",
        "--pipelines=cycle",
        "--only-missing-outputs",
        "--params",
        f"data_tag={tag}",
    ]


def _environment() -> dict[str, str]:
    return {
        **os.environ,
        "KEDRO_DISABLE_TELEMETRY": "true",
        "PYTHONHASHSEED": "0",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TORCH_EXTENSIONS_DIR": str(ROOT / ".cache" / "torch_extensions"),
    }


def _folders(tag: str) -> list[Path]:
    """The data folder's directory in every layer."""
    return [layer / f"{ENV_NAME}{tag}" for layer in (ROOT / "data").glob("0*_*") if layer.is_dir()]


def _start(tag: str, log: Path) -> subprocess.Popen:
    handle = open(log, "a")  # noqa: SIM115 (closed with the process, in _wait)
    return subprocess.Popen(
        _command(tag),
        cwd=ROOT,
        env=_environment(),
        stdout=handle,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: the torchrun agent and workers too
    )


def _group(pgid: int) -> dict[int, str]:
    """pid -> command line of every live process in process group ``pgid``."""
    members = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            if fields[0] != "Z" and int(fields[2]) == pgid:
                members[int(entry.name)] = (
                    (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                )
        except (OSError, ValueError):
            continue
    return members


def _trainer_workers(pgid: int) -> list[int]:
    """The trainer's worker processes (not the torchrun agent) in the group."""
    return [
        pid
        for pid, cmd in _group(pgid).items()
        if TRAINER in cmd and "torchrun" not in cmd and "torch.distributed.run" not in cmd
    ]


def _snapshots_taken(staging: Path) -> bool:
    """Whether a trainer of the run has taken a snapshot (training/snapshots.py)."""
    return any(staging.glob("*.snapshots/update-*"))


def _last_node(log: Path) -> str:
    lines = [
        line for line in log.read_text(errors="replace").splitlines() if "Running node:" in line
    ]
    # rich's log lines end in the logging call's place (``node.py:531``)
    return lines[-1].split("Running node:")[-1].split()[0].rstrip(":") if lines else ""


def _wait(process: subprocess.Popen, pgid: int, grace_s: float = 120.0) -> int:
    """Wait for the Kedro process, then for what it left in its group (a killed Kedro process
    leaves its trainer, which stops at its next write to the closed pipe)."""
    code = process.wait()
    deadline = time.monotonic() + grace_s
    while _group(pgid) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = _group(pgid)
    if left:
        logger.warning("still running %.0f s after the Kedro process: %s", grace_s, left)
        os.killpg(pgid, signal.SIGKILL)
    return code


def _checkpoints(tag: str) -> dict[str, CheckpointInfo]:
    """Every published checkpoint of the folder, by its manifest's path relative to the folder."""
    folder = ROOT / "data" / "06_models" / f"{ENV_NAME}{tag}"
    found = {}
    for manifest in sorted(folder.rglob("checkpoint.parquet")):
        frame = with_published_path(pd.read_parquet(manifest), manifest)
        info = CheckpointInfo.from_frame(frame, source=str(manifest))
        found[str(manifest.relative_to(folder))] = info
    return found


def _half_published(tag: str) -> list[str]:
    bad = []
    for name, info in _checkpoints(tag).items():
        try:
            verify_weights(info.path)
            if weights_sha256(info.path) != info.sha256:
                bad.append(f"{name}: weights differ from the manifest")
        except (CheckpointError, OSError, ValueError) as error:
            bad.append(f"{name}: {error}")
    return bad


def _eval_rows(tag: str) -> dict[str, pd.DataFrame]:
    folder = ROOT / "data" / "07_model_output" / f"{ENV_NAME}{tag}"
    return {
        str(path.relative_to(folder)): pd.read_parquet(path)
        for path in sorted(folder.rglob("eval_results.parquet"))
    }


def _differences(tag: str, reference: str) -> list[str]:
    problems = []
    ours, theirs = _checkpoints(tag), _checkpoints(reference)
    if sorted(ours) != sorted(theirs):
        problems.append(f"checkpoints: {sorted(ours)} != {sorted(theirs)}")
    for name in sorted(set(ours) & set(theirs)):
        if ours[name].policy_id != theirs[name].policy_id:
            problems.append(f"{name}: {ours[name].policy_id} != {theirs[name].policy_id}")
    mine, ref = _eval_rows(tag), _eval_rows(reference)
    if sorted(mine) != sorted(ref):
        problems.append(f"evaluations: {sorted(mine)} != {sorted(ref)}")
    for name in sorted(set(mine) & set(ref)):
        try:
            pd.testing.assert_frame_equal(mine[name], ref[name])
        except AssertionError as error:
            problems.append(f"{name}: rows differ ({str(error).splitlines()[0]})")
    return problems


def _run_to_end(tag: str, log: Path) -> tuple[int, float]:
    start = time.monotonic()
    process = _start(tag, log)
    code = _wait(process, process.pid)
    return code, time.monotonic() - start


def _reference(out: Path) -> float:
    """Run (or, where complete, only check) the reference; return the seconds it took to run,
    within which the kills are drawn. A reused reference's check takes seconds: the time of the
    run that made it is kept beside its log."""
    tag = "-kill-reference"
    log = out / "reference.log"
    code, seconds = _run_to_end(tag, log)
    if code != 0:
        raise SystemExit(f"the reference run failed (exit {code}); see {log}")
    record = out / "reference.json"
    made_in = json.loads(record.read_text())["seconds"] if record.is_file() else 0.0
    if seconds > made_in:  # this run made (part of) the reference
        with atomic_path(record) as tmp:
            tmp.write_text(json.dumps({"seconds": seconds}))
    duration = max(seconds, made_in)
    logger.info(
        "reference run: %.0f s; kills are drawn within the %.0f s it took", seconds, duration
    )
    return duration


def _round(k: int, rng: random.Random, duration_s: float, out: Path, reference: str) -> Round:
    tag = f"-kill-{k}"
    for folder in _folders(tag):
        shutil.rmtree(folder, ignore_errors=True)
    target = rng.choice(["kedro", "trainer", "trainer after a snapshot"])
    round_ = Round(k, target, rng.uniform(3.0, 0.95 * duration_s))
    log = out / f"round-{k}.log"
    process = _start(tag, log)
    start = time.monotonic()
    staging = STAGING / f"{ENV_NAME}{tag}"
    victim = None
    while process.poll() is None and victim is None:
        elapsed = time.monotonic() - start
        if elapsed >= round_.planned_s:
            if round_.target == "kedro":
                victim = process.pid
            elif _trainer_workers(process.pid) and (
                round_.target == "trainer" or _snapshots_taken(staging)
            ):
                # within seconds of the trainer's start, or of its first snapshot: the rerun
                # starts the cycle again, or continues from the snapshot
                time.sleep(rng.uniform(0.0, 5.0))
                workers = _trainer_workers(process.pid)
                victim = rng.choice(workers) if workers else None
        if victim is None:
            time.sleep(0.1)
    if victim is not None and process.poll() is None:
        round_.node = _last_node(log)
        os.kill(victim, signal.SIGKILL)
        round_.killed_at_s = time.monotonic() - start
    round_.exit_after_kill = _wait(process, process.pid)
    round_.failures += [f"after the kill: {p}" for p in _half_published(tag)]
    round_.rerun_exit, _ = _run_to_end(tag, log)
    if round_.rerun_exit != 0:
        round_.failures.append(f"the rerun exited {round_.rerun_exit}; see {log}")
    # the experiment's lock file stays by design (flock on a file in place): it holds no data
    left = (
        sorted(p.name for p in staging.iterdir() if p.suffix != ".lock") if staging.is_dir() else []
    )
    if left:
        round_.failures.append(f"staging left: {left}")
    round_.failures += _differences(tag, reference)
    return round_


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="data/08_reporting/kill-resume", help="logs")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    out = ROOT / args.out
    out.mkdir(parents=True, exist_ok=True)
    duration = _reference(out)
    rng = random.Random(args.seed)
    rounds: list[Round] = []
    attempts = 0
    while sum(r.killed_at_s is not None for r in rounds) < args.kills and attempts < 2 * args.kills:
        attempts += 1
        round_ = _round(attempts, rng, duration, out, "-kill-reference")
        rounds.append(round_)
        at = "(finished first)" if round_.killed_at_s is None else f"at {round_.killed_at_s:.1f} s"
        logger.info(
            "round %2d: kill %s %s in %s, exit %s; rerun exit %s: %s",
            attempts,
            round_.target,
            at,
            round_.node or "-",
            round_.exit_after_kill,
            round_.rerun_exit,
            "ok" if not round_.failures else "; ".join(round_.failures),
        )
    failed = [r for r in rounds if r.failures]
    killed = sum(r.killed_at_s is not None for r in rounds)
    logger.info("%d rounds, %d killed mid-run, %d failed", len(rounds), killed, len(failed))
    return 1 if failed or killed < args.kills else 0


if __name__ == "__main__":
    sys.exit(main())
