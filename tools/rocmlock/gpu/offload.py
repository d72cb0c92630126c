"""Device code in ELF files, in pure Python: which AMD GPUs a HIP library or a code object can run on.

Two containers hold AMDGPU code (checked against LLVM's source and docs; sizes are little-endian):

- A host ELF (a HIP shared library, a Python extension) keeps its device code in the ``.hip_fatbin`` section as
  clang offload bundles, one or several back to back (aligned, zero padding between them). Plain bundle
  (clang/lib/Driver/OffloadBundler.cpp, ``BinaryFileHandler``): ``__CLANG_OFFLOAD_BUNDLE__``, u64 entry count,
  then per entry u64 offset, u64 size, u64 id length and the id (``hipv4-amdgcn-amd-amdhsa--gfx942:xnack-``),
  offsets counted from the bundle's start. Compressed bundle (same file, ``RawCompressedBundleHeader``):
  ``CCOB``, u16 version, u16 method (llvm/Support/Compression.h ``Format``: 0 zlib, 1 zstd), then version 2:
  u32 total size, u32 uncompressed size; version 3: u64 each; then the u64 low word of the MD5 of the
  uncompressed data (llvm/Support/MD5.h) and the compressed data, which is a plain bundle.
- AOTriton's kernel archives (``aotriton.images/amd-gfx942/**/*.aks2``, AOTriton 0.9 onwards; its
  ``v2python/aks2.py``): ``AKS2``, u32 uncompressed size, u32 kernel count, u32 directory size, then one xz stream
  of the directory (per kernel five u32, the last two the image's offset and size, then its NUL-terminated name)
  followed by the kernels' code objects. Only the directory and the images in the stream's first
  ``AKS2_LIMIT`` bytes are read (:func:`read_aks2`).
- A standalone code object (``.hsaco``, ``.co``, a kernel image) is an AMDGPU ELF (``e_machine`` EM_AMDGPU,
  224) whose ``e_flags`` name the processor (``EF_AMDGPU_MACH``, llvm/include/llvm/BinaryFormat/ELF.h) and the
  xnack/sramecc settings it was built for (llvm/docs/AMDGPUUsage.rst, "ELF Header", code object V4 onwards).

Hostile input costs bounded work: a compressed bundle is decompressed only as far as its header (at most
``HEADER_LIMIT`` bytes come out, whatever the sizes it claims), entry counts and id lengths are capped, and every
size is checked against what is there. Damage is an :class:`OffloadError`, whose text is one line.

Which code runs where (:func:`runs_on`) follows AMDGPUUsage: a code object for a processor runs on that processor;
one for a generic target (``gfx9-4-generic``, ``gfx11-generic`` ...) on the processors its table lists; a feature
built ``on`` (``:xnack+``) or ``off`` (``:xnack-``) needs the GPU in that mode, one built for ``any`` (no suffix)
runs in either.
"""

from __future__ import annotations

import functools
import io
import re
import struct
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import IO, Any, Literal, NamedTuple, Protocol, cast

PLAIN_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"
COMPRESSED_MAGIC = b"CCOB"
# At most this much of a compressed bundle is decompressed: its header (entry ids), never its code.
HEADER_LIMIT = 1 << 20
AKS2_LIMIT = 4 << 20
MAX_ENTRIES = 4096
MAX_ID = 1024
EM_AMDGPU = 224

Feature = Literal["any", "on", "off", "unsupported"]
_SIGN: dict[str, Feature] = {"+": "on", "-": "off"}

