"""Building, caching and resolving the initial policy (tiny budgets)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from resail_pipeline.bootstrap import build
from resail_pipeline.bootstrap.build import build_initial_policy, cache_key
from resail_pipeline.bootstrap.cloning import training_precision
from resail_pipeline.bootstrap.config import BootstrapConfig
from resail_pipeline.bootstrap.demonstrations import demonstration_response
from resail_pipeline.checkpoints import MANIFEST_NAME, CheckpointError, load_policy
from resail_pipeline.config import ConfigError
from resail_pipeline.initial_policy import resolve_initial_policy, verify_reference
from resail_pipeline.prompts import EpisodeHistory, chat_prompt, render_user_message

TINY = {
    "reference": None,
    "model": {
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 64,
    },
    "data": {"episodes_per_task": 2, "task_limit": 2, "stalled_share": 0.5},
    "training": {"epochs": 1.0, "batch_tokens": 4096, "time_budget_s": 60.0},
}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The tiny recipe built in its configuration's folder under a run's build directory."""
    config = BootstrapConfig.from_dict(TINY)
    folder = build.configuration_folder(config, build.BuildEnvironment.resolve(config.env))
    out = tmp_path_factory.mktemp("bootstrap") / folder
    return config, out, build_initial_policy(config, out, progress=False)


def test_build_publishes_a_loadable_policy_with_its_manifest(built):
    config, out, info = built
    path = out / "policy"
    assert info.path == str(path) and info.policy_id.startswith("textcraft-initial@")
    manifest = json.loads((path / MANIFEST_NAME).read_text())
    assert manifest["cache_key"] == cache_key(config)
    assert manifest["configuration"] == config.to_dict()
    assert manifest["training_data"]["tasks"] == 2
    assert manifest["training_data"]["trained_demonstrations"] == 2  # one stalled per task
    assert len(manifest["training_data_sha256"]) == 64
    assert manifest["training"]["steps"] >= 1 and manifest["machine"]
    assert manifest["environment"] == {
        "name": "textcraft",
        "options": {},
        "demonstration_splits": ["train", "dev"],
        "evaluation_splits": ["test"],
        "data_sha256": None,  # its tasks ship with the package: its version is in the code key
        "data_root": None,
    }
    # the configuration says `auto`; the manifest says what it resolved to here
    assert config.training.precision == "auto"
    cpu = torch.device("cpu")
    assert manifest["training"]["precision"] == training_precision("auto", cpu)
    assert not (out / "work").exists() or not any((out / "work").iterdir())
    model, tokenizer = load_policy(path)
    assert model.config.model_type == "qwen3" and model.config.tie_word_embeddings
    assert model.config.vocab_size == len(tokenizer)
    from resail_pipeline.envs import make_env

    env = make_env("textcraft")
    prompt = chat_prompt(
        tokenizer, render_user_message(EpisodeHistory.start(env.name, env.reset(0)))
    )
    assert tokenizer.unk_token_id not in tokenizer(prompt).input_ids


def test_a_second_build_with_the_same_inputs_is_cached(built, monkeypatch):
    config, out, info = built

    def no_work(*args, **kwargs):
        raise AssertionError("the cached policy must be reused")

    monkeypatch.setattr(build, "prepare_training_data", no_work)
    assert build_initial_policy(config, out, progress=False) == info
    # any change of recipe is a new key
    other = BootstrapConfig.from_dict({**TINY, "seed": 1})
    assert cache_key(other) != cache_key(config)


def test_resolution_order(built, tmp_path):
    _, out, info = built
    policy = out / "policy"
    # 1. a configured checkpoint wins
    chosen = BootstrapConfig.from_dict({**TINY, "checkpoint": str(policy)})
    assert resolve_initial_policy(chosen, tmp_path / "unused").sha256 == info.sha256
    # 2. then the shipped reference, checked against its manifest
    shipped = BootstrapConfig.from_dict({**TINY, "reference": str(policy)})
    assert resolve_initial_policy(shipped, tmp_path / "unused").policy_id == info.policy_id
    assert not (tmp_path / "unused").exists()
    # 3. no reference: the build (cached in its configuration's folder under the build directory)
    assert resolve_initial_policy(BootstrapConfig.from_dict(TINY), out.parent).sha256 == info.sha256
    # a reference directory that does not exist (a typo) is an error, not a build
    absent = BootstrapConfig.from_dict({**TINY, "reference": str(tmp_path / "textcraft-initail")})
    with pytest.raises(ConfigError, match=r"bootstrap\.reference: no policy directory .*initail"):
        resolve_initial_policy(absent, out)


