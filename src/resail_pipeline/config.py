"""One way to declare and check a configuration.

Every configuration of the project is a frozen dataclass that checks its own fields in
``__post_init__`` with the checkers below, so that a bad value fails when the object is made,
before any model or data is loaded, with a :class:`ConfigError` naming the field. :func:`build`
makes one from plain data (YAML, Kedro parameters): unknown keys are refused with the known ones
listed, sections (fields whose default factory is a dataclass) are built recursively, lists
become tuples where the default is a tuple, and an error is prefixed with the path it came from
(``train.resail.rho: must be in (0, 1], got 2``). :func:`to_data` is its inverse.

A field whose YAML key differs from its Python name (``lambda``, a keyword) declares the key in
its metadata: ``lam: float = field(default=1.0, metadata={"key": "lambda"})``.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

__all__ = [
    "ConfigError",
    "build",
    "check_bool",
    "check_choice",
    "check_folder_name",
    "check_int",
    "check_number",
    "check_sections",
    "is_int",
    "to_data",
]

T = TypeVar("T")


class ConfigError(ValueError):
    """A configuration value is missing, unknown, of the wrong type or out of range; the message
    names the field by its path in the configuration and, where they are few, the allowed values.
    """


def is_int(value: Any) -> bool:
    """An integer that is not a bool (YAML's ``true`` is not a count)."""
    return isinstance(value, int) and not isinstance(value, bool)


def check_int(name: str, value: Any, *, low: int | None = None, optional: bool = False) -> None:
    """``value`` is an integer ``>= low`` (or ``None`` when ``optional``)."""
    if optional and value is None:
        return
    if is_int(value) and (low is None or value >= low):
        return
    wanted = {1: "a positive integer", 0: "a non-negative integer"}.get(
        low, "an integer" if low is None else f"an integer >= {low}"
    )
    raise ConfigError(f"{name}: must be {wanted}{' or null' if optional else ''}, got {value!r}")


def check_number(
    name: str,
    value: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    optional: bool = False,
) -> None:
    """``value`` is a finite number within the bounds given (closed unless ``*_open``)."""
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"{name}: must be a finite number, got {value!r}")
    below = low is not None and (value <= low if low_open else value < low)
    above = high is not None and (value >= high if high_open else value > high)
    if not (below or above):
        return
    if low is not None and high is not None:
        bounds = f"in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
    elif low is not None:
        bounds = f"{'>' if low_open else '>='} {low}"
    else:
        bounds = f"{'<' if high_open else '<='} {high}"
    raise ConfigError(f"{name}: must be {bounds}, got {value!r}")


def check_choice(name: str, value: Any, choices: Iterable[Any]) -> None:
    """``value`` is one of ``choices``."""
    choices = tuple(choices)
    if not any(value == choice and type(value) is type(choice) for choice in choices):
        raise ConfigError(f"{name}: must be one of {list(choices)}, got {value!r}")


def check_bool(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ConfigError(f"{name}: must be true or false, got {value!r}")


#: a name that becomes a folder or part of one: letters, digits, ``-``, ``_`` and ``.``, not leading
_FOLDER_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,99}")


def check_folder_name(value: object, field: str, *, empty: bool = False) -> str:
    """``value`` if it is a safe folder name (see :data:`_FOLDER_NAME`; ``""`` where ``empty``),
    else a :class:`ConfigError` naming ``field``: ``..``, ``/`` or a leading dot would leave the folder."""
    if isinstance(value, str) and (_FOLDER_NAME.fullmatch(value) or (empty and value == "")):
        return value
    raise ConfigError(
        f"{field}: must be a folder name (letters, digits, '-', '_' and '.', not leading; at most "
        f"100 characters), got {value!r}"
    )


def _key(f: dataclasses.Field) -> str:
    return f.metadata.get("key", f.name)


def _section(f: dataclasses.Field) -> type | None:
    """The dataclass a field holds as a nested section, from its default factory."""
    factory = f.default_factory
    if isinstance(factory, type) and dataclasses.is_dataclass(factory):
        return factory
    return None


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def check_sections(config: Any) -> None:
    """Each section of ``config`` (a field whose default factory is a dataclass) holds one."""
    for f in dataclasses.fields(config):
        section, value = _section(f), getattr(config, f.name)
        if section is not None and not isinstance(value, section):
            raise ConfigError(f"{_key(f)}: expected a {section.__name__}, got {value!r}")


def build(cls: type[T], data: Any, path: str = "") -> T:
    """``cls`` from plain nested data; every error is a :class:`ConfigError` naming its path.

    ``path`` is where ``data`` sits in the configuration (``"train"``), the prefix of every
    message; an instance of ``cls`` is returned as it is.
    """
    if isinstance(data, cls):
        return data
    where = path or cls.__name__
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: expected a mapping, got {data!r}")
    fields = {_key(f): f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(map(str, data)) - set(fields))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; known: {sorted(fields)}")
    missing = sorted(
        key
        for key, f in fields.items()
        if key not in data
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    )
    if missing:
        raise ConfigError(f"{where}: missing key(s) {missing}")
    values: dict[str, Any] = {}
    for key, value in data.items():
        f = fields[key]
        section = _section(f)
        if section is not None:
            value = build(section, {} if value is None else value, _join(path, key))
        elif isinstance(f.default, tuple) and isinstance(value, list):
            value = tuple(value)
        values[f.name] = value
    try:
        return cls(**values)
    except ConfigError as error:
        raise ConfigError(_join(path, str(error)) if path else str(error)) from None
    except (TypeError, ValueError) as error:  # a check that is not (yet) a ConfigError
        raise ConfigError(f"{where}: {error}") from None


def to_data(obj: Any) -> dict[str, Any]:
    """The plain nested data :func:`build` reads back to an equal object (tuples as lists)."""

    def plain(value: Any) -> Any:
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return to_data(value)
        if isinstance(value, tuple | list):
            return [plain(v) for v in value]
        if isinstance(value, Mapping):
            return {k: plain(v) for k, v in value.items()}
        return value

    return {_key(f): plain(getattr(obj, f.name)) for f in dataclasses.fields(obj) if f.init}
