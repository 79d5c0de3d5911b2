"""The import graph: no module of the package imports itself through others, and the pipelines
and the trainer load none of the initial-policy builder when imported.

The layers (the library never imports the Kedro layer, nor Kedro) are import-linter's contracts in
pyproject.toml (``lint-imports``, run by ``make test``). Its contracts see packages as wholes, so
the cycles between single modules are checked here, on the graph it builds (grimp).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grimp
import pytest

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"

BUILDER = "resail_pipeline.bootstrap.build"


def _loaded_after_importing(packages: list[str]) -> set[str]:
    """The modules loaded, in a fresh interpreter, by importing every module of ``packages``."""
    code = f"""
import importlib, pkgutil, sys
for name in {packages!r}:
    package = importlib.import_module(name)
    for info in pkgutil.walk_packages(getattr(package, "__path__", []), name + "."):
        if not info.name.endswith("__main__"):
            importlib.import_module(info.name)
print("\\n".join(sorted(sys.modules)))
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    return set(out.split())


def test_the_pipelines_and_the_trainer_do_not_import_the_builder():
    """At import time: the builder is imported inside the function that builds (a static contract
    would see that import too)."""
    loaded = _loaded_after_importing(
        [
            "resail_pipeline.pipelines",
            "resail_pipeline.training",
            "resail_pipeline.hooks",
            "resail_pipeline.settings",
            "resail_pipeline.pipeline_registry",
            "resail_pipeline.initial_policy",
        ]
    )
    assert "resail_pipeline.pipelines.cycle.pipeline" in loaded  # the walk did import them
    builder = sorted(m for m in loaded if m.startswith("resail_pipeline.bootstrap."))
    # the configuration, and the table of what a build covers that checks it
    assert builder == ["resail_pipeline.bootstrap.config", "resail_pipeline.bootstrap.environments"]


def test_no_module_imports_itself_through_others():
    """Every import counts, those under ``TYPE_CHECKING`` and inside functions included."""
    graph = grimp.build_graph("resail_pipeline", cache_dir=None)
    cycles = {
        tuple(sorted(chain))
        for module in graph.modules
        for imported in graph.find_modules_directly_imported_by(module)
        if (chain := graph.find_shortest_chain(importer=imported, imported=module))
    }
    assert not cycles, f"import cycles: {sorted(cycles)}"


def test_the_no_kedro_contract_covers_every_library_module():
    """The library layer of the (exhaustive) layers contract is the no-Kedro contract's sources."""
    tomllib = pytest.importorskip("tomllib")
    contracts = {
        c["id"]: c
        for c in tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]["contracts"]
    }
    library = {
        f"resail_pipeline.{m.strip()}" for m in contracts["kedro-layer"]["layers"][1].split(":")
    }
    assert set(contracts["library-no-kedro"]["source_modules"]) == library
