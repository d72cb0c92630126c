"""Fetching a lock's packages straight into their places in a bundle, each byte hashed as it is written.

A package comes from a ``file://`` URL or a path (relative paths against the lock's directory, as pixi reads
them), which must be a regular file (a FIFO or a device would block or never end), or from the network
through rattler's client. Every download is watched: no byte for :attr:`Timeouts.read` seconds, or less than
:data:`STALL_BYTES` in :attr:`Timeouts.stall` seconds (a server that trickles), ends it with one line. The
defaults follow conda's ``remote_read_timeout_secs`` (60 s; pip's ``--timeout`` is 15 s) and a floor of 1 MB
per 5 minutes; ``pack --read-timeout/--stall-timeout`` change them. After a download is abandoned its writer
refuses further bytes, so nothing reaches the bundle's descriptor once the caller has closed it.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from rattler import RepoDataRecord

from rocmlock.errors import OperationError, RocmlockError
from rocmlock.util.credentials import mask_queries, mask_query, one_line, redact_text, redact_url
from rocmlock.util.fs import open_regular, stream_digest

CONCURRENT_DOWNLOADS = 8
CHUNK = 1 << 20
STALL_BYTES = 1_000_000

Progress = Callable[[int], None]


@dataclass(frozen=True)
class Timeouts:
    """Seconds without a byte (``read``), and seconds in which at least :data:`STALL_BYTES` must come (``stall``)."""

    read: float = 60.0
    stall: float = 300.0


DEFAULT_TIMEOUTS = Timeouts()


class _Overflow(Exception):
    """More bytes than the lock's size: stop before they reach the next member."""


class _Abandoned(Exception):
    """The download was given up (a timeout): its bytes go nowhere."""


class HashingWriter:
    """Writes a package's bytes at its place in the bundle and hashes them (``download_to_writer`` calls ``write``)."""

    def __init__(self, fd: int, offset: int, expected_size: int, on_bytes: Progress | None) -> None:
        self.fd, self.offset, self.expected_size, self.on_bytes = fd, offset, expected_size, on_bytes
        self.digest = hashlib.sha256()
        self.size = 0
        self.overflow = False
        self.abandoned = False
        self.last_byte = time.monotonic()
        self.error: OSError | None = None  # writing the bundle failed (a full disk): not the channel's fault

    def write(self, data: bytes) -> int:
        if self.abandoned:
            raise _Abandoned
        if self.size + len(data) > self.expected_size:  # never into the next member
            self.overflow = True
            raise _Overflow
        self.digest.update(data)
        view, done = memoryview(data), 0
        try:
            while done < len(data):
                done += os.pwrite(self.fd, view[done:], self.offset + self.size + done)
        except OSError as exc:
            self.error = exc
            raise
        self.size += len(data)
        self.last_byte = time.monotonic()
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


def _copy(src: Path, writer: HashingWriter) -> None:
    with open_regular(src, "pack reads packages only from files", hint="point the lock at the package file itself") \
            as fh:
        while chunk := fh.read(CHUNK):
            writer.write(chunk)


def _mismatch(record: RepoDataRecord, what: str) -> OperationError:
    return OperationError(f"{redact_url(record.url)}: {what}", hint="the channel's file changed since the lock "
                          "was made; lock again (`rocmlock lock --update`) or fix the channel")


async def _watched(download: Awaitable[None], writer: HashingWriter, timeouts: Timeouts, url: str) -> None:
    """``download``, given up (its writer abandoned) when it stops sending bytes or sends too few."""
    task = asyncio.ensure_future(download)
    window_start, window_size = time.monotonic(), 0
    poll = max(0.05, min(1.0, timeouts.read / 4, timeouts.stall / 4))
    while True:
        done, _ = await asyncio.wait({task}, timeout=poll)
        if done:
            return task.result()
        now = time.monotonic()
        problem = None
        if now - writer.last_byte >= timeouts.read:
            problem = f"no data for {timeouts.read:g} s (--read-timeout)"
        elif now - window_start >= timeouts.stall:
            if writer.size - window_size < STALL_BYTES:
                problem = f"less than {STALL_BYTES // 1_000_000} MB in {timeouts.stall:g} s (--stall-timeout)"
            window_start, window_size = now, writer.size
        if problem:
            writer.abandoned = True
            task.cancel()
            raise OperationError(f"cannot fetch {redact_url(url)}: {problem}; nothing was written",
                                 hint="check the channel's server, or raise the timeout on a slow link")


