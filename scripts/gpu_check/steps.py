"""The steps of the check (:class:`GpuCheck`) and what they share: versions, modules, greedy
tokens compared with transformers' ``generate``, the scratch project of the smoke run."""

from __future__ import annotations

import collections
import dataclasses
import importlib.metadata
import importlib.util
import json
import logging
import math
import os
import platform
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import resail_pipeline

from .options import (
    AITZ_PARAMETERS,
    AITZ_SIZES,
    LN2,
    MIN_TRAINER_MIB,
    PHASES_FILE,
    SAMPLER_MODES,
    SAMPLER_SPEEDUP_TARGET,
    SCALE_PARAMETERS,
    SMOKE_FOLDER,
    TAIL_LINES,
    ZERO2_ENGINE,
    ZERO2_PARAMETERS,
    ZERO2_TRAJECTORIES,
    CheckFailed,
    CheckOptions,
)

if TYPE_CHECKING:
    from resail_pipeline.devices import DeviceMemory

logger = logging.getLogger(__name__)


def _tail(path: Path, lines: int = TAIL_LINES) -> str:
    """The last ``lines`` lines of a log file (``""`` when it is missing)."""
    if not path.is_file():
        return ""
    with open(path, errors="replace") as handle:
        return "".join(collections.deque(handle, maxlen=lines))


def _versions() -> dict[str, str | None]:
    """Versions of Python, torch (and its CUDA), transformers and the optional packages."""
    import torch
    import transformers

    def version(name: str) -> str | None:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return None

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "transformers": transformers.__version__,
        "deepspeed": version("deepspeed"),
        "kedro": version("kedro"),
        "pandas": version("pandas"),
        "pyarrow": version("pyarrow"),
    }


def missing_modules(names: Sequence[str]) -> list[str]:
    """The modules of ``names`` this Python cannot import."""
    return [name for name in names if importlib.util.find_spec(name) is None]


def _one_cycle(manifest: str | Path, folder: Path, checkpoint: str, name: str) -> dict[str, Any]:
    """The ``train.run`` section of a check's one-cycle training under ``folder``: its inputs'
    ``manifest``, the policy published to ``folder/checkpoint`` as ``name``, the run's files in
    ``folder/run``."""
    return {
        "manifest": str(manifest),
        "checkpoint": str(folder / checkpoint),
        "run_dir": str(folder / "run"),
        "policy_name": name,
        "cycle": 1,
    }


