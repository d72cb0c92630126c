"""The device-code reader (rocmlock.gpu.offload, rocmlock.gpu.devicecode) on real code and on hostile input.

Real code: PyPI's bitsandbytes 0.50.1 ROCm 7.2 library (two CCOB v3 zstd bundles, 13 targets) and the code objects
inside it, rewrapped as the other forms the format has (plain bundle, CCOB v2 zlib, several bundles back to back,
a standalone .hsaco). Libraries compiled by ROCm 7.2.4's hipcc are in tests/test_rocm72_devicecode.py.
Hostile: sizes that lie, a 16 GiB zstd bomb (hand-made RLE blocks: 512 KiB on disk), damaged headers; each is one
line naming the bundle's offset, never a traceback, and the bomb is never inflated.
"""

from __future__ import annotations

import io
import struct
from pathlib import Path

import pytest
import zstandard
from devicecode_helpers import BNB_TARGETS, aks2, bnb_library, ccob, host_elf, plain_bundle
from devicecode_helpers import code_objects as bnb_code_objects
from rocmlock.gpu import offload
from rocmlock.gpu.devicecode import DeviceCode, scan_file, scan_stream
from rocmlock.gpu.offload import (
    GENERIC,
    MACH,
    OffloadError,
    TargetId,
    code_object_target,
    parse_target_id,
    read_fatbin,
    runs_on,
)
from rocmlock.gpu.targets import all_targets

GFX942 = "hipv4-amdgcn-amd-amdhsa--gfx942"
HOST = "host-x86_64-unknown-linux-gnu-"


@pytest.fixture(scope="module")
def code_objects() -> dict[str, bytes]:
    """The real code objects of the library's first bundle, by processor."""
    return bnb_code_objects()


def _fatbin(tmp_path: Path, section: bytes, name: str = "lib.so") -> Path:
    path = tmp_path / name
    path.write_bytes(host_elf(section))
    return path


# ----------------------------------------------------------------------------- real code


def test_the_bitsandbytes_rocm72_library_holds_two_zstd_bundles_for_13_targets() -> None:
    code = scan_file(bnb_library(), "libbitsandbytes_rocm72.so")
    assert code is not None and code.kind == "fatbin" and not code.error
    assert code.bundles == 2
    assert {str(t) for t in code.targets} == BNB_TARGETS
    data = bnb_library().read_bytes()
    bundles = read_fatbin(data, data.index(b"CCOB"), len(data))
    assert [(b.compression, b.version) for b in bundles[:2]] == [("zstd", 3), ("zstd", 3)]
    assert code.runs_on(TargetId("gfx942")) and code.runs_on(TargetId("gfx1151"))
    # No gfx908 (MI100) and no gfx1030 in the 7.2 build: the audit must say so.
    assert not code.runs_on(TargetId("gfx908")) and not code.runs_on(TargetId("gfx1030"))


def test_a_standalone_code_object_names_its_processor_from_e_flags(code_objects: dict[str, bytes],
                                                                   tmp_path: Path) -> None:
    for gfx in ("gfx90a", "gfx942", "gfx1100", "gfx1201"):
        path = tmp_path / f"kernel-{gfx}.hsaco"
        path.write_bytes(code_objects[gfx])
        code = scan_file(path, path.name)
        assert code is not None and code.kind == "code-object"
        # hipcc's default for these: code object V6 with xnack and sramecc "any" (no suffix) where supported.
        assert [str(t) for t in code.targets] == [gfx]


def test_plain_zlib_v2_and_back_to_back_bundles_read_like_the_real_one(code_objects: dict[str, bytes],
                                                                      tmp_path: Path) -> None:
    plain = plain_bundle([(HOST, b""), (GFX942, code_objects["gfx942"]),
                          ("hipv4-amdgcn-amd-amdhsa--gfx90a", code_objects["gfx90a"])])
    other = plain_bundle([(HOST, b""), ("hipv4-amdgcn-amd-amdhsa--gfx1100", code_objects["gfx1100"])])
    section = plain + b"\0" * (-len(plain) % 4096) + ccob(other, method=0, version=2) + b"\0" * 100
    section += ccob(plain_bundle([("hipv4-amdgcn-amd-amdhsa--gfx1201", code_objects["gfx1201"])]))
    bundles = read_fatbin(section)
    assert [(b.compression, b.version) for b in bundles] == [("", 0), ("zlib", 2), ("zstd", 3)]
    assert [[str(t) for t in b.targets] for b in bundles] == [["gfx942", "gfx90a"], ["gfx1100"], ["gfx1201"]]
    code = scan_file(_fatbin(tmp_path, section), "lib.so")
    assert code is not None and code.bundles == 3 and len(code.targets) == 4


