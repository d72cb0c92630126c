"""Finding device code: every ELF file with a ``.hip_fatbin`` section, every library split by TheRock's kpack and its
``.kpack`` archives (:mod:`rocmlock.gpu.kpack`), every AMDGPU code object, every code object file of ``hipcc
--genco`` (an offload bundle file) and every AOTriton kernel archive (``.aks2``) in a directory tree or a conda
package (``.conda``: a zip holding ``pkg-*.tar.zst``; ``.tar.bz2``), read without installing, and which
of them can run on a GPU target.

Files are read where they lie (mapped, only their headers and the section touched); a package's members are read
once as its archive streams by (:mod:`rocmlock.gpu.stream`), with bounded memory and nothing written. A file or
directory that cannot be read is reported with the reason and counts as one that cannot run: an audit never passes
over device code it could not read. :func:`classify` names the container from a file's first bytes;
:func:`read_device_code` (a mapped file) and :func:`scan_stream` (a package's member) read each kind, so a new
container is one kind, one test of its first bytes and one reader in each. A kpacked library is a host ELF like any
other until its section headers are read (they lie at its end): both readers report it as ``kpack`` when it has a
``.rocm_kpack_ref`` section, and :func:`with_kpack` then looks its archives up among the files found with it.
"""

from __future__ import annotations

import mmap
import os
import re
import stat
import struct
import tarfile
import zipfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any, Literal

from rocmlock.gpu import kpack
from rocmlock.gpu.offload import (
    AKS2_LIMIT,
    Buffer,
    Bundle,
    OffloadError,
    TargetId,
    code_object_target,
    covers,
    is_bundle_file,
    is_code_object,
    parse_target_id,
    printable,
    read_aks2,
    read_fatbin,
    runs_on,
    shown,
    sorted_names,
)
from rocmlock.gpu.stream import Readable, read_bundle_file, read_host_elf, read_kpack_archive

SECTION = b".hip_fatbin"
# "unreadable": a file or directory that could not be read, so what it holds is not known.
# "kpack": a host library split by kpack (its code is in archives); "kpack-archive": a ``.kpack`` archive.
Kind = Literal["fatbin", "offload-bundle", "code-object", "aks2", "kpack", "kpack-archive", "unreadable"]
# Kinds that are libraries: their code is the only code they can run (a kpacked one's is in its archives).
_LIBRARY = ("fatbin", "kpack")
# A build string's GPU target (``rocm72_gfx942_py312_h1a2b3c4_0``, ``gfx942`` for amdgpu-target itself).
_BUILD_GFX = re.compile(r"(?:^|_)(gfx[0-9]+[0-9a-f]{2})(?:_|\Z)")


@dataclass(frozen=True)
class DeviceCode:
    """One file with device code: its path (relative, as shown), what holds the code, the targets, or why it
    could not be read (``error``; then ``targets`` is empty)."""

    path: str
    kind: Kind
    targets: tuple[TargetId, ...] = ()
    bundles: int = 0
    error: str = ""
    # kpack (rocmlock.gpu.kpack): a host binary's marker until its archives are looked up (then its Coverage), an
    # archive's TOC; how the code is reached, for a report row.
    kpack: kpack.Marker | kpack.Coverage | kpack.Archive | None = field(default=None, compare=False, repr=False)
    via: str = ""

    def runs_on(self, gpu: TargetId) -> bool:
        if self.kind == "kpack":
            return not self.error and isinstance(self.kpack, kpack.Coverage) and self.kpack.runs_on(gpu)
        return not self.error and any(runs_on(t, gpu) for t in self.targets)

    def to_dict(self) -> dict[str, Any]:
        out = {"path": self.path, "kind": self.kind, "bundles": self.bundles,
               "targets": sorted_names(self.targets), "error": self.error or None}
        if isinstance(self.kpack, kpack.Coverage):
            out["kpack"] = self.kpack.to_dict()
        return out


def build_string_of(filename: str) -> str:
    """The build string of a package file name (``pytorch-2.12.1-rocm72_gfx942_py312_h1a2b3c4_0.conda``)."""
    return filename.removesuffix(".conda").removesuffix(".tar.bz2").rsplit("-", 1)[-1]


def build_string_target(build: str) -> str | None:
    """The gfx target a package's build string names (``rocm72_gfx942_py312_h1a2b3c4_0`` -> ``gfx942``)."""
    match = _BUILD_GFX.search(build)
    return match.group(1) if match else None


# ----------------------------------------------------------------------------- one file


