"""The configuration of the initial policy: where it comes from, and how one is built.

:class:`BootstrapConfig` is what the ``bootstrap`` pipeline's parameters turn into. Its parts:
the model's shape (:class:`ModelShape`), the tokenizer (:class:`TokenizerSettings`), the
demonstrations (:class:`DemonstrationSettings`) and behaviour cloning (:class:`TrainingSettings`).
Every field is range-checked when the object is made, so bad parameters fail before any work.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from resail_pipeline.bootstrap.environments import check_supported
from resail_pipeline.config import (
    ConfigError,
    build,
    check_bool,
    check_choice,
    check_int,
    check_number,
    check_sections,
)
from resail_pipeline.envs import check_env_name

PRECISIONS = ("auto", "fp32", "bf16")
#: where behaviour cloning runs: ``auto`` is the first CUDA device when there is one, else the CPU
DEVICES = ("auto", "cpu", "cuda")
#: how on-policy episodes are trained (``data.on_policy_training``)
ON_POLICY_TRAINING = ("like_planner", "privileged_as_rolled_out")


@dataclass(frozen=True)
class ModelShape:
    """A small Qwen3 (RoPE, RMSNorm, SwiGLU, tied embeddings), built from scratch."""

    #: width of the residual stream; a multiple of ``num_attention_heads``
    hidden_size: int = 256
    #: transformer blocks
    num_hidden_layers: int = 4
    #: query heads per block
    num_attention_heads: int = 4
    #: key/value heads per block (grouped-query attention when fewer than the query heads)
    num_key_value_heads: int = 4
    #: inner width of the SwiGLU feed-forward layer
    intermediate_size: int = 768
    #: longest sequence the model accepts (the longest TextCraft prompt is under 1,500 tokens,
    #: ALFWorld's are of the same order); a build refuses training data that is longer
    max_position_embeddings: int = 4096

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            check_int(f.name, getattr(self, f.name), low=1)
        if self.hidden_size % self.num_attention_heads:
            raise ConfigError(
                f"hidden_size: {self.hidden_size} is not a multiple of "
                f"num_attention_heads={self.num_attention_heads}"
            )
        if self.num_attention_heads % self.num_key_value_heads:
            raise ConfigError(
                f"num_key_value_heads: {self.num_key_value_heads} does not divide "
                f"num_attention_heads={self.num_attention_heads}"
            )


@dataclass(frozen=True)
class TokenizerSettings:
    """The word-level tokenizer trained on the environment's own text."""

    #: upper bound on the vocabulary (TextCraft needs under a thousand words)
    vocab_size: int = 4096
    #: occurrences a word needs to get a token (1: every word of the corpus)
    min_frequency: int = 1

    def __post_init__(self) -> None:
        check_int("vocab_size", self.vocab_size, low=1)
        check_int("min_frequency", self.min_frequency, low=1)


