"""The TextCraft planner on hand-written observations."""

from __future__ import annotations

from resail_pipeline.envs.planner import parse_problem, plan, plan_from_observation

OBSERVATION = """Crafting commands:
craft 4 oak planks using 1 oak logs
craft 4 stick using 2 planks
craft 1 wooden pickaxe using 2 stick, 3 planks
craft 3 oak sign using 6 oak planks, 1 stick

Goal: craft wooden pickaxe."""


def test_parse_problem():
    problem = parse_problem(OBSERVATION)
    assert problem.goal == "wooden pickaxe"
    assert [r.command for r in problem.recipes] == OBSERVATION.split("\n")[1:5]
    assert problem.tag_members("planks") == ("oak planks",)
    assert parse_problem("no goal here") is None


def test_plan_resolves_tags_and_repeats_exact_recipes():
    # sticks consume planks gathered first, so more planks are made afterwards
    assert plan_from_observation(OBSERVATION) == [
        "get 1 oak logs",
        "craft 4 oak planks using 1 oak logs",
        "craft 4 stick using 2 oak planks",
        "get 1 oak logs",
        "craft 4 oak planks using 1 oak logs",
        "craft 1 wooden pickaxe using 2 stick, 3 oak planks",
    ]


def test_plan_replans_from_an_inventory():
    problem = parse_problem(OBSERVATION)
    assert plan(problem, {"stick": 4, "oak planks": 3}) == [
        "craft 1 wooden pickaxe using 2 stick, 3 oak planks"
    ]


def test_a_name_that_its_own_members_need_is_not_a_tag():
    problem = parse_problem(
        "Crafting commands:\ncraft 8 blue stained glass using 8 glass, 1 blue dye\n"
        "craft 1 blue dye using 1 cornflower\n\nGoal: craft blue stained glass."
    )
    assert problem.tag_members("glass") == ()
    assert plan(problem) == [
        "get 8 glass",
        "get 1 cornflower",
        "craft 1 blue dye using 1 cornflower",
        "craft 8 blue stained glass using 8 glass, 1 blue dye",
    ]


def test_apply_simulates_the_rules():
    problem = parse_problem(OBSERVATION)
    assert problem.apply({}, "get 2 oak logs") == {"oak logs": 2}
    assert problem.apply({}, "get 1 stick") is None  # craftable items cannot be fetched
    assert problem.apply({"oak logs": 1}, "craft 4 oak planks using 1 oak logs") == {
        "oak planks": 4
    }
    assert problem.apply({"oak logs": 1}, "craft 8 oak planks using 2 oak logs") is None
    assert problem.apply({}, "craft 4 stick using 2 oak planks") is None


def test_no_plan_without_a_recipe_for_the_goal():
    assert plan_from_observation("Crafting commands:\n\nGoal: craft beacon.") is None
