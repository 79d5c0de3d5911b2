"""``python -m gpu_check`` (``scripts/gpu_check.sh``): the check in this process, its report
rewritten after every step, a step overrunning the budget or a SIGTERM recorded before it ends."""

from __future__ import annotations

import datetime
import logging
import os
import shutil
import signal
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import resail_pipeline

from .options import GRACE_S, CheckResult, parse_args
from .report import _work_folder, build_report, run_checks, write_report
from .steps import GpuCheck, missing_modules

logger = logging.getLogger("gpu_check")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the check; write the report; 0 when no step failed."""
    options, out = parse_args(argv)
    if options.device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # before torch looks: the trainer's children too
    # the trainer and Kedro run in subprocesses: they import resail_pipeline as this process does
    package_root = str(Path(resail_pipeline.__file__).resolve().parents[1])
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (package_root, os.environ.get("PYTHONPATH", "")) if p
    )
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("resail_pipeline.training.launcher").setLevel(logging.WARNING)
    missing = missing_modules(["torch", "transformers"])
    if missing:
        logger.error(
            "this Python cannot import %s: the check runs on a machine's own torch and "
            "transformers",
            ", ".join(missing),
        )
        return 2
    import torch
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # a bar per model load: noise in the console

    started = datetime.datetime.now(datetime.timezone.utc)
    clock = time.perf_counter()
    error = ""
    if not options.policy_path.is_dir():
        error = f"policy {options.policy_path}: no such checkpoint directory"
    elif options.device == "cuda" and not torch.cuda.is_available():
        error = "device cuda: torch sees no CUDA device (use --device cpu)"
    with _work_folder(options.work, options.device) as (work, temporary):
        logger.info("gpu check on %s; scratch files in %s", options.device, work)

        def save(results: dict[str, CheckResult], running: str | None = None) -> dict[str, Any]:
            report = build_report(
                options,
                results,
                started=started,
                seconds=time.perf_counter() - clock,
                work=work,
                error=error,
                running=running,
            )
            write_report(out, report)
            return report

        state: dict[str, Any] = {"results": {}, "running": None}
        check = None if error else GpuCheck(options, work)

        def track(results: dict[str, CheckResult], running: str | None) -> None:
            state.update(results=dict(results), running=running)
            save(results, running)  # what finished survives whatever happens next

        def stop(reason: str, status: int) -> None:
            # the running step recorded as failed with what it measured so far, then the end;
            # the trainer's processes end with this one (launcher)
            results = dict(state["results"])
            if state["running"] is not None:
                partial = dict(check.partial) if check is not None else {}
                results[state["running"]] = CheckResult("failed", reason=reason, details=partial)
            save(results)
            logger.error("%s; report: %s", reason, out)
            os._exit(status)

        # a step still running well past the budget (a hung collective, a kernel build), or the
        # check stopped from outside (a scheduler's or `timeout`'s SIGTERM)
        watchdog = threading.Timer(
            options.budget_s + GRACE_S,
            stop,
            (f"still running {GRACE_S:.0f} s past the time budget", 1),
        )
        watchdog.daemon = True
        watchdog.start()
        previous = signal.signal(
            signal.SIGTERM, lambda signum, frame: stop("stopped by SIGTERM", 128 + signum)
        )
        try:
            results = {} if check is None else run_checks(options, work, track, check)
        finally:
            watchdog.cancel()
            signal.signal(signal.SIGTERM, previous)
        report = save(results)
        if temporary and report["passed"]:
            shutil.rmtree(work, ignore_errors=True)
    logger.info("report: %s (%s)", out, "passed" if report["passed"] else "FAILED")
    if error:
        logger.error(error)
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
