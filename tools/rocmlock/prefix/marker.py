"""A prefix being installed carries a marker until the install finished: a killed ``rocmlock install`` or
``rocmlock unpack`` leaves it, and the next run into that prefix sees it (and the probe reports it), rather than
taking a half-linked environment for a finished one. The marker is locked while the install runs, so a second
run into the same prefix stops at once instead of linking over the first.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from rocmlock.errors import OperationError

MARKER = ".rocmlock-install-incomplete"  # the probe (tools/verify_env.py, env.complete) looks for this name


@contextlib.contextmanager
def held(prefix: Path, what: str) -> Iterator[int]:
    """The marker of ``prefix``, opened (created) and locked; an install that holds it already is an error."""
    fd = os.open(prefix / MARKER, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise OperationError(f"{prefix}: another rocmlock {what} is installing into it",
                                 hint="wait for it to finish, or choose another --prefix") from None
        except OSError:  # no locks on this filesystem: go on unguarded
            pass
        yield fd
    finally:
        os.close(fd)


def interrupted(prefix: Path, what: str) -> str | None:
    """``"created"`` or ``"updated"`` when an earlier install into ``prefix`` was interrupted (what it was doing),
    else None; an error when one is running now."""
    marker = prefix / MARKER
    if not marker.is_file():
        return None
    with held(prefix, what):  # only to see whether a live install holds it
        pass
    return "created" if marker.read_text().strip() == "created" else "updated"


@contextlib.contextmanager
def installing(prefix: Path, fresh: bool, what: str) -> Iterator[None]:
    """Mark ``prefix`` (which exists) as being installed (``fresh``: made anew) for the body; the marker goes when
    the body returns and stays when it raises (the caller removes a fresh prefix that failed)."""
    with held(prefix, what) as fd:
        os.ftruncate(fd, 0)
        os.write(fd, b"created\n" if fresh else b"updated\n")
        yield
    (prefix / MARKER).unlink()
