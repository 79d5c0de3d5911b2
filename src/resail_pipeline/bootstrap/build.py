"""The initial policy (cycle 0): a configured checkpoint, the shipped reference, or one built here.

:func:`resolve_initial_policy` is what the ``bootstrap`` pipeline calls. Building
(:func:`build_initial_policy`) runs every stage on the environment's demonstration tasks only
(:data:`~resail_pipeline.bootstrap.environments.BUILDABLE_ENVS`: TextCraft's ``train`` and
``dev``, ALFWorld's ``clone`` games), never on a test task:

1. expert demonstrations with injected mistakes (with a warm start, optionally the warm start
   policy's own episodes relabelled by the expert), and their rules-based summaries;
2. a word-level tokenizer trained on the environment's own text;
3. a Qwen3-architecture model of the configured shape, randomly initialised;
4. behaviour cloning on both views, packed, within the time budget, resumable;
5. the policy published atomically with :func:`resail_pipeline.checkpoints.save_policy`, its
   manifest recording the command, the configuration, the data hash, the time and the machine.

With ``warm_start``, stages 2-3 take a built policy's tokenizer and weights instead, so a build
can continue another one (a second stage with other data settings).

The build is cached: the manifest records a key over the recipe (every setting that shapes the
result, the warm start's weights included) and the code and data it is made from (ALFWorld's
games by their content, wherever they lie); a call whose key matches the published policy returns
it at once.

The environment is built with the options given (a run's ``run.env_options``: ALFWorld's
``data_path``, say); where they name no data, its data is found, or generated, as a Kedro run
finds it (:func:`~resail_pipeline.envs.provide_env_data`: ``ALFWORLD_DATA``, else the generated
default set).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import shlex
import shutil
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from transformers import PreTrainedModel, Qwen3Config

from resail_pipeline.bootstrap.cloning import (
    behaviour_cloning,
    training_device,
    training_precision,
)
from resail_pipeline.bootstrap.config import BootstrapConfig, ModelShape
from resail_pipeline.bootstrap.demonstrations import (
    RESPONSE_MAX_NEW_TOKENS,
    Demonstration,
    collect_demonstrations,
    relabel_episodes,
)
from resail_pipeline.bootstrap.drills import without_crafting_commands
from resail_pipeline.bootstrap.environments import BuildableEnv, buildable
from resail_pipeline.bootstrap.packing import (
    PackedRow,
    StepGroup,
    group_steps,
    guided_groups,
    pack_rows,
)
from resail_pipeline.bootstrap.renaming import demonstration_qualifiers, task_renamings
from resail_pipeline.bootstrap.vocabulary import train_tokenizer
from resail_pipeline.checkpoints import (
    MANIFEST_NAME,
    CheckpointError,
    CheckpointInfo,
    check_checkpoint,
    load_policy,
    read_checkpoint_info,
    save_policy,
    weights_sha256,
)
from resail_pipeline.devices import machine_description
from resail_pipeline.envs import Environment, evaluation_splits, make_env, provide_env_data
from resail_pipeline.generation.transformers_backend import TransformersGenerator
from resail_pipeline.modeling import build_qwen3, small_qwen3_config
from resail_pipeline.rollout import EpisodeSpec, RolloutSettings

logger = logging.getLogger(__name__)

#: The published policy's folder under the output directory.
POLICY_DIR = "policy"
#: Resumable training states, one folder per recipe, under the output directory.
WORK_DIR = "work"
#: The modules whose code shapes a built policy in any environment (part of the cache key): the
#: build itself, the environment protocol, the planner, the prompts, the rules-based summaries and
#: the model builders; each environment adds its own (:attr:`BuildableEnv.sources`).
_SOURCES = (
    "bootstrap/*.py",
    "envs/base.py",
    "envs/experts.py",
    "envs/planner.py",
    "experience/evidence.py",
    "experience/rules.py",
    "experience/validation.py",
    "modeling/*.py",
    "prompts/*.py",
)
#: The distributions of the model and the tokenizer; each environment adds its own.
_PACKAGES = ("torch", "transformers", "tokenizers")


def code_fingerprint(env: str) -> str:
    """sha256 over the sources that shape a policy built for ``env`` and the versions of the
    packages that provide the environment, the model and the tokenizer."""
    support = buildable(env)
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for pattern in (*_SOURCES, *support.sources):
        for path in sorted(root.glob(pattern)):
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    for dist in (*support.packages, *_PACKAGES):
        digest.update(f"{dist}=={metadata.version(dist)}".encode())
    return digest.hexdigest()


def _recipe_key(config: BootstrapConfig) -> str:
    """sha256 of the recipe and name: where an interrupted build of this config keeps its state.

    A warm start counts by its weights' sha256, not its path. The code is left out on purpose: a
    resumed run checks that the training data it is given is the data its state was trained on,
    so a change of code that changes nothing of the data (or of the model's shape) does not throw
    hours of training away.
    """
    recipe = config.recipe()
    if config.warm_start is not None:
        recipe["warm_start"] = weights_sha256(check_checkpoint(config.warm_start))
    payload = json.dumps({"recipe": recipe, "name": config.name}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


@dataclass(frozen=True)
class BuildEnvironment:
    """The environment a build plays in, resolved once: its name, the adapter's options, its
    demonstration splits and the sha256 of the data they are read from.

    Attributes:
        name: the environment's registry name.
        options: the adapter's options (``run.env_options``), as given.
        splits: its demonstration splits (:meth:`BuildableEnv.splits` of the options).
        data_sha256: :attr:`BuildableEnv.data_sha256` of those splits (ALFWorld's games), or
            ``None`` where the tasks ship with a package.
        data_root: where the data was read, for the manifest (``None`` as above).
    """

    name: str
    options: dict[str, Any]
    splits: tuple[str, ...]
    data_sha256: str | None = None
    data_root: str | None = None

    @classmethod
    def resolve(cls, env: str, options: Mapping[str, Any] | None = None) -> BuildEnvironment:
        """``env`` built with ``options``, its data provided first where they name none
        (:func:`~resail_pipeline.envs.provide_env_data`), and its data fingerprinted."""
        support, options = buildable(env), dict(options or {})
        provide_env_data(env, options)
        splits = support.splits(options)
        fingerprint = support.data_fingerprint()
        if fingerprint is None:
            return cls(env, options, splits)
        adapter = make_env(env, **options)
        root = getattr(adapter, "data_root", None)
        return cls(
            env,
            options,
            splits,
            data_sha256=fingerprint(adapter, splits),
            data_root=None if root is None else str(root),
        )

    @property
    def support(self) -> BuildableEnv:
        return buildable(self.name)

    def make(self) -> Environment:
        """A fresh environment of this build."""
        return make_env(self.name, **self.options)

    def demonstration_tasks(self, adapter: Environment | None = None) -> list[int]:
        """The task ids of :attr:`splits`, sorted, as ``adapter`` (default: :meth:`make`) has
        them."""
        adapter = adapter or self.make()
        return sorted(t for split in self.splits for t in adapter.task_ids(split))

    def key(self) -> dict[str, Any]:
        """What of the environment is part of the cache key: its options, the data by its
        sha256 instead of where it lies (``data_path``)."""
        options = {k: v for k, v in self.options.items() if k != "data_path"}
        return {"name": self.name, "options": options, "data_sha256": self.data_sha256}

    def record(self) -> dict[str, Any]:
        """What the manifest keeps of the environment."""
        return {
            "name": self.name,
            "options": self.options,
            "demonstration_splits": list(self.splits),
            "evaluation_splits": list(evaluation_splits(self.name)),
            "data_sha256": self.data_sha256,
            "data_root": self.data_root,
        }


def cache_key(config: BootstrapConfig, environment: BuildEnvironment | None = None) -> str:
    """The key of a built policy: its recipe, name, the code fingerprint and the environment
    (``environment``: :meth:`BuildEnvironment.resolve` of ``config.env`` without options, by
    default)."""
    environment = environment or BuildEnvironment.resolve(config.env)
    return _cache_key(_recipe_key(config), environment)


def _cache_key(recipe_key: str, environment: BuildEnvironment) -> str:
    payload = json.dumps(
        {
            "recipe": recipe_key,
            "code": code_fingerprint(environment.name),
            "environment": environment.key(),
        },
        sort_keys=True,
    )
    return hashlib.sha256(payload.encode()).hexdigest()


def configuration_folder(config: BootstrapConfig, environment: BuildEnvironment) -> str:
    """The folder, under a run's build directory, of ``config``'s build in ``environment``: 12 hex
    digits of the sha256 of its recipe and environment. Builds of other configurations (another
    data folder's, say) go to other folders and never replace it; its code is left out, so that a
    change of code rebuilds it in place (its cache key still counts the code)."""
    payload = json.dumps(
        {"recipe": _recipe_key(config), "environment": environment.key()}, sort_keys=True
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:12]


def rows_sha256(rows: Sequence[PackedRow]) -> str:
    """sha256 of the packed training data: every token, prompt length, weight and view."""
    digest = hashlib.sha256()
    for row in rows:
        digest.update(json.dumps([row.trunk]).encode())
        for b in row.branches:
            digest.update(json.dumps([b.ids, b.prompt_len, b.weight, b.privileged]).encode())
    return digest.hexdigest()


@dataclass(frozen=True)
class WarmStart:
    """The built policy that a build continues (``warm_start``), loaded once for the whole build:
    its weights are trained on, its tokenizer is kept, and its model rolls out the on-policy
    episodes under its own id."""

    model: PreTrainedModel
    tokenizer: Any
    info: CheckpointInfo

    @classmethod
    def load(cls, path: str | Path) -> WarmStart:
        info = read_checkpoint_info(path)  # checks the directory first
        model, tokenizer = load_policy(info.path)
        return cls(model, tokenizer, info)


@dataclass(frozen=True)
class CloningData:
    """Everything behaviour cloning is given.

    Attributes:
        demonstrations: every demonstration played (stalled ones included).
        trained: the demonstrations whose steps are trained on.
        tokenizer: the tokenizer trained on the environment's text.
        rows: the packed sequences.
        sha256: :func:`rows_sha256` of ``rows``.
    """

    demonstrations: tuple[Demonstration, ...]
    trained: tuple[Demonstration, ...]
    tokenizer: Any
    rows: tuple[PackedRow, ...]
    sha256: str

    def stats(self) -> dict[str, Any]:
        """Counts recorded in the manifest."""
        return {
            "tasks": len({d.task_id for d in self.demonstrations}),
            "demonstrations": len(self.demonstrations),
            "trained_demonstrations": len(self.trained),
            "stalled_demonstrations": sum(d.stalled for d in self.demonstrations),
            "trained_steps": sum(len(d.steps) for d in self.trained),
            "rows": len(self.rows),
            "sequences": sum(len(r.branches) for r in self.rows),
            "privileged_sequences": sum(b.privileged for r in self.rows for b in r.branches),
            "packed_tokens": sum(len(r) for r in self.rows),
            "response_tokens": sum(b.response_len for r in self.rows for b in r.branches),
            "vocab_size": len(self.tokenizer),
        }


def qwen3_config(shape: ModelShape, tokenizer) -> Qwen3Config:
    """The Qwen3 config of ``shape`` over ``tokenizer``'s vocabulary (SDPA attention)."""
    model_config = small_qwen3_config(
        len(tokenizer),
        hidden_size=shape.hidden_size,
        num_hidden_layers=shape.num_hidden_layers,
        num_attention_heads=shape.num_attention_heads,
        num_key_value_heads=shape.num_key_value_heads,
        intermediate_size=shape.intermediate_size,
        max_position_embeddings=shape.max_position_embeddings,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    model_config._attn_implementation = "sdpa"
    return model_config


def renamed_groups(
    config: BootstrapConfig, trained: Sequence[Demonstration], demos: Sequence[Demonstration]
) -> list[StepGroup]:
    """The steps of ``data.renamed_copies`` renamed copies of every task (see
    :mod:`~resail_pipeline.bootstrap.renaming`), then those of ``data.copying_drills`` copying
    drills (:mod:`~.drills`: renamed copies in the privileged view alone, the crafting commands
    taken out); each task and copy under its own permutation."""
    data = config.data
    kinds = (("renamed", data.renamed_copies), ("drill", data.copying_drills))
    if not any(n for _, n in kinds):
        return []
    words = demonstration_qualifiers(config.env, demos)
    groups: list[StepGroup] = []
    for tag, copies in kinds:
        if copies:
            logger.info("bootstrap: %d %s copies over %d qualifier words", copies, tag, len(words))
        drills = tag == "drill"
        for copy in range(copies):
            key = f"{config.seed}/{tag}/{copy}"
            renamings = task_renamings(words, (d.task_id for d in demos), key)

            def rename(task_id: int, renamings=renamings, drills=drills) -> Callable[[str], str]:
                renaming = renamings[task_id]
                if not drills:
                    return renaming
                return lambda text: without_crafting_commands(renaming(text))

            groups += group_steps(
                trained,
                demos,
                privileged_share=1.0 if drills else data.privileged_share,
                seed=key,
                rename=rename,
                ordinary_share=0.0 if drills else data.ordinary_share,
            )
    return groups


def on_policy_demonstrations(
    config: BootstrapConfig,
    task_ids: Sequence[int],
    warm_start: WarmStart | None,
    *,
    env_options: Mapping[str, Any] | None = None,
    progress: bool = True,
) -> list[Demonstration]:
    """``data.on_policy_episodes`` episodes of every task rolled out by the warm start policy
    and relabelled by the planner (:func:`~.demonstrations.relabel_episodes`), then
    ``data.on_policy_privileged`` more in the privileged view; none when both are 0.

    ``warm_start`` is the loaded ``config.warm_start``, whose weights are then trained. The
    ``k``-th episode of a task is decoded with seed ``k`` at ``data.on_policy_temperature``,
    under the environment's own step limit, as the evaluation runs it. Every step of a
    privileged episode is generated with the rules-based summary of the task's first ordinary
    episode (its ``summary``), as the appendix-D.2 evaluation inserts the summary of the policy's
    own reference episode; its seeds and indices follow the ordinary episodes'. ``env_options``
    are the environment adapter's options.
    """
    data = config.data
    env_options = dict(env_options or {})
    episodes = data.on_policy_episodes
    if not episodes:
        return []
    if warm_start is None:
        raise ValueError(
            f"data.on_policy_episodes: {episodes} episodes per task need the warm start's model"
        )
    policy_id = warm_start.info.policy_id
    generator = TransformersGenerator(warm_start.model, warm_start.tokenizer, policy_id=policy_id)
    settings = RolloutSettings(
        temperature=data.on_policy_temperature, max_new_tokens=RESPONSE_MAX_NEW_TOKENS
    )

    def roll_out(specs: list[EpisodeSpec], first_episode: int, view: str) -> list[Demonstration]:
        logger.info("bootstrap: rolling out %s on %d %s episodes", policy_id, len(specs), view)
        rolled = settings.roll_out(
            lambda: make_env(config.env, **env_options), specs, generator, progress=progress
        )
        demos = relabel_episodes(
            config.env,
            [(e.spec.task_id, [s.action for s in e.steps]) for e in rolled],
            first_episode=first_episode,
            env_options=env_options,
            progress=progress,
        )
        logger.info(
            "bootstrap: %d %s on-policy episodes relabelled (%d successful), %d steps",
            len(demos),
            view,
            sum(d.success for d in demos),
            sum(len(d.steps) for d in demos),
        )
        return demos

    first = data.episodes_per_task  # the index of a task's first on-policy episode
    ordinary = roll_out(
        [
            EpisodeSpec(f"on-policy/{task_id}/{k}", task_id, decoding_seed=k)
            for task_id in task_ids
            for k in range(episodes)
        ],
        first,
        "ordinary",
    )
    if not data.on_policy_privileged:
        return ordinary
    summaries = {d.task_id: d.summary for d in ordinary if d.episode == first}
    privileged = roll_out(
        [
            EpisodeSpec(
                f"on-policy/{task_id}/{k}", task_id, decoding_seed=k, summary=summaries[task_id]
            )
            for task_id in task_ids
            if task_id in summaries
            for k in range(episodes, episodes + data.on_policy_privileged)
        ],
        first + episodes,
        "privileged",
    )
    return ordinary + [dataclasses.replace(d, guide=summaries[d.task_id]) for d in privileged]


def _check_known_words(rows: Sequence[PackedRow], tokenizer, source: str) -> None:
    """Raise if a response the data trains has words ``tokenizer`` (from ``source``) cannot
    encode. Unknown words in a prompt are left alone: the policy reads them as the unknown token
    at evaluation too (an environment's error message quoting an odd action, say)."""
    unk = tokenizer.unk_token_id
    if unk is None:
        return
    for row in rows:
        for ids, prompt_len, _ in row.sequences():
            if unk in ids[prompt_len:]:
                before = tokenizer.decode(ids[: ids.index(unk, prompt_len)])[-80:]
                raise ValueError(
                    f"warm_start: the tokenizer of {source} has no token for a word of the "
                    f"training data (the word after {before!r}); build that policy with a corpus "
                    "that covers this data"
                )


def _check_length(rows: Sequence[PackedRow], shape: ModelShape) -> None:
    """Raise naming ``model.max_position_embeddings`` if a sequence of ``rows`` is longer."""
    longest = max((len(ids) for row in rows for ids, _, _ in row.sequences()), default=0)
    if longest > shape.max_position_embeddings:
        raise ValueError(
            f"model.max_position_embeddings: {shape.max_position_embeddings} is shorter than the "
            f"longest training sequence ({longest} tokens); raise it"
        )


def prepare_training_data(
    config: BootstrapConfig,
    *,
    environment: BuildEnvironment | None = None,
    warm_start: WarmStart | None = None,
    progress: bool = True,
    cache_dir: Path | None = None,
) -> CloningData:
    """Demonstrations (of the environment's demonstration splits), their summaries, the tokenizer
    and the packed rows.

    ``environment`` is the resolved ``config.env`` (:meth:`BuildEnvironment.resolve`, without
    options by default). ``warm_start`` is the loaded ``config.warm_start``: its tokenizer is used
    instead of training one (it must know every word of the data), and its model rolls out the
    on-policy episodes. ``cache_dir`` keeps the planner's demonstrations task by task, so that an
    interrupted build does not play them again (:func:`collect_demonstrations`).
    """
    data = config.data
    environment = environment or BuildEnvironment.resolve(config.env)
    task_ids = environment.demonstration_tasks()[: data.task_limit]
    planner = collect_demonstrations(
        config.env,
        task_ids,
        episodes_per_task=data.episodes_per_task,
        mistake_rate=data.mistake_rate,
        stalled_share=data.stalled_share,
        seed=config.seed,
        env_options=environment.options,
        progress=progress,
        cache_dir=cache_dir,
        searching=data.searching_expert,
    )
    on_policy = on_policy_demonstrations(
        config, task_ids, warm_start, env_options=environment.options, progress=progress
    )
    demos = planner + on_policy
    as_rolled_out = data.on_policy_training == "privileged_as_rolled_out"
    trained = tuple(d for d in (planner if as_rolled_out else demos) if not d.stalled)
    if warm_start is not None:
        tokenizer = warm_start.tokenizer
    else:
        tokenizer = train_tokenizer(
            config.env,
            demos,
            vocab_size=config.tokenizer.vocab_size,
            min_frequency=config.tokenizer.min_frequency,
        )
    groups = group_steps(
        trained,
        demos,
        privileged_share=data.privileged_share,
        seed=config.seed,
        ordinary_share=data.ordinary_share,
    )
    groups += renamed_groups(config, trained, demos)
    if as_rolled_out:
        guided = [d for d in on_policy if d.guide is not None]
        groups += guided_groups(guided)
        trained += tuple(guided)
    rows = tuple(pack_rows(groups, tokenizer, max_branches=data.max_branches))
    _check_length(rows, config.model)
    if warm_start is not None:
        _check_known_words(rows, tokenizer, str(config.warm_start))
    return CloningData(tuple(demos), trained, tokenizer, rows, rows_sha256(rows))


def _check_shape(model_config, shape: ModelShape, source: str) -> None:
    """Raise naming the first field of ``shape`` that the warm start's model does not have."""
    for name, want in shape:
        have = getattr(model_config, name, None)
        if have != want:
            raise ValueError(
                f"model.{name}: the warm start {source} has {have}, the configuration {want}"
            )


def _published_key(policy: Path) -> str | None:
    manifest = policy / MANIFEST_NAME
    if not manifest.is_file():
        return None
    try:
        check_checkpoint(policy)
    except CheckpointError:
        return None
    return json.loads(manifest.read_text()).get("cache_key")


def build_initial_policy(
    config: BootstrapConfig,
    out_dir: str | Path,
    *,
    env_options: Mapping[str, Any] | None = None,
    command: str | None = None,
    progress: bool = True,
) -> CheckpointInfo:
    """Build the initial policy into ``out_dir/policy``, or return it if already built (cached).

    An interrupted build continues from its last training state under ``out_dir/work`` when it
    is given the same training data. ``env_options`` are the environment adapter's options (a
    run's ``run.env_options``); where they name no data, it is found or generated as a Kedro run
    finds it (:meth:`BuildEnvironment.resolve`).
    ``command`` is recorded in the manifest (default: this process's command line).
    """
    buildable(config.env)  # an environment without a build, before anything else
    device = training_device(config.training.device)  # before hours of work, not after
    out_dir = Path(out_dir)
    policy = out_dir / POLICY_DIR
    environment = BuildEnvironment.resolve(config.env, env_options)
    recipe_key = _recipe_key(config)  # hashes a warm start's weights: once per build
    key = _cache_key(recipe_key, environment)
    if _published_key(policy) == key:
        logger.info("bootstrap: %s is up to date (cache key %s)", policy, key[:12])
        return read_checkpoint_info(policy)

    started = time.perf_counter()
    start = None
    work = out_dir / WORK_DIR / recipe_key[:16]  # the training state, replaced whole when saved
    # the planner's demonstrations, kept per task until the build is published: keyed by the
    # whole key (the code and the data too), so that a changed expert never reuses them
    demonstrations = out_dir / WORK_DIR / f"demonstrations-{key[:16]}"
    if config.warm_start is not None:
        warm = WarmStart.load(config.warm_start)
        _check_shape(warm.model.config, config.model, config.warm_start)
        model, tokenizer = warm.model, warm.tokenizer
        start = {"path": config.warm_start, "sha256": warm.info.sha256}
        logger.info("bootstrap: continuing %s (sha256 %s)", start["path"], start["sha256"][:12])
        data = prepare_training_data(
            config,
            environment=environment,
            warm_start=warm,
            progress=progress,
            cache_dir=demonstrations,
        )
    else:
        data = prepare_training_data(
            config, environment=environment, progress=progress, cache_dir=demonstrations
        )
        tokenizer = data.tokenizer
        model = build_qwen3(qwen3_config(config.model, tokenizer), seed=config.seed)
    stats = data.stats()
    logger.info("bootstrap: training data %s (sha256 %s)", stats, data.sha256[:12])

    def loadable(directory: Path) -> None:
        model.config.save_pretrained(str(directory))
        tokenizer.save_pretrained(str(directory))

    state = behaviour_cloning(
        model,
        data.rows,
        config.training,
        pad_id=tokenizer.pad_token_id,
        data_sha256=data.sha256,
        seed=config.seed,
        state_dir=work,
        save_extra=loadable,
        progress=progress,
    )
    extra = {
        "cache_key": key,
        "command": command or shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "configuration": config.to_dict(),
        "environment": environment.record(),
        "warm_start": start,
        "training_data_sha256": data.sha256,
        "training_data": stats,
        "training": {
            "steps": state.step,
            "epochs": round(state.epochs_done, 3),
            "seconds": round(state.seconds, 1),
            "padded_tokens": state.tokens,
            "final_loss": state.loss,
            "precision": training_precision(config.training.precision, device),
        },
        "build_seconds": round(time.perf_counter() - started, 1),
        "machine": machine_description(device),
        "parameters": sum(p.numel() for p in model.parameters()),
    }
    info = save_policy(
        model, tokenizer, policy, name=config.name, method="bootstrap", cycle=0, extra=extra
    )
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(demonstrations, ignore_errors=True)
    logger.info("bootstrap: published %s (%s)", info.policy_id, policy)
    return info
