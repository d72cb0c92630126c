"""``rocmlock pack --with-installer``: what a node without rocmlock needs to run ``rocmlock unpack``.

``installer/wheels/`` holds a wheel of rocmlock (built from this checkout), py-rattler's wheel for the
bundle's platform (``pip download``: py-rattler is an abi3 wheel with no dependencies, one file for every
CPython >= 3.10), tomli's (pure Python; ``tomllib`` on a 3.10, see :mod:`rocmlock.util.toml`) and rocm-bootstrap's
(pure Python, no dependencies: the GPU table is checked against it when read); ``unpack`` imports nothing else. ``installer/install.sh`` makes a temporary venv with the node's python3 (>= 3.10:
Ubuntu 22.04's, a ROCm 7.2 platform; rocmlock itself asks for 3.11, so on 3.10 pip is told to install it
anyway, for ``unpack`` alone), installs the wheels with ``--no-index`` and runs ``rocmlock unpack`` on the
extracted bundle with the arguments it was given.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

from rattler import __version__ as rattler_version

from rocmlock.bundle.layout import FIXED_MTIME, INSTALLER_DIR, BundleMetadata
from rocmlock.errors import OperationError
from rocmlock.util.runner import CommandError, run_command
from rocmlock.util.text import escape

MANYLINUX = {
    "linux-64": ("manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux_2_28_x86_64"),
    "linux-aarch64": ("manylinux_2_17_aarch64", "manylinux2014_aarch64", "manylinux_2_28_aarch64"),
}

INSTALL_SH = """#!/bin/sh
# Install this bundle on a node without rocmlock. Needs python3 >= 3.10 (with venv) and nothing from a network:
#   mkdir bundle && tar -xf {environment}.tar -C bundle && sh bundle/installer/install.sh --prefix DIR [...]
# Arguments go to `rocmlock unpack` (--prefix DIR, --force, --no-verify, --json, ...).
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
py=${{PYTHON:-python3}}
if ! "$py" -c 'import sys, venv; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
    echo "install.sh: needs Python >= 3.10 with venv (set PYTHON=...); $py is $("$py" -V 2>&1 || echo missing)" >&2
    exit 2
fi
venv=$(mktemp -d "${{TMPDIR:-/tmp}}/rocmlock-installer.XXXXXX")
trap 'rm -rf "$venv"' EXIT
"$py" -m venv "$venv"
# rocmlock asks for Python 3.11; `rocmlock unpack` runs on 3.10 too, with tomli for tomllib.
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-index --no-deps \\
    --ignore-requires-python --find-links "$here/{installer}/wheels" rocmlock py-rattler tomli rocm-bootstrap
