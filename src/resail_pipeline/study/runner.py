"""Running a plan through Kedro subprocesses (``kedro run`` per experiment, then the report, or
the evaluations of one cell again), each experiment's wall time to the time table."""

from __future__ import annotations

import csv
import datetime
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from resail_pipeline.config import ConfigError, check_int
from resail_pipeline.io import ProcessLock, atomic_path, tied_to_this_process
from resail_pipeline.pipelines.common import SHARED_FOLDER
from resail_pipeline.study.cells import (
    _SHARED_INPUTS,
    _cell_names,
    _cell_results,
    _copy_missing,
    _write_comparison,
    compare_cells,
    evaluated,
    finished,
    take_cycle_0,
    write_training_seeds,
)
from resail_pipeline.study.plan import (
    Experiment,
    StudyPlan,
    check_experiments,
    data_folder,
    nest,
    with_training_seed,
)
from resail_pipeline.study.rule import unevaluated, write_rule

logger = logging.getLogger(__name__)

#: how often a running experiment's time row is rewritten, in seconds
HEARTBEAT_S = 60.0
#: how often a running command is asked whether it has ended, in seconds
POLL_S = 0.05


def _run(
    command: Sequence[str],
    project: Path,
    env: Mapping[str, str],
    heartbeat: Callable[[int], None] | None = None,
    every: float = HEARTBEAT_S,
    ended: Callable[[float], None] | None = None,
) -> int:
    """Run ``command`` to its end and return its exit status; call ``heartbeat`` with its process
    id every ``every`` seconds while it runs, and ``ended`` with the largest resident memory (GiB)
    of the command and the descendants it waited for, once it has ended.

    A heartbeat that cannot write its row (a full disk, a time log edited by hand) is logged and
    the command goes on: the bookkeeping never costs the run. Anything else that stops this call
    (an interrupt) stops the command first."""
    # the child dies with this process, however it dies: a killed runner leaves no run holding
    # the experiment's lock (and its trainer dies with it in turn)
    process = subprocess.Popen(
        list(command), cwd=project, env=dict(env), preexec_fn=tied_to_this_process()
    )
    beat = time.monotonic() + every
    try:
        while True:
            # wait4 (not Popen.wait) for the child's own resource usage, not every child's so far
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                process.returncode = os.waitstatus_to_exitcode(status)
                if ended is not None:
                    ended(usage.ru_maxrss / 2**20)  # KiB on Linux
                return process.returncode
            if heartbeat is not None and time.monotonic() >= beat:
                try:
                    heartbeat(process.pid)
                except (OSError, ValueError, csv.Error) as error:
                    logger.warning(
                        "study: the time row was not written (%s); the run goes on", error
                    )
                beat = time.monotonic() + every
            time.sleep(min(POLL_S, every))
    except BaseException:
        if process.returncode is None:  # a caller in this process (a notebook) outlives it
            process.terminate()
            process.wait()
        raise


def _kedro(
    args: Sequence[str],
    project: Path,
    params: Mapping[str, Any] | None = None,
    cycles: int | None = None,
    heartbeat: Callable[[int], None] | None = None,
    ended: Callable[[float], None] | None = None,
) -> int:
    """``python -m kedro <args>`` in ``project``; ``params`` go through a run configuration file
    (``kedro run --config``), which carries lists and strings as YAML (``--params`` splits its
    value at every comma)."""
    env = {**os.environ, "KEDRO_DISABLE_TELEMETRY": "true"}
    if cycles is not None:
        env["RESAIL_CYCLES"] = str(cycles)
    with tempfile.TemporaryDirectory(prefix="resail-study-") as folder:
        command = [sys.executable, "-m", "kedro", *args]
        if params:
            config = Path(folder) / "run.yml"
            config.write_text(yaml.safe_dump({"run": {"params": dict(params)}}, sort_keys=False))
            command += ["--config", str(config)]
            logger.info("parameters: %s", json.dumps(params, sort_keys=True))
        logger.info("%s%s", f"RESAIL_CYCLES={cycles} " if cycles else "", " ".join(command[1:]))
        return _run(command, project, env, heartbeat, ended=ended)


def _cycle_run(env: str) -> list[str]:
    """The Kedro command of an experiment's cycles in configuration environment ``env``: what a
    run finished is kept, so a rerun resumes."""
    return ["run", "--env", env, "--pipelines", "cycle", "--only-missing-outputs"]


