"""Behaviour cloning: the schedule, the loss going down, and exact resumption."""

from __future__ import annotations

import math
import random

import pytest
import torch

from resail_pipeline.bootstrap import cloning
from resail_pipeline.bootstrap.cloning import (
    behaviour_cloning,
    learning_rate,
    training_precision,
)
from resail_pipeline.bootstrap.config import TrainingSettings
from resail_pipeline.bootstrap.packing import Branch, PackedRow, collate
from resail_pipeline.config import ConfigError


def _rows(vocab: int, n: int = 12) -> list[PackedRow]:
    rng = random.Random(0)
    rows = []
    for _ in range(n):
        trunk = tuple(rng.randrange(4, vocab) for _ in range(rng.randrange(4, 12)))
        response = (5, 6, 7)  # the same response after every prompt: learnable
        rows.append(PackedRow(trunk, (Branch(response, 0, 1.0, False),)))
    return rows


SETTINGS = TrainingSettings(
    learning_rate=1e-2, warmup_steps=2, epochs=2.0, batch_tokens=48, time_budget_s=600.0
)


def test_learning_rate_warms_up_then_decays_to_its_floor():
    s = TrainingSettings(learning_rate=1.0, warmup_steps=4, min_lr_ratio=0.1)
    assert [learning_rate(s, k, 0.0) for k in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert learning_rate(s, 10, 0.0) == pytest.approx(1.0)
    assert learning_rate(s, 10, 0.5) == pytest.approx(0.55)
    assert learning_rate(s, 10, 1.0) == pytest.approx(0.1)
    assert learning_rate(s, 10, 3.0) == pytest.approx(0.1)


def test_loss_goes_down(tiny_model):
    rows = _rows(tiny_model.config.vocab_size)
    settings = TrainingSettings(**{**SETTINGS.__dict__, "epochs": 8.0})
    before = cloning.batch_loss(tiny_model, collate(rows, pad_id=0)).item()
    state = behaviour_cloning(
        tiny_model, rows, settings, pad_id=0, data_sha256="d", seed=0, progress=False
    )
    after = cloning.batch_loss(tiny_model, collate(rows, pad_id=0)).item()
    assert state.finished and state.step == math.ceil(8.0 * state.batches_per_epoch)
    assert state.epochs_done == pytest.approx(8.0)
    assert after < 0.2 * before


def test_a_prompt_loss_weight_trains_the_prompts_too(tiny_model_config):
    from resail_pipeline.modeling import build_qwen3

    rows = _rows(tiny_model_config.vocab_size)
    # the same prompt in every row: predictable once learnt
    rows = [PackedRow((9, 10, 11, 12, 13, 14), r.branches) for r in rows]
    plain, dense = build_qwen3(tiny_model_config, seed=0), build_qwen3(tiny_model_config, seed=0)
    settings = TrainingSettings(**{**SETTINGS.__dict__, "epochs": 16.0})
    batch = collate(rows, pad_id=0, prompt_targets=True)
    with torch.no_grad():
        before = cloning.batch_losses(dense, batch)[1].item()
    first = behaviour_cloning(
        plain, rows, settings, pad_id=0, data_sha256="d", seed=0, progress=False
    )
    weighted = TrainingSettings(**{**settings.__dict__, "prompt_loss_weight": 1.0})
    state = behaviour_cloning(
        dense, rows, weighted, pad_id=0, data_sha256="d", seed=0, progress=False
    )
    with torch.no_grad():
        untrained = cloning.batch_losses(plain, batch)[1].item()
        trained = cloning.batch_losses(dense, batch)[1].item()
    assert math.isnan(first.prompt_loss) and state.prompt_loss > 0
    assert trained < 0.2 * before and trained < 0.2 * untrained


def test_an_interrupted_run_resumes_to_the_same_weights(tiny_model_config, tmp_path, monkeypatch):
    from resail_pipeline.modeling import build_qwen3

    rows = _rows(tiny_model_config.vocab_size)
    settings = TrainingSettings(**{**SETTINGS.__dict__, "checkpoint_every_s": 1e-9})
    straight = build_qwen3(tiny_model_config, seed=0)
    behaviour_cloning(straight, rows, settings, pad_id=0, data_sha256="d", seed=0, progress=False)

    calls = {"n": 0}
    real_collate = cloning.collate

    def failing_collate(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 4:
            raise KeyboardInterrupt
        return real_collate(*args, **kwargs)

    state_dir = tmp_path / "state"
    interrupted = build_qwen3(tiny_model_config, seed=0)
    monkeypatch.setattr(cloning, "collate", failing_collate)
    with pytest.raises(KeyboardInterrupt):
        behaviour_cloning(
            interrupted,
            rows,
            settings,
            pad_id=0,
            data_sha256="d",
            seed=0,
            state_dir=state_dir,
            progress=False,
        )
    monkeypatch.setattr(cloning, "collate", real_collate)
    resumed = build_qwen3(tiny_model_config, seed=0)
    state = behaviour_cloning(
        resumed,
        rows,
        settings,
        pad_id=0,
        data_sha256="d",
        seed=0,
        state_dir=state_dir,
        progress=False,
    )
    assert state.finished
    for (name, a), b in zip(
        straight.state_dict().items(), resumed.state_dict().values(), strict=True
    ):
        assert torch.equal(a, b), name


def test_a_state_of_other_data_is_not_resumed(tiny_model_config, tmp_path):
    from resail_pipeline.modeling import build_qwen3

    rows = _rows(tiny_model_config.vocab_size)
    state_dir = tmp_path / "state"
    model = build_qwen3(tiny_model_config, seed=0)
    behaviour_cloning(
        model,
        rows,
        SETTINGS,
        pad_id=0,
        data_sha256="a",
        seed=0,
        state_dir=state_dir,
        progress=False,
    )
    again = build_qwen3(tiny_model_config, seed=0)
    state = behaviour_cloning(
        again,
        rows,
        SETTINGS,
        pad_id=0,
        data_sha256="b",
        seed=0,
        state_dir=state_dir,
        progress=False,
    )
    assert state.data_sha256 == "b" and state.finished
    assert state.step == math.ceil(2.0 * state.batches_per_epoch)


def test_the_time_budget_stops_training(tiny_model):
    rows = _rows(tiny_model.config.vocab_size)
    settings = TrainingSettings(**{**SETTINGS.__dict__, "epochs": 1000.0, "time_budget_s": 1e-6})
    state = behaviour_cloning(
        tiny_model, rows, settings, pad_id=0, data_sha256="d", seed=0, progress=False
    )
    assert state.finished and state.step == 1


def test_without_a_time_budget_the_epochs_alone_set_the_steps(tiny_model, monkeypatch):
    rows = _rows(tiny_model.config.vocab_size)
    settings = TrainingSettings(**{**SETTINGS.__dict__, "time_budget_s": None})
    progress_at = {}
    real = cloning.learning_rate

    def recording(settings, step, progress):
        progress_at[step] = progress
        return real(settings, step, progress)

    monkeypatch.setattr(cloning, "learning_rate", recording)
    state = behaviour_cloning(
        tiny_model, rows, settings, pad_id=0, data_sha256="d", seed=0, progress=False
    )
    assert state.finished and state.step == math.ceil(2.0 * state.batches_per_epoch)
    # the schedule's progress is the steps' alone: k / total at step k
    assert list(progress_at.values()) == pytest.approx([k / state.step for k in range(state.step)])
    with pytest.raises(ConfigError, match="time_budget_s: must be in"):
        TrainingSettings(time_budget_s=0.0)


@pytest.mark.parametrize(("faster", "auto"), [(True, "bf16"), (False, "fp32")])
def test_auto_precision_is_bf16_only_where_the_device_multiplies_faster_in_it(
    monkeypatch, faster, auto
):
    monkeypatch.setattr(cloning, "bf16_faster", lambda device: faster)
    cpu = torch.device("cpu")
    assert training_precision("auto", cpu) == auto
    assert training_precision("fp32", cpu) == "fp32"
    assert training_precision("bf16", cpu) == "bf16"


@pytest.mark.parametrize(
    ("setting", "used", "warned"), [("auto", "fp32", False), ("bf16", "bf16", True)]
)
def test_training_autocasts_in_the_resolved_precision(
    tiny_model, monkeypatch, caplog, setting, used, warned
):
    monkeypatch.setattr(cloning, "bf16_native", lambda device: False)
    monkeypatch.setattr(cloning, "bf16_faster", lambda device: False)
    seen = []
    real = cloning.autocast

    def recording(device, precision):
        seen.append(precision)
        return real(device, precision)

    monkeypatch.setattr(cloning, "autocast", recording)
    settings = TrainingSettings(**{**SETTINGS.__dict__, "precision": setting, "epochs": 0.5})
    with caplog.at_level("WARNING", logger=cloning.__name__):
        behaviour_cloning(
            tiny_model,
            _rows(tiny_model.config.vocab_size),
            settings,
            pad_id=0,
            data_sha256="d",
            seed=0,
            progress=False,
        )
    assert seen and set(seen) == {used}
    assert ("no native bf16 kernels" in caplog.text) == warned
