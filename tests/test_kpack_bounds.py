"""The kpack reader at its edges: a zstd frame that ends a few bytes past its blob, a magic at a chunk boundary of
the one-pass stream reader (gpu/stream.py), and the cost of hostile archives and trees (issue 41, cause K).

Archives are written with PyPI's msgpack in rocm-kpack's layout (tests/test_kpack.py says how), around the real code
objects and the real zstd archive of tests/kpack_fixtures.
"""

from __future__ import annotations

import io
import struct
from pathlib import Path
from typing import Any

import msgpack
import pytest
from rocmlock.gpu import kpack, stream
from rocmlock.gpu.devicecode import DeviceCode, scan_file, scan_stream
from rocmlock.gpu.offload import parse_target_id
from test_kpack import KEY, REAL, real_code_object

ZSTD = REAL / "axpy_lib_gfx942-zstd.kpack"


def _streamed(data: bytes, name: str = "x.kpack") -> DeviceCode | None:
    return scan_stream(io.BufferedReader(io.BytesIO(data)), len(data), name)  # type: ignore[arg-type]


def _mapped(tmp_path: Path, data: bytes, name: str = "x.kpack") -> DeviceCode | None:
    path = tmp_path / name
    path.write_bytes(data)
    return scan_file(path, name)


def _toc(data: bytes) -> tuple[int, dict[str, Any]]:
    at, = struct.unpack_from("<Q", data, 8)
    return at, msgpack.unpackb(data[at:])


# ----------------------------------------------------------------------------- a frame's u32 size is part of it


@pytest.mark.parametrize("short", [1, 2, 3, 4])
def test_a_zstd_frame_ending_past_its_blob_by_less_than_its_size_field_is_damage(tmp_path: Path, short: int) -> None:
    # The blob: a u32 count, then per kernel a u32 size and the frame. Its last frame ending 1..4 bytes past the
    # blob's end (the frame still whole in the file, so it decompresses) is a truncated blob, in both readers.
    data = ZSTD.read_bytes()
    at, toc = _toc(data)
    toc["zstd_size"] -= short
    damaged = data[:at] + msgpack.packb(toc)
    last = max(entry["gfx942"]["ordinal"] for entry in toc["toc"].values())
    for code in (_mapped(tmp_path, damaged), _streamed(damaged)):
        assert code is not None and isinstance(code.kpack, kpack.Archive)
        problems = {key: per["gfx942"] for key, per in code.kpack.entries.items()}
        broken = [key for key, why in problems.items() if why]
        assert broken and all(problems[k] == f"zstd frame {last} runs past the end of its blob" for k in broken)
    intact = _streamed(data)
    assert intact is not None and isinstance(intact.kpack, kpack.Archive)
    assert not any(why for per in intact.kpack.entries.values() for why in per.values())


# ----------------------------------------------------------------------------- magics at a chunk's end

# The stream reader takes the first 64 bytes, then chunks of stream.CHUNK: chunk k ends at 64 + k * CHUNK.
BOUNDARY = 64 + stream.CHUNK


def _archive_with_blob_at(offset: int) -> bytes:
    """A scheme-none archive whose one code object (gfx942) starts at ``offset``."""
    code = real_code_object("gfx942")
    toc = {"format_version": 1, "group_name": "g", "gfx_arch_family": "gfx942", "gfx_arches": ["gfx942"],
           "compression_scheme": "none", "blobs": [{"offset": offset, "size": len(code)}],
           "toc": {KEY: {"gfx942": {"type": "hsaco", "ordinal": 0, "original_size": len(code)}}}}
    body = b"\0" * (offset - 16) + code
    return struct.pack("<4sIQ", b"KPAK", 1, 16 + len(body)) + body + msgpack.packb(toc)


