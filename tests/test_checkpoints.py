"""Where a loaded policy runs."""

from __future__ import annotations

import json

import pytest
import torch

from resail_pipeline import checkpoints
from resail_pipeline.checkpoints import bf16_faster, load_model, resolve_device


def test_auto_is_the_first_gpu_when_torch_sees_one(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    assert resolve_device("auto") == torch.device("cuda", 3)


@pytest.fixture
def timed_rates(monkeypatch):
    """Fake matmul rates (FLOP/s per dtype) for :func:`bf16_faster`'s timing, forgotten after."""
    rates = {}
    monkeypatch.setattr(checkpoints, "matmul_rates", lambda: rates)
    checkpoints._cpu_bf16_faster.cache_clear()
    yield rates
    checkpoints._cpu_bf16_faster.cache_clear()


@pytest.mark.parametrize(
    ("fp32", "bf16", "faster"), [(414e9, 222e9, False), (146e9, 395e9, True), (400e9, 2900e9, True)]
)
def test_bf16_is_chosen_where_its_products_time_faster(
    monkeypatch, timed_rates, fp32, bf16, faster
):
    monkeypatch.setattr(checkpoints, "bf16_native", lambda device: True)
    timed_rates.update({torch.float32: fp32, torch.bfloat16: bf16})
    assert bf16_faster(torch.device("cpu")) is faster
    timed_rates.clear()  # timed once per process: no second lookup
    assert bf16_faster(torch.device("cpu")) is faster


def test_bf16_is_not_timed_where_it_is_not_native(monkeypatch, timed_rates):
    monkeypatch.setattr(checkpoints, "bf16_native", lambda device: False)
    assert bf16_faster(torch.device("cpu")) is False  # timed_rates is empty: a lookup would fail
    monkeypatch.setattr(checkpoints, "bf16_native", lambda device: device.type == "cuda")
    assert bf16_faster(torch.device("cuda")) is True


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


@pytest.fixture()
def copy_of(tiny_checkpoint, tmp_path):
    """A copy of the tiny checkpoint to damage."""
    import shutil

    def make(name: str = "copy"):
        return shutil.copytree(tiny_checkpoint, tmp_path / name)

    return make


def test_weights_are_verified_against_the_config_before_use(copy_of):
    from resail_pipeline.checkpoints import CheckpointError, load_model, verify_weights

    good = copy_of("good")
    assert verify_weights(good) == good
    truncated = copy_of("truncated")
    weights = truncated / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    with pytest.raises(CheckpointError, match=r"truncated: model\.safetensors is unreadable"):
        verify_weights(truncated)
    with pytest.raises(CheckpointError, match=r"truncated: its weights do not load"):
        load_model(truncated)
    noise = copy_of("noise")
    (noise / "model.safetensors").write_bytes(bytes(range(256)) * 64)
    with pytest.raises(CheckpointError, match=r"model\.safetensors is unreadable"):
        verify_weights(noise)
    other = copy_of("other")
    config = json.loads((other / "config.json").read_text())
    config["intermediate_size"] *= 2  # a config the weights were not trained for
    (other / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"tensor '.*mlp.*' has shape"):
        verify_weights(other)


def test_a_published_initial_policy_cannot_be_swapped_in_silence(copy_of, tmp_path):
    from resail_pipeline.bootstrap.config import BootstrapConfig
    from resail_pipeline.checkpoints import read_checkpoint_info, save_policy
    from resail_pipeline.initial_policy import check_published

    published = copy_of("published")
    info = read_checkpoint_info(published)
    check_published(info, BootstrapConfig(checkpoint=str(published)))
    another = copy_of("another")
    with pytest.raises(ValueError, match=r"asks for .*another.*data_tag"):
        check_published(info, BootstrapConfig(checkpoint=str(another)))
    from resail_pipeline.checkpoints import load_policy

    model, tokenizer = load_policy(published)
    with torch.no_grad():
        next(model.parameters()).add_(1.0)
    save_policy(model, tokenizer, published, name="changed")  # new weights, same directory
    with pytest.raises(ValueError, match=r"weights in .*published changed"):
        check_published(info, BootstrapConfig(checkpoint=str(published)))


def test_a_known_hash_is_not_computed_again(tiny_checkpoint, monkeypatch):
    """The trainer's ranks read the policy's info with the hash rank 0 verified (8-16 GB of
    weights at the paper's scale), instead of each hashing it again."""
    from resail_pipeline import checkpoints

    info = checkpoints.read_checkpoint_info(tiny_checkpoint)

    def no_hashing(path):
        raise AssertionError("hashed again")

    monkeypatch.setattr(checkpoints, "weights_sha256", no_hashing)
    again = checkpoints.read_checkpoint_info(tiny_checkpoint, known_sha256=info.sha256)
    assert again == info
    with pytest.raises(AssertionError, match="hashed again"):
        checkpoints.read_checkpoint_info(tiny_checkpoint)


@pytest.mark.parametrize(
    ("name", "edit"),
    [
        ("config.json", lambda c: {**c, "rope_theta": 1.0}),
        ("config.json", lambda c: {**c, "rms_norm_eps": 0.1}),
        ("tokenizer_config.json", lambda c: {**c, "model_max_length": 7}),
    ],
)
def test_edited_config_or_tokenizer_files_are_refused(copy_of, name, edit):
    """The weights' hash leaves these out, and an edit changes every output under the same
    policy id: the manifest records their own hash, checked before a checkpoint is used."""
    import json

    from resail_pipeline.checkpoints import CheckpointError, verify_files

    good = copy_of("good")
    assert verify_files(good) == good
    for record in ("train.log", "train_config.yaml"):  # what the trainer leaves beside a model
        (good / record).write_text("a record, not an input")
    assert verify_files(good) == good
    edited = copy_of("edited")
    config = json.loads((edited / name).read_text())
    (edited / name).write_text(json.dumps(edit(config)))
    with pytest.raises(CheckpointError, match=r"edited: its config, tokenizer or chat template"):
        verify_files(edited)


def test_the_shipped_reference_refuses_an_edited_config(tmp_path):
    import json
    import shutil
    from pathlib import Path

    from resail_pipeline.checkpoints import CheckpointError
    from resail_pipeline.initial_policy import verify_reference

    shipped = Path(__file__).resolve().parents[1] / "reference" / "textcraft-initial"
    copy = shutil.copytree(shipped, tmp_path / "reference")
    assert (
        verify_reference(copy).sha256
        == json.loads((shipped / "resail_manifest.json").read_text())["sha256"]
    )
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**config, "rope_theta": 10.0}))
    with pytest.raises(CheckpointError, match="config, tokenizer or chat template files changed"):
        verify_reference(copy)


