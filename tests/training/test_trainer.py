"""The trainer on a tiny random Qwen3: every method trains, the teacher stays frozen, the loss is
the objectives library's, micro-batching and the ReSAIL switches behave as the paper says."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from resail_pipeline.checkpoints import load_model, read_checkpoint_info
from resail_pipeline.objectives import (
    ResailConfig,
    resail_loss,
    token_logprobs,
    truncated_is_weights,
)
from resail_pipeline.schemas import check_columns
from resail_pipeline.training.run import TrainingRun
from resail_pipeline.training.trainer import select

from ._reference import padded, response_mask, separate_view_logits


def weights(path: str | Path) -> dict[str, torch.Tensor]:
    """The tensors of a checkpoint directory."""
    return load_file(str(next(Path(path).glob("*.safetensors"))))


@pytest.mark.parametrize("method", ["oel", "sdpo", "oel_resail", "sdpo_resail"])
def test_two_updates_change_the_student_and_never_the_teacher(
    method, make_config, sharp_checkpoint
):
    config = make_config(method=method)
    run = TrainingRun(config)
    outcome = run.run()

    before, after = weights(sharp_checkpoint), weights(config.run.checkpoint)
    assert before.keys() == after.keys()
    assert any(not torch.equal(before[k], after[k]) for k in before)
    teacher = {k.removeprefix("model."): v for k, v in run.trainer.teacher.state_dict().items()}
    assert all(torch.equal(teacher[k], before[k]) for k in before)
    assert not any(p.requires_grad for p in run.trainer.teacher.parameters())

    info = read_checkpoint_info(config.run.checkpoint)
    assert info == outcome.checkpoint
    assert (info.method, info.cycle) == (method, 1)
    assert info.parent_id == read_checkpoint_info(sharp_checkpoint).policy_id

    metrics, selected = outcome.metrics, outcome.selected
    check_columns(metrics, "train_metrics")
    check_columns(selected, "selected_steps")
    assert metrics["update"].tolist() == [0, 1]
    assert (metrics["num_trajectories"] == 2).all()
    assert all(math.isfinite(x) and x > 0 for x in metrics["loss"])
    assert (metrics[[c for c in metrics if c.startswith("seconds_")]] >= 0).all().all()
    assert metrics["selected_per_traj"].map(sum).tolist() == metrics["num_selected"].tolist()
    assert selected.groupby("update").size().tolist() == metrics["num_selected"].tolist()
    if method.endswith("_resail"):  # rho 0.5 over U, scores of the frozen teacher
        assert metrics["num_selected"].tolist() == [math.ceil(n / 2) for n in metrics["num_steps"]]
        assert metrics["score_all_mean"].gt(0).all() and selected["score"].gt(0).all()
        assert metrics["score_selected_mean"].ge(metrics["score_all_mean"]).all()
        # student and teacher start equal: no retention loss before the first step, some after
        assert metrics["loss_ret"].tolist()[0] == 0.0 and metrics["loss_ret"].tolist()[1] > 0
    else:  # the parents distil every step of U and do not score
        assert metrics["num_selected"].tolist() == metrics["num_steps"].tolist()
        assert metrics["loss_ret"].eq(0).all() and metrics["score_all_mean"].isna().all()
    if method.startswith("sdpo"):
        assert metrics["seconds_response"].lt(0.01).all()  # cached responses


@pytest.mark.parametrize("parent", ["oel", "sdpo"])
def test_resail_with_lambda_zero_and_no_selection_is_the_parent(parent, make_config):
    plain = TrainingRun(make_config(name="parent", method=parent)).run()
    switched = {"selection": "none", "balancing": False, "lambda": 0.0}
    resail = TrainingRun(
        make_config(name="resail", method=f"{parent}_resail", resail=switched)
    ).run()
    # equal to rounding: the ReSAIL run also packs the teacher's ordinary view into its forward
    torch.testing.assert_close(
        torch.tensor(resail.metrics["loss"].to_numpy()),
        torch.tensor(plain.metrics["loss"].to_numpy()),
        rtol=1e-5,
        atol=0,
    )
    # weights within 1% of the most AdamW can move them (lr 1e-3 x 2 updates): the parent's rows
    # take SDPA's causal kernel, ReSAIL's packed rows the masked one, which round differently
    # (1.2e-5 apart with kernels held to AVX2), and Adam normalises tiny gradients' rounding
    a, b = weights(plain.checkpoint.path), weights(resail.checkpoint.path)
    assert all(torch.allclose(a[k], b[k], rtol=0, atol=0.01 * 1e-3 * 2) for k in a)

    # balancing weighs steps per trajectory: with unequal trajectory lengths it is not the parent
    balanced = {"selection": "none", "balancing": True, "lambda": 0.0}
    other = TrainingRun(
        make_config(name="balanced", method=f"{parent}_resail", resail=balanced)
    ).run()
    assert (
        abs(other.metrics["loss"][0] - plain.metrics["loss"][0]) > 1e-3 * plain.metrics["loss"][0]
    )


def library_loss(run: TrainingRun, objective: ResailConfig) -> tuple[float, list[tuple[str, int]]]:
    """The first update's loss from ``objectives.resail_loss`` on plain forwards of each view."""
    batch = run.schedule[0]
    steps = [s for traj in batch for s in run.data.steps[traj]]
    traj_index = torch.tensor([b for b, traj in enumerate(batch) for _ in run.data.steps[traj]])
    responses = [s.response_ids for s in steps]
    model = load_model(run.manifest.policy)
    with torch.no_grad():
        ordinary = separate_view_logits(model, steps, responses, "ordinary")
        privileged = separate_view_logits(model, steps, responses, "privileged")
    mask = response_mask(responses)
    ids = padded(responses, mask.shape).long()
    current = token_logprobs(ordinary, ids)  # the student; also the old actor at the first update
    behaviour = padded([s.behaviour_logprobs for s in steps], mask.shape)
    loss, record = resail_loss(
        ordinary,
        ordinary,
        privileged,
        mask,
        traj_index,
        len(batch),
        objective,
        student_priv_logits=privileged,
        token_weights=truncated_is_weights(current, current, behaviour),
    )
    return float(loss), [(steps[i].traj_id, steps[i].t) for i in record.selected.tolist()]


