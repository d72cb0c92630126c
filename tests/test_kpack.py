"""rocmlock audit (and build, publish, unpack's device-code checks) on TheRock's kpack layout.

The real fixtures (tests/kpack_fixtures/README.md) were made by AMD's rocm-kpack splitter from a gfx942+gfx1100
library that ROCm 7.2.4's hipcc built; the synthetic archives and markers below are written with PyPI's msgpack
(an implementation independent of the reader under test) in the layout rocm-kpack's kpack.py writes, around the
real code objects of those archives.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import shutil
import struct
import time
import tracemalloc
from pathlib import Path
from typing import Any

import msgpack
import pytest
from devicecode_helpers import make_package
from rocmlock.cli.main import main
from rocmlock.gpu import kpack
from rocmlock.gpu.devicecode import (
    DeviceCode,
    package_identity,
    scan_file,
    scan_package,
    scan_stream,
    scan_tree,
)
from rocmlock.gpu.offload import parse_target_id

REAL = Path(__file__).parent / "kpack_fixtures/real"
LIB = "lib/libaxpy.so"
KEY = "axpy/stage/lib/libaxpy.so#0"
# libtwo.so links two HIP translation units: two HIPK wrappers, indices 0 and 1.
TWO = ("axpy/stage/lib/libtwo.so#0", "axpy/stage/lib/libtwo.so#1")
PATTERN = "../.kpack/axpy_lib_@GFXARCH@.kpack"


def _real_toc(name: str) -> tuple[dict[str, Any], bytes]:
    data = (REAL / name).read_bytes()
    offset, = struct.unpack_from("<Q", data, 8)
    return msgpack.unpackb(data[offset:]), data


def real_code_object(gfx: str) -> bytes:
    """The code object AMD's splitter put in the real archive for ``gfx``."""
    toc, data = _real_toc(f".kpack/axpy_lib_{gfx}.kpack")
    blob = toc["blobs"][toc["toc"][KEY][gfx]["ordinal"]]
    return data[blob["offset"]:blob["offset"] + blob["size"]]


def archive(arches: list[str], kernels: dict[str, dict[str, bytes]], **toc_extra: Any) -> bytes:
    """A .kpack archive as rocm-kpack's PackedKernelArchive.write lays it out (scheme none): the 16-byte header,
    padding to 64, the blobs, the MessagePack TOC; ``kernels``: TOC key -> arch -> code object."""
    blob, blobs, toc = b"", [], {}
    for key, per_arch in kernels.items():
        for arch, code in per_arch.items():
            toc.setdefault(key, {})[arch] = {"type": "hsaco", "ordinal": len(blobs), "original_size": len(code)}
            blobs.append({"offset": 64 + len(blob), "size": len(code)})
            blob += code
    table = {"format_version": 1, "group_name": "axpy_lib", "gfx_arch_family": arches[0] if arches else "",
             "gfx_arches": arches, "toc": toc, "compression_scheme": "none", "blobs": blobs, **toc_extra}
    return struct.pack("<4sIQ", b"KPAK", 1, 64 + len(blob)) + b"\0" * 48 + blob + msgpack.packb(table)


def marked_library(marker: bytes | None = None, wrapper: bytes | None = None) -> bytes:
    """The real kpacked library, its .rocm_kpack_ref content or its first wrapper's magic replaced."""
    data = bytearray((REAL / LIB).read_bytes())
    original = msgpack.packb({"kpack_search_paths": [PATTERN], "kernel_name": "axpy/stage/lib/libaxpy.so"})
    # kpack's tool adds the section, then maps it to a new PT_LOAD at the end: the live copy is the last one.
    at = data.rfind(original)
    assert at == 0x6000 and data.count(b"HIPK\x01\0\0\0") == 1
    if marker is not None:
        assert len(marker) <= len(original)
        data[at:at + len(original)] = marker.ljust(len(original), b"\0")
    if wrapper is not None:
        stub = data.find(b"HIPK\x01\0\0\0")
        data[stub:stub + 4] = wrapper
    return bytes(data)


def tree(root: Path, files: dict[str, bytes | Path], gfx: str | None = "gfx942") -> Path:
    """A conda prefix holding ``files`` (path -> bytes or a fixture file), its amdgpu-target package ``gfx``."""
    (root / "conda-meta").mkdir(parents=True)
    if gfx:
        (root / f"conda-meta/amdgpu-target-1-{gfx}.json").write_text("{}")
    for rel, source in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(source if isinstance(source, bytes) else source.read_bytes())
    return root