# EF_AMDGPU_MACH values of amdgcn processors (ELF.h, AMDGPU_MACH_LIST; AMDGPUUsage "AMDGPU EF_AMDGPU_MACH Values").
MACH: dict[int, str] = {
    0x20: "gfx600", 0x21: "gfx601", 0x22: "gfx700", 0x23: "gfx701", 0x24: "gfx702", 0x25: "gfx703",
    0x26: "gfx704", 0x28: "gfx801", 0x29: "gfx802", 0x2a: "gfx803", 0x2b: "gfx810", 0x2c: "gfx900",
    0x2d: "gfx902", 0x2e: "gfx904", 0x2f: "gfx906", 0x30: "gfx908", 0x31: "gfx909", 0x32: "gfx90c",
    0x33: "gfx1010", 0x34: "gfx1011", 0x35: "gfx1012", 0x36: "gfx1030", 0x37: "gfx1031", 0x38: "gfx1032",
    0x39: "gfx1033", 0x3a: "gfx602", 0x3b: "gfx705", 0x3c: "gfx805", 0x3d: "gfx1035", 0x3e: "gfx1034",
    0x3f: "gfx90a", 0x40: "gfx940", 0x41: "gfx1100", 0x42: "gfx1013", 0x43: "gfx1150", 0x44: "gfx1103",
    0x45: "gfx1036", 0x46: "gfx1101", 0x47: "gfx1102", 0x48: "gfx1200", 0x49: "gfx1250", 0x4a: "gfx1151",
    0x4b: "gfx941", 0x4c: "gfx942", 0x4e: "gfx1201", 0x4f: "gfx950", 0x50: "gfx1310",
    0x51: "gfx9-generic", 0x52: "gfx10-1-generic", 0x53: "gfx10-3-generic", 0x54: "gfx11-generic",
    0x55: "gfx1152", 0x57: "gfx1154", 0x58: "gfx1153", 0x59: "gfx12-generic", 0x5a: "gfx1251",
    0x5b: "gfx12-5-generic", 0x5c: "gfx1172", 0x5d: "gfx1170", 0x5e: "gfx1171", 0x5f: "gfx9-4-generic",
}
# AMDGPUUsage, "AMDGPU Generic Processors" (LLVM 20): the processors each generic target's code runs on.
GENERIC: dict[str, tuple[str, ...]] = {
    "gfx9-generic": ("gfx900", "gfx902", "gfx904", "gfx906", "gfx909", "gfx90c"),
    "gfx9-4-generic": ("gfx940", "gfx941", "gfx942", "gfx950"),
    "gfx10-1-generic": ("gfx1010", "gfx1011", "gfx1012", "gfx1013"),
    "gfx10-3-generic": ("gfx1030", "gfx1031", "gfx1032", "gfx1033", "gfx1034", "gfx1035", "gfx1036"),
    "gfx11-generic": ("gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1152", "gfx1153"),
    "gfx12-generic": ("gfx1200", "gfx1201"),
}
# ``--offload-arch=amdgcnspirv`` (clang's OffloadArch::AMDGCNSPIRV): SPIR-V the runtime compiles for the GPU it
# finds, so it serves every processor.
SPIRV = "amdgcnspirv"
_PROCESSOR = re.compile(r"gfx[0-9]+[0-9a-f]{2}|gfx[0-9]+(-[0-9]+)?-generic|" + SPIRV)


class OffloadError(Exception):
    """Device code that cannot be read (damaged or hostile); the text is one line."""


@dataclass(frozen=True, order=True)
class TargetId:
    """An AMDGPU target ID (AMDGPUUsage "Target ID"): processor plus the xnack/sramecc setting code needs."""

    processor: str
    sramecc: Feature = "any"
    xnack: Feature = "any"

    def __str__(self) -> str:
        # The canonical form lists features in alphabetical order, each with + or -.
        parts = [self.processor] + [f"{name}{'+' if value == 'on' else '-'}"
                                    for name, value in (("sramecc", self.sramecc), ("xnack", self.xnack))
                                    if value in ("on", "off")]
        return ":".join(parts)

    @property
    def generic(self) -> bool:
        return self.processor.endswith("-generic")


def sorted_names(targets: Iterable[TargetId]) -> list[str]:
    """The targets' names, once each, in ISA order (gfx90a before gfx942 before gfx1100), generic ones after."""
    def key(name: str) -> tuple[int, ...]:
        match = re.match(r"gfx([0-9]+)([0-9a-f])([0-9a-f])", name)
        return (0, int(match.group(1)), int(match.group(2), 16), int(match.group(3), 16)) if match else (1,)

    return sorted({str(t) for t in targets}, key=lambda n: (key(n), n))


