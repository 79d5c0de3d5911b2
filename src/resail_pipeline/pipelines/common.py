"""What every pipeline shares: the run's parameters, the policy a node acts with, namespacing.

Every pipeline folder defines ``base_pipeline()`` over un-namespaced names (``policy``,
``trajectories``, ``steps``, ...). :func:`in_cycle` places it in cycle ``r``: its datasets become
``cycle_<r>.<name>``, the input ``policy`` is the previous cycle's ``cycle_<r-1>.checkpoint``, the
fixed Experience, the probe set and the initial policy stay the shared ``cycle_0.experience``,
``cycle_0.probe_set`` and ``cycle_0.checkpoint``, and parameters stay shared
(``params:collect`` is the same for every cycle). The cycle a node works for is read from its
policy's manifest (cycle ``r`` starts from the checkpoint of cycle ``r - 1``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import pandas as pd
from kedro.pipeline import Pipeline

from resail_pipeline.checkpoints import CheckpointInfo
from resail_pipeline.config import (
    Config,
    ConfigError,
    Field,
    FolderName,
    build,
    model_validator,
    one_of,
)
from resail_pipeline.devices import visible_devices
from resail_pipeline.envs import ENV_REGISTRY, Environment, check_env_options, make_env
from resail_pipeline.generation import (
    GENERATOR_REGISTRY,
    RUN_SUPPLIED_OPTIONS,
    Generator,
    check_options,
    default_option,
    make_generator,
)
from resail_pipeline.generation.sharded import ShardedGenerator
from resail_pipeline.generation.transformers_backend import (
    resolved_cuda_graphs,
    resolved_settings,
)
from resail_pipeline.io import fresh_staging_path, keyed_staging_path
from resail_pipeline.journal import EpisodeJournal, finished_journals, journal_key
from resail_pipeline.training.config import METHODS, REACT

#: The suffix of a rollout's episode journal in the staging folder (:meth:`RunConfig.journal`).
JOURNAL_SUFFIX = ".episodes"
#: The input name under which every base pipeline receives the cycle-start policy.
POLICY = "policy"
#: The catalog's folder of what every experiment of a data folder shares: cycle 0 (initial
#: policy, Experience, probe set, its evaluation) and the shared cycle-1 corpus.
SHARED_FOLDER = "shared"
#: Datasets shared by every cycle of an experiment, never namespaced: the fixed Experience, the
#: probe set and the initial policy (GRPO's frozen KL reference).
SHARED_INPUTS = {
    "experience": "cycle_0.experience",
    "probe_set": "cycle_0.probe_set",
    "initial_policy": "cycle_0.checkpoint",
}


def cycle_namespace(cycle: int) -> str:
    return f"cycle_{cycle}"


def in_cycle(base: Pipeline, cycle: int) -> Pipeline:
    """``base`` namespaced for cycle ``cycle``; ``policy`` maps to the previous cycle's checkpoint."""
    free_inputs = base.inputs()
    mapped = {name: target for name, target in SHARED_INPUTS.items() if name in free_inputs}
    if POLICY in free_inputs:
        mapped[POLICY] = f"{cycle_namespace(cycle - 1)}.checkpoint"
    params = {name for name in base.all_inputs() if name.startswith("params:")}
    return Pipeline(
        base,
        namespace=cycle_namespace(cycle),
        inputs=mapped or None,
        parameters=params or None,
    )


