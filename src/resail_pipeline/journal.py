"""A journal of finished episodes: a long rollout killed anywhere resumes where it stopped.

:func:`~resail_pipeline.rollout.run_episodes` given an :class:`EpisodeJournal` writes the episodes
it finishes into the journal's folder, a Parquet part at a time (atomically, at most every
``every_s`` seconds, and at the end), and a run given the same folder starts by reading them
back: an episode found there for the same spec (trajectory id, task, decoding seed, summary) and
the same policy id is not run again. Everything else that decides an episode (the policy's
weights, the decoding settings, the environment's data) is the caller's to put in the folder's
name (:func:`journal_key`), so that a journal is only ever resumed by the run it belongs to.

Rollouts seed every response by its episode and step, so an episode does not depend on which
others run beside it (:mod:`resail_pipeline.rollout`): the episodes a resumed run adds are the
ones an uninterrupted run would have played, up to the kernels' rounding. Episodes are stored
as JSON strings in a Parquet column; nothing is pickled.

    journal = EpisodeJournal(staging / f"evaluate-{journal_key(policy=sha, config=settings)}")
    episodes = run_episodes(make_env, specs, generator, params, journal=journal)
    ...  # the results are kept
    journal.remove()

A caller that cannot keep the episodes itself (a Kedro node returns them, and the catalog saves
them after it returns) marks the journal finished instead (:meth:`EpisodeJournal.finish`) and
leaves its removal to whoever sees them kept: a kill in between costs a rerun nothing, since every
episode resumes from the journal. Each finish writes a fresh token, so that
:func:`finished_journals` tells a journal finished just now from one an earlier run finished.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import logging
import shutil
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from resail_pipeline.episodes import Episode, EpisodeSpec, StepRecord
from resail_pipeline.io import atomic_path, settings_sha256, write_parquet
from resail_pipeline.prompts import Summary

__all__ = ["EpisodeJournal", "finished_journals", "journal_key"]

logger = logging.getLogger(__name__)

#: the journal's parts: ``part-000000.parquet``, ``part-000001.parquet``, ...
PART_PREFIX = "part-"

#: the columns of a part: one row per finished episode, the seconds of rollout it stands for
PART_COLUMNS = ("traj_id", "episode", "seconds")

#: the file of a finished journal (:meth:`EpisodeJournal.finish`): a token written anew each time
FINISHED = "finished"


def journal_key(**fields: Any) -> str:
    """12 hex digits of the sha256 of ``fields`` as sorted JSON: what a journal folder's name
    carries of the settings that decide its episodes."""
    return settings_sha256(fields)[:12]


def episode_to_json(episode: Episode) -> str:
    """``episode`` as JSON (:func:`episode_from_json` reads it back equal)."""
    return json.dumps(dataclasses.asdict(episode), ensure_ascii=False)


def episode_from_json(text: str) -> Episode:
    """The :class:`~resail_pipeline.episodes.Episode` that :func:`episode_to_json` wrote."""
    data = json.loads(text)
    spec = data["spec"]
    summary = spec["summary"]
    return Episode(
        spec=EpisodeSpec(
            traj_id=spec["traj_id"],
            task_id=spec["task_id"],
            decoding_seed=spec["decoding_seed"],
            summary=None if summary is None else Summary(**summary),
        ),
        env=data["env"],
        task=data["task"],
        policy_id=data["policy_id"],
        steps=tuple(
            StepRecord(
                **{
                    **step,
                    "admissible_actions": None
                    if step["admissible_actions"] is None
                    else tuple(step["admissible_actions"]),
                }
            )
            for step in data["steps"]
        ),
        success=data["success"],
        end_reason=data["end_reason"],
    )


class EpisodeJournal:
    """The finished episodes of one rollout, kept in ``folder`` until :meth:`remove`.

    Args:
        folder: the journal's folder (created on the first write); its name should carry the
            :func:`journal_key` of the run's settings.
        every_s: seconds between parts: at most this much rollout is lost to a kill.
    """

    def __init__(self, folder: str | Path, *, every_s: float = 60.0) -> None:
        if not every_s >= 0:
            raise ValueError(f"every_s: must be >= 0, got {every_s}")
        self.folder = Path(folder)
        self.every_s = every_s
        #: seconds of rollout that the episodes :meth:`resume` returned stand for (over calls)
        self.resumed_seconds = 0.0
        self._pending: list[Episode] = []
        self._since = time.perf_counter()

    def _parts(self) -> list[Path]:
        return sorted(self.folder.glob(f"{PART_PREFIX}*.parquet"))

    def resume(self, specs: Sequence[EpisodeSpec], policy_id: str) -> dict[str, Episode]:
        """``traj_id -> episode`` for the episodes of ``specs`` the journal holds, played by
        ``policy_id``; one with a trajectory id of ``specs`` but another spec or policy is passed
        over (and logged), episodes of other trajectory ids are another rollout's."""
        wanted = {spec.traj_id: spec for spec in specs}
        found: dict[str, Episode] = {}
        seconds = 0.0
        other = 0
        for part in self._parts():
            frame = pd.read_parquet(part, columns=list(PART_COLUMNS))
            # another rollout sharing the journal (an evaluation's reference episodes) is not ours
            frame = frame[frame["traj_id"].isin(list(wanted))]
            for text, spent in zip(frame["episode"], frame["seconds"], strict=True):
                episode = episode_from_json(text)
                if wanted[episode.spec.traj_id] == episode.spec and episode.policy_id == policy_id:
                    found[episode.spec.traj_id] = episode
                    seconds += float(spent)
                else:
                    other += 1
        if other:
            logger.warning(
                "journal %s: %d episode(s) of another spec or policy passed over",
                self.folder,
                other,
            )
        if found:
            logger.info(
                "journal %s: %d of %d episodes already played (%.0f s), resumed",
                self.folder,
                len(found),
                len(specs),
                seconds,
            )
        self.resumed_seconds += seconds
        self._since = time.perf_counter()
        return found

    def add(self, episode: Episode) -> None:
        """Keep ``episode``; written with the others at most ``every_s`` seconds later."""
        self._pending.append(episode)
        if time.perf_counter() - self._since >= self.every_s:
            self.flush()

    def flush(self) -> None:
        """Write the episodes kept since the last part as the next part (atomically)."""
        if not self._pending:
            return
        now = time.perf_counter()
        share = (now - self._since) / len(self._pending)
        parts = self._parts()
        number = int(parts[-1].stem.removeprefix(PART_PREFIX)) + 1 if parts else 0
        frame = pd.DataFrame(
            {
                "traj_id": [e.spec.traj_id for e in self._pending],
                "episode": [episode_to_json(e) for e in self._pending],
                "seconds": [share] * len(self._pending),
            }
        )
        write_parquet(frame, self.folder / f"{PART_PREFIX}{number:06d}.parquet")
        self._pending = []
        self._since = now

    def finish(self) -> None:
        """Write what is kept and mark the journal finished (a fresh token in :data:`FINISHED`):
        it holds every episode of its rollout and waits for whoever keeps them elsewhere to
        :meth:`remove` it. A rerun before then resumes every episode from it."""
        self.flush()
        with atomic_path(self.folder / FINISHED) as tmp:
            tmp.write_text(uuid.uuid4().hex)

    def remove(self) -> None:
        """Delete the journal: its episodes are kept elsewhere, nothing is left to resume."""
        shutil.rmtree(self.folder, ignore_errors=True)


def finished_journals(folder: str | Path, prefix: str, suffix: str = "") -> dict[Path, str]:
    """``journal folder -> token`` for the finished journals in ``folder`` whose names start with
    ``prefix`` and end with ``suffix`` (:meth:`EpisodeJournal.finish`); empty where ``folder``
    does not exist."""
    folder = Path(folder)
    if not folder.is_dir():
        return {}
    return {
        marker.parent: marker.read_text()
        for marker in sorted(folder.glob(f"{glob.escape(prefix)}*{glob.escape(suffix)}/{FINISHED}"))
    }
