"""Tiny inputs for the trainer's tests: synthetic steps and summaries, cached responses, the probe
set, configs."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch

from resail_pipeline.generation import SamplingParams
from resail_pipeline.training import TrainConfig, build_probe_set, sample_responses, write_inputs

# five trajectories; "t4" has a rejected summary and is dropped
TRAJECTORIES = {
    "t0": ("success", 3),
    "t1": ("failure", 2),
    "t2": ("success", 2),
    "t3": ("failure", 1),
    "t4": ("success", 2),
}
# each trajectory's task id: task order is t2, t4 (rejected), t1, t3, t0
TASK_IDS = {"t0": 4, "t1": 2, "t2": 0, "t3": 3, "t4": 1}
# trajectories in the probe set: the first three in task order with an accepted summary
PROBE_TRAJECTORIES = ("t2", "t1", "t3")
HISTORY = [
    "Prior to this step, you have already taken 1 step(s). Recent history: [Observation 1: 'x', Action 1: 'y']",
    "Inventory: [oak planks] (4) Got 1 oak logs Crafted 4 minecraft:oak_planks",
    "Could not execute craft 1 stick using 2 planks. Could not find",
]


def _prompt(traj: int, t: int) -> str:
    goal = "Goal: craft wooden pickaxe." if traj % 2 else "Goal: craft 1 crafting table."
    return " ".join(
        [
            "You are an expert agent operating in TextCraft, a text-only Minecraft crafting environment.",
            goal,
            *HISTORY[:t],
            "Your current observation is: Crafting commands: craft 4 oak planks using 1 oak logs",
            "Then choose exactly one action and present it within <action> </action> tags.",
        ]
    )


def _summary(outcome: str) -> str:
    if outcome == "success":
        return (
            "Guidance summary:\n- Minimal plan: `get 1 oak logs` then `craft 4 oak planks using 1 oak logs`\n"
            "- Critical actions: craft 1 stick using 2 planks\n- Checks: Inventory: [oak planks] (4)\n- Avoid: Could not execute"
        )
    return (
        "Failure analysis:\n- Failure diagnosis: Could not find oak logs\n- Useful evidence: Got 1 oak logs\n"
        "- Corrected plan: `get 1 oak logs` then `craft 4 oak planks using 1 oak logs`\n- Avoid: inventory"
    )


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models' ops are too small to split across threads: one thread is much faster (and
    steady on a shared machine, where a second thread waits for a busy core)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tiny_steps() -> pd.DataFrame:
    rows = []
    for k, (traj, (_, n)) in enumerate(TRAJECTORIES.items()):
        for t in range(n):
            rows.append(
                {
                    "traj_id": traj,
                    "t": t,
                    "observation": "Inventory: [oak planks] (4)",
                    "admissible_actions": None,
                    "prompt": _prompt(k, t),
                    "response": "<action> get 1 oak logs </action>",
                    "action": "get 1 oak logs",
                    "action_valid": True,
                    "next_observation": "Got 1 oak logs",
                    "reward": 0.0,
                    "done": t == n - 1,
                }
            )
    return pd.DataFrame(rows)


@pytest.fixture(scope="session")
def tiny_summaries() -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "traj_id": traj,
                "outcome": outcome,
                "summary": _summary(outcome) if traj != "t4" else "",
                "attempts": 1,
                "accepted": traj != "t4",
                "source": "rules",
                "rejection_reasons": [] if traj != "t4" else ["missing field"],
            }
            for traj, (outcome, _) in TRAJECTORIES.items()
        ]
    )


@pytest.fixture(scope="session")
def tiny_trajectories() -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "traj_id": traj,
                "cycle": 0,
                "method": "reference",
                "env": "textcraft",
                "split": "test",
                "task_id": TASK_IDS[traj],
                "decoding_seed": 0,
                "policy_id": "sharp@0",
                "task": "craft wooden pickaxe",
                "success": outcome == "success",
                "num_steps": n,
                "end_reason": "done" if outcome == "success" else "step_limit",
            }
            for traj, (outcome, n) in TRAJECTORIES.items()
        ]
    )


@pytest.fixture(scope="session")
def sharp_checkpoint(tmp_path_factory, tiny_tokenizer, tiny_model_config) -> Path:
    """The tiny Qwen3 with a wider initialisation (std 0.2), saved as a checkpoint.

    At the default std of 0.02 a tiny random model barely reacts to its context (the two views'
    JSD is about 1e-4); at 0.2 it is about 0.03, so losses and scores are far above rounding.
    """
    from resail_pipeline.checkpoints import save_policy
    from resail_pipeline.modeling import build_qwen3

    config = copy.deepcopy(tiny_model_config)
    config.initializer_range = 0.2
    path = tmp_path_factory.mktemp("checkpoints") / "sharp"
    save_policy(build_qwen3(config, seed=0), tiny_tokenizer, path, name="sharp")
    return path


@pytest.fixture(scope="session")
def tiny_responses(sharp_checkpoint, tiny_steps) -> pd.DataFrame:
    """One cached response per step from the cycle-start policy (offline SDPO's cache)."""
    from resail_pipeline.generation.transformers_backend import TransformersGenerator

    generator = TransformersGenerator.from_checkpoint(
        sharp_checkpoint, batch_size=4, progress=False
    )
    params = SamplingParams(temperature=1.0, max_new_tokens=6, seed=3)
    return sample_responses(generator, tiny_steps, params)


@pytest.fixture(scope="session")
def tiny_probe_set(sharp_checkpoint, tiny_trajectories, tiny_steps, tiny_summaries) -> pd.DataFrame:
    """The probe set of the sharp checkpoint: 3 trajectories, top-5 support."""
    from resail_pipeline.checkpoints import load_policy, read_checkpoint_info

    model, tokenizer = load_policy(sharp_checkpoint)
    return build_probe_set(
        model,
        tokenizer,
        tiny_trajectories,
        tiny_steps,
        tiny_summaries,
        policy_id=read_checkpoint_info(sharp_checkpoint).policy_id,
        num_trajectories=len(PROBE_TRAJECTORIES),
        top_k=5,
        micro_batch_steps=2,
    )


def base_config(**sections: dict[str, Any]) -> dict[str, Any]:
    """A small configuration: 2 updates of 2 trajectories, tiny responses, a visible lr."""
    config: dict[str, Any] = {
        "method": "oel_resail",
        "resail": {"rho": 0.5, "lambda": 0.5, "top_k": 5},
        "schedule": {"updates": 2, "trajectories_per_update": 2, "seed": 0},
        "optimizer": {"lr": 1e-3, "weight_decay": 0.0},
        "engine": {"kind": "single", "precision": "fp32"},
        "responses": {"max_tokens": 5, "batch_size": 8},
        "probe": {"top_k": 5, "micro_batch_steps": 2},
    }
    for name, values in sections.items():
        if not isinstance(values, dict):  # a top-level value: method, compile
            config[name] = values
        else:
            config[name] = {**config.get(name, {}), **values}
    return config


@pytest.fixture()
def make_config(
    tmp_path, sharp_checkpoint, tiny_steps, tiny_summaries, tiny_responses, tiny_probe_set
) -> Callable[..., TrainConfig]:
    """``make_config(method=..., engine={...}, ...)``: inputs written (the probe set among them;
    the probe is off unless ``probe={"enabled": True}``), paths under ``tmp_path``."""
    manifest = write_inputs(
        tmp_path / "inputs",
        policy=sharp_checkpoint,
        steps=tiny_steps,
        summaries=tiny_summaries,
        responses=tiny_responses,
        probe=tiny_probe_set,
    )

    def make(name: str = "run", **sections: Any) -> TrainConfig:
        data = base_config(**sections)
        run_dir: Path = tmp_path / name
        data["run"] = {
            "manifest": str(manifest),
            "checkpoint": str(run_dir / "policy"),
            "run_dir": str(run_dir),
            "policy_name": name,
            "cycle": 1,
            **data.get("run", {}),
        }
        return TrainConfig.from_dict(data)

    return make


@pytest.fixture()
def nan_manifest(
    tmp_path, sharp_checkpoint, tiny_tokenizer, tiny_steps, tiny_summaries, tiny_responses
) -> Path:
    """Inputs whose cycle-start checkpoint is corrupt: one weight of its last layer is NaN."""
    from resail_pipeline.checkpoints import load_model, save_policy

    model = load_model(sharp_checkpoint)
    with torch.no_grad():
        model.model.layers[-1].mlp.down_proj.weight[0, 0] = float("nan")
    path = save_policy(model, tiny_tokenizer, tmp_path / "corrupt", name="corrupt").path
    return write_inputs(
        tmp_path / "corrupt_inputs",
        policy=path,
        steps=tiny_steps,
        summaries=tiny_summaries,
        responses=tiny_responses,
    )
