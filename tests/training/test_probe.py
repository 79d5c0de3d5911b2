"""The PI-sensitivity probe (appendix D.3): the fixed set, its support, and the trainer's hook."""

from __future__ import annotations

import copy
import re
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from resail_pipeline.checkpoints import load_model, load_policy, read_checkpoint_info
from resail_pipeline.objectives import pi_sensitivity, topk_support
from resail_pipeline.schemas import SchemaError, check_columns
from resail_pipeline.training import InputError, ProbeSet, TrainConfig, build_probe_set
from resail_pipeline.training.data import build_training_data
from resail_pipeline.training.probe import PROBE_COLUMNS, probe_sensitivity
from resail_pipeline.training.run import PROBE_FILE, TrainingRun
from resail_pipeline.training.views import ResponseLogits

from ._reference import response_mask, separate_view_logits
from .conftest import PROBE_TRAJECTORIES, TRAJECTORIES


def measure(model, probe: ProbeSet) -> tuple[torch.Tensor, torch.Tensor]:
    """The probe's per-step JSD and token counts for ``model``, as the trainer's hook measures."""
    steps = probe.steps
    return probe_sensitivity(
        ResponseLogits(model),
        steps,
        [probe.support[(s.traj_id, s.t)] for s in steps],
        pad_id=model.config.pad_token_id,
        device=torch.device("cpu"),
    )


def reference_views(model, probe: ProbeSet) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Both views' logits from plain per-step forwards, and the response mask."""
    steps = probe.steps
    responses = [s.response_ids for s in steps]
    with torch.no_grad():
        ordinary = separate_view_logits(model, steps, responses, "ordinary")  # (N, T, V)
        privileged = separate_view_logits(model, steps, responses, "privileged")  # (N, T, V)
    return ordinary, privileged, response_mask(responses)


def padded_support(probe: ProbeSet, mask: torch.Tensor) -> torch.Tensor:
    """``(N, T, K)`` fixed support of every probe step (ids 0 .. K-1 at padding)."""
    k = probe.top_k
    support = torch.arange(k).expand(*mask.shape, k).clone()
    for i, s in enumerate(probe.steps):
        support[i, : len(s.response_ids)] = probe.support[(s.traj_id, s.t)]
    return support


# ----------------------------------------------------------------------------------------------
# the probe set


def test_the_probe_set_is_the_first_accepted_trajectories_in_task_order(
    tiny_probe_set, sharp_checkpoint, tiny_steps, tiny_summaries
):
    frame = tiny_probe_set
    check_columns(frame, "probe_set")
    # t2 has task 0; t4 (task 1) has a rejected summary; then t1 (task 2) and t3 (task 3)
    assert list(dict.fromkeys(frame["traj_id"])) == sorted(PROBE_TRAJECTORIES)
    assert len(frame) == sum(TRAJECTORIES[traj][1] for traj in PROBE_TRAJECTORIES)
    assert (frame["policy_id"] == read_checkpoint_info(sharp_checkpoint).policy_id).all()

    _, tokenizer = load_policy(sharp_checkpoint)
    logged = tiny_steps.set_index(["traj_id", "t"])["response"]
    for row in frame.itertuples(index=False):
        assert row.response == logged[(row.traj_id, row.t)]
        assert (
            list(row.response_ids) == tokenizer(row.response, add_special_tokens=False)["input_ids"]
        )
    # both views' prompts are the trainer's
    data = build_training_data(tiny_steps, tiny_summaries, tokenizer)
    for row in frame.itertuples(index=False):
        step = next(s for s in data.steps[row.traj_id] if s.t == row.t)
        assert tuple(row.ordinary_ids) == step.ordinary_ids
        assert tuple(row.privileged_ids) == step.privileged_ids


def test_without_a_qualifying_trajectory_the_probe_set_is_empty(
    sharp_checkpoint, tiny_trajectories, tiny_steps, tiny_summaries, caplog
):
    """A run with the probe off must not fail for it; one with the probe on fails at its start."""
    model, tokenizer = load_policy(sharp_checkpoint)
    rejected = tiny_summaries.assign(accepted=False)
    with caplog.at_level("WARNING", logger="resail_pipeline.training.probe"):
        frame = build_probe_set(
            model, tokenizer, tiny_trajectories, tiny_steps, rejected, policy_id="sharp@0"
        )
    assert frame.empty
    check_columns(frame, "probe_set")
    assert "the probe set is empty" in caplog.text
    with pytest.raises(InputError, match=r"p\.parquet: the probe set has no steps"):
        ProbeSet.from_frame(frame, source="p.parquet")


