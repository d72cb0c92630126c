"""Advisory OS file locks (``flock``): a second process waits its turn, saying whom it waits for.

The kernel drops a ``flock`` when the descriptor that holds it is closed, however its process ends (``kill -9``
included), so a lock is never stale and a lock file is never removed: one removed while a process waits on it
would let a third process lock a new file of the same name while the second still holds the old one.

Used by a workspace's writer lock (:mod:`rocmlock.lock.outputs`) and a directory channel's publish lock
(:mod:`rocmlock.channel.channel_dir`).
"""

from __future__ import annotations

import errno
import fcntl
import math
import os
import time
from collections.abc import Callable
from pathlib import Path

from rocmlock.util.text import printable

# What opening a lock file for writing answers where this process may not write it (a read-only mount,
# another user's file or directory): the lock is then taken through a read-only descriptor.
NOT_WRITABLE = (errno.EROFS, errno.EACCES, errno.EPERM)
POLL = 0.1


def holder(path: Path) -> str:
    """Who holds ``path``'s lock: the kernel's lock table (/proc/locks) names the pid; the file stays untouched."""
    try:
        st = path.stat()
        key = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
        for line in Path("/proc/locks").read_text().splitlines():
            fields = line.split()
            if "FLOCK" in fields and fields[-3] == key:
                pid = fields[-4]
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                # Another process's command line, which it chose (exec -a): printable only, and short.
                return f"process {pid} ({printable(' '.join(cmd.split()[:4]), 120)})"
    except (OSError, IndexError):
        pass
    return "another process"


def open_lock(path: Path, write: bool, *, follow_symlinks: bool = True) -> tuple[int | None, int]:
    """``path``'s descriptor and the lock to take on it (exclusive to write, else shared).

    A writer that cannot create or open the file for writing still takes the exclusive lock through a read-only
    descriptor (``flock`` does not care how the file was opened); ``None`` when the file cannot be opened at all
    (none there, and none can be made). Other errors are raised.
    """
    nofollow = 0 if follow_symlinks else os.O_NOFOLLOW
    if write:
        try:
            return os.open(path, os.O_RDWR | os.O_CREAT | nofollow, 0o666), fcntl.LOCK_EX
        except OSError as exc:
            if exc.errno not in NOT_WRITABLE:
                raise
    try:
        return os.open(path, os.O_RDONLY | nofollow), fcntl.LOCK_EX if write else fcntl.LOCK_SH
    except OSError:
        return None, fcntl.LOCK_SH


def wait(fd: int, kind: int, path: Path, *, timeout: float = math.inf,
         on_wait: Callable[[str], None] | None = None,
         waiting: Callable[[str], str] = lambda who: f"waiting for {who}") -> bool:
    """Take the ``kind`` lock on ``fd`` (the file ``path``); False once ``timeout`` seconds passed without it.

    While another process holds it, ``on_wait`` hears once ``waiting(holder)``. Polls rather than blocks, so
    that Ctrl-C and the timeout still work. A filesystem without locks raises its OSError (ENOLCK, ENOTSUP).
    """
    deadline = time.monotonic() + timeout
    told = False
    while True:
        try:
            fcntl.flock(fd, kind | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            pass
        if time.monotonic() >= deadline:
            return False
        if not told and on_wait is not None:
            on_wait(waiting(holder(path)))
            told = True
        time.sleep(POLL)
