"""A pixi workspace kept in ``pyproject.toml``, read as pixi 0.77 reads it.

pixi takes the manifest from ``[tool.pixi]`` and adds to it from the standard tables
(crates/pixi_manifest/src/pyproject.rs, ``into_workspace_manifest``, tag v0.77.0):

- the workspace ``name`` from ``[project] name`` when ``[tool.pixi.workspace]`` has none;
- a ``python`` run dependency of the default feature from ``requires-python`` (any python without it),
  unless ``[tool.pixi.dependencies]`` already names python (``version_or_url_to_spec``: a leading ``==``
  is dropped);
- ``[project] dependencies`` as PyPI dependencies of the default feature, and each
  ``[project.optional-dependencies]`` extra and ``[dependency-groups]`` group as a feature of that name
  holding its PyPI dependencies (an environment still has to list the feature).

A directory's manifest is its ``pixi.toml``, else a ``pyproject.toml`` with a ``[tool.pixi]`` table
(pixi_manifest/src/discovery.rs). Errors name keys as written: ``tool.pixi.<key>``, ``project.dependencies``.
"""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path
from typing import Any

from rocmlock.errors import InputError, expect_type
from rocmlock.util.text import escape
from rocmlock.workspace.pixi_keys import LockRefusal

PYPROJECT = "pyproject.toml"
# A manifest larger than this is no workspace anyone wrote (pixi's own largest test manifests are a few KiB).
MANIFEST_LIMIT = 16 << 20
_PYPI_REASON = "holds PyPI dependencies; rocmlock lock solves conda packages only"


def read_manifest_text(path: Path) -> str:
    """The text of the manifest at ``path``: a regular file only (a FIFO or a link to ``/dev/zero`` would hang or
    fill memory), at most :data:`MANIFEST_LIMIT` bytes, UTF-8 as TOML requires (an InputError, a missing file's
    FileNotFoundError or a UnicodeDecodeError otherwise)."""
    from rocmlock.util.fs import read_regular

    return read_regular(path, MANIFEST_LIMIT, "a manifest is a file", hint="pass --manifest-path to a pixi.toml"
                        ).decode("utf-8")


def _has_pixi_table(path: Path) -> bool:
    import tomli

    try:
        data = tomli.loads(read_manifest_text(path))
    except (OSError, InputError, UnicodeDecodeError, RecursionError, tomli.TOMLDecodeError):
        return False
    tool = data.get("tool")
    return isinstance(tool, dict) and isinstance(tool.get("pixi"), dict)


def find_manifest(path: Path) -> Path:
    """The manifest ``path`` names: a directory's ``pixi.toml``, else its ``pyproject.toml`` with ``[tool.pixi]``;
    a missing ``pixi.toml`` (the CLI's default) beside such a ``pyproject.toml`` is that file too."""
    directory = path if path.is_dir() else path.parent if path.name == "pixi.toml" and not path.exists() else None
    if directory is None:
        return path
    pyproject = directory / PYPROJECT
    if not (directory / "pixi.toml").exists() and pyproject.is_file() and _has_pixi_table(pyproject):
        return pyproject
    return directory / "pixi.toml"


def _python_spec(project: dict[str, Any], path: Path) -> str:
    requires = project.get("requires-python")
    if requires is None:
        return "*"
    text = re.sub(r"\s+", "", expect_type(requires, str, path, "project.requires-python", "a version specifier"))
    return text.removeprefix("==") or "*"


def _groups(data: dict[str, Any], project: dict[str, Any], path: Path) -> dict[str, tuple[str, list[Any]]]:
    """Extra or group name -> (its key as written, its requirements)."""
    out: dict[str, tuple[str, list[Any]]] = {}
    for key, table in (("project.optional-dependencies", project.get("optional-dependencies", {})),
                       ("dependency-groups", data.get("dependency-groups", {}))):
        for name, reqs in expect_type(table, dict, path, key, "a table of requirement lists").items():
            out[name] = (f"{key}.{name}", expect_type(reqs, list, path, f"{key}.{name}", "a list of requirements"))
            if key == "project.optional-dependencies":  # (a dependency group may also hold {include-group = ...})
                for index, requirement in enumerate(reqs):
                    expect_type(requirement, str, path, f"{key}.{name}[{index}]", "a requirement string")
    return out


