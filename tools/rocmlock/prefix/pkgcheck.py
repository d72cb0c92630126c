"""What a package would write, checked before rattler links it: every path stays inside the prefix.

rattler links what a package's ``info/paths.json`` lists, where it says: a ``../x`` path is linked beside the
prefix, and an absolute one makes ``rattler.install`` panic (the process aborts, the prefix half written).
The sha256 of a bundle's package says only that it is the packed file, not that it is harmless, so each
archive is read (rattler's ``PackageArchive``, no extraction) and refused, before anything is installed, when
a path of its tar entries, of ``info/paths.json`` (or ``info/files``, which rattler reads without one) or an
entry point of ``info/link.json`` is absolute, climbs with ``..``, holds a control character, or is a link
whose target leaves the prefix. A link's target is resolved as the kernel would in the finished prefix: through
the links of every package being installed (``d/up -> ..`` then ``esc -> d/up/..`` leaves it, though the text
``d/up/..`` reads as ``d``), and refused when any step climbs above the prefix or the chain is longer than
Linux follows (40 links, ELOOP; path_resolution(7)).
"""

from __future__ import annotations

import asyncio
import json
import posixpath
from pathlib import Path
from typing import Any

from rocmlock.errors import InputError
from rocmlock.util.fs import path_problem
from rocmlock.util.text import escape

CONCURRENT = 4
_MAX_LINKS = 40  # Linux's MAXSYMLINKS: path_resolution(7), "ELOOP"
_ENTRY_POINT_NAME = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


def link_problem(name: str, target: str) -> str | None:
    """Why the symbolic link ``name`` -> ``target`` would point outside the prefix, else None."""
    if not target or target.startswith("/") or not target.isprintable():
        return f"links to '{escape(target)}', outside the environment"
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(name), target))
    if resolved == ".." or resolved.startswith("../"):
        return f"links to '{escape(target)}', outside the environment"
    return None


def _parts(path: str) -> list[str]:
    return [part for part in path.split("/") if part not in ("", ".")]


class _Escape(Exception):
    """A path, followed through the install's links, climbs above the prefix ("out") or loops ("loop")."""


def _walk(start: list[str], todo: list[str], links: dict[str, str]) -> list[str]:
    """The components, from the prefix, of ``todo`` followed from the directory ``start`` as the kernel follows a
    path: a component that is one of ``links`` (keyed by where it sits) is replaced by its target, ``..`` goes up."""
    resolved, todo, hops = list(start), list(todo), 0
    while todo:
        part = todo.pop(0)
        if part == "..":
            if not resolved:
                raise _Escape("out")
            resolved.pop()
            continue
        target = links.get("/".join([*resolved, part]))
        if target is None:
            resolved.append(part)
            continue
        hops += 1
        if hops > _MAX_LINKS:
            raise _Escape("loop")
        if target.startswith("/"):
            raise _Escape("out")
        todo = _parts(target) + todo
    return resolved


def _placed(links: dict[str, str]) -> tuple[dict[str, str], dict[str, list[str]]]:
    """``links`` keyed by where each sits once the links of the directories above it are followed (``A -> .``
    puts ``A/B/esc`` at ``B/esc``), and each link's directory so resolved; an escape or a loop on the way is raised
    for the link it concerns."""
    placed = links
    for _ in range(_MAX_LINKS):
        moved: dict[str, str] = {}
        dirs: dict[str, list[str]] = {}
        for name, target in sorted(links.items()):
            parts = _parts(name)
            try:
                dirs[name] = _walk([], parts[:-1], placed)
            except _Escape as exc:
                raise _Escape(str(exc), name) from None
            moved.setdefault("/".join([*dirs[name], parts[-1]]), target)
        if moved == placed:
            return placed, dirs
        placed = moved
    raise _Escape("loop", min(links))