@dataclass(frozen=True)
class DemonstrationSettings:
    """Expert demonstrations on the environment's demonstration tasks (TextCraft: ``train`` and
    ``dev``; ALFWorld: ``clone``; :mod:`~resail_pipeline.bootstrap.environments`); its test tasks
    are never used."""

    #: demonstrations played per demonstration task
    episodes_per_task: int = 12
    #: probability of injecting a mistake before each step of a demonstration
    mistake_rate: float = 0.15
    #: share of a task's demonstrations that stall (only mistakes after a random point, so they
    #: fail at the step limit); they serve as guidance only and are not trained on
    stalled_share: float = 0.3
    #: probability that a trained step occurrence is also trained in the privileged view, with
    #: the rules-based summary of another demonstration of the same task
    privileged_share: float = 0.5
    #: probability that a trained step occurrence is trained in the ordinary view; below 1 a
    #: curriculum leans on the privileged view (at 0, with ``privileged_share`` 1, only the
    #: guidance distinguishes the tasks, so copying its plan is the way to a low loss)
    ordinary_share: float = 1.0
    #: renamed copies of every task's demonstrations, each under its own permutation of the
    #: words that qualify items (:mod:`~resail_pipeline.bootstrap.renaming`): recipes that cannot
    #: be memorised, so the policy learns to read the crafting commands and the guidance
    #: (TextCraft only)
    renamed_copies: int = 0
    #: copying drills of every task (:mod:`~resail_pipeline.bootstrap.drills`): renamed copies
    #: trained in the privileged view alone, with the crafting commands taken out of the message,
    #: so that the summary's plan is the only route to the expert's action (TextCraft only)
    copying_drills: int = 0
    #: episodes per train task rolled out by the ``warm_start`` policy (temperature
    #: ``on_policy_temperature``, the evaluation's step limit) and relabelled by the planner
    #: (DAgger): every step trained on the planner's action from the inventory held, so the
    #: policy learns the way out of the states it reaches itself (its loops and dead ends); the
    #: failed ones also serve as guidance, as the policy's own failures do at evaluation
    on_policy_episodes: int = 0
    #: episodes per train task rolled out by the ``warm_start`` policy in the privileged view and
    #: relabelled the same way: every step generated with the rules-based summary of the task's
    #: first on-policy episode, as the appendix-D.2 evaluation inserts the summary of the policy's
    #: own reference episode, so the policy learns the way back to the plan from the states it
    #: reaches while following one (a step taken before it is due, a step repeated); needs
    #: ``on_policy_episodes`` >= 1
    on_policy_privileged: int = 0
    #: how the on-policy steps are trained, one of :data:`ON_POLICY_TRAINING`. ``like_planner``:
    #: every step like a planner step (the ordinary view, the privileged view with drawn
    #: summaries, renamed copies and drills). ``privileged_as_rolled_out``: only the privileged
    #: episodes' steps, each in the privileged view alone with the summary it was generated with
    #: (the evaluation's pairing of states and summary: DAgger in the view that reads the plan);
    #: the ordinary episodes then supply those summaries and guidance, and are not trained on.
    #: Needs ``on_policy_privileged`` >= 1
    on_policy_training: str = "like_planner"
    #: sampling temperature of those rollouts (the evaluation's, by default)
    on_policy_temperature: float = 0.4
    #: sequences packed behind one shared prefix (ordinary view + privileged views of a step)
    max_branches: int = 4
    #: use only the first this many train tasks (``None``: all); for quick builds and tests
    task_limit: int | None = None
    #: play the demonstrations with the environment's searching expert (ALFWorld only): the
    #: ordinary view learns to act on what it has seen (fetch an object it saw, else search the
    #: receptacles not yet searched), the privileged view the planner's action, which knows where
    #: the objects are, as the summary of another episode of the game tells
    searching_expert: bool = False

    def __post_init__(self) -> None:
        check_int("episodes_per_task", self.episodes_per_task, low=1)
        check_number("mistake_rate", self.mistake_rate, low=0.0, high=0.9)
        check_number("stalled_share", self.stalled_share, low=0.0, high=0.9)
        check_number("privileged_share", self.privileged_share, low=0.0, high=1.0)
        check_number("ordinary_share", self.ordinary_share, low=0.0, high=1.0)
        if self.ordinary_share == 0 and self.privileged_share == 0:
            raise ConfigError(
                "ordinary_share: 0 with privileged_share 0 leaves nothing to train on"
            )
        check_int("max_branches", self.max_branches, low=1)
        check_int("renamed_copies", self.renamed_copies, low=0)
        check_int("copying_drills", self.copying_drills, low=0)
        check_int("on_policy_episodes", self.on_policy_episodes, low=0)
        check_int("on_policy_privileged", self.on_policy_privileged, low=0)
        if self.on_policy_privileged and not self.on_policy_episodes:
            raise ConfigError(
                "on_policy_privileged: privileged rollouts take their summary from the "
                "task's first on-policy episode; set on_policy_episodes >= 1"
            )
        check_choice("on_policy_training", self.on_policy_training, ON_POLICY_TRAINING)
        if self.on_policy_training == "privileged_as_rolled_out" and not self.on_policy_privileged:
            raise ConfigError(
                "on_policy_training: privileged_as_rolled_out trains the privileged on-policy "
                "episodes only; set on_policy_privileged >= 1"
            )
        check_number("on_policy_temperature", self.on_policy_temperature, low=0.0, high=2.0)
        check_int("task_limit", self.task_limit, low=1, optional=True)
        check_bool("searching_expert", self.searching_expert)
        if self.stalled_share > 0 and self.episodes_per_task < 2:
            raise ConfigError(
                "episodes_per_task: stalled demonstrations need at least 2 episodes per task"
            )


