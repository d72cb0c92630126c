"""``rocmlock unpack``: install a bundle of ``rocmlock pack`` on a node, after checking the bundle and the node.

``unpack_bundle`` reads top to bottom: open the bundle (extract the tar, or use an extracted directory)
-> read its metadata -> check it was made for this machine's platform -> check every package's sha256
and that the channel holds exactly those packages (never skipped) -> check the node's GPUs and ROCm
against the bundle's target (``--force`` skips only this) -> install with rattler from the bundle's
channel (``file://`` URLs, no network) -> write an ``@EXPLICIT`` file with those URLs where the bundle
stays extracted -> run the environment's probe (``rocm-env-check --json``) unless told not to.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import tarfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rattler import RepoDataRecord

from rocmlock.deploy.audit import check_bundle_for_node
from rocmlock.deploy.bundle import (
    CHANNEL_DIR,
    PIXI_PACK_FORMAT,
    PIXI_PACK_METADATA,
    BundleMetadata,
    index_mismatch,
    read_metadata,
)
from rocmlock.errors import InputError, OperationError
from rocmlock.host.node import node_problem, read_node
from rocmlock.lock.exports import explicit_name, render_explicit
from rocmlock.lock.lockfile import LockedPlatform
from rocmlock.util.credentials import one_line, redact_text
from rocmlock.util.fs import write_atomic
from rocmlock.util.runner import CommandError, run_command
from rocmlock.util.scratch import remove_tree, scratch_dir

CHUNK = 1 << 20
SCRATCH = ".rocmlock-unpack-"
MARKER = ".rocmlock-unpack-incomplete"
PROBE_TIMEOUT_S = 1800.0
DAMAGED = "the bundle is damaged: copy it again from where it was packed (or pack it again)"

Log = Callable[[str], None]


@dataclass(frozen=True)
class ProbeOutcome:
    """The environment's own probe, run from the new prefix."""

    command: str
    exit_code: int
    ok: bool
    failed: tuple[str, ...]
    summary: str


@dataclass(frozen=True)
class UnpackResult:
    """What ``rocmlock unpack`` did."""

    prefix: Path
    metadata: BundleMetadata
    node: str
    explicit: Path | None
    probe: ProbeOutcome | None

    @property
    def ok(self) -> bool:
        return self.probe is None or self.probe.ok

    def to_dict(self) -> dict[str, Any]:
        meta = self.metadata
        probe = None if self.probe is None else {
            "command": self.probe.command, "exit_code": self.probe.exit_code, "ok": self.probe.ok,
            "failed": list(self.probe.failed), "summary": self.probe.summary}
        return {"prefix": str(self.prefix), "environment": meta.environment, "platform": meta.platform,
                "gpu_target": meta.gpu_target, "rocm_version": meta.rocm_version, "node": self.node,
                "packages": [f"{p.name}-{p.version}-{p.build}" for p in meta.packages],
                "explicit": None if self.explicit is None else str(self.explicit), "probe": probe, "ok": self.ok}


def unpack_bundle(bundle: Path, prefix: Path, *, force: bool = False, verify: bool = True,
                  root: Path = Path("/"), env: Mapping[str, str] | None = None, extract_dir: Path | None = None,
                  log: Log | None = None) -> UnpackResult:
    """Check ``bundle`` and this node, install it into ``prefix`` and (``verify``) run its probe.

    ``root`` stands for ``/`` when reading the node's GPUs; ``env`` for the environment (ROCm paths, and
    the probe's environment). A tar is extracted into ``extract_dir`` (kept: the ``@EXPLICIT`` file points
    into it; it appears only once the install succeeded) or a temporary directory (removed). Temporary
    data goes to locked scratch directories beside the prefix (:mod:`rocmlock.util.scratch`); a prefix whose
    unpack was killed carries a marker, and the next unpack into it says so and installs it again.
    """
    say = log or (lambda _msg: None)
    env = dict(os.environ if env is None else env)
    prefix = prefix.absolute()
    keep = None if extract_dir is None else extract_dir.absolute()
    _check_arguments(bundle, prefix, keep, root)
    fresh = _check_prefix(prefix, say)
    with scratch_dir(prefix.parent, SCRATCH, say) as scratch, _opened(bundle, keep, scratch, say) as where:
        meta = read_metadata(where, shown=bundle)
        _check_platform(where, meta, bundle)
        _check_integrity(where, meta, bundle)
        say(f"bundle ok: {len(meta.packages)} packages of '{meta.environment}' ({meta.platform}), sha256 checked")
        node = _check_node(meta, root, env, force)
        say(node)
        # Issue 25: the packages' GPU code against this node's GPUs (deploy/audit.py).
        say(check_bundle_for_node(where, meta, tuple(g.gfx for g in read_node(root, env).gpus), force))
        _install(_records(where, meta), prefix, meta, fresh, scratch / "cache")
        say(f"installed {len(meta.packages)} packages into {prefix}")
        kept = bundle.absolute() if bundle.is_dir() else _keep(where, keep)
    explicit = _write_explicit(kept, meta, say) if kept is not None else None
    probe = _run_probe(prefix, meta, env) if verify and meta.probe else None
    if verify and not meta.probe:
        say(f"not verified: '{meta.environment}' has no rocm-env-check package (add it to the environment)")
    return UnpackResult(prefix, meta, node, explicit, probe)


