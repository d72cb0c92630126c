"""The no-op path of ``rocmlock lock``: nothing changed since the last full lock, so nothing is solved or written.

:mod:`rocmlock.lock.stamp` remembers the bytes of pixi.toml, pixi.lock and every export a full lock left behind
(and rocmlock's version); when they are the same, the lock is complete and satisfied, and its exports are current.
This module answers that without importing rattler or the solver, so that a no-op ``rocmlock lock`` (the command
CI gates and pre-commit hooks run on every commit) costs little more than Python's start
(``benchmarks/bench_cli_startup.py``). Anything else goes through :mod:`rocmlock.lock.pipeline`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path

from rocmlock.errors import InputError
from rocmlock.lock import stamp
from rocmlock.lock.generated import generated_files
from rocmlock.lock.outputs import exclusive
from rocmlock.lock.result import LockResult

LOCK_NAME = "pixi.lock"
ENVS_DIR = "envs"


def manifest_file(manifest_path: str | Path) -> Path:
    """The absolute pixi.toml path for a manifest file or its directory."""
    from rocmlock.workspace.pyproject import find_manifest

    return find_manifest(Path(manifest_path)).absolute()


def existing_manifest(manifest_path: str | Path) -> Path:
    """:func:`manifest_file`, which must exist: checked before the writer lock would create ``.rocmlock/`` (and
    every directory a mistyped path names)."""
    manifest = manifest_file(manifest_path)
    if not manifest.is_file():
        # A FIFO, a device or a directory there exists but is no manifest: said so, not "no such manifest".
        what = "not a regular file; a manifest is a file" if manifest.exists() else "no such manifest"
        raise InputError(f"{manifest}: {what}", hint="pass --manifest-path to a pixi.toml")
    return manifest


def leftovers(root: Path, files: Iterable[Path], scope: Iterable[str] | None = None) -> tuple[Path, ...]:
    """Exports rocmlock wrote under ``root``/envs/ (in the ``scope`` environments' directories, every one when
    None) that ``files`` no longer holds: envs/ mirrors the lock, so they go."""
    wanted = set(files)
    return tuple(p for p in generated_files(root / ENVS_DIR, scope) if p not in wanted)


def unchanged(manifest: Path, cache: Path) -> LockResult | None:
    """The result of a lock with nothing to do (every input and output as the stamp recorded them, no stray
    export), else None. The caller holds the workspace's lock."""
    found = stamp.stamped(cache, manifest)
    if found is None or leftovers(manifest.parent, found[0]):
        return None
    return LockResult(manifest, _Texts(found[0]), (), (), (), False, warnings=found[1])


class _Texts(Mapping[Path, str]):
    """The outputs' texts, each read when first asked for: the no-op answer needs none of them."""

    def __init__(self, paths: Iterable[Path]) -> None:
        self._paths = list(paths)
        self._texts: dict[Path, str] = {}

    def __getitem__(self, path: Path) -> str:
        if path not in self._paths:
            raise KeyError(path)
        if path not in self._texts:
            self._texts[path] = path.read_text()
        return self._texts[path]

    def __iter__(self) -> Iterator[Path]:
        return iter(self._paths)

    def __len__(self) -> int:
        return len(self._paths)


def lock_if_unchanged(manifest_path: str | Path, cache_dir: Path | None = None,
                      on_wait: Callable[[str], None] | None = None) -> LockResult | None:
    """``rocmlock lock`` (every environment and platform, no ``--update``) when it has nothing to do, under the
    workspace's reader lock; None when it has (then :func:`rocmlock.lock.pipeline.lock_workspace` does it)."""
    manifest = existing_manifest(manifest_path)
    with exclusive(manifest.parent, write=False, on_wait=on_wait):
        return unchanged(manifest, cache_dir or stamp.default_cache_dir(manifest.parent))
