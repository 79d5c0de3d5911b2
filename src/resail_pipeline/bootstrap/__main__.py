"""Build, evaluate and ship the initial policy outside Kedro (the same library calls).

    # build (or resume, or reuse) the policy of a recipe (overrides of
    # conf/base/parameters_bootstrap.yml) into <out>/policy
    python -m resail_pipeline.bootstrap build --params reference/textcraft-chain/03-drills.yml \\
        --out data/06_models/textcraft-chain/03-drills
    # dual-view evaluation (appendix D.2) on the test tasks of the policy's environment (TextCraft:
    # the 100 of test; ALFWorld: 256 of id and 256 of ood) x 3 seeds, kept in its manifest
    python -m resail_pipeline.bootstrap evaluate --policy data/06_models/textcraft-chain/03-drills/policy
    # ... keeping every episode and the fixed Experience as Parquet in <dir>; an evaluation
    # interrupted anywhere resumes when started again (its journal: --journal)
    python -m resail_pipeline.bootstrap evaluate --policy <policy> --results <dir>
    # copy it into the repository, with the manifests of the stages it continues
    python -m resail_pipeline.bootstrap ship --policy data/06_models/textcraft-chain/03-drills/policy \\
        --to reference/textcraft-initial
    # teacher-forced: does the policy follow a summary's corrected plan? (about a minute)
    python -m resail_pipeline.bootstrap guidance --policy reference/textcraft-initial --split test

``make reference`` runs the whole chain of the shipped policy (docs/initial-policy.md).
A recipe holds one top-level ``bootstrap:`` mapping, the keys it changes from ``--base``, and may
hold ``run: {env_options: ...}``, the environment adapter's options as a run gives them (e.g.
TextCraft's ``clone_tasks``, which clones on tasks set apart from the cycles'), and ``extends:``,
another recipe (a path relative to it) whose keys it changes in turn
(``reference/textcraft-clone-chain/``). Its ``env`` says where the policy acts
(``reference/alfworld-chain/`` builds one for ALFWorld, whose games are those of
``ALFWORLD_DATA``, else the generated default set in ``data/01_raw/alfworld_games/<settings>``,
written on first use; docs/environments.md). A configuration that cannot be used is one line on
stderr and exit status 2.
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
from resail_pipeline.bootstrap.demonstrations import RESPONSE_MAX_NEW_TOKENS
from resail_pipeline.bootstrap.diagnostics import guidance_use
from resail_pipeline.bootstrap.reference import evaluate_and_record, policy_env, ship
from resail_pipeline.checkpoints import CheckpointError, load_policy
from resail_pipeline.config import ConfigError
from resail_pipeline.envs import check_env_options, evaluation_splits, make_env
from resail_pipeline.evaluation.evaluate import EvalConfig, spread
from resail_pipeline.generation.transformers_backend import DTYPES

logger = logging.getLogger(__name__)


#: the parameters a recipe overrides (``--base``); ``build_dir`` is the Kedro node's, not a recipe's
BASE_PARAMS = Path("conf/base/parameters_bootstrap.yml")

#: where ``evaluate`` keeps the episodes of an evaluation not yet recorded (``--journal``)
EVALUATION_JOURNALS = Path("data/06_models/.staging/bootstrap-evaluate")


def load_recipe(path: str | Path, _from: tuple[Path, ...] = ()) -> dict:
    """The YAML mapping of the recipe ``path``, laid over that of the recipe it ``extends`` (a
    path relative to it; that one's own ``extends`` first), mappings merged key by key."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"params: {path} does not exist")
    params = yaml.safe_load(path.read_text()) or {}
    if not isinstance(params, dict):
        raise ConfigError(f"params: {path} is not a mapping")
    parent = params.pop("extends", None)
    if parent is None:
        return params
    parent, chain = (path.parent / str(parent)).resolve(), (*_from, path.resolve())
    if parent in chain:
        raise ConfigError(f"params: {path}: extends: {parent} extends it in turn")
    return _overlay(load_recipe(parent, chain), params)


def _bootstrap_mapping(path: Path) -> dict:
    params = load_recipe(path)
    if not isinstance(params.get("bootstrap"), dict):
        raise ConfigError(f"params: {path} has no top-level 'bootstrap' mapping")
    return params["bootstrap"]


def _overlay(base: dict, override: dict) -> dict:
    """``base`` with ``override``'s keys replaced, mappings merged key by key."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            value = _overlay(out[key], value)
        out[key] = value
    return out


def load_env_options(path: str | Path, env: str) -> dict:
    """The recipe's ``run.env_options`` (the adapter's options, as a run's; none: ``{}``),
    checked against ``env``'s adapter."""
    options = (load_recipe(path).get("run") or {}).get("env_options") or {}
    if not isinstance(options, dict):
        raise ConfigError(f"{path}: run.env_options: expected a mapping, got {options!r}")
    check_env_options(env, options, source=f"{path}: run.env_options")
    return options


def load_config(path: str | Path, base: str | Path | None = BASE_PARAMS) -> BootstrapConfig:
    """The ``bootstrap`` mapping of the YAML file ``path``, laid over that of ``base`` (the
    project's defaults; ``None``: the dataclass defaults alone), as a config."""
    params = _bootstrap_mapping(Path(path))
    if base is not None:
        params = _overlay(_bootstrap_mapping(Path(base)), params)
    params.pop("build_dir", None)
    try:
        return BootstrapConfig.from_dict(params)
    except ConfigError as error:
        raise ConfigError(f"{path}: {error}") from None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m resail_pipeline.bootstrap")
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("build", help="build (or resume, or reuse) the initial policy")
    build.add_argument(
        "--params", required=True, help="YAML file with a 'bootstrap' mapping: overrides of --base"
    )
    build.add_argument(
        "--base", default=str(BASE_PARAMS), help="the parameters it overrides (%(default)s)"
    )
    build.add_argument("--out", required=True, help="output directory (policy in <out>/policy)")
    copy = commands.add_parser("ship", help="copy a built policy into the repository")
    copy.add_argument("--policy", required=True, help="the built policy directory")
    copy.add_argument("--to", required=True, help="destination, e.g. reference/textcraft-initial")
    evaluate = commands.add_parser("evaluate", help="dual-view evaluation, kept in the manifest")
    evaluate.add_argument("--policy", required=True, help="the policy directory")
    evaluate.add_argument(
        "--env",
        default=None,
        help="the environment to evaluate in (default: the one the policy's manifest names)",
    )
    evaluate.add_argument(
        "--splits",
        nargs="+",
        default=None,
        help="the splits to evaluate on (default: the environment's evaluation splits)",
    )
    evaluate.add_argument(
        "--tasks",
        type=int,
        default=None,
        help="N tasks of each evaluation split, evenly spaced over it (all)",
    )
    evaluate.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    evaluate.add_argument("--reference-seed", type=int, default=1000)
    evaluate.add_argument("--temperature", type=float, default=0.4)
    evaluate.add_argument("--max-new-tokens", type=int, default=RESPONSE_MAX_NEW_TOKENS)
    evaluate.add_argument(
        "--dtype",
        choices=sorted(DTYPES),
        default="auto",
        help="generation precision (auto: bf16 where the machine multiplies faster in it)",
    )
    evaluate.add_argument(
        "--batch-size", type=int, default=None, help="rows decoded together (the generator's 64)"
    )
    evaluate.add_argument(
        "--prefix-reuse", action="store_true", help="encode prefixes the prompts share once"
    )
    evaluate.add_argument(
        "--compile",
        choices=["auto", "on", "off"],
        default="auto",
        help="run the forward compiled (auto: on a CPU with a C++ compiler)",
    )
    evaluate.add_argument(
        "--results", default=None, help="directory for the episodes and Experience, as Parquet"
    )
    evaluate.add_argument(
        "--journal",
        default=str(EVALUATION_JOURNALS),
        help="where an evaluation keeps its finished episodes until it is recorded, so that a "
        "rerun after an interruption resumes (%(default)s)",
    )
    guidance = commands.add_parser(
        "guidance", help="teacher-forced fit of the planner's actions, ordinary vs privileged view"
    )
    guidance.add_argument("--policy", required=True, help="the policy directory")
    guidance.add_argument("--env", default="textcraft", help="an environment with a planner")
    guidance.add_argument("--split", default="test", help="task split (default: test)")
    guidance.add_argument("--tasks", type=int, default=30, help="N tasks evenly spaced (30)")
    guidance.add_argument(
        "--renamed", action="store_true", help="permute item qualifiers per task (no memorising)"
    )
    guidance.add_argument(
        "--without-commands",
        action="store_true",
        help="take the crafting commands out of the prompts (the plan is the only source)",
    )
    guidance.add_argument("--seed", type=int, default=0)
    return parser


def main(argv: list[str] | None = None) -> None:
    """The command line: a configuration or checkpoint that cannot be used is one line on stderr
    (exit status 2), not a traceback."""
    argv = sys.argv[1:] if argv is None else argv
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        _run(args, shlex.join(["python", "-m", "resail_pipeline.bootstrap", *argv]))
    except (ConfigError, CheckpointError) as error:
        parser.exit(2, f"error: {error}\n")


def _run(args: argparse.Namespace, command: str) -> None:
    if args.command == "build":
        config = load_config(args.params, args.base)
        options = load_env_options(args.params, config.env)
        info = build_initial_policy(config, args.out, env_options=options, command=command)
        logger.info("initial policy %s at %s", info.policy_id, info.path)
    elif args.command == "ship":
        ship(args.policy, args.to)
    elif args.command == "guidance":
        model, tokenizer = load_policy(args.policy)
        task_ids = spread(make_env(args.env).task_ids(args.split), args.tasks)
        fits = guidance_use(
            model.eval(),
            tokenizer,
            args.env,
            task_ids,
            renamed=args.renamed,
            without_commands=args.without_commands,
            seed=args.seed,
        )
        for fit in fits:
            logger.info(
                "%s view: %d steps, exact action %.3f (first steps %.3f), "
                "mean log-probability %.3f; missed: %s",
                fit.view,
                fit.steps,
                fit.exact,
                fit.first_exact,
                fit.logp,
                ", ".join(f"{kind} {share:.3f}" for kind, share in fit.misses.items()),
            )
    else:
        env = args.env or policy_env(args.policy)
        config = EvalConfig(
            splits=tuple(args.splits or evaluation_splits(env)),
            num_tasks=args.tasks,
            decoding_seeds=tuple(args.seeds),
            temperature=args.temperature,
            max_new_tokens=args.max_new_tokens,
        )
        evaluate_and_record(
            args.policy,
            config,
            reference_seed=args.reference_seed,
            command=command,
            env=env,
            generation={
                "dtype": args.dtype,
                "prefix_reuse": args.prefix_reuse,
                "compile": {"auto": "auto", "on": True, "off": False}[args.compile],
                **({} if args.batch_size is None else {"batch_size": args.batch_size}),
            },
            results=args.results,
            journal=args.journal,
        )


if __name__ == "__main__":
    main()
