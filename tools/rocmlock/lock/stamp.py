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
import time
from collections.abc import Iterable
from pathlib import Path

from rocmlock import __version__
from rocmlock.errors import InputError
from rocmlock.util import fs as fsutil
from rocmlock.util.text import escape

# More than any manifest or lock (rocmlock.lock.lockfile.LOCK_LIMIT): such a file is read by the slow path, which
# says what is wrong with it.
_LIMIT = 256 << 20


def _stamp_path(cache_dir: Path, manifest: Path) -> Path:
    key = hashlib.sha256(str(manifest).encode()).hexdigest()[:24]
    return cache_dir / "stamps" / f"{key}.json"


def digest(manifest: Path, outputs: Iterable[Path], manifest_bytes: bytes | None = None) -> str | None:
    """sha256 over the version, the manifest and each output (path and bytes); None if one is missing.
    ``manifest_bytes``: the manifest as it was read, in place of what the file holds now."""
    h = hashlib.sha256(f"rocmlock {__version__}\n{manifest}\n".encode())
    for path in [manifest, *sorted(outputs)]:
        try:  # a FIFO or a device in an output's place is no unchanged output (and must not hang the check)
            data = manifest_bytes if path == manifest and manifest_bytes is not None else \
                fsutil.read_regular(path, _LIMIT, "")
        except (OSError, InputError):
            return None
        h.update(f"{path}\n{len(data)}\n".encode())
        h.update(data)
    return h.hexdigest()


# A file's (size, mtime, ctime, inode, device) stands for its bytes only once its ctime is this much older than the
# moment they were taken: a write updates mtime and ctime from a coarse clock (a few ms), so a file changed in the
# same tick as the stamp's own write would keep its times (git's "racy clean" entries, racy-git.txt). Such a
# stamp is checked by its digest, and re-taken when the files are old enough.
SETTLED_NS = 2_000_000_000


def _stat(path: Path) -> list[int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]


def _settled(paths: Iterable[Path]) -> dict[str, list[int]] | None:
    """Every path's stat, when each is older than :data:`SETTLED_NS`, else None."""
    now = time.time_ns()
    stats = {str(p): _stat(p) for p in paths}
    if any(v is None or v[2] > now - SETTLED_NS for v in stats.values()):
        return None
    return stats  # type: ignore[return-value]  # no None left


def stamped(cache_dir: Path, manifest: Path) -> tuple[list[Path], tuple[str, ...]] | None:
    """The outputs of the last lock and the warnings its manifest gave (:func:`record`) when nothing changed since,
    else None; one read of the stamp.

    Without reading the outputs when the stamp holds their settled stat and each file still has it (the no-op lock
    on a big lock read and hashed every output, 4 MB for four GPU environments: issue 40); otherwise by the digest
    of their bytes, after which the stat is recorded, once the files have settled."""
    path = _stamp_path(cache_dir, manifest)
    try:
        data = json.loads(path.read_text())
        outputs = [Path(p) for p in data["outputs"]]
        stats = data.get("stats")
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if data.get("version") == __version__ and isinstance(stats, dict) and len(stats) == len(outputs) + 1 and \
            all(stats.get(str(p)) == _stat(p) for p in [manifest, *outputs]):
        return outputs, _warnings(data)
    if digest(manifest, outputs) != data.get("digest"):
        return None
    settled = _settled([manifest, *outputs])
    if settled is not None:
        _write(path, {**data, "version": __version__, "stats": settled})
    return outputs, _warnings(data)


def _warnings(data: dict[str, object]) -> tuple[str, ...]:
    """The stamp's warnings, escaped again (a cache file is not trusted); none unless a list of strings."""
    found = data.get("warnings")
    if not isinstance(found, list) or not all(isinstance(w, str) for w in found):
        return ()
    return tuple(escape(w[:2000]) for w in found[:100])


def record(cache_dir: Path, manifest: Path, outputs: Iterable[Path], warnings: Iterable[str] = (),
           manifest_bytes: bytes | None = None) -> None:
    """Remember the bytes of ``manifest`` and ``outputs`` (best effort: a cache may be read-only), and the
    warnings the manifest gave, which the no-op lock repeats without reading it (they follow from its bytes).
    ``manifest_bytes``: the manifest the outputs were made from, as it was read; the file may have been edited
    while the lock ran, and such an edit must leave the stamp unmatched (the next lock sees a changed manifest)."""
    paths = sorted(outputs)
    value = digest(manifest, paths, manifest_bytes)
    if value is None:
        return
    _write(_stamp_path(cache_dir, manifest), {"digest": value, "outputs": [str(p) for p in paths],
                                              "warnings": list(warnings)})


def _write(path: Path, data: dict[str, object]) -> None:
    try:
        fsutil.write_atomic(path, json.dumps(data, indent=1))
    except OSError:
        pass


def default_cache_dir(workspace_root: Path) -> Path:
    """The repodata cache: ``$ROCMLOCK_CACHE_DIR``, else ``$XDG_CACHE_HOME/rocmlock``, else ``<workspace>/.rocmlock/cache``."""
    if env := os.environ.get("ROCMLOCK_CACHE_DIR"):
        return Path(env)
    if xdg := os.environ.get("XDG_CACHE_HOME"):
        return Path(xdg) / "rocmlock"
    return workspace_root / ".rocmlock" / "cache"
