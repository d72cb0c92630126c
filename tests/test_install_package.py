"""README "Install": `pip install .` (what `pipx install .` runs in its own venv) gives a working `rocmlock`.

The wheel is built from a copy of the checkout (nothing is written into it), installed into a fresh venv with
`--no-index --no-deps` (offline: the start-up path `rocmlock --version`/`--help` needs only the standard library,
as the CLI imports a command's stage only when that command runs), and run through its console script.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import rocmlock

REPO = Path(__file__).resolve().parents[1]


def _wheel(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    shutil.copytree(REPO / "tools" / "rocmlock", src / "tools" / "rocmlock",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    out = tmp_path / "dist"
    # The venv running the suite has the build backend pyproject.toml names (setuptools); no download.
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out),
                    str(src)], check=True, capture_output=True, text=True)
    (wheel,) = out.glob("rocmlock-*.whl")
    return wheel


def test_pip_install_gives_a_working_console_script(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path)
    names = set(zipfile.ZipFile(wheel).namelist())
    packages = {p.parent.relative_to(REPO / "tools").as_posix() for p in (REPO / "tools/rocmlock").rglob("__init__.py")}
    assert {f"{p}/__init__.py" for p in packages} <= names  # every stage subpackage is in the wheel
    tables = {f"rocmlock/data/{p.name}" for p in (REPO / "tools/rocmlock/data").glob("*.toml")}
    assert tables and tables <= names

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin/python"), "-m", "pip", "install", "-q", "--no-index", "--no-deps", str(wheel)],
                   check=True, capture_output=True, text=True)
    out = subprocess.run([str(venv / "bin/rocmlock"), "--version"], capture_output=True, text=True, check=False)
    assert (out.returncode, out.stdout.strip()) == (0, f"rocmlock {rocmlock.__version__}"), out.stderr
    out = subprocess.run([str(venv / "bin/python"), "-m", "rocmlock", "--help"], capture_output=True, text=True,
                         check=False)
    assert out.returncode == 0 and "lock" in out.stdout and "unpack" in out.stdout, out.stderr
    # Installed, not the checkout's copy: the venv's site-packages holds the package.
    where = subprocess.run([str(venv / "bin/python"), "-c", "import rocmlock; print(rocmlock.__file__)"],
                           capture_output=True, text=True, check=True, cwd=tmp_path).stdout
    assert where.startswith(str(venv))


def test_pipx_install_gives_a_working_rocmlock(tmp_path: Path) -> None:
    """README "Install": `pipx install .` from a checkout (its own venv, rocmlock's dependencies from PyPI or the
    pip cache), then `rocmlock` runs a command that needs them (reading a pixi.toml with tomli)."""
    src = tmp_path / "src"
    shutil.copytree(REPO / "tools" / "rocmlock", src / "tools" / "rocmlock",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PIPX_HOME": str(tmp_path / "pipx"),
           "PIPX_BIN_DIR": str(tmp_path / "bin"), "PIP_CACHE_DIR": str(Path.home() / ".cache" / "pip")}
    out = subprocess.run([sys.executable, "-m", "pipx", "install", str(src)], capture_output=True, text=True,
                         env=env, check=False, timeout=900)
    assert out.returncode == 0, out.stdout + out.stderr
    rocmlock_bin = tmp_path / "bin" / "rocmlock"
    out = subprocess.run([str(rocmlock_bin), "--version"], capture_output=True, text=True, check=False)
    assert (out.returncode, out.stdout.strip()) == (0, f"rocmlock {rocmlock.__version__}"), out.stderr
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "pixi.toml").write_text('[workspace]\nname = "w"\nchannels = []\nplatforms = ["linux-64"]\n'
                                                '[dependencies]\npython = "*"\n')
    out = subprocess.run([str(rocmlock_bin), "lock", "--manifest-path", str(tmp_path / "ws")], capture_output=True,
                         text=True, check=False, cwd=tmp_path)
    assert out.returncode == 2 and out.stderr.startswith("error: ") and "channels" in out.stderr, out.stderr
