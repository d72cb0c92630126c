"""A workspace's generated files (pixi.lock and envs/) as one set: one writer at a time, committed atomically.

The writer lock and the redo journal are :mod:`rocmlock.util.journal`'s (``bump`` commits the recipes it changes
with the same journal), kept under ``<workspace>/.rocmlock/``; this module names what they write here and puts
pixi.lock last, so a reader of pixi.lock alone (pixi, install) sees the old lock until the exports are in.
A lock check (``lock --check``) takes the lock shared and creates nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from rocmlock.util import journal
from rocmlock.util.journal import LOCK_NAME, STATE_DIR, Subject, recover

__all__ = ["LOCK_NAME", "OUTPUTS", "STATE_DIR", "commit", "exclusive", "recover", "settle"]

OUTPUTS = Subject("the lock outputs", "`rocmlock lock`")


@contextlib.contextmanager
def exclusive(root: Path, write: bool = True, timeout: float | None = None,
              on_wait: Callable[[str], None] | None = None) -> Iterator[None]:
    """Hold ``root``'s writer lock (``write=False``: shared, for a check) and settle any interrupted commit."""
    with journal.exclusive(root, OUTPUTS, write, timeout, on_wait):
        yield


def settle(root: Path, on_wait: Callable[[str], None] | None = None) -> None:
    """Before reading a workspace's outputs: finish an interrupted commit if there is one (cheap otherwise)."""
    journal.settle(root, OUTPUTS, on_wait)


def commit(root: Path, files: Mapping[Path, str | bytes], removals: Sequence[Path] = ()) -> None:
    """Replace ``files`` and remove ``removals`` (paths below ``root``) as one set, pixi.lock last; the caller holds
    :func:`exclusive`."""
    journal.commit(root, OUTPUTS, files, removals, last=[p for p in files if p.name == "pixi.lock"])
