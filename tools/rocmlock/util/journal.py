"""A set of files below a root directory, committed as one: one writer at a time, and a kill at any instant
leaves the old set or the new set (the lock outputs of :mod:`rocmlock.lock.outputs`, the recipes ``bump`` writes).

**One writer.** :func:`exclusive` holds an OS file lock (``flock`` on ``<root>/.rocmlock/writer.lock``) for a whole
read-change-write; a second writer waits up to :data:`DEFAULT_TIMEOUT` seconds (``ROCMLOCK_LOCK_TIMEOUT``),
saying whom it waits for, then fails naming the holder. The kernel drops the lock when its process dies, so a
``kill -9`` never leaves a stale lock. Readers take the lock shared and create nothing. Neither ``.rocmlock/`` nor
the lock file is ever removed, and before the lock a writer only makes the directory and opens the file with
``O_CREAT`` (steps any number of processes may take at once); everything else, ``.gitignore`` included, is written
by the holder (issue 40: two first writers raced on ``.gitignore.tmp``).

**Atomic set.** :func:`commit` is a redo journal in ``<root>/.rocmlock/txn/`` (a directory with a ``.gitignore``
of ``*``, so ``git add`` never picks up leftovers):

1. every new file is written and fsynced as ``txn/<n>.new``;
2. ``txn/journal.json`` (the root's device and inode, which ``<n>.new`` goes where, and which files go:
   ``[null, target]``) is written as ``journal.tmp``, fsynced and renamed: the rename is the commit point;
3. each ``<n>.new`` is renamed over its target and each file that goes is removed (the ``last`` files last);
   then a directory emptied by the removals is removed (``rmdir``: only when empty), then the journal.

A kill before the commit point leaves the old set in place and staged files that the next writer deletes;
a kill after it leaves a journal that the next command rolls forward (:func:`recover`, run by
:func:`exclusive` and :func:`settle`) before it reads anything. Either way the next command sees the complete
old set or the complete new set. Every filesystem change goes through the ``_write``/``_rename``/``_remove``/
``_mkdir``/``_rmdir`` functions below (one step each), which the kill tests wrap. A journal names its targets
relative to the root, so whichever command of that root comes next finishes it; one that another directory
left (a copy, a checkout with ``.rocmlock/`` committed) or that names anything but plain paths below the root is
never applied (:func:`_entries`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import math
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rocmlock.errors import InputError, OperationError
from rocmlock.util import oslock
from rocmlock.util.text import escape

STATE_DIR = ".rocmlock"
LOCK_NAME = "writer.lock"
TXN_DIR = "txn"
JOURNAL = "journal.json"
_STAGED = re.compile(r"[0-9]{1,6}\.new")
DEFAULT_TIMEOUT = 60.0


@dataclass(frozen=True)
class Subject:
    """What a journal writes, for messages: ``what`` ("the lock outputs") and the command that writes it again."""

    what: str
    again: str


# ----------------------------------------------------------------------------- filesystem steps


def _sync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write(path: Path, data: bytes) -> None:
    """Create ``path`` with ``data`` (mode from the umask, like git's checkout), fsynced."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


def _rename(src: Path, dst: Path) -> None:
    os.replace(src, dst)


def _remove(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def _mkdir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)


def _rmdir(path: Path) -> None:
    """Remove ``path`` if it is an empty directory (a user's file in it keeps it)."""
    with contextlib.suppress(OSError):
        path.rmdir()


def _ensure_dir(path: Path) -> None:
    if not path.is_dir():  # a step only when it changes something
        _mkdir(path)


# ----------------------------------------------------------------------------- the state directory


def state_dir(root: Path) -> Path:
    """``<root>/.rocmlock``, created with a ``.gitignore`` of ``*`` (pixi does the same for ``.pixi``); the caller
    holds the writer lock.

    The ``.gitignore`` goes through a temporary file of one fixed name (never an empty ``.gitignore``, whenever
    a kill comes; a kill between the two steps leaves the temporary file, which the next writer writes again and
    renames). One fixed name is safe only under the lock: two writers that both saw no ``.gitignore`` would each
    write it and the second rename would find the file gone (issue 40: ENOENT, "cannot write the lock outputs").
    """
    state = root / STATE_DIR
    ignore = state / ".gitignore"
    if not ignore.is_file():
        _ensure_dir(state)
        _write(state / ".gitignore.tmp", b"*\n")
        _rename(state / ".gitignore.tmp", ignore)
    return state


def _journal(root: Path) -> Path:
    return root / STATE_DIR / TXN_DIR / JOURNAL


class ForeignJournal(ValueError):
    """A journal this root's writes did not leave: not applied (see :func:`_entries`)."""


def _root_id(root: Path) -> list[int]:
    st = os.stat(root)
    return [st.st_dev, st.st_ino]


def _relative(target: object) -> str:
    """``target`` as a journal may name it: a plain path below the root, outside ``.rocmlock`` and ``.git``."""
    if not isinstance(target, str) or not target or len(target) > 1024 or not target.isprintable():
        raise ForeignJournal("a target that is not a plain relative path")
    parts = target.split("/")
    if target.startswith("/") or any(p in ("", ".", "..") for p in parts) or parts[0] in (STATE_DIR, ".git"):
        raise ForeignJournal(f"the target {escape(target[:120])!r}, outside what rocmlock writes")
    return target


def _entries(root: Path, txn: Path, raw: bytes) -> list[list[str | None]]:
    """The journal's moves and removals, each checked; :class:`ForeignJournal` for anything this root's own
    commit did not write. The journal is not trusted: ``.rocmlock/`` can arrive with a checkout (``git add -f``),
    and a journal naming ``../x`` or ``.git/hooks/...`` would delete or write there. It records the root's device
    and inode (:func:`_stage`), so one made anywhere else (a clone, a copy) is never applied."""
    try:
        data = json.loads(raw)
    except ValueError:
        raise ForeignJournal("not JSON") from None
    if not isinstance(data, dict) or data.get("root") != _root_id(root) or not isinstance(data.get("entries"), list):
        raise ForeignJournal("not written by a commit in this directory (a copy, a checkout, or another version)")
    out: list[list[str | None]] = []
    for entry in data["entries"]:
        if not isinstance(entry, list) or len(entry) != 2:
            raise ForeignJournal("an entry that is not [staged, target]")
        staged, target = entry
        if staged is not None:
            if not isinstance(staged, str) or not _STAGED.fullmatch(staged):
                raise ForeignJournal("a staged file name rocmlock does not write")
            if (txn / staged).is_symlink():
                raise ForeignJournal(f"a staged file {staged} that is a symbolic link")
        out.append([staged, _relative(target)])
    return out


def recover(root: Path) -> str | None:
    """Finish or clean an interrupted commit (the caller holds the writer lock); what was done, or None."""
    txn = root / STATE_DIR / TXN_DIR
    for directory in (root / STATE_DIR, txn):
        if directory.is_symlink():  # its files would be removed wherever it points
            raise ForeignJournal(f"{directory} is a symbolic link, not a directory rocmlock made")
    if not txn.is_dir():
        return None
    journal = txn / JOURNAL
    done = None
    if journal.is_file():
        _apply(root, _entries(root, txn, journal.read_bytes()))
        _remove(journal)
        done = "finished an interrupted write"
    leftovers = [p for p in txn.iterdir() if p.is_file()]
    for path in leftovers:
        _remove(path)
    return done or ("removed the files of an interrupted write" if leftovers else None)


def _recover_or_fail(root: Path, subject: Subject) -> None:
    try:
        recover(root)
    except ForeignJournal as exc:
        raise OperationError(f"{root}: {root / STATE_DIR / TXN_DIR / JOURNAL} was not left by an interrupted write "
                             f"here ({exc}); nothing was changed",
                             hint=f"if it came with a checkout or a copy, delete {root / STATE_DIR} (rocmlock's "
                                  "state, never to be committed) and run again") from None
    except (OSError, ValueError) as exc:
        raise OperationError(f"{root}: cannot finish an interrupted write of {subject.what} ({exc})",
                             hint=f"fix the cause; {root / STATE_DIR / TXN_DIR} holds what remains to do") from None


def _apply(root: Path, entries: list[list[str | None]]) -> None:
    """Do (or redo, after an interruption: every step is idempotent) the moves and removals of a journal."""
    txn = root / STATE_DIR / TXN_DIR
    for staged, target in entries:
        if staged is None:  # a file that is no longer generated (removed first: the `last` files stay last)
            if (root / str(target)).exists():
                _remove(root / str(target))
        elif (txn / staged).exists():  # absent: moved already, before the interruption
            _rename(txn / staged, root / str(target))
    emptied = sorted({(root / str(t)).parent for s, t in entries if s is None})
    for directory in emptied:
        if directory.is_dir() and not any(directory.iterdir()):
            _rmdir(directory)
    # The changes reach the disk before the journal goes (a power cut, unlike a kill, can lose unsynced renames).
    touched = {(root / str(t)).parent for _, t in entries} | {d.parent for d in emptied}
    for directory in sorted(touched):
        if directory.is_dir():
            _sync_dir(directory)


# ----------------------------------------------------------------------------- the writer lock


def _wait_for(fd: int, kind: int, lock_path: Path, timeout: float, on_wait: Callable[[str], None] | None,
              subject: Subject) -> None:
    root = lock_path.parent.parent
    if not oslock.wait(fd, kind, lock_path, timeout=timeout, on_wait=on_wait,
                       waiting=lambda who: f"waiting for {who} to finish writing {subject.what} of {root}"):
        raise OperationError(f"{root}: {oslock.holder(lock_path)} is writing {subject.what} "
                             f"(waited {timeout:.0f}s for {lock_path})",
                             hint="let it finish, or raise ROCMLOCK_LOCK_TIMEOUT (seconds)")


def _timeout(timeout: float | None) -> float:
    if timeout is not None:
        return timeout
    raw = os.environ.get("ROCMLOCK_LOCK_TIMEOUT", "").strip()
    if not raw:
        return DEFAULT_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if math.isnan(value) or value < 0:  # a typo (or nan) must not quietly become the default
        raise InputError(f"ROCMLOCK_LOCK_TIMEOUT is {raw!r}, not a number of seconds",
                         hint=f"e.g. ROCMLOCK_LOCK_TIMEOUT=120, or unset it for {DEFAULT_TIMEOUT:.0f} s") from None
    return value


@contextlib.contextmanager
def exclusive(root: Path, subject: Subject, write: bool = True, timeout: float | None = None,
              on_wait: Callable[[str], None] | None = None) -> Iterator[None]:
    """Hold ``root``'s writer lock (``write=False``: shared, for a check) and settle any interrupted commit.

    A shared holder creates nothing (with no lock file yet, no writer ever ran here), but finishes a committed
    write first, so that what it reads is one complete set.
    """
    lock_path = root / STATE_DIR / LOCK_NAME
    if not write and _journal(root).is_file():
        settle(root, subject, on_wait)  # a committed write is finished before anyone reads
    fd, kind = _open_lock(root, lock_path, write, subject)
    if fd is None:  # no lock file and none can be made: nothing to wait for
        yield
        return
    try:
        _wait_for(fd, kind, lock_path, _timeout(timeout), on_wait, subject)
        if kind == fcntl.LOCK_EX:
            with contextlib.suppress(OSError):  # best effort: a write that needs it fails in commit, in one line
                state_dir(root)
            _recover_or_fail(root, subject)
        yield
    finally:
        os.close(fd)  # releases the lock


def _open_lock(root: Path, lock_path: Path, write: bool, subject: Subject) -> tuple[int | None, int]:
    """The lock file's descriptor and the lock to take on it.

    A writer that cannot create or open the lock file for writing (a read-only mount, another user's file)
    still takes the exclusive lock through a read-only descriptor (``flock`` does not care); with no lock file
    at all it goes on unlocked, as nobody can have written here through rocmlock. Either way a write it then
    needs and cannot do fails in :func:`commit`, in one line, before changing anything.
    """
    try:
        if write:
            try:
                # Only steps that any number of processes may take at once come before the lock: a directory made
                # if missing, a file opened with O_CREAT. Nothing here (or anywhere) ever removes either, so
                # every process that opens writer.lock opens the same file (see rocmlock.util.oslock).
                _ensure_dir(root / STATE_DIR)
            except OSError as exc:
                if exc.errno not in oslock.NOT_WRITABLE:
                    raise
                # No state directory can be made, so no lock file either: lock one that is there, read-only.
                fd, _ = oslock.open_lock(lock_path, write=False)
                return fd, fcntl.LOCK_SH if fd is None else fcntl.LOCK_EX
        return oslock.open_lock(lock_path, write)
    except OSError as exc:
        raise OperationError(f"{root}: cannot write {subject.what} here ({exc.strerror})",
                             hint="check the workspace directory") from None


def settle(root: Path, subject: Subject, on_wait: Callable[[str], None] | None = None) -> None:
    """Before reading the set: finish an interrupted commit if there is one (cheap otherwise)."""
    if _journal(root).is_file():
        with exclusive(root, subject, on_wait=on_wait):
            pass


# ----------------------------------------------------------------------------- commit


def _check_writable(directory: Path) -> None:
    # Before the commit point: a target directory that refuses the moves must stop the write while the
    # old set is still whole (access(2) sees a read-only mount even for root).
    if not os.access(directory, os.W_OK):
        code = errno.EROFS if os.statvfs(directory).f_flag & os.ST_RDONLY else errno.EACCES
        raise OSError(code, os.strerror(code), str(directory))


def _stage(root: Path, txn: Path, files: Mapping[Path, str | bytes], removals: Sequence[Path],
           last: Sequence[Path], subject: Subject) -> list[list[str | None]]:
    ordered = sorted(files, key=lambda p: (p in last, str(p)))
    entries: list[list[str | None]] = []
    for path in sorted(removals):
        _check_writable(path.parent)
        entries.append([None, str(path.relative_to(root))])
    for n, path in enumerate(ordered):
        _ensure_dir(path.parent)
        if os.stat(path.parent).st_dev != os.stat(txn).st_dev:
            raise OperationError(f"{path.parent} is on another filesystem than {txn}; nothing was changed",
                                 hint=f"keep {subject.what} on one filesystem with {root}")
        _check_writable(path.parent)
        if path.is_dir() and not path.is_symlink():  # rename(2) of a file onto it fails: after the commit point
            raise OSError(errno.EISDIR, "a directory where a file is to be written", str(path))
        text = files[path]
        _write(txn / f"{n}.new", text.encode() if isinstance(text, str) else text)
        entries.append([f"{n}.new", str(path.relative_to(root))])
    _write(txn / "journal.tmp", json.dumps({"root": _root_id(root), "entries": entries}).encode())
    return entries


def commit(root: Path, subject: Subject, files: Mapping[Path, str | bytes], removals: Sequence[Path] = (),
           last: Sequence[Path] = ()) -> None:
    """Replace ``files`` and remove ``removals`` (paths below ``root``) as one set, ``last`` after the others; the
    caller holds :func:`exclusive`.

    An error before the commit point (a read-only directory, a full disk) removes what was staged and leaves
    the old set as it was.
    """
    if not files and not removals:
        return
    try:
        txn = state_dir(root) / TXN_DIR
        _ensure_dir(txn)
        entries = _stage(root, txn, files, removals, last, subject)
    except OSError as exc:
        with contextlib.suppress(OSError, ValueError):
            recover(root)
        where = exc.filename or root
        hint = "move that directory out of the way, then run again" if exc.errno == errno.EISDIR else \
            "free disk space or make the workspace writable, then run again"
        raise OperationError(f"cannot write {subject.what}: {where}: {exc.strerror}; nothing was changed",
                             hint=hint) from None
    try:
        _rename(txn / "journal.tmp", txn / JOURNAL)  # the commit point
        _sync_dir(txn)
        _apply(root, entries)
        _remove(txn / JOURNAL)
    except OSError as exc:
        raise OperationError(f"writing {subject.what} was interrupted: {exc.filename or root}: {exc.strerror}",
                             hint=f"fix the cause and run {subject.again} again: it finishes the write") from None