async def _fetch(record: RepoDataRecord, writer: HashingWriter, base: Path, client: Any,
                 limit: asyncio.Semaphore, timeouts: Timeouts) -> None:
    from rattler.package_streaming import download_to_writer

    local = _local_path(record.url, base)
    async with limit:
        writer.last_byte = time.monotonic()
        try:
            if local is not None:
                await asyncio.to_thread(_copy, local, writer)
            else:
                await _watched(download_to_writer(client, record.url, writer), writer, timeouts, record.url)
        except RocmlockError:
            raise
        except Exception as exc:  # noqa: BLE001 - rattler's and the OS's errors; the message names the file
            if writer.overflow:  # however rattler wrapped the writer's exception
                raise _mismatch(record, f"larger than the lock's size {writer.expected_size}") from None
            if writer.error is not None:  # the caller names the bundle
                raise writer.error from None
            raise OperationError(f"cannot fetch {redact_url(record.url)}: {one_line(redact_text(str(exc)))}",
                                 hint="check the channel is reachable and RATTLER_AUTH_FILE holds its "
                                      "credentials") from None
    if writer.size != writer.expected_size:
        raise _mismatch(record, f"{writer.size} bytes, the lock says {writer.expected_size}")
    expected = record.sha256.hex() if record.sha256 else ""
    if writer.digest.hexdigest() != expected:
        raise _mismatch(record, f"sha256 {writer.digest.hexdigest()} differs from the lock's {expected}")


def verify_local(records: list[RepoDataRecord], base: Path) -> None:
    """Each record whose package is a local file (a ``file://`` URL or a path against ``base``) checked against the
    lock's size and sha256 before rattler installs from it: rattler verifies the packages it downloads, but links
    one read from a directory as it finds it (a package changed in a channel directory after the lock was made was
    installed, its conda-meta still naming the lock's sha256; another package's bytes under the name panicked it)."""
    from concurrent.futures import ThreadPoolExecutor

    def one(record: RepoDataRecord, path: Path) -> None:
        # pixi writes a sha256 for every conda package; rattler_lock takes an md5 alone too, which is then what
        # is checked; a lock with neither says nothing the file could be checked against.
        kind, expected = ("sha256", record.sha256.hex()) if record.sha256 else \
            ("md5", record.md5.hex()) if record.md5 else ("", "")
        if not kind:
            raise OperationError(f"{redact_url(record.url)}: the lock records no sha256 or md5 for it, so the file "
                                 "cannot be checked; nothing was read", hint="lock again (`rocmlock lock` records "
                                                                             "the sha256 of every package)")
        try:
            with open_regular(path, "rattler installs packages only from files",
                              hint="point the lock at the package file itself") as fh:
                size = os.fstat(fh.fileno()).st_size
                if record.size is not None and size != record.size:
                    raise _mismatch(record, f"{size} bytes, the lock says {record.size}")
                got = stream_digest(fh, kind)
        except FileNotFoundError:
            raise _mismatch(record, "no such file") from None
        except OSError as exc:
            raise OperationError(f"{redact_url(record.url)}: cannot read: {exc.strerror}",
                                 hint="check its permissions") from None
        if got != expected:
            raise _mismatch(record, f"{kind} {got} differs from the lock's {expected}")

    local = [(r, path) for r in records if (path := _local_path(r.url, base)) is not None]
    with ThreadPoolExecutor(max_workers=4) as pool:  # hashlib lets go of the GIL for large updates
        for future in [pool.submit(one, r, path) for r, path in sorted(local, key=lambda item: item[0].url)]:
            future.result()  # the first (in URL order) that fails is the one named


