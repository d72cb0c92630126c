"""A local stand-in for PyPI and GitHub: an HTTP server on 127.0.0.1 answering scripted responses.

PyPI's JSON API shape (``/pypi/<name>/json``: ``info.version``, ``info.requires_dist``, ``releases`` with
``filename``/``url``/``packagetype``/``digests.sha256``/``yanked`` per file) follows Warehouse's
``warehouse/legacy/api/json.py`` (``json_project``). Sdists are built by the test in memory.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import threading
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Reply:
    """One scripted answer: status and body.

    ``hold``: answer only once the test sets this event (at most 60 s): a reply that comes after the client gave
    up, however slow the machine, with no wall-time threshold in the test.
    """

    status: int = 200
    body: bytes = b""
    hold: threading.Event | None = None
    content_type: str = "application/octet-stream"
    # When set, the Authorization header this reply needs (else 401).
    authorization: str | None = None
    # Extra response headers (GitHub's Link header for paging).
    headers: tuple[tuple[str, str], ...] = ()


class FakeUpstream:
    """Routes path -> replies; each request takes the next reply, the last one repeats."""

    def __init__(self) -> None:
        self.routes: dict[str, list[Reply]] = {}
        self.hits: Counter[str] = Counter()
        self.seen_auth: dict[str, str | None] = {}
        self.url = ""

    def add(self, path: str, *replies: Reply) -> None:
        self.routes[path] = list(replies)

    def add_json(self, path: str, data: Any) -> None:
        self.add(path, Reply(body=json.dumps(data).encode(), content_type="application/json"))

    def add_project(
        self,
        name: str,
        releases: Mapping[str, Sequence[dict[str, Any]]],
        latest: str | None = None,
        requires_dist: Sequence[str] = (),
    ) -> None:
        """A PyPI project; ``releases`` maps version -> files (see :meth:`file`)."""
        info = {
            "name": name,
            "version": latest or max(releases, key=_key),
            "requires_dist": list(requires_dist),
        }
        self.add_json(
            f"/pypi/{name}/json",
            {"info": info, "releases": {v: list(f) for v, f in releases.items()}, "urls": []},
        )

    def file(
        self,
        filename: str,
        data: bytes | None = None,
        sha256: str | None = None,
        packagetype: str = "sdist",
        yanked: bool = False,
    ) -> dict[str, Any]:
        """A release file; with ``data`` it is served at /files/<filename> (``sha256`` may lie about it)."""
        if data is not None:
            self.add(f"/files/{filename}", Reply(body=data))
        digest = sha256 or hashlib.sha256(data or filename.encode()).hexdigest()
        return {
            "filename": filename,
            "url": f"{self.url}/files/{filename}",
            "packagetype": packagetype,
            "digests": {"sha256": digest},
            "yanked": yanked,
        }

    def reply(self, path: str, authorization: str | None = None) -> Reply:
        self.hits[path] += 1
        self.seen_auth[path] = authorization
        replies = self.routes.get(path)
        if not replies:
            return Reply(404, b"not found")
        reply = replies.pop(0) if len(replies) > 1 else replies[0]
        if reply.authorization is not None and authorization != reply.authorization:
            return Reply(401, b"unauthorized")
        return reply


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split(".") if p.isdigit())


def _handler(fake: FakeUpstream) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _answer(self, body: bool) -> None:
            reply = fake.reply(self.path.split("?", 1)[0], self.headers.get("Authorization"))
            if reply.hold is not None:
                reply.hold.wait(60)
            try:
                self.send_response(reply.status)
                self.send_header("Content-Type", reply.content_type)
                self.send_header("Content-Length", str(len(reply.body)))
                for name, value in reply.headers:
                    self.send_header(name, value)
                self.end_headers()
                if body:
                    self.wfile.write(reply.body)
            except (BrokenPipeError, ConnectionResetError):  # the client gave up (its timeout): fine
                pass

        def do_GET(self) -> None:
            self._answer(body=True)

        def do_HEAD(self) -> None:
            self._answer(body=False)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@contextmanager
def serve() -> Iterator[FakeUpstream]:
    """A running FakeUpstream; ``fake.url`` is ``http://127.0.0.1:<port>``."""
    fake = FakeUpstream()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(fake))
    server.daemon_threads = True
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()


def sdist(name: str, version: str, pyproject: str | bytes) -> bytes:
    """A gzipped sdist ``<name>-<version>.tar.gz`` with ``pyproject`` (text, or bytes as they are) as its
    pyproject.toml."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for member, text in (
            ("pyproject.toml", pyproject),
            ("PKG-INFO", f"Name: {name}\nVersion: {version}\n"),
        ):
            data = text if isinstance(text, bytes) else text.encode()
            info = tarfile.TarInfo(f"{name}-{version}/{member}")
            info.size = len(data)
            info.mtime = 0
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def closed_port_url() -> str:
    """A URL on 127.0.0.1 where nothing listens (connection refused: 'unreachable')."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def network_args(fake_url: str, github: str | None = None, retries: int = 1) -> list[str]:
    """The CLI options that point ``outdated``/``bump`` at the fake PyPI and GitHub, with short timeouts."""
    github = github or fake_url
    return ["--index-url", f"{fake_url}/pypi", "--github-url", github, "--github-api-url", f"{github}/api",
            "--github-raw-url", f"{github}/raw", "--timeout", "1", "--retries", str(retries), "--backoff", "0"]
