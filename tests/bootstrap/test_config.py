"""BootstrapConfig: nested parameters, range checks that name the field."""

from __future__ import annotations

import pytest

from resail_pipeline.bootstrap.config import BootstrapConfig, TrainingSettings
from resail_pipeline.config import ConfigError


def test_from_dict_round_trips_and_fills_defaults():
    config = BootstrapConfig.from_dict(
        {"seed": 3, "model": {"hidden_size": 64}, "training": {"time_budget_s": 60}}
    )
    assert config.model.hidden_size == 64 and config.model.num_hidden_layers == 4
    assert config.training.time_budget_s == 60 and config.seed == 3
    assert BootstrapConfig.from_dict(config.to_dict()) == config
    assert "reference" not in config.recipe() and "checkpoint" not in config.recipe()


@pytest.mark.parametrize("env", ["textcraft", "alfworld"])
def test_the_name_and_the_shipped_policy_default_to_the_environments_own(env):
    config = BootstrapConfig.from_dict({"env": env, "name": None, "reference": "auto"})
    assert (config.name, config.reference) == (f"{env}-initial", f"reference/{env}-initial")
    assert BootstrapConfig.from_dict({"env": env}) == config  # the dataclass defaults
    given = BootstrapConfig.from_dict({"env": env, "name": "mine", "reference": None})
    assert (given.name, given.reference) == ("mine", None)  # a build, under its own name
    assert BootstrapConfig.from_dict(config.to_dict()) == config


def test_where_a_policy_is_trained_is_not_part_of_its_recipe():
    on_cpu = BootstrapConfig.from_dict({"training": {"device": "cpu"}})
    anywhere = BootstrapConfig.from_dict({"training": {"device": "auto"}})
    assert on_cpu != anywhere and on_cpu.recipe() == anywhere.recipe()
    assert "device" not in on_cpu.recipe()["training"]
    assert on_cpu.to_dict()["training"]["device"] == "cpu"  # the manifest records the choice


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"modle": {}}, r"^bootstrap: unknown key\(s\) \['modle'\]"),
        ({"model": {"width": 3}}, r"^bootstrap\.model: unknown key\(s\) \['width'\]"),
        ({"model": {"hidden_size": 250}}, "model.hidden_size: 250 is not a multiple"),
        ({"model": {"num_key_value_heads": 3}}, "model.num_key_value_heads"),
        ({"data": {"mistake_rate": 1.5}}, r"data.mistake_rate: must be in \[0.0, 0.9\]"),
        ({"data": {"privileged_share": -0.1}}, "data.privileged_share"),
        ({"data": {"ordinary_share": 1.5}}, r"data.ordinary_share: must be in \[0.0, 1.0\]"),
        (
            {"data": {"ordinary_share": 0.0, "privileged_share": 0.0}},
            "data.ordinary_share: 0 with privileged_share 0 leaves nothing",
        ),
        ({"data": {"episodes_per_task": 1}}, "data.episodes_per_task: stalled"),
        ({"data": {"renamed_copies": -1}}, "data.renamed_copies: must be a non-negative"),
        ({"data": {"copying_drills": 1.5}}, "data.copying_drills: must be a non-negative"),
        ({"data": {"on_policy_episodes": -1}}, "data.on_policy_episodes: must be a non-negative"),
        (
            {"data": {"on_policy_episodes": 1}},
            "data.on_policy_episodes: on-policy episodes are rolled out by the warm start",
        ),
        ({"data": {"on_policy_privileged": -1}}, "data.on_policy_privileged: must be a non-"),
        (
            {"warm_start": "p", "data": {"on_policy_privileged": 1}},
            "data.on_policy_privileged: privileged rollouts take their summary from the task's",
        ),
        (
            {"warm_start": "p", "data": {"on_policy_episodes": 1, "on_policy_training": "all"}},
            "data.on_policy_training: must be one of",
        ),
        (
            {
                "warm_start": "p",
                "data": {"on_policy_episodes": 1, "on_policy_training": "privileged_as_rolled_out"},
            },
            "data.on_policy_training: privileged_as_rolled_out trains the privileged on-policy",
        ),
        (
            {"warm_start": "p", "data": {"on_policy_episodes": 1, "on_policy_temperature": -1}},
            r"data.on_policy_temperature: must be in \[0.0, 2.0\]",
        ),
        ({"warm_start": 3}, "warm_start: must be a non-empty string or null, got 3"),
        ({"training": {"precision": "fp16"}}, "training.precision: must be one of"),
        ({"training": {"device": "gpu"}}, "training.device: must be one of"),
        ({"training": {"learning_rate": 0}}, r"training.learning_rate: must be in \(0.0"),
        ({"training": {"batch_tokens": 0}}, "training.batch_tokens: must be a positive integer"),
        ({"training": {"prompt_loss_weight": -0.1}}, r"training\.prompt_loss_weight: must be in"),
        ({"env": "minecraft"}, "env: unknown environment 'minecraft'"),
        ({"name": "a@b"}, "name: must be non-empty"),
        ({"seed": -1}, "seed: must be a non-negative integer"),
        ({"training": 5}, "training: expected a mapping"),
    ],
)
def test_bad_parameters_name_the_field(params, message):
    with pytest.raises(ConfigError, match=message):
        BootstrapConfig.from_dict(params)


