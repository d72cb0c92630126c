"""Each channel's secret reaches that channel only, when several channels share one host (issue 29).

``rattler_client`` (rocmlock.util.credentials) hands rattler the clean URLs and the secrets in memory: request
headers chosen per channel by host and path prefix, longest path first, and a ``/t/<token>/`` mirror per token
channel. Mutation testing left that routing unjudged (benchmarks/README.md): no test had two channels on one host.
Here one HTTP server on 127.0.0.1 serves six channels, each wanting its own credentials or none, and records
what every request carried:

- ``/org`` and ``/org/teamX`` (below it) with different Basic credentials: the longer path must win;
- ``/organic``, open: its name starts with ``org`` but it is not below ``/org/``, so nothing may be sent to it;
- ``/tokX``, reached only as ``/t/<token>/tokX/...`` (the mirror), with no Authorization header, and ``/tokXyo``,
  open, which the token channel's mirror must not rewrite;
- ``localhost`` ``/org``: the same port and path as the first, another host name, its own credentials.

(Paths end in ``X`` so that a slash trimmed with the wrong characters shows: ``rstrip("X/")`` names another path.)

The client for all six reads every channel in one gateway query, as ``lock`` does for a workspace's channels.
A request with the wrong credential, or any credential where none is wanted, gets 401/403 and the query fails.
"""

from __future__ import annotations

import asyncio
import base64
import shutil
import tempfile
import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from rocmlock.util.credentials import client_for_urls

TOKEN = "tok-7f3a-routing"


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


# (host, channel path) -> (userinfo written in the channel URL, the Authorization header the server wants).
WANTS: dict[tuple[str, str], tuple[str, str | None]] = {
    ("127.0.0.1", "/org"): ("org-user:pw-org-1", _basic("org-user", "pw-org-1")),
    ("127.0.0.1", "/org/teamX"): ("team-user:pw-team-2", _basic("team-user", "pw-team-2")),
    ("127.0.0.1", "/organic"): ("", None),
    ("127.0.0.1", "/tokX"): ("", None),
    ("127.0.0.1", "/tokXyo"): ("", None),
    ("localhost", "/org"): ("local-user:pw-local-3", _basic("local-user", "pw-local-3")),
}


class _Handler(SimpleHTTPRequestHandler):
    seen: list[tuple[str, str, str | None]]  # (host, channel path, Authorization) of each request

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        host = (self.headers.get("Host") or "").rsplit(":", 1)[0]
        path = self.path.split("?", 1)[0]
        token = f"/t/{TOKEN}/"
        tokened = path.startswith(token)
        if tokened:
            path = path[len(token) - 1:]
        candidates = [p for h, p in WANTS if h == host and (path == p or path.startswith(p + "/"))]
        if not candidates:
            self.send_error(404)
            return
        channel = max(candidates, key=len)
        auth = self.headers.get("Authorization")
        if tokened and channel != "/tokX":
            auth = f"token {TOKEN} in the path"  # the mirror rewrote a request of another channel
        self.seen.append((host, channel, auth))
        wanted = WANTS[(host, channel)][1]
        if auth != wanted:
            self.send_error(401 if wanted else 403)
            return
        if channel == "/tokX" and not tokened:
            self.send_error(404)
            return
        self.path = path
        super().do_GET()


@pytest.fixture(scope="module")
def server(channels: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[tuple[int, list[tuple[str, str, str | None]]]]:
    root = tmp_path_factory.mktemp("routing")
    for _, path in WANTS:
        if not (root / path.lstrip("/")).exists():
            shutil.copytree(channels["private"], root / path.lstrip("/"), dirs_exist_ok=True)
    seen: list[tuple[str, str, str | None]] = []
    handler = type("Handler", (_Handler,), {"seen": seen})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), partial(handler, directory=str(root)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd.server_address[1], seen
    finally:
        httpd.shutdown()
        httpd.server_close()


def _url(port: int, host: str, path: str, userinfo: str, slash: str = "") -> str:
    at = f"{userinfo}@" if userinfo else ""
    prefix = f"/t/{TOKEN}" if path == "/tokX" else ""
    return f"http://{at}{host}:{port}{prefix}{path}{slash}"


def _query(urls: list[str]) -> set[str]:
    from rattler import Channel, Gateway, SourceConfig, Subdir

    clean, client = client_for_urls(urls)

    async def query() -> set[str]:
        with tempfile.TemporaryDirectory(prefix="rocmlock-routing-") as cache:
            gateway = Gateway(cache_dir=Path(cache), client=client,
                              default_config=SourceConfig(cache_action="no-cache"))
            result = await gateway.query([Channel(u) for u in clean], [Subdir("linux-64"), Subdir("noarch")],
                                         ["pytorch"], recursive=False)
            return {rec.channel or "" for per_spec in result for rec in per_spec}

    return asyncio.run(query())


@pytest.mark.parametrize("slash", ["", "/"], ids=["no-trailing-slash", "trailing-slash"])
def test_each_channel_on_one_host_gets_its_own_credentials_and_no_other(
        server: tuple[int, list[tuple[str, str, str | None]]], slash: str) -> None:
    port, seen = server
    seen.clear()
    urls = [_url(port, host, path, userinfo, slash) for (host, path), (userinfo, _) in WANTS.items()]
    found = _query(urls)
    assert len(found) == len(WANTS), found  # every channel answered with its records
    by_channel = {(host, path) for host, path, _ in seen}
    assert by_channel == set(WANTS), by_channel
    wrong = [(host, path, auth) for host, path, auth in seen if auth != WANTS[(host, path)][1]]
    assert not wrong, f"a channel was sent another's credential (or one it does not want): {wrong}"


def test_a_channel_listed_alone_sends_nothing_to_its_neighbours(
        server: tuple[int, list[tuple[str, str, str | None]]]) -> None:
    # Only the nested channel's secret is known: the outer one must not receive it (it is not below /org/teamX/),
    # and the open sibling must be read without credentials.
    port, seen = server
    seen.clear()
    team = _url(port, "127.0.0.1", "/org/teamX", WANTS[("127.0.0.1", "/org/teamX")][0])
    organic = _url(port, "127.0.0.1", "/organic", "")
    assert len(_query([team, organic])) == 2
    assert {(h, p, a) for h, p, a in seen} == {("127.0.0.1", "/org/teamX", WANTS[("127.0.0.1", "/org/teamX")][1]),
                                              ("127.0.0.1", "/organic", None)}
