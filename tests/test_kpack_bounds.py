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