@dataclass(frozen=True)
class TrainingSettings:
    """Behaviour cloning: AdamW, linear warm-up, cosine decay, stop at a time budget.

    The schedule's progress is the larger of the steps done over the steps of ``epochs`` and
    the seconds spent over ``time_budget_s``, so the learning rate reaches its floor whichever
    limit binds first (when the time budget binds, the result depends on the machine's speed;
    without one, ``epochs`` alone sets how much is trained, on any machine).
    """

    #: peak learning rate
    learning_rate: float = 2e-3
    #: the learning rate's floor, as a fraction of the peak
    min_lr_ratio: float = 0.05
    #: optimiser steps of linear warm-up
    warmup_steps: int = 30
    #: AdamW decoupled weight decay
    weight_decay: float = 0.05
    #: AdamW beta1
    beta1: float = 0.9
    #: AdamW beta2
    beta2: float = 0.98
    #: gradient-norm clip
    grad_clip: float = 1.0
    #: padded tokens per batch (rows x longest row); bounds memory
    batch_tokens: int = 8192
    #: passes over the packed data
    epochs: float = 3.0
    #: wall-clock seconds of training before it stops (the schedule ends there too); ``None``:
    #: no time limit
    time_budget_s: float | None = 3600.0
    #: seconds between resumable checkpoints of the training state
    checkpoint_every_s: float = 600.0
    #: ``bf16`` autocast, ``fp32``, or ``auto``: bf16 where the device multiplies faster in it,
    #: else fp32 (bf16 trained 1.5x faster than fp32 on a CPU with AMX, 1.34x slower with oneDNN
    #: held to AVX-512 BF16, 18x slower with AVX2 only: ``benchmarks/bootstrap_training.py``)
    precision: str = "auto"
    #: weight of the prompt tokens' next-token loss added to the response loss (0: responses
    #: only); the prompt repeats its own text, a dense signal for copying (:mod:`~.cloning`)
    prompt_loss_weight: float = 0.0
    #: CPU threads for torch
    threads: int = 2
    #: where to train, one of :data:`DEVICES`; where a policy is built is not part of its recipe
    #: (the manifest records the machine)
    device: str = "auto"

    def __post_init__(self) -> None:
        check_number("learning_rate", self.learning_rate, low=0.0, high=1.0, low_open=True)
        check_number("min_lr_ratio", self.min_lr_ratio, low=0.0, high=1.0)
        check_int("warmup_steps", self.warmup_steps, low=0)
        check_number("weight_decay", self.weight_decay, low=0.0, high=1.0)
        check_number("beta1", self.beta1, low=0.0, high=0.9999)
        check_number("beta2", self.beta2, low=0.0, high=0.99999)
        check_number("grad_clip", self.grad_clip, low=0.0, high=1e6, low_open=True)
        check_int("batch_tokens", self.batch_tokens, low=1)
        check_number("prompt_loss_weight", self.prompt_loss_weight, low=0.0, high=100.0)
        check_number("epochs", self.epochs, low=0.0, high=1e4, low_open=True)
        check_number(
            "time_budget_s", self.time_budget_s, low=0.0, high=1e7, low_open=True, optional=True
        )
        check_number(
            "checkpoint_every_s", self.checkpoint_every_s, low=0.0, high=1e7, low_open=True
        )
        check_choice("precision", self.precision, PRECISIONS)
        check_int("threads", self.threads, low=1)
        check_choice("device", self.device, DEVICES)


