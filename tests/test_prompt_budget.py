"""The estimate of the longest prompt a run sends, on TextCraft with the shipped policy's tokenizer:
it bounds the prompts of real planner episodes, and the check against max_model_len names the
fields and the figures."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest

from resail_pipeline.config import ConfigError
from resail_pipeline.envs import make_env
from resail_pipeline.envs.planner import plan_from_observation
from resail_pipeline.experience.evidence import (
    ACTION_CHARS,
    OBSERVATION_CHARS,
    Evidence,
    EvidenceRecord,
    cap,
    task_snapshot,
)
from resail_pipeline.experience.rules import rules_summary
from resail_pipeline.prompt_budget import (
    PROMPT_ORDINARY,
    PROMPT_PRIVILEGED,
    PromptEstimate,
    check_prompt_budget,
    estimate_prompt_lengths,
    spread_with_last,
)
from resail_pipeline.prompts import EpisodeHistory, Summary, add_privileged, chat_prompt
from resail_pipeline.prompts.render import render_user_message

SHIPPED = Path(__file__).resolve().parents[1] / "reference" / "textcraft-initial"
MAX_STEPS = 12


@pytest.fixture(scope="module")
def tokenizer():
    from resail_pipeline.checkpoints import load_tokenizer

    return load_tokenizer(SHIPPED)


@pytest.fixture(scope="module")
def estimate(tokenizer) -> PromptEstimate:
    """Rules-based summaries only (the policy writes none), 4 tasks of each split."""
    factory = partial(make_env, "textcraft", max_steps=MAX_STEPS)
    return estimate_prompt_lengths(factory, ["train", "test"], tokenizer, tasks_per_split=4)


def _tokens(tokenizer, message: str) -> int:
    return len(tokenizer(chat_prompt(tokenizer, message), add_special_tokens=False)["input_ids"])


def _planner_episode(task_id: int) -> tuple[EpisodeHistory, list[EvidenceRecord], bool]:
    """The planner's episode of ``task_id`` under the step limit: the history its last step was
    prompted with, its records as a summary sees them, and whether it succeeded."""
    env = make_env("textcraft", max_steps=MAX_STEPS)
    initial = env.reset(task_id)
    history = EpisodeHistory.start("textcraft", initial)
    records = []
    for action in plan_from_observation(initial.text) or ["inventory"]:
        last = history
        result = env.step(action)
        records.append(
            EvidenceRecord(
                cap(action, ACTION_CHARS),
                cap(result.observation, OBSERVATION_CHARS),
                result.action_valid,
            )
        )
        history = history.advance(action, result)
        if result.done:
            return last, records, result.success
    return history, records, False


def test_tasks_are_spread_over_the_split_with_its_last_one():
    assert spread_with_last(list(range(10)), 4) == [0, 3, 6, 9]
    assert spread_with_last([5, 6], 4) == [5, 6]
    assert spread_with_last(list(range(10)), 1) == [9]


def test_the_estimate_bounds_the_planners_prompts_on_every_test_task(tokenizer, estimate):
    """Drawn from 8 tasks, the estimate holds for the last prompt of all 100 test episodes, in
    both views (the privileged one with the episode's own rules-based summary)."""
    from resail_pipeline.envs.textcraft import split_task_ids

    longest = {PROMPT_ORDINARY: 0, PROMPT_PRIVILEGED: 0}
    for task_id in split_task_ids("test"):
        history, records, success = _planner_episode(task_id)
        message = render_user_message(history)
        evidence = Evidence(
            traj_id="t",
            env="textcraft",
            outcome="success" if success else "failure",
            snapshot=task_snapshot(history.initial.text),
            records=tuple(records),
            initial_observation=history.initial.text,
            end_reason="success" if success else "step_limit",
        )
        summary = Summary(evidence.outcome, rules_summary(evidence).strip())
        longest[PROMPT_ORDINARY] = max(longest[PROMPT_ORDINARY], _tokens(tokenizer, message))
        privileged = _tokens(tokenizer, add_privileged(message, summary))
        longest[PROMPT_PRIVILEGED] = max(longest[PROMPT_PRIVILEGED], privileged)
    assert estimate.episodes == 8 and estimate.max_steps == MAX_STEPS
    assert estimate.ordinary >= longest[PROMPT_ORDINARY] > 0
    assert estimate.privileged >= longest[PROMPT_PRIVILEGED] > longest[PROMPT_ORDINARY]


def test_a_longer_episode_or_a_model_summary_raises_the_estimate(tokenizer, estimate):
    longer = estimate_prompt_lengths(
        partial(make_env, "textcraft", max_steps=2 * MAX_STEPS),
        ["test"],
        tokenizer,
        summary_tokens=4000,
        tasks_per_split=2,
    )
    assert longer.ordinary > estimate.ordinary
    assert longer.summary_prompt > estimate.summary_prompt
    assert longer.summary_tokens == 4000  # the model may write more than the rules do
    assert longer.privileged > longer.ordinary + 4000


def test_a_small_context_is_refused_naming_the_field_and_a_large_one_accepted(estimate):
    new = {"collect.max_new_tokens": 64, "evaluate.max_new_tokens": 64}
    fits = estimate.ordinary + 64
    check_prompt_budget(estimate, fits, new, [PROMPT_ORDINARY])
    with pytest.raises(ConfigError) as error:
        check_prompt_budget(estimate, fits - 1, new, [PROMPT_ORDINARY])
    message = str(error.value)
    assert message.startswith(f"run.generation.vllm.max_model_len: {fits - 1} tokens, ")
    assert f"estimated at {estimate.ordinary} tokens (ordinary view of a 12-step" in message
    assert "collect.max_new_tokens, evaluate.max_new_tokens ask(s) for up to 64" in message
    assert "\n" not in message
    with pytest.raises(ConfigError, match=r"\(privileged view of a 12-step episode\)"):
        check_prompt_budget(estimate, fits, new)  # the privileged view is the longer
    check_prompt_budget(estimate, 1_000_000, new)


def test_alfworlds_estimate_bounds_the_walkthroughs_of_games_it_did_not_play(tiny_tokenizer):
    """Drawn from the first and last game of two splits (the help text among the observations),
    the estimate holds for every step of every fixture game's walkthrough."""
    pytest.importorskip("alfworld")
    data = Path(__file__).resolve().parent / "envs" / "alfworld_data"
    factory = partial(make_env, "alfworld", data_path=data, max_steps=8)
    estimate = estimate_prompt_lengths(factory, ["train", "id"], tiny_tokenizer, tasks_per_split=1)
    assert estimate.episodes == 2
    env, longest = factory(), 0
    for task_id in [t for split in ("train", "id", "ood") for t in env.task_ids(split)]:
        history = EpisodeHistory.start("alfworld", env.reset(task_id))
        for action in env.walkthrough(task_id):
            longest = max(longest, _tokens(tiny_tokenizer, render_user_message(history)))
            result = env.step(action)
            history = history.advance(action, result)
            if result.done:
                break
    assert estimate.ordinary >= longest > 0


# ----------------------------------------------------------------------------------------------
# the paper's model: Qwen3's own tokenizer and chat template (reference/tokenizers/qwen3)

QWEN3 = Path(__file__).resolve().parents[1] / "reference" / "tokenizers" / "qwen3"


@pytest.fixture(scope="module")
def qwen3():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(QWEN3, trust_remote_code=False)


def test_the_project_chat_template_writes_what_qwen3s_own_writes(qwen3):
    """The word tokenizers' template (modeling.CHAT_TEMPLATE) lays out a prompt as Qwen3's does
    with thinking off, so a policy built here is prompted as the paper's model is."""
    from resail_pipeline.modeling import CHAT_TEMPLATE

    message = render_user_message(EpisodeHistory.start("textcraft", make_env("textcraft").reset(0)))
    for system in (None, "You are an agent."):
        messages = [] if system is None else [{"role": "system", "content": system}]
        messages.append({"role": "user", "content": message})
        ours = qwen3.apply_chat_template(
            messages,
            tokenize=False,
            add_generation_prompt=True,
            enable_thinking=False,
            chat_template=CHAT_TEMPLATE,
        )
        assert chat_prompt(qwen3, message, system=system) == ours
    assert ours.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert (qwen3.eos_token, qwen3.pad_token) == ("<|im_end|>", "<|endoftext|>")


def test_textcrafts_longest_prompts_in_qwen3_tokens_fit_the_paper_settings(qwen3):
    """Every test task of a 30-step episode, a model summary of up to 1,024 tokens: the longest
    prompt and the most new tokens fit conf/paper-textcraft's context, and one training rank of
    Qwen3-4B and of Qwen3-8B plans within an 80 GB GPU at that prompt length."""
    import yaml

    from resail_pipeline.training import TrainConfig
    from resail_pipeline.training.memory import GIB, ModelShape, check_fits, plan_memory

    root = Path(__file__).resolve().parents[1]
    factory = partial(make_env, "textcraft", max_steps=30)
    estimate = estimate_prompt_lengths(factory, ["train", "test"], qwen3, summary_tokens=1024)
    assert 1500 < estimate.ordinary < estimate.privileged < 8192  # Qwen3's BPE, not one per word
    params = yaml.safe_load((root / "conf" / "paper-textcraft" / "parameters.yml").read_text())
    check_prompt_budget(
        estimate,
        params["run"]["generation"]["vllm"]["max_model_len"],
        {"train.responses.max_tokens": params["train"]["responses"]["max_tokens"]},
    )
    train = TrainConfig.from_dict({**params["train"], "method": "oel_resail"}, "train")
    resolved = train.resolve(num_gpus=8, bf16_supported=True)
    for name in ("Qwen3-4B", "Qwen3-8B"):
        shape = ModelShape.from_checkpoint(root / "reference" / "shapes" / name)
        plan = plan_memory(resolved, shape, prompt_tokens=estimate.privileged)
        check_fits(plan, int(79.6 * GIB), device="an 80 GB H100")


def test_alfworlds_longest_prompts_in_qwen3_tokens_fit_the_paper_context(qwen3):
    """The fixture games (one per task type) in 30-step episodes, summaries of up to 1,024
    tokens: conf/paper's context holds the longest prompt and the most new tokens."""
    pytest.importorskip("alfworld")
    import yaml

    root = Path(__file__).resolve().parents[1]
    data = Path(__file__).resolve().parent / "envs" / "alfworld_data"
    factory = partial(make_env, "alfworld", data_path=data, max_steps=30)
    estimate = estimate_prompt_lengths(factory, ["train", "id", "ood"], qwen3, summary_tokens=1024)
    params = yaml.safe_load((root / "conf" / "paper" / "parameters.yml").read_text())
    check_prompt_budget(
        estimate,
        params["run"]["generation"]["vllm"]["max_model_len"],
        {"train.responses.max_tokens": params["train"]["responses"]["max_tokens"]},
    )
    assert estimate.privileged > estimate.ordinary > 1000
