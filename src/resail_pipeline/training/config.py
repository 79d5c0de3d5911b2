"""The trainer's configuration: one typed object, read from and written to YAML, checked up front.

Every field is validated when the object is built, before any model or data is loaded; an error
names the offending field by its YAML path (``resail.rho``, ``engine.kind``, ...). The resolved
configuration (``auto`` replaced by what the hardware gives) is what the launcher writes beside
the run and what the trainer reads.

Defaults are the paper's (appendix B.3-B.4, table 4 for TextCraft): AdamW with a constant
learning rate of 1e-6 and no warm-up, 30 updates of 8 trajectories, ``rho = 0.25``,
``lambda = 1.0``, Top-20 plus tail. The paper does not state AdamW's betas, epsilon, weight decay
or the clipping norm: betas, epsilon and clipping here are Megatron-LM's (its training framework);
weight decay is 0.0, what conf/base sets and every committed run trained with (the paper-scale
configurations, conf/paper*, set Megatron-LM's 0.01).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from resail_pipeline.config import (
    ConfigError,
    build,
    check_bool,
    check_choice,
    check_int,
    check_number,
    check_sections,
    to_data,
)
from resail_pipeline.generation import SamplingParams
from resail_pipeline.io import atomic_path
from resail_pipeline.objectives import ResailConfig

__all__ = [
    "ENGINES",
    "METHODS",
    "PRECISIONS",
    "REACT",
    "RESPONSE_SOURCES",
    "EngineConfig",
    "GrpoConfig",
    "OptimizerConfig",
    "ProbeConfig",
    "ResponseConfig",
    "RunPaths",
    "ScheduleConfig",
    "TrainConfig",
]

#: training methods (table 1): the baselines of appendix B.4, the two distillation parents and each
#: with the ReSAIL plug-in
METHODS = ("react", "rft", "grpo", "epd", "oel", "sdpo", "oel_resail", "sdpo_resail")
#: the method that never trains: the initial policy, reported from cycle 0's evaluation
REACT = "react"
#: where each method's training responses come from (table 7), keyed by the parent method
RESPONSE_SOURCES = {
    "react": None,  # the initial policy, never updated
    "rft": "logged",  # the successful logged responses
    "grpo": "student_groups",  # groups sampled from the current student at successful steps
    "epd": "teacher_cache",  # the cycle-start teacher's privileged responses, cached
    "sdpo": "student_cache",  # the cycle-start student's ordinary responses, cached
    "oel": "student",  # one fresh sample of the current student per step
}
#: ``single``: one process; ``ddp``: torch DistributedDataParallel; ``deepspeed``: ZeRO
ENGINES = ("auto", "single", "ddp", "deepspeed")
#: ``bf16``: bf16 parameters under DeepSpeed, bf16 autocast otherwise
PRECISIONS = ("auto", "fp32", "bf16")


@dataclass(frozen=True)
class ScheduleConfig:
    """Which trajectories each update sees (algorithm 1, line 4)."""

    # M: optimiser updates per cycle
    updates: int = 30
    # |B|: trajectories per update, drawn without replacement from the cycle's corpus
    trajectories_per_update: int = 8
    # seeds the batch order, random selection, response sampling and torch (reset every cycle)
    seed: int = 0

    def __post_init__(self) -> None:
        check_int("updates", self.updates, low=1)
        check_int("trajectories_per_update", self.trajectories_per_update, low=1)
        check_int("seed", self.seed, low=0)


@dataclass(frozen=True)
class OptimizerConfig:
    """AdamW with a constant learning rate and no warm-up; state reset every cycle."""

    # learning rate, constant for the whole cycle (paper: 1e-6)
    lr: float = 1e-6
    # AdamW (beta1, beta2), each in [0, 1)
    betas: tuple[float, float] = (0.9, 0.999)
    # AdamW epsilon, > 0
    eps: float = 1e-8
    # decoupled weight decay, >= 0; 0.0 as in conf/base/parameters_train.yml, which every committed
    # run trained with (conf/paper* set 0.01; AITZ's offline training sets its own)
    weight_decay: float = 0.0
    # clip the global gradient norm to this value; None: no clipping
    grad_clip: float | None = 1.0

    def __post_init__(self) -> None:
        check_number("lr", self.lr, low=0, low_open=True)
        betas = tuple(self.betas) if isinstance(self.betas, (list, tuple)) else ()
        if len(betas) != 2:
            raise ConfigError(f"betas: must be two numbers in [0, 1), got {self.betas!r}")
        for i, beta in enumerate(betas):
            check_number(f"betas[{i}]", beta, low=0, high=1, high_open=True)
        object.__setattr__(self, "betas", (float(betas[0]), float(betas[1])))
        check_number("eps", self.eps, low=0, low_open=True)
        check_number("weight_decay", self.weight_decay, low=0)
        check_number("grad_clip", self.grad_clip, low=0, low_open=True, optional=True)


@dataclass(frozen=True)
class EngineConfig:
    """How the update runs: engine, processes, precision, micro-batching."""

    # auto | single | ddp | deepspeed; auto: deepspeed with GPUs, else single (ddp under torchrun)
    kind: str = "auto"
    # data-parallel processes over all nodes; None: one per GPU of every node (nodes x GPUs per
    # node), or 1 per node without GPUs; over several nodes, it must be that product
    world_size: int | None = None
    # machines taking part, each running world_size / nodes processes under its own torchrun agent
    nodes: int = 1
    # host:port where the nodes' torchrun agents meet (c10d rendezvous); required with nodes > 1
    rdzv_endpoint: str | None = None
    # command prefix that starts one torchrun agent on every node, e.g. [srun, --nodes=2,
    # --ntasks-per-node=1] under SLURM; empty: this machine's agent only (start the others alike)
    launcher: tuple[str, ...] = ()
    # DeepSpeed ZeRO stage: 1, 2 (default) or 3
    zero_stage: int = 2
    # auto | fp32 | bf16; auto: bf16 on GPUs that support it, else fp32
    precision: str = "auto"
    # interaction steps per forward/backward on one rank; None: the rank's whole share of U at once
    micro_batch_steps: int | None = None
    # response positions per block in the full-vocabulary reductions; None: all at once
    chunk_size: int | None = None
    # recompute decoder activations in backward (saves memory, costs one extra forward)
    gradient_checkpointing: bool = False

    def __post_init__(self) -> None:
        check_choice("kind", self.kind, ENGINES)
        check_int("world_size", self.world_size, low=1, optional=True)
        if self.kind == "single" and self.world_size not in (None, 1):
            raise ConfigError(
                f"world_size: the single engine runs one process, got {self.world_size}"
            )
        check_int("nodes", self.nodes, low=1)
        if self.nodes > 1:
            if self.kind == "single":
                raise ConfigError(f"nodes: the single engine runs one process, got {self.nodes}")
            host, _, port = str(self.rdzv_endpoint or "").rpartition(":")
            if not host or not port.isdigit():
                raise ConfigError(
                    f"rdzv_endpoint: {self.nodes} nodes meet at a host:port, got "
                    f"{self.rdzv_endpoint!r}"
                )
            if self.world_size is not None and self.world_size % self.nodes:
                raise ConfigError(
                    f"world_size: {self.world_size} processes do not split over {self.nodes} nodes"
                )
        launcher = self.launcher
        if isinstance(launcher, list):
            launcher = tuple(launcher)
            object.__setattr__(self, "launcher", launcher)
        if not isinstance(launcher, tuple) or not all(isinstance(a, str) for a in launcher):
            raise ConfigError(f"launcher: must be a list of strings, got {self.launcher!r}")
        check_choice("zero_stage", self.zero_stage, (1, 2, 3))
        check_choice("precision", self.precision, PRECISIONS)
        check_int("micro_batch_steps", self.micro_batch_steps, low=1, optional=True)
        check_int("chunk_size", self.chunk_size, low=1, optional=True)
        check_bool("gradient_checkpointing", self.gradient_checkpointing)

    @property
    def bf16_parameters(self) -> bool:
        """Whether the models are held in bf16 themselves (DeepSpeed in bf16); every other engine
        keeps fp32 parameters and computes under bf16 autocast where ``precision`` is bf16."""
        return self.kind == "deepspeed" and self.precision == "bf16"

    @property
    def functional_student(self) -> bool:
        """Whether the student runs the project's functional forward (which reads every layer's
        weights itself) rather than the model's own modules. Not under activation checkpointing,
        which hooks the model's own layers, and not under ZeRO-3: DeepSpeed gathers a partitioned
        weight when a module's forward runs, or, read outside one, on access, keeping it until the
        whole forward ends, so that the functional forward would hold the whole model gathered
        (measured with DeepSpeed 0.19.8), which ZeRO-3 is there to avoid."""
        zero3 = self.kind == "deepspeed" and self.zero_stage == 3
        return not (self.gradient_checkpointing or zero3)

    @property
    def autocast_precision(self) -> str:
        """The autocast of forwards: none (``fp32``) where the parameters are bf16 already."""
        return "fp32" if self.bf16_parameters else self.precision

    @property
    def resolved(self) -> bool:
        """Whether ``auto`` has been replaced everywhere."""
        return self.kind != "auto" and self.precision != "auto" and self.world_size is not None

    def resolve(self, *, num_gpus: int, bf16_supported: bool) -> EngineConfig:
        """``auto`` replaced by what the hardware gives.

        Args:
            num_gpus: CUDA devices visible to the launcher (0 on a CPU-only machine).
            bf16_supported: whether those devices compute in bf16.
        """
        kind = self.kind
        if kind == "auto":
            kind = "deepspeed" if num_gpus else ("ddp" if (self.world_size or 1) > 1 else "single")
        world_size = self.world_size or (max(num_gpus, 1) * self.nodes if kind != "single" else 1)
        precision = self.precision
        if precision == "auto":
            precision = "bf16" if num_gpus and bf16_supported else "fp32"
        per_node = world_size // self.nodes
        if num_gpus and kind != "single" and per_node > num_gpus:
            raise ConfigError(
                f"world_size: {per_node} processes per node but only {num_gpus} GPU(s) here"
            )
        if num_gpus and self.nodes > 1 and per_node != num_gpus:
            # a world size written for one node would leave half of every node's GPUs idle
            raise ConfigError(
                f"world_size: {world_size} over {self.nodes} nodes is {per_node} processes per "
                f"node, but each node has {num_gpus} GPU(s); leave it null (nodes x GPUs per "
                "node)"
            )
        return replace(self, kind=kind, world_size=world_size, precision=precision)

    @property
    def processes_per_node(self) -> int:
        """Processes each node's torchrun agent starts (resolved configurations)."""
        return (self.world_size or 1) // self.nodes


