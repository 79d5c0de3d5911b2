"""The data contracts check the kind of every column's values, not only the column names."""

from __future__ import annotations

import pandas as pd
import pytest

from resail_pipeline.experience.evidence import build_evidence_table
from resail_pipeline.schemas import SCHEMAS, SchemaError, check_columns

from ._episodes import TEXTCRAFT_FAILURE, TEXTCRAFT_SUCCESS, tables


def test_a_success_column_of_strings_is_an_error_not_a_success():
    """Strings "True"/"False" once made every failed trajectory be summarised as a success."""
    trajectories, steps = tables(TEXTCRAFT_SUCCESS, TEXTCRAFT_FAILURE)
    check_columns(trajectories, "trajectories")
    as_strings = trajectories.assign(success=trajectories["success"].map(str))
    with pytest.raises(SchemaError, match="'success' of the trajectories table must hold bool"):
        build_evidence_table(as_strings, steps)


@pytest.mark.parametrize(
    ("schema", "column", "values", "message"),
    [
        ("steps", "t", ["0", "1"], "'t' of the steps table must hold int values, found dtype"),
        ("summaries", "accepted", ["yes", "no"], "must hold bool values"),
        (
            "eval_summary",
            "mean",
            ["0.5", "0.4"],
            "'mean' of the eval_summary table must hold float",
        ),
        ("responses", "token_ids", ["1 2", "3"], "must hold list values, found a str value '1 2'"),
        ("steps", "prompt", ["p", None], "must hold str values, found a float value nan"),
    ],
)
def test_a_mistyped_column_is_named(schema, column, values, message):
    frame = pd.DataFrame({c: _valid(kind, 2) for c, kind in SCHEMAS[schema].items()})
    check_columns(frame, schema, source="ok")
    with pytest.raises(SchemaError, match=message) as error:
        check_columns(frame.assign(**{column: values}), schema, source="data/x.parquet")
    assert str(error.value).startswith("data/x.parquet: column")


def test_nulls_only_where_the_contract_allows_them_and_no_rows_no_types():
    frame = pd.DataFrame({c: _valid(kind, 2) for c, kind in SCHEMAS["steps"].items()})
    check_columns(frame.assign(admissible_actions=[None, ["look"]], action=[None, ""]), "steps")
    check_columns(pd.DataFrame(columns=list(SCHEMAS["steps"])), "steps")  # empty: no values


def _valid(kind: str, n: int) -> list:
    """``n`` values of ``kind``."""
    sample = {"bool": True, "int": 1, "float": 0.5, "str": "x", "list": [1, 2]}
    return [sample[kind.rstrip("?")]] * n
