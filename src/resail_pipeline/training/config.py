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
from pathlib import Path
from typing import Annotated, Any

import yaml

from resail_pipeline.config import (
    Config,
    ConfigError,
    Field,
    Number,
    build,
    model_validator,
    one_of,
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


def learns_from_successes_only(method: str) -> bool:
    """Whether ``method`` trains on the corpus's successful trajectories only (RFT, GRPO): on a
    corpus without one it makes no update and publishes its cycle-start policy unchanged."""
    return RESPONSE_SOURCES[method.removesuffix("_resail")] in ("logged", "student_groups")


#: ``single``: one process; ``ddp``: torch DistributedDataParallel; ``deepspeed``: ZeRO
ENGINES = ("auto", "single", "ddp", "deepspeed")
#: ``bf16``: bf16 parameters under DeepSpeed, bf16 autocast otherwise
PRECISIONS = ("auto", "fp32", "bf16")


class ScheduleConfig(Config):
    """Which trajectories each update sees (algorithm 1, line 4)."""

    updates: int = Field(30, ge=1)
    """M: optimiser updates per cycle."""
    trajectories_per_update: int = Field(8, ge=1)
    """|B|: trajectories per update, drawn without replacement from the cycle's corpus."""
    seed: int = Field(0, ge=0)
    """Seeds the batch order, random selection, response sampling and torch (reset every cycle)."""


#: an AdamW beta
Beta = Annotated[Number, Field(ge=0, lt=1)]


class OptimizerConfig(Config):
    """AdamW with a constant learning rate and no warm-up; state reset every cycle."""

    lr: Number = Field(1e-6, gt=0)
    """Learning rate, constant for the whole cycle (paper: 1e-6)."""
    betas: tuple[Beta, Beta] = (0.9, 0.999)
    """AdamW's (beta1, beta2)."""
    eps: Number = Field(1e-8, gt=0)
    """AdamW's epsilon."""
    weight_decay: Number = Field(0.0, ge=0)
    """Decoupled weight decay: 0.0 as every committed run trained with (``conf/paper*`` set
    Megatron-LM's 0.01; AITZ's offline training sets its own)."""
    grad_clip: Number | None = Field(1.0, gt=0)
    """Clip the global gradient norm to this value; null: no clipping."""


class EngineConfig(Config):
    """How the update runs: engine, processes, precision, micro-batching."""

    kind: one_of(*ENGINES) = "auto"
    """``auto`` | ``single`` | ``ddp`` | ``deepspeed``; auto: deepspeed with GPUs, else single
    (ddp under torchrun)."""
    world_size: int | None = Field(None, ge=1)
    """Data-parallel processes over all nodes; null: one per GPU of every node (nodes x GPUs per
    node), or 1 per node without GPUs; over several nodes, it must be that product."""
    nodes: int = Field(1, ge=1)
    """Machines taking part, each running world_size / nodes processes under its own torchrun
    agent."""
    rdzv_endpoint: str | None = None
    """host:port where the nodes' torchrun agents meet (c10d rendezvous); required with
    nodes > 1."""
    launcher: tuple[str, ...] = ()
    """Command prefix that starts one torchrun agent on every node, e.g. ``[srun, --nodes=2,
    --ntasks-per-node=1]`` under SLURM; empty: this machine's agent only (start the others
    alike)."""
    zero_stage: one_of(1, 2, 3) = 2
    """DeepSpeed ZeRO stage."""
    precision: one_of(*PRECISIONS) = "auto"
    """``auto`` | ``fp32`` | ``bf16``; auto: bf16 on GPUs that support it, else fp32."""
    micro_batch_steps: int | None = Field(None, ge=1)
    """Interaction steps per forward/backward on one rank; null: the rank's whole share of U at
    once."""
    chunk_size: int | None = Field(None, ge=1)
    """Response positions per block in the full-vocabulary reductions; null: all at once."""
    gradient_checkpointing: bool = False
    """Recompute decoder activations in backward (saves memory, costs one extra forward)."""

    @model_validator(mode="after")
    def _processes(self) -> EngineConfig:
        if self.kind == "single" and self.world_size not in (None, 1):
            raise ConfigError(
                f"world_size: the single engine runs one process, got {self.world_size}"
            )
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
        return self

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
        whole forward ends, so that the functional forward would hold nearly the whole model
        gathered at once (``tests/training/test_distributed.py`` measures it: docs/training.md),
        which ZeRO-3 is there to avoid."""
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
        return self.replace(kind=kind, world_size=world_size, precision=precision)

    @property
    def processes_per_node(self) -> int:
        """Processes each node's torchrun agent starts (resolved configurations)."""
        return (self.world_size or 1) // self.nodes


class ResponseConfig(Config):
    """Fresh OEL responses (sampled from the current student) and the length of every response."""

    temperature: Number = Field(1.0, gt=0)
    """Sampling temperature; 1.0 samples the policy's own distribution."""
    top_p: Number = Field(1.0, gt=0, le=1)
    """Nucleus sampling mass."""
    top_k: int = Field(-1, ge=-1)
    """Top-k truncation of sampling; -1: off."""
    max_tokens: int = Field(1024, ge=1)
    """Response tokens per step: OEL's max_new_tokens; cached (SDPO) responses are cut to this."""
    batch_size: int = Field(16, ge=1)
    """Rows decoded together when sampling in training (OEL, GRPO)."""
    max_batch_tokens: int | None = Field(None, ge=1)
    """Cache tokens a decode batch may hold, counting each row's prompt and max_tokens (null: no
    bound): what keeps in-loop sampling beside the student, the teacher and the optimizer state
    within a GPU's memory where histories are long."""
    cuda_graphs: bool | one_of("auto") = "auto"
    """In-loop sampling decodes each batch in steps of one shape over its cache allocated whole at
    prefill, captured once per batch in a CUDA graph and replayed (the generator's
    ``cuda_graphs``): true, false, or auto (on a GPU). The same tokens as without, to rounding;
    on a CPU true runs the same steps without a graph."""

    @model_validator(mode="after")
    def _samples(self) -> ResponseConfig:
        self.sampling_params(seed=0)  # top_k as every sampler checks it
        return self

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


class ProbeConfig(Config):
    """The PI-sensitivity probe (appendix D.3): a diagnostic, off by default.

    When enabled, the trainer evaluates the current student on the fixed probe set at the cycle
    start and after every update; the set itself (logged steps and the initial model's support)
    is built once, from the initial policy's reference episodes, with ``num_trajectories`` and
    ``top_k``.
    """

    enabled: bool = False
    """Evaluate the probe at the cycle start (update 0) and after every update."""
    num_trajectories: int = Field(16, ge=1)
    """Logged trajectories in the probe set (paper: 16); read where the set is built."""
    top_k: int = Field(20, ge=1)
    """Support size: the initial model's ordinary-view top-K at every response position
    (paper: 20)."""
    micro_batch_steps: int = Field(8, ge=1)
    """Probe steps per no-grad forward on one rank."""


class GrpoConfig(Config):
    """Offline GRPO (appendix B.4): groups of sampled responses at every successful logged step,
    rewarded by exact action match, verl's clipped surrogate and ``low_var_kl`` to the initial
    policy. Sampling follows ``responses`` (temperature, length)."""

    samples: int = Field(8, ge=2)
    """Responses per logged step (the group); advantages need at least 2."""
    clip_low: Number = Field(0.2, ge=0, lt=1)
    """PPO ratios are clipped to [1 - clip_low, 1 + clip_high]."""
    clip_high: Number = Field(0.28, ge=0)
    """See ``clip_low``."""
    kl_beta: Number = Field(0.01, ge=0)
    """Weight of low_var_kl to the frozen initial policy (not part of rewards or advantages)."""


class RunPaths(Config):
    """Where the inputs are described and the outputs go."""

    manifest: str = ""
    """The input manifest (YAML): cycle-start checkpoint and Parquet inputs with their sha256."""
    checkpoint: str = ""
    """The final student's Hugging Face directory; written whole or not at all."""
    run_dir: str = ""
    """Directory for train_metrics.parquet, selected_steps.parquet, probe.parquet and the log."""
    policy_name: str = Field("policy", min_length=1)
    """The new checkpoint's name; its policy_id is ``{name}@{sha256[:12]}``."""
    cycle: int = Field(1, ge=0)
    """The cycle r this run trains (pi_r -> pi_{r+1}); recorded in the checkpoint's manifest."""
    snapshots: str = ""
    """Folder of the run's snapshots, from which a rerun of a killed run continues (kept across
    reruns; removed once the checkpoint is published); empty: none are taken."""

    def check_set(self) -> None:
        """Raise unless the three paths a run needs are given."""
        for name in ("manifest", "checkpoint", "run_dir"):
            if not getattr(self, name):
                raise ConfigError(f"run.{name}: required to run the trainer")


class TrainConfig(Config):
    """Everything one cycle of training needs, grouped as in the YAML file."""

    method: one_of(*METHODS) = "oel_resail"
    """The training method (table 1)."""
    resail: ResailConfig = ResailConfig()
    """The ablation switches (selection, rho, balancing, retention, lambda, top_k); the parents
    use only top_k (``ResailConfig.off``)."""
    schedule: ScheduleConfig = ScheduleConfig()
    """Updates, trajectories per update, seed."""
    optimizer: OptimizerConfig = OptimizerConfig()
    """AdamW's settings."""
    engine: EngineConfig = EngineConfig()
    """Engine, world size, precision, micro-batching."""
    responses: ResponseConfig = ResponseConfig()
    """OEL's sampling and the response length."""
    probe: ProbeConfig = ProbeConfig()
    """The PI-sensitivity probe (off by default)."""
    grpo: GrpoConfig = GrpoConfig()
    """Offline GRPO's groups, clipping and KL weight (read by method grpo only)."""
    run: RunPaths = RunPaths()
    """Input manifest and output paths."""
    compile: bool | one_of("auto") = False
    """The forward of training, scoring and in-loop sampling compiled with torch.compile: true,
    false, or auto (compiled on a CPU with a C++ compiler; YAML reads on/off as true/false).
    Eager unless asked: conf/base asks for auto; direct library callers and unit tests stay eager
    so that a tiny run does not pay the compile."""
    snapshot_every: int = Field(1, ge=1)
    """Updates between snapshots of the run (student, AdamW, records) in run.snapshots; the last
    update's is always taken (training/snapshots.py)."""

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
        return learns_from_successes_only(self.method)

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
        return self.replace(engine=engine)
