"""The ecosystem's own lock-file tools from PyPI, for the tests: one venv, made once and cached.

- pixi-diff-to-markdown: what pixi's docs pair with ``pixi update --json`` (reads ``rocmlock lock --json``);
- pixi-sbom: CycloneDX/SPDX SBOMs from a pixi.lock; cyclonedx-python-lib validates its CycloneDX;
- pixi-policy: checks a pixi.lock against pixi-policy.toml.

Pinned here (a newer release may change the output the tests compare). pixi-diff-to-markdown declares
``Requires-Python >=3.12`` (0.3.10: ``>=3.14``) but its code runs on 3.11 (it uses nothing newer than
``typing.Self``), and CI's Python is Debian bookworm's 3.11: it is installed with ``--ignore-requires-python``.
The venv lives under ``~/.cache/rocmlock-tests/lock-tools-py3X-<hash of the pins>``; .ci/run makes it before the
suite (``python tests/lock_tools.py``).
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

from venvcache import cached_venv

PINS = ("pixi-diff-to-markdown==0.3.10", "pixi-sbom==1.15.0", "pixi-policy==0.3.0",
        # json-validation: its JsonStrictValidator needs jsonschema
        "cyclonedx-python-lib[json-validation]==11.12.0")


class ToolsUnavailable(RuntimeError):
    """The venv could not be made; the message says why."""


def venv_dir() -> Path:
    key = hashlib.sha256("\n".join(PINS).encode()).hexdigest()[:12]
    py = f"py{sys.version_info.major}{sys.version_info.minor}"
    return Path.home() / ".cache" / "rocmlock-tests" / f"lock-tools-{py}-{key}"


def ensure_tools() -> Path:
    """The venv's bin directory, made first when missing or half-made (tests/venvcache.py)."""
    return cached_venv(venv_dir(), _make)


def _make(root: Path) -> str:
    for cmd in ([sys.executable, "-m", "venv", str(root)],
                [str(root / "bin" / "python"), "-m", "pip", "install", "-q", "--no-input",
                 "--ignore-requires-python", *PINS]):
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise ToolsUnavailable(f"making {root} failed: `{' '.join(cmd)}` exited {proc.returncode}: "
                                   f"{(proc.stderr or proc.stdout).strip()[-2000:]}")
    return "\n".join(PINS) + "\n"


def tools_or_skip() -> Path:
    """The tools' bin directory for a test module's fixture: a skip where they cannot be made, a failure in CI
    (tests/ciskips.py), which must run the real tools."""
    import pytest
    from ciskips import in_ci

    try:
        return ensure_tools()
    except ToolsUnavailable as exc:
        if in_ci():
            pytest.fail(f"CI must run the real lock tools (tests/lock_tools.py): {exc}")
        pytest.skip(f"no lock tools venv here: {exc}")


if __name__ == "__main__":
    try:
        print(f"lock tools venv: {ensure_tools().parent}")
    except ToolsUnavailable as exc:
        sys.exit(f"tests/lock_tools.py: {exc}")