def classify(head: bytes) -> Kind | None:
    """What holds device code in a file that starts with ``head`` (its first 64 bytes, or all of a shorter file):
    ``fatbin`` for a host ELF (its ``.hip_fatbin`` section may hold bundles, or its ``.rocm_kpack_ref`` section make it
    a ``kpack`` library: the readers tell, from its section headers), None for a file that has none."""
    if head[:4] == b"AKS2":
        return "aks2"
    if head[:4] == kpack.ARCHIVE_MAGIC:
        return "kpack-archive"
    if is_bundle_file(head):
        return "offload-bundle"
    if is_code_object(head):
        return "code-object"
    if head[:4] == b"\x7fELF" and len(head) >= 64 and head[4:6] == b"\x02\x01":
        return "fatbin"
    return None  # not ELF, or a 32-bit or big-endian one: no HIP host library


def scan_file(path: Path, shown_as: str) -> DeviceCode | None:
    """The device code of the file at ``path`` (None when it has none)."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            kind = classify(head)
            if kind is None:
                return None
            if kind == "aks2":
                return _scan_aks2(head + f.read(16 + AKS2_LIMIT - len(head)), shown_as)
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
                return read_device_code(data, kind, shown_as)
    except OSError as exc:
        return DeviceCode(shown_as, "unreadable", error=f"cannot read it ({exc.strerror or exc})")


def read_device_code(data: Buffer, kind: Kind, name: str) -> DeviceCode | None:
    """The device code of a whole file of ``kind`` (:func:`classify`) held in ``data``."""
    if kind == "kpack-archive":
        return _kpack_archive(data, name)
    if kind == "code-object":
        try:
            return DeviceCode(name, kind, (code_object_target(data[:64]),))
        except OffloadError as exc:
            return DeviceCode(name, kind, error=str(exc))
    try:
        if kind == "offload-bundle":  # hipcc --genco: the file is bundles, as a section is
            bundles = read_fatbin(data)
        elif _section(data, kpack.MARKER_SECTION) is not None:
            # A kpacked library's code is in its archives: its .hip_fatbin, if any is left, is no longer loaded.
            return _kpack_binary(lambda: kpack.read_marker(data, lambda wanted: _section(data, wanted)), name)
        elif (section := _section(data, SECTION)) is None:
            return None
        else:
            bundles = read_fatbin(data, section[0], section[1])
    except OffloadError as exc:
        return DeviceCode(name, kind, error=str(exc))
    return _found(name, kind, bundles)


def _found(name: str, kind: Kind, bundles: Iterable[Bundle]) -> DeviceCode:
    bundles = tuple(bundles)
    targets = tuple(dict.fromkeys(t for b in bundles for t in b.targets))
    holder = "a .hip_fatbin section" if kind == "fatbin" else "an offload bundle file"
    return DeviceCode(name, kind, targets, len(bundles), "" if targets else f"{holder} with no AMDGPU code in it")


def _kpack_binary(read: Callable[[], kpack.Marker | None], name: str) -> DeviceCode:
    try:
        marker = read()
    except OffloadError as exc:
        return DeviceCode(name, "kpack", error=str(exc))
    return DeviceCode(name, "kpack", kpack=marker)


def _kpack_archive(data: Buffer | Callable[[], kpack.Archive], name: str) -> DeviceCode:
    """The ``.kpack`` archive in ``data`` (or the one a stream's reader returns) as a file with device code."""
    try:
        archive = data() if callable(data) else kpack.read_archive(data)
    except OffloadError as exc:
        return DeviceCode(name, "kpack-archive", error=str(exc))
    targets = []
    for arch in archive.arches:
        try:
            targets.append(parse_target_id(arch))
        except ValueError:
            return DeviceCode(name, "kpack-archive", error=f"gfx_arches names '{shown(arch)}', not a target ID")
    return DeviceCode(name, "kpack-archive", tuple(targets), kpack=archive,
                      via=f"kpack archive, {archive.kernels} code object(s)")


def with_kpack(found: Iterable[DeviceCode], install_path: Callable[[str], str] = str) -> list[DeviceCode]:
    """``found`` with every kpacked binary's coverage looked up among the archives in ``found`` (paths as
    ``install_path`` maps them: where the files lie relative to each other once installed)."""
    found = list(found)
    resolved = kpack.resolve_all([(install_path(c.path), c.kpack.marker if isinstance(c.kpack, kpack.Coverage)
                                   else c.kpack) for c in found if c.kpack is not None])
    out = []
    for code in found:
        coverage = resolved.get(install_path(code.path)) if code.kind == "kpack" and code.kpack else None
        if coverage is None:
            out.append(code)
            continue
        error = (f"no kpack archive found at {', '.join(shown(p) for p in coverage.missing)} (relative to the "
                 "binary)" if coverage.missing else "")
        out.append(replace(code, targets=coverage.targets(), bundles=len(set(coverage.served.values())),
                           error=error, kpack=coverage, via=coverage.describe()))
    return out


def _scan_aks2(rest: bytes, name: str) -> DeviceCode:
    try:
        return DeviceCode(name, "aks2", read_aks2(rest))
    except OffloadError as exc:
        return DeviceCode(name, "aks2", error=str(exc))


def _section(data: Buffer, wanted: bytes) -> tuple[int, int] | None:
    """``(start, end)`` in the file of the section named ``wanted``; OffloadError for headers that lie."""
    try:
        shoff, = struct.unpack("<Q", data[0x28:0x30])
        shentsize, shnum, shstrndx = struct.unpack("<HHH", data[0x3A:0x40])
        if shnum == 0:
            return None  # no section headers: nothing to find
        if shentsize < 64 or shstrndx >= shnum or shoff + shnum * shentsize > len(data):
            raise OffloadError("truncated or damaged ELF file (its section headers are not all there)")
        headers = [struct.unpack("<IIQQQQ", data[shoff + i * shentsize:shoff + i * shentsize + 40])
                   for i in range(shnum)]
    except struct.error:
        raise OffloadError("truncated or damaged ELF file (its headers point past its end)") from None
    names = headers[shstrndx][4]
    for name, kind, _flags, _addr, offset, size in headers:
        if names + name >= len(data) or data[names + name:names + name + len(wanted) + 1] != wanted + b"\0":
            continue
        if kind == 8:  # SHT_NOBITS: no bytes in the file
            return None
        if offset + size > len(data):
            raise OffloadError(f"its {wanted.decode()} section claims {size} bytes at offset {offset}, "
                               f"past the end of the file ({len(data)} bytes)")
        return offset, offset + size
    return None


# ----------------------------------------------------------------------------- a tree, a package


def scan_tree(root: Path) -> list[DeviceCode]:
    """Every file with device code under ``root`` (symlinks not followed, so each file once), sorted by path. A
    directory that cannot be listed, or an entry that cannot be looked at (mode bits, an ACL, a dying disk), is
    an unreadable entry: its code is not known, so it cannot pass."""
    found: list[DeviceCode] = []

    def shown_path(path: Path) -> str:
        return printable(path.relative_to(root).as_posix())

    def unlisted(exc: OSError) -> None:
        where = Path(exc.filename) if exc.filename else root
        found.append(DeviceCode(shown_path(where) + "/", "unreadable",
                                error=f"cannot list this directory ({exc.strerror or exc})"))

    for dirpath, dirnames, filenames in os.walk(root, onerror=unlisted):
        dirnames.sort()
        for name in sorted(filenames):
            path = Path(dirpath) / name
            try:
                mode = path.lstat().st_mode
            except OSError as exc:  # listed, but not looked at: a directory without search permission
                found.append(DeviceCode(shown_path(path), "unreadable", error=f"cannot read it ({exc.strerror})"))
                continue
            if not stat.S_ISREG(mode):
                continue
            code = scan_file(path, shown_path(path))
            if code is not None:
                found.append(code)
    return sorted(with_kpack(found), key=lambda c: c.path)


def scan_package(package: Path | IO[bytes], shown_as: str) -> list[DeviceCode]:
    """Every file with device code inside a conda package (a path or an open, seekable file), read without
    installing it; OffloadError for a package that is not one."""
    try:
        if shown_as.endswith(".conda"):
            return with_kpack(_scan_conda(package, shown_as))
        if shown_as.endswith(".tar.bz2"):
            with (tarfile.open(package, "r:bz2") if isinstance(package, Path)
                  else tarfile.open(fileobj=package, mode="r:bz2")) as bz2:
                return with_kpack(_scan_tar(bz2))
    except OSError as exc:
        if exc.errno is not None:  # the node's disk or file system, not the package (bz2's damage has no errno)
            raise
        raise OffloadError(f"{shown(shown_as)}: not a readable conda package ({exc})") from None
    except (zipfile.BadZipFile, tarfile.TarError, EOFError) as exc:
        raise OffloadError(f"{shown(shown_as)}: not a readable conda package ({exc})") from None
    raise OffloadError(f"{shown(shown_as)}: not a conda package (.conda or .tar.bz2)")


def _scan_conda(package: Path | IO[bytes], shown_as: str) -> Iterator[DeviceCode]:
    import zstandard

    with zipfile.ZipFile(package) as archive:
        inner = [n for n in archive.namelist() if n.startswith("pkg-") and n.endswith(".tar.zst")]
        if len(inner) != 1:
            raise OffloadError(f"{shown(shown_as)}: a .conda package holds one pkg-*.tar.zst, this holds {len(inner)}")
        with archive.open(inner[0]) as raw, zstandard.ZstdDecompressor().stream_reader(raw) as stream:
            try:
                # _scan_tar closes the tar it is given.
                yield from _scan_tar(tarfile.open(fileobj=stream, mode="r|"))  # noqa: SIM115
            except zstandard.ZstdError as exc:
                raise OffloadError(f"{shown(shown_as)}: its {inner[0]} is damaged ({exc})") from None


def _scan_tar(tar: tarfile.TarFile) -> Iterator[DeviceCode]:
    """The members of a package's tar with device code, each read once as it streams by."""
    with tar:
        for member in tar:
            if not member.isfile() or member.size < 8:
                continue
            source = tar.extractfile(member)
            if source is None:
                continue
            with source:
                code = scan_stream(source, member.size, printable(member.name))
            if code is not None:
                yield code


def scan_stream(source: Readable, size: int, shown_as: str) -> DeviceCode | None:
    """The device code of a file of ``size`` bytes read once from ``source`` (gpu/stream.py): nothing is written
    and memory is bounded, whatever the file's size."""
    head = source.read(64)
    kind = classify(head)
    if kind is None:
        return None
    try:
        if kind == "aks2":
            return DeviceCode(shown_as, kind, read_aks2(head + source.read(16 + AKS2_LIMIT - len(head))))
        if kind == "code-object":
            return DeviceCode(shown_as, kind, (code_object_target(head),))
        if kind == "kpack-archive":
            return _kpack_archive(lambda: read_kpack_archive(source, size, head), shown_as)
        bundles = (read_bundle_file(source, size, head) if kind == "offload-bundle"
                   else read_host_elf(source, size, head))
    except kpack.KpackError as exc:  # the marker of a kpacked library (read_host_elf)
        return DeviceCode(shown_as, "kpack", error=str(exc))
    except OffloadError as exc:
        return DeviceCode(shown_as, kind, error=str(exc))
    if isinstance(bundles, kpack.Marker):
        return DeviceCode(shown_as, "kpack", kpack=bundles)
    return None if bundles is None else _found(shown_as, kind, bundles)


# ----------------------------------------------------------------------------- verdicts
# A library's device code is the only code it can run: it must serve the GPU. Standalone code objects and AOTriton
# archives are loaded by name, one per target from a directory of alternatives (rocBLAS's library/, AOTriton's
# images: amd-gfx11xx holds gfx1100, gfx1101, ... side by side), so a directory of them fails only when none of
# its files serves the GPU, and then every one of them is named.


def _directory(code: DeviceCode) -> str:
    return code.path.rpartition("/")[0]


def _served(found: Iterable[DeviceCode], gpu: TargetId) -> set[str]:
    """The directories where a standalone code object (or AKS2 archive) serves ``gpu``."""
    return {_directory(c) for c in found if c.kind not in (*_LIBRARY, "kpack-archive") and c.runs_on(gpu)}


def cannot_run(found: Iterable[DeviceCode], gpu: TargetId) -> list[DeviceCode]:
    """The files whose device code cannot run on ``gpu``: unreadable ones, libraries without code for it, and the
    standalone code objects of a directory where none serves it. A kpack archive is loaded only through the libraries
    that refer to it: it fails only when it cannot be read."""
    found = list(found)
    served = _served(found, gpu)
    return [c for c in found if c.error or not (c.runs_on(gpu) if c.kind in _LIBRARY else
                                                c.kind == "kpack-archive" or _directory(c) in served)]


def foreign(code: DeviceCode, gfx: str) -> list[TargetId]:
    """The targets of ``code`` for another GPU than ``gfx`` (a generic target that covers ``gfx`` is not one)."""
    return [t for t in code.targets if not covers(t.processor, gfx)]


def identity_problems(found: Iterable[DeviceCode], gfx: str) -> list[str]:
    """Why a package whose build string names ``gfx`` contradicts it: a file that cannot run on ``gfx``, or a
    library (or kpack archive) that holds code for another GPU too (the build string is the package's identity: one
    target, no fat build). Standalone code objects beside their alternatives for other GPUs are not a fat build (see above)."""
    found = list(found)
    gpu = TargetId(gfx)
    problems = []
    failing = {id(c) for c in cannot_run(found, gpu)}
    for code in found:
        if code.error:
            problems.append(f"{code.path}: {code.error}")
        elif id(code) in failing:
            problems.append(f"{code.path}: code for {', '.join(sorted_names(code.targets))}, none for {gfx}")
        elif code.kind in (*_LIBRARY, "kpack-archive") and (other := foreign(code, gfx)):
            problems.append(f"{code.path}: also holds code for {', '.join(sorted_names(other))}")
    return problems


def package_identity(package: Path, gfx: str) -> tuple[list[DeviceCode], list[str]]:
    """The device code of the package file ``package`` and why it contradicts a build string naming ``gfx``
    (:func:`identity_problems`); a package that cannot be read is one problem, with no code."""
    try:
        found = scan_package(package, package.name)
    except OffloadError as exc:
        return [], [str(exc)]
    return found, identity_problems(found, gfx)
