"""Atomic file writes (one file, or a small set of files that land all together or not at all), and paths for display.

The lock outputs (pixi.lock + envs/) have their own journal and writer lock (:mod:`rocmlock.lock.outputs`);
these helpers serve single files and small sets (presets, stamps, a server's uploads). Also the one chunked sha256
of a file or stream, and the one way to open a file rocmlock did not write: regular files only, read with a bound.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import BinaryIO

from rocmlock.errors import InputError
from rocmlock.util.text import escape


def _temp_beside(path: Path, data: bytes, suffix: str = ".tmp") -> Path:
    """``data`` in a new hidden file beside ``path``, fsynced; its mode comes from the umask (like git's)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}{suffix}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def path_problem(path: str) -> str | None:
    """Why ``path``, relative to a directory that must hold it (a prefix, a source cache), could land outside it or
    garble a line, else None. For paths from files rocmlock did not write (a package's, another host's manifest)."""
    if not path or not path.isprintable():
        return "is empty or holds a control character"
    if path.startswith("/") or "\\" in path or (len(path) > 1 and path[1] == ":"):
        return "is absolute"
    if ".." in path.split("/"):
        return "climbs out with '..'"
    return None


def write_atomic(path: str | os.PathLike[str], text: str | bytes) -> None:
    """Write ``text`` to ``path`` through a temporary file and ``os.replace`` (``path`` is never missing)."""
    target = Path(path)
    tmp = _temp_beside(target, text.encode() if isinstance(text, str) else text)
    try:
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_set_atomic(files: Mapping[Path, str | bytes]) -> None:
    """Write several files so that either all of them change or none does (within this process).

    Every new content is first written to a temporary file beside its target. Only
    when all of them exist are they moved into place; if a move fails, the files
    already replaced are restored from backups (names unique to this call).
    """
    staged: list[tuple[Path, Path]] = []
    try:
        for path, text in files.items():
            data = text.encode() if isinstance(text, str) else text
            staged.append((Path(path), _temp_beside(Path(path), data)))
    except BaseException:
        for _, tmp in staged:
            tmp.unlink(missing_ok=True)
        raise
    done: list[tuple[Path, Path | None]] = []
    try:
        for path, tmp in staged:
            backup = None
            if path.exists():  # a second name for the old file: ``path`` itself is never missing
                backup = path.with_name(f".{path.name}.{secrets.token_hex(4)}.bak")
                os.link(path, backup)
            try:
                os.replace(tmp, path)
            except BaseException:
                if backup is not None:
                    backup.unlink()
                raise
            done.append((path, backup))
    except BaseException:
        for path, backup in reversed(done):
            if backup is not None:
                os.replace(backup, path)
            else:
                path.unlink(missing_ok=True)
        for _, tmp in staged:
            tmp.unlink(missing_ok=True)
        raise
    for _, backup in done:
        if backup is not None:
            backup.unlink(missing_ok=True)


def private_dir(path: Path) -> Path:
    """``path`` as a directory only its owner can enter (created if missing; returned for chaining).

    Caches hold what private channels serve; a directory mode of 0700 keeps them from other
    users whatever the umask gives the files rattler writes inside.
    """
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        mode = path.stat().st_mode & 0o777
        if mode & 0o077 and path.stat().st_uid == os.getuid():
            path.chmod(mode & 0o700)
    except OSError:
        pass  # someone else's directory: leave it as it is
    return path


def relative_path(path: Path, root: Path) -> str:
    """``path`` relative to ``root`` when it lies below it, else ``path`` as given."""
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


CHUNK = 1 << 20


def stream_digest(fh: BinaryIO, algorithm: str = "sha256") -> str:
    """The hex ``algorithm`` digest (a :func:`hashlib.new` name) of what is left in ``fh``, read in chunks (packages
    of several GB)."""
    digest = hashlib.new(algorithm)
    while chunk := fh.read(CHUNK):
        digest.update(chunk)
    return digest.hexdigest()


def stream_sha256(fh: BinaryIO) -> str:
    """The sha256 of what is left in ``fh``, read in chunks."""
    return stream_digest(fh)


def file_sha256(path: Path) -> str:
    """The sha256 of ``path``, read in chunks."""
    with path.open("rb") as fh:
        return stream_sha256(fh)


def open_regular(path: Path, what: str, hint: str | None = None) -> BinaryIO:
    """``path`` opened for reading, refused (an InputError, exit 2: ``<path>: not a regular file; <what>``) when it
    is not a regular file, a link to one included. O_NONBLOCK: opening a FIFO for reading would wait for a writer
    (and reading one, or ``/dev/zero``, might never end); fstat then tells what was opened, so nothing can be
    swapped in between a check and the open."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        regular = stat.S_ISREG(os.fstat(fd).st_mode)  # before fdopen, which refuses a directory with an OSError
        if regular:
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    if not regular:
        os.close(fd)
        raise InputError(f"{escape(str(path))}: not a regular file" + (f"; {what}" if what else ""), hint=hint)
    return os.fdopen(fd, "rb")


def read_regular(path: Path, limit: int, what: str, hint: str | None = None) -> bytes:
    """The bytes of the regular file ``path`` (:func:`open_regular`), at most ``limit`` of them: a larger file is
    an InputError, found from its size before anything is read (and from what is read, for a file that grows)."""
    with open_regular(path, what, hint) as fh:
        size = os.fstat(fh.fileno()).st_size
        data = fh.read(limit + 1) if size <= limit else b""
    if size > limit or len(data) > limit:
        raise InputError(f"{escape(str(path))}: {max(size, len(data))} bytes, more than {limit >> 20} MiB; {what}",
                         hint=hint)
    return data
