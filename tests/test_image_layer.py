"""The image layer writer (issue 43, speed): ``write_layer`` writes its tar stream itself, each file read straight
into the compressor's chunks, and must give the very bytes it gave when Python's tarfile wrote the stream (the
same tar, so the same diff_id, for the same inputs); and the gzip writer stores what does not compress in
deflate's stored blocks, written directly, in a stream GNU gzip reads."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import random
import shutil
import struct
import subprocess
import tarfile
import zlib
from pathlib import Path

import pytest
from rocmlock.image.oci import HashingWriter, write_layer
from rocmlock.util import pgzip
from rocmlock.util.pgzip import ParallelGzip

MTIME = 1_767_225_600
MIB = 1 << 20


def _tree(root: Path) -> None:
    """A prefix with what installed packages hold: text that deflates, random bytes that are stored, files at and
    around the 512-byte block and the 1 MiB chunk, empty and executable files, long and non-ASCII names, links."""
    rng = random.Random(43)
    lib = root / "opt/env/lib/python3.12/site-packages/a_package_with_a_rather_long_name/and_a_deep/sub_directory"
    lib.mkdir(parents=True)
    (root / "opt/env/bin").mkdir(parents=True)
    (root / "opt/env/include").mkdir()
    (root / "opt/env/share/empty-dir").mkdir(parents=True)
    (root / "opt/env/include/header.h").write_bytes(b"#define A_HEADER_LINE 1 /* repeated */\n" * 60_000)
    (root / "opt/env/lib/libcode.so").write_bytes(rng.randbytes(3 * MIB + 12_345))
    (root / "opt/env/lib/chunk.bin").write_bytes(rng.randbytes(MIB))
    for size in (0, 1, 511, 512, 513):
        (root / f"opt/env/share/f{size}").write_bytes(rng.randbytes(size))
    (lib / ("module_" + "x" * 90 + ".py")).write_text("print('a path longer than 100 characters')\n")
    (root / "opt/env/share/caf\u00e9-na\u00efve.txt").write_text("non-ASCII name\n")
    tool = root / "opt/env/bin/tool"
    tool.write_text("#!/bin/sh\nexec true\n")
    tool.chmod(0o755)
    (root / "opt/env/bin/tool-link").symlink_to("tool")
    (root / "opt/env/lib/dangling").symlink_to("../nowhere/at/all")
    os.link(root / "opt/env/lib/chunk.bin", root / "opt/env/lib/chunk-hardlink.bin")


def _tarfile_layer(root: Path, out: Path, mtime: int) -> tuple[str, str, int]:
    """The layer as rocmlock wrote it before (main at 25a5f27): Python's tarfile streaming into the gzip writer."""
    paths = sorted((Path(d, n) for d, dirs, files in os.walk(root) for n in (*dirs, *files)),
                   key=lambda p: p.relative_to(root).as_posix())
    with out.open("wb") as raw:
        outer = HashingWriter(raw)
        with ParallelGzip(outer) as gz, \
                tarfile.open(fileobj=gz, mode="w|", format=tarfile.PAX_FORMAT, bufsize=1 << 20) as tar:  # type: ignore[call-overload]
            tar.copybufsize = 1 << 20
            for path in paths:
                st = path.lstat()
                info = tarfile.TarInfo(path.relative_to(root).as_posix())
                info.mtime, info.uid, info.gid, info.uname, info.gname = mtime, 0, 0, "", ""
                if path.is_symlink():
                    info.type, info.linkname, info.mode = tarfile.SYMTYPE, os.readlink(path), 0o777
                    tar.addfile(info)
                elif path.is_dir():
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    tar.addfile(info)
                else:
                    info.size, info.mode = st.st_size, 0o755 if st.st_mode & 0o111 else 0o644
                    with path.open("rb") as fh:
                        tar.addfile(info, fh)
    return "sha256:" + gz.sha256.hexdigest(), "sha256:" + outer.sha.hexdigest(), outer.size


def test_the_layer_is_byte_for_byte_the_one_tarfile_wrote(tmp_path: Path) -> None:
    root = tmp_path / "rootfs"
    _tree(root)
    ours = write_layer(root, tmp_path / "ours.gz", MTIME)
    before = _tarfile_layer(root, tmp_path / "tarfile.gz", MTIME)
    data = (tmp_path / "ours.gz").read_bytes()
    assert data == (tmp_path / "tarfile.gz").read_bytes()
    assert ours == before
    assert ours[1] == "sha256:" + hashlib.sha256(data).hexdigest() and ours[2] == len(data)
    raw = gzip.decompress(data)
    assert ours[0] == "sha256:" + hashlib.sha256(raw).hexdigest() and len(raw) % tarfile.RECORDSIZE == 0
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert tar.extractfile("opt/env/lib/libcode.so").read() == (root / "opt/env/lib/libcode.so").read_bytes()  # type: ignore[union-attr]
    assert members["opt/env/bin/tool"].mode == 0o755 and members["opt/env/include/header.h"].mode == 0o644
    assert members["opt/env/bin/tool-link"].linkname == "tool" and members["opt/env/share/empty-dir"].isdir()
    assert members["opt/env/lib/chunk-hardlink.bin"].isfile()  # hard links are written as files
    assert "opt/env/share/caf\u00e9-na\u00efve.txt" in members


def _reference_gzip(data: bytes, level: int = pgzip.LEVEL) -> bytes:
    """The stream the module describes: fixed chunks (the last may be a whole one), each deflated with the
    previous one's last 32 KiB as its dictionary."""
    chunks = [data[i:i + pgzip.CHUNK] for i in range(0, len(data), pgzip.CHUNK)] or [b""]
    body = b"".join(pgzip._deflate(c, chunks[i - 1][-32768:] if i else b"", level, i == len(chunks) - 1)
                    for i, c in enumerate(chunks))
    return pgzip._HEADER + body + struct.pack("<II", zlib.crc32(data), len(data) & 0xFFFFFFFF)


