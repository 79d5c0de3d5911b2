"""Print the reference of every parameter of a configuration environment, generated from the
configuration models (``docs/parameters.md`` is the embedded default's; a test holds it equal)::

    .venv/bin/python scripts/parameter_reference.py --env base > docs/parameters.md
"""

from __future__ import annotations

import argparse
from pathlib import Path

from kedro.config import OmegaConfigLoader

from resail_pipeline.pipelines.parameters import parameter_reference
from resail_pipeline.settings import CONFIG_LOADER_ARGS

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="base", help="configuration environment (conf/<env>)")
    args = parser.parse_args()
    conf = str(ROOT / "conf")
    loader = OmegaConfigLoader(conf, **{**CONFIG_LOADER_ARGS, "default_run_env": args.env})
    print(parameter_reference(loader["parameters"], args.env), end="")


if __name__ == "__main__":
    main()
