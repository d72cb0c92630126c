"""Device code read in one pass from a stream that cannot seek: a member of a package's tar (a ``.conda`` is a zstd
stream inside a zip), with bounded memory and no disk (issue 33: each ELF member used to be copied whole to
``$TMPDIR``, 4 GiB for a 128 KiB package, and a full ``/tmp`` was blamed on the package).

A code object, an AOTriton archive or an offload bundle file is read from its start, bundle after bundle. A host
library keeps its section headers at its end, after the ``.hip_fatbin`` section they locate, so the pass reads every
bundle of the whole file (searching it as :func:`rocmlock.gpu.offload.iter_bundles` searches a section, going on
past damage), notes where each ``.hip_fatbin`` name lies and keeps the section headers as they go by. At the end the
section's bundles are those of that chain which lie in it: what :func:`rocmlock.gpu.offload.read_fatbin` reads from
the same file mapped. Where the chain cannot stand for the section (a bundle-like header before the section running
into it, data that had to be passed unsearched), the file is unreadable, never free of device code.

Memory: a window of ``RETAIN`` bytes behind the reading point plus one chunk, the section headers (at most
``MAX_HEADERS`` bytes) and one entry per bundle found (at most ``MAX_RECORDS``).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Protocol

from rocmlock.gpu.offload import (
    COMPRESSED_MAGIC,
    PLAIN_MAGIC,
    Bundle,
    Found,
    OffloadError,
    iter_bundles,
    read_fatbin,
)

CHUNK = 1 << 20
RETAIN = 8 << 20  # more than a plain bundle's largest header (MAX_ENTRIES ids of MAX_ID bytes)
MAX_HEADERS = 16 << 20
MAX_RECORDS = 1 << 17
MAX_NAMES = 1 << 12
NAME = b".hip_fatbin\0"


class Readable(Protocol):
    def read(self, size: int = ..., /) -> bytes: ...


@dataclass
class _Tap:
    """What a host ELF's end will need, taken from every chunk as it passes: the section header table and where
    each ``.hip_fatbin`` name starts."""

    shoff: int
    length: int
    headers: bytearray = field(default_factory=bytearray)
    names: set[int] = field(default_factory=set)
    carry: bytes = b""

    def __call__(self, at: int, chunk: bytes) -> None:
        lo, hi = max(at, self.shoff), min(at + len(chunk), self.shoff + self.length)
        if lo < hi:
            self.headers[lo - self.shoff:hi - self.shoff] = chunk[lo - at:hi - at]
        text, origin = self.carry + chunk, at - len(self.carry)
        i = text.find(NAME)
        while i >= 0:
            if len(self.names) >= MAX_NAMES:
                raise OffloadError(f"more than {MAX_NAMES} '.hip_fatbin' names in it")
            self.names.add(origin + i)
            i = text.find(NAME, i + 1)
        self.carry = text[-(len(NAME) - 1):]


class Window:
    """A stream read forwards as a :class:`rocmlock.gpu.offload.Buffer`: bytes up to ``RETAIN`` behind the last
    read stay readable, anything earlier is gone (reading it is an OffloadError). ``tap`` sees every chunk."""

    def __init__(self, source: Readable, size: int, tap: _Tap | None = None, head: bytes = b"") -> None:
        self.source, self.size, self.tap = source, size, tap
        self.data, self.base, self.keep = bytearray(), 0, 0
        self.gaps: list[tuple[int, int]] = []  # ranges a search had to pass without looking
        if head:
            self._add(head)

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: slice) -> bytes:
        lo, hi = index.start, min(index.stop, self.size)
        if hi <= lo:
            return b""
        if lo < self.base:
            raise OffloadError(f"its data at offset {lo} would have to be read again (it is read in one pass)")
        self.keep = max(self.keep, lo - RETAIN)
        self._pull(hi)
        return bytes(self.data[lo - self.base:hi - self.base])

    def find(self, sub: bytes, start: int = 0, end: int | None = None, /) -> int:
        end = self.size if end is None else min(end, self.size)
        if start < self.base:
            self.gaps.append((start, self.base))
            start = self.base
        self.keep = max(self.keep, start)
        self._pull(end)
        i = self.data.find(sub, start - self.base, end - self.base)
        return i + self.base if i >= 0 else -1

    def drain(self) -> None:
        """Read the rest of the stream (through the tap), keeping none of it."""
        self.keep = self.size
        self._pull(self.size)

    def _pull(self, upto: int) -> None:
        while self.base + len(self.data) < upto:
            chunk = self.source.read(CHUNK)
            if not chunk:
                raise OffloadError(f"it ends at {self.base + len(self.data)} bytes of the {self.size} it claims")
            self._add(chunk)

    def _add(self, chunk: bytes) -> None:
        if self.tap is not None:
            self.tap(self.base + len(self.data), chunk)
        self.data += chunk
        cut = min(self.keep, self.base + len(self.data)) - self.base
        if cut > RETAIN or cut == len(self.data):
            del self.data[:cut]
            self.base += cut


def read_bundle_file(source: Readable, size: int, head: bytes) -> tuple[Bundle, ...]:
    """The bundles of an offload bundle file (``hipcc --genco``) read from a stream; ``head`` its first bytes."""
    return read_fatbin(Window(source, size, head=head))


# ----------------------------------------------------------------------------- a host ELF


def read_host_elf(source: Readable, size: int, head: bytes) -> tuple[Bundle, ...] | None:
    """The bundles of the ``.hip_fatbin`` section of the host ELF streamed from ``source`` (None without one);
    OffloadError as :func:`rocmlock.gpu.offload.read_fatbin` raises it, or when the pass cannot stand for it."""
    shoff, = struct.unpack_from("<Q", head, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", head, 0x3A)
    if shnum == 0:
        return None  # no section headers: nothing to find
    if shentsize < 64 or shstrndx >= shnum or shoff + shnum * shentsize > size:
        raise OffloadError("truncated or damaged ELF file (its section headers are not all there)")
    if shnum * shentsize > MAX_HEADERS:
        raise OffloadError(f"its section headers claim {shnum * shentsize} bytes (more than {MAX_HEADERS})")
    tap = _Tap(shoff, shnum * shentsize)
    window = Window(source, size, tap, head)
    records: list[Found] = []
    for found in iter_bundles(window, 0, size, go_on=True):
        if len(records) >= MAX_RECORDS:
            raise OffloadError(f"more than {MAX_RECORDS} offload bundles (or what looks like one) in it")
        records.append(found)
    window.drain()
    section = _section(tap, size, shentsize, shnum, shstrndx)
    return None if section is None else _in_section(records, window.gaps, *section)


def _section(tap: _Tap, size: int, shentsize: int, shnum: int, shstrndx: int) -> tuple[int, int] | None:
    headers = [struct.unpack_from("<IIQQQQ", tap.headers, i * shentsize) for i in range(shnum)]
    names = headers[shstrndx][4]
    for name, kind, _flags, _addr, offset, length in headers:
        if names + name not in tap.names:
            continue
        if kind == 8:  # SHT_NOBITS: no bytes in the file
            return None
        if offset + length > size:
            raise OffloadError(f"its .hip_fatbin section claims {length} bytes at offset {offset}, "
                               f"past the end of the file ({size} bytes)")
        return offset, offset + length
    return None


def _in_section(records: list[Found], gaps: list[tuple[int, int]], start: int, end: int) -> tuple[Bundle, ...]:
    """The chain of bundles read_fatbin finds in ``[start, end)``, from the records of the whole file's chain."""
    if any(lo < end and start < hi for lo, hi in gaps):
        raise OffloadError("part of its .hip_fatbin section was passed unsearched (after a damaged bundle)")
    out: list[Bundle] = []
    for found in records:
        if found.pos < start:
            if found.pos + found.size > start:
                raise OffloadError(f"what looks like a bundle at offset {found.pos} runs into its .hip_fatbin "
                                   "section")
            continue
        if found.pos + len(COMPRESSED_MAGIC if found.compressed else PLAIN_MAGIC) > end:
            break  # read_fatbin finds no magic that the section's end cuts
        if isinstance(found.bundle, OffloadError):  # offsets in the message: from the section's start
            raise OffloadError(str(found.bundle).replace(f"at offset {found.pos}:",
                                                         f"at offset {found.pos - start}:", 1))
        if found.pos + found.size > end:
            raise OffloadError(f"{'compressed ' if found.compressed else ''}bundle at offset {found.pos - start}: "
                               f"claims {found.size} bytes, but {end - found.pos} are left in the section")
        out.append(Bundle(found.pos - start, found.bundle.compression, found.bundle.version, found.bundle.targets))
    return tuple(out)
