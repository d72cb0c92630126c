"""A prefix being installed carries a marker until the install finished: a killed ``rocmlock install`` or
``rocmlock unpack`` leaves it, and the next run into that prefix sees it (and the probe reports it), rather than
taking a half-linked environment for a finished one. The marker is locked while the install runs, so a second
run into the same prefix waits for the first, saying so, instead of linking over it (as pixi waits on its prefix
lock), or, given nothing to say it with, stops at once.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from rocmlock.errors import OperationError

MARKER = ".rocmlock-install-incomplete"  # the probe (tools/verify_env.py, env.complete) looks for this name
Wait = Callable[[str], None] | None  # says that this run waits for another; None: stop at once instead


def _linked(fd: int, path: Path) -> bool:
    """Whether ``fd`` is still the file at ``path`` (an install that finished unlinks its marker while holding it)."""
    try:
        st, now = os.fstat(fd), os.stat(path)
    except FileNotFoundError:
        return False
    return (st.st_dev, st.st_ino) == (now.st_dev, now.st_ino)


def _lock(fd: int, prefix: Path, what: str, wait: Wait = None) -> None:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        if wait is None:
            raise OperationError(f"{prefix}: another rocmlock {what} is installing into it",
                                 hint="wait for it to finish, or choose another --prefix") from None
        wait(f"{prefix}: another rocmlock run is installing into it; waiting for it to finish")
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError:  # no locks on this filesystem: go on unguarded
        pass


@contextlib.contextmanager
def held(prefix: Path, what: str, wait: Wait = None) -> Iterator[int]:
    """The marker of ``prefix``, opened (created) and locked; an install that holds it already is an error. The
    lock is on the file at the marker's path: one unlinked meanwhile by an install that finished is opened anew."""
    while True:
        fd = os.open(prefix / MARKER, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            _lock(fd, prefix, what, wait)
        except BaseException:
            os.close(fd)
            raise
        if _linked(fd, prefix / MARKER):
            break
        os.close(fd)
    try:
        yield fd
    finally:
        os.close(fd)


def interrupted(prefix: Path, what: str, wait: Wait = None) -> str | None:
    """``"created"`` or ``"updated"`` when an earlier install into ``prefix`` was interrupted (what it was doing),
    else None; an error when one is running now. The marker is only read here, never made: one that goes away
    meanwhile (its install finished) means nothing was interrupted."""
    try:
        fd = os.open(prefix / MARKER, os.O_RDONLY)
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        _lock(fd, prefix, what, wait)  # only to see whether a live install holds it (and wait for it)
        if not _linked(fd, prefix / MARKER):
            return None
        return "created" if os.read(fd, 64).strip() == b"created" else "updated"
    finally:
        os.close(fd)


@contextlib.contextmanager
def installing(prefix: Path, fresh: bool, what: str, wait: Wait = None) -> Iterator[None]:
    """Mark ``prefix`` (which exists) as being installed (``fresh``: made anew) for the body; the marker goes when
    the body returns, unlinked while it is still locked (so no other install takes it for an interrupted one's),
    and stays when the body raises (the caller removes a fresh prefix that failed)."""
    with held(prefix, what, wait) as fd:
        os.ftruncate(fd, 0)
        os.write(fd, b"created\n" if fresh else b"updated\n")
        yield
        (prefix / MARKER).unlink()
