"""A lock's records against its platforms' GPU: no record may contradict a platform's ``__amdgpu_arch``.

A platform that declares ``__amdgpu_arch`` (``linux-64-gfx942``: ``9.4.2``) is solved with it, so a package built
for another target cannot enter through its ``__amdgpu_arch`` constraint (conda/ceps#189). A lock edited by hand,
or a package that names its target only through the ``amdgpu-target`` mutex, can still pair a platform with
another target's build; such a lock is never written (``rocmlock lock``), passed (``lock --check``) or installed.

A record contradicts the platform when one of its ``depends``/``constrains`` on ``__amdgpu_arch`` does not match
the platform's version, or when it is the ``amdgpu-target`` mutex of another gfx target (its build string).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from rattler import BuildString, MatchSpec, PackageRecord, RepoDataRecord

from rocmlock.errors import InputError, OperationError, RocmlockError
from rocmlock.gpu.targets import all_targets, isa_of
from rocmlock.lock.lockfile import LockedWorkspace, view
from rocmlock.lock.result import SolveKey

ARCH = "__amdgpu_arch"
MUTEX = "amdgpu-target"
_spec = lru_cache(maxsize=4096)(MatchSpec)


def platform_isa(virtual_packages: Iterable[str]) -> str | None:
    """The ``__amdgpu_arch`` version of a lock platform's ``__name=version[=build]`` list, or None."""
    for text in virtual_packages:
        name, _, rest = text.partition("=")
        if name == ARCH:
            return rest.partition("=")[0]
    return None


def describe_isa(isa: str) -> str:
    """``9.4.2`` -> ``gfx942 (__amdgpu_arch 9.4.2)``; an ISA no known target has is shown alone."""
    gfx = next((t.gfx for t in all_targets().values() if t.isa == isa), None)
    return f"{gfx} (__amdgpu_arch {isa})" if gfx else f"__amdgpu_arch {isa}"


@dataclass(frozen=True)
class Contradiction:
    """A record of ``environment`` on ``platform`` built for ``target`` while the platform is ``isa``."""

    environment: str
    platform: str
    isa: str
    record: RepoDataRecord
    target: str

    def line(self) -> str:
        r = self.record
        return (f"environment '{self.environment}' on platform '{self.platform}' ({describe_isa(self.isa)}) "
                f"locks {r.name.normalized} {r.version} {r.build}, which is built for {self.target}")


@lru_cache(maxsize=64)
def _arch_record(isa: str, subdir: str) -> PackageRecord:
    return PackageRecord(ARCH, isa, BuildString("0"), 0, subdir)


def _record_target(record: RepoDataRecord, isa: str) -> str | None:
    """What ``record`` is built for when that is not ``isa``; None when it fits (or names no GPU)."""
    seen = view(record)
    if seen.name == MUTEX:
        want = isa_of(seen.build)
        if want is not None and want != isa:
            return describe_isa(want)
        return None
    for text in (*seen.depends, *seen.constrains):
        if not text.startswith(ARCH):
            continue
        spec = _spec(text)
        if spec.name.normalized == ARCH and not spec.matches(_arch_record(isa, seen.subdir)):
            version = str(spec.version or "")
            exact = version.removeprefix("==")
            return describe_isa(exact) if version.startswith("==") else f"{ARCH} {version}"
    return None


def contradictions(environment: str, platform: str, virtual_packages: Iterable[str],
                   records: Sequence[RepoDataRecord]) -> list[Contradiction]:
    """The records of ``environment`` on ``platform`` that are another GPU target's builds, sorted by name."""
    isa = platform_isa(virtual_packages)
    if isa is None:
        return []
    found = [Contradiction(environment, platform, isa, r, target)
             for r in records if (target := _record_target(r, isa)) is not None]
    return sorted(found, key=lambda c: c.record.name.normalized)


def lock_contradictions(locked: LockedWorkspace, keys: Iterable[SolveKey] | None = None) -> list[Contradiction]:
    """Every contradiction of ``locked`` (only of the environment x platform ``keys`` when given)."""
    wanted = None if keys is None else set(keys)
    found: list[Contradiction] = []
    for env_name, env in sorted(locked.environments.items()):
        for plat_name, records in sorted(env.records.items()):
            platform = locked.platforms.get(plat_name)
            if platform is None or (wanted is not None and (env_name, plat_name) not in wanted):
                continue
            found += contradictions(env_name, plat_name, platform.virtual_packages, records)
    return found


def refusal(found: Sequence[Contradiction], lock_path: Path, solved: bool) -> RocmlockError | None:
    """The one-line error for ``found`` (None when empty): a fresh solve's (``solved``: the lock is not written)
    or an existing lock's (edited by hand, or written by a tool that did not solve with the platform's GPU)."""
    if not found:
        return None
    first = found[0]
    more = f" (and {len(found) - 1} more package(s))" if len(found) > 1 else ""
    if solved:
        return OperationError(f"{lock_path}: not written: {first.line()}{more}",
                              hint="the package names another GPU target (its amdgpu-target or __amdgpu_arch) than "
                                   "the platform's __amdgpu_arch: pin the platform's build in pixi.toml, or fix the "
                                   "package's metadata in its channel")
    return InputError(f"{lock_path}: {first.line()}{more}",
                      hint=f"the lock contradicts the platform's GPU (edited by hand?): run `rocmlock lock -e "
                           f"{first.environment}` to solve it again, or restore pixi.lock from version control")
