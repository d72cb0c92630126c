"""The no-op fast path: remember the exact bytes of a lock run's inputs and outputs.

When pixi.toml, pixi.lock and every export are byte-identical to what the last successful lock
left behind (same rocmlock version, same workspace path), a re-lock without ``--update`` has
nothing to do: satisfiability depends only on the manifest and the lock, and the exports only on
the lock. The stamp lives in the cache directory, never in the workspace.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path

from rocmlock import __version__
from rocmlock.errors import InputError
from rocmlock.util import fs as fsutil

# More than any manifest or lock (rocmlock.lock.lockfile.LOCK_LIMIT): such a file is read by the slow path, which
# says what is wrong with it.
_LIMIT = 256 << 20


def _stamp_path(cache_dir: Path, manifest: Path) -> Path:
    key = hashlib.sha256(str(manifest).encode()).hexdigest()[:24]
    return cache_dir / "stamps" / f"{key}.json"


def digest(manifest: Path, outputs: Iterable[Path]) -> str | None:
    """sha256 over the version, the manifest and each output (path and bytes); None if one is missing."""
    h = hashlib.sha256(f"rocmlock {__version__}\n{manifest}\n".encode())
    for path in [manifest, *sorted(outputs)]:
        try:  # a FIFO or a device in an output's place is no unchanged output (and must not hang the check)
            data = fsutil.read_regular(path, _LIMIT, "")
        except (OSError, InputError):
            return None
        h.update(f"{path}\n{len(data)}\n".encode())
        h.update(data)
    return h.hexdigest()


def unchanged(cache_dir: Path, manifest: Path) -> list[Path] | None:
    """The outputs of the last lock when nothing changed since, else None."""
    try:
        data = json.loads(_stamp_path(cache_dir, manifest).read_text())
        outputs = [Path(p) for p in data["outputs"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return outputs if digest(manifest, outputs) == data.get("digest") else None


def record(cache_dir: Path, manifest: Path, outputs: Iterable[Path]) -> None:
    """Remember the current bytes of ``manifest`` and ``outputs`` (best effort: a cache may be read-only)."""
    paths = sorted(outputs)
    value = digest(manifest, paths)
    if value is None:
        return
    try:
        fsutil.write_atomic(_stamp_path(cache_dir, manifest),
                            json.dumps({"digest": value, "outputs": [str(p) for p in paths]}, indent=1))
    except OSError:
        pass


def default_cache_dir(workspace_root: Path) -> Path:
    """The repodata cache: ``$ROCMLOCK_CACHE_DIR``, else ``$XDG_CACHE_HOME/rocmlock``, else ``<workspace>/.rocmlock/cache``."""
    if env := os.environ.get("ROCMLOCK_CACHE_DIR"):
        return Path(env)
    if xdg := os.environ.get("XDG_CACHE_HOME"):
        return Path(xdg) / "rocmlock"
    return workspace_root / ".rocmlock" / "cache"