# ----------------------------------------------------------------------------- open


def _check_arguments(bundle: Path, prefix: Path, keep: Path | None, root: Path) -> None:
    """Wrong arguments, refused before anything is extracted or written."""
    if not bundle.exists():
        raise InputError(f"{bundle}: no such file", hint="pass the .tar written by `rocmlock pack`")
    if not root.is_dir():
        what = "not a directory" if root.exists() else "no such directory"
        raise InputError(f"--host-root {root}: {what}", hint="pass the directory the host's / is at")
    if keep is not None and bundle.is_dir():
        raise InputError(f"--extract-dir {keep}: {bundle} is extracted already",
                         hint="--extract-dir is for a .tar bundle; leave it out")
    if keep is not None:
        if keep.exists() and not keep.is_dir():
            raise InputError(f"--extract-dir {keep}: exists and is not a directory")
        if keep.is_dir() and any(keep.iterdir()):
            raise InputError(f"{keep}: --extract-dir must be empty or not exist")
    for other, what in ((keep, "--extract-dir"), (bundle.absolute() if bundle.is_dir() else None, "the bundle")):
        if other is not None and (other == prefix or other in prefix.parents or prefix in other.parents):
            raise InputError(f"--prefix and {what} must be different directories, neither inside the other: "
                             f"{prefix}, {other}")
    _check_writable(prefix, "--prefix")
    if keep is not None:
        _check_writable(keep, "--extract-dir")


def _check_writable(path: Path, flag: str) -> None:
    """``path``'s parent (where the scratch directory goes; created if missing) and ``path`` itself when it
    exists can be written: else one line naming the directory, before anything is extracted or created."""
    where = next((p for p in path.parents if p.exists()), path)  # `/` has no parents
    if not where.is_dir():
        raise InputError(f"{flag} {path}: {where} is not a directory", hint=f"choose another {flag}")
    for directory in (where, path) if path.is_dir() else (where,):
        if not os.access(directory, os.W_OK | os.X_OK):
            why = "a read-only file system" if os.statvfs(directory).f_flag & os.ST_RDONLY else "no write permission"
            raise InputError(f"{flag} {path}: cannot write in {directory} ({why})",
                             hint=f"unpack writes {flag} and its temporary files there: choose a {flag} in a "
                                  f"directory you can write (under $HOME, say), or get write access to {directory}")


def _members(tar: tarfile.TarFile, bundle: Path) -> list[tarfile.TarInfo]:
    """The bundle's members, each a plain file or directory with a relative name that stays inside."""
    members = tar.getmembers()
    for m in members:
        if not (m.isfile() or m.isdir()) or m.name.startswith("/") or ".." in m.name.split("/"):
            raise InputError(f"{bundle}: member '{m.name}' is not a plain file or directory inside the bundle",
                             hint=DAMAGED)
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


def _extract(bundle: Path, dest: Path) -> None:
    try:
        with tarfile.open(bundle, mode="r:") as tar:
            members = _members(tar, bundle)
            _check_complete(bundle, tar, members)
            # Python >= 3.11.4 also applies its own "data" filter (permissions, names).
            extra = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
            tar.extractall(dest, members=members, **extra)  # type: ignore[arg-type]
    except FileNotFoundError:
        raise InputError(f"{bundle}: no such file", hint="pass the .tar written by `rocmlock pack`") from None
    except tarfile.TarError as exc:
        raise InputError(f"{bundle}: cannot extract it: {exc}", hint=DAMAGED) from None
    except OSError as exc:  # writing the extraction (a full disk, a quota): the bundle is fine
        raise OperationError(f"{bundle}: cannot extract it into {dest.parent}: {exc.strerror or exc}",
                             hint=f"check that the disk of {dest.parent} has room for the bundle's size") from None


