"""Is a locked environment still what the manifest asks for? pixi's satisfiability rules, in Python.

A lock that passes is kept as is (no solve), as `pixi lock` does. The rules follow
pixi_core/src/lock_file/satisfiability/{environment.rs,platform.rs}:
- the environment's channels, after resolving names/paths to base URLs, equal the locked ones;
- the locked platform has the manifest platform's subdir and the same non-default virtual packages;
- the lock lists no platform the environment does not have;
- every manifest spec matches the locked record of that name (or a virtual package of the platform);
  a conditional spec (``when``) only where its condition holds for the locked records;
- every ``depends`` of every reached record matches a locked record or a virtual package;
- every locked record named in ``[constraints]`` matches the constraint;
- every locked record is reached (nothing extra);
- a dependency whose ``[when="..."]`` condition no locked record or virtual package meets is skipped;
- the virtual packages are the ones pixi models (pixi_compat.pixi_virtual_packages): ``__amdgpu`` and
  ``__amdgpu_arch`` satisfy nothing, ``__archspec`` is version 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from rattler import BuildString, MatchSpec, PackageRecord, RepoDataRecord

from rocmlock.lock.lockfile import LockedWorkspace
from rocmlock.util.credentials import redact_url
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


def _virtual_records(vps: Sequence[VirtualPackage], subdir: str) -> dict[str, PackageRecord]:
    return {name: PackageRecord(name, version, BuildString(build or "0"), 0, subdir)
            for name, version, build in vps}


def environment_unsat(ws: Workspace, env: Environment, locked: LockedWorkspace) -> str | None:
    """Why the lock's copy of ``env`` no longer fits the manifest as a whole, or None."""
    lenv = locked.environments.get(env.name)
    if lenv is None:
        return "not in the lock"
    want = [redact_url(ws.channel_url(c)) for c in env.channels]
    have = [channel_base_url(c, ws.root) for c in lenv.channels]
    if want != have:
        return f"channels changed ({', '.join(have)} -> {', '.join(want)})"
    names = {p.name for p in env.platforms}
    subdirs = {p.subdir for p in env.platforms}
    extra = sorted(p for p in lenv.records
                   if p not in names and locked.platforms.get(p) and locked.platforms[p].subdir not in subdirs)
    if extra:
        return f"the lock has platform(s) the environment does not: {', '.join(extra)}"
    return None


def platform_unsat(env: Environment, platform: Platform, locked: LockedWorkspace) -> str | None:
    """Why the lock's records of ``env`` on ``platform`` no longer satisfy the manifest, or None."""
    lplat = locked.platforms.get(platform.name)
    records = locked.records(env.name, platform.name)
    if lplat is None or records is None:
        return f"platform '{platform.name}' is not locked"
    if lplat.subdir != platform.subdir:
        return f"platform '{platform.name}' changed subdir ({lplat.subdir} -> {platform.subdir})"
    if customised_virtual_packages(lplat.subdir, lplat.virtual_packages) != platform.customised_virtual_packages():
        return f"platform '{platform.name}' changed its virtual packages"
    return records_unsat(env, platform, records)


def records_unsat(env: Environment, platform: Platform, records: Sequence[RepoDataRecord]) -> str | None:
    """Why ``records`` would not satisfy ``env`` on ``platform`` by pixi's package rules, or None.

    Also run on every fresh solve: rocmlock's solve offers ``__amdgpu``/``__amdgpu_arch``, pixi's check does not.
    """
    specs = [d.matchspec() for d in env.dependencies_for(platform)]
    for constraint in env.constraints_for(platform):  # pixi: PlatformUnsat::ConstraintViolated
        spec = _spec(constraint.matchspec())
        record = next((r for r in records if r.name.normalized == spec.name.normalized), None)
        if record is not None and not spec.matches(record):
            return f"locked {record.name.normalized} {record.version} {record.build} violates constraint " \
                   f"'{constraint.matchspec()}'"
    return _records_unsat(specs, records, pixi_virtual_packages(platform.declared_virtual_packages()),
                          platform.subdir)


def _records_unsat(specs: Sequence[str], records: Sequence[RepoDataRecord],
                   vps: Sequence[VirtualPackage], subdir: str) -> str | None:
    by_name = {r.name.normalized: r for r in records}
    virtual = _virtual_records(vps, subdir)

    def present(text: str) -> bool:
        spec = _spec(text)
        record = by_name.get(spec.name.normalized) or virtual.get(spec.name.normalized)
        return record is not None and spec.matches(record)

    visited: set[str] = set()
    stack = [(s, "the manifest") for s in specs if not (c := _spec(s).condition) or condition_holds(c, present)]
    while stack:
        text, source = stack.pop()
        spec = _spec(text)
        if spec.condition and not condition_holds(spec.condition, present):
            continue
        name = spec.name.normalized
        record = by_name.get(name)
        if record is None:
            vrec = virtual.get(name)
            if vrec is not None and spec.matches(vrec):
                continue
            return f"'{text}' (from {source}) has no matching locked package"
        if not spec.matches(record):
            return f"locked {name} {record.version} {record.build} does not match '{text}' (from {source})"
        if name in visited:
            continue
        visited.add(name)
        stack.extend((dep, name) for dep in record.depends)
    extra = sorted(set(by_name) - visited)
    return f"locked package(s) no longer needed: {', '.join(extra)}" if extra else None