@pytest.mark.parametrize("drop", [None, "files_sha256"])
def test_a_manifest_or_files_hash_that_is_gone_is_refused(copy_of, drop):
    """Deleting the manifest, or only its files_sha256, used to switch the config check off; only
    a checkpoint this project did not write (``foreign``) may have no manifest at all."""
    from resail_pipeline.checkpoints import MANIFEST_NAME, CheckpointError, verify_files

    policy = copy_of()
    manifest = json.loads((policy / MANIFEST_NAME).read_text())
    if drop is None:
        (policy / MANIFEST_NAME).unlink()
        missing = f"{policy}: {MANIFEST_NAME} is missing"
    else:
        (policy / MANIFEST_NAME).write_text(
            json.dumps({k: v for k, v in manifest.items() if k != drop})
        )
        missing = f"{policy}: its {MANIFEST_NAME} has no files_sha256"
    with pytest.raises(CheckpointError, match=missing):
        verify_files(policy)
    if drop is None:
        assert verify_files(policy, foreign=True) == policy
    else:
        with pytest.raises(CheckpointError, match=missing):
            verify_files(policy, foreign=True)  # a manifest of ours, cut short


def test_an_unreadable_manifest_is_one_line_naming_it(copy_of):
    from resail_pipeline.checkpoints import (
        MANIFEST_NAME,
        CheckpointError,
        read_checkpoint_info,
        verify_files,
    )

    policy = copy_of()
    (policy / MANIFEST_NAME).write_text('{"policy_id": ')  # cut short
    for check in (verify_files, read_checkpoint_info):
        with pytest.raises(CheckpointError, match=f"{policy}: {MANIFEST_NAME} is unreadable"):
            check(policy)


