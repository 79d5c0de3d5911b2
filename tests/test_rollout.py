"""Batched rollout over scripted environments, with the tiny random Qwen3 and scripted policies."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from unittest.mock import ANY

import pandas as pd
import pytest

from resail_pipeline.envs import END_ENV_DONE, END_STEP_LIMIT, END_SUCCESS, Observation, StepResult
from resail_pipeline.generation import Generation, SamplingParams
from resail_pipeline.generation.transformers_backend import TransformersGenerator
from resail_pipeline.journal import (
    EpisodeJournal,
    episode_from_json,
    episode_to_json,
    finished_journals,
)
from resail_pipeline.prompts import Summary
from resail_pipeline.rollout import (
    EpisodeSpec,
    RolloutSettings,
    episodes_to_frames,
    run_episodes,
    sample_tasks,
)
from resail_pipeline.schemas import SCHEMAS

COMMANDS = ("craft 4 oak planks using 1 oak logs", "craft 1 stick using 2 planks")
PARAMS = SamplingParams(temperature=1.0, max_new_tokens=6)
TRAJECTORY_FIELDS = {"cycle": 1, "method": "oel_resail", "split": "train"}


class FakeEnv:
    """A scripted TextCraft-like environment: task ``k`` ends by itself after ``k`` steps, in
    success when ``k`` is even; an action starting with ``get`` is valid, anything else not."""

    name = "textcraft"

    def __init__(
        self, max_steps: int = 30, admissible: bool = False, live_limit: int | None = None
    ) -> None:
        self.max_steps = max_steps
        self.admissible = admissible
        self.live_limit = live_limit
        self.actions: list[str | None] = []

    def task_ids(self, split: str) -> list[int]:
        return [1, 2, 3, 4]

    def reset(self, task_id: int) -> Observation:
        self.task_id, self.actions = task_id, []
        text = "Crafting commands:\n" + "\n".join(COMMANDS) + "\n\nGoal: craft wooden pickaxe."
        return Observation(
            text=text,
            task="craft wooden pickaxe",
            admissible_actions=self._admissible(),
            commands=COMMANDS,
        )

    def step(self, action: str | None) -> StepResult:
        self.actions.append(action)
        t = len(self.actions)
        valid = action is not None and action.startswith("get")
        done = t >= self.task_id
        success = done and self.task_id % 2 == 0
        return StepResult(
            observation=f"Got {t} oak logs" if valid else f"Could not execute {action}",
            reward=1.0 if success else 0.0,
            done=done,
            success=success,
            action_valid=valid,
            admissible_actions=self._admissible(),
            end_reason=(END_SUCCESS if success else END_ENV_DONE) if done else None,
        )

    def _admissible(self) -> tuple[str, ...] | None:
        return ("get 1 oak logs", "inventory") if self.admissible else None


@dataclass
class EnvFactory:
    """Builds ``FakeEnv``s and keeps them, so that tests can look at what each one was sent."""

    max_steps: int = 30
    admissible: bool = False
    live_limit: int | None = None
    made: list[FakeEnv] = field(default_factory=list)

    def __call__(self) -> FakeEnv:
        self.made.append(FakeEnv(self.max_steps, self.admissible, self.live_limit))
        return self.made[-1]


@dataclass
class ScriptedGenerator:
    """A fake policy answering ``responses[t]`` at turn ``t``; records every call."""

    tokenizer: object
    responses: Sequence[str]
    policy_id: str = "scripted@0"
    calls: list[tuple[list[str], list[int]]] = field(default_factory=list)

    def generate(self, prompts, params, seeds=None) -> list[Generation]:
        self.calls.append((list(prompts), list(seeds)))
        text = self.responses[len(self.calls) - 1]
        return [Generation(text=text, token_ids=(1,), logprobs=(0.0,)) for _ in prompts]


class RecordingGenerator(TransformersGenerator):
    """The real backend, recording the prompts and seeds of every call."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[tuple[list[str], list[int]]] = []

    def generate(self, prompts, params, seeds=None):
        self.calls.append((list(prompts), list(seeds)))
        return super().generate(prompts, params, seeds)


def specs(task_ids: Sequence[int], seed: int = 0, summary: Summary | None = None):
    return [
        EpisodeSpec(f"1/textcraft/train/{k}/{seed + i}", k, seed + i, summary)
        for i, k in enumerate(task_ids)
    ]


