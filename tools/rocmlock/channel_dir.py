"""Publish into a directory channel so that its repodata only ever lists whole files, whatever kills the run.

rattler's index (rattler_index/src/lib.rs, ``index_subdir``) lists a subdir, drops the records whose files are
gone and adds the files its repodata.json does not name yet; a file under a name it already lists is never read
again. Hence the order here:

1. every package is copied into a scratch directory inside the channel (one filesystem, so the move in is a
   rename; not a subdir, so neither the index nor a client reads it), locked while in use: the next publish
   removes the one a killed run left (:mod:`rocmlock.scratch`). A partial copy never has a package's name.
2. a file to replace (``--force``), or one whose record does not match it (a run killed after 3.), is moved out
   first and the channel indexed, so that the index drops the old record;
3. the packages are renamed into their subdirs, each whole;
4. the channel is indexed: only now does repodata list them.

A kill before 4. leaves the channel as it was plus whole, unlisted packages; the next publish finds them there
(identical: skipped) and indexes. The one window of a replacement is between 2.'s move and its index: repodata
may then list the old name while its file is gone (a client gets "not found", never other bytes than it
expects); the next publish sees the mismatch and repairs it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Collection, Mapping
from pathlib import Path

from rocmlock.scratch import scratch_dir

SCRATCH = ".rocmlock-publish-"
CHUNK = 1 << 20


def file_sha256(path: Path) -> str:
    """The sha256 of ``path``, read in chunks (packages of several GB)."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


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
    returned (a publish that was killed while replacing).
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
