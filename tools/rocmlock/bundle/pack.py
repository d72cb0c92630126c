"""``rocmlock pack``: one locked environment as a self-contained, verified bundle for nodes without a channel.

``pack_environment`` reads top to bottom as the pipeline it is: select the environment's records and PyPI
wheels from pixi.lock (no solve; read once, under the workspace's reader lock) -> describe its GPU target and
ROCm version -> lay out the bundle's members (each subdir's repodata.json from the lock's records,
environment.yml, the wheels (downloaded and checked first: the lock has no size for them), optionally the
offline installer, then the metadata with every member's sha256 and, with ``sign``, its signature; the
packages as holes of the lock's sizes) -> write the tar's headers and small files -> fetch every package
straight into its place (:mod:`rocmlock.prefix.fetch`), hashing each byte as it is written and comparing with
the lock's size and sha256 -> move the finished file into place. The bytes go to disk once; a failure leaves nothing.
The format is :mod:`rocmlock.bundle.layout`'s (pixi-pack's layout).
"""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rattler import RepoDataRecord

from rocmlock import __version__
from rocmlock.bundle.layout import (
    CHANNEL_DIR,
    ENVIRONMENT_FILE,
    INSTALLER_DIR,
    PIXI_PACK_METADATA,
    PROBE,
    PYPI_DIR,
    ROCMLOCK_METADATA,
    SIGNATURE,
    BundledPackage,
    BundleMetadata,
    Member,
    lock_url_problem,
    members_of_tree,
    package_file_problem,
    parse_metadata,
    render_environment_yml,
    render_pixi_pack_json,
    sort_members,
    write_tar,
)
from rocmlock.bundle.wheels import fetch_wheels, select_wheels
from rocmlock.errors import InputError, OperationError
from rocmlock.gpu.targets import all_targets, minor_version
from rocmlock.lock.lockfile import LockedPlatform
from rocmlock.prefix.fetch import DEFAULT_TIMEOUTS, Progress, Timeouts, fetch_all
from rocmlock.prefix.install import read_selected
from rocmlock.util.credentials import redact_url
from rocmlock.util.fs import file_sha256
from rocmlock.util.scratch import scratch_dir
from rocmlock.util.text import escape

SCRATCH = ".rocmlock-pack-"


@dataclass(frozen=True)
class PackResult:
    """What ``rocmlock pack`` wrote."""

    output: Path
    metadata: BundleMetadata
    size: int
    installer: bool
    signed: bool = False
    wheels: int = 0
    # PyPI packages of the lock that are not wheels, left out with --ignore-pypi-non-wheel.
    left_out: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        meta = self.metadata
        return {"output": str(self.output), "environment": meta.environment, "platform": meta.platform,
                "subdir": meta.subdir, "gpu_target": meta.gpu_target, "gpu_isa": meta.gpu_isa,
                "rocm_version": meta.rocm_version, "lock_sha256": meta.lock_sha256, "packages": len(meta.packages),
                "bytes": self.size, "installer": self.installer, "signed": self.signed, "pypi_wheels": self.wheels,
                "left_out": list(self.left_out)}


def pack_environment(lock_path: Path, environment: str, platform: str | None = None,
                     output: Path | None = None, with_installer: bool = False, client: Any = None,
                     sign: Path | None = None, timeouts: Timeouts = DEFAULT_TIMEOUTS,
                     ignore_pypi_non_wheel: bool = False,
                     progress: Callable[[int, int], Progress] | None = None,
                     log: Callable[[str], None] | None = None) -> PackResult:
    """Pack ``environment`` on ``platform`` of the lock file ``lock_path`` into the tar ``output``.

    ``client`` is the ``rattler.Client`` that downloads (default: rattler's authenticated default client,
    credentials from ``RATTLER_AUTH_FILE``); ``progress(total_bytes, count)`` returns a callback that is
    given each downloaded chunk's size; ``sign`` an OpenSSH private key that signs the metadata
    (:mod:`rocmlock.bundle.signing`); ``timeouts`` end a download that stops or trickles
    (:mod:`rocmlock.prefix.fetch`). Everything is written in a scratch directory beside ``output``
    (:mod:`rocmlock.util.scratch`: a killed pack's is removed by the next one) and renamed into place at the end.
    """
    selected, lock_sha256 = read_selected(lock_path, environment, platform, "pack")
    locked_platform, records = selected.platform, selected.records
    metadata = _describe(environment, locked_platform, records, lock_sha256)
    wheels, left_out = select_wheels(selected.pins, selected.sources, ignore_pypi_non_wheel,
                                     f"{lock_path}: environment '{environment}' [{locked_platform.name}]")
    if wheels and not any(p.name == "python" for p in metadata.packages):
        raise InputError(f"{lock_path}: environment '{environment}' has PyPI wheels and no python to install "
                         "them into", hint="add python to the environment's dependencies and lock again")
    out = (output or Path(f"{environment}-{locked_platform.name}.tar")).absolute()
    check_output(out)
    with scratch_dir(out.parent, SCRATCH, log) as scratch:
        members = _members(metadata, records, tuple((w.pin.name, w.pin.version) for w in wheels))
        if wheels:
            fetch_wheels(wheels, scratch / PYPI_DIR, client, timeouts)
            members += members_of_tree(scratch / PYPI_DIR, PYPI_DIR)
        if with_installer:
            from rocmlock.bundle.installer import add_installer

            add_installer(scratch / INSTALLER_DIR, metadata)
            members += members_of_tree(scratch / INSTALLER_DIR, INSTALLER_DIR)
        metadata = replace(metadata, files={m.name: _member_sha256(m) for m in members if not m.is_dir
                                            and not m.deferred})
        members += _metadata_members(metadata, sign, scratch)
        on_bytes = progress(sum(r.size or 0 for r in records), len(records)) if progress else None
        size = _write_bundle(out, scratch / "bundle.tar", sort_members(members), records, lock_path.parent,
                             client, on_bytes, timeouts)
    return PackResult(out, metadata, size, with_installer, sign is not None, len(wheels), left_out)


