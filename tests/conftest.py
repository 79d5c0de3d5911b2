"""Shared fixtures: a tiny word-level tokenizer and a tiny random Qwen3, saved as a checkpoint."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

os.environ.setdefault("KEDRO_DISABLE_TELEMETRY", "true")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))

# Text covering the words the TextCraft and ALFWorld prompts use, so that rendered prompts
# tokenize without unknown words in the tests.
TINY_CORPUS = [
    "You are an expert agent operating in TextCraft, a text-only Minecraft crafting environment.",
    "Your current observation is: Crafting commands: craft 4 oak planks using 1 oak logs",
    "craft 1 stick using 2 planks, craft 1 crafting table using 4 planks. Goal: craft wooden pickaxe.",
    "Valid actions are: - get N item - inventory - craft N target item using N ingredient, N ingredient",
    "Use only the crafting commands listed in the observation. Always include quantities for get and craft actions.",
    "You should first reason step-by-step. This reasoning process MUST be enclosed within <thinking> </thinking> tags.",
    "Then choose exactly one action and present it within <action> </action> tags.",
    "Prior to this step, you have already taken 1 step(s). Recent history: [Observation 1: 'x', Action 1: 'y']",
    "Available crafting commands for this episode: Got 1 oak logs Crafted 4 minecraft:oak_planks",
    "Inventory: [oak planks] (4) You are not carrying anything. Could not execute Could not find",
    "A successful trajectory for the current task: Guidance summary: - Minimal plan: - Critical actions:",
    "- Checks: - Avoid: Use this information as a reference and continue solving the original task.",
    "A failed trajectory for the current task: Failure analysis: - Failure diagnosis: - Useful evidence:",
    "- Corrected plan: `get 1 oak logs` then `craft 4 oak planks using 1 oak logs`",
    "You are an expert agent operating in the ALFRED Embodied Environment. Your task is to: put a mug in sink.",
    "Your admissible actions of the current situation are: [ 'go to sink 1' 'take mug 1 from table 1' ].",
    "Now it's your turn to take an action. You should first reason step-by-step about the current situation.",
    "Once you've finished your reasoning, you should choose an admissible action for current step",
    "Below are the most recent observations and the corresponding actions you took: You are now at step",
]


@pytest.fixture(scope="session")
def tiny_tokenizer():
    from resail_pipeline.modeling import build_word_tokenizer

    return build_word_tokenizer(TINY_CORPUS)


@pytest.fixture(scope="session")
def tiny_model_config(tiny_tokenizer):
    from resail_pipeline.modeling import small_qwen3_config

    return small_qwen3_config(
        len(tiny_tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        pad_token_id=tiny_tokenizer.pad_token_id,
        eos_token_id=tiny_tokenizer.eos_token_id,
    )


@pytest.fixture()
def tiny_model(tiny_model_config):
    """A fresh tiny random Qwen3 (2 layers, width 32) per test, with a configuration of its own:
    a model holds its configuration object, so a test that changes it (``set_attn_implementation``)
    would otherwise change every later test's model."""
    from resail_pipeline.modeling import build_qwen3

    return build_qwen3(copy.deepcopy(tiny_model_config), seed=0).eval()


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory, tiny_tokenizer, tiny_model_config) -> Path:
    """The tiny random Qwen3 and its tokenizer saved as a local Hugging Face checkpoint."""
    from resail_pipeline.checkpoints import save_policy
    from resail_pipeline.modeling import build_qwen3

    path = tmp_path_factory.mktemp("checkpoints") / "tiny"
    save_policy(build_qwen3(tiny_model_config, seed=0), tiny_tokenizer, path, name="tiny")
    return path


@pytest.fixture(scope="session")
def execute_notebook():
    """``execute_notebook(path, output, env)``: run the notebook at ``path`` top to bottom in its
    own folder (where it finds the project), writing the executed copy to ``output``; returns the
    finished ``jupyter nbconvert`` process."""

    def execute(path: Path, output: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "jupyter",
                "nbconvert",
                "--to",
                "notebook",
                "--execute",
                "--output",
                str(output),
                path.name,
            ],
            cwd=path.parent,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )

    return execute


@pytest.fixture(scope="session")
def process_alive():
    """``pid -> bool``: whether the process runs (a zombie waiting for its new parent to reap it
    does not)."""

    def alive(pid: int) -> bool:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
        except FileNotFoundError:
            return False

    return alive


@pytest.fixture(scope="session")
def while_lock_held():
    """``(path, work, events=None, hold=0.5) -> events``: holds the lock at ``path`` (another open
    file of the same path, so ``flock`` conflicts within this process), runs ``work`` in a thread,
    gives it ``hold`` seconds, notes ``"released"`` and lets go, then waits for ``work``, whose
    result is noted last. ``["released", <result>]`` shows that ``work`` waited for the lock."""
    from resail_pipeline.io import ProcessLock

    def run(
        path: Path, work: Callable[[], object], events: list | None = None, hold: float = 0.5
    ) -> list:
        events = [] if events is None else events
        held = ProcessLock(path)
        held.acquire()
        thread = threading.Thread(target=lambda: events.append(work()))
        try:
            thread.start()
            thread.join(timeout=hold)
            events.append("released")
        finally:
            held.release()
        thread.join()
        return events

    return run
