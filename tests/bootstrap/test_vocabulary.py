"""The tokenizer trained on the environment's own text."""

from __future__ import annotations

import pytest

from resail_pipeline.bootstrap.demonstrations import collect_demonstrations, demonstration_response
from resail_pipeline.bootstrap.vocabulary import environment_corpus, train_tokenizer
from resail_pipeline.envs import make_env
from resail_pipeline.modeling import build_word_tokenizer
from resail_pipeline.prompts import (
    EpisodeHistory,
    add_privileged,
    chat_prompt,
    render_user_message,
)
from resail_pipeline.prompts.phrases import prompt_phrases


@pytest.fixture(scope="module")
def demos():
    return collect_demonstrations(
        "textcraft",
        [1, 2],
        episodes_per_task=2,
        mistake_rate=0.3,
        stalled_share=0.5,
        seed=0,
        progress=False,
    )


@pytest.fixture(scope="module")
def tokenizer(demos):
    return train_tokenizer("textcraft", demos, vocab_size=4096)


def test_every_test_task_prompt_is_known_and_round_trips(tokenizer):
    """Trained on two train tasks, the vocabulary still covers every held-out goal's words."""
    env = make_env("textcraft")
    for task_id in env.task_ids("test"):
        prompt = chat_prompt(
            tokenizer, render_user_message(EpisodeHistory.start(env.name, env.reset(task_id)))
        )
        ids = tokenizer(prompt).input_ids
        assert tokenizer.unk_token_id not in ids, task_id
        assert tokenizer.decode(ids) == prompt


def test_template_fragments_are_single_tokens(tokenizer, demos):
    vocab = tokenizer.get_vocab()
    for phrase in prompt_phrases("textcraft"):
        assert len(tokenizer(phrase).input_ids) == 1, phrase
    step = demos[0].steps[1]
    message = add_privileged(render_user_message(step.history), demos[1].summary)
    prompt = chat_prompt(tokenizer, message) + demonstration_response(step.expert)
    ids = tokenizer(prompt).input_ids
    assert tokenizer.decode(ids) == prompt
    assert tokenizer.unk_token_id not in ids
    # the fixed text of the later-step template and the privileged insert is one token per piece
    words = build_word_tokenizer([prompt])
    assert len(ids) < len(words(prompt).input_ids) - 150
    assert "<action>" in vocab and "</action>" in vocab


def test_unknown_environment_is_refused(demos):
    with pytest.raises(ValueError, match="env: no vocabulary for 'nowhere'"):
        list(environment_corpus("nowhere", demos))


def test_the_rare_summary_forms_are_known(tokenizer, demos):
    """A policy's own failures take forms the planner's rarely do; their words are all known."""
    from resail_pipeline.bootstrap.vocabulary import rare_summaries

    texts = [s.text for s in rare_summaries(demos[0])]
    expected = (
        "no state-changing action was accepted",
        "a response without a parsable action",
        "all 2 actions were accepted but none completed the task",
        "the environment ended the episode",
        "the episode ended (no reason recorded)",
        "the planner found no plan for this task",
        "the task was completed without an accepted action",
        "information-only steps such as `inventory`",
        "no action was rejected; steps beyond the plan are not needed",
    )
    for phrase in expected:
        assert any(phrase in text for text in texts), phrase
    for text in texts:
        ids = tokenizer(text).input_ids
        assert tokenizer.unk_token_id not in ids and tokenizer.decode(ids) == text


def test_every_alfworld_object_and_receptacle_the_games_name_is_an_item_word():
    pytest.importorskip("alfworld")
    import re
    from pathlib import Path

    from resail_pipeline.bootstrap.vocabulary import ENV_TEXTS
    from resail_pipeline.envs.alfworld import AlfWorldEnv

    words = {w for line in ENV_TEXTS["alfworld"]() for w in line.split()}
    env = AlfWorldEnv(data_path=Path(__file__).resolve().parents[1] / "envs" / "alfworld_data")
    named = set()
    for task_id in [0, 1, 100_000, 100_001, 200_000, 200_001]:
        observation = env.reset(task_id)
        texts = [observation.text, *observation.admissible_actions]
        for action in env.walkthrough(task_id):
            result = env.step(action)
            texts += [result.observation, *(result.admissible_actions or ())]
        named |= {m[1] for text in texts for m in re.finditer(r"\b([a-z]+) (\d+)\b", text)}
    named -= {"step", "steps"}  # "step 3" of the template, not an object
    assert named and named <= words, sorted(named - words)


@pytest.mark.alfworld
def test_an_alfworld_tokenizer_reads_every_task_type_whatever_it_was_trained_on(monkeypatch):
    """Trained on the demonstrations of one game (put a mug in a shelf), the tokenizer still knows
    every word the engine writes in the other task types' games (cooling, heating, cleaning,
    lamps, two objects): the engine's messages and the task sentences are in its corpus."""
    pytest.importorskip("alfworld")
    from pathlib import Path

    from resail_pipeline.envs.alfworld import AlfWorldEnv

    data = Path(__file__).resolve().parents[1] / "envs" / "alfworld_data"
    monkeypatch.setenv("ALFWORLD_DATA", str(data))
    one = collect_demonstrations(
        "alfworld", [0], episodes_per_task=1, mistake_rate=0.0, stalled_share=0.0, seed=0
    )
    tokenizer = train_tokenizer("alfworld", one, vocab_size=4096)
    env = AlfWorldEnv(data_path=data)
    for task_id in [1, 100_000, 100_001, 200_000, 200_001]:
        history = EpisodeHistory.start("alfworld", env.reset(task_id))
        texts = [render_user_message(history)]
        for action in env.walkthrough(task_id):
            history = history.advance(action, env.step(action))
            texts.append(render_user_message(history))
        for text in texts:
            ids = tokenizer(text, add_special_tokens=False).input_ids
            assert tokenizer.unk_token_id not in ids, (task_id, text)
            assert tokenizer.decode(ids) == text
