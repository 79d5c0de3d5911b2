"""One way to declare and check a configuration.

Every configuration of the project is a :class:`Config`: a frozen pydantic v2 model whose fields
hold their type, their range (``Field(ge=...)``), their one default and their one description
(the docstring under the field). It is validated once, when it is made, before any model or data
is loaded; every failure is a :class:`ConfigError` of one line that names the field by its path in
the configuration and says what it must be (``train.resail.rho: must be in (0, 1], got 2``).

- :func:`build` makes one from plain data (YAML, Kedro parameters), naming errors under a path;
  unknown keys are refused with the known ones listed, a section left empty in YAML (``resail:``)
  is its defaults, and YAML lists become tuples where the field is a tuple. :func:`to_data` is its
  inverse, and :meth:`Config.replace` a copy with some fields changed, validated again.
- Types are strict: ``true`` is no count, ``1.5`` no integer and ``"1"`` no number. A
  :data:`Number` keeps an integer an integer (``lr: 1`` stays ``1``), so that the plain data of a
  configuration, and every settings hash made from it, is what the YAML says.
- :func:`one_of` is a choice compared by type as well as value (``1.0`` is not ``1``).
- A field whose YAML key differs from its Python name (``lambda``, a keyword) declares it as its
  alias: ``lam: Number = Field(1.0, alias="lambda")``.

Cross-field rules are ``model_validator(mode="after")`` methods raising :class:`ConfigError` with
the field's name relative to their model (``"world_size: ..."``); the path above it is added.
"""

from __future__ import annotations

import math
import re
import types
import typing
from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeVar

import annotated_types
from pydantic import (
    AllowInfNan,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)
from pydantic_core import PydanticCustomError

__all__ = [
    "Config",
    "ConfigError",
    "FolderName",
    "Number",
    "build",
    "check_folder_name",
    "check_int",
    "check_number",
    "is_int",
    "one_of",
    "to_data",
]

T = TypeVar("T")
C = TypeVar("C", bound="Config")


class ConfigError(ValueError):
    """A configuration value is missing, unknown, of the wrong type or out of range; the message
    names the field by its path in the configuration and, where they are few, the allowed values.
    """


#: a finite number, kept as the YAML gave it: an integer stays an integer
Number = int | Annotated[float, AllowInfNan(False)]

#: a name that becomes a folder or part of one: letters, digits, ``-``, ``_`` and ``.``, not leading
_FOLDER_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,99}")
_FOLDER_RULE = (
    "must be a folder name (letters, digits, '-', '_' and '.', not leading; at most 100 characters)"
)


def _folder_name(value: Any) -> Any:
    if isinstance(value, str) and (value == "" or _FOLDER_NAME.fullmatch(value)):
        return value
    raise PydanticCustomError("folder_name", _FOLDER_RULE)


#: a safe folder name (see :data:`_FOLDER_NAME`), or ``""`` where a field allows none
FolderName = Annotated[str, BeforeValidator(_folder_name)]


def one_of(*choices: Any) -> Any:
    """The type of a field that holds one of ``choices``, compared by type as well as value, so
    that ``true`` is not ``1`` and ``1.0`` is not ``1``."""

    def exact(value: Any) -> Any:
        if any(value == c and type(value) is type(c) for c in choices):
            return value
        raise PydanticCustomError("choice", "must be one of {choices}", {"choices": list(choices)})

    return Annotated[Literal[choices], BeforeValidator(exact)]