def pixi_manifest(data: dict[str, Any], path: Path) -> tuple[dict[str, Any], tuple[LockRefusal, ...]]:
    """The pixi manifest of a parsed ``pyproject.toml`` as a pixi.toml-shaped table, and the lock refusals
    its standard tables add (their PyPI dependencies)."""
    tool = data.get("tool")
    pixi = tool.get("pixi") if isinstance(tool, dict) else None
    if not isinstance(pixi, dict):
        raise InputError(f"{path}: no [tool.pixi] table, so pixi does not read this file",
                         hint="add [tool.pixi.workspace] with channels and platforms, or pass a pixi.toml")
    table_key = "workspace" if "workspace" in pixi else "project" if "project" in pixi else None
    if table_key is None:
        raise InputError(f"{path}: missing [tool.pixi.workspace] table",
                         hint="add [tool.pixi.workspace] with channels and platforms")
    manifest = copy.deepcopy(pixi)
    project = expect_type(data.get("project", {}), dict, path, "project", "a table")
    ws = expect_type(manifest[table_key], dict, path, f"tool.pixi.{table_key}", "a table")
    if "name" not in ws and "name" in project:
        ws["name"] = expect_type(project["name"], str, path, "project.name", "a string")
    # PEP 621's types, as pixi's pyproject reader (the pyproject-toml crate) holds them: a wrong one is refused.
    for index, name in enumerate(expect_type(project.get("dynamic", []), list, path, "project.dynamic",
                                             "a list of field names")):
        expect_type(name, str, path, f"project.dynamic[{index}]", "a field name")
    deps = expect_type(manifest.setdefault("dependencies", {}), dict, path, "tool.pixi.dependencies", "a table")
    if "python" not in deps:
        deps["python"] = _python_spec(project, path)
    refusals: list[LockRefusal] = []
    requirements = expect_type(project.get("dependencies", []), list, path, "project.dependencies",
                               "a list of requirements")
    for index, requirement in enumerate(requirements):
        expect_type(requirement, str, path, f"project.dependencies[{index}]", "a requirement string")
    if requirements:
        refusals.append(LockRefusal("project.dependencies", _PYPI_REASON))
    features = expect_type(manifest.setdefault("feature", {}), dict, path, "tool.pixi.feature", "a table")
    for name, (key, reqs) in _groups(data, project, path).items():
        features.setdefault(name, {})
        if reqs:
            refusals.append(LockRefusal(key, _PYPI_REASON))
    return manifest, tuple(refusals)


_KEY = re.compile(r"key '|\[(workspace|project)\]")


def under_tool_pixi(exc: InputError, path: Path) -> InputError:
    """``exc`` with its keys named as the pyproject.toml spells them (``tool.pixi.``)."""
    prefix = f"{path}: "
    body = exc.message.removeprefix(prefix)

    def spell(m: re.Match[str]) -> str:
        return "key 'tool.pixi." if m.group(0) == "key '" else f"[tool.pixi.{m.group(1)}]"

    hint = _KEY.sub(spell, exc.hint) if exc.hint else exc.hint
    return InputError(prefix + _KEY.sub(spell, body) if exc.message.startswith(prefix) else exc.message, hint=hint)


def _toml_or_none(text: str) -> dict[str, Any] | None:
    import tomli

    try:
        return tomli.loads(text)
    except (RecursionError, tomli.TOMLDecodeError):
        return None


def _present_text(path: Path) -> str | None:
    """The text of the manifest ``path`` for discovery: None when there is no such name at all; an InputError (one
    line) when the name is there but is no regular file it can read (a FIFO, a directory, a link to ``/dev/zero``,
    a dangling link, a loop, a file it may not read).

    pixi asks ``is_file()`` first and then reads with ``?`` (pixi_manifest/src/discovery.rs ``provenance_from_dir``
    and ``WorkspaceDiscoverer::discover``, manifests/provenance.rs ``ManifestProvenance::read``, tag v0.77.0): a
    regular file it cannot read stops the search with that I/O error. Other kinds pixi passes over, walking up to
    an outer workspace; rocmlock stops at those too (issue 41), as a lock written into the workspace above, for a
    manifest the user meant to be here, is worse than one line saying what is wrong with it."""
    if not os.path.lexists(path):
        return None
    try:
        return read_manifest_text(path)
    except UnicodeDecodeError:
        return ""  # there, and not TOML: loading it says so
    except OSError as exc:
        why = "a dangling link" if isinstance(exc, FileNotFoundError) else (exc.strerror or type(exc).__name__)
        raise InputError(f"{escape(str(path))}: cannot be read ({why.lower()}); it stops the search for a "
                         "workspace here", hint=_BROKEN_HINT) from None
    except InputError as exc:
        raise InputError(f"{exc.message}; it stops the search for a workspace here", hint=_BROKEN_HINT) from None


_BROKEN_HINT = "fix or remove it, or pass --manifest-path to the workspace's pixi.toml"


def discover_manifest(start: Path) -> Path | None:
    """The workspace manifest pixi finds from ``start`` (pixi_manifest/src/discovery.rs, WorkspaceDiscoverer):
    ``start`` and then each parent, the first directory whose ``pixi.toml`` has a ``[workspace]`` (or
    ``[project]``) table, or, where there is no ``pixi.toml``, whose ``pyproject.toml`` has
    ``[tool.pixi.workspace]`` (or ``[tool.pixi.project]``). A package-only manifest is passed over; one that is
    no valid TOML stops the search there (pixi reports it; so does loading it), and so does one that is there but
    cannot be read (:func:`_present_text`: an InputError). None when no directory has one."""
    for directory in (start, *start.parents):
        pixi = directory / "pixi.toml"
        text = _present_text(pixi)
        if text is not None:
            data = _toml_or_none(text)
            if data is None or "workspace" in data or "project" in data:
                return pixi
            continue
        pyproject = directory / PYPROJECT
        text = _present_text(pyproject)
        if text is not None:
            data = _toml_or_none(text)
            if data is None:
                if "[tool.pixi" in text:
                    return pyproject
                continue
            tool = data.get("tool")
            pixi_table = tool.get("pixi") if isinstance(tool, dict) else None
            if isinstance(pixi_table, dict) and ("workspace" in pixi_table or "project" in pixi_table):
                return pyproject
    return None