def parse_target_id(text: str) -> TargetId:
    """``gfx942``, ``gfx942:xnack-``, ``gfx90a:sramecc+:xnack-``, ``gfx9-4-generic`` -> TargetId; ValueError."""
    processor, *features = text.strip().split(":")
    if not _PROCESSOR.fullmatch(processor):
        raise ValueError(f"'{text}' is not an AMDGPU target ID (gfx942, gfx90a:xnack-, gfx9-4-generic)")
    values: dict[str, Feature] = {}
    for feature in features:
        name, sign = feature[:-1], feature[-1:]
        if name not in ("xnack", "sramecc") or sign not in _SIGN or name in values:
            raise ValueError(f"'{text}': '{feature}' is not a target feature (xnack+, xnack-, sramecc+, sramecc-)")
        values[name] = _SIGN[sign]
    return TargetId(processor, values.get("sramecc", "any"), values.get("xnack", "any"))


def covers(processor: str, gpu: str) -> bool:
    """True when code built for ``processor`` (a processor or a generic target) runs on the ``gpu`` processor."""
    return processor in (gpu, SPIRV) or gpu in GENERIC.get(processor, ())


def runs_on(code: TargetId, gpu: TargetId) -> bool:
    """True when ``code`` can run on ``gpu``; a GPU feature given as ``any`` is one whose mode is not known."""
    if not covers(code.processor, gpu.processor):
        return False
    return all(want in ("any", "unsupported") or have == "any" or want == have
               for want, have in ((code.xnack, gpu.xnack), (code.sramecc, gpu.sramecc)))


# ----------------------------------------------------------------------------- code objects


def code_object_target(header: bytes | memoryview) -> TargetId:
    """The target of an AMDGPU ELF code object from its first 64 bytes (e_ident, e_machine, e_flags)."""
    if len(header) < 64 or bytes(header[:4]) != b"\x7fELF" or bytes(header[4:6]) != b"\x02\x01":
        raise OffloadError("not a 64-bit little-endian ELF code object")
    machine, = struct.unpack_from("<H", header, 0x12)
    if machine != EM_AMDGPU:
        raise OffloadError(f"not an AMDGPU code object (e_machine {machine})")
    abi_version = header[8]
    flags, = struct.unpack_from("<I", header, 0x30)
    processor = MACH.get(flags & 0xFF)
    if processor is None:
        raise OffloadError(f"unknown AMDGPU processor (EF_AMDGPU_MACH 0x{flags & 0xFF:x})")
    if abi_version >= 2:  # code object V4 onwards: two-bit selections
        modes: tuple[Feature, ...] = ("unsupported", "any", "off", "on")
        return TargetId(processor, modes[(flags >> 10) & 3], modes[(flags >> 8) & 3])
    if abi_version == 1:  # V3: a bit set means on, clear means off
        return TargetId(processor, "on" if flags & 0x200 else "off", "on" if flags & 0x100 else "off")
    return TargetId(processor)  # V2: no sramecc flag; an xnack bit that ROCm's loaders no longer read


def is_code_object(header: bytes | memoryview) -> bool:
    """True for the start of an AMDGPU ELF file."""
    return (len(header) >= 20 and bytes(header[:4]) == b"\x7fELF" and bytes(header[4:6]) == b"\x02\x01"
            and struct.unpack_from("<H", header, 0x12)[0] == EM_AMDGPU)


def read_aks2(data: bytes) -> tuple[TargetId, ...]:
    """The targets of the code objects an AOTriton AKS2 archive holds in its first ``AKS2_LIMIT`` bytes (the kernels
    of one archive are built for one target); OffloadError when it is damaged or holds none."""
    import lzma

    if len(data) < 16 or data[:4] != b"AKS2":
        raise OffloadError("not an AOTriton kernel archive (AKS2)")
    total, count, directory = struct.unpack_from("<III", data, 4)
    if directory > total or count > directory // 21 + 1:
        raise OffloadError(f"AKS2 header claims {count} kernels in a {directory}-byte directory of {total} bytes")
    try:
        head = lzma.LZMADecompressor().decompress(data[16:], min(total, AKS2_LIMIT))
    except lzma.LZMAError as exc:
        raise OffloadError(f"AKS2 archive: cannot decompress it ({exc})") from None
    if len(head) < min(directory, AKS2_LIMIT):
        raise OffloadError("AKS2 archive: its data ends before its directory does")
    pos, found = 0, []
    for _ in range(count):
        if pos + 20 > min(directory, len(head)):
            break
        offset, size, name_len = struct.unpack_from("<III", head, pos + 8)
        pos += 20 + name_len
        start = directory + offset
        if size >= 64 and start + 64 <= len(head):
            found.append(code_object_target(head[start:start + 64]))
    if not found:
        raise OffloadError("AKS2 archive: no code object in its first 4 MiB")
    return tuple(dict.fromkeys(found))


