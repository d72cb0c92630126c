"""Dependency tables of pixi.toml, read the way pixi reads them (pixi 0.77.0, crates/pixi_spec/src/toml.rs).

A string is a version spec; a table may add ``build``, ``channel`` and the fields pixi matches on
(``build-number``, ``md5``, ``sha256``: pixi_spec/src/detailed.rs), which go into the MatchSpec.
Keys pixi has but rocmlock cannot lock (sources, conditions, ...) are an error, never dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rattler import MatchSpec, VersionSpec
from rattler.exceptions import InvalidMatchSpecError, InvalidVersionSpecError

from rocmlock.errors import InputError, expect_type

# Dependency table keys that point at sources rocmlock cannot lock.
UNSUPPORTED_SOURCE_KEYS = ("path", "git", "url", "branch", "tag", "rev", "subdirectory")
# Dependency keys that become MatchSpec bracket fields, with the bracket key.
DEPENDENCY_FIELDS = {"build-number": "build_number", "md5": "md5", "sha256": "sha256"}


@dataclass(frozen=True)
class Dependency:
    """A conda dependency: ``"2.9.*"`` or ``{ version, build, channel, build-number, md5, sha256 }``."""

    name: str
    version: str = "*"
    build: str | None = None
    channel: str | None = None
    # MatchSpec bracket fields pixi matches on (pixi_spec detailed.rs): build_number, md5, sha256.
    fields: tuple[tuple[str, str], ...] = ()

    def matchspec(self) -> str:
        """The MatchSpec string the solver gets (``[channel::]name version [build][[key="value", ...]]``).

        The version is parsed the way pixi parses it (rattler's lenient VersionSpec), so ``"1.2"`` is
        ``==1.2`` and ``">= 1.0"`` never splits into a version and a build.
        """
        version = str(VersionSpec(self.version or "*", strict=False))
        spec = f"{self.name} {version}" if self.build is None else f"{self.name} {version} {self.build}"
        if self.fields:
            spec += "[" + ", ".join(f'{k}="{v}"' for k, v in self.fields) + "]"
        return f"{self.channel}::{spec}" if self.channel else spec


def _pixi_version(value: Any, path: Path, key: str) -> str:
    """A version spec as pixi reads it (pixi_spec toml.rs, parse_version_string): strict, except that an
    ambiguous bare version (``"1.2"``) is taken leniently as ``==1.2``."""
    text = expect_type(value, str, path, key, "a version string")
    try:
        VersionSpec(text, strict=True)
    except InvalidVersionSpecError as exc:
        # py-rattler has no error kinds: the ambiguous-version error is the one that says this.
        ambiguous = "missing range specifier" in str(exc)
        try:
            if not ambiguous:
                raise
            VersionSpec(text, strict=False)
        except InvalidVersionSpecError as final:
            raise InputError(f"{path}: key '{key}' is '{text}', not a valid version spec: {final}",
                             hint='write e.g. ">=2.9", "2.9.*" or "==2.9.1"') from None
    return text


def _dependency_fields(spec: dict[str, Any], path: Path, where: str) -> tuple[tuple[str, str], ...]:
    fields: list[tuple[str, str]] = []
    for key, field_name in DEPENDENCY_FIELDS.items():
        if key in spec:
            value = spec[key]
            text = str(value) if isinstance(value, int) and not isinstance(value, bool) else \
                expect_type(value, str, path, f"{where}.{key}", "a string")
            try:
                MatchSpec(f'x[{field_name}="{text}"]')
            except InvalidMatchSpecError as exc:
                raise InputError(f"{path}: key '{where}.{key}' is '{text}', not valid: {exc}".splitlines()[0],
                                 hint="build-number takes e.g. \">=2\"; md5/sha256 take the hex digest") from None
            fields.append((field_name, text))
    return tuple(fields)


def parse_dependencies(value: Any, path: Path, key: str) -> tuple[Dependency, ...]:
    """The dependency table at ``key`` of ``path``, sorted by name; every error names the key."""
    out: list[Dependency] = []
    for name, spec in sorted(expect_type(value, dict, path, key, "a table").items()):
        where = f"{key}.{name}"
        if isinstance(spec, str):
            out.append(Dependency(name, _pixi_version(spec, path, where)))
            continue
        if not isinstance(spec, dict):
            raise InputError(f"{path}: key '{where}' must be a version string or a table")
        for skey in UNSUPPORTED_SOURCE_KEYS:
            if skey in spec:
                raise InputError(
                    f"{path}: key '{where}.{skey}' (a source dependency) is not supported by rocmlock",
                    hint="use `pixi lock` for workspaces with path/git/url dependencies",
                )
        if "when" in spec:
            raise InputError(f"{path}: key '{where}.when' (a conditional dependency) is not supported by rocmlock",
                             hint="use a [target.<platform>] table, or `pixi lock` for such workspaces")
        unknown = sorted(set(spec) - {"version", "build", "channel", *DEPENDENCY_FIELDS})
        if unknown:
            raise InputError(f"{path}: key '{where}.{unknown[0]}' is not supported by rocmlock",
                             hint="a dependency table takes version, build, channel, build-number, md5 "
                                  "and sha256; use `pixi lock` for the other pixi keys")
        version = _pixi_version(spec.get("version", "*"), path, f"{where}.version")
        build = spec.get("build")
        channel = spec.get("channel")
        if build is not None:
            expect_type(build, str, path, f"{where}.build", "a string")
        if channel is not None:
            expect_type(channel, str, path, f"{where}.channel", "a string")
        out.append(Dependency(name, version, build, channel, _dependency_fields(spec, path, where)))
    return tuple(out)
