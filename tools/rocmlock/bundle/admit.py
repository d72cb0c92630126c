"""Letting a bundle in: what ``unpack`` reads of it before it installs anything.

A bundle travels over USB disks and shared filesystems, so nothing of it is trusted until checked, in this
order: the tar's member list (plain files and directories, relative names that stay inside, the archive
complete) -> the metadata's bytes, read from the tar (nothing extracted yet) -> with ``--trusted-signers``,
its OpenSSH signature (:mod:`rocmlock.bundle.signing`) -> the metadata's strings (:func:`parse_metadata`)
-> the member list against the metadata: exactly the members it names, and its signature, nothing the
format does not define -> extraction -> every file's sha256 against the metadata (:func:`check_digests`).
An extracted directory given as the bundle goes through the same steps on its tree (symbolic links
refused: the checked file must be the installed one).
"""

from __future__ import annotations

import os
import stat
import tarfile
from dataclasses import dataclass
from pathlib import Path

from rocmlock.bundle.layout import (
    ROCMLOCK_METADATA,
    SIGNATURE,
    BundleMetadata,
    expected_members,
    parse_metadata,
)
from rocmlock.bundle.signing import Signer
from rocmlock.errors import InputError, OperationError
from rocmlock.lock.exports import explicit_name
from rocmlock.util.fs import file_sha256
from rocmlock.util.text import escape

DAMAGED = "the bundle is damaged: copy it again from where it was packed (or pack it again)"
# The metadata of 100,000 packages is about 40 MB; a larger one is not a bundle of ours.
MAX_METADATA = 256 << 20
MAX_SIGNATURE = 64 << 10


@dataclass(frozen=True)
class Admitted:
    """A bundle's metadata as admitted: parsed, its bytes, and what is known of its signature."""

    meta: BundleMetadata
    raw: bytes
    signed: bool  # the bundle carries a signature (checked only with --trusted-signers)
    signer: Signer | None  # who signed it, found in --trusted-signers


def _members(tar: tarfile.TarFile, bundle: Path) -> list[tarfile.TarInfo]:
    """The bundle's members, each a plain file or directory with a relative name that stays inside."""
    members = tar.getmembers()
    for m in members:
        if not (m.isfile() or m.isdir()) or m.name.startswith("/") or ".." in m.name.split("/") \
                or not m.name.isprintable():
            raise InputError(f"{bundle}: member '{escape(m.name)}' is not a plain file or directory inside the "
                             "bundle", hint=DAMAGED)
    return members