@pytest.mark.parametrize("micro_batch_steps", [None, 2])
def test_the_update_is_the_objectives_librarys_loss(micro_batch_steps, make_config):
    switches = {
        "selection": "top",
        "rho": 0.5,
        "balancing": True,
        "retention": "privileged",
        "lambda": 0.5,
    }
    config = make_config(
        method="sdpo_resail",
        resail=switches,
        engine={"micro_batch_steps": micro_batch_steps},
        schedule={"trajectories_per_update": 3, "updates": 1},
    )
    run = TrainingRun(config)
    expected, selected = library_loss(run, config.objective())
    outcome = run.run()
    assert outcome.metrics["loss"][0] == pytest.approx(expected, rel=1e-5)
    assert list(zip(outcome.selected["traj_id"], outcome.selected["t"], strict=True)) == selected


def test_micro_batches_give_the_same_update(make_config):
    """Scoring first and recomputing the student per micro-batch changes nothing but the cost."""
    sections = {"method": "oel_resail", "resail": {"retention": "privileged", "lambda": 0.5}}
    whole = TrainingRun(make_config(name="whole", **sections)).run()
    split = TrainingRun(
        make_config(name="split", engine={"micro_batch_steps": 1}, **sections)
    ).run()
    # update 0 starts from the same weights: only the batching's rounding differs. Update 1
    # starts from weights that differ by that rounding after AdamW's first step (about
    # lr * sign(g) where g is near zero, at most 1e-5 here, see below), which moves its losses
    # by up to about 1e-7 depending on the processor's kernels
    for column in ("loss", "loss_sel", "loss_ret", "grad_norm"):
        split_values = torch.tensor(split.metrics[column].to_numpy())
        whole_values = torch.tensor(whole.metrics[column].to_numpy())
        torch.testing.assert_close(split_values[0], whole_values[0], rtol=1e-5, atol=1e-7)
        torch.testing.assert_close(split_values[1], whole_values[1], rtol=1e-4, atol=1e-6)
    assert split.selected[["update", "traj_id", "t"]].equals(
        whole.selected[["update", "traj_id", "t"]]
    )
    # AdamW's first step is about lr * sign(g): rounding in near-zero gradients shows at 1e-6
    a, b = weights(whole.checkpoint.path), weights(split.checkpoint.path)
    assert all(torch.allclose(a[k], b[k], rtol=0, atol=1e-5) for k in a)


