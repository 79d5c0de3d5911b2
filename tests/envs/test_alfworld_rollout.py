"""Batched rollout over several ALFWorld games at once, through the real engine."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

pytest.importorskip("alfworld")

from resail_pipeline.envs import END_STEP_LIMIT, END_SUCCESS, make_env
from resail_pipeline.generation import Generation, SamplingParams
from resail_pipeline.generation.transformers_backend import TransformersGenerator
from resail_pipeline.rollout import EpisodeSpec, episodes_to_frames, run_episodes

pytestmark = pytest.mark.alfworld

FIXTURE_DATA = Path(__file__).parent / "alfworld_data"
TASK_IDS = [0, 1, 100_000, 100_001, 200_000, 200_001]
SPECS = [
    EpisodeSpec(f"1/alfworld/{split}/{t}/0", task_id=t, decoding_seed=k)
    for k, (t, split) in enumerate(
        zip(TASK_IDS, ["train"] * 2 + ["id"] * 2 + ["ood"] * 2, strict=True)
    )
]
_TASK = re.compile(r"Your task is to: (.*?)[\n']")
_STEP = re.compile(r"You are now at step (\d+) ")


@dataclass
class FakeWalkthroughPolicy:
    """Answers every prompt with the next command of its game's walkthrough, found from the task
    sentence and the step number the prompt shows; records the batch size of every call."""

    tokenizer: object
    walkthroughs: dict[str, tuple[str, ...]]
    policy_id: str = "walkthrough@0"
    batch_sizes: list[int] = field(default_factory=list)

    def generate(self, prompts, params, seeds=None) -> list[Generation]:
        self.batch_sizes.append(len(prompts))
        out = []
        for prompt in prompts:
            step = _STEP.search(prompt)
            t = int(step.group(1)) - 1 if step else 0
            action = self.walkthroughs[_TASK.search(prompt).group(1)][t]
            out.append(Generation(f"<thinking>next</thinking><action>{action}</action>", (1,)))
        return out


def test_walkthrough_policy_wins_every_game_stepped_together(tiny_tokenizer):
    env = make_env("alfworld", data_path=FIXTURE_DATA)
    walkthroughs = {env.reset(t).task: env.walkthrough(t) for t in TASK_IDS}
    env.close()
    policy = FakeWalkthroughPolicy(tiny_tokenizer, walkthroughs)
    episodes = run_episodes(
        lambda: make_env("alfworld", data_path=FIXTURE_DATA),
        SPECS,
        policy,
        SamplingParams(),
        progress=False,
    )
    lengths = sorted(len(w) for w in walkthroughs.values())
    # One generate call per turn; finished games drop out of the batch.
    assert policy.batch_sizes == [sum(n > t for n in lengths) for t in range(lengths[-1])]
    assert all(e.success and e.end_reason == END_SUCCESS for e in episodes)
    assert [e.num_steps for e in episodes] == [len(env.walkthrough(t)) for t in TASK_IDS]
    for e in episodes:
        assert all(s.action_valid for s in e.steps)
        assert all("help" not in s.admissible_actions for s in e.steps)
    trajectories, steps = episodes_to_frames(episodes, cycle=1, method="oel_resail", split="train")
    assert len(trajectories) == len(TASK_IDS) and len(steps) == sum(lengths)
    assert set(trajectories["env"]) == {"alfworld"}


def test_tiny_random_policy_on_alfworld_games(tiny_model, tiny_tokenizer):
    generator = TransformersGenerator(
        tiny_model, tiny_tokenizer, policy_id="tiny@0", batch_size=6, progress=False
    )
    episodes = run_episodes(
        lambda: make_env("alfworld", data_path=FIXTURE_DATA, max_steps=3),
        SPECS,
        generator,
        SamplingParams(temperature=1.0, max_new_tokens=8),
        progress=False,
    )
    assert [(e.num_steps, e.end_reason, e.success) for e in episodes] == [
        (3, END_STEP_LIMIT, False)
    ] * len(TASK_IDS)
    for e in episodes:  # a random model writes no action tag: each step is invalid, and counts
        assert [s.action_valid for s in e.steps] == [False] * 3
        assert [s.next_observation for s in e.steps] == ["Nothing happens."] * 3
        assert e.steps[0].prompt.startswith(
            "You are an expert agent operating in the ALFRED Embodied Environment.\n"
        )
        assert "You are now at step 3 and your current observation is: Nothing happens." in (
            e.steps[2].prompt
        )
