"""The radix tree of prompt token ids behind prefix reuse."""

from __future__ import annotations

import pytest
import torch

from resail_pipeline.generation.prefix_tree import PrefixTree


def segment_kv(tokens: list[int]) -> torch.Tensor:
    """A stand-in cache for ``tokens``: ``(layers=2, 2, heads=1, len, dim=1)`` holding each id."""
    ids = torch.tensor(tokens, dtype=torch.float32)
    return ids.view(1, 1, 1, -1, 1).expand(2, 2, 1, -1, 1).clone()


def cache(tree: PrefixTree, base, end, tokens: list[int]) -> None:
    tree.store(base, end, segment_kv(tokens))


def test_keys_share_nodes_split_where_they_part_and_count_demand():
    tree = PrefixTree()
    a = tree.insert([1, 2, 3, 4])
    b = tree.insert([1, 2, 5])
    c = tree.insert([1, 2, 3, 4, 6])
    (top,) = tree.root.children.values()
    assert top.tokens == (1, 2) and top.demand == 3 and top.depth == 2
    assert a.tokens == (3, 4) and a.demand == 2 and a.parent is top and a.depth == 4
    assert b.tokens == (5,) and b.demand == 1
    assert c.tokens == (6,) and c.parent is a and c.depth == 5
    # a key ending inside a node splits it there
    d = tree.insert([1, 2, 3])
    assert d.tokens == (3,) and a.tokens == (4,) and a.parent is d and d.demand == 3
    assert [n.tokens for n in c.path()] == [(1, 2), (3,), (4,), (6,)]
    assert tree.insert([]) is tree.root


def test_base_is_the_deepest_shared_or_cached_node():
    tree = PrefixTree()
    a = tree.insert([1, 2, 3])
    b = tree.insert([1, 2, 4])
    assert PrefixTree.base(a) is PrefixTree.base(b) is a.parent
    lone = tree.insert([7, 8])
    assert PrefixTree.base(lone) is tree.root
    PrefixTree.release(b)
    assert PrefixTree.base(a) is tree.root  # (1, 2) is no longer shared


def test_pending_orders_shared_nodes_parents_first_and_skips_cached_ones():
    tree = PrefixTree()
    for key in ([1, 2, 3, 4], [1, 2, 3, 5], [1, 2, 6], [1, 2, 6], [9]):
        tree.insert(key)
    levels = [sorted(n.tokens for n in level) for level in tree.pending()]
    assert levels == [[(1, 2)], [(3,), (6,)]]
    top = tree.root.children[1]
    cache(tree, tree.root, top, [1, 2])
    assert [sorted(n.tokens for n in level) for level in tree.pending()] == [[(3,), (6,)]]


def test_path_cache_is_the_segments_in_order_and_splitting_keeps_it():
    tree = PrefixTree(max_tokens=100)
    end = tree.insert([1, 2, 3, 4, 5])
    cache(tree, tree.root, end, [1, 2, 3, 4, 5])
    other = tree.insert([1, 2, 3, 9])  # splits the cached node after 3 tokens
    assert other.parent.cached and other.parent.tokens == (1, 2, 3)
    assert end.tokens == (4, 5) and end.cached
    assert end.path_kv()[0, 0, 0, :, 0].tolist() == [1, 2, 3, 4, 5]
    assert PrefixTree.base(other) is other.parent


def test_stored_caches_fill_the_nodes_below_the_base():
    tree = PrefixTree(max_tokens=100)
    shared = tree.insert([1, 2])
    end = tree.insert([1, 2, 3, 4])
    tree.insert([1, 2, 3, 5])
    middle = end.parent
    cache(tree, tree.root, shared, [1, 2])
    cache(tree, shared, end, [3, 4])
    assert middle.kv[0, 0, 0, :, 0].tolist() == [3] and end.kv[0, 0, 0, :, 0].tolist() == [4]
    assert end.path_kv().shape == (2, 2, 1, 4, 1)


def test_a_call_without_a_budget_leaves_nothing():
    tree = PrefixTree()
    end = tree.insert([1, 2, 3])
    cache(tree, tree.root, end, [1, 2, 3])
    tree.finish_call()
    assert not tree.root.children and tree.cached_tokens == 0


def test_between_calls_the_least_recently_used_leaves_go_first():
    tree = PrefixTree(max_tokens=6)
    old = tree.insert([1, 2, 3, 4])
    cache(tree, tree.root, old, [1, 2, 3, 4])
    tree.insert([8, 9])  # demanded, never cached: dropped at the end of the call
    tree.finish_call()
    assert tree.cached_tokens == 4 and [n.tokens for n in tree.nodes()] == [(1, 2, 3, 4)]
    new = tree.insert([1, 2, 5, 6])  # splits the old node; (1, 2) is used again
    cache(tree, new.parent, new, [5, 6])
    tree.finish_call()
    # 6 tokens fit: (1, 2), (3, 4) and (5, 6); a seventh evicts the old leaf (3, 4)
    assert tree.cached_tokens == 6
    newest = tree.insert([1, 2, 5, 6, 7])
    cache(tree, new, newest, [7])
    tree.finish_call()
    assert tree.cached_tokens == 5
    assert sorted(n.tokens for n in tree.nodes()) == [(1, 2), (5, 6), (7,)]
    assert all(n.demand == 0 for n in tree.nodes())


def test_eviction_never_leaves_a_child_without_its_parent():
    tree = PrefixTree(max_tokens=2)
    end = tree.insert([1, 2, 3])
    child = tree.insert([1, 2, 3, 4])
    cache(tree, tree.root, end, [1, 2, 3])
    cache(tree, end, child, [4])
    tree.finish_call()
    for node in tree.nodes():
        assert all(n.cached for n in node.path())
    assert tree.cached_tokens <= 2


def test_a_negative_budget_is_refused():
    with pytest.raises(ValueError, match="max_tokens"):
        PrefixTree(max_tokens=-1)