#: ``reference``'s value for the environment's own shipped policy.
AUTO = "auto"


def shipped_policy(env: str) -> str:
    """The directory of ``env``'s shipped initial policy, relative to the project:
    ``reference/textcraft-initial``, ``reference/alfworld-initial``."""
    return f"reference/{check_env_name(env)}-initial"


@dataclass(frozen=True)
class BootstrapConfig:
    """Where the initial policy (cycle 0) comes from, first match wins:

    1. ``checkpoint``: any local Hugging Face causal-LM directory, used as is;
    2. ``reference``: the policy shipped in the repository (a directory that must exist);
    3. with ``reference: null``, one is built: demonstrations, tokenizer, model, behaviour
       cloning.

    A build normally starts from a randomly initialised model and a tokenizer trained on its
    demonstrations; with ``warm_start`` it continues training a built policy instead (a second
    stage with other data settings, e.g. more privileged views), keeping that policy's tokenizer.
    """

    #: environment the policy acts in (a build covers those of
    #: :data:`~resail_pipeline.bootstrap.environments.BUILDABLE_ENVS`)
    env: str = "textcraft"
    #: name recorded in the policy id (``"{name}@{sha256[:12]}"``); ``None``: ``<env>-initial``
    name: str | None = None
    #: a local checkpoint directory to use instead of building one
    checkpoint: str | None = None
    #: the shipped reference policy's directory (relative to the working directory; it must
    #: exist); ``"auto"``: the environment's own (:func:`shipped_policy`); ``None`` builds one
    reference: str | None = AUTO
    #: a built policy directory whose tokenizer and weights a build continues from (its shape
    #: must be ``model``); ``None`` starts from a random initialisation
    warm_start: str | None = None
    #: seeds demonstrations, initialisation and batch order
    seed: int = 0
    #: the model's shape
    model: ModelShape = field(default_factory=ModelShape)
    #: tokenizer training
    tokenizer: TokenizerSettings = field(default_factory=TokenizerSettings)
    #: demonstrations and their packing
    data: DemonstrationSettings = field(default_factory=DemonstrationSettings)
    #: behaviour cloning
    training: TrainingSettings = field(default_factory=TrainingSettings)

    def __post_init__(self) -> None:
        check_sections(self)  # before any section is read
        check_env_name(self.env)
        if self.name is None:
            object.__setattr__(self, "name", f"{self.env}-initial")
        if self.reference == AUTO:
            object.__setattr__(self, "reference", shipped_policy(self.env))
        check_supported(self.env, self.data)
        if self.warm_start is not None and (
            not isinstance(self.warm_start, str) or not self.warm_start
        ):
            raise ConfigError(
                f"warm_start: must be a policy directory or null, got {self.warm_start!r}"
            )
        if self.data.on_policy_episodes and self.warm_start is None:
            raise ConfigError(
                "data.on_policy_episodes: on-policy episodes are rolled out by the warm start "
                "policy; set warm_start (or data.on_policy_episodes: 0)"
            )
        if not self.name or "@" in self.name or "/" in self.name:
            raise ConfigError(f"name: must be non-empty without '@' or '/', got {self.name!r}")
        check_int("seed", self.seed, low=0)

    @classmethod
    def from_dict(cls, params: Mapping[str, Any], path: str = "bootstrap") -> BootstrapConfig:
        """The config of a parameters mapping (nested like :meth:`to_dict`); unknown keys raise."""
        return build(cls, params, path)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def recipe(self) -> dict[str, Any]:
        """The settings that determine a built policy (not where it is looked up)."""
        out = self.to_dict()
        for key in ("name", "checkpoint", "reference"):
            out.pop(key)
        out["training"].pop("device")
        return out
