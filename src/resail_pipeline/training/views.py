"""Next-token logits of one or two views of a step at its response positions, in one forward.

A step's privileged prompt is its ordinary prompt with an insert after the user message, so the
two views share a long prefix (the chat header and the whole history). When a row carries both
views it is packed as ``[shared prefix | ordinary rest + z | privileged rest + z]`` by
:mod:`resail_pipeline.packing`: the prefix is computed once, and each branch's logits equal those
of a separate forward of that view (to float rounding).

Logits are computed only where they are needed: the decoder's hidden states are gathered at the
positions that predict the response tokens, and only those go through the output layer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from transformers import PreTrainedModel

from resail_pipeline.generation.decoder import DecoderForward, unsupported
from resail_pipeline.packing import (
    PADDING,
    TRUNK,
    TreeRow,
    common_prefix_length,
    lay_out,
    tree_lengths,
    tree_mask,
)
from resail_pipeline.training.data import StepExample

__all__ = [
    "ORDINARY",
    "PRIVILEGED",
    "VIEWS",
    "PackedRows",
    "ResponseLogits",
    "ViewLogits",
    "ViewRow",
    "forward_views",
    "pack_rows",
    "view_logits",
]

ORDINARY = "ordinary"
PRIVILEGED = "privileged"
VIEWS = (ORDINARY, PRIVILEGED)

#: attention implementations that take a custom 4-D mask as given
_MASKABLE = ("sdpa", "eager")


class ResponseLogits(nn.Module):
    """A causal LM that returns logits only at requested positions.

    Wraps a Hugging Face ``*ForCausalLM`` without logit soft-capping (Qwen3 and the like):
    decoder, then the output layer on the gathered hidden states. The wrapped model is
    ``self.model``; engines (DDP, DeepSpeed) wrap this module.

    For the architectures :mod:`~resail_pipeline.generation.decoder` runs (Llama, Qwen2, Qwen3)
    the decoder is its functional forward over the model's own weights, the one rollouts run,
    compiled or not (``compile``), over the rows' tokens without their padding, each branch
    attending to its trunk and itself without a mask's wasted blocks
    (:meth:`~resail_pipeline.generation.decoder.DecoderForward.tree_hidden_states`). Other
    architectures, and ``functional=False`` (activation checkpointing, which
    hooks the model's own layers), run the model's decoder. The two agree to float rounding.

    Args:
        model: the causal LM.
        compile: compile the functional forward's per-layer functions (forward and backward).
        functional: use the functional forward where the architecture allows it.
    """

    def __init__(
        self, model: PreTrainedModel, *, compile: bool = False, functional: bool = True
    ) -> None:
        super().__init__()
        implementation = model.config._attn_implementation
        if implementation not in _MASKABLE:
            model.set_attn_implementation("sdpa")
        self.model = model
        self._decoder: DecoderForward | None = None
        if functional and unsupported(model) is None:
            self._decoder = DecoderForward(model, compile=compile)
        elif compile:
            raise ValueError(
                "compile: only the functional forward of a Llama-family model compiles"
            )

    @property
    def compiled(self) -> bool:
        """Whether the decoder runs compiled."""
        return self._decoder is not None and self._decoder.compiled

    def forward(
        self, input_ids: Tensor, segment: Tensor, position_ids: Tensor, positions: Tensor
    ) -> Tensor:
        """Logits at ``positions`` of rows laid out by :func:`~resail_pipeline.packing.lay_out`.

        Args:
            input_ids: Long ``(R, L)``.
            segment: Long ``(R, L)``, each column's segment (padding, trunk or branch).
            position_ids: Long ``(R, L)``.
            positions: Long ``(R, G)`` columns whose next-token logits are wanted.

        Returns:
            ``(R, G, V)`` logits.
        """
        if self._decoder is not None:
            # the rows' tokens without their padding, one after the other
            real = segment != PADDING  # (R, L)
            trees = tree_lengths(segment)
            hidden = self._decoder.tree_hidden_states(
                input_ids[real], position_ids[real], trees
            )  # (N, H)
            lengths = torch.tensor([0, *(sum(t) for t in trees[:-1])], device=hidden.device)
            index = (lengths.cumsum(0)[:, None] + positions).flatten()  # (R * G,): row starts on
            gathered = hidden.index_select(0, index).view(*positions.shape, -1)  # (R, G, H)
        else:
            hidden = self._model_hidden_states(input_ids, segment, position_ids)  # (R, L, H)
            index = positions.unsqueeze(-1).expand(-1, -1, hidden.shape[-1])  # (R, G, H)
            gathered = hidden.gather(1, index)
        return self.model.get_output_embeddings()(gathered)  # (R, G, V)

    def _model_hidden_states(
        self, input_ids: Tensor, segment: Tensor, position_ids: Tensor
    ) -> Tensor:
        """``(R, L, H)`` through the model's own decoder: one-branch rows under their padding
        mask, trees under the tree mask."""
        if int(segment.max()) <= TRUNK + 1:
            attention_mask = (segment != PADDING).long()  # (R, L)
        else:
            attention_mask = tree_mask(segment)  # (R, 1, L, L)
            if self.model.config._attn_implementation == "eager":
                # eager attention adds its mask to the scores: 0 where allowed, the dtype's
                # minimum elsewhere
                dtype = self.model.get_input_embeddings().weight.dtype
                if torch.is_autocast_enabled(input_ids.device.type):
                    dtype = torch.get_autocast_dtype(input_ids.device.type)
                zero = torch.zeros((), dtype=dtype, device=attention_mask.device)
                attention_mask = torch.where(attention_mask, zero, torch.finfo(dtype).min)
        return self.model.get_decoder()(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=False,
        ).last_hidden_state


@dataclass(frozen=True)
class ViewRow:
    """One step's inputs for one forward: one or two prompts followed by the same response.

    Attributes:
        prompts: token ids of each view's prompt, in the order the caller names the views.
        response: the response tokens ``z``.
    """

    prompts: tuple[Sequence[int], ...]
    response: Sequence[int]


@dataclass(frozen=True)
class PackedRows:
    """Model inputs for a list of :class:`ViewRow` (right-padded).

    Attributes:
        input_ids: Long ``(R, L)``.
        segment: Long ``(R, L)``, each column's segment (:mod:`resail_pipeline.packing`).
        position_ids: Long ``(R, L)``.
        positions: Long ``(R, nb * T)``: branch ``j``'s position predicting ``z_k`` at column
            ``j * T + k`` (0 at padding).
        num_branches: ``nb``, the most views any row carries.
        max_response: ``T``, the longest response.
    """

    input_ids: Tensor
    segment: Tensor
    position_ids: Tensor
    positions: Tensor
    num_branches: int
    max_response: int


def pack_rows(
    rows: Sequence[ViewRow], pad_id: int, device: torch.device | str = "cpu"
) -> PackedRows:
    """Lay out rows of one or two branches over a shared prefix (see the module docstring)."""
    if not rows:
        raise ValueError("rows: need at least one row")
    num_branches = max(len(r.prompts) for r in rows)
    if num_branches > 2 or min(len(r.prompts) for r in rows) < 1:
        raise ValueError("rows: every row needs one or two prompts")
    t_max = max(len(r.response) for r in rows)
    if t_max == 0:
        raise ValueError("rows: every response is empty")

    trees: list[TreeRow] = []
    for row in rows:
        response = list(row.response)
        if not response:
            raise ValueError("rows: a response is empty")
        prefix = 0
        if len(row.prompts) > 1:  # leaving each branch a prompt token, its response's predictor
            prefix = min(common_prefix_length(row.prompts), *(len(p) - 1 for p in row.prompts))
        trunk = row.prompts[0][:prefix]
        trees.append(TreeRow(trunk, [[*p[prefix:], *response] for p in row.prompts]))
    layout = lay_out(trees, pad_id)
    gathers: list[list[int]] = []
    for i, row in enumerate(rows):
        gather: list[int] = []
        prefix = layout.trunk_lengths[i]
        for j, prompt in enumerate(row.prompts):
            first = len(prompt) - prefix  # the response's first offset in the branch
            offsets = range(first, first + len(row.response))
            gather += layout.predictors(i, j, offsets) + [0] * (t_max - len(row.response))
        gathers.append(gather + [0] * (t_max * (num_branches - len(row.prompts))))
    return PackedRows(
        input_ids=layout.input_ids.to(device),
        segment=layout.segment.to(device),
        position_ids=layout.position_ids.to(device),
        positions=torch.tensor(gathers, dtype=torch.long, device=device),
        num_branches=num_branches,
        max_response=t_max,
    )


def forward_views(module: nn.Module, packed: PackedRows) -> Tensor:
    """Run ``module`` (a :class:`ResponseLogits`, possibly engine-wrapped) on packed rows.

    Returns:
        ``(R, nb, T, V)`` logits: ``[:, j, k]`` predicts ``z_k`` under the row's branch ``j``.
    """
    logits = module(
        packed.input_ids, packed.segment, packed.position_ids, packed.positions
    )  # (R, nb * T, V)
    r, _, v = logits.shape
    return logits.view(r, packed.num_branches, packed.max_response, v)  # (R, nb, T, V)


@dataclass(frozen=True)
class ViewLogits:
    """Response-position logits of a batch of steps, per view.

    Attributes:
        logits: ``view -> (N_v, T, V)`` for the rows that carry the view.
        rows: ``view -> Long (N_v,)`` those rows' positions in the batch.
        mask: Bool ``(N, T)`` valid response tokens of every row.
        response_ids: Long ``(N, T)`` the response tokens (0 at padding).
    """

    logits: dict[str, Tensor]
    rows: dict[str, Tensor]
    mask: Tensor
    response_ids: Tensor


def _prompt(step: StepExample, view: str) -> tuple[int, ...]:
    if view == ORDINARY:
        return step.ordinary_ids
    if view == PRIVILEGED:
        return step.privileged_ids
    raise ValueError(f"view: must be one of {VIEWS}, got {view!r}")


def view_logits(
    module: nn.Module,
    steps: Sequence[StepExample],
    responses: Sequence[Sequence[int]],
    views: Sequence[tuple[str, ...]],
    *,
    pad_id: int,
    device: torch.device | str,
) -> ViewLogits:
    """One forward of ``module`` over the requested views of each step, packed per row.

    Args:
        module: a :class:`ResponseLogits` (possibly engine-wrapped).
        steps: the steps.
        responses: each step's response tokens ``z``.
        views: each step's views, e.g. ``("ordinary", "privileged")``; an empty tuple leaves the
            row out of the forward (its mask row is still returned). Two views with the same
            prompt share one branch, so their logits are the same numbers.
        pad_id: padding token id.
        device: where the inputs go.
    """
    if not len(steps) == len(responses) == len(views):
        raise ValueError(
            f"steps, responses, views: lengths differ ({len(steps)}, {len(responses)}, {len(views)})"
        )
    t_max = max(len(z) for z in responses)
    mask = torch.zeros((len(steps), t_max), dtype=torch.bool)
    response_ids = torch.zeros((len(steps), t_max), dtype=torch.long)
    for i, z in enumerate(responses):
        mask[i, : len(z)] = True
        response_ids[i, : len(z)] = torch.tensor(list(z))
    mask, response_ids = mask.to(device), response_ids.to(device)

    active = [i for i, v in enumerate(views) if v]
    logits: dict[str, Tensor] = {}
    rows: dict[str, Tensor] = {}
    if active:
        # views with the same prompt (no summary inserted) are one branch, computed once
        prompts = [{v: _prompt(steps[i], v) for v in views[i]} for i in active]
        branches = [tuple(dict.fromkeys(p.values())) for p in prompts]
        packed = pack_rows(
            [ViewRow(b, responses[i]) for b, i in zip(branches, active, strict=True)],
            pad_id,
            device,
        )
        out = forward_views(module, packed)  # (R, nb, T_active, V)
        for view in VIEWS:
            picked = [
                (r, branches[r].index(prompts[r][view]))
                for r, i in enumerate(active)
                if view in views[i]
            ]
            if not picked:
                continue
            branch = {j for _, j in picked}
            if len(picked) == len(active) and len(branch) == 1:
                chosen = out[:, branch.pop()]  # (N_v, T_active, V), a view without copy
            else:
                r_idx = torch.tensor([r for r, _ in picked], device=out.device)
                b_idx = torch.tensor([j for _, j in picked], device=out.device)
                chosen = out[r_idx, b_idx]  # (N_v, T_active, V)
            t_active = chosen.shape[1]
            if t_active < t_max:  # the active rows' responses are shorter than the batch's
                chosen = nn.functional.pad(chosen, (0, 0, 0, t_max - t_active))  # (N_v, T, V)
            logits[view] = chosen
            rows[view] = torch.tensor(
                [active[r] for r, _ in picked], dtype=torch.long, device=out.device
            )
    return ViewLogits(logits=logits, rows=rows, mask=mask, response_ids=response_ids)
