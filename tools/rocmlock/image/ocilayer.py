"""A base image's layer read as a tar stream, bounded by its size and checked against its diff_id.

A layer is hostile: a few MB of gzip or zstd can expand to terabytes, and a tar header can declare a PAX or GNU
long-name record of gigabytes that Python's tarfile reads into memory whole. So the decompressed stream is
counted and stops at :data:`RATIO` times the compressed size plus :data:`SLACK` (deflate cannot exceed 1032:1,
so no gzip layer is refused; a zstd layer beyond it holds gigabytes of one repeated byte), a special header
larger than :data:`MAX_SPECIAL` is refused before it is read (Go's archive/tar, which umoci and skopeo use, has
the same 1 MiB limit: ``maxSpecialFileSize``), and the members are not kept as they are walked. What is left of
the stream after the tar's end is read too, so that the whole uncompressed layer is hashed and compared with its
``diff_id`` from the config (image-spec config.md ``rootfs.diff_ids``; ``umoci unpack`` fails with "diffid
mismatch" on a layer that differs).
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from rocmlock.errors import InputError

RATIO = 1100
SLACK = 64 << 20
MAX_SPECIAL = 1 << 20
MAX_GLOBAL_KEYS = 1000
_READ = 1 << 20
_SPECIAL = (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE, tarfile.GNUTYPE_LONGNAME,
            tarfile.GNUTYPE_LONGLINK)
HINT = "copy the base image again; a layer that is not what its manifest and config say cannot be used"


class _LayerTooLarge(Exception):
    pass


class _BoundedInfo(tarfile.TarInfo):
    """A tar header whose PAX or GNU long-name record is refused when larger than :data:`MAX_SPECIAL`."""

    def _proc_member(self, tarfile_: tarfile.TarFile) -> Any:
        if self.type in _SPECIAL and self.size > MAX_SPECIAL:
            raise tarfile.HeaderError(f"a {'PAX' if self.type != tarfile.GNUTYPE_LONGNAME else 'GNU'} header record "
                                      f"of {self.size} bytes (more than {MAX_SPECIAL >> 20} MiB)")
        if self.type == tarfile.XGLTYPE and len(tarfile_.pax_headers) > MAX_GLOBAL_KEYS:
            raise tarfile.HeaderError(f"more than {MAX_GLOBAL_KEYS} global PAX keys")
        return super()._proc_member(tarfile_)  # type: ignore[misc]


class _Counted:
    """The decompressed stream, hashed as it is read, stopped past ``budget`` bytes.

    It is read from the decompressor 1 MiB at a time and handed out in the pieces tarfile asks for (10 KiB, its
    stream's record): gzip's reader asked for 10 KiB cost a Python call chain per piece, 20,000 for the Debian
    test base, a third of reading it."""

    def __init__(self, stream: IO[bytes], budget: int) -> None:
        self.stream, self.budget = stream, budget
        self.sha = hashlib.sha256()
        self.size = 0
        self.chunk = b""
        self.pos = 0

    def read(self, size: int = -1) -> bytes:
        if self.pos >= len(self.chunk):
            self.chunk, self.pos = self.stream.read(_READ), 0
            self.size += len(self.chunk)
            if self.size > self.budget:
                raise _LayerTooLarge
            self.sha.update(self.chunk)
        want = len(self.chunk) - self.pos if size is None or size < 0 else size
        data = self.chunk[self.pos:self.pos + want]
        self.pos += len(data)
        return data

    def drain(self) -> None:
        while self.read(_READ):
            pass


class Layer:
    """An open layer: its members in order, each read (bounded) while it is the current one."""

    def __init__(self, tar: tarfile.TarFile) -> None:
        self.tar = tar

    def members(self) -> Iterator[tarfile.TarInfo]:
        while (member := self.tar.next()) is not None:
            self.tar.members.clear()  # type: ignore[attr-defined]  # a million headers: none kept
            yield member

    def read(self, member: tarfile.TarInfo, limit: int) -> bytes | None:
        fh = self.tar.extractfile(member)
        return fh.read(limit) if fh else None


@contextlib.contextmanager
def _decompressed(raw: IO[bytes], media_type: str) -> Iterator[IO[bytes]]:
    if media_type.endswith("+zstd"):
        import zstandard

        with zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True) as stream:
            yield stream
    elif media_type.endswith("+gzip"):
        with gzip.GzipFile(fileobj=raw, mode="rb") as stream:
            yield stream  # type: ignore[misc]
    else:
        yield raw


@contextlib.contextmanager
def open_layer(path: Path, media_type: str, diff_id: str, what: str) -> Iterator[Layer]:
    """The layer blob ``path`` as a tar stream (decompressed as ``media_type`` says); on leaving, the rest of it
    is read and its uncompressed sha256 compared with ``diff_id``. Errors name ``what``."""
    import zstandard

    budget = path.stat().st_size * RATIO + SLACK
    try:
        with path.open("rb") as raw, _decompressed(raw, media_type) as stream:
            counted = _Counted(stream, budget)
            with tarfile.open(fileobj=counted, mode="r|", tarinfo=_BoundedInfo) as tar:  # type: ignore[call-overload]
                yield Layer(tar)
            counted.drain()
    except _LayerTooLarge:
        raise InputError(f"{what}: decompresses to more than {RATIO} times its size plus {SLACK >> 20} MiB "
                         f"({budget} bytes): a decompression bomb, not a layer", hint=HINT) from None
    except (tarfile.TarError, OSError, EOFError, zstandard.ZstdError) as exc:
        raise InputError(f"{what}: cannot be read as a {media_type.rpartition('.')[2]} layer ({exc})",
                         hint=HINT) from None
    digest = "sha256:" + counted.sha.hexdigest()
    if digest != diff_id:
        raise InputError(f"{what}: its uncompressed bytes are {digest}, the config's diff_id {diff_id}", hint=HINT)