@pytest.mark.parametrize("size", [0, 1, MIB - 1, MIB, MIB + 1, 2 * MIB, 3 * MIB + 12_345])
def test_writes_and_file_copies_in_any_pieces_give_the_reference_stream(tmp_path: Path, size: int) -> None:
    rng = random.Random(size)
    data = b"".join(rng.randbytes(4096) if i % 3 == 0 else b"repeated text " * 300 for i in range(size // 4096 + 1))
    data = data[:size]
    (tmp_path / "src").write_bytes(data)
    buf = io.BytesIO()
    with ParallelGzip(buf) as gz, (tmp_path / "src").open("rb", buffering=0) as fh:
        third = size // 3
        gz.write(data[:third])  # a write, then a file copy from where it stopped, then writes of odd sizes
        fh.seek(third)
        assert gz.copy_from(fh, 2 * third - third) == third
        for i in range(2 * third, size, 70_001):
            gz.write(memoryview(data)[i:min(i + 70_001, size)])
        fh.seek(0, os.SEEK_END)
        assert gz.copy_from(fh, 10) == 0  # at the file's end: fewer bytes than asked, none here
    assert buf.getvalue() == _reference_gzip(data)
    assert gzip.decompress(buf.getvalue()) == data


@pytest.mark.parametrize("size", [1, 65_535, 65_536, MIB, 2 * MIB + 70_000])
def test_random_bytes_are_stored_blocks_that_gnu_gzip_reads(tmp_path: Path, size: int) -> None:
    """A chunk of random bytes costs only deflate's stored-block framing: 5 bytes for each 65,535 (RFC 1951
    3.2.4), and GNU gzip, Python's gzip and zlib read the stream."""
    data = random.Random(size).randbytes(size)
    buf = io.BytesIO()
    with ParallelGzip(buf) as gz:
        gz.write(data)
    out = buf.getvalue()
    blocks = sum(-(-len(data[i:i + pgzip.CHUNK]) // 65_535) for i in range(0, size, pgzip.CHUNK))
    assert len(out) == len(pgzip._HEADER) + 5 * blocks + size + 8
    assert gzip.decompress(out) == data
    (tmp_path / "layer.gz").write_bytes(out)
    gnu = shutil.which("gzip")
    assert gnu is not None, "GNU gzip (Debian's gzip package, essential) reads the layer here"
    done = subprocess.run([gnu, "-dc", str(tmp_path / "layer.gz")], capture_output=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout == data


# The bytes ParallelGzip writes for _golden_data(), per pgzip.FORMAT, with stock zlib (Debian's zlib1g; Python's
# zlib.ZLIB_RUNTIME_VERSION 1.2.13). zlib-ng (Fedora's system zlib since its ZlibNGTransition change) deflates to
# other bytes at the same level: there this test fails, as the layer digests would differ (docs/containers.md).
# Format 2 (level 6; its data then lacked the prose chunk, on which levels 5 and 6 write the same bytes):
# aba177b589bd814581405ace97e03a5176dd2af1fec237ff93261c3802a79407.
GOLDEN = {3: "264c698c405c0dfe5300ba2f1d965c118014b3850dfb6c90d746884d3bcfbefd"}


def _golden_data() -> bytes:
    """Chunks the probe decides both ways: random bytes then text (stored: its first 16 KiB do not shrink), text,
    random bytes, text then random bytes (deflated), prose of random words, and a short last chunk."""
    rng = random.Random(2026)
    text = b"a line of text, as headers hold\n" * 40_000

    def chunk(head: bytes, fill: bytes) -> bytes:
        return head + fill[:MIB - len(head)]

    words = [bytes(rng.choices(range(97, 123), k=rng.randint(2, 9))) for _ in range(400)]
    prose = b" ".join(rng.choices(words, k=200_000))  # the lazy matching the levels differ in shows here
    return b"".join([chunk(rng.randbytes(20 << 10), text), text[:MIB], rng.randbytes(MIB),
                     chunk(text[:10 << 10], rng.randbytes(MIB)), prose[:MIB], rng.randbytes(5000) + text[:70_000]])


def test_the_bytes_are_those_of_their_format_version() -> None:
    """Changing what the writer writes for the same data must bump ``pgzip.FORMAT`` (a debootstrap base cached with
    the old bytes is then made again: rocmlock.image.debianbase keys its cache with it) and record the new bytes
    here."""
    buf = io.BytesIO()
    with ParallelGzip(buf) as gz:
        gz.write(_golden_data())
    assert pgzip.FORMAT in GOLDEN, f"record the bytes of pgzip.FORMAT {pgzip.FORMAT} in GOLDEN"
    assert hashlib.sha256(buf.getvalue()).hexdigest() == GOLDEN[pgzip.FORMAT], (
        f"ParallelGzip writes other bytes than format {pgzip.FORMAT} did (zlib {zlib.ZLIB_RUNTIME_VERSION}): "
        "bump pgzip.FORMAT and record the new digest")


def test_the_zlib_note_names_zlib_ng_only_and_at_most_60_characters_of_its_version(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The version string comes from the linked library: shown escaped and bounded, and only for zlib-ng."""
    monkeypatch.setattr(zlib, "ZLIB_RUNTIME_VERSION", "1.3.1")
    assert pgzip.zlib_note() is None
    version = "1.3.1.zlib-ng" + "x" * 100
    monkeypatch.setattr(zlib, "ZLIB_RUNTIME_VERSION", version)
    note = pgzip.zlib_note()
    assert note is not None and version[:60] + "," in note and version[:61] not in note