class GpuCheck:
    """The steps of the check on one device; each step reads what the earlier ones produced.

    Args:
        options: what to run.
        work: the scratch folder (exists, empty).
    """

    def __init__(self, options: CheckOptions, work: Path) -> None:
        import torch

        self.options = options
        self.work = work
        self.device = torch.device("cuda", 0) if options.device == "cuda" else torch.device("cpu")
        self.policy = options.policy_path
        self.trajectories: Any = None  # the episodes of the generation step (pandas)
        self.steps: Any = None
        self.summaries: Any = None
        self.probe_set: Any = None  # the probe step's set and measurement
        self.probe_initial: dict[tuple[str, int], float] = {}
        self.manifest: Path | None = None
        self.first_loss: float | None = None  # update 1's loss in the first training step
        # what the running step has measured so far: the long steps (aitz, scale) write into it
        # as they go, so that a step stopped before its end (the budget overrun, a SIGTERM)
        # still reports what it measured; emptied as each step starts
        self.partial: dict[str, Any] = {}

    # -- generation ---------------------------------------------------------------------------

    def generation(self) -> dict[str, Any]:
        """Episodes through the project's backend, then its greedy tokens against ``generate``."""
        import torch

        from resail_pipeline.collection import CollectConfig, collect
        from resail_pipeline.envs import make_env
        from resail_pipeline.experience.summarize import SummarizeConfig, summarize_trajectories
        from resail_pipeline.generation import SamplingParams, make_generator
        from resail_pipeline.prompts import chat_prompt

        options = self.options
        device = self.device.type
        start = time.perf_counter()
        with make_generator(
            "transformers", self.policy, device=device, dtype="auto", progress=False
        ) as generator:
            load_s = time.perf_counter() - start
            auto_dtype = str(next(generator.model.parameters()).dtype).removeprefix("torch.")
            config = CollectConfig(
                num_trajectories=options.tasks,
                max_new_tokens=options.max_new_tokens,
                max_live=None,
            )
            _, trajectories, steps = collect(
                lambda: make_env("textcraft", max_steps=options.max_steps),
                generator,
                config,
                cycle=1,
                method="react",
                seed=options.seed,
            )
            rollout_s = time.perf_counter() - start - load_s
            prompts = _comparison_prompts(steps, options.prompts)
            texts = [chat_prompt(generator.tokenizer, p) for p in prompts]
            greedy = SamplingParams(temperature=0.0, max_new_tokens=options.max_new_tokens)
            auto_equal = None
            if auto_dtype != "float32":  # the backend's own precision: agreement, for the record
                ours = generator.generate(texts, greedy)
                theirs = _hf_greedy(generator, texts, options.max_new_tokens)
                auto_equal = sum(a.token_ids == b for a, b in zip(ours, theirs, strict=True))
        self.trajectories, self.steps = trajectories, steps
        self.summaries = summarize_trajectories(
            trajectories, steps, SummarizeConfig(source="rules")
        )
        details: dict[str, Any] = {
            "episodes": len(trajectories),
            "env_steps": len(steps),
            "success_rate": round(float(trajectories["success"].mean()), 3),
            "valid_action_rate": round(float(steps["action_valid"].mean()), 3),
            "load_s": round(load_s, 2),
            "rollout_s": round(rollout_s, 2),
            "backend_dtype": auto_dtype,
            "backend_dtype_equal": None if auto_equal is None else f"{auto_equal}/{len(texts)}",
        }
        if not bool(steps["action_valid"].any()):
            raise CheckFailed("rollout: no step of any episode had a valid action", details)

        with make_generator(
            "transformers", self.policy, device=device, dtype="float32", progress=False
        ) as generator:
            start = time.perf_counter()
            ours = generator.generate(texts, greedy)
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            details["backend_generate_s"] = round(time.perf_counter() - start, 2)
            start = time.perf_counter()
            theirs = _hf_greedy(generator, texts, options.max_new_tokens)
            details["hf_generate_s"] = round(time.perf_counter() - start, 2)
        details.update(
            prompts=len(texts),
            prompt_tokens=[
                len(generator.tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts
            ],
            generated_tokens=sum(len(g.token_ids) for g in ours),
        )
        _check_greedy(ours, theirs, details)
        return details

    # -- probe --------------------------------------------------------------------------------

    def _train_section(self, parameters: Path) -> dict[str, Any]:
        """The ``train`` section of the project's parameter file ``parameters`` (a path under
        the project)."""
        import yaml

        path = self.options.project / parameters
        if not path.is_file():
            raise FileNotFoundError(f"{path}: not found; --project must be the Kedro project")
        return dict(yaml.safe_load(path.read_text())["train"])

    def _train_config(self, name: str, engine: dict[str, Any], probe: bool) -> Any:
        """The project's ``train`` parameters (conf/base) at the check's small budget."""
        from resail_pipeline.training import TrainConfig

        train = self._train_section(Path("conf") / "base" / "parameters_train.yml")
        precision = "bf16" if self.device.type == "cuda" else "auto"
        run_dir = self.work / name
        data = {
            **train,
            "method": "oel_resail",
            "schedule": {
                "updates": self.options.updates,
                "trajectories_per_update": 2,
                "seed": self.options.seed,
            },
            "engine": {**train.get("engine", {}), "precision": precision, **engine},
            "responses": {**train.get("responses", {}), "max_tokens": self.options.max_new_tokens},
            "probe": {
                **train.get("probe", {}),
                "enabled": probe,
                "num_trajectories": self.options.tasks,
            },
            "compile": False,
            "run": _one_cycle(self.manifest or "", run_dir, "policy", f"gpu-check-{name}"),
        }
        return TrainConfig.from_dict(data, "train")

    def probe(self) -> dict[str, Any]:
        """The probe set built on the device; the initial policy's sensitivity on it."""
        import torch

        from resail_pipeline.checkpoints import read_checkpoint_info
        from resail_pipeline.training import ProbeSet
        from resail_pipeline.training.probe import probe_sensitivity
        from resail_pipeline.training.run import (
            load_frozen,
            probe_set_with_frozen,
            resolve_for_machine,
        )
        from resail_pipeline.training.views import ResponseLogits

        self._need_corpus()
        config = resolve_for_machine(self._train_config("probe", {"kind": "single"}, True))
        info = read_checkpoint_info(self.policy)
        start = time.perf_counter()
        frame = probe_set_with_frozen(
            str(self.policy),
            info.policy_id,
            config,
            self.trajectories,
            self.steps,
            self.summaries,
        )
        build_s = time.perf_counter() - start
        if frame.empty:
            raise CheckFailed("the probe set is empty: no episode had an accepted summary")
        probe_set = ProbeSet.from_frame(frame, source="probe set")
        model, tokenizer = load_frozen(str(self.policy), config.engine)
        module = ResponseLogits(model)
        steps = probe_set.steps
        values: list[float] = []
        counts: list[int] = []
        start = time.perf_counter()
        size = config.probe.micro_batch_steps
        for i in range(0, len(steps), size):
            part = steps[i : i + size]
            jsd, tokens = probe_sensitivity(
                module,
                part,
                [probe_set.support[(s.traj_id, s.t)] for s in part],
                pad_id=tokenizer.pad_token_id,
                device=next(model.parameters()).device,
                precision=config.engine.autocast_precision,
                chunk_size=config.engine.chunk_size,
            )
            values += jsd.tolist()
            counts += tokens.tolist()
        measure_s = time.perf_counter() - start
        del module, model
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        self.probe_set = frame
        self.probe_initial = {(s.traj_id, s.t): v for s, v in zip(steps, values, strict=True)}
        mean = sum(v * c for v, c in zip(values, counts, strict=True)) / max(sum(counts), 1)
        details = {
            "trajectories": len(probe_set.data.trajectories),
            "steps": len(steps),
            "response_tokens": int(sum(counts)),
            "top_k": probe_set.top_k,
            "precision": config.engine.autocast_precision,
            "sensitivity_nats": round(mean, 6),
            "build_s": round(build_s, 2),
            "measure_s": round(measure_s, 2),
        }
        outside = [v for v in values if not (0.0 <= v <= LN2 + 1e-6)]
        if outside:
            raise CheckFailed(
                f"{len(outside)} probe value(s) outside [0, ln 2]: {outside[:3]}", details
            )
        return details

    # -- training -----------------------------------------------------------------------------

    def _inputs(self) -> Path:
        """The trainer's input manifest: the episodes, their summaries and the probe set."""
        from resail_pipeline.training import write_inputs

        if self.manifest is None:
            self._need_corpus()
            self.manifest = write_inputs(
                self.work / "inputs",
                policy=self.policy,
                steps=self.steps,
                summaries=self.summaries,
                probe=self.probe_set,
            )
        return self.manifest

    def train(self, engine: str, zero_stage: int = 2) -> dict[str, Any]:
        """One cycle through the launcher with ``engine`` (``single`` or ``deepspeed``, at
        ``zero_stage``: under ZeRO-3 the student's weights are partitioned and gathered as its
        modules run)."""
        from resail_pipeline.checkpoints import read_checkpoint_info, verify_weights
        from resail_pipeline.devices import DeviceMemory
        from resail_pipeline.training import TrainingFailed, launch

        self._inputs()
        probe = self.probe_set is not None
        name = f"train_{engine}" if zero_stage == 2 else f"train_zero{zero_stage}"
        engine_settings = {"kind": engine, "world_size": 1, "zero_stage": zero_stage}
        config = self._train_config(name, engine_settings, probe)
        with DeviceMemory(self.device) as memory:
            start = time.perf_counter()
            try:
                result = launch(config, self.work / name / "train.log")
            except TrainingFailed as error:
                raise CheckFailed(f"{error} (log: {self.work / name / 'train.log'})") from None
            seconds = time.perf_counter() - start
        resolved = result.config.engine
        metrics = result.metrics
        log = result.log_path.read_text(errors="replace")
        details: dict[str, Any] = {
            "engine": resolved.kind,
            "world_size": resolved.world_size,
            "precision": resolved.precision,
            "zero_stage": resolved.zero_stage if resolved.kind == "deepspeed" else None,
            "updates": len(metrics),
            "losses": [round(float(v), 6) for v in metrics["loss"]],
            "launch_s": round(seconds, 2),
            "seconds_per_update": {
                part: round(float(metrics[f"seconds_{part}"].mean()), 3)
                for part in ("response", "scoring", "optimisation", "other")
            },
            "log": str(result.log_path),
        }
        placement = _placement_in(log)
        details["device"], details["process_group"] = placement or (None, None)
        problems = []
        if f"engine {engine} x 1" not in log:
            problems.append(f"the log does not show 'engine {engine} x 1'")
        verify_weights(result.checkpoint.path)
        moved = result.checkpoint.sha256 != read_checkpoint_info(self.policy).sha256
        problems += self._trained(placement, engine, metrics, moved, memory)
        first = float(metrics["loss"].iloc[0]) if len(metrics) else math.nan
        if resolved.precision == "fp32" and self.first_loss is not None:
            # the same update in fp32 on every engine: the same loss, to rounding
            relative = abs(first - self.first_loss) / max(abs(self.first_loss), 1e-12)
            details["first_loss_relative_diff"] = relative
            if not relative <= 1e-3:
                problems.append(
                    f"update 1's loss differs from the first engine's by {relative:.2%}"
                )
        elif self.first_loss is None:
            self.first_loss = first
        if probe:
            details.update(self._probe_rows(result.probe, resolved.precision, problems))
        if problems:
            raise CheckFailed("; ".join(problems), details)
        return details

    def _probe_rows(self, rows: Any, precision: str, problems: list[str]) -> dict[str, Any]:
        """The trainer's probe rows against the probe step: every update, update 0 equal to it
        (to rounding in fp32; within 5% over all tokens in bf16, whose kernels round by shape)."""
        keys = set(self.probe_initial)
        updates = sorted(int(u) for u in rows["update"].unique())
        if updates != list(range(self.options.updates + 1)):
            problems.append(f"probe rows for updates {updates}, not 0..{self.options.updates}")
        outside = rows[(rows["jsd"] < 0) | (rows["jsd"] > LN2 + 1e-6) | rows["jsd"].isna()]
        if len(outside):
            problems.append(f"{len(outside)} probe value(s) outside [0, ln 2]")
        start = rows[rows["update"] == 0]
        got = {
            (str(r.traj_id), int(r.t)): (float(r.jsd), int(r.tokens)) for r in start.itertuples()
        }
        if set(got) != keys:
            problems.append(f"update 0 probes {len(got)} steps, the probe set has {len(keys)}")
            return {}
        diffs = [abs(got[k][0] - self.probe_initial[k]) for k in keys]
        tokens = sum(got[k][1] for k in keys)
        mean_got = sum(got[k][0] * got[k][1] for k in keys) / tokens
        mean_want = sum(self.probe_initial[k] * got[k][1] for k in keys) / tokens
        relative = abs(mean_got - mean_want) / max(mean_want, 1e-12)
        if precision == "fp32":
            bad = [
                k
                for k in keys
                if abs(got[k][0] - self.probe_initial[k]) > 1e-5 + 1e-3 * self.probe_initial[k]
            ]
            if bad:
                problems.append(f"update 0's probe differs from the initial policy's at {bad[:3]}")
        elif relative > 0.05:
            problems.append(f"update 0's probe differs from the initial policy's by {relative:.1%}")
        means = (
            rows.assign(weighted=rows["jsd"] * rows["tokens"])
            .groupby("update")[["weighted", "tokens"]]
            .sum()
        )
        return {
            "probe_updates": updates,
            "probe_sensitivity_nats": [
                round(float(v), 6) for v in means["weighted"] / means["tokens"]
            ],
            "probe_update0_max_abs_diff": float(max(diffs)),
            "probe_update0_relative_diff": round(relative, 6),
        }

    # -- aitz ---------------------------------------------------------------------------------

    def _aitz_config(self, engine: str, initial: Path | None = None) -> Any:
        """conf/base's ``aitz`` at ``make rehearse-aitz``'s sizes, on this device, in the work
        folder, with the check's updates and seed; ``initial``: a given initial policy."""
        import yaml

        from resail_pipeline.config import build
        from resail_pipeline.gui.config import AitzConfig

        path = self.options.project / AITZ_PARAMETERS
        if not path.is_file():
            raise FileNotFoundError(f"{path}: not found; --project must be the Kedro project")
        cuda = self.device.type == "cuda"
        folder = self.work / "aitz"
        here = {
            "data": {"root": str(folder / "episodes")},
            "initial": {
                "device": self.device.type,
                "dtype": "auto",
                "path": None if initial is None else str(initial),
            },
            "offline": {
                "schedule": {"updates": self.options.updates, "seed": self.options.seed},
                "engine": {
                    "kind": engine,
                    "world_size": 1,
                    "zero_stage": 2,
                    "precision": "bf16" if cuda else "auto",
                },
            },
            "staging_dir": str(folder / "staging"),
        }
        data = _merged(_merged(yaml.safe_load(path.read_text())["aitz"], AITZ_SIZES), here)
        return build(AitzConfig, data, "aitz")

    def aitz(self) -> dict[str, Any]:
        """The GUI path: the small Qwen3-VL built and warm-started here, its greedy tokens
        against ``generate`` in fp32, its attempts and summaries, one OEL run in the trainer's
        process(es)."""
        import torch

        from resail_pipeline.devices import DeviceMemory
        from resail_pipeline.generation import SamplingParams
        from resail_pipeline.gui import experiment, offline
        from resail_pipeline.gui.policy import VisionPolicy
        from resail_pipeline.prompts.render import gui_action_messages
        from resail_pipeline.training import TrainingFailed
        from resail_pipeline.training.launcher import LOG_FILE

        engine = "single" if missing_modules(["deepspeed"]) else "deepspeed"
        config = self._aitz_config(engine)
        root = Path(config.data.root)
        details = self.partial  # kept if the step is stopped before its end
        details["engine"] = engine
        start = time.perf_counter()
        train, test = experiment.read_splits(config)
        shape = self.options.aitz_shape_path
        if shape is not None:  # a given initial policy of that shape, random weights
            config = self._aitz_config(engine, self._shaped_vision_policy(shape, train))
            details.update(shape=str(shape), build_and_save_s=round(time.perf_counter() - start, 2))
        pool = offline.training_pool(train, config.offline.pool_size, config.offline.schedule.seed)
        initial, losses = experiment.build_initial_policy(config, train, pool)
        if len(losses):
            details.update(
                warm_start_s=round(time.perf_counter() - start, 2),
                warm_start_loss=[round(float(losses["loss"].iloc[i]), 4) for i in (0, -1)],
            )

        # fp32 greedy tokens of the action prompts, against transformers' own generate
        policy = VisionPolicy.load(initial.path, self.device, torch.float32)
        details["parameters"] = sum(p.numel() for p in policy.model.parameters())
        # each episode's first and last step in turn: short and long histories
        ends = pool.sort_values(["episode_id", "step_id"]).groupby("episode_id").nth([0, -1])
        rows = list(ends.head(self.options.prompts).itertuples())
        prompts = [
            policy.encode(
                gui_action_messages(r.instruction, list(r.history)), [root / r.image_path]
            )
            for r in rows
        ]
        tokens = config.offline.evaluation.max_new_tokens
        ours = policy.generate(prompts, SamplingParams(temperature=0.0, max_new_tokens=tokens))
        theirs = _hf_vision_greedy(policy, prompts, tokens)
        policy.close()
        details.update(
            prompt_tokens=[len(p.input_ids) for p in prompts],
            image_patches=[int(p.image_grid_thw.prod()) for p in prompts],
        )
        _check_greedy(ours, theirs, details)

        start = time.perf_counter()
        with experiment.open_generator(config, initial.path) as generator:
            attempts = offline.diagnose(generator, pool, root, config.offline)
            summaries = offline.summarize(generator, pool, attempts, root, config.offline)
        details.update(
            generation_s=round(time.perf_counter() - start, 2),
            steps=len(pool),
            attempts_correct=f"{int(attempts['correct'].sum())}/{len(attempts)}",
            summaries=summaries["source"].value_counts().sort_index().to_dict(),
        )

        with DeviceMemory(self.device) as memory:
            start = time.perf_counter()
            try:
                trained, metrics, curve = experiment.run_oel(
                    config, initial, pool, summaries, test, "oel"
                )
            except TrainingFailed as error:
                raise CheckFailed(str(error), details) from None
            seconds = time.perf_counter() - start
        log = (Path(trained.path) / LOG_FILE).read_text(errors="replace")
        placement = _placement_in(log)
        details.update(
            launch_s=round(seconds, 2),
            updates=len(metrics),
            losses=[round(float(v), 6) for v in metrics["loss"]],
            monitored_accuracy=[round(float(v), 3) for v in curve["accuracy"]],
        )
        details["device"], details["process_group"] = placement or (None, None)
        problems = self._trained(
            placement, engine, metrics, trained.sha256 != initial.sha256, memory
        )
        if problems:
            raise CheckFailed("; ".join(problems), details)
        return details

    def _shaped_vision_policy(self, shape: Path, train: Any) -> Path:
        """A Qwen3-VL of ``shape``'s config.json with random weights (bf16 on a GPU), over the GUI
        tokenizer of ``train`` and the small image processor, saved in the work folder."""
        import torch
        from transformers import AutoConfig, Qwen3VLForConditionalGeneration

        from resail_pipeline.gui.experiment import gui_tokenizer
        from resail_pipeline.gui.policy import VisionPolicy
        from resail_pipeline.modeling.vision import small_image_processor, with_vision_tokens

        if not (shape / "config.json").is_file():
            raise FileNotFoundError(f"aitz_shape {shape}: no config.json")
        tokenizer = gui_tokenizer(train)
        model_config = AutoConfig.from_pretrained(shape, trust_remote_code=False)
        if model_config.model_type != "qwen3_vl":
            raise CheckFailed(
                f"aitz_shape {shape}: a {model_config.model_type!r} model, not qwen3_vl"
            )
        try:
            model_config = with_vision_tokens(model_config, tokenizer)
        except ValueError as error:
            raise CheckFailed(f"aitz_shape {shape}: {error}") from None
        torch.manual_seed(self.options.seed)
        with torch.device(self.device):  # initialised where it runs
            model = Qwen3VLForConditionalGeneration(model_config)
        if self.device.type == "cuda":
            model = model.to(torch.bfloat16)
        model.generation_config.pad_token_id = tokenizer.pad_token_id
        model.generation_config.eos_token_id = tokenizer.eos_token_id
        path = self.work / "aitz" / "shaped-initial"
        VisionPolicy(model, tokenizer, small_image_processor()).save(
            path, name="gpu-check-aitz-shaped", method="react"
        )
        del model
        self._release()
        return path

    # -- smoke --------------------------------------------------------------------------------

    def smoke(self, timeout: float) -> dict[str, Any]:
        """One cycle of ``kedro run --env smoke --pipelines=cycle`` in a scratch project, killed
        (with every process it started) after ``timeout`` seconds."""
        import pandas as pd
        import yaml

        project = self.work / "smoke"
        _scratch_project(self.options.project, project)
        device = self.device.type
        params = [f"run.generation.transformers.device={device}"]
        if device == "cuda" and missing_modules(["deepspeed"]):
            params.append("train.engine.kind=single")  # auto would take DeepSpeed
        command = [
            *(sys.executable, "-m", "kedro", "run", "--env", "smoke", "--pipelines", "cycle"),
            *("--params", ",".join(params)),
        ]
        env = {**os.environ, "RESAIL_CYCLES": "1", "COLUMNS": "200"}
        log = project / "kedro.log"
        logger.info("smoke: python %s (log: %s)", " ".join(command[1:]), log)
        start = time.perf_counter()
        with (
            open(log, "w") as handle,
            subprocess.Popen(
                command,
                cwd=project,
                env=env,
                stdout=handle,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: a timeout ends all of it
            ) as process,
        ):
            try:
                code = process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                raise CheckFailed(
                    f"kedro run did not finish in {timeout:.0f} s; last lines of {log}:\n"
                    + _tail(log)
                ) from None
        details: dict[str, Any] = {
            "command": " ".join(["python", *command[1:]]),
            "run_s": round(time.perf_counter() - start, 2),
            "log": str(log),
        }
        if code != 0:
            raise CheckFailed(
                f"kedro run exited with status {code}; last lines of {log}:\n{_tail(log)}", details
            )
        data = project / "data"
        tasks = pd.read_parquet(data / "01_raw" / SMOKE_FOLDER / "shared/cycle_1/tasks.parquet")
        generation = json.loads(tasks["settings"].iloc[0])["generation"]
        # the train node publishes the trainer's configuration and log beside the checkpoint
        policy = data / "06_models" / SMOKE_FOLDER / "oel_resail/cycle_1/policy"
        engine = yaml.safe_load((policy / "train_config.yaml").read_text())["engine"]
        placement = _placement_in((policy / "train.log").read_text(errors="replace"))
        summary = pd.read_parquet(
            data / "07_model_output" / SMOKE_FOLDER / "oel_resail/cycle_1/eval_summary.parquet"
        )
        details.update(
            generation=generation,
            engine={k: engine[k] for k in ("kind", "world_size", "precision")},
            trainer_device=placement[0] if placement else None,
            success_rate={str(r.view): round(float(r.mean), 3) for r in summary.itertuples()},
        )
        problems = []
        if generation.get("device") != device:
            problems.append(
                f"the corpus was collected on {generation.get('device')!r}, not {device}"
            )
        if placement != self._placement(engine["kind"]):
            problems.append(
                f"the trainer ran on {placement}, not {self._placement(engine['kind'])}"
            )
        if problems:
            raise CheckFailed("; ".join(problems), details)
        return details

    # -- scale --------------------------------------------------------------------------------

    def _random_policy(
        self,
        name: str,
        shape: Path | None = None,
        layers: int | None = None,
        option: str = "scale_shape",
    ) -> tuple[Any, Any, Any, float]:
        """A model of ``shape``'s shape (default :attr:`CheckOptions.scale_shape_path`), its first
        ``layers`` decoder layers only where given, with random weights, built on the device it
        runs on, over the policy's tokenizer: ``(model, tokenizer, its config, seconds)``.
        ``option``: the setting that names ``shape``, for messages."""
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM

        from resail_pipeline.checkpoints import load_tokenizer

        options = self.options
        shape = options.scale_shape_path if shape is None else shape
        if not (shape / "config.json").is_file():
            raise FileNotFoundError(f"{option} {shape}: no config.json")
        tokenizer = load_tokenizer(self.policy)
        model_config = AutoConfig.from_pretrained(shape, trust_remote_code=False)
        if model_config.vocab_size < len(tokenizer):
            raise CheckFailed(
                f"{option} {shape}: a vocabulary of {model_config.vocab_size}, smaller than "
                f"the policy's tokenizer ({len(tokenizer)})"
            )
        if layers is not None and layers < model_config.num_hidden_layers:
            model_config.num_hidden_layers = layers
            if getattr(model_config, "layer_types", None):  # one entry per layer
                model_config.layer_types = model_config.layer_types[:layers]
        # the tokenizer's special tokens; the logits keep the shape's vocabulary (random weights
        # sample ids the tokenizer lacks, which decode to nothing)
        model_config.pad_token_id = tokenizer.pad_token_id
        model_config.eos_token_id = tokenizer.eos_token_id
        model_config.bos_token_id = None
        start = time.perf_counter()
        torch.manual_seed(options.seed)
        dtype = torch.bfloat16 if self.device.type == "cuda" else torch.float32
        with torch.device(self.device):  # initialised where it runs: seconds, not minutes
            model = AutoModelForCausalLM.from_config(
                model_config, dtype=dtype, trust_remote_code=False
            )
        model.generation_config.pad_token_id = tokenizer.pad_token_id
        model.generation_config.eos_token_id = tokenizer.eos_token_id
        model.config.name_or_path = name
        return model, tokenizer, model_config, time.perf_counter() - start

    def scale(self) -> dict[str, Any]:
        """A policy of :attr:`CheckOptions.scale_shape_path`'s shape with random weights: the
        backend's decoding speed, then two SDPO + ReSAIL updates measured against the plan."""
        from resail_pipeline.checkpoints import save_policy
        from resail_pipeline.training.memory import measurement_inputs

        options = self.options
        folder = self.work / "scale"
        start = time.perf_counter()
        model, tokenizer, model_config, _ = self._random_policy("gpu-check-scale")
        policy = folder / "policy"
        save_policy(model, tokenizer, policy, name="gpu-check-scale")
        details = self.partial  # kept if the step is stopped before its end
        details.update(
            shape=str(options.scale_shape_path),
            parameters=sum(p.numel() for p in model.parameters()),
            build_and_save_s=round(time.perf_counter() - start, 2),
        )
        del model
        self._release()
        manifest = measurement_inputs(
            folder,
            policy,
            tokenizer,
            words=options.scale_prompt_words,
            response=options.scale_response_tokens,
        )
        details.update(self._scale_decoding(policy, manifest))
        self._release()
        try:
            details.update(self._scale_training(manifest, folder, model_config))
        except CheckFailed as failure:
            raise CheckFailed(str(failure), {**details, **failure.details}) from None
        return details

    # -- sampler ------------------------------------------------------------------------------

    def sampler(self) -> dict[str, Any]:
        """The trainer's in-loop sampler at the scale shape with random weights: the transformers
        backend with the cache allocated whole at prefill (a GPU's default), ``sampler_rows`` rows
        of one prompt of ``scale_prompt_words`` words, every response run to ``sampler_tokens``
        (the end token's logit is held at 0, far below the largest), in each of
        :data:`~.options.SAMPLER_MODES`: eager, with the decoder compiled, and through the static
        step captured in CUDA graphs (``cuda_graphs``; on the CPU the same step without a graph),
        with eager or compiled functions.
        The allocator's peak beyond the weights must not exceed the plan's sampling terms
        (:func:`~resail_pipeline.training.memory.sampling_terms`), and a capture must not fail;
        the milliseconds of a decode step and the tokens per second of each are recorded, with
        the graphs' speed-up over eager (against :data:`~.options.SAMPLER_SPEEDUP_TARGET`, never
        failed on). Then, for the record: whether the graphs' greedy tokens equal eager's, at the
        scale shape (rows of different lengths) and on the shipped policy (fp32, and bf16 on a
        GPU); and a sweep over ``sampler_sweep_rows``, eager and in graphs, of decode tokens per
        second. On the CPU, where the allocator is not counted, the step records the speeds
        only."""
        import torch

        from resail_pipeline.generation import SamplingParams
        from resail_pipeline.training.memory import GIB, ModelShape, sampling_terms

        options = self.options
        model, tokenizer, model_config, build_s = self._random_policy("gpu-check-sampler")
        model.eval()
        with (
            torch.no_grad()
        ):  # no row ends early: the end token's logit is 0, the largest far above
            head = model.get_output_embeddings().weight
            head.mul_(100.0)
            head[tokenizer.eos_token_id] = 0.0
        vocabulary = sorted(w for w in tokenizer.get_vocab() if w.isalpha())
        words = [vocabulary[(7 * i) % len(vocabulary)] for i in range(options.scale_prompt_words)]
        prompt = " ".join(words)
        prompt_tokens = len(tokenizer(prompt, add_special_tokens=False)["input_ids"])
        rows, response = options.sampler_rows, options.sampler_tokens
        params = SamplingParams(temperature=1.0, max_new_tokens=response, seed=options.seed)
        shape = ModelShape.from_config(model_config)
        plan = sampling_terms(
            shape,
            rows=rows,
            prompt_tokens=prompt_tokens,
            response=response,
            cache_bytes=next(model.parameters()).element_size(),
        )
        planned = sum(b for _, b in plan)
        details = self.partial
        details.update(
            shape=str(options.scale_shape_path),
            build_s=round(build_s, 2),
            rows=rows,
            prompt_tokens=prompt_tokens,
            response_tokens=response,
            plan_gib={name: round(b / GIB, 3) for name, b in plan},
        )
        cuda = self.device.type == "cuda"
        problems = []
        captured = True  # no capture failed
        for label, (compiled, graphs) in SAMPLER_MODES.items():
            generator = self._sampler(model, tokenizer, rows, compiled=compiled, graphs=graphs)
            try:
                # compiles, captures, warms up
                generator.generate([prompt], params.replace(max_new_tokens=2))
                if cuda:
                    torch.cuda.synchronize(self.device)
                    before = torch.cuda.memory_allocated(self.device)
                    torch.cuda.reset_peak_memory_stats(self.device)
                captures = generator.stats.graph_captures
                start = time.perf_counter()
                generations = generator.generate([prompt] * rows, params)
                if cuda:
                    torch.cuda.synchronize(self.device)
                seconds = time.perf_counter() - start
                captures = generator.stats.graph_captures - captures
            except RuntimeError as error:  # a capture that failed (StaticStep names the option)
                if not graphs or "cuda_graphs" not in str(error):
                    raise
                problems.append(f"{label}: {error}")
                details[label] = {"error": str(error)}
                captured = False
                continue
            finally:
                del generator
                self._release()
            lengths = [len(g.token_ids) for g in generations]
            run = {
                "seconds": round(seconds, 2),
                "ms_per_step": round(1000 * seconds / response, 2),
                "tokens_per_s": round(sum(lengths) / seconds, 1),
                "shortest_response": min(lengths),
            }
            if graphs:  # decode batches captured in a CUDA graph: 1 on a GPU, none on the CPU
                run["graph_captures"] = captures
            if cuda:
                peak = int(torch.cuda.max_memory_allocated(self.device)) - before
                run.update(peak_gib=round(peak / GIB, 3), plan_over_peak=round(planned / peak, 3))
                if peak > planned:
                    problems.append(
                        f"{label}: peak {peak / GIB:.2f} GiB over the plan's {planned / GIB:.2f}"
                    )
            if min(lengths) < response:
                problems.append(f"{label}: a response ended after {min(lengths)} tokens")
            details[label] = run
        for label in SAMPLER_MODES:
            if label != "eager" and "seconds" in details.get(label, {}):
                speedup = details["eager"]["seconds"] / details[label]["seconds"]
                details[f"{label}_speedup"] = round(speedup, 2)
        if "graphs_speedup" in details:
            details["graphs_target_met"] = details["graphs_speedup"] >= SAMPLER_SPEEDUP_TARGET
        if captured:
            # rows of different lengths: padding, and each row's new tokens in its own columns
            prompts = [" ".join(words[: max(1, len(words) - 37 * i)]) for i in range(rows)]
            details["greedy"] = self._greedy_agreement(
                model, tokenizer, prompts, options.sampler_greedy_tokens
            )
            details["rows_sweep"] = self._rows_sweep(model, tokenizer, prompt)
            del model
            self._release()
            details["shipped_greedy"] = self._shipped_greedy()
        if problems:
            raise CheckFailed("; ".join(problems), details)
        return details

    def _sampler(
        self, model: Any, tokenizer: Any, rows: int, *, compiled: bool, graphs: bool
    ) -> Any:
        """The in-loop sampler over ``model``: one decode batch of ``rows`` rows, its cache
        allocated whole at prefill."""
        from resail_pipeline.generation.transformers_backend import TransformersGenerator

        return TransformersGenerator(
            model,
            tokenizer,
            policy_id="gpu-check-sampler",
            batch_size=rows,
            preallocate=True,
            compile=compiled,
            cuda_graphs=graphs,
            progress=False,
        )

    def _greedy_agreement(
        self, model: Any, tokenizer: Any, prompts: list[str], tokens: int
    ) -> dict[str, Any]:
        """Greedy responses to ``prompts`` (``tokens`` each at most) eager and through CUDA
        graphs, one decode batch each: how many rows are equal token for token, and the first
        step at which a row differs (``None``: none does)."""
        from resail_pipeline.generation import SamplingParams

        params = SamplingParams(temperature=0.0, max_new_tokens=tokens)
        out: dict[str, list[Any]] = {}
        captures = 0
        for label, graphs in (("eager", False), ("graphs", True)):
            generator = self._sampler(model, tokenizer, len(prompts), compiled=False, graphs=graphs)
            out[label] = generator.generate(prompts, params)
            captures += generator.stats.graph_captures
            del generator
            self._release()
        firsts = []
        for a, b in zip(out["graphs"], out["eager"], strict=True):
            if a.token_ids != b.token_ids:
                pairs = zip(a.token_ids, b.token_ids, strict=False)
                same = next((k for k, (x, y) in enumerate(pairs) if x != y), None)
                firsts.append(min(len(a.token_ids), len(b.token_ids)) if same is None else same)
        return {
            "rows_equal": f"{len(prompts) - len(firsts)}/{len(prompts)}",
            "first_difference": min(firsts) if firsts else None,
            "ended_rows": sum(g.finished for g in out["eager"]),
            "graph_captures": captures,
        }

    def _shipped_greedy(self) -> dict[str, Any]:
        """:meth:`_greedy_agreement` on the shipped policy, ``max_new_tokens`` per response: in
        fp32, and in bf16 (the trainer's precision) on a GPU. The prompts are the generation
        step's (:func:`_comparison_prompts`) when it ran, else chat prompts of the policy's
        vocabulary of several lengths."""
        import torch

        from resail_pipeline.checkpoints import load_model, load_tokenizer
        from resail_pipeline.prompts import chat_prompt

        options = self.options
        tokenizer = load_tokenizer(self.policy)
        result: dict[str, Any] = {}
        if self.steps is not None:
            messages = _comparison_prompts(self.steps, options.prompts)
            result["prompts"] = "episodes"
        else:
            vocabulary = sorted(w for w in tokenizer.get_vocab() if w.isalpha())
            messages = [
                " ".join(vocabulary[(5 * i + j) % len(vocabulary)] for j in range(8 + 24 * i))
                for i in range(options.prompts)
            ]
            result["prompts"] = "words"
        texts = [chat_prompt(tokenizer, m) for m in messages]
        dtypes = [torch.float32] + ([torch.bfloat16] if self.device.type == "cuda" else [])
        for dtype in dtypes:
            model = load_model(self.policy, dtype, self.device).eval()
            name = str(dtype).removeprefix("torch.")
            result[name] = self._greedy_agreement(model, tokenizer, texts, options.max_new_tokens)
            del model
            self._release()
        return result

    def _rows_sweep(self, model: Any, tokenizer: Any, prompt: str) -> list[dict[str, Any]]:
        """Decode tokens per second of batches of ``sampler_sweep_rows`` rows of ``prompt`` at
        the scale shape, eager and through CUDA graphs (eager functions, the trainer's GPU
        default): each from the difference of a run of 2 tokens and one of 2 +
        ``sampler_sweep_tokens``, so that prefill, capture and warm-up cancel."""
        from resail_pipeline.generation import SamplingParams

        options = self.options
        short, long = 2, 2 + options.sampler_sweep_tokens
        params = SamplingParams(temperature=1.0, max_new_tokens=short, seed=options.seed)
        sweep = []
        for rows in options.sampler_sweep_rows:
            entry: dict[str, Any] = {"rows": rows}
            for label, graphs in (("eager", False), ("graphs", True)):
                generator = self._sampler(model, tokenizer, rows, compiled=False, graphs=graphs)
                generator.generate([prompt] * rows, params)  # warms up
                seconds = {}
                for steps in (short, long):
                    start = time.perf_counter()
                    out = generator.generate([prompt] * rows, params.replace(max_new_tokens=steps))
                    seconds[steps] = time.perf_counter() - start  # tokens read back: synchronised
                    if min(len(g.token_ids) for g in out) < steps:
                        raise CheckFailed(f"rows sweep: a response ended before {steps} tokens")
                del generator
                self._release()
                step_s = max(seconds[long] - seconds[short], 1e-9) / (long - short)
                entry[f"{label}_ms_per_step"] = round(1000 * step_s, 2)
                entry[f"{label}_tokens_per_s"] = round(rows / step_s, 1)
            entry["graphs_speedup"] = round(
                entry["graphs_tokens_per_s"] / entry["eager_tokens_per_s"], 2
            )
            sweep.append(entry)
            self.partial["rows_sweep"] = sweep  # what finished survives a stop
        return sweep

    def _scale_decoding(self, policy: Path, manifest: Path) -> dict[str, Any]:
        """The transformers backend (the collection's settings: ``auto`` precision, temperature
        0.4) on the inputs' ordinary prompts, every response run to its token budget."""
        import pandas as pd
        import torch

        from resail_pipeline.generation import SamplingParams, make_generator
        from resail_pipeline.prompts import chat_prompt
        from resail_pipeline.training.data import read_manifest

        options = self.options
        prompts = pd.read_parquet(read_manifest(manifest).steps)["prompt"].tolist()
        start = time.perf_counter()
        with make_generator(
            "transformers", policy, device=self.device.type, dtype="auto", progress=False
        ) as generator:
            load_s = time.perf_counter() - start
            texts = [chat_prompt(generator.tokenizer, p) for p in prompts]
            params = SamplingParams(
                temperature=0.4, max_new_tokens=options.scale_response_tokens, seed=options.seed
            )
            start = time.perf_counter()
            generations = generator.generate(texts, params)
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            seconds = time.perf_counter() - start
            dtype = str(next(generator.model.parameters()).dtype).removeprefix("torch.")
            prompt_tokens = [
                len(generator.tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts
            ]
        tokens = sum(len(g.token_ids) for g in generations)
        return {
            "decoding": {
                "dtype": dtype,
                "load_s": round(load_s, 2),
                "prompts": len(texts),
                "prompt_tokens": max(prompt_tokens),
                "generated_tokens": tokens,
                "seconds": round(seconds, 2),
                "tokens_per_s": round(tokens / seconds, 1),
            }
        }

    def _scale_training(self, manifest: Path, folder: Path, model_config: Any) -> dict[str, Any]:
        """Two updates of SDPO + ReSAIL (4 trajectories x 2 steps each) with conf/paper-textcraft's
        engine settings in one process, loading included, under the allocator's count. The plan
        for the same configuration must not be below the peak (a plan that errs low lets a
        configuration run out of memory after cycle 0); how far above it is recorded (the test of
        the plan holds it within a quarter on small shapes)."""

        from resail_pipeline.training import TrainConfig
        from resail_pipeline.training.memory import (
            GIB,
            ModelShape,
            allocator_peak,
            plan_memory,
        )
        from resail_pipeline.training.run import TrainingRun

        options = self.options
        train = self._train_section(SCALE_PARAMETERS)
        cuda = self.device.type == "cuda"
        data = {
            **train,
            "method": "sdpo_resail",
            "schedule": {"updates": 2, "trajectories_per_update": 4, "seed": options.seed},
            "engine": {
                **train["engine"],
                "kind": "single",
                "world_size": 1,
                "precision": "bf16" if cuda else "fp32",
            },
            "responses": {**train["responses"], "max_tokens": options.scale_response_tokens},
            "probe": {"enabled": False},
            "compile": False,
            "run": _one_cycle(manifest, folder, "trained", "gpu-check-scale-trained"),
        }
        config = TrainConfig.from_dict(data, "train")
        runs: list[Any] = []

        def train_two() -> Any:  # loading counts: the plan's fixed parts are the weights' memory
            runs.append(TrainingRun(config))
            return runs[0].trainer.train(runs[0].schedule)

        start = time.perf_counter()
        records, measured = allocator_peak(train_two, self.device, folder / "trace.json")
        seconds = time.perf_counter() - start
        run = runs[0]
        steps = [s for traj in run.data.trajectories for s in run.data.steps[traj]]
        lengths = [len(s.privileged_ids) for s in steps]
        plan = plan_memory(
            run.config,
            ModelShape.from_config(model_config),
            prompt_tokens=max(lengths),
            insert_tokens=max(len(s.privileged_ids) - len(s.ordinary_ids) for s in steps),
            cuda=cuda,
        )
        rows = [r.metrics_row() for r in records]
        engine = run.config.engine
        details = {
            "training": {
                "method": config.method,
                "engine": f"{engine.kind}, {engine.precision}",
                "micro_batch_steps": engine.micro_batch_steps,
                "chunk_size": engine.chunk_size,
                "gradient_checkpointing": engine.gradient_checkpointing,
                "rows_per_update": sum(len(run.data.steps[t]) for t in run.schedule[0]),
                "row_tokens": [
                    min(lengths) + 2 * options.scale_response_tokens,
                    max(lengths) + 2 * options.scale_response_tokens,
                ],
                "losses": [round(float(r["loss"]), 6) for r in rows],
                "seconds": round(seconds, 2),
                "update_2_s": {
                    part: round(float(rows[-1][f"seconds_{part}"]), 3)
                    for part in ("scoring", "optimisation", "other")
                },
            },
            "memory": {
                "measured_gib": round(measured / GIB, 3),
                "planned_gib": round(plan.peak / GIB, 3),
                "plan_over_measured": round(plan.peak / measured, 3),
                "within_a_quarter": measured <= plan.peak <= 1.25 * measured,
                "plan": plan.describe(),
                "plan_mib": {
                    name: round(b / 2**20, 1)
                    for name, b in (*plan.fixed, *plan.training, *plan.sampling, *plan.stepping)
                },
            },
        }
        del runs[:], run, records
        self._release()
        problems = []
        if not all(math.isfinite(float(r["loss"])) for r in rows):
            problems.append(f"a loss is not finite: {details['training']['losses']}")
        if plan.peak < measured:
            problems.append(
                f"the memory plan ({plan.peak / GIB:.2f} GiB) is below the measured peak "
                f"({measured / GIB:.2f} GiB): a configuration it accepts may run out of memory"
            )
        if problems:
            raise CheckFailed("; ".join(problems), details)
        return details

    # -- zero2_8b -----------------------------------------------------------------------------

    def zero2_8b(self) -> dict[str, Any]:
        """A policy of :attr:`CheckOptions.zero2_shape_path`'s shape (on a GPU Qwen3-8B's width,
        heads and vocabulary) cut to ``zero2_layers`` layers, with random weights, over the
        shipped tokenizer; then ``updates`` updates of ``oel_resail`` with responses sampled in
        the loop, under DeepSpeed ZeRO-2 in one rank under torchrun (bf16 over NCCL on a GPU,
        fp32 over gloo on the CPU) with conf/paper's engine settings (:func:`_zero2_config`).
        The rank (:mod:`.phases`) measures every update's phases: the sampler, the micro-batches,
        the optimiser step. Each phase's allocator peak must not exceed the plan's fixed parts
        and that phase's terms (on the CPU, where the allocator is not counted, the times only);
        the losses must be finite, the weights move, the rank run on the device."""
        from resail_pipeline.checkpoints import save_policy, verify_weights
        from resail_pipeline.devices import DeviceMemory
        from resail_pipeline.training import TrainingFailed
        from resail_pipeline.training.memory import measurement_inputs

        options = self.options
        folder = self.work / "zero2_8b"
        shape = options.zero2_shape_path
        start = time.perf_counter()
        model, tokenizer, model_config, _ = self._random_policy(
            "gpu-check-zero2", shape, options.zero2_layers, "zero2_shape"
        )
        initial = save_policy(model, tokenizer, folder / "policy", name="gpu-check-zero2")
        details = self.partial  # kept if the step is stopped before its end
        details.update(
            shape=str(shape),
            layers=model_config.num_hidden_layers,
            parameters=sum(p.numel() for p in model.parameters()),
            build_and_save_s=round(time.perf_counter() - start, 2),
        )
        del model
        self._release()
        manifest = measurement_inputs(
            folder,
            initial.path,
            tokenizer,
            words=options.zero2_prompt_words,
            response=options.zero2_response_tokens,
            steps=2,
        )
        config = self._zero2_config(manifest, folder, rows=2 * ZERO2_TRAJECTORIES)
        log = folder / "train.log"
        with DeviceMemory(self.device) as memory:
            start = time.perf_counter()
            try:
                result = _launch_measured(config, log)
            except TrainingFailed as error:
                raise CheckFailed(f"{error} (log: {log})", details) from None
            seconds = time.perf_counter() - start
        engine = result.config.engine
        metrics = result.metrics
        text = result.log_path.read_text(errors="replace")
        details.update(
            engine=f"{engine.kind} ZeRO-{engine.zero_stage} x {engine.world_size}, "
            f"{engine.precision}",
            micro_batch_steps=engine.micro_batch_steps,
            chunk_size=engine.chunk_size,
            gradient_checkpointing=engine.gradient_checkpointing,
            rows_per_update=2 * ZERO2_TRAJECTORIES,
            updates=len(metrics),
            losses=[round(float(v), 6) for v in metrics["loss"]],
            launch_s=round(seconds, 2),
            log=str(result.log_path),
        )
        placement = _placement_in(text)
        details["device"], details["process_group"] = placement or (None, None)
        problems = []
        if "engine deepspeed x 1" not in text:
            problems.append("the log does not show 'engine deepspeed x 1'")
        verify_weights(result.checkpoint.path)
        moved = result.checkpoint.sha256 != initial.sha256
        problems += self._trained(placement, "deepspeed", metrics, moved, memory)
        measured = json.loads((Path(result.config.run.run_dir) / PHASES_FILE).read_text())
        details.update(self._phase_figures(measured, metrics, problems))
        if problems:
            raise CheckFailed("; ".join(problems), details)
        return details

    def _zero2_config(self, manifest: Path, folder: Path, rows: int) -> Any:
        """conf/paper's ``train`` section (:data:`~.options.ZERO2_PARAMETERS`) with
        :data:`~.options.ZERO2_ENGINE`'s changes, in bf16 on a GPU (fp32 on the CPU), for
        ``oel_resail`` on ``manifest``: ``updates`` updates of
        :data:`~.options.ZERO2_TRAJECTORIES` trajectories, an update's ``rows`` sampled in one
        decode batch of ``zero2_response_tokens`` tokens at most; no probe; in ``folder``."""

        from resail_pipeline.training import TrainConfig

        options = self.options
        train = self._train_section(ZERO2_PARAMETERS)
        cuda = self.device.type == "cuda"
        data = {
            **train,
            "method": "oel_resail",
            "schedule": {
                "updates": options.updates,
                "trajectories_per_update": ZERO2_TRAJECTORIES,
                "seed": options.seed,
            },
            "engine": {
                **train["engine"],
                **ZERO2_ENGINE,
                "precision": "bf16" if cuda else "fp32",
            },
            "responses": {
                **train["responses"],
                "max_tokens": options.zero2_response_tokens,
                "batch_size": rows,
            },
            "probe": {"enabled": False},
            "compile": False,
            "run": _one_cycle(manifest, folder, "trained", "gpu-check-zero2-trained"),
        }
        return TrainConfig.from_dict(data, "train")

    def _phase_figures(
        self, measured: dict[str, Any], metrics: Any, problems: list[str]
    ) -> dict[str, Any]:
        """The rank's measurements (:data:`~.options.PHASES_FILE`) as the report holds them:
        each phase's seconds per update and, on a GPU, its allocator peak per update against the
        plan's fixed parts and that phase's terms, a peak above them added to ``problems``; the
        trainer's own seconds per update (``train_metrics``)."""
        from resail_pipeline.training.memory import GIB, MemoryPlan

        plan = MemoryPlan(
            **{
                part: tuple((name, int(size)) for name, size in terms)
                for part, terms in measured["plan"].items()
            }
        )
        fixed = sum(b for _, b in plan.fixed)
        rows = measured["rows"]
        cuda = self.device.type == "cuda"

        def gib(size: float) -> float:
            return round(size / GIB, 3)

        load = next(r for r in rows if r["phase"] == "load")
        sampled = [r["response_tokens"] for r in rows if r.get("response_tokens")]
        figures: dict[str, Any] = {
            "prompt_tokens": measured["prompt_tokens"],
            "response_tokens": [min(t[0] for t in sampled), max(t[1] for t in sampled)]
            if sampled
            else None,
            "load_s": round(load["seconds"], 2),
            "plan": plan.describe(),
            "plan_fixed_gib": {name: gib(b) for name, b in plan.fixed if b},
        }
        if cuda:
            figures["allocated_after_load_gib"] = gib(load["allocated_after"])
        phases: dict[str, Any] = {}
        for phase in ("sampling", "training", "step"):
            runs = [r for r in rows if r["phase"] == phase]
            terms = plan.phases.get(phase, ())
            planned = fixed + sum(b for _, b in terms)
            entry: dict[str, Any] = {
                "seconds": [round(r["seconds"], 3) for r in runs],
                "planned_gib": gib(planned),
                "plan_terms_gib": {name: gib(b) for name, b in terms if b},
            }
            if not runs:
                problems.append(f"{phase}: the trainer did not run this phase")
            elif cuda:
                peak = max(r["peak"] for r in runs)
                entry.update(
                    peak_gib=[gib(r["peak"]) for r in runs],
                    allocated_before_gib=[gib(r["allocated_before"]) for r in runs],
                    plan_over_peak=round(planned / peak, 3),
                )
                if peak > planned:
                    problems.append(
                        f"{phase}: the allocator's peak ({peak / GIB:.2f} GiB) is above the "
                        f"plan's fixed parts and {phase} terms ({planned / GIB:.2f} GiB)"
                    )
            phases[phase] = entry
        figures["phases"] = phases
        figures["update_s"] = [round(r["seconds"], 3) for r in rows if r["phase"] == "update"]
        figures["trainer_seconds"] = {
            part: [round(float(v), 3) for v in metrics[f"seconds_{part}"]]
            for part in ("response", "scoring", "optimisation", "other")
        }
        return figures

    def _release(self) -> None:
        """Collect what the step dropped and return the device's cached memory."""
        import gc

        import torch

        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    # -- shared -------------------------------------------------------------------------------

    def _trained(
        self,
        placement: tuple[str, str] | None,
        engine: str,
        metrics: Any,
        moved: bool,
        memory: DeviceMemory,
    ) -> list[str]:
        """What is wrong with a one-rank training run of ``engine``: where its log says it ran
        (``placement``), its metrics (one row per update, finite losses), whether its published
        weights ``moved`` from the initial ones, and the device memory it took."""
        problems = []
        want = self._placement(engine)
        if placement != want:
            problems.append(
                f"the trainer ran on {placement or 'a device its log does not name'}, not {want}"
            )
        if len(metrics) != self.options.updates:
            problems.append(f"{len(metrics)} metrics rows for {self.options.updates} updates")
        losses = [float(v) for v in metrics["loss"]]
        if not all(math.isfinite(v) for v in losses):
            problems.append(f"a loss is not finite: {[round(v, 6) for v in losses]}")
        if not moved:
            problems.append("the published weights equal the initial policy's")
        figures = memory.figures()
        if figures is not None:
            grown = figures["device_used_peak"] - figures["device_used_before"]
            if grown < MIN_TRAINER_MIB:
                problems.append(
                    f"the device's used memory grew by {grown:.0f} MiB only while the trainer "
                    "ran: it did not run on the GPU"
                )
        return problems

    def _placement(self, engine: str) -> tuple[str, str]:
        """Where a one-rank trainer of ``engine`` must say it ran (see :func:`_placement_in`)."""
        cuda = self.device.type == "cuda"
        group = "none" if engine == "single" else "nccl" if cuda else "gloo"
        return ("cuda:0" if cuda else "cpu"), group

    def _need_corpus(self) -> None:
        if self.steps is None:
            raise CheckFailed("no episodes to work on: the generation step did not produce them")


def _comparison_prompts(steps: Any, count: int) -> list[str]:
    """Up to ``count`` distinct ordinary-view prompts of the episodes: each episode's first and
    last step in turn, so that both short and long histories are compared."""
    chosen: list[str] = []
    for _, episode in steps.sort_values(["traj_id", "t"]).groupby("traj_id", sort=True):
        for prompt in (episode["prompt"].iloc[0], episode["prompt"].iloc[-1]):
            if prompt not in chosen:
                chosen.append(str(prompt))
    return chosen[:count]


def _check_greedy(ours: Sequence[Any], theirs: Sequence[Sequence[int]], details: dict) -> None:
    """Record in ``details`` how many of the backend's greedy responses (``ours``) equal
    transformers' ``generate`` (``theirs``) token for token; fail naming the first that differs."""
    differing = [i for i, (a, b) in enumerate(zip(ours, theirs, strict=True)) if a.token_ids != b]
    details["fp32_equal"] = f"{len(ours) - len(differing)}/{len(ours)}"
    if differing:
        first = differing[0]
        raise CheckFailed(
            f"greedy tokens differ from transformers' generate on prompt(s) {differing}; "
            f"prompt {first}: backend {list(ours[first].token_ids)[:12]}..., "
            f"generate {list(theirs[first])[:12]}...",
            details,
        )


def _hf_greedy(generator: Any, texts: Sequence[str], max_new_tokens: int) -> list[tuple[int, ...]]:
    """transformers' own greedy ``generate`` of ``generator``'s model, one prompt at a time, ending
    where the backend ends (the tokenizer's end-of-sequence token, kept)."""
    import torch
    from transformers import GenerationConfig

    model, tokenizer = generator.model, generator.tokenizer
    device = next(model.parameters()).device
    config = GenerationConfig(
        do_sample=False,
        max_new_tokens=max_new_tokens,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=generator.pad_id,
    )
    out = []
    model.eval()
    with torch.inference_mode():
        for text in texts:
            ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
            ids = ids.to(device)  # (1, P)
            generated = model.generate(
                input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=config
            )  # (1, P + N)
            out.append(tuple(generated[0, ids.shape[1] :].tolist()))
    return out


def _hf_vision_greedy(
    policy: Any, prompts: Sequence[Any], max_new_tokens: int
) -> list[tuple[int, ...]]:
    """transformers' own greedy ``generate`` of a :class:`VisionPolicy`'s model, one prompt (with
    its screenshots) at a time, ending where the policy ends (end-of-sequence kept), the vision
    placeholders suppressed as the policy suppresses them."""
    import torch
    from transformers import GenerationConfig

    from resail_pipeline.generation.base import vision_token_ids

    tokenizer = policy.tokenizer
    config = GenerationConfig(
        do_sample=False,
        max_new_tokens=max_new_tokens,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        suppress_tokens=list(vision_token_ids(policy.model.config)),  # as the policy does
    )
    out = []
    policy.model.eval()
    with torch.inference_mode():
        for prompt in prompts:
            inputs = policy.model_inputs([prompt.input_ids], [prompt])
            generated = policy.model.generate(**inputs, generation_config=config)  # (1, P + N)
            out.append(tuple(generated[0, len(prompt.input_ids) :].tolist()))
    return out


def _merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``over``'s values in place of its own, mapping by mapping."""
    merged = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and value and isinstance(merged.get(key), dict):
            merged[key] = _merged(merged[key], value)
        else:
            merged[key] = value
    return merged


def _placement_in(log: str) -> tuple[str, str] | None:
    """Where a trainer's log says its rank 0 ran: the device and the process group (``"gloo"``,
    ``"nccl"``, or ``"none"``); ``None`` when the log does not say."""
    import re

    found = re.search(r"rank 0 of \d+ on (\S+), (\w+) process group", log)
    if found is None:
        return None
    return found.group(1), "none" if found.group(2) == "no" else found.group(2)


def _launch_measured(config: Any, log_path: Path) -> Any:
    """:func:`~resail_pipeline.training.launch` of ``config`` with its rank's module replaced by
    :mod:`.phases` (the trainer, its phases measured), which the rank imports from this folder."""
    from resail_pipeline.training.launcher import (
        CONFIG_FILE,
        collect,
        module_command,
        prepare,
        run_job,
    )

    job = prepare(config, log_path)
    run_dir = Path(job.config.run.run_dir)
    command = module_command(
        job.config.engine, f"{__package__}.phases", run_dir / CONFIG_FILE, run_dir
    )
    folders = (
        str(Path(__file__).resolve().parents[1]),  # scripts/, which holds this package
        str(Path(resail_pipeline.__file__).resolve().parents[1]),
        job.env.get("PYTHONPATH", ""),
    )
    env = {**job.env, "PYTHONPATH": os.pathsep.join(f for f in folders if f)}
    job = dataclasses.replace(job, command=command, env=env)
    run_job(job)
    return collect(job)


def _scratch_project(project: Path, scratch: Path) -> None:
    """A copy of the Kedro project made of links (configuration, shipped policies, the package)
    with a data folder of its own."""
    scratch.mkdir(parents=True)
    for name in ("pyproject.toml", "conf", "reference"):
        if not (project / name).exists():
            raise FileNotFoundError(
                f"{project / name}: not found; --project must be the Kedro project"
            )
        (scratch / name).symlink_to((project / name).resolve())
    (scratch / "src").mkdir()
    package = Path(resail_pipeline.__file__).resolve().parent
    (scratch / "src" / package.name).symlink_to(package)