def test_the_support_is_the_initial_models_ordinary_top_k(tiny_probe_set, sharp_checkpoint):
    probe = ProbeSet.from_frame(tiny_probe_set)
    assert probe.top_k == 5
    ordinary, _, _ = reference_views(load_model(sharp_checkpoint), probe)
    expected = topk_support(ordinary, 5)  # (N, T, 5)
    for i, step in enumerate(probe.steps):
        n = len(step.response_ids)
        assert probe.support[(step.traj_id, step.t)].shape == (n, 5)
        assert torch.equal(probe.support[(step.traj_id, step.t)], expected[i, :n])


def test_a_probe_set_round_trips_through_parquet(tiny_probe_set, tmp_path):
    path = tmp_path / "probe_set.parquet"
    tiny_probe_set.to_parquet(path)
    read = ProbeSet.from_frame(pd.read_parquet(path), source=str(path))
    direct = ProbeSet.from_frame(tiny_probe_set)
    assert read.steps == direct.steps
    assert read.support.keys() == direct.support.keys()
    assert all(torch.equal(read.support[k], direct.support[k]) for k in direct.support)
    assert read.policy_id == direct.policy_id


def _with(frame: pd.DataFrame, row: int, column: str, value) -> pd.DataFrame:
    out = frame.copy()
    out[column] = out[column].astype(object)
    out.at[row, column] = value
    return out


def test_bad_probe_sets_are_errors_naming_the_file_and_step(tiny_probe_set):
    frame = tiny_probe_set
    key = re.escape(repr((frame["traj_id"][0], int(frame["t"][0]))))
    support = [list(p) for p in frame["support"][0]]
    with pytest.raises(SchemaError, match=r"p\.parquet: probe_set table is missing .*'support'"):
        ProbeSet.from_frame(frame.drop(columns="support"), source="p.parquet")
    with pytest.raises(InputError, match=r"appears more than once"):
        ProbeSet.from_frame(pd.concat([frame, frame.iloc[:1]]), source="p.parquet")
    with pytest.raises(InputError, match=rf"step {key}: support has shape"):
        ProbeSet.from_frame(_with(frame, 0, "support", support[:-1]), source="p.parquet")
    repeated = [[p[0]] * len(p) for p in support]
    with pytest.raises(InputError, match=rf"step {key}: support ids must be distinct"):
        ProbeSet.from_frame(_with(frame, 0, "support", repeated), source="p.parquet")
    narrower = [p[:4] for p in support]
    with pytest.raises(InputError, match=r"has a top-4 support, others top-5"):
        ProbeSet.from_frame(_with(frame, 1, "support", narrower), source="p.parquet")
    with pytest.raises(InputError, match="from one model"):
        ProbeSet.from_frame(_with(frame, 1, "policy_id", "other@0"), source="p.parquet")
    probe = ProbeSet.from_frame(frame)
    with pytest.raises(InputError, match=r"holds ids outside \[0, 10\)"):
        probe.check(vocab_size=10, max_positions=4096)
    with pytest.raises(InputError, match=r"exceed the model's 20 positions"):
        probe.check(vocab_size=10**6, max_positions=20)


# ----------------------------------------------------------------------------------------------
# the measurement


def test_the_probe_is_eq_3_on_the_fixed_support(tiny_probe_set, tiny_model_config):
    """On a model other than the initial one, the probe is its JSD on the INITIAL support."""
    from resail_pipeline.modeling import build_qwen3

    probe = ProbeSet.from_frame(tiny_probe_set)
    config = copy.deepcopy(tiny_model_config)
    config.initializer_range = 0.2
    other = build_qwen3(config, seed=1).eval()
    jsd, tokens = measure(other, probe)

    ordinary, privileged, mask = reference_views(other, probe)
    expected = pi_sensitivity(ordinary, privileged, mask, support=padded_support(probe, mask))
    torch.testing.assert_close(jsd, expected, atol=1e-7, rtol=1e-4)
    assert tokens.tolist() == [len(s.response_ids) for s in probe.steps]
    assert float(expected.min()) > 1e-4
    # the model's own top-K is another support, and gives other values
    own = pi_sensitivity(ordinary, privileged, mask, top_k=probe.top_k)
    assert (own - expected).abs().max() > 1e-3


def test_the_probe_is_zero_when_both_views_are_identical(tiny_probe_set, sharp_checkpoint):
    model = load_model(sharp_checkpoint)
    same = tiny_probe_set.assign(privileged_ids=tiny_probe_set["ordinary_ids"])
    jsd, tokens = measure(model, ProbeSet.from_frame(same))
    assert tokens.gt(0).all()
    torch.testing.assert_close(jsd, torch.zeros_like(jsd), atol=1e-7, rtol=0)
    different, _ = measure(model, ProbeSet.from_frame(tiny_probe_set))
    assert different.min() > 1e-4


# ----------------------------------------------------------------------------------------------
# the trainer's hook


