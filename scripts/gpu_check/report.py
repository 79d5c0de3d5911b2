"""Running the steps within the time budget, and the JSON report of their outcomes."""

from __future__ import annotations

import datetime
import json
import logging
import shutil
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from resail_pipeline.io import atomic_path

from .options import CHECKS, REQUIRES, CheckFailed, CheckOptions, CheckResult
from .steps import GpuCheck, _versions, missing_modules

logger = logging.getLogger(__name__)


def run_checks(
    options: CheckOptions,
    work: Path,
    progress: Callable[[dict[str, CheckResult], str | None], None] | None = None,
    check: GpuCheck | None = None,
) -> dict[str, CheckResult]:
    """Every step of :data:`CHECKS` on ``options.device``, in order, within ``options.budget_s``.

    ``progress(results, running)`` is called before each step that runs (``running``: its name)
    and after each step (``None``), with the results so far. ``check``: the steps' state (default:
    a new one over ``options`` and ``work``), whose ``partial`` a caller reads for a step it stops.
    """
    progress = progress or (lambda results, running: None)
    check = check or GpuCheck(options, work)
    deadline = time.monotonic() + options.budget_s
    steps: dict[str, Callable[[], dict[str, Any]]] = {
        "generation": check.generation,
        "probe": check.probe,
        "train_single": lambda: check.train("single"),
        "train_deepspeed": lambda: check.train("deepspeed"),
        "train_zero3": lambda: check.train("deepspeed", zero_stage=3),
        "aitz": check.aitz,
        "smoke": lambda: check.smoke(max(deadline - time.monotonic(), 1.0)),
        "sampler": check.sampler,
        "scale": check.scale,
        "zero2_8b": check.zero2_8b,
    }
    results: dict[str, CheckResult] = {}
    for name in CHECKS:
        missing = missing_modules(REQUIRES[name])
        if name in options.skip:
            results[name] = CheckResult("skipped", reason="--skip")
        elif missing:
            results[name] = CheckResult(
                "skipped", reason=f"not importable here: {', '.join(missing)}"
            )
        elif time.monotonic() >= deadline:
            results[name] = CheckResult(
                "skipped", reason=f"the time budget of {options.budget_s:.0f} s was spent"
            )
        else:
            check.partial = {}
            progress(results, name)
            results[name] = _run_one(name, steps[name], check.device, check.partial)
        progress(results, None)
        result = results[name]
        logger.info(
            "%-15s %s in %.1f s%s",
            name,
            result.status,
            result.seconds,
            f": {result.reason.splitlines()[0]}" if result.reason else "",
        )
    return results


def _run_one(
    name: str, step: Callable[[], dict[str, Any]], device: Any, partial: dict[str, Any]
) -> CheckResult:
    """One step, timed, its device memory measured; an error fails it with its message and what
    the step had recorded in ``partial``."""
    from resail_pipeline.devices import DeviceMemory  # imports torch, which main checks for

    logger.info("%s: starting", name)
    with DeviceMemory(device) as memory:
        start = time.perf_counter()
        try:
            details = step()
            status, reason = "passed", ""
        except CheckFailed as failure:
            status, reason, details = "failed", str(failure), failure.details
        except Exception as error:  # every step is reported, whatever fails
            lines = traceback.format_exception(type(error), error, error.__traceback__)
            status, reason, details = "failed", "".join(lines[-6:]).strip(), dict(partial)
        seconds = time.perf_counter() - start
    return CheckResult(status, seconds, reason, details, memory.figures())


def write_report(path: Path, report: dict[str, Any]) -> Path:
    """Write ``report`` as indented JSON at ``path``, atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(report, indent=2) + "\n")
    return path


def build_report(
    options: CheckOptions,
    results: dict[str, CheckResult],
    *,
    started: datetime.datetime,
    seconds: float,
    work: Path,
    error: str = "",
    running: str | None = None,
) -> dict[str, Any]:
    """The JSON report: machine, versions, settings, and every step's outcome so far
    (``running``: the step under way, for a report written before the end)."""
    import torch

    from resail_pipeline.devices import machine_description

    device = (
        torch.device("cuda", 0) if options.device == "cuda" and not error else torch.device("cpu")
    )
    peaks = [r.gpu_memory_mib["device_used_peak"] for r in results.values() if r.gpu_memory_mib]
    return {
        "device": options.device,
        "machine": machine_description(device),
        "versions": _versions(),
        "settings": {
            "policy": str(options.policy_path),
            "tasks": options.tasks,
            "max_steps": options.max_steps,
            "max_new_tokens": options.max_new_tokens,
            "prompts": options.prompts,
            "updates": options.updates,
            "seed": options.seed,
            "budget_s": options.budget_s,
            "skip": list(options.skip),
            "aitz_shape": None if options.aitz_shape is None else str(options.aitz_shape_path),
            "scale_shape": str(options.scale_shape_path),
            "scale_prompt_words": options.scale_prompt_words,
            "scale_response_tokens": options.scale_response_tokens,
            "zero2_shape": str(options.zero2_shape_path),
            "zero2_layers": options.zero2_layers,
            "zero2_prompt_words": options.zero2_prompt_words,
            "zero2_response_tokens": options.zero2_response_tokens,
            "sampler_rows": options.sampler_rows,
            "sampler_tokens": options.sampler_tokens,
        },
        "started": started.isoformat(timespec="seconds"),
        "seconds": round(seconds, 2),
        "passed": not error
        and set(results) == set(CHECKS)
        and all(r.status != "failed" for r in results.values()),
        "complete": bool(error) or set(results) == set(CHECKS),
        "running": running,
        "error": error,
        "peak_gpu_memory_mib": max(peaks) if peaks else None,
        "work": str(work),
        "checks": {name: result.to_dict() for name, result in results.items()},
    }


@contextmanager
def _work_folder(work: Path | None, device: str) -> Iterator[tuple[Path, bool]]:
    """The scratch folder ``work/<device>`` (emptied first), or a temporary one; yields it and
    whether it is temporary."""
    if work is None:
        yield Path(tempfile.mkdtemp(prefix=f"gpu-check-{device}-")), True
        return
    folder = work / device
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    yield folder, False