def fetch_all(records: list[RepoDataRecord], fd: int, offsets: list[int], base: Path, client: Any,
              on_bytes: Progress | None, timeouts: Timeouts) -> None:
    """Every record's bytes into ``fd`` at its offset, each verified against the lock's size and sha256."""
    writers = [HashingWriter(fd, offset, int(r.size or 0), on_bytes) for r, offset in zip(records, offsets,
                                                                                          strict=True)]
    _fetch_into(records, writers, base, client, timeouts)


def fetch_each(records: list[RepoDataRecord], dests: list[Path], base: Path, client: Any,
               timeouts: Timeouts = DEFAULT_TIMEOUTS) -> None:
    """Every record's bytes into its own new file of ``dests``, verified as :func:`fetch_all` verifies them."""
    fds: list[int] = []
    try:
        for dest in dests:
            fds.append(os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        _fetch_into(records, [HashingWriter(fd, 0, int(r.size or 0), None) for r, fd in zip(records, fds, strict=True)],
                    base, client, timeouts)
    finally:
        for fd in fds:
            os.close(fd)


def _fetch_into(records: list[RepoDataRecord], writers: list[HashingWriter], base: Path, client: Any,
                timeouts: Timeouts) -> None:
    if client is None:
        from rattler import Client

        client = Client.default_client()

    async def run() -> None:
        limit = asyncio.Semaphore(CONCURRENT_DOWNLOADS)
        tasks = [asyncio.ensure_future(_fetch(r, w, base, client, limit, timeouts))
                 for r, w in zip(records, writers, strict=True)]
        try:
            await asyncio.gather(*tasks)
        finally:  # one failed: the others stop writing before the caller closes the bundle
            for writer in writers:
                writer.abandoned = True
            for task in tasks:
                task.cancel()

    try:
        asyncio.run(run())
    finally:
        for writer in writers:
            writer.abandoned = True


@dataclass(frozen=True)
class FileDownload:
    """An archive of unknown size (a PyPI wheel: the lock has its sha256 only) fetched into its own file."""

    url: str
    dest: Path
    sha256: str


MAX_WHEEL = 1 << 40


async def _fetch_file(item: FileDownload, client: Any, limit: asyncio.Semaphore, timeouts: Timeouts) -> None:
    from rattler.package_streaming import download_to_writer

    fd = os.open(item.dest, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
    writer = HashingWriter(fd, 0, MAX_WHEEL, None)
    shown = redact_url(mask_query(item.url))
    try:
        async with limit:
            writer.last_byte = time.monotonic()
            try:
                await _watched(download_to_writer(client, item.url, writer), writer, timeouts, shown)
            except RocmlockError:
                raise
            except Exception as exc:  # noqa: BLE001 - rattler's and the OS's errors; the message names the file
                if writer.error is not None:
                    raise writer.error from None
                raise OperationError(f"cannot fetch {shown}: {one_line(redact_text(mask_queries(str(exc))))}",
                                     hint="check the index is reachable") from None
    finally:
        writer.abandoned = True
        os.close(fd)
    if writer.digest.hexdigest() != item.sha256:
        raise OperationError(f"{shown}: sha256 {writer.digest.hexdigest()} differs from the lock's {item.sha256}",
                             hint="the index's file changed since the lock was made; lock again")


def fetch_files(items: list[FileDownload], client: Any, timeouts: Timeouts) -> None:
    """Every ``item`` into its ``dest`` (created, never replaced), each checked against its sha256."""
    if not items:
        return
    if client is None:
        from rattler import Client

        client = Client.default_client()

    async def run() -> None:
        limit = asyncio.Semaphore(CONCURRENT_DOWNLOADS)
        tasks = [asyncio.ensure_future(_fetch_file(item, client, limit, timeouts)) for item in items]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()

    asyncio.run(run())
