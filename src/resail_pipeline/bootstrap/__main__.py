"""Build the initial policy from a parameters file, outside Kedro (the same library calls).

    python -m resail_pipeline.bootstrap build --params reference/textcraft-initial.yml \\
        --out data/06_models/bootstrap

The file holds one top-level ``bootstrap:`` mapping, as ``parameters_bootstrap.yml`` does. The
policy is published to ``<out>/policy``; rerunning the command resumes an interrupted build and
returns at once when the policy is up to date.
"""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
from pathlib import Path

import yaml

from resail_pipeline.bootstrap.build import build_initial_policy
from resail_pipeline.bootstrap.config import BootstrapConfig


def load_config(path: str | Path) -> BootstrapConfig:
    """The ``bootstrap`` mapping of a YAML parameters file as a config."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"params: {path} does not exist")
    params = yaml.safe_load(path.read_text()) or {}
    if "bootstrap" not in params:
        raise ValueError(f"params: {path} has no top-level 'bootstrap' mapping")
    return BootstrapConfig.from_dict(params["bootstrap"])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m resail_pipeline.bootstrap")
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("build", help="build (or resume, or reuse) the initial policy")
    build.add_argument("--params", required=True, help="YAML file with a 'bootstrap' mapping")
    build.add_argument("--out", required=True, help="output directory (policy in <out>/policy)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    config = load_config(args.params)
    argv = sys.argv[1:] if argv is None else argv
    command = shlex.join(["python", "-m", "resail_pipeline.bootstrap", *argv])
    info = build_initial_policy(config, args.out, command=command)
    logging.getLogger(__name__).info("initial policy %s at %s", info.policy_id, info.path)


if __name__ == "__main__":
    main()