def _tree_peak_rss_gib(pid: int) -> float:
    """The largest peak resident memory (``VmHWM``) of process ``pid`` and its descendants alive
    now, in GiB: what a running child has used, which its resource usage tells only once it has
    ended. What ``/proc`` does not tell (not Linux, a process gone meanwhile, a kernel without
    ``task/*/children``) counts nothing; it never raises."""
    peak, pending = 0, [pid]
    while pending:
        proc = Path("/proc") / str(pending.pop())
        peak = max(peak, _vm_hwm_kib(proc))
        try:
            for task in (proc / "task").iterdir():
                pending += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError):
            pass
    return peak / 2**20


def _vm_hwm_kib(proc: Path) -> int:
    """``VmHWM`` of the process at ``proc`` (``/proc/<pid>``) in KiB; 0 where it cannot be read."""
    try:
        for line in (proc / "status").read_text(errors="replace").splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _write_row(
    path: Path, row: Mapping[str, Any], key: Sequence[str] = ("experiment", "started")
) -> None:
    """Put ``row`` in the CSV at ``path`` (header on creation), in place of the row with the same
    ``key`` values if there is one, else at the end; the file is rewritten atomically, by one
    writer at a time (two cells retrained with one training seed share a log)."""
    lock = ProcessLock(path.with_name(f".{path.name}.lock"))
    lock.acquire(wait=True)
    try:
        _replace_row(path, row, key)
    finally:
        lock.release()


def _replace_row(path: Path, row: Mapping[str, Any], key: Sequence[str]) -> None:
    """:func:`_write_row` under its lock."""
    rows = []
    if path.is_file():
        with path.open(newline="") as handle:
            rows = list(csv.DictReader(handle))
    text = {k: str(v) for k, v in row.items()}
    same = [i for i, old in enumerate(rows) if all(old.get(k) == text[k] for k in key)]
    if same:
        rows[same[0]] = text
    else:
        rows.append(text)
    with atomic_path(path) as tmp, tmp.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(row))
        writer.writeheader()
        writer.writerows(rows)


@dataclass
class _Segment:
    """One invocation's run of an experiment: its row of the time log."""

    log: Path
    experiment: Experiment
    started: str = field(
        default_factory=lambda: datetime.datetime.now().isoformat(timespec="milliseconds")
    )
    start: float = field(default_factory=time.monotonic)
    #: the largest resident memory seen in the running process tree, in GiB
    peak: float = 0.0

    def beat(self, pid: int) -> None:
        """Write the row while process ``pid`` runs the experiment, its memory so far counted."""
        self.peak = max(self.peak, _tree_peak_rss_gib(pid))
        self.record()

    def ended(self, peak_gib: float) -> None:
        """Count the ended run's largest resident memory (its own and its waited-for children's:
        a worker that ended between two beats included). A child forked from this process starts
        from its resident set (about 0.45 GiB, torch imported), so that is the figure's floor."""
        self.peak = max(self.peak, peak_gib)

    def record(self, code: int | str = "") -> None:
        """Write the row as it stands: ``code`` the exit status, empty while it runs."""
        _write_row(
            self.log,
            {
                "experiment": self.experiment.name,
                "method": self.experiment.method,
                "cycles": self.experiment.cycles,
                "started": self.started,
                "seconds": round(time.monotonic() - self.start, 1),
                "peak_rss_gib": round(self.peak, 2),
                "exit_code": code,
                "finished": time.strftime("%Y-%m-%dT%H:%M:%S") if code != "" else "",
            },
        )


def check_options(
    plan: StudyPlan, *, tier: int | None = None, rerun: str | None = None, cycle: int | None = None
) -> None:
    """Refuse a ``tier`` that is none of ``plan``'s tiers, and a cell to ``rerun`` that it lacks
    (an experiment not in the plan, or the one it is compared with missing) or a ``cycle`` below
    1: what the command line checks before it writes anything, a pre-registered choice included."""
    if tier is not None and tier not in plan.tiers:
        raise ConfigError(f"--tier: the plan's tiers are {plan.tiers}, got {tier}")
    if rerun is not None:
        check_int("--cycle", cycle, low=1)
        _cell_names(plan, rerun)


