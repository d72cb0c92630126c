"""A locked environment's PyPI wheels in a bundle: ``pypi/<wheel>``, as pixi-pack lays them out.

pixi-pack 0.7.10 (QuantCo/pixi-pack ``src/pack.rs``) downloads each ``pypi:`` package of the lock whose location
is a wheel into ``pypi/`` under the URL's (percent-decoded) file name, refuses anything else ("is not a wheel
file") unless ``--ignore-pypi-non-wheel`` (then warns), and lists them in environment.yml's ``pip:`` section
with ``--no-index --find-links ./pypi``; pixi-unpack (``src/unpack.rs``, ``install_pypi_packages``) installs
every file of ``pypi/`` into the prefix with uv, offline. rocmlock does the same; ``unpack`` installs them with
pip (``--python <prefix>/bin/python``: the environment needs no pip of its own) in ``--require-hashes`` mode,
each wheel's sha256 taken from the bundle's verified metadata, ``--no-index --no-deps``: nothing but these files.
"""

from __future__ import annotations

import os
import posixpath
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from rocmlock.bundle.layout import PYPI_DIR, WHEEL_NAME, BundleMetadata
from rocmlock.errors import InputError, OperationError
from rocmlock.prefix.fetch import FileDownload, Timeouts, fetch_files
from rocmlock.util.credentials import mask_query, redact_url
from rocmlock.util.runner import CommandError, run_command
from rocmlock.util.text import escape
from rocmlock.workspace.pypi import PypiPin, SourcePackage

PIP_TIMEOUT_S = 1800.0
# PEP 508 names and PEP 440 versions (local part included): what goes into environment.yml's pip: section.
_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")
_VERSION = re.compile(r"[A-Za-z0-9.+!_-]+")


@dataclass(frozen=True)
class Wheel:
    """A locked PyPI wheel and its file name in ``pypi/``."""

    pin: PypiPin
    filename: str

    @property
    def member(self) -> str:
        return f"{PYPI_DIR}/{self.filename}"


def _filename(pin: PypiPin) -> str:
    return unquote(posixpath.basename(urlsplit(pin.location).path))


def select_wheels(pins: Sequence[PypiPin], sources: Sequence[SourcePackage], ignore_non_wheel: bool,
                  where: str) -> tuple[list[Wheel], tuple[str, ...]]:
    """The wheels to bundle and, with ``ignore_non_wheel``, the packages left out; else a package that is not a
    wheel (an sdist, a git or path dependency) is an InputError naming them: a node cannot build it offline."""
    wheels = [Wheel(pin, _filename(pin)) for pin in pins if _filename(pin).endswith(".whl")]
    others = [f"{pin.name} {pin.version} ({redact_url(mask_query(pin.location))})" for pin in pins
              if not _filename(pin).endswith(".whl")] + [s.describe() for s in sources]
    if others and not ignore_non_wheel:
        raise InputError(f"{where}: package(s) that are not wheels or conda binaries, which no node can build "
                         "offline: "
                         f"{escape(', '.join(others))}",
                         hint="--ignore-pypi-non-wheel leaves them out (as pixi-pack's option does); or lock "
                              "wheels of them")
    for wheel in wheels:
        if not _NAME.fullmatch(wheel.pin.name) or not _VERSION.fullmatch(wheel.pin.version):
            raise InputError(f"{where}: PyPI package '{escape(wheel.pin.name)}' {escape(wheel.pin.version)}: not "
                             "a PyPI name and version", hint="lock again from an index you trust")
        if not WHEEL_NAME.fullmatch(wheel.filename) or ".." in wheel.filename:
            raise InputError(f"{where}: PyPI package '{escape(wheel.pin.name)}': '{escape(wheel.filename)}' is not "
                             "a plain wheel file name", hint="lock again from an index you trust")
    return sorted(wheels, key=lambda w: w.filename), tuple(others)


def fetch_wheels(wheels: Sequence[Wheel], dest: Path, client: Any, timeouts: Timeouts) -> None:
    """Download ``wheels`` into ``dest`` (created), each checked against the lock's sha256."""
    if not wheels:
        return
    dest.mkdir()
    fetch_files([FileDownload(w.pin.location, dest / w.filename, w.pin.sha256) for w in wheels], client, timeouts)


def bundled_wheels(meta: BundleMetadata) -> dict[str, str]:
    """The bundle's ``pypi/`` members and their verified sha256."""
    return {m: d for m, d in meta.files.items() if m.startswith(f"{PYPI_DIR}/")}


