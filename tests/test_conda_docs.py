"""A newcomer installs the example's exports with real conda from the docs alone (issue 35, item 1).

docs/try-it.md's commands run as written, in bash (only ``/tmp/rl`` becomes a temporary directory): the quickstart
with a kept work directory, its channel served again behind basic auth, then conda 26.7.1 (tests/conda_tools.py)
creating ``environment.yml`` and the ``@EXPLICIT`` file with the netrc the page exports. Without it conda gets
HTTP 401; with the ``~/.netrc`` line of docs/locking.md ("Channel credentials for conda") it installs too.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from ciskips import in_ci
from conda_tools import Conda, CondaUnavailable, ensure_venv
from rocmlock.lock.lockfile import read_lockfile

REPO = Path(__file__).resolve().parents[1]
TRY_IT = (REPO / "docs" / "try-it.md").read_text()
LOCKING = (REPO / "docs" / "locking.md").read_text()

# Between the page's first block and the next, a person waits for the server it put in the background; so does the
# test (the port is the one pixi.toml names), and it stops that server when the script ends, whatever happens.
WAIT = r'''SERVER=$!
trap 'kill $SERVER' EXIT
"$PYTHON" - <<'EOF'
import pathlib, re, socket, time
port = int(re.search(r"http://127\.0\.0\.1:(\d+)/", pathlib.Path("pixi.toml").read_text()).group(1))
for _ in range(300):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        break
    except OSError:
        time.sleep(0.1)
EOF
'''


def _blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", text, re.MULTILINE | re.DOTALL)


def _conda(home: Path) -> Conda:
    try:
        return Conda(ensure_venv("conda26"), home, "conda26")
    except CondaUnavailable as exc:
        if in_ci():
            pytest.fail(f"CI must run real conda (tests/conda_tools.py): {exc}")
        pytest.skip(f"no conda venv here: {exc}")


def _installed(home: Path, name: str) -> dict[str, tuple[str, str, str]]:
    (prefix,) = [p for p in home.rglob(f"envs/{name}") if (p / "conda-meta").is_dir()]
    out = {}
    for meta in (prefix / "conda-meta").glob("*.json"):
        record = json.loads(meta.read_text())
        out[record["name"]] = (record["version"], record["build"], record["sha256"])
    return out


def _locked(workspace: Path) -> dict[str, tuple[str, str, str]]:
    lock = read_lockfile(workspace / "pixi.lock")
    assert lock is not None
    return {r.name.normalized: (str(r.version), str(r.build), r.sha256.hex() if r.sha256 else "")
            for r in lock.environments["mi300x"].records["linux-64-gfx942"]}


def test_a_conda_user_installs_the_examples_exports_from_the_docs(tmp_path: Path) -> None:
    conda = _conda(tmp_path / "conda")
    work = tmp_path / "rl"
    start, *_ = _blocks(TRY_IT, "bash")
    (conda_block,) = [b for b in _blocks(TRY_IT, "bash") if "export NETRC=" in b]
    assert start.startswith("bash examples/offline/quickstart.sh --workdir /tmp/rl\n")
    # `conda` on PATH as a user has it: the venv's conda run as `python -m conda` (see Conda.run); nothing else
    # of that venv (its python has no rocmlock), and rocmlock's python for the quickstart.
    shims = tmp_path / "bin"
    shims.mkdir()
    (shims / "conda").write_text(f'#!/bin/sh\nexec "{conda.bin / "python"}" -m conda "$@"\n')
    (shims / "conda").chmod(0o755)
    env = conda.env(PYTHON=sys.executable)
    env["PATH"] = f"{shims}{os.pathsep}{os.environ['PATH']}"
    env.pop("NETRC", None)

    def run(*blocks: str) -> subprocess.CompletedProcess[str]:
        script = "set -euo pipefail\n" + "\n".join(blocks).replace("/tmp/rl", str(work))
        return subprocess.run(["bash", "-c", script], cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=600, check=False)

    proc = run(start, WAIT)  # the quickstart, kept in /tmp/rl, and its channel served again
    assert proc.returncode == 0, proc.stderr[-3000:]
    password = json.loads((work / "auth/credentials.json").read_text())["127.0.0.1"]["BasicHTTP"]["password"]
    serve = f"cd {work}/workspace\nsh {work}/serve-channel.sh &\n"

    without = conda_block.replace("export NETRC=", "# export NETRC=")
    proc = run(serve, WAIT, without)
    assert proc.returncode != 0 and "HTTP 401 Unauthorized" in proc.stdout + proc.stderr, proc.stderr[-3000:]

    proc = run(serve, WAIT, conda_block)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    locked = _locked(work / "workspace")
    assert set(locked) >= {"amdgpu-target", "rocm-version", "rocm-env-check", "python"}
    assert _installed(conda.home, "rl-mi300x") == locked
    assert _installed(conda.home, "rl-mi300x-explicit") == locked
    assert password not in proc.stdout + proc.stderr

    # docs/locking.md's ~/.netrc line, for the host, user and password of this channel, and its chmod.
    (line,) = [b for b in _blocks(LOCKING, "text") if b.startswith("machine ")]
    assert line == "machine repo.example.com login ci password s3cret\n"
    (conda.home / ".netrc").write_text(line.replace("repo.example.com", "127.0.0.1").replace(" ci ", " quickstart ")
                                       .replace("s3cret", password))
    (netrc_block,) = [b for b in _blocks(LOCKING, "bash") if b.startswith("chmod 600 ~/.netrc")]
    proc = run(serve, WAIT, netrc_block.replace("conda env create", "conda env create -n rl-netrc"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (conda.home / ".netrc").stat().st_mode & 0o777 == 0o600
    assert _installed(conda.home, "rl-netrc") == locked
