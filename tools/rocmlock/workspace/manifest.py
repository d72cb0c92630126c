"""``pixi.toml`` (or a ``pyproject.toml`` with ``[tool.pixi]``) read once and validated into a :class:`Workspace`.

pixi.toml is TOML 1.1 (multi-line inline tables, trailing commas), read with ``tomli`` as pixi reads
it. Every key pixi 0.77 accepts is accepted here. The keys that decide a conda solve are modelled;
keys that change a solve in ways ``rocmlock lock`` cannot honour (PyPI dependencies, source
dependencies, solve options pixi records in its lock, ...) are listed in ``Workspace.lock_refusals``
(rocmlock.workspace.pixi_keys), so that ``lock`` refuses them while ``export`` and the others work; keys that
do not change a solve (tasks, activation, ...) are ignored.

The tables are read in :mod:`rocmlock.workspace.tables`; the :class:`Workspace` and an environment resolved
from its features are in :mod:`rocmlock.workspace.model`.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from rocmlock.errors import InputError, expect_type
from rocmlock.workspace.model import Workspace
from rocmlock.workspace.pixi_keys import check_known_keys, check_solve_options, lock_refusals
from rocmlock.workspace.platforms import parse_platforms
from rocmlock.workspace.pypi import parse_pypi_options
from rocmlock.workspace.pyproject import (
    PYPROJECT,
    find_manifest,
    pixi_manifest,
    read_manifest_text,
    under_tool_pixi,
)
from rocmlock.workspace.tables import (
    parse_channels,
    parse_environments,
    parse_feature,
    parse_priority,
    referenced_platforms,
)

__all__ = ["load_workspace", "parse_workspace"]


# ----------------------------------------------------------------------------- parsing


def load_workspace(path: str | Path) -> Workspace:
    """Read and validate ``pixi.toml`` or a ``pyproject.toml`` with ``[tool.pixi]`` (a file or its directory)."""
    path = find_manifest(Path(path))
    try:
        text = read_manifest_text(path)
    except FileNotFoundError:
        raise InputError(f"{path}: no such manifest", hint="pass --manifest-path to a pixi.toml") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read manifest: {exc.strerror}",
                         hint="check its permissions") from None
    except UnicodeDecodeError as exc:  # pixi reads the manifest as UTF-8 too (TOML requires it)
        raise InputError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.object[exc.start:exc.start + 1]!r})",
                         hint="save pixi.toml as UTF-8") from None
    # TOML 1.1 (multi-line inline tables, trailing commas), which pixi reads and Python 3.11's tomllib
    # (TOML 1.0) does not. Imported here: `rocmlock unpack` on a bare node never reads a manifest.
    import tomli

    try:
        data = tomli.loads(text)
    except tomli.TOMLDecodeError as exc:
        raise InputError(f"{path}: invalid TOML: {exc}", hint="fix the syntax at that line") from None
    except RecursionError as exc:  # tomli: "TOML inline arrays/tables are nested more than the allowed 400 levels"
        raise InputError(f"{path}: invalid TOML: {exc}", hint="flatten the nesting") from None
    ws = load_pyproject(data, path.resolve()) if path.name == PYPROJECT else parse_workspace(data, path.resolve())
    return replace(ws, source=text.encode("utf-8"))


def parse_workspace(data: dict[str, Any], path: Path) -> Workspace:
    """Build a :class:`Workspace` from parsed TOML; every error names ``path`` and the key."""
    table_key = "workspace" if "workspace" in data else "project" if "project" in data else None
    if table_key is None:
        hint = "this is a package manifest (pixi-build): pass the workspace's pixi.toml" if "package" in data \
            else "add [workspace] with name, channels, platforms"
        raise InputError(f"{path}: missing [workspace] table", hint=hint)
    ws = expect_type(data[table_key], dict, path, table_key, "a table")
    if "channels" not in ws:
        raise InputError(f"{path}: [{table_key}] has no 'channels'", hint=f"add channels = [...] to [{table_key}]")
    channels = parse_channels(ws["channels"], path, f"{table_key}.channels")
    # `channels = []` is a valid pixi workspace (prefix-dev/pixi tests/data/workspaces/host-dependency: its lock
    # has `channels: []`); rocmlock refuses it only where an environment has something to solve
    # (rocmlock.lock.solve.make_job).
    # pixi_manifest toml/workspace.rs: `platforms` is optional (none: every environment has no platform).
    platforms = parse_platforms(ws.get("platforms", []), path, f"{table_key}.platforms")
    priority = parse_priority(ws.get("channel-priority", "strict"), path, f"{table_key}.channel-priority")
    check_solve_options(ws, data, path, table_key)
    features = {"default": parse_feature("default", data, path, "", top=True)}
    for fname, ftable in expect_type(data.get("feature", {}), dict, path, "feature", "a table").items():
        if fname == "default":  # pixi_manifest toml/manifest.rs: the top-level tables are the default feature
            raise InputError(f"{path}: key 'feature.default': the feature 'default' is reserved and cannot be redefined",
                             hint="put its tables at the top level ([dependencies], ...) or give the feature another name")
        expect_type(ftable, dict, path, f"feature.{fname}", "a table")
        features[fname] = parse_feature(fname, ftable, path, f"feature.{fname}.")
    envs = parse_environments(data.get("environments", {}), path, features)
    platforms = referenced_platforms(platforms, features, path)
    check_known_keys(data, path, table_key)  # last, as pixi's TableHelper::finalize: a wrong type is named first
    return Workspace(
        path=path,
        name=expect_type(ws.get("name", path.parent.name), str, path, f"{table_key}.name", "a string"),
        channels=channels,
        platforms=platforms,
        channel_priority=priority,
        features=features,
        environment_specs=envs,
        lock_refusals=lock_refusals(data, table_key),
        deprecated=deprecated_keys(data, table_key),
        pypi_options=parse_pypi_options(ws.get("pypi-options", {}), path, f"{table_key}.pypi-options"),
    )


_RENAMED = {"host-dependencies": "dependencies", "build-dependencies": "dependencies"}


def deprecated_keys(data: dict[str, Any], table_key: str) -> tuple[tuple[str, str], ...]:
    """(key, its new name) of every key pixi reads and warns about as renamed (pixi_manifest toml/manifest.rs and
    toml/feature.rs, Deprecation::renamed_field): ``[project]`` for ``[workspace]``, ``host-dependencies`` and
    ``build-dependencies`` for ``dependencies`` at the top level and in a feature (a target's are read without a
    word, toml/target.rs; an environment's inline keys refuse them). Types are checked already."""
    found = [("project", "workspace")] if table_key == "project" else []
    tables: list[tuple[str, Any]] = [("", data)]
    tables += [(f"feature.{name}.", t) for name, t in (data.get("feature") or {}).items()]
    for prefix, table in tables:
        found += [(f"{prefix}{old}", f"{prefix}{new}") for old, new in _RENAMED.items() if old in table]
    return tuple(found)


def load_pyproject(data: dict[str, Any], path: Path) -> Workspace:
    """The workspace of a parsed ``pyproject.toml`` at ``path``."""
    manifest, refusals = pixi_manifest(data, path)
    try:
        ws = parse_workspace(manifest, path)
    except InputError as exc:
        raise under_tool_pixi(exc, path) from None
    own = tuple(replace(r, key=f"tool.pixi.{r.key}") for r in ws.lock_refusals)
    return replace(ws, lock_refusals=own + refusals)