def install_wheels(where: Path, prefix: Path, meta: BundleMetadata, scratch: Path, fresh: bool = False) -> int:
    """Install the bundle's wheels into ``prefix`` with pip, offline and hash-checked; returns how many.

    pip runs isolated from the node: no PIP_* or PYTHON* variable (an HPC module's PYTHONPATH would make pip
    take a package as "already satisfied" from outside the prefix), no pip configuration, no user site; into a
    ``fresh`` prefix with ``--ignore-installed`` (an environment being updated keeps pip's uninstall of the
    versions it replaces). Afterwards every wheel's ``.dist-info`` must be in the prefix.
    """
    wheels = bundled_wheels(meta)
    if not wheels:
        return 0
    python = prefix / "bin" / "python"
    if not python.exists():
        raise OperationError(f"{prefix}: the bundle has {len(wheels)} PyPI wheel(s) and the environment no "
                             "bin/python to install them into", hint="add python to the environment and pack again")
    # By name and version from the bundle's pypi/ (relative to pip's cwd), not by path: pip records a wheel given
    # by path as a direct URL install (PEP 610 direct_url.json, naming the temporary extraction), so the same
    # bundle would give another prefix each time. The names are checked plain (bundle.WHEEL_NAME).
    pins: dict[str, list[str]] = {}
    for member, digest in sorted(wheels.items()):
        name, version = posixpath.basename(member).split("-")[:2]
        pins.setdefault(f"{name}=={version}", []).append(f"--hash=sha256:{digest}")
    requirements = scratch / "pypi-requirements.txt"
    requirements.write_text("".join(f"{pin} {' '.join(hashes)}\n" for pin, hashes in pins.items()))
    argv = [sys.executable, "-I", "-m", "pip", "--python", str(python), "--disable-pip-version-check", "install",
            "--no-index", "--find-links", f"./{PYPI_DIR}", "--no-deps", "--require-hashes", "--only-binary=:all:",
            "--no-input", *(["--ignore-installed"] if fresh else []), "-r", str(requirements)]
    try:
        res = run_command(argv, env=_pip_env(os.environ), cwd=where, timeout=PIP_TIMEOUT_S, check=False)
    except CommandError as exc:
        raise OperationError(f"installing the PyPI wheels into {prefix}: {exc}") from None
    if not res.ok:
        raise _pip_failure(prefix, res.stdout + res.stderr)
    _check_installed(prefix, sorted(wheels))
    return len(wheels)


def _pip_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The node's environment without what changes pip or the environment's python: the bundle's files only."""
    env = {k: v for k, v in environ.items() if not k.startswith(("PIP_", "PYTHON"))}
    env.update({"PIP_CONFIG_FILE": os.devnull, "PYTHONNOUSERSITE": "1"})
    return env


def _pip_failure(prefix: Path, output: str) -> OperationError:
    """pip's own ``ERROR:`` lines (a wheel it refuses: a path out of the prefix, an unknown ``.data``
    directory, not a zip) and the fix for what failed."""
    errors = [escape(line.strip())[:400] for line in output.splitlines() if line.startswith("ERROR:")]
    if any("no such option: --python" in line for line in output.splitlines()):
        return OperationError(f"installing the PyPI wheels into {prefix} failed: this pip has no --python option",
                              hint="pip >= 22.3 is needed beside rocmlock (`python -m pip install -U pip`)")
    if not errors:
        from rocmlock.bundle.installer import build_failure

        return OperationError(f"installing the PyPI wheels into {prefix} failed: {build_failure(output)}",
                              hint="check the pip beside rocmlock (`python -m pip --version`: pip >= 22.3 is needed)")
    if any("OSError" in line for line in errors):  # pip's "Could not install packages due to an OSError"
        hint = f"check that {prefix} is writable and its disk has room"
    else:
        hint = ("pip refuses a wheel of the bundle: do not install it; find out where it came from (lock and pack "
                "it again from an index you trust)")
    return OperationError(f"installing the PyPI wheels into {prefix} failed: pip says: {' | '.join(errors[:3])}",
                          hint=hint)


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _check_installed(prefix: Path, members: Sequence[str]) -> None:
    """Every wheel's ``<name>-<version>.dist-info`` is in the prefix's site-packages: pip may call a package
    "already satisfied" by a copy it found elsewhere and install nothing."""
    found = {_canonical(p.name.removesuffix(".dist-info")) for p in prefix.glob("lib/python*/site-packages/*.dist-info")}
    missing = [m for m in members if _canonical("-".join(posixpath.basename(m).split("-")[:2])) not in found]
    if missing:
        raise OperationError(f"installing the PyPI wheels into {prefix}: pip finished, and {len(missing)} wheel(s) "
                             f"are not in the environment: {escape(', '.join(missing))}",
                             hint="pip found them installed outside the environment (a .pth file of its "
                                  "site-packages): remove that, then unpack again")
