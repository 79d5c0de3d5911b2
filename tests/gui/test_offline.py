"""The offline filter experiment's stages on a tiny model and synthetic episodes."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from resail_pipeline.config import ConfigError, build
from resail_pipeline.gui import offline
from resail_pipeline.gui.config import AitzConfig
from resail_pipeline.gui.experiment import filter_steps
from resail_pipeline.prompts.gui import accepted_remark
from resail_pipeline.schemas import check_columns

from ._reference import reference_train_oel

CONFIG = {
    "schedule": {"updates": 2, "trajectories_per_update": 2, "seed": 0},
    "optimizer": {"lr": 1e-2},
    "responses": {"temperature": 1.0, "max_new_tokens": 4},
    "evaluation": {"temperature": 1.0, "max_new_tokens": 4},
    "monitor_every": 1,
    "monitor_episodes": 2,
    "summary_attempts": 2,
    "micro_batch": 4,
}


def _config(**changes):
    return build(offline.OfflineConfig, {**CONFIG, **changes}, "offline")


def test_keep_top_fraction_breaks_ties_to_the_lower_index():
    scores = [0.5, 0.1, 0.5, 0.9, 0.5]
    # ceil(0.6 * 5) = 3: 0.9, then the first two of the three 0.5s
    assert offline.keep_top_fraction(scores, 0.6).tolist() == [True, False, True, True, False]
    assert offline.keep_top_fraction(scores, 1.0).all()
    assert offline.keep_top_fraction(np.arange(10.0), 0.8).tolist() == [False] * 2 + [True] * 8


def test_training_pool_is_a_seeded_ordered_sample(aitz_train):
    pool = offline.training_pool(aitz_train, 5, seed=3)
    check_columns(pool, "aitz_pool")
    assert pool["episode_id"].nunique() == 5
    assert pool.equals(offline.training_pool(aitz_train, 5, seed=3))
    assert sorted(pool["position"].unique()) == list(range(5))
    assert (pool.groupby("episode_id")["position"].nunique() == 1).all()
    with pytest.raises(ValueError, match="13 episodes, but the training split has 12"):
        offline.training_pool(aitz_train, 13, seed=0)


def test_summaries_fall_back_to_rules_or_drop(vision_policy, aitz_root, aitz_train):
    pool = offline.training_pool(aitz_train, 2, seed=0)
    attempts = offline.diagnose(vision_policy, pool, aitz_root, _config())
    assert list(attempts.columns) == ["episode_id", "step_id", "response", "token_ids", "correct"]
    check_columns(attempts, "aitz_attempts")
    assert len(attempts) == len(pool)
    ruled = offline.summarize(vision_policy, pool, attempts, aitz_root, _config())
    check_columns(ruled, "aitz_summaries")
    # a random model never writes an accepted remark: each try is counted, then the rules write it
    assert ruled["source"].tolist() == ["rules", "rules"]
    assert ruled["attempts"].tolist() == [2, 2]
    assert all(accepted_remark(r) == r for r in ruled["remark"])
    dropped = offline.summarize(
        vision_policy, pool, attempts, aitz_root, _config(on_rejected="drop")
    )
    check_columns(dropped, "aitz_summaries")
    assert dropped["source"].tolist() == ["dropped", "dropped"]
    assert (dropped["remark"] == "").all()


def test_scores_are_one_per_step_of_an_episode_with_a_remark(vision_policy, aitz_root, aitz_train):
    pool = offline.training_pool(aitz_train, 2, seed=0)
    config = _config()
    attempts = offline.diagnose(vision_policy, pool, aitz_root, config)
    summaries = offline.summarize(vision_policy, pool, attempts, aitz_root, config)
    scores = offline.score_steps(vision_policy, pool, attempts, summaries, aitz_root, config)
    check_columns(scores, "aitz_scores")
    assert len(scores) == len(pool)
    assert (scores["jsd"] >= 0).all() and (scores["jsd"] <= np.log(2) + 1e-6).all()
    assert scores["tokens"].tolist() == [len(ids) for ids in attempts["token_ids"]]
    # the remark changes the prompt, so the views differ somewhere
    assert scores["jsd"].max() > 0
    one_dropped = summaries.assign(
        source=["dropped", summaries["source"].iloc[1]], remark=["", summaries["remark"].iloc[1]]
    )
    fewer = offline.score_steps(vision_policy, pool, attempts, one_dropped, aitz_root, config)
    assert set(fewer["episode_id"]) == {summaries["episode_id"].iloc[1]}


def test_filter_table_keeps_the_top_share_in_pool_order(aitz_train):
    pool = offline.training_pool(aitz_train, 3, seed=1)
    scores = pool[["episode_id", "step_id"]].assign(jsd=np.linspace(1.0, 0.0, len(pool)))
    table = filter_steps(pool, scores.sample(frac=1.0, random_state=0), keep=0.5)
    check_columns(table, "aitz_filter")
    assert table[["episode_id", "step_id"]].equals(pool[["episode_id", "step_id"]])
    kept = int(np.ceil(0.5 * len(pool)))
    assert table["kept"].tolist() == [True] * kept + [False] * (len(pool) - kept)


def test_filtered_run_trains_only_on_kept_steps(
    vision_policy, make_vision_policy, aitz_root, aitz_train
):
    config = _config()
    pool = offline.training_pool(aitz_train, 4, seed=0)
    summaries = pd.DataFrame(
        {
            "episode_id": sorted(pool["episode_id"].unique()),
            "remark": "<remark>\nHow to do:\n1) x\n\nWatch out:\n- y\n</remark>",
            "source": "rules",
        }
    )
    # update 1 draws pool positions 0-1, update 2 positions 2-3; keep nothing of update 2 and
    # one step of update 1
    kept = np.zeros(len(pool), dtype=bool)
    kept[0] = True
    teacher = vision_policy
    student = offline.clone_policy(teacher)
    calls = []

    def monitor(policy, rank, world_size):
        assert (rank, world_size) == (0, 1)
        calls.append({k: v.detach().clone() for k, v in policy.model.state_dict().items()})
        return 1, 2

    metrics, curve = offline.train_oel(
        student, teacher, pool, summaries, kept, monitor, aitz_root, config, run="oel_sgs"
    )
    check_columns(metrics, "aitz_train_metrics")
    check_columns(curve, "aitz_curve")
    assert metrics["num_steps"].tolist() == [1, 0]
    assert metrics["tokens"].iloc[0] > 0 and metrics["tokens"].iloc[1] == 0
    assert curve["update"].tolist() == [0, 1, 2]
    assert curve["accuracy"].tolist() == [0.5] * 3 and curve["steps"].tolist() == [2] * 3
    start, after_1, after_2 = calls
    assert any(not torch.equal(start[k], after_1[k]) for k in start)  # update 1 trained
    assert all(torch.equal(after_1[k], after_2[k]) for k in start)  # update 2 had no kept step
    # the teacher stays frozen
    fresh = make_vision_policy(aitz_train)
    for key, value in teacher.model.state_dict().items():
        assert torch.equal(value, fresh.model.state_dict()[key])
    unfiltered, _ = offline.train_oel(
        offline.clone_policy(teacher),
        teacher,
        pool,
        summaries,
        None,
        monitor,
        aitz_root,
        config,
        run="oel",
    )
    per_update = pool.groupby(pool["position"] // 2).size().tolist()
    assert unfiltered["num_steps"].tolist() == per_update


def test_monitor_accuracy_leaves_out_stop_steps(vision_policy, aitz_root, aitz_test):
    subset = offline.monitoring_subset(aitz_test, 2, seed=0)
    accuracy, scored = offline.monitor_accuracy(vision_policy, subset, aitz_root, _config())
    stops = sum('"kind": "stop"' in a for a in subset["action"])
    assert scored == len(subset) - stops and 0.0 <= accuracy <= 1.0
    with pytest.raises(ValueError, match="every step is a stop"):
        offline.monitor_accuracy(
            vision_policy, subset[subset["action"].str.contains('"stop"')], aitz_root, _config()
        )


def test_warm_start_lowers_the_cloning_loss(make_vision_policy, aitz_root, aitz_train):
    policy = make_vision_policy(aitz_train, seed=1)
    losses = offline.warm_start(policy, aitz_train, aitz_root, updates=30, batch=8, lr=3e-3, seed=0)
    check_columns(losses, "aitz_warm_start")
    assert losses["update"].tolist() == list(range(1, 31))
    assert losses["loss"].iloc[-5:].mean() < 0.5 * losses["loss"].iloc[:5].mean()


def test_one_process_on_the_engine_equals_the_loop_it_replaced(
    vision_policy, aitz_root, aitz_train, aitz_test
):
    """train_oel on its one-process engine gives today's losses, tokens, curve and weights bit for
    bit: the same micro-batches, backward and AdamW step as the loop it replaced
    (tests/gui/_reference.py); two micro-batches per update and gradient clipping on."""
    config = _config(micro_batch=2, optimizer={"lr": 1e-2, "grad_clip": 0.5})
    pool = offline.training_pool(aitz_train, 4, seed=0)
    summaries = pd.DataFrame(
        {
            "episode_id": sorted(pool["episode_id"].unique()),
            "remark": "<remark>\nHow to do:\n1) x\n\nWatch out:\n- y\n</remark>",
            "source": "rules",
        }
    )
    subset = offline.monitoring_subset(aitz_test, 1, seed=0)
    runs = []
    for trainer, monitor in (
        (offline.train_oel, lambda p, r, w: offline.monitor_hits(p, subset, aitz_root, config)),
        (reference_train_oel, lambda p: offline.monitor_accuracy(p, subset, aitz_root, config)),
    ):
        student = offline.clone_policy(vision_policy)
        metrics, curve = trainer(
            student, vision_policy, pool, summaries, None, monitor, aitz_root, config, run="oel"
        )
        runs.append((metrics.drop(columns="seconds"), curve, student.model.state_dict()))
    (metrics, curve, weights), (old_metrics, old_curve, old_weights) = runs
    assert metrics["num_steps"].sum() == len(pool) and (metrics["loss"] > 0).all()
    pd.testing.assert_frame_equal(metrics, old_metrics, check_exact=True)
    pd.testing.assert_frame_equal(curve, old_curve, check_exact=True)
    assert all(torch.equal(weights[k], old_weights[k]) for k in weights)
    assert any(not torch.equal(weights[k], vision_policy.model.state_dict()[k]) for k in weights)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"offline": {"engine": {"micro_batch_steps": 2}}}, r"offline.engine.micro_batch_steps"),
        (
            {"offline": {"engine": {"kind": "deepspeed", "zero_stage": 3}}},
            r"offline.engine.zero_stage: the GUI trainer runs ZeRO stage 1 or 2",
        ),
        (
            {"offline": {"engine": {"kind": "single", "world_size": 2}}},
            r"offline.engine.world_size: the single engine runs one process",
        ),
        ({"offline": {"engine": {"kind": "fsdp"}}}, r"offline.engine.kind: must be one of"),
        ({"generation": {"backend": "sglang"}}, r"generation.backend: must be one of"),
        ({"generation": {"vllm": [1]}}, r"generation.vllm: expected a mapping"),
        ({"offline": {"keep": 0}}, r"offline.keep: must be in \(0, 1\]"),
        ({"offline": {"on_rejected": "skip"}}, "offline.on_rejected"),
        ({"data": {"source": "web"}}, "data.source"),
        ({"initial": {"dtype": "fp8"}}, "initial.dtype"),
        ({"initial": {"warm_start": {"hidden_size": 96}}}, "hidden_size: must be a multiple of 64"),
        ({"data": {"synthetic": {"train_episodes": 10}}}, "train_episodes: must exceed the pool"),
        ({"offlne": {}}, r"unknown key\(s\) \['offlne'\]"),
    ],
)
def test_config_errors_name_the_field(changes, message):
    with pytest.raises(ConfigError, match=message):
        build(AitzConfig, changes, "aitz")


def test_the_score_node_scores_in_a_process_of_its_own_where_a_gpu_is(
    vision_policy, aitz_root, aitz_train, tmp_path, monkeypatch
):
    """On a GPU machine the scores are computed off the Kedro process (devices.off_process,
    made to spawn here by saying a GPU is visible): the same table as in this process."""
    from resail_pipeline import devices
    from resail_pipeline.gui import experiment
    from resail_pipeline.pipelines.aitz import nodes

    info = vision_policy.save(tmp_path / "policy", name="tiny")
    pool = offline.training_pool(aitz_train, 2, seed=0)
    attempts = offline.diagnose(vision_policy, pool, aitz_root, _config())
    summaries = offline.summarize(vision_policy, pool, attempts, aitz_root, _config())
    params = {
        "data": {"root": str(aitz_root)},
        "initial": {"path": info.path, "device": "cpu", "dtype": "float32"},
        "offline": CONFIG,
    }
    config = build(AitzConfig, params, "aitz")
    here = experiment.score_steps(config, info.path, pool, attempts, summaries)
    monkeypatch.setattr(devices, "visible_devices", lambda: ["0"])
    sent = []

    def recorded(function, *args, **kwargs):
        sent.append(function)
        return devices.off_process(function, *args, **kwargs)

    monkeypatch.setattr(nodes, "off_process", recorded)
    there = nodes.score_node(pool, attempts, summaries, info.to_frame(), params)
    assert sent == [experiment.score_steps]
    assert there[["episode_id", "step_id", "tokens"]].equals(
        here[["episode_id", "step_id", "tokens"]]
    )
    np.testing.assert_allclose(there["jsd"], here["jsd"], rtol=1e-5, atol=1e-7)