# ----------------------------------------------------------------------------- bundles


@dataclass(frozen=True)
class Bundle:
    """One offload bundle of a ``.hip_fatbin`` section: where, how it was stored, the AMDGPU targets it holds."""

    offset: int
    compression: Literal["", "zlib", "zstd"]
    version: int  # the CCOB header version, 0 for a plain bundle
    targets: tuple[TargetId, ...]


@functools.lru_cache(maxsize=256)
def entry_target(entry_id: str) -> TargetId | None:
    """The target of a bundle entry id (``hipv4-amdgcn-amd-amdhsa--gfx942:xnack-``); None for another device
    (the host entry, nvptx). The id is ``<kind>-<triple>-<target id>`` with a four-part triple whose
    environment is empty for AMDHSA (OffloadBundler.cpp, ``OffloadTargetInfo``)."""
    parts = entry_id.split("-", 5)
    if len(parts) != 6 or parts[1] not in ("amdgcn", "spirv64") or parts[0] not in ("hip", "hipv4", "openmp"):
        return None
    try:
        return parse_target_id(parts[5])
    except ValueError:
        raise OffloadError(f"bundle entry '{shown(entry_id)}' names no AMDGPU target ID") from None


def printable(text: str) -> str:
    """A name from a file or a directory, safe for a terminal line: control characters become ``?``, and so do
    the other characters Python does not count printable (U+202E, right-to-left override, shows ``gnp.so`` as
    ``os.png``; zero-width and other format characters)."""
    return "".join(c if c.isprintable() or c == " " else "?" for c in text)


def shown(text: str) -> str:
    """A string from a file, safe for a terminal line: printable ASCII only, at most 80 characters."""
    clean = "".join(c if " " <= c <= "~" else "?" for c in text)
    return clean if len(clean) <= 80 else clean[:77] + "..."


class Buffer(Protocol):
    """What a section is read from: ``bytes`` or an ``mmap`` of the whole file (never copied whole)."""

    def find(self, sub: bytes, start: int = ..., end: int = ..., /) -> int: ...

    def __getitem__(self, index: slice, /) -> bytes: ...

    def __len__(self) -> int: ...


def read_fatbin(buf: Buffer, start: int = 0, end: int | None = None) -> tuple[Bundle, ...]:
    """Every bundle of the ``.hip_fatbin`` section ``buf[start:end]``, in order, offsets relative to ``start``;
    OffloadError naming the offset when one is damaged."""
    out: list[Bundle] = []
    for found in iter_bundles(buf, start, len(buf) if end is None else end):
        if isinstance(found.bundle, OffloadError):
            raise found.bundle
        out.append(Bundle(found.pos - start, found.bundle.compression, found.bundle.version, found.bundle.targets))
    return tuple(out)


class Found(NamedTuple):
    """A bundle magic at ``pos`` of a buffer: the bundle's size and what it holds, or why it cannot be read."""

    pos: int
    size: int
    compressed: bool
    bundle: Bundle | OffloadError


def iter_bundles(buf: Buffer, start: int, end: int, *, go_on: bool = False) -> Iterator[Found]:
    """Each bundle of ``buf[start:end]``, in order; after a damaged one it stops, or with ``go_on`` searches on
    from the byte after its magic."""
    pos = _next_bundle(buf, start, end)
    while pos is not None:
        compressed = buf[pos:pos + 4] == COMPRESSED_MAGIC
        where = f"{'compressed ' if compressed else ''}bundle at offset {pos - start}"
        try:
            if compressed:
                bundle, size = _compressed(buf, pos, end, where)
            else:
                targets, size = _plain(_Reader(buf, pos, end), whole=True, where=where)
                bundle = Bundle(pos, "", 0, targets)
        except OffloadError as exc:
            yield Found(pos, 0, compressed, exc)
            if not go_on:
                return
            pos = _next_bundle(buf, pos + 1, end)
            continue
        yield Found(pos, size, compressed, bundle)
        pos = _next_bundle(buf, pos + max(size, 1), end)


