"""pack's reading of the lock and the packages (issue 22): relative ``conda:`` paths, files that are no files,
servers that stall, a lock replaced while pack reads it. Each failure is one line and leaves nothing behind.
"""

from __future__ import annotations

import http.server
import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from rocmlock.cli.main import main
from test_pack import ENV, fake_node, installed, locked_set, pack, unpack
from test_pack_robust import _one_error

NUMPY = "forge/linux-64/numpy-2.2.0-py312h0_0.conda"


def _channels_dir(lock: Path) -> str:
    match = re.search(r"conda: (/\S+/)forge/linux-64/numpy", lock.read_text())
    assert match, "the tests' lock names its packages by absolute path"
    return match.group(1)


def test_relative_conda_paths_are_read_against_the_locks_directory(ws_copy: Path, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    # py-rattler raised ConversionError ("The path is not an absolute path"): a traceback in pack, export,
    # lock and install. pixi joins a locked path to the workspace root (pixi_core/src/lock_file/resolve/pypi.rs).
    lock = ws_copy / "pixi.lock"
    channels = _channels_dir(lock)
    relative = os.path.relpath(channels, ws_copy) + "/"
    lock.write_text(lock.read_text().replace(f"conda: {channels}", f"conda: {relative}"))
    assert f"conda: {relative}{NUMPY}" in lock.read_text()
    os.chdir(tmp_path)  # not the workspace: the paths are the lock's, not the current directory's
    out = tmp_path / "b.tar"
    assert pack(ws_copy, out) == 0
    assert unpack(out, tmp_path / "env", fake_node(tmp_path / "host", [90402])) == 0
    assert installed(tmp_path / "env") == locked_set(ws_copy)
    assert main(["export", "--manifest-path", str(ws_copy / "pixi.toml")]) == 0
    explicit = (ws_copy / "envs" / ENV / "conda-linux-64-gfx942.lock").read_text()
    assert f"file://{channels}{NUMPY}#sha256:" in explicit, explicit
    # A relative path to nothing: one line, exit 1, nothing written.
    lock.write_text(lock.read_text().replace(f"{relative}{NUMPY}", f"{relative}forge/linux-64/gone-1-0.conda"))
    capsys.readouterr()
    assert pack(ws_copy, tmp_path / "out" / "c.tar") in (1, 2)
    assert "Traceback" not in _one_error(capsys.readouterr().err)
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def test_a_fifo_as_a_package_or_as_the_lock_is_refused_not_waited_for(ws_copy: Path, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    lock = ws_copy / "pixi.lock"
    fifo = tmp_path / "numpy-2.2.0-py312h0_0.conda"
    os.mkfifo(fifo)
    channels = _channels_dir(lock)
    lock.write_text(lock.read_text().replace(f"conda: {channels}{NUMPY}", f"conda: {fifo}"))
    out = tmp_path / "out"
    out.mkdir()
    assert pack(ws_copy, out / "b.tar") == 2
    line = _one_error(capsys.readouterr().err)
    assert f"{fifo}: not a regular file" in line, line
    assert not list(out.iterdir())
    lock.unlink()
    os.mkfifo(lock)
    assert pack(ws_copy, out / "b.tar") == 2
    assert f"{lock}: not a regular file" in _one_error(capsys.readouterr().err)
    assert not list(out.iterdir())


class _Stalling(http.server.BaseHTTPRequestHandler):
    """Sends a package's headers and 100 bytes, then (``trickle``) a byte every 0.1 s, or nothing (the package
    is 921 bytes: neither reaches its end)."""

    trickle = False
    release = threading.Event()

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "1000000")
        self.end_headers()
        try:
            self.wfile.write(b"x" * 100)
            self.wfile.flush()
            for _ in range(600):
                if self.release.wait(0.1):
                    return
                if self.trickle:
                    self.wfile.write(b"x")
                    self.wfile.flush()
        except OSError:  # pack hung up
            return

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def stalling() -> Iterator[str]:
    _Stalling.release.clear()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Stalling)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        _Stalling.release.set()
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(("trickle", "flags", "says"), [
    (False, ["--read-timeout", "1"], "no data for 1 s (--read-timeout)"),
    (True, ["--read-timeout", "30", "--stall-timeout", "1"], "less than 1 MB in 1 s (--stall-timeout)"),
])
def test_a_server_that_stalls_or_trickles_ends_the_pack_in_one_line(
        ws_copy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], stalling: str, trickle: bool,
        flags: list[str], says: str) -> None:
    lock = ws_copy / "pixi.lock"
    lock.write_text(lock.read_text().replace(f"conda: {_channels_dir(lock)}{NUMPY}", f"conda: {stalling}{NUMPY}"))
    _Stalling.trickle = trickle
    out = tmp_path / "out"
    out.mkdir()
    assert pack(ws_copy, out / "b.tar", *flags) == 1
    line = _one_error(capsys.readouterr().err, after_log=True)
    assert line == f"error: cannot fetch {stalling}{NUMPY}: {says}; nothing was written", line
    assert not list(out.iterdir()), "no bundle, no scratch directory"


