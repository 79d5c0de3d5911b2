"""A prepared check of the GPU path on one device: generation, training, the probe, a smoke cycle.

    python -m resail_pipeline.gpu_check --device cuda      # scripts/gpu_check.sh (docs/gpu.md)
    python -m resail_pipeline.gpu_check --device cpu       # the same steps on the CPU

Each step is recorded with its outcome (``passed``, ``failed``, or ``skipped`` and why), its
seconds, the device memory it took and what it measured, in one JSON file (``--out``):

1. ``generation``: the shipped policy plays a few TextCraft tasks through the project's
   transformers backend on the device (the collection's decoding, the precision the backend picks
   there); then, in fp32, its greedy responses to a handful of those real prompts equal
   transformers' own ``model.generate`` token for token (one prompt at a time, no padding).
2. ``probe``: the PI-sensitivity probe set of those episodes built on the device by the frozen
   policy (:func:`~resail_pipeline.training.run.probe_set_with_frozen`, as the pipeline's node
   does), and the policy's sensitivity on it measured here; every value a JSD in [0, ln 2].
3. ``train_single`` and ``train_deepspeed``: one training cycle of ``oel_resail`` (a few updates)
   through the launcher, one process, then DeepSpeed ZeRO-2 in one rank under torchrun (NCCL on a
   GPU, gloo on the CPU) where ``deepspeed`` imports: finite losses, a published checkpoint whose
   weights moved, the trainer's probe rows, their update 0 equal to step 2's measurement.
4. ``aitz``: the GUI path (section 4.3) with the small Qwen3-VL of ``make rehearse-aitz``, built
   and warm-started on the device over synthetic episodes: its greedy responses to real action
   prompts (screenshot included) equal ``model.generate``'s in fp32, then the initial policy's
   attempts and summaries, and one short OEL run in the GUI trainer's own process under the text
   trainer's engines (DeepSpeed ZeRO-2 in one torchrun rank where ``deepspeed`` imports, else one
   process): finite losses, weights that moved, the trainer on the device.
   With ``--aitz-shape`` its initial policy is instead a Qwen3-VL of a published shape
   (``reference/shapes/Qwen3-VL-4B-Instruct``) with random weights over the GUI tokenizer.
5. ``smoke``: ``python -m kedro run --env smoke --pipelines=cycle`` for one cycle in a scratch
   copy of the project with generation on the device, where ``kedro`` imports.
6. ``scale``: a policy of a published shape (Qwen3-4B's on a GPU, :data:`SCALE_SHAPE`; the shipped
   policy's on the CPU) with random weights and the shipped tokenizer: the transformers backend's
   decoding speed on it, then two updates of SDPO + ReSAIL at the paper's micro-batch settings in
   this process, whose allocator peak the memory plan (:mod:`~resail_pipeline.training.memory`)
   must meet from above within a quarter, as its test holds it on small shapes.

Steps that need a package the Python lacks (``pyarrow`` for every Parquet hand-off, ``textcraft``,
``deepspeed``, ``kedro``) are skipped, naming it; so are the steps left when ``--budget-s`` is spent.
The report is rewritten after every step, so that what finished survives; a step still running
:data:`GRACE_S` seconds past the budget, or when the check gets SIGTERM, is recorded as failed with
what it had measured (the long steps, ``aitz`` and ``scale``, record as they go) and the process
ends. It exits 0 when every step passed or was skipped.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import importlib.metadata
import importlib.util
import json
import logging
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from resail_pipeline.io import atomic_path

__all__ = [
    "CHECKS",
    "CheckFailed",
    "CheckOptions",
    "CheckResult",
    "DeviceMemory",
    "main",
    "run_checks",
    "write_report",
]

logger = logging.getLogger(__name__)

#: the steps, in the order they run
CHECKS = ("generation", "probe", "train_single", "train_deepspeed", "aitz", "smoke", "scale")
#: modules each step needs besides torch and transformers: pyarrow for the Parquet hand-offs;
#: Kedro imports every pipeline when it registers them, the report's and aitz's matplotlib and PIL
REQUIRES: dict[str, tuple[str, ...]] = {
    "generation": ("pandas", "textcraft"),
    "probe": ("pandas", "pyarrow", "textcraft"),
    "train_single": ("pandas", "pyarrow", "textcraft"),
    "train_deepspeed": ("pandas", "pyarrow", "textcraft", "deepspeed"),
    "aitz": ("pandas", "pyarrow", "PIL"),
    "smoke": ("pandas", "pyarrow", "textcraft", "kedro", "kedro_datasets", "matplotlib", "PIL"),
    "scale": ("pandas", "pyarrow"),
}
#: the folder of the shipped TextCraft policy, under the project
REFERENCE_POLICY = Path("reference") / "textcraft-initial"
#: the AITZ parameters the ``aitz`` step starts from, under the project
AITZ_PARAMETERS = Path("conf") / "base" / "parameters_aitz.yml"
#: what the ``aitz`` step changes in them: ``make rehearse-aitz``'s sizes (conf/rehearsal-aitz),
#: with a shorter warm start (the check needs a policy that writes actions, not a good one)
AITZ_SIZES: dict[str, Any] = {
    "data": {"source": "synthetic", "synthetic": {"train_episodes": 16, "test_episodes": 4}},
    "initial": {
        "path": None,
        "batch_size": 8,
        "warm_start": {"updates": 10, "batch": 8, "hidden_size": 64, "num_hidden_layers": 1},
    },
    "generation": {"backend": "transformers", "vllm": {}},
    "offline": {
        "schedule": {"trajectories_per_update": 3},
        "responses": {"max_new_tokens": 16},
        "evaluation": {"max_new_tokens": 16},
        "monitor_every": 1,
        "monitor_episodes": 4,
        "on_rejected": "rules",
        "micro_batch": 2,
    },
}
#: the published shape the ``scale`` step builds on a GPU, under the project
SCALE_SHAPE = Path("reference") / "shapes" / "Qwen3-4B"
#: the ``scale`` step's trainer: conf/paper-textcraft's engine settings (its micro-batch, top-K
#: blocks and checkpointing) in one process, SDPO + ReSAIL on cached responses (no sampling)
SCALE_PARAMETERS = Path("conf") / "paper-textcraft" / "parameters.yml"
#: the smoke run's outputs of cycle 1, under the scratch project's data folder
SMOKE_FOLDER = "textcraft-smoke"
#: a JSD in nats never exceeds ln 2
LN2 = math.log(2.0)
#: what a trainer process must add to the device's used memory to count as having run on it
MIN_TRAINER_MIB = 100.0
#: lines of a failing subprocess's log kept in the report
TAIL_LINES = 40
#: seconds past the budget after which a step still running is given up and the process ends
GRACE_S = 60.0


class CheckFailed(AssertionError):
    """A step ran but did not show what it must; ``details`` holds what it measured."""

    def __init__(self, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.details = details or {}


@dataclass(frozen=True)
class CheckOptions:
    """What the check runs with (``python -m resail_pipeline.gpu_check --help``)."""

    # cuda | cpu: where every step computes
    device: str = "cuda"
    # the Kedro project: its conf/, reference/ and src/
    project: Path = field(default_factory=Path.cwd)
    # the policy every step starts from (relative paths: under project)
    policy: Path = REFERENCE_POLICY
    # TextCraft tasks played (one episode each): the prompts, the training corpus, the probe set
    tasks: int = 4
    # episodes end after this many steps
    max_steps: int = 10
    # tokens per response: rollout, comparison and training responses
    max_new_tokens: int = 48
    # prompts compared with transformers' generate
    prompts: int = 6
    # optimiser updates per training cycle (two trajectories each)
    updates: int = 2
    # seed of the rollout and the trainer
    seed: int = 0
    # seconds for all steps; a step that would start after them is skipped
    budget_s: float = 460.0
    # scratch folder (checkpoints, logs, the smoke project); None: a temporary one, removed
    # when every step passed
    work: Path | None = None
    # steps of CHECKS not to run (recorded as skipped); the later steps need generation's episodes
    skip: tuple[str, ...] = ()
    # the scale step's model shape: a folder with a config.json (relative paths: under project);
    # None: SCALE_SHAPE on a GPU, the policy's own on the CPU
    scale_shape: Path | None = None
    # the aitz step's initial policy: None, the small Qwen3-VL warm-started there; else a folder
    # with a Qwen3-VL config.json (relative paths: under project) whose shape is built with random
    # weights over the GUI tokenizer (reference/shapes/Qwen3-VL-4B-Instruct: the paper's model)
    aitz_shape: Path | None = None
    # the scale step's prompts (words of the tokenizer, one token each) and responses (tokens)
    scale_prompt_words: int = 1500
    scale_response_tokens: int = 512

    def __post_init__(self) -> None:
        if self.device not in ("cuda", "cpu"):
            raise ValueError(f"device: must be cuda or cpu, got {self.device!r}")
        positive = ("tasks", "max_steps", "max_new_tokens", "prompts", "updates")
        for name in (*positive, "scale_prompt_words", "scale_response_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: must be a positive integer, got {value!r}")
        if self.tasks < 2:
            raise ValueError(f"tasks: training takes two trajectories per update, got {self.tasks}")
        unknown = sorted(set(self.skip) - set(CHECKS))
        if unknown:
            raise ValueError(f"skip: unknown step(s) {unknown}; the steps are {list(CHECKS)}")
        if not self.budget_s > 0:
            raise ValueError(f"budget_s: must be positive, got {self.budget_s!r}")

    @property
    def policy_path(self) -> Path:
        return self.policy if self.policy.is_absolute() else self.project / self.policy

    @property
    def aitz_shape_path(self) -> Path | None:
        """The ``aitz`` step's shape folder, or ``None`` (see :attr:`aitz_shape`)."""
        shape = self.aitz_shape
        if shape is None:
            return None
        return shape if shape.is_absolute() else self.project / shape

    @property
    def scale_shape_path(self) -> Path:
        """The ``scale`` step's shape folder (see :attr:`scale_shape`)."""
        if self.scale_shape is None:
            return self.project / SCALE_SHAPE if self.device == "cuda" else self.policy_path
        shape = self.scale_shape
        return shape if shape.is_absolute() else self.project / shape


