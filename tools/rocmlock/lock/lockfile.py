"""pixi.lock (v7) through ``rattler.LockFile``: build one from solved records, render it, read one back.

Platforms are written the way pixi writes them (pixi_core/src/lock_file/update.rs): one top-level
entry per manifest platform used by some environment, named like the manifest platform, with the
subdir and every declared virtual package (subdir defaults included) as ``__name=version[=build]``.

No secret is read from a lock nor written into one. pixi 0.77 writes a channel's URL as the manifest
spells it, credentials included (update.rs ``set_channels`` of ``into_base_url(..).to_string()``; rattler's
``ChannelUrl`` displays the URL as is, rattler_conda_types/src/channel/channel_url.rs), and the package URLs
the gateway built from it carry them too. So a lock is read with ``user:password@`` and ``/t/<token>/`` taken
out of every channel and package URL (the clean URL names the same file; the credentials come from the
manifest's channel URLs or RATTLER_AUTH_FILE); a fresh solve's records are redacted as they come
(rocmlock.lock.pipeline), so :func:`build_lockfile` is given, and writes, none. A query string or
fragment in a conda channel or package URL is refused on reading, the URL not shown: rattler builds a
package URL by joining ``<platform>/<file>`` onto the channel URL, which drops both
(:func:`rocmlock.util.credentials.refuse_query`), so no tool that locks with rattler writes one, and there is no
telling a secret in it from the rest.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import yaml
from rattler import LockChannel, LockFile, LockPlatform, RepoDataRecord, Subdir
from rattler.exceptions import ParseCondaLockError

from rocmlock.errors import InputError
from rocmlock.util.credentials import has_query, mask_queries, redact_url, refuse_query
from rocmlock.workspace.model import Environment
from rocmlock.workspace.pixi_compat import customised_virtual_packages, format_virtual_package
from rocmlock.workspace.platforms import Platform
from rocmlock.workspace.pypi import PypiPin, SourcePackage, split_packages

# libyaml's loader where PyYAML has it (the block read is small either way).
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class LockedPlatform:
    """A top-level lock platform: name, subdir and the virtual packages it records."""

    name: str
    subdir: str
    virtual_packages: tuple[str, ...]


@dataclass(frozen=True)
class LockedEnvironment:
    """One environment of a lock: its channels (as written) and records per platform name."""

    channels: tuple[str, ...]
    records: dict[str, list[RepoDataRecord]] = field(hash=False)
    # What pixi locks besides conda binaries, per platform name (see rocmlock.workspace.pypi).
    pypi: dict[str, list[PypiPin]] = field(default_factory=dict, hash=False)
    sources: dict[str, list[SourcePackage]] = field(default_factory=dict, hash=False)
    # The solve options pixi recorded (`options:`: strategy, channel-priority, exclude-newer, ...), as text.
    options: dict[str, str] = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class LockedWorkspace:
    """What a pixi.lock holds, in plain data."""

    platforms: dict[str, LockedPlatform] = field(hash=False)
    environments: dict[str, LockedEnvironment] = field(hash=False)

    def records(self, env: str, platform: str) -> list[RepoDataRecord] | None:
        """The records of ``env`` on ``platform``, or None when the lock lacks either."""
        locked = self.environments.get(env)
        return None if locked is None else locked.records.get(platform)


def lock_platform(platform: Platform) -> LockedPlatform:
    """The lock entry pixi expects for a manifest platform."""
    vps = tuple(format_virtual_package(vp) for vp in platform.declared_virtual_packages())
    return LockedPlatform(platform.name, platform.subdir, vps)


def redact_record(record: RepoDataRecord) -> RepoDataRecord:
    """``record`` with credentials removed from its URL and channel (for anything written)."""
    url, channel = redact_url(record.url), redact_url(record.channel or "")
    if url == record.url and channel == (record.channel or ""):
        return record
    return RepoDataRecord(record, record.file_name, url, channel)


def build_lockfile(locked: LockedWorkspace) -> LockFile:
    """A ``rattler.LockFile`` with ``locked``'s platforms, channels and records (sorted, so output is stable).

    The records are written as given: they hold no credentials (:func:`read_lockfile` takes them out, and
    rocmlock.lock.pipeline redacts a solve's), so none is redacted again, 12,000 times per lock."""
    platforms = {
        name: LockPlatform(name, subdir=Subdir(p.subdir), virtual_packages=list(p.virtual_packages))
        for name, p in sorted(locked.platforms.items())
    }
    lock = LockFile(list(platforms.values()))
    for env_name, env in sorted(locked.environments.items()):
        lock.set_channels(env_name, [LockChannel(redact_url(c)) for c in env.channels])
        for plat_name, records in sorted(env.records.items()):
            for record in sorted(records, key=lambda r: r.name.normalized):
                lock.add_conda_package(env_name, platforms[plat_name], record)
    return lock


def render_lockfile(locked: LockedWorkspace) -> str:
    """The text of pixi.lock for ``locked`` (rattler writes it; nothing is hand-formatted)."""
    with tempfile.TemporaryDirectory(prefix="rocmlock-") as tmp:
        out = Path(tmp) / "pixi.lock"
        build_lockfile(locked).to_path(out)
        return out.read_text()


def read_lockfile(path: Path) -> LockedWorkspace | None:
    """Read ``path`` back; None when it does not exist. A lock rattler cannot parse is an input error."""
    if not path.exists():
        return None
    try:
        lock = LockFile.from_path(path)
    except (ParseCondaLockError, OSError, ValueError) as exc:
        # Never "delete it": a lock with PyPI or source packages can only be made again by pixi.
        hint = ("it was written by a newer pixi than this py-rattler reads: upgrade py-rattler, or lock with a pixi "
                "that writes format 7" if "newer lockfile format" in str(exc) else
                "restore it (`git checkout pixi.lock`) or write it again with `pixi lock` or `rocmlock lock`")
        # The parser quotes what it could not read ('invalid type: string "<value>"'): never a URL's query.
        raise InputError(f"{path}: cannot read the lock file: {mask_queries(str(exc))}", hint=hint) from None
    return _from_lockfile(lock, path, _environment_options(path))


def _clean_url(url: str, path: Path, where: str) -> str:
    """``url`` of the lock without its credentials; an InputError (the URL not shown) when it has a query."""
    if "://" in url:  # a local channel's path may hold a '?'; a path is never a secret
        refuse_query(url, f"{path}: {where}", what="no conda channel or package URL has",
                     hint="remove it from pixi.lock, or delete pixi.lock and lock again; if the lock was shared, "
                          "revoke the secret (a channel's secret goes in RATTLER_AUTH_FILE)")
    return redact_url(url)


def _clean_records(records: Sequence[RepoDataRecord], path: Path, where: str) -> list[RepoDataRecord]:
    for record in records:
        if has_query(record.url) or has_query(record.channel or ""):  # the messages only for a record refused
            name = record.name.normalized
            _clean_url(record.url, path, f"{where}, package '{name}'")
            _clean_url(record.channel or "", path, f"{where}, the channel of package '{name}'")
    return [redact_record(r) for r in records]


def _environment_options(path: Path) -> dict[str, dict[str, str]]:
    """Each environment's ``options:`` in ``path`` (py-rattler 0.28 reads them but does not expose them).

    Only the ``environments:`` block is parsed, less each environment's ``packages:`` list (its bulk); rattler
    has already read the whole file, so it is well-formed YAML."""
    kept: list[str] = []
    inside = skipping = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line[:1] not in ("", " ", "-", "#"):  # a top-level key
            inside, skipping = line.rstrip() == "environments:", False
        elif inside and line.strip() and len(line) - len(line.lstrip(" ")) <= 4:
            skipping = line.strip().startswith("packages:")
        if inside and not skipping:
            kept.append(line)
    try:
        data = yaml.load("\n".join(kept), Loader=_LOADER) if kept else None
    except yaml.YAMLError:
        return {}
    envs = data.get("environments") if isinstance(data, dict) else None
    return {str(name): {str(k): str(v) for k, v in env["options"].items()}
            for name, env in (envs.items() if isinstance(envs, dict) else ())
            if isinstance(env, dict) and isinstance(env.get("options"), dict)}


def _from_lockfile(lock: LockFile, path: Path, options: dict[str, dict[str, str]]) -> LockedWorkspace:
    platforms = {
        p.name: LockedPlatform(p.name, str(p.subdir), tuple(p.virtual_packages)) for p in lock.platforms()
    }
    envs: dict[str, LockedEnvironment] = {}
    # Sorted: py-rattler's order varies from run to run, and the first refused URL must be the same every time.
    for name, env in sorted(lock.environments(), key=lambda item: item[0]):
        channels = tuple(_clean_url(str(c), path, f"environment '{name}', channel {i + 1}")
                         for i, c in enumerate(_channels(env)))
        records: dict[str, list[RepoDataRecord]] = {}
        pypi: dict[str, list[PypiPin]] = {}
        sources: dict[str, list[SourcePackage]] = {}
        for plat in sorted(env.platforms(), key=lambda p: p.name):
            records[plat.name] = _clean_records(env.conda_repodata_records_for_platform(plat) or [], path,
                                                f"environment '{name}' [{plat.name}]")
            pins, srcs = split_packages(env.packages(plat) or [])
            if pins:
                pypi[plat.name] = pins
            if srcs:
                sources[plat.name] = srcs
        envs[name] = LockedEnvironment(channels, records, pypi, sources, options.get(name, {}))
    return LockedWorkspace(platforms, envs)


def _channels(env: object) -> Sequence[LockChannel]:
    return env.channels()  # type: ignore[attr-defined,no-any-return]


def _identity(subdir: str, vps: Sequence[str]) -> tuple[str, tuple[str, ...]]:
    return subdir, tuple(customised_virtual_packages(subdir, vps))


def align_platforms(locked: LockedWorkspace, manifest_platforms: Sequence[Platform]) -> LockedWorkspace:
    """Rename locked platforms to the manifest's names where subdir + customised virtual packages match.

    pixi writes rich platforms as ``p1``, ``p2``, ... and maps them back by this identity when it
    reads a lock (pixi_core/src/lock_file/platform_rename.rs); doing the same lets rocmlock read a
    lock that pixi wrote. A name already used by the manifest, or an ambiguous match, is left alone.
    """
    names = {p.name for p in manifest_platforms}
    by_identity: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for plat in manifest_platforms:
        key = _identity(plat.subdir, [format_virtual_package(v) for v in plat.declared_virtual_packages()])
        by_identity.setdefault(key, []).append(plat.name)
    renames: dict[str, str] = {}
    for name, lplat in locked.platforms.items():
        matches = by_identity.get(_identity(lplat.subdir, lplat.virtual_packages), [])
        if name not in names and len(matches) == 1 and matches[0] not in locked.platforms:
            renames[name] = matches[0]
    if not renames:
        return locked
    platforms = {renames.get(n, n): LockedPlatform(renames.get(n, n), p.subdir, p.virtual_packages)
                 for n, p in locked.platforms.items()}
    envs = {name: LockedEnvironment(env.channels, {renames.get(p, p): r for p, r in env.records.items()},
                                    {renames.get(p, p): r for p, r in env.pypi.items()},
                                    {renames.get(p, p): r for p, r in env.sources.items()}, env.options)
            for name, env in locked.environments.items()}
    return LockedWorkspace(platforms, envs)


def empty_platforms(locked: LockedWorkspace, environments: Sequence[Environment]) -> LockedWorkspace:
    """A locked environment's platforms that pixi.lock cannot list (no packages there) as empty record lists.

    pixi.lock has no entry for an environment x platform without packages (``packages: {}``), and pixi reads the
    absence as an empty list (pixi 0.77 satisfiability/platform.rs, verify_platform_satisfiability): such a
    platform, where the manifest asks for no package, is locked (not solved again), exported (an empty
    environment conda can create) and installed (an empty prefix), whichever command reads the lock.
    """
    platforms, envs = dict(locked.platforms), dict(locked.environments)
    for env in environments:
        lenv = locked.environments.get(env.name)
        if lenv is None:
            continue
        empty = [p for p in env.platforms if p.name not in lenv.records and not env.dependencies_for(p)]
        for plat in empty:
            platforms.setdefault(plat.name, lock_platform(plat))
        if empty:
            envs[env.name] = replace(lenv, records={**lenv.records, **{p.name: [] for p in empty}})
    return LockedWorkspace(platforms, envs)
