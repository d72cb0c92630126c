"""A recipe's run requirements following an upstream release's pyproject.toml ``[project] dependencies``.

The dependencies are read from the sdist (``<name>-<version>/pyproject.toml``; PyPI's ``requires_dist``
reorders the bounds, the pyproject keeps them as upstream wrote them), mapped to conda-forge names
with the table in data/upstreams.toml, and written into ``requirements.run`` in place: an entry keeps
its position and the comments around it, a new dependency goes after its predecessor in the
pyproject, a dropped one leaves its group's comment to the entry before it.
"""

from __future__ import annotations

import io
import re
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from ruamel.yaml.comments import CommentedSeq
from ruamel.yaml.tokens import CommentToken

from rocmlock.errors import OperationError
from rocmlock.upstream.pins import Table
from rocmlock.upstream.yamledit import Document, restyle
from rocmlock.util.text import escape
from rocmlock.util.toml import tomllib

_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
# A PEP 440 version as a specifier holds it (a trailing .* for == and !=): nothing else goes into a match spec.
_VERSION = re.compile(r"(?:[0-9]+!)?[0-9]+(?:\.[0-9]+)*(?:[-_.]?(?:a|b|rc|alpha|beta|c|pre|preview|post|rev|r|dev)"
                      r"[-_.]?[0-9]*)*(?:\+[A-Za-z0-9.]+)?(?:\.\*)?", re.IGNORECASE)
_BY_HAND = "edit the recipe's run requirements by hand"


@dataclass(frozen=True)
class CondaRequirement:
    """One run requirement: conda-forge name and version spec (``""``: any)."""

    name: str
    spec: str

    @property
    def text(self) -> str:
        return f"{self.name} {self.spec}" if self.spec else self.name


def pyproject_dependencies(sdist: bytes, where: str) -> list[str]:
    """``[project] dependencies`` of the sdist's top-level pyproject.toml."""
    try:
        with tarfile.open(fileobj=io.BytesIO(sdist), mode="r:*") as tar:
            member = next(
                (
                    m
                    for m in tar.getmembers()
                    if m.isfile() and m.name.count("/") == 1 and m.name.endswith("/pyproject.toml")
                ),
                None,
            )
            if member is None:
                raise OperationError(
                    f"{where}: the sdist has no pyproject.toml", hint="edit the recipe by hand"
                )
            raw = tar.extractfile(member).read()  # type: ignore[union-attr]
    except tarfile.TarError as exc:
        raise OperationError(f"{where}: not a readable sdist ({escape(str(exc)[:200])})",
                             hint="check the release's files on PyPI; " + _BY_HAND) from None
    return _static_dependencies(raw, where)


def _static_dependencies(raw: bytes, where: str) -> list[str]:
    """``[project] dependencies`` of a pyproject.toml's bytes, each value checked (PEP 621: ``project`` a table,
    ``dynamic`` and ``dependencies`` arrays of strings); an OperationError naming what the sdist holds instead."""
    problem = f"{where}: the sdist's pyproject.toml"
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise OperationError(f"{problem} is not UTF-8 text (byte {exc.start})",
                             hint="edit the recipe's run requirements by hand") from None
    except tomllib.TOMLDecodeError as exc:
        raise OperationError(f"{problem} is not valid TOML ({exc})",
                             hint="edit the recipe's run requirements by hand") from None
    project = data.get("project", {})
    if not isinstance(project, dict):
        raise OperationError(f"{problem} has 'project' as {_toml_kind(project)}, not a table",
                             hint="edit the recipe's run requirements by hand")
    dynamic = _strings(project, "dynamic", problem)
    if "dependencies" in dynamic or "dependencies" not in project:
        raise OperationError(
            f"{where}: pyproject.toml has no static [project] dependencies",
            hint="edit the recipe's run requirements by hand",
        )
    return _strings(project, "dependencies", problem)


def _strings(project: dict[str, Any], key: str, problem: str) -> list[str]:
    value = project.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        got = _toml_kind(value) if not isinstance(value, list) else "an array with a value that is not a string"
        raise OperationError(f"{problem} has 'project.{key}' as {got}; PEP 621 makes it an array of strings",
                             hint="edit the recipe's run requirements by hand")
    return value


def _toml_kind(value: object) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a float", str: "a string", list: "an array",
             dict: "a table"}
    return names.get(type(value), "a date or time")


