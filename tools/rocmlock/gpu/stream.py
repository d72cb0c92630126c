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

A kpacked library (:mod:`rocmlock.gpu.kpack`) is read in the same pass: its ``.rocm_kpack_ref`` marker from the
file's last ``TAIL`` bytes (kpack's tool appends the section at the end: 0x6000 of a 0x8380-byte library in
tests/kpack_fixtures/real/lib/libaxpy.so, past the section headers), its fat binary wrappers from the 24 bytes kept
at each ``HIPK``/``HIPF`` magic seen. A ``.kpack`` archive keeps its TOC (at most ``kpack.TOC_LIMIT``), the first 64
bytes at each ELF magic (a blob of scheme ``none`` is a code object) and, for scheme ``zstd-per-kernel``, the first
64 bytes of each frame of the blob starting at ``ZSTD_AT``, where kpack's writer puts it (after the 16-byte header,
padded: tests/kpack_fixtures/real/axpy_lib_gfx942-zstd.kpack). What lies elsewhere cannot be followed in one pass:
the file is unreadable, never free of device code.

Memory: a window of ``RETAIN`` bytes behind the reading point plus one chunk, the section headers (at most
``MAX_HEADERS`` bytes) and one entry per bundle found (at most ``MAX_RECORDS``); for kpack ``2 * TAIL`` bytes, at most
``MAX_MARKS`` kept heads and wrappers, one zstd frame's first ``ZSTD_KEEP`` bytes.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from rocmlock.gpu import kpack
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
NAMES = (NAME, kpack.MARKER_SECTION + b"\0", kpack.WRAPPER_SECTION + b"\0")
# Regular expressions with a common literal prefix: one search for several needles, at the speed of one bytes.find
# (1 MiB of zeros: 0.3 ms for the three names, where three finds take 1.0; one pattern for names and magics: 10 ms).
_NAMES = re.compile(rb"\.(?:" + b"|".join(re.escape(name[1:-1]) for name in NAMES) + rb")\0")
_WRAPPER_MAGIC = re.compile(rb"HIP[FK]")  # kpack.HIPF, kpack.HIPK
_ELF_MAGIC = re.compile(re.escape(b"\x7fELF"))
TAIL = 1 << 20
MAX_MARKS = 1 << 17
WRAPPER = 24
ZSTD_AT = 64
ZSTD_KEEP = kpack.FRAME_KEEP  # a zstd frame's header and its first block (at most 128 KiB)


class Readable(Protocol):
    def read(self, size: int = ..., /) -> bytes: ...


@dataclass
class _Tap:
    """What a host ELF's end will need, taken from every chunk as it passes: the section header table and where
    each ``.hip_fatbin`` name starts."""

    shoff: int
    length: int
    headers: bytearray = field(default_factory=bytearray)
    names: dict[bytes, set[int]] = field(default_factory=lambda: {name: set() for name in NAMES})
    wrappers: _Marks = field(init=False)
    tail: bytearray = field(default_factory=bytearray)
    end: int = 0

    def __post_init__(self) -> None:
        self.wrappers = _Marks(_WRAPPER_MAGIC, WRAPPER)

    def __call__(self, at: int, chunk: bytes) -> None:
        lo, hi = max(at, self.shoff), min(at + len(chunk), self.shoff + self.length)
        if lo < hi:
            self.headers[lo - self.shoff:hi - self.shoff] = chunk[lo - at:hi - at]
        text, origin = self.wrappers(at, chunk)
        for match in _NAMES.finditer(text):
            seen = self.names[match.group()]
            seen.add(origin + match.start())
            if len(seen) > MAX_NAMES:
                raise OffloadError(f"more than {MAX_NAMES} '{match.group()[:-1].decode()}' names in it")
        self.tail += chunk
        if len(self.tail) > 2 * TAIL:
            del self.tail[:len(self.tail) - TAIL]
        self.end = at + len(chunk)