def test_builds_of_other_configurations_never_replace_one_another(tmp_path, monkeypatch):
    """Tag A builds its policy, tag B another configuration in the same build directory, A runs
    again: A's policy is still where A's configuration builds it (the builder faked: it records
    where it is asked to build)."""
    asked = []
    monkeypatch.setattr(build, "build_initial_policy", lambda config, out, **_: asked.append(out))
    a = BootstrapConfig.from_dict(TINY)
    b = BootstrapConfig.from_dict({**TINY, "seed": 1})
    for config in (a, b, a):
        resolve_initial_policy(config, tmp_path)
    assert asked[0] == asked[2] != asked[1]
    assert all(out.parent == tmp_path and len(out.name) == 12 for out in asked)


@pytest.mark.parametrize("env", ["textcraft", "alfworld"])
def test_a_shipped_policy_not_there_says_how_to_build_it(env, tmp_path, monkeypatch):
    from resail_pipeline.initial_policy import requested_policy

    monkeypatch.chdir(tmp_path)  # a checkout without reference/<env>-initial
    with pytest.raises(ConfigError) as error:
        requested_policy(BootstrapConfig.from_dict({"env": env}))
    assert str(error.value) == (
        f"bootstrap.reference: no policy directory reference/{env}-initial; `make reference "
        f"REFERENCE_ENV={env}` builds it, or null to build one in the run"
    )


def test_only_environments_the_builder_covers_are_built(tmp_path, monkeypatch):
    from resail_pipeline.bootstrap import environments
    from resail_pipeline.envs import alfworld_games

    def no_games():  # fake: nothing may be generated for a refused build
        raise AssertionError("games were generated")

    monkeypatch.setattr(alfworld_games, "ensure_games", no_games)
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    monkeypatch.delitem(environments.BUILDABLE_ENVS, "alfworld")
    config = BootstrapConfig.from_dict({**TINY, "env": "alfworld"})
    with pytest.raises(ConfigError, match=r"only be built for \['textcraft'\]; set bootstrap\."):
        resolve_initial_policy(config, tmp_path)
    assert not any(tmp_path.iterdir())


def test_demonstrations_are_drawn_from_each_environments_own_splits():
    from resail_pipeline.bootstrap.environments import BUILDABLE_ENVS
    from resail_pipeline.envs.textcraft import split_task_ids

    splits = {env: support.demonstration_splits for env, support in BUILDABLE_ENVS.items()}
    assert splits == {"textcraft": ("train", "dev"), "alfworld": ("clone",)}
    ids = build.BuildEnvironment.resolve("textcraft").demonstration_tasks()
    assert ids == sorted(split_task_ids("train") + split_task_ids("dev"))  # the shipped recipe's
    assert len(ids) == 319 and not set(ids) & set(split_task_ids("test"))

    class Games:  # fake: an ALFWorld adapter over a generated set, ids by split
        name = "alfworld"

        def task_ids(self, split):
            return {
                "train": [1, 0],
                "id": [100_000],
                "dev": [300_000],
                "clone": [400_001, 400_000],
            }[split]

    games = build.BuildEnvironment("alfworld", {}, BUILDABLE_ENVS["alfworld"].splits({}))
    assert games.demonstration_tasks(Games()) == [400_000, 400_001]  # clone's, and no other
    with pytest.raises(ConfigError, match=r"env: an initial policy can only be built for \["):
        build.BuildEnvironment.resolve("gridworld")


