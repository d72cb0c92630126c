"""Real device code for the audit tests: the ROCm 7.2 library of PyPI's bitsandbytes 0.50.1 wheel, packages made
from such files, and crafted offload bundles around real code objects.

The wheel is a test requirement (tests/requirements-extra.txt), so its libraries are normally installed; where
they are not, the wheel is fetched once with `pip download` into ~/.cache/rocmlock-tests and read from there.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
import shutil
import struct
import subprocess
import sys
import zipfile
from datetime import UTC, datetime
from pathlib import Path

import pytest
from ciskips import in_ci

BNB_VERSION = "0.50.1"
BNB_LIB = "libbitsandbytes_rocm72.so"
# What `llvm-objdump --offloading` lists for it (two CCOB v3 zstd bundles, the same 13 targets in each).
BNB_TARGETS = {"gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151",
               "gfx1152", "gfx1153", "gfx1200", "gfx1201"}
CACHE = Path(os.environ.get("XDG_CACHE_HOME", str(Path.home() / ".cache"))) / "rocmlock-tests"
FIXED_TIME = datetime(2026, 1, 1, tzinfo=UTC)


def bnb_library(name: str = BNB_LIB) -> Path:
    """A ROCm library of bitsandbytes 0.50.1: the installed one, else from the wheel (downloaded once, cached)."""
    spec = importlib.util.find_spec("bitsandbytes")
    if spec is not None and spec.origin and importlib.metadata.version("bitsandbytes") == BNB_VERSION:
        installed = Path(spec.origin).parent / name
        if installed.is_file():
            return installed
    cached = CACHE / f"bitsandbytes-{BNB_VERSION}" / name
    if not cached.is_file():
        _download_wheel(cached.parent)
    return cached


def _download_wheel(dest: Path) -> None:
    wheels = CACHE / "wheels"
    proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                           "--platform", "manylinux_2_24_x86_64", "--python-version", "3.11", "-d", str(wheels),
                           f"bitsandbytes=={BNB_VERSION}"], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        reason = f"bitsandbytes {BNB_VERSION} is neither installed nor downloadable: {proc.stderr[-300:]}"
        if in_ci():
            pytest.fail(reason)
        pytest.skip(reason)
    wheel = next(wheels.glob(f"bitsandbytes-{BNB_VERSION}-*.whl"))
    tmp = dest.with_name(dest.name + ".part")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    with zipfile.ZipFile(wheel) as zf:
        for member in zf.namelist():
            if member.startswith("bitsandbytes/libbitsandbytes_rocm"):
                (tmp / Path(member).name).write_bytes(zf.read(member))
    tmp.replace(dest)


def make_package(out_dir: Path, name: str, build: str, files: dict[str, Path | bytes], *, version: str = "1.0",
                 subdir: str = "linux-64", depends: tuple[str, ...] = (), constrains: tuple[str, ...] = (),
                 bz2: bool = False) -> Path:
    """A real conda package (py-rattler-build's assemble_package; .conda, or .tar.bz2) holding ``files`` (path in
    the package -> source file or bytes)."""
    import rattler_build as rb

    src = out_dir.parent / f".src-{name}-{version}-{build}"
    shutil.rmtree(src, ignore_errors=True)
    src.mkdir(parents=True)
    for rel, source in files.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes(source if isinstance(source, bytes) else source.read_bytes())
    kind = rb.ArchiveType.TarBz2 if bz2 else rb.ArchiveType.Conda
    rb.assemble_package(name=name, version=version, target_platform=subdir, build_string=build,
                        output_dir=str(out_dir), files_dir=str(src), timestamp=FIXED_TIME, license="MIT",
                        summary=f"test package {name}", depends=list(depends), constrains=list(constrains),
                        archive_type=kind, noarch="generic" if subdir == "noarch" else None)
    found = list(out_dir.glob(f"{name}-{version}-{build}.*"))
    assert len(found) == 1, found
    return found[0]


def code_objects() -> dict[str, bytes]:
    """The real code objects of the bitsandbytes library's first bundle, by processor (11 MB decompressed)."""
    import zstandard

    data = bnb_library().read_bytes()
    start = data.index(b"CCOB")
    total, size = struct.unpack_from("<QQ", data, start + 8)
    bundle = zstandard.ZstdDecompressor().decompress(data[start + 32:start + total], max_output_size=size)
    count, = struct.unpack_from("<Q", bundle, 24)
    pos, out = 32, {}
    for _ in range(count):
        offset, length, id_len = struct.unpack_from("<QQQ", bundle, pos)
        entry = bundle[pos + 24:pos + 24 + id_len].decode()
        pos += 24 + id_len
        if length:
            out[entry.rsplit("-", 1)[1]] = bundle[offset:offset + length]
    return out


