"""The dual-view evaluation record, and the reference policy shipped in the repository."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from resail_pipeline.bootstrap.build import verify_reference
from resail_pipeline.bootstrap.reference import evaluate_and_record, markdown_table, ship
from resail_pipeline.checkpoints import MANIFEST_NAME, load_policy
from resail_pipeline.envs import make_env
from resail_pipeline.evaluation.evaluate import EvalConfig
from resail_pipeline.generation.base import SamplingParams
from resail_pipeline.generation.transformers_backend import TransformersGenerator
from resail_pipeline.prompts import EpisodeHistory, chat_prompt, parse_action, render_user_message

SHIPPED = Path(__file__).resolve().parents[2] / "reference" / "textcraft-initial"
#: The size limit of a policy shipped in the repository.
MAX_BYTES = 25 * 1024 * 1024


@pytest.mark.slow
def test_evaluation_is_recorded_in_the_manifest(tiny_checkpoint, tmp_path):
    """Both views of two test tasks under two seeds (the tiny random model runs 30 steps each)."""
    policy = ship(tiny_checkpoint, tmp_path / "policy")
    config = EvalConfig(num_tasks=2, decoding_seeds=(0, 1), max_new_tokens=4)
    record = evaluate_and_record(policy, config, reference_seed=1000, command="test", batch_size=8)
    manifest = json.loads((policy / MANIFEST_NAME).read_text())
    assert manifest["evaluation"] == record
    assert [row["view"] for row in record["table"]] == ["ordinary", "privileged"]
    for row in record["table"]:
        assert row["tasks"] == 2 and len(row["success_per_seed"]) == 2
        assert 0.0 <= row["mean"] <= 1.0
    # the tiny random model never succeeds: every Experience is a failure analysis
    assert record["protocol"]["experience_outcomes"] == {"failure": 2}
    assert verify_reference(policy).sha256 == manifest["sha256"]
    table = markdown_table(record)
    assert table.splitlines()[0] == "| view | seed 0 | seed 1 | mean (SD) |"
    assert "| ordinary | 0.0 | 0.0 | 0.0 (0.0) |" in table


def test_a_policy_without_a_manifest_is_refused_before_any_rollout(
    tiny_checkpoint, tmp_path, monkeypatch
):
    import shutil

    from resail_pipeline.bootstrap import reference

    def no_rollouts(*args, **kwargs):
        raise AssertionError("the evaluation started")

    monkeypatch.setattr(reference, "dual_view_evaluation", no_rollouts)
    bare = tmp_path / "state"
    shutil.copytree(tiny_checkpoint, bare)
    (bare / MANIFEST_NAME).unlink()
    config = EvalConfig(num_tasks=1, decoding_seeds=(0,), max_new_tokens=4)
    with pytest.raises(FileNotFoundError, match=f"policy: {bare / MANIFEST_NAME} is missing"):
        evaluate_and_record(bare, config, reference_seed=1000, command="test")


def test_markdown_table_gives_percent_per_seed_and_mean_sd():
    record = {
        "protocol": {"decoding_seeds": [0, 1, 2]},
        "table": [
            {"view": "ordinary", "success_per_seed": [0.1, 0.12, 0.14], "mean": 0.12, "sd": 0.02},
            {"view": "privileged", "success_per_seed": [0.3, 0.3, 0.3], "mean": 0.3, "sd": 0.0},
        ],
    }
    assert markdown_table(record).splitlines() == [
        "| view | seed 0 | seed 1 | seed 2 | mean (SD) |",
        "|---|---|---|---|---|",
        "| ordinary | 10.0 | 12.0 | 14.0 | 12.0 (2.0) |",
        "| privileged | 30.0 | 30.0 | 30.0 | 30.0 (0.0) |",
    ]


def test_ship_replaces_the_destination_whole(tiny_checkpoint, tmp_path):
    destination = tmp_path / "reference"
    destination.mkdir()
    (destination / "stale.txt").write_text("old")
    ship(tiny_checkpoint, destination)
    assert not (destination / "stale.txt").exists()
    assert (destination / MANIFEST_NAME).is_file()


@pytest.fixture(scope="module")
def shipped():
    if not SHIPPED.is_dir():
        pytest.fail(f"the reference policy {SHIPPED} is missing")
    return SHIPPED


def test_shipped_policy_matches_its_manifest(shipped):
    info = verify_reference(shipped)  # weights sha256 against the manifest
    manifest = json.loads((shipped / MANIFEST_NAME).read_text())
    assert info.policy_id == manifest["policy_id"] == f"textcraft-initial@{info.sha256[:12]}"
    assert sum(p.stat().st_size for p in shipped.iterdir()) <= MAX_BYTES
    for key in ("command", "configuration", "training_data_sha256", "machine", "evaluation"):
        assert manifest[key], key
    assert manifest["training"]["seconds"] > 0
    config = json.loads((shipped / "config.json").read_text())
    assert config["model_type"] == "qwen3" and config["architectures"] == ["Qwen3ForCausalLM"]


def test_shipped_policy_acts_validly_on_a_test_task(shipped, tmp_path):
    model, tokenizer = load_policy(shipped)
    env = make_env("textcraft")
    task_id = env.task_ids("test")[0]
    history = EpisodeHistory.start(env.name, env.reset(task_id))
    generator = TransformersGenerator(model, tokenizer, policy_id="reference", batch_size=1)
    prompt = chat_prompt(tokenizer, render_user_message(history))
    (generation,) = generator.generate([prompt], SamplingParams(temperature=0.0, max_new_tokens=48))
    assert generation.finished
    action = parse_action(generation.text).action
    assert action is not None, generation.text
    assert env.step(action).action_valid, action


def test_the_named_configurations_parse_and_the_first_is_the_shipped_one():
    from resail_pipeline.bootstrap.__main__ import load_config
    from resail_pipeline.bootstrap.config import BootstrapConfig

    first = load_config(SHIPPED.parent / "textcraft-initial.yml")
    manifest = json.loads((SHIPPED / MANIFEST_NAME).read_text())
    assert BootstrapConfig.from_dict(manifest["configuration"]) == first
    second = load_config(SHIPPED.parent / "textcraft-initial-stage2.yml")
    assert second.warm_start == "data/06_models/bootstrap-reference/policy"
    assert second.model == first.model and second.data.renamed_copies > 0
    copy = load_config(SHIPPED.parent / "textcraft-initial-copy.yml")
    assert copy.warm_start == str(SHIPPED.relative_to(SHIPPED.parent.parent))
    assert copy.data.ordinary_share == 0 and copy.data.privileged_share == 1
    mix = load_config(SHIPPED.parent / "textcraft-initial-copy-mix.yml")
    assert mix.model == first.model and mix.data.ordinary_share == 1
    renamed = load_config(SHIPPED.parent / "textcraft-initial-renamed.yml")
    assert renamed.warm_start is None and renamed.model == first.model
    assert renamed.data.renamed_copies == 2 and renamed.training.precision == "fp32"
    more = load_config(SHIPPED.parent / "textcraft-initial-renamed-more.yml")
    assert more.warm_start == "data/06_models/bootstrap-renamed/policy"
    assert more.data == renamed.data and more.seed == renamed.seed  # the same training data
    dagger = load_config(SHIPPED.parent / "textcraft-initial-dagger.yml")
    assert dagger.warm_start == copy.warm_start and dagger.model == first.model
    assert dagger.data.on_policy_episodes == 1 and dagger.seed != first.seed
    alone = load_config(SHIPPED.parent / "textcraft-initial-privileged-only.yml")
    assert alone.warm_start is None and alone.seed == renamed.seed
    assert alone.data == dataclasses.replace(renamed.data, ordinary_share=0.0)
    dense = load_config(SHIPPED.parent / "textcraft-initial-prompt-loss.yml")
    assert dense.warm_start == copy.warm_start and dense.training.prompt_loss_weight == 1.0
    assert (dense.seed, dense.data) == (second.seed, second.data)  # the second stage's data
    assert second.training.prompt_loss_weight == 0.0
    drills = load_config(SHIPPED.parent / "textcraft-initial-drills.yml")
    assert drills.warm_start == "data/06_models/bootstrap-prompt-loss/policy"
    assert drills.data.copying_drills == 2 and drills.training.prompt_loss_weight == 1.0
    assert drills.model == first.model and drills.seed not in (first.seed, second.seed)
    assert all(c.data.copying_drills == 0 for c in (first, second, dense))
