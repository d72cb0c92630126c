"""Platforms as a pixi.toml lists them: a plain subdir (``linux-64``) or a rich platform with virtual packages.

Parsing follows pixi 0.77.0's crates/pixi_manifest/src/toml/platform.rs (``TomlPixiPlatform``) and
crates/pixi_manifest/src/platform.rs (``PixiPlatformName``, ``PixiPlatform::new_with_defaults``):
what pixi accepts is accepted with pixi's meaning, what it rejects is an error naming the entry. Two keys of later
pixi releases, whose source could not be read here, are read from their release notes: ``subdir`` (pixi 0.85.0,
2026-11-24: "Workspace platform definitions now use the subdir key instead of platform ... The old platform key
remains accepted but emits a deprecation warning") and ``amdgpu`` (pixi 0.82.0, 2026-10-13, prefix-dev/pixi#7144:
"``amdgpu = true`` to declare GPU presence or ``amdgpu = "gfx90a"`` to require a specific GPU architecture").
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rattler import PackageName, Subdir, Version
from rattler.exceptions import InvalidPackageNameError, InvalidVersionError

from rocmlock.errors import InputError, expect_type
from rocmlock.gpu.targets import get_target, target_for_isa
from rocmlock.util.text import escape
from rocmlock.workspace.pixi_compat import (
    LIBC_NAMES,
    VirtualPackage,
    customised_virtual_packages,
    format_virtual_package,
    subdir_default_virtual_packages,
)

# Every subdir rattler knows (pixi parses a platform with rattler's Platform::from_str).
KNOWN_SUBDIRS = frozenset(str(p) for p in Subdir.all())
# pixi's friendly keys in its canonical order (FRIENDLY_VIRTUAL_PACKAGES): the order also builds
# the name of an entry without `name`. `osx` is an alias of `macos`; `cuda` may be a table.
FRIENDLY_KEYS = (("cuda", "__cuda"), ("archspec", "__archspec"), ("glibc", "__glibc"), ("linux", "__linux"),
                 ("macos", "__osx"), ("windows", "__win"))
ALIASES = {"osx": "macos"}
# Family selectors (`[target.linux]`): pixi reserves them, so no platform may be called that.
RESERVED_NAMES = frozenset({"linux", "unix", "win", "osx", "macos"})
MAX_NAME_BYTES = 64
_NAME = re.compile(r"[A-Za-z]([A-Za-z0-9-]*[A-Za-z0-9])?\Z")


@dataclass(frozen=True)
class Platform:
    """A platform: a plain subdir (``linux-64``) or a pixi rich platform with virtual packages.

    ``virtual_packages`` holds what the entry declares, as (name, version, build), sorted by name.
    """

    name: str
    subdir: str
    virtual_packages: tuple[VirtualPackage, ...] = ()

    @property
    def is_rich(self) -> bool:
        return self.name != self.subdir or bool(self.virtual_packages)

    def virtual_package(self, name: str) -> str | None:
        """The declared version of virtual package ``name`` (``__amdgpu_arch`` -> ``9.4.2``)."""
        return next((v for n, v, _ in self.virtual_packages if n == name), None)

    def declared_virtual_packages(self) -> list[VirtualPackage]:
        """What pixi records for this platform: the declared packages, then the subdir defaults not overridden.

        pixi_manifest/src/platform.rs, merge_subdir_defaults: any declared libc replaces the default glibc.
        """
        declared = list(self.virtual_packages)
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
            out.append(Platform(item, _subdir(item, path, where)))
        elif isinstance(item, dict):
            out.append(_rich_platform(item, path, where))
        else:
            raise InputError(f"{path}: key '{where}' must be a platform name or a table",
                             hint="write a subdir such as \"linux-64\" or { name = ..., platform = ..., ... }")
    names = [p.name for p in out]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise InputError(f"{path}: key '{key}' lists platform '{dupes[0]}' twice",
                         hint="list each platform once")
    return tuple(out)


def _rich_platform(item: dict[str, Any], path: Path, where: str) -> Platform:
    """One inline-table entry (pixi's TomlPixiPlatform::deserialize, table branch)."""
    name = _string(item, "name", path, where)
    key = _subdir_key(item, path, where)
    declared = _virtual_packages(item, path, where)
    if key is not None:
        subdir = _subdir(str(_string(item, key, path, where)), path, f"{where}.{key}")
    elif name is not None:
        if name not in KNOWN_SUBDIRS:
            raise InputError(f"{path}: key '{where}.name' is '{name}', which is not a conda subdir",
                             hint="set 'subdir' (or 'platform', before pixi 0.85) explicitly when using a custom name")
        subdir = name
    else:
        raise InputError(f"{path}: key '{where}' sets neither 'name' nor 'subdir'",
                         hint="a platform entry must set at least one of them ('platform' before pixi 0.85)")
    if name is None:
        if "amdgpu" in item:  # the name pixi 0.82+ derives from the key is not in its release notes
            raise InputError(f"{path}: key '{where}' sets amdgpu but no name",
                             hint='give the entry a name, such as name = "linux-64-gfx942"')
        name = synthesized_name(subdir, declared)
    check_platform_name(name, path, f"{where}.name")
    if name == subdir and declared:
        raise InputError(f"{path}: key '{where}' adds virtual packages to the subdir platform '{subdir}'",
                         hint="drop the virtual packages or give the entry a `name` distinct from its subdir")
    if "__cuda_arch" in {d[0] for d in declared} and "__cuda" not in {d[0] for d in declared}:
        raise InputError(f"{path}: key '{where}' declares __cuda_arch without __cuda",
                         hint="`__cuda_arch` requires `__cuda` to be declared as well")
    if (isa := next((v for n, v, _ in declared if n == "__amdgpu_arch"), None)) is not None:
        target_for_isa(isa, f"{path}: key '{where}.__amdgpu_arch'")
    return Platform(name, subdir, tuple(sorted(declared)))


def _subdir_key(item: dict[str, Any], path: Path, where: str) -> str | None:
    """Which key names the entry's conda subdir: ``subdir`` (pixi 0.85+) or ``platform`` (every pixi before it, and
    0.85+ with a deprecation warning), or None; both at once is an error."""
    keys = [k for k in ("subdir", "platform") if k in item]
    if len(keys) > 1:
        raise InputError(f"{path}: key '{where}' sets both 'subdir' and 'platform'",
                         hint="set one: 'subdir' for pixi 0.85 and later, 'platform' for earlier pixi (pixi 0.85 "
                              "renamed it)")
    return keys[0] if keys else None


def _amdgpu(value: Any, path: Path, where: str) -> list[VirtualPackage]:
    """pixi 0.82's ``amdgpu`` key: ``true`` declares ``__amdgpu``, a GPU target (``"gfx942"``, a target id such as
    ``"gfx90a:xnack-"`` too) also ``__amdgpu_arch``, as the ISA version rattler models (``9.4.2``; conda/rattler#2806,
    ``crates/rattler_virtual_packages/src/amdgpu.rs``: a target id's features are dropped). The same packages as
    the raw ``__amdgpu = "0"``, ``__amdgpu_arch = "9.4.2"`` keys."""
    if value is True:
        return [("__amdgpu", "0", "")]
    if value is False:
        raise InputError(f"{path}: key '{where}' is false, which declares nothing",
                         hint='leave the key out for a platform without an AMD GPU, or write true or "gfx942"')
    text = expect_type(value, str, path, where, 'true or a GPU target such as "gfx942"')
    if not _llvm_target(text):  # get_target alone would read " GFX942 " or "gfx942:x" as gfx942
        guess = text.strip().split(":", 1)[0].lower()
        raise InputError(f"{path}: key '{where}' must be a GPU target as LLVM names it (gfx942, or a target id such "
                         f"as gfx90a:xnack-), got {escape(repr(text[:80]))}",
                         hint=f'write amdgpu = "{escape(guess[:40])}"' if _llvm_target(guess)
                         else 'write amdgpu = "gfx942" (the target rocminfo lists as "Name: gfx...")')
    target = get_target(text, f"{path}: key '{where}'")
    return [("__amdgpu", "0", ""), ("__amdgpu_arch", target.isa, "")]


def _llvm_target(text: str) -> bool:
    """Whether ``text`` is a processor's target id exactly as LLVM writes it (AMDGPUUsage "Target ID": lower case,
    each feature at most once, sramecc before xnack; :func:`rocmlock.gpu.offload.parse_target_id` reads it), no
    generic target and nothing around it."""
    from rocmlock.gpu.offload import parse_target_id  # here: only an amdgpu key needs it

    try:
        target = parse_target_id(text)
    except ValueError:
        return False
    return not target.generic and str(target) == text


def _string(item: dict[str, Any], key: str, path: Path, where: str) -> str | None:
    value = item.get(key)
    return None if value is None else str(expect_type(value, str, path, f"{where}.{key}", "a string"))


def _virtual_packages(item: dict[str, Any], path: Path, where: str) -> list[VirtualPackage]:
    """Friendly keys, then raw ``__name`` keys; anything else is an unknown key (pixi's TableHelper::finalize)."""
    declared: list[VirtualPackage] = []
    if "cuda" in item:
        declared += _cuda(item["cuda"], path, f"{where}.cuda")
    if "amdgpu" in item:
        declared += _amdgpu(item["amdgpu"], path, f"{where}.amdgpu")
    for key, vname in FRIENDLY_KEYS[1:]:
        spellings = [k for k in (key, *(a for a, target in ALIASES.items() if target == key)) if k in item]
        if len(spellings) > 1:
            raise InputError(f"{path}: key '{where}.{spellings[1]}' is an alias for '{key}'; set only one",
                             hint="remove one of the two")
        if spellings:
            raw = expect_type(item[spellings[0]], str, path, f"{where}.{spellings[0]}", "a string")
            declared.append(_friendly(vname, raw, path, f"{where}.{spellings[0]}"))
    friendly = {"name", "platform", "subdir", "amdgpu", *(k for k, _ in FRIENDLY_KEYS), *ALIASES}
    for key, value in item.items():
        if key in friendly:
            continue
        if not key.startswith("__"):
            raise InputError(f"{path}: key '{where}.{key}' is not a platform key",
                             hint="use name, subdir (platform), cuda, amdgpu, archspec, glibc, linux, macos (osx), "
                                  "windows or a raw __name key")
        vp = _raw(key, value, path, f"{where}.{key}")
        if any(d[0] == vp[0] for d in declared):
            raise InputError(f"{path}: key '{where}.{key}' declares '{vp[0]}' a second time",
                             hint=f"set it via either a friendly key or the raw '{key}' key, not both")
        declared.append(vp)
    return declared


def _version(text: str, path: Path, where: str) -> str:
    try:
        Version(text)
    except InvalidVersionError:
        raise InputError(f"{path}: key '{where}' is '{text}', not a valid version",
                         hint='write a conda version such as "2.28"') from None
    return text


def _friendly(vname: str, raw: str, path: Path, where: str) -> VirtualPackage:
    if vname == "__archspec":  # a microarchitecture: version 0, the name as build string
        if not raw:
            raise InputError(f"{path}: key '{where}' needs a non-empty microarchitecture string",
                             hint="write the microarchitecture, e.g. \"x86_64_v3\"")
        return (vname, "0", _archspec(raw, path, where))
    return (vname, _version(raw, path, where), "")


def _cuda(value: Any, path: Path, where: str) -> list[VirtualPackage]:
    """``cuda = "12.0"`` or ``cuda = { driver, arch }`` (pixi's take_cuda_entry; arch needs driver)."""
    if isinstance(value, str):
        return [("__cuda", _version(value, path, where), "")]
    table = expect_type(value, dict, path, where, "a version string or a table")
    unknown = sorted(set(table) - {"driver", "arch"})
    if unknown:
        raise InputError(f"{path}: key '{where}.{unknown[0]}' is not a cuda key", hint="use driver and arch")
    if "driver" not in table:
        raise InputError(f"{path}: key '{where}' has no 'driver'",
                         hint="`cuda.arch` requires `cuda.driver`; a cuda table must set driver (and optionally arch)")
    out = [("__cuda", _version(expect_type(table["driver"], str, path, f"{where}.driver", "a string"),
                               path, f"{where}.driver"), "")]
    if "arch" in table:
        arch = expect_type(table["arch"], str, path, f"{where}.arch", "a string")
        out.append(("__cuda_arch", _version(arch, path, f"{where}.arch"), ""))
    return out


def _raw(key: str, value: Any, path: Path, where: str) -> VirtualPackage:
    """``__name = "version[=build]"`` (pixi's parse_raw_virtual_package)."""
    try:
        name = PackageName(key).normalized
    except InvalidPackageNameError:
        raise InputError(f"{path}: key '{where}' is not a valid virtual-package name",
                         hint="virtual packages start with '__', e.g. __cuda") from None
    text = expect_type(value, str, path, where, 'a string ("version" or "version=build")')
    version, _, build = text.partition("=")
    if name == "__archspec" and build:
        _archspec(build, path, where)
    return (name, _version(version, path, where), build)


def _archspec(name: str, path: Path, where: str) -> str:
    """A microarchitecture the archspec database knows, or ``0`` (pixi_manifest platform.rs,
    validate_archspec_name: an unknown name makes a platform no host can match)."""
    # Imported here: `rocmlock unpack` on a node (installed --no-deps by a bundle's installer) never needs it.
    from archspec.cpu import TARGETS as ARCHSPEC_TARGETS

    if name == "0" or name in ARCHSPEC_TARGETS:
        return name
    underscored = name.replace("-", "_")
    close = [underscored] if underscored in ARCHSPEC_TARGETS else \
        difflib.get_close_matches(name, sorted(ARCHSPEC_TARGETS), n=1, cutoff=0.8)
    raise InputError(f"{path}: key '{where}' is '{name}', not a known archspec microarchitecture",
                     hint=f"did you mean '{close[0]}'?" if close else
                     "see `python -c 'import archspec.cpu; print(sorted(archspec.cpu.TARGETS))'`")


def _subdir(text: str, path: Path, where: str) -> str:
    if text not in KNOWN_SUBDIRS:
        raise InputError(f"{path}: key '{where}' has unknown platform '{text}'",
                         hint=f"use a conda subdir such as {', '.join(sorted(KNOWN_SUBDIRS & {'linux-64', 'osx-arm64', 'win-64'}))}")
    return text


def _fits(name: str, pattern: re.Pattern[str]) -> bool:
    """``name`` matches ``pattern`` in at most :data:`MAX_NAME_BYTES` bytes (pixi's MAX_PLATFORM_NAME_BYTES)."""
    return len(name.encode()) <= MAX_NAME_BYTES and pattern.match(name) is not None


def check_platform_name(name: str, path: Path, where: str) -> None:
    """pixi's PixiPlatformName: ASCII letters, digits and '-', a letter first, no trailing '-', at most 64 bytes."""
    if not _fits(name, _NAME):
        raise InputError(f"{path}: key '{where}' is '{name}', not a valid platform name",
                         hint="use ASCII letters, digits and '-', starting with a letter (at most 64)")
    if name in RESERVED_NAMES:
        raise InputError(f"{path}: key '{where}' is '{name}', a reserved target selector",
                         hint="pick another name: linux, unix, win, osx and macos select families")


_GLOB = re.compile(r"[A-Za-z0-9*-]+\Z")


def check_selector(selector: str, path: Path, key: str) -> None:
    """A ``[target.<selector>]`` key as pixi parses it (pixi_manifest target.rs, TargetSelector::from_str): a family
    (linux, unix, win, osx, macos), a conda subdir, a glob (platform.rs, PlatformGlob: a key with ``*``, ``?`` or
    ``[`` is one, and ``*`` is its only wildcard, among ASCII letters, digits and '-'), else a platform name
    (PixiPlatformName, as :func:`check_platform_name`). pixi refuses anything else; so does this, in one line."""
    if selector in RESERVED_NAMES or selector in KNOWN_SUBDIRS:
        return
    if not _fits(selector, _GLOB if any(c in selector for c in "*?[") else _NAME):
        raise InputError(f"{path}: key '{key}' is not a target selector pixi reads",
                         hint="a platform name, a conda subdir (linux-64), a family (linux, unix, win, osx) or a glob "
                              "whose only wildcard is '*' (\"linux-64-gfx9*\")")


def _segment(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-")


def synthesized_name(subdir: str, declared: list[VirtualPackage]) -> str:
    """The name pixi derives for an entry without ``name`` (toml/platform.rs, synthesize_name_string).

    The subdir, then each customised friendly package in canonical order, then the raw ones by name.
    """
    defaults = set(subdir_default_virtual_packages(subdir))
    custom = [d for d in declared if d not in defaults]
    parts, used = [subdir], set()
    for key, vname in FRIENDLY_KEYS:
        found = next((d for d in custom if d[0] == vname), None)
        if found is None:
            continue
        if vname == "__archspec" and found[1] == "0" and found[2]:
            parts.append(f"{key}-{_segment(found[2])}")
        elif vname != "__archspec" and found[2] in ("", "0"):
            parts.append(f"{key}-{_segment(found[1])}")
        else:
            continue
        used.add(vname)
    for name, version, build in sorted(d for d in custom if d[0] not in used):
        value = version if build in ("", "0") else f"{version}={build}"
        parts.append(f"{_segment(name.lstrip('_'))}-{_segment(value)}")
    return "-".join(parts)
