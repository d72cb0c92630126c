"""``rocmlock pack``: one locked environment as a self-contained, verified bundle for nodes without a channel.

``pack_environment`` reads top to bottom as the pipeline it is: select the environment's records from
pixi.lock (no solve) -> describe its GPU target and ROCm version -> fetch every package into a staging
channel, hashing each byte as it is written and comparing with the lock's sha256 -> index the channel with
rattler -> check the index lists exactly the locked packages -> write environment.yml and the metadata ->
(optionally) add the offline installer -> write the deterministic tar atomically. Nothing is left behind
when a step fails. The format is :mod:`rocmlock.bundle`'s (pixi-pack's layout).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any
from urllib.parse import unquote, urlsplit

from rattler import RepoDataRecord

from rocmlock import __version__
from rocmlock.bundle import (
    CHANNEL_DIR,
    ENVIRONMENT_FILE,
    INSTALLER_DIR,
    PIXI_PACK_METADATA,
    ROCMLOCK_METADATA,
    BundledPackage,
    BundleMetadata,
    index_mismatch,
    render_environment_yml,
    render_pixi_pack_json,
    write_tar,
)
from rocmlock.credentials import redact_text, redact_url
from rocmlock.errors import OperationError
from rocmlock.install import select_records
from rocmlock.lockfile import LockedPlatform
from rocmlock.targets import all_targets, minor_version

PROBE = "bin/rocm-env-check"
CONCURRENT_DOWNLOADS = 8
CHUNK = 1 << 20

Progress = Callable[[int], None]


@dataclass(frozen=True)
class PackResult:
    """What ``rocmlock pack`` wrote."""

    output: Path
    metadata: BundleMetadata
    size: int
    installer: bool

    def to_dict(self) -> dict[str, Any]:
        meta = self.metadata
        return {"output": str(self.output), "environment": meta.environment, "platform": meta.platform,
                "subdir": meta.subdir, "gpu_target": meta.gpu_target, "gpu_isa": meta.gpu_isa,
                "rocm_version": meta.rocm_version, "lock_sha256": meta.lock_sha256, "packages": len(meta.packages),
                "bytes": self.size, "installer": self.installer}


def pack_environment(lock_path: Path, environment: str, platform: str | None = None,
                     output: Path | None = None, with_installer: bool = False, client: Any = None,
                     progress: Callable[[int, int], Progress] | None = None) -> PackResult:
    """Pack ``environment`` on ``platform`` of the lock file ``lock_path`` into the tar ``output``.

    ``client`` is the ``rattler.Client`` that downloads (default: rattler's authenticated default client,
    credentials from ``RATTLER_AUTH_FILE``); ``progress(total_bytes, count)`` returns a callback that is
    given each downloaded chunk's size.
    """
    locked_platform, records = select_records(lock_path, environment, platform)
    metadata = _describe(environment, locked_platform, records, _sha256_file(lock_path))
    out = (output or Path(f"{environment}-{locked_platform.name}.tar")).absolute()
    out.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=".rocmlock-pack-", dir=out.parent))
    try:
        channel = stage / CHANNEL_DIR
        on_bytes = progress(sum(r.size or 0 for r in records), len(records)) if progress else None
        _fetch_all(records, channel, lock_path.parent, client, on_bytes)
        _index(channel)
        _check_index(channel, metadata.packages)
        _write_texts(stage, metadata)
        if with_installer:
            from rocmlock.installer import add_installer

            add_installer(stage / INSTALLER_DIR, metadata)
        size = _write_bundle(stage, out)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return PackResult(out, metadata, size, with_installer)


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


# ----------------------------------------------------------------------------- describe


def _gpu_of(platform: LockedPlatform, records: list[RepoDataRecord]) -> tuple[str | None, str | None]:
    """(gfx, ISA): the ``amdgpu-target`` mutex's build string, and ``__amdgpu_arch`` of the lock platform."""
    gfx = next((str(r.build) for r in records if r.name.normalized == "amdgpu-target"), None)
    isa = next((v.split("=")[1] for v in platform.virtual_packages if v.startswith("__amdgpu_arch=")), None)
    if gfx and isa is None and gfx in all_targets():
        isa = all_targets()[gfx].isa
    return gfx, isa


def _bundled(record: RepoDataRecord) -> BundledPackage:
    if record.sha256 is None:
        raise OperationError(f"{record.file_name}: the lock has no sha256 for it, so it cannot be verified",
                             hint="lock again with `rocmlock lock` (or `pixi lock`), which records sha256")
    return BundledPackage(record.subdir, record.file_name, record.name.normalized, str(record.version),
                          str(record.build), record.sha256.hex(), int(record.size or 0))


def _describe(environment: str, platform: LockedPlatform, records: list[RepoDataRecord],
              lock_sha256: str) -> BundleMetadata:
    gfx, isa = _gpu_of(platform, records)
    rocm = next((minor_version(str(r.version)) for r in records if r.name.normalized == "rocm-version"), None)
    probe = PROBE if any(r.name.normalized == "rocm-env-check" for r in records) else None
    packages = tuple(sorted((_bundled(r) for r in records), key=lambda p: (p.subdir, p.filename)))
    subdir = platform.subdir
    return BundleMetadata(environment, platform.name, subdir, gfx, isa, rocm or None, lock_sha256, __version__,
                          probe, packages)


