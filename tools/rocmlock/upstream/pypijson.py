"""A typed parse of what an index answers to ``GET <index>/<name>/json`` (PyPI's JSON API), validated where it enters.

The shape follows Warehouse (``warehouse/legacy/api/json.py``, ``json_project``): an object with ``info``
(``version``, ``requires_dist``) and ``releases`` (version -> list of files, each with ``filename``, ``url``,
``packagetype``, ``digests.sha256`` and ``yanked``). A mirror, a proxy or a broken index may answer anything
else; every value that rocmlock uses is checked here, once, and anything else is a :class:`BadAnswer` (exit 1)
saying "the index at URL answered X for Y", so nothing further down meets a value of the wrong type and no
string from the answer reaches a file, a path or a terminal line unchecked (a value shown is ``ascii()``'d).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin, urlsplit

from rocmlock.errors import OperationError
from rocmlock.util.credentials import mask_query

# PEP 440 versions and the legacy ones PyPI still lists ("0.1-dev"): letters, digits and . + ! _ -.
_VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+!_-]{0,99}")
# PyPI's file names (wheel, sdist, egg): no path separator, no space, no control character.
_FILENAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+!~-]{0,199}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_WORD = re.compile(r"[a-z_]{0,40}")
_SHOWN = 60


class BadAnswer(OperationError):
    """An upstream answered something its API never does (a mirror, a proxy or a broken index)."""


@dataclass(frozen=True)
class File:
    """One file of a release on PyPI."""

    filename: str
    url: str
    sha256: str
    packagetype: str
    yanked: bool = False


@dataclass(frozen=True)
class Project:
    """A project's releases on PyPI (``/pypi/<name>/json``)."""

    name: str
    latest: str
    releases: tuple[tuple[str, tuple[File, ...]], ...]
    requires_dist: tuple[str, ...] = field(default=())

    def files(self, version: str) -> tuple[File, ...] | None:
        return dict(self.releases).get(version)

    def sdist(self, version: str) -> File | None:
        """The (not yanked) sdist of ``version``, if PyPI has one."""
        return next((f for f in self.files(version) or () if f.packagetype == "sdist" and not f.yanked), None)


def kind(value: object) -> str:
    """What a JSON value is, in words ("a JSON array", "a string", ...)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return f"the string {value[:_SHOWN]!a}"
    return "a JSON array" if isinstance(value, list) else "a JSON object" if isinstance(value, dict) else "a value"


def bad_answer(url: str, what: str, of: str) -> BadAnswer:
    """``the index at URL answered WHAT for OF``, the URL's secrets and query masked."""
    return BadAnswer(f"the index at {mask_query(url)} answered {what} for {of}",
                     hint="the index (a mirror or proxy?) is broken or is no PyPI JSON API; try again later, or "
                          "pass --index-url https://pypi.org/pypi")


def parse_project(name: str, data: object, url: str) -> Project:
    """``data`` (the decoded JSON at ``url``) as a :class:`Project`, or a :class:`BadAnswer`."""
    of = f"project '{name}'"
    if not isinstance(data, dict):
        raise bad_answer(url, kind(data), of)
    info = _member(data, "info", dict, {}, url, of)
    latest = _member(info, "version", str, "", url, of, "'info.version'")
    if latest and not _VERSION.fullmatch(latest):
        raise bad_answer(url, f"'info.version' {latest[:_SHOWN]!a}", of)
    requires = _member(info, "requires_dist", list, [], url, of, "'info.requires_dist'")
    if not all(isinstance(r, str) for r in requires):
        raise bad_answer(url, "'info.requires_dist' with an entry that is not a string", of)
    releases = _member(data, "releases", dict, {}, url, of)
    parsed = []
    for version, files in sorted(releases.items()):
        if not _VERSION.fullmatch(version):
            raise bad_answer(url, f"a release named {version[:_SHOWN]!a}", of)
        if not isinstance(files, list):
            raise bad_answer(url, f"release {version} as {kind(files)}", of)
        parsed.append((version, tuple(_file(row, url, f"{of} {version}") for row in files)))
    return Project(name, latest, tuple(parsed), tuple(requires))


def _member(table: dict[str, Any], key: str, expected: type, default: Any, url: str, of: str,
            label: str | None = None) -> Any:
    """``table[key]`` when it is an ``expected`` (``default`` when absent or null), else a BadAnswer."""
    value = table.get(key)
    if value is None:
        return default
    if not isinstance(value, expected) or (isinstance(value, bool) and expected is not bool):
        raise bad_answer(url, f"{label or repr(key)} as {kind(value)}", of)
    return value


def _file(row: object, url: str, of: str) -> File:
    if not isinstance(row, dict):
        raise bad_answer(url, f"a file as {kind(row)}", of)
    filename = row.get("filename")
    if not isinstance(filename, str):
        raise bad_answer(url, f"a file with 'filename' {kind(filename)}" if "filename" in row
                         else "a file without 'filename'", of)
    if not _FILENAME.fullmatch(filename):
        raise bad_answer(url, f"the file name {filename[:_SHOWN]!a}", of)
    of = f"{of}, file {filename}"
    digests = _member(row, "digests", dict, {}, url, of)
    sha256 = _member(digests, "sha256", str, "", url, of, "'digests.sha256'")
    if sha256 and not _SHA256.fullmatch(sha256):
        raise bad_answer(url, f"'digests.sha256' {sha256[:_SHOWN]!a}", of)
    packagetype = _member(row, "packagetype", str, "", url, of)
    if not _WORD.fullmatch(packagetype):
        raise bad_answer(url, f"'packagetype' {packagetype[:_SHOWN]!a}", of)
    return File(filename, _file_url(row, url, of), sha256, packagetype, _member(row, "yanked", bool, False, url, of))


def _file_url(row: dict[str, Any], url: str, of: str) -> str:
    # Mirrors may answer file URLs relative to the JSON document ("../../packages/..."; this host's PyPI
    # proxy does for torch): resolved here, once. Only http(s), and nothing a terminal or a log would misread.
    raw = _member(row, "url", str, None, url, of)
    if raw is None:
        raise bad_answer(url, "a file without 'url'", of)
    try:
        resolved = str(urljoin(url, raw))
        scheme = urlsplit(resolved).scheme
    except ValueError:  # "http://[::1/x": not a URL urllib can split
        resolved, scheme = raw, ""
    if scheme not in ("http", "https") or any(c.isspace() or not c.isprintable() for c in raw):
        raise bad_answer(url, f"the file URL {mask_query(resolved)[:_SHOWN]!a}", of)
    return resolved