@pytest.fixture()
def generator(tiny_model, tiny_tokenizer) -> RecordingGenerator:
    return RecordingGenerator(
        tiny_model, tiny_tokenizer, policy_id="tiny@0", batch_size=2, progress=False
    )


def test_one_generate_call_per_turn_and_finished_episodes_drop_out(generator):
    factory = EnvFactory()
    episodes = run_episodes(factory, specs([3, 1, 2]), generator, PARAMS, progress=False)
    assert [len(prompts) for prompts, _ in generator.calls] == [3, 2, 1]
    assert [e.num_steps for e in episodes] == [3, 1, 2]
    assert [e.spec.task_id for e in episodes] == [3, 1, 2]  # input order, not finishing order
    assert len(factory.made) == 3  # one environment per episode
    assert [len(env.actions) for env in factory.made] == [3, 1, 2]
    assert [(e.success, e.end_reason) for e in episodes] == [
        (False, END_ENV_DONE),
        (False, END_ENV_DONE),
        (True, END_SUCCESS),
    ]
    assert all(e.policy_id == "tiny@0" and e.task == "craft wooden pickaxe" for e in episodes)
    for e in episodes:
        assert [s.t for s in e.steps] == list(range(e.num_steps))
        assert [s.done for s in e.steps] == [False] * (e.num_steps - 1) + [True]


def test_unparsable_responses_are_invalid_actions_that_consume_steps(generator):
    factory = EnvFactory()
    (episode,) = run_episodes(factory, specs([3]), generator, PARAMS, progress=False)
    # The random model never writes an action tag: every step was executed as None.
    assert factory.made[0].actions == [None, None, None]
    assert all(not s.action_valid and s.action == "" for s in episode.steps)
    assert [s.response for s in episode.steps] != ["", "", ""]
    assert episode.steps[1].observation == episode.steps[0].next_observation


def test_parsed_actions_are_executed_and_recorded(tiny_tokenizer):
    scripted = ScriptedGenerator(
        tiny_tokenizer,
        [
            "<thinking>need logs</thinking> <action>get 1  oak logs</action>",
            "<action>craft 1 stick using 2 planks</action>",
        ],
    )
    factory = EnvFactory()
    (episode,) = run_episodes(factory, specs([2]), scripted, PARAMS, progress=False)
    assert factory.made[0].actions == ["get 1 oak logs", "craft 1 stick using 2 planks"]
    first, second = episode.steps
    assert (first.action, first.action_valid, first.next_observation) == (
        "get 1 oak logs",
        True,
        "Got 1 oak logs",
    )
    assert first.response == scripted.responses[0]
    assert (second.action, second.action_valid) == ("craft 1 stick using 2 planks", False)
    # The next prompt shows the executed action in the history.
    assert "Action 1: 'get 1 oak logs'" in second.prompt
    assert episode.success and episode.steps[-1].reward == 1.0


def test_the_step_limit_ends_an_episode_its_environment_does_not(tiny_tokenizer):
    scripted = ScriptedGenerator(tiny_tokenizer, ["x"] * 10)
    factory = EnvFactory(max_steps=2)
    (episode,) = run_episodes(factory, specs([9]), scripted, PARAMS, progress=False)
    assert episode.num_steps == 2 and episode.end_reason == END_STEP_LIMIT
    assert not episode.success and episode.steps[-1].done


def test_privileged_episodes_show_the_summary_and_record_the_ordinary_prompt(tiny_tokenizer):
    summary = Summary("success", "Guidance summary:\n- Minimal plan: get 1 oak logs")
    scripted = ScriptedGenerator(tiny_tokenizer, ["x", "x"])
    (episode,) = run_episodes(
        EnvFactory(), specs([2], summary=summary), scripted, PARAMS, progress=False
    )
    for (shown,), step in zip((p for p, _ in scripted.calls), episode.steps, strict=True):
        assert "A successful trajectory for the current task" in shown
        assert "Minimal plan" in shown
        assert step.prompt in shown
        assert "A successful trajectory" not in step.prompt
        assert shown.startswith("<|im_start|>user\n")  # the chat template was applied