def conda_requirements(
    deps: Sequence[str], table: Table, pythons: Sequence[str], where: str
) -> list[CondaRequirement]:
    """The dependencies as conda requirements; markers are evaluated for Linux and every python built."""
    out: list[CondaRequirement] = []
    for dep in deps:
        shown = escape(dep[:200])  # the sdist's text: an escape sequence in it must not reach the terminal
        try:
            req = Requirement(dep)
        except InvalidRequirement as exc:
            raise OperationError(f"{where}: dependency '{shown}' is not a requirement ({escape(str(exc)[:200])})",
                                 hint=_BY_HAND) from None
        if req.url:
            raise OperationError(
                f"{where}: dependency '{shown}' is a URL, which a conda recipe cannot depend on", hint=_BY_HAND
            )
        for spec in req.specifier:
            # `===` (PEP 440's arbitrary equality) takes any text, escape sequences included; conda has no such
            # operator, and what it holds would go into recipe.yaml as it is.
            if spec.operator == "===" or not _VERSION.fullmatch(spec.version):
                raise OperationError(f"{where}: dependency '{shown}': '{escape(str(spec)[:80])}' is no version "
                                     "bound a conda match spec can hold", hint=_BY_HAND)
        if not _applies(req, pythons, where):
            continue
        out.append(CondaRequirement(table.conda_name(req.name), _spec_text(dep)))
    return out


def _applies(req: Requirement, pythons: Sequence[str], where: str) -> bool:
    if req.marker is None:
        return True
    # Overrides only: Marker.evaluate fills every other key from this interpreter's environment (packaging's
    # docs: "environment is an optional argument to override all or part of the determined environment").
    env = {"sys_platform": "linux", "platform_system": "Linux", "os_name": "posix"}
    verdicts = {
        req.marker.evaluate({**env, "python_version": py, "python_full_version": f"{py}.0"}) for py in pythons
    }
    if len(verdicts) > 1:
        raise OperationError(
            f"{where}: '{req}' applies to some of python {', '.join(pythons)} only",
            hint="a noarch recipe cannot express that; edit the recipe by hand",
        )
    return verdicts.pop()


def _spec_text(dep: str) -> str:
    """The version bounds as written (``>=4.55.0,<=5.6.0,!=4.52.0``), without extras, marker or spaces."""
    body = dep.split(";", 1)[0]
    body = body[_NAME.match(body).end() :]  # type: ignore[union-attr]
    body = re.sub(r"^\s*\[[^\]]*\]", "", body)
    return re.sub(r"[\s()]", "", body)


def entry_name(item: Any) -> str | None:
    """The package name of a run entry (``None`` for a conditional mapping)."""
    if not isinstance(item, str):
        return None
    match = _NAME.match(item)
    return match.group(1).lower() if match else None


def sync_run(doc: Document, reqs: Sequence[CondaRequirement], keep: Sequence[str]) -> list[str]:
    """Rewrite ``requirements.run`` of ``doc`` to ``reqs``; entries named in ``keep`` (and conditionals) stay.

    Returns a note per added or removed requirement.
    """
    run = (doc.data.get("requirements") or {}).get("run")
    if not isinstance(run, CommentedSeq):
        raise OperationError(f"{doc.path}: no requirements.run list to update",
                             hint="give the recipe a requirements.run list, or " + _BY_HAND)
    wanted = {r.name: r for r in reqs}
    notes: list[str] = []
    for i in reversed(range(len(run))):
        name = entry_name(run[i])
        if name is None or name in keep:
            continue
        if name in wanted:
            if str(run[i]) != wanted[name].text:
                run[i] = restyle(run[i], wanted[name].text)
        else:
            notes.append(f"removed {run[i]} (no longer a dependency)")
            _delete(run, i)
    present = {entry_name(item) for item in run}
    for index, req in enumerate(reqs):
        if req.name not in present:
            before = [r.name for r in reqs[:index] if r.name in present]
            _insert_after(run, before[-1] if before else None, req.text)
            present.add(req.name)
            notes.append(f"added {req.text}")
    return sorted(notes)


def _delete(run: CommentedSeq, i: int) -> None:
    """Delete entry ``i``; the full-line comments after it (a group's header) move to the entry before."""
    token = run.ca.items.get(i, [None])[0]
    del run[i]
    if token is None or i == 0 or "\n" not in token.value:
        return
    following = token.value.split("\n", 1)[1]
    if not following.strip():
        return
    prev = run.ca.items.setdefault(i - 1, [None, None, None, None])
    if prev[0] is None:
        prev[0] = CommentToken("\n" + following, token.start_mark, None)
    else:
        prev[0].value = prev[0].value + following


def _insert_after(run: CommentedSeq, name: str | None, text: str) -> None:
    """Insert ``text`` after the entry ``name`` (at the end when None), taking over the comment after it."""
    names = [entry_name(item) for item in run]
    at = names.index(name) + 1 if name is not None else len(run)
    run.insert(at, text)
    if at > 0 and at - 1 in run.ca.items:
        run.ca.items[at] = run.ca.items.pop(at - 1)


def retag_comments(doc: Document, old: str, new: str) -> None:
    """Comments of ``requirements.run`` that cite ``<old> pyproject.toml`` cite ``<new>`` instead."""
    run = doc.data["requirements"]["run"]
    for entry in run.ca.items.values():
        for token in entry:
            if isinstance(token, CommentToken):
                token.value = token.value.replace(f"{old} pyproject.toml", f"{new} pyproject.toml")
