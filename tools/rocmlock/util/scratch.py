"""Scratch directories beside an output: locked while in use, removed afterwards, swept when a run was killed.

``pack`` and ``unpack`` put big temporary data beside what they write (the bundle before its rename, an
extracted bundle, a package cache), so the final rename or hard link stays on one filesystem and a bundle
of many GB need not fit in /tmp. A ``kill -9`` leaves such a directory behind, and nothing else would ever
remove it. So each run holds an exclusive ``flock`` on its directory while it works (the kernel drops it
when the process dies, however it dies), and the next run in the same place removes every directory of
its kind whose lock it can take: its owner is gone. A run still going keeps its lock and its directory.

A directory is created as ``<name>.new``, locked, then renamed (the lock stays with the open descriptor),
so a sweep never sees one in the instant between its creation and its lock. Where the filesystem has no
locks (some NFS mounts answer ENOLCK), nothing is swept: a leftover is better than a removed live run.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

NEW = ".new"


def remove_tree(path: Path, keep_dir: bool = False, keep: str | None = None, settle: bool = False) -> None:
    """Remove ``path`` (or, ``keep_dir``, what it holds but ``keep``).

    ``settle``: after a failed rattler install, whose background tasks (package extraction) outlive the call
    and may still create files and directories in it for a moment: remove, and again, until it has stayed
    removed for a short while (3 s at most).
    """
    def left() -> list[Path]:
        if keep_dir:
            return [c for c in path.iterdir() if c.name != keep] if path.is_dir() else []
        return [path] if path.exists() or path.is_symlink() else []

    deadline, quiet = time.monotonic() + 3.0, 0
    while True:
        for child in left():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child, ignore_errors=True)
            else:
                child.unlink(missing_ok=True)
        quiet = quiet + 1 if not left() else 0
        if (quiet and not settle) or quiet >= 3 or time.monotonic() > deadline:
            return
        time.sleep(0.1)


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # held by a live run (EWOULDBLOCK), or no locks on this filesystem
        return False
    return True


def sweep(parent: Path, prefix: str) -> list[Path]:
    """Remove the directories ``parent/<prefix>*`` that no live run holds; returns those removed."""
    removed = []
    for path in sorted(parent.glob(f"{prefix}*")):
        if path.name.endswith(NEW) or path.is_symlink() or not path.is_dir():
            continue
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            continue
        try:
            if _try_lock(fd):
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
        finally:
            os.close(fd)
    return removed


@contextlib.contextmanager
def scratch_dir(parent: Path, prefix: str, log: Callable[[str], None] | None = None) -> Iterator[Path]:
    """A new directory ``parent/<prefix>XXXX`` locked for the ``with``, then removed.

    Leftovers of killed runs with the same ``prefix`` in ``parent`` are removed first (and ``log`` says so).
    """
    parent.mkdir(parents=True, exist_ok=True)
    removed = sweep(parent, prefix)
    if removed and log:
        log(f"removed {len(removed)} leftover(s) of an interrupted run in {parent}: "
            + ", ".join(p.name for p in removed))
    new = Path(tempfile.mkdtemp(prefix=prefix, suffix=NEW, dir=parent))
    fd = os.open(new, os.O_RDONLY | os.O_DIRECTORY)
    path = new.with_name(new.name.removesuffix(NEW))
    try:
        try:
            _try_lock(fd)
            os.rename(new, path)
        except BaseException:
            shutil.rmtree(new, ignore_errors=True)
            raise
        try:
            yield path
        except BaseException:
            remove_tree(path, settle=True)
            raise
        remove_tree(path)
    finally:
        os.close(fd)
