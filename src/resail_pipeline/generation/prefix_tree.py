"""A radix tree of prompt token ids whose nodes hold the key/value cache of their segment.

A generation call inserts the key of every distinct prompt (its token ids but the last, whose
logits are always computed afresh) and learns, for each prompt, the deepest node on its path that
either already holds a cache or is shared with another prompt of the call. The cache of the shared
nodes is computed once, level by level from the root, and each prompt's own tail is computed on
top of its node's path. Nothing is assumed about how prompts relate (a rendered history need not
be append-only): common prefixes are found from the token ids alone.

Each node's ``kv`` is a tensor ``(layers, 2, kv_heads, len(tokens), head_dim)``: the keys (``0``)
and values (``1``) of its own segment, computed with the whole path before it, at the positions
the path gives it. A node's cache is valid only with its ancestors', so caches are evicted leaf
first. Between calls the tree keeps at most ``max_tokens`` cached tokens, least recently used
first out; with ``max_tokens = 0`` it is emptied after every call.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import torch


@dataclass(eq=False)
class Node:
    """A segment of token ids and the cache computed for it.

    Attributes:
        tokens: the ids this node adds to its parent's path.
        parent: ``None`` for the root.
        depth: tokens on the path from the root through this node.
        children: child nodes by their first token.
        kv: ``(layers, 2, kv_heads, len(tokens), head_dim)``, or ``None`` while not computed.
        demand: distinct prompts of the current call whose key runs through this whole node.
        last_use: the call that last used it (least recently used nodes are evicted first).
    """

    tokens: tuple[int, ...]
    parent: Node | None
    depth: int
    children: dict[int, Node] = field(default_factory=dict)
    kv: torch.Tensor | None = None
    demand: int = 0
    last_use: int = 0

    @property
    def cached(self) -> bool:
        return self.kv is not None

    def path(self) -> list[Node]:
        """The nodes from the root's first child down to this one."""
        nodes = []
        node: Node | None = self
        while node is not None and node.parent is not None:
            nodes.append(node)
            node = node.parent
        return nodes[::-1]

    def path_kv(self) -> torch.Tensor | None:
        """``(layers, 2, kv_heads, depth, head_dim)``: the cache of the whole path, or ``None`` for
        the root."""
        segments = [node.kv for node in self.path()]
        if not segments:
            return None
        if any(kv is None for kv in segments):
            raise RuntimeError("prefix tree: a node on the path has no cache")
        return segments[0] if len(segments) == 1 else torch.cat(segments, dim=3)


