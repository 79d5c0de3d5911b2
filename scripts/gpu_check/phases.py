"""One trainer rank whose phases are measured: the ``zero2_8b`` step's trainer (:mod:`.steps`).

    torchrun --standalone --nproc_per_node=1 -m gpu_check.phases --config RUN_DIR/train_config.yaml
    python -m gpu_check.phases --config RUN_DIR/train_config.yaml     # engine single: no torchrun

The rank runs the project's trainer as ``python -m resail_pipeline.training`` does (the same
:class:`~resail_pipeline.training.run.TrainingRun`, its metrics and checkpoint published the same
way), with each memory phase of its updates measured, as the trainer marks them
(:attr:`~resail_pipeline.training.trainer.UpdateLoop.memory_phase`; the phases of the memory plan,
:mod:`~resail_pipeline.training.memory`):

- ``sampling``: the in-loop sampler's responses of an update (the fewest and most tokens of each
  call of the sampler noted beside it);
- ``training``: an update's micro-batches (the student's forwards, the teacher's scoring, the
  losses and backwards);
- ``step``: the optimiser's step (the gradients' reduction and AdamW's step);

and ``load``, the run's set-up (inputs, both models, the engine). Each phase is timed with the
device synchronised before and after; on a GPU torch's allocator peak is reset before it and read
after it, with what was allocated when it started (on the CPU no peak is counted). Rank 0 writes
the measurements to :data:`~.options.PHASES_FILE` in the run directory, with the plan of the run's
own resolved configuration for the policy's shape and the corpus's longest rows.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
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
    """Seconds and, on a GPU, the allocator's peak of each measured phase, one row per phase run.

    Args:
        device: this rank's device.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.update: int | None = None  # the update under way (``None``: before the first)
        self.rows: list[dict[str, Any]] = []
        self._notes: dict[str, Any] = {}  # for the row of the phase under way

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Record what runs inside as a row of phase ``name`` (the trainer's ``memory_phase``)."""
        cuda = self.device.type == "cuda"
        before = 0
        if cuda:
            torch.cuda.synchronize(self.device)
            before = torch.cuda.memory_allocated(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        start = time.perf_counter()
        yield
        if cuda:
            torch.cuda.synchronize(self.device)
        row: dict[str, Any] = {
            "phase": name,
            "update": self.update,
            "seconds": time.perf_counter() - start,
        }
        if cuda:
            row.update(
                allocated_before=before,
                peak=int(torch.cuda.max_memory_allocated(self.device)),
                allocated_after=int(torch.cuda.memory_allocated(self.device)),
            )
        row.update(self._notes)
        self._notes.clear()
        self.rows.append(row)

    def note(self, **entries: Any) -> None:
        """Entries for the row of the phase under way."""
        self._notes.update(entries)

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


class NotedSampler:
    """The trainer's sampler, the fewest and most tokens of each call's responses noted in the
    meter's row of the phase under way.

    Args:
        generator: the sampler (a :class:`~resail_pipeline.generation.base.Generator`).
        meter: where the lengths are noted.
    """

    def __init__(self, generator: Any, meter: PhaseMeter) -> None:
        self.generator = generator
        self.meter = meter

    def generate(self, prompts: Sequence[Any], params: Any, seeds: Any = None) -> list[Any]:
        generations = self.generator.generate(prompts, params, seeds=seeds)
        lengths = [len(g.token_ids) for g in generations]
        if lengths:
            self.meter.note(response_tokens=[min(lengths), max(lengths)])
        return generations


def measure(path: str) -> None:
    """Run the trainer of the configuration at ``path`` with its phases measured; rank 0 writes
    them into the run directory."""
    config = TrainConfig.from_yaml(path)
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local) if torch.cuda.is_available() else torch.device("cpu")
    meter = PhaseMeter(device)
    with meter.phase("load"):
        run = TrainingRun(config)
    trainer = run.trainer
    trainer.update = meter.updates(trainer.update)
    trainer.memory_phase = meter.phase
    if getattr(trainer, "generator", None) is not None:
        trainer.generator = NotedSampler(trainer.generator, meter)

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