def test_seeds_derive_from_the_episode_and_the_turn(tiny_tokenizer):
    scripted = ScriptedGenerator(tiny_tokenizer, ["x"] * 3)
    run_episodes(EnvFactory(), specs([2, 3], seed=10), scripted, PARAMS, progress=False)
    seeds = [s for _, s in scripted.calls]
    assert len({s for call in seeds for s in call}) == 5  # every (episode, turn) differs
    assert seeds[2] == [seeds[2][0]] and seeds[2][0] not in seeds[1]


def test_rollout_is_deterministic_and_independent_of_the_batch(
    generator, tiny_model, tiny_tokenizer
):
    batch = specs([3, 1, 2], seed=5)
    first = run_episodes(EnvFactory(), batch, generator, PARAMS, progress=False)
    again = run_episodes(EnvFactory(), batch, generator, PARAMS, progress=False)
    assert first == again
    alone = TransformersGenerator(
        tiny_model, tiny_tokenizer, policy_id="tiny@0", batch_size=1, progress=False
    )
    for spec, episode in zip(batch, first, strict=True):
        (single,) = run_episodes(EnvFactory(), [spec], alone, PARAMS, progress=False)
        assert single == episode
    reseeded = run_episodes(
        EnvFactory(), specs([3, 1, 2], seed=6), generator, PARAMS, progress=False
    )
    assert [s.response for s in reseeded[0].steps] != [s.response for s in first[0].steps]


def test_prefix_reuse_plays_the_same_episodes(tiny_model, tiny_tokenizer):
    """Greedy episodes of one task under several seeds and both views share most of their
    prompts; encoding those prefixes once changes no action."""
    summary = Summary("failure", "Failure analysis:\n- Corrected plan: `get 1 oak logs`")
    batch = specs([4, 4, 3, 4], seed=2) + specs([4, 3], seed=9, summary=summary)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=6)
    played = {}
    for reuse in (False, True):
        generator = TransformersGenerator(
            tiny_model, tiny_tokenizer, policy_id="tiny@0", prefix_reuse=reuse, progress=False
        )
        played[reuse] = run_episodes(EnvFactory(), batch, generator, greedy, progress=False)
        played[reuse, "encoded"] = generator.stats.encoded_tokens
    assert played[True] == played[False]
    assert played[True, "encoded"] < played[False, "encoded"]


def test_a_cap_on_live_episodes_changes_nothing_but_the_calls(generator):
    batch = specs([3, 1, 4, 2], seed=5)
    together = run_episodes(EnvFactory(), batch, generator, PARAMS, progress=False)
    assert len(generator.calls[0][0]) == 4
    generator.calls.clear()
    factory = EnvFactory()
    capped = run_episodes(factory, batch, generator, PARAMS, max_live=2, progress=False)
    assert capped == together
    # two at a time (task k ends after k steps): task 4 starts when task 1 ends after one step,
    # task 2 when task 3 ends after three; without the cap the first turn has four prompts
    assert [len(prompts) for prompts, _ in generator.calls] == [2, 2, 2, 2, 2]
    assert len(factory.made) == 4
    with pytest.raises(ValueError, match="max_live"):
        run_episodes(EnvFactory(), batch, generator, PARAMS, max_live=0, progress=False)


def test_an_environment_s_own_limit_caps_a_rollout_that_names_none(generator):
    batch = specs([3, 1, 4, 2], seed=5)
    together = run_episodes(EnvFactory(), batch, generator, PARAMS, progress=False)
    generator.calls.clear()
    limited = EnvFactory(live_limit=2)
    assert run_episodes(limited, batch, generator, PARAMS, progress=False) == together
    # as max_live=2 above: task 4 starts when task 1 ends, task 2 when task 3 ends
    assert [len(prompts) for prompts, _ in generator.calls] == [2, 2, 2, 2, 2]
    assert len(limited.made) == 4
    generator.calls.clear()
    # a cap the settings name wins over the environment's: three at once (task 2 takes task 1's
    # place after one step; tasks 3 and 2 end after turn three, task 4 alone after turn four)
    named = EnvFactory(live_limit=2)
    assert run_episodes(named, batch, generator, PARAMS, max_live=3, progress=False) == together
    assert [len(prompts) for prompts, _ in generator.calls] == [3, 3, 3, 1]


