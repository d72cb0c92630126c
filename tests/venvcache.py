"""One protocol for the venvs the tests cache under ``~/.cache/rocmlock-tests`` (quetz, the condas, the lock tools):
made once, by one maker at a time, and used only when complete."""

from __future__ import annotations

import fcntl
import shutil
from collections.abc import Callable
from pathlib import Path

COMPLETE = ".rocmlock-complete"


def cached_venv(root: Path, make: Callable[[Path], str]) -> Path:
    """``root``'s bin directory. When ``root`` is missing or half-made (no completion stamp, or no python), it is
    removed and ``make(root)`` makes it anew; what ``make`` returns is written to the stamp, last. An exclusive
    lock beside ``root`` lets one process make it while the others wait, then use it."""
    done, python = root / COMPLETE, root / "bin" / "python"
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.parent / f".{root.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.is_file() and python.exists():
            return root / "bin"
        shutil.rmtree(root, ignore_errors=True)
        done.write_text(make(root))
    return root / "bin"
