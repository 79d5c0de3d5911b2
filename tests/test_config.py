"""The configuration mechanism: models, building from plain data, one-line errors, the way back."""

from __future__ import annotations

import pytest

from resail_pipeline.config import (
    Config,
    ConfigError,
    Field,
    FolderName,
    Number,
    build,
    check_folder_name,
    check_int,
    check_number,
    model_validator,
    one_of,
    to_data,
)


class Inner(Config):
    rate: Number = Field(0.5, gt=0, le=1)
    lam: Number = Field(1.0, ge=0, alias="lambda")


class Outer(Config):
    name: str
    sizes: tuple[int, ...] = Field((1, 2))
    inner: Inner = Inner()
    kind: one_of("a", 1) = "a"
    folder: FolderName = "x"
    fast: bool | one_of("auto") | None = None

    @model_validator(mode="after")
    def _sizes(self) -> Outer:
        for size in self.sizes:
            check_int("sizes", size, low=1)
        return self


def test_build_fills_defaults_nests_sections_and_round_trips():
    outer = build(Outer, {"name": "a", "sizes": [3], "inner": {"lambda": 0.0}})
    assert outer == Outer(name="a", sizes=(3,), inner=Inner(lam=0.0))
    assert to_data(outer) == {
        "name": "a",
        "sizes": [3],
        "inner": {"rate": 0.5, "lambda": 0.0},
        "kind": "a",
        "folder": "x",
        "fast": None,
    }
    assert build(Outer, to_data(outer)) == outer
    assert build(Outer, outer) is outer
    assert build(Outer, {"name": "a", "inner": None}).inner == Inner()
    assert outer.replace(name="b") == Outer(name="b", sizes=(3,), inner=Inner(lam=0.0))


def test_numbers_keep_the_type_the_yaml_gave():
    """A settings hash is made from the plain data: ``lr: 1`` must not become ``1.0``."""
    assert type(build(Inner, {"rate": 1}).rate) is int
    assert type(build(Inner, {"rate": 0.5}).rate) is float
    assert Inner(rate=1).model_dump() == {"rate": 1, "lam": 1.0}


def test_fields_describe_themselves_from_their_docstrings():
    class Documented(Config):
        size: int = Field(2, ge=1)
        """How many."""

    assert Documented.model_fields["size"].description == "How many."


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"name": "a", "inner": {"rate": 0}}, r"^sec\.inner\.rate: must be in \(0, 1\], got 0$"),
        ({"name": "a", "inner": {"lambda": "1"}}, r"^sec\.inner\.lambda: must be a finite number"),
        ({"name": "a", "inner": {"lam": 1}}, r"^sec\.inner: unknown key\(s\) \['lam'\]; known: \["),
        ({"name": "a", "inner": 3}, r"^sec\.inner: expected a mapping, got 3$"),
        ({"name": "a", "sizes": [1, 0]}, r"^sec\.sizes: must be a positive integer, got 0$"),
        ({"sizes": [1]}, r"^sec: missing key\(s\) \['name'\]$"),
        (
            {"name": "a", "typo": 1},
            r"^sec: unknown key\(s\) \['typo'\]; known: \['fast', 'folder', 'inner'",
        ),
        ([1, 2], r"^sec: expected a mapping"),
        ({"name": "a", "kind": True}, r"^sec\.kind: must be one of \['a', 1\], got True$"),
        ({"name": "a", "kind": 1.0}, r"^sec\.kind: must be one of \['a', 1\], got 1\.0$"),
        ({"name": "a", "folder": "../x"}, r"^sec\.folder: must be a folder name .*got '\.\./x'$"),
        (
            {"name": "a", "fast": "no"},
            r"^sec\.fast: must be true, false, 'auto' or null, got 'no'$",
        ),
        ({"name": 3}, r"^sec\.name: must be a string, got 3$"),
        ({"name": "a", "inner": {"rate": float("inf")}}, r"^sec\.inner\.rate: must be a finite"),
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
        (
            lambda v: check_folder_name(v, "run.experiment"),
            "..",
            "run.experiment: must be a folder",
        ),
    ],
)
def test_argument_checkers_refuse_wrong_types_and_ranges(check, value, message):
    with pytest.raises(ConfigError, match=message):
        check(value)


def test_argument_checkers_accept_what_they_promise():
    check_int("n", 3, low=1)
    check_int("n", None, low=1, optional=True)
    check_number("x", 1, low=0, high=1)
    assert check_folder_name("oel_resail-2.b", "name") == "oel_resail-2.b"
    assert check_folder_name("", "data_tag", empty=True) == ""


def test_a_section_given_by_hand_is_a_mapping_or_its_model():
    from resail_pipeline.training import TrainConfig

    with pytest.raises(ConfigError, match=r"^inner: expected a mapping, got 3$"):
        Outer(name="a", inner=3)
    with pytest.raises(ConfigError, match=r"^resail: expected a mapping, got 3$"):
        TrainConfig(resail=3)
    assert TrainConfig(resail={"rho": 0.5}).resail.rho == 0.5
    with pytest.raises(ConfigError, match=r"^Outer: missing key\(s\) \['name'\]$"):
        Outer()
