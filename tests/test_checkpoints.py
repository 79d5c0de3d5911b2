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


class FakeModelBefore523:
    """A fake for this test only: a model of transformers 5.19-5.22, which names activation
    checkpointing ``gradient_checkpointing_enable`` and has no ``activation_checkpointing_enable``."""

    def __init__(self) -> None:
        self.calls = []

    def gradient_checkpointing_enable(self) -> None:
        self.calls.append("gradient_checkpointing_enable")


def test_activation_checkpointing_under_either_transformers_name(tiny_model):
    from resail_pipeline.checkpoints import enable_activation_checkpointing

    old = FakeModelBefore523()
    enable_activation_checkpointing(old)
    assert old.calls == ["gradient_checkpointing_enable"]
    enable_activation_checkpointing(tiny_model)  # the installed transformers' own name
    new_name = hasattr(type(tiny_model), "is_activation_checkpointing")
    assert (
        tiny_model.is_activation_checkpointing if new_name else tiny_model.is_gradient_checkpointing
    )
