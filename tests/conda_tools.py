"""Real conda, conda-build and conda-index for the tests: venvs made once from ../shared/mirrors and cached.

conda, conda-build and conda-index are not on PyPI (conda's PyPI name holds a 2017 release), so their release
sources are kept in ``$ROCMLOCK_MIRRORS`` (default ``../shared/mirrors`` beside the checkout; its README lists each
archive's tag, commit and sha256). Each archive is checked against that sha256 here, then installed with
``pip install --no-deps`` (hatch-vcs reads the version from ``SETUPTOOLS_SCM_PRETEND_VERSION``: the archives hold no
git metadata), and their PyPI dependencies come pinned from tests/conda-constraints.txt. Left out on purpose:
``menuinst`` (Windows shortcuts) and ``conda-libmamba-solver`` (not on PyPI): the tests use conda's classic solver.

Two venvs, as one venv holds one conda: ``conda26`` (conda 26.7.1, conda-build 26.7.1, conda-index 0.12.1,
py-rattler-build, conda-lock 4.0.3, conda-lockfiles 0.2.2) and ``conda24`` (conda 24.11.3). They live under
``~/.cache/rocmlock-tests/conda-<name>-py3X-<hash of the constraints and archives>``; .ci/run makes them before the
suite (``python tests/conda_tools.py``).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from rocmlock.util.fs import file_sha256
from venvcache import cached_venv

REPO = Path(__file__).resolve().parents[1]
CONSTRAINTS = Path(__file__).with_name("conda-constraints.txt")

# archive -> (version, sha256), as ../shared/mirrors/README.md lists them.
ARCHIVES = {
    "conda-26.7.1.tar.gz": ("26.7.1", "bb814455988b80771956c1adb852d981f5ec30507871bc668f669dc579ae36bf"),
    "conda-24.11.3.tar.gz": ("24.11.3", "e18cd7297acb25bc692dadd7ad587dcd55ef6a90ec7626c50a08adf203966832"),
    "conda-build-26.7.1.tar.gz": ("26.7.1", "5dca2939d88cfb6adc4045750f6ac8f2027ff2a4cf3ea71685f6933bc9754e64"),
    "conda-index-0.12.1.tar.gz": ("0.12.1", "440d7912d5df62c77a0218d36554201648c51cb4767d2d31c92f645b7725f2da"),
}
# conda's own dependencies (its pyproject.toml), less menuinst and conda-libmamba-solver (see the docstring).
_CONDA = ["archspec", "boltons", "charset-normalizer", "conda-package-handling", "distro", "frozendict",
          "packaging", "platformdirs", "pluggy", "pycosat", "requests", "ruamel.yaml", "setuptools", "tqdm",
          "truststore"]
VENVS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # name -> (archives, PyPI requirements)
    "conda26": (("conda-26.7.1.tar.gz", "conda-build-26.7.1.tar.gz", "conda-index-0.12.1.tar.gz"),
                (*_CONDA, "backports.zstd", "msgpack",
                 # conda-build's (its pyproject.toml) and conda-index's
                 "beautifulsoup4", "chardet", "filelock", "jinja2", "jsonschema", "libarchive-c", "pkginfo",
                 "psutil", "pyyaml", "evalidate", "conda-package-streaming", "zstandard",
                 # conda-build builds v1 recipes through it; conda-lock locks environment.yml with this conda
                 "py-rattler-build", "conda-lock",
                 # conda's plugin for `conda env create -f conda-lock.yml` (the exported envs/<env>/conda-lock.yml)
                 "conda-lockfiles")),
    "conda24": (("conda-24.11.3.tar.gz",), (*_CONDA, "jsonpatch", "zstandard")),
}


class CondaUnavailable(RuntimeError):
    """The mirrors are missing or a venv could not be made; the message says why."""


def mirrors() -> Path:
    """``$ROCMLOCK_MIRRORS``, else ``../shared/mirrors`` beside the checkout."""
    return Path(os.environ.get("ROCMLOCK_MIRRORS") or REPO.parent / "shared" / "mirrors")


def checked_archive(name: str) -> Path:
    """The mirror archive ``name``, its sha256 checked against the README's."""
    path = mirrors() / name
    if not path.is_file():
        raise CondaUnavailable(f"no {path}: put ../shared/mirrors beside the checkout or set ROCMLOCK_MIRRORS "
                               "(its README lists the conda, conda-build and conda-index archives)")
    got, want = file_sha256(path), ARCHIVES[name][1]
    if got != want:
        raise CondaUnavailable(f"{path}: sha256 {got}, but its README says {want}: not the release archive")
    return path


