"""The environment the benchmarks run rocmlock's commands in: as an installed rocmlock meets it."""

from __future__ import annotations

import os


def child_env(**extra: str) -> dict[str, str]:
    """``os.environ`` plus ``extra``, less what would change what is measured: a developer's ``CONDA_*``,
    ``PIXI_*`` and ``RATTLER_*`` settings, and ``PYTHONDONTWRITEBYTECODE``. With that one set, no run writes the
    ``.pyc`` files, so every timed run compiled from source each module changed since its last ``.pyc`` (all of
    them in an unpacked tree), which an installed rocmlock (pip compiles them) never does: with it, `bench_image.py`
    printed 2.03x on 2026-12-08, without it 1.87-1.96x (benchmarks/README.md)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CONDA_", "PIXI_", "RATTLER_")) and k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, **extra}
