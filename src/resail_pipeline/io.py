"""Atomic file writes, content hashes and the names that become folders: nothing already written is
ever half-replaced, and no configured name writes outside its folder."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` only if the block succeeds.

    Works for files and directories alike. An existing directory at ``path`` is replaced whole;
    on error the temporary is removed and ``path`` is left as it was.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    tmp.rmdir()  # the caller creates a file or a directory here
    try:
        yield tmp
        if target.is_dir() and tmp.is_dir():
            old = target.with_name(f".{target.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            target.rename(old)
            tmp.rename(target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, target)
    finally:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        elif tmp.exists():
            tmp.unlink()


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
    staging = Path(staging_dir)
    if staging.is_dir():
        for stale in staging.glob(f"{prefix}*"):
            shutil.rmtree(stale, ignore_errors=True)
    return staging / f"{prefix}{uuid.uuid4().hex[:12]}"
