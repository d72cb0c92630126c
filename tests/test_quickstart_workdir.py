"""The quickstart's --workdir holds the channel password and the probe it runs (as root, often): a directory
another user owns or can write, or a link, is refused before anything is written (issue 41, cause O)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parent.parent
QUICKSTART = REPO / "examples/offline/quickstart.py"
NOBODY = 65534

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root (CI runs as root)")


@pytest.fixture(scope="module")
def quickstart() -> ModuleType:
    spec = importlib.util.spec_from_file_location("quickstart", QUICKSTART)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A directory like /tmp (sticky, writable by all) that another uid can reach; pytest's tmp_path is 0700 root."""
    base = Path(tempfile.mkdtemp(prefix="rl-workdir-", dir="/tmp"))
    base.chmod(0o1777)
    yield base
    shutil.rmtree(base)


def _refused(quickstart: ModuleType, work: Path, capsys: pytest.CaptureFixture[str], replace: bool = False) -> str:
    with pytest.raises(SystemExit) as exc:
        quickstart.prepare_workdir(work, replace=replace)
    assert exc.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def _as_nobody(*argv: str) -> subprocess.CompletedProcess[str]:
    """Run a command as uid/gid 65534 (a real other user, not a mocked stat)."""
    return subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *argv],
                          capture_output=True, text=True, timeout=60, check=False)


def test_an_empty_0777_directory_another_user_made_is_refused(quickstart: ModuleType, shared_tmp: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    # The attack: another user makes the docs' example directory first, world-writable and empty, so that the
    # links they plant in it later receive the password and their envs/ is what the quickstart runs.
    rl = shared_tmp / "rl"
    assert _as_nobody("mkdir", "-m", "0777", str(rl)).returncode == 0
    assert rl.stat().st_uid == NOBODY
    assert _refused(quickstart, rl, capsys) == (
        f"quickstart: --workdir {rl} belongs to uid {NOBODY}, not to you (uid 0): its owner could read the channel "
        "password and replace what the quickstart runs; give a directory of your own")
    assert list(rl.iterdir()) == []
    # The same through the script, the way a user runs it: exit 2, one line, nothing written.
    proc = subprocess.run([sys.executable, str(QUICKSTART), "--workdir", str(rl)], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert list(rl.iterdir()) == []


def test_a_directory_of_the_caller_that_others_can_write_is_refused(quickstart: ModuleType, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    for mode in (0o777, 0o770, 0o1777):
        rl = tmp_path / f"rl-{mode:o}"
        rl.mkdir()
        rl.chmod(mode)
        assert _refused(quickstart, rl, capsys) == (
            f"quickstart: --workdir {rl} is writable by others (mode {mode:04o}): they could read the channel "
            "password and replace what the quickstart runs; give a new directory, or chmod 700 it")
        assert list(rl.iterdir()) == []


def test_the_caller_is_refused_a_directory_of_root(quickstart: ModuleType, shared_tmp: Path) -> None:
    # A real other uid runs the quickstart's check on a directory root made: not theirs, refused.
    rl = shared_tmp / "rl"
    rl.mkdir(mode=0o755)
    code = ("import importlib.util, sys; s = importlib.util.spec_from_file_location('q', sys.argv[1]); "
            "m = importlib.util.module_from_spec(s); s.loader.exec_module(m); m.prepare_workdir(__import__('pathlib')"
            ".Path(sys.argv[2]), False)")
    # The base interpreter, not the venv's: CI's venv sits in a 0700 mktemp directory that uid 65534 cannot read,
    # and the check needs nothing but the standard library (the quickstart imports rattler_build only to build).
    proc = _as_nobody(os.path.realpath(sys.executable), "-I", "-c", code, str(QUICKSTART), str(rl))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == (
        f"quickstart: --workdir {rl} belongs to uid 0, not to you (uid {NOBODY}): its owner could read the channel "
        "password and replace what the quickstart runs; give a directory of your own")
    assert list(rl.iterdir()) == []


def test_a_directory_above_that_another_user_can_change_is_refused(quickstart: ModuleType, shared_tmp: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    theirs = shared_tmp / "theirs"
    theirs.mkdir()
    os.chown(theirs, NOBODY, NOBODY)  # they can rename rl away and put their own in its place
    rl = theirs / "rl"
    rl.mkdir(mode=0o700)
    assert _refused(quickstart, rl, capsys) == (
        f"quickstart: --workdir {rl}: {theirs} above it could be changed by another user (uid {NOBODY}, mode 0755), "
        "who could swap the work directory; give one under a directory only you or root can write, or under /tmp")
    open_to_all = shared_tmp / "open"
    open_to_all.mkdir()
    open_to_all.chmod(0o777)  # root's, but not sticky: anybody renames what is in it
    assert "above it could be changed by another user (uid 0, mode 0777)" in _refused(
        quickstart, open_to_all / "rl", capsys)
    assert not (open_to_all / "rl").exists()
    # A link on the way, owned by someone else, could be pointed elsewhere after the check.
    link = shared_tmp / "via"
    assert _as_nobody("ln", "-s", str(shared_tmp), str(link)).returncode == 0
    assert f"{link} above it could be changed by another user (uid {NOBODY}" in _refused(quickstart, link / "rl",
                                                                                          capsys)
    # A sticky directory writable by all (/tmp) is fine: nobody else can rename what the caller owns there.
    sticky = shared_tmp / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    quickstart.prepare_workdir(sticky / "rl", replace=False)
    assert stat.S_IMODE((sticky / "rl").stat().st_mode) == 0o700


def test_a_new_work_directory_is_made_0700_and_its_password_files_0600(quickstart: ModuleType,
                                                                        tmp_path: Path) -> None:
    work = tmp_path / "a" / "work"
    old = os.umask(0)  # whatever the caller's umask, the directory is the caller's alone
    try:
        quickstart.prepare_workdir(work, replace=False)
    finally:
        os.umask(old)
    assert stat.S_IMODE(work.stat().st_mode) == 0o700
    auth = work / "auth"
    auth.mkdir(mode=0o700)
    quickstart.write_private(auth / "netrc", "machine 127.0.0.1 login quickstart password s3cret\n")
    assert stat.S_IMODE((auth / "netrc").stat().st_mode) == 0o600
    # A link planted where a password file goes is never written through, nor a file already there.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("")
    (auth / "credentials.json").symlink_to(elsewhere)
    for name in ("credentials.json", "netrc"):
        with pytest.raises(OSError):
            quickstart.write_private(auth / name, "s3cret")
    assert elsewhere.read_text() == ""


def test_a_linked_workdir_is_refused_even_with_replace(quickstart: ModuleType, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    real = tmp_path / "real"
    quickstart.prepare_workdir(real, replace=False)
    (real / "workspace").mkdir()
    link = tmp_path / "rl"
    link.symlink_to(real)
    for replace in (False, True):  # with --replace this was an rmtree traceback
        assert _refused(quickstart, link, capsys, replace=replace) == (
            f"quickstart: --workdir {link} is a symbolic link; give the directory itself")
    assert sorted(p.name for p in real.iterdir()) == [quickstart.MARKER, "workspace"]
    # The marker is a regular file the quickstart wrote, not a link to one.
    other = tmp_path / "other"
    other.mkdir(mode=0o700)
    (other / "mine.txt").write_text("keep\n")
    (other / quickstart.MARKER).symlink_to(real / quickstart.MARKER)
    assert _refused(quickstart, other, capsys, replace=True) == (
        f"quickstart: --workdir {other} is not empty and was not made by the quickstart; give a new or empty "
        "directory")
    assert (other / "mine.txt").read_text() == "keep\n"
