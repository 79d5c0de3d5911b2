"""Atomic file writes (Parquet tables among them), content hashes and the names that become
folders: nothing already written is ever half-replaced, and no configured name writes outside its
folder."""

from __future__ import annotations

import ctypes
import errno
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import signal
import stat
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

logger = logging.getLogger(__name__)


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` only if the block succeeds.

    Works for files and directories alike. An existing directory at ``path`` is replaced whole;
    on error the temporary is removed and ``path`` is left as it was. What the block wrote is on
    disk before the rename and the rename before the return (:func:`_sync`), so a crash of the
    machine leaves the old ``path`` or the whole new one, never a renamed but empty file; only a
    crash between the two renames that replace a directory (:func:`replace_directory`) leaves no
    ``path``, which a rerun reads as not yet written.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    tmp.rmdir()  # the caller creates a file or a directory here
    try:
        yield tmp
        if tmp.is_dir():
            replace_directory(tmp, target)
        else:
            _sync(tmp)
            os.replace(tmp, target)
            _sync_entry(target.parent)
    finally:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        elif tmp.exists():
            tmp.unlink()


def replace_directory(source: str | os.PathLike, target: str | os.PathLike) -> None:
    """Move the directory ``source`` to ``target`` (on the same file system), flushed to disk
    before the move and the move after it; what is at ``target`` is replaced, and removed only
    once the new directory is in place. A crash between the two renames leaves no ``target`` (the
    old one lies beside it as ``.NAME.old``, and the next call removes it)."""
    source, target = Path(source), Path(target)
    _sync(source)
    old = target.with_name(f".{target.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    if target.exists():
        os.replace(target, old)
    os.replace(source, target)
    _sync_entry(target.parent)
    shutil.rmtree(old, ignore_errors=True)


def _sync(path: Path) -> None:
    """Flush ``path`` to disk: a file's contents, or every regular file and folder under a
    folder (links, pipes and sockets have no contents of their own to flush)."""
    if not path.is_dir():
        _sync_entry(path)
        return
    for folder, _, files in os.walk(path, topdown=False):
        for name in files:
            file = Path(folder) / name
            if stat.S_ISREG(file.lstat().st_mode):
                _sync_entry(file)
        _sync_entry(Path(folder))


def _sync_entry(path: Path) -> None:
    """``fsync`` one file or folder (a folder's entries: the names renamed into it); a file
    system that cannot flush a folder (some network and FUSE ones refuse) is left to its own
    guarantees."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    except OSError as error:
        if not (path.is_dir() and error.errno in (errno.EINVAL, errno.ENOTSUP)):
            raise
    finally:
        os.close(descriptor)


#: how every Parquet table of the project is written: zstd finds the episode history that each
#: per-step prompt repeats (an evaluation's steps: 6.5 MB with pyarrow's default snappy, 1.2 MB
#: with zstd at level 9), so that a study can commit them; any Parquet reader reads it
PARQUET_COMPRESSION: dict[str, Any] = {"compression": "zstd", "compression_level": 9}


def read_json(path: str | os.PathLike) -> Any:
    """The JSON document in the file at ``path``.

    Raises:
        ValueError: the file is not JSON (cut short, or another format), naming it.
    """
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path}: not a JSON file ({error})") from None


def write_parquet(frame: pd.DataFrame, path: str | os.PathLike) -> Path:
    """Write ``frame`` (its index left out) to the Parquet file ``path`` atomically, compressed
    as :data:`PARQUET_COMPRESSION` says; returns the path."""
    # imported here, not with the module: the environments import it too, and their planner
    # checks fork children whose address space may grow by a fixed amount; heap that these
    # imports leave free in the parent would give the child room beyond it
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    with atomic_path(path) as tmp:
        pq.write_table(
            pa.Table.from_pandas(frame, preserve_index=False), tmp, **PARQUET_COMPRESSION
        )
    return path


def settings_sha256(settings: Any) -> str:
    """The sha256 (hex) of ``settings`` as JSON with sorted keys, values JSON does not know
    written with ``str``: the one way a set of settings becomes a key (a journal's folder, a
    shared cache's folder, a snapshot's key, a game set's folder)."""
    text = json.dumps(settings, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def sha256_files(paths: list[Path]) -> str:
    """One hash over several files' names and contents, in the given order."""
    digest = hashlib.sha256()
    for p in paths:
        digest.update(Path(p).name.encode())
        digest.update(sha256_file(p).encode())
    return digest.hexdigest()


def fresh_staging_path(staging_dir: str | os.PathLike, prefix: str) -> Path:
    """A fresh directory name (not created) in ``staging_dir`` starting with ``prefix``; what a
    killed run left there under the same prefix is removed first (at the paper's scale each is
    a whole model)."""
    return keyed_staging_path(staging_dir, prefix, uuid.uuid4().hex[:12])


#: A staging key: 12 hex digits (a fresh one, or a hash of settings).
STAGING_KEY = re.compile(r"[0-9a-f]{12}")


def keyed_staging_path(
    staging_dir: str | os.PathLike, prefix: str, key: str, suffix: str = ""
) -> Path:
    """``staging_dir / (prefix + key + suffix)`` (not created), for work a rerun with the same
    ``key`` continues; another key's folder of the same ``prefix`` and ``suffix`` is removed
    first. ``key`` is :data:`STAGING_KEY`'s form, and only names of exactly that form are
    removed: a name that merely starts with ``prefix`` (experiment ``px-cycle_1``'s folders,
    when ``px`` cleans ``px-cycle_1-``) belongs to someone else."""
    if not STAGING_KEY.fullmatch(key):
        raise ValueError(f"key: must be 12 hex digits, got {key!r}")
    staging = Path(staging_dir)
    path = staging / f"{prefix}{key}{suffix}"
    if staging.is_dir():
        stale_name = re.compile(re.escape(prefix) + STAGING_KEY.pattern + re.escape(suffix))
        for stale in staging.iterdir():
            if stale != path and stale_name.fullmatch(stale.name):
                shutil.rmtree(stale, ignore_errors=True)
    return path


#: prctl(2) option: the signal a process receives when the thread that started it ends
_PR_SET_PDEATHSIG = 1


def tied_to_this_process() -> Callable[[], None] | None:
    """A ``preexec_fn`` that has the child receive ``SIGTERM`` when this process dies, however it
    dies (``SIGKILL`` included), so that a killed run leaves no child behind to share the cores
    with its rerun (torchrun, on ``SIGTERM``, stops its workers). ``None`` where the kernel has no
    parent-death signal (not Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here, not in the forked child
    parent = os.getpid()

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the parent died before the signal was armed
            os._exit(1)

    return preexec


def die_with(parent: int) -> None:
    """Have this process receive ``SIGTERM`` when ``parent``, the process that started it, dies
    however it dies; exit at once where it is gone already. For a child started without a
    ``preexec_fn`` (a ``spawn`` worker calls it first thing). Nothing where the kernel has no
    parent-death signal (not Linux)."""
    if not sys.platform.startswith("linux"):
        return
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:
        os._exit(1)


class LockedError(RuntimeError):
    """Another process holds the lock."""


class ProcessLock:
    """A lock on ``path`` held by this process until :meth:`release` or its end: exclusive, or
    ``shared`` (any number of shared holders at once, none beside an exclusive one: readers and a
    writer).

    ``flock(2)`` on a file that stays in place: the kernel drops the lock when the process dies,
    however it dies, so a killed run never leaves a stale lock behind. The file records the pid
    of the last holder, for the message of the one that waits.
    """

    def __init__(self, path: str | os.PathLike, *, shared: bool = False) -> None:
        self.path = Path(path)
        self.shared = shared
        self._file = None

    def acquire(self, wait: bool = False) -> None:
        """Take the lock; where another process holds it, raise :class:`LockedError` naming that
        process, or with ``wait``, log that name and wait until it lets go."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+")  # noqa: SIM115 (held open as long as the lock)
        mode = fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX
        try:
            fcntl.flock(handle, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            if not wait:
                handle.close()
                raise LockedError(f"{self.path}: held by process {holder}") from None
            logger.info("%s: held by process %s; waiting until it lets go", self.path, holder)
            fcntl.flock(handle, mode)
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        self._file = handle

    def release(self) -> None:
        if self._file is not None:
            self._file.close()  # closing the file releases the lock
            self._file = None
