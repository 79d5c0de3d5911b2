"""The trainer's inputs: a manifest of Parquet files, the steps it trains on, the batch schedule.

A run reads exactly the files its manifest lists, each checked against the sha256 recorded when
the manifest was written. Steps are grouped by trajectory; a trajectory is usable only with an
accepted summary (its PI), and the others are dropped with their count logged. Each step carries
its ordinary and privileged chat prompts as token ids (the privileged view is the ordinary user
message with the outcome-matched insert of appendix G) and, for offline SDPO, the response cached
at cycle start with its behaviour log-probs.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import yaml

from resail_pipeline.checkpoints import check_checkpoint, weights_sha256
from resail_pipeline.io import atomic_path, sha256_file, write_parquet
from resail_pipeline.prompts import OUTCOMES, Summary, add_privileged, chat_prompt
from resail_pipeline.schemas import check_columns

__all__ = [
    "InputError",
    "InputManifest",
    "StepExample",
    "TrainingData",
    "accepted_summaries",
    "batch_schedule",
    "build_training_data",
    "check_lengths",
    "check_token_ids",
    "read_manifest",
    "read_table",
    "usable_steps",
    "write_inputs",
]

logger = logging.getLogger(__name__)

#: file names of the inputs :func:`write_inputs` snapshots into a run directory
_INPUT_FILES = {
    "steps": "steps.parquet",
    "summaries": "summaries.parquet",
    "responses": "responses.parquet",
    "probe": "probe_set.parquet",
}
MANIFEST_NAME = "inputs.yaml"
#: manifest entries that are checkpoint directories (their sha256 is the weights')
_CHECKPOINTS = ("policy", "reference")


class InputError(ValueError):
    """An input file is missing, changed since the manifest was written, or malformed."""


# ----------------------------------------------------------------------------------------------
# manifest


@dataclass(frozen=True)
class InputManifest:
    """The files a training run reads, with the sha256 each had when the manifest was written.

    Attributes:
        policy: the cycle-start checkpoint directory (student and teacher both start here).
        steps: Parquet file with the ``steps`` schema.
        summaries: Parquet file with the ``summaries`` schema.
        responses: Parquet file with the ``responses`` schema (offline SDPO's cached responses),
            or ``None``.
        sha256: ``name -> sha256`` for each of the above (checkpoints' over their safetensors).
        probe: Parquet file with the ``probe_set`` schema (the PI-sensitivity probe), or ``None``.
        reference: the initial policy's checkpoint directory (GRPO's frozen KL reference), or
            ``None``.
    """

    policy: str
    steps: str
    summaries: str
    responses: str | None
    sha256: Mapping[str, str]
    probe: str | None = None
    reference: str | None = None

    def files(self) -> dict[str, str]:
        """``name -> path`` of the given inputs."""
        named = {"policy": self.policy, "steps": self.steps, "summaries": self.summaries}
        for name in ("responses", "probe", "reference"):
            if getattr(self, name) is not None:
                named[name] = getattr(self, name)
        return named


def _digest(name: str, path: str) -> str:
    if name in _CHECKPOINTS:
        return weights_sha256(check_checkpoint(path))
    if not Path(path).is_file():
        raise InputError(f"{name}: no such file {path}")
    return sha256_file(path)


def write_inputs(
    run_dir: str | Path,
    *,
    policy: str | Path,
    steps: pd.DataFrame,
    summaries: pd.DataFrame,
    responses: pd.DataFrame | None = None,
    probe: pd.DataFrame | None = None,
    reference: str | Path | None = None,
) -> Path:
    """Snapshot the input frames into ``run_dir`` as Parquet and write their manifest.

    ``responses`` (the cache of offline SDPO and EPD), ``probe`` (the probe set, ``probe_set``
    schema) and ``reference`` (GRPO's initial policy) are optional. The frames are checked against
    their schemas first. Returns the manifest's path.
    """
    run_dir = Path(run_dir)
    check_columns(steps, "steps", source="steps")
    check_columns(summaries, "summaries", source="summaries")
    frames = {"steps": steps, "summaries": summaries}
    if responses is not None:
        check_columns(responses, "responses", source="responses")
        frames["responses"] = responses
    if probe is not None:
        check_columns(probe, "probe_set", source="probe")
        frames["probe"] = probe
    paths = {"policy": str(check_checkpoint(policy))}
    if reference is not None:
        paths["reference"] = str(check_checkpoint(reference))
    for name, frame in frames.items():
        path = run_dir / _INPUT_FILES[name]
        write_parquet(frame, path)
        paths[name] = str(path)
    manifest = InputManifest(
        policy=paths["policy"],
        steps=paths["steps"],
        summaries=paths["summaries"],
        responses=paths.get("responses"),
        sha256={name: _digest(name, path) for name, path in paths.items()},
        probe=paths.get("probe"),
        reference=paths.get("reference"),
    )
    out = run_dir / MANIFEST_NAME
    with atomic_path(out) as tmp:
        tmp.write_text(yaml.safe_dump({**asdict(manifest), "sha256": dict(manifest.sha256)}))
    return out


def read_manifest(path: str | Path, *, verify: bool = True) -> InputManifest:
    """Read a manifest; with ``verify``, check every file exists and still has its sha256."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"manifest {path}: no such file")
    data = yaml.safe_load(path.read_text()) or {}
    missing = [k for k in ("policy", "steps", "summaries", "sha256") if k not in data]
    if missing:
        raise InputError(f"manifest {path}: missing key(s) {missing}")
    manifest = InputManifest(
        policy=str(data["policy"]),
        steps=str(data["steps"]),
        summaries=str(data["summaries"]),
        responses=None if data.get("responses") is None else str(data["responses"]),
        sha256=dict(data["sha256"]),
        probe=None if data.get("probe") is None else str(data["probe"]),
        reference=None if data.get("reference") is None else str(data["reference"]),
    )
    if verify:
        for name, file in manifest.files().items():
            expected = manifest.sha256.get(name)
            if expected is None:
                raise InputError(f"manifest {path}: no sha256 recorded for {name}")
            if _digest(name, file) != expected:
                raise InputError(
                    f"{name}: {file} changed since the manifest {path} was written (sha256 differs)"
                )
    return manifest


def read_table(path: str | Path, schema: str) -> pd.DataFrame:
    """A Parquet input as a frame, checked against its schema (errors name the file)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such Parquet file")
    return check_columns(pq.read_table(path).to_pandas(), schema, source=str(path))


# ----------------------------------------------------------------------------------------------
# steps


@dataclass(frozen=True)
class StepExample:
    """One logged interaction step, ready for the model.

    Attributes:
        traj_id: its trajectory.
        t: its position in the trajectory.
        prompt: the ordinary view, chat-formatted (what the student samples OEL responses from).
        ordinary_ids: token ids of ``prompt``.
        privileged_ids: token ids of the chat-formatted privileged view.
        response_ids: the response trained on when it is fixed for the cycle, cut to the
            configured length: the cached one (offline SDPO, EPD) or the logged one and its end
            token (RFT); empty when responses are sampled during training.
        behaviour_logprobs: log-probs of a cached ``response_ids`` under the policy that sampled it.
        action: the logged action (``""`` where the response did not parse): GRPO's reference.
    """

    traj_id: str
    t: int
    prompt: str
    ordinary_ids: tuple[int, ...]
    privileged_ids: tuple[int, ...]
    response_ids: tuple[int, ...] = ()
    behaviour_logprobs: tuple[float, ...] = ()
    action: str = ""


@dataclass(frozen=True)
class TrainingData:
    """The usable trajectories of a cycle and their steps.

    Attributes:
        trajectories: usable trajectory ids, sorted (the order the schedule permutes).
        steps: ``traj_id -> steps`` in order of ``t``.
        dropped: trajectories left out for want of an accepted summary (or of the asked outcome).
        rejected: trajectories whose summary was rejected (among ``dropped``).
    """

    trajectories: tuple[str, ...]
    steps: Mapping[str, tuple[StepExample, ...]]
    dropped: int
    rejected: int = 0

    @property
    def num_steps(self) -> int:
        return sum(len(s) for s in self.steps.values())


def accepted_summaries(summaries: pd.DataFrame, source: str) -> dict[str, Summary]:
    """``traj_id -> Summary`` of the accepted summaries, checked (errors name ``source``)."""
    check_columns(summaries, "summaries", source=source)
    duplicated = summaries["traj_id"][summaries["traj_id"].duplicated()]
    if len(duplicated):
        raise InputError(f"{source}: more than one summary for trajectory {duplicated.iloc[0]!r}")
    out: dict[str, Summary] = {}
    for row in summaries.itertuples(index=False):
        if not bool(row.accepted):
            continue
        if row.outcome not in OUTCOMES:
            raise InputError(
                f"{source}: trajectory {row.traj_id!r} has outcome {row.outcome!r}, expected one of {OUTCOMES}"
            )
        if not isinstance(row.summary, str) or not row.summary.strip():
            raise InputError(
                f"{source}: trajectory {row.traj_id!r} is accepted with an empty summary"
            )
        out[str(row.traj_id)] = Summary(outcome=row.outcome, text=row.summary)
    return out


def usable_steps(steps: pd.DataFrame, summaries: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``steps`` whose trajectory has an accepted summary (a new frame)."""
    check_columns(steps, "steps", source="steps")
    accepted = accepted_summaries(summaries, "summaries")
    return steps[steps["traj_id"].astype(str).isin(accepted)].reset_index(drop=True)


def _cached_responses(
    responses: pd.DataFrame, source: str, max_tokens: int
) -> dict[tuple[str, int], tuple[tuple[int, ...], tuple[float, ...]]]:
    check_columns(responses, "responses", source=source)
    first = responses[responses["sample"] == 0]
    keys = list(zip(first["traj_id"].astype(str), first["t"].astype(int), strict=True))
    if len(set(keys)) != len(keys):
        raise InputError(f"{source}: more than one response with sample 0 for a step")
    out = {}
    for key, ids, logprobs in zip(keys, first["token_ids"], first["logprobs"], strict=True):
        ids = tuple(int(i) for i in ids)
        logprobs = tuple(float(x) for x in logprobs)
        if not ids:
            raise InputError(f"{source}: step {key} has an empty response")
        if len(logprobs) != len(ids):
            raise InputError(
                f"{source}: step {key} has {len(ids)} token ids but {len(logprobs)} logprobs"
            )
        out[key] = (ids[:max_tokens], logprobs[:max_tokens])
    return out


def build_training_data(
    steps: pd.DataFrame,
    summaries: pd.DataFrame,
    tokenizer: Any,
    *,
    responses: pd.DataFrame | None = None,
    logged_responses: bool = False,
    outcome: str | None = None,
    max_response_tokens: int | None = None,
    sources: Mapping[str, str] | None = None,
) -> TrainingData:
    """Group, filter and tokenise the steps of a cycle.

    Args:
        steps: ``steps`` frame (``prompt`` is the ordinary user message).
        summaries: ``summaries`` frame; trajectories without an accepted summary are dropped.
        tokenizer: the policy's tokenizer (chat template and ids).
        responses: ``responses`` frame of cached responses (offline SDPO, EPD); every usable step
            needs one with ``sample == 0``.
        logged_responses: train on each step's logged ``response`` and the end token (RFT).
        outcome: keep only the trajectories whose summary has this outcome (RFT and GRPO:
            ``"success"``); the data may then be empty (no success to learn from).
        max_response_tokens: cut cached and logged responses to this many tokens.
        sources: ``name -> file`` used in error messages.

    Returns:
        :class:`TrainingData`.
    """
    if responses is not None and logged_responses:
        raise ValueError("responses, logged_responses: a step trains on one fixed response")
    if outcome is not None and outcome not in OUTCOMES:
        raise ValueError(f"outcome: must be one of {OUTCOMES}, got {outcome!r}")
    sources = dict(sources or {})
    steps_src = sources.get("steps", "steps")
    check_columns(steps, "steps", source=steps_src)
    accepted = accepted_summaries(summaries, sources.get("summaries", "summaries"))
    if steps.duplicated(["traj_id", "t"]).any():
        dup = steps[steps.duplicated(["traj_id", "t"])].iloc[0]
        raise InputError(f"{steps_src}: step (traj_id={dup.traj_id!r}, t={dup.t}) appears twice")
    cached = None
    if responses is not None:
        cached = _cached_responses(
            responses, sources.get("responses", "responses"), max_response_tokens or 2**62
        )

    all_trajs = sorted(steps["traj_id"].astype(str).unique())
    kept = [
        traj
        for traj in all_trajs
        if traj in accepted and (outcome is None or accepted[traj].outcome == outcome)
    ]
    dropped = len(all_trajs) - len(kept)
    rejected = sum(traj not in accepted for traj in all_trajs)
    logger.info(
        "%d trajectories with steps: %d usable, %d dropped without an accepted summary%s",
        len(all_trajs),
        len(kept),
        dropped,
        "" if outcome is None else f" or of another outcome than {outcome}",
    )
    ordered = steps.assign(traj_id=steps["traj_id"].astype(str)).sort_values(["traj_id", "t"])
    ordered = ordered[ordered["traj_id"].isin(set(kept))]
    if ordered.empty:
        if outcome is not None:
            return TrainingData(trajectories=(), steps={}, dropped=dropped, rejected=rejected)
        raise InputError(f"{steps_src}: no step belongs to a trajectory with an accepted summary")

    ordinary_texts = [chat_prompt(tokenizer, str(p)) for p in ordered["prompt"]]
    privileged_texts = [
        chat_prompt(tokenizer, add_privileged(str(p), accepted[traj]))
        for p, traj in zip(ordered["prompt"], ordered["traj_id"], strict=True)
    ]
    ordinary_ids = tokenizer(ordinary_texts, add_special_tokens=False)["input_ids"]
    privileged_ids = tokenizer(privileged_texts, add_special_tokens=False)["input_ids"]
    logged: list[tuple[int, ...]] = []
    if logged_responses:
        texts = ["" if r is None else str(r) for r in ordered["response"]]
        end = [tokenizer.eos_token_id]
        logged = [
            tuple([*ids, *end][: max_response_tokens or None])
            for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]
        ]
    actions = ["" if a is None else str(a) for a in ordered["action"]]

    by_traj: dict[str, list[StepExample]] = {traj: [] for traj in kept}
    for i, (traj, t) in enumerate(zip(ordered["traj_id"], ordered["t"].astype(int), strict=True)):
        response_ids: tuple[int, ...] = logged[i] if logged_responses else ()
        behaviour: tuple[float, ...] = ()
        if cached is not None:
            if (traj, t) not in cached:
                raise InputError(
                    f"{sources.get('responses', 'responses')}: no cached response for step "
                    f"(traj_id={traj!r}, t={t})"
                )
            response_ids, behaviour = cached[(traj, t)]
        by_traj[traj].append(
            StepExample(
                traj_id=traj,
                t=t,
                prompt=ordinary_texts[i],
                ordinary_ids=tuple(ordinary_ids[i]),
                privileged_ids=tuple(privileged_ids[i]),
                response_ids=response_ids,
                behaviour_logprobs=behaviour,
                action=actions[i],
            )
        )
    return TrainingData(
        trajectories=tuple(kept),
        steps={traj: tuple(s) for traj, s in by_traj.items()},
        dropped=dropped,
        rejected=rejected,
    )


def check_token_ids(data: TrainingData, vocab_size: int) -> None:
    """Raise if a prompt or cached response holds an id outside the model's vocabulary."""
    for traj, steps in data.steps.items():
        for step in steps:
            for name in ("ordinary_ids", "privileged_ids", "response_ids"):
                ids = getattr(step, name)
                if ids and not 0 <= min(ids) <= max(ids) < vocab_size:
                    raise InputError(
                        f"step (traj_id={traj!r}, t={step.t}): {name} holds ids outside "
                        f"[0, {vocab_size}), the model's vocabulary"
                    )


def check_lengths(data: TrainingData, max_positions: int, response_tokens: int) -> None:
    """Raise if a step's longest view plus its response would not fit the model's positions.

    Args:
        data: the steps.
        max_positions: the model's ``max_position_embeddings``.
        response_tokens: the response length to allow for (OEL: the sampling cap; cached
            responses are checked at their own length).
    """
    for traj, steps in data.steps.items():
        for step in steps:
            prompt = max(len(step.ordinary_ids), len(step.privileged_ids))
            response = len(step.response_ids) or response_tokens
            if prompt + response > max_positions:
                raise InputError(
                    f"step (traj_id={traj!r}, t={step.t}): {prompt} prompt tokens + {response} "
                    f"response tokens exceed the model's {max_positions} positions"
                )


# ----------------------------------------------------------------------------------------------
# schedule


def batch_schedule(
    trajectories: Sequence[str], updates: int, per_update: int, seed: int
) -> list[tuple[str, ...]]:
    """The trajectory batch of every update: a seeded permutation cut into batches.

    Within a pass over the corpus every trajectory is drawn once (without replacement); a pass's
    last batch may be smaller. When ``updates * per_update`` exceeds the corpus, a new seeded
    pass starts (logged as a warning); no batch spans two passes, so no batch repeats a
    trajectory.

    Returns:
        ``updates`` tuples of trajectory ids.
    """
    if not trajectories:
        raise InputError("trajectories: the corpus is empty")
    if updates < 1 or per_update < 1:
        raise ValueError(f"updates, per_update: must be >= 1, got {updates}, {per_update}")
    rng = np.random.default_rng(seed)
    batches: list[tuple[str, ...]] = []
    passes = 0
    while len(batches) < updates:
        passes += 1
        order = [trajectories[i] for i in rng.permutation(len(trajectories))]
        for start in range(0, len(order), per_update):
            batches.append(tuple(order[start : start + per_update]))
    if passes > 1:
        logger.warning(
            "%d updates x %d trajectories exceed the corpus of %d: %d passes over it",
            updates,
            per_update,
            len(trajectories),
            passes,
        )
    return batches[:updates]
