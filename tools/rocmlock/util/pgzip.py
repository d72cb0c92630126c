"""A gzip writer that compresses on several threads and writes the same bytes whatever their number.

zlib deflates about 80 MB/s on one core whatever the level (issue 37's benchmark), which made the image layer
slower than installing the environment. As pigz does, the stream is cut into fixed chunks; each is deflated on
its own (zlib releases the GIL) with the previous chunk's last 32 KiB as its dictionary and ends with a sync
flush (byte-aligned, not final), the last one with the final block; the chunks are written in order between one
gzip header (no name, mtime 0) and the trailer (CRC-32 and length of all the data, RFC 1952). One gzip member:
``gzip -d``, Python's gzip, Go's compress/gzip (containerd, skopeo) read it. A chunk that does not compress is
stored. ``sha256`` is the digest of the uncompressed data (an image layer's diff_id). The output depends on the
data, the level and :data:`CHUNK` only.
"""

from __future__ import annotations

import hashlib
import os
import struct
import zlib
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Protocol, Self

from rocmlock.util.text import escape

# The version of the bytes: bumped whenever the same data would be written differently, so that what was cached
# with the earlier bytes (the debootstrap base's layer) is made again; tests/test_image_layer.py holds each
# version's bytes. 2: incompressible chunks as stored blocks written here, probed on 16 KiB. 3: level 5 by default.
FORMAT = 3
# The default level: podman's (containers/podman docs/source/markdown/options/compression-level.md: "for gzip it
# is 1-9 (inclusive) and has a default of 5"). On a 3.5 GB tree of Python packages (torch among them; 2026-12-07)
# level 5 wrote 1,032 MB in 46 s of wall time here, level 6 1,019 MB in 73 s, level 1 (go-containerregistry's
# default, gzip.BestSpeed in pkg/v1/tarball/layer.go) 1,153 MB in 27 s.
LEVEL = 5
CHUNK = 1 << 20
_WINDOW = 32 << 10
_PROBE = 16 << 10
_STORED_MAX = 0xFFFF
_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"  # deflate, no flags, mtime 0, no extra flags, OS unknown


def zlib_note() -> str | None:
    """A line for the user when this Python's zlib is zlib-ng (Fedora's system zlib): it deflates the same data to
    other bytes than stock zlib, by design (zlib-ng/zlib-ng#795), so a layer gets another digest than a build with
    stock zlib, though the same diff_id; None with stock zlib."""
    version = zlib.ZLIB_RUNTIME_VERSION
    if "zlib-ng" not in version:
        return None
    return (f"this Python's zlib is {escape(version[:60])}, which compresses to other bytes than stock zlib: "
            "the layer's digest (so the image's) differs from a build with stock zlib; its diff_id does not")


class Sink(Protocol):
    """Where the compressed bytes go: anything with ``write``."""

    def write(self, data: bytes, /) -> int: ...


def _incompressible(data: bytes | bytearray) -> bool:
    """Whether ``data`` looks like random bytes (GPU code, or already compressed: ROCm 7's device code bundles are
    zstd): its first 16 KiB do not shrink below 97 % at level 1 (0.2 ms; 64 KiB took 1.3 ms a chunk)."""
    sample = data[:_PROBE]
    return len(zlib.compress(sample, 1)) > 0.97 * len(sample)


def _stored(data: bytes | bytearray, last: bool) -> bytes:
    """``data`` as deflate's stored blocks (RFC 1951 3.2.4: a header byte with BFINAL and BTYPE 00, then, byte
    aligned, LEN and NLEN and the LEN bytes; at most 65,535 a block). Each chunk starts byte aligned (the previous
    one ended with a sync flush or stored blocks) and ends so. zlib's level 0 writes the same kind of blocks, sized
    by its buffers, after copying every byte through its window: 1.7 ms a MiB here against 0.1 ms."""
    view = memoryview(data)
    parts: list[bytes | memoryview] = []
    for start in range(0, len(view), _STORED_MAX):
        block = view[start:start + _STORED_MAX]
        final = last and start + _STORED_MAX >= len(view)
        parts += [struct.pack("<BHH", final, len(block), len(block) ^ 0xFFFF), block]
    if last and not view:
        parts.append(struct.pack("<BHH", 1, 0, 0xFFFF))  # an empty final block ends the stream
    return b"".join(parts)


