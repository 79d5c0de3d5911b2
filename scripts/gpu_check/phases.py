"""One trainer rank whose phases are measured: the ``zero2_8b`` step's trainer (:mod:`.steps`).

    torchrun --standalone --nproc_per_node=1 -m gpu_check.phases --config RUN_DIR/train_config.yaml
    python -m gpu_check.phases --config RUN_DIR/train_config.yaml     # engine single: no torchrun

The rank runs the project's trainer as ``python -m resail_pipeline.training`` does (the same
:class:`~resail_pipeline.training.run.TrainingRun`, its metrics and checkpoint published the same
way), with these of its calls measured, each as one phase of the memory plan
(:mod:`~resail_pipeline.training.memory`):

- ``sampling``: ``Trainer._responses``, the in-loop sampler's responses of an update;
- ``training``: ``Trainer._accumulate``, an update's micro-batches (the student's forwards, the
  teacher's scoring, the losses and backwards);
- ``step``: ``Engine.step``, the gradients' reduction and AdamW's step;

and ``load``, the run's set-up (inputs, both models, the engine). Each call is timed with the
device synchronised before and after; on a GPU torch's allocator peak is reset before it and read
after it, with what was allocated when it started (on the CPU no peak is counted). Rank 0 writes
the measurements to :data:`~.options.PHASES_FILE` in the run directory, with the plan of the run's
own resolved configuration for the policy's shape and the corpus's longest rows.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.distributed.elastic.multiprocessing.errors import record

from resail_pipeline.training.config import TrainConfig
from resail_pipeline.training.engine import run_rank
from resail_pipeline.training.memory import ModelShape, plan_memory
from resail_pipeline.training.run import TrainingRun

from .options import PHASES_FILE


class PhaseMeter:
    """Seconds and, on a GPU, the allocator's peak of each measured call, one row per call.

    Args:
        device: this rank's device.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.update: int | None = None  # the update under way (``None``: before the first)
        self.rows: list[dict[str, Any]] = []

    def measured(
        self,
        phase: str,
        call: Callable[..., Any],
        note: Callable[[Any], dict[str, Any]] | None = None,
    ) -> Callable[..., Any]:
        """``call``, each of its runs recorded as a row of ``phase`` (with ``note(result)``'s
        entries, where given)."""
        cuda = self.device.type == "cuda"

        @functools.wraps(call)
        def run(*args: Any, **kwargs: Any) -> Any:
            before = 0
            if cuda:
                torch.cuda.synchronize(self.device)
                before = torch.cuda.memory_allocated(self.device)
                torch.cuda.reset_peak_memory_stats(self.device)
            start = time.perf_counter()
            result = call(*args, **kwargs)
            if cuda:
                torch.cuda.synchronize(self.device)
            row: dict[str, Any] = {
                "phase": phase,
                "update": self.update,
                "seconds": time.perf_counter() - start,
            }
            if cuda:
                row.update(
                    allocated_before=before,
                    peak=int(torch.cuda.max_memory_allocated(self.device)),
                    allocated_after=int(torch.cuda.memory_allocated(self.device)),
                )
            if note is not None:
                row.update(note(result))
            self.rows.append(row)
            return result

        return run

    def updates(self, call: Callable[..., Any]) -> Callable[..., Any]:
        """``call`` (the loop's ``update(u, batch)``), numbering the rows recorded while it runs
        and timing it whole (no peak: the phases inside reset it)."""

        @functools.wraps(call)
        def run(u: int, *args: Any, **kwargs: Any) -> Any:
            self.update = u
            start = time.perf_counter()
            result = call(u, *args, **kwargs)
            seconds = time.perf_counter() - start  # the loop synchronised at its end
            self.rows.append({"phase": "update", "update": u, "seconds": seconds})
            return result

        return run


def _response_tokens(responses: dict[int, tuple[tuple[int, ...], Any]]) -> dict[str, Any]:
    """The fewest and the most tokens of an update's sampled responses on this rank."""
    lengths = [len(ids) for ids, _ in responses.values()]
    return {"response_tokens": [min(lengths), max(lengths)] if lengths else []}


def measure(path: str) -> None:
    """Run the trainer of the configuration at ``path`` with its phases measured; rank 0 writes
    them into the run directory."""
    config = TrainConfig.from_yaml(path)
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local) if torch.cuda.is_available() else torch.device("cpu")
    meter = PhaseMeter(device)
    run = meter.measured("load", TrainingRun)(config)
    trainer = run.trainer
    trainer.update = meter.updates(trainer.update)
    trainer._responses = meter.measured("sampling", trainer._responses, _response_tokens)
    trainer._accumulate = meter.measured("training", trainer._accumulate)
    trainer.engine.step = meter.measured("step", trainer.engine.step)

    steps = [s for traj in run.data.trajectories for s in run.data.steps[traj]]
    prompt_tokens = max(len(s.privileged_ids) for s in steps)
    insert_tokens = max(len(s.privileged_ids) - len(s.ordinary_ids) for s in steps)
    shape = ModelShape.from_checkpoint(run.manifest.policy)
    plan = plan_memory(
        run.config,
        shape,
        prompt_tokens=prompt_tokens,
        insert_tokens=insert_tokens,
        cuda=device.type == "cuda",
    )
    run.run()
    if run.rank != 0:
        return
    out = {
        "device": str(device),
        "parameters": shape.parameters,
        "layers": shape.layers,
        "prompt_tokens": prompt_tokens,
        "insert_tokens": insert_tokens,
        "rows": meter.rows,
        "plan": dataclasses.asdict(plan),
    }
    (Path(run.config.run.run_dir) / PHASES_FILE).write_text(json.dumps(out, indent=1) + "\n")


@record  # an error ends in TORCHELASTIC_ERROR_FILE, as the trainer's own entry records it
def main(argv: list[str] | None = None) -> int:
    return run_rank(
        argv,
        prog="python -m gpu_check.phases",
        description=__doc__.split("\n\n")[0],
        config_help="the run's TrainConfig YAML file",
        start=measure,
    )


if __name__ == "__main__":
    sys.exit(main())
