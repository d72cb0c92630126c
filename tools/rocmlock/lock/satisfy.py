"""Is a locked environment still what the manifest asks for? pixi's satisfiability rules, in Python.

A lock that passes is kept as is (no solve), as `pixi lock` does. The rules follow
pixi_core/src/lock_file/satisfiability/{environment.rs,platform.rs}:
- the environment's channels, after resolving names/paths to base URLs, equal the locked ones (appended
  channels keep the locked records as preferences; any other change re-solves from scratch);
- the lock lists no platform the environment does not have;
- every platform both hold has the same subdir and non-default virtual packages (else from scratch);
- the solve options the lock records (strategy, channel-priority, exclude-newer) are the manifest's;
- every manifest spec matches the locked record of that name (or a virtual package of the platform);
  a conditional spec (``when``) only where its condition holds for the locked records;
- every ``depends`` of every reached record matches a locked record or a virtual package;
- every locked record named in ``[constraints]`` matches the constraint;
- every locked record is reached (nothing extra);
- a dependency whose ``[when="..."]`` condition no locked record or virtual package meets is skipped;
- the virtual packages are the ones rattler models (pixi_compat.pixi_virtual_packages, ``__amdgpu`` and
  ``__amdgpu_arch`` of a platform that declares them included), ``__archspec`` is version 1;
- and rocmlock's own: no locked record is built for another GPU than the platform's ``__amdgpu_arch``
  (:mod:`rocmlock.lock.gpuarch`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from rattler import BuildString, MatchSpec, PackageRecord, RepoDataRecord
from rattler.exceptions import InvalidMatchSpecError

from rocmlock.lock.gpuarch import contradictions
from rocmlock.lock.lockfile import LockedWorkspace, view
from rocmlock.util.credentials import redact_url
from rocmlock.util.text import escape
from rocmlock.workspace.dependencies import condition_holds
from rocmlock.workspace.model import Environment, Workspace
from rocmlock.workspace.pixi_compat import (
    VirtualPackage,
    channel_base_url,
    customised_virtual_packages,
    pixi_virtual_packages,
)
from rocmlock.workspace.platforms import Platform

# The same dependency strings recur across records and environments; parse each once.
_spec = lru_cache(maxsize=65536)(MatchSpec)


@lru_cache(maxsize=65536)
def _spec_name(text: str) -> str:
    return str(_spec(text).name.normalized)


def _virtual_records(vps: Sequence[VirtualPackage], subdir: str) -> dict[str, PackageRecord]:
    return {name: PackageRecord(name, version, BuildString(build or "0"), 0, subdir)
            for name, version, build in vps}


@dataclass(frozen=True)
class Unsat:
    """Why a locked environment is out of date, and whether its locked records may still guide the new solve.

    ``from_scratch``: pixi "cannot trust any of the locked contents" (pixi_core/src/lock_file/outdated.rs,
    find_unsatisfiable_targets: ``disregard_locked_content.conda``) and solves without them; otherwise
    the old records are kept as preferences, so nothing moves that need not.
    """

    reason: str
    from_scratch: bool = False


# The solve options pixi.lock records per environment and their values when absent (rattler_lock's
# SolveOptions; pixi writes `options:` only for what differs, tests/data/non-satisfiability/mismatch-*).
LOCK_OPTION_DEFAULTS = {"strategy": "highest", "channel-priority": "strict", "exclude-newer": None}


def environment_unsat(ws: Workspace, env: Environment, locked: LockedWorkspace) -> Unsat | None:
    """Why the lock's copy of ``env`` no longer fits the manifest as a whole, or None.

    pixi_core/src/lock_file/satisfiability/environment.rs (verify_environment_satisfiability), in its order:
    channels (order matters; only appended channels keep the locked records), platforms the lock has and
    the environment does not, each shared platform's subdir and virtual packages, the solve options.
    """
    lenv = locked.environments.get(env.name)
    if lenv is None:
        return Unsat("not in the lock")
    return (_channels_unsat(ws, env, lenv.channels) or _extra_platforms(env, locked)
            or _platform_definitions(env, locked) or _options_unsat(env, lenv.options))


def _channels_unsat(ws: Workspace, env: Environment, locked: Sequence[str]) -> Unsat | None:
    want = [redact_url(ws.channel_url(c)) for c in env.channels]
    have = [channel_base_url(c, ws.root) for c in locked]
    if want == have:
        return None
    if want[:len(have)] == have:  # EnvironmentUnsat::ChannelsExtended: lower-priority channels appended
        return Unsat(f"channels added ({', '.join(want[len(have):])})")
    # EnvironmentUnsat::ChannelsMismatch: removed, reordered, prepended or another URL.
    return Unsat(f"channels changed ({', '.join(have)} -> {', '.join(want)})", from_scratch=True)


def _extra_platforms(env: Environment, locked: LockedWorkspace) -> Unsat | None:
    names = {p.name for p in env.platforms}
    subdirs = {p.subdir for p in env.platforms}
    lenv = locked.environments[env.name]
    extra = sorted(p for p in lenv.records
                   if p not in names and locked.platforms.get(p) and locked.platforms[p].subdir not in subdirs)
    return Unsat(f"the lock has platform(s) the environment does not: {', '.join(extra)}") if extra else None


def _platform_definitions(env: Environment, locked: LockedWorkspace) -> Unsat | None:
    """EnvironmentUnsat::PlatformDefinitionChanged: a platform both hold changed its subdir or virtual packages."""
    for platform in env.platforms:
        lplat = locked.platforms.get(platform.name)
        if lplat is None:
            continue
        if lplat.subdir != platform.subdir:
            return Unsat(f"platform '{platform.name}' changed subdir ({lplat.subdir} -> {platform.subdir})", True)
        if customised_virtual_packages(lplat.subdir, lplat.virtual_packages) != \
                platform.customised_virtual_packages():
            return Unsat(f"platform '{platform.name}' changed its virtual packages", True)
    return None


def _options_unsat(env: Environment, options: Mapping[str, str]) -> Unsat | None:
    """SolveStrategyMismatch, ChannelPriorityMismatch, ExcludeNewerMismatch: the lock was solved otherwise.

    rocmlock solves with the defaults only (it refuses a manifest that asks for others, pixi_keys), so any
    other value the lock records is a mismatch."""
    expected = {**LOCK_OPTION_DEFAULTS, "channel-priority": env.channel_priority}
    for key, want in expected.items():
        have = options.get(key, LOCK_OPTION_DEFAULTS[key])
        if have != want:
            return Unsat(f"the lock was solved with {key} {have}, the manifest asks for {want or 'none'}", True)
    return None


def platform_unsat(env: Environment, platform: Platform, locked: LockedWorkspace) -> str | None:
    """Why the lock's records of ``env`` on ``platform`` no longer satisfy the manifest, or None."""
    lplat = locked.platforms.get(platform.name)
    records = locked.records(env.name, platform.name)
    if lplat is None or records is None:
        return f"platform '{platform.name}' is not locked"
    found = contradictions(env.name, platform.name, lplat.virtual_packages, records)
    if found:  # rocmlock's rule, not pixi's: a record built for another GPU than the platform's __amdgpu_arch
        return found[0].line()
    return records_unsat(env, platform, records)