def run_study(
    plan: StudyPlan, env: str, project: Path, *, log: Path, tier: int | None = None
) -> None:
    """Run the experiments of ``plan`` in order (those of tiers up to ``tier``; ``None``: all),
    then the report; raise on the first failure.

    Raises:
        ConfigError: ``tier`` is none of the plan's tiers, or an experiment still to run has a
            parameter its run would refuse (:func:`~resail_pipeline.study.plan.check_experiments`),
            before anything runs.
    """
    check_options(plan, tier=tier)
    experiments = [e for e in plan.experiments if tier is None or e.tier <= tier]
    if len(experiments) < len(plan.experiments):
        logger.info(
            "study: tiers up to %d, %d of the plan's %d experiments",
            tier,
            len(experiments),
            len(plan.experiments),
        )
    outputs = project / "data" / "07_model_output" / "".join(data_folder(plan, env, project))
    pending = [experiment for experiment in experiments if not finished(experiment, outputs)]
    check_experiments(plan, pending, env, project)
    take_cycle_0(plan, env, project)
    for k, experiment in enumerate(experiments, start=1):
        if finished(experiment, outputs):
            logger.info(
                "study: experiment %d/%d %s, %d cycles: evaluated already",
                k,
                len(experiments),
                experiment.name,
                experiment.cycles,
            )
            continue
        logger.info(
            "study: experiment %d/%d %s (%s, %d cycles, tier %d)",
            k,
            len(experiments),
            experiment.name,
            experiment.method,
            experiment.cycles,
            experiment.tier,
        )
        segment = _Segment(log, experiment)
        segment.record()
        code = _kedro(
            _cycle_run(env),
            project,
            params=experiment.run_params(plan.params),
            cycles=experiment.cycles,
            heartbeat=segment.beat,
            ended=segment.ended,
        )
        segment.record(code)
        if code != 0:
            raise RuntimeError(
                f"study: experiment {experiment.name!r} failed (exit code {code}); what it "
                "finished is kept, and running the study again continues from there"
            )
    # the plan's shared overrides (e.g. its data_tag): the report reads the same folder
    report = ["run", "--env", env, "--pipelines", "report"]
    if _kedro(report, project, params=nest(plan.params)) != 0:
        raise RuntimeError("study: the report failed")
    if plan.rule is not None:
        missing = unevaluated(plan, outputs)  # a tier without the candidates: nothing to choose
        if missing:
            logger.info(
                "study: the rule waits for %d evaluation(s), e.g. %s", len(missing), missing[0]
            )
        else:
            write_rule(plan, outputs, project / "data" / "08_reporting" / outputs.name)


def run_cycle_0(plan: StudyPlan, env: str, project: Path) -> None:
    """Only the plan's shared cycle 0: the initial policy's record, reference episodes, fixed
    Experience and evaluation, in the plan's data folder with its settings, as its first
    experiment would run them (copied instead where the plan takes cycle 0 from another folder).
    A figure pre-registered on cycle 0 (a power analysis sizing the evaluation) can then be
    committed before any candidate is trained or evaluated; the study run later reuses it.

    Raises:
        RuntimeError: the Kedro run failed.
    """
    if take_cycle_0(plan, env, project):
        return
    experiment = plan.experiments[0]
    code = _kedro(
        [*_cycle_run(env), "--to-nodes", "cycle_0.evaluate_node"],
        project,
        params=experiment.run_params(plan.params),
        cycles=experiment.cycles,
    )
    if code != 0:
        raise RuntimeError(f"study: cycle 0 failed (exit code {code}); running it again resumes")