def test_the_shipped_reference_refuses_a_manifest_without_its_files_hash(tmp_path):
    import shutil
    from pathlib import Path

    from resail_pipeline.checkpoints import MANIFEST_NAME, CheckpointError
    from resail_pipeline.initial_policy import verify_reference

    shipped = Path(__file__).resolve().parents[1] / "reference" / "textcraft-initial"
    copy = shutil.copytree(shipped, tmp_path / "reference")
    manifest = json.loads((copy / MANIFEST_NAME).read_text())
    (copy / MANIFEST_NAME).write_text(json.dumps({**manifest, "files_sha256": None}))
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**config, "rope_theta": 10.0}))
    with pytest.raises(CheckpointError, match="has no files_sha256"):
        verify_reference(copy)


@pytest.mark.parametrize("drop", [None, "files_sha256"])
def test_the_published_reference_keeps_its_manifest_and_files_hash(copy_of, drop):
    """The shipped reference is recorded where it lies; a rerun asking for it finds its manifest
    and files_sha256 there, or stops in one line before any node."""
    from resail_pipeline.bootstrap.config import BootstrapConfig
    from resail_pipeline.checkpoints import MANIFEST_NAME, CheckpointError, read_checkpoint_info
    from resail_pipeline.initial_policy import check_published

    shipped = copy_of("shipped")
    info = read_checkpoint_info(shipped)
    config = BootstrapConfig(reference=str(shipped))
    check_published(info, config)
    manifest = json.loads((shipped / MANIFEST_NAME).read_text())
    if drop is None:
        (shipped / MANIFEST_NAME).unlink()
    else:
        (shipped / MANIFEST_NAME).write_text(json.dumps({**manifest, drop: None}))
    config_json = json.loads((shipped / "config.json").read_text())
    (shipped / "config.json").write_text(json.dumps({**config_json, "rope_theta": 2.0}))
    with pytest.raises(CheckpointError, match=rf"^bootstrap\.reference: checkpoint {shipped}: "):
        check_published(info, config)


def test_an_optimizer_state_round_trips_through_flat_tensors():
    """AdamW's moments and step counts as safetensors keeps them (no pickle), read back into a
    fresh optimiser: the next update is the same as the uninterrupted one's."""
    from safetensors.torch import load, save

    from resail_pipeline.checkpoints import load_optimizer_tensors, optimizer_tensors

    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    for _ in range(2):
        model(torch.randn(4, 3)).square().sum().backward()
        optimizer.step()
        optimizer.zero_grad()
    tensors, groups = optimizer_tensors(optimizer, prefix="optimizer.")
    assert sorted(tensors) == [
        f"optimizer.{i}.{name}" for i in (0, 1) for name in ("exp_avg", "exp_avg_sq", "step")
    ]
    copy = torch.nn.Linear(3, 2)
    copy.load_state_dict(model.state_dict())
    resumed = torch.optim.AdamW(copy.parameters(), lr=0.5)
    kept = load(save({**tensors, "weight": copy.weight.detach()}))  # and one that is no state
    load_optimizer_tensors(resumed, kept, groups, prefix="optimizer.")
    assert resumed.param_groups[0]["lr"] == 0.1
    batch = torch.randn(4, 3)
    for net, opt in ((model, optimizer), (copy, resumed)):
        net(batch).square().sum().backward()
        opt.step()
    torch.testing.assert_close(copy.weight, model.weight)
