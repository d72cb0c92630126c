"""``rocmlock install``: create a conda prefix from pixi.lock with rattler (no solve, exactly the locked files).

This is what ``pixi install -e ENV --locked`` does, for machines and CI jobs without pixi: the records of
one environment and platform are read from the lock and handed to ``rattler.install``. Private channels are
reached with the credentials of the manifest's channel URLs, held in memory
(:func:`rocmlock.util.credentials.rattler_client`), or rattler's auth file (``RATTLER_AUTH_FILE``).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rattler import RepoDataRecord

from rocmlock.errors import InputError, OperationError
from rocmlock.lock.gpuarch import contradictions, describe_isa, platform_isa, refusal
from rocmlock.lock.lockfile import (
    LockedPlatform,
    LockedWorkspace,
    align_platforms,
    empty_platforms,
    read_lockfile,
)
from rocmlock.lock.outputs import settle
from rocmlock.prefix.fetch import verify_local
from rocmlock.prefix.marker import MARKER, installing, interrupted
from rocmlock.util.credentials import (
    client_for_urls,
    credentials_hint,
    one_line,
    redact_text,
    redact_url,
    refused_channel,
    split_url,
)
from rocmlock.util.fs import open_regular, stream_sha256
from rocmlock.util.scratch import remove_tree
from rocmlock.util.tables import did_you_mean
from rocmlock.workspace.pypi import PypiPin, SourcePackage


@dataclass(frozen=True)
class InstallResult:
    prefix: Path
    environment: str
    platform: str
    packages: tuple[str, ...]
    # PyPI and source packages of the lock that rattler does not install (see :attr:`Selected.left_out`).
    left_out: tuple[str, ...] = ()
    # This machine's GPU (rattler's __amdgpu_arch) is not the platform's: a line saying so (see :func:`gpu_mismatch`).
    gpu_warning: str | None = None

    def to_dict(self) -> dict[str, object]:
        return {"prefix": str(self.prefix), "environment": self.environment, "platform": self.platform,
                "packages": list(self.packages), "left_out": list(self.left_out), "gpu_warning": self.gpu_warning}


def read_named(lock_path: Path) -> LockedWorkspace | None:
    """The lock with its platforms named as the manifest beside it names them: pixi 0.77 writes rich platforms
    as ``p1``, ``p2``, ... (pixi_core/src/lock_file/platform_rename.rs) and reads them back by identity."""
    from rocmlock.workspace.manifest import load_workspace
    from rocmlock.workspace.pyproject import find_manifest

    locked = read_lockfile(lock_path)
    manifest = find_manifest(lock_path.parent)
    if locked is None or not manifest.is_file():  # a lock alone (a node without the checkout): its own names
        return locked
    ws = load_workspace(manifest)
    # Platforms without packages are absent from pixi.lock; pixi installs them as an empty prefix.
    return empty_platforms(align_platforms(locked, ws.platforms), ws.environments())


def _not_conda(pins: Sequence[PypiPin], sources: Sequence[SourcePackage]) -> tuple[str, ...]:
    return tuple([f"{p.name}=={p.version} (pypi)" for p in pins] + [s.describe() for s in sources])


def left_out_warning(names: Sequence[str], environment: str, platform: str, where: str) -> str:
    """One line that says what was left out and how to install the PyPI part."""
    return (f"{len(names)} package(s) of pixi.lock are not conda packages and are not {where}: {', '.join(names)}; "
            f"`rocmlock export` writes envs/{environment}/requirements-{platform}.txt for "
            "`python -m pip install --require-hashes -r`")


@dataclass(frozen=True)
class Selected:
    """One environment on one platform of a lock: its conda records, PyPI pins and source packages."""

    platform: LockedPlatform
    records: list[RepoDataRecord]
    pins: tuple[PypiPin, ...] = ()
    sources: tuple[SourcePackage, ...] = ()

    @property
    def left_out(self) -> tuple[str, ...]:
        """Its packages that are not conda binaries (PyPI and source packages of a pixi-written lock): rattler
        installs conda packages only, so install, pack and image leave them out."""
        return _not_conda(self.pins, self.sources)


def select_records(lock_path: Path, environment: str, platform: str | None = None
                   ) -> tuple[LockedPlatform, list[RepoDataRecord]]:
    """The lock platform (``environment``'s only one when ``platform`` is None) and its records."""
    selected = select_environment(lock_path, environment, platform)
    return selected.platform, selected.records


def select_environment(lock_path: Path, environment: str, platform: str | None = None,
                       on_wait: Callable[[str], None] | None = None) -> Selected:
    """What ``environment`` on ``platform`` (its only one when None) of the lock holds: one read of pixi.lock,
    which a writer replaces by a rename (so it is the old lock or the new one, whatever runs beside)."""
    settle(lock_path.parent, on_wait)  # a write of the lock outputs that was interrupted is finished first
    locked = read_named(lock_path)
    if locked is None:
        raise InputError(f"{lock_path}: no lock file", hint="run `rocmlock lock` first")
    env = locked.environments.get(environment)
    if env is None:
        raise _not_locked(lock_path, environment, sorted(locked.environments))
    platforms = sorted(env.records)
    if platform is None:
        if len(platforms) != 1:
            raise InputError(f"{lock_path}: environment '{environment}' is locked for {', '.join(platforms)}",
                             hint="pick one with -p/--platform")
        platform = platforms[0]
    records = env.records.get(platform)
    if records is None:
        raise InputError(f"{lock_path}: environment '{environment}' has no platform '{platform}'",
                         hint=f"locked platforms: {', '.join(platforms)}")
    subdir = records[0].subdir if records else "noarch"
    locked_platform = locked.platforms.get(platform) or LockedPlatform(platform, subdir, ())
    # Issue 40: a lock whose records are another GPU's builds than the platform's __amdgpu_arch is not installed.
    if error := refusal(contradictions(environment, platform, locked_platform.virtual_packages, records),
                        lock_path, solved=False):
        raise error
    return Selected(locked_platform, records,
                    tuple(env.pypi.get(platform, ())), tuple(env.sources.get(platform, ())))


def read_selected(lock_path: Path, environment: str, platform: str | None, what: str) -> tuple[Selected, str]:
    """:func:`select_environment` and the sha256 of the very bytes it read (``what``: the command, for errors).

    Under the workspace's reader lock (:func:`rocmlock.lock.outputs.exclusive`, shared), so no ``rocmlock lock``
    replaces pixi.lock meanwhile; a lock replaced anyway (``pixi lock`` takes no such lock) is seen by its
    identity (inode, size, mtime) before and after, and is an error rather than a bundle or an image whose
    lock sha256 names another lock than its packages."""
    from rocmlock.lock.outputs import exclusive

    with exclusive(lock_path.parent, write=False):
        try:
            with open_regular(lock_path, "a lock is a file") as fh:
                before = _identity(os.fstat(fh.fileno()))
                digest = stream_sha256(fh)
        except FileNotFoundError:
            raise InputError(f"{lock_path}: no lock file", hint="run `rocmlock lock` first") from None
        selected = select_environment(lock_path, environment, platform)
        if _identity(os.stat(lock_path)) != before:
            raise OperationError(f"{lock_path}: changed while {what} read it", hint=f"run {what} again when the "
                                 "lock is written (`pixi lock` or `rocmlock lock` was running)")
    return selected, digest


def _identity(st: os.stat_result) -> tuple[int, ...]:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def _not_locked(lock_path: Path, environment: str, locked: list[str]) -> InputError:
    """``environment`` is not in the lock: declared in the manifest beside it but not locked yet (a newcomer who
    added it to pixi.toml), or a name nothing declares (a typo: the nearest locked name)."""
    from rocmlock.workspace.manifest import load_workspace

    try:
        declared = load_workspace(lock_path.parent).environment_names()
    except InputError:  # no readable manifest beside the lock: only the lock can be asked
        declared = []
    if environment in declared:
        return InputError(f"{lock_path}: environment '{environment}' is declared in the manifest but not locked",
                          hint=f"run `rocmlock lock` (or `rocmlock lock -e {environment}`), then run this again")
    return InputError(f"{lock_path}: no environment '{environment}'{did_you_mean(environment, locked)}",
                      hint=f"locked environments: {', '.join(locked) or 'none'}")


def check_prefix(prefix: Path) -> None:
    """``prefix`` must be a new or empty directory or a conda environment (``rocmlock unpack``'s rule): never a
    checkout or a home directory, which would get ``conda-meta/``, ``bin/`` and a ``CACHEDIR.TAG`` that makes
    backup tools skip it (``--prefix ''`` is the current directory)."""
    if prefix.exists() and not prefix.is_dir():
        raise InputError(f"{prefix}: --prefix exists and is not a directory", hint="choose a new directory (it is created)")
    if prefix.is_dir() and not (prefix / "conda-meta").is_dir() and any(prefix.iterdir()):
        raise InputError(f"{prefix}: --prefix is a non-empty directory and not a conda environment",
                         hint="choose a new directory (it is created), or an existing environment to update")


def install_from_lock(lock_path: Path, environment: str, prefix: Path, platform: str | None = None,
                      cache_dir: Path | None = None, channels: Sequence[str] = (),
                      on_wait: Callable[[str], None] | None = None,
                      say: Callable[[str], None] | None = None) -> InstallResult:
    """Install ``environment``'s locked records for ``platform`` (its only one when omitted) into ``prefix``.

    ``channels`` are the manifest's channel URLs as written, credentials included: the lock records clean
    URLs only, and the credentials go to rattler in memory. What it installs and what it reports as left out
    come from one read of pixi.lock, so a ``rocmlock lock`` running meanwhile cannot mix two locks in the result.
    Until it finished, the prefix carries a marker (:mod:`rocmlock.prefix.marker`): an install that was killed is
    seen by the next one (``say`` tells it), which makes a prefix the killed one created anew.
    """
    from rattler import install

    selected = select_environment(lock_path, environment, platform, on_wait)
    locked_platform, records = selected.platform, selected.records
    state = interrupted(prefix, "install", say) if prefix.is_dir() else None
    if state is not None:
        if say is not None:
            say(f"{prefix}: an earlier install into it was interrupted; installing it again")
        if state == "created":
            remove_tree(prefix, keep_dir=True, keep=MARKER)
    else:
        check_prefix(prefix)
    gpu_warning = gpu_mismatch(locked_platform)
    _, client = client_for_urls(channels)
    try:
        verify_local(records, lock_path.parent)  # rattler checks what it downloads, not what it reads from a directory
    except OperationError as exc:
        raise OperationError(f"{exc}; nothing was installed", hint=exc.hint) from None
    created = not prefix.exists() or state == "created"
    prefix.mkdir(parents=True, exist_ok=True)
    with installing(prefix, created, "install", say):  # a second install into it meanwhile waits for this one
        try:
            asyncio.run(install(records, prefix, cache_dir=cache_dir, show_progress=False, client=client))
        except Exception as exc:  # noqa: BLE001 - rattler's download/link errors; the message names the file
            secrets = [s for c in channels for s in split_url(c).secrets]
            if created:  # a half-made environment is worse than none: it imports, then fails at run time
                remove_tree(prefix, settle=True)  # rattler's extraction tasks outlive the failed call
            left = "nothing was left there" if created else "it existed before and may be partly changed"
            text = redact_text(str(exc), secrets)
            raise _install_error(f"installing '{environment}' into {prefix} failed ({left})", text,
                                 [*channels, *(r.channel or "" for r in records)], records) from None
    names = tuple(sorted(f"{r.name.normalized}-{r.version}-{r.build}" for r in records))
    return InstallResult(prefix, environment, locked_platform.name, names, selected.left_out,
                         gpu_warning)


def gpu_mismatch(platform: LockedPlatform) -> str | None:
    """A line when this machine's ``__amdgpu_arch``, as rattler detects it (its overrides applied), is not the one
    ``platform`` declares; None on a machine without one (a CI runner filling a container) or of that GPU. pixi
    warns likewise and installs: a prefix may be made for other nodes (a shared file system)."""
    from rocmlock.host.node import rattler_amdgpu  # imported here: pack and image never ask

    want = platform_isa(platform.virtual_packages)
    if want is None:
        return None
    have = rattler_amdgpu()
    if have.isa is None or have.isa == want:
        return None
    return (f"this machine is {have.describe()}, but platform '{platform.name}' is for {describe_isa(want)}: "
            f"its packages will not run on this GPU (install them on a node of that GPU; "
            f"CONDA_OVERRIDE_AMDGPU_ARCH={want} says this one is)")


def _install_error(what: str, text: str, channels: Sequence[str], records: Sequence[RepoDataRecord]) -> OperationError:
    """One line (rattler's "Caused by:" chain folded by :func:`one_line`, as lock and pack do): when a channel
    refused a download, its 401/403 and how to give credentials; else the failure and the file it was fetching."""
    channel = refused_channel(channels, text)
    if channel is not None:
        why = text.strip().splitlines()[-1].removeprefix("Caused by: ")
        return OperationError(f"{what}: channel {channel} refused a download: {why}", hint=credentials_hint(channel))
    why = one_line(text)
    # rattler names the file ("failed to fetch x.conda") and the URL only deep in its chain: say where it was.
    url = next((redact_url(r.url) for r in records if r.file_name and r.file_name in text), None)
    where = f" (from {url})" if url and url not in why else ""
    return OperationError(f"{what}: {why}{where}",
                          hint="check the channel is reachable and RATTLER_AUTH_FILE holds its credentials")


def manifest_channels(manifest: Path) -> list[str]:
    """Every channel URL of ``manifest`` (credentials included), or none when there is no manifest."""
    from rocmlock.workspace.manifest import load_workspace

    if not manifest.is_file():
        return []
    ws = load_workspace(manifest)
    written = [c for c, _ in ws.channels] + [c for f in ws.features.values() for c, _ in f.channels or ()]
    return [ws.channel_url(c) for c in dict.fromkeys(written)]
