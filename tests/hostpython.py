"""A stand-in ``bin/python`` for test prefixes that runs the interpreter running the tests."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path


def python_shim(path: Path) -> Path:
    """Write an executable ``path`` that execs this interpreter with its arguments.

    A script, not a symlink: a venv's python reached through a symlink outside the venv finds no
    ``pyvenv.cfg`` beside it, starts as the base interpreter and loses the venv's site-packages
    (torch among them), so the suite would pass in the system interpreter and fail in a venv.
    """
    path.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
    path.chmod(0o755)
    return path