class PrefixTree:
    """The radix tree; see the module notes.

    Args:
        max_tokens: cached tokens kept between calls (0: none).
    """

    def __init__(self, max_tokens: int = 0) -> None:
        if max_tokens < 0:
            raise ValueError(f"max_tokens: must be >= 0, got {max_tokens}")
        self.max_tokens = max_tokens
        self.root = Node(tokens=(), parent=None, depth=0)
        self.clock = 0

    def nodes(self) -> Iterator[Node]:
        """Every node but the root, parents before children."""
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            yield node
            stack.extend(node.children.values())

    @property
    def cached_tokens(self) -> int:
        return sum(len(node.tokens) for node in self.nodes() if node.cached)

    def clear(self) -> None:
        self.root.children.clear()

    def insert(self, key: Sequence[int]) -> Node:
        """Add one prompt's key to the current call: every node its path runs through gains one
        ``demand``, nodes are split where the key ends or leaves them, and the rest of the key
        becomes a new node. Returns the node where the key ends (the root for an empty key)."""
        node, i = self.root, 0
        while i < len(key):
            child = node.children.get(key[i])
            if child is None:
                child = Node(tokens=tuple(key[i:]), parent=node, depth=node.depth + len(key) - i)
                node.children[key[i]] = child
            else:
                shared = _common_length(child.tokens, key, i)
                if shared < len(child.tokens):
                    child = self._split(child, shared)
            child.demand += 1
            child.last_use = self.clock
            node, i = child, i + len(child.tokens)
        return node

    def _split(self, node: Node, at: int) -> Node:
        """Cut ``node`` after its first ``at`` tokens; returns the new upper part."""
        parent = node.parent
        assert parent is not None and 0 < at < len(node.tokens)
        upper = Node(
            tokens=node.tokens[:at],
            parent=parent,
            depth=node.depth - len(node.tokens) + at,
            kv=None if node.kv is None else node.kv[:, :, :, :at].clone(),
            demand=node.demand,
            last_use=node.last_use,
        )
        parent.children[upper.tokens[0]] = upper
        node.tokens = node.tokens[at:]
        node.parent = upper
        if node.kv is not None:
            node.kv = node.kv[:, :, :, at:].clone()
        upper.children[node.tokens[0]] = node
        return upper

    @staticmethod
    def release(end: Node) -> None:
        """Take one prompt's key, which ends at ``end``, back out of the call's demand."""
        node: Node | None = end
        while node is not None and node.parent is not None:
            node.demand -= 1
            node = node.parent

    @staticmethod
    def base(end: Node) -> Node:
        """The deepest node on the path to ``end`` (inclusive) that holds a cache or is shared by
        more than one prompt of the call: a prompt is computed from there on."""
        node = end
        while node.parent is not None and not (node.cached or node.demand > 1):
            node = node.parent
        return node

    def pending(self) -> list[list[Node]]:
        """The shared nodes of the call that still need a cache, by level: every node of a level
        has its parent cached or in an earlier level."""
        levels: list[list[Node]] = []
        frontier = [(child, 0) for child in self.root.children.values()]
        while frontier:
            node, level = frontier.pop()
            if node.demand > 1 and not node.cached:
                while len(levels) <= level:
                    levels.append([])
                levels[level].append(node)
                level += 1
            if node.demand > 1 or node.cached:
                frontier.extend((child, level) for child in node.children.values())
        return levels

    def store(self, base: Node, end: Node, kv: torch.Tensor) -> None:
        """Keep the cache of the nodes below ``base`` down to ``end``, whose concatenated segments
        ``kv`` (``(layers, 2, kv_heads, end.depth - base.depth, head_dim)``) covers."""
        offset = 0
        for node in end.path()[len(base.path()) :]:
            node.kv = kv[:, :, :, offset : offset + len(node.tokens)].clone()
            offset += len(node.tokens)

    def finish_call(self) -> None:
        """End the call: demands reset, nodes without a cache dropped, and the cached tokens cut
        to ``max_tokens`` by evicting the least recently used leaves."""
        self.clock += 1
        if self.max_tokens == 0:
            self.clear()
            return
        for node in self._post_order():
            node.demand = 0
            if not node.cached and not node.children:
                self._remove(node)
        total = self.cached_tokens
        leaves = [_Leaf(node) for node in self.nodes() if not node.children]
        heapq.heapify(leaves)
        while total > self.max_tokens and leaves:
            node = heapq.heappop(leaves).node
            parent = self._remove(node)
            total -= len(node.tokens)
            if parent is not self.root and not parent.children:
                heapq.heappush(leaves, _Leaf(parent))

    def _post_order(self) -> list[Node]:
        """Every node but the root, children before parents."""
        return list(self.nodes())[::-1]

    @staticmethod
    def _remove(node: Node) -> Node:
        """Detach a leaf from its parent; returns the parent."""
        parent = node.parent
        assert parent is not None and not node.children
        del parent.children[node.tokens[0]]
        return parent


@dataclass(frozen=True)
class _Leaf:
    """A leaf in the eviction heap: least recently used first, deeper first among equals."""

    node: Node

    def __lt__(self, other: _Leaf) -> bool:
        return (self.node.last_use, -self.node.depth) < (other.node.last_use, -other.node.depth)


def _common_length(segment: tuple[int, ...], key: Sequence[int], start: int) -> int:
    """How many leading tokens of ``segment`` equal ``key[start:]``."""
    n = min(len(segment), len(key) - start)
    i = 0
    while i < n and segment[i] == key[start + i]:
        i += 1
    return i