class _Marks:
    """Every place ``magic`` (a pattern of fixed-length magics that cannot overlap) matches in a stream, with the
    ``width`` bytes from there (fewer at its end); past ``MAX_MARKS`` of them, ``overflow``."""

    def __init__(self, magic: re.Pattern[bytes], width: int) -> None:
        self.magic, self.width = magic, width
        self.found: dict[int, bytes] = {}
        self.carry, self.end, self.overflow = b"", 0, False

    def __call__(self, at: int, chunk: bytes) -> tuple[bytes, int]:
        """Take ``chunk`` (at offset ``at``); the text searched (the carry, then ``chunk``) and where it starts."""
        text, origin = self.carry + chunk, at - len(self.carry)
        self._find(text, origin, len(text) - self.width)
        self.carry, self.end = text[-(self.width - 1):], at + len(chunk)
        return text, origin

    def finish(self) -> None:
        """Take the magics in the stream's last ``width - 1`` bytes."""
        self._find(self.carry, self.end - len(self.carry), len(self.carry))

    def _find(self, text: bytes, origin: int, last: int) -> None:
        for match in self.magic.finditer(text):
            i = match.start()
            if i > last:
                break
            if not self.overflow and origin + i not in self.found:
                self.overflow = len(self.found) >= MAX_MARKS
                self.found[origin + i] = text[i:i + self.width]

    def at(self, lo: int, hi: int, what: str) -> bytes:
        """The bytes ``[lo, hi)`` (``hi - lo <= width``) when a magic starts at ``lo``; empty when none does."""
        if lo not in self.found and self.overflow:
            raise kpack.KpackError(f"more than {MAX_MARKS} {what} in it (it is read in one pass)")
        return self.found.get(lo, b"")[:hi - lo]


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


def read_host_elf(source: Readable, size: int, head: bytes) -> tuple[Bundle, ...] | kpack.Marker | None:
    """The bundles of the ``.hip_fatbin`` section of the host ELF streamed from ``source`` (None without one), or its
    kpack marker when it has a ``.rocm_kpack_ref`` section; OffloadError as :func:`rocmlock.gpu.offload.read_fatbin`
    raises it, or when the pass cannot stand for it (KpackError for the marker)."""
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

    def section(wanted: bytes) -> tuple[int, int] | None:
        return _section(tap, size, shentsize, shnum, shstrndx, wanted + b"\0")

    if (marker := section(kpack.MARKER_SECTION)) is not None:
        if marker[0] < tap.end - len(tap.tail):
            raise kpack.KpackError(f"its .rocm_kpack_ref section lies more than {TAIL >> 20} MiB before its end "
                                   "(kpack appends it there; it is read in one pass)")
        return kpack.read_marker(_Kept(tap, size), section)
    where = section(NAME[:-1])
    return None if where is None else _in_section(records, window.gaps, *where)


class _Kept:
    """What the pass kept of a host ELF, as a :class:`rocmlock.gpu.offload.Buffer` for :func:`kpack.read_marker`:
    its tail, and a fat binary wrapper's 24 bytes where a magic was seen (none elsewhere: empty)."""

    def __init__(self, tap: _Tap, size: int) -> None:
        self.tap, self.size, self.start = tap, size, tap.end - len(tap.tail)

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: slice) -> bytes:
        lo, hi = index.start, min(index.stop, self.size)
        if lo >= self.start:
            return bytes(self.tap.tail[lo - self.start:hi - self.start])
        return self.tap.wrappers.at(lo, hi, "fat binary wrapper magics")

    def find(self, sub: bytes, start: int = 0, end: int | None = None, /) -> int:
        raise kpack.KpackError("searched again (it is read in one pass)")


def _section(tap: _Tap, size: int, shentsize: int, shnum: int, shstrndx: int,
             wanted: bytes = NAME) -> tuple[int, int] | None:
    headers = [struct.unpack_from("<IIQQQQ", tap.headers, i * shentsize) for i in range(shnum)]
    names = headers[shstrndx][4]
    for name, kind, _flags, _addr, offset, length in headers:
        if names + name not in tap.names[wanted]:
            continue
        if kind == 8:  # SHT_NOBITS: no bytes in the file
            return None
        if offset + length > size:
            raise OffloadError(f"its {wanted[:-1].decode()} section claims {length} bytes at offset {offset}, "
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


# ----------------------------------------------------------------------------- a kpack archive


def read_kpack_archive(source: Readable, size: int, head: bytes) -> kpack.Archive:
    """The ``.kpack`` archive of ``size`` bytes streamed from ``source`` (``head``: its first bytes), as
    :func:`rocmlock.gpu.kpack.read_archive` reads it mapped; KpackError when it is damaged or cannot be followed."""
    toc_at = kpack.archive_header(head, size)
    heads, chain, toc = _Marks(_ELF_MAGIC, 64), _ZstdChain(ZSTD_AT), bytearray()
    at, chunk = 0, head
    while True:
        heads(at, chunk)
        chain(at, chunk)
        if at + len(chunk) > toc_at:
            toc += chunk[max(0, toc_at - at):]
        at += len(chunk)
        if at >= size:
            break
        chunk = source.read(min(CHUNK, size - at))
        if not chunk:
            raise kpack.KpackError(f"it ends at {at} bytes of the {size} it claims")
    heads.finish()
    parsed = kpack.parse_toc(bytes(toc))
    return kpack.build_archive(parsed, kpack.blob_reader(_Heads(heads, size), parsed, chain.reader(size)))


class _Heads:
    """A stream's ELF heads as a :class:`rocmlock.gpu.offload.Buffer` for a blob's first bytes."""

    def __init__(self, marks: _Marks, size: int) -> None:
        self.marks, self.size = marks, size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: slice) -> bytes:
        return self.marks.at(index.start, min(index.stop, self.size), "ELF magics")

    def find(self, sub: bytes, start: int = 0, end: int | None = None, /) -> int:
        raise kpack.KpackError("searched again (it is read in one pass)")