def _deflate(data: bytes | bytearray, zdict: bytes, level: int, last: bool) -> bytes:
    # A chunk that does not compress (random bytes, or already compressed) is stored: deflating it costs a core
    # for nothing.
    if level == 0 or (data and _incompressible(data)):
        return _stored(data, last)
    comp = zlib.compressobj(level, zlib.DEFLATED, -15, 9, zlib.Z_DEFAULT_STRATEGY, zdict) if zdict else \
        zlib.compressobj(level, zlib.DEFLATED, -15, 9)
    return comp.compress(data) + comp.flush(zlib.Z_FINISH if last else zlib.Z_SYNC_FLUSH)


class Readable(Protocol):
    """Where :meth:`ParallelGzip.copy_from` reads: anything with ``readinto`` (a file opened with ``buffering=0``)."""

    def readinto(self, buffer: memoryview, /) -> int | None: ...


class ParallelGzip:
    """A write-only binary file: what is written reaches ``sink`` gzip-compressed (see the module)."""

    def __init__(self, sink: Sink, level: int = LEVEL, threads: int | None = None) -> None:
        self.sink = sink
        self.level = level
        self.workers = max(1, min(threads or os.cpu_count() or 1, 16))
        self.pool = ThreadPoolExecutor(self.workers)
        self.pending: deque[Future[bytes]] = deque()
        # The CRC-32 and sha256 of the data (an image layer's diff_id) on one more thread, in order.
        self.serial = ThreadPoolExecutor(1)
        self.sha256 = hashlib.sha256()
        self.chunk = bytearray(CHUNK)  # filled up to ``fill``
        self.fill = 0
        self.previous = b""
        self.crc = 0
        self.size = 0
        sink.write(_HEADER)

    def write(self, data: bytes | bytearray | memoryview) -> int:
        view = memoryview(data).cast("B")
        done = 0
        while done < len(view):
            if self.fill == CHUNK:  # never the last chunk: that one is sent by close()
                self._submit_full()
            n = min(CHUNK - self.fill, len(view) - done)
            self.chunk[self.fill:self.fill + n] = view[done:done + n]
            self.fill += n
            done += n
        return len(view)

    def copy_from(self, fh: Readable, size: int) -> int:
        """At most ``size`` bytes of ``fh`` read straight into the chunks (an unbuffered file: one ``read`` system
        call per MiB, no copy in Python); returns how many there were (fewer at the file's end)."""
        left = size
        while left:
            full = self.fill == CHUNK  # sent only once a byte follows it: the last chunk is close()'s
            chunk = bytearray(CHUNK) if full else self.chunk
            start = 0 if full else self.fill
            with memoryview(chunk) as whole, whole[start:start + min(CHUNK - start, left)] as room:
                got = fh.readinto(room)
            if not got:
                break
            if full:
                self._submit(self.chunk, last=False)
                self.chunk = chunk
            self.fill = start + got
            left -= got
        return size - left

    def _submit_full(self) -> None:
        chunk, self.chunk, self.fill = self.chunk, bytearray(CHUNK), 0  # handed to the threads, never changed
        self._submit(chunk, last=False)

    def _digest(self, chunk: bytes | bytearray) -> None:
        self.crc = zlib.crc32(chunk, self.crc)
        self.sha256.update(chunk)

    def _submit(self, chunk: bytes | bytearray, last: bool) -> None:
        self.serial.submit(self._digest, chunk)
        self.size += len(chunk)
        self.pending.append(self.pool.submit(_deflate, chunk, self.previous, self.level, last))
        self.previous = bytes(chunk[-_WINDOW:])
        while len(self.pending) > 2 * self.workers:
            self.sink.write(self.pending.popleft().result())

    def flush(self) -> None:
        """Nothing to do: the data is compressed in whole chunks (a file object needs the method)."""

    def close(self) -> None:
        try:
            self._submit(bytes(self.chunk[:self.fill]), last=True)
            while self.pending:
                self.sink.write(self.pending.popleft().result())
            self.serial.shutdown(wait=True)
            self.sink.write(struct.pack("<II", self.crc, self.size & 0xFFFFFFFF))
        finally:
            self._stop()

    def _stop(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.serial.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.close()
        else:
            self._stop()
