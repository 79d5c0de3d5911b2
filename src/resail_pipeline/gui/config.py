"""The AITZ experiment's configuration (``params:aitz``), checked as every configuration is."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from resail_pipeline.config import (
    ConfigError,
    check_choice,
    check_int,
    check_number,
    check_sections,
)
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


@dataclass(frozen=True)
class DataConfig:
    """Where the episodes are (``<root>/<split>/<category>/<episode_id>/...``)."""

    root: str = "data/01_raw/aitz-synthetic"
    source: str = "synthetic"
    # the generator's sizes and seed (source: synthetic)
    synthetic: SyntheticConfig = field(default_factory=SyntheticConfig)
    # episodes longer than this are left out (appendix A.2: at most 20 steps)
    max_steps: int = 20

    def __post_init__(self) -> None:
        check_sections(self)
        if not isinstance(self.root, str) or not self.root:
            raise ConfigError(f"root: must be a folder path, got {self.root!r}")
        check_choice("source", self.source, SOURCES)
        check_int("max_steps", self.max_steps, low=1)


@dataclass(frozen=True)
class WarmStartConfig:
    """The small model's behaviour cloning on training episodes outside the pool."""

    updates: int = 300
    batch: int = 16
    lr: float = 3e-3
    seed: int = 0
    hidden_size: int = 128
    num_hidden_layers: int = 2

    def __post_init__(self) -> None:
        check_int("updates", self.updates, low=0)
        check_int("batch", self.batch, low=1)
        check_number("lr", self.lr, low=0, low_open=True)
        check_int("seed", self.seed, low=0)
        check_int("hidden_size", self.hidden_size, low=64)
        if self.hidden_size % 64:
            raise ConfigError(
                f"hidden_size: must be a multiple of 64 (heads of 64), got {self.hidden_size}"
            )
        check_int("num_hidden_layers", self.num_hidden_layers, low=1)


@dataclass(frozen=True)
class InitialConfig:
    """The initial policy: a local Qwen3-VL checkpoint, or (``path: null``) the small model
    built here and warm-started."""

    path: str | None = None
    device: str = "auto"
    dtype: str = "auto"
    # responses decoded together (the policy and its copies)
    batch_size: int = 16
    warm_start: WarmStartConfig = field(default_factory=WarmStartConfig)

    def __post_init__(self) -> None:
        check_sections(self)
        if self.path is not None and (not isinstance(self.path, str) or not self.path):
            raise ConfigError(f"path: must be a checkpoint folder or null, got {self.path!r}")
        if not isinstance(self.device, str) or not self.device:
            raise ConfigError(f"device: must be auto, cpu or cuda[:N], got {self.device!r}")
        check_choice("dtype", self.dtype, DTYPES)
        check_int("batch_size", self.batch_size, low=1)


@dataclass(frozen=True)
class GenerationConfig:
    """What generates from the frozen initial policy (its diagnostic attempts and summaries): the
    generation protocol's backend by name. ``transformers`` is the policy's own model
    (``initial.device``, ``dtype`` and ``batch_size``); ``vllm`` a vLLM engine serving the same
    checkpoint (the ``gpu`` extra). The trainer samples and monitors its live student itself."""

    backend: str = "transformers"
    # options of the vllm backend (vllm.LLM's: dtype, max_model_len, gpu_memory_utilization, ...)
    vllm: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_choice("backend", self.backend, sorted(GENERATOR_REGISTRY))
        if self.vllm is None:  # `vllm:` left empty in YAML
            object.__setattr__(self, "vllm", {})
        if not isinstance(self.vllm, dict):
            raise ConfigError(f"vllm: expected a mapping of vLLM options, got {self.vllm!r}")
        if self.backend == "vllm":
            check_options("vllm", self.vllm, "vllm")


@dataclass(frozen=True)
class AitzConfig:
    """``params:aitz``."""

    data: DataConfig = field(default_factory=DataConfig)
    initial: InitialConfig = field(default_factory=InitialConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    offline: OfflineConfig = field(default_factory=OfflineConfig)
    # where checkpoints are staged before the catalog publishes them
    staging_dir: str = "data/06_models/.staging/aitz"

    def __post_init__(self) -> None:
        check_sections(self)
        if self.data.source == "synthetic" and self.initial.path is None:
            pool = self.offline.pool_size
            if self.data.synthetic.train_episodes <= pool:
                raise ConfigError(
                    f"data.synthetic.train_episodes: must exceed the pool "
                    f"(offline.schedule: {pool} episodes) to leave episodes for the warm start, "
                    f"got {self.data.synthetic.train_episodes}"
                )
