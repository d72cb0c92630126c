"""gpu/stream.py at its edges: the one-pass reader gives what the mapped reader gives whatever the chunks the stream
comes in (a magic, a u32 size, the section header table cut anywhere), a zstd blob's empty frames and empty count,
the ELF header's limits at their edges, and its refusals word for word (mutation survivors of the stream group,
issue 41)."""

from __future__ import annotations

import io
import struct
from pathlib import Path
from typing import Any

import msgpack
import pytest
from devicecode_helpers import ccob, host_elf, plain_bundle
from devicecode_helpers import code_objects as bnb_code_objects
from rocmlock.gpu import stream
from rocmlock.gpu.devicecode import DeviceCode, scan_file, scan_stream
from test_kpack import REAL, _same

HOST = "host-x86_64-unknown-linux-gnu-"
GFX942 = "hipv4-amdgcn-amd-amdhsa--gfx942"
FIXTURES = ["lib/libaxpy.so", "lib/libtwo.so", "fat-libaxpy.so", ".kpack/axpy_lib_gfx942.kpack",
            ".kpack/axpy_lib_gfx1100.kpack", "axpy_lib_gfx942-zstd.kpack"]


def _streamed(data: bytes, name: str, size: int | None = None) -> DeviceCode | None:
    return scan_stream(io.BufferedReader(io.BytesIO(data)), len(data) if size is None else size, name)  # type: ignore[arg-type]


def _both(tmp_path: Path, data: bytes, name: str) -> tuple[DeviceCode | None, DeviceCode | None]:
    (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / name).write_bytes(data)
    return _streamed(data, name), scan_file(tmp_path / name, name)


@pytest.fixture(scope="module")
def gfx942() -> bytes:
    return bnb_code_objects()["gfx942"]


def _sections(code: bytes) -> dict[str, bytes]:
    plain = plain_bundle([(HOST, b""), (GFX942, code)])
    return {"zstd.so": host_elf(ccob(plain)), "plain.so": host_elf(plain),
            "two.so": host_elf(plain + b"\0" * 100 + ccob(plain, method=0, version=2))}