def _member_sha256(member: Member) -> str:
    if member.path is not None:
        return file_sha256(member.path)
    return hashlib.sha256(member.data or b"").hexdigest()


def _metadata_members(metadata: BundleMetadata, sign: Path | None, scratch: Path) -> list[Member]:
    """rocmlock-pack.json, which holds every other member's sha256, and (``sign``) its OpenSSH signature."""
    raw = metadata.render().encode()
    try:  # what unpack would refuse is refused here, before anything is fetched
        parse_metadata(raw, f"environment '{escape(metadata.environment)}' [{escape(metadata.platform)}]")
    except InputError as exc:
        raise InputError(f"{exc.message}: `rocmlock unpack` would refuse such a bundle",
                         hint="rename the environment or platform in pixi.toml (pixi's names: a-z, 0-9, '-') "
                              "and lock again") from None
    members = [Member(ROCMLOCK_METADATA, data=raw)]
    if sign is not None:
        from rocmlock.bundle.signing import sign_bytes

        members.append(Member(SIGNATURE, data=sign_bytes(raw, sign, scratch)))
    return members


def check_output(out: Path) -> None:
    """Refuse, before anything is fetched, an ``-o`` that cannot or must not become the bundle.

    An existing file is replaced only when it is a tar (an earlier bundle): ``-o pixi.lock`` is a typo,
    and replacing the lock with the bundle would lose it.
    """
    if out.is_dir():
        raise InputError(f"-o {out}: is a directory", hint=f"name the bundle's file, e.g. -o {out / 'env.tar'}")
    parent = next(p for p in out.parents if p.exists() or p == p.parent)
    if parent.exists() and not parent.is_dir():
        raise InputError(f"-o {out}: {parent} is not a directory", hint="choose another -o")
    if out.exists() and not (out.is_file() and tarfile.is_tarfile(out)):
        raise InputError(f"-o {out}: exists and is not a bundle; pack replaces only an earlier bundle",
                         hint="remove it or choose another -o")


# ----------------------------------------------------------------------------- describe


def _gpu_of(platform: LockedPlatform, records: list[RepoDataRecord]) -> tuple[str | None, str | None]:
    """(gfx, ISA): the ``amdgpu-target`` mutex's build string, and ``__amdgpu_arch`` of the lock platform."""
    gfx = next((str(r.build) for r in records if r.name.normalized == "amdgpu-target"), None)
    isa = next((v.split("=")[1] for v in platform.virtual_packages if v.startswith("__amdgpu_arch=")), None)
    if gfx and isa is None and gfx in all_targets():
        isa = all_targets()[gfx].isa
    return gfx, isa


def _bundled(record: RepoDataRecord) -> BundledPackage:
    problem = package_file_problem(record.name.normalized, str(record.version), str(record.build),
                                   record.file_name)
    if problem:
        raise InputError(f"pixi.lock: package '{escape(record.name.normalized)}': {problem}",
                         hint="a lock from an untrusted channel; lock again from channels you trust")
    if record.sha256 is None:
        raise OperationError(f"{record.file_name}: the lock has no sha256 for it, so it cannot be verified",
                             hint="lock again with `rocmlock lock` (or `pixi lock`), which records sha256")
    url = redact_url(record.url)  # (a lock URL with a query, say, is left out: unpack then keeps the copy's)
    return BundledPackage(record.subdir, record.file_name, record.name.normalized, str(record.version),
                          str(record.build), record.sha256.hex(), int(record.size or 0),
                          None if lock_url_problem(url, record.file_name) else url)