@dataclass
class CheckResult:
    """One step's outcome as the report holds it."""

    status: str  # passed | failed | skipped
    seconds: float = 0.0
    reason: str = ""  # why it was skipped, or what failed
    details: dict[str, Any] = field(default_factory=dict)
    gpu_memory_mib: dict[str, float] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "seconds": round(self.seconds, 2),
            "reason": self.reason,
            "gpu_memory_mib": self.gpu_memory_mib,
            "details": self.details,
        }


# ----------------------------------------------------------------------------------------------
# device memory


class DeviceMemory:
    """Peak memory of a CUDA device while a block runs (nothing on the CPU).

    Two figures: the device's used memory (every process on it, the trainer's subprocesses
    included), polled every ``interval`` seconds, and this process's peak allocation by torch.
    """

    def __init__(self, device: Any, interval: float = 0.1) -> None:
        self.device = device
        self.interval = interval
        self.before_mib = self.peak_mib = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    def _used_mib(self) -> float:
        import torch

        free, total = torch.cuda.mem_get_info(self.device)
        return (total - free) / 2**20

    def _poll(self) -> None:
        while not self._stop.wait(self.interval):
            self.peak_mib = max(self.peak_mib, self._used_mib())

    def __enter__(self) -> DeviceMemory:
        if self.cuda:
            import torch

            torch.cuda.reset_peak_memory_stats(self.device)
            self.before_mib = self.peak_mib = self._used_mib()
            self._thread = threading.Thread(target=self._poll, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self.peak_mib = max(self.peak_mib, self._used_mib())

    def figures(self) -> dict[str, float] | None:
        """``device_used_before``, ``device_used_peak`` and ``process_allocated_peak`` in MiB."""
        if not self.cuda:
            return None
        import torch

        return {
            "device_used_before": round(self.before_mib, 1),
            "device_used_peak": round(self.peak_mib, 1),
            "process_allocated_peak": round(
                torch.cuda.max_memory_allocated(self.device) / 2**20, 1
            ),
        }


# ----------------------------------------------------------------------------------------------
# the steps


def _tail(path: Path, lines: int = TAIL_LINES) -> str:
    """The last ``lines`` lines of a log file (``""`` when it is missing)."""
    if not path.is_file():
        return ""
    with open(path, errors="replace") as handle:
        return "".join(collections.deque(handle, maxlen=lines))


def _versions() -> dict[str, str | None]:
    """Versions of Python, torch (and its CUDA), transformers and the optional packages."""
    import torch
    import transformers

    def version(name: str) -> str | None:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return None

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "transformers": transformers.__version__,
        "deepspeed": version("deepspeed"),
        "kedro": version("kedro"),
        "pandas": version("pandas"),
        "pyarrow": version("pyarrow"),
    }


def missing_modules(names: Sequence[str]) -> list[str]:
    """The modules of ``names`` this Python cannot import."""
    return [name for name in names if importlib.util.find_spec(name) is None]


