"""Namespacing shared by the pipelines: a cycle's datasets live under ``cycle_<r>``.

Every pipeline folder defines ``base_pipeline()`` over un-namespaced names (``policy``,
``trajectories``, ``steps``, ...). ``in_cycle`` places it in cycle ``r``: its datasets become
``cycle_<r>.<name>``, the input ``policy`` is the previous cycle's ``cycle_<r-1>.checkpoint``
and parameters stay shared (``params:collect`` is the same for every cycle).
"""

from __future__ import annotations

from kedro.pipeline import Pipeline

#: The input name under which every base pipeline receives the cycle-start policy.
POLICY = "policy"


def cycle_namespace(cycle: int) -> str:
    return f"cycle_{cycle}"


def in_cycle(base: Pipeline, cycle: int, inputs: dict[str, str] | None = None) -> Pipeline:
    """``base`` namespaced for cycle ``cycle``; ``policy`` maps to the previous cycle's checkpoint."""
    free_inputs = base.inputs()
    mapped = {name: target for name, target in (inputs or {}).items() if name in free_inputs}
    if POLICY in free_inputs:
        mapped.setdefault(POLICY, f"{cycle_namespace(cycle - 1)}.checkpoint")
    params = {name for name in base.all_inputs() if name.startswith("params:")}
    return Pipeline(
        base,
        namespace=cycle_namespace(cycle),
        inputs=mapped or None,
        parameters=params or None,
    )
