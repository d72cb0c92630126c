"""Workspaces as pixi leaves them: pixi.toml plus the pixi.lock pixi wrote, PyPI packages included.

The lock is written the way pixi writes it: rattler_lock serializes it (pixi 0.77 uses rattler_lock
0.32, which writes format v7). Conda records come from a real solve of the test channels; PyPI entries
carry what pixi records for an index wheel (``pypi: <url>``, name, version, sha256, requires_dist:
rattler_lock crates/rattler_lock/src/parse/models/v7/pypi_package_data.rs), source packages the
``conda_source: name[hash] @ path`` form pixi-build produces (see pixi's examples/pixi-build/*/pixi.lock).
The wheels are tiny real ones, served from a PEP 503 index on 127.0.0.1 so pip can install them.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import threading
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml
from rattler import Channel, LockFile, solve
from rocmlock.lock.lockfile import LockedEnvironment, LockedPlatform, LockedWorkspace, render_lockfile

FIXED = (2026, 1, 1, 0, 0, 0)


@dataclass(frozen=True)
class Wheel:
    name: str
    version: str
    requires: tuple[str, ...] = ()

    @property
    def filename(self) -> str:
        return f"{self.name.replace('-', '_')}-{self.version}-py3-none-any.whl"


def wheel_bytes(wheel: Wheel) -> bytes:
    """A minimal valid wheel (one module, METADATA, WHEEL, RECORD), byte-identical on every run."""
    mod, dist = wheel.name.replace("-", "_"), f"{wheel.name.replace('-', '_')}-{wheel.version}.dist-info"
    meta = "".join([f"Metadata-Version: 2.1\nName: {wheel.name}\nVersion: {wheel.version}\n",
                    *(f"Requires-Dist: {r}\n" for r in wheel.requires)])
    files = {f"{mod}/__init__.py": f"VERSION = '{wheel.version}'\n", f"{dist}/METADATA": meta,
             f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: rocmlock-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    files[f"{dist}/RECORD"] = "\n".join([*record, f"{dist}/RECORD,,"]) + "\n"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for path, text in files.items():
            zf.writestr(zipfile.ZipInfo(path, FIXED), text)
    return buf.getvalue()


def build_index(root: Path, wheels: list[Wheel]) -> dict[str, str]:
    """``root/files/*.whl`` and a PEP 503 ``root/simple/<name>/`` page per project; returns file -> sha256."""
    (root / "files").mkdir(parents=True, exist_ok=True)
    hashes: dict[str, str] = {}
    for wheel in wheels:
        data = wheel_bytes(wheel)
        (root / "files" / wheel.filename).write_bytes(data)
        hashes[wheel.filename] = hashlib.sha256(data).hexdigest()
    for name in sorted({w.name for w in wheels}):
        links = "".join(f'<a href="../../files/{w.filename}#sha256={hashes[w.filename]}">{w.filename}</a>\n'
                        for w in wheels if w.name == name)
        page = root / "simple" / name / "index.html"
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text(f"<!DOCTYPE html><html><body>\n{links}</body></html>\n")
    return hashes


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def serve(root: Path) -> Iterator[str]:
    """Serve ``root`` on 127.0.0.1 for the ``with``; yields the base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def pypi_entry(base: str, wheel: Wheel, sha256: str) -> dict[str, Any]:
    """A ``packages:`` entry as pixi records an index wheel (field order as rattler_lock writes it)."""
    entry: dict[str, Any] = {"pypi": f"{base}/files/{wheel.filename}", "name": wheel.name,
                             "version": wheel.version, "sha256": sha256, "index": f"{base}/simple"}
    if wheel.requires:
        entry["requires_dist"] = list(wheel.requires)
    return entry


def write_pixi_lock(path: Path, forge: Path, env: str, platform: LockedPlatform, conda_specs: list[str],
                    pypi: list[dict[str, Any]], indexes: list[str], extra_packages: list[dict[str, Any]] = ()
                    ) -> None:
    """pixi.lock at ``path``: ``env`` on ``platform`` with a solve of ``conda_specs`` plus ``pypi`` entries.

    ``extra_packages`` are further ``packages:`` entries (source packages) keyed like pixi keys them.
    """
    records = asyncio.run(solve([Channel(forge.as_uri())], conda_specs, platforms=[platform.subdir, "noarch"]))
    base = LockedWorkspace({platform.name: platform},
                           {env: LockedEnvironment((forge.as_uri() + "/",), {platform.name: list(records)})})
    data = yaml.safe_load(render_lockfile(base))
    locked_env = data["environments"][env]
    locked_env["indexes"] = indexes
    refs = locked_env["packages"][platform.name]
    for entry in [*pypi, *extra_packages]:
        key = "pypi" if "pypi" in entry else "conda_source"
        refs.append({key: entry[key]})
        data["packages"].append(entry)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    # Round-trip through rattler_lock so the text is exactly its serialization (what pixi writes).
    LockFile.from_path(path).to_path(path)
