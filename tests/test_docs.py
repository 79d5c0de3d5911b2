"""Every command of README.md and docs/, as written.

The cheap ones run. The others take hours or a GPU cluster, and are checked as far as they go
without them: a ``kedro run`` is parsed by Kedro's own ``run`` command and its parameters (its
``--env`` and ``--params`` merged by the project's config loader) pass the checks every run makes
before its first node; a ``make`` target dry-runs; a ``python -m`` entry point and subcommand
answer ``--help``; ``scripts/gpu_check.sh`` (it needs a GPU) parses and its options pass their
checks. Commands of the machine's own set-up (``pip``, ``export``,
``torchrun``) are listed, so that a new kind of command must be classified here.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: commands that set up a machine or launch outside this project's entry points
NOT_RUN = ("pip ", "export ", "torchrun ")
#: the start of an inline code span that is a command
INLINE = re.compile(r"`((?:python -m resail_pipeline|kedro run|make )[^`]*)`")
ENV = {**os.environ, "KEDRO_DISABLE_TELEMETRY": "true"}


def _fenced(text: str) -> list[str]:
    commands = []
    for block in re.findall(r"```(?:bash|sh)\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            command = re.split(r"\s+#\s", line, maxsplit=1)[0].strip()
            if command:
                commands.append(" ".join(command.split()))
    return commands


def documented_commands() -> list[tuple[str, str]]:
    """``(file, command)`` of every command, fenced or inline, in order, without duplicates."""
    found: dict[tuple[str, str], None] = {}
    for path in DOCS:
        text = path.read_text()
        inline = [" ".join(m.split()) for m in INLINE.findall(text)]
        for command in _fenced(text) + inline:
            found[(path.name, command)] = None
    return list(found)


COMMANDS = documented_commands()


def test_the_docs_have_commands():
    assert ("README.md", "make run") in COMMANDS and ("README.md", "make test") in COMMANDS
    assert any(c.startswith("kedro run --env paper") for _, c in COMMANDS)


def _kedro_parameters(args: list[str]) -> None:
    """What ``kedro run <args>`` checks before its first node, without running a node."""
    from kedro.framework.cli.project import run
    from kedro.framework.session import KedroSession
    from kedro.framework.startup import bootstrap_project

    from resail_pipeline.pipelines.parameters import check_parameters

    context = run.make_context("run", list(args))  # Kedro's own option parsing
    bootstrap_project(ROOT)
    with KedroSession.create(
        project_path=ROOT, env=context.params["env"], runtime_params=context.params["params"]
    ) as session:
        params = session.load_context().config_loader["parameters"]
    check_parameters(params)


@pytest.mark.parametrize(("doc", "command"), COMMANDS, ids=[f"{d}: {c}" for d, c in COMMANDS])
def test_documented_command(doc, command, tmp_path, monkeypatch):
    words = shlex.split(command)
    if command.startswith(NOT_RUN):
        return  # the machine's set-up, not this project's
    if words[:3] == ["python", "-m", "resail_pipeline.envs.alfworld_games"]:
        if importlib.util.find_spec("alfworld") is None:
            pytest.skip("the alfworld extra is not installed")
        done = subprocess.run(
            [sys.executable, *words[1:]], cwd=tmp_path, capture_output=True, text=True, env=ENV
        )
        assert done.returncode == 0, done.stderr
        from resail_pipeline.envs.alfworld import SPLITS

        per_split = int(words[words.index("--n") + 1])
        written = list(tmp_path.glob("data/01_raw/alfworld_games/**/game.tw-pddl"))
        assert len(written) == per_split * len(SPLITS)
    elif words[:2] == ["python", "-m"]:  # hours of work: the entry point and subcommand answer
        head = words[1:]
        for i, word in enumerate(head[2:], start=2):
            if word.startswith(("-", "<")):
                head = head[:i]
                break
        done = subprocess.run(
            [sys.executable, *head, "--help"], capture_output=True, text=True, env=ENV
        )
        assert done.returncode == 0, done.stderr
    elif words[0] == "make":
        done = subprocess.run(["make", "-n", *words[1:]], cwd=ROOT, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    elif words[:2] == ["kedro", "run"]:
        monkeypatch.chdir(ROOT)
        _kedro_parameters(words[2:])
    elif words[0] == "scripts/gpu_check.sh":  # needs a GPU: the script parses, its options check
        from gpu_check import parse_args

        done = subprocess.run(["bash", "-n", words[0]], cwd=ROOT, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        args = words[1:]
        if "--wheels" in args:  # the script's own option
            del args[args.index("--wheels") : args.index("--wheels") + 2]
        parse_args(args)
    else:
        pytest.fail(f"{doc}: no check for `{command}`; run it here or say why it cannot run")


def _base_parameters() -> dict:
    from kedro.config import OmegaConfigLoader

    from resail_pipeline.settings import CONFIG_LOADER_ARGS

    loader = OmegaConfigLoader(
        str(ROOT / "conf"), **{**CONFIG_LOADER_ARGS, "default_run_env": "base"}
    )
    return loader["parameters"]


def test_the_parameter_reference_is_what_the_models_say():
    """docs/parameters.md is generated from the configuration models and conf/base: a field, a
    default or a description changed in one is changed in the page, or this fails."""
    from resail_pipeline.pipelines.parameters import parameter_reference

    expected = parameter_reference(_base_parameters(), "base")
    assert (ROOT / "docs" / "parameters.md").read_text() == expected, (
        "docs/parameters.md is stale: .venv/bin/python scripts/parameter_reference.py --env base "
        "> docs/parameters.md"
    )


def test_the_readme_parameter_table_shows_what_conf_base_sets():
    """Every row of README's parameter table: the value in its default column is what conf/base
    resolves the key(s) to (``a`` x ``b`` for two keys of one section)."""
    from resail_pipeline.pipelines.parameters import _value

    params = _base_parameters()
    text = (ROOT / "README.md").read_text()
    table = text[text.index("| option | default | meaning |") :].split("\n\n")[0]
    rows = [line.split(" | ") for line in table.splitlines()[2:]]
    assert len(rows) >= 10
    for option, default, _ in rows:
        keys = re.findall(r"`([^`]+)`", option)
        parent = keys[0].rsplit(".", 1)[0]
        shown = default.replace("`", "").split(" x ")
        assert len(shown) == len(keys), option
        for key, cell in zip([keys[0], *(f"{parent}.{k}" for k in keys[1:])], shown, strict=True):
            value = params
            for part in key.split("."):
                value = value[part]
            if isinstance(value, int | float) and not isinstance(value, bool):
                assert float(cell) == value, key
            else:
                assert cell == _value(value), key