@dataclass(frozen=True)
class ResponseConfig:
    """Fresh OEL responses (sampled from the current student) and the length of every response."""

    # sampling temperature (> 0); 1.0 samples the policy's own distribution
    temperature: float = 1.0
    # nucleus sampling mass in (0, 1]
    top_p: float = 1.0
    # top-k truncation of sampling; -1: off
    top_k: int = -1
    # response tokens per step: OEL's max_new_tokens; cached (SDPO) responses are cut to this
    max_tokens: int = 1024
    # rows decoded together when sampling in training (OEL, GRPO)
    batch_size: int = 16
    # cache tokens a decode batch may hold, counting each row's prompt and max_tokens (None: no
    # bound): what keeps in-loop sampling beside the student, the teacher and the optimizer state
    # within a GPU's memory where histories are long
    max_batch_tokens: int | None = None

    def __post_init__(self) -> None:
        check_int("max_batch_tokens", self.max_batch_tokens, low=1, optional=True)
        check_number("temperature", self.temperature, low=0, low_open=True)  # sampled
        check_int("max_tokens", self.max_tokens, low=1)
        check_int("batch_size", self.batch_size, low=1)
        self.sampling_params(seed=0)  # top_p and top_k, checked as every sampler checks them

    def sampling_params(self, seed: int) -> SamplingParams:
        """One response per prompt with these settings."""
        return SamplingParams(
            temperature=float(self.temperature),
            top_p=float(self.top_p),
            top_k=self.top_k,
            max_new_tokens=self.max_tokens,
            seed=seed,
            n=1,
        )