def _next_bundle(buf: Buffer, start: int, end: int) -> int | None:
    """The first bundle magic at or after ``start``. Searched in windows that double from 256 bytes to 1 MiB, so
    finding a bundle costs in proportion to the gap before it: searching each magic to the section's end from
    every bundle made a section of n bundles cost n times its size (issue 33)."""
    lo, step = start, 256
    while lo < end:
        hi = min(end, lo + step)
        found = [i for magic in (PLAIN_MAGIC, COMPRESSED_MAGIC)
                 if (i := buf.find(magic, lo, min(end, hi + len(magic) - 1))) >= 0]
        if found:
            return min(found)
        lo, step = hi, min(step * 2, 1 << 20)
    return None


def is_bundle_file(head: bytes) -> bool:
    """True for the start of a code object file ``hipcc --genco`` writes (what ``hipModuleLoad`` takes besides a
    bare AMDGPU ELF): a plain offload bundle, or a compressed one whose header names a known version and method."""
    if head.startswith(PLAIN_MAGIC):
        return True
    if len(head) < 8 or not head.startswith(COMPRESSED_MAGIC):
        return False
    version, method = struct.unpack_from("<HH", head, 4)
    return 1 <= version <= 3 and method in (0, 1)


class _Reader:
    """Bytes ``[base, end)`` of a buffer, read by offset from ``base``; reads past ``end`` come back short."""

    def __init__(self, buf: Buffer | bytes, base: int, end: int) -> None:
        self.buf, self.base, self.end = buf, base, end

    def __len__(self) -> int:
        return self.end - self.base

    def read(self, offset: int, size: int) -> bytes:
        lo = self.base + offset
        return self.buf[lo:min(lo + size, self.end)] if lo < self.end else b""


def _plain(data: _Reader, whole: bool, where: str) -> tuple[tuple[TargetId, ...], int]:
    """The AMDGPU targets of the plain bundle at the start of ``data`` and its size (its furthest entry's end).

    ``whole``: ``data`` holds the entire bundle (check the entries' code objects, in the order they lie, so that a
    stream is read forwards); otherwise only a prefix of a decompressed bundle (ids only; the caller checks the
    entries against the size it declares).
    """
    count = _u64(data, len(PLAIN_MAGIC), where)
    if count > MAX_ENTRIES:
        raise OffloadError(f"{where}: claims {count} entries (more than {MAX_ENTRIES})")
    pos, end, entries = len(PLAIN_MAGIC) + 8, 0, []
    for _ in range(count):
        raw = data.read(pos, 24)
        if len(raw) != 24:
            raise OffloadError(f"{where}: its header runs past the end of the data")
        offset, size, id_len = struct.unpack("<QQQ", raw)
        if id_len > MAX_ID:
            raise OffloadError(f"{where}: an entry id of {id_len} bytes (more than {MAX_ID})")
        raw_id = data.read(pos + 24, id_len)
        if len(raw_id) != id_len:
            raise OffloadError(f"{where}: its header runs past the end of the data")
        pos += 24 + id_len
        entry = raw_id.decode("ascii", "replace")
        end = max(end, offset + size)
        if whole and offset + size > len(data):
            raise OffloadError(f"{where}: entry '{shown(entry)}' claims {size} bytes at offset {offset}, "
                               "past the end of the section")
        target = entry_target(entry)
        if target is not None:
            entries.append((offset, size, entry, target))
    if whole:
        for offset, size, entry, target in sorted(e for e in entries if e[1]):
            _check_entry(data.read(offset, min(size, 64)), target, entry, where)
    return tuple(e[3] for e in entries), max(end, pos)


def _check_entry(header: bytes, target: TargetId, entry: str, where: str) -> None:
    """An entry's code object must be for the processor its id names (the loader checks e_flags, not the id)."""
    if target.processor == SPIRV or not is_code_object(header):
        return
    actual = code_object_target(header)
    if actual.processor != target.processor:
        raise OffloadError(f"{where}: entry '{shown(entry)}' holds a code object for {actual.processor}")


def _u64(data: _Reader, pos: int, where: str) -> int:
    raw = data.read(pos, 8)
    if len(raw) != 8:
        raise OffloadError(f"{where}: its header runs past the end of the data")
    value: int = struct.unpack("<Q", raw)[0]
    return value


