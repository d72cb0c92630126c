"""Device code split out by TheRock's kpack: the host library's marker, the ``.kpack`` archives, and which GPUs the
archives a library refers to serve it for. In pure Python, read without ROCm, like :mod:`rocmlock.gpu.offload`.

The format, from AMD's sources (ROCm/rocm-kpack: ``python/rocm_kpack/elf/kpack_transform.py``, ``kpack.py``,
``compression.py``, ``artifact_splitter.py``; ``runtime/src/loader.cpp``, ``archive.cpp``, ``toc_parser.cpp``,
``isa_target_match.h``; ROCm/TheRock ``docs/rfcs/RFC0008-Multi-Arch-Packaging.md``):

- A kpacked host ELF keeps a ``.rocm_kpack_ref`` section holding one MessagePack map, ``{"kernel_name": str,
  "kpack_search_paths": [str, ...]}``; each 24-byte ``__CudaFatBinaryWrapper`` of ``.hipFatBinSegment`` has the magic
  ``HIPK`` instead of ``HIPF`` and its code object index (``co_index``) as a u32 at offset 16; ``.hip_fatbin`` is
  zero-paged (NOBITS) or, when too small for that, left in place but no longer used.
- The runtime looks up ``<kernel_name>#<co_index>`` for each wrapper. A search path is relative to the binary's
  directory (or absolute); ``@GFXARCH@`` in it (first occurrence) is replaced by the GPU's ISA name and each of its
  feature subsets, most specific first (``gfx942:sramecc+:xnack-``, ``gfx942:sramecc+``, ``gfx942:xnack-``,
  ``gfx942``); TheRock's splitter writes ``../.kpack/<artifact>_@GFXARCH@.kpack``. For each of those names the first
  archive (in search-path order) whose ``gfx_arches`` lists it is used, and the kernel must be in it: a missing kernel
  there is an error, not a reason to try the next name.
- A ``.kpack`` archive: ``KPAK``, u32 format version (1), u64 offset of the table of contents, blobs, then the TOC,
  one MessagePack map running to the end of the file: ``gfx_arches``, ``gfx_arch_family``, ``compression_scheme``
  (``none`` with ``blobs: [{offset, size}]``, absolute; ``zstd-per-kernel`` with ``zstd_offset``/``zstd_size``
  locating a u32 kernel count then per kernel a u32 size and one zstd frame), and ``toc``: ``{"<kernel_name>#<i>":
  {"<arch>": {"ordinal": n, ...}}}``.
- Where archives lie: TheRock's splitter writes one archive per target under the artifact prefix's ``.kpack/``; its
  Python packaging overlays the per-target ``rocm-sdk-device-*`` wheels' archives into the ``rocm-sdk-libraries``
  platform directory, beside the host libraries (TheRock ``build_tools/_therock_utils/py_packaging.py``). So a
  tree, or a bundle's packages together, is where a library's archives are looked up (:func:`resolve_all`).

Hostile input costs work and memory linear in what is read: a marker is read up to ``MARKER_LIMIT`` bytes (the
runtime's limit), a TOC up to ``TOC_LIMIT``; every MessagePack count is checked against the bytes left, nesting
against ``_DEPTH``, the values decoded against ``MAX_VALUES``; a code object is checked by its first 64 bytes, of a
zstd frame (``MAX_FRAMES`` walked, once) at most ``FRAME_KEEP`` bytes read and 64 decompressed, once; a search path
is one look-up (:class:`ArchiveIndex`). Damage is a :class:`KpackError` whose text is one line.
"""

from __future__ import annotations

import posixpath
import struct
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import product
from typing import Any

from rocmlock.gpu.offload import (
    Buffer,
    OffloadError,
    TargetId,
    code_object_target,
    is_code_object,
    parse_target_id,
    shown,
)

