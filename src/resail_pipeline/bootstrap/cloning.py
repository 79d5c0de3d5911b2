"""Behaviour cloning on packed rows: loss on response tokens, resumable, within a time budget.

Each optimiser step takes one batch of rows of similar length (:func:`~.packing.plan_batches`),
laid out with the tree attention mask (:func:`~.packing.collate`); the loss is the weighted mean
cross-entropy of the response tokens, logits being computed at those positions only. With
``training.prompt_loss_weight`` above 0, the weighted mean next-token cross-entropy of the prompt
tokens is added with that weight: the prompt repeats its own text (actions of the history copy the
crafting commands, observations echo actions, a summary's plan echoes both), so predicting it is a
dense signal for the copying that reading the commands and a plan needs, at the cost of the
logits only, the forward pass being the same. The
state (weights, AdamW moments, position in the data, seconds spent) is saved atomically as
safetensors + JSON every ``checkpoint_every_s`` seconds and when the run stops, and a run given the
same state directory continues from it.

Training runs on the CPU or on one CUDA device (``training.device``); the state is saved and
resumed device-independently, and the model is handed back on the device it came on.
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, load_model, save_file, save_model
from tqdm.auto import tqdm
from transformers import PreTrainedModel

from resail_pipeline.bootstrap.config import TrainingSettings
from resail_pipeline.bootstrap.packing import Batch, PackedRow, collate, plan_batches
from resail_pipeline.checkpoints import (
    bf16_faster,
    bf16_native,
    load_optimizer_tensors,
    optimizer_tensors,
    resolve_device,
)
from resail_pipeline.io import atomic_path
from resail_pipeline.training.engine import autocast

logger = logging.getLogger(__name__)

_MODEL_FILE = "model.safetensors"
_OPTIMIZER_FILE = "optimizer.safetensors"
_STATE_FILE = "state.json"


@dataclass
class CloningState:
    """Where a behaviour-cloning run stands.

    Attributes:
        data_sha256: the packed data the run trains on (a resumed run must see the same).
        step: optimiser steps done.
        epoch: the current pass over the data.
        batch: batches of the current epoch done.
        seconds: training seconds spent, over every resumed run.
        tokens: padded tokens processed.
        loss: the running mean of the recent batches' response losses (``nan`` before the
            first step).
        prompt_loss: the same for the prompt losses, when they are trained on.
        finished: the schedule reached its end.
        batches_per_epoch: batches in one pass over the data.
    """

    data_sha256: str
    batches_per_epoch: int = 0
    step: int = 0
    epoch: int = 0
    batch: int = 0
    seconds: float = 0.0
    tokens: int = 0
    loss: float = math.nan
    prompt_loss: float = math.nan
    finished: bool = False

    @property
    def epochs_done(self) -> float:
        return self.epoch + self.batch / max(1, self.batches_per_epoch)


def training_device(setting: str) -> torch.device:
    """The device of ``training.device``: ``auto`` takes CUDA when available; ``cuda`` needs it."""
    if setting == "cuda" and not torch.cuda.is_available():
        raise ValueError("training.device: 'cuda' was asked for but torch sees no CUDA device")
    return resolve_device(setting if setting == "cpu" else "auto")


def training_precision(setting: str, device: torch.device) -> str:
    """The precision of ``training.precision`` on ``device``: ``auto`` takes bf16 autocast where
    the device multiplies faster in bf16 than in fp32 (as generation's ``dtype: auto``:
    :func:`~resail_pipeline.checkpoints.bf16_faster`), fp32 elsewhere; ``fp32`` and ``bf16`` are
    kept."""
    if setting == "auto":
        return "bf16" if bf16_faster(device) else "fp32"
    return setting


def learning_rate(settings: TrainingSettings, step: int, progress: float) -> float:
    """Linear warm-up over ``warmup_steps``, then cosine from the peak to its floor in ``progress``."""
    peak = settings.learning_rate
    if step < settings.warmup_steps:
        return peak * (step + 1) / settings.warmup_steps
    floor = peak * settings.min_lr_ratio
    return floor + 0.5 * (peak - floor) * (1.0 + math.cos(math.pi * min(progress, 1.0)))


def batch_losses(model: PreTrainedModel, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """Weighted mean cross-entropy of the batch's response tokens and of its prompt tokens.

    Two scalars; the second is 0 when the batch was collated without prompt targets.
    """
    dtype = model.get_input_embeddings().weight.dtype
    # the tree mask as additive biases: 0 where a query may attend, the dtype's minimum elsewhere
    bias = torch.zeros(batch.attention_mask.shape, dtype=dtype, device=batch.input_ids.device)
    bias.masked_fill_(~batch.attention_mask, torch.finfo(dtype).min)  # (B, 1, T, T)
    hidden = model.model(
        input_ids=batch.input_ids, position_ids=batch.position_ids, attention_mask=bias
    ).last_hidden_state  # (B, T, H)
    picked = hidden.reshape(-1, hidden.shape[-1])[batch.source]  # (N, H)
    logits = model.lm_head(picked).float()  # (N, V)
    losses = F.cross_entropy(logits, batch.target, reduction="none") * batch.weight  # (N,)

    def mean(where: torch.Tensor) -> torch.Tensor:
        total = batch.weight.where(where, 0.0).sum()
        return losses.where(where, 0.0).sum() / total.clamp(min=torch.finfo(total.dtype).tiny)

    return mean(batch.response), mean(~batch.response)


def objective(response: torch.Tensor, prompt: torch.Tensor, prompt_weight: float) -> torch.Tensor:
    """The training objective: the response loss plus ``prompt_weight`` x the prompt loss."""
    return response + prompt_weight * prompt


def batch_loss(model: PreTrainedModel, batch: Batch, prompt_weight: float = 0.0) -> torch.Tensor:
    """The :func:`objective` of ``batch``."""
    return objective(*batch_losses(model, batch), prompt_weight)


def _time_fraction(seconds: float, settings: TrainingSettings) -> float:
    """The share of the time budget spent (0 without one)."""
    return 0.0 if settings.time_budget_s is None else seconds / settings.time_budget_s


def _running_mean(mean: float, value: float) -> float:
    return value if math.isnan(mean) else 0.98 * mean + 0.02 * value


def _save_state(
    path: Path,
    model: PreTrainedModel,
    optimizer: torch.optim.Optimizer,
    state: CloningState,
    save_extra: Callable[[Path], None] | None,
) -> None:
    """Weights, optimiser moments and position, written together atomically (no pickle)."""
    tensors, param_groups = optimizer_tensors(optimizer)
    with atomic_path(path) as tmp:
        tmp.mkdir()
        save_model(model, str(tmp / _MODEL_FILE))
        save_file(tensors, str(tmp / _OPTIMIZER_FILE))
        meta = {"state": asdict(state), "param_groups": param_groups}
        (tmp / _STATE_FILE).write_text(json.dumps(meta, indent=2) + "\n")
        if save_extra is not None:
            save_extra(tmp)


def _load_state(
    path: Path, model: PreTrainedModel, optimizer: torch.optim.Optimizer
) -> CloningState:
    meta = json.loads((path / _STATE_FILE).read_text())
    load_model(model, str(path / _MODEL_FILE))
    load_optimizer_tensors(optimizer, load_file(str(path / _OPTIMIZER_FILE)), meta["param_groups"])
    return CloningState(**meta["state"])


def _epoch_batches(
    rows: Sequence[PackedRow], budget: int, seed: int, epoch: int
) -> list[list[int]]:
    return plan_batches([len(r) for r in rows], budget, random.Random(f"{seed}/{epoch}"))


def behaviour_cloning(
    model: PreTrainedModel,
    rows: Sequence[PackedRow],
    settings: TrainingSettings,
    *,
    pad_id: int,
    data_sha256: str,
    seed: int,
    state_dir: Path | None = None,
    save_extra: Callable[[Path], None] | None = None,
    progress: bool = True,
) -> CloningState:
    """Train ``model`` in place on ``rows`` on ``settings.device``; return the final state.

    Args:
        model: a causal LM whose ``model`` body accepts 4-D attention masks (Qwen3 does).
        rows: the packed training data.
        settings: schedule, budget, precision.
        pad_id: the padding token.
        data_sha256: identifies ``rows``; a saved state of other data is not resumed.
        seed: seeds the batch order of every epoch.
        state_dir: where the resumable state is kept; ``None`` keeps nothing.
        save_extra: writes more files into each saved state (e.g. the model config and the
            tokenizer, which make the state a loadable checkpoint for a look at progress).
        progress: show a progress bar.
    """
    if not rows:
        raise ValueError("rows: no training data")
    device = training_device(settings.device)
    precision = training_precision(settings.precision, device)
    if precision == "bf16" and not bf16_native(device):
        logger.warning(
            "training.precision: bf16 on %s, which has no native bf16 kernels: emulated, it is "
            "many times slower than fp32 (benchmarks/bootstrap_training.py); consider fp32 or auto",
            device,
        )
    home = next(model.parameters()).device
    torch.set_num_threads(settings.threads)
    model.to(device)
    optimizer = torch.optim.AdamW(
        model.parameters(),
        lr=settings.learning_rate,
        betas=(settings.beta1, settings.beta2),
        weight_decay=settings.weight_decay,
    )
    state = CloningState(data_sha256=data_sha256)
    if state_dir is not None and (state_dir / _STATE_FILE).is_file():
        saved = json.loads((state_dir / _STATE_FILE).read_text())["state"]
        if saved["data_sha256"] == data_sha256:
            state = _load_state(state_dir, model, optimizer)
            logger.info(
                "behaviour cloning: resuming at step %d (epoch %d, %.0f s spent)",
                state.step,
                state.epoch,
                state.seconds,
            )
        else:
            logger.warning("behaviour cloning: %s holds another data set; starting over", state_dir)
    per_epoch = len(_epoch_batches(rows, settings.batch_tokens, seed, 0))
    state.batches_per_epoch = per_epoch
    total_steps = max(1, math.ceil(settings.epochs * per_epoch))
    model.train()
    started = time.perf_counter()
    spent_before = state.seconds
    last_save = started
    bar = tqdm(
        total=total_steps, initial=state.step, desc="cloning", unit="step", disable=not progress
    )
    batches = _epoch_batches(rows, settings.batch_tokens, seed, state.epoch)
    prompt_targets = settings.prompt_loss_weight > 0
    while not state.finished:
        if state.batch >= len(batches):
            state.epoch, state.batch = state.epoch + 1, 0
            batches = _epoch_batches(rows, settings.batch_tokens, seed, state.epoch)
        batch = collate(
            [rows[i] for i in batches[state.batch]],
            pad_id,
            prompt_targets=prompt_targets,
        ).to(device)
        fraction = max(state.step / total_steps, _time_fraction(state.seconds, settings))
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(settings, state.step, fraction)
        with autocast(device, precision):
            response, prompt = batch_losses(model, batch)
            loss = objective(response, prompt, settings.prompt_loss_weight)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), settings.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

        now = time.perf_counter()
        state.loss = _running_mean(state.loss, float(response.detach()))
        if prompt_targets:
            state.prompt_loss = _running_mean(state.prompt_loss, float(prompt.detach()))
        state.step += 1
        state.batch += 1
        state.tokens += batch.tokens
        state.seconds = spent_before + (now - started)
        state.finished = state.step >= total_steps or _time_fraction(state.seconds, settings) >= 1
        bar.update()
        bar.set_postfix(
            loss=f"{state.loss:.3f}", tok_s=f"{state.tokens / max(state.seconds, 1e-9):.0f}"
        )
        if state.step % 50 == 0:
            prompt_note = f" (prompt {state.prompt_loss:.4f})" if prompt_targets else ""
            logger.info(
                "behaviour cloning: step %d/%d epoch %d loss %.4f%s lr %.2e %.0f tok/s",
                state.step,
                total_steps,
                state.epoch,
                state.loss,
                prompt_note,
                optimizer.param_groups[0]["lr"],
                state.tokens / max(state.seconds, 1e-9),
            )
        if state_dir is not None and (
            state.finished or now - last_save >= settings.checkpoint_every_s
        ):
            _save_state(state_dir, model, optimizer, state, save_extra)
            last_save = now
    bar.close()
    model.eval()
    model.to(home)
    stopped_by = "epochs" if state.step >= total_steps else "time budget"
    logger.info(
        "behaviour cloning: done after %d steps (%.2f epochs, %s) on %s, %.0f s, loss %.4f",
        state.step,
        state.epochs_done,
        stopped_by,
        device,
        state.seconds,
        state.loss,
    )
    return state