def test_an_aotriton_kernel_archive_names_the_target_of_its_code_objects(code_objects: dict[str, bytes],
                                                                         tmp_path: Path) -> None:
    path = tmp_path / "FONLY__^bf16@16,128,False,True.aks2"
    path.write_bytes(aks2([("attn_fwd-Sig-F__^bf16_128-Gpu-gfx942", code_objects["gfx942"]),
                           ("attn_fwd-Sig-F__^bf16_64-Gpu-gfx942", b""),  # a kernel that did not compile: size 0
                           ("attn_fwd-Sig-F__^fp16_128-Gpu-gfx942", code_objects["gfx942"])]))
    code = scan_file(path, path.name)
    assert code is not None and code.kind == "aks2" and not code.error
    assert [str(t) for t in code.targets] == ["gfx942"]
    assert code.runs_on(TargetId("gfx942")) and not code.runs_on(TargetId("gfx90a"))
    data = path.read_bytes()
    for damaged, message in [
        (data[:16] + bytes(b ^ 0x33 for b in data[16:64]) + data[64:], "AKS2 archive: cannot decompress it"),
        (data[:8] + struct.pack("<I", 1 << 30) + data[12:], "AKS2 header claims 1073741824 kernels"),
        (aks2([("empty", b"")]), "AKS2 archive: no code object in its first 4 MiB"),
    ]:
        path.write_bytes(damaged)
        code = scan_file(path, path.name)
        assert code is not None and message in code.error and "\n" not in code.error


# ----------------------------------------------------------------------------- which code runs where


@pytest.mark.parametrize(("code", "gpu", "runs"), [
    ("gfx942", "gfx942", True),
    ("gfx90a", "gfx942", False),
    # AMDGPUUsage, "AMDGPU Generic Processors".
    ("gfx9-4-generic", "gfx942", True),
    ("gfx9-4-generic", "gfx950", True),
    ("gfx9-4-generic", "gfx90a", False),
    ("gfx9-generic", "gfx906", True),
    ("gfx9-generic", "gfx90a", False),
    ("gfx10-3-generic", "gfx1030", True),
    ("gfx10-3-generic", "gfx1100", False),
    ("gfx11-generic", "gfx1151", True),
    ("gfx11-generic", "gfx1201", False),
    ("gfx12-generic", "gfx1201", True),
    # A feature set on or off needs the GPU in that mode; "any" runs in both; an unknown mode is not held against it.
    ("gfx942:xnack+", "gfx942:xnack-", False),
    ("gfx942:xnack+", "gfx942:xnack+", True),
    ("gfx942:xnack+", "gfx942", True),
    ("gfx942", "gfx942:xnack-", True),
    ("gfx90a:sramecc-:xnack-", "gfx90a:sramecc+:xnack-", False),
    ("gfx90a:sramecc+:xnack-", "gfx90a:sramecc+:xnack-", True),
    ("gfx9-4-generic:xnack-", "gfx950:xnack+", False),
    ("amdgcnspirv", "gfx1100", True),
])
def test_coverage_follows_amdgpuusage(code: str, gpu: str, runs: bool) -> None:
    assert runs_on(parse_target_id(code), parse_target_id(gpu)) is runs


def test_every_target_of_the_gpu_table_has_an_elf_machine_value() -> None:
    names = set(MACH.values())
    assert set(all_targets()) <= names
    assert all(p in names for members in GENERIC.values() for p in members)