def test_rollout_settings_roll_out_with_their_decoding_and_their_cap(generator):
    batch = specs([3, 1, 4, 2], seed=5)
    expected = run_episodes(EnvFactory(), batch, generator, PARAMS, max_live=2, progress=False)
    generator.calls.clear()
    settings = RolloutSettings(
        temperature=PARAMS.temperature, max_new_tokens=PARAMS.max_new_tokens, max_live=2
    )
    assert settings.roll_out(EnvFactory(), batch, generator, progress=False) == expected
    assert [len(prompts) for prompts, _ in generator.calls] == [2, 2, 2, 2, 2]
    other = RolloutSettings(temperature=PARAMS.temperature, max_new_tokens=2)  # shorter responses
    shorter = other.roll_out(EnvFactory(), batch, generator, progress=False)
    assert [s.response for s in shorter[0].steps] != [s.response for s in expected[0].steps]


def test_no_episodes_need_no_generation(generator):
    assert run_episodes(EnvFactory(), [], generator, PARAMS, progress=False) == []
    assert generator.calls == []


def test_bad_input_is_named(generator):
    with pytest.raises(ValueError, match=r"params\.n"):
        run_episodes(EnvFactory(), specs([1]), generator, SamplingParams(n=2), progress=False)
    twice = [EpisodeSpec("a", 1, 0), EpisodeSpec("a", 2, 1)]
    with pytest.raises(ValueError, match=r"duplicate traj_id\(s\) \['a'\]"):
        run_episodes(EnvFactory(), twice, generator, PARAMS, progress=False)
    with pytest.raises(ValueError, match="decoding_seed"):
        EpisodeSpec("a", 1, -1)
    with pytest.raises(ValueError, match="traj_id"):
        EpisodeSpec("", 1, 0)


def test_frames_follow_the_schemas_and_survive_parquet(tiny_tokenizer, tmp_path):
    scripted = ScriptedGenerator(tiny_tokenizer, ["<action>get 1 oak logs</action>", "x", "y"])
    summary = Summary("failure", "Failure analysis:\n- Avoid: crafting twice")
    episodes = run_episodes(EnvFactory(), specs([1, 3]), scripted, PARAMS, progress=False)
    episodes += run_episodes(
        EnvFactory(admissible=True),
        specs([2], seed=7, summary=summary),
        ScriptedGenerator(tiny_tokenizer, ["x", "y"]),
        PARAMS,
        progress=False,
    )
    trajectories, steps = episodes_to_frames(episodes, **TRAJECTORY_FIELDS, view="ordinary")
    assert list(trajectories.columns) == [*SCHEMAS["trajectories"], "view"]
    assert list(steps.columns) == list(SCHEMAS["steps"])
    assert trajectories["num_steps"].tolist() == [1, 3, 2]
    assert trajectories["cycle"].tolist() == [1, 1, 1]
    assert trajectories["success"].tolist() == [False, False, True]
    assert len(steps) == 6
    assert steps.groupby("traj_id", sort=False)["t"].apply(list).tolist() == [
        [0],
        [0, 1, 2],
        [0, 1],
    ]
    assert steps["action"].tolist()[:2] == ["get 1 oak logs", "get 1 oak logs"]
    assert steps["action"].tolist()[2:4] == ["", ""]
    assert steps["admissible_actions"].tolist()[:4] == [None] * 4
    assert steps["admissible_actions"].tolist()[4] == ["get 1 oak logs", "inventory"]
    assert not steps["prompt"].str.contains("A failed trajectory").any()

    trajectories.to_parquet(tmp_path / "trajectories.parquet")
    steps.to_parquet(tmp_path / "steps.parquet")
    back = pd.read_parquet(tmp_path / "steps.parquet")
    assert back["response"].tolist() == steps["response"].tolist()
    assert back["admissible_actions"].isna().tolist()[:4] == [True] * 4
    assert list(back["admissible_actions"].iloc[4]) == ["get 1 oak logs", "inventory"]
    assert back["done"].dtype == bool and back["reward"].dtype == float
    assert pd.read_parquet(tmp_path / "trajectories.parquet").equals(trajectories)


def test_frames_of_no_episodes_still_have_the_columns():
    trajectories, steps = episodes_to_frames([], **TRAJECTORY_FIELDS)
    assert list(trajectories.columns) == list(SCHEMAS["trajectories"]) and trajectories.empty
    assert list(steps.columns) == list(SCHEMAS["steps"]) and steps.empty


