"""The AITZ experiment's configuration (``params:aitz``), checked as every configuration is."""

from __future__ import annotations

from typing import Any

from resail_pipeline.config import Config, ConfigError, Field, Number, model_validator, one_of
from resail_pipeline.generation import GENERATOR_REGISTRY, check_options
from resail_pipeline.generation.transformers_backend import DTYPES
from resail_pipeline.gui.offline import OfflineConfig
from resail_pipeline.gui.synthetic import SyntheticConfig

__all__ = [
    "SOURCES",
    "AitzConfig",
    "DataConfig",
    "GenerationConfig",
    "InitialConfig",
    "WarmStartConfig",
]

#: where the episodes come from: written here by the generator, or a copy of the release
SOURCES = ("synthetic", "release")


class DataConfig(Config):
    """Where the episodes are (``<root>/<split>/<category>/<episode_id>/...``)."""

    root: str = "data/01_raw/aitz-synthetic"
    """The folder of the episodes, one subfolder per split."""
    source: one_of(*SOURCES) = "synthetic"
    """``synthetic`` (written at ``root`` by the generator) or ``release`` (a copy of the AITZ
    release at ``root``)."""
    synthetic: SyntheticConfig = SyntheticConfig()
    """The generator's sizes and seed (source: synthetic)."""
    max_steps: int = Field(20, ge=1)
    """Episodes longer than this are left out (appendix A.2: at most 20 steps)."""

    @model_validator(mode="after")
    def _root(self) -> DataConfig:
        if not self.root:
            raise ConfigError(f"root: must be a folder path, got {self.root!r}")
        return self


class WarmStartConfig(Config):
    """The small model's behaviour cloning on training episodes outside the pool."""

    updates: int = Field(300, ge=0)
    """Optimiser updates of behaviour cloning; 0: none."""
    batch: int = Field(16, ge=1)
    """Logged steps per update."""
    lr: Number = Field(3e-3, gt=0)
    """AdamW's learning rate."""
    seed: int = Field(0, ge=0)
    """Seeds the small model's weights and the order of its steps."""
    hidden_size: int = Field(128, ge=64)
    """The small model's hidden size: a multiple of 64 (attention heads of 64)."""
    num_hidden_layers: int = Field(2, ge=1)
    """The small model's decoder layers."""

    @model_validator(mode="after")
    def _heads(self) -> WarmStartConfig:
        if self.hidden_size % 64:
            raise ConfigError(
                f"hidden_size: must be a multiple of 64 (heads of 64), got {self.hidden_size}"
            )
        return self


class InitialConfig(Config):
    """The initial policy: a local Qwen3-VL checkpoint, or (``path: null``) the small model
    built here and warm-started."""

    path: str | None = None
    """A local Qwen3-VL checkpoint folder; null: the small model built here and warm-started."""
    device: str = "auto"
    """Where the policy runs: ``auto``, ``cpu`` or ``cuda[:N]``."""
    dtype: one_of(*DTYPES) = "auto"
    """The policy's dtype: ``auto``, ``float32`` or ``bfloat16``."""
    batch_size: int = Field(16, ge=1)
    """Responses decoded together (the policy and its copies)."""
    warm_start: WarmStartConfig = WarmStartConfig()
    """The small model's behaviour cloning (``path: null`` only)."""

    @model_validator(mode="after")
    def _names(self) -> InitialConfig:
        if self.path is not None and not self.path:
            raise ConfigError(f"path: must be a checkpoint folder or null, got {self.path!r}")
        if not self.device:
            raise ConfigError(f"device: must be auto, cpu or cuda[:N], got {self.device!r}")
        return self


class GenerationConfig(Config):
    """What generates from the frozen initial policy (its diagnostic attempts and summaries): the
    generation protocol's backend by name. ``transformers`` is the policy's own model
    (``initial.device``, ``dtype`` and ``batch_size``); ``vllm`` a vLLM engine serving the same
    checkpoint (the ``gpu`` extra). The trainer samples and monitors its live student itself."""

    backend: one_of(*sorted(GENERATOR_REGISTRY)) = "transformers"
    """The generation backend: ``transformers`` or ``vllm``."""
    vllm: dict[str, Any] = Field(default_factory=dict)
    """Options of the vllm backend (vllm.LLM's: dtype, max_model_len, gpu_memory_utilization,
    ...); read with backend vllm only."""

    @model_validator(mode="before")
    @classmethod
    def _options(cls, data: Any) -> Any:
        if not isinstance(data, dict) or "vllm" not in data:
            return data
        if data["vllm"] is None:  # `vllm:` left empty in YAML
            return {**data, "vllm": {}}
        if not isinstance(data["vllm"], dict):
            raise ConfigError(f"vllm: expected a mapping of vLLM options, got {data['vllm']!r}")
        return data

    @model_validator(mode="after")
    def _vllm_options(self) -> GenerationConfig:
        if self.backend == "vllm":
            check_options("vllm", self.vllm, "vllm")
        return self


class AitzConfig(Config):
    """``params:aitz``."""

    data: DataConfig = DataConfig()
    """Where the episodes are and which of them are read."""
    initial: InitialConfig = InitialConfig()
    """The initial policy: the frozen teacher and the student's start."""
    generation: GenerationConfig = GenerationConfig()
    """What generates the initial policy's diagnostic attempts and summaries."""
    offline: OfflineConfig = OfflineConfig()
    """The experiment's pool, filter, training and monitoring."""
    staging_dir: str = "data/06_models/.staging/aitz"
    """Where checkpoints are staged before the catalog publishes them."""

    @model_validator(mode="after")
    def _pool_leaves_warm_start(self) -> AitzConfig:
        if self.data.source == "synthetic" and self.initial.path is None:
            pool = self.offline.pool_size
            if self.data.synthetic.train_episodes <= pool:
                raise ConfigError(
                    f"data.synthetic.train_episodes: must exceed the pool "
                    f"(offline.schedule: {pool} episodes) to leave episodes for the warm start, "
                    f"got {self.data.synthetic.train_episodes}"
                )
        return self
