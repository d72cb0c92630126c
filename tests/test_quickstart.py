"""The README's Quickstart command 1, run for real: build, publish, serve with basic auth, lock, install, probe."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "examples" / "offline" / "quickstart.sh"


def test_quickstart_runs_the_whole_pipeline(tmp_path: Path) -> None:
    work = tmp_path / "work"
    env = {k: v for k, v in os.environ.items() if k != "RATTLER_AUTH_FILE"}
    proc = subprocess.run(["bash", str(SCRIPT), "--workdir", str(work), "--json"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = json.loads(proc.stdout)
    assert summary["seconds"] < 180
    # Every step ran, in order, each through the real command.
    steps = [line for line in proc.stderr.splitlines() if line.startswith("==> ")]
    assert [s.split()[1] for s in steps] == [f"{i}/7" for i in range(1, 8)]
    # The lock names the served channel, never its credentials; they stayed in the work directory.
    lock = (work / "workspace" / "pixi.lock").read_text()
    assert "http://127.0.0.1:" in lock and "/rocmlock-example" in lock
    auth = json.loads((work / "auth" / "credentials.json").read_text())
    password = auth["127.0.0.1"]["BasicHTTP"]["password"]
    assert password not in lock and password not in proc.stderr and password not in proc.stdout
    assert not list(REPO.glob("examples/offline/**/credentials.json"))
    # The environment came from the lock: the gfx942 mutex, the ROCm pin and the probe are installed.
    meta = sorted(p.name for p in (work / "envs" / "mi300x" / "conda-meta").glob("*.json"))
    assert "amdgpu-target-1-gfx942.json" in meta
    assert any(n.startswith("rocm-env-check-") for n in meta) and any(n.startswith("rocm-version-7.2") for n in meta)
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
