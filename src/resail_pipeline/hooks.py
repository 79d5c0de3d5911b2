"""Project hooks: cross-cutting concerns kept out of the nodes."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from contextvars import ContextVar
from pathlib import Path
from types import MappingProxyType
from typing import Any

from kedro.config import OmegaConfigLoader
from kedro.framework.hooks import hook_impl

from resail_pipeline.checkpoints import CheckpointError
from resail_pipeline.collection import check_collection_settings
from resail_pipeline.config import ConfigError, build, check_folder_name
from resail_pipeline.devices import release_device_memory
from resail_pipeline.envs import provide_env_data
from resail_pipeline.generation import check_installed
from resail_pipeline.generation.cuda import check_free_memory, check_vllm_cuda, visible_gpus
from resail_pipeline.gui.config import AitzConfig
from resail_pipeline.initial_policy import check_published, requested_policy
from resail_pipeline.io import LockedError, ProcessLock
from resail_pipeline.journal import EpisodeJournal
from resail_pipeline.pipelines.bootstrap.nodes import bootstrap_config
from resail_pipeline.pipelines.collect.nodes import collect_config, settings_of
from resail_pipeline.pipelines.common import (
    SHARED_FOLDER,
    RunConfig,
    cycle_namespace,
    policy_info,
)
from resail_pipeline.pipelines.parameters import (
    check_budgets,
    check_context_length,
    check_parameters,
    check_training_memory,
    estimate_run_prompts,
)
from resail_pipeline.pipelines.score.nodes import cycle_start_key
from resail_pipeline.tracking import Tracker, TrackingConfig

logger = logging.getLogger(__name__)

#: the initial policy's manifest, shared by every experiment of a data folder
INITIAL_POLICY = "cycle_0.checkpoint"
#: datasets written by nodes that act in the environment: a pipeline with one of them has its
#: budgets compared with the environment's splits before it starts
_ACTS_IN_ENV = ("tasks", "eval_results", "experience")
#: the datasets of the aitz pipeline (its own data tag, staging folder and lock)
AITZ_PREFIX = "aitz."
#: datasets written by nodes that generate with the policy: a pipeline with one of them has the
#: longest prompt it can send compared with the engine's context, and the machine's CUDA driver
#: with what the vLLM wheel needs, before it starts
_GENERATES = (*_ACTS_IN_ENV, "summaries", "responses")
#: the share of each GPU a vLLM engine takes unless its options say (vLLM's own default)
VLLM_MEMORY_SHARE = 0.9
#: the run values of the configuration being read (:class:`RunConfigLoader`); empty outside one
_RUN_VALUES: ContextVar[Mapping[str, str]] = ContextVar("run_values", default=MappingProxyType({}))


class RunConfigLoader(OmegaConfigLoader):
    """Kedro's configuration loader, which also resolves the run's folders from its parameters.

    The catalog names each dataset's folder after the run's environment, data tag and experiment
    (``data/<layer>/<env><data_tag>/<experiment>/``), and the parameters name the staging folders
    after the same (``run.staging_dir``, ``aitz.staging_dir``, ``aitz.data.root``). A YAML file
    cannot read what the other files of its environment merge over it (``run: {env: alfworld}``
    or ``data_tag: -mine`` in an environment's parameters), so before this loader reads the
    parameters or the catalog for the run, it resolves them once (:func:`resolve_run`, from the
    parameters as their files say) and hands the result to the ``${run:...}`` resolver
    (:func:`run_value`) that both read: a value set on the command line, in an environment's
    parameters or in its ``globals.yml`` names the same folder everywhere, and a ``data_tag`` that
    is no folder name is refused before any path is made from it.

    The resolved values belong to the loader, that is to its session: two sessions in one process
    (a test suite, a notebook) each read their own folders.
    """

    #: the configuration keys whose files read ``${run:...}``
    RUN_KEYS = ("parameters", "catalog")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._run: dict[str, str] | None = None
        super().__init__(*args, **kwargs)

    def __getitem__(self, key: str) -> dict[str, Any]:
        if key not in self.RUN_KEYS:
            return super().__getitem__(key)
        token = _RUN_VALUES.set(self.run_values())
        try:
            return super().__getitem__(key)
        finally:
            _RUN_VALUES.reset(token)

    def run_values(self) -> dict[str, str]:
        """``env``, ``data_tag``, ``experiment`` and ``cycle_start`` of this loader's run
        (:func:`resolve_run`), resolved on first use.

        Raises:
            ConfigError: as :func:`resolve_run`.
        """
        if self._run is None:
            token = _RUN_VALUES.set({})  # the parameters as their files say, defaults unresolved
            try:
                params = super().__getitem__("parameters")
            finally:
                _RUN_VALUES.reset(token)
            self._run = resolve_run(params, self._globals)
        return self._run


def resolve_run(params: Mapping[str, Any], globals_: Mapping[str, Any]) -> dict[str, str]:
    """The run's ``env``, ``data_tag``, ``experiment`` and ``cycle_start`` from its merged
    parameters (the command line's ``--params`` included) and its ``globals.yml``: ``data_tag`` is
    the parameters' where any file or the command line sets it, else the globals'.

    Raises:
        ConfigError: a bad ``run`` value, or a ``data_tag`` that is no folder name (``/../x``
            would put the data folder elsewhere), naming the field.
    """
    run = RunConfig.from_params(dict(params["run"]))
    data_tag = params["data_tag"] if "data_tag" in params else globals_.get("data_tag", "")
    check_folder_name(data_tag, "data_tag", empty=True)
    return {
        "env": run.env,
        "data_tag": data_tag,
        "experiment": run.experiment,
        "cycle_start": cycle_start_key(
            dict(params["train"]), dict(params["score"]), dict(params["run"])
        ),
    }


def run_value(key: str, default: str) -> str:
    """``${run:<key>, <default>}`` in the catalog and the parameters: ``env``, ``data_tag``,
    ``experiment`` or ``cycle_start`` of the run whose configuration is being read, as its
    parameters resolve them (:class:`RunConfigLoader`); ``default`` where another loader reads
    it (a plain ``OmegaConfigLoader``, or a :class:`RunConfigLoader` resolving the run itself)."""
    return _RUN_VALUES.get().get(key, default)


class NodeTimingHook:
    """Logs each node's wall time, so a long run shows where its time went."""

    def __init__(self) -> None:
        self._started: dict[str, float] = {}

    @hook_impl
    def before_node_run(self, node: Any) -> None:
        self._started[node.name] = time.perf_counter()

    @hook_impl
    def after_node_run(self, node: Any) -> None:
        started = self._started.pop(node.name, None)
        if started is not None:
            logger.info("node %s finished in %.1f s", node.name, time.perf_counter() - started)


class DeviceMemoryHook:
    """Hands the GPU's cached memory back after every node.

    The nodes that load a model in the Kedro process (collection, responses, scoring, evaluation)
    drop it when they return, but torch's caching allocator keeps its blocks reserved; the training
    node's torchrun processes, started later, would find the device that much fuller.
    """

    @hook_impl
    def after_node_run(self, node: Any) -> None:
        release_device_memory()


class JournalHook:
    """Removes a rollout node's episode journals once the catalog has saved what it returned.

    A rollout node (a collection, an evaluation, the Experience's reference episodes) returns its
    tables with its journal finished, not removed
    (:meth:`~resail_pipeline.journal.EpisodeJournal.finish`): Kedro saves a node's outputs after
    the node returns, and a run killed in between resumes every episode from the journal instead
    of playing the rollout again. Once the last of the node's outputs is saved, the journals of
    the run's experiment that were finished while the node ran (their token changed) are removed;
    a journal an earlier run finished and this one did not touch stays, for the node that will
    resume it. A failed node removes nothing.
    """

    def __init__(self) -> None:
        self._run: RunConfig | None = None
        #: per running node: the finished journals before it started, and its outputs not yet saved
        self._nodes: dict[str, tuple[dict[Path, str], set[str]]] = {}

    @hook_impl
    def before_pipeline_run(self, run_params: dict[str, Any], pipeline: Any, catalog: Any) -> None:
        self._run = RunConfig.from_params(dict(catalog.load("parameters")["run"]))
        self._nodes = {}

    @hook_impl
    def before_node_run(self, node: Any) -> None:
        if self._run is not None:
            self._nodes[node.name] = (self._run.finished_journals(), set(node.outputs))

    @hook_impl
    def after_dataset_saved(self, dataset_name: str, data: Any, node: Any) -> None:
        entry = self._nodes.get(node.name)
        if self._run is None or entry is None:
            return
        before, unsaved = entry
        unsaved.discard(dataset_name)
        if unsaved:
            return
        del self._nodes[node.name]
        for folder, token in self._run.finished_journals().items():
            if before.get(folder) != token:
                EpisodeJournal(folder).remove()
                logger.info("journal %s removed: its episodes are saved", folder)


class TrackingHook:
    """Logs the run to MLflow as it writes its datasets (:mod:`resail_pipeline.tracking`): its
    parameters when it starts, each cycle's training metrics and evaluation as they are saved,
    the report's files as artifacts; the MLflow run ends with the Kedro run, failed or not.
    Registered before :class:`PreflightHook`, so that a run the checks refuse opens none."""

    def __init__(self) -> None:
        self._tracker: Tracker | None = None
        self._catalog: Any = None
        self._updates = 1

    @hook_impl
    def before_pipeline_run(self, run_params: dict[str, Any], pipeline: Any, catalog: Any) -> None:
        params = catalog.load("parameters")
        config = build(TrackingConfig, dict(params.get("tracking") or {}), "tracking")
        run = RunConfig.from_params(dict(params["run"]))
        tag = params.get("data_tag", "")
        tags = {
            "kedro.env": str(run_params.get("env")),
            "pipelines": str(run_params.get("pipeline_names")),
        }
        self._tracker = Tracker(config, f"{run.env}{tag}/{run.experiment}", tags)
        self._catalog = catalog
        self._updates = int(params["train"]["schedule"]["updates"])
        self._tracker.log_params(params)

    @hook_impl
    def after_dataset_saved(self, dataset_name: str, data: Any, node: Any) -> None:
        tracker = self._tracker
        if tracker is None or not tracker.active:
            return
        namespace, _, name = dataset_name.rpartition(".")
        if name == "train_metrics" and namespace.startswith("cycle_"):
            tracker.log_train_metrics(data, int(namespace.removeprefix("cycle_")), self._updates)
        elif name == "eval_summary" and len(data):
            tracker.log_eval_summary(data, int(data["cycle"].iloc[0]) * self._updates)
        elif namespace == "report":
            path = self._catalog.get(dataset_name)._describe().get("filepath")
            if path:
                tracker.log_artifact(path)

    @hook_impl
    def after_pipeline_run(self, run_params: dict[str, Any], pipeline: Any, catalog: Any) -> None:
        if self._tracker is not None:
            self._tracker.end()
            self._tracker = None

    @hook_impl
    def on_pipeline_error(
        self, error: Exception, run_params: dict[str, Any], pipeline: Any, catalog: Any
    ) -> None:
        if self._tracker is not None:
            self._tracker.end(failed=True)
            self._tracker = None


class PreflightHook:
    """Checks, before any node runs, what would otherwise fail hours into a run, cheapest first.

    1. Every pipeline's parameters (:func:`~resail_pipeline.pipelines.parameters.check_parameters`),
       the same functions the nodes parse them with: a bad ``evaluate`` value fails before cycle 1
       collects, a misspelt section (``trian``) is no longer ignored.
    2. The initial policy the run asks for exists (``bootstrap.checkpoint``, or the shipped
       ``bootstrap.reference``): a missing directory fails before the environment's data are
       provided, which can take minutes.
    3. The environment's data, before anything builds the environment, for a pipeline that acts
       in it or plays it to estimate its prompts (not the report, which only reads tables, while a
       first ALFWorld set takes minutes to write): an ALFWorld run that names none (no
       ``run.env_options.data_path``, ``ALFWORLD_DATA`` unset) gets the generated set that
       mirrors the official split, with its ``dev`` and ``clone`` splits, in
       ``data/01_raw/alfworld_games/<12 hex digits of its settings' sha256>`` (written on the
       first run, resumed if cut short, extended when it lacks a split), and ``ALFWORLD_DATA``
       names it for this process and the workers it starts
       (:func:`~resail_pipeline.envs.provide_env_data`, which the initial-policy builder calls
       too).
    4. A pipeline that acts in the environment has its split names and budgets compared with the
       environment's splits (:func:`~resail_pipeline.pipelines.parameters.check_budgets`). A
       pipeline that generates with vLLM finds it installed (else one line names the extra), and
       has the longest prompt it can send estimated and its new tokens compared with
       ``run.generation.vllm.max_model_len``
       (:func:`~resail_pipeline.pipelines.parameters.check_context_length`), and, on a GPU
       machine, the NVIDIA driver with what the vLLM CUDA wheel needs
       (:func:`~resail_pipeline.generation.cuda.check_vllm_cuda`) and every GPU's free memory
       with the share its engines take (:func:`~resail_pipeline.generation.cuda.check_free_memory`,
       naming the processes that hold it). A pipeline that trains on GPUs
       has one rank's memory planned and compared with the smallest visible GPU
       (:func:`~resail_pipeline.pipelines.parameters.check_training_memory`). The initial policy
       the run asks for is the one already published for the data folder, weights included:
       under ``--only-missing-outputs`` the bootstrap node is skipped, and another policy would be
       ignored in silence.
    5. Every collection the run would reuse was made with the run's settings. A cycle's ``tasks``
       table records how it was collected. When it exists, a rerun (``make run`` uses
       ``--only-missing-outputs``) skips the collection and trains on what is there: the cycle-1
       corpus shared by every method of an environment (appendix A.2), or an experiment's own
       later cycles. A run whose collection settings differ (another budget, seed or decoding)
       fails here, naming each setting, instead of training on a corpus it did not ask for.
    6. A pipeline that writes a cycle stages its models where the catalog publishes them from,
       and holds its experiment's lock in the data folder's staging area until it ends (a second
       run of the same experiment is refused; the kernel drops the lock of a killed run). Cycle 0
       and the cycle-1 corpus, which every experiment of the folder reads, are guarded by
       ``shared.lock`` there: a run that would write them (one is missing, or the run is not
       ``--only-missing-outputs``) holds it alone, one that finds them written shares it with the
       others, so experiments run side by side once they are written, and never beside a run
       that replaces the cycle-0 model they collect with.
    """

    def __init__(self) -> None:
        self._locks: list[ProcessLock] = []

    @hook_impl
    def before_pipeline_run(self, run_params: dict[str, Any], pipeline: Any, catalog: Any) -> None:
        self._release()  # a hook that outlived an earlier run in this process
        try:
            self._check(run_params, pipeline, catalog)
        except BaseException:
            self._release()  # Kedro calls no other hook of a run whose first hook failed
            raise

    def _check(self, run_params: dict[str, Any], pipeline: Any, catalog: Any) -> None:
        params = catalog.load("parameters")
        check_parameters(params)
        run = RunConfig.from_params(params["run"])
        names, writes = pipeline.datasets(), pipeline.all_outputs()
        if INITIAL_POLICY in names:
            bootstrap = bootstrap_config(params["bootstrap"], run.env)
            requested_policy(bootstrap)  # a reference that names no directory is an error
        acts = _writes_any(writes, _ACTS_IN_ENV)
        generates = run.backend == "vllm" and _writes_any(writes, _GENERATES)
        # the aitz pipeline's initial policy generates with its own backend (aitz.generation)
        aitz_vllm = (
            "aitz.attempts" in names
            and (params.get("aitz") or {}).get("generation", {}).get("backend") == "vllm"
        )
        if generates or aitz_vllm:
            check_installed("vllm")  # before any node publishes anything
        trains = any(name.endswith(".checkpoint") and name != INITIAL_POLICY for name in writes)
        gpus = visible_gpus() if trains else []
        # the longest prompt is estimated by playing the environment (prompt_budget.py)
        estimates = (generates and run.generation_options.get("max_model_len") is not None) or gpus
        # a pipeline that only reads what others wrote (the report) needs no games
        if acts or estimates:
            provide_env_data(run.env, run.env_options)
        if any(name.startswith("cycle_") for name in writes):
            checkpoints = {n for n in names if n.endswith(".checkpoint")}
            self._take_lock("run", run.staging_dir, run.experiment, checkpoints, catalog)
            shared = [n for n in writes if _read_by_every_experiment(_filepath(catalog, n))]
            if shared:
                writer = not run_params.get("only_missing_outputs") or not all(
                    catalog.exists(n) for n in shared
                )
                what = "cycle 0 and the cycle-1 corpus every experiment of this data folder shares"
                self._hold(
                    Path(run.staging_dir).resolve() / f"{SHARED_FOLDER}.lock",
                    f"another run uses {what}, which this one would write"
                    if writer
                    else f"another run is writing {what}",
                    "wait for it; with --only-missing-outputs a run keeps what is written",
                    shared=not writer,
                )
        if any(name.startswith(AITZ_PREFIX) for name in writes):
            aitz = build(AitzConfig, dict(params["aitz"]), "aitz")
            checkpoints = {n for n in names if n.startswith(AITZ_PREFIX) and "checkpoint" in n}
            self._take_lock("aitz", aitz.staging_dir, "aitz", checkpoints, catalog)
        if acts:
            check_budgets(params)
        if generates or aitz_vllm:
            check_vllm_cuda()
            # vLLM's own default share; the engine refuses to start below it
            if generates:
                share = run.generation_options.get("gpu_memory_utilization", VLLM_MEMORY_SHARE)
                check_free_memory(share, "run.generation.vllm.gpu_memory_utilization")
            if aitz_vllm:
                vllm = params["aitz"]["generation"].get("vllm") or {}
                share = vllm.get("gpu_memory_utilization", VLLM_MEMORY_SHARE)
                check_free_memory(share, "aitz.generation.vllm.gpu_memory_utilization")
        if estimates:
            prompts = estimate_run_prompts(params)
            check_context_length(params, prompts)
            check_training_memory(params, prompts, gpus)
        if INITIAL_POLICY in names and catalog.exists(INITIAL_POLICY):
            check_published(policy_info(catalog.load(INITIAL_POLICY)), bootstrap)
        cycles = sorted(
            int(name.split(".")[0].removeprefix("cycle_"))
            for name in names
            if name.startswith("cycle_") and name.endswith(".tasks")
        )
        for cycle in cycles:
            tasks, policy = (
                f"{cycle_namespace(cycle)}.tasks",
                f"{cycle_namespace(cycle - 1)}.checkpoint",
            )
            if not catalog.exists(tasks):
                continue
            source = _filepath(catalog, tasks)
            if not catalog.exists(policy):
                raise CheckpointError(
                    f"{source}: a collection exists, but not the policy that made it "
                    f"({_filepath(catalog, policy)}); restore that policy, or remove the outputs "
                    f"of cycle {cycle} and of every later cycle and rerun"
                )
            config = collect_config(params["collect"], params["train"], run)
            expected = settings_of(config, run, policy_info(catalog.load(policy)))
            check_collection_settings(catalog.load(tasks), expected, source)

    def _take_lock(
        self, section: str, staging_dir: str, experiment: str, checkpoints: set[str], catalog: Any
    ) -> None:
        """Stage where the catalog publishes ``checkpoints`` from, and hold ``experiment``'s lock
        in ``staging_dir`` (``section``'s: ``run`` for the cycles, ``aitz`` for its pipeline,
        whose data tag names its staging folder).

        A staging folder other than the catalog's left published manifests pointing into staging
        (where a later run's cleanup deletes them); a second run of the same experiment in the
        same data folder cleaned up the first one's live trainer folder.
        """
        staging = Path(staging_dir).resolve()
        for name in sorted(checkpoints):
            published_from = _described(catalog, name).get("staging_dir")
            if published_from is not None and Path(published_from).resolve() != staging:
                raise ConfigError(
                    f"{section}.staging_dir: {staging_dir} is not the folder the catalog "
                    f"publishes checkpoints from ({published_from}); leave {section}.staging_dir "
                    "at its default"
                )
        field = "run.experiment" if section == "run" else "data_tag"
        self._hold(
            staging / f"{experiment}.lock",
            f"{field}: another run of {experiment!r} is writing this data folder",
            f"wait for it, or give this run another --params {field}",
        )

    def _hold(self, path: Path, what: str, remedy: str, *, shared: bool = False) -> None:
        """Hold the lock at ``path`` (``shared``: beside other readers) until the run ends; where
        another process holds it, say in one line ``what`` (and which process) and the
        ``remedy``."""
        lock = ProcessLock(path, shared=shared)
        try:
            lock.acquire()
        except LockedError as error:
            raise ConfigError(f"{what} ({error}); {remedy}") from None
        self._locks.append(lock)

    def _release(self) -> None:
        while self._locks:
            self._locks.pop().release()

    @hook_impl
    def after_pipeline_run(self) -> None:
        self._release()

    @hook_impl
    def on_pipeline_error(self) -> None:
        self._release()


def _writes_any(outputs: set[str], kinds: tuple[str, ...]) -> bool:
    """Whether a pipeline's ``outputs`` include a dataset of one of ``kinds`` (the name after the
    namespace: ``cycle_2.eval_results`` is an ``eval_results``)."""
    return any(name.rsplit(".", 1)[-1] in kinds for name in outputs)


def _described(catalog: Any, name: str) -> dict[str, Any]:
    """The dataset's description; empty for one the catalog does not declare (kept in memory)."""
    dataset = catalog.get(name) if hasattr(catalog, "get") else None
    return dataset._describe() if dataset is not None else {}


def _read_by_every_experiment(filepath: str) -> bool:
    """Whether a dataset's file is one every experiment of its data folder reads: cycle 0's or
    the cycle-1 corpus's, directly in ``shared/cycle_<k>/`` (not cycle 1's cached responses and
    scores, a folder below it for each setting they depend on)."""
    return Path(filepath).parts[-3:-2] == (SHARED_FOLDER,)


def _filepath(catalog: Any, name: str) -> str:
    """The dataset's file, for messages (its name where it has none)."""
    return str(_described(catalog, name).get("filepath", name))