@pytest.mark.parametrize(
    ("engine", "tolerance"),
    [({"gradient_checkpointing": True}, 1e-6), ({"precision": "bf16"}, 0.1)],
)
def test_checkpointing_and_bf16_autocast_train_the_same_model(engine, tolerance, make_config):
    sections = {"method": "sdpo_resail", "resail": {"lambda": 0.5}}
    reference = TrainingRun(make_config(name="fp32", **sections)).run()
    variant = TrainingRun(make_config(name="variant", engine=engine, **sections)).run()
    torch.testing.assert_close(
        torch.tensor(variant.metrics["loss"].to_numpy()),
        torch.tensor(reference.metrics["loss"].to_numpy()),
        rtol=tolerance,
        atol=0,
    )
    after = weights(variant.checkpoint.path)
    assert all(t.dtype == torch.float32 for t in after.values())  # fp32 parameters, autocast


@pytest.mark.parametrize(
    ("switches", "check"),
    [
        ({"selection": "bottom"}, lambda m: m["score_selected_mean"].le(m["score_all_mean"]).all()),
        ({"selection": "random"}, lambda m: m["num_selected"].tolist() == [3, 2]),
        ({"retention": "ordinary"}, lambda m: m["loss_ret"].tolist()[1] > 0),
        ({"retention": "none"}, lambda m: m["loss_ret"].eq(0).all()),
    ],
)
def test_ablation_switches_run(switches, check, make_config):
    metrics = TrainingRun(make_config(method="oel_resail", resail=switches)).run().metrics
    assert check(metrics), metrics.to_string()


def test_selection_weights_match_eqs_5_and_7():
    traj = torch.tensor([0, 0, 1, 1, 1, 2])
    scores = torch.tensor([0.05, 0.30, 0.10, 0.30, 0.25, 0.25])
    config = ResailConfig(selection="top", rho=0.5, lam=0.5)
    selection = select(config, traj, 4, scores)  # |B| = 4: one trajectory has no steps
    assert selection.chosen.nonzero().flatten().tolist() == [1, 3, 4]
    torch.testing.assert_close(selection.w_sel, torch.tensor([0, 1 / 4, 0, 1 / 8, 1 / 8, 0]))
    torch.testing.assert_close(
        selection.w_ret, torch.tensor([1 / 8, 1 / 8, 1 / 12, 1 / 12, 1 / 12, 1 / 4])
    )
    parent = select(ResailConfig.off(), traj, 4)
    torch.testing.assert_close(parent.w_sel, torch.full((6,), 1 / 6))
    assert not parent.w_ret.any()


def test_a_non_finite_loss_stops_the_run_and_publishes_nothing(make_config, nan_manifest):
    config = make_config(method="sdpo", run={"manifest": str(nan_manifest)})
    with pytest.raises(FloatingPointError, match="update 1: the loss is not finite"):
        TrainingRun(config).run()
    checkpoint = Path(config.run.checkpoint)
    assert not checkpoint.exists()
    assert not list(checkpoint.parent.glob(".policy*"))  # no temporary left behind


def test_inputs_are_checked_before_any_model_loads(make_config, tmp_path, monkeypatch):
    import resail_pipeline.training.run as run_module

    def no_model(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(run_module, "load_model", no_model)
    with pytest.raises(
        ValueError, match=r"prompt tokens \+ 5000 response tokens exceed the model's 4096"
    ):
        TrainingRun(make_config(method="oel", responses={"max_tokens": 5000}))
    config = make_config(method="sdpo")
    manifest = yaml.safe_load(Path(config.run.manifest).read_text())
    manifest["responses"] = None
    manifest["sha256"].pop("responses")
    bad = tmp_path / "no_responses.yaml"
    bad.write_text(yaml.safe_dump(manifest))
    with pytest.raises(ValueError, match="responses: method 'sdpo' trains on responses cached"):
        TrainingRun(make_config(method="sdpo", run={"manifest": str(bad)}))
