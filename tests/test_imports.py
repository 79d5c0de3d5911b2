"""The import graph: the pipelines and the trainer load none of the initial-policy builder, and
library code never imports Kedro."""

from __future__ import annotations

import subprocess
import sys

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


def test_library_code_never_imports_kedro():
    library = [
        "resail_pipeline.training",
        "resail_pipeline.generation",
        "resail_pipeline.objectives",
        "resail_pipeline.experience",
        "resail_pipeline.evaluation",
        "resail_pipeline.initial_policy",
        "resail_pipeline.study",
        "resail_pipeline.collection",
        "resail_pipeline.rollout",
        "resail_pipeline.prompt_budget",
        "resail_pipeline.schemas",
        "resail_pipeline.config",
        "resail_pipeline.checkpoints",
        "resail_pipeline.io",
    ]
    assert not any(m == "kedro" or m.startswith("kedro.") for m in _loaded_after_importing(library))


def test_the_dataset_layer_does_not_import_the_report():
    loaded = _loaded_after_importing(["resail_pipeline.datasets"])
    assert "resail_pipeline.datasets.collections" in loaded
    assert not any(m.startswith("resail_pipeline.evaluation.report") for m in loaded)