def test_warmup_must_be_a_non_negative_integer():
    with pytest.raises(ConfigError, match=r"^warmup_steps: must be a non-negative integer"):
        TrainingSettings(warmup_steps=-1)
    with pytest.raises(ConfigError, match=r"^bootstrap\.training\.warmup_steps: must be a non-"):
        BootstrapConfig.from_dict({"training": {"warmup_steps": 1.5}})


@pytest.mark.parametrize("field", ["renamed_copies", "copying_drills"])
def test_alfworld_refuses_what_only_textcraft_has(field):
    """Renamed copies and copying drills rewrite TextCraft's item names and crafting commands:
    an ALFWorld configuration asking for them is refused when it is made, naming the field."""
    assert getattr(BootstrapConfig.from_dict({"data": {field: 2}}).data, field) == 2  # TextCraft
    with pytest.raises(
        ConfigError, match=rf"^bootstrap\.data\.{field}: must be 0 for alfworld \(got 2\): "
    ) as error:
        BootstrapConfig.from_dict({"env": "alfworld", "data": {field: 2}})
    assert "\n" not in str(error.value) and "TextCraft's item names" in str(error.value)
    assert BootstrapConfig.from_dict({"env": "alfworld", "data": {field: 0}}).env == "alfworld"


def test_every_setting_an_environment_refuses_is_a_data_setting():
    """The table of refused settings names real fields, so that none is silently ignored."""
    from resail_pipeline.bootstrap.config import DemonstrationSettings
    from resail_pipeline.bootstrap.environments import BUILDABLE_ENVS

    names = set(DemonstrationSettings.model_fields)
    refused = {name for env in BUILDABLE_ENVS.values() for name, _ in env.unsupported}
    assert refused == {"renamed_copies", "copying_drills", "searching_expert"} and refused <= names


def test_only_alfworld_has_a_searching_expert():
    config = BootstrapConfig.from_dict({"env": "alfworld", "data": {"searching_expert": True}})
    assert config.data.searching_expert is True
    with pytest.raises(
        ConfigError,
        match=r"^bootstrap\.data\.searching_expert: must be false for textcraft \(got True\): ",
    ):
        BootstrapConfig.from_dict({"data": {"searching_expert": True}})
    with pytest.raises(ConfigError, match=r"^bootstrap\.data\.searching_expert: must be"):
        BootstrapConfig.from_dict({"env": "alfworld", "data": {"searching_expert": "yes"}})