def chain_problem(links: dict[str, str]) -> tuple[str, str] | None:
    """(link, why) for the first link (sorted) of ``links`` (every symbolic link the install creates, path in the
    prefix -> target) whose target, resolved through the others as the kernel resolves a path (the link's own
    directory through them too), climbs above the prefix or loops; None when each stays inside."""
    links = {posixpath.normpath(name): target for name, target in links.items()}

    def why(name: str, kind: str) -> tuple[str, str]:
        if kind == "loop":
            return name, f"links to '{escape(links[name])}', a chain of more than {_MAX_LINKS} links (a loop)"
        return name, f"links to '{escape(links[name])}', which leaves the environment through its links"

    try:
        placed, dirs = _placed(links)
    except _Escape as exc:
        return why(exc.args[1], exc.args[0])
    for name in sorted(links):
        try:
            _walk(dirs[name], _parts(links[name]), placed)
        except _Escape as exc:
            return why(name, str(exc.args[0]))
    return None


def _listed(raw: bytes | None, what: str) -> list[str]:
    """The paths ``info/paths.json`` (``what`` "paths") or ``info/files`` lists."""
    if raw is None:
        return []
    if what == "files":
        return raw.decode("utf-8", "replace").splitlines()
    data = json.loads(raw)
    return [str(entry.get("_path")) if isinstance(entry, dict) else "" for entry in data.get("paths", [])]


def _entry_points(raw: bytes | None) -> list[str]:
    """The script names ``info/link.json``'s noarch python entry points create in ``bin/``."""
    if raw is None:
        return []
    data: Any = json.loads(raw)
    points = ((data.get("noarch") or {}).get("entry_points") or []) if isinstance(data, dict) else []
    return [str(p).split("=")[0].strip() for p in points]


async def _problem(archive: Path, links: dict[str, str]) -> str | None:
    """Why the package at ``archive`` could write outside the prefix, else None; its links added to ``links``."""
    from rattler.package_streaming import PackageArchive

    pkg = await PackageArchive.from_path(archive)
    for section in ("info", "pkg"):
        async for entry in pkg.stream(section):
            problem = path_problem(entry.name)
            if problem is None and entry.is_symlink:
                problem = link_problem(entry.name, entry.link_target or "")
                if problem is None and section == "pkg":
                    links[entry.name] = entry.link_target or ""
            elif problem is None and entry.is_hardlink:
                problem = path_problem(entry.link_target or "")
            if problem:
                return f"its entry '{escape(entry.name)}' {problem}"
    files = await pkg.read_files(["info/paths.json", "info/files", "info/link.json"])
    listed = _listed(files.get("info/paths.json"), "paths") or _listed(files.get("info/files"), "files")
    for path in listed:
        problem = path_problem(path)
        if problem:
            return f"info/paths.json names '{escape(path)}', which {problem}"
    for name in _entry_points(files.get("info/link.json")):
        if not name or not set(name) <= _ENTRY_POINT_NAME or name.startswith("."):
            return f"info/link.json has the entry point '{escape(name)}', not a plain script name"
    return None


def check_packages(archives: dict[str, Path], shown: Path, hint: str) -> None:
    """Refuse (exit 2) the first of ``archives`` (bundle member -> file) whose paths leave the prefix."""

    async def first_problem() -> tuple[str, str] | None:
        limit = asyncio.Semaphore(CONCURRENT)

        async def one(member: str, path: Path) -> tuple[str, str] | None:
            async with limit:
                try:
                    problem = await _problem(path, links[member])
                except (OSError, ValueError, RuntimeError, AttributeError, TypeError) as exc:
                    problem = f"cannot be read as a conda package: {escape(str(exc))}"
            return None if problem is None else (member, problem)

        links: dict[str, dict[str, str]] = {member: {} for member in archives}
        found = await asyncio.gather(*(one(m, p) for m, p in sorted(archives.items())))
        first = next((f for f in found if f is not None), None)
        if first is not None:
            return first
        # The links of all packages together, as they will sit in one prefix (a later package's wins, as when
        # rattler clobbers; which one does not matter: either must stay inside).
        owner = {name: member for member in sorted(links) for name in links[member]}
        union = {name: target for member in sorted(links) for name, target in links[member].items()}
        chain = chain_problem(union)
        return None if chain is None else (owner[chain[0]], f"its entry '{escape(chain[0])}' {chain[1]}")

    problem = asyncio.run(first_problem())
    if problem is not None:
        raise InputError(f"{shown}: {problem[0]}: {problem[1]}; nothing was installed", hint=hint)