@pytest.mark.parametrize("before", [65, 64, 63, 1, 0])
def test_a_code_object_at_a_chunk_boundary_is_found_by_the_stream_reader(tmp_path: Path, before: int) -> None:
    # ``before`` bytes before a chunk's end: 64 is one width (the 64 bytes kept at a magic) before it.
    data = _archive_with_blob_at(BOUNDARY - before)
    streamed, mapped = _streamed(data), _mapped(tmp_path, data)
    assert mapped is not None and not mapped.error and mapped.targets == (parse_target_id("gfx942"),)
    assert streamed is not None and (streamed.targets, streamed.error) == (mapped.targets, mapped.error), streamed
    assert isinstance(mapped.kpack, kpack.Archive) and isinstance(streamed.kpack, kpack.Archive)
    assert streamed.kpack.entries == mapped.kpack.entries == {KEY: {"gfx942": ""}}  # its code object was seen


def test_a_wrapper_magic_at_a_chunk_boundary_is_kept() -> None:
    # The fat binary wrappers' magics (24 bytes kept each) through the same mark-keeping, one width before the end
    # of the first chunks and across them.
    marks = stream._Marks(stream._WRAPPER_MAGIC, stream.WRAPPER)
    data = bytearray(3 * stream.CHUNK)
    spots = [stream.CHUNK - 24, stream.CHUNK - 12, stream.CHUNK - 2, 2 * stream.CHUNK - 24, 3 * stream.CHUNK - 24,
             3 * stream.CHUNK - 4]
    for i, at in enumerate(spots):
        data[at:at + 4] = b"HIPK"
        data[at + 4:at + 8] = struct.pack("<I", i)
    for at in range(0, len(data), stream.CHUNK):
        marks(at, bytes(data[at:at + stream.CHUNK]))
    marks.finish()
    assert sorted(marks.found) == spots
    assert all(marks.found[at] == bytes(data[at:at + 24]) for at in spots)


# ----------------------------------------------------------------------------- cost (issue 41, cause K)


def _peak(run: Any) -> tuple[Any, int, float]:
    """``run()``'s result, the peak of Python allocations while it ran (a bytes slice of a mapped file counts) and
    its CPU seconds (the machine's other work does not count)."""
    import time
    import tracemalloc

    tracemalloc.start()
    start = time.process_time()
    try:
        out = run()
        return out, tracemalloc.get_traced_memory()[1], time.process_time() - start
    finally:
        tracemalloc.stop()


def test_a_sparse_zstd_frame_is_read_in_bounded_memory_once(tmp_path: Path) -> None:
    # A frame claiming 64 MiB (a hole: 8 KiB on disk), named by 200 TOC entries. The whole frame was sliced out of
    # the mapped file for each entry: a 400 MB one was a MemoryError. At most kpack.FRAME_KEEP bytes of it are read,
    # once. Both readers agree on it (the stream reader keeps a frame's first FRAME_KEEP bytes as it passes).
    from devicecode_helpers import sparse_zstd_kpack

    path = sparse_zstd_kpack(tmp_path / "s.kpack", "gfx942", "k", 64 << 20, entries=200)
    assert path.stat().st_blocks * 512 < 1 << 20
    mapped, peak, took = _peak(lambda: scan_file(path, "s.kpack"))
    assert peak < 4 << 20, peak
    assert took < 5.0  # 0.01 s here; 200 copies of 64 MiB before
    assert mapped is not None and isinstance(mapped.kpack, kpack.Archive)
    problems = {per["gfx942"] for per in mapped.kpack.entries.values()}
    assert len(mapped.kpack.entries) == 200 and len(problems) == 1
    assert problems.pop().startswith("its zstd frame cannot be decompressed")
    with open(path, "rb") as f:
        streamed = scan_stream(f, path.stat().st_size, "s.kpack")
    assert streamed is not None and isinstance(streamed.kpack, kpack.Archive)
    assert streamed.kpack.entries == mapped.kpack.entries