@pytest.mark.parametrize(("abi", "flags", "target"), [
    # V4+ (ELFABIVERSION_AMDGPU_HSA_V4..V6): EF_AMDGPU_FEATURE_XNACK_V4 0x300, SRAMECC_V4 0xc00, 2 bits each.
    (4, 0x54C, "gfx942"),  # xnack any (0x100) + sramecc any (0x400)
    (4, 0xB4C, "gfx942:sramecc-:xnack+"),
    (2, 0xE3F, "gfx90a:sramecc+:xnack-"),
    (4, 0x41, "gfx1100"),  # unsupported features: no suffix
    (4, 0x100055F, "gfx9-4-generic"),  # generic version 1 in the high byte, as hipcc 7.2.4 writes it
    (1, 0x32F, "gfx906:sramecc+:xnack+"),  # V3: one bit each, set = on
    (1, 0x02F, "gfx906:sramecc-:xnack-"),
])
def test_e_flags_name_processor_and_features(abi: int, flags: int, target: str) -> None:
    header = b"\x7fELF\x02\x01\x01\x40" + bytes([abi]) + b"\0" * 7 + struct.pack("<HHIQQQI", 3, 224, 1, 0, 0, 0, flags)
    header += b"\0" * (64 - len(header))
    assert str(code_object_target(header)) == target


@pytest.mark.parametrize("text", ["gfx942:xnack", "gfx942:foo+", "sm_90", "gfx942:xnack+:xnack-", ""])
def test_a_bad_target_id_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="target"):
        parse_target_id(text)


# ----------------------------------------------------------------------------- hostile input


def _zstd_bomb(plain_header: bytes, size: int) -> bytes:
    """A zstd frame that inflates to ``size`` bytes (``plain_header`` then zeros) from 4 bytes per 128 KiB: one raw
    block, then RLE blocks (RFC 8878, "Blocks"), with a 1 MiB window and the content size in the header."""
    block = 1 << 17
    frame = struct.pack("<I", 0xFD2FB528) + bytes([0xC0, 10 << 3]) + struct.pack("<Q", size)
    frame += (len(plain_header) << 3).to_bytes(3, "little") + plain_header
    full, rest = divmod(size - len(plain_header), block)
    rle = ((block << 3) | (1 << 1)).to_bytes(3, "little") + b"\0"
    last = ((rest << 3) | (1 << 1) | 1).to_bytes(3, "little") + b"\0"
    return frame + rle * full + last


def test_a_16_gib_zstd_bomb_is_read_as_far_as_its_header_only(tmp_path: Path) -> None:
    size = 16 << 30
    header = plain_bundle([(HOST, b""), (GFX942, b"")])
    header = header[:32] + struct.pack("<QQQ", 4096, 0, len(HOST)) + HOST.encode() + struct.pack(
        "<QQQ", 4096, size - 4096, len(GFX942)) + GFX942.encode()
    payload = _zstd_bomb(header, size)
    assert len(payload) < 600_000
    # The frame is real: zstd inflates its start to the bundle header.
    start = zstandard.ZstdDecompressor().stream_reader(payload).read(len(header))
    assert start == header
    section = b"CCOB" + struct.pack("<HHQQ", 3, 1, 32 + len(payload), size) + b"\0" * 8 + payload
    code = scan_file(_fatbin(tmp_path, section), "bomb.so")
    assert code is not None and not code.error and [str(t) for t in code.targets] == ["gfx942"]


def _one_line(tmp_path: Path, section: bytes) -> str:
    code = scan_file(_fatbin(tmp_path, section), "lib.so")
    assert code is not None and code.error and not code.targets
    assert "\n" not in code.error and "Traceback" not in code.error
    return code.error