@dataclass(frozen=True)
class ProbeConfig:
    """The PI-sensitivity probe (appendix D.3): a diagnostic, off by default.

    When enabled, the trainer evaluates the current student on the fixed probe set at the cycle
    start and after every update; the set itself (logged steps and the initial model's support)
    is built once, from the initial policy's reference episodes, with ``num_trajectories`` and
    ``top_k``.
    """

    # evaluate the probe at the cycle start (update 0) and after every update
    enabled: bool = False
    # logged trajectories in the probe set (paper: 16); read where the set is built
    num_trajectories: int = 16
    # support size: the initial model's ordinary-view top-K at every response position (paper: 20)
    top_k: int = 20
    # probe steps per no-grad forward on one rank
    micro_batch_steps: int = 8

    def __post_init__(self) -> None:
        check_bool("enabled", self.enabled)
        check_int("num_trajectories", self.num_trajectories, low=1)
        check_int("top_k", self.top_k, low=1)
        check_int("micro_batch_steps", self.micro_batch_steps, low=1)


@dataclass(frozen=True)
class GrpoConfig:
    """Offline GRPO (appendix B.4): groups of sampled responses at every successful logged step,
    rewarded by exact action match, verl's clipped surrogate and ``low_var_kl`` to the initial
    policy. Sampling follows ``responses`` (temperature, length)."""

    # responses per logged step (the group); advantages need at least 2
    samples: int = 8
    # PPO ratios are clipped to [1 - clip_low, 1 + clip_high]
    clip_low: float = 0.2
    clip_high: float = 0.28
    # weight of low_var_kl to the frozen initial policy (not part of rewards or advantages)
    kl_beta: float = 0.01

    def __post_init__(self) -> None:
        check_int("samples", self.samples, low=2)  # advantages need a group of two
        check_number("clip_low", self.clip_low, low=0, high=1, high_open=True)
        check_number("clip_high", self.clip_high, low=0)
        check_number("kl_beta", self.kl_beta, low=0)


