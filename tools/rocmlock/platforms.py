"""Platforms as a pixi.toml lists them: a plain subdir (``linux-64``) or a rich platform with virtual packages."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmlock.errors import InputError, expect_type
from rocmlock.pixi_compat import (
    BUILD_VALUED,
    LIBC_NAMES,
    VirtualPackage,
    customised_virtual_packages,
    format_virtual_package,
    subdir_default_virtual_packages,
)
from rocmlock.targets import target_for_isa

KNOWN_SUBDIRS = frozenset(
    {"linux-64", "linux-aarch64", "linux-ppc64le", "osx-64", "osx-arm64", "win-64", "win-arm64", "noarch"}
)
# Rich-platform keys that are not virtual packages.
PLATFORM_META_KEYS = ("name", "platform")
# Short names pixi accepts for virtual packages in rich platforms.
# pixi_manifest/src/toml/platform.rs, FRIENDLY_VIRTUAL_PACKAGES (+ aliases).
SHORT_VIRTUAL_KEYS = {"glibc": "__glibc", "linux": "__linux", "cuda": "__cuda", "osx": "__osx", "macos": "__osx",
                      "archspec": "__archspec", "windows": "__win"}


@dataclass(frozen=True)
class Platform:
    """A platform: a plain subdir (``linux-64``) or a pixi rich platform with virtual packages."""

    name: str
    subdir: str
    virtual_packages: tuple[tuple[str, str], ...] = ()

    @property
    def is_rich(self) -> bool:
        return self.name != self.subdir or bool(self.virtual_packages)

    def virtual_package(self, name: str) -> str | None:
        """The declared version of virtual package ``name`` (``__amdgpu_arch`` -> ``9.4.2``)."""
        value = dict(self.virtual_packages).get(name)
        return None if value is None else value.split("=", 1)[0]

    def declared_virtual_packages(self) -> list[VirtualPackage]:
        """What pixi records for this platform: the declared packages, then the subdir defaults not overridden."""
        declared: list[VirtualPackage] = []
        for name, value in self.virtual_packages:
            version, _, build = value.partition("=")
            if name in BUILD_VALUED and not build:
                version, build = "0", version
            declared.append((name, version, build))
        names = {d[0] for d in declared}
        for default in subdir_default_virtual_packages(self.subdir):
            if default[0] in names or (default[0] == "__glibc" and names & LIBC_NAMES):
                continue
            declared.append(default)
        return declared

    def customised_virtual_packages(self) -> list[str]:
        """The declared packages that differ from the subdir defaults, sorted (pixi's platform identity)."""
        return customised_virtual_packages(self.subdir, map(format_virtual_package, self.declared_virtual_packages()))


def parse_platforms(value: Any, path: Path, key: str) -> tuple[Platform, ...]:
    """The ``platforms`` list at ``key`` of ``path``; every error names the entry and the fix."""
    out: list[Platform] = []
    for i, item in enumerate(expect_type(value, list, path, key, "a list")):
        where = f"{key}[{i}]"
        if isinstance(item, str):
            _check_subdir(item, path, where)
            out.append(Platform(item, item))
            continue
        if not isinstance(item, dict) or "name" not in item:
            raise InputError(f"{path}: key '{where}' must be a platform name or a table with 'name'")
        name = str(item["name"])
        subdir = str(item.get("platform", name))
        _check_subdir(subdir, path, f"{where}.platform")
        out.append(Platform(name, subdir, _virtual_packages(item, path, where)))
    names = [p.name for p in out]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise InputError(f"{path}: key '{key}' lists platform '{dupes[0]}' twice")
    return tuple(out)


def _virtual_packages(item: dict[str, Any], path: Path, where: str) -> tuple[tuple[str, str], ...]:
    """A rich platform's virtual packages, sorted by name, short keys (``glibc``) spelled out (``__glibc``)."""
    vpkgs: dict[str, str] = {}
    for vkey, vval in item.items():
        if vkey in PLATFORM_META_KEYS:
            continue
        if vkey == "cuda" and isinstance(vval, dict):  # pixi's { driver, arch } form
            vpkgs["__cuda"] = str(vval.get("driver", ""))
            if "arch" in vval:
                vpkgs["__cuda_arch"] = str(vval["arch"])
            continue
        vname: str = SHORT_VIRTUAL_KEYS.get(str(vkey), str(vkey))
        if not vname.startswith("__"):
            raise InputError(
                f"{path}: key '{where}.{vkey}' is not a known platform key",
                hint="use name, platform, glibc, linux, cuda, archspec, macos, windows or a raw __name key",
            )
        vpkgs[vname] = str(vval)
    if "__amdgpu_arch" in vpkgs:
        target_for_isa(vpkgs["__amdgpu_arch"], f"{path}: key '{where}.__amdgpu_arch'")
    return tuple(sorted(vpkgs.items()))


def _check_subdir(subdir: str, path: Path, key: str) -> None:
    if subdir not in KNOWN_SUBDIRS:
        raise InputError(
            f"{path}: key '{key}' has unknown platform '{subdir}'",
            hint=f"use one of: {', '.join(sorted(KNOWN_SUBDIRS))}",
        )