@contextlib.contextmanager
def _opened(bundle: Path, keep: Path | None, scratch: Path, say: Log) -> Iterator[Path]:
    """The extracted bundle: the bundle itself when it is a directory, else extracted into ``scratch``
    (beside the prefix: a bundle of many GB may not fit in /tmp) or, for ``--extract-dir``, into a scratch
    directory beside that one, from where :func:`_keep` moves it once the install succeeded."""
    if bundle.is_dir():
        yield bundle.absolute()
        return
    if keep is None:
        _extract(bundle, scratch / "bundle")
        yield scratch / "bundle"
        return
    with scratch_dir(keep.parent, SCRATCH, say) as beside:
        _extract(bundle, beside / "bundle")
        yield beside / "bundle"


def _keep(where: Path, keep: Path | None) -> Path | None:
    """Move the extracted bundle to ``--extract-dir`` (same filesystem: a rename; an empty one is replaced)."""
    if keep is None:
        return None
    os.replace(where, keep)
    return keep


# ----------------------------------------------------------------------------- checks


def _check_platform(where: Path, meta: BundleMetadata, shown: Path) -> None:
    """pixi-pack.json agrees with our metadata, and the bundle was made for this machine's platform."""
    from rattler import Subdir

    label = f"{shown}: {PIXI_PACK_METADATA}"
    try:
        pixi_pack = json.loads((where / PIXI_PACK_METADATA).read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"{label}: cannot read it: {exc}", hint=DAMAGED) from None
    if not isinstance(pixi_pack, dict) or pixi_pack.get("version") != PIXI_PACK_FORMAT \
            or pixi_pack.get("platform") != meta.subdir:
        raise InputError(f"{label}: expected version '{PIXI_PACK_FORMAT}' and platform '{meta.subdir}'", hint=DAMAGED)
    here = str(Subdir.current())
    if meta.subdir not in (here, "noarch"):
        raise OperationError(f"the bundle is for {meta.subdir} ({meta.platform}), this machine is {here}",
                             hint=f"pack the environment with -p for a {here} platform")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _check_integrity(where: Path, meta: BundleMetadata, shown: Path) -> None:
    """Every package's sha256 against the metadata; the channel holds those packages and nothing else.

    Messages name ``shown`` (the bundle the user gave) and the member, not where it was extracted."""
    channel = where / CHANNEL_DIR
    wanted = {p.member for p in meta.packages}
    present = {str(p.relative_to(where)) for p in channel.glob("*/*") if p.name != "repodata.json"}
    extra = sorted(present - wanted)
    if extra:
        raise InputError(f"{shown}: {extra[0]}: not in the bundle's metadata (pixi-unpack would install it)",
                         hint=DAMAGED)
    for pkg in meta.packages:
        path = where / pkg.member
        if not path.is_file():
            raise InputError(f"{shown}: {pkg.member}: missing from the bundle", hint=DAMAGED)
        digest = _sha256(path)
        if digest != pkg.sha256:
            raise InputError(f"{shown}: {pkg.member}: sha256 {digest} differs from the bundle's metadata ({pkg.sha256})",
                             hint=DAMAGED)
    problem = index_mismatch(channel, meta.packages)
    if problem:
        raise InputError(f"{shown}: {problem}", hint=DAMAGED)


def _check_node(meta: BundleMetadata, root: Path, env: Mapping[str, str], force: bool) -> str:
    """A line for the log; raises when the node cannot run the bundle (unless ``force``)."""
    if meta.gpu_target is None:
        return f"node check: '{meta.environment}' has no GPU target; nothing to check"
    problem = node_problem(read_node(root, env), meta.gpu_target, meta.rocm_version)
    if problem is None:
        rocm = f", ROCm {meta.rocm_version}" if meta.rocm_version else ""
        return f"node check: a {meta.gpu_target} GPU{rocm} found, as the bundle needs"
    if force:
        return f"node check skipped (--force): {problem}"
    raise OperationError(problem, hint="--force installs anyway (the integrity check still runs)")


# ----------------------------------------------------------------------------- install


def _records(where: Path, meta: BundleMetadata) -> list[RepoDataRecord]:
    """The bundle's packages as records with ``file://`` URLs into its channel."""
    from rattler import Channel, RepoData

    channel = where / CHANNEL_DIR
    records: list[RepoDataRecord] = []
    for subdir in sorted({p.subdir for p in meta.packages}):
        repodata = RepoData.from_path(channel / subdir / "repodata.json")
        records += repodata.into_repo_data(Channel(str(channel)))
    return sorted(records, key=lambda r: r.name.normalized)