_CCOB_SIZES = {2: ("<II", 24), 3: ("<QQ", 32)}  # version -> (total and uncompressed size format, header size)


def _compressed(buf: Buffer, pos: int, end: int, where: str) -> tuple[Bundle, int]:
    head = buf[pos:min(pos + 32, end)]
    if len(head) < 8:
        raise OffloadError(f"{where}: truncated header")
    version, method = struct.unpack_from("<HH", head, 4)
    if version not in _CCOB_SIZES:
        raise OffloadError(f"{where}: CCOB version {version} (this reads versions 2 and 3)")
    fmt, header = _CCOB_SIZES[version]
    if len(head) < header:
        raise OffloadError(f"{where}: truncated header")
    total, size = struct.unpack_from(fmt, head, 8)
    if method not in (0, 1):
        raise OffloadError(f"{where}: unknown compression method {method} (0 zlib, 1 zstd)")
    if total < header or pos + total > end:
        raise OffloadError(f"{where}: claims {total} bytes, but {end - pos} are left in the section")
    prefix = _decompress(_Reader(buf, pos + header, pos + total), method, min(size, HEADER_LIMIT), where)
    if prefix[:len(PLAIN_MAGIC)] != PLAIN_MAGIC:
        raise OffloadError(f"{where}: its data is not an offload bundle")
    targets, header_end = _plain(_Reader(prefix, 0, len(prefix)), whole=False, where=where)
    if header_end > size:
        raise OffloadError(f"{where}: its entries run past the {size} bytes it claims")
    return Bundle(pos, "zstd" if method == 1 else "zlib", version, targets), total


class _Stream(io.RawIOBase):
    """A reader's bytes as a stream, so a decompressor pulls only what it needs."""

    def __init__(self, data: _Reader) -> None:
        self.data, self.pos = data, 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        size = len(self.data) - self.pos if size < 0 else size
        chunk = self.data.read(self.pos, size)
        self.pos += len(chunk)
        return chunk


class _Readable(Protocol):
    def read(self, size: int = ..., /) -> bytes: ...


def _decompress(payload: _Reader, method: int, limit: int, where: str) -> bytes:
    """At most ``limit`` bytes from the start of the compressed ``payload``."""
    # A small payload is read at once (the bundles of one kernel each are a few hundred bytes); a large one is
    # pulled only as far as the decompressor needs.
    source: _Readable = io.BytesIO(payload.read(0, len(payload))) if len(payload) <= 1 << 16 else _Stream(payload)
    try:
        if method == 0:
            return _inflate(source, limit)
        # clang writes single-segment frames, whose window is the whole uncompressed bundle (hundreds of MB for a
        # large library), so the limit is zstd's own maximum (ZSTD_WINDOWLOG_MAX_64, 2 GiB). The window buffer is
        # allocated but only the pages the 1 MiB read writes are touched (a 2 GiB-window frame read this way peaks
        # at 13 MB resident).
        reader = _zstd_decompressor().stream_reader(cast(IO[bytes], source))
        return b"".join(_chunks(reader, limit))
    except zlib.error as exc:
        raise OffloadError(f"{where}: cannot decompress it ({exc})") from None
    except Exception as exc:  # zstandard.ZstdError
        if type(exc).__module__.split(".")[0] == "zstandard":
            raise OffloadError(f"{where}: cannot decompress it ({str(exc).splitlines()[0]})") from None
        raise


@functools.cache
def _zstd_decompressor() -> Any:
    """One decompressor for every bundle: making one per bundle (and its window) cost 20 us, most of the time of
    a section of small bundles."""
    import zstandard

    return zstandard.ZstdDecompressor(max_window_size=1 << 31)


def _inflate(source: _Readable, limit: int) -> bytes:
    inflater, out = zlib.decompressobj(), bytearray()
    while len(out) < limit:
        chunk = inflater.unconsumed_tail or source.read(1 << 16)
        if not chunk:
            break
        out += inflater.decompress(chunk, limit - len(out))
        if inflater.eof:
            break
    return bytes(out)


def _chunks(reader: _Readable, limit: int) -> Iterator[bytes]:
    left = limit
    while left > 0:
        chunk = reader.read(min(left, 1 << 16))
        if not chunk:
            return
        left -= len(chunk)
        yield chunk
