"""Behaviour-cloning sequences of the demonstrated steps, packed so shared prefixes are computed once.

Each demonstrated step is trained in the ordinary view, ``chat_prompt(tok, render_user_message(h))``
followed by the expert response, and, for a share of its occurrences, in the privileged view, where
the user message ends with the rules-based summary of *another* demonstration of the same task
(followed by the informed expert's response where the step has one: ALFWorld's searching
demonstrations, whose privileged target is the planner's, which knows where the objects are).
(A curriculum may keep only a share of the ordinary occurrences, down to none: ``ordinary_share``.
The steps of a policy's episode rolled out in the privileged view may instead be trained as they
were generated, in that view alone with the episode's own summary: :func:`guided_groups`.)
Both views of a step share the whole ordinary user message as a token prefix, and identical steps
(the first steps of a task's demonstrations, before any mistake) occur many times.

A :class:`PackedRow` therefore holds one *trunk* (the common prefix) followed by several
*branches* (the rest of each sequence), laid out by :mod:`resail_pipeline.packing` under its tree
attention mask, so that every branch computes exactly what it would as a separate sequence while
the trunk is computed once. A repeated sequence is one branch with a weight equal to its number of
occurrences.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields

import torch

from resail_pipeline.bootstrap.demonstrations import Demonstration, demonstration_response
from resail_pipeline.packing import TreeRow, common_prefix_length, lay_out
from resail_pipeline.prompts import Summary, add_privileged, chat_prompt, render_user_message


@dataclass(frozen=True)
class Branch:
    """One sequence's tokens after the trunk.

    Attributes:
        ids: the tokens: the rest of the prompt, then the response and end-of-sequence.
        prompt_len: how many leading ``ids`` belong to the prompt (no loss on them).
        weight: how many training occurrences the sequence stands for.
        privileged: the sequence is a privileged view.
    """

    ids: tuple[int, ...]
    prompt_len: int
    weight: float
    privileged: bool

    @property
    def response_len(self) -> int:
        return len(self.ids) - self.prompt_len


@dataclass(frozen=True)
class PackedRow:
    """A trunk and the branches that continue it (see the module docstring)."""

    trunk: tuple[int, ...]
    branches: tuple[Branch, ...]

    def __len__(self) -> int:
        return len(self.trunk) + sum(len(b.ids) for b in self.branches)

    def sequences(self) -> list[tuple[list[int], int, float]]:
        """Each branch as the separate sequence it stands for: ``(ids, prompt_len, weight)``."""
        return [
            ([*self.trunk, *b.ids], len(self.trunk) + b.prompt_len, b.weight) for b in self.branches
        ]


@dataclass
class StepGroup:
    """Every occurrence of one demonstrated step: the same ordinary message and expert response.

    Attributes:
        message: the ordinary-view user message.
        response: the expert response.
        count: how often the step occurs in the demonstrations.
        ordinary: the occurrences trained in the ordinary view (all of them by default).
        summaries: the privileged views drawn for its occurrences: summary -> occurrences.
    """

    message: str
    response: str
    count: int = 0
    ordinary: int = 0
    summaries: Counter[Summary] = field(default_factory=Counter)


def _unchanged(text: str) -> str:
    return text


def group_steps(
    demos: Sequence[Demonstration],
    guides: Sequence[Demonstration],
    *,
    privileged_share: float,
    seed: int | str,
    rename: Callable[[int], Callable[[str], str]] | None = None,
    ordinary_share: float = 1.0,
) -> list[StepGroup]:
    """The distinct steps of ``demos`` with their counts and drawn privileged summaries.

    Args:
        demos: the demonstrations to train on.
        guides: the demonstrations whose summaries may serve as guidance; a step is paired with
            the summary of another demonstration of its task, never with its own.
        privileged_share: probability that an occurrence also yields a privileged sequence.
        seed: seeds the draws.
        rename: task id -> a text transform applied to everything of that task (message,
            expert action, summaries): a renamed copy (:mod:`~.renaming`), or a copying drill
            (:mod:`~.drills`).
        ordinary_share: probability that an occurrence is trained in the ordinary view (below 1,
            a draw per occurrence; at 1 none, so the draws of the privileged views are unchanged).
    """
    by_task: dict[int, list[tuple[str, Summary]]] = defaultdict(list)
    for guide in guides:
        by_task[guide.task_id].append((guide.traj_id, guide.summary))
    rng = random.Random(seed)
    groups: dict[tuple[str, str], StepGroup] = {}
    for demo in demos:
        r = _unchanged if rename is None else rename(demo.task_id)
        others = [
            Summary(s.outcome, r(s.text))
            for traj_id, s in by_task[demo.task_id]
            if traj_id != demo.traj_id
        ]
        for step in demo.steps:
            message = r(render_user_message(step.history))
            group = _group(groups, message, r(step.expert))
            group.count += 1
            if ordinary_share >= 1.0 or rng.random() < ordinary_share:
                group.ordinary += 1
            if others and rng.random() < privileged_share:
                # the privileged view's own target where the step has one (an informed expert's)
                informed = _group(groups, message, r(step.privileged_expert))
                informed.summaries[rng.choice(others)] += 1
    return list(groups.values())


def _group(groups: dict[tuple[str, str], StepGroup], message: str, expert: str) -> StepGroup:
    """The group of (``message``, ``expert``), made on first use."""
    group = groups.get((message, expert))
    if group is None:
        group = groups[(message, expert)] = StepGroup(message, demonstration_response(expert))
    return group


def guided_groups(demos: Sequence[Demonstration]) -> list[StepGroup]:
    """The steps of episodes generated in the privileged view, as they were generated: every
    occurrence in the privileged view alone, with the summary of its episode (``guide``).

    Raises:
        ValueError: naming the first episode that has no guide.
    """
    groups: dict[tuple[str, str, Summary], StepGroup] = {}
    for demo in demos:
        if demo.guide is None:
            raise ValueError(f"guide: episode {demo.traj_id} was not generated with a summary")
        for step in demo.steps:
            message, expert = render_user_message(step.history), step.expert
            key = (message, expert, demo.guide)
            group = groups.get(key)
            if group is None:
                group = groups[key] = StepGroup(message, demonstration_response(expert))
            group.count += 1
            group.summaries[demo.guide] += 1
    return list(groups.values())


def pack_rows(groups: Sequence[StepGroup], tokenizer, *, max_branches: int) -> list[PackedRow]:
    """Tokenize ``groups`` into rows of at most ``max_branches`` branches each.

    Groups of the same message (a step whose privileged view has a target of its own) share
    their rows: the first row of a message carries its ordinary views (of the groups trained in
    it), privileged views fill the remaining branches, each branch with its own group's response,
    and further rows repeat the trunk. A message trained in no view yields no row.
    """
    if max_branches < 1:
        raise ValueError(f"max_branches: must be >= 1, got {max_branches}")
    eos = tokenizer.eos_token_id
    by_message: dict[str, list[StepGroup]] = defaultdict(list)
    for group in groups:
        by_message[group.message].append(group)
    rows: list[PackedRow] = []
    for message, same in by_message.items():
        # (user message, weight, privileged, response) of every sequence of this message
        views = [(message, float(g.ordinary), False, g.response) for g in same if g.ordinary]
        views += [
            (add_privileged(message, s), float(n), True, g.response)
            for g in same
            for s, n in g.summaries.items()
        ]
        if not views:
            continue
        prompts = [
            tokenizer(chat_prompt(tokenizer, m), add_special_tokens=False).input_ids
            for m, _, _, _ in views
        ]
        responses = {r: [*tokenizer(r, add_special_tokens=False).input_ids, eos] for *_, r in views}
        trunk_len = common_prefix_length(prompts)
        trunk = tuple(prompts[0][:trunk_len])
        branches = [
            Branch(tuple(p[trunk_len:] + responses[r]), len(p) - trunk_len, weight, privileged)
            for p, (_, weight, privileged, r) in zip(prompts, views, strict=True)
        ]
        for start in range(0, len(branches), max_branches):
            rows.append(PackedRow(trunk, tuple(branches[start : start + max_branches])))
    return rows


@dataclass(frozen=True)
class Batch:
    """Padded tensors of several packed rows.

    Attributes:
        input_ids: ``(B, T)`` token ids, padded on the right.
        position_ids: ``(B, T)`` positions: the trunk from 0, each branch from the trunk's end.
        attention_mask: ``(B, 1, T, T)`` boolean, ``True`` where a query may attend to a key.
        source: ``(N,)`` flat indices into ``B * T`` of the hidden states that predict a target.
        target: ``(N,)`` the tokens to predict: the responses', and the prompts' when collated
            with ``prompt_targets``.
        weight: ``(N,)`` each target's weight: the occurrences of the sequences it belongs to.
        response: ``(N,)`` boolean, ``True`` where the target is a response token.
    """

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    attention_mask: torch.Tensor
    source: torch.Tensor
    target: torch.Tensor
    weight: torch.Tensor
    response: torch.Tensor

    @property
    def tokens(self) -> int:
        return self.input_ids.numel()

    def to(self, device: torch.device | str) -> Batch:
        """The batch with every tensor on ``device``."""
        return Batch(**{f.name: getattr(self, f.name).to(device) for f in fields(self)})


def collate(
    rows: Sequence[PackedRow],
    pad_id: int,
    pad_to_multiple_of: int = 8,
    *,
    prompt_targets: bool = False,
) -> Batch:
    """Lay out ``rows`` as one batch with the tree attention mask (see the module docstring).

    The targets are the response tokens; with ``prompt_targets`` also every prompt token after
    the first, a trunk token weighted by the occurrences of all its row's branches (each
    separate sequence repeats it), a branch's prompt token by its branch's.
    """
    if any(not r.trunk for r in rows):
        raise ValueError("rows: every packed row needs a trunk (the first token has no predictor)")
    layout = lay_out(
        [TreeRow(r.trunk, [b.ids for b in r.branches]) for r in rows],
        pad_id,
        pad_to_multiple_of=pad_to_multiple_of,
    )
    width = layout.width
    sources: list[int] = []
    targets: list[int] = []
    weights: list[float] = []
    response: list[bool] = []
    for i, row in enumerate(rows):
        n = len(row.trunk)
        if prompt_targets:
            shared = sum(b.weight for b in row.branches)
            sources += [i * width + j - 1 for j in range(1, n)]
            targets += row.trunk[1:]
            weights += [shared] * (n - 1)
            response += [False] * (n - 1)
        for b, branch in enumerate(row.branches):
            offsets = range(0 if prompt_targets else branch.prompt_len, len(branch.ids))
            sources += [i * width + c for c in layout.predictors(i, b, offsets)]
            targets += [branch.ids[j] for j in offsets]
            weights += [branch.weight] * len(offsets)
            response += [j >= branch.prompt_len for j in offsets]
    return Batch(
        input_ids=layout.input_ids,
        position_ids=layout.position_ids,
        attention_mask=layout.tree_mask(),  # (B, 1, T, T)
        source=torch.tensor(sources, dtype=torch.long),
        target=torch.tensor(targets, dtype=torch.long),
        weight=torch.tensor(weights, dtype=torch.float32),
        response=torch.tensor(response, dtype=torch.bool),
    )


def plan_batches(lengths: Sequence[int], token_budget: int, rng: random.Random) -> list[list[int]]:
    """Row indices grouped into batches of similar length, in a shuffled order.

    Rows are sorted by length (ties broken at random) and cut greedily so that
    ``rows * longest <= token_budget``; a row longer than the budget forms a batch of its own.
    Similar lengths keep padding, and so memory and time, proportional to the real tokens.
    """
    if token_budget < 1:
        raise ValueError(f"token_budget: must be >= 1, got {token_budget}")
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], rng.random()))
    batches: list[list[int]] = []
    current: list[int] = []
    for i in order:
        if current and (len(current) + 1) * lengths[i] > token_budget:
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    rng.shuffle(batches)
    return batches