def test_frames_name_missing_and_clashing_fields():
    with pytest.raises(ValueError, match=r"trajectory_fields: missing \['split'\]"):
        episodes_to_frames([], cycle=1, method="oel")
    with pytest.raises(ValueError, match=r"\['task_id'\] come from the episodes"):
        episodes_to_frames([], **TRAJECTORY_FIELDS, task_id=3)


def test_sample_tasks_draws_without_replacement_in_a_fixed_order():
    pool = list(range(100, 150))
    drawn = sample_tasks(pool, 20, seed=3)
    assert len(set(drawn)) == 20 and set(drawn) <= set(pool)
    assert sample_tasks(pool, 20, seed=3) == drawn
    assert sample_tasks(pool, 21, seed=3)[:20] == drawn  # a prefix of the larger draw
    assert sample_tasks(pool[::-1], 20, seed=3) == drawn  # independent of the pool's order
    assert sample_tasks(pool, 20, seed=4) != drawn
    assert sorted(sample_tasks(pool, 50, seed=3)) == pool
    assert sample_tasks(pool, 0, seed=3) == []


def test_sample_tasks_names_bad_input():
    with pytest.raises(ValueError, match=r"n: must be in \[0, 3\]"):
        sample_tasks([1, 2, 3], 4, seed=0)
    with pytest.raises(ValueError, match="duplicates"):
        sample_tasks([1, 1, 2], 1, seed=0)
    with pytest.raises(ValueError, match="seed"):
        sample_tasks([1, 2], 1, seed=-1)
    with pytest.raises(ValueError, match="task_ids"):
        sample_tasks([-1, 2], 1, seed=0)


@pytest.mark.parametrize("config", ["collect", "evaluate"])
def test_run_configs_share_the_rollout_settings(config):
    from resail_pipeline.collection import CollectConfig
    from resail_pipeline.evaluation.evaluate import EvalConfig

    cls = {"collect": CollectConfig, "evaluate": EvalConfig}[config]
    assert cls().sampling() == SamplingParams()  # the paper's decoding by default
    given = {"temperature": 0.0, "top_p": 0.5, "top_k": 3, "max_new_tokens": 7}
    assert cls(**given).sampling() == SamplingParams(**given)
    with pytest.raises(ValueError, match="top_k"):
        cls(top_k=0)
    assert cls(max_live=8).max_live == 8
    with pytest.raises(ValueError, match="max_live: must be a positive integer or null"):
        cls(max_live=0)


@dataclass
class SeededGenerator:
    """A fake policy whose answer depends on the step's seed alone; the call ``fail_at`` raises,
    as a run killed there would stop."""

    tokenizer: object
    policy_id: str = "seeded@0"
    fail_at: int | None = None
    calls: int = 0
    prompts: int = 0

    def generate(self, prompts, params, seeds=None) -> list[Generation]:
        self.calls += 1
        if self.calls == self.fail_at:
            raise RuntimeError("killed")
        self.prompts += len(prompts)
        texts = ("<action>get 1 oak logs</action>", "<action>inventory</action>")
        return [Generation(text=texts[s % 2], token_ids=(1,), logprobs=(0.0,)) for s in seeds]


def test_a_journal_resumes_a_killed_rollout_without_playing_its_finished_episodes(
    tiny_tokenizer, tmp_path
):
    wanted = specs([1, 2, 3, 4], summary=Summary("success", "Guidance summary: get logs."))
    whole = SeededGenerator(tiny_tokenizer)
    uninterrupted = run_episodes(EnvFactory(), wanted, whole, PARAMS, max_live=2, progress=False)
    assert whole.prompts == 1 + 2 + 3 + 4  # task k runs k steps

    folder = tmp_path / "journal"
    killed = SeededGenerator(tiny_tokenizer, fail_at=3)  # after tasks 1 and 2 have ended
    with pytest.raises(RuntimeError, match="killed"):
        run_episodes(
            EnvFactory(),
            wanted,
            killed,
            PARAMS,
            max_live=2,
            progress=False,
            journal=EpisodeJournal(folder, every_s=0.0),
        )
    kept = pd.concat(pd.read_parquet(p) for p in sorted(folder.glob("part-*.parquet")))
    assert sorted(kept["traj_id"]) == sorted(s.traj_id for s in wanted[:2])

    resumed = SeededGenerator(tiny_tokenizer)
    journal = EpisodeJournal(folder, every_s=0.0)
    episodes = run_episodes(
        EnvFactory(), wanted, resumed, PARAMS, max_live=2, progress=False, journal=journal
    )
    assert episodes == uninterrupted  # in order, step for step
    assert resumed.prompts == 3 + 4  # only the episodes the killed run had not finished
    assert journal.resumed_seconds >= 0.0
    journal.remove()
    assert not folder.exists()