@dataclass(frozen=True)
class RunPaths:
    """Where the inputs are described and the outputs go."""

    # the input manifest (YAML): cycle-start checkpoint and Parquet inputs with their sha256
    manifest: str = ""
    # the final student's Hugging Face directory; written whole or not at all
    checkpoint: str = ""
    # directory for train_metrics.parquet, selected_steps.parquet, probe.parquet and the log
    run_dir: str = ""
    # the new checkpoint's name; its policy_id is "{name}@{sha256[:12]}"
    policy_name: str = "policy"
    # the cycle r this run trains (pi_r -> pi_{r+1}); recorded in the checkpoint's manifest
    cycle: int = 1
    # folder of the run's snapshots, from which a rerun of a killed run continues (kept across
    # reruns; removed once the checkpoint is published); empty: none are taken
    snapshots: str = ""

    def __post_init__(self) -> None:
        for name in ("manifest", "checkpoint", "run_dir", "snapshots"):
            if not isinstance(getattr(self, name), str):
                raise ConfigError(f"{name}: must be a path string, got {getattr(self, name)!r}")
        if not isinstance(self.policy_name, str) or not self.policy_name:
            raise ConfigError(f"policy_name: must be a non-empty string, got {self.policy_name!r}")
        check_int("cycle", self.cycle, low=0)

    def check_set(self) -> None:
        """Raise unless the three paths a run needs are given."""
        for name in ("manifest", "checkpoint", "run_dir"):
            if not getattr(self, name):
                raise ConfigError(f"run.{name}: required to run the trainer")


