"""Plain per-step forwards of each view, the reference the packed trainer is checked against."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def separate_view_logits(
    model, steps, responses: Sequence[Sequence[int]], view: str
) -> torch.Tensor:
    """``(N, T, V)`` response logits of one view, one plain forward per step (zeros at padding)."""
    t_max = max(len(z) for z in responses)
    rows = []
    for step, z in zip(steps, responses, strict=True):
        prompt = step.ordinary_ids if view == "ordinary" else step.privileged_ids
        logits = model(input_ids=torch.tensor([list(prompt) + list(z)])).logits[0]  # (L, V)
        out = logits[len(prompt) - 1 : len(prompt) - 1 + len(z)]  # (|z|, V)
        rows.append(torch.nn.functional.pad(out, (0, 0, 0, t_max - len(z))))
    return torch.stack(rows)  # (N, T, V)


def response_mask(responses: Sequence[Sequence[int]]) -> torch.Tensor:
    """Bool ``(N, T)``: True at each response's tokens."""
    mask = torch.zeros((len(responses), max(len(z) for z in responses)), dtype=torch.bool)
    for i, z in enumerate(responses):
        mask[i, : len(z)] = True
    return mask


def padded(rows: Sequence[Sequence[float]], shape: tuple[int, int]) -> torch.Tensor:
    out = torch.zeros(shape)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row)
    return out