def _describe(environment: str, platform: LockedPlatform, records: list[RepoDataRecord],
              lock_sha256: str) -> BundleMetadata:
    gfx, isa = _gpu_of(platform, records)
    rocm = next((minor_version(str(r.version)) for r in records if r.name.normalized == "rocm-version"), None)
    probe = PROBE if any(r.name.normalized == "rocm-env-check" for r in records) else None
    packages = tuple(sorted((_bundled(r) for r in records), key=lambda p: (p.subdir, p.filename)))
    subdir = platform.subdir
    return BundleMetadata(environment, platform.name, subdir, gfx, isa, rocm or None, lock_sha256, __version__,
                          probe, packages)


# ----------------------------------------------------------------------------- fetch


# ----------------------------------------------------------------------------- repodata


def _repodata_entry(record: RepoDataRecord) -> dict[str, Any]:
    entry: dict[str, Any] = json.loads(record.to_json())
    for key in ("fn", "url", "channel"):  # where the lock found it: not part of a channel's own repodata
        entry.pop(key, None)
    return entry


def _repodata(records: list[RepoDataRecord]) -> dict[str, bytes]:
    """``repodata.json`` of every subdir (noarch always) from the lock's records, serialized by rattler.

    This is pixi-pack's way (src/pack.rs ``create_repodata_files``), not ``rattler.index``: the lock's records
    are what was solved, the source channel's repodata patches included, which the indexer would re-derive
    from each archive's index.json without them; and the indexer reads every archive once more (about
    40 MB/s here, three times the whole download). Each file's sha256 is checked against these very records.
    """
    subdirs: dict[str, dict[str, dict[str, Any]]] = {s: {"packages": {}, "packages.conda": {}}
                                                      for s in {r.subdir for r in records} | {"noarch"}}
    for record in records:
        key = "packages.conda" if record.file_name.endswith(".conda") else "packages"
        subdirs[record.subdir][key][record.file_name] = _repodata_entry(record)
    return {subdir: json.dumps({"info": {"subdir": subdir}, **packages, "repodata_version": 1},
                               sort_keys=True, separators=(",", ":")).encode()
            for subdir, packages in subdirs.items()}


def _member_name(record: RepoDataRecord) -> str:
    return f"{CHANNEL_DIR}/{record.subdir}/{record.file_name}"


def _members(metadata: BundleMetadata, records: list[RepoDataRecord],
             wheels: tuple[tuple[str, str], ...]) -> list[Member]:
    """Every member of the bundle but the installer's; packages are deferred (filled by the download)."""
    members = [Member(CHANNEL_DIR, is_dir=True)]
    for subdir, repodata in _repodata(records).items():
        members += [Member(f"{CHANNEL_DIR}/{subdir}", is_dir=True),
                    Member(f"{CHANNEL_DIR}/{subdir}/repodata.json", data=repodata)]
    for record in records:
        if record.size is None:
            raise OperationError(f"{record.file_name}: the lock has no size for it",
                                 hint="lock again with `rocmlock lock` (or `pixi lock`), which records sizes")
        members.append(Member(_member_name(record), size=int(record.size)))
    texts = {ENVIRONMENT_FILE: render_environment_yml(metadata.environment, metadata.packages, wheels),
             PIXI_PACK_METADATA: render_pixi_pack_json(metadata.subdir)}
    return members + [Member(name, data=text.encode()) for name, text in texts.items()]


def _write_bundle(out: Path, tmp: Path, members: list[Member], records: list[RepoDataRecord], base: Path,
                  client: Any, on_bytes: Progress | None, timeouts: Timeouts) -> int:
    """The tar at ``out``: headers and small files first, then every package downloaded into its place, all in
    ``tmp`` (in the scratch directory beside ``out``) that ``os.replace`` puts there only when every package
    checked out."""
    # Mode from the umask, like fsutil's temporary files (a bundle is shared).
    try:
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
        try:
            offsets = write_tar(members, fd)
            fetch_all(records, fd, [offsets[_member_name(r)] for r in records], base, client, on_bytes, timeouts)
            os.fsync(fd)
            size = os.fstat(fd).st_size
        finally:
            os.close(fd)
        os.replace(tmp, out)
    except OSError as exc:  # the bundle's side: a full disk, a quota, a file-size limit
        raise OperationError(f"cannot write the bundle {out}: {exc.strerror or exc}",
                             hint=f"check that the disk of {out.parent} has room for the bundle "
                                  f"({sum(m.size for m in members) / 1e6:.0f} MB and more)") from None
    return size