def test_lying_sizes_and_damaged_headers_are_one_line_each(code_objects: dict[str, bytes], tmp_path: Path) -> None:
    plain = plain_bundle([(HOST, b""), (GFX942, code_objects["gfx942"])])
    good = ccob(plain)
    lying_total = good[:8] + struct.pack("<Q", len(good) * 4) + good[16:]
    assert "compressed bundle at offset 0: claims" in _one_line(tmp_path, lying_total)
    header = 32 + 24 * 2 + len(HOST) + len(GFX942)
    lying_size = good[:16] + struct.pack("<Q", header) + good[24:]  # its code lies past the size it states
    assert f"its entries run past the {header} bytes it claims" in _one_line(tmp_path, lying_size)
    assert "its header runs past the end" in _one_line(tmp_path, good[:16] + struct.pack("<Q", 40) + good[24:])
    assert "CCOB version 7" in _one_line(tmp_path, good[:4] + struct.pack("<H", 7) + good[6:])
    assert "unknown compression method 9" in _one_line(tmp_path, good[:6] + struct.pack("<H", 9) + good[8:])
    assert "truncated header" in _one_line(tmp_path, good[:20])
    damaged = good[:32] + bytes(b ^ 0x5A for b in good[32:64]) + good[64:]
    assert "cannot decompress it" in _one_line(tmp_path, damaged)
    assert "not an offload bundle" in _one_line(tmp_path, ccob(b"\0" * 200))
    past_end = plain[:32] + struct.pack("<QQQ", 64, 1 << 40, len(HOST)) + plain[56:]
    assert "claims 1099511627776 bytes at offset 64, past the end" in _one_line(tmp_path, past_end)
    assert "claims 1152921504606846976 entries" in _one_line(tmp_path, plain[:24] + struct.pack("<Q", 1 << 60))
    long_id = plain[:32] + plain[32:48] + struct.pack("<Q", 1 << 30) + plain[56:]
    assert "an entry id of 1073741824 bytes" in _one_line(tmp_path, long_id)
    assert "names no AMDGPU target ID" in _one_line(tmp_path, plain_bundle([("hipv4-amdgcn-amd-amdhsa--gfx942:\x1b[2J",
                                                                              b"")]))
    # The loader checks the code object, not the id: an id that lies about it is damage.
    swapped = plain_bundle([(GFX942, code_objects["gfx90a"])])
    assert "entry 'hipv4-amdgcn-amd-amdhsa--gfx942' holds a code object for gfx90a" in _one_line(tmp_path, swapped)


def test_a_truncated_library_is_unreadable_not_free_of_device_code(tmp_path: Path) -> None:
    data = bnb_library().read_bytes()
    cut = tmp_path / "cut.so"
    cut.write_bytes(data[:len(data) - 4096])  # the section headers sit at the end
    code = scan_file(cut, "cut.so")
    assert code is not None and "section headers are not all there" in code.error
    assert not code.runs_on(TargetId("gfx942"))


def test_the_decompressed_prefix_is_capped(monkeypatch: pytest.MonkeyPatch, code_objects: dict[str, bytes]) -> None:
    # A header bigger than the cap is refused rather than read on: HEADER_LIMIT bounds the work.
    entries = [(f"hipv4-amdgcn-amd-amdhsa--gfx942:xnack{'+-'[i % 2]}", b"") for i in range(40)]
    monkeypatch.setattr(offload, "HEADER_LIMIT", 256)
    with pytest.raises(OffloadError, match="runs past the end of the data"):
        read_fatbin(ccob(plain_bundle(entries)))


class _Counted(bytes):
    """A section that counts the bytes its ``find`` calls search."""

    searched = 0

    def find(self, sub: bytes, start: int = 0, end: int | None = None, /) -> int:  # type: ignore[override]
        type(self).searched += (len(self) if end is None else end) - start
        return super().find(sub, start, end)


@pytest.mark.parametrize("compressed", [False, True])
def test_finding_the_bundles_of_a_section_is_linear_in_its_size(code_objects: dict[str, bytes],
                                                                 compressed: bool) -> None:
    """Issue 33: each magic was searched to the section's end from every bundle, n times the section for n
    bundles (2,000 bundles took 54 s); now each byte between bundles is searched a bounded number of times."""
    one = plain_bundle([(GFX942, code_objects["gfx942"][:64])])
    one = ccob(one) if compressed else one
    one += b"\0" * (-len(one) % 512)
    section = _Counted(one * 2000)
    _Counted.searched = 0
    assert len(read_fatbin(section)) == 2000
    assert _Counted.searched < 8 * len(section), _Counted.searched


# ----------------------------------------------------------------------------- read as a stream (issue 33)


def _streamed(data: bytes, name: str = "lib.so") -> DeviceCode | None:
    """What a package's member of these bytes reads as: one pass over a stream that cannot seek."""
    return scan_stream(io.BufferedReader(io.BytesIO(data)), len(data), name)  # type: ignore[arg-type]


