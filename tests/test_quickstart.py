"""The README's Quickstart command 1, run for real: build, publish, serve with basic auth, lock, install, probe."""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "examples" / "offline" / "quickstart.sh"


def test_quickstart_runs_the_whole_pipeline(tmp_path: Path) -> None:
    work = tmp_path / "work"
    env = {k: v for k, v in os.environ.items() if k != "RATTLER_AUTH_FILE"}
    # The python running the tests first on PATH, as in CI's activated venv: run from an unactivated venv
    # (`venv/bin/python -m pytest`), the script found the machine's own python first and pip-installed rocmlock
    # into it (its third way; test_quickstart_python.py covers that one with a python of its own).
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    proc = subprocess.run(["bash", str(SCRIPT), "--workdir", str(work), "--json"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = json.loads(proc.stdout)
    assert summary["seconds"] < 180
    assert summary["kept"] is True and all(Path(summary[k]).exists() for k in ("work", "lock", "prefix", "image"))
    # Every step ran, in order, each through the real command.
    steps = [line for line in proc.stderr.splitlines() if line.startswith("==> ")]
    assert [s.split()[1] for s in steps] == [f"{i}/8" for i in range(1, 9)]
    # The lock names the served channel, never its credentials; they stayed in the work directory.
    lock = (work / "workspace" / "pixi.lock").read_text()
    # docs/try-it.md's listing of the kept work directory names everything in it (output/ and
    # python-shim-files/ were missing), and only serve-channel.sh's pid file beyond it (written when it runs).
    try_it = (REPO / "docs" / "try-it.md").read_text()
    listing = try_it.split("The work directory holds:", 1)[1].split("```text\n", 1)[1].split("```", 1)[0]
    listed = {line.split()[0].split("/")[0] for line in listing.splitlines()[1:] if line.startswith("  ")
              and not line.startswith("   ")}
    present = {p.name for p in work.iterdir() if not p.name.startswith(".")}
    assert present <= listed and listed - present == {"serve-channel.pid"}, (present, listed)
    assert (work / "workspace" / "recipes").resolve() == (REPO / "recipes").resolve()
    assert "http://127.0.0.1:" in lock and "/rocmlock-example" in lock
    auth = json.loads((work / "auth" / "credentials.json").read_text())
    password = auth["127.0.0.1"]["BasicHTTP"]["password"]
    assert password not in lock and password not in proc.stderr and password not in proc.stdout
    assert not list(REPO.glob("examples/offline/**/credentials.json"))
    # The environment came from the lock: the gfx942 mutex, the ROCm pin and the probe are installed.
    meta = sorted(p.name for p in (work / "envs" / "mi300x" / "conda-meta").glob("*.json"))
    assert "amdgpu-target-1-gfx942.json" in meta
    assert any(n.startswith("rocm-env-check-") for n in meta) and any(n.startswith("rocm-version-7.2") for n in meta)
    # The image of the environment holds the same packages as the installed environment, and names the lock.
    image = Path(summary["image"])
    index = json.loads((image / "index.json").read_text())
    manifest = json.loads((image / "blobs/sha256" / index["manifests"][0]["digest"][7:]).read_bytes())
    config = json.loads((image / "blobs/sha256" / manifest["config"]["digest"][7:]).read_bytes())
    labels = config["config"]["Labels"]
    assert labels["io.rocmlock.environment"] == "mi300x" and labels["io.rocmlock.gpu-target"] == "gfx942"
    assert labels["io.rocmlock.lock.sha256"] == hashlib.sha256((work / "workspace/pixi.lock").read_bytes()).hexdigest()
    layer = (image / "blobs/sha256" / manifest["layers"][-1]["digest"][7:]).read_bytes()
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        in_image = sorted(n.rsplit("/", 1)[1] for n in tar.getnames()
                          if n.startswith("opt/env/conda-meta/") and n.endswith(".json"))
    assert in_image == meta
    # The probe ran inside it and read its expectations from the installed packages.
    assert isinstance(summary["probe_failed"], list)
    if not Path("/dev/kfd").exists():
        assert summary["probe_exit_code"] != 0
        assert "host.devices" in summary["probe_failed"]
        assert "as expected on a host without an AMD GPU" in summary["verdict"]
    assert "expected target gfx942" in summary["verdict"] or Path("/dev/kfd").exists()
    # A kept work directory says how to serve its channel again, and the script it wrote does so on the
    # port its lock names, with the password from the auth file.
    assert f"sh {summary['serve_again']}" in proc.stderr
    _serve_again_answers(Path(summary["serve_again"]), summary["channel_url"], password)
    # conda's copy of the password (a netrc: conda reads no RATTLER_AUTH_FILE), private like the auth file.
    netrc = work / "auth" / "netrc"
    assert netrc.read_text() == f"machine 127.0.0.1 login quickstart password {password}\n"
    assert netrc.stat().st_mode & 0o077 == 0 and (work / "auth" / "credentials.json").stat().st_mode & 0o077 == 0
    # Run again on the kept, edited work directory: refused (exit 2), nothing touched.
    manifest = work / "workspace" / "pixi.toml"
    manifest.write_text(manifest.read_text() + "# my edit\n")
    before = _snapshot(work)
    again = subprocess.run(["bash", str(SCRIPT), "--workdir", str(work)], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=300, check=False)
    assert again.returncode == 2, again.stderr
    # Its first lines say which python and rocmlock it used (examples/offline/quickstart.sh); then one line.
    *which, refusal = again.stderr.strip().splitlines()
    assert refusal == (f"quickstart: --workdir {work} holds an earlier run (its workspace, lock and environments "
                       "would be overwritten); pass --replace to start it afresh, or give another --workdir")
    assert which and all(line.startswith(("quickstart: python: ", "quickstart: rocmlock: ")) for line in which)
    assert _snapshot(work) == before


def _serve_again_answers(script: Path, url: str, password: str) -> None:
    import base64
    import urllib.request

    server = subprocess.Popen(["sh", str(script)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert server.stdout is not None
        assert server.stdout.readline().strip() == f"serving {url}"
        token = base64.b64encode(f"quickstart:{password}".encode()).decode()
        request = urllib.request.Request(f"{url}/noarch/repodata.json", headers={"Authorization": f"Basic {token}"})
        with urllib.request.urlopen(request, timeout=10) as resp:
            assert b"amdgpu-target" in resp.read()
    finally:
        server.terminate()
        server.wait(10)


def _snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _quickstart(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(REPO / "examples/offline/quickstart.py"), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=60, check=False)


def test_quickstart_refuses_a_directory_it_did_not_make(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me\n")
    for extra in ([], ["--replace"]):
        proc = _quickstart("--workdir", str(mine), *extra, cwd=tmp_path)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.strip() == (f"quickstart: --workdir {mine} is not empty and was not made by the "
                                       "quickstart; give a new or empty directory")
        assert _snapshot(mine) == {"notes.txt": b"keep me\n"}
    proc = _quickstart("--replace", cwd=tmp_path)
    assert proc.returncode == 2 and "--replace needs --workdir" in proc.stderr


def test_replace_starts_a_kept_work_directory_afresh(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("quickstart", REPO / "examples/offline/quickstart.py")
    assert spec is not None and spec.loader is not None
    quickstart = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(quickstart)
    work = tmp_path / "work"
    quickstart.prepare_workdir(work, replace=False)  # new: made, and marked as the quickstart's
    (work / "workspace").mkdir()
    (work / "workspace" / "pixi.toml").write_text("# edited\n")
    with pytest.raises(SystemExit) as exc:
        quickstart.prepare_workdir(work, replace=False)
    assert exc.value.code == 2 and (work / "workspace" / "pixi.toml").is_file()
    quickstart.prepare_workdir(work, replace=True)
    assert sorted(p.name for p in work.iterdir()) == [quickstart.MARKER]
    empty = tmp_path / "empty"
    empty.mkdir()
    quickstart.prepare_workdir(empty, replace=False)  # an empty directory is fine
    assert (empty / quickstart.MARKER).is_file()