def test_a_timeout_that_is_no_number_of_seconds_is_refused(ws_copy: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert pack(ws_copy, tmp_path / "b.tar", "--read-timeout", "0") == 2
    assert "is not a number of seconds > 0" in capsys.readouterr().err


def test_a_lock_replaced_while_pack_reads_it_is_an_error_not_a_mixed_bundle(
        ws_copy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    # `pixi lock` takes no rocmlock lock: pack sees the lock it hashed replaced before its records were read.
    from rocmlock.prefix import install as install_module

    real = install_module.select_environment

    def replaced_meanwhile(lock_path: Path, *args: object) -> object:
        text = lock_path.read_text()
        (lock_path.parent / "new.lock").write_text(text + "\n")
        os.replace(lock_path.parent / "new.lock", lock_path)
        return real(lock_path, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(install_module, "select_environment", replaced_meanwhile)
    out = tmp_path / "out"
    out.mkdir()
    assert pack(ws_copy, out / "b.tar") == 1
    assert f"{ws_copy / 'pixi.lock'}: changed while pack read it" in _one_error(capsys.readouterr().err)
    assert not list(out.iterdir())


def test_a_failed_wheel_build_shows_the_builds_own_last_lines(tmp_path: Path) -> None:
    # pack --with-installer builds rocmlock's wheel as pip does (isolated, the declared setuptools); pip ends a
    # failed build with "See above for details": the message carries the backend's own last lines instead.
    import subprocess
    import sys

    from rocmlock.bundle.installer import build_failure

    project = tmp_path / "broken"
    project.mkdir()
    (project / "pyproject.toml").write_text('[build-system]\nrequires = []\nbuild-backend = "backend"\n'
                                            'backend-path = ["."]\n')
    (project / "backend.py").write_text("def build_wheel(*args, **kwargs):\n"
                                        "    print('compiling the thing')\n"
                                        "    raise SystemExit('boom: the backend says why')\n")
    res = subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "wheel", "--no-deps",
                          "--no-index", "--wheel-dir", str(tmp_path / "w"), str(project)],
                         capture_output=True, text=True, check=False, timeout=300)
    assert res.returncode != 0
    shown = build_failure(res.stdout + res.stderr)
    assert "boom: the backend says why" in shown and "See above" not in shown, shown
    assert "\n" not in shown


@pytest.mark.parametrize(("environ", "bar"), [({}, False), ({"FORCE_COLOR": "1"}, True),
                                              ({"TTY_COMPATIBLE": "1"}, True), ({"FORCE_COLOR": ""}, False)])
def test_the_progress_bar_and_rich_itself_only_where_rich_would_draw_it(
        ws_copy: Path, tmp_path: Path, environ: dict[str, str], bar: bool) -> None:
    # stderr is a pipe here: rich (rich.console.Console.is_terminal) draws only when TTY_COMPATIBLE=1 or
    # FORCE_COLOR is non-empty; otherwise pack does not import it (issue 43: a tenth of a second of its start).
    import subprocess
    import sys

    import rocmlock

    argv = ["pack", "--manifest-path", str(ws_copy / "pixi.toml"), "-e", ENV, "-o", str(tmp_path / "b.tar")]
    code = f"import sys; from rocmlock.cli.main import main; print(main({argv!r}), 'rich' in sys.modules)"
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE", "NO_COLOR")}
    env.update(environ, PYTHONPATH=str(Path(rocmlock.__file__).parents[1]))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          stdin=subprocess.DEVNULL, check=False)
    assert proc.stdout.split() == ["0", str(bar)], proc.stderr
    assert ("fetching" in proc.stderr) == bar, proc.stderr
    assert (tmp_path / "b.tar").is_file()
