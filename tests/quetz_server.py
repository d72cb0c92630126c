"""A real quetz server for the tests: its own venv (cached), a free port, private channels and API keys.

quetz-server runs in a venv of its own because its dependencies clash with ours (FastAPI 0.104, pydantic <2.6:
quetz/main.py uses ``app.route``, which later FastAPI removed); tests/quetz-constraints.txt pins that venv. The
venv is made once and reused from a fixed path (``ROCMLOCK_QUETZ_VENV`` or ``~/.cache/rocmlock-tests/...``); .ci/run
makes it before the tests (``python tests/quetz_server.py``).

What the server does is quetz 0.10.4's (github.com/mamba-org/quetz, tag v0.10.4):
- ``quetz run DIR --copy-conf CONF --dev`` (quetz/cli.py ``run``/``create``): ``--dev`` fills the database with
  test users (``_fill_test_database``: alice, bob, carol); ``[users] admins = ["dummy:alice"]`` makes alice an
  owner (``_set_user_roles``), so she may create channels;
- ``GET /api/dummylogin/{username}`` (quetz/main.py ``dummy_login``) logs in by name and sets the session cookie;
- ``POST /api/channels``, ``POST /api/api-keys`` (quetz/main.py) make the private channel and a key with a role on it;
- a key is read from the ``X-API-Key`` header (quetz/deps.py ``get_rules``) or from a ``/t/<key>/`` path prefix,
  which ``CondaTokenMiddleware`` (quetz/main.py) turns into that header; anything else is anonymous, and
  ``GET /get/<private channel>/...`` answers 401 to anonymous requests.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.cookiejar
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from venvcache import cached_venv

QUETZ_VERSION = "0.10.4"
CONSTRAINTS = Path(__file__).with_name("quetz-constraints.txt")
START_TIMEOUT_S = 120


class QuetzUnavailable(RuntimeError):
    """The quetz venv could not be made or the server did not start; the message says why."""


@dataclass(frozen=True)
class QuetzChannel:
    """A private channel of a running server; ``api_key`` holds the owner role on it (and on nothing else)."""

    server: str
    name: str
    api_key: str

    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def url(self) -> str:
        """The channel as conda clients read it, without credentials."""
        return f"{self.server}/get/{self.name}"

    @property
    def token_url(self) -> str:
        """The channel with the key in a ``/t/<key>/`` prefix (conda's token form)."""
        return f"{self.server}/t/{self.api_key}/get/{self.name}"

    @property
    def publish_to(self) -> str:
        """``rocmlock publish --to`` for this channel."""
        return f"quetz+{self.server}/{self.name}"


@dataclass
class QuetzServer:
    """A running server at ``url``, logged in as its owner (alice) to make channels; ``log`` is quetz's output."""

    url: str
    log: Path
    _opener: urllib.request.OpenerDirector = field(repr=False)
    _made: list[str] = field(default_factory=list, repr=False)

    def private_channel(self) -> QuetzChannel:
        """A new private channel (``rocm-1``, ``rocm-2``, ...) and a key with the owner role on it."""
        name = f"rocm-{len(self._made) + 1}"
        _post_json(self._opener, f"{self.url}/api/channels", {"name": name, "private": True})
        key = _post_json(self._opener, f"{self.url}/api/api-keys",
                         {"description": f"rocmlock tests {name}", "roles": [{"channel": name, "role": "owner"}]})
        self._made.append(name)
        return QuetzChannel(self.url, name, str(key["key"]))


def venv_dir() -> Path:
    """Where the quetz venv lives: keyed by quetz's version, our Python and the constraints' content."""
    if os.environ.get("ROCMLOCK_QUETZ_VENV"):
        return Path(os.environ["ROCMLOCK_QUETZ_VENV"])
    digest = hashlib.sha256(CONSTRAINTS.read_bytes()).hexdigest()[:12]
    py = f"py{sys.version_info.major}{sys.version_info.minor}"
    # Not under XDG_CACHE_HOME: tests point that at their own directories (rocmlock's repodata cache).
    return Path.home() / ".cache" / "rocmlock-tests" / f"quetz-{QUETZ_VERSION}-{py}-{digest}"


def ensure_venv() -> Path:
    """The venv's python, making the venv first when it is missing or half-made (tests/venvcache.py)."""
    return cached_venv(venv_dir(), _make) / "python"


def _make(root: Path) -> str:
    python = root / "bin" / "python"
    steps = [[sys.executable, "-m", "venv", str(root)],
             [str(python), "-m", "pip", "install", "-q", "--no-input", "-c", str(CONSTRAINTS),
              f"quetz-server=={QUETZ_VERSION}"]]
    for cmd in steps:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise QuetzUnavailable(f"making the quetz venv at {root} failed: `{' '.join(cmd)}` exited "
                                   f"{proc.returncode}: {(proc.stderr or proc.stdout).strip()[-2000:]}")
    return f"quetz-server=={QUETZ_VERSION}\n"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _config(root: Path) -> Path:
    conf = root / "config.toml"
    conf.write_text(
        f'[sqlalchemy]\ndatabase_url = "sqlite:///{root}/quetz.sqlite"\n\n'
        f'[session]\nsecret = "{secrets.token_hex(32)}"\nhttps_only = false\n\n'
        '[users]\nadmins = ["dummy:alice"]\n'
    )
    return conf


def _wait_ready(proc: subprocess.Popen[bytes], url: str, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise QuetzUnavailable(f"quetz exited with {proc.returncode} before serving; log {log}:\n"
                                   + log.read_text(errors="replace")[-3000:])
        with contextlib.suppress(OSError), urllib.request.urlopen(f"{url}/api/channels", timeout=2) as resp:
            if resp.status == 200:
                return
        time.sleep(0.5)
    raise QuetzUnavailable(f"quetz did not answer at {url} within {START_TIMEOUT_S} s; log {log}:\n"
                           + log.read_text(errors="replace")[-3000:])


def _group_alive(pgid: int) -> bool:
    """Whether a live (not zombie) process is left in group ``pgid``: /proc/<pid>/stat's state and pgrp."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                return True
    return False


def _stop(proc: subprocess.Popen[bytes], url: str) -> None:
    """End the server and every process it started, then check that nothing of it is left."""
    # `quetz run` starts a supervisor process beside uvicorn: end the whole session it leads (ours alone).
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(15)
        deadline = time.monotonic() + 15
        while _group_alive(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if proc.poll() is not None and not _group_alive(proc.pid):
            break
    if proc.poll() is None or _group_alive(proc.pid):
        raise QuetzUnavailable(f"quetz at {url} (process group {proc.pid}) did not stop")
    with contextlib.suppress(OSError), urllib.request.urlopen(f"{url}/api/channels", timeout=2):
        raise QuetzUnavailable(f"quetz at {url} still answers after it was stopped")


def _as_alice(url: str) -> urllib.request.OpenerDirector:
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
    opener.open(f"{url}/api/dummylogin/alice", timeout=30).read()
    return opener


def _post_json(opener: urllib.request.OpenerDirector, url: str, body: dict[str, object]) -> dict[str, object]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with opener.open(req, timeout=30) as resp:
        text = resp.read()
    return json.loads(text) if text.strip() else {}


@contextlib.contextmanager
def quetz_server(workdir: Path) -> Iterator[QuetzServer]:
    """Start quetz on a free port of 127.0.0.1 with its deployment under ``workdir``; stop it on exit."""
    python = ensure_venv()
    workdir.mkdir(parents=True, exist_ok=True)
    conf, log = _config(workdir), workdir / "quetz.log"
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    # quetz opens <cwd>/quetz.log for its own logging (quetz/config.py get_logger_config): not the caller's cwd.
    cwd = workdir / "cwd"
    cwd.mkdir(exist_ok=True)
    with open(log, "wb") as out:
        proc = subprocess.Popen([str(python), "-m", "quetz.cli", "run", str(workdir / "deployment"),
                                 "--copy-conf", str(conf), "--dev", "--host", "127.0.0.1", "--port", str(port)],
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, cwd=cwd)
    try:
        _wait_ready(proc, url, log)
        yield QuetzServer(url, log, _as_alice(url))
    finally:
        _stop(proc, url)


if __name__ == "__main__":
    # .ci/run: make the venv before the tests, so its minute of pip is not charged to a test.
    print(ensure_venv())