@dataclass(frozen=True)
class TrainConfig:
    """Everything one cycle of training needs, grouped as in the YAML file."""

    # one of METHODS
    method: str = "oel_resail"
    # the ablation switches (selection, rho, balancing, retention, lambda, top_k); the parents
    # use only top_k (ResailConfig.off)
    resail: ResailConfig = field(default_factory=ResailConfig)
    # updates, trajectories per update, seed
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    # AdamW settings
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    # engine, world size, precision, micro-batching
    engine: EngineConfig = field(default_factory=EngineConfig)
    # OEL sampling and response length
    responses: ResponseConfig = field(default_factory=ResponseConfig)
    # the PI-sensitivity probe (off by default)
    probe: ProbeConfig = field(default_factory=ProbeConfig)
    # offline GRPO's groups, clipping and KL weight (read by method grpo only)
    grpo: GrpoConfig = field(default_factory=GrpoConfig)
    # input manifest and output paths
    run: RunPaths = field(default_factory=RunPaths)
    # the forward of training, scoring and in-loop sampling compiled with torch.compile: true,
    # false, or auto (compiled on a CPU with a C++ compiler; YAML reads on/off as true/false).
    # Eager unless asked: conf/base asks for auto; direct library callers and unit tests stay
    # eager so that a tiny run does not pay the compile
    compile: bool | str = False
    # updates between snapshots of the run (student, AdamW, records) in run.snapshots; the last
    # update's is always taken (training/snapshots.py)
    snapshot_every: int = 1

    def __post_init__(self) -> None:
        check_choice("method", self.method, METHODS)
        check_int("snapshot_every", self.snapshot_every, low=1)
        if self.compile not in (True, False, "auto"):
            raise ConfigError(f"compile: must be true, false or auto, got {self.compile!r}")
        check_sections(self)

    # ------------------------------------------------------------------------------------------
    # what the method means

    @property
    def parent(self) -> str:
        """The method without the plug-in: ``oel_resail`` -> ``oel``; a baseline is its own."""
        return self.method.removesuffix("_resail")

    @property
    def uses_resail(self) -> bool:
        return self.method.endswith("_resail")

    @property
    def trains(self) -> bool:
        """Whether the method updates the policy at all (ReAct does not)."""
        return self.parent != REACT

    @property
    def distills(self) -> bool:
        """OEL, offline SDPO and their ReSAIL versions: distillation from the privileged teacher."""
        return self.parent in ("oel", "sdpo")

    @property
    def response_source(self) -> str | None:
        """Where the training responses come from (table 7; see :data:`RESPONSE_SOURCES`)."""
        return RESPONSE_SOURCES[self.parent]

    @property
    def uses_cached_responses(self) -> bool:
        """Offline SDPO and EPD train on responses sampled once at cycle start (``responses``)."""
        return self.response_source in ("student_cache", "teacher_cache")

    @property
    def cached_response_view(self) -> str:
        """The view cached responses are sampled in: EPD's teacher sees the summary (privileged),
        offline SDPO's student does not (ordinary)."""
        return "privileged" if self.response_source == "teacher_cache" else "ordinary"

    @property
    def samples_responses(self) -> bool:
        """OEL and GRPO sample from the current student during training."""
        return self.response_source in ("student", "student_groups")

    @property
    def successes_only(self) -> bool:
        """RFT and GRPO train only on the successful trajectories of the corpus."""
        return self.response_source in ("logged", "student_groups")

    def objective(self) -> ResailConfig:
        """The switches the loss uses: the configured ones, or the parent's (``ResailConfig.off``)."""
        return self.resail if self.uses_resail else ResailConfig.off(self.resail.top_k)

    # ------------------------------------------------------------------------------------------
    # YAML

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], path: str = "") -> TrainConfig:
        """Build from nested plain data (YAML, Kedro parameters); unknown keys are errors, named
        under ``path`` (``train``)."""
        return build(cls, data, path)

    def to_dict(self) -> dict[str, Any]:
        """Nested plain data that :meth:`from_dict` reads back to an equal object."""
        return to_data(self)

    @classmethod
    def from_yaml(cls, path: str | Path) -> TrainConfig:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"{path}: no such configuration file")
        try:
            data = yaml.safe_load(path.read_text())
        except yaml.YAMLError as error:
            raise ConfigError(f"{path}: not valid YAML ({error})") from None
        try:
            return cls.from_dict(data or {})
        except ConfigError as error:
            raise ConfigError(f"{path}: {error}") from None

    def to_yaml(self, path: str | Path) -> Path:
        """Write atomically; returns the path."""
        path = Path(path)
        with atomic_path(path) as tmp:
            tmp.write_text(yaml.safe_dump(self.to_dict(), sort_keys=False))
        return path

    # ------------------------------------------------------------------------------------------
    # resolution

    def resolve(self, *, num_gpus: int, bf16_supported: bool) -> TrainConfig:
        """``engine`` with ``auto`` replaced by what the hardware gives (see :meth:`EngineConfig.resolve`)."""
        try:
            engine = self.engine.resolve(num_gpus=num_gpus, bf16_supported=bf16_supported)
        except ConfigError as error:
            raise ConfigError(f"engine.{error}") from None
        return replace(self, engine=engine)