def venv_dir(name: str) -> Path:
    """Where venv ``name`` lives: keyed by our Python, the constraints and the archives' sha256s."""
    key = hashlib.sha256(CONSTRAINTS.read_bytes())
    for archive in VENVS[name][0]:
        key.update(ARCHIVES[archive][1].encode())
    py = f"py{sys.version_info.major}{sys.version_info.minor}"
    # Not under XDG_CACHE_HOME: tests point that at their own directories.
    return Path.home() / ".cache" / "rocmlock-tests" / f"conda-{name}-{py}-{key.hexdigest()[:12]}"


def _run(cmd: list[str], root: Path, env: dict[str, str] | None = None) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    if proc.returncode != 0:
        raise CondaUnavailable(f"making the conda venv at {root} failed: `{' '.join(cmd)}` exited {proc.returncode}: "
                               f"{(proc.stderr or proc.stdout).strip()[-2000:]}")


def _install_archive(python: Path, archive: Path, version: str, root: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="data")
        (source,) = [p for p in Path(tmp).iterdir() if p.is_dir()]
        env = {**os.environ, "SETUPTOOLS_SCM_PRETEND_VERSION": version}
        _run([str(python), "-m", "pip", "install", "-q", "--no-input", "--no-deps", "-c", str(CONSTRAINTS),
              str(source)], root, env)


def ensure_venv(name: str) -> Path:
    """Venv ``name``'s bin directory, making the venv first when it is missing or half-made (tests/venvcache.py)."""
    archives = [checked_archive(a) for a in VENVS[name][0]]  # checked each time: a cached venv needs them too

    def make(root: Path) -> str:
        _run([sys.executable, "-m", "venv", str(root)], root)
        python = root / "bin" / "python"
        _run([str(python), "-m", "pip", "install", "-q", "--no-input", "-c", str(CONSTRAINTS),
              *VENVS[name][1]], root)
        for path in archives:
            _install_archive(python, path, ARCHIVES[path.name][0], root)
        return "\n".join(a.name for a in archives) + "\n"

    return cached_venv(venv_dir(name), make)

@dataclass(frozen=True)
class Conda:
    """One conda of a venv, run with its own root prefix, package cache and condarc (nothing of the host's)."""

    bin: Path
    home: Path
    name: str = "conda26"  # a key of VENVS

    def env(self, **extra: str) -> dict[str, str]:
        """The environment conda runs in: no CONDA_*/PIXI_* of the caller, classic solver, no network."""
        base = {k: v for k, v in os.environ.items() if not k.startswith(("CONDA", "PIXI_", "RATTLER_", "MAMBA"))}
        root = self.home / "root"
        (root / "conda-meta").mkdir(parents=True, exist_ok=True)
        return {**base, "CONDA_ROOT_PREFIX": str(root), "CONDA_PKGS_DIRS": str(self.home / "pkgs"),
                "CONDARC": str(self.home / "condarc"), "CONDA_SOLVER": "classic", "HOME": str(self.home),
                "CONDA_NUMBER_CHANNEL_NOTICES": "0", "CONDA_AUTO_UPDATE_CONDA": "false",
                "PATH": f"{self.bin}{os.pathsep}{base.get('PATH', '')}", **extra}

    def run(self, tool: str, *args: str, cwd: Path | None = None, **extra: str) -> subprocess.CompletedProcess[str]:
        """``tool`` (conda, conda-build, conda-render, conda-lock, python) of this venv; the caller checks the result.

        conda runs as ``python -m conda``: the ``conda`` script pip installs is ``conda.cli.main_pip``, which stops
        with "Conda has not been initialized" outside an installer-made base environment.
        """
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / "condarc").touch()
        cmd = [str(self.bin / "python"), "-m", "conda"] if tool == "conda" else [str(self.bin / tool)]
        return subprocess.run([*cmd, *args], capture_output=True, text=True, check=False, env=self.env(**extra),
                              cwd=cwd)


if __name__ == "__main__":
    for venv in VENVS:
        try:
            print(f"conda venv {venv}: {ensure_venv(venv).parent}")
        except CondaUnavailable as exc:
            sys.exit(f"tests/conda_tools.py: {exc}")
