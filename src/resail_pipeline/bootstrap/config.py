"""The configuration of the initial policy: where it comes from, and how one is built.

:class:`BootstrapConfig` is what the ``bootstrap`` pipeline's parameters turn into. Its parts:
the model's shape (:class:`ModelShape`), the tokenizer (:class:`TokenizerSettings`), the
demonstrations (:class:`DemonstrationSettings`) and behaviour cloning (:class:`TrainingSettings`).
Every field is checked when the object is made, so bad parameters fail before any work.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from resail_pipeline.bootstrap.environments import check_supported
from resail_pipeline.config import (
    Config,
    ConfigError,
    Field,
    Number,
    build,
    model_validator,
    one_of,
)
from resail_pipeline.envs import check_env_name

PRECISIONS = ("auto", "fp32", "bf16")
#: where behaviour cloning runs: ``auto`` is the first CUDA device when there is one, else the CPU
DEVICES = ("auto", "cpu", "cuda")
#: how on-policy episodes are trained (``data.on_policy_training``)
ON_POLICY_TRAINING = ("like_planner", "privileged_as_rolled_out")


class ModelShape(Config):
    """A small Qwen3 (RoPE, RMSNorm, SwiGLU, tied embeddings), built from scratch."""

    hidden_size: int = Field(256, ge=1)
    """Width of the residual stream; a multiple of ``num_attention_heads``."""
    num_hidden_layers: int = Field(4, ge=1)
    """Transformer blocks."""
    num_attention_heads: int = Field(4, ge=1)
    """Query heads per block."""
    num_key_value_heads: int = Field(4, ge=1)
    """Key/value heads per block (grouped-query attention when fewer than the query heads)."""
    intermediate_size: int = Field(768, ge=1)
    """Inner width of the SwiGLU feed-forward layer."""
    max_position_embeddings: int = Field(4096, ge=1)
    """Longest sequence the model accepts (the longest TextCraft prompt is under 1,500 tokens,
    ALFWorld's are of the same order); a build refuses training data that is longer."""

    @model_validator(mode="after")
    def _heads(self) -> ModelShape:
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
        return self


class TokenizerSettings(Config):
    """The word-level tokenizer trained on the environment's own text."""

    vocab_size: int = Field(4096, ge=1)
    """Upper bound on the vocabulary (TextCraft needs under a thousand words)."""
    min_frequency: int = Field(1, ge=1)
    """Occurrences a word needs to get a token (1: every word of the corpus)."""


class DemonstrationSettings(Config):
    """Expert demonstrations on the environment's demonstration tasks (TextCraft: ``train`` and
    ``dev``; ALFWorld: ``clone``; :mod:`~resail_pipeline.bootstrap.environments`); its test tasks
    are never used."""

    episodes_per_task: int = Field(12, ge=1)
    """Demonstrations played per demonstration task."""
    mistake_rate: Number = Field(0.15, ge=0.0, le=0.9)
    """Probability of injecting a mistake before each step of a demonstration."""
    stalled_share: Number = Field(0.3, ge=0.0, le=0.9)
    """Share of a task's demonstrations that stall (only mistakes after a random point, so they
    fail at the step limit); they serve as guidance only and are not trained on."""
    privileged_share: Number = Field(0.5, ge=0.0, le=1.0)
    """Probability that a trained step occurrence is also trained in the privileged view, with
    the rules-based summary of another demonstration of the same task."""
    ordinary_share: Number = Field(1.0, ge=0.0, le=1.0)
    """Probability that a trained step occurrence is trained in the ordinary view; below 1 a
    curriculum leans on the privileged view (at 0, with ``privileged_share`` 1, only the guidance
    distinguishes the tasks, so copying its plan is the way to a low loss)."""
    renamed_copies: int = Field(0, ge=0)
    """Renamed copies of every task's demonstrations, each under its own permutation of the words
    that qualify items (:mod:`~resail_pipeline.bootstrap.renaming`): recipes that cannot be
    memorised, so the policy learns to read the crafting commands and the guidance (TextCraft
    only)."""
    copying_drills: int = Field(0, ge=0)
    """Copying drills of every task (:mod:`~resail_pipeline.bootstrap.drills`): renamed copies
    trained in the privileged view alone, with the crafting commands taken out of the message, so
    that the summary's plan is the only route to the expert's action (TextCraft only)."""
    on_policy_episodes: int = Field(0, ge=0)
    """Episodes per train task rolled out by the ``warm_start`` policy (temperature
    ``on_policy_temperature``, the evaluation's step limit) and relabelled by the planner
    (DAgger): every step trained on the planner's action from the inventory held, so the policy
    learns the way out of the states it reaches itself (its loops and dead ends); the failed ones
    also serve as guidance, as the policy's own failures do at evaluation."""
    on_policy_privileged: int = Field(0, ge=0)
    """Episodes per train task rolled out by the ``warm_start`` policy in the privileged view and
    relabelled the same way: every step generated with the rules-based summary of the task's
    first on-policy episode, as the appendix-D.2 evaluation inserts the summary of the policy's
    own reference episode, so the policy learns the way back to the plan from the states it
    reaches while following one (a step taken before it is due, a step repeated); needs
    ``on_policy_episodes`` >= 1."""
    on_policy_training: one_of(*ON_POLICY_TRAINING) = "like_planner"
    """How the on-policy steps are trained. ``like_planner``: every step like a planner step (the
    ordinary view, the privileged view with drawn summaries, renamed copies and drills).
    ``privileged_as_rolled_out``: only the privileged episodes' steps, each in the privileged view
    alone with the summary it was generated with (the evaluation's pairing of states and summary:
    DAgger in the view that reads the plan); the ordinary episodes then supply those summaries and
    guidance, and are not trained on. Needs ``on_policy_privileged`` >= 1."""
    on_policy_temperature: Number = Field(0.4, ge=0.0, le=2.0)
    """Sampling temperature of those rollouts (the evaluation's, by default)."""
    max_branches: int = Field(4, ge=1)
    """Sequences packed behind one shared prefix (ordinary view + privileged views of a step)."""
    task_limit: int | None = Field(None, ge=1)
    """Use only the first this many train tasks (null: all); for quick builds and tests."""
    searching_expert: bool = False
    """Play the demonstrations with the environment's searching expert (ALFWorld only): the
    ordinary view learns to act on what it has seen (fetch an object it saw, else search the
    receptacles not yet searched), the privileged view the planner's action, which knows where
    the objects are, as the summary of another episode of the game tells."""

    @model_validator(mode="after")
    def _consistent(self) -> DemonstrationSettings:
        if self.ordinary_share == 0 and self.privileged_share == 0:
            raise ConfigError(
                "ordinary_share: 0 with privileged_share 0 leaves nothing to train on"
            )
        if self.on_policy_privileged and not self.on_policy_episodes:
            raise ConfigError(
                "on_policy_privileged: privileged rollouts take their summary from the "
                "task's first on-policy episode; set on_policy_episodes >= 1"
            )
        if self.on_policy_training == "privileged_as_rolled_out" and not self.on_policy_privileged:
            raise ConfigError(
                "on_policy_training: privileged_as_rolled_out trains the privileged on-policy "
                "episodes only; set on_policy_privileged >= 1"
            )
        if self.stalled_share > 0 and self.episodes_per_task < 2:
            raise ConfigError(
                "episodes_per_task: stalled demonstrations need at least 2 episodes per task"
            )
        return self


class TrainingSettings(Config):
    """Behaviour cloning: AdamW, linear warm-up, cosine decay, stop at a time budget.

    The schedule's progress is the larger of the steps done over the steps of ``epochs`` and
    the seconds spent over ``time_budget_s``, so the learning rate reaches its floor whichever
    limit binds first (when the time budget binds, the result depends on the machine's speed;
    without one, ``epochs`` alone sets how much is trained, on any machine).
    """

    learning_rate: Number = Field(2e-3, gt=0.0, le=1.0)
    """Peak learning rate."""
    min_lr_ratio: Number = Field(0.05, ge=0.0, le=1.0)
    """The learning rate's floor, as a fraction of the peak."""
    warmup_steps: int = Field(30, ge=0)
    """Optimiser steps of linear warm-up."""
    weight_decay: Number = Field(0.05, ge=0.0, le=1.0)
    """AdamW's decoupled weight decay."""
    beta1: Number = Field(0.9, ge=0.0, le=0.9999)
    """AdamW's beta1."""
    beta2: Number = Field(0.98, ge=0.0, le=0.99999)
    """AdamW's beta2."""
    grad_clip: Number = Field(1.0, gt=0.0, le=1e6)
    """Gradient-norm clip."""
    batch_tokens: int = Field(8192, ge=1)
    """Padded tokens per batch (rows x longest row); bounds memory."""
    epochs: Number = Field(3.0, gt=0.0, le=1e4)
    """Passes over the packed data."""
    time_budget_s: Number | None = Field(3600.0, gt=0.0, le=1e7)
    """Wall-clock seconds of training before it stops (the schedule ends there too); null: no
    time limit."""
    checkpoint_every_s: Number = Field(600.0, gt=0.0, le=1e7)
    """Seconds between resumable checkpoints of the training state."""
    precision: one_of(*PRECISIONS) = "auto"
    """``bf16`` autocast, ``fp32``, or ``auto``: bf16 where the device multiplies faster in it,
    else fp32 (``benchmarks/bootstrap_training.py`` measures both)."""
    prompt_loss_weight: Number = Field(0.0, ge=0.0, le=100.0)
    """Weight of the prompt tokens' next-token loss added to the response loss (0: responses
    only); the prompt repeats its own text, a dense signal for copying (:mod:`~.cloning`)."""
    threads: int = Field(2, ge=1)
    """CPU threads for torch."""
    device: one_of(*DEVICES) = "auto"
    """Where to train; where a policy is built is not part of its recipe (the manifest records
    the machine)."""


#: ``reference``'s value for the environment's own shipped policy.
AUTO = "auto"


def shipped_policy(env: str) -> str:
    """The directory of ``env``'s shipped initial policy, relative to the project:
    ``reference/textcraft-initial``, ``reference/alfworld-initial``."""
    return f"reference/{check_env_name(env)}-initial"


class BootstrapConfig(Config):
    """Where the initial policy (cycle 0) comes from, first match wins:

    1. ``checkpoint``: any local Hugging Face causal-LM directory, used as is;
    2. ``reference``: the policy shipped in the repository (a directory that must exist);
    3. with ``reference: null``, one is built: demonstrations, tokenizer, model, behaviour
       cloning.

    A build normally starts from a randomly initialised model and a tokenizer trained on its
    demonstrations; with ``warm_start`` it continues training a built policy instead (a second
    stage with other data settings, e.g. more privileged views), keeping that policy's tokenizer.
    """

    env: str = "textcraft"
    """Environment the policy acts in (a build covers those of
    :data:`~resail_pipeline.bootstrap.environments.BUILDABLE_ENVS`)."""
    name: str | None = None
    """Name recorded in the policy id (``{name}@{sha256[:12]}``); null: ``<env>-initial``."""
    checkpoint: str | None = None
    """A local checkpoint directory to use instead of building one."""
    reference: str | None = AUTO
    """The shipped reference policy's directory (relative to the working directory; it must
    exist); ``auto``: the environment's own (:func:`shipped_policy`); null builds one."""
    warm_start: str | None = Field(None, min_length=1)
    """A built policy directory whose tokenizer and weights a build continues from (its shape
    must be ``model``); null starts from a random initialisation."""
    seed: int = Field(0, ge=0)
    """Seeds demonstrations, initialisation and batch order."""
    model: ModelShape = ModelShape()
    """The model's shape."""
    tokenizer: TokenizerSettings = TokenizerSettings()
    """Tokenizer training."""
    data: DemonstrationSettings = DemonstrationSettings()
    """Demonstrations and their packing."""
    training: TrainingSettings = TrainingSettings()
    """Behaviour cloning."""

    @model_validator(mode="after")
    def _resolved(self) -> BootstrapConfig:
        check_env_name(self.env)
        if self.name is None:
            object.__setattr__(self, "name", f"{self.env}-initial")
        if self.reference == AUTO:
            object.__setattr__(self, "reference", shipped_policy(self.env))
        check_supported(self.env, self.data)
        if self.data.on_policy_episodes and self.warm_start is None:
            raise ConfigError(
                "data.on_policy_episodes: on-policy episodes are rolled out by the warm start "
                "policy; set warm_start (or data.on_policy_episodes: 0)"
            )
        if not self.name or "@" in self.name or "/" in self.name:
            raise ConfigError(f"name: must be non-empty without '@' or '/', got {self.name!r}")
        return self

    @classmethod
    def from_dict(cls, params: Mapping[str, Any], path: str = "bootstrap") -> BootstrapConfig:
        """The config of a parameters mapping (nested like :meth:`to_dict`); unknown keys raise."""
        return build(cls, params, path)

    def to_dict(self) -> dict[str, Any]:
        """The plain data of every field, by Python name."""
        return self.model_dump()

    def recipe(self) -> dict[str, Any]:
        """The settings that determine a built policy (not where it is looked up)."""
        out = self.to_dict()
        for key in ("name", "checkpoint", "reference"):
            out.pop(key)
        out["training"].pop("device")
        return out