def is_int(value: Any) -> bool:
    """An integer that is not a bool (YAML's ``true`` is not a count)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _int_rule(low: int | None, high: int | None = None, optional: bool = False) -> str:
    if high is not None:
        wanted = f"an integer in [{'' if low is None else low}, {high}]"
    else:
        wanted = {1: "a positive integer", 0: "a non-negative integer"}.get(
            low, "an integer" if low is None else f"an integer >= {low}"
        )
    return f"must be {wanted}{' or null' if optional else ''}"


def check_int(name: str, value: Any, *, low: int | None = None, optional: bool = False) -> None:
    """``value`` is an integer ``>= low`` (or ``None`` when ``optional``): for a function's
    argument that is no configuration field."""
    if (optional and value is None) or (is_int(value) and (low is None or value >= low)):
        return
    raise ConfigError(f"{name}: {_int_rule(low, optional=optional)}, got {value!r}")


def check_number(
    name: str,
    value: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
) -> None:
    """``value`` is a finite number within the bounds given (closed unless ``*_open``): for a
    function's argument that is no configuration field."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"{name}: must be a finite number, got {value!r}")
    below = low is not None and (value <= low if low_open else value < low)
    above = high is not None and (value >= high if high_open else value > high)
    if below or above:
        bounds = {("gt" if low_open else "ge"): low, ("lt" if high_open else "le"): high}
        rule = _number_rule({k: v for k, v in bounds.items() if v is not None})
        raise ConfigError(f"{name}: {rule}, got {value!r}")


def check_folder_name(value: object, field: str, *, empty: bool = False) -> str:
    """``value`` if it is a safe folder name (``""`` where ``empty``), else a :class:`ConfigError`
    naming ``field``: ``..``, ``/`` or a leading dot would leave the folder."""
    if isinstance(value, str) and (_FOLDER_NAME.fullmatch(value) or (empty and value == "")):
        return value
    raise ConfigError(f"{field}: {_FOLDER_RULE}, got {value!r}")


def flatten(settings: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested settings as one level of dotted keys: ``{"a": {"b": 1}, "c.d": 2}`` ->
    ``{"a.b": 1, "c.d": 2}``."""
    out: dict[str, Any] = {}
    for key, value in settings.items():
        if isinstance(value, Mapping):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


# ----------------------------------------------------------------------------------------------
# the models


def _config_in(annotation: Any) -> type[Config] | None:
    """The configuration class ``annotation`` holds (``X`` or ``X | None``), if any."""
    if isinstance(annotation, type) and issubclass(annotation, Config):
        return annotation
    if typing.get_origin(annotation) not in (typing.Union, types.UnionType):
        return None  # a container of sections (``dict[str, X]``) is a value, not a section
    for arg in typing.get_args(annotation):
        if isinstance(arg, type) and issubclass(arg, Config):
            return arg
    return None


def _is_tuple(annotation: Any) -> bool:
    origin = typing.get_origin(annotation)
    if origin is tuple:
        return True
    if origin in (typing.Union, types.UnionType, Annotated):
        return any(_is_tuple(arg) for arg in typing.get_args(annotation))
    return False


def _as_tuples(value: Any) -> Any:
    """YAML's lists, nested ones too, as tuples (a strict tuple field reads no list)."""
    return tuple(_as_tuples(v) for v in value) if isinstance(value, list) else value


class Config(BaseModel):
    """A configuration section: frozen, strict, closed to unknown keys; validated when made.

    Making one directly (``TrainConfig(method="oel")``) raises :class:`ConfigError` as
    :func:`build` does, with field names relative to the class.
    """

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        strict=True,
        validate_by_name=True,
        validate_by_alias=True,
        use_attribute_docstrings=True,
        arbitrary_types_allowed=True,
    )

    def __init__(self, /, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as error:
            raise ConfigError(explain(error, type(self))) from None

    # pydantic calls a model's own __init__ when it validates the model as a section of another,
    # unless the __init__ says it is the base one: this one only translates the error, which the
    # outer model's validation does with the section's path
    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]

    @model_validator(mode="before")
    @classmethod
    def _from_yaml(cls, data: Any) -> Any:
        """An empty section (``resail:`` in YAML) is its defaults; lists are tuples where the
        field is a tuple."""
        if not isinstance(data, Mapping):
            return data
        out = dict(data)
        for name, info in cls.model_fields.items():
            for key in {name, info.alias or name}:
                if key not in out:
                    continue
                if out[key] is None and _config_in(info.annotation) is not None:
                    if type(None) not in typing.get_args(info.annotation):
                        out[key] = {}
                elif isinstance(out[key], list) and _is_tuple(info.annotation):
                    out[key] = _as_tuples(out[key])
        return out

    def replace(self: C, **changes: Any) -> C:
        """A copy with ``changes`` (by field name), validated as a new configuration."""
        return type(self)(**{**dict(self), **changes})