"$venv/bin/python" -m rocmlock unpack "$here" "$@"
"""


def _source_tree() -> Path:
    import rocmlock

    root = Path(rocmlock.__file__).resolve().parents[2]
    if not (root / "pyproject.toml").is_file() or not (root / "tools" / "rocmlock").is_dir():
        raise OperationError("--with-installer builds rocmlock's wheel from its source tree, and this rocmlock "
                             f"is not installed from one ({root})",
                             hint="run pack from a checkout of rocmlock (`pip install -e .`)")
    return root


def _build_rocmlock_wheel(dest: Path, python: str = sys.executable) -> None:
    """A wheel of this checkout, built in a copy (nothing is written into the checkout), timestamps fixed.

    Built as pip builds it: PEP 517 in an isolated environment that pip fills with pyproject.toml's declared
    ``[build-system] requires`` (setuptools>=68 and wheel, which gives setuptools before 70.1 its
    ``bdist_wheel``), not with whatever setuptools ``python`` has (a fresh 3.11 venv's 65.5 has no
    ``bdist_wheel``). A failure shows the build's own last lines, not pip's "See above"."""
    root = _source_tree()
    with tempfile.TemporaryDirectory(prefix="rocmlock-wheel-") as tmp:
        src = Path(tmp) / "src"
        shutil.copytree(root / "tools" / "rocmlock", src / "tools" / "rocmlock",
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        for name in ("pyproject.toml", "README.md"):
            shutil.copy(root / name, src / name)
        # The zip records each file's mode: the checkout's (its umask) and, for what setuptools writes, ours.
        for path in src.rglob("*"):
            path.chmod(0o755 if path.is_dir() else 0o644)
        # No PIP_NO_BUILD_ISOLATION: pip assigns a boolean option's environment value to its dest as it is
        # (pip/_internal/cli/parser.py, _update_defaults, strtobool), and the dest of --no-build-isolation is
        # build_isolation, so "0" (which this once set) turns isolation off and builds with this python's own
        # setuptools ("invalid command 'bdist_wheel'" under 70.1). A user's setting is dropped for the same reason.
        env = {k: v for k, v in os.environ.items() if k != "PIP_NO_BUILD_ISOLATION"}
        env["SOURCE_DATE_EPOCH"] = str(FIXED_MTIME)
        old_umask = os.umask(0o022)
        try:
            res = run_command([python, "-m", "pip", "--disable-pip-version-check", "wheel", "--no-deps",
                               "--wheel-dir", str(dest), str(src)], env=env, timeout=900, check=False)
        except CommandError as exc:
            raise OperationError(f"--with-installer: {exc}") from None
        finally:
            os.umask(old_umask)
        if not res.ok:
            raise OperationError(f"--with-installer: building rocmlock's wheel failed: {build_failure(res.stdout + res.stderr)}",
                                 hint="the build needs setuptools>=68 and wheel from PyPI (or PIP_FIND_LINKS / PIP_INDEX_URL "
                                      "pointing at a mirror holding them)")


# pip's own lines around a failed build's output (pip/_internal/exceptions.py, InstallationSubprocessError and
# its "[N lines of output]" ... "[end of output]" block): what is left is the backend's.
_PIP_NOISE = ("note:", "hint:", "error: subprocess-exited-with-error", "error: metadata-generation-failed",
              "ERROR:", "×", "│", "╰─>", "[end of output]", "See above for", "exit code:", "Processing ",
              "Installing build dependencies", "Getting requirements", "Preparing metadata", "Building wheel",
              "Building wheels", "Failed to build", "[notice]", "Looking in ", "Collecting ", "Downloading ")


def build_failure(output: str, lines: int = 3) -> str:
    """The last ``lines`` lines of a failed build's own output, in one line (pip's frame taken out)."""
    kept = [line.strip() for line in output.splitlines()
            if line.strip() and not line.strip().startswith(_PIP_NOISE) and "lines of output]" not in line]
    return " | ".join(escape(line) for line in kept[-lines:]) or "no output"


def _download_wheels(dest: Path, subdir: str) -> None:
    """py-rattler's wheel for ``subdir``, tomli's and rocm-bootstrap's, the versions installed here (one bundle, one
    set of bytes)."""
    from importlib.metadata import version

    platforms = MANYLINUX.get(subdir)
    if platforms is None:
        raise OperationError(f"--with-installer supports {', '.join(MANYLINUX)}, not {subdir}")
    tags = [arg for p in platforms for arg in ("--platform", p)]
    _pip(["download", f"py-rattler=={rattler_version}", "--no-deps", "--only-binary=:all:", "--python-version",
          "3.10", "--implementation", "cp", *tags, "--dest", str(dest)], dict(os.environ))
    # Pure Python: tomli (tomllib on a 3.10) and rocm-bootstrap (AMD's GPU table, which the GPU table is checked
    # against whenever rocmlock reads it, unpack included).
    for name in ("tomli", "rocm-bootstrap"):
        _pip(["download", f"{name}=={version(name)}", "--no-deps", "--only-binary=:all:", "--python-version",
              "3.10", "--implementation", "cp", "--dest", str(dest)], dict(os.environ))


def _pip(args: list[str], env: dict[str, str]) -> None:
    try:
        run_command([sys.executable, "-m", "pip", "--disable-pip-version-check", *args], env=env, timeout=900)
    except CommandError as exc:
        raise OperationError(f"--with-installer: {exc}", hint="pip needs PyPI (or PIP_FIND_LINKS / PIP_INDEX_URL "
                             "pointing at a mirror holding py-rattler's wheel)") from None


def add_installer(dest: Path, metadata: BundleMetadata) -> None:
    """Write ``dest/wheels/*.whl`` and ``dest/install.sh`` for ``metadata``'s platform."""
    wheels = dest / "wheels"
    wheels.mkdir(parents=True)
    _download_wheels(wheels, metadata.subdir)
    _build_rocmlock_wheel(wheels)
    script = dest / "install.sh"
    script.write_text(INSTALL_SH.format(environment=metadata.environment, installer=INSTALLER_DIR))
    script.chmod(0o755)
