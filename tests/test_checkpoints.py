"""Where a loaded policy runs."""

from __future__ import annotations

import pytest
import torch

from resail_pipeline.checkpoints import load_model, resolve_device


def test_auto_is_the_first_gpu_when_torch_sees_one(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    assert resolve_device("auto") == torch.device("cuda", 3)


@pytest.mark.parametrize("device", ["cpu", torch.device("cpu"), "cuda:1"])
def test_a_named_device_is_kept(device):
    assert resolve_device(device) == torch.device(device)


def test_a_model_loads_on_the_resolved_device(tiny_checkpoint):
    model = load_model(tiny_checkpoint, device="auto")
    assert next(model.parameters()).device == resolve_device("auto")