def build(cls: type[C], data: Any, path: str = "") -> C:
    """``cls`` from plain nested data; every error is a :class:`ConfigError` naming its path.

    ``path`` is where ``data`` sits in the configuration (``"train"``), the prefix of every
    message; an instance of ``cls`` is returned as it is.
    """
    if isinstance(data, cls):
        return data
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path or cls.__name__}: expected a mapping, got {data!r}")
    try:
        return cls.model_validate(dict(data), by_alias=True, by_name=False)
    except ValidationError as error:
        raise ConfigError(explain(error, cls, path)) from None


def to_data(config: Config) -> dict[str, Any]:
    """The plain nested data, by YAML key, that :func:`build` reads back to an equal object
    (tuples as lists)."""

    def plain(value: Any) -> Any:
        if isinstance(value, tuple | list):
            return [plain(v) for v in value]
        if isinstance(value, Mapping):
            return {k: plain(v) for k, v in value.items()}
        return value

    return plain(config.model_dump(by_alias=True))


# ----------------------------------------------------------------------------------------------
# one line per failure


def _field(model: type[Config], key: str) -> tuple[str, Any, list[Any]] | None:
    """``model``'s field read from ``key`` (its name or alias): its YAML key, annotation and
    constraints. (Not joined into one ``Annotated``: typing caches those by equality, which would
    give ``Gt(0)`` the ``Gt(0.0)`` of another field.)"""
    for name, info in model.model_fields.items():
        if key in (name, info.alias):
            return info.alias or name, info.annotation, list(info.metadata)
    return None


def _item(annotation: Any, index: int) -> Any:
    """The annotation of item ``index`` of a tuple ``annotation`` (``X | None`` looked through)."""
    for candidate in (annotation, *typing.get_args(annotation)):
        while typing.get_origin(candidate) is Annotated:
            candidate = typing.get_args(candidate)[0]
        if typing.get_origin(candidate) is tuple:
            args = typing.get_args(candidate)
            return (
                args[0]
                if len(args) == 2 and args[1] is Ellipsis
                else args[min(index, len(args) - 1)]
            )
    return None


class _Target(typing.NamedTuple):
    """What a failure's ``loc`` points at."""

    names: list[str]  # its path: YAML keys, ``betas[0]`` for an item
    annotation: Any  # its type (None for an unknown key)
    constraints: list[Any]  # the field's metadata (``Gt``, ``Le``, ...)
    model: type[Config] | None  # the model it is (or, for an unknown key, belongs to)


def _locate(cls: type[Config], loc: tuple[Any, ...]) -> _Target:
    names: list[str] = []
    annotation: Any = cls
    constraints: list[Any] = []
    for part in loc:
        model = _config_in(annotation)
        if isinstance(part, int):
            names[-1:] = [f"{names[-1] if names else ''}[{part}]"]
            annotation, constraints = _item(annotation, part), []
        elif model is not None:
            found = _field(model, str(part))
            if found is None:  # an unknown key
                return _Target([*names, str(part)], None, [], model)
            key, annotation, constraints = found
            names.append(key)
        # else: the tag of a union member or a validator (``int``, ``function-before[...]``)
    return _Target(names, annotation, constraints, _config_in(annotation))