def _check_complete(bundle: Path, tar: tarfile.TarFile, members: list[tarfile.TarInfo]) -> None:
    """The end-of-archive blocks follow the last member: a copy cut short is damaged, not another format.

    tarfile ends its member list without an error at a header cut short (``TarFile.next`` takes a truncated
    header after the first one for the end), so the members after the cut would just be missing.
    """
    last = members[-1] if members else None
    end = 0 if last is None else last.offset_data + (0 if last.isdir() else -(-last.size // tarfile.BLOCKSIZE)
                                                     * tarfile.BLOCKSIZE)
    fileobj = tar.fileobj
    if fileobj is None:  # never for a tar opened from a path
        return
    fileobj.seek(end)
    if fileobj.read(2 * tarfile.BLOCKSIZE) != tarfile.NUL * (2 * tarfile.BLOCKSIZE):
        raise InputError(f"{bundle}: truncated: it ends inside the archive (after {len(members)} members)",
                         hint=DAMAGED)


def _read_member(tar: tarfile.TarFile, member: tarfile.TarInfo | None, limit: int) -> bytes | None:
    if member is None or member.size > limit:
        return None
    fh = tar.extractfile(member)
    return None if fh is None else fh.read()


def _not_a_bundle(shown: Path) -> InputError:
    return InputError(f"{shown}: no {ROCMLOCK_METADATA}: not a bundle of `rocmlock pack`",
                      hint="a plain pixi-pack bundle installs with `pixi-unpack`")


def _admit(shown: Path, files: set[str], dirs: set[str], raw: bytes | None, signature: bytes | None,
           signers: Path | None, scratch: Path, directory: bool = False) -> Admitted:
    """The verified metadata and its bytes: signature (when asked for), strings, then the member list."""
    if raw is None:
        raise _not_a_bundle(shown)
    signer = None
    if signers is not None:
        from rocmlock.bundle.signing import verify_bytes

        signer = verify_bytes(raw, signature, signers, shown, scratch)
    meta = parse_metadata(raw, f"{shown}: {ROCMLOCK_METADATA}")
    wanted, wanted_dirs = expected_members(meta)
    allowed = {*wanted, ROCMLOCK_METADATA, SIGNATURE}
    ignored = {explicit_name(meta.platform)} if directory else set()  # an earlier unpack's @EXPLICIT file
    extra = sorted((files - allowed - ignored) | (dirs - wanted_dirs - ignored))
    if extra:
        raise InputError(f"{shown}: member '{escape(extra[0])}' is not in the bundle's metadata "
                         f"({len(extra)} such member(s)); a bundle holds only what its metadata lists", hint=DAMAGED)
    missing = sorted(set(wanted) - files)
    if missing:
        raise InputError(f"{shown}: {escape(missing[0])}: missing from the bundle", hint=DAMAGED)
    return Admitted(meta, raw, SIGNATURE in files, signer)


def extract(bundle: Path, dest: Path, signers: Path | None, scratch: Path) -> Admitted:
    """Admit the tar ``bundle`` (everything but the digests) and extract it into ``dest``."""
    try:
        with tarfile.open(bundle, mode="r:") as tar:
            members = _members(tar, bundle)
            _check_complete(bundle, tar, members)
            by_name = {m.name: m for m in members}
            if len(by_name) != len(members):
                raise InputError(f"{bundle}: a member is there twice", hint=DAMAGED)
            admitted = _admit(bundle, {m.name for m in members if m.isfile()},
                              {m.name for m in members if m.isdir()},
                              _read_member(tar, by_name.get(ROCMLOCK_METADATA), MAX_METADATA),
                              _read_member(tar, by_name.get(SIGNATURE), MAX_SIGNATURE), signers, scratch)
            # Python >= 3.11.4 also applies its own "data" filter (permissions, names).
            extra = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
            tar.extractall(dest, members=members, **extra)  # type: ignore[arg-type]
            return admitted
    except FileNotFoundError:
        raise InputError(f"{bundle}: no such file", hint="pass the .tar written by `rocmlock pack`") from None
    except tarfile.TarError as exc:
        raise InputError(f"{bundle}: cannot extract it: {escape(str(exc))}", hint=DAMAGED) from None
    except OSError as exc:  # writing the extraction (a full disk, a quota): the bundle is fine
        raise OperationError(f"{bundle}: cannot extract it into {dest.parent}: {exc.strerror or exc}",
                             hint=f"check that the disk of {dest.parent} has room for the bundle's size") from None


def admit_directory(where: Path, signers: Path | None, scratch: Path) -> Admitted:
    """Admit an extracted bundle: its tree holds only directories and regular files (no link)."""
    if not (where / ROCMLOCK_METADATA).is_file():  # first: a directory that never was a bundle is not "damaged"
        raise _not_a_bundle(where)
    files: set[str] = set()
    dirs: set[str] = set()
    for top, dirnames, filenames in os.walk(where):
        for name in (*dirnames, *filenames):
            path = Path(top) / name
            rel = path.relative_to(where).as_posix()
            mode = path.lstat().st_mode
            if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)) or not rel.isprintable():
                raise InputError(f"{where}: '{escape(rel)}' is not a plain file or directory", hint=DAMAGED)
            (dirs if stat.S_ISDIR(mode) else files).add(rel)

    def read(name: str, limit: int) -> bytes | None:
        path = where / name
        return path.read_bytes() if name in files and path.stat().st_size <= limit else None

    return _admit(where, files, dirs, read(ROCMLOCK_METADATA, MAX_METADATA), read(SIGNATURE, MAX_SIGNATURE),
                  signers, scratch, directory=True)


def check_digests(where: Path, meta: BundleMetadata, raw: bytes, shown: Path) -> None:
    """Every member's sha256 against the metadata, and the metadata still the bytes that were admitted.

    Messages name ``shown`` (the bundle the user gave) and the member, not where it was extracted."""
    if (where / ROCMLOCK_METADATA).read_bytes() != raw:
        raise InputError(f"{shown}: {ROCMLOCK_METADATA} changed while it was read", hint=DAMAGED)
    wanted, _ = expected_members(meta)
    for member, expected in sorted(wanted.items()):
        path = where / member
        if not path.is_file() or path.is_symlink():
            raise InputError(f"{shown}: {member}: missing from the bundle", hint=DAMAGED)
        digest = file_sha256(path)
        if digest != expected:
            raise InputError(f"{shown}: {member}: sha256 {digest} differs from the bundle's metadata ({expected})",
                             hint=DAMAGED)
