"""A FIFO or a link to /dev/zero where rocmlock reads a file it did not write (issue 33 item 2): pixi.lock for lock,
export, install and `lock --discard-lock`, a bundle path given to audit, a package inside an extracted bundle. Each
is one line and exit 2, at once: regular files only, read with a size bound (rocmlock.util.fs.open_regular and
read_regular, the check pack made first). Before, a FIFO hung the command and /dev/zero was read until memory ran
out, so every command here runs in a child process with a time and a memory limit."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from rocmlock.cli.main import main

REPO = Path(__file__).resolve().parents[1]


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))


def rocmlock(*argv: str) -> subprocess.CompletedProcess[str]:
    """``rocmlock argv`` in a child with 4 GiB of address space; a hang is a TimeoutExpired, not a stuck suite."""
    # Few malloc arenas: on a many-core machine glibc reserves 64 MiB of address space for each.
    env = {**os.environ, "PYTHONPATH": str(REPO / "tools"), "MALLOC_ARENA_MAX": "2"}
    return subprocess.run([sys.executable, "-m", "rocmlock", *argv], capture_output=True, text=True, env=env,
                          timeout=60, preexec_fn=_limited, check=False)


def _special(path: Path, kind: str) -> None:
    path.unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_lock_that_is_no_regular_file_is_one_line(ws_copy: Path, kind: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    # A lock run first records the no-op stamp: the stamp's check must not read the FIFO either.
    assert main(["lock", "--manifest-path", str(ws_copy)]) == 0
    capsys.readouterr()
    lock = ws_copy / "pixi.lock"
    _special(lock, kind)
    for argv in (["lock"], ["export"], ["install", "-e", "mi300x", "--prefix", str(ws_copy / "p")],
                 ["lock", "--discard-lock"]):
        if kind == "dev-zero" and argv[0] == "export":
            continue  # the same read as lock and install; fewer child processes
        run = rocmlock(*argv, "--manifest-path", str(ws_copy))
        err = run.stderr.splitlines()
        assert run.returncode == 2 and err[0] == f"error: {lock}: not a regular file; a lock is a file", (argv, err)
        assert len(err) == 2 and "git checkout pixi.lock" in err[1] and "Traceback" not in run.stderr
    assert lock.is_symlink() if kind == "dev-zero" else not lock.is_file()  # left as it was
    assert not (ws_copy / "p").exists()


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_manifest_that_is_no_regular_file_is_one_line(ws_copy: Path, kind: str) -> None:
    """A FIFO at pixi.toml hung every command (the manifest was read with read_text); a link to /dev/zero filled
    memory. Named with --manifest-path, and found from the workspace directory, it is one line and exit 2."""
    manifest = ws_copy / "pixi.toml"
    _special(manifest, kind)
    for argv in (["lock", "--manifest-path", str(manifest)], ["plan", "--manifest-path", str(manifest)],
                 ["verify", "-e", "mi300x", "--manifest-path", str(manifest)]):
        run = rocmlock(*argv)
        err = run.stderr.splitlines()
        assert run.returncode == 2 and err[0] == f"error: {manifest}: not a regular file; a manifest is a file", \
            (argv, err)
        assert "Traceback" not in run.stderr


@pytest.fixture
def bundle(ws_copy: Path, tmp_path: Path) -> Path:
    out = tmp_path / "mi300x.tar"
    assert main(["pack", "--manifest-path", str(ws_copy / "pixi.toml"), "-e", "mi300x", "-o", str(out)]) == 0
    return out


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_audit_refuses_a_bundle_path_or_a_package_that_is_no_regular_file(
        bundle: Path, tmp_path: Path, kind: str) -> None:
    given = tmp_path / "given.tar"
    _special(given, kind)
    run = rocmlock("audit", str(given))
    assert run.returncode == 2, run.stderr
    assert run.stderr.splitlines()[0] == f"error: {given}: not a regular file or directory", run.stderr

    extracted = tmp_path / "extracted"
    extracted.mkdir()
    with tarfile.open(bundle) as tar:
        tar.extractall(extracted, filter="data")
    packages = sorted((extracted / "channel").glob("*/*.conda"))
    assert packages
    _special(packages[0], kind)
    run = rocmlock("audit", str(extracted))
    assert run.returncode == 2, run.stderr
    assert run.stderr.splitlines() == [f"error: {packages[0]}: not a regular file; a bundle's package is a file",
                                       "hint: pack the environment again"], run.stderr


def test_a_directory_in_a_packages_place_is_one_line(bundle: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    extracted = tmp_path / "extracted"
    extracted.mkdir()
    with tarfile.open(bundle) as tar:
        tar.extractall(extracted, filter="data")
    package = min((extracted / "channel").glob("*/*.conda"))
    package.unlink()
    package.mkdir()
    capsys.readouterr()
    assert main(["audit", str(extracted)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: {package}: not a regular file; a bundle's package is a file", "hint: pack the environment again"]