def therock(**archives: bytes | Path) -> dict[str, bytes | Path]:
    """The real library plus the archives named (``gfx942=...``): TheRock's layout, generic + per-target."""
    return {LIB: REAL / LIB, **{f".kpack/axpy_lib_{gfx}.kpack": data for gfx, data in archives.items()}}


BOTH = {"gfx942": REAL / ".kpack/axpy_lib_gfx942.kpack", "gfx1100": REAL / ".kpack/axpy_lib_gfx1100.kpack"}


def _audit(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["audit", *argv])
    return code, capsys.readouterr().out


# ----------------------------------------------------------------------------- AMD's own output


def test_the_splitters_output_covers_what_the_fat_binary_held(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    fat = scan_file(REAL / "fat-libaxpy.so", "fat")
    assert fat is not None and fat.kind == "fatbin"
    prefix = tree(tmp_path / "env", therock(**BOTH))
    found = {c.path: c for c in scan_tree(prefix)}
    lib = found[LIB]
    assert lib.kind == "kpack" and not lib.error
    assert sorted(map(str, lib.targets)) == sorted(map(str, fat.targets)) == ["gfx1100", "gfx942"]
    assert lib.to_dict()["kpack"] == {
        "kernel_name": "axpy/stage/lib/libaxpy.so", "search_paths": [PATTERN], "code_objects": 1,
        "archives": {"gfx1100": ".kpack/axpy_lib_gfx1100.kpack", "gfx942": ".kpack/axpy_lib_gfx942.kpack"},
        "lacking": {}, "not_found": []}
    assert found[".kpack/axpy_lib_gfx942.kpack"].kind == "kpack-archive"
    code, out = _audit(capsys, "--prefix", str(prefix))
    assert code == 0, out
    assert re.search(r"ok +lib/libaxpy.so +gfx942, gfx1100 \(kpack, 2 archive\(s\)\)", out)
    assert re.search(r"ok +.kpack/axpy_lib_gfx942.kpack +gfx942 \(kpack archive, 3 code object\(s\)\)", out)
    code, out = _audit(capsys, "--prefix", str(prefix), "--target", "gfx90a")
    assert code == 1 and out.rstrip().endswith("cannot run on gfx90a: lib/libaxpy.so")


def test_a_library_of_two_translation_units_needs_both_code_objects(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    files = {**therock(**BOTH), "lib/libtwo.so": REAL / "lib/libtwo.so"}
    two = {c.path: c for c in scan_tree(tree(tmp_path / "env", files))}["lib/libtwo.so"]
    assert isinstance(two.kpack, kpack.Coverage) and two.kpack.marker.indices == (0, 1)
    assert sorted(map(str, two.targets)) == ["gfx1100", "gfx942"]
    # The gfx942 archive re-packed without the second unit's code object: the library lacks gfx942.
    toc, _ = _real_toc(".kpack/axpy_lib_gfx942.kpack")
    half = archive(["gfx942"], {key: {"gfx942": real_code_object("gfx942")} for key in toc["toc"] if key != TWO[1]})
    prefix = tree(tmp_path / "half", {**files, ".kpack/axpy_lib_gfx942.kpack": half})
    code, out = _audit(capsys, "--prefix", str(prefix))
    assert code == 1 and out.rstrip().endswith("cannot run on gfx942: lib/libtwo.so")
    assert f".kpack/axpy_lib_gfx942.kpack has no gfx942 code for it (no entry {TWO[1]})" in out


def test_a_missing_archive_fails_naming_the_binary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prefix = tree(tmp_path / "one", therock(gfx1100=BOTH["gfx1100"]))
    code, out = _audit(capsys, "--prefix", str(prefix))
    assert code == 1
    assert re.search(r"FAIL +lib/libaxpy.so +gfx1100 \(kpack, 1 archive\(s\)\)", out)
    assert out.rstrip().endswith("1 of 2 file(s) with device code cannot run on gfx942: lib/libaxpy.so")
    prefix = tree(tmp_path / "none", therock())
    code, out = _audit(capsys, "--prefix", str(prefix), "--json")
    report = json.loads(out)
    assert code == 1 and report["cannot_run"] == [LIB]
    assert report["files"][0]["error"] == f"no kpack archive found at {PATTERN} (relative to the binary)"


def test_the_zstd_archive_serves_like_the_plain_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prefix = tree(tmp_path / "env", therock(gfx942=REAL / "axpy_lib_gfx942-zstd.kpack"))
    code, out = _audit(capsys, "--prefix", str(prefix))
    assert code == 0, out
    assert re.search(r"ok +lib/libaxpy.so +gfx942 \(kpack, 1 archive\(s\)\)", out)


def test_an_archive_without_the_binarys_code_object_fails_it(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    other = archive(["gfx942"], {"other/lib/libother.so#0": {"gfx942": real_code_object("gfx942")}})
    prefix = tree(tmp_path / "env", therock(gfx942=other, gfx1100=BOTH["gfx1100"]))
    code, out = _audit(capsys, "--prefix", str(prefix))
    assert code == 1
    assert re.search(r"FAIL +lib/libaxpy.so +gfx1100 \(kpack, 1 archive\(s\); .kpack/axpy_lib_gfx942.kpack has no "
                     f"gfx942 code for it \\(no entry {KEY}\\)\\)", out)
    # A code object filed under the wrong target is not one for it (the loader checks e_flags).
    wrong = archive(["gfx942"], {KEY: {"gfx942": real_code_object("gfx1100")}})
    code, out = _audit(capsys, "--prefix", str(tree(tmp_path / "wrong", therock(gfx942=wrong))))
    assert code == 1 and "a code object for gfx1100, filed under gfx942" in out


def test_the_loader_order_most_specific_name_first_and_no_fallback(tmp_path: Path) -> None:
    """isa_target_match.h: an xnack- GPU tries gfx942:xnack- before gfx942; loader.cpp: the archive found for a
    name must hold the code, the next name is not tried."""
    empty = archive(["gfx942:xnack-"], {})
    prefix = tree(tmp_path / "env", {LIB: REAL / LIB, ".kpack/axpy_lib_gfx942:xnack-.kpack": empty,
                                     ".kpack/axpy_lib_gfx942.kpack": BOTH["gfx942"]})
    lib = {c.path: c for c in scan_tree(prefix)}[LIB]
    assert [g for g in ("gfx942:xnack-", "gfx942:xnack+", "gfx942", "gfx942:sramecc+:xnack-", "gfx90a")
            if lib.runs_on(parse_target_id(g))] == ["gfx942:xnack+", "gfx942"]
    # A name the archive file carries but its gfx_arches does not list is not served by it.
    prefix = tree(tmp_path / "mislabelled", therock(gfx942=archive(["gfx90a"], {KEY: {"gfx90a": b""}})))
    lib = {c.path: c for c in scan_tree(prefix)}[LIB]
    assert lib.error.startswith("no kpack archive found") and not lib.targets


def test_a_direct_search_path_serves_every_arch_its_archive_lists(tmp_path: Path) -> None:
    marker = msgpack.packb({"kpack_search_paths": ["../x.kpack"], "kernel_name": "axpy/stage/lib/libaxpy.so"})
    both = archive(["gfx942", "gfx1100"], {KEY: {"gfx942": real_code_object("gfx942"),
                                                "gfx1100": real_code_object("gfx1100")}})
    prefix = tree(tmp_path / "env", {LIB: marked_library(marker), "x.kpack": both})
    lib = {c.path: c for c in scan_tree(prefix)}[LIB]
    assert sorted(map(str, lib.targets)) == ["gfx1100", "gfx942"] and not lib.error
    # Paths out of the tree audited find nothing there.
    for path in ("/opt/rocm/x.kpack", "../../x.kpack"):
        marker = msgpack.packb({"kpack_search_paths": [path], "kernel_name": "k"})
        prefix = tree(tmp_path / f"out{len(path)}", {LIB: marked_library(marker), "x.kpack": both})
        assert {c.path: c for c in scan_tree(prefix)}[LIB].error.startswith("no kpack archive found")


def test_llvms_tools_see_the_fixtures_as_the_reader_does(tmp_path: Path) -> None:
    """ROCm 7.2.4's LLVM (the test chroot): the kpacked library's sections, the fat one's bundles, and the machine
    of each archive's code object, against what the reader says."""
    import rocm72chroot

    rocm72chroot.require_chroot()
    shutil.copy(REAL / LIB, tmp_path / "kpacked.so")
    shutil.copy(REAL / "fat-libaxpy.so", tmp_path / "fat.so")
    for gfx in ("gfx942", "gfx1100"):
        (tmp_path / f"{gfx}.co").write_bytes(real_code_object(gfx))
    script = ("set -e; cd /mnt/work; llvm-readelf-22 -S --wide kpacked.so; llvm-objdump-22 --offloading fat.so; "
              "llvm-readobj-22 --file-headers gfx942.co gfx1100.co")
    proc = rocm72chroot.run(["sh", "-c", script], work=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"\.hip_fatbin +NOBITS", proc.stdout)
    assert re.search(r"\.rocm_kpack_ref +PROGBITS +[0-9a-f]+ 006000 00005f", proc.stdout)
    bundles = sorted(re.findall(r"hipv4-amdgcn-amd-amdhsa--(gfx\w+)", proc.stdout))
    machines = re.findall(r"EF_AMDGPU_MACH_AMDGCN_(GFX\w+)", proc.stdout)
    lib = {c.path: c for c in scan_tree(tree(tmp_path / "env", therock(**BOTH)))}[LIB]
    assert bundles == sorted(map(str, lib.targets)) == ["gfx1100", "gfx942"]
    assert machines == ["GFX942", "GFX1100"]


# ----------------------------------------------------------------------------- hostile input


def _huge_toc(n: int) -> bytes:
    return struct.pack("<4sIQ", b"KPAK", 1, 64) + b"\0" * 48 + b"\xdd" + struct.pack(">I", n)


def _deep(depth: int) -> bytes:
    return struct.pack("<4sIQ", b"KPAK", 1, 64) + b"\0" * 48 + b"\x91" * depth + b"\xc0"


HOSTILE_ARCHIVES = {
    "version 2": (struct.pack("<4sIQ", b"KPAK", 2, 64) + b"\0" * 64, "kpack format version 2 (this reads version 1)"),
    "TOC past the end": (struct.pack("<4sIQ", b"KPAK", 1, 1 << 40) + b"\0" * 64, ("its TOC offset 1099511627776 is "
                         "outside the file (80 bytes)")),
    "huge array count": (_huge_toc(0xFFFFFFFF), "MessagePack data claims 4294967295 elements at byte 5"),
    "huge map count": (_huge_toc(0x7FFFFFFF).replace(b"\xdd", b"\xdf"), "claims 2147483647 elements"),
    "deep nesting": (_deep(10_000), "MessagePack data nested more than 8 deep"),
    "too many values": (_huge_toc(1_500_000) + b"\xc0" * 1_500_000, "holds more than 1,000,000 values"),
    "truncated TOC": (archive(["gfx942"], {KEY: {"gfx942": b"x" * 64}})[:-3], "its TOC is damaged (MessagePack"),
    "ext type": (struct.pack("<4sIQ", b"KPAK", 1, 64) + b"\0" * 48 + b"\xd4\x01\x00", "MessagePack type 0xd4"),
    "not UTF-8": (struct.pack("<4sIQ", b"KPAK", 1, 64) + b"\0" * 48 + b"\xa2\xff\xfe", "is not UTF-8"),
    "no toc map": (struct.pack("<4sIQ", b"KPAK", 1, 64) + b"\0" * 48 + msgpack.packb([1]), "not a map with a 'toc'"),
    "unknown scheme": (archive(["gfx942"], {}, compression_scheme="lz4"), "compression scheme 'lz4'"),
    "zstd blob outside": (archive(["gfx942"], {}, compression_scheme="zstd-per-kernel", zstd_offset=64,
                                  zstd_size=1 << 40), "its zstd blob (offset 64, 1099511627776 bytes)"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_ARCHIVES))
def test_a_hostile_archive_is_one_line_in_bounded_time(tmp_path: Path, case: str) -> None:
    data, message = HOSTILE_ARCHIVES[case]
    path = tmp_path / "x.kpack"
    path.write_bytes(data)
    start = time.process_time()  # CPU seconds: the machine's other work does not count
    code = scan_file(path, "x.kpack")
    assert time.process_time() - start < 5.0  # 0.6 s here
    assert code is not None and code.kind == "kpack-archive" and message in code.error, code
    assert "\n" not in code.error
    assert code.runs_on(parse_target_id("gfx942")) is False


def test_entries_that_lie_fail_alone_and_a_huge_toc_is_refused_unread(tmp_path: Path) -> None:
    liar = archive(["gfx942"], {KEY: {"gfx942": real_code_object("gfx942")}})
    toc, _ = msgpack.unpackb(liar[struct.unpack_from("<Q", liar, 8)[0]:]), None
    toc["blobs"][0]["size"] = 1 << 50
    toc["toc"]["other#0"] = {"gfx942": {"ordinal": 7}}
    table = msgpack.packb(toc)
    data = liar[:struct.unpack_from("<Q", liar, 8)[0]] + table
    entries = kpack.read_archive(data).entries
    assert entries[KEY]["gfx942"].startswith("its blob claims 1125899906842624 bytes at offset 64")
    assert entries["other#0"]["gfx942"] == "ordinal 7 names no blob (1 in the archive)"
    big = tmp_path / "big.kpack"
    with open(big, "wb") as f:
        f.write(struct.pack("<4sIQ", b"KPAK", 1, 64))
        f.truncate(64 + kpack.TOC_LIMIT + 1)  # sparse: nothing of it is read
    code = scan_file(big, "big.kpack")
    assert code is not None and code.error == f"a TOC of {kpack.TOC_LIMIT + 1} bytes (more than 16 MiB)"


HOSTILE_MARKERS = {
    "bad msgpack": (b"\xdf\xff\xff\xff\xff", None, ("its .rocm_kpack_ref marker is damaged (MessagePack data claims "
                    "4294967295 elements at byte 5")),
    "no kernel_name": (msgpack.packb({"kpack_search_paths": ["a"]}), None, "has no kernel_name or no kpack_search"),
    "no paths": (msgpack.packb({"kpack_search_paths": [1, 2], "kernel_name": "k"}), None, "no kpack_search_paths"),
    "a HIPF wrapper": (None, b"HIPF", "1 of its 1 fat binary wrapper(s) still HIPF"),
    "no HIPK wrapper": (None, b"XXXX", "a .rocm_kpack_ref marker but no HIPK wrapper"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_MARKERS))
def test_a_hostile_marker_fails_the_binary_in_one_line(tmp_path: Path, case: str,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    marker, wrapper, message = HOSTILE_MARKERS[case]
    prefix = tree(tmp_path / "env", {**therock(**BOTH), LIB: marked_library(marker, wrapper)})
    code, out = _audit(capsys, "--prefix", str(prefix))
    assert code == 1 and "Traceback" not in out
    row = next(line for line in out.splitlines() if "lib/libaxpy.so" in line and "FAIL" in line)
    assert message in row
    assert out.rstrip().endswith("cannot run on gfx942: lib/libaxpy.so")


def test_the_messagepack_reader_agrees_with_msgpack() -> None:
    values: list[Any] = [None, True, False, 0, 127, 128, 255, 256, 65535, 65536, 2**32, 2**64 - 1, -1, -32, -33,
                         -128, -129, -32768, -32769, -(2**31) - 1, -(2**63), 1.5, "", "x" * 31, "y" * 32,
                         "z" * 256, "w" * 65536, "ü", b"", b"\0" * 300, list(range(20)), [[]] * 16,
                         {str(i): i for i in range(20)}, {1: "a", "k": [1, {"n": None}]}, list(range(70000))]
    for value in values:
        for use_single_float in (False, True):
            packed = msgpack.packb(value, use_single_float=use_single_float)
            got, end = kpack.unpack(packed + b"trailing")
            assert end == len(packed)
            assert got == value, value


# ----------------------------------------------------------------------------- packages, bundles


def test_build_and_publish_identity_of_a_kpacked_package(tmp_path: Path) -> None:
    good = make_package(tmp_path / "out", "axpy", "rocm72_gfx942_h0_0", therock(gfx942=BOTH["gfx942"]))
    found, problems = package_identity(good, "gfx942")
    assert problems == [] and {c.kind for c in found} == {"kpack", "kpack-archive"}
    fat = make_package(tmp_path / "out", "axpy", "rocm72_gfx942_h0_1", therock(**BOTH))
    assert sorted(package_identity(fat, "gfx942")[1]) == [".kpack/axpy_lib_gfx1100.kpack: also holds code for gfx1100",
                                                          f"{LIB}: also holds code for gfx1100"]
    host_only = make_package(tmp_path / "out", "axpy", "rocm72_gfx942_h0_2", therock())
    assert package_identity(host_only, "gfx942")[1] == [
        f"{LIB}: no kpack archive found at {PATTERN} (relative to the binary)"]
    wrong = make_package(tmp_path / "out", "axpy", "rocm72_gfx942_h0_3", therock(gfx1100=BOTH["gfx1100"]))
    assert sorted(package_identity(wrong, "gfx942")[1]) == [".kpack/axpy_lib_gfx1100.kpack: also holds code for gfx1100",
                                                    f"{LIB}: code for gfx1100, none for gfx942"]
    # A device package (TheRock's rocm-sdk-device-<target>): archives only, each for the package's target.
    device = make_package(tmp_path / "out", "axpy-device", "rocm72_gfx942_h0_0", {".kpack/a_gfx942.kpack": BOTH["gfx942"],
                                                                               ".kpack/a_gfx1100.kpack": BOTH["gfx1100"]})
    assert package_identity(device, "gfx942")[1] == [".kpack/a_gfx1100.kpack: also holds code for gfx1100"]


def _bundle_dir(root: Path, packages: list[Path]) -> Path:
    from rocmlock.bundle.layout import (
        CHANNEL_DIR,
        ENVIRONMENT_FILE,
        PIXI_PACK_METADATA,
        ROCMLOCK_METADATA,
        BundledPackage,
        BundleMetadata,
    )

    listed = []
    for package in packages:
        (root / CHANNEL_DIR / "linux-64").mkdir(parents=True, exist_ok=True)
        shutil.copy(package, root / CHANNEL_DIR / "linux-64" / package.name)
        name, version, build = package.name.removesuffix(".conda").rsplit("-", 2)
        listed.append(BundledPackage("linux-64", package.name, name, version, build,
                                     hashlib.sha256(package.read_bytes()).hexdigest(), package.stat().st_size))
    # The other members audit does not read; the metadata lists them as pack writes them.
    files = {m: "0" * 64 for m in (ENVIRONMENT_FILE, PIXI_PACK_METADATA, f"{CHANNEL_DIR}/linux-64/repodata.json",
                                   f"{CHANNEL_DIR}/noarch/repodata.json")}
    meta = BundleMetadata("mi300x", "linux-64", "linux-64", "gfx942", "9.4.2", "7.2", "0" * 64, "0.1.0", None,
                          tuple(listed), files)
    (root / ROCMLOCK_METADATA).write_text(json.dumps(meta.to_json()))
    return root


def test_a_bundle_resolves_archives_across_its_packages(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """TheRock ships the host library and each target's archives in separate packages; installed, they share a
    prefix, so the bundle's audit looks the archives up in every package."""
    host = make_package(tmp_path / "out", "rocm-libs", "rocm72_gfx942_h0_0", therock())
    device = make_package(tmp_path / "out", "rocm-device-gfx942", "rocm72_gfx942_h0_0",
                          {".kpack/axpy_lib_gfx942.kpack": BOTH["gfx942"]})
    code, out = _audit(capsys, str(_bundle_dir(tmp_path / "good", [host, device])))
    assert code == 0, out
    assert re.search(rf"ok +{host.name}/lib/libaxpy.so +gfx942 \(kpack, 1 archive\(s\)\)", out)
    code, out = _audit(capsys, str(_bundle_dir(tmp_path / "bad", [host])))
    assert code == 1 and out.rstrip().endswith(f"cannot run on gfx942: {host.name}/lib/libaxpy.so")
    # unpack's node check reads the extracted bundle the same way.
    from rocmlock.bundle.audit import check_bundle_for_node
    from rocmlock.bundle.layout import ROCMLOCK_METADATA, parse_metadata
    from rocmlock.errors import OperationError

    for where, ok in ((tmp_path / "good", True), (tmp_path / "bad", False)):
        meta = parse_metadata((where / ROCMLOCK_METADATA).read_bytes(), "meta")
        if ok:
            assert check_bundle_for_node(where, meta, ("gfx942",), False) == (
                "device code check: 2 file(s) with GPU code, all run on this node's gfx942")
        else:
            with pytest.raises(OperationError, match=f"cannot run on this node's gfx942: {host.name}/lib/libaxpy.so"):
                check_bundle_for_node(where, meta, ("gfx942",), False)


# ----------------------------------------------------------------------------- the probe's own reader


def test_the_probes_kernels_check_reads_kpack_as_rocmlock_does(tmp_path: Path) -> None:
    from test_probe import ctx_for, probe
    from test_probe_kernels import kfd_root

    prefix = tree(tmp_path / "env", therock(**BOTH))
    files = dict(probe._scan_prefix(prefix))
    ours = {c.path: sorted(map(str, c.targets)) for c in scan_tree(prefix) if c.kind == "kpack"}
    assert {p: sorted(v) for p, v in files.items()} == ours == {LIB: ["gfx1100", "gfx942"]}
    for version, status in ((90402, "ok"), (110000, "ok"), (90010, "fail")):
        out = probe.check_kernels(ctx_for(kfd_root(tmp_path / f"node{version}", version), prefix=prefix))
        assert out.status == status, out.evidence
    # The gfx942 archive missing: the library is named on a gfx942 node.
    prefix = tree(tmp_path / "one", therock(gfx1100=BOTH["gfx1100"]))
    out = probe.check_kernels(ctx_for(kfd_root(tmp_path / "mi300x", 90402), prefix=prefix))
    assert out.status == "fail" and "1 without kernels for gfx942: lib/libaxpy.so (gfx1100)" in out.evidence
    prefix = tree(tmp_path / "none", therock())
    out = probe.check_kernels(ctx_for(kfd_root(tmp_path / "mi300x2", 90402), prefix=prefix))
    assert out.status == "fail" and f"lib/libaxpy.so (no kpack archive for it at {PATTERN})" in out.evidence
    # An archive without the library's code object, and the zstd archive.
    other = archive(["gfx942"], {"other#0": {"gfx942": real_code_object("gfx942")}})
    assert probe.kpack_served(probe.device_code_ids(REAL / LIB), LIB, {
        ".kpack/axpy_lib_gfx942.kpack": probe.kpack_archive_toc(_write(tmp_path / "o.kpack", other))}) == []
    assert probe.kpack_archive_toc(REAL / "axpy_lib_gfx942-zstd.kpack") == (["gfx942"], {
        KEY: {"gfx942"}, TWO[0]: {"gfx942"}, TWO[1]: {"gfx942"}})


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("case", sorted(HOSTILE_ARCHIVES))
def test_the_probes_reader_is_bounded_on_hostile_archives(tmp_path: Path, case: str) -> None:
    from test_probe import probe

    path = _write(tmp_path / "x.kpack", HOSTILE_ARCHIVES[case][0])
    start = time.process_time()  # CPU seconds: the machine's other work does not count
    try:
        probe.kpack_archive_toc(path)
    except probe.KernelReadError as exc:
        assert "\n" not in str(exc)
    else:  # the probe reads the TOC only: a scheme or blob it does not use is not its concern
        assert case in ("unknown scheme", "zstd blob outside")
    assert time.process_time() - start < 5.0  # 0.6 s here


def test_the_probes_messagepack_reader_agrees_with_msgpack() -> None:
    from test_probe import probe

    for value in ([1, -1, 2**40, -(2**40), 1.5, None, True, "x" * 300, b"\0" * 70000],
                  {"toc": {"a#0": {"gfx942": {"ordinal": 0}}}, "gfx_arches": ["gfx942"]}, list(range(70000))):
        packed = msgpack.packb(value)
        assert probe.unpack_msgpack(packed) == (value, len(packed))


# ----------------------------------------------------------------------------- a package's member, read as it streams by


def _streamed(data: bytes, name: str) -> DeviceCode | None:
    """What a package's member of these bytes reads as (gpu/stream.py: one pass, forwards only)."""
    return scan_stream(io.BufferedReader(io.BytesIO(data)), len(data), name)  # type: ignore[arg-type]


def _mapped(tmp_path: Path, data: bytes, name: str) -> DeviceCode | None:
    path = _write(tmp_path / name, data)
    return scan_file(path, name)


def _same(streamed: DeviceCode | None, mapped: DeviceCode | None) -> None:
    assert streamed is not None and mapped is not None
    assert (streamed, streamed.via) == (mapped, mapped.via)
    if isinstance(mapped.kpack, kpack.Archive):
        assert isinstance(streamed.kpack, kpack.Archive)
        assert (streamed.kpack.arches, streamed.kpack.entries) == (mapped.kpack.arches, mapped.kpack.entries)
    else:
        assert streamed.kpack == mapped.kpack


@pytest.mark.parametrize("name", [LIB, "lib/libtwo.so", "fat-libaxpy.so", ".kpack/axpy_lib_gfx942.kpack",
                                  ".kpack/axpy_lib_gfx1100.kpack", "axpy_lib_gfx942-zstd.kpack"])
def test_a_member_streamed_reads_as_the_file_mapped(name: str) -> None:
    streamed = _streamed((REAL / name).read_bytes(), name)
    _same(streamed, scan_file(REAL / name, name))
    assert streamed is not None and not streamed.error
    assert streamed.kind == ("fatbin" if name.startswith("fat") else "kpack" if name.endswith(".so") else
                             "kpack-archive")


@pytest.mark.parametrize("case", sorted(HOSTILE_ARCHIVES))
def test_a_hostile_archive_streamed_fails_as_mapped(tmp_path: Path, case: str) -> None:
    data, message = HOSTILE_ARCHIVES[case]
    start = time.process_time()  # CPU seconds: the machine's other work does not count
    streamed = _streamed(data, "x.kpack")
    assert time.process_time() - start < 5.0
    _same(streamed, _mapped(tmp_path, data, "x.kpack"))
    assert streamed is not None and message in streamed.error


@pytest.mark.parametrize("case", sorted(HOSTILE_MARKERS))
def test_a_hostile_marker_streamed_fails_as_mapped(tmp_path: Path, case: str) -> None:
    marker, wrapper, message = HOSTILE_MARKERS[case]
    data = marked_library(marker, wrapper)
    streamed = _streamed(data, "lib.so")
    _same(streamed, _mapped(tmp_path, data, "lib.so"))
    assert streamed is not None and streamed.kind == "kpack" and message in streamed.error


def test_entries_that_lie_streamed_read_as_mapped() -> None:
    zstd = (REAL / "axpy_lib_gfx942-zstd.kpack").read_bytes()
    toc_at, = struct.unpack_from("<Q", zstd, 8)
    toc = msgpack.unpackb(zstd[toc_at:])
    toc["toc"]["other#0"] = {"gfx942": {"ordinal": 5}}
    toc["zstd_size"] -= 100  # the last frame now runs past the blob's end
    for data in (zstd[:toc_at] + msgpack.packb(toc),
                 archive(["gfx942", "gfx1100"], {KEY: {"gfx942": real_code_object("gfx942"), "gfx1100": b"x" * 80},
                                                 "k#1": {"gfx942": b"\x7fELF" + b"\0" * 30}})):
        mapped = kpack.read_archive(data)
        streamed = _streamed(data, "x.kpack")
        assert streamed is not None and isinstance(streamed.kpack, kpack.Archive)
        assert streamed.kpack.entries == mapped.entries and any(e for a in mapped.entries.values() for e in a.values())


def test_what_one_pass_cannot_follow_is_unreadable_never_clean(tmp_path: Path) -> None:
    # The marker 2 MiB before the end (kpack's tool appends it; the pass keeps the last MiB).
    padded = (REAL / LIB).read_bytes() + b"\0" * (2 << 20)
    mapped, streamed = _mapped(tmp_path, padded, "lib.so"), _streamed(padded, "lib.so")
    assert mapped is not None and not mapped.error and isinstance(mapped.kpack, kpack.Marker)
    assert streamed is not None and streamed.kind == "kpack" and streamed.error == (
        "its .rocm_kpack_ref section lies more than 1 MiB before its end (kpack appends it there; it is read in one "
        "pass)")
    # A zstd blob 64 bytes later than kpack's writer puts it.
    zstd = (REAL / "axpy_lib_gfx942-zstd.kpack").read_bytes()
    toc_at, = struct.unpack_from("<Q", zstd, 8)
    toc = msgpack.unpackb(zstd[toc_at:])
    toc["zstd_offset"] += 64
    moved = struct.pack("<4sIQ", b"KPAK", 1, toc_at + 64) + zstd[16:64] + b"\0" * 64 + zstd[64:toc_at] \
        + msgpack.packb(toc)
    assert kpack.read_archive(moved).entries == kpack.read_archive(zstd).entries
    streamed = _streamed(moved, "x.kpack")
    assert streamed is not None and streamed.error == ("its zstd blob starts at offset 128, not at 64 where kpack "
                                                       "writes it (it is read in one pass)")
    assert not streamed.runs_on(parse_target_id("gfx942"))


def test_a_large_archive_streams_in_bounded_memory() -> None:
    small = archive(["gfx942"], {KEY: {"gfx942": real_code_object("gfx942")}})
    toc_at, = struct.unpack_from("<Q", small, 8)
    filler = 48 << 20
    data = struct.pack("<4sIQ", b"KPAK", 1, toc_at + filler) + small[16:toc_at] + b"\0" * filler + small[toc_at:]
    tracemalloc.start()
    try:
        streamed = _streamed(data, "x.kpack")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert streamed is not None and not streamed.error and streamed.targets == (parse_target_id("gfx942"),)
    assert peak < 8 << 20, peak


@pytest.mark.parametrize("bz2", [False, True], ids=["conda", "tar.bz2"])
def test_a_package_streamed_reads_as_its_installed_tree(tmp_path: Path, bz2: bool) -> None:
    files = {**therock(**BOTH), "lib/libtwo.so": REAL / "lib/libtwo.so", "lib/fat.so": REAL / "fat-libaxpy.so"}
    mapped = scan_tree(tree(tmp_path / "env", files, gfx=None))
    package = make_package(tmp_path / "out", "axpy", "rocm72_gfx942_h0_0", files, bz2=bz2)
    streamed = sorted(scan_package(package, package.name), key=lambda c: c.path)

    def rows(codes: list[DeviceCode]) -> list[tuple[object, ...]]:
        return [(c.path, c.kind, c.targets, c.error, c.via) for c in codes]

    assert rows(streamed) == rows(mapped)
    assert [c.path for c in streamed if c.kind == "kpack"] == [LIB, "lib/libtwo.so"]
    assert next(c for c in streamed if c.path == LIB).via == "kpack, 2 archive(s)"