class GpuCheck:
    """The steps of the check on one device; each step reads what the earlier ones produced.

    Args:
        options: what to run.
        work: the scratch folder (exists, empty).
    """

    def __init__(self, options: CheckOptions, work: Path) -> None:
        import torch

        self.options = options
        self.work = work
        self.device = torch.device("cuda", 0) if options.device == "cuda" else torch.device("cpu")
        self.policy = options.policy_path
        self.trajectories: Any = None  # the episodes of the generation step (pandas)
        self.steps: Any = None
        self.summaries: Any = None
        self.probe_set: Any = None  # the probe step's set and measurement
        self.probe_initial: dict[tuple[str, int], float] = {}
        self.manifest: Path | None = None
        self.first_loss: float | None = None  # update 1's loss in the first training step
        # what the running step has measured so far: the long steps (aitz, scale) write into it
        # as they go, so that a step stopped before its end (the budget overrun, a SIGTERM)
        # still reports what it measured; emptied as each step starts
        self.partial: dict[str, Any] = {}

    # -- generation ---------------------------------------------------------------------------

    def generation(self) -> dict[str, Any]:
        """Episodes through the project's backend, then its greedy tokens against ``generate``."""
        import torch

        from resail_pipeline.collection import CollectConfig, collect
        from resail_pipeline.envs import make_env
        from resail_pipeline.experience.summarize import SummarizeConfig, summarize_trajectories
        from resail_pipeline.generation import SamplingParams, make_generator
        from resail_pipeline.prompts import chat_prompt

        options = self.options
        device = self.device.type
        start = time.perf_counter()
        with make_generator(
            "transformers", self.policy, device=device, dtype="auto", progress=False
        ) as generator:
            load_s = time.perf_counter() - start
            auto_dtype = str(next(generator.model.parameters()).dtype).removeprefix("torch.")
            config = CollectConfig(
                num_trajectories=options.tasks,
                max_new_tokens=options.max_new_tokens,
                max_live=None,
            )
            _, trajectories, steps = collect(
                lambda: make_env("textcraft", max_steps=options.max_steps),
                generator,
                config,
                cycle=1,
                method="react",
                seed=options.seed,
            )
            rollout_s = time.perf_counter() - start - load_s
            prompts = _comparison_prompts(steps, options.prompts)
            texts = [chat_prompt(generator.tokenizer, p) for p in prompts]
            greedy = SamplingParams(temperature=0.0, max_new_tokens=options.max_new_tokens)
            auto_equal = None
            if auto_dtype != "float32":  # the backend's own precision: agreement, for the record
                ours = generator.generate(texts, greedy)
                theirs = _hf_greedy(generator, texts, options.max_new_tokens)
                auto_equal = sum(a.token_ids == b for a, b in zip(ours, theirs, strict=True))
        self.trajectories, self.steps = trajectories, steps
        self.summaries = summarize_trajectories(
            trajectories, steps, SummarizeConfig(source="rules")
        )
        details: dict[str, Any] = {
            "episodes": len(trajectories),
            "env_steps": len(steps),
            "success_rate": round(float(trajectories["success"].mean()), 3),
            "valid_action_rate": round(float(steps["action_valid"].mean()), 3),
            "load_s": round(load_s, 2),
            "rollout_s": round(rollout_s, 2),
            "backend_dtype": auto_dtype,
            "backend_dtype_equal": None if auto_equal is None else f"{auto_equal}/{len(texts)}",
        }
        if not bool(steps["action_valid"].any()):
            raise CheckFailed("rollout: no step of any episode had a valid action", details)

        with make_generator(
            "transformers", self.policy, device=device, dtype="float32", progress=False
        ) as generator:
            start = time.perf_counter()
            ours = generator.generate(texts, greedy)
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            details["backend_generate_s"] = round(time.perf_counter() - start, 2)
            start = time.perf_counter()
            theirs = _hf_greedy(generator, texts, options.max_new_tokens)
            details["hf_generate_s"] = round(time.perf_counter() - start, 2)
        details.update(
            prompts=len(texts),
            prompt_tokens=[
                len(generator.tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts
            ],
            generated_tokens=sum(len(g.token_ids) for g in ours),
        )
        _check_greedy(ours, theirs, details)
        return details

    # -- probe --------------------------------------------------------------------------------

    def _train_config(self, name: str, engine: dict[str, Any], probe: bool) -> Any:
        """The project's ``train`` parameters (conf/base) at the check's small budget."""
        import yaml

        from resail_pipeline.training import TrainConfig

        path = self.options.project / "conf" / "base" / "parameters_train.yml"
        if not path.is_file():
            raise FileNotFoundError(f"{path}: not found; --project must be the Kedro project")
        train = dict(yaml.safe_load(path.read_text())["train"])
        precision = "bf16" if self.device.type == "cuda" else "auto"
        run_dir = self.work / name
        data = {
            **train,
            "method": "oel_resail",
            "schedule": {
                "updates": self.options.updates,
                "trajectories_per_update": 2,
                "seed": self.options.seed,
            },
            "engine": {**train.get("engine", {}), "precision": precision, **engine},
            "responses": {**train.get("responses", {}), "max_tokens": self.options.max_new_tokens},
            "probe": {
                **train.get("probe", {}),
                "enabled": probe,
                "num_trajectories": self.options.tasks,
            },
            "compile": False,
            "run": {
                "manifest": str(self.manifest or ""),
                "checkpoint": str(run_dir / "policy"),
                "run_dir": str(run_dir / "run"),
                "policy_name": f"gpu-check-{name}",
                "cycle": 1,
            },
        }
        return TrainConfig.from_dict(data, "train")

    def probe(self) -> dict[str, Any]:
        """The probe set built on the device; the initial policy's sensitivity on it."""
        import torch

        from resail_pipeline.checkpoints import read_checkpoint_info
        from resail_pipeline.training import ProbeSet
        from resail_pipeline.training.probe import probe_sensitivity
        from resail_pipeline.training.run import (
            load_frozen,
            probe_set_with_frozen,
            resolve_for_machine,
        )
        from resail_pipeline.training.views import ResponseLogits

        self._need_corpus()
        config = resolve_for_machine(self._train_config("probe", {"kind": "single"}, True))
        info = read_checkpoint_info(self.policy)
        start = time.perf_counter()
        frame = probe_set_with_frozen(
            str(self.policy),
            info.policy_id,
            config,
            self.trajectories,
            self.steps,
            self.summaries,
        )
        build_s = time.perf_counter() - start
        if frame.empty:
            raise CheckFailed("the probe set is empty: no episode had an accepted summary")
        probe_set = ProbeSet.from_frame(frame, source="probe set")
        model, tokenizer = load_frozen(str(self.policy), config.engine)
        module = ResponseLogits(model)
        steps = probe_set.steps
        values: list[float] = []
        counts: list[int] = []
        start = time.perf_counter()
        size = config.probe.micro_batch_steps
        for i in range(0, len(steps), size):
            part = steps[i : i + size]
            jsd, tokens = probe_sensitivity(
                module,
                part,
                [probe_set.support[(s.traj_id, s.t)] for s in part],
                pad_id=tokenizer.pad_token_id,
                device=next(model.parameters()).device,
                precision=config.engine.autocast_precision,
                chunk_size=config.engine.chunk_size,
            )
            values += jsd.tolist()
            counts += tokens.tolist()
        measure_s = time.perf_counter() - start
        del module, model
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        self.probe_set = frame
        self.probe_initial = {(s.traj_id, s.t): v for s, v in zip(steps, values, strict=True)}
        mean = sum(v * c for v, c in zip(values, counts, strict=True)) / max(sum(counts), 1)
        details = {
            "trajectories": len(probe_set.data.trajectories),
            "steps": len(steps),
            "response_tokens": int(sum(counts)),
            "top_k": probe_set.top_k,
            "precision": config.engine.autocast_precision,
            "sensitivity_nats": round(mean, 6),
            "build_s": round(build_s, 2),
            "measure_s": round(measure_s, 2),
        }
        outside = [v for v in values if not (0.0 <= v <= LN2 + 1e-6)]
        if outside:
            raise CheckFailed(
                f"{len(outside)} probe value(s) outside [0, ln 2]: {outside[:3]}", details
            )
        return details

    # -- training -----------------------------------------------------------------------------

    def _inputs(self) -> Path:
        """The trainer's input manifest: the episodes, their summaries and the probe set."""
        from resail_pipeline.training import write_inputs

        if self.manifest is None:
            self._need_corpus()
            self.manifest = write_inputs(
                self.work / "inputs",
                policy=self.policy,
                steps=self.steps,
                summaries=self.summaries,
                probe=self.probe_set,
            )
        return self.manifest

    def train(self, engine: str) -> dict[str, Any]:
        """One cycle through the launcher with ``engine`` (``single`` or ``deepspeed``)."""
        from resail_pipeline.checkpoints import read_checkpoint_info, verify_weights
        from resail_pipeline.training import TrainingFailed, launch

        self._inputs()
        probe = self.probe_set is not None
        name = f"train_{engine}"
        config = self._train_config(name, {"kind": engine, "world_size": 1, "zero_stage": 2}, probe)
        with DeviceMemory(self.device) as memory:
            start = time.perf_counter()
            try:
                result = launch(config, self.work / name / "train.log")
            except TrainingFailed as error:
                raise CheckFailed(f"{error} (log: {self.work / name / 'train.log'})") from None
            seconds = time.perf_counter() - start
        resolved = result.config.engine
        metrics = result.metrics
        log = result.log_path.read_text(errors="replace")
        details: dict[str, Any] = {
            "engine": resolved.kind,
            "world_size": resolved.world_size,
            "precision": resolved.precision,
            "zero_stage": resolved.zero_stage if resolved.kind == "deepspeed" else None,
            "updates": len(metrics),
            "losses": [round(float(v), 6) for v in metrics["loss"]],
            "launch_s": round(seconds, 2),
            "seconds_per_update": {
                part: round(float(metrics[f"seconds_{part}"].mean()), 3)
                for part in ("response", "scoring", "optimisation", "other")
            },
            "log": str(result.log_path),
        }
        placement = _placement_in(log)
        details["device"], details["process_group"] = placement or (None, None)
        problems = []
        if f"engine {engine} x 1" not in log:
            problems.append(f"the log does not show 'engine {engine} x 1'")
        verify_weights(result.checkpoint.path)
        moved = result.checkpoint.sha256 != read_checkpoint_info(self.policy).sha256
        problems += self._trained(placement, engine, metrics, moved, memory)
        first = float(metrics["loss"].iloc[0]) if len(metrics) else math.nan
        if resolved.precision == "fp32" and self.first_loss is not None:
            # the same update in fp32 on every engine: the same loss, to rounding
            relative = abs(first - self.first_loss) / max(abs(self.first_loss), 1e-12)
            details["first_loss_relative_diff"] = relative
            if not relative <= 1e-3:
                problems.append(
                    f"update 1's loss differs from the first engine's by {relative:.2%}"
                )
        elif self.first_loss is None:
            self.first_loss = first
        if probe:
            details.update(self._probe_rows(result.probe, resolved.precision, problems))
        if problems:
            raise CheckFailed("; ".join(problems), details)
        return details

    def _probe_rows(self, rows: Any, precision: str, problems: list[str]) -> dict[str, Any]:
        """The trainer's probe rows against the probe step: every update, update 0 equal to it
        (to rounding in fp32; within 5% over all tokens in bf16, whose kernels round by shape)."""
        keys = set(self.probe_initial)
        updates = sorted(int(u) for u in rows["update"].unique())
        if updates != list(range(self.options.updates + 1)):
            problems.append(f"probe rows for updates {updates}, not 0..{self.options.updates}")
        outside = rows[(rows["jsd"] < 0) | (rows["jsd"] > LN2 + 1e-6) | rows["jsd"].isna()]
        if len(outside):
            problems.append(f"{len(outside)} probe value(s) outside [0, ln 2]")
        start = rows[rows["update"] == 0]
        got = {
            (str(r.traj_id), int(r.t)): (float(r.jsd), int(r.tokens)) for r in start.itertuples()
        }
        if set(got) != keys:
            problems.append(f"update 0 probes {len(got)} steps, the probe set has {len(keys)}")
            return {}
        diffs = [abs(got[k][0] - self.probe_initial[k]) for k in keys]
        tokens = sum(got[k][1] for k in keys)
        mean_got = sum(got[k][0] * got[k][1] for k in keys) / tokens
        mean_want = sum(self.probe_initial[k] * got[k][1] for k in keys) / tokens
        relative = abs(mean_got - mean_want) / max(mean_want, 1e-12)
        if precision == "fp32":
            bad = [
                k
                for k in keys
                if abs(got[k][0] - self.probe_initial[k]) > 1e-5 + 1e-3 * self.probe_initial[k]
            ]
            if bad:
                problems.append(f"update 0's probe differs from the initial policy's at {bad[:3]}")
        elif relative > 0.05:
            problems.append(f"update 0's probe differs from the initial policy's by {relative:.1%}")
        means = (
            rows.assign(weighted=rows["jsd"] * rows["tokens"])
            .groupby("update")[["weighted", "tokens"]]
            .sum()
        )
        return {
            "probe_updates": updates,
            "probe_sensitivity_nats": [
                round(float(v), 6) for v in means["weighted"] / means["tokens"]
            ],
            "probe_update0_max_abs_diff": float(max(diffs)),
            "probe_update0_relative_diff": round(relative, 6),
        }

    # -- aitz ---------------------------------------------------------------------------------

    def _aitz_config(self, engine: str, initial: Path | None = None) -> Any:
        """conf/base's ``aitz`` at ``make rehearse-aitz``'s sizes, on this device, in the work
        folder, with the check's updates and seed; ``initial``: a given initial policy."""
        import yaml

        from resail_pipeline.config import build
        from resail_pipeline.gui.config import AitzConfig

        path = self.options.project / AITZ_PARAMETERS
        if not path.is_file():
            raise FileNotFoundError(f"{path}: not found; --project must be the Kedro project")
        cuda = self.device.type == "cuda"
        folder = self.work / "aitz"
        here = {
            "data": {"root": str(folder / "episodes")},
            "initial": {
                "device": self.device.type,
                "dtype": "auto",
                "path": None if initial is None else str(initial),
            },
            "offline": {
                "schedule": {"updates": self.options.updates, "seed": self.options.seed},
                "engine": {
                    "kind": engine,
                    "world_size": 1,
                    "zero_stage": 2,
                    "precision": "bf16" if cuda else "auto",
                },
            },
            "staging_dir": str(folder / "staging"),
        }
        data = _merged(_merged(yaml.safe_load(path.read_text())["aitz"], AITZ_SIZES), here)
        return build(AitzConfig, data, "aitz")

    def aitz(self) -> dict[str, Any]:
        """The GUI path: the small Qwen3-VL built and warm-started here, its greedy tokens
        against ``generate`` in fp32, its attempts and summaries, one OEL run in the trainer's
        process(es)."""
        import torch

        from resail_pipeline.generation import SamplingParams
        from resail_pipeline.gui import experiment, offline
        from resail_pipeline.gui.policy import VisionPolicy
        from resail_pipeline.prompts.render import gui_action_messages
        from resail_pipeline.training import TrainingFailed
        from resail_pipeline.training.launcher import LOG_FILE

        engine = "single" if missing_modules(["deepspeed"]) else "deepspeed"
        config = self._aitz_config(engine)
        root = Path(config.data.root)
        details = self.partial  # kept if the step is stopped before its end
        details["engine"] = engine
        start = time.perf_counter()
        train, test = experiment.read_splits(config)
        shape = self.options.aitz_shape_path
        if shape is not None:  # a given initial policy of that shape, random weights
            config = self._aitz_config(engine, self._shaped_vision_policy(shape, train))
            details.update(shape=str(shape), build_and_save_s=round(time.perf_counter() - start, 2))
        pool = offline.training_pool(train, config.offline.pool_size, config.offline.schedule.seed)
        initial, losses = experiment.build_initial_policy(config, train, pool)
        if len(losses):
            details.update(
                warm_start_s=round(time.perf_counter() - start, 2),
                warm_start_loss=[round(float(losses["loss"].iloc[i]), 4) for i in (0, -1)],
            )

        # fp32 greedy tokens of the action prompts, against transformers' own generate
        policy = VisionPolicy.load(initial.path, self.device, torch.float32)
        details["parameters"] = sum(p.numel() for p in policy.model.parameters())
        # each episode's first and last step in turn: short and long histories
        ends = pool.sort_values(["episode_id", "step_id"]).groupby("episode_id").nth([0, -1])
        rows = list(ends.head(self.options.prompts).itertuples())
        prompts = [
            policy.encode(
                gui_action_messages(r.instruction, list(r.history)), [root / r.image_path]
            )
            for r in rows
        ]
        tokens = config.offline.evaluation.max_new_tokens
        ours = policy.generate(prompts, SamplingParams(temperature=0.0, max_new_tokens=tokens))
        theirs = _hf_vision_greedy(policy, prompts, tokens)
        policy.close()
        details.update(
            prompt_tokens=[len(p.input_ids) for p in prompts],
            image_patches=[int(p.image_grid_thw.prod()) for p in prompts],
        )
        _check_greedy(ours, theirs, details)

        start = time.perf_counter()
        with experiment.open_generator(config, initial.path) as generator:
            attempts = offline.diagnose(generator, pool, root, config.offline)
            summaries = offline.summarize(generator, pool, attempts, root, config.offline)
        details.update(
            generation_s=round(time.perf_counter() - start, 2),
            steps=len(pool),
            attempts_correct=f"{int(attempts['correct'].sum())}/{len(attempts)}",
            summaries=summaries["source"].value_counts().sort_index().to_dict(),
        )

        with DeviceMemory(self.device) as memory:
            start = time.perf_counter()
            try:
                trained, metrics, curve = experiment.run_oel(
                    config, initial, pool, summaries, test, "oel"
                )
            except TrainingFailed as error:
                raise CheckFailed(str(error), details) from None
            seconds = time.perf_counter() - start
        log = (Path(trained.path) / LOG_FILE).read_text(errors="replace")
        placement = _placement_in(log)
        details.update(
            launch_s=round(seconds, 2),
            updates=len(metrics),
            losses=[round(float(v), 6) for v in metrics["loss"]],
            monitored_accuracy=[round(float(v), 3) for v in curve["accuracy"]],
        )
        details["device"], details["process_group"] = placement or (None, None)
        problems = self._trained(
            placement, engine, metrics, trained.sha256 != initial.sha256, memory
        )
        if problems:
            raise CheckFailed("; ".join(problems), details)
        return details

    def _shaped_vision_policy(self, shape: Path, train: Any) -> Path:
        """A Qwen3-VL of ``shape``'s config.json with random weights (bf16 on a GPU), over the GUI
        tokenizer of ``train`` and the small image processor, saved in the work folder."""
        import torch
        from transformers import AutoConfig, Qwen3VLForConditionalGeneration

        from resail_pipeline.gui.experiment import gui_tokenizer
        from resail_pipeline.gui.policy import VisionPolicy
        from resail_pipeline.modeling.vision import small_image_processor, with_vision_tokens

        if not (shape / "config.json").is_file():
            raise FileNotFoundError(f"aitz_shape {shape}: no config.json")
        tokenizer = gui_tokenizer(train)
        model_config = AutoConfig.from_pretrained(shape, trust_remote_code=False)
        if model_config.model_type != "qwen3_vl":
            raise CheckFailed(
                f"aitz_shape {shape}: a {model_config.model_type!r} model, not qwen3_vl"
            )
        try:
            model_config = with_vision_tokens(model_config, tokenizer)
        except ValueError as error:
            raise CheckFailed(f"aitz_shape {shape}: {error}") from None
        torch.manual_seed(self.options.seed)
        with torch.device(self.device):  # initialised where it runs
            model = Qwen3VLForConditionalGeneration(model_config)
        if self.device.type == "cuda":
            model = model.to(torch.bfloat16)
        model.generation_config.pad_token_id = tokenizer.pad_token_id
        model.generation_config.eos_token_id = tokenizer.eos_token_id
        path = self.work / "aitz" / "shaped-initial"
        VisionPolicy(model, tokenizer, small_image_processor()).save(
            path, name="gpu-check-aitz-shaped", method="react"
        )
        del model
        self._release()
        return path

    # -- smoke --------------------------------------------------------------------------------

    def smoke(self, timeout: float) -> dict[str, Any]:
        """One cycle of ``kedro run --env smoke --pipelines=cycle`` in a scratch project, killed
        (with every process it started) after ``timeout`` seconds."""
        import pandas as pd
        import yaml

        project = self.work / "smoke"
        _scratch_project(self.options.project, project)
        device = self.device.type
        params = [f"run.generation.transformers.device={device}"]
        if device == "cuda" and missing_modules(["deepspeed"]):
            params.append("train.engine.kind=single")  # auto would take DeepSpeed
        command = [
            *(sys.executable, "-m", "kedro", "run", "--env", "smoke", "--pipelines", "cycle"),
            *("--params", ",".join(params)),
        ]
        env = {**os.environ, "RESAIL_CYCLES": "1", "COLUMNS": "200"}
        log = project / "kedro.log"
        logger.info("smoke: python %s (log: %s)", " ".join(command[1:]), log)
        start = time.perf_counter()
        with (
            open(log, "w") as handle,
            subprocess.Popen(
                command,
                cwd=project,
                env=env,
                stdout=handle,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: a timeout ends all of it
            ) as process,
        ):
            try:
                code = process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                raise CheckFailed(
                    f"kedro run did not finish in {timeout:.0f} s; last lines of {log}:\n"
                    + _tail(log)
                ) from None
        details: dict[str, Any] = {
            "command": " ".join(["python", *command[1:]]),
            "run_s": round(time.perf_counter() - start, 2),
            "log": str(log),
        }
        if code != 0:
            raise CheckFailed(
                f"kedro run exited with status {code}; last lines of {log}:\n{_tail(log)}", details
            )
        data = project / "data"
        tasks = pd.read_parquet(data / "01_raw" / SMOKE_FOLDER / "shared/cycle_1/tasks.parquet")
        generation = json.loads(tasks["settings"].iloc[0])["generation"]
        # the train node publishes the trainer's configuration and log beside the checkpoint
        policy = data / "06_models" / SMOKE_FOLDER / "oel_resail/cycle_1/policy"
        engine = yaml.safe_load((policy / "train_config.yaml").read_text())["engine"]
        placement = _placement_in((policy / "train.log").read_text(errors="replace"))
        summary = pd.read_parquet(
            data / "07_model_output" / SMOKE_FOLDER / "oel_resail/cycle_1/eval_summary.parquet"
        )
        details.update(
            generation=generation,
            engine={k: engine[k] for k in ("kind", "world_size", "precision")},
            trainer_device=placement[0] if placement else None,
            success_rate={str(r.view): round(float(r.mean), 3) for r in summary.itertuples()},
        )
        problems = []
        if generation.get("device") != device:
            problems.append(
                f"the corpus was collected on {generation.get('device')!r}, not {device}"
            )
        if placement != self._placement(engine["kind"]):
            problems.append(
                f"the trainer ran on {placement}, not {self._placement(engine['kind'])}"
            )
        if problems:
            raise CheckFailed("; ".join(problems), details)
        return details

    # -- scale --------------------------------------------------------------------------------

    def scale(self) -> dict[str, Any]:
        """A policy of :attr:`CheckOptions.scale_shape_path`'s shape with random weights: the
        backend's decoding speed, then two SDPO + ReSAIL updates measured against the plan."""
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM

        from resail_pipeline.checkpoints import load_tokenizer, save_policy
        from resail_pipeline.training.memory import measurement_inputs

        options = self.options
        shape = options.scale_shape_path
        if not (shape / "config.json").is_file():
            raise FileNotFoundError(f"scale_shape {shape}: no config.json")
        folder = self.work / "scale"
        tokenizer = load_tokenizer(self.policy)
        model_config = AutoConfig.from_pretrained(shape, trust_remote_code=False)
        if model_config.vocab_size < len(tokenizer):
            raise CheckFailed(
                f"scale_shape {shape}: a vocabulary of {model_config.vocab_size}, smaller than "
                f"the policy's tokenizer ({len(tokenizer)})"
            )
        # the tokenizer's special tokens; the logits keep the shape's vocabulary (random weights
        # sample ids the tokenizer lacks, which decode to nothing)
        model_config.pad_token_id = tokenizer.pad_token_id
        model_config.eos_token_id = tokenizer.eos_token_id
        model_config.bos_token_id = None
        start = time.perf_counter()
        torch.manual_seed(options.seed)
        dtype = torch.bfloat16 if self.device.type == "cuda" else torch.float32
        with torch.device(self.device):  # initialised where it runs: seconds, not minutes
            model = AutoModelForCausalLM.from_config(
                model_config, dtype=dtype, trust_remote_code=False
            )
        model.generation_config.pad_token_id = tokenizer.pad_token_id
        model.generation_config.eos_token_id = tokenizer.eos_token_id
        policy = folder / "policy"
        save_policy(model, tokenizer, policy, name="gpu-check-scale")
        details = self.partial  # kept if the step is stopped before its end
        details.update(
            shape=str(shape),
            parameters=sum(p.numel() for p in model.parameters()),
            build_and_save_s=round(time.perf_counter() - start, 2),
        )
        del model
        self._release()
        manifest = measurement_inputs(
            folder,
            policy,
            tokenizer,
            words=options.scale_prompt_words,
            response=options.scale_response_tokens,
        )
        details.update(self._scale_decoding(policy, manifest))
        self._release()
        try:
            details.update(self._scale_training(manifest, folder, model_config))
        except CheckFailed as failure:
            raise CheckFailed(str(failure), {**details, **failure.details}) from None
        return details

    def _scale_decoding(self, policy: Path, manifest: Path) -> dict[str, Any]:
        """The transformers backend (the collection's settings: ``auto`` precision, temperature
        0.4) on the inputs' ordinary prompts, every response run to its token budget."""
        import pandas as pd
        import torch

        from resail_pipeline.generation import SamplingParams, make_generator
        from resail_pipeline.prompts import chat_prompt
        from resail_pipeline.training.data import read_manifest

        options = self.options
        prompts = pd.read_parquet(read_manifest(manifest).steps)["prompt"].tolist()
        start = time.perf_counter()
        with make_generator(
            "transformers", policy, device=self.device.type, dtype="auto", progress=False
        ) as generator:
            load_s = time.perf_counter() - start
            texts = [chat_prompt(generator.tokenizer, p) for p in prompts]
            params = SamplingParams(
                temperature=0.4, max_new_tokens=options.scale_response_tokens, seed=options.seed
            )
            start = time.perf_counter()
            generations = generator.generate(texts, params)
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            seconds = time.perf_counter() - start
            dtype = str(next(generator.model.parameters()).dtype).removeprefix("torch.")
            prompt_tokens = [
                len(generator.tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts
            ]
        tokens = sum(len(g.token_ids) for g in generations)
        return {
            "decoding": {
                "dtype": dtype,
                "load_s": round(load_s, 2),
                "prompts": len(texts),
                "prompt_tokens": max(prompt_tokens),
                "generated_tokens": tokens,
                "seconds": round(seconds, 2),
                "tokens_per_s": round(tokens / seconds, 1),
            }
        }

    def _scale_training(self, manifest: Path, folder: Path, model_config: Any) -> dict[str, Any]:
        """Two updates of SDPO + ReSAIL (4 trajectories x 2 steps each) with conf/paper-textcraft's
        engine settings in one process, loading included, under the allocator's count. The plan
        for the same configuration must not be below the peak (a plan that errs low lets a
        configuration run out of memory after cycle 0); how far above it is recorded (the test of
        the plan holds it within a quarter on small shapes)."""
        import yaml

        from resail_pipeline.training import TrainConfig
        from resail_pipeline.training.memory import (
            GIB,
            ModelShape,
            allocator_peak,
            plan_memory,
        )
        from resail_pipeline.training.run import TrainingRun

        options = self.options
        path = options.project / SCALE_PARAMETERS
        if not path.is_file():
            raise FileNotFoundError(f"{path}: not found; --project must be the Kedro project")
        train = dict(yaml.safe_load(path.read_text())["train"])
        cuda = self.device.type == "cuda"
        data = {
            **train,
            "method": "sdpo_resail",
            "schedule": {"updates": 2, "trajectories_per_update": 4, "seed": options.seed},
            "engine": {
                **train["engine"],
                "kind": "single",
                "world_size": 1,
                "precision": "bf16" if cuda else "fp32",
            },
            "responses": {**train["responses"], "max_tokens": options.scale_response_tokens},
            "probe": {"enabled": False},
            "compile": False,
            "run": {
                "manifest": str(manifest),
                "checkpoint": str(folder / "trained"),
                "run_dir": str(folder / "run"),
                "policy_name": "gpu-check-scale-trained",
                "cycle": 1,
            },
        }
        config = TrainConfig.from_dict(data, "train")
        runs: list[Any] = []

        def train_two() -> Any:  # loading counts: the plan's fixed parts are the weights' memory
            runs.append(TrainingRun(config))
            return runs[0].trainer.train(runs[0].schedule)

        start = time.perf_counter()
        records, measured = allocator_peak(train_two, self.device, folder / "trace.json")
        seconds = time.perf_counter() - start
        run = runs[0]
        steps = [s for traj in run.data.trajectories for s in run.data.steps[traj]]
        lengths = [len(s.privileged_ids) for s in steps]
        plan = plan_memory(
            run.config,
            ModelShape.from_config(model_config),
            prompt_tokens=max(lengths),
            insert_tokens=max(len(s.privileged_ids) - len(s.ordinary_ids) for s in steps),
            cuda=cuda,
        )
        rows = [r.metrics_row() for r in records]
        engine = run.config.engine
        details = {
            "training": {
                "method": config.method,
                "engine": f"{engine.kind}, {engine.precision}",
                "micro_batch_steps": engine.micro_batch_steps,
                "chunk_size": engine.chunk_size,
                "gradient_checkpointing": engine.gradient_checkpointing,
                "rows_per_update": sum(len(run.data.steps[t]) for t in run.schedule[0]),
                "row_tokens": [
                    min(lengths) + 2 * options.scale_response_tokens,
                    max(lengths) + 2 * options.scale_response_tokens,
                ],
                "losses": [round(float(r["loss"]), 6) for r in rows],
                "seconds": round(seconds, 2),
                "update_2_s": {
                    part: round(float(rows[-1][f"seconds_{part}"]), 3)
                    for part in ("scoring", "optimisation", "other")
                },
            },
            "memory": {
                "measured_gib": round(measured / GIB, 3),
                "planned_gib": round(plan.peak / GIB, 3),
                "plan_over_measured": round(plan.peak / measured, 3),
                "within_a_quarter": measured <= plan.peak <= 1.25 * measured,
                "plan": plan.describe(),
                "plan_mib": {
                    name: round(b / 2**20, 1)
                    for name, b in (*plan.fixed, *plan.training, *plan.sampling, *plan.stepping)
                },
            },
        }
        del runs[:], run, records
        self._release()
        problems = []
        if not all(math.isfinite(float(r["loss"])) for r in rows):
            problems.append(f"a loss is not finite: {details['training']['losses']}")
        if plan.peak < measured:
            problems.append(
                f"the memory plan ({plan.peak / GIB:.2f} GiB) is below the measured peak "
                f"({measured / GIB:.2f} GiB): a configuration it accepts may run out of memory"
            )
        if problems:
            raise CheckFailed("; ".join(problems), details)
        return details

    def _release(self) -> None:
        """Collect what the step dropped and return the device's cached memory."""
        import gc

        import torch

        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    # -- shared -------------------------------------------------------------------------------

    def _trained(
        self,
        placement: tuple[str, str] | None,
        engine: str,
        metrics: Any,
        moved: bool,
        memory: DeviceMemory,
    ) -> list[str]:
        """What is wrong with a one-rank training run of ``engine``: where its log says it ran
        (``placement``), its metrics (one row per update, finite losses), whether its published
        weights ``moved`` from the initial ones, and the device memory it took."""
        problems = []
        want = self._placement(engine)
        if placement != want:
            problems.append(
                f"the trainer ran on {placement or 'a device its log does not name'}, not {want}"
            )
        if len(metrics) != self.options.updates:
            problems.append(f"{len(metrics)} metrics rows for {self.options.updates} updates")
        losses = [float(v) for v in metrics["loss"]]
        if not all(math.isfinite(v) for v in losses):
            problems.append(f"a loss is not finite: {[round(v, 6) for v in losses]}")
        if not moved:
            problems.append("the published weights equal the initial policy's")
        figures = memory.figures()
        if figures is not None:
            grown = figures["device_used_peak"] - figures["device_used_before"]
            if grown < MIN_TRAINER_MIB:
                problems.append(
                    f"the device's used memory grew by {grown:.0f} MiB only while the trainer "
                    "ran: it did not run on the GPU"
                )
        return problems

    def _placement(self, engine: str) -> tuple[str, str]:
        """Where a one-rank trainer of ``engine`` must say it ran (see :func:`_placement_in`)."""
        cuda = self.device.type == "cuda"
        group = "none" if engine == "single" else "nccl" if cuda else "gloo"
        return ("cuda:0" if cuda else "cpu"), group

    def _need_corpus(self) -> None:
        if self.steps is None:
            raise CheckFailed("no episodes to work on: the generation step did not produce them")


def _comparison_prompts(steps: Any, count: int) -> list[str]:
    """Up to ``count`` distinct ordinary-view prompts of the episodes: each episode's first and
    last step in turn, so that both short and long histories are compared."""
    chosen: list[str] = []
    for _, episode in steps.sort_values(["traj_id", "t"]).groupby("traj_id", sort=True):
        for prompt in (episode["prompt"].iloc[0], episode["prompt"].iloc[-1]):
            if prompt not in chosen:
                chosen.append(str(prompt))
    return chosen[:count]


def _check_greedy(ours: Sequence[Any], theirs: Sequence[Sequence[int]], details: dict) -> None:
    """Record in ``details`` how many of the backend's greedy responses (``ours``) equal
    transformers' ``generate`` (``theirs``) token for token; fail naming the first that differs."""
    differing = [i for i, (a, b) in enumerate(zip(ours, theirs, strict=True)) if a.token_ids != b]
    details["fp32_equal"] = f"{len(ours) - len(differing)}/{len(ours)}"
    if differing:
        first = differing[0]
        raise CheckFailed(
            f"greedy tokens differ from transformers' generate on prompt(s) {differing}; "
            f"prompt {first}: backend {list(ours[first].token_ids)[:12]}..., "
            f"generate {list(theirs[first])[:12]}...",
            details,
        )


def _hf_greedy(generator: Any, texts: Sequence[str], max_new_tokens: int) -> list[tuple[int, ...]]:
    """transformers' own greedy ``generate`` of ``generator``'s model, one prompt at a time, ending
    where the backend ends (the tokenizer's end-of-sequence token, kept)."""
    import torch
    from transformers import GenerationConfig

    model, tokenizer = generator.model, generator.tokenizer
    device = next(model.parameters()).device
    config = GenerationConfig(
        do_sample=False,
        max_new_tokens=max_new_tokens,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=generator.pad_id,
    )
    out = []
    model.eval()
    with torch.inference_mode():
        for text in texts:
            ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
            ids = ids.to(device)  # (1, P)
            generated = model.generate(
                input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=config
            )  # (1, P + N)
            out.append(tuple(generated[0, ids.shape[1] :].tolist()))
    return out


def _hf_vision_greedy(
    policy: Any, prompts: Sequence[Any], max_new_tokens: int
) -> list[tuple[int, ...]]:
    """transformers' own greedy ``generate`` of a :class:`VisionPolicy`'s model, one prompt (with
    its screenshots) at a time, ending where the policy ends (end-of-sequence kept), the vision
    placeholders suppressed as the policy suppresses them."""
    import torch
    from transformers import GenerationConfig

    from resail_pipeline.generation.base import vision_token_ids

    tokenizer = policy.tokenizer
    config = GenerationConfig(
        do_sample=False,
        max_new_tokens=max_new_tokens,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        suppress_tokens=list(vision_token_ids(policy.model.config)),  # as the policy does
    )
    out = []
    policy.model.eval()
    with torch.inference_mode():
        for prompt in prompts:
            inputs = policy.model_inputs([prompt.input_ids], [prompt])
            generated = policy.model.generate(**inputs, generation_config=config)  # (1, P + N)
            out.append(tuple(generated[0, len(prompt.input_ids) :].tolist()))
    return out


def _merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``over``'s values in place of its own, mapping by mapping."""
    merged = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and value and isinstance(merged.get(key), dict):
            merged[key] = _merged(merged[key], value)
        else:
            merged[key] = value
    return merged


def _placement_in(log: str) -> tuple[str, str] | None:
    """Where a trainer's log says its rank 0 ran: the device and the process group (``"gloo"``,
    ``"nccl"``, or ``"none"``); ``None`` when the log does not say."""
    import re

    found = re.search(r"rank 0 of \d+ on (\S+), (\w+) process group", log)
    if found is None:
        return None
    return found.group(1), "none" if found.group(2) == "no" else found.group(2)


def _scratch_project(project: Path, scratch: Path) -> None:
    """A copy of the Kedro project made of links (configuration, shipped policies, the package)
    with a data folder of its own."""
    scratch.mkdir(parents=True)
    for name in ("pyproject.toml", "conf", "reference"):
        if not (project / name).exists():
            raise FileNotFoundError(
                f"{project / name}: not found; --project must be the Kedro project"
            )
        (scratch / name).symlink_to((project / name).resolve())
    (scratch / "src").mkdir()
    package = Path(__file__).resolve().parent
    (scratch / "src" / package.name).symlink_to(package)


# ----------------------------------------------------------------------------------------------
# running and reporting


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
        "aitz": check.aitz,
        "smoke": lambda: check.smoke(max(deadline - time.monotonic(), 1.0)),
        "scale": check.scale,
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


def parse_args(argv: Sequence[str] | None = None) -> tuple[CheckOptions, Path]:
    """The options and the report's path from the command line."""
    defaults = CheckOptions()
    parser = argparse.ArgumentParser(
        prog="python -m resail_pipeline.gpu_check", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--device", choices=("cuda", "cpu"), default=defaults.device)
    parser.add_argument(
        "--out",
        type=Path,
        help="the JSON report (default data/08_reporting/gpu_check/<device>.json)",
    )
    parser.add_argument("--project", type=Path, default=Path.cwd(), help="the Kedro project")
    parser.add_argument("--policy", type=Path, default=defaults.policy, help="initial policy")
    parser.add_argument("--tasks", type=int, default=defaults.tasks, help="TextCraft episodes")
    parser.add_argument(
        "--max-steps", type=int, default=defaults.max_steps, help="steps per episode"
    )
    parser.add_argument(
        "--max-new-tokens", type=int, default=defaults.max_new_tokens, help="tokens per response"
    )
    parser.add_argument(
        "--prompts", type=int, default=defaults.prompts, help="prompts compared with generate"
    )
    parser.add_argument("--updates", type=int, default=defaults.updates, help="updates per cycle")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument(
        "--budget-s", type=float, default=defaults.budget_s, help="seconds for all steps"
    )
    parser.add_argument(
        "--skip", action="append", default=[], choices=CHECKS, help="a step not to run"
    )
    parser.add_argument(
        "--work", type=Path, help="keep the scratch files under WORK/<device> (default: temporary)"
    )
    parser.add_argument(
        "--aitz-shape",
        type=Path,
        help="the aitz step's initial policy: a Qwen3-VL of this folder's config.json with random "
        "weights (default: the small model, warm-started)",
    )
    parser.add_argument(
        "--scale-shape",
        type=Path,
        help=f"the scale step's model shape, a folder with config.json (default: {SCALE_SHAPE} "
        "on cuda, the policy's on cpu)",
    )
    parser.add_argument(
        "--scale-words",
        type=int,
        default=defaults.scale_prompt_words,
        help="the scale step's prompt words (one token each)",
    )
    parser.add_argument(
        "--scale-response",
        type=int,
        default=defaults.scale_response_tokens,
        help="the scale step's response tokens",
    )
    args = parser.parse_args(argv)
    try:
        options = CheckOptions(
            device=args.device,
            project=args.project.resolve(),
            policy=args.policy,
            tasks=args.tasks,
            max_steps=args.max_steps,
            max_new_tokens=args.max_new_tokens,
            prompts=args.prompts,
            updates=args.updates,
            seed=args.seed,
            budget_s=args.budget_s,
            work=args.work.resolve() if args.work else None,
            skip=tuple(args.skip),
            aitz_shape=args.aitz_shape,
            scale_shape=args.scale_shape,
            scale_prompt_words=args.scale_words,
            scale_response_tokens=args.scale_response,
        )
    except ValueError as error:
        parser.error(str(error))
    out = (
        args.out or options.project / "data" / "08_reporting" / "gpu_check" / f"{args.device}.json"
    )
    return options, out


def main(argv: Sequence[str] | None = None) -> int:
    """Run the check; write the report; 0 when no step failed."""
    options, out = parse_args(argv)
    if options.device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # before torch looks: the trainer's children too
    # the trainer and Kedro run in subprocesses: they import this package as this process does
    package_root = str(Path(__file__).resolve().parents[1])
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
    sys.exit(main())