def test_each_toc_entry_costs_one_look_up_in_a_blob_of_many_frames(tmp_path: Path) -> None:
    # 20,000 frames, an entry for each: the stream reader walked the frames before an ordinal again for each entry
    # (quadratic: 8,000 frames took 9 s, a 7.5 KB .conda 75 s in `audit`).
    from devicecode_helpers import zstd_kpack

    data = zstd_kpack("gfx942", "k", 20_000, real_code_object("gfx942")[:64])
    import time

    start = time.process_time()
    streamed = _streamed(data)
    took = time.process_time() - start
    assert took < 15.0, took  # 2 s here, most of it the TOC's 20,000 entries decoded; about a minute before
    assert streamed is not None and not streamed.error and isinstance(streamed.kpack, kpack.Archive)
    assert streamed.kpack.kernels == 20_000
    assert not any(why for per in streamed.kpack.entries.values() for why in per.values())
    mapped = _mapped(tmp_path, data)
    assert mapped is not None and isinstance(mapped.kpack, kpack.Archive)
    assert mapped.kpack.entries == streamed.kpack.entries
    # A frame past the blob's end: every ordinal from it on says so, in both readers.
    at, toc = _toc(data)
    toc["zstd_size"] -= 50
    cut = data[:at] + msgpack.packb(toc)
    broken = {per["gfx942"] for per in _archive(_streamed(cut)).entries.values()} - {""}
    assert broken == {"zstd frame 19999 runs past the end of its blob"}
    assert _archive(_streamed(cut)).entries == _archive(_mapped(tmp_path, cut)).entries


def _archive(code: DeviceCode | None) -> kpack.Archive:
    assert code is not None and isinstance(code.kpack, kpack.Archive)
    return code.kpack


def test_more_frames_than_are_walked_fail_the_entries_past_them(tmp_path: Path) -> None:
    _, toc = _toc(ZSTD.read_bytes())
    data = ZSTD.read_bytes()
    count_at = toc["zstd_offset"]
    assert struct.unpack_from("<I", data, count_at)[0] == 3
    # Frames of size 0 (4 bytes each) past kpack.MAX_FRAMES, the entries naming the last ones.
    extra = kpack.MAX_FRAMES + 2
    blob = struct.pack("<I", 3 + extra) + data[count_at + 4:count_at + toc["zstd_size"]] + b"\0" * 4 * extra
    toc.update(zstd_size=len(blob), toc={**toc["toc"], "late#0": {"gfx942": {"ordinal": kpack.MAX_FRAMES}},
                                         "empty#0": {"gfx942": {"ordinal": 3}}})
    moved = data[:count_at] + blob
    moved = moved[:8] + struct.pack("<Q", len(moved)) + moved[16:] + msgpack.packb(toc)
    for code in (_mapped(tmp_path, moved), _streamed(moved)):
        entries = _archive(code).entries
        assert entries["late#0"]["gfx942"] == kpack.TOO_MANY_FRAMES
        assert entries["empty#0"]["gfx942"] == "not an AMDGPU code object"  # an empty frame: nothing out
        assert entries[KEY]["gfx942"] == ""


