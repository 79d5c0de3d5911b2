"""The one-process OEL loop as it was before the engines ran it, kept as the reference its
one-process path must still equal (tests/gui/test_offline.py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from resail_pipeline.generation.base import derive_seed
from resail_pipeline.gui.offline import OfflineConfig, _prompts, _remarks, _seeds
from resail_pipeline.gui.policy import VisionPolicy
from resail_pipeline.objectives.distillation import oel_loss
from resail_pipeline.training.engine import adamw


def reference_train_oel(
    student: VisionPolicy,
    teacher: VisionPolicy,
    pool: pd.DataFrame,
    summaries: pd.DataFrame,
    kept: np.ndarray | None,
    monitor: Callable[[VisionPolicy], tuple[float, int]],
    root: Path,
    config: OfflineConfig,
    *,
    run: str,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    root = Path(root)
    remarks = _remarks(summaries)
    usable = pool["episode_id"].isin(remarks).to_numpy()
    active = usable & (kept if kept is not None else True)
    schedule = config.schedule
    optimizer = adamw([p for p in student.model.parameters() if p.requires_grad], config.optimizer)
    teacher.model.eval()
    metrics, curve = [], []

    def record(update: int) -> None:
        accuracy, scored = monitor(student)
        curve.append({"run": run, "update": update, "accuracy": accuracy, "steps": scored})

    record(0)
    for update in range(1, schedule.updates + 1):
        started = time.perf_counter()
        lo, hi = (
            (update - 1) * schedule.trajectories_per_update,
            update * schedule.trajectories_per_update,
        )
        in_batch = pool["position"].between(lo, hi - 1).to_numpy()
        batch = pool[in_batch & active]
        loss_value, tokens = 0.0, 0
        optimizer.zero_grad(set_to_none=True)
        if not batch.empty:
            ordinary = _prompts(student, batch, root)
            privileged = _prompts(teacher, batch, root, remarks)
            seeds = [derive_seed(s, update) for s in _seeds(batch, schedule.seed)]
            student.model.eval()
            responses = [
                list(g.token_ids) or [student.tokenizer.eos_token_id]
                for g in student.generate(ordinary, config.responses, seeds)
            ]
            student.model.train()
            n = len(batch)
            for start in range(0, n, config.micro_batch):
                part = slice(start, start + config.micro_batch)
                with torch.no_grad():
                    teacher_logits, _ = teacher.response_logits(privileged[part], responses[part])
                student_logits, mask = student.response_logits(ordinary[part], responses[part])
                _, l_dist = oel_loss(student_logits, teacher_logits, mask, top_k=config.top_k)
                (l_dist.sum() / n).backward()  # the uniform mean over the update's steps
                loss_value += float(l_dist.detach().sum()) / n
                tokens += int(mask.sum())
            if config.optimizer.grad_clip is not None:
                torch.nn.utils.clip_grad_norm_(
                    student.model.parameters(), config.optimizer.grad_clip
                )
            optimizer.step()
        student.model.eval()
        metrics.append(
            {
                "run": run,
                "update": update,
                "loss": loss_value,
                "num_steps": len(batch),
                "tokens": tokens,
                "seconds": time.perf_counter() - started,
            }
        )
        if update % config.monitor_every == 0 or update == schedule.updates:
            record(update)
    return pd.DataFrame(metrics), pd.DataFrame(curve)
