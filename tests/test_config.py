"""The configuration mechanism: checkers, building from plain data, and the way back."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from resail_pipeline.config import (
    ConfigError,
    build,
    check_bool,
    check_choice,
    check_folder_name,
    check_int,
    check_number,
    check_sections,
    to_data,
)


@dataclass(frozen=True)
class Inner:
    rate: float = 0.5
    lam: float = field(default=1.0, metadata={"key": "lambda"})

    def __post_init__(self) -> None:
        check_number("rate", self.rate, low=0, high=1, low_open=True)
        check_number("lambda", self.lam, low=0)


@dataclass(frozen=True)
class Outer:
    name: str
    sizes: tuple[int, ...] = (1, 2)
    inner: Inner = field(default_factory=Inner)

    def __post_init__(self) -> None:
        check_sections(self)
        for size in self.sizes:
            check_int("sizes", size, low=1)


def test_build_fills_defaults_nests_sections_and_round_trips():
    outer = build(Outer, {"name": "a", "sizes": [3], "inner": {"lambda": 0.0}})
    assert outer == Outer(name="a", sizes=(3,), inner=Inner(lam=0.0))
    assert to_data(outer) == {"name": "a", "sizes": [3], "inner": {"rate": 0.5, "lambda": 0.0}}
    assert build(Outer, to_data(outer)) == outer
    assert build(Outer, outer) is outer
    assert build(Outer, {"name": "a", "inner": None}).inner == Inner()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"name": "a", "inner": {"rate": 0}}, r"^sec\.inner\.rate: must be in \(0, 1\], got 0$"),
        ({"name": "a", "inner": {"lambda": "1"}}, r"^sec\.inner\.lambda: must be a finite number"),
        ({"name": "a", "inner": {"lam": 1}}, r"^sec\.inner: unknown key\(s\) \['lam'\]; known: \["),
        ({"name": "a", "inner": 3}, r"^sec\.inner: expected a mapping, got 3$"),
        ({"name": "a", "sizes": [1, 0]}, r"^sec\.sizes: must be a positive integer, got 0$"),
        ({"sizes": [1]}, r"^sec: missing key\(s\) \['name'\]$"),
        ({"name": "a", "typo": 1}, r"^sec: unknown key\(s\) \['typo'\]; known: \['inner', 'name'"),
        ([1, 2], r"^sec: expected a mapping"),
    ],
)
def test_build_errors_name_the_path(data, message):
    with pytest.raises(ConfigError, match=message):
        build(Outer, data, "sec")


def test_without_a_path_errors_name_the_field_or_the_class():
    with pytest.raises(ConfigError, match=r"^inner\.rate: "):
        build(Outer, {"name": "a", "inner": {"rate": 2}})
    with pytest.raises(ConfigError, match=r"^Outer: unknown key"):
        build(Outer, {"name": "a", "b": 1})


@pytest.mark.parametrize(
    ("check", "value", "message"),
    [
        (lambda v: check_int("n", v, low=1), True, r"^n: must be a positive integer, got True$"),
        (lambda v: check_int("n", v, low=0), -1, "a non-negative integer"),
        (lambda v: check_int("n", v, low=2), 1.0, r"an integer >= 2, got 1\.0"),
        (lambda v: check_int("n", v, low=1, optional=True), "3", "positive integer or null"),
        (lambda v: check_number("x", v, low=0), float("nan"), "must be a finite number"),
        (lambda v: check_number("x", v, low=0, low_open=True), 0, r"must be > 0, got 0"),
        (lambda v: check_number("x", v, high=1, high_open=True), 1, r"must be < 1, got 1"),
        (lambda v: check_number("x", v, low=0, high=1, high_open=True), 1.0, r"in \[0, 1\)"),
        (lambda v: check_choice("k", v, ("a", "b")), "c", r"must be one of \['a', 'b'\], got 'c'"),
        (lambda v: check_choice("k", v, (1, 2)), True, r"must be one of \[1, 2\], got True"),
        (lambda v: check_bool("b", v), "yes", "must be true or false, got 'yes'"),
        (
            lambda v: check_folder_name(v, "run.experiment"),
            "..",
            "run.experiment: must be a folder",
        ),
    ],
)
def test_checkers_refuse_wrong_types_and_ranges(check, value, message):
    with pytest.raises(ConfigError, match=message):
        check(value)


def test_checkers_accept_what_they_promise():
    check_int("n", 3, low=1)
    check_int("n", None, low=1, optional=True)
    check_number("x", 1, low=0, high=1)
    check_number("x", None, optional=True)
    check_choice("k", 2, (1, 2))
    check_bool("b", False)
    assert check_folder_name("oel_resail-2.b", "name") == "oel_resail-2.b"
    assert check_folder_name("", "data_tag", empty=True) == ""


def test_a_section_built_by_hand_must_be_its_dataclass():
    from resail_pipeline.bootstrap.config import BootstrapConfig
    from resail_pipeline.training import TrainConfig

    with pytest.raises(ConfigError, match=r"^inner: expected a Inner, got 3$"):
        Outer(name="a", inner=3)
    with pytest.raises(ConfigError, match=r"^resail: expected a ResailConfig, got 3$"):
        TrainConfig(resail=3)
    with pytest.raises(ConfigError, match=r"^data: expected a DemonstrationSettings"):
        BootstrapConfig(data={"on_policy_episodes": 1})  # checked before any section is read