def test_textcraft_clone_tasks_are_the_only_demonstrations_and_leave_train():
    """With ``clone_tasks``, TextCraft's demonstrations are its ``clone`` tasks alone, which
    neither the cycles' ``train`` nor ``dev`` nor ``test`` holds; the option is part of the cache
    key and of the manifest's record."""
    from resail_pipeline.envs import make_env
    from resail_pipeline.envs.textcraft import split_task_ids

    environment = build.BuildEnvironment.resolve("textcraft", {"clone_tasks": 110})
    assert environment.splits == ("clone",)
    ids = environment.demonstration_tasks()
    adapter = make_env("textcraft", clone_tasks=110)
    train, dev, test = (adapter.task_ids(s) for s in ("train", "dev", "test"))
    assert (len(ids), len(train), len(dev), len(test)) == (110, 109, 100, 100)
    assert sorted(ids + train) == split_task_ids("train")
    assert not set(ids) & (set(train) | set(dev) | set(test))
    full = split_task_ids("train")
    assert ids == [full[k * 219 // 110] for k in range(110)]  # evenly spaced over train
    assert environment.key()["options"] == {"clone_tasks": 110}
    assert environment.record()["demonstration_splits"] == ["clone"]
    assert build.BuildEnvironment.resolve("textcraft").key() != environment.key()


def test_alfworld_demonstrations_need_the_generated_clone_split():
    """ALFWorld's own data has no clone games: that is an error naming the split, not an empty
    set of demonstrations."""
    from resail_pipeline.envs.alfworld import AlfWorldEnv

    official = Path(__file__).parents[1] / "envs" / "alfworld_data"
    environment = build.BuildEnvironment("alfworld", {"data_path": str(official)}, ("clone",))
    with pytest.raises(FileNotFoundError, match="ALFWorld split 'clone': no games under"):
        environment.demonstration_tasks(AlfWorldEnv(data_path=official))


def test_training_on_a_missing_gpu_is_refused_before_any_work(tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    config = BootstrapConfig.from_dict({**TINY, "training": {"device": "cuda"}})
    with pytest.raises(ValueError, match=r"training\.device: 'cuda' was asked for"):
        resolve_initial_policy(config, tmp_path)
    assert not any(tmp_path.iterdir())


def test_a_missing_checkpoint_is_named(tmp_path):
    config = BootstrapConfig.from_dict({**TINY, "checkpoint": str(tmp_path / "nope")})
    with pytest.raises(ConfigError, match=r"^bootstrap\.checkpoint: .*nope is no directory"):
        resolve_initial_policy(config, tmp_path)


def test_a_reference_whose_weights_changed_is_refused(built, tmp_path):
    import shutil

    _, out, _ = built
    copy = tmp_path / "reference"
    shutil.copytree(out / "policy", copy)
    manifest = json.loads((copy / MANIFEST_NAME).read_text())
    manifest["sha256"] = "0" * 64
    (copy / MANIFEST_NAME).write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match="does not match the manifest"):
        verify_reference(copy)


def test_a_code_change_rebuilds_but_keeps_the_training_state(monkeypatch):
    config = BootstrapConfig.from_dict(TINY)
    key, state_key = cache_key(config), build._recipe_key(config)
    monkeypatch.setattr(build, "code_fingerprint", lambda env: "other code")
    assert cache_key(config) != key
    assert build._recipe_key(config) == state_key


def test_a_warm_start_continues_the_given_policy_with_its_tokenizer(built, tmp_path):
    import torch

    _, out, info = built
    start = out / "policy"
    config = BootstrapConfig.from_dict(
        {
            **TINY,
            "warm_start": str(start),
            # the same demonstrations (their words are the tokenizer's), more privileged views
            "data": {**TINY["data"], "privileged_share": 1.0},
        }
    )
    second = build_initial_policy(config, tmp_path, progress=False)
    manifest = json.loads((tmp_path / "policy" / MANIFEST_NAME).read_text())
    assert manifest["warm_start"] == {"path": str(start), "sha256": info.sha256}
    assert manifest["configuration"]["warm_start"] == str(start)
    assert second.sha256 != info.sha256
    (model0, tok0), (model1, tok1) = load_policy(start), load_policy(tmp_path / "policy")
    assert tok1.get_vocab() == tok0.get_vocab()
    assert model1.config.hidden_size == model0.config.hidden_size
    # trained from the warm start's weights, not from a fresh initialisation
    fresh = BootstrapConfig.from_dict({**TINY, "data": {**TINY["data"], "privileged_share": 1.0}})
    w0, w1 = model0.model.norm.weight, model1.model.norm.weight
    assert not torch.equal(w0, w1) and (w1 - w0).abs().max() < 0.1
    assert cache_key(config) != cache_key(fresh)


def test_a_warm_start_counts_in_the_recipe_by_its_weights(built, monkeypatch):
    _, out, _ = built
    config = BootstrapConfig.from_dict({**TINY, "warm_start": str(out / "policy")})
    key = build._recipe_key(config)
    monkeypatch.setattr(build, "weights_sha256", lambda path: "f" * 64)
    assert build._recipe_key(config) != key


def test_a_warm_start_of_another_shape_is_refused_before_training(built, tmp_path, monkeypatch):
    _, out, _ = built
    model = {**TINY["model"], "hidden_size": 64}
    config = BootstrapConfig.from_dict({**TINY, "model": model, "warm_start": str(out / "policy")})

    def no_work(*args, **kwargs):
        raise AssertionError("nothing may be prepared for a mismatched warm start")

    monkeypatch.setattr(build, "prepare_training_data", no_work)
    with pytest.raises(ValueError, match=r"model\.hidden_size: the warm start .* has 32"):
        build_initial_policy(config, tmp_path, progress=False)


def test_training_data_a_warm_start_tokenizer_cannot_encode_is_named(built):
    from resail_pipeline.bootstrap.packing import Branch, PackedRow

    _, out, _ = built
    _, tokenizer = load_policy(out / "policy")
    known = tokenizer("craft 4 oak planks", add_special_tokens=False).input_ids
    unk = tokenizer.unk_token_id
    in_prompt = PackedRow(tuple(known), (Branch((unk, 5), 1, 1.0, False),))
    in_response = PackedRow(tuple(known), (Branch((5, unk), 1, 1.0, False),))
    # an unknown word in a prompt is read as such at evaluation too; one in a response is not
    build._check_known_words([in_prompt], tokenizer, "start")
    with pytest.raises(
        ValueError, match=r"warm_start: the tokenizer of start .* after 'craft 4 oak planks"
    ):
        build._check_known_words([in_response], tokenizer, "start")


def test_a_warm_start_must_name_a_directory():
    with pytest.raises(ValueError, match="warm_start: must be a non-empty string or null, got ''"):
        BootstrapConfig.from_dict({**TINY, "warm_start": ""})


def test_renamed_copies_add_the_tasks_under_other_item_names():
    import re

    def goals(data):
        texts = (data.tokenizer.decode(ids) for r in data.rows for ids, _, _ in r.sequences())
        return {m for text in texts for m in re.findall(r"Your goal is: craft ([a-z ]+)", text)}

    base = build.prepare_training_data(BootstrapConfig.from_dict(TINY), progress=False)
    renamed = {**TINY, "data": {**TINY["data"], "renamed_copies": 1}}
    more = build.prepare_training_data(BootstrapConfig.from_dict(renamed), progress=False)
    assert more.stats()["trained_steps"] == base.stats()["trained_steps"]
    assert more.stats()["sequences"] > base.stats()["sequences"]
    assert len(goals(base)) == 2
    assert goals(base) < goals(more) and len(goals(more)) == 4
    assert more.sha256 != base.sha256


def test_copying_drills_train_renamed_privileged_views_without_the_commands():
    base = build.prepare_training_data(BootstrapConfig.from_dict(TINY), progress=False)
    drilled = {**TINY, "data": {**TINY["data"], "copying_drills": 1}}
    data = build.prepare_training_data(BootstrapConfig.from_dict(drilled), progress=False)
    assert data.stats()["trained_steps"] == base.stats()["trained_steps"]
    new_rows = [r for r in data.rows if r not in set(base.rows)]
    assert new_rows and len(data.rows) == len(base.rows) + len(new_rows)
    texts = [data.tokenizer.decode(ids) for r in new_rows for ids, _, _ in r.sequences()]
    # every drill is a privileged view, with no crafting-command list left in it
    assert all(b.privileged for r in new_rows for b in r.branches)
    assert all("A failed trajectory for the current task" in t for t in texts)
    headers = ("Crafting commands:", "Available crafting commands for this episode:")
    assert not any(h in t for t in texts for h in headers)
    assert not any("\ncraft " in t.split("<|im_start|>assistant")[0] for t in texts)
    # each drill copies the plan its summary hands it: the answer is one of the plan's actions
    for text in texts:
        plan = text.split("Corrected plan:")[1].split("\n")[0]
        action = text.split("<action>")[-1].split("</action>")[0]
        assert f"`{action}`" in plan
    # under renamed item words: goals the originals do not have
    goals = {t.split("Goal: craft ")[1].split(".")[0] for t in texts if "Goal: craft " in t}
    originals = {
        t.split("Goal: craft ")[1].split(".")[0]
        for r in base.rows
        for t in (data.tokenizer.decode(ids) for ids, _, _ in r.sequences())
        if "Goal: craft " in t
    }
    assert goals and not goals & originals
    assert data.sha256 != base.sha256


def test_on_policy_episodes_are_the_warm_starts_own_relabelled(built):
    _, out, _ = built
    params = {
        **TINY,
        "warm_start": str(out / "policy"),
        "data": {**TINY["data"], "on_policy_episodes": 1},
    }
    config = BootstrapConfig.from_dict(params)
    task_ids = [1, 2]
    warm_start = build.WarmStart.load(out / "policy")
    demos = build.on_policy_demonstrations(config, task_ids, warm_start, progress=False)
    assert [(d.task_id, d.episode) for d in demos] == [(1, 2), (2, 2)]  # after the planner's 0-1
    for demo in demos:
        # the tiny policy's own episodes, to the step limit unless it succeeded
        assert demo.success or len(demo.steps) == 30
        assert all(s.mistake in ("", "policy") for s in demo.steps)
        assert all(s.expert for s in demo.steps)
    # they join the planner's demonstrations as trained data (and, failed, as guidance)
    data = build.prepare_training_data(config, warm_start=warm_start, progress=False)
    with_them = data.stats()
    assert with_them["trained_demonstrations"] == 2 + 2
    assert with_them["demonstrations"] == 4 + 2


def test_privileged_on_policy_episodes_read_the_summary_of_the_first(built, monkeypatch):
    _, out, _ = built
    params = {
        **TINY,
        "warm_start": str(out / "policy"),
        "data": {**TINY["data"], "on_policy_episodes": 1, "on_policy_privileged": 1},
    }
    config = BootstrapConfig.from_dict(params)
    warm_start = build.WarmStart.load(out / "policy")
    prompts: list[str] = []

    class RecordingGenerator(build.TransformersGenerator):
        def generate(self, batch, sampling, seeds=None):
            prompts.extend(batch)
            return super().generate(batch, sampling, seeds)

    monkeypatch.setattr(build, "TransformersGenerator", RecordingGenerator)
    demos = build.on_policy_demonstrations(config, [1, 2], warm_start, progress=False)
    # the ordinary episodes after the planner's 0-1, then the privileged ones after those
    assert [(d.task_id, d.episode) for d in demos] == [(1, 2), (2, 2), (1, 3), (2, 3)]
    ordinary, privileged = demos[:2], demos[2:]
    assert all(s.expert and s.mistake in ("", "policy") for d in demos for s in d.steps)
    # every privileged step was generated with the summary of its task's ordinary episode
    for first in ordinary:
        text = first.summary.text
        with_it = [p for p in prompts if text in p]
        assert len(with_it) == len(privileged[ordinary.index(first)].steps)
    assert sum(1 for p in prompts if "Failure analysis:" in p or "Guidance summary:" in p) == sum(
        len(d.steps) for d in privileged
    )
    # and each records it, to be trained with it
    assert [d.guide for d in ordinary] == [None, None]
    assert [d.guide for d in privileged] == [d.summary for d in ordinary]


def test_privileged_as_rolled_out_trains_those_episodes_with_their_own_summary(built, monkeypatch):
    _, out, _ = built
    on_policy = {"on_policy_episodes": 1, "on_policy_privileged": 1}
    params = {**TINY, "warm_start": str(out / "policy"), "data": {**TINY["data"], **on_policy}}
    warm_start = build.WarmStart.load(out / "policy")
    packed: list = []

    def recording_pack_rows(groups, tokenizer, *, max_branches):
        packed[:] = groups
        return real_pack_rows(groups, tokenizer, max_branches=max_branches)

    real_pack_rows = build.pack_rows
    monkeypatch.setattr(build, "pack_rows", recording_pack_rows)
    like_planner = build.prepare_training_data(
        BootstrapConfig.from_dict(params), warm_start=warm_start, progress=False
    )
    params["data"]["on_policy_training"] = "privileged_as_rolled_out"
    data = build.prepare_training_data(
        BootstrapConfig.from_dict(params), warm_start=warm_start, progress=False
    )
    ordinary = [d for d in data.demonstrations if d.episode == 2]
    privileged = [d for d in data.demonstrations if d.episode == 3]
    assert len(ordinary) == len(privileged) == 2
    # the ordinary episodes supply the summaries only; the privileged ones are trained
    trained = {d.traj_id for d in data.trained}
    assert trained >= {d.traj_id for d in privileged}
    assert not trained & {d.traj_id for d in ordinary}
    assert len(like_planner.trained) == len(data.trained) + 2
    # every privileged step in the privileged view alone, with the summary it was generated with
    groups = {(g.message, g.response): g for g in packed if g.ordinary == 0}
    for demo in privileged:
        for step in demo.steps:
            group = groups[(render_user_message(step.history), demonstration_response(step.expert))]
            assert group.summaries[demo.guide] >= 1
    guides = {d.guide for d in privileged}
    guided = sum(g.summaries[s] for g in packed if g.ordinary == 0 for s in guides)
    assert guided == sum(len(d.steps) for d in privileged)
    assert data.sha256 != like_planner.sha256


def test_without_on_policy_episodes_no_policy_is_needed():
    config = BootstrapConfig.from_dict({**TINY, "warm_start": "no/such/policy"})
    assert build.on_policy_demonstrations(config, [1, 2], None, progress=False) == []


def test_on_policy_episodes_without_the_warm_starts_model_are_refused():
    params = {**TINY, "warm_start": "p", "data": {**TINY["data"], "on_policy_episodes": 1}}
    config = BootstrapConfig.from_dict(params)
    with pytest.raises(ValueError, match=r"data\.on_policy_episodes: 1 episodes per task need"):
        build.on_policy_demonstrations(config, [1, 2], None, progress=False)


def test_the_longest_training_sequence_must_fit_the_model():
    from resail_pipeline.bootstrap.config import ModelShape
    from resail_pipeline.bootstrap.packing import Branch, PackedRow

    row = PackedRow(tuple(range(10)), (Branch((1, 2, 3), 1, 1.0, False),))
    build._check_length([row], ModelShape(max_position_embeddings=13))
    with pytest.raises(ValueError, match=r"model\.max_position_embeddings: 12 is shorter .*\(13 "):
        build._check_length([row], ModelShape(max_position_embeddings=12))


# ----------------------------------------------------------------------------------------------
# ALFWorld: the first stage, on generated games

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "conf" / "base" / "parameters_bootstrap.yml"
#: A tiny ALFWorld first stage: two demonstrations of every clone game (one stalled), a few steps.
ALFWORLD_TINY = {
    **TINY,
    "env": "alfworld",
    "name": "alfworld-initial",
    "data": {"episodes_per_task": 2, "stalled_share": 0.5},
    "training": {"epochs": 1.0, "batch_tokens": 8192, "time_budget_s": 30.0, "warmup_steps": 2},
}


def _environment(options, sha256="a" * 64):
    return build.BuildEnvironment("alfworld", options, ("clone",), data_sha256=sha256)


def test_the_cache_key_counts_the_games_by_content_not_by_where_they_lie():
    pytest.importorskip("alfworld")  # the key names the installed alfworld's version
    recipe = build._recipe_key(BootstrapConfig.from_dict(ALFWORLD_TINY))
    here = build._cache_key(recipe, _environment({"data_path": "/here"}))
    assert build._cache_key(recipe, _environment({"data_path": "/there"})) == here
    assert build._cache_key(recipe, _environment({})) == here  # ALFWORLD_DATA named them
    assert build._cache_key(recipe, _environment({}, sha256="b" * 64)) != here
    assert build._cache_key(recipe, _environment({"max_steps": 20})) != here  # shapes the data


def test_an_alfworld_recipe_asking_for_textcraft_settings_is_one_line(tmp_path, capsys):
    """At the command line, before anything is written or any game is looked for."""
    import yaml

    from resail_pipeline.bootstrap.__main__ import main

    recipe = tmp_path / "recipe.yml"
    bad = {"env": "alfworld", "reference": None, "data": {"copying_drills": 1}}
    recipe.write_text(yaml.safe_dump({"bootstrap": bad}))
    with pytest.raises(SystemExit) as exited:
        main(["build", "--params", str(recipe), "--base", str(BASE), "--out", str(tmp_path / "o")])
    assert exited.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "bootstrap.data.copying_drills: must be 0 for alfworld (got 1)" in line
    assert not (tmp_path / "o").exists()


def test_a_recipes_environment_options_are_checked_at_the_command_line(tmp_path, capsys):
    """``run.env_options`` of a recipe are the adapter's: an unknown one is one line naming the
    field, before anything is written; a known one is read as given."""
    import yaml

    from resail_pipeline.bootstrap.__main__ import load_env_options, main

    recipe = tmp_path / "recipe.yml"
    recipe.write_text(yaml.safe_dump({"bootstrap": {}, "run": {"env_options": {"clone": 3}}}))
    with pytest.raises(SystemExit) as exited:
        main(["build", "--params", str(recipe), "--base", str(BASE), "--out", str(tmp_path / "o")])
    assert exited.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert (
        "recipe.yml: run.env_options: the textcraft environment takes no option(s) ['clone']"
        in line
    )
    assert not (tmp_path / "o").exists()
    recipe.write_text(yaml.safe_dump({"bootstrap": {}, "run": {"env_options": {"clone_tasks": 3}}}))
    assert load_env_options(recipe, "textcraft") == {"clone_tasks": 3}
    recipe.write_text(yaml.safe_dump({"bootstrap": {}}))
    assert load_env_options(recipe, "textcraft") == {}


def test_the_alfworld_first_stage_recipes():
    """reference/alfworld-chain/01-first-stage.yml (the shipped stage) and
    reference/alfworld-search-chain/01-first-stage.yml over the base parameters: ALFWorld, built
    from scratch on demonstrations with mistakes (the second's by the searching expert), for a
    number of passes whatever the processor's speed (no time budget), in bf16 only where the
    processor multiplies faster in it."""
    from resail_pipeline.bootstrap.__main__ import load_config

    textcraft = load_config(ROOT / "reference" / "textcraft-chain" / "01-first-stage.yml", BASE)
    shipped, search = (
        load_config(ROOT / "reference" / chain / "01-first-stage.yml", BASE)
        for chain in ("alfworld-chain", "alfworld-search-chain")
    )
    for config in (shipped, search):
        assert (config.env, config.name, config.reference) == ("alfworld", "alfworld-initial", None)
        assert config.warm_start is None and config.checkpoint is None
        assert config.data.renamed_copies == config.data.copying_drills == 0
        assert config.data.on_policy_episodes == 0 and config.data.task_limit is None
        assert config.data.mistake_rate > 0 and config.data.privileged_share > 0
        assert (config.training.time_budget_s, config.training.precision) == (None, "auto")
        assert config.model == textcraft.model
    assert (shipped.data.searching_expert, shipped.training.epochs) == (False, 5.0)
    assert (search.data.searching_expert, search.training.epochs) == (True, 2.0)


@pytest.fixture(scope="module")
def alfworld_games(tmp_path_factory):
    """A tiny generated set: three clone games, one of every other split."""
    pytest.importorskip("alfworld")
    from resail_pipeline.envs.alfworld_games import GameGenConfig, write_games

    root = tmp_path_factory.mktemp("alfworld") / "games"
    write_games(root, GameGenConfig(train=1, id=1, ood=1, dev=1, clone=3))
    return root


@pytest.mark.alfworld
def test_an_alfworld_build_reads_the_games_the_run_names(alfworld_games, tmp_path, monkeypatch):
    """A run's data_path is where the games are (nothing is generated); without one, the
    generated default set, as the Kedro hook gives it (faked here: the tiny set stands for it)."""
    from resail_pipeline.envs import alfworld_games as games_module
    from resail_pipeline.envs.alfworld_games import splits_sha256

    made = []

    def default_set():  # fake: the default set's folder without its half hour of engine
        made.append(True)
        return alfworld_games

    monkeypatch.setattr(games_module, "ensure_games", default_set)
    monkeypatch.setenv("ALFWORLD_DATA", "")  # unset, and restored after the test
    named = build.BuildEnvironment.resolve("alfworld", {"data_path": str(alfworld_games)})
    assert made == [] and named.data_root == str(alfworld_games)
    assert named.data_sha256 == splits_sha256(named.make(), ["clone"])
    assert [len(named.make().task_ids(s)) for s in named.splits] == [3]
    default = build.BuildEnvironment.resolve("alfworld")
    assert made == [True] and default.data_sha256 == named.data_sha256
    assert default.data_root == str(alfworld_games.resolve())
    config = BootstrapConfig.from_dict(ALFWORLD_TINY)
    assert cache_key(config, named) == cache_key(config, default)


@pytest.mark.slow
@pytest.mark.alfworld
def test_the_command_builds_an_alfworld_policy_that_plays(alfworld_games, tmp_path, monkeypatch):
    """``python -m resail_pipeline.bootstrap build`` on an ALFWorld recipe, with no data named:
    the default set (the tiny one here) is found as a Kedro run finds it; the policy learns from
    the clone games only, is evaluated on id and ood, loads and plays an episode."""
    import yaml

    from resail_pipeline.bootstrap.__main__ import main
    from resail_pipeline.envs import alfworld_games as games_module
    from resail_pipeline.envs import make_env
    from resail_pipeline.envs.alfworld_games import splits_sha256
    from resail_pipeline.generation.transformers_backend import TransformersGenerator
    from resail_pipeline.rollout import EpisodeSpec, RolloutSettings

    monkeypatch.setattr(games_module, "ensure_games", lambda: alfworld_games)
    monkeypatch.setenv("ALFWORLD_DATA", "")  # unset, and restored after the test
    recipe, out = tmp_path / "recipe.yml", tmp_path / "out"
    recipe.write_text(yaml.safe_dump({"bootstrap": ALFWORLD_TINY}))
    main(["build", "--params", str(recipe), "--base", str(BASE), "--out", str(out)])
    policy = out / "policy"
    manifest = json.loads((policy / MANIFEST_NAME).read_text())
    assert manifest["policy_id"].startswith("alfworld-initial@")
    assert manifest["configuration"]["env"] == "alfworld"
    environment = manifest["environment"]
    assert environment["name"] == "alfworld" and environment["options"] == {}
    assert environment["demonstration_splits"] == ["clone"]
    assert environment["evaluation_splits"] == ["id", "ood"]
    env = make_env("alfworld")
    assert environment["data_sha256"] == splits_sha256(env, ["clone"])
    data = manifest["training_data"]
    assert data["tasks"] == 3 and data["demonstrations"] == 6  # every clone game, no other
    assert data["trained_demonstrations"] == 3 and data["privileged_sequences"] > 0

    quick = ["--tasks", "1", "--seeds", "0", "--max-new-tokens", "8", "--dtype", "float32"]
    main(["evaluate", "--policy", str(policy), *quick, "--compile", "off"])
    evaluation = json.loads((policy / MANIFEST_NAME).read_text())["evaluation"]
    assert evaluation["protocol"]["splits"] == ["id", "ood"]
    assert [(row["split"], row["view"], row["tasks"]) for row in evaluation["table"]] == [
        ("id", "ordinary", 1),
        ("id", "privileged", 1),
        ("ood", "ordinary", 1),
        ("ood", "privileged", 1),
    ]

    model, tokenizer = load_policy(policy)
    assert model.config.vocab_size == len(tokenizer)
    (task_id,) = env.task_ids("ood")
    prompt = chat_prompt(
        tokenizer, render_user_message(EpisodeHistory.start("alfworld", env.reset(task_id)))
    )
    assert tokenizer.unk_token_id not in tokenizer(prompt).input_ids
    generator = TransformersGenerator(model, tokenizer, policy_id=manifest["policy_id"])
    (episode,) = RolloutSettings(max_new_tokens=8).roll_out(
        lambda: make_env("alfworld"), [EpisodeSpec("play", task_id, 0)], generator, progress=False
    )
    assert episode.env == "alfworld" and 1 <= len(episode.steps) <= env.max_steps
    assert episode.end_reason in ("success", "step_limit")


def test_a_policy_built_for_another_environment_is_refused(tmp_path):
    from resail_pipeline.checkpoints import MANIFEST_NAME
    from resail_pipeline.initial_policy import built_environment, requested_policy

    policy = tmp_path / "policy"
    policy.mkdir()
    assert built_environment(policy) is None  # no manifest: a foreign checkpoint, not checked
    (policy / MANIFEST_NAME).write_text(json.dumps({"configuration": {"env": "textcraft"}}))
    (policy / "config.json").write_text("{}")  # a checkpoint directory, as far as looked
    assert built_environment(policy) == "textcraft"
    for field in ("reference", "checkpoint"):
        ok = BootstrapConfig.from_dict({**TINY, "env": "textcraft", field: str(policy)})
        assert requested_policy(ok) == policy
        other = BootstrapConfig.from_dict({**TINY, "env": "alfworld", field: str(policy)})
        with pytest.raises(
            ConfigError, match=rf"bootstrap\.{field}: .* was built for textcraft, .* plays alfworld"
        ):
            requested_policy(other)