def rerun_cell(
    plan: StudyPlan, env: str, project: Path, *, name: str, cycle: int, seeds: Sequence[int]
) -> pd.DataFrame:
    """Evaluate one cell of the grid again with decoding ``seeds``, from the checkpoints it kept.

    The initial policy, experiment ``name`` at ``cycle`` and the experiment it is compared with (a
    ReSAIL variant's parent, an ablation's full method) are evaluated with the plan's settings and
    the grid's fixed Experience in the data folder ``<grid folder>-seeds<s>`` (their checkpoints
    and the Experience copied there first; what exists is kept, so an interrupted rerun resumes,
    and cells sharing an experiment evaluate it once). Their paired differences go beside the
    grid's to ``data/08_reporting/<that folder>/rerun-<name>-cycle_<cycle>.md`` and ``.csv``.

    Returns:
        The side-by-side table (:func:`compare_cells`).
    """
    check_int("--cycle", cycle, low=1)
    if not seeds or any(not isinstance(s, int) or s < 0 for s in seeds):
        raise ConfigError(f"--seeds: one or more decoding seeds >= 0, got {list(seeds)}")
    if len(set(seeds)) < len(seeds):
        raise ConfigError(f"--seeds: each decoding seed once, got {list(seeds)}")
    experiments = _cell_names(plan, name)
    names = [e.name for e in experiments]
    run_env, tag = data_folder(plan, env, project)
    rerun_tag = f"{tag}-seeds{'-'.join(str(s) for s in seeds)}"
    data = project / "data"
    inputs = [*_SHARED_INPUTS, *(("06_models", f"{n}/cycle_{cycle}") for n in names)]
    grid = data / "07_model_output" / f"{run_env}{tag}"
    cells = [grid / SHARED_FOLDER / "cycle_0", *(grid / n / f"cycle_{cycle}" for n in names)]
    missing = [data / layer / f"{run_env}{tag}" / part for layer, part in inputs]
    missing = [path for path in missing if not path.exists()]
    missing += [folder for folder in cells if not evaluated(folder)]
    if missing:  # before anything is copied or run
        raise ConfigError(
            f"{missing[0]}: missing or not evaluated; the grid has not finished cycle {cycle} "
            f"of {names}"
        )
    _copy_missing(data, inputs, f"{run_env}{tag}", f"{run_env}{rerun_tag}")
    shared = {**plan.params, "data_tag": rerun_tag, "evaluate.decoding_seeds": list(seeds)}
    for k, experiment in enumerate(experiments):
        logger.info("rerun: %s, cycle %d, decoding seeds %s", experiment.name, cycle, list(seeds))
        nodes = (["cycle_0.evaluate_node"] if k == 0 else []) + [f"cycle_{cycle}.evaluate_node"]
        args = [*_cycle_run(env), "--nodes", ",".join(nodes)]
        if _kedro(args, project, params=experiment.run_params(shared), cycles=cycle) != 0:
            raise RuntimeError(
                f"rerun: the evaluation of {experiment.name!r} failed; what it finished is kept"
            )
    outputs = data / "07_model_output"
    table = compare_cells(
        _cell_results(outputs / f"{run_env}{tag}", names, cycle),
        _cell_results(outputs / f"{run_env}{rerun_tag}", names, cycle),
    )
    _write_comparison(table, data / "08_reporting" / f"{run_env}{rerun_tag}", names, cycle)
    return table


def retrain_cell(
    plan: StudyPlan, env: str, project: Path, *, name: str, cycle: int, seed: int, log: Path
) -> pd.DataFrame:
    """Train one cell of the grid again with training seed ``seed``, from the initial policy.

    Experiment ``name`` and the experiment it is compared with (a ReSAIL variant's parent, an
    ablation's full method) run cycles 1 to ``cycle`` with the plan's settings and every key of
    :data:`~resail_pipeline.study.plan.TRAINING_SEED_KEYS` set to ``seed``, in the folder
    :func:`~resail_pipeline.study.plan.with_training_seed` names, with the grid's cycle 0 (copied
    there first); what exists is kept, so an interrupted run resumes, and the other cells of the
    same seed continue the same runs. Their paired differences go beside the grid's, with their
    mean and SD over training seeds, to ``data/08_reporting/<the grid's folder>/
    training-seeds.md`` (:func:`~resail_pipeline.study.cells.write_training_seeds`).

    Returns:
        That table.
    """
    check_int("--cycle", cycle, low=1)
    seeded = with_training_seed(plan, env, project, seed)
    experiments = _cell_names(plan, name)
    for experiment in experiments:  # the plan's last entry of each: the most cycles
        if cycle > experiment.cycles:
            raise ConfigError(
                f"--cycle: the plan trains {experiment.name!r} to cycle {experiment.cycles}, "
                f"got {cycle}"
            )
    cell = [e.replace(cycles=cycle, tier=1) for e in experiments]
    run_study(
        StudyPlan(experiments=cell, params=seeded.params, cycle_0_from=seeded.cycle_0_from),
        env,
        project,
        log=log,
    )
    return write_training_seeds(plan, env, project)
