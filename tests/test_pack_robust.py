"""pack / unpack as a careless user and a crashing machine meet them: wrong arguments, kill -9, leftovers.

Every wrong argument is one ``error:`` line (and a ``hint:``), exit 2, before any byte is fetched or extracted,
and nothing is written. A run killed with SIGKILL leaves no bundle at ``-o`` and no half prefix that passes
for a finished one; what it leaves (a locked scratch directory beside the output, an unpack marker in the
prefix) is removed or reported by the next run. The kills are real: a child process sends itself SIGKILL in
the middle of writing the bundle / installing the prefix. About 6 s.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
import rocmlock
from rocmlock.cli.main import main
from test_pack import ENV, fake_node, installed, locked_set, pack, unpack

TOOLS = str(Path(rocmlock.__file__).resolve().parents[1])


@pytest.fixture(scope="module")
def bundle(locked_ws: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("robust") / "mi300x.tar"
    assert pack(locked_ws, out) == 0
    return out


def _one_error(err: str, after_log: bool = False) -> str:
    """The one ``error:`` line of ``err``: at most a ``hint:`` after it, and (``after_log``) progress before it."""
    lines = err.strip().splitlines()
    assert "Traceback" not in err and lines, err
    errors = [i for i, line in enumerate(lines) if line.startswith("error: ")]
    assert len(errors) == 1 and all(line.startswith("hint: ") for line in lines[errors[0] + 1:]), err
    assert after_log or errors[0] == 0, err
    return lines[errors[0]]


# ----------------------------------------------------------------------------- pack: -o


def test_pack_refuses_a_directory_or_a_file_that_is_not_a_bundle_as_output(
        ws_copy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lock, manifest = (ws_copy / "pixi.lock").read_bytes(), (ws_copy / "pixi.toml").read_bytes()
    (tmp_path / "outdir").mkdir()
    (tmp_path / "afile").write_text("not a directory\n")
    for out, says in [(tmp_path / "outdir", "is a directory"),
                      (tmp_path / "afile" / "b.tar", "is not a directory"),
                      (ws_copy / "pixi.lock", "exists and is not a bundle"),
                      (ws_copy / "pixi.toml", "exists and is not a bundle")]:
        assert pack(ws_copy, out) == 2, out
        line = _one_error(capsys.readouterr().err)
        assert line.startswith(f"error: -o {out}: ") and says in line, line
    # The user's lock and manifest are untouched, and nothing was left anywhere.
    assert (ws_copy / "pixi.lock").read_bytes() == lock and (ws_copy / "pixi.toml").read_bytes() == manifest
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "outdir", "ws"]
    assert not list((tmp_path / "outdir").iterdir())
    assert not [p for p in ws_copy.iterdir() if p.name.startswith(".rocmlock-pack")]


def test_pack_replaces_an_existing_bundle_and_prints_no_blank_line(
        ws_copy: Path, bundle: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "b.tar"
    out.write_bytes(bundle.read_bytes()[:20480])  # an older (here: truncated) bundle
    capsys.readouterr()
    assert pack(ws_copy, out) == 0
    assert out.read_bytes() == bundle.read_bytes()
    err = capsys.readouterr().err
    assert err.splitlines()[0].startswith("packed "), repr(err)  # no empty line left by the progress bar


# ----------------------------------------------------------------------------- kill -9

KILL_PACK = """
import os, signal, sys
from rocmlock.prefix import fetch
def copy_half_then_die(src, writer):
    with open(src, "rb") as fh:
        writer.write(fh.read(max(1, writer.expected_size // 2)))
    os.kill(os.getpid(), signal.SIGKILL)
fetch._copy = copy_half_then_die
from rocmlock.cli.main import main
main(sys.argv[1:])
"""

KILL_INSTALL = """
import os, signal, sys
from pathlib import Path
import rattler
async def install_partly_then_die(records, prefix, **kwargs):
    (Path(prefix) / "conda-meta").mkdir(parents=True, exist_ok=True)
    (Path(prefix) / "conda-meta" / "history").write_text("")
    os.kill(os.getpid(), signal.SIGKILL)
rattler.install = install_partly_then_die
from rocmlock.cli.main import main
main(sys.argv[1:])
"""


def _killed(script: str, *argv: str) -> None:
    env = {**os.environ, "PYTHONPATH": TOOLS}
    proc = subprocess.run([sys.executable, "-c", script, *argv], env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == -signal.SIGKILL, proc.stderr


def test_a_pack_killed_mid_write_leaves_no_bundle_and_the_next_pack_removes_its_leftover(
        locked_ws: Path, bundle: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out" / "b.tar"
    _killed(KILL_PACK, "pack", "--manifest-path", str(locked_ws / "pixi.toml"), "-e", ENV, "-o", str(out))
    assert not out.exists()
    (leftover,) = out.parent.iterdir()
    assert leftover.name.startswith(".rocmlock-pack-")
    assert pack(locked_ws, out) == 0
    assert f"removed 1 leftover(s) of an interrupted run in {out.parent}" in capsys.readouterr().err
    assert [p.name for p in out.parent.iterdir()] == ["b.tar"]
    assert out.read_bytes() == bundle.read_bytes()


def test_a_running_packs_scratch_directory_is_left_alone(locked_ws: Path, tmp_path: Path) -> None:
    from rocmlock.util.scratch import scratch_dir

    out = tmp_path / "b.tar"
    with scratch_dir(tmp_path, ".rocmlock-pack-") as live:  # another pack, still writing
        (live / "bundle.tar").write_bytes(b"x" * 1000)
        assert pack(locked_ws, out) == 0
        assert (live / "bundle.tar").read_bytes() == b"x" * 1000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.tar"]


def test_an_unpack_killed_mid_install_is_reported_and_redone_by_the_next_unpack(
        bundle: Path, locked_ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prefix, host = tmp_path / "env", fake_node(tmp_path / "host", [90402])
    _killed(KILL_INSTALL, "unpack", str(bundle), "--prefix", str(prefix), "--host-root", str(host))
    assert (prefix / "conda-meta" / "history").is_file(), "the kill came in the middle of the install"
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".rocmlock-unpack-")]
    assert len(leftovers) == 1, "the extracted bundle and package cache, in one locked directory"
    assert unpack(bundle, prefix, host, "--no-verify") == 0
    err = capsys.readouterr().err
    assert f"{prefix}: an earlier install into it was interrupted; installing it again" in err
    assert "removed 1 leftover(s) of an interrupted run" in err
    assert installed(prefix) == locked_set(locked_ws)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".rocmlock-unpack-")]
    assert not [p for p in prefix.iterdir() if p.name.startswith(".rocmlock")], "the marker goes when done"


def test_rocmlock_install_into_an_interrupted_unpacks_prefix_is_not_mistaken_for_a_finished_one(
        bundle: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A prefix whose unpack was killed has conda-meta/ (rattler writes it first) and the marker: unpack's
    # own check must not take it for a conda environment the user made and keep its half contents.
    prefix, host = tmp_path / "env", fake_node(tmp_path / "host", [90402])
    _killed(KILL_INSTALL, "unpack", str(bundle), "--prefix", str(prefix), "--host-root", str(host))
    (prefix / "stray-half-file").write_text("from the killed run\n")
    assert unpack(bundle, prefix, host, "--no-verify") == 0
    assert not (prefix / "stray-half-file").exists(), "a prefix the killed unpack created is made anew"


def test_an_install_killed_midway_fails_the_probe_and_is_redone_by_the_next_install(
        locked_ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # rattler links into the prefix as it goes: a `rocmlock install` killed there left bin/, etc/ and part of
    # conda-meta/, which then looked like a finished environment to every tool (found by a break-it pass).
    from rocmlock.prefix.marker import MARKER
    from test_probe import load_probe

    prefix = tmp_path / "env"
    install = ["install", "--manifest-path", str(locked_ws / "pixi.toml"), "-e", ENV, "--prefix", str(prefix)]
    _killed(KILL_INSTALL, *install)
    assert (prefix / "conda-meta" / "history").is_file(), "the kill came in the middle of the install"
    assert (prefix / MARKER).read_text() == "created\n"
    probe = load_probe()
    outcome = probe.check_env_complete(probe.Context(root=tmp_path, prefix=prefix, environ={"PATH": ""}))
    assert outcome.status == "fail" and "was interrupted" in outcome.evidence
    (prefix / "stray-half-file").write_text("from the killed run\n")
    assert main(install) == 0
    assert f"{prefix}: an earlier install into it was interrupted; installing it again" in capsys.readouterr().err
    assert installed(prefix) == locked_set(locked_ws)
    assert not (prefix / MARKER).exists() and not (prefix / "stray-half-file").exists(), "made anew"
    assert probe.check_env_complete(probe.Context(root=tmp_path, prefix=prefix, environ={"PATH": ""})).status == "ok"


def _waits_then_runs(argv: list[str], prefix: Path, release: Callable[[], None]) -> str:
    """``python -m rocmlock *argv`` while this process holds ``prefix``'s marker: it says that it waits, and only
    once ``release`` lets go does it run (exit 0); its stderr."""
    import selectors
    import time

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1] / "tools"),
                                                        os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "rocmlock", *argv], stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stderr is not None
    seen, deadline = "", time.monotonic() + 120
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stderr, selectors.EVENT_READ)
        while "waiting for it to finish" not in seen and time.monotonic() < deadline and proc.poll() is None:
            if sel.select(timeout=1):
                seen += proc.stderr.readline()
    assert f"{prefix}: another rocmlock run is installing into it; waiting for it to finish" in seen, seen
    assert proc.poll() is None, "it waits while the other holds the prefix"
    release()
    rest = proc.stderr.read()
    assert proc.wait(timeout=300) == 0, seen + rest
    return seen + rest


def test_an_install_into_a_prefix_another_install_holds_waits_for_it(locked_ws: Path, tmp_path: Path) -> None:
    """It stopped at once with exit 1; the standard for concurrent runs on one workspace (issue 40) is to wait and
    say so, as pixi waits on its prefix lock."""
    import contextlib

    from rocmlock.prefix.marker import held

    prefix = tmp_path / "env"
    install = ["install", "--manifest-path", str(locked_ws / "pixi.toml"), "-e", ENV, "--prefix", str(prefix)]
    assert main(install) == 0
    with contextlib.ExitStack() as stack:
        stack.enter_context(held(prefix, "install"))  # another install, still running
        _waits_then_runs(install, prefix, stack.close)
    assert not [p for p in prefix.iterdir() if p.name.startswith(".rocmlock")]


# ----------------------------------------------------------------------------- unpack: arguments


def test_unpack_checks_its_arguments_before_extracting_anything(
        bundle: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    host = fake_node(tmp_path / "host", [90402])
    (tmp_path / "afile").write_text("")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    cases = [
        (["--prefix", str(tmp_path / "env"), "--host-root", str(tmp_path / "nohost")],
         f"--host-root {tmp_path / 'nohost'}: no such directory"),
        (["--prefix", str(tmp_path / "env"), "--host-root", str(host), "--extract-dir", str(tmp_path / "afile")],
         f"--extract-dir {tmp_path / 'afile'}: exists and is not a directory"),
        (["--prefix", str(tmp_path / "same"), "--host-root", str(host), "--extract-dir", str(tmp_path / "same")],
         "--prefix and --extract-dir must be different directories"),
        (["--prefix", str(tmp_path / "x" / "env"), "--host-root", str(host), "--extract-dir", str(tmp_path / "x")],
         "--prefix and --extract-dir must be different directories"),
        (["--prefix", str(tmp_path / "full"), "--host-root", str(host)],
         f"{tmp_path / 'full'}: --prefix is a non-empty directory and not a conda environment"),
        (["--prefix", str(tmp_path / "env"), "--host-root", str(tmp_path / "afile")],
         f"--host-root {tmp_path / 'afile'}: not a directory"),
        (["--prefix", str(tmp_path / "afile" / "env"), "--host-root", str(host)],
         f"--prefix {tmp_path / 'afile' / 'env'}: {tmp_path / 'afile'} is not a directory"),
        (["--prefix", "/", "--host-root", str(host)], "/: --prefix is a non-empty directory and not a conda"),
    ]
    for argv, says in cases:
        assert main(["unpack", str(bundle), *argv]) == 2, argv
        err = capsys.readouterr().err
        assert says in _one_error(err), err
        assert "bundle ok" not in err, "refused before the bundle was read"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "full", "host"]


def test_extract_dir_with_an_extracted_bundle_is_refused(bundle: Path, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    x = tmp_path / "x"
    with tarfile.open(bundle) as tar:
        tar.extractall(x, filter="data")
    code = unpack(x, tmp_path / "env", fake_node(tmp_path / "host", [90402]), "--extract-dir", str(tmp_path / "k"))
    assert code == 2
    assert f"--extract-dir {tmp_path / 'k'}: {x} is extracted already" in _one_error(capsys.readouterr().err)
    assert not (tmp_path / "env").exists() and not (tmp_path / "k").exists()


def test_a_failed_unpack_leaves_no_half_extract_dir(bundle: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    keep = tmp_path / "kept"
    assert unpack(bundle, tmp_path / "env", fake_node(tmp_path / "host", [90010]), "--extract-dir", str(keep)) == 1
    assert "the bundle was built for gfx942" in capsys.readouterr().err
    assert not keep.exists() and not (tmp_path / "env").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["host"]


def test_a_kept_extraction_is_the_whole_bundle(bundle: Path, tmp_path: Path) -> None:
    keep = tmp_path / "kept"
    keep.mkdir()  # an empty directory is fine
    assert unpack(bundle, tmp_path / "env", fake_node(tmp_path / "host", [90402]), "--extract-dir", str(keep)) == 0
    with tarfile.open(bundle) as tar:
        names = {m.name for m in tar.getmembers()}
    assert names <= {str(p.relative_to(keep)) for p in keep.rglob("*")}
    assert json.loads((keep / "pixi-pack.json").read_text())["platform"] == "linux-64"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".rocmlock")]


def test_an_unpack_into_a_prefix_another_unpack_is_installing_waits_for_it(bundle: Path, tmp_path: Path) -> None:
    import fcntl

    from rocmlock.prefix.marker import MARKER

    prefix, host = tmp_path / "env", fake_node(tmp_path / "host", [90402])
    (prefix / "conda-meta").mkdir(parents=True)
    (prefix / "conda-meta" / "being-installed.json").write_text("{}")
    held = (prefix / MARKER).open("w")  # the other unpack, still installing, holds its marker
    held.write("created\n")
    held.flush()
    fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)

    def killed() -> None:  # it dies without finishing: its marker stays, unlocked
        assert (prefix / "conda-meta" / "being-installed.json").is_file(), "its files are left alone meanwhile"
        held.close()

    err = _waits_then_runs(["unpack", str(bundle), "--prefix", str(prefix), "--host-root", str(host)], prefix,
                           killed)
    assert "an earlier install into it was interrupted; installing it again" in err, err


def test_a_bundle_directory_that_cannot_be_written_still_installs(bundle: Path, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    # An extracted bundle on a read-only share: the @EXPLICIT file cannot be written beside it. (A directory
    # in its place stands in for the read-only filesystem: the tests run as root.)
    x = tmp_path / "x"
    with tarfile.open(bundle) as tar:
        tar.extractall(x, filter="data")
    (x / "conda-linux-64-gfx942.lock").mkdir()
    assert unpack(x, tmp_path / "env", fake_node(tmp_path / "host", [90402])) == 0
    err = capsys.readouterr().err
    assert f"warning: no @EXPLICIT file: cannot write {x / 'conda-linux-64-gfx942.lock'}" in err
    assert (tmp_path / "env" / "conda-meta").is_dir()


@pytest.mark.parametrize(("key", "value"), [("probe", "/bin/sh"), ("probe", "../../../bin/sh"),
                                            ("packages.0.subdir", "..")])
def test_metadata_naming_a_path_outside_is_refused(bundle: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   key: str, value: str) -> None:
    # The probe runs as <prefix>/<probe>: an absolute or climbing path would run a program of the host.
    x = tmp_path / "x"
    with tarfile.open(bundle) as tar:
        tar.extractall(x, filter="data")
    meta = json.loads((x / "rocmlock-pack.json").read_text())
    if key == "probe":
        meta["probe"] = value
    else:
        meta["packages"][0]["subdir"] = value
    (x / "rocmlock-pack.json").write_text(json.dumps(meta))
    assert unpack(x, tmp_path / "env", fake_node(tmp_path / "host", [90402])) == 2
    assert f"rocmlock-pack.json: key '{key.split('.')[0]}'" in _one_error(capsys.readouterr().err)
    assert not (tmp_path / "env").exists()


def test_rocmlocks_wheel_in_the_installer_does_not_depend_on_the_umask(tmp_path: Path) -> None:
    # setuptools writes the wheel's files with the umask's mode and keeps the source files' modes (a checkout
    # made under umask 077 has 0600 files), and the zip records them: two packs differed under two umasks.
    from rocmlock.bundle.installer import _build_rocmlock_wheel

    wheels = []
    for umask in (0o077, 0o022):
        dest = tmp_path / oct(umask)
        dest.mkdir()
        old = os.umask(umask)
        try:
            _build_rocmlock_wheel(dest)
        finally:
            os.umask(old)
        (wheel,) = dest.iterdir()
        wheels.append(wheel.read_bytes())
    assert wheels[0] == wheels[1]


# ----------------------------------------------------------------------------- a full disk

FSIZE = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG, as a full disk fails
resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))
from rocmlock.cli.main import main
sys.exit(main(sys.argv[1:]))
"""

NOSPACE = """
import errno, os, sys
def full(*args):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
os.pwrite = full  # the packages' bytes go to the bundle with pwrite: the disk fills while they are fetched
from rocmlock.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def _run(script: str, *argv: str) -> tuple[int, str]:
    proc = subprocess.run([sys.executable, "-c", script, *argv], env={**os.environ, "PYTHONPATH": TOOLS},
                          capture_output=True, text=True, timeout=120, check=False)
    return proc.returncode, proc.stderr


@pytest.mark.parametrize("script", [FSIZE.format(limit=20_000), NOSPACE])
def test_a_full_disk_while_packing_names_the_bundle_and_leaves_nothing(locked_ws: Path, tmp_path: Path,
                                                                       script: str) -> None:
    out = tmp_path / "out" / "b.tar"
    code, err = _run(script, "pack", "--manifest-path", str(locked_ws / "pixi.toml"), "-e", ENV, "-o", str(out))
    assert code == 1
    line = _one_error(err)
    assert line.startswith(f"error: cannot write the bundle {out}: ") and "cannot fetch" not in line, err
    assert "disk" in err.strip().splitlines()[-1]
    assert list(out.parent.iterdir()) == []


def test_a_full_disk_while_unpacking_is_not_a_damaged_bundle(bundle: Path, tmp_path: Path) -> None:
    x = tmp_path / "x"
    with tarfile.open(bundle) as tar:
        tar.extractall(x, filter="data")
        biggest = max(m.size for m in tar.getmembers())
    host = fake_node(tmp_path / "host", [90402])
    # The tar is extracted (its largest member fails); the directory is installed (rattler's conda-meta/*.json,
    # the test packages' largest files, fail).
    for source, limit in ((bundle, biggest // 2), (x, 200)):
        prefix = tmp_path / "env"
        code, err = _run(FSIZE.format(limit=limit), "unpack", str(source), "--prefix", str(prefix),
                         "--host-root", str(host))
        assert code == 1, err
        line = _one_error(err, after_log=True)
        assert "File too large" in line and "damaged" not in err, err
        assert "disk" in err.strip().splitlines()[-1]
        assert not prefix.exists()
        left = [str(q) for p in tmp_path.iterdir() if p.name.startswith(".rocmlock") for q in [p, *p.rglob("*")]]
        assert not left, f"rattler's background tasks outlive the failed install: {left}"


# ----------------------------------------------------------------------------- unpack: where --prefix cannot go

# A prefix's parent unpack may not write: mode 0555 (as root, with CAP_DAC_OVERRIDE dropped through setpriv(1)),
# or a read-only bind mount in a private mount namespace (`unshare -m`; needs root, as in CI).
READ_ONLY = """
set -u
mount --bind "$RO" "$RO" && mount -o remount,bind,ro "$RO" || { echo "mount refused" >&2; exit 99; }
exec "$@"
"""


def _unpack_as(how: str, shared: Path, locked_dir: Path, *argv: str) -> tuple[int, str]:
    cmd = [sys.executable, "-m", "rocmlock", "unpack", *argv]
    env = {**os.environ, "PYTHONPATH": TOOLS}
    if how == "not-writable":
        locked_dir.chmod(0o555)
        if os.geteuid() == 0:
            # root writes anywhere through CAP_DAC_OVERRIDE: run unpack as root without it (setpriv(1) drops it
            # from the bounding and inheritable sets), so the mode bits apply. Another user (nobody) would need
            # to read the interpreter's venv, which CI makes under a mode-0700 temporary directory.
            if shutil.which("setpriv") is None:
                pytest.skip("no setpriv(1) to drop root's CAP_DAC_OVERRIDE")
            caps = "-dac_override,-dac_read_search"
            cmd = ["setpriv", f"--bounding-set={caps}", f"--inh-caps={caps}", *cmd]
    else:
        if os.geteuid() != 0 or shutil.which("unshare") is None:
            pytest.skip("a read-only bind mount needs root and unshare(1)")
        cmd = ["unshare", "-m", "sh", "-c", READ_ONLY, "sh", *cmd]
        env["RO"] = str(locked_dir)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, check=False, cwd=shared)
    if proc.returncode == 99 and "mount refused" in proc.stderr:
        pytest.skip(f"the kernel refused a private mount: {proc.stderr.strip()[:200]}")
    return proc.returncode, proc.stderr


@pytest.mark.parametrize("how", ["not-writable", "read-only"])
@pytest.mark.parametrize("below", ["env", "a/b/env"])
def test_unpack_where_the_prefix_cannot_be_created_is_one_line_and_writes_nothing(
        bundle: Path, tmp_path_factory: pytest.TempPathFactory, how: str, below: str) -> None:
    # Everything the other user reads lives in a world-readable directory outside pytest's (mode 0700) tmp dir.
    shared = Path(tempfile.mkdtemp(prefix="rocmlock-unpack-"))
    try:
        shared.chmod(0o755)
        tar = shutil.copy(bundle, shared / "b.tar")
        Path(tar).chmod(0o644)
        host = fake_node(shared / "host", [90402])
        for p in [host, *host.rglob("*")]:
            p.chmod(0o755 if p.is_dir() else 0o644)
        locked_dir = shared / "opt"
        locked_dir.mkdir(mode=0o755)
        before = sorted(str(p) for p in shared.rglob("*"))
        code, err = _unpack_as(how, shared, locked_dir, str(tar), "--prefix", str(locked_dir / below),
                               "--host-root", str(host), "--no-verify")
        assert code == 2, err
        line = _one_error(err)
        why = "no write permission" if how == "not-writable" else "a read-only file system"
        assert line == f"error: --prefix {locked_dir / below}: cannot write in {locked_dir} ({why})", err
        assert "hint: " in err and "--prefix" in err.strip().splitlines()[-1], err
        assert "bundle ok" not in err, "refused before the bundle was extracted or checked"
        assert sorted(str(p) for p in shared.rglob("*")) == before, "nothing written"
    finally:
        if (shared / "opt").exists():
            (shared / "opt").chmod(0o755)
        shutil.rmtree(shared)


def test_unpack_into_a_non_empty_directory_says_what_to_do_and_writes_nothing(
        bundle: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prefix, host = tmp_path / "env", fake_node(tmp_path / "host", [90402])
    prefix.mkdir()
    (prefix / "notes.txt").write_text("mine\n")
    for extra in ((), ("--force",)):  # --force skips the node check only, never this
        assert unpack(bundle, prefix, host, "--no-verify", *extra) == 2
        err = capsys.readouterr().err
        assert _one_error(err) == f"error: {prefix}: --prefix is a non-empty directory and not a conda environment"
        assert err.strip().splitlines()[-1].startswith("hint: choose a new directory"), err
        assert [p.name for p in prefix.iterdir()] == ["notes.txt"]
        assert not [p for p in tmp_path.iterdir() if p.name.startswith(".rocmlock")]


def test_rocmlocks_wheel_builds_with_a_pythons_old_setuptools_under_a_constraint(tmp_path: Path) -> None:
    # Issue 35: a fresh 3.11 venv (ensurepip's setuptools 65.5, no wheel) with a cluster's pip constraint holding
    # setuptools under 70.1 failed with "invalid command 'bdist_wheel'": the build ran without isolation. pip
    # fills the isolated build environment from pyproject.toml's requires (setuptools, and wheel for <70.1).
    import venv

    from rocmlock.bundle.installer import _build_rocmlock_wheel

    venv.create(tmp_path / "venv", with_pip=True)
    python = tmp_path / "venv" / "bin" / "python"
    old = subprocess.run([str(python), "-c", "import setuptools; print(setuptools.__version__)"],
                         capture_output=True, text=True, check=True).stdout.strip()
    assert tuple(int(p) for p in old.split(".")[:2]) < (70, 1), old
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("setuptools<70.1\n")
    dest = tmp_path / "wheels"
    dest.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PIP_CONSTRAINT", str(constraints))
        mp.setenv("PIP_NO_BUILD_ISOLATION", "0")  # a user's setting: pip reads it as "isolation off"
        _build_rocmlock_wheel(dest, python=str(python))
    (wheel,) = dest.iterdir()
    assert wheel.name.startswith("rocmlock-") and wheel.name.endswith("-py3-none-any.whl")