def _kpack_tree(root: Path, archives: int, libraries: int, paths: int) -> Path:
    """A prefix of ``archives`` small archives (gfx942, key k#0) and ``libraries`` kpacked libraries whose markers
    list ``paths`` search paths each: half one that finds nothing, given again and again, half one per archive."""
    from devicecode_helpers import kpacked_elf, small_kpack

    (root / "conda-meta").mkdir(parents=True)
    (root / "conda-meta/amdgpu-target-1-gfx942.json").write_text("{}")
    (root / "lib/.kpack").mkdir(parents=True)
    one = small_kpack(["gfx942"], ["k#0"], real_code_object("gfx942")[:64])
    for i in range(archives):
        (root / f"lib/.kpack/x{i}_gfx942.kpack").write_bytes(one)
    search = [".kpack/@GFXARCH@"] * (paths // 2) + [f".kpack/x{j}_@GFXARCH@.kpack" for j in range(paths - paths // 2)]
    for i in range(libraries):
        (root / f"lib/lib{i}.so").write_bytes(kpacked_elf("k", search))
    return root


def test_search_paths_are_looked_up_not_matched_against_every_archive(tmp_path: Path) -> None:
    # Each search path was matched against every archive of the tree (and the archives sorted again for each):
    # a 1 MB tree of 2,000 archives and 8 libraries of 2,600 search paths took 56 s and 417 MiB in `audit` and 58 s
    # and 421 MiB in the probe (benchmarks/README.md). Half of that here: 14 s before, 0.3 s after.
    from rocmlock.gpu.devicecode import scan_tree
    from test_probe import probe

    root = _kpack_tree(tmp_path / "env", 1000, 4, 2600)
    found, peak, took = _peak(lambda: scan_tree(root))
    assert took < 5.0, took
    assert peak < 64 << 20, peak
    libs = [c for c in found if c.kind == "kpack"]
    assert len(libs) == 4 and all(c.targets == (parse_target_id("gfx942"),) and not c.error for c in libs)
    assert all(isinstance(c.kpack, kpack.Coverage) and c.kpack.served == {"gfx942": "lib/.kpack/x0_gfx942.kpack"}
               for c in libs)
    files, peak, took = _peak(lambda: dict(probe._scan_prefix(root)))
    assert took < 5.0 and peak < 64 << 20, (took, peak)
    assert {p: v for p, v in files.items() if p.endswith(".so")} == {f"lib/lib{i}.so": ["gfx942"] for i in range(4)}


def _archive_of(arches: list[str], keys: list[str]) -> kpack.Archive:
    return kpack.Archive(tuple(arches), arches[0], {key: {arch: "" for arch in arches} for key in keys})


def test_a_name_found_twice_in_a_path_serves_either_search_path() -> None:
    # The index keys a path by what is around each place a name it lists occurs: both places count.
    marker = kpack.Marker("k", ("gfx942/x_@GFXARCH@.kpack",), (0,))
    archives = {"gfx942/x_gfx942.kpack": _archive_of(["gfx942"], ["k#0"]),
                "gfx942/x_gfx90a.kpack": _archive_of(["gfx90a"], ["k#0"])}
    assert kpack.resolve(marker, "lib.so", archives).served == {"gfx942": "gfx942/x_gfx942.kpack",
                                                                "gfx90a": "gfx942/x_gfx90a.kpack"}
    marker = kpack.Marker("k", ("@GFXARCH@/x_gfx942.kpack", "@GFXARCH@/x_gfx90a.kpack"), (0,))
    assert kpack.resolve(marker, "lib.so", archives).served == {"gfx942": "gfx942/x_gfx942.kpack"}
    # A name across a "/" is no name the loader puts there; a path given twice counts once, in its first place.
    archives["a/b.kpack"] = _archive_of(["a/b"], ["k#0"])
    assert kpack.resolve(kpack.Marker("k", ("@GFXARCH@.kpack",), (0,)), "lib.so", archives).missing
    marker = kpack.Marker("k", ("gfx942/x_gfx90a.kpack", "gfx942/x_@GFXARCH@.kpack", "gfx942/x_gfx90a.kpack"), (0,))
    coverage = kpack.resolve(marker, "lib.so", archives)
    assert list(coverage.served.items()) == [("gfx90a", "gfx942/x_gfx90a.kpack"), ("gfx942", "gfx942/x_gfx942.kpack")]


def test_the_probe_prints_a_search_path_escaped(tmp_path: Path) -> None:
    # A library's search path is read from the library: an ESC in it reached the terminal through the probe's table.
    from devicecode_helpers import kpacked_elf
    from test_kpack import tree
    from test_probe import ctx_for, probe
    from test_probe_kernels import kfd_root

    prefix = tree(tmp_path / "env", {"lib/libx.so": kpacked_elf("k", ["\x1b]0;owned\x07../.kpack/@GFXARCH@.kpack"])})
    out = probe.check_kernels(ctx_for(kfd_root(tmp_path / "node", 90402), prefix=prefix))
    assert out.status == "fail" and "\x1b" not in out.evidence and "\x07" not in out.evidence
    assert "no kpack archive for it at \\x1b]0;owned\\x07../.kpack/@GFXARCH@.kpack" in out.evidence
