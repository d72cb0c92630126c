"""MAGMA on the build host: where it is, and whether it was built for the ROCm the build uses.

PyTorch runs some GPU linear algebra only through MAGMA (``torch.linalg.eig`` among them); its official ROCm wheels
link MAGMA and carry ``libmagma.so`` (``.ci/manywheel/build_rocm.sh`` lists it among the libraries it copies in). The
pytorch recipe links the build host's MAGMA only when ``ROCMLOCK_MAGMA_HOME`` names it, and then carries the library
itself (``rocmlock_magma`` in ``recipes/rocm-build-env.sh``). A MAGMA links one HIP runtime: one built for another
ROCm (Debian sid's ``libmagma-rocm-dev`` 2.9.0+ds-3 links ROCm 6's ``libamdhip64.so.6``) would load a second HIP
runtime next to torch's, so it is refused.

The key must hold an absolute path: the recipe reads it when rattler-build renders (in rocmlock's working
directory) and ``build.sh`` uses it in rattler-build's own work directory, where a relative path names another
directory (rattler-build's ``prepare_build_script`` hands ``directories.work_dir`` to the script runner, whose
``spawn_process`` sets it as the current directory and ``PWD``: crates/rattler_build_core/src/script.rs and
crates/rattler_build_script/src/execution.rs, prefix-dev/rattler-build 28f2ba1a). Empty is the same as unset:
the recipe's ``env.get(..., default="")`` and build.sh's ``${...:-}`` cannot tell them apart, and rattler-build
drops an empty value from the script's environment (tests/test_magma.py renders it).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from rocmlock.errors import InputError
from rocmlock.gpu.elf import ElfError, read_dynamic

KEY = "ROCMLOCK_MAGMA_HOME"
HIP_RUNTIME = "libamdhip64.so"
# What doctor and `rocmlock build` say (a warning) when the key is set but empty (:func:`is_empty`).
EMPTY = f"{KEY} is set but empty: pytorch builds without MAGMA, as when unset"


@dataclass(frozen=True)
class Magma:
    """A MAGMA install: ``include/magma.h`` and ``libmagma.so`` under ``lib/`` or ``lib/<multiarch>/``."""

    prefix: Path
    library: Path
    hip_runtime: str | None  # the libamdhip64 soname it links (None: none, or unreadable)
    unreadable: str | None = None  # why ``library`` cannot be read as an ELF shared library, when it cannot


def _library(prefix: Path, name: str) -> Path | None:
    for candidate in (prefix / "lib" / name, *sorted((prefix / "lib").glob(f"*-linux-gnu/{name}"))):
        if candidate.is_file():
            return candidate
    return None


def magma_at(prefix: Path) -> Magma | None:
    """The MAGMA installed under ``prefix`` (what PyTorch's FindMAGMA.cmake looks for there), or None."""
    library = _library(prefix, "libmagma.so")
    if library is None or not (prefix / "include/magma.h").is_file():
        return None
    try:
        needed = read_dynamic(library).needed
    except (OSError, ElfError) as exc:
        return Magma(prefix, library, None, str(exc).removeprefix(f"{library}: "))
    return Magma(prefix, library, next((n for n in needed if n.startswith(HIP_RUNTIME)), None))


def given(env: Mapping[str, str]) -> Magma | None:
    """The MAGMA ``ROCMLOCK_MAGMA_HOME`` names; None when it is unset or empty (pytorch builds without MAGMA).

    An InputError, naming the key and the fix, when the value is a relative path, does not exist, is no
    directory, or holds no MAGMA install: each of these build.sh refuses too (``rocmlock_magma``).
    """
    value = env.get(KEY, "")
    if not value:
        return None
    unset = f"or unset {KEY} to build pytorch without MAGMA"
    path = Path(value)
    if not path.is_absolute():
        suggestion = os.path.abspath(os.path.expanduser(value))
        raise InputError(f"{KEY}={value} is a relative path; build.sh runs in rattler-build's work directory, "
                         "where it would name another directory",
                         hint=f"give an absolute path (export {KEY}={suggestion} if that is the one), {unset}")
    if not path.exists():
        raise InputError(f"{KEY}={value} does not exist",
                         hint=f"point it at a MAGMA install (include/magma.h, lib/libmagma.so), {unset}")
    if not path.is_dir():
        raise InputError(f"{KEY}={value} is not a directory",
                         hint=f"point it at a MAGMA install's prefix (include/magma.h, lib/libmagma.so), {unset}")
    found = magma_at(path)
    if found is None:
        raise InputError(f"{KEY}={value} has no include/magma.h and lib/libmagma.so",
                         hint=f"point it at a MAGMA install, {unset}")
    return found


def is_empty(env: Mapping[str, str]) -> bool:
    """True when ``ROCMLOCK_MAGMA_HOME`` is set to the empty string (treated as unset: no MAGMA)."""
    return env.get(KEY) == ""


def hip_runtime_of(rocm: Path | None) -> str | None:
    """The soname of the HIP runtime of the ROCm at ``rocm`` (``libamdhip64.so.7``), or None."""
    library = _library(rocm, HIP_RUNTIME) if rocm is not None else None
    try:
        return read_dynamic(library).soname if library is not None else None
    except (OSError, ElfError):
        return None


def candidates(env: Mapping[str, str], rocm: Path | None) -> list[Path]:
    """Where a MAGMA is looked for when ROCMLOCK_MAGMA_HOME is unset: ``$MAGMA_HOME`` (PyTorch's variable),
    ``<rocm>/magma`` (PyTorch's CI installs it at /opt/rocm/magma: .ci/docker/common/install_rocm_magma.sh),
    ``/usr/local/magma`` (FindMAGMA.cmake's default) and the ROCm prefix itself (a distribution's, in /usr)."""
    found = [Path(env["MAGMA_HOME"])] if env.get("MAGMA_HOME") else []
    if rocm is not None:
        found.append(rocm / "magma")
    found.append(Path("/usr/local/magma"))
    if rocm is not None:
        found.append(rocm)
    return list(dict.fromkeys(found))


def discover(env: Mapping[str, str], rocm: Path | None) -> Magma | None:
    """The first MAGMA of :func:`candidates`, or None."""
    return next((m for m in map(magma_at, candidates(env, rocm)) if m is not None), None)
