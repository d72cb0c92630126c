"""Publish into a directory channel so that its repodata only ever lists whole files, whatever kills the run.

rattler's index (rattler_index/src/lib.rs, ``index_subdir``) lists a subdir, drops the records whose files are
gone and adds the files its repodata.json does not name yet; a file under a name it already lists is never read
again. Hence the order here:

1. every package is copied into a scratch directory inside the channel (one filesystem, so the move in is a
   rename; not a subdir, so neither the index nor a client reads it), locked while in use: the next publish
   removes the one a killed run left (:mod:`rocmlock.util.scratch`). A partial copy never has a package's name.
2. a file to replace (``--force``), or one whose record does not match it (a run killed after 3.), is moved out
   first and the channel indexed, so that the index drops the old record;
3. the packages are renamed into their subdirs, each whole;
4. the channel is indexed: only now does repodata list them.

A kill before 4. leaves the channel as it was plus whole, unlisted packages; the next publish finds them there
(identical: skipped) and indexes. The one window of a replacement is between 2.'s move and its index: repodata
may then list the old name while its file is gone (a client gets "not found", never other bytes than it
expects); the next publish sees the mismatch and repairs it.

**One publish at a time.** All of this, and the look at what the channel holds before it (what is skipped, what
is refused), runs under :func:`publish_lock`: an exclusive ``flock`` on ``.rocmlock-publish.lock`` in the
channel's root, which a second publish waits for. Without it, two publishes of one file name both found it
absent and both moved theirs in: the second replaced the first's file, and both reported it uploaded. The file
is no package and no subdir: rattler's index takes only the root's directories that name a platform as subdirs
(rattler_index/src/lib.rs, ``index``: ``is_dir()`` and ``Platform::from_str``), and in a subdir only archive
names (``ArchiveType::try_from``). A channel that is only read (``--from``, ``plan``/``build --channel``) never
gets one.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import json
import os
import shutil
import stat
from collections.abc import Callable, Collection, Iterator, Mapping
from pathlib import Path

from rocmlock.errors import OperationError
from rocmlock.util import oslock
from rocmlock.util.fs import file_sha256
from rocmlock.util.scratch import scratch_dir

SCRATCH = ".rocmlock-publish-"
LOCK = ".rocmlock-publish.lock"
# flock's answers where the filesystem keeps no locks (rattler_index/src/locked_file.rs, ``error_unsupported``,
# goes on unlocked for the same ones); ENOLCK: an NFS mount without its lock daemon.
_NO_LOCKS = (errno.ENOLCK, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS)



def present(root: Path, keys: Collection[str]) -> dict[str, str]:
    """``{subdir/file: sha256}`` of the ``keys`` whose files are in the channel at ``root``."""
    return {key: file_sha256(root / key) for key in sorted(keys) if (root / key).is_file()}


def listed(root: Path, keys: Collection[str]) -> dict[str, str]:
    """``{subdir/file: sha256}`` of the ``keys`` that the subdirs' repodata.json list."""
    out: dict[str, str] = {}
    for subdir in sorted({key.split("/", 1)[0] for key in keys}):
        try:
            data = json.loads((root / subdir / "repodata.json").read_text())
        except (OSError, ValueError):
            continue  # no index yet (or one the index will rewrite): nothing is listed
        for section in ("packages", "packages.conda"):
            for name, record in (data.get(section) or {}).items():
                if f"{subdir}/{name}" in keys and isinstance(record, dict):
                    out[f"{subdir}/{name}"] = str(record.get("sha256", ""))
    return out


def mismatched(root: Path, packages: Mapping[str, Path]) -> list[str]:
    """Keys whose record in repodata does not describe the file there (missing, or other bytes)."""
    records, files = listed(root, packages.keys()), present(root, packages.keys())
    return sorted(key for key, sha in records.items() if files.get(key) != sha)


def index(root: Path) -> None:
    """Index the channel with rattler (every subdir; noarch always exists)."""
    from rattler.index import index_fs

    (root / "noarch").mkdir(parents=True, exist_ok=True)
    asyncio.run(index_fs(root))


def _open_lock(path: Path) -> int | None:
    """The lock file, made readable by all when this process creates it: whoever may publish here can lock it,
    through a read-only descriptor when the file is another user's (:func:`rocmlock.util.oslock.open_lock`)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
    except FileExistsError:
        return _open_existing(path)
    except OSError as exc:
        if exc.errno not in oslock.NOT_WRITABLE:
            raise
        return None  # none there and none can be made: a directory this user may not write
    os.fchmod(fd, stat.S_IMODE(os.fstat(fd).st_mode) | 0o444)
    return fd


def _open_existing(path: Path) -> int:
    fd, _ = oslock.open_lock(path, write=True, follow_symlinks=False)
    if fd is None:
        raise OperationError(f"cannot publish to {path.parent}: cannot open its lock file {path}; nothing was uploaded",
                             hint=f"make it readable by every user who publishes there (chmod a+r {path})")
    return fd


@contextlib.contextmanager
def publish_lock(root: Path, log: Callable[[str], None]) -> Iterator[None]:
    """Hold the channel's publish lock for the ``with``: another publish to ``root`` waits, as long as it takes.

    Where no lock file can be made (a directory this user may not write) it goes on without one, and the
    publish fails on its first write as it did before there was a lock.
    """
    root.mkdir(parents=True, exist_ok=True)
    path = root / LOCK
    fd = _open_lock(path)
    if fd is None:
        yield
        return
    try:
        try:
            oslock.wait(fd, fcntl.LOCK_EX, path, on_wait=log,
                        waiting=lambda who: f"waiting for another publish to {root} to finish ({who})")
        except OSError as exc:
            if exc.errno not in _NO_LOCKS:
                raise
            log(f"cannot lock {path} ({exc.strerror}): publishing without the lock")
        yield
    finally:
        os.close(fd)


def _stage(src: Path, dest: Path) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dest)
    with dest.open("rb") as fh:  # on disk before its name appears in the channel
        os.fsync(fh.fileno())
    return dest


def publish_to_directory(root: Path, packages: Mapping[str, Path], upload: Collection[str],
                         log: Callable[[str], None]) -> list[str]:
    """Put ``upload`` (keys ``subdir/file`` of ``packages``) into the channel at ``root`` and index it.

    Any of ``packages`` whose repodata record does not match its file is put in again; those keys are
    returned (a publish that was killed while replacing). The caller holds :func:`publish_lock` from before it
    looked at what the channel holds.
    """
    with scratch_dir(root, SCRATCH, log) as scratch:
        repair = mismatched(root, packages)
        for key in repair:
            log(f"repair {key}: the channel's repodata does not match the file (an interrupted publish)")
        todo = sorted(set(upload) | set(repair))
        staged = {key: _stage(packages[key], scratch / "new" / key) for key in todo}
        out = [key for key in todo if (root / key).exists()]
        for key in out:
            (scratch / "old" / key).parent.mkdir(parents=True, exist_ok=True)
            os.replace(root / key, scratch / "old" / key)
        if out or repair:
            index(root)
        for key, tmp in staged.items():
            (root / key).parent.mkdir(parents=True, exist_ok=True)
            os.replace(tmp, root / key)
    index(root)
    return [key for key in repair if key not in upload]
