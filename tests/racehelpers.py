"""Runs of rocmlock released at once, and what they leave: shared by tests/test_lock_concurrent.py and
benchmarks/race_lock.py (issue 40, item 3)."""

from __future__ import annotations

from pathlib import Path

STATE_FILES = {".gitignore", "writer.lock"}  # all .rocmlock/ may hold afterwards (the cache is elsewhere)


def together(imports: str) -> str:
    """A ``python -c`` script (argv: BARRIER ME N COMMAND...): it imports ``imports`` (what its command needs, so
    that the import time does not spread the starts), says it is ready in BARRIER, waits until N are, then runs the
    CLI's entry point (`run`: it leaves through os._exit, as `rocmlock` does, past py-rattler's crashes at
    finalization)."""
    return f"""
import os, sys, time
from pathlib import Path
import {imports}
from rocmlock.cli.main import run
barrier, me, n = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
(barrier / me).touch()
deadline = time.monotonic() + 120
while len(os.listdir(barrier)) < n and time.monotonic() < deadline:
    time.sleep(0.0005)
sys.argv[1:] = sys.argv[4:]
run()
"""


# What the lock, export and install commands need.
TOGETHER = together("rattler, rocmlock.lock.pipeline, rocmlock.prefix.install")


def outputs(root: Path) -> dict[str, bytes]:
    """Every file of the checkout outside .rocmlock/ (a stray temporary file would show here)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and ".rocmlock" not in p.relative_to(root).parts}


def left_in_state(root: Path) -> list[str]:
    state = root / ".rocmlock"
    return sorted(str(p.relative_to(state)) for p in state.rglob("*")
                  if p.name not in STATE_FILES and not (p.name == "txn" and p.is_dir() and not any(p.iterdir())))