MARKER_SECTION = b".rocm_kpack_ref"
WRAPPER_SECTION = b".hipFatBinSegment"
ARCHIVE_MAGIC = b"KPAK"
HIPK, HIPF = b"HIPK", b"HIPF"
PLACEHOLDER = "@GFXARCH@"
MARKER_LIMIT = 64 << 10  # loader.cpp MAX_METADATA_SIZE
TOC_LIMIT = 16 << 20
MAX_WRAPPERS = 1 << 16
# A TOC of 16 MiB could be 16 million one-byte values: decoding stops at this many (a TOC entry is about a dozen, so
# ~75,000 code objects; about a second of pure Python at worst).
MAX_VALUES = 1_000_000
_DEPTH = 8
# Frames walked in a zstd blob (an empty one is 4 bytes), and bytes read of one: its header and first block (<= 128
# KiB), what 64 bytes out need; never the whole frame (issue 41: a sparse 400 MB frame was read into memory).
MAX_FRAMES = 1 << 17
FRAME_KEEP = (128 << 10) + 64
TOO_MANY_FRAMES = f"its zstd blob holds more than {MAX_FRAMES} frames (not read past them)"


class KpackError(OffloadError):
    """A kpack marker or archive that cannot be read; the text is one line."""


# ----------------------------------------------------------------------------- MessagePack, the subset kpack writes


def unpack(data: bytes) -> tuple[Any, int]:
    """The first MessagePack object of ``data`` and where it ends; KpackError when it is damaged or not plain data
    (nil, bool, int, float, str, bin, array, map; no ext types: kpack writes none)."""
    return _Unpacker(data).value(0)


