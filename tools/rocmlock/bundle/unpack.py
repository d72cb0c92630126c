"""``rocmlock unpack``: install a bundle of ``rocmlock pack`` on a node, after checking the bundle and the node.

``unpack_bundle`` reads top to bottom: admit the bundle (:mod:`rocmlock.bundle.admit`: its member list, the
metadata's signature with ``--trusted-signers``, the metadata's strings, exactly the members it lists; then
extract the tar, or use an extracted directory) -> check every member's sha256 -> check it was made for this
machine's platform -> check that the channel's repodata lists exactly the metadata's packages and redirects
nowhere, and that no package writes outside the prefix (:mod:`rocmlock.prefix.pkgcheck`) (none of this is
ever skipped) -> check the node's GPUs and ROCm against the bundle's target (``--force`` skips only this) ->
install with rattler from the bundle's channel (``file://`` URLs of the checked files, no network), then its
PyPI wheels (:mod:`rocmlock.bundle.wheels`) -> write an ``@EXPLICIT`` file with those URLs where the bundle
stays extracted -> run the environment's probe (``rocm-env-check --json``) unless told not to.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import unquote, urlsplit

from rattler import RepoDataRecord

from rocmlock.bundle.admit import DAMAGED, Admitted, admit_directory, check_digests, extract
from rocmlock.bundle.audit import check_bundle_for_node
from rocmlock.bundle.layout import (
    CHANNEL_DIR,
    PIXI_PACK_FORMAT,
    PIXI_PACK_METADATA,
    SIGNATURE,
    BundleMetadata,
    index_mismatch,
)
from rocmlock.bundle.signing import Signer
from rocmlock.bundle.wheels import bundled_wheels, install_wheels
from rocmlock.errors import InputError, OperationError, RocmlockError
from rocmlock.host.node import gpu_choice, node_problem, read_node
from rocmlock.lock.exports import explicit_name, render_explicit
from rocmlock.lock.lockfile import LockedPlatform
from rocmlock.prefix.marker import MARKER, installing, interrupted
from rocmlock.prefix.pkgcheck import check_packages
from rocmlock.prefix.records import settle_records
from rocmlock.util.credentials import one_line, redact_text
from rocmlock.util.fs import write_atomic
from rocmlock.util.runner import CommandError, run_command
from rocmlock.util.scratch import remove_tree, scratch_dir
from rocmlock.util.text import escape

SCRATCH = ".rocmlock-unpack-"
PROBE_TIMEOUT_S = 1800.0

Log = Callable[[str], None]
# A bundle's signature: checked against --trusted-signers, carried but not checked, or absent.
SignatureState = Literal["verified", "not checked", "none"]


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
    signature: SignatureState = "none"
    signer: Signer | None = None

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
                "explicit": None if self.explicit is None else str(self.explicit), "probe": probe, "ok": self.ok,
                "signature": self.signature,
                "signer": None if self.signer is None else {"principal": self.signer.principal, "key": self.signer.key}}


def unpack_bundle(bundle: Path, prefix: Path, *, force: bool = False, verify: bool = True,
                  root: Path = Path("/"), env: Mapping[str, str] | None = None, extract_dir: Path | None = None,
                  trusted_signers: Path | None = None, log: Log | None = None) -> UnpackResult:
    """Check ``bundle`` and this node, install it into ``prefix`` and (``verify``) run its probe.

    ``root`` stands for ``/`` when reading the node's GPUs; ``env`` for the environment (ROCm paths, and
    the probe's environment). A tar is extracted into ``extract_dir`` (kept: the ``@EXPLICIT`` file points
    into it; it appears only once the install succeeded) or a temporary directory (removed). Temporary
    data goes to locked scratch directories beside the prefix (:mod:`rocmlock.util.scratch`); a prefix whose
    unpack was killed carries a marker, and the next unpack into it says so and installs it again.
    ``trusted_signers`` (an OpenSSH allowed_signers file) makes a valid signature of the metadata a condition,
    checked before anything else of the bundle is read; ``force`` never skips it.
    """
    say = log or (lambda _msg: None)
    env = dict(os.environ if env is None else env)
    prefix = prefix.absolute()
    keep = None if extract_dir is None else extract_dir.absolute()
    _check_arguments(bundle, prefix, keep, root)
    fresh = _check_prefix(prefix, say)
    with scratch_dir(prefix.parent, SCRATCH, say) as scratch, \
            _opened(bundle, keep, scratch, trusted_signers, say) as (where, admitted):
        meta = admitted.meta
        signature = _signature_line(admitted, bundle, trusted_signers)
        if signature:
            say(signature)
        check_digests(where, meta, admitted.raw, bundle)
        _check_platform(where, meta, bundle)
        _check_integrity(where, meta, bundle)
        say(f"bundle ok: {len(meta.packages)} packages of '{meta.environment}' ({meta.platform}), sha256 checked")
        node = _check_node(meta, root, env, force)
        say(node)
        # Issue 25: the packages' GPU code against this node's GPUs (bundle/audit.py).
        say(check_bundle_for_node(where, meta, tuple(g.gfx for g in read_node(root, env).gpus), force))
        wheels = bundled_wheels(meta)
        say(f"installing {len(meta.packages)} packages into {prefix}")
        _install(_records(where, meta), prefix, meta, fresh, scratch / "cache",
                 then=(lambda: install_wheels(where, prefix, meta, scratch, fresh=fresh)) if wheels else None,
                 say=say)
        pypi = f" and {len(wheels)} PyPI wheel(s)" if wheels else ""
        say(f"installed {len(meta.packages)} packages{pypi} into {prefix}")
        kept = bundle.absolute() if bundle.is_dir() else _keep(where, keep)
    explicit = _write_explicit(kept, meta, say) if kept is not None else None
    if verify and meta.probe:
        say(f"running {meta.probe} of the new environment")
    probe = _run_probe(prefix, meta, env) if verify and meta.probe else None
    if verify and not meta.probe:
        say(f"not verified: '{meta.environment}' has no rocm-env-check package (add it to the environment)")
    return UnpackResult(prefix, meta, node, explicit, probe, _signature_state(admitted), admitted.signer)


def _signature_state(admitted: Admitted) -> SignatureState:
    if admitted.signer is not None:
        return "verified"
    return "not checked" if admitted.signed else "none"


def _signature_line(admitted: Admitted, shown: Path, signers: Path | None) -> str | None:
    """What is known of the bundle's signature, for the log: who signed it, or that a signature was not checked
    (an unsigned bundle installed without --trusted-signers says nothing: that is what was asked for)."""
    if admitted.signer is not None:
        return f"signature ok: the metadata is signed by {admitted.signer}, a key of {signers}"
    if admitted.signed:
        return (f"warning: {shown} carries a signature ({SIGNATURE}) that was NOT checked: unpack checks it only "
                "with --trusted-signers FILE (an OpenSSH allowed_signers file naming your build hosts' keys)")
    return None


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
            raise InputError(f"--extract-dir {keep}: exists and is not a directory",
                             hint="choose a new or empty directory")
        if keep.is_dir() and any(keep.iterdir()):
            raise InputError(f"{keep}: --extract-dir must be empty or not exist",
                             hint="choose a new or empty directory")
    for other, what in ((keep, "--extract-dir"), (bundle.absolute() if bundle.is_dir() else None, "the bundle")):
        if other is not None and (other == prefix or other in prefix.parents or prefix in other.parents):
            raise InputError(f"--prefix and {what} must be different directories, neither inside the other: "
                             f"{prefix}, {other}", hint="give each its own directory")
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


@contextlib.contextmanager
def _opened(bundle: Path, keep: Path | None, scratch: Path, signers: Path | None,
            say: Log) -> Iterator[tuple[Path, Admitted]]:
    """The extracted bundle and its admitted metadata (:mod:`rocmlock.bundle.admit`): the bundle itself when
    it is a directory, else extracted into ``scratch`` (beside the prefix: a bundle of many GB may not fit in
    /tmp) or, for ``--extract-dir``, into a scratch directory beside that one, from where :func:`_keep` moves
    it once the install succeeded."""
    if bundle.is_dir():
        yield bundle.absolute(), admit_directory(bundle.absolute(), signers, scratch)
        return
    if keep is None:
        yield scratch / "bundle", extract(bundle, scratch / "bundle", signers, scratch)
        return
    with scratch_dir(keep.parent, SCRATCH, say) as beside:
        yield beside / "bundle", extract(bundle, beside / "bundle", signers, scratch)


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


def _check_integrity(where: Path, meta: BundleMetadata, shown: Path) -> None:
    """The channel's repodata lists exactly the metadata's packages and sends rattler nowhere else; no
    package writes outside the prefix. (Every member's sha256 is checked already: :func:`check_digests`.)"""
    problem = index_mismatch(where / CHANNEL_DIR, meta.packages)
    if problem:
        raise InputError(f"{shown}: {problem}", hint=DAMAGED)
    check_packages({p.member: where / p.member for p in meta.packages}, shown,
                   hint="the bundle holds a package that would write outside its environment: do not install "
                        "it; find out where it came from")


def _check_node(meta: BundleMetadata, root: Path, env: Mapping[str, str], force: bool) -> str:
    """A line for the log; raises when the node cannot run the bundle (unless ``force``)."""
    if meta.gpu_target is None:
        return f"node check: '{meta.environment}' has no GPU target; nothing to check"
    node = read_node(root, env)
    problem = node_problem(node, meta.gpu_target, meta.rocm_version)
    if problem is None:
        rocm = f", ROCm {meta.rocm_version}" if meta.rocm_version else ""
        mixed = gpu_choice(node.gpus, meta.gpu_target)
        return (f"node check: a {meta.gpu_target} GPU{rocm} found, as the bundle needs"
                + (f"; {mixed}" if mixed else "") + f"; {node.amdgpu.describe()}")
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
    # Each record's URL must be the very file checked (no base_url, no percent-decoding to another name).
    wanted = {(where / p.member).resolve() for p in meta.packages}
    for record in records:
        url = urlsplit(record.url)
        if url.scheme != "file" or Path(unquote(url.path)).resolve() not in wanted:
            raise InputError(f"{where}: the repodata sends rattler to {escape(record.url)}, not a checked file",
                             hint=DAMAGED)
    return sorted(records, key=lambda r: r.name.normalized)


def _check_prefix(prefix: Path, say: Log) -> bool:
    """Whether ``prefix`` is to be made anew (it does not exist, is empty, or holds an unpack that was killed);
    False for a conda environment to update. Anything else is refused."""
    if not prefix.exists():
        return True
    if not prefix.is_dir():
        raise InputError(f"{prefix}: --prefix exists and is not a directory",
                         hint="choose a new directory, or an environment this installed before")
    state = interrupted(prefix, "unpack", say)
    if state is not None:
        say(f"{prefix}: an earlier install into it was interrupted; installing it again")
        return state == "created"
    if not any(prefix.iterdir()):
        return True
    if not (prefix / "conda-meta").is_dir():
        raise InputError(f"{prefix}: --prefix is a non-empty directory and not a conda environment",
                         hint="choose a new directory (it is created)")
    return False


def _install(records: list[RepoDataRecord], prefix: Path, meta: BundleMetadata, fresh: bool, cache: Path,
             then: Callable[[], object] | None = None, say: Log | None = None) -> None:
    """Install with rattler from the bundle's channel, then (``then``) its PyPI wheels; a prefix made anew is
    removed when either fails.

    A marker in the prefix says, until the install finished, that it is not a finished environment: a
    killed unpack leaves it, and the next one sees it (:func:`_check_prefix`). ``cache`` is rattler's package
    cache for this install, on the prefix's filesystem (rattler hard-links from it).
    """
    from rattler import install

    existed = prefix.exists()
    prefix.mkdir(parents=True, exist_ok=True)
    with installing(prefix, fresh, "unpack", say):  # held until the end: a second unpack into it waits
        if fresh:
            _clear(prefix, keep=MARKER)
        try:
            asyncio.run(install(records, prefix, cache_dir=cache, show_progress=False))
            if then is not None:
                then()
        except BaseException as exc:  # rattler's link/extract errors, a pyo3 PanicException (a BaseException)
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise  # the marker stays: the next unpack sees an interrupted one
            if fresh:
                remove_tree(prefix, keep_dir=True, settle=True)  # (the marker too)
                if not existed:
                    with contextlib.suppress(OSError):  # still not empty: the message says where it is
                        prefix.rmdir()
            if isinstance(exc, RocmlockError):
                raise
            raise OperationError(f"installing '{meta.environment}' into {prefix} failed: "
                                 f"{one_line(redact_text(str(exc)))}",
                                 hint=f"check that {prefix.parent} is writable and its disk has room") from None
        # The records name the lock's URLs, not the extraction's (a temporary directory): the same bundle unpacked
        # into the same prefix gives the same bytes, and `conda list --explicit` the lock's URLs.
        urls = {p.filename: p.url for p in meta.packages if p.url is not None}
        settle_records(prefix, urls, {name: url.rsplit("/", 2)[0] + "/" for name, url in urls.items()})


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
    except InputError as exc:  # a URL of the extraction no line of it can hold: the environment is installed
        say(f"warning: no @EXPLICIT file: {exc}")
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
        return ProbeOutcome(command, res.returncode, False, (), f"the probe wrote no JSON report (exit "
                            f"{res.returncode}): {escape(res.last_error_line()[:500])}")
    # The probe is the bundle's program, its output the bundle's words: escaped for the terminal line.
    summary = "probe passed" if ok else f"probe failed: {escape(', '.join(failed)[:500]) or f'exit {res.returncode}'}"
    return ProbeOutcome(command, res.returncode, ok, failed, summary)