def _bounds(annotation: Any, constraints: list[Any]) -> dict[str, Any]:
    """The ``ge``/``gt``/``le``/``lt``/``min_length`` constraints of a field (``constraints``)
    or of a tuple's item (``Annotated`` in ``annotation``)."""
    found: dict[str, Any] = {}
    items = list(constraints)
    types_ = [annotation]
    while types_:  # Annotated and unions looked through, not Literal's choices
        current = types_.pop()
        origin = typing.get_origin(current)
        if origin is Annotated:
            base, *metadata = typing.get_args(current)
            types_.append(base)
            items += metadata
        elif origin in (typing.Union, types.UnionType):
            types_ += typing.get_args(current)
    while items:
        item = items.pop()
        for bound in ("ge", "gt", "le", "lt", "min_length"):
            if isinstance(item, annotated_types.BaseMetadata) and hasattr(item, bound):
                found.setdefault(bound, getattr(item, bound))
        items += getattr(item, "metadata", ())  # a Field(...) inside Annotated
    return found


def _kinds(annotation: Any) -> set[Any]:
    """The plain types ``annotation`` admits (Annotated and unions looked through)."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _kinds(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return set().union(*(_kinds(arg) for arg in typing.get_args(annotation)))
    if origin is Literal:
        return {Literal}
    return {origin or annotation}


def _literals(annotation: Any) -> list[Any]:
    """The choices of the ``Literal`` types in ``annotation``."""
    origin = typing.get_origin(annotation)
    if origin is Literal:
        return list(typing.get_args(annotation))
    if origin in (Annotated, typing.Union, types.UnionType):
        args = typing.get_args(annotation)
        return [c for arg in (args[:1] if origin is Annotated else args) for c in _literals(arg)]
    return []


def _number_rule(bounds: dict[str, Any]) -> str:
    low = bounds.get("ge", bounds.get("gt"))
    high = bounds.get("le", bounds.get("lt"))
    if low is not None and high is not None:
        left = "(" if "gt" in bounds else "["
        right = ")" if "lt" in bounds else "]"
        return f"must be in {left}{low}, {high}{right}"
    if low is not None:
        return f"must be {'>' if 'gt' in bounds else '>='} {low}"
    return f"must be {'<' if 'lt' in bounds else '<='} {high}"


def _rule(error: Mapping[str, Any], annotation: Any, constraints: list[Any]) -> str:
    """What a field of ``annotation`` must be, in the words of every configuration message."""
    kind = error["type"]
    if kind == "choice":
        return f"must be one of {error['ctx']['choices']}"
    if kind == "folder_name":
        return _FOLDER_RULE
    kinds = _kinds(annotation) if annotation is not None else set()
    bounds = _bounds(annotation, constraints)
    optional = type(None) in kinds
    kinds.discard(type(None))
    if bool in kinds and kinds <= {bool, Literal}:
        words = ["true", "false", *map(repr, _literals(annotation))] + ["null"] * optional
        return f"must be {', '.join(words[:-1])} or {words[-1]}"
    if int in kinds and kinds <= {int, Literal}:
        low = bounds.get("ge", bounds["gt"] + 1 if "gt" in bounds else None)
        high = bounds.get("le", bounds["lt"] - 1 if "lt" in bounds else None)
        rule = _int_rule(low, high, optional)
        others = " or ".join(repr(c) for c in _literals(annotation))
        return f"{rule} or {others}" if others else rule
    if float in kinds and kinds <= {int, float}:
        bounded = kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal")
        return _number_rule(bounds) if bounded else "must be a finite number"
    if kinds == {str}:
        wanted = "a non-empty string" if bounds.get("min_length") else "a string"
        return f"must be {wanted}{' or null' if optional else ''}"
    if kinds == {tuple}:
        return "must be a list"
    message = str(error["msg"])
    return (
        "must be " + message.removeprefix("Input should be ")
        if message.startswith("Input should be ")
        else message[:1].lower() + message[1:]
    )


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path and name else path or name


def explain(error: ValidationError, cls: type[Config], path: str = "") -> str:
    """One line for the first failure of ``error``, raised validating ``cls`` at ``path``."""
    errors = error.errors(include_url=False)
    first, kind = errors[0], errors[0]["type"]
    target = _locate(cls, tuple(first["loc"]))
    if kind in ("extra_forbidden", "missing"):
        parent = tuple(first["loc"][:-1])
        keys = sorted(
            str(e["loc"][-1])
            for e in errors
            if e["type"] == kind and tuple(e["loc"][:-1]) == parent
        )
        where = _join(path, ".".join(target.names[:-1])) or cls.__name__
        if kind == "missing":
            return f"{where}: missing key(s) {keys}"
        model = target.model or cls
        known = sorted(info.alias or name for name, info in model.model_fields.items())
        return f"{where}: unknown key(s) {keys}; known: {known}"
    where = _join(path, ".".join(target.names)) or cls.__name__
    if kind in ("value_error", "assertion_error"):
        cause = first.get("ctx", {}).get("error", first["msg"])
        return _join(_join(path, ".".join(target.names)), str(cause))
    if kind in ("model_type", "model_attributes_type", "dict_type") and target.model is not None:
        return f"{where}: expected a mapping, got {first['input']!r}"
    rule = _rule(first, target.annotation, target.constraints)
    return f"{where}: {rule}, got {first['input']!r}"


__all__ += ["Field", "explain", "model_validator"]


# ----------------------------------------------------------------------------------------------
# documentation


class FieldDoc(typing.NamedTuple):
    """One field of a configuration, as its reference table shows it."""

    key: str  # its YAML path under the model, ``resail.lambda``
    kind: str  # its type in words: ``integer >= 1``, ``one of top, bottom``, ...
    default: Any  # its default (plain data)
    description: str  # the docstring under the field, on one line


def _kind(annotation: Any, constraints: list[Any]) -> str:
    """``annotation`` and its constraints in the words of a reference table."""
    kinds = _kinds(annotation)
    optional = type(None) in kinds
    kinds.discard(type(None))
    bounds = _bounds(annotation, constraints)
    null = " or null" if optional else ""
    limits = ", ".join(
        f"{sign} {bounds[bound]}"
        for bound, sign in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<="))
        if bound in bounds
    )
    integer = f"integer {limits}".strip()
    if Literal in kinds:
        words = ["true", "false"] * (bool in kinds) + [str(c) for c in _literals(annotation)]
        if int in kinds:
            return f"{integer} or {', '.join(words)}{null}"
        return f"one of {', '.join(words)}{null}"
    if kinds == {bool}:
        return f"true or false{null}"
    if kinds == {int}:
        return f"{integer}{null}"
    if float in kinds and kinds <= {int, float}:
        return f"{f'number {limits}'.strip()}{null}"
    if kinds == {str}:
        if _is_folder_name(annotation) or any(
            getattr(item, "func", None) is _folder_name for item in constraints
        ):
            return f"folder name{null}"
        return f"{'non-empty ' if bounds.get('min_length') else ''}text{null}"
    if kinds == {tuple}:
        return f"list{null}"
    if kinds == {dict}:
        return f"mapping{null}"
    return " or ".join(sorted(getattr(k, "__name__", str(k)) for k in kinds)) + null


def _is_folder_name(annotation: Any) -> bool:
    """Whether ``annotation`` is (or holds) :data:`FolderName`."""
    if typing.get_origin(annotation) is Annotated:
        return any(getattr(m, "func", None) is _folder_name for m in typing.get_args(annotation))
    return any(_is_folder_name(arg) for arg in typing.get_args(annotation))


def field_docs(model: type[Config], prefix: str = "") -> list[FieldDoc]:
    """Every field of ``model``, sections expanded, in declaration order: the rows of its
    reference table (``prefix``: the path above, ``train``)."""
    rows: list[FieldDoc] = []
    defaults = to_data(model.model_construct())
    for name, info in model.model_fields.items():
        key = _join(prefix, info.alias or name)
        section = _config_in(info.annotation)
        if section is not None and info.default is not None:
            rows += field_docs(section, key)
            continue
        description = " ".join((info.description or "").split())
        kind = _kind(info.annotation, list(info.metadata))
        rows.append(FieldDoc(key, kind, defaults.get(info.alias or name), description))
    return rows
