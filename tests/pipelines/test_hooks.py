"""The project's hooks: node timing, and the GPU's cached memory handed back after each node."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
import torch

from resail_pipeline.hooks import DeviceMemoryHook, NodeTimingHook
from resail_pipeline.settings import HOOKS


def test_every_hook_is_registered():
    assert {type(hook) for hook in HOOKS} == {NodeTimingHook, DeviceMemoryHook}


def test_a_node_logs_its_wall_time(caplog):
    hook, node = NodeTimingHook(), SimpleNamespace(name="cycle_1.score_node")
    with caplog.at_level(logging.INFO, logger="resail_pipeline.hooks"):
        hook.before_node_run(node)
        hook.after_node_run(node)
    assert "node cycle_1.score_node finished in" in caplog.text


@pytest.mark.parametrize(
    ("available", "initialized", "emptied"),
    [(False, False, 0), (True, False, 0), (True, True, 1)],
)
def test_the_cache_is_emptied_only_where_cuda_was_used(
    monkeypatch, available, initialized, emptied
):
    calls = []  # fakes of the CUDA queries: this machine may have no GPU
    monkeypatch.setattr(torch.cuda, "is_available", lambda: available)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: initialized)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty_cache"))
    DeviceMemoryHook().after_node_run(SimpleNamespace(name="cycle_1.score_node"))
    assert len(calls) == emptied