class _ZstdChain:
    """A zstd-per-kernel blob walked as the stream passes, from ``start``: its kernel count, then per frame the offset
    of its u32 size, the size and the first 64 bytes it decompresses to."""

    def __init__(self, start: int) -> None:
        self.start, self.next = start, start
        self.count: int | None = None
        self.frames: list[tuple[int, int, bytes | str]] = []
        self.field, self.kept = bytearray(), bytearray()
        self.left = -1  # bytes of the current frame still to pass; -1: reading a u32
        self.frame_at = self.length = 0
        self.done = False

    def __call__(self, at: int, chunk: bytes) -> None:
        while not self.done and at <= self.next < at + len(chunk):
            i = self.next - at
            if self.left < 0:
                take = chunk[i:i + 4 - len(self.field)]
                self.field += take
                self.next += len(take)
                if len(self.field) == 4:
                    self._number(struct.unpack("<I", self.field)[0])
                    self.field.clear()
                continue
            take = chunk[i:i + self.left]
            self.kept += take[:ZSTD_KEEP - len(self.kept)]
            self.next += len(take)
            self.left -= len(take)
            if self.left == 0:
                self.frames.append((self.frame_at, self.length, kpack.zstd_head(bytes(self.kept))))
                self.kept.clear()
                self.left = -1
                self.done = len(self.frames) >= min(self.count or 0, kpack.MAX_FRAMES)

    def _number(self, value: int) -> None:
        if self.count is None:
            self.count = value
            self.done = value == 0
            return
        self.frame_at, self.length, self.left = self.next - 4, value, value
        if value == 0:
            self.frames.append((self.frame_at, 0, kpack.zstd_head(b"")))
            self.left = -1
            self.done = len(self.frames) >= min(self.count, kpack.MAX_FRAMES)

    def reader(self, size: int) -> Callable[[Any, Any], Callable[[int], bytes | str]]:
        """The zstd reader :func:`kpack.blob_reader` takes, over what this chain saw."""
        def zstd(start: Any, length: Any) -> Callable[[int], bytes | str]:
            start, end = kpack.check_zstd_blob(start, length, size)
            if start != self.start:
                raise kpack.KpackError(f"its zstd blob starts at offset {start}, not at {self.start} where kpack "
                                       "writes it (it is read in one pass)")
            count = self.count or 0
            # The first frame that is not all there (past the blob's end, or past those walked): every ordinal from
            # it on is that frame's problem. Found once, so that each TOC entry costs one look-up (issue 41: the
            # frames before an ordinal were walked again for each entry, a 7.5 KB .conda took 75 s).
            broken = next(((j, f"zstd frame {j} runs past the end of its blob")
                           for j, (pos, length, _) in enumerate(self.frames) if pos + 4 + length > end), None)
            if broken is None and len(self.frames) < count:
                j = len(self.frames)
                broken = (j, kpack.TOO_MANY_FRAMES if j >= kpack.MAX_FRAMES
                          else f"zstd frame {j} runs past the end of its blob")

            def frame(ordinal: int) -> bytes | str:
                if not 0 <= ordinal < count:
                    return f"ordinal {ordinal} names no kernel ({count} in its zstd blob)"
                if broken is not None and ordinal >= broken[0]:
                    return broken[1]
                return self.frames[ordinal][2]

            return frame
        return zstd
