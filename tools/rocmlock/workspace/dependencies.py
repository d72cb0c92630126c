"""Dependency tables of pixi.toml, read the way pixi reads them (pixi 0.77.0, crates/pixi_spec/src/toml.rs).

A string is a version spec; a table may add ``build``, ``channel`` and every MatchSpec field pixi
passes to the solver (``build-number``, ``md5``, ``sha256``, ``file-name``, ``subdir``, ``license``,
``license-family``, ``track-features``, ``extras``, ``flags``, and the condition ``when``: pixi_spec
src/toml.rs, TomlSpec and TomlWhen), which go into the MatchSpec's brackets as rattler reads them.
A source dependency (``path``/``git``/``url``) is left out of the solve here; `rocmlock lock` refuses
it (rocmlock.workspace.pixi_keys) and `rocmlock export` handles what pixi locked for it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rattler import MatchSpec, PackageName, VersionSpec
from rattler.exceptions import InvalidMatchSpecError, InvalidPackageNameError, InvalidVersionSpecError

from rocmlock.errors import InputError, expect_type
from rocmlock.util.credentials import one_line, redact_text, redact_url, refuse_query, split_url
from rocmlock.util.text import escape
from rocmlock.workspace.pixi_compat import is_local_channel
from rocmlock.workspace.pixi_keys import is_source_dependency

# Dependency keys that become MatchSpec bracket fields, with the bracket key (strings, quoted).
DEPENDENCY_FIELDS = {"build-number": "build_number", "md5": "md5", "sha256": "sha256", "file-name": "fn",
                     "subdir": "subdir", "license": "license", "license-family": "license_family"}
# List-valued keys: written unquoted in brackets (``extras=[dev, test]``); track-features is one string.
LIST_FIELDS = {"extras": "extras", "flags": "flags"}
KNOWN_KEYS = {"version", "build", "channel", "when", "track-features", *DEPENDENCY_FIELDS, *LIST_FIELDS}


@dataclass(frozen=True)
class Dependency:
    """A conda dependency: ``"2.9.*"`` or ``{ version, build, channel, build-number, md5, sha256 }``."""

    name: str
    version: str = "*"
    build: str | None = None
    channel: str | None = None
    # MatchSpec bracket fields as rattler reads them, values already quoted (``('license', '"MIT"')``).
    fields: tuple[tuple[str, str], ...] = ()

    def matchspec(self) -> str:
        """The MatchSpec string the solver gets (``[channel::]name version [build][[key="value", ...]]``).

        The version is parsed the way pixi parses it (rattler's lenient VersionSpec), so ``"1.2"`` is
        ``==1.2`` and ``">= 1.0"`` never splits into a version and a build.
        """
        version = str(VersionSpec(self.version or "*", strict=False))
        spec = f"{self.name} {version}" if self.build is None else f"{self.name} {version} {self.build}"
        if self.fields:
            spec += "[" + ", ".join(f"{k}={v}" for k, v in self.fields) + "]"
        # A channel's credentials are not part of its identity (the solve reads channels by their clean URL and
        # gets the secrets in memory: rocmlock.util.credentials), so the spec names the channel by its clean URL.
        return f"{redact_url(self.channel)}::{spec}" if self.channel else spec


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


def _field_values(spec: dict[str, Any], path: Path, where: str) -> list[tuple[str, str, str]]:
    """(pixi key, bracket key, bracket value) for each MatchSpec field of a dependency table."""
    out: list[tuple[str, str, str]] = []
    for key, field_name in DEPENDENCY_FIELDS.items():
        if key in spec:
            value = spec[key]
            text = str(value) if isinstance(value, int) and not isinstance(value, bool) else \
                expect_type(value, str, path, f"{where}.{key}", "a string")
            out.append((key, field_name, _quote(text)))
    for key, field_name in LIST_FIELDS.items():
        if key in spec:
            items = expect_type(spec[key], list, path, f"{where}.{key}", "a list of strings")
            for i, item in enumerate(items):
                expect_type(item, str, path, f"{where}.{key}[{i}]", "a string")
            out.append((key, field_name, f"[{', '.join(items)}]"))
    if "track-features" in spec:
        feats = expect_type(spec["track-features"], list, path, f"{where}.track-features", "a list of strings")
        out.append(("track-features", "track_features", _quote(" ".join(str(f) for f in feats))))
    if "when" in spec:
        out.append(("when", "when", _quote(when_condition(spec["when"], path, f"{where}.when"))))
    return out


def _dependency_fields(spec: dict[str, Any], path: Path, where: str) -> tuple[tuple[str, str], ...]:
    fields = _field_values(spec, path, where)
    for key, field_name, value in fields:
        try:
            MatchSpec(f"x[{field_name}={value}]")
        except InvalidMatchSpecError as exc:
            shown = spec[key] if key != "when" else value
            raise InputError(f"{path}: key '{where}.{key}' is '{shown}', not valid: {exc}".splitlines()[0],
                             hint="build-number takes e.g. \">=2\"; md5/sha256 take the hex digest; "
                                  "when takes a match spec") from None
    return tuple((field_name, value) for _, field_name, value in fields)


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def when_condition(value: Any, path: Path, key: str) -> str:
    """A ``when`` condition as the MatchSpec condition rattler solves with (pixi_spec toml.rs,
    TomlWhen::into_condition): a string is a match spec, ``all``/``any`` combine with and/or, and
    ``{ package, ... }`` is the package's match spec with those fields."""
    if isinstance(value, str):
        return value
    table = expect_type(value, dict, path, key, "a match spec string or a table with all, any or package")
    for combinator, word in (("all", " and "), ("any", " or ")):
        if combinator in table:
            parts = expect_type(table[combinator], list, path, f"{key}.{combinator}", "a non-empty list")
            if not parts or len(table) != 1:
                raise InputError(f"{path}: key '{key}.{combinator}' must be the only key and hold at least one condition",
                                 hint="give it alone, with a list of at least one condition")
            return "(" + word.join(when_condition(p, path, f"{key}.{combinator}[{i}]")
                                   for i, p in enumerate(parts)) + ")"
    package = expect_type(table.get("package"), str, path, f"{key}.package", "a package name")
    rest = {k: v for k, v in table.items() if k != "package"}
    inner = parse_dependencies({package: rest}, path, key)[0] if rest else None
    return inner.matchspec() if inner else package


def parse_dependencies(value: Any, path: Path, key: str) -> tuple[Dependency, ...]:
    """The dependency table at ``key`` of ``path``, sorted by name; every error names the key."""
    out: list[Dependency] = []
    for name, spec in sorted(expect_type(value, dict, path, key, "a table").items()):
        where = f"{key}.{name}"
        try:  # pixi reads the keys as PackageName (pixi_manifest): "rocm-version 99" is no name, not a spec
            PackageName(name)
        except InvalidPackageNameError:
            raise InputError(f"{path}: key '{escape(where)}' is not a package name (letters, digits, '-', '_', '.')",
                             hint='versions and builds go in the value: name = ">=7" or '
                                  'name = { version = "...", build = "..." }') from None
        if isinstance(spec, str):
            out.append(_whole(Dependency(name, _pixi_version(spec, path, where)), path, where))
            continue
        if not isinstance(spec, dict):
            raise InputError(f"{path}: key '{where}' must be a version string or a table",
                             hint="write a match spec (\"3.12.*\") or a table ({ version = \"3.12.*\" })")
        if is_source_dependency(spec):
            continue  # built or fetched by pixi: `rocmlock lock` refuses it, the rest of rocmlock skips it
        unknown = sorted(set(spec) - KNOWN_KEYS)
        if unknown:
            raise InputError(f"{path}: key '{where}.{unknown[0]}' is not a pixi dependency key",
                             hint=f"a dependency table takes: {', '.join(sorted(KNOWN_KEYS))} "
                                  "(or path/git/url for a source)")
        version = _pixi_version(spec.get("version", "*"), path, f"{where}.version")
        build = spec.get("build")
        channel = spec.get("channel")
        if build is not None:
            expect_type(build, str, path, f"{where}.build", "a string")
        if channel is not None:
            expect_type(channel, str, path, f"{where}.channel", "a string")
            if not is_local_channel(channel):
                refuse_query(channel, f"{path}: key '{where}.channel'")
        out.append(_whole(Dependency(name, version, build, channel, _dependency_fields(spec, path, where)),
                          path, where))
    return tuple(out)


def _whole(dep: Dependency, path: Path, where: str) -> Dependency:
    """``dep`` when its parts form one match spec, as pixi builds one from them (pixi_spec toml.rs); checked
    here, once, so that no later parse (solve, the satisfiability check) meets a spec it cannot read."""
    try:
        MatchSpec(dep.matchspec())
    except InvalidMatchSpecError as exc:
        secrets = split_url(dep.channel).secrets if dep.channel else []
        reason = redact_text(one_line(str(exc)), secrets)
        raise InputError(f"{path}: key '{where}' is not a valid match spec: {reason}",
                         hint="check its build, channel and other fields") from None
    return dep


def _condition_tokens(condition: str) -> list[str]:
    """``a and(b-or-c or d[x="p and q"])`` -> ``a``, ``and``, ``(``, ``b-or-c``, ``or``, ``d[x="p and q"]``, ``)``.

    rattler's grammar (crates/rattler_conda_types/src/match_spec/condition.rs, matchspec_token and
    check_word_delimiter): a leaf ends at a parenthesis or at ``and``/``or`` with whitespace or a parenthesis
    on both sides, never inside a bracket or a quoted bracket value; so ``rock-and-roll`` is one name.
    """
    tokens: list[str] = []
    leaf, depth, quote, i = "", 0, "", 0

    def flush() -> None:
        nonlocal leaf
        if leaf.strip():
            tokens.append(leaf.strip())
        leaf = ""

    def at_word(word: str) -> bool:
        before = condition[i - 1] if i else " "
        after = condition[i + len(word)] if i + len(word) < len(condition) else " "
        return condition.startswith(word, i) and (before.isspace() or before in "()") and \
            (after.isspace() or after in "()")

    while i < len(condition):
        char = condition[i]
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"" and depth:
            quote = char
        elif char in "[]":
            depth = depth + 1 if char == "[" else max(depth - 1, 0)
        elif not depth and char in "()":
            flush()
            tokens.append(char)
            i += 1
            continue
        elif not depth and (word := next((w for w in ("and", "or") if at_word(w)), None)):
            flush()
            tokens.append(word)
            i += len(word)
            continue
        leaf += char
        i += 1
    flush()
    return tokens


def condition_holds(condition: str, matches: Callable[[str], bool]) -> bool:
    """Evaluate a MatchSpec condition (``__unix and python >=3.12 or __win``): ``and`` binds tighter than
    ``or``, parentheses group, and each match spec in it holds when ``matches(spec)`` says so."""
    tokens = _condition_tokens(condition)
    pos = 0

    def expr() -> bool:
        nonlocal pos
        value = term()
        while pos < len(tokens) and tokens[pos] == "or":
            pos += 1
            value = term() or value
        return value

    def term() -> bool:
        nonlocal pos
        value = atom()
        while pos < len(tokens) and tokens[pos] == "and":
            pos += 1
            value = atom() and value
        return value

    def atom() -> bool:
        nonlocal pos
        token = tokens[pos]
        pos += 1
        if token != "(":
            return matches(token)
        value = expr()
        pos += 1  # the closing parenthesis
        return value

    return expr()
