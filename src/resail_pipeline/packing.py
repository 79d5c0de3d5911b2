"""Sequences that share a prefix, packed so that the prefix is computed once.

A packed row is one *trunk* (the shared prefix) followed by *branches* (the rest of each
sequence). Position ids restart at the trunk's end for every branch, and under the tree attention
mask each token sees the trunk and the earlier tokens of its own branch only, so every branch
computes exactly what it would as a separate sequence (to float rounding) while the trunk is
computed once. Behaviour cloning packs a demonstrated step's views and repeated occurrences this
way (:mod:`resail_pipeline.bootstrap.packing`); the trainer packs a step's ordinary and privileged
prompts before the same response (:mod:`resail_pipeline.training.views`).

:func:`lay_out` gives the token, position and segment tensors of a batch of rows; the masks and
the columns whose hidden states predict a branch's tokens come from the :class:`TreeBatch`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = [
    "PADDING",
    "TRUNK",
    "TreeBatch",
    "TreeRow",
    "common_prefix_length",
    "lay_out",
    "tree_lengths",
    "tree_mask",
]

#: segment of a padding column
PADDING = -1
#: segment of a trunk column; branch ``b`` is segment ``b + 1``
TRUNK = 0


def common_prefix_length(sequences: Sequence[Sequence[int]]) -> int:
    """Length of the longest prefix every sequence shares (the whole sequence if only one)."""
    first = sequences[0]
    n = min(len(s) for s in sequences)
    for i in range(n):
        if any(s[i] != first[i] for s in sequences[1:]):
            return i
    return n


@dataclass(frozen=True)
class TreeRow:
    """A trunk and the branches that continue it (token ids)."""

    trunk: Sequence[int]
    branches: Sequence[Sequence[int]]


@dataclass(frozen=True)
class TreeBatch:
    """Rows laid out side by side, right-padded.

    Attributes:
        input_ids: Long ``(R, L)``.
        position_ids: Long ``(R, L)``: the trunk from 0, each branch from the trunk's end.
        segment: Long ``(R, L)``: :data:`PADDING`, :data:`TRUNK`, or ``b + 1`` for branch ``b``.
        trunk_lengths: each row's trunk length.
        branch_starts: each row's column where each of its branches starts.
    """

    input_ids: Tensor
    position_ids: Tensor
    segment: Tensor
    trunk_lengths: tuple[int, ...]
    branch_starts: tuple[tuple[int, ...], ...]

    @property
    def width(self) -> int:
        return self.input_ids.shape[1]

    def predictors(self, row: int, branch: int, offsets: Sequence[int]) -> list[int]:
        """The columns whose hidden states predict the tokens at ``offsets`` of ``branch`` of
        ``row``: the token before it in the branch, or the trunk's last token when it opens the
        branch."""
        start, trunk = self.branch_starts[row][branch], self.trunk_lengths[row]
        if 0 in offsets and trunk == 0:
            raise ValueError("offsets: a branch's first token has no predictor without a trunk")
        return [start + k - 1 if k > 0 else trunk - 1 for k in offsets]

    def tree_mask(self) -> Tensor:
        """Bool ``(R, 1, L, L)`` (:func:`tree_mask` of :attr:`segment`)."""
        return tree_mask(self.segment)

    def padding_mask(self) -> Tensor:
        """Long ``(R, L)``, 1 at real tokens: the whole mask where every row is one sequence."""
        return (self.segment != PADDING).long()


def tree_mask(segment: Tensor) -> Tensor:
    """Bool ``(R, 1, L, L)`` of rows whose columns are in segments ``segment`` ``(R, L)``,
    ``True`` where a query may attend to a key: causally, within the trunk and its own branch. A
    padding query sees itself only, so that no row of the mask is empty."""
    index = torch.arange(segment.shape[1], device=segment.device)
    causal = index[None, :, None] >= index[None, None, :]  # (1, L, L): key <= query
    query = segment[:, :, None]  # (R, L, 1)
    key = segment[:, None, :]  # (R, 1, L)
    visible = ((key == TRUNK) | (key == query)) & (key != PADDING) & (query != PADDING)
    mask = (causal & visible) | ((query == PADDING) & (index[:, None] == index))
    return mask[:, None]


def tree_lengths(segment: Tensor) -> list[tuple[int, ...]]:
    """Each row's trunk length and branch lengths, in order, from its segments ``(R, L)``
    (laid out by :func:`lay_out`: trunk, then branches, then padding)."""
    branches = max(int(segment.max()), 1)
    counts = torch.stack([(segment == s).sum(1) for s in range(TRUNK, branches + 1)], 1)
    return [(row[0], *(n for n in row[1:] if n)) for row in counts.tolist()]


def lay_out(rows: Sequence[TreeRow], pad_id: int, *, pad_to_multiple_of: int = 1) -> TreeBatch:
    """``rows`` as one right-padded batch, its width rounded up to ``pad_to_multiple_of``."""
    if not rows:
        raise ValueError("rows: need at least one row")
    lengths = [len(r.trunk) + sum(len(b) for b in r.branches) for r in rows]
    width = -(-max(lengths) // pad_to_multiple_of) * pad_to_multiple_of
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    position_ids = torch.zeros((len(rows), width), dtype=torch.long)
    segment = torch.full((len(rows), width), PADDING, dtype=torch.long)
    starts: list[tuple[int, ...]] = []
    for i, row in enumerate(rows):
        n = len(row.trunk)
        input_ids[i, :n] = torch.tensor(list(row.trunk), dtype=torch.long)
        position_ids[i, :n] = torch.arange(n)
        segment[i, :n] = TRUNK
        start, row_starts = n, []
        for b, branch in enumerate(row.branches):
            k = len(branch)
            input_ids[i, start : start + k] = torch.tensor(list(branch), dtype=torch.long)
            position_ids[i, start : start + k] = torch.arange(n, n + k)
            segment[i, start : start + k] = b + 1
            row_starts.append(start)
            start += k
        starts.append(tuple(row_starts))
    return TreeBatch(
        input_ids=input_ids,
        position_ids=position_ids,
        segment=segment,
        trunk_lengths=tuple(len(r.trunk) for r in rows),
        branch_starts=tuple(starts),
    )
