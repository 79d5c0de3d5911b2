"""Shared fixtures: synthetic AITZ episodes on disk and a tiny Qwen3-VL policy over them."""

from __future__ import annotations

import pytest

from resail_pipeline.gui.episodes import read_episodes
from resail_pipeline.gui.experiment import gui_tokenizer
from resail_pipeline.gui.policy import VisionPolicy
from resail_pipeline.gui.synthetic import SyntheticConfig, write_synthetic
from resail_pipeline.modeling.vision import (
    build_qwen3_vl,
    small_image_processor,
    small_qwen3_vl_config,
)


@pytest.fixture(scope="session")
def aitz_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("aitz")
    write_synthetic(root, SyntheticConfig(train_episodes=12, test_episodes=4, seed=0))
    return root


@pytest.fixture(scope="session")
def aitz_train(aitz_root):
    return read_episodes(aitz_root, "train")


@pytest.fixture(scope="session")
def aitz_test(aitz_root):
    return read_episodes(aitz_root, "test")


def tiny_vision_policy(steps, seed: int = 0) -> VisionPolicy:
    """A 64-wide, one-layer Qwen3-VL over the GUI templates and the episodes' words."""
    tokenizer = gui_tokenizer(steps)
    config = small_qwen3_vl_config(
        tokenizer,
        hidden_size=64,
        num_hidden_layers=1,
        num_attention_heads=1,
        intermediate_size=128,
        vision_hidden_size=32,
        vision_depth=1,
    )
    return VisionPolicy(
        build_qwen3_vl(config, seed=seed).eval(), tokenizer, small_image_processor(64 * 128)
    )


@pytest.fixture()
def vision_policy(aitz_train):
    return tiny_vision_policy(aitz_train)


@pytest.fixture()
def make_vision_policy():
    """:func:`tiny_vision_policy`, for tests that need more than one."""
    return tiny_vision_policy