# ----------------------------------------------------------------------------- crafted bundles


def plain_bundle(entries: list[tuple[str, bytes]], align: int = 8) -> bytes:
    """A plain clang offload bundle (OffloadBundler.cpp's BinaryFileHandler layout) of ``(id, data)`` entries."""
    header = len(b"__CLANG_OFFLOAD_BUNDLE__") + 8 + sum(24 + len(i) for i, _ in entries)
    offset, table, body = -(-header // align) * align, b"", b""
    for entry_id, data in entries:
        start = offset + len(body)
        table += struct.pack("<QQQ", start if data else offset, len(data), len(entry_id)) + entry_id.encode()
        body += data + b"\0" * (-len(data) % align)
    return b"__CLANG_OFFLOAD_BUNDLE__" + struct.pack("<Q", len(entries)) + table + b"\0" * (offset - header) + body


def ccob(plain: bytes, method: int = 1, version: int = 3) -> bytes:
    """``plain`` compressed as clang-offload-bundler writes it (method 0 zlib, 1 zstd; version 2 or 3)."""
    if method == 0:
        import zlib
        data = zlib.compress(plain)
    else:
        import zstandard
        data = zstandard.ZstdCompressor(level=3).compress(plain)
    digest = hashlib.md5(plain).digest()[:8]  # the format's checksum (llvm/Support/MD5.h low word)
    if version == 2:
        return b"CCOB" + struct.pack("<HHII", 2, method, 24 + len(data), len(plain)) + digest + data
    return b"CCOB" + struct.pack("<HHQQ", 3, method, 32 + len(data), len(plain)) + digest + data


def host_elf(section: bytes, name: bytes = b".hip_fatbin") -> bytes:
    """A minimal 64-bit little-endian x86-64 shared object whose only data section is ``name`` = ``section``."""
    shstrtab = b"\0" + name + b"\0.shstrtab\0"
    data_off = 64
    strtab_off = data_off + len(section)
    shoff = -(-(strtab_off + len(shstrtab)) // 8) * 8
    ehdr = (b"\x7fELF\x02\x01\x01" + b"\0" * 9 + struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 0, shoff, 0, 64, 56, 0,
                                                                 64, 3, 2))
    null = b"\0" * 64
    sec = struct.pack("<IIQQQQIIQQ", 1, 1, 2, 0, data_off, len(section), 0, 0, 4096, 0)
    strs = struct.pack("<IIQQQQIIQQ", 1 + len(name) + 1, 3, 0, 0, strtab_off, len(shstrtab), 0, 0, 1, 0)
    body = ehdr + section + shstrtab
    return body + b"\0" * (shoff - len(body)) + null + sec + strs


def aks2(kernels: list[tuple[str, bytes]]) -> bytes:
    """An AOTriton kernel archive as its v2python/aks2.py writes one: ``AKS2``, u32 uncompressed size, u32 kernel
    count, u32 directory size, then one xz stream of the directory (shared memory, block threads, offset, size,
    name length, name + NUL: u32s little-endian) and the code objects."""
    import lzma

    directory, offset = b"", 0
    for name, blob in kernels:
        raw = name.encode() + b"\0"
        directory += struct.pack("<IIIII", 0, 256, offset, len(blob), len(raw)) + raw
        offset += len(blob)
    body = directory + b"".join(blob for _, blob in kernels)
    return b"AKS2" + struct.pack("<III", len(body), len(kernels), len(directory)) + lzma.compress(body)


class _Zeros:
    """A file of ``head``, then ``count`` zero bytes, then ``tail``, made as it is read (never held whole)."""

    def __init__(self, head: bytes, count: int, tail: bytes) -> None:
        self.head, self.left, self.tail = head, count, tail

    def read(self, size: int) -> bytes:
        out = bytearray()
        while len(out) < size and (self.head or self.left or self.tail):
            want = size - len(out)
            if self.head:
                out += self.head[:want]
                self.head = self.head[want:]
            elif self.left:
                n = min(want, self.left)
                out += bytes(n)
                self.left -= n
            else:
                out += self.tail[:want]
                self.tail = self.tail[want:]
        return bytes(out)


def padded_host_elf(pad: int, section: bytes) -> tuple[bytes, int, bytes]:
    """A host ELF of ``pad`` zero bytes of code (.text) then a ``.hip_fatbin`` section ``section``, as (first 64
    bytes, zero bytes after them, the rest): the shape of a large HIP library, made without holding it."""
    names = b"\0.text\0.hip_fatbin\0.shstrtab\0"
    text_off, fatbin_off = 64, 64 + pad
    names_off = fatbin_off + len(section)
    shoff = -(-(names_off + len(names)) // 8) * 8
    ehdr = (b"\x7fELF\x02\x01\x01" + b"\0" * 9 + struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 0, shoff, 0, 64, 56, 0,
                                                                 64, 4, 3))
    def sh(name: int, kind: int, offset: int, size: int) -> bytes:
        return struct.pack("<IIQQQQIIQQ", name, kind, 0, 0, offset, size, 0, 0, 1, 0)
    table = (b"\0" * 64 + sh(1, 1, text_off, pad) + sh(7, 1, fatbin_off, len(section))
             + sh(19, 3, names_off, len(names)))
    tail = section + names + b"\0" * (shoff - names_off - len(names)) + table
    return ehdr, pad, tail


def streamed_conda(path: Path, member: str, parts: tuple[bytes, int, bytes]) -> Path:
    """A .conda (a zip of pkg-*.tar.zst) whose one file ``member`` is ``parts`` (head, zero bytes, tail), written
    as a stream: a 4 GiB member costs a few hundred KiB of disk and no memory."""
    import tarfile

    import zstandard

    head, count, tail = parts
    stem = path.name.removesuffix(".conda")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("metadata.json", '{"conda_pkg_format_version": 2}')
        with archive.open(f"pkg-{stem}.tar.zst", "w", force_zip64=True) as raw, \
                zstandard.ZstdCompressor(level=1).stream_writer(raw, closefd=False) as zst, \
                tarfile.open(fileobj=zst, mode="w|", format=tarfile.PAX_FORMAT) as tar:
            info = tarfile.TarInfo(member)
            info.size, info.mtime = len(head) + count + len(tail), 0
            tar.addfile(info, _Zeros(head, count, tail))  # type: ignore[arg-type]
    return path


# ----------------------------------------------------------------------------- kpack, at scale (issue 41, cause K)


def kpacked_elf(kernel_name: str, search_paths: list[str], indices: tuple[int, ...] = (0,)) -> bytes:
    """A kpacked host library as rocm-kpack's tool leaves one: a ``.hipFatBinSegment`` of HIPK wrappers (the code
    object index a u32 at offset 16) and, last, the ``.rocm_kpack_ref`` marker, a MessagePack map of any size (the
    real fixture's marker cannot grow in place)."""
    import msgpack

    wrappers = b"".join(b"HIPK" + struct.pack("<I", 1) + b"\0" * 8 + struct.pack("<I", i) + b"\0" * 4
                        for i in indices)
    marker = msgpack.packb({"kernel_name": kernel_name, "kpack_search_paths": search_paths})
    names = b"\0.hipFatBinSegment\0.rocm_kpack_ref\0.shstrtab\0"
    seg_off = 64
    ref_off = seg_off + len(wrappers)
    names_off = ref_off + len(marker)
    shoff = -(-(names_off + len(names)) // 8) * 8
    ehdr = (b"\x7fELF\x02\x01\x01" + b"\0" * 9 + struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 0, shoff, 0, 64, 56, 0,
                                                                 64, 4, 3))

    def sh(name: int, kind: int, offset: int, size: int) -> bytes:
        return struct.pack("<IIQQQQIIQQ", name, kind, 0, 0, offset, size, 0, 0, 1, 0)

    table = b"\0" * 64 + sh(1, 1, seg_off, len(wrappers)) + sh(19, 1, ref_off, len(marker)) \
        + sh(35, 3, names_off, len(names))
    body = ehdr + wrappers + marker + names
    return body + b"\0" * (shoff - len(body)) + table


def small_kpack(arches: list[str], keys: list[str], code_head: bytes) -> bytes:
    """A scheme-none ``.kpack`` archive whose every TOC key holds, for each of ``arches``, the one blob
    ``code_head`` (a code object's first 64 bytes are what the readers check)."""
    import msgpack

    toc = {"format_version": 1, "group_name": "g", "gfx_arch_family": arches[0], "gfx_arches": arches,
           "compression_scheme": "none", "blobs": [{"offset": 64, "size": len(code_head)}],
           "toc": {key: {arch: {"type": "hsaco", "ordinal": 0} for arch in arches} for key in keys}}
    return struct.pack("<4sIQ", b"KPAK", 1, 64 + len(code_head)) + b"\0" * 48 + code_head + msgpack.packb(toc)


def zstd_kpack(arch: str, key: str, frames: int, code_head: bytes) -> bytes:
    """A zstd-per-kernel ``.kpack`` archive of ``frames`` frames, each ``code_head`` compressed, with a TOC entry
    ``<key>#<i>`` for each: a few KiB once compressed in a package, however many frames."""
    import msgpack
    import zstandard

    frame = zstandard.ZstdCompressor().compress(code_head)
    blob = struct.pack("<I", frames) + (struct.pack("<I", len(frame)) + frame) * frames
    toc = {"format_version": 1, "group_name": "g", "gfx_arch_family": arch, "gfx_arches": [arch],
           "compression_scheme": "zstd-per-kernel", "zstd_offset": 64, "zstd_size": len(blob),
           "toc": {f"{key}#{i}": {arch: {"type": "hsaco", "ordinal": i}} for i in range(frames)}}
    return struct.pack("<4sIQ", b"KPAK", 1, 64 + len(blob)) + b"\0" * 48 + blob + msgpack.packb(toc)


def sparse_zstd_kpack(path: Path, arch: str, key: str, frame_size: int, entries: int = 1) -> Path:
    """A zstd-per-kernel archive at ``path`` whose one frame claims ``frame_size`` bytes, written sparse (a hole of
    zeros: a few KiB on disk), its TOC after the hole: ``entries`` keys ``<key>#<i>``, each naming that frame."""
    import msgpack

    toc = msgpack.packb({"format_version": 1, "group_name": "g", "gfx_arch_family": arch, "gfx_arches": [arch],
                         "compression_scheme": "zstd-per-kernel", "zstd_offset": 64, "zstd_size": 8 + frame_size,
                         "toc": {f"{key}#{i}": {arch: {"type": "hsaco", "ordinal": 0}} for i in range(entries)}})
    toc_at = 64 + 8 + frame_size
    with open(path, "wb") as f:
        f.write(struct.pack("<4sIQ", b"KPAK", 1, toc_at) + b"\0" * 48 + struct.pack("<II", 1, frame_size))
        f.seek(toc_at)
        f.write(toc)
    return path
