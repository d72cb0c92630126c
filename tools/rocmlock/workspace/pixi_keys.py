"""The keys of pixi.toml that `rocmlock lock` cannot honour, found once when the manifest is read.

pixi 0.77 reads them (crates/pixi_manifest/src/toml/{manifest,workspace,feature,environment,target}.rs)
and so does rocmlock: every command that only needs the conda side of a workspace (export, plan, doctor,
...) works on such a manifest, and ``rocmlock lock`` refuses it in one line that names the key and points
at ``pixi lock`` + ``rocmlock export``. The parser skips what is listed here; this module says why.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import Any

from rocmlock.errors import InputError, expect_type

# pixi_manifest/src/workspace.rs, SolveStrategy: the values pixi accepts; only "highest" (the default) is recordable.
SOLVE_STRATEGIES = ("highest", "lowest", "lowest-direct")
LOCK_HINT = "lock this workspace with `pixi lock`; `rocmlock export` then writes envs/ from that pixi.lock"
# Dependency table keys that make a dependency a source package (pixi_spec/src/toml.rs, TomlLocationSpec).
SOURCE_KEYS = ("path", "git", "url", "branch", "tag", "rev", "subdirectory", "lfs")
DEPENDENCY_TABLES = ("dependencies", "host-dependencies", "build-dependencies")
# humantime's units, as pixi parses a relative exclude-newer (pixi_spec/src/exclude_newer.rs).
_UNIT = r"(nsec|ns|usec|us|msec|ms|seconds|second|sec|s|minutes|minute|min|m|hours|hour|hr|h|days|day|d|" \
        r"weeks|week|w|months|month|M|years|year|y)"
_DURATION = re.compile(rf"\s*(\d+\s*{_UNIT}\s*)+")
# Why each key cannot be honoured by a lock that py-rattler writes.
_SOLVE_OPTION = "a solve option that pixi.lock must record and py-rattler's LockFile cannot record"
_REASONS = {
    "pypi-dependencies": "holds PyPI dependencies; rocmlock lock solves conda packages only",
    "dev": "holds dev dependencies, which pixi builds from source",
    "system-requirements": "changes the virtual packages; rocmlock takes them from rich platforms",
}


# The keys pixi 0.77 reads in each table; any other key is an error there (toml_span's TableHelper::finalize),
# so a typo such as `[dependecies]` never silently drops what it holds. Sources (tag v0.77.0):
# crates/pixi_manifest/src/toml/{manifest,workspace,feature,environment,target}.rs.
_FEATURE_BODY = ("dependencies", "constraints", "pypi-dependencies", "dev", "activation", "tasks", "target",
                 "channels", "channel-priority", "solve-strategy", "platforms", "pypi-options")
TOP_KEYS = ("workspace", "project", "package", "target", "dependencies", "host-dependencies", "build-dependencies",
            "constraints", "exclude-newer", "pypi-dependencies", "pypi-exclude-newer", "dev", "activation", "tasks",
            "feature", "environments", "pypi-options", "system-requirements", "tool", "$schema")
WORKSPACE_KEYS = ("name", "version", "description", "authors", "channels", "channel-priority", "solve-strategy",
                  "platforms", "license", "license-file", "readme", "homepage", "repository", "documentation",
                  "conda-pypi-map", "pypi-options", "s3-options", "preview", "target", "build-variants-files",
                  "build-variants", "requires-pixi", "exclude-newer", "dependencies")
FEATURE_KEYS = (*_FEATURE_BODY, "host-dependencies", "build-dependencies", "system-requirements")
# An environment table: its own keys, then inline feature content (not host-/build-dependencies, system-requirements).
ENVIRONMENT_TABLE_KEYS = ("features", "solve-group", "no-default-feature", *_FEATURE_BODY)
TARGET_KEYS = ("dependencies", "host-dependencies", "build-dependencies", "constraints", "pypi-dependencies", "dev",
               "activation", "tasks")


def _check_table(table: Any, known: Iterable[str], path: Path, prefix: str) -> None:
    if not isinstance(table, dict):
        return  # a wrong type is reported, naming its key, where the value is read
    known = tuple(known)
    for key in table:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            raise InputError(f"{path}: key '{prefix}{key}' is not a key pixi reads here",
                             hint=f"did you mean '{prefix}{close[0]}'?" if close else f"known keys: {', '.join(known)}")


def _check_targets(table: dict[str, Any], path: Path, prefix: str) -> None:
    for selector, body in _items(table.get("target")):
        _check_table(body, TARGET_KEYS, path, f"{prefix}target.{selector}.")


def check_known_keys(data: dict[str, Any], path: Path, table_key: str) -> None:
    """Every table of a parsed pixi.toml holds only keys pixi reads there; an unknown one is an input error."""
    _check_table(data, [k for k in TOP_KEYS if not (k == "project" and table_key == "workspace")], path, "")
    _check_table(data.get(table_key), WORKSPACE_KEYS, path, f"{table_key}.")
    _check_targets(data, path, "")
    for name, feature in _items(data.get("feature")):
        _check_table(feature, FEATURE_KEYS, path, f"feature.{name}.")
        _check_targets(feature, path, f"feature.{name}.")
    for name, env in _items(data.get("environments")):
        if not env:  # environment.rs: a table without features, solve-group or inline content
            raise InputError(f"{path}: key 'environments.{name}' is an empty table: it needs features, a "
                             "solve-group or dependencies of its own", hint=f'e.g. {name} = {{ features = ["..."] }}')
        _check_table(env, ENVIRONMENT_TABLE_KEYS, path, f"environments.{name}.")
        _check_targets(env, path, f"environments.{name}.")


@dataclass(frozen=True)
class LockRefusal:
    """A key of pixi.toml that ``rocmlock lock`` cannot honour, and why."""

    key: str
    reason: str

    def error(self, path: Path) -> InputError:
        return InputError(f"{path}: key '{self.key}' {self.reason}: rocmlock lock cannot honour it",
                          hint=LOCK_HINT)


def is_source_dependency(spec: Any) -> bool:
    """True for a dependency table that names a path, git repository or URL (pixi builds or fetches it)."""
    return isinstance(spec, dict) and any(k in spec for k in SOURCE_KEYS)


def check_exclude_newer(value: Any, path: Path, key: str) -> None:
    """``exclude-newer`` as pixi accepts it: a duration (``7d``, ``1h30m``), a date or an RFC 3339 timestamp."""
    if isinstance(value, date | datetime):
        return
    text = value if isinstance(value, str) else None
    if text is not None and _DURATION.fullmatch(text):
        return
    try:
        datetime.fromisoformat(str(text))
        return
    except ValueError:
        pass
    raise InputError(f"{path}: key '{key}' is {value!r}, neither a duration, a date nor a timestamp",
                     hint='write e.g. "7d", "2026-01-31" or "2026-01-31T00:00:00Z"')


def check_solve_options(ws: dict[str, Any], data: dict[str, Any], path: Path, table_key: str) -> None:
    """Solve-option values pixi would reject are input errors for every command. Whether `lock` can honour
    the valid ones is :func:`lock_refusals`' business: pixi compares the lock's solve options with the
    manifest's (pixi_core lock_file/satisfiability/environment.rs) and py-rattler's LockFile writes none."""
    tables: list[tuple[str, Any]] = [(f"{table_key}.", ws)]
    for group in ("feature", "environments"):
        group_table = data.get(group)
        tables += [(f"{group}.{name}.", t) for name, t in group_table.items()] if isinstance(group_table, dict) else []
    for prefix, table in tables:
        strategy = table.get("solve-strategy") if isinstance(table, dict) else None
        if strategy is not None and (not isinstance(strategy, str) or strategy not in SOLVE_STRATEGIES):
            raise InputError(f"{path}: key '{prefix}solve-strategy' is {strategy!r}, "
                             f"it must be one of {', '.join(SOLVE_STRATEGIES)}",
                             hint=f"use one of: {', '.join(SOLVE_STRATEGIES)}")
    if "exclude-newer" in ws:
        check_exclude_newer(ws["exclude-newer"], path, f"{table_key}.exclude-newer")
    for key in ("exclude-newer", "pypi-exclude-newer"):
        for name, value in expect_type(data.get(key, {}), dict, path, key, "a table of package cutoffs").items():
            check_exclude_newer(value, path, f"{key}.{name}")


def _feature_tables(data: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every table that holds feature keys, with its key prefix: the manifest root, features,
    inline environments (pixi_manifest/src/toml/environment.rs) and their ``target.<selector>`` tables."""
    tables: list[tuple[str, dict[str, Any]]] = [("", data)]
    for group in ("feature", "environments"):
        tables += [(f"{group}.{name}.", t) for name, t in _items(data.get(group))]
    for prefix, table in tables:
        yield prefix, table
        for sel, ttable in _items(table.get("target")):
            yield f"{prefix}target.{sel}.", ttable


