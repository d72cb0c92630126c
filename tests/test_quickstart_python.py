"""Which rocmlock the README's quickstart (examples/offline/quickstart.sh) runs (issue 44, item 1).

Debian's and Ubuntu's system python is externally managed (PEP 668: an ``EXTERNALLY-MANAGED`` file in its stdlib
directory, and pip refuses to install into it, ``error: externally-managed-environment``); the quickstart then
makes a venv of its own. A rocmlock installed as a command (``pipx install .``) is used as it is. Each run passes
an option quickstart.py refuses (argparse: its usage, exit 2) once rocmlock is there: the choice of python is the
whole of what is tested, and takes seconds (the venv's ``pip install -e .`` about 40 s here) instead of the
pipeline's minute. ``--help`` itself installs nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "examples" / "offline" / "quickstart.sh"
USAGE = "usage: quickstart.py"
REFUSED = "quickstart.py: error: unrecognized arguments: --not-an-option\n"


def _system_python(root: Path, *, managed: bool) -> Path:
    """A python installation of its own (not a venv: a copy of this python's binary beside links to its stdlib),
    whose stdlib directory holds PEP 668's marker when ``managed``. It has no rocmlock."""
    binary = Path(os.path.realpath(sys._base_executable if hasattr(sys, "_base_executable") else sys.executable))
    stdlib = Path(os.__file__).resolve().parent
    (root / "bin").mkdir(parents=True)
    shutil.copy2(binary, root / "bin" / "python3")
    lib = root / "lib" / stdlib.name
    lib.mkdir(parents=True)
    for entry in stdlib.iterdir():
        # Not this python's site-packages: what was installed into it (the quickstart, run with this python
        # first on PATH, installs rocmlock there) would come along; a system python of its own has none.
        if entry.name not in {"EXTERNALLY-MANAGED", "site-packages"}:
            (lib / entry.name).symlink_to(entry)
    (lib / "site-packages").mkdir()
    if managed:
        (lib / "EXTERNALLY-MANAGED").write_text("[externally-managed]\nError=use apt\n")
    python = root / "bin" / "python3"
    check = subprocess.run([str(python), "-c", ("import sys, sysconfig; print(sys.prefix == sys.base_prefix, "
                            "sysconfig.get_path('stdlib'))")], capture_output=True, text=True, check=True)
    assert check.stdout.split() == ["True", str(lib)], check.stdout
    return python


def _run(tmp_path: Path, path: list[Path], *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    # Only the given directories and the base system's: no venv's python or rocmlock comes along, and no
    # PYTHONPATH lends rocmlock to a python that lacks it.
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHON", "VIRTUAL_ENV"}}
    env["PATH"] = os.pathsep.join([str(p) for p in path] + ["/usr/bin", "/bin"])
    env.update(extra)
    return subprocess.run(["bash", str(SCRIPT), *(args or ["--not-an-option"])], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600, check=False)


def test_an_externally_managed_python_gets_a_venv_of_the_quickstarts_own(tmp_path: Path) -> None:
    python = _system_python(tmp_path / "system", managed=True)
    venv = tmp_path / "quickstart-venv"
    proc = _run(tmp_path, [python.parent], ROCMLOCK_QUICKSTART_VENV=str(venv))
    assert proc.returncode == 2 and proc.stderr.endswith(REFUSED), proc.stderr[-3000:]
    assert f"quickstart: python: the first on PATH, {python}\n" in proc.stderr
    assert (f"quickstart: rocmlock: {python} is externally managed (PEP 668: pip may not install into it): "
            f"making a venv for rocmlock at {venv} (pip install -e .; once, reused by the next run)\n") in proc.stderr
    assert "externally-managed-environment" not in proc.stderr
    assert subprocess.run([str(venv / "bin" / "python"), "-c", "import rocmlock"], check=False).returncode == 0
    # Nothing went into the system python.
    bare = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    assert subprocess.run([str(python), "-c", "import rocmlock"], env=bare, capture_output=True,
                          check=False).returncode == 1
    # The next run uses that venv, and says so.
    again = _run(tmp_path, [python.parent], ROCMLOCK_QUICKSTART_VENV=str(venv))
    assert again.returncode == 2 and again.stderr.endswith(REFUSED), again.stderr[-3000:]
    assert (f"quickstart: rocmlock: the quickstart's venv {venv} ({python} is externally managed, PEP 668)\n"
            in again.stderr)
    assert "making a venv" not in again.stderr


def test_an_installed_rocmlock_command_is_used_as_it_is(tmp_path: Path) -> None:
    """`pipx install .` puts a `rocmlock` script on PATH whose #! names the python of pipx's venv; pip writes a
    `#!/bin/sh` script with an `'''exec'` line when that path is too long. Either is used, with no install, even
    when the first python on PATH is externally managed."""
    system = _system_python(tmp_path / "system", managed=True)
    # This test's python imports rocmlock: it stands for pipx's venv.
    for name, script in [("plain", f"#!{sys.executable}\nfrom rocmlock.cli.main import run\nrun()\n"),
                         ("long", (f"#!/bin/sh\n'''exec' \"{sys.executable}\" \"$0\" \"$@\"\n' '''\n"
                                  "from rocmlock.cli.main import run\nrun()\n"))]:
        bin_dir = tmp_path / name
        bin_dir.mkdir()
        (bin_dir / "rocmlock").write_text(script)
        (bin_dir / "rocmlock").chmod(0o755)
        venv = tmp_path / f"venv-{name}"
        proc = _run(tmp_path, [system.parent, bin_dir], ROCMLOCK_QUICKSTART_VENV=str(venv),
                    PYTHONPATH=os.environ.get("PYTHONPATH", ""))
        assert proc.returncode == 2, proc.stderr[-3000:]
        assert proc.stderr.startswith(f"quickstart: rocmlock: the installed command {bin_dir / 'rocmlock'} "
                                      f"(its python: {sys.executable})\n{USAGE}") and proc.stderr.endswith(REFUSED)
        assert not venv.exists()


def test_python_is_honoured_and_an_old_one_refused_in_one_line(tmp_path: Path) -> None:
    proc = _run(tmp_path, [], PYTHON=sys.executable, PYTHONPATH=os.environ.get("PYTHONPATH", ""))
    assert proc.returncode == 2 and proc.stderr.endswith(REFUSED), proc.stderr[-3000:]
    assert proc.stderr.startswith(f"quickstart: python: $PYTHON, {sys.executable}\nquickstart: rocmlock: imported by "
                                  f"{sys.executable}\n{USAGE}")
    old = tmp_path / "python3.10"
    old.write_text("#!/bin/sh\n[ \"$1\" = -V ] && echo 'Python 3.10.14' && exit 0\nexit 1\n")
    old.chmod(0o755)
    proc = _run(tmp_path, [], PYTHON=str(old))
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.splitlines()[-1] == (f"quickstart: error: {old} is not Python >= 3.11 (Python 3.10.14): set "
                                            "PYTHON=/path/to/python3.11 or newer")


def test_help_installs_nothing(tmp_path: Path) -> None:
    """`quickstart.sh --help` prints quickstart.py's usage with the python it found and installs nothing: neither
    into that python nor into a venv of the quickstart's own."""
    for managed in (False, True):
        python = _system_python(tmp_path / f"system-{managed}", managed=managed)
        venv = tmp_path / f"venv-{managed}"
        for flag in ("--help", "-h"):
            proc = _run(tmp_path, [python.parent], "--workdir", "x", flag, ROCMLOCK_QUICKSTART_VENV=str(venv))
            assert proc.returncode == 0 and proc.stdout.startswith(USAGE), proc.stderr[-3000:]
            assert proc.stderr == f"quickstart: python: the first on PATH, {python}\n"
        assert not venv.exists()
        bare = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        assert subprocess.run([str(python), "-c", "import rocmlock"], env=bare, capture_output=True,
                              check=False).returncode == 1
        assert not any((python.parent.parent / "lib").glob("*/site-packages/*"))