class _Unpacker:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos, self.values = data, 0, 0

    def take(self, size: int) -> bytes:
        if self.pos + size > len(self.data):
            raise KpackError(f"MessagePack data ends early (at byte {len(self.data)}, {size} more wanted)")
        chunk = self.data[self.pos:self.pos + size]
        self.pos += size
        return chunk

    def number(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def count(self, n: int, per: int) -> int:
        # Every element takes at least one byte: a count the rest of the data cannot hold is a lie.
        if n * per > len(self.data) - self.pos:
            raise KpackError(f"MessagePack data claims {n} elements at byte {self.pos} with "
                             f"{len(self.data) - self.pos} bytes left")
        return n

    def value(self, depth: int) -> tuple[Any, int]:
        return self.read(depth), self.pos

    def read(self, depth: int) -> Any:
        if depth > _DEPTH:
            raise KpackError(f"MessagePack data nested more than {_DEPTH} deep")
        self.values += 1
        if self.values > MAX_VALUES:
            raise KpackError(f"MessagePack data holds more than {MAX_VALUES:,} values")
        at = self.pos
        b = self.take(1)[0]
        if b <= 0x7F or b >= 0xE0:
            return b if b <= 0x7F else b - 0x100
        if 0x80 <= b <= 0x9F:
            return self.container("map" if b <= 0x8F else "array", b & 0x0F, depth)
        if 0xA0 <= b <= 0xBF:
            return self.text(b & 0x1F, at)
        simple = {0xC0: None, 0xC2: False, 0xC3: True}
        if b in simple:
            return simple[b]
        sizes = {0xC4: ">B", 0xC5: ">H", 0xC6: ">I", 0xD9: ">B", 0xDA: ">H", 0xDB: ">I"}
        if b in sizes:
            n = self.number(sizes[b])
            return self.text(n, at) if b >= 0xD9 else self.take(self.count(n, 1))
        numbers = {0xCA: ">f", 0xCB: ">d", 0xCC: ">B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q",
                   0xD0: ">b", 0xD1: ">h", 0xD2: ">i", 0xD3: ">q"}
        if b in numbers:
            return self.number(numbers[b])
        containers = {0xDC: ("array", ">H"), 0xDD: ("array", ">I"), 0xDE: ("map", ">H"), 0xDF: ("map", ">I")}
        if b in containers:
            kind, fmt = containers[b]
            return self.container(kind, self.number(fmt), depth)
        raise KpackError(f"MessagePack type 0x{b:02x} at byte {at} (an ext type or unused code; kpack writes none)")

    def text(self, n: int, at: int) -> str:
        try:
            return self.take(self.count(n, 1)).decode("utf-8")
        except UnicodeDecodeError:
            raise KpackError(f"MessagePack string at byte {at} is not UTF-8") from None

    def container(self, kind: str, n: int, depth: int) -> Any:
        if kind == "array":
            return [self.read(depth + 1) for _ in range(self.count(n, 1))]
        out: dict[Any, Any] = {}
        for _ in range(self.count(n, 2)):
            at = self.pos
            key = self.read(depth + 1)
            if not isinstance(key, str | int | bool | None):
                raise KpackError(f"MessagePack map key at byte {at} is not a string or number")
            out[key] = self.read(depth + 1)
        return out


# ----------------------------------------------------------------------------- the host binary's marker


@dataclass(frozen=True)
class Marker:
    """A kpacked host binary's reference: the TOC key stem, its search paths, the code object index per wrapper."""

    kernel_name: str
    search_paths: tuple[str, ...]
    indices: tuple[int, ...]

    def toc_keys(self) -> list[str]:
        return [f"{self.kernel_name}#{i}" for i in self.indices]


Section = Callable[[bytes], tuple[int, int] | None]


def read_marker(data: Buffer, section: Section) -> Marker | None:
    """The kpack marker of the host ELF ``data`` (None when it has no ``.rocm_kpack_ref`` section); ``section``
    finds a section's ``(start, end)`` in the file. KpackError when the marker or the wrappers are damaged."""
    where = section(MARKER_SECTION)
    if where is None:
        return None
    raw = data[where[0]:min(where[1], where[0] + MARKER_LIMIT)]
    try:
        meta = unpack(raw)[0]
    except KpackError as exc:
        raise KpackError(f"its .rocm_kpack_ref marker is damaged ({exc})") from None
    name = meta.get("kernel_name") if isinstance(meta, dict) else None
    paths = meta.get("kpack_search_paths") if isinstance(meta, dict) else None
    # The loader's rules (parse_hipk_metadata): a string name, a list of paths, non-strings skipped, none left fails.
    found = tuple(p for p in paths if isinstance(p, str)) if isinstance(paths, list) else ()
    if not isinstance(name, str) or not found:
        raise KpackError("its .rocm_kpack_ref marker has no kernel_name or no kpack_search_paths")
    return Marker(name, found, _wrapper_indices(data, section))


def _wrapper_indices(data: Buffer, section: Section) -> tuple[int, ...]:
    where = section(WRAPPER_SECTION)
    size = 0 if where is None else where[1] - where[0]
    if where is None or size % 24 or size // 24 > MAX_WRAPPERS:
        raise KpackError(f"a .rocm_kpack_ref marker but its {WRAPPER_SECTION.decode()} section "
                         f"{'is missing' if where is None else f'has {size} bytes, not whole 24-byte wrappers'}")
    indices, plain = set(), 0
    for pos in range(where[0], where[1], 24):
        wrapper = data[pos:pos + 24]
        if wrapper[:4] == HIPK:
            indices.add(struct.unpack_from("<I", wrapper, 16)[0])
        elif wrapper[:4] == HIPF:
            plain += 1
    if plain or not indices:
        raise KpackError(f"a .rocm_kpack_ref marker but {plain} of its {size // 24} fat binary wrapper(s) "
                         "still HIPF (kpack's tool rewrites every one to HIPK)" if plain else
                         "a .rocm_kpack_ref marker but no HIPK wrapper")
    return tuple(sorted(indices))


# ----------------------------------------------------------------------------- archives


@dataclass(frozen=True)
class Archive:
    """A ``.kpack`` archive's TOC: its architectures and, per TOC key and architecture, why the code object there
    cannot be loaded ("" when it can)."""

    arches: tuple[str, ...]
    family: str
    entries: Mapping[str, Mapping[str, str]] = field(hash=False, compare=False)

    @property
    def kernels(self) -> int:
        return sum(len(a) for a in self.entries.values())


def read_archive(data: Buffer) -> Archive:
    """The TOC of the ``.kpack`` archive ``data`` (bytes or an mmap of the whole file), each entry's code object
    checked by its ELF header; KpackError when the archive is damaged."""
    toc = parse_toc(data[archive_header(data[:16], len(data)):len(data)])
    return build_archive(toc, blob_reader(data, toc))


def archive_header(head: bytes, size: int) -> int:
    """Where the TOC of an archive of ``size`` bytes starting with ``head`` lies; KpackError for a bad header."""
    if size < 16 or len(head) < 16 or head[:4] != ARCHIVE_MAGIC:
        raise KpackError("not a kpack archive (no KPAK header)")
    version, toc_offset = struct.unpack("<IQ", head[4:16])
    if version != 1:
        raise KpackError(f"kpack format version {version} (this reads version 1)")
    if not 16 <= toc_offset < size:
        raise KpackError(f"its TOC offset {toc_offset} is outside the file ({size} bytes)")
    if size - toc_offset > TOC_LIMIT:
        raise KpackError(f"a TOC of {size - toc_offset} bytes (more than {TOC_LIMIT >> 20} MiB)")
    return int(toc_offset)


def parse_toc(raw: bytes) -> dict[Any, Any]:
    """An archive's TOC (the bytes from its TOC offset to its end) decoded; KpackError when it is damaged."""
    try:
        toc = unpack(raw)[0]
    except KpackError as exc:
        raise KpackError(f"its TOC is damaged ({exc})") from None
    if not isinstance(toc, dict) or not isinstance(toc.get("toc"), dict):
        raise KpackError("its TOC is not a map with a 'toc' map")
    return toc


def build_archive(toc: Mapping[Any, Any], blob: Callable[[int], bytes | str]) -> Archive:
    """The archive of a decoded TOC; ``blob`` gives a kernel ordinal's first 64 bytes or why there are none."""
    arches = toc.get("gfx_arches")
    names = tuple(a for a in arches if isinstance(a, str)) if isinstance(arches, list) else ()
    family = toc.get("gfx_arch_family")
    entries = {key: {arch: _entry_problem(meta, arch, blob) for arch, meta in per_arch.items() if isinstance(arch, str)}
               for key, per_arch in toc["toc"].items() if isinstance(key, str) and isinstance(per_arch, dict)}
    return Archive(names, family if isinstance(family, str) else "", entries)


def blob_reader(data: Buffer, toc: Mapping[Any, Any],
                 zstd: Callable[[Any, Any], Callable[[int], bytes | str]] | None = None) -> Callable[[int], bytes | str]:
    """A function from a kernel's ordinal to the first 64 bytes of its code object, or why there is none."""
    scheme = toc.get("compression_scheme")
    if scheme == "none":
        blobs = toc.get("blobs")
        if not isinstance(blobs, list):
            raise KpackError("compression scheme 'none' without a 'blobs' list")

        def plain(ordinal: int) -> bytes | str:
            blob = blobs[ordinal] if 0 <= ordinal < len(blobs) else None
            off = blob.get("offset") if isinstance(blob, dict) else None
            size = blob.get("size") if isinstance(blob, dict) else None
            if not isinstance(off, int) or not isinstance(size, int) or off < 0 or size < 0:
                return f"ordinal {ordinal} names no blob ({len(blobs)} in the archive)"
            if off + size > len(data):
                return f"its blob claims {size} bytes at offset {off}, past the end of the file"
            return data[off:off + min(size, 64)]

        return plain
    if scheme == "zstd-per-kernel":
        if zstd is not None:
            return zstd(toc.get("zstd_offset"), toc.get("zstd_size"))
        return _zstd_reader(data, toc.get("zstd_offset"), toc.get("zstd_size"))
    raise KpackError(f"compression scheme '{shown(str(scheme))}' (this reads 'none' and 'zstd-per-kernel')")


def check_zstd_blob(start: Any, size: Any, length: int) -> tuple[int, int]:
    """``(start, end)`` of a TOC's zstd blob in a file of ``length`` bytes; KpackError when it is not inside it."""
    if not isinstance(start, int) or not isinstance(size, int) or start < 0 or size < 4 or start + size > length:
        raise KpackError(f"its zstd blob (offset {start}, {size} bytes) is not inside the file ({length} bytes)")
    return start, start + size


def _zstd_reader(data: Buffer, start: Any, size: Any) -> Callable[[int], bytes | str]:
    start, end = check_zstd_blob(start, size, len(data))
    count = struct.unpack("<I", data[start:start + 4])[0]
    frames: list[tuple[int, int]] = []  # walked once, lazily: a u32 size before each frame
    heads: dict[int, bytes | str] = {}  # each frame decompressed once, whatever the TOC entries naming it
    pos = start + 4

    def frame(ordinal: int) -> bytes | str:
        nonlocal pos
        if not 0 <= ordinal < count:
            return f"ordinal {ordinal} names no kernel ({count} in its zstd blob)"
        while len(frames) <= min(ordinal, MAX_FRAMES - 1):
            length = struct.unpack("<I", data[pos:pos + 4])[0] if pos + 4 <= end else end
            if pos + 4 + length > end:
                return f"zstd frame {len(frames)} runs past the end of its blob"
            frames.append((pos + 4, length))
            pos += 4 + length
        if ordinal >= MAX_FRAMES:
            return TOO_MANY_FRAMES
        if ordinal not in heads:
            at, length = frames[ordinal]
            heads[ordinal] = zstd_head(data[at:at + min(length, FRAME_KEEP)])  # never the whole frame
        return heads[ordinal]

    return frame


def zstd_head(frame: bytes) -> bytes | str:
    """The first 64 bytes a zstd frame decompresses to (a frame cut short after its first blocks will do), or why
    there are none."""
    import zstandard

    if not frame:  # as often as a hostile blob likes: what zstandard gives for it, without a decompressor each
        return b""
    try:
        with zstandard.ZstdDecompressor().stream_reader(frame) as reader:
            return bytes(reader.read(64))
    except zstandard.ZstdError as exc:
        return f"its zstd frame cannot be decompressed ({str(exc).splitlines()[0]})"


def _entry_problem(meta: Any, arch: str, blob: Callable[[int], bytes | str]) -> str:
    ordinal = meta.get("ordinal") if isinstance(meta, dict) else None
    if not isinstance(ordinal, int) or isinstance(ordinal, bool):
        return "its TOC entry has no ordinal"
    head = blob(ordinal)
    if isinstance(head, str):
        return head
    if not is_code_object(head):
        return "not an AMDGPU code object"
    try:
        want, have = parse_target_id(arch).processor, code_object_target(head).processor
    except (ValueError, OffloadError) as exc:
        return str(exc)
    return "" if want == have else f"a code object for {have}, filed under {shown(arch)}"


# ----------------------------------------------------------------------------- which archives serve a binary


@dataclass(frozen=True)
class Coverage:
    """A kpacked binary's code as its archives hold it: per architecture name, the archive that serves it, or the
    archive the runtime would pick and why it has no code for the binary; ``missing``: its search paths, when they
    lead to no archive for any target."""

    marker: Marker
    served: Mapping[str, str] = field(hash=False, compare=False)
    lacking: Mapping[str, tuple[str, str]] = field(hash=False, compare=False)
    missing: tuple[str, ...] = ()

    def targets(self) -> tuple[TargetId, ...]:
        out = []
        for arch in self.served:
            try:
                out.append(parse_target_id(arch))
            except ValueError:
                continue  # a name no GPU reports: never picked
        return tuple(dict.fromkeys(out))

    def describe(self) -> str:
        """How the code is reached, for a report row: the archives, and those that lack the binary's code."""
        used = sorted(set(self.served.values()))
        text = f"kpack, {len(used)} archive(s)"
        for arch, (path, why) in sorted(self.lacking.items()):
            text += f"; {path} has no {shown(arch)} code for it ({why})"
        return text

    def runs_on(self, gpu: TargetId) -> bool:
        """True when the loader, on a GPU with ``gpu``'s name and modes (a mode not known: either), finds every code
        object of the binary: the first archive listing a name it tries must hold them all."""
        for name in _agent_names(gpu):
            for candidate in _compatible(name):
                if candidate in self.served or candidate in self.lacking:
                    if candidate in self.served:
                        return True
                    break
        return False

    def to_dict(self) -> dict[str, Any]:
        return {"kernel_name": self.marker.kernel_name, "search_paths": list(self.marker.search_paths),
                "code_objects": len(self.marker.indices), "archives": dict(sorted(self.served.items())),
                "lacking": {a: {"archive": p, "why": w} for a, (p, w) in sorted(self.lacking.items())},
                "not_found": list(self.missing)}


def _agent_names(gpu: TargetId) -> Iterator[str]:
    """The ISA names a GPU of ``gpu``'s kind can report (HSA: ``gfx942:sramecc+:xnack-``; a mode not known: each)."""
    choices = [{"on": ["+"], "off": ["-"], "any": ["+", "-", ""]}.get(value, [""])
               for value in (gpu.sramecc, gpu.xnack)]
    for sramecc, xnack in product(*choices):
        yield ":".join([gpu.processor] + [f"{n}{s}" for n, s in (("sramecc", sramecc), ("xnack", xnack)) if s])


def _compatible(name: str) -> list[str]:
    """isa_target_match.h ``for_each_compatible_target``: every subset of the features, most specific first."""
    processor, *features = name.split(":")
    n = len(features)
    return [":".join([processor] + [f for i, f in enumerate(features) if mask & (1 << (n - 1 - i))])
            for mask in range((1 << n) - 1, -1, -1)]


def resolve(marker: Marker, binary: str, archives: Mapping[str, Archive], index: ArchiveIndex | None = None) -> Coverage:
    """The coverage of the kpacked binary at ``binary`` (a posix path relative to the tree audited) from the readable
    ``archives`` of that tree (same kind of paths; ``index``: theirs, made once for many binaries). A search path
    leaving the tree (absolute, or ``..`` past its root) finds nothing: the audit reads what it is given."""
    index = index if index is not None else ArchiveIndex(archives)
    first: dict[str, str] = {}  # each name, the first archive (in the loader's order) that lists it for the binary
    for path, only in _candidates(marker, binary, index):
        for arch in archives[path].arches if only is None else (only,):
            first.setdefault(arch, path)
    keys = marker.toc_keys()
    served: dict[str, str] = {}
    lacking: dict[str, tuple[str, str]] = {}
    for arch, path in first.items():
        entries = archives[path].entries
        why = next((f"{key}: {entries[key][arch]}" if arch in entries.get(key, {}) else f"no entry {key}"
                    for key in keys if entries.get(key, {}).get(arch, "none") != ""), "")
        if why:
            lacking[arch] = (path, shown(why))
        else:
            served[arch] = path
    return Coverage(marker, served, lacking, () if served or lacking else marker.search_paths)


class ArchiveIndex:
    """A tree's archives by path and, for ``@GFXARCH@``, by what is left of a path around each name its archive
    lists (``.kpack/x_gfx942.kpack``: ``(".kpack/x_", ".kpack")`` for ``gfx942``), made once: a search path is one
    look-up, not a pass over every archive (issue 41: a 1 MB tree took 56 s and 420 MB). Only the pair's hash is
    kept (a long path naming its archs often costs a tuple each), the pair compared again at a look-up."""

    def __init__(self, archives: Mapping[str, Archive]) -> None:
        self.archives = archives
        self.around: dict[int, list[tuple[str, str]]] = {}
        for path in sorted(archives):
            for arch in dict.fromkeys(archives[path].arches):
                if not arch or "/" in arch:
                    continue  # the loader puts a name in one path component
                at = path.find(arch)
                while at >= 0:
                    self.around.setdefault(hash((path[:at], path[at + len(arch):])), []).append((path, arch))
                    at = path.find(arch, at + 1)

    def named(self, head: str, tail: str) -> list[tuple[str, str]]:
        """``(path, name)`` of the archives at ``head + name + tail`` listing ``name``, in path order."""
        return [(path, arch) for path, arch in self.around.get(hash((head, tail)), ())
                if len(path) == len(head) + len(arch) + len(tail) and path.startswith(head) and path.endswith(tail)]


def _candidates(marker: Marker, binary: str, index: ArchiveIndex) -> Iterator[tuple[str, str | None]]:
    """``(archive path, the one name it may serve or None for any)`` in the loader's order; a path once only."""
    seen: set[str] = set()
    for raw in marker.search_paths:
        if raw.startswith("/") or "\0" in raw:
            continue
        full = posixpath.normpath(posixpath.join(posixpath.dirname(binary), raw))
        if full == ".." or full.startswith("../") or full in seen:
            continue
        seen.add(full)
        if PLACEHOLDER in full:
            yield from index.named(*full.split(PLACEHOLDER, 1))
        elif full in index.archives:
            yield full, None


def resolve_all(found: Sequence[tuple[str, Marker | Archive | None]]) -> dict[str, Coverage]:
    """Every marker of ``found`` (``(path, what the file is)``) resolved against the archives among them."""
    archives = {path: what for path, what in found if isinstance(what, Archive)}
    index = ArchiveIndex(archives)
    return {path: resolve(what, path, archives, index) for path, what in found if isinstance(what, Marker)}
