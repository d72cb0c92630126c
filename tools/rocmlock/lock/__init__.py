"""Locking: ``rocmlock lock``/``export`` as one pipeline (``pipeline``: select, stamp, read, solve, assemble,
render, write), the solve (``solve``), pixi.lock v7 read and written (``lockfile``), pixi's satisfiability rules
(``satisfy``), the manifest stamp (``stamp``) and the no-op answer it gives without loading rattler (``noop``,
``result``, ``generated``), conda exports (``exports``; conda-lock.yml: ``condalock``), the entries of the lock
just written, from its records, for pixi's lock diff (``lockentry``; the diff itself: ``rocmlock.lockdiff``) and
the atomic output set (``outputs``).

May import: rocmlock.errors, rocmlock.util, rocmlock.gpu, rocmlock.workspace, rocmlock.lockdiff.
"""

# The Python API (docs/locking.md, "Python API"), loaded on first use: importing one module of this package (say
# rocmlock.lock.lockfile) does not load the rest.
__all__ = ["LockResult", "export_workspace", "lock_workspace"]


def __getattr__(name: str) -> object:
    if name in __all__:
        import importlib

        return getattr(importlib.import_module("rocmlock.lock.pipeline"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
