"""The diff of the lock just written, built from the records in memory (rocmlock.lock.lockentry, issue 40), equals
the diff read from the pixi.lock rattler rendered (rocmlock.lockdiff.diff.lock_packages), entry for entry and in the same
order, on real locks: the golden channel (repodata only, strings that make YAML quote) served from a directory and
over HTTP (where rattler derives subdir and channel from the URL and leaves them out), and packages that
py-rattler-build assembled (indexed_timestamp, build numbers a build string contradicts, noarch generic and python).
A record of a shape not built in memory (purls here) falls back to the text, with the same diff."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from channels import Pkg, build_channel, py
from rocmlock.lock import pipeline
from rocmlock.lock.lockentry import memory_lock_packages
from rocmlock.lock.lockfile import LockedWorkspace
from rocmlock.lockdiff.diff import diff_json, diff_locks, lock_packages
from test_lock_golden import MANIFEST, _channel


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """The golden channel under ``tmp_path/www/channel``, and its URL over HTTP."""
    root = tmp_path / "www"
    _channel(root / "channel")
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield root / "channel", f"http://127.0.0.1:{server.server_address[1]}/channel"
    server.shutdown()
    server.server_close()


def _lock(ws: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[LockedWorkspace, str, dict[str, Any]]:
    """Lock ``ws``; the LockedWorkspace the lock was rendered from, the pixi.lock written, and the diff printed."""
    seen: list[LockedWorkspace] = []
    render = pipeline.render_outputs

    def spy(ws_: Any, locked: LockedWorkspace, envs: Any) -> dict[Path, str]:
        seen.append(locked)
        return render(ws_, locked, envs)

    monkeypatch.setattr(pipeline, "render_outputs", spy)
    result = pipeline.lock_workspace(ws / "pixi.toml")
    return seen[-1], (ws / "pixi.lock").read_text(), result.to_json()


def _same(locked: LockedWorkspace, text: str, printed: dict[str, Any], built: bool = True,
          before: str | None = None) -> None:
    """The packages built from ``locked`` equal those read from ``text``, and the diff printed (from the lock text
    ``before``, None: no lock) is the one read from the two texts."""
    memory = memory_lock_packages(locked)
    from_text = lock_packages(text, "pixi.lock")
    if built:
        assert memory is not None, "the records were not built in memory (the text was read instead)"
        assert memory == from_text
        # the same entries in the same key order, environments and platforms in the same order
        assert json.dumps(diff_json(diff_locks(None, memory))) == json.dumps(diff_json(diff_locks(None, from_text)))
    else:
        assert memory is None
    old = lock_packages(before, "old pixi.lock") if before is not None else None
    expected = diff_json(diff_locks(old, from_text, pipeline.explicit_marks(
        pipeline.load_workspace(Path(printed["manifest"])).environments())))
    assert json.dumps({k: printed[k] for k in ("version", "environment")}) == json.dumps(expected)


@pytest.mark.parametrize("over_http", [False, True])
def test_golden_channel_diff_from_memory_equals_diff_from_the_lock(sandbox: Path, served: tuple[Path, str],
                                                                    monkeypatch: pytest.MonkeyPatch,
                                                                    over_http: bool) -> None:
    channel, url = served
    ws = sandbox / "ws"
    ws.mkdir()
    (ws / "pixi.toml").write_text(MANIFEST.replace('"./channel"', f'"{url if over_http else channel}"'))
    locked, text, printed = _lock(ws, monkeypatch)
    assert ("- conda: http" in text) is over_http and ("\n  channel: " in text) is not over_http
    _same(locked, text, printed)
    # a re-lock that moves packages: the new side from memory, the old one read from the previous lock
    before = text
    (ws / "pixi.toml").write_text((ws / "pixi.toml").read_text().replace('python = "3.12.*"\nyes = "*"\n',
                                                                         'python = "3.12.1"\nnumpy = "2.1.*"\n'))
    locked, text, printed = _lock(ws, monkeypatch)
    assert printed["environment"]["mi300x"]["linux-64-gfx942"], "the re-lock changed nothing"
    _same(locked, text, printed, before=before)


def test_built_packages_diff_from_memory_equals_diff_from_the_lock(sandbox: Path, monkeypatch: pytest.MonkeyPatch
                                                                   ) -> None:
    pkgs = [Pkg("python", "3.12.4", "h0_0_cpython"), Pkg("numpy", "2.1.3", "py312h0_7", depends=(py(),)),
            Pkg("rocm-version", "7.2", "0", subdir="noarch", noarch="generic"),
            Pkg("amdgpu-target", "1", "gfx942", subdir="noarch", noarch="generic"),  # build number 942 != 0
            Pkg("helper", "1.0", "pyh0_3", subdir="noarch", noarch="python", depends=("python >=3.9",)),
            Pkg("pytorch", "2.12.1", "rocm72_gfx942_py312_h1a2b3c4_0",
                depends=(py(), "numpy", "helper", "amdgpu-target * gfx942", "rocm-version 7.2.*"),
                constrains=("__amdgpu_arch ==9.4.2",))]
    build_channel(sandbox / "built", pkgs)
    ws = sandbox / "ws"
    ws.mkdir()
    (ws / "pixi.toml").write_text(
        '[workspace]\nname = "b"\nchannels = ["../built"]\nplatforms = [{ name = "linux-64-gfx942", platform = '
        '"linux-64", __amdgpu = "0", __amdgpu_arch = "9.4.2" }]\n\n[dependencies]\npytorch = "*"\n')
    locked, text, printed = _lock(ws, monkeypatch)
    assert "indexed_timestamp: " in text and "build_number: 0" in text and "noarch:" not in text
    _same(locked, text, printed)


def test_a_record_not_built_in_memory_falls_back_to_the_text(sandbox: Path, served: tuple[Path, str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    channel, _ = served
    data = json.loads((channel / "noarch" / "repodata.json").read_text())
    for rec in data["packages.conda"].values():
        if rec["name"] == "purely":
            rec["purls"] = ["pkg:pypi/purely"]
    (channel / "noarch" / "repodata.json").write_text(json.dumps(data))
    ws = sandbox / "ws"
    ws.mkdir()
    (ws / "pixi.toml").write_text(MANIFEST.replace('"./channel"', f'"{channel}"'))
    locked, text, printed = _lock(ws, monkeypatch)
    assert "purls:" in text
    _same(locked, text, printed, built=False)


def test_a_url_with_a_secret_in_a_record_is_masked_alike(sandbox: Path, served: tuple[Path, str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A license holding a URL with credentials and a query: the diff masks it (rocmlock.lockdiff.diff), from memory
    as from the text."""
    channel, _ = served
    data = json.loads((channel / "linux-64" / "repodata.json").read_text())
    for rec in data["packages.conda"].values():
        if rec["name"] == "clib-a":
            rec["license"] = "see https://bob:pw@example.org/t/tok/x?sig=abc"
    (channel / "linux-64" / "repodata.json").write_text(json.dumps(data))
    ws = sandbox / "ws"
    ws.mkdir()
    (ws / "pixi.toml").write_text(MANIFEST.replace('"./channel"', f'"{channel}"'))
    locked, text, printed = _lock(ws, monkeypatch)
    assert "sig=abc" in text and "sig=abc" not in json.dumps(printed) and "pw@" not in json.dumps(printed)
    _same(locked, text, printed)


@pytest.mark.parametrize("flag", ["", "--json"])
def test_the_diff_is_built_only_to_be_printed(sandbox: Path, served: tuple[Path, str], flag: str) -> None:
    """A plain `rocmlock lock` prints no diff, so it builds none (rocmlock.lock.result.LockResult.diff is lazy)."""
    import os
    import subprocess
    import sys

    channel, _ = served
    ws = sandbox / "ws"
    ws.mkdir()
    (ws / "pixi.toml").write_text(MANIFEST.replace('"./channel"', f'"{channel}"'))
    code = ("import sys; from rocmlock.cli.main import main\ntry:\n    main(sys.argv[1:])\nfinally:\n"
            "    print('DIFF-BUILT' if 'rocmlock.lock.lockentry' in sys.modules else 'NO-DIFF', file=sys.stderr)")
    args = ["lock", "--manifest-path", str(ws / "pixi.toml"), *([flag] if flag else [])]
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=False,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert out.returncode == 0, out.stderr
    assert out.stderr.strip().splitlines()[-1] == ("DIFF-BUILT" if flag else "NO-DIFF")
    assert ('"environment"' in out.stdout) is bool(flag)
