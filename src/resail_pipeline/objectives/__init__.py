"""Objectives: top-K + tail distributions, KL/JSD, selection, balancing, retention, each method's loss.

Pure functions on tensors (no Kedro, no I/O). The layers, bottom up:

- :mod:`.divergences`: :func:`topk_tail_logprobs`, :func:`kl_divergence`, :func:`js_divergence`;
- :mod:`.distillation`: per-step ``l_dist`` / ``s`` / ``l_ret`` from logits of the four views,
  the probe's sensitivity, SDPO's TIS weights, the OEL and SDPO parents;
- :mod:`.selection`: :func:`select_steps` (SGS) and :func:`trajectory_balanced_mean` (TLB);
- :mod:`.resail`: :class:`ResailConfig`, :func:`resail_objective` (per-step values),
  :func:`resail_loss` (logits);
- :mod:`.baselines`: cross-entropy (RFT, EPD) and offline GRPO.
"""

from resail_pipeline.objectives.baselines import (
    GrpoTerms,
    cross_entropy_loss,
    group_advantages,
    grpo_loss,
    low_var_kl,
)
from resail_pipeline.objectives.distillation import (
    DEFAULT_IS_CAP,
    DEFAULT_TOP_K,
    TokenDivergences,
    oel_loss,
    pi_sensitivity,
    sdpo_loss,
    token_divergences,
    token_sensitivity,
    truncated_is_weights,
    uniform_step_mean,
)
from resail_pipeline.objectives.divergences import (
    js_divergence,
    kl_divergence,
    masked_token_mean,
    token_logprobs,
    topk_support,
    topk_tail_logprobs,
)
from resail_pipeline.objectives.resail import (
    RETENTION_VIEWS,
    SELECTIONS,
    ResailConfig,
    ResailRecord,
    resail_loss,
    resail_objective,
)
from resail_pipeline.objectives.selection import (
    SELECTION_STRATEGIES,
    num_selected,
    select_steps,
    trajectory_balanced_mean,
    trajectory_weights,
)

__all__ = [
    "DEFAULT_IS_CAP",
    "DEFAULT_TOP_K",
    "RETENTION_VIEWS",
    "SELECTIONS",
    "SELECTION_STRATEGIES",
    "GrpoTerms",
    "ResailConfig",
    "ResailRecord",
    "TokenDivergences",
    "cross_entropy_loss",
    "group_advantages",
    "grpo_loss",
    "js_divergence",
    "kl_divergence",
    "low_var_kl",
    "masked_token_mean",
    "num_selected",
    "oel_loss",
    "pi_sensitivity",
    "resail_loss",
    "resail_objective",
    "sdpo_loss",
    "select_steps",
    "token_divergences",
    "token_logprobs",
    "token_sensitivity",
    "topk_support",
    "topk_tail_logprobs",
    "trajectory_balanced_mean",
    "trajectory_weights",
    "truncated_is_weights",
    "uniform_step_mean",
]