def _check_prefix(prefix: Path, say: Log) -> bool:
    """Whether ``prefix`` is to be made anew (it does not exist, is empty, or holds an unpack that was killed);
    False for a conda environment to update. Anything else is refused."""
    if not prefix.exists():
        return True
    if not prefix.is_dir():
        raise InputError(f"{prefix}: --prefix exists and is not a directory")
    marker = prefix / MARKER
    if marker.is_file():
        with _held(marker):  # only to see whether a live unpack holds it
            pass
        say(f"{prefix}: an earlier unpack into it was interrupted; installing it again")
        return marker.read_text().strip() == "created"
    if not any(prefix.iterdir()):
        return True
    if not (prefix / "conda-meta").is_dir():
        raise InputError(f"{prefix}: --prefix is a non-empty directory and not a conda environment",
                         hint="choose a new directory (it is created)")
    return False


def _install(records: list[RepoDataRecord], prefix: Path, meta: BundleMetadata, fresh: bool, cache: Path) -> None:
    """Install with rattler from the bundle's channel; a prefix made anew is removed when this fails.

    A marker in the prefix says, until the install finished, that it is not a finished environment: a
    killed unpack leaves it, and the next one sees it (:func:`_check_prefix`). ``cache`` is rattler's package
    cache for this install, on the prefix's filesystem (rattler hard-links from it).
    """
    from rattler import install

    existed = prefix.exists()
    prefix.mkdir(parents=True, exist_ok=True)
    marker = prefix / MARKER
    with _held(marker) as fd:  # held until the end: a second unpack into this prefix stops at once
        if fresh:
            _clear(prefix, keep=MARKER)
        os.ftruncate(fd, 0)
        os.write(fd, b"created\n" if fresh else b"updated\n")
        try:
            asyncio.run(install(records, prefix, cache_dir=cache, show_progress=False))
        except Exception as exc:  # noqa: BLE001 - rattler's link/extract errors; the message names the file
            if fresh:
                marker.unlink()
                remove_tree(prefix, keep_dir=True, settle=True)
                if not existed:
                    with contextlib.suppress(OSError):  # still not empty: the message says where it is
                        prefix.rmdir()
            raise OperationError(f"installing '{meta.environment}' into {prefix} failed: "
                                 f"{one_line(redact_text(str(exc)))}",
                                 hint=f"check that {prefix.parent} is writable and its disk has room") from None
        marker.unlink()


@contextlib.contextmanager
def _held(marker: Path) -> Iterator[int]:
    """The marker, opened (created) and locked; an unpack that holds it already is an error."""
    import fcntl

    fd = os.open(marker, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise OperationError(f"{marker.parent}: another rocmlock unpack is installing into it",
                                 hint="wait for it to finish, or choose another --prefix") from None
        except OSError:  # no locks on this filesystem: go on unguarded
            pass
        yield fd
    finally:
        os.close(fd)


def _clear(prefix: Path, keep: str | None = None) -> None:
    """Remove what ``prefix`` holds (but ``keep``), not the directory itself (it may be a mount point)."""
    remove_tree(prefix, keep_dir=True, keep=keep)


def _write_explicit(where: Path, meta: BundleMetadata, say: Log) -> Path | None:
    """An ``@EXPLICIT`` file with the ``file://`` URLs of the extracted channel (conda needs absolute URLs).

    The environment is installed by now: a bundle directory that cannot be written (a read-only share)
    costs only this file, with a warning."""
    path = where / explicit_name(meta.platform)
    platform = LockedPlatform(meta.platform, meta.subdir, (f"__amdgpu_arch={meta.gpu_isa}",) if meta.gpu_isa else ())
    try:
        write_atomic(path, render_explicit(meta.environment, platform, _records(where, meta)))
    except OSError as exc:
        say(f"warning: no @EXPLICIT file: cannot write {path}: {exc.strerror or exc}")
        return None
    return path


# ----------------------------------------------------------------------------- probe


def _run_probe(prefix: Path, meta: BundleMetadata, env: Mapping[str, str]) -> ProbeOutcome:
    """``<prefix>/bin/rocm-env-check --json``; its report's ``ok`` and ``failed`` say the verdict."""
    probe = prefix / (meta.probe or "")
    command = f"{probe} --json"
    try:
        res = run_command([str(probe), "--json"], env={**env, "CONDA_PREFIX": str(prefix)},
                          timeout=PROBE_TIMEOUT_S, check=False)
    except CommandError as exc:
        return ProbeOutcome(command, -1, False, (), f"the probe did not run: {exc}")
    try:
        report = json.loads(res.stdout)
        ok, failed = bool(report["ok"]) and res.ok, tuple(str(f) for f in report.get("failed") or ())
    except (ValueError, KeyError, TypeError):
        return ProbeOutcome(command, res.returncode, False, (),
                            f"the probe wrote no JSON report (exit {res.returncode}): {res.last_error_line()}")
    summary = "probe passed" if ok else f"probe failed: {', '.join(failed) or f'exit {res.returncode}'}"
    return ProbeOutcome(command, res.returncode, ok, failed, summary)