# ----------------------------------------------------------------------------- fetch


class _HashingWriter:
    """A file that hashes what is written to it (rattler's ``download_to_writer`` calls ``write``)."""

    def __init__(self, fh: IO[bytes], on_bytes: Progress | None) -> None:
        self.fh, self.on_bytes = fh, on_bytes
        self.digest = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.digest.update(data)
        self.fh.write(data)
        self.size += len(data)
        if self.on_bytes:
            self.on_bytes(len(data))
        return len(data)


def _local_path(url: str, base: Path) -> Path | None:
    """The file a ``file://`` URL or a path (relative to the lock) names; None for a remote URL."""
    parts = urlsplit(url)
    if parts.scheme == "file":
        return Path(unquote(parts.path))
    if len(parts.scheme) <= 1:  # no scheme, or a Windows drive letter
        return base / url
    return None


def _copy(src: Path, writer: _HashingWriter) -> None:
    with src.open("rb") as fh:
        while chunk := fh.read(CHUNK):
            writer.write(chunk)


async def _fetch(record: RepoDataRecord, channel: Path, base: Path, client: Any, on_bytes: Progress | None,
                 limit: asyncio.Semaphore) -> None:
    from rattler.package_streaming import download_to_writer

    dest = channel / record.subdir / record.file_name
    local = _local_path(record.url, base)
    async with limit:
        with dest.open("wb") as fh:
            writer = _HashingWriter(fh, on_bytes)
            try:
                if local is not None:
                    await asyncio.to_thread(_copy, local, writer)
                else:
                    await download_to_writer(client, record.url, writer)
            except Exception as exc:  # noqa: BLE001 - rattler's and the OS's errors; the message names the file
                raise OperationError(f"cannot fetch {redact_url(record.url)}: {redact_text(str(exc))}",
                                     hint="check the channel is reachable and RATTLER_AUTH_FILE holds its "
                                          "credentials") from None
    expected = record.sha256.hex() if record.sha256 else ""
    if writer.digest.hexdigest() != expected:
        raise OperationError(f"{redact_url(record.url)}: sha256 {writer.digest.hexdigest()} differs from the "
                             f"lock's {expected}", hint="the channel's file changed since the lock was made; "
                             "lock again (`rocmlock lock --update`) or fix the channel")


def _fetch_all(records: list[RepoDataRecord], channel: Path, base: Path, client: Any,
               on_bytes: Progress | None) -> None:
    """Every record's file into ``channel/<subdir>/``, each verified against the lock's sha256."""
    if client is None:
        from rattler import Client

        client = Client.default_client()
    for subdir in {r.subdir for r in records} | {"noarch"}:  # rattler's indexer always wants noarch
        (channel / subdir).mkdir(parents=True, exist_ok=True)

    async def fetch_all() -> None:
        limit = asyncio.Semaphore(CONCURRENT_DOWNLOADS)
        await asyncio.gather(*(_fetch(r, channel, base, client, on_bytes, limit) for r in records))

    asyncio.run(fetch_all())


# ----------------------------------------------------------------------------- index


def _index(channel: Path) -> None:
    """repodata.json per subdir with rattler's indexer, then only what pixi-unpack reads.

    pixi-unpack reads ``repodata.json`` of every directory of ``channel/`` (src/unpack.rs
    ``collect_packages``), so the indexer's scratch directory goes. ``indexed_timestamp`` is the time the
    indexer ran: dropped so that two packs of one lock are byte-identical (the solver falls back to the
    package's own ``timestamp``; nothing is solved from a bundle anyway).
    """
    from rattler.index import index_fs

    asyncio.run(index_fs(channel, write_zst=False, write_shards=False, force=True))
    for entry in channel.iterdir():
        if not (entry.is_dir() and (entry / "repodata.json").is_file()):
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    for repodata in sorted(channel.glob("*/repodata.json")):
        data = json.loads(repodata.read_text())
        for key in ("packages", "packages.conda"):
            for rec in data.get(key, {}).values():
                rec.pop("indexed_timestamp", None)
        repodata.write_text(json.dumps(data, sort_keys=True, separators=(",", ":")))


def _check_index(channel: Path, packages: tuple[BundledPackage, ...]) -> None:
    problem = index_mismatch(channel, packages)
    if problem:
        raise OperationError(problem, hint="the package file does not match its lock record; lock again")


# ----------------------------------------------------------------------------- write


def _write_texts(stage: Path, metadata: BundleMetadata) -> None:
    (stage / ENVIRONMENT_FILE).write_text(render_environment_yml(metadata.environment, metadata.packages))
    (stage / PIXI_PACK_METADATA).write_text(render_pixi_pack_json(metadata.subdir))
    (stage / ROCMLOCK_METADATA).write_text(metadata.render())


def _write_bundle(stage: Path, out: Path) -> int:
    """The tar of ``stage`` at ``out``, through a temporary file beside it and ``os.replace``."""
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            write_tar(stage, fh)
            fh.flush()
            os.fsync(fh.fileno())
            size = fh.tell()
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes it 0600; a bundle is shared like any file
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return size
