"""A directory served like Python's ``http.server`` does (a bare 304, no Last-Modified, for If-Modified-Since),
with ``Cache-Control: no-cache`` on every 200 so a client must revalidate each time it reads a cached file: the
moment rattler's cached shard index goes stale no longer depends on the clock. Every GET goes to a log file.

Run as a process (py-rattler holds the GIL while it waits; an in-process server would not answer):
``python tests/bare304.py ROOT LOG`` prints ``serving http://127.0.0.1:<port>`` once listening.
"""

from __future__ import annotations

import sys
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class Bare304Handler(SimpleHTTPRequestHandler):
    log_path: Path

    def end_headers(self) -> None:
        if self._status == 200:
            self.send_header("Cache-Control", "no-cache")
        super().end_headers()

    def send_response(self, code: int, message: str | None = None) -> None:
        self._status = code
        super().send_response(code, message)

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        conditional = "conditional" if "If-Modified-Since" in self.headers else "plain"
        with self.log_path.open("a") as log:
            log.write(f"{self.command} {self.path} {int(code)} {conditional}\n")

    def log_message(self, format: str, *args: object) -> None:
        pass


def main() -> None:
    root, log = Path(sys.argv[1]), Path(sys.argv[2])
    handler = partial(type("H", (Bare304Handler,), {"log_path": log}), directory=str(root))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    print(f"serving http://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