class RunConfig(Config):
    """``params:run``: what every node of a run shares."""

    env: one_of(*sorted(ENV_REGISTRY))
    """Environment registry name."""
    method: one_of(*METHODS)
    """Training method (selects the objective; also names the experiment by default)."""
    experiment: FolderName | None = Field(None, min_length=1)
    """Folder of this run's datasets under ``data/<layer>/<env>/``; null: the method's name."""
    seed: int = Field(0, ge=0)
    """Seeds task sampling and collection."""
    backend: one_of(*sorted(GENERATOR_REGISTRY)) = "transformers"
    """Generation backend: ``transformers`` (CPU or GPU) or ``vllm`` (GPU; the ``gpu`` extra)."""
    generation: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Backend name -> options of its ``from_checkpoint`` (transformers: ``dtype``, ``device`` and
    :class:`~resail_pipeline.generation.transformers_backend.TransformersGenerator`'s own, such as
    ``batch_size``, ``max_batch_tokens``, ``prefill_tokens``, ``prefix_reuse``, ``compile``,
    ``cuda_graphs``; vllm:
    ``vllm.EngineArgs`` fields); only the chosen backend's are used, so that an environment that
    switches backend never hands one backend's options to the other."""
    env_options: dict[str, Any] = Field(default_factory=dict)
    """Options of the environment adapter (e.g. ``max_steps``, 30 by default as in the paper;
    ALFWorld's ``data_path``)."""
    staging_dir: str = "data/06_models/.staging"
    """Where nodes stage model directories for the catalog to publish: on the catalog's
    filesystem (a publish is a rename), one folder per data folder, so that a run clears only its
    own stale staging."""
    shards: Annotated[int, Field(ge=1)] | one_of("auto") = 1
    """Generators per node, each in its own process (``generation.sharded``): ``auto`` is one per
    visible GPU (none: one, in the node's own process); an integer > 1 starts that many."""

    @model_validator(mode="before")
    @classmethod
    def _defaults(cls, data: Any) -> Any:
        """The experiment named after the method where none is given; ``generation:`` left empty
        in YAML is no options; each backend's options under its name, as a mapping."""
        if not isinstance(data, Mapping):
            return data
        data = dict(data)
        if data.get("experiment") is None and "method" in data:
            data["experiment"] = data["method"]
        if "generation" in data and data["generation"] is None:
            data["generation"] = {}
        if isinstance(data.get("generation"), Mapping):
            for backend, options in data["generation"].items():
                if backend not in GENERATOR_REGISTRY:
                    raise ConfigError(
                        f"generation: {backend!r} is not a generation backend; give each "
                        f"backend's options under its name, one of {sorted(GENERATOR_REGISTRY)}"
                    )
                if not isinstance(options, dict):
                    raise ConfigError(f"generation.{backend}: expected a mapping, got {options!r}")
        return data

    @model_validator(mode="after")
    def _runnable(self) -> RunConfig:
        if self.method == REACT:
            raise ConfigError(
                "method: react is the initial policy, never trained: its results are "
                "cycle_0's evaluation, which every run writes and the report draws flat across "
                "cycles (`kedro run --pipelines=report`)"
            )
        if self.experiment == SHARED_FOLDER:
            raise ConfigError(
                f"experiment: {SHARED_FOLDER!r} is the folder every experiment shares (cycle 0 and "
                "the cycle-1 corpus); name the experiment otherwise"
            )
        check_env_options(self.env, self.env_options)
        if Path(self.staging_dir).exists() and not Path(self.staging_dir).is_dir():
            raise ConfigError(f"staging_dir: {self.staging_dir} is a file; give a folder")
        for option in RUN_SUPPLIED_OPTIONS:
            if option in self.generation_options:
                raise ConfigError(
                    f"generation.{self.backend}.{option}: set by the run itself (the policy's id "
                    "from its manifest); remove it"
                )
        check_options(self.backend, self.generation_options, f"generation.{self.backend}")
        return self

    @property
    def generation_options(self) -> dict[str, Any]:
        """The chosen backend's options (``run.generation.<backend>``)."""
        return dict(self.generation.get(self.backend) or {})

    def generation_record(self) -> str:
        """How this run's generator computes, as an evaluation records it beside its machine:
        the backend and, for transformers, the dtype, whether the forward is compiled and whether
        it decodes in CUDA graphs on this machine (bf16 rounding differs between processors; fp32
        eager is the portable setting)."""
        options = self.generation_options
        if self.backend == "transformers":
            dtype, compiled = resolved_settings(options)
            mode = "compiled" if compiled else "eager"
            graphs = ", CUDA graphs" if resolved_cuda_graphs(options) else ""
            return f"transformers, {str(dtype).removeprefix('torch.')}, {mode}{graphs}"
        # the engine's dtype where the options leave it to the backend's default
        dtype = options.get("dtype", default_option(self.backend, "dtype"))
        return f"{self.backend}, {dtype}"

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> RunConfig:
        return build(cls, params, "run")

    def environment(self, *splits: str) -> Callable[[], Environment]:
        """A factory of fresh environments (one per episode in a batched rollout), checked first:
        one is built and asked for each split's tasks, so missing data (ALFWorld) or an unknown
        split fails here, before any model is loaded."""
        factory = partial(make_env, self.env, **self.env_options)
        try:
            env = factory()
        except (TypeError, ValueError) as error:  # an option value the adapter refuses
            raise ConfigError(f"run.env_options.{error}") from None
        for split in splits:
            env.task_ids(split)
        return factory

    @property
    def workers(self) -> int:
        """Worker processes a node's generation and scoring split over: ``shards`` resolved on
        this machine (``auto``: one per visible GPU); 0 where the work stays in one process."""
        if self.shards == "auto":
            return len(visible_devices())  # none without a GPU
        return self.shards if self.shards > 1 else 0

    def generator(self, policy: CheckpointInfo) -> Generator:
        """``policy``'s generator: the backend in this process, or ``shards`` of it in their own
        processes (``auto`` on a GPU node: one per GPU, so that this process holds no CUDA
        context while the trainer runs)."""
        workers = self.workers
        if not workers:
            return make_generator(
                self.backend, policy.path, policy_id=policy.policy_id, **self.generation_options
            )
        return ShardedGenerator(
            self.backend,
            policy.path,
            shards=workers,
            policy_id=policy.policy_id,
            **self.generation_options,
        )

    def staging_path(self, label: str) -> Path:
        """A fresh directory name in the staging area (not created) for this experiment's
        ``label``; what a killed run of the same label left there is removed first (at the paper's
        scale each is a whole model)."""
        return fresh_staging_path(self.staging_dir, f"{self.experiment}-{label}-")

    def journal(self, label: str, **settings: Any) -> EpisodeJournal:
        """The episode journal of this experiment's rollout ``label`` under ``settings``
        (:mod:`resail_pipeline.journal`): the same folder for every rerun with the same settings
        and environment, so that one continues where a killed run stopped; a journal the label
        kept under other settings is removed first."""
        key = journal_key(env=self.env, env_options=self.env_options, **settings)
        prefix = f"{self.experiment}-{label}-"
        return EpisodeJournal(keyed_staging_path(self.staging_dir, prefix, key, JOURNAL_SUFFIX))

    def finished_journals(self) -> dict[Path, str]:
        """``folder -> token`` of this experiment's finished journals
        (:func:`~resail_pipeline.journal.finished_journals`)."""
        return finished_journals(self.staging_dir, f"{self.experiment}-", JOURNAL_SUFFIX)

    def snapshots_path(self, label: str) -> Path:
        """The folder (not created) where this experiment's training run ``label`` keeps its
        snapshots: the same for every rerun, so that one continues where a killed run stopped
        (not matched by :meth:`staging_path`'s clean-up of ``label``)."""
        return Path(self.staging_dir) / f"{self.experiment}-{label}.snapshots"


def policy_info(policy: pd.DataFrame) -> CheckpointInfo:
    """The checkpoint a node acts with, from its one-row manifest."""
    return CheckpointInfo.from_frame(policy, source="policy")