def records_unsat(env: Environment, platform: Platform, records: Sequence[RepoDataRecord],
                  matched: dict[tuple[str, int], bool] | None = None) -> str | None:
    """Why ``records`` would not satisfy ``env`` on ``platform`` by pixi's package rules, or None.

    Also run on every fresh solve: rocmlock's solve offers ``__amdgpu``/``__amdgpu_arch`` for an environment's GPU
    target on a platform that does not declare them, which pixi's check does not see. ``matched`` remembers each
    (spec, record) answer for the caller's next call, while the records live (the GPU environments share most).
    """
    specs = [d.matchspec() for d in env.dependencies_for(platform)]
    for constraint in env.constraints_for(platform):  # pixi: PlatformUnsat::ConstraintViolated
        spec = _spec(constraint.matchspec())
        record = next((r for r in records if view(r).name == spec.name.normalized), None)
        if record is not None and not spec.matches(record):
            return f"locked {record.name.normalized} {record.version} {record.build} violates constraint " \
                   f"'{constraint.matchspec()}'"
    return _records_unsat(specs, records, pixi_virtual_packages(platform.declared_virtual_packages()),
                          platform.subdir, {} if matched is None else matched)


def _records_unsat(specs: Sequence[str], records: Sequence[RepoDataRecord],
                   vps: Sequence[VirtualPackage], subdir: str, matched: dict[tuple[str, int], bool]) -> str | None:
    by_name = {view(r).name: r for r in records}
    virtual = _virtual_records(vps, subdir)

    def present(text: str) -> bool:
        try:
            name = _spec_name(text)
        except InvalidMatchSpecError:
            return False
        record = by_name.get(name) or virtual.get(name)
        return record is not None and _spec(text).matches(record)

    visited: set[str] = set()
    stack = [(s, "the manifest") for s in specs if not (c := _spec(s).condition) or condition_holds(c, present)]
    while stack:
        text, source = stack.pop()
        try:
            spec, name = _spec(text), _spec_name(text)
        except InvalidMatchSpecError:  # a lock edited by hand (pixi: PlatformUnsat::FailedToParseMatchSpec)
            return f"'{escape(text)}' (from {source}) is not a dependency rattler can read"
        if spec.condition and not condition_holds(spec.condition, present):
            continue
        record = by_name.get(name)
        if record is None:
            vrec = virtual.get(name)
            if vrec is not None and spec.matches(vrec):
                continue
            return f"'{escape(text)}' (from {source}) has no matching locked package"
        ok = matched.get((text, id(record)))
        if ok is None:
            ok = matched[(text, id(record))] = spec.matches(record)
        if not ok:
            return f"locked {name} {record.version} {record.build} does not match '{escape(text)}' (from {source})"
        if name in visited:
            continue
        visited.add(name)
        stack.extend((dep, name) for dep in view(record).depends)
    extra = sorted(set(by_name) - visited)
    return f"locked package(s) no longer needed: {', '.join(extra)}" if extra else None
