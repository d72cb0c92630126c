"""A small conda channel server for tests and the offline quickstart: a directory over HTTP with Basic auth.

It serves ``GET``/``HEAD`` of the channel directory and accepts Artifactory-style uploads
(``PUT /<channel>/<subdir>/<file>``, as py-rattler-build's ``upload_package_to_artifactory`` sends them),
re-indexing the subdir with rattler after each one (like Artifactory, a PUT replaces). Every request without the right credentials gets 401,
so a client with a bad password changes nothing. With ``--token-env`` every path must also start with an
anaconda.org-style ``/t/<token>`` (``http://127.0.0.1:<port>/t/<token>/<channel>``), else 404.

Run it as a process: ``python -m rocmlock.channel.serve DIR --channel NAME --user U --password-env VAR``;
it prints ``serving http://127.0.0.1:<port>/<channel>`` once listening (port 0 picks a free one).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import errno
import hmac
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from functools import partial
from http import HTTPStatus
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from rattler import Subdir
from rattler.index import index_fs

from rocmlock.errors import OperationError
from rocmlock.util.fs import write_atomic

_UPLOAD = re.compile(r"/(?P<channel>[^/]+)/(?P<subdir>[a-z0-9-]+)/(?P<file>[^/]+\.(?:conda|tar\.bz2))")
_INDEX_LOCK = threading.Lock()


class ChannelHandler(SimpleHTTPRequestHandler):
    """Serves ``root`` as ``/<channel>/...``; checks Basic (or Bearer) credentials on every request."""

    def __init__(self, *args: object, root: Path, channel: str, token: str, path_token: str | None = None,
                 **kwargs: object) -> None:
        self.root = root
        self.channel = channel
        self.token = token
        self.path_token = path_token
        super().__init__(*args, directory=str(root.parent), **kwargs)  # type: ignore[arg-type]

    def log_message(self, format: str, *args: object) -> None:
        # One line per request on stderr, never the Authorization header.
        sys.stderr.write(f"serve: {self.command} {self.path.split('?')[0]} -> {args[1] if len(args) > 1 else ''}\n")

    def _authorized(self) -> bool:
        header = self.headers.get("Authorization", "")
        expected = [f"Basic {self.token}", f"Bearer {base64.b64decode(self.token).decode().split(':', 1)[1]}"]
        if any(hmac.compare_digest(header, e) for e in expected):
            return True
        self.send_response(401)
        self.send_header("WWW-Authenticate", 'Basic realm="rocmlock channel"')
        self.send_header("Content-Length", "0")
        self.end_headers()
        return False

    def _strip_path_token(self, path: str) -> str | None:
        if self.path_token is None:
            return path
        prefix = f"/t/{self.path_token}/"
        return "/" + path[len(prefix):] if path.startswith(prefix) else None

    def translate_path(self, path: str) -> str:
        # Only the channel directory is visible, whatever its name on disk.
        clean = self._strip_path_token(path.split("?", 1)[0])
        if clean is None:
            return str(self.root / "__not_found__")
        prefix = f"/{self.channel}"
        if clean != prefix and not clean.startswith(prefix + "/"):
            return str(self.root / "__not_found__")
        return str(self.root / clean[len(prefix):].lstrip("/"))

    def send_response(self, code: int, message: str | None = None) -> None:
        super().send_response(code, message)
        if code == HTTPStatus.NOT_MODIFIED:
            # http.server answers If-Modified-Since with a bare 304; rattler then fails the sharded index
            # ("received unexpected status code (304 Not Modified)", conda/rattler#2719) unless the 304 says
            # what it validated. Real channel servers (nginx, S3, quetz) send these headers too.
            with contextlib.suppress(OSError):
                mtime = os.stat(self.translate_path(self.path)).st_mtime
                self.send_header("Last-Modified", self.date_time_string(int(mtime)))

    def do_GET(self) -> None:
        if self._authorized():
            super().do_GET()

    def do_HEAD(self) -> None:
        if self._authorized():
            super().do_HEAD()

    def _read_body(self) -> bytes:
        if "chunked" not in self.headers.get("Transfer-Encoding", "").lower():
            return self.rfile.read(int(self.headers.get("Content-Length", "0")))
        # reqwest streams file bodies with chunked transfer encoding.
        parts: list[bytes] = []
        while True:
            size = int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                self.rfile.readline()
                return b"".join(parts)
            parts.append(self.rfile.read(size))
            self.rfile.readline()

    def do_PUT(self) -> None:
        if not self._authorized():
            return
        match = _UPLOAD.fullmatch(self._strip_path_token(self.path.split("?", 1)[0]) or "")
        if match is None or match["channel"] != self.channel:
            self.send_error(404, "upload to /<channel>/<subdir>/<package file>")
            return
        data = self._read_body()
        target = self.root / match["subdir"] / match["file"]
        with _INDEX_LOCK:
            write_atomic(target, data)
            asyncio.run(index_fs(self.root, target_platform=Subdir(match["subdir"])))
        self.send_response(201)
        self.send_header("Content-Length", "0")
        self.end_headers()


class _Server(ThreadingHTTPServer):
    # socketserver listens with a backlog of 5 (TCPServer.request_queue_size, docs.python.org/3/library/
    # socketserver.html): a client opening more connections at once than the accepting thread takes in time
    # (pack fetches 8 packages at once) has its SYNs dropped and waits for TCP's retransmission one second later
    # (RFC 6298's initial RTO), which was most of a pack benchmark's time on a loaded machine (issue 43). nginx
    # listens with 511 on Linux (nginx.org/en/docs/http/ngx_http_core_module.html#listen); the kernel caps it
    # at net.core.somaxconn.
    request_queue_size = 128


def make_server(root: Path, channel: str, user: str, password: str, port: int = 0,
                path_token: str | None = None) -> ThreadingHTTPServer:
    """A server on 127.0.0.1 (``port`` 0: a free one) for ``root`` as ``/<channel>`` (or ``/t/<token>/<channel>``)."""
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    handler = partial(ChannelHandler, root=root.resolve(), channel=channel, token=token, path_token=path_token)
    return _Server(("127.0.0.1", port), handler)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rocmlock.channel.serve", description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path, help="the channel directory")
    parser.add_argument("--channel", required=True, help="URL path the channel is served under")
    parser.add_argument("--user", required=True)
    parser.add_argument("--password-env", required=True, help="environment variable holding the password")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--token-env", help="environment variable holding a /t/<token>/ path token to require")
    parser.add_argument("--pid-file", type=Path, help="write this process's pid here once the port is bound")
    args = parser.parse_args(argv)
    password = os.environ.get(args.password_env)
    if not password:
        print(f"error: ${args.password_env} is not set", file=sys.stderr)
        return 2
    path_token = os.environ.get(args.token_env) if args.token_env else None
    if args.token_env and not path_token:
        print(f"error: ${args.token_env} is not set", file=sys.stderr)
        return 2
    try:
        server = make_server(args.root, args.channel, args.user, password, args.port, path_token)
    except OSError as exc:  # EADDRINUSE: the same script started twice, or another program on the port
        print(f"error: cannot listen on 127.0.0.1:{args.port}: {exc.strerror}", file=sys.stderr)
        hint = "is this channel served already? stop that server first" if exc.errno == errno.EADDRINUSE else \
            "choose another --port"
        print(f"hint: {hint}", file=sys.stderr)
        return 1
    if args.pid_file is not None:  # only once the port is ours: a second start leaves the first one's pid
        write_atomic(args.pid_file, f"{os.getpid()}\n")
    where = f"t/{path_token}/{args.channel}" if path_token else args.channel
    print(f"serving http://127.0.0.1:{server.server_address[1]}/{where}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


@contextlib.contextmanager
def serving(root: Path, channel: str, user: str, password: str, timeout: float = 20.0,
            path_token: str | None = None) -> Iterator[str]:
    """Run the server as a separate process for the duration of the ``with``; yields the channel URL.

    A separate process (not a thread): py-rattler's blocking calls hold the GIL, so an in-process
    server would never answer them. Secrets travel through the environment, never argv.
    """
    env = {**os.environ, "ROCMLOCK_SERVE_PASSWORD": password, "ROCMLOCK_SERVE_TOKEN": path_token or ""}
    token_args = ["--token-env", "ROCMLOCK_SERVE_TOKEN"] if path_token else []
    proc = subprocess.Popen(
        [sys.executable, "-m", "rocmlock.channel.serve", str(root), "--channel", channel, "--user", user,
         "--password-env", "ROCMLOCK_SERVE_PASSWORD", *token_args],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
    )
    try:
        assert proc.stdout is not None
        ready: list[str] = []
        reader = threading.Thread(target=lambda: ready.append(proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
        reader.start()
        reader.join(timeout)
        if not ready or not ready[0].startswith("serving "):
            raise OperationError(f"the channel server did not start within {timeout:.0f}s")
        yield ready[0].split(" ", 1)[1].strip()
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    sys.exit(main())