@pytest.mark.parametrize("chunk", [1, 3, 7, 64, 4099])
def test_any_chunk_size_reads_as_the_file_mapped(chunk: int, gfx942: bytes, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # The stream is read CHUNK bytes at a time: every magic, u32 size field, name and the section header table
    # are cut at every place by one of these sizes somewhere in the fixtures.
    monkeypatch.setattr(stream, "CHUNK", chunk)
    files = {name: (REAL / name).read_bytes() for name in FIXTURES}
    if chunk > 1:  # a few hundred KiB of code object: byte by byte costs seconds
        files.update(_sections(gfx942))
    for name, data in files.items():
        streamed, mapped = _both(tmp_path, data, name)
        _same(streamed, mapped)
        assert streamed is not None and not streamed.error, (name, streamed)
        assert streamed.targets or streamed.kind == "kpack", name  # a kpacked library's code is in its archives


def _zstd_archive(frames: list[bytes], count: int | None = None) -> bytes:
    """The real zstd-per-kernel archive's TOC over a blob of ``frames`` (its kernel count ``count``)."""
    data = (REAL / "axpy_lib_gfx942-zstd.kpack").read_bytes()
    toc_at, = struct.unpack_from("<Q", data, 8)
    toc: dict[str, Any] = msgpack.unpackb(data[toc_at:])
    blob = struct.pack("<I", len(frames) if count is None else count)
    blob += b"".join(struct.pack("<I", len(f)) + f for f in frames)
    toc["zstd_size"] = len(blob)
    return struct.pack("<4sIQ", b"KPAK", 1, 64 + len(blob)) + b"\0" * 48 + blob + msgpack.packb(toc)


def _real_frames() -> list[bytes]:
    data = (REAL / "axpy_lib_gfx942-zstd.kpack").read_bytes()
    count, = struct.unpack_from("<I", data, 64)
    frames, pos = [], 68
    for _ in range(count):
        size, = struct.unpack_from("<I", data, pos)
        frames.append(data[pos + 4:pos + 4 + size])
        pos += 4 + size
    return frames


@pytest.mark.parametrize("chunk", [1, 5, 1 << 20])
def test_empty_zstd_frames_and_an_empty_blob_stream_as_mapped(chunk: int, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stream, "CHUNK", chunk)
    real = _real_frames()
    assert len(real) == 3
    cases = {"rebuilt": _zstd_archive(real), "empty first": _zstd_archive([b"", *real[1:]]),
             "empty last": _zstd_archive([*real[:2], b""]), "all empty": _zstd_archive([b"", b"", b""]),
             "count 0": _zstd_archive([], count=0), "fewer frames": _zstd_archive(real[:2], count=3)}
    read = {}
    for case, data in cases.items():
        streamed, mapped = _both(tmp_path, data, f"{case}.kpack")
        _same(streamed, mapped)
        assert streamed is not None
        read[case] = streamed
    problems = {case: [p for per_arch in code.kpack.entries.values() for p in per_arch.values()]  # type: ignore[union-attr]
                for case, code in read.items()}
    bad = "not an AMDGPU code object"  # an empty frame decompresses to nothing
    assert problems == {"rebuilt": ["", "", ""], "empty first": [bad, "", ""], "empty last": ["", "", bad],
                        "all empty": [bad] * 3,
                        "count 0": [f"ordinal {i} names no kernel (0 in its zstd blob)" for i in range(3)],
                        "fewer frames": ["", "", "zstd frame 2 runs past the end of its blob"]}


def _elf(section: bytes, **fields: int) -> bytearray:
    """host_elf with its ELF header's e_shoff, e_shentsize, e_shnum, e_shstrndx replaced where given."""
    data = bytearray(host_elf(section))
    at = {"shoff": (0x28, "<Q"), "shentsize": (0x3A, "<H"), "shnum": (0x3C, "<H"), "shstrndx": (0x3E, "<H")}
    for name, value in fields.items():
        offset, fmt = at[name]
        struct.pack_into(fmt, data, offset, value)
    return data


def _section_header(data: bytearray, index: int) -> int:
    shoff, = struct.unpack_from("<Q", data, 0x28)
    return shoff + 64 * index


def test_the_elf_header_at_its_edges(gfx942: bytes) -> None:
    section = ccob(plain_bundle([(HOST, b""), (GFX942, gfx942)]))
    good = _streamed(bytes(_elf(section)), "lib.so")
    assert good is not None and not good.error and [str(t) for t in good.targets] == ["gfx942"]
    # no section headers at all: nothing to look for, not damage
    assert _streamed(bytes(_elf(section, shnum=0, shstrndx=0)), "lib.so") is None
    damaged = "truncated or damaged ELF file (its section headers are not all there)"
    data = _elf(section)
    for fields in ({"shentsize": 63}, {"shstrndx": 3}, {"shoff": len(data) - 3 * 64 + 1}):
        code = _streamed(bytes(_elf(section, **fields)), "lib.so")
        assert code is not None and code.error.endswith(damaged), fields
    # the table ending exactly at the file's end is whole; the last name index is the table's last
    last = _elf(section, shoff=len(data) - 3 * 64, shstrndx=2)
    code = _streamed(bytes(last), "lib.so")
    assert code is not None and not code.error


def test_the_section_at_the_files_end_and_a_nobits_section(gfx942: bytes, tmp_path: Path) -> None:
    section = ccob(plain_bundle([(HOST, b""), (GFX942, gfx942)]))
    data = _elf(section)
    entry = _section_header(data, 1)
    offset, = struct.unpack_from("<Q", data, entry + 24)
    # the .hip_fatbin section claiming every byte to the file's end: inside it; one more: past it
    struct.pack_into("<Q", data, entry + 32, len(data) - offset)
    code = _streamed(bytes(data), "lib.so")
    assert code is not None and [str(t) for t in code.targets] == ["gfx942"]
    struct.pack_into("<Q", data, entry + 32, len(data) - offset + 1)
    code = _streamed(bytes(data), "lib.so")
    assert code is not None and code.error.endswith(
        f"its .hip_fatbin section claims {len(data) - offset + 1} bytes at offset {offset}, past the end of the "
        f"file ({len(data)} bytes)")
    # SHT_NOBITS (8): a section with no bytes in the file holds no device code
    nobits = _elf(section)
    struct.pack_into("<I", nobits, entry + 4, 8)
    streamed, mapped = _both(tmp_path, bytes(nobits), "nobits.so")
    assert streamed is None and mapped is None


def test_the_limits_of_the_pass_at_their_edges(gfx942: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    plain = plain_bundle([(HOST, b""), (GFX942, gfx942)])
    two = bytes(_elf(plain + b"\0" * 100 + ccob(plain)))
    monkeypatch.setattr(stream, "MAX_RECORDS", 2)
    code = _streamed(two, "lib.so")
    assert code is not None and not code.error  # two bundles: at the limit
    monkeypatch.setattr(stream, "MAX_RECORDS", 1)
    code = _streamed(two, "lib.so")
    assert code is not None and code.error.endswith("more than 1 offload bundles (or what looks like one) in it")
    # the section's name, once in .shstrtab and once as data: two names
    named = bytes(_elf(plain + b".hip_fatbin\0"))
    monkeypatch.setattr(stream, "MAX_NAMES", 2)
    code = _streamed(named, "lib.so")
    assert code is not None and not code.error
    monkeypatch.setattr(stream, "MAX_NAMES", 1)
    code = _streamed(named, "lib.so")
    assert code is not None and code.error.endswith("more than 1 '.hip_fatbin' names in it")


@pytest.mark.parametrize("name", ["lib/libaxpy.so", ".kpack/axpy_lib_gfx942.kpack", "axpy_lib_gfx942-zstd.kpack"])
def test_a_stream_shorter_than_its_size_says_where_it_ends(name: str) -> None:
    data = (REAL / name).read_bytes()
    code = _streamed(data[:1000], name, size=len(data))
    assert code is not None and code.error.endswith(f"it ends at 1000 bytes of the {len(data)} it claims"), code


def test_a_bundle_ending_where_the_section_starts_and_a_magic_at_its_end(gfx942: bytes, tmp_path: Path) -> None:
    from devicecode_helpers import padded_host_elf

    section = ccob(plain_bundle([(GFX942, gfx942)]))
    # a whole bundle (for gfx90a) in the code right before the section, ending exactly where it starts: passed
    # over, as read_fatbin never sees it
    stray = plain_bundle([("hipv4-amdgcn-amd-amdhsa--gfx90a", b"x" * 64)])
    head, _, tail = padded_host_elf(len(stray), section)
    streamed, mapped = _both(tmp_path, head + stray + tail, "lib.so")
    assert streamed == mapped and streamed is not None and [str(t) for t in streamed.targets] == ["gfx942"]
    # a compressed bundle's magic as the section's last 4 bytes is a bundle cut short (damage), 3 of its bytes no
    # magic at all
    for extra, damaged in ((b"CCOB", True), (b"CCO", False)):
        streamed, mapped = _both(tmp_path, host_elf(section + extra), "lib.so")
        assert streamed is not None and mapped is not None
        assert (bool(streamed.error), bool(mapped.error)) == (damaged, damaged), extra
        assert streamed.error.startswith(f"compressed bundle at offset {len(section)}: ") or not damaged