def _sections(objects: dict[str, bytes]) -> dict[str, bytes]:
    plain = plain_bundle([(HOST, b""), (GFX942, objects["gfx942"])])
    good = ccob(plain)
    return {"zstd": good, "plain": plain, "both": plain + b"\0" * 100 + ccob(plain, method=0, version=2),
            "lying-size": good[:16] + struct.pack("<Q", 141) + good[24:],
            "version-7": good[:4] + struct.pack("<H", 7) + good[6:],
            "damaged": good[:32] + bytes(b ^ 0x5A for b in good[32:64]) + good[64:],
            "swapped": plain_bundle([(GFX942, objects["gfx90a"])]), "empty": b"\0" * 100,
            # These two are damage read_fatbin meets at the section's end; the stream meets it at the file's.
            "lying-total": good[:8] + struct.pack("<Q", len(good) * 4) + good[16:], "cut": good[:20]}


def test_a_stream_reads_what_the_mapped_file_reads(code_objects: dict[str, bytes], tmp_path: Path) -> None:
    files = {name: host_elf(section) for name, section in _sections(code_objects).items()}
    files["bnb.so"] = bnb_library().read_bytes()
    files["genco.co"] = plain_bundle([(HOST, b""), (GFX942, code_objects["gfx942"])])
    files["genco-z.co"] = ccob(files["genco.co"])
    files["kernel.hsaco"] = code_objects["gfx90a"]
    files["notes.txt"] = b"not device code " * 10
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
        mapped, streamed = scan_file(tmp_path / name, name), _streamed(data, name)
        if name in ("lying-total", "cut"):
            assert mapped is not None and streamed is not None and mapped.error and streamed.error
            assert streamed.error.startswith("compressed bundle at offset 0: ")
        else:
            assert streamed == mapped, name
    assert sum(1 for f in files if (c := _streamed(files[f])) is not None and not c.error) == 7


def test_a_stream_is_not_fooled_by_bundle_magic_outside_the_section(code_objects: dict[str, bytes]) -> None:
    from devicecode_helpers import padded_host_elf

    section = ccob(plain_bundle([(GFX942, code_objects["gfx942"])]))
    head, pad, tail = padded_host_elf(4096, section)
    # libamdhip64 holds the magic as a string in its code: it is read past, as read_fatbin never sees it.
    stray = b"__CLANG_OFFLOAD_BUNDLE__\xff\xff" + b"CCOB\x03\x00\x01\x00" + b"\0" * (pad - 34)
    code = _streamed(head + stray + tail)
    assert code is not None and not code.error and [str(t) for t in code.targets] == ["gfx942"]
    # A bundle-like header before the section that claims to run into it would hide what it passes over: the
    # library is unreadable, never read as free of code it was not searched for.
    fake = plain_bundle([(HOST, b"")])
    fake = fake[:32] + struct.pack("<Q", 8192) + fake[40:]
    hiding = head + fake + b"\0" * (pad - len(fake)) + tail
    code = _streamed(hiding)
    assert code is not None and "what looks like a bundle at offset 64 runs into its .hip_fatbin section" in code.error


def test_a_stream_holds_a_bounded_window(code_objects: dict[str, bytes], monkeypatch: pytest.MonkeyPatch) -> None:
    from devicecode_helpers import padded_host_elf
    from rocmlock.gpu import stream

    monkeypatch.setattr(stream, "RETAIN", 1 << 16)
    monkeypatch.setattr(stream, "CHUNK", 1 << 14)
    biggest = 0
    add = stream.Window._add

    def watched(self: stream.Window, chunk: bytes) -> None:
        nonlocal biggest
        add(self, chunk)
        biggest = max(biggest, len(self.data))

    monkeypatch.setattr(stream.Window, "_add", watched)
    head, pad, tail = padded_host_elf(8 << 20, ccob(plain_bundle([(GFX942, code_objects["gfx942"])])))
    code = _streamed(head + bytes(pad) + tail)
    assert code is not None and not code.error and code.bundles == 1
    assert biggest <= 2 * (1 << 16) + (1 << 20) + (1 << 14)  # kept, one search window, one chunk