def weights(path: str | Path) -> dict[str, torch.Tensor]:
    return load_file(str(next(Path(path).glob("*.safetensors"))))


def test_the_probe_is_off_by_default(make_config, tmp_path):
    assert TrainConfig().probe.enabled is False
    assert TrainConfig.from_dict({}).probe == TrainConfig().probe
    config = make_config(method="sdpo_resail")
    outcome = TrainingRun(config).run()
    assert outcome.probe.empty and tuple(outcome.probe.columns) == PROBE_COLUMNS
    written = pd.read_parquet(Path(config.run.run_dir) / PROBE_FILE)
    assert written.empty and tuple(written.columns) == PROBE_COLUMNS


def test_an_enabled_probe_needs_a_probe_set_in_the_manifest(
    make_config, tmp_path, sharp_checkpoint, tiny_steps, tiny_summaries, monkeypatch
):
    import resail_pipeline.training.run as run_module
    from resail_pipeline.training import write_inputs

    def no_model(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(run_module, "load_model", no_model)
    manifest = write_inputs(
        tmp_path / "no_probe", policy=sharp_checkpoint, steps=tiny_steps, summaries=tiny_summaries
    )
    config = make_config(method="oel", probe={"enabled": True}, run={"manifest": str(manifest)})
    with pytest.raises(
        InputError, match=r"probe\.enabled is set, but the manifest .* no probe set"
    ):
        TrainingRun(config)
    with pytest.raises(InputError, match=r"probe\.top_k: configured 20, .* top-5"):
        TrainingRun(make_config(method="oel", probe={"enabled": True, "top_k": 20}))


@pytest.mark.parametrize("method", ["oel_resail", "sdpo"])
def test_the_probe_measures_the_start_and_every_update_on_the_initial_support(
    method, make_config, tiny_probe_set, sharp_checkpoint
):
    config = make_config(
        method=method,
        probe={"enabled": True},
        schedule={"updates": 3},
        optimizer={"lr": 3e-2},  # far enough for the student's own top-K to move
    )
    outcome = TrainingRun(config).run()
    probe = ProbeSet.from_frame(tiny_probe_set)
    rows = outcome.probe
    assert tuple(rows.columns) == PROBE_COLUMNS
    assert pd.read_parquet(Path(config.run.run_dir) / PROBE_FILE).equals(rows)
    # one row per (update, probe step), update 0 the cycle start
    keys = [(s.traj_id, s.t) for s in probe.steps]
    for update in range(4):
        at = rows[rows["update"] == update]
        assert list(zip(at["traj_id"], at["t"], strict=True)) == keys
        assert at["tokens"].tolist() == [len(s.response_ids) for s in probe.steps]
    jsd = torch.tensor(rows.pivot(index="update", columns=["traj_id", "t"], values="jsd").values)

    # the start is the initial model, the end the published student: both on the initial support
    initial, _ = measure(load_model(sharp_checkpoint), probe)
    torch.testing.assert_close(jsd[0].float(), initial, atol=1e-7, rtol=1e-5)
    final = load_model(config.run.checkpoint)
    on_initial_support, _ = measure(final, probe)
    torch.testing.assert_close(jsd[3].float(), on_initial_support, atol=1e-7, rtol=1e-5)
    assert (jsd[1:] - jsd[:1]).abs().max() > 1e-4  # training moved the student

    # the final student's own top-K is no longer the initial support, and gives other values
    ordinary, privileged, mask = reference_views(final, probe)
    own_support = topk_support(ordinary, probe.top_k)
    fixed = padded_support(probe, mask)
    assert not torch.equal(own_support.sort(-1).values[mask], fixed.sort(-1).values[mask])
    own = pi_sensitivity(ordinary, privileged, mask, top_k=probe.top_k)
    assert (own - on_initial_support).abs().max() > 1e-4


def test_the_probe_does_not_change_training(make_config):
    sections = {"method": "oel_resail", "schedule": {"updates": 2}}
    plain = TrainingRun(make_config(name="plain", **sections)).run()
    probed = TrainingRun(make_config(name="probed", probe={"enabled": True}, **sections)).run()
    assert len(probed.probe) > 0
    a, b = weights(plain.checkpoint.path), weights(probed.checkpoint.path)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert probed.metrics["loss"].tolist() == plain.metrics["loss"].tolist()
    assert probed.selected.equals(plain.selected)


def test_the_hooks_time_is_in_no_cost_category(make_config):
    run = TrainingRun(make_config(method="sdpo_resail"))
    calls = []

    def slow_hook(updates: int) -> None:
        calls.append(updates)
        time.sleep(1.0)

    records = run.trainer.train(run.schedule, after_update=slow_hook)
    assert calls == [0, 1, 2]
    assert all(sum(r.seconds.values()) < 1.0 for r in records), [r.seconds for r in records]