def _items(value: Any) -> list[tuple[str, dict[str, Any]]]:
    return [(k, v) for k, v in value.items() if isinstance(v, dict)] if isinstance(value, dict) else []


def _solve_options(prefix: str, table: dict[str, Any]) -> Iterator[LockRefusal]:
    if table.get("channel-priority", "strict") != "strict":
        yield LockRefusal(f"{prefix}channel-priority", f"is '{table['channel-priority']}', {_SOLVE_OPTION}")
    if table.get("solve-strategy", "highest") != "highest":
        yield LockRefusal(f"{prefix}solve-strategy", f"is '{table['solve-strategy']}', {_SOLVE_OPTION}")


def lock_refusals(data: dict[str, Any], table_key: str) -> tuple[LockRefusal, ...]:
    """Every key of the parsed manifest ``data`` that ``rocmlock lock`` cannot honour, in manifest order."""
    out: list[LockRefusal] = []
    workspace = data.get(table_key, {})
    if "exclude-newer" in workspace:
        out.append(LockRefusal(f"{table_key}.exclude-newer", f"is {_SOLVE_OPTION}"))
    out += _solve_options(f"{table_key}.", workspace)
    for key in ("exclude-newer", "pypi-exclude-newer"):
        if key in data:
            out.append(LockRefusal(key, f"(per-package cutoffs) is {_SOLVE_OPTION}"))
    for prefix, table in _feature_tables(data):
        if prefix:
            out += _solve_options(prefix, table)
        out += [LockRefusal(f"{prefix}{key}", why) for key, why in _REASONS.items() if table.get(key)]
        for dkey in DEPENDENCY_TABLES:
            deps = table.get(dkey)
            out += [LockRefusal(f"{prefix}{dkey}.{name}", "is a source dependency (path, git or url)")
                    for name, spec in _items(deps) if is_source_dependency(spec)]
    return tuple(out)