def test_a_journal_resumes_only_episodes_of_the_same_spec_and_policy(tiny_tokenizer, tmp_path):
    wanted = specs([1, 2])
    journal = EpisodeJournal(tmp_path / "journal", every_s=3600.0)
    played = run_episodes(
        EnvFactory(admissible=True),
        wanted,
        SeededGenerator(tiny_tokenizer),
        PARAMS,
        progress=False,
        journal=journal,
    )
    # the last part is written at the end however long ``every_s`` is
    assert journal.resume(wanted, "seeded@0") == {e.spec.traj_id: e for e in played}
    assert journal.resume(wanted, "other@1") == {}
    other_summary = specs([1, 2], summary=Summary("failure", "Failure analysis: no logs."))
    assert journal.resume(other_summary, "seeded@0") == {}
    assert journal.resume(specs([1, 2], seed=5), "seeded@0") == {}  # another rollout's ids
    assert journal.resume(wanted[:1], "seeded@0") == {played[0].spec.traj_id: played[0]}


def test_a_finished_journal_keeps_every_episode_and_a_fresh_token(tiny_tokenizer, tmp_path):
    """A journal marked finished still resumes every episode (its caller's outputs may not be
    saved yet), and :func:`finished_journals` finds it by name, with a token each finish renews."""
    wanted = specs([1, 2])
    staging = tmp_path / "staging"
    journal = EpisodeJournal(staging / "oel-evaluate-cycle_1-0123456789ab.episodes", every_s=3600.0)
    played = run_episodes(
        EnvFactory(),
        wanted,
        SeededGenerator(tiny_tokenizer),
        PARAMS,
        progress=False,
        journal=journal,
    )
    unfinished = EpisodeJournal(staging / "oel-collect-cycle_2-0123456789ab.episodes")
    unfinished.add(played[0])
    unfinished.flush()
    assert finished_journals(staging, "oel-", ".episodes") == {}
    journal.finish()
    (token,) = finished_journals(staging, "oel-", ".episodes").values()
    assert len(token) == 32
    assert EpisodeJournal(journal.folder).resume(wanted, "seeded@0") == {
        e.spec.traj_id: e for e in played
    }
    journal.finish()  # a rerun that resumed it finishes it again: a new token
    assert finished_journals(staging, "oel-", ".episodes") == {journal.folder: ANY}
    assert finished_journals(staging, "oel-", ".episodes")[journal.folder] != token
    assert finished_journals(staging, "oel_resail-", ".episodes") == {}
    assert finished_journals(staging, "oel-", ".snapshots") == {}
    assert finished_journals(tmp_path / "absent", "oel-") == {}
    journal.remove()
    assert finished_journals(staging, "oel-") == {} and unfinished.folder.is_dir()


def test_an_episode_survives_its_journal_entry(tiny_tokenizer):
    summary = Summary("success", "Guidance summary: get logs.")
    for admissible in (True, False):
        (episode,) = run_episodes(
            EnvFactory(admissible=admissible),
            specs([3], summary=summary),
            SeededGenerator(tiny_tokenizer),
            PARAMS,
            progress=False,
        )
        assert episode_from_json(episode_to_json(episode)) == episode
    with pytest.raises(ValueError, match="every_s"):
        EpisodeJournal("unused", every_s=-1.0)


@pytest.mark.parametrize("kind", ["evaluate", "collect"])
def test_the_cap_on_live_episodes_does_not_key_a_rollout(kind):
    """A rerun with another ``max_live`` (lowered after running out of memory) plays the same
    episodes, so its journal and records are keyed without it; every other setting keys them."""
    from resail_pipeline.collection import CollectConfig
    from resail_pipeline.evaluation.evaluate import EvalConfig

    make = EvalConfig if kind == "evaluate" else CollectConfig
    capped, other_cap = make(max_live=64), make(max_live=8)
    assert capped.deciding() == other_cap.deciding() == make().deciding()
    assert "max_live" not in capped.deciding() and "temperature" in capped.deciding()
    assert make(temperature=0.7).deciding() != capped.deciding()
