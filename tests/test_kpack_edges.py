"""rocmlock.gpu.kpack at its edges: the MessagePack reader on every width kpack's writer (PyPI msgpack) can choose,
its limits at the limit and one past it, its refusals word for word, and the archive header's bounds (mutation
survivors of the kpack group, issue 41). msgpack writes the expected data: an implementation independent of the
reader under test."""

from __future__ import annotations

import struct
from typing import Any

import msgpack
import pytest
from rocmlock.gpu import kpack


def _unpack(data: bytes) -> Any:
    value, end = kpack.unpack(data)
    assert end == len(data)
    return value


@pytest.mark.parametrize("value", [
    "a" * 200, "b" * 40_000, b"\1" * 200, b"\2" * 40_000, b"\3" * 70_000,  # str8/16, bin8/16/32 past signed
    2**31 + 5, 3_000_000_000, 2**63 + 1, -(2**31), 2**15 + 1,  # uint32, uint64, int32, uint16 past signed
    list(range(15)), {str(i): i for i in range(15)},  # fixarray and fixmap of 15: their last one-byte codes
    list(range(40_000)), {i: i for i in range(40_000)}, {i: None for i in range(70_000)},  # array16, map16, map32
], ids=lambda v: f"{type(v).__name__}-{len(v) if hasattr(v, '__len__') else v}")
def test_every_width_reads_as_msgpack_wrote_it(value: Any) -> None:
    assert _unpack(msgpack.packb(value)) == value


def test_nesting_up_to_eight_levels_and_no_further() -> None:
    value: Any = 1
    for _ in range(8):
        value = [value]
    assert _unpack(msgpack.packb(value)) == value  # eight arrays around a number: the number at depth 8
    with pytest.raises(kpack.KpackError, match=r"^MessagePack data nested more than 8 deep$"):
        kpack.unpack(msgpack.packb([value]))


def test_the_value_count_at_its_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kpack, "MAX_VALUES", 5)
    assert _unpack(msgpack.packb([1, 2, 3, 4])) == [1, 2, 3, 4]  # the array and its four numbers: five values
    with pytest.raises(kpack.KpackError) as err:
        kpack.unpack(msgpack.packb([1, 2, 3, 4, 5]))
    assert str(err.value) == "MessagePack data holds more than 5 values"


def test_refusals_name_the_byte_and_what_is_wrong() -> None:
    # a map of 10 entries needs at least 20 bytes: 15 left (at byte 2, after the outer array's code) is a lie
    lying = b"\x91\xde\x00\x0a" + b"\x01" * 15
    with pytest.raises(kpack.KpackError) as err:
        kpack.unpack(lying)
    assert str(err.value) == "MessagePack data claims 10 elements at byte 4 with 15 bytes left"
    with pytest.raises(kpack.KpackError) as err:
        kpack.unpack(msgpack.packb([1, b"x" * 10])[:-3])
    assert str(err.value) == "MessagePack data claims 10 elements at byte 4 with 7 bytes left"
    with pytest.raises(kpack.KpackError) as err:
        kpack.unpack(b"\x92\x01\xcd\x01")  # a uint16 cut after its first byte
    assert str(err.value) == "MessagePack data ends early (at byte 4, 2 more wanted)"
    for text in (b"\x92\x01\xa2\xff\xfe", b"\x92\x01\xd9\x02\xff\xfe"):  # fixstr and str8, at byte 2
        with pytest.raises(kpack.KpackError) as err:
            kpack.unpack(text)
        assert str(err.value) == "MessagePack string at byte 2 is not UTF-8"
    with pytest.raises(kpack.KpackError) as err:
        kpack.unpack(b"\x81\x90\x01")  # a map whose key is an array
    assert str(err.value) == "MessagePack map key at byte 1 is not a string or number"


def _header(toc_offset: int, version: int = 1, magic: bytes = b"KPAK") -> bytes:
    return struct.pack("<4sIQ", magic, version, toc_offset)


def test_the_archive_header_at_its_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    # the TOC right after the 16-byte header, and ending the file: inside it
    assert kpack.archive_header(_header(16), 17) == 16
    assert kpack.archive_header(_header(99), 100) == 99
    for toc_offset, size in ((15, 100), (100, 100)):
        with pytest.raises(kpack.KpackError) as err:
            kpack.archive_header(_header(toc_offset), size)
        assert str(err.value) == f"its TOC offset {toc_offset} is outside the file ({size} bytes)"
    no_header = "not a kpack archive (no KPAK header)"
    for head, size in ((_header(16), 15), (_header(16)[:15], 100), (_header(16, magic=b"KPAX"), 100)):
        with pytest.raises(kpack.KpackError) as err:
            kpack.archive_header(head, size)
        assert str(err.value) == no_header
    # a version or offset with the top bit set is a large unsigned number, not a negative one
    with pytest.raises(kpack.KpackError, match=r"^kpack format version 4294967295 \(this reads version 1\)$"):
        kpack.archive_header(_header(16, version=0xFFFFFFFF), 100)
    with pytest.raises(kpack.KpackError, match=rf"^its TOC offset {2**63} is outside"):
        kpack.archive_header(_header(2**63), 100)
    monkeypatch.setattr(kpack, "TOC_LIMIT", 2 << 20)
    assert kpack.archive_header(_header(16), 16 + (2 << 20)) == 16  # a TOC of exactly the limit
    with pytest.raises(kpack.KpackError, match=r"^a TOC of 2097153 bytes \(more than 2 MiB\)$"):
        kpack.archive_header(_header(16), 17 + (2 << 20))


def test_the_toc_that_is_no_map_says_so() -> None:
    with pytest.raises(kpack.KpackError) as err:
        kpack.parse_toc(msgpack.packb({"toc": [1]}))
    assert str(err.value) == "its TOC is not a map with a 'toc' map"
