"""The packages of a pixi.lock that are not conda binaries: PyPI packages and source packages.

pixi records PyPI packages next to conda ones (``- pypi: <location>`` with ``name``, ``version`` and
``sha256``; rattler_lock crates/rattler_lock/src/parse/models/v7/pypi_package_data.rs) and packages it
builds itself as ``conda_source`` entries (pixi-build). An export can pin a PyPI package when the lock
names a downloadable archive and its sha256: pip's hash-checking mode (``--require-hashes``) accepts
nothing less. Everything else (a git checkout, a local path, an archive without a hash, a conda source
package) is built on the user's machine and so is a *source package* that no export can pin.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from rattler.lock import CondaLockedSourcePackage, LockedPackage, PypiLockedPackage

from rocmlock.errors import InputError, expect_type
from rocmlock.util.credentials import has_query, mask_query, redact_url, refuse_query

SourceKind = Literal["conda", "pypi"]
# pixi marks a direct URL dependency (`{ url = ... }`) with this prefix; the rest is the archive URL.
DIRECT_PREFIX = "direct+"


@dataclass(frozen=True)
class PypiPin:
    """A PyPI archive pinned by the lock: from an index (``url`` is None) or a direct URL."""

    name: str
    version: str
    sha256: str
    url: str | None = None
    # Where the archive is (index or direct URL, never written into an export; ``pack`` downloads it from there).
    location: str = field(default="", compare=False, repr=False)

    def requirement(self) -> str:
        """The requirement as pip reads it: ``name==version`` or ``name @ url``."""
        return f"{self.name} @ {self.url}" if self.url else f"{self.name}=={self.version}"


@dataclass(frozen=True)
class SourcePackage:
    """A package of the lock that no export can pin, and why."""

    kind: SourceKind
    name: str
    location: str
    reason: str

    def describe(self) -> str:
        return f"{self.name} ({self.kind}, {self.reason})"


def _sha256(pkg: LockedPackage) -> str | None:
    # py-rattler 0.28 wraps a missing hash table too: its accessors then fail on None.
    try:
        digest = pkg.hashes.sha256 if pkg.hashes is not None else None
    except AttributeError:
        return None
    return digest.hex() if digest else None


def _pypi(pkg: PypiLockedPackage) -> PypiPin | SourcePackage:
    location = str(pkg.location)
    scheme = location.split("://", 1)[0] if "://" in location else ""
    direct = scheme.startswith(DIRECT_PREFIX)
    base = scheme.removeprefix(DIRECT_PREFIX)
    # Kept as data only (never printed): a git location's ``?tag=...#<commit>`` is pixi's, but a query may be a secret.
    shown = mask_query(location)
    if base not in ("http", "https"):
        reason = "a git checkout" if base.startswith("git+") else "a local path" if not scheme else f"a {base} URL"
        return SourcePackage("pypi", pkg.name, shown, reason)
    sha = _sha256(pkg)
    if sha is None:
        return SourcePackage("pypi", pkg.name, shown, "no sha256 in pixi.lock")
    if direct and "?" in location:
        # pip needs the whole URL of a `name @ url` pin, and its query may be the secret (a presigned
        # X-Amz-Signature, a ?token=): not written. An index wheel is pinned by name, its URL never written.
        return SourcePackage("pypi", pkg.name, shown, "a URL with a query string, not written: it may hold a secret")
    url = redact_url(location.removeprefix(DIRECT_PREFIX)) if direct else None
    return PypiPin(pkg.name, str(pkg.version), sha, url, location.removeprefix(DIRECT_PREFIX))


def split_packages(packages: Sequence[LockedPackage]) -> tuple[list[PypiPin], list[SourcePackage]]:
    """The pinnable PyPI packages and the source packages among one platform's ``packages`` (sorted)."""
    pins: list[PypiPin] = []
    sources: list[SourcePackage] = []
    for pkg in packages:
        if isinstance(pkg, PypiLockedPackage):
            item = _pypi(pkg)
            (pins if isinstance(item, PypiPin) else sources).append(item)  # type: ignore[arg-type]
        elif isinstance(pkg, CondaLockedSourcePackage):
            sources.append(SourcePackage("conda", pkg.name, redact_url(str(pkg.location)), "built from source"))
    return sorted(pins, key=lambda p: p.name), sorted(sources, key=lambda s: (s.name, s.kind, s.location))


# What to do instead of writing an index's secret into its URL's query.
_QUERY_HINT = ("write the URL without a query and give pip its credentials in ~/.netrc or a keyring "
               "(user:password@ before the host works too: the exports leave it out)")


@dataclass(frozen=True)
class PypiIndexes:
    """Where pip looks for the pinned names (pixi's ``pypi-options``); empty: pip's own configuration.

    A URL with a query string is read as pixi reads it (uv keeps an index URL's query: uv-client
    src/registry_client.rs appends ``<name>/`` with ``path_segments_mut``), and never written into an export:
    :meth:`options` refuses it, naming the manifest key it came from (``keys``)."""

    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    # (URL, "<manifest>: key '<key>'") of every URL above that a manifest key gave: where a refusal points.
    keys: tuple[tuple[str, str], ...] = field(default=(), compare=False)

    def refuse_query(self, environment: str | None = None) -> None:
        """An InputError, the URL not shown, when a URL these options would write has a query string or fragment.

        pip cannot use such an index URL: it joins the project name onto it with ``posixpath.join``
        (pip/_internal/models/search_scope.py, ``get_index_urls_locations``), which lands inside the query."""
        used = [u for u in (self.index_url, *self.extra_index_urls, *self.find_links) if u and "://" in u]
        where = dict(reversed(self.keys))
        what = "rocmlock does not write into an export" + (f" of environment '{environment}'" if environment else "")
        for url in used:
            refuse_query(url, where.get(url, "pypi-options"), what=what, hint=_QUERY_HINT)

    def options(self, root: str = "") -> list[str]:
        """The options as requirements-file lines, credentials removed; ``root`` is the workspace as seen from
        the file written (a relative find-links path of pixi.toml is relative to the workspace). A URL with a
        query string is refused (:meth:`refuse_query`).

        pip reads a relative ``--find-links`` of a requirements file against that file's directory
        (pip/_internal/req/req_file.py, ``handle_option_line``), and conda writes an environment.yml's pip:
        list to a file beside the environment.yml and runs pip there (conda/env/installers/pip.py)."""
        self.refuse_query()
        lines = [f"--index-url {redact_url(self.index_url)}"] if self.index_url else []
        lines += [f"--extra-index-url {redact_url(u)}" for u in self.extra_index_urls]
        lines += [f"--find-links {redact_url(_link(u, root))}" for u in self.find_links]
        return lines


def _link(link: str, root: str) -> str:
    return link if not root or "://" in link or posixpath.isabs(link) else posixpath.join(root, link)


# pixi's default index is PyPI, which is pip's default too: nothing to write.
DEFAULT_INDEXES = PypiIndexes()


# An absolute URL: a scheme, then anything (pixi parses these keys with the url crate's Url::parse,
# pixi_manifest/src/toml/pypi_options.rs, which refuses a relative reference such as "pypi.example/simple").
_ABSOLUTE_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:\S+")


def _url(value: Any, path: Path, key: str) -> str:
    text = expect_type(value, str, path, key, "a URL")
    parsed = _ABSOLUTE_URL.fullmatch(text) is not None
    if parsed:
        try:
            urlsplit(text).port  # noqa: B018 - raises for an unclosed IPv6 host or a port past 65535, as url::Url does
        except ValueError:
            parsed = False
    if not parsed:
        # A value that is no URL is not redacted reliably (no scheme, no userinfo to find): shown only without
        # any place a secret could hide.
        shown = "not shown: it may hold a secret" if has_query(text) or "@" in text else repr(text)
        raise InputError(f"{path}: key '{key}' is not an absolute URL ({shown})",
                         hint="write the index with its scheme, e.g. https://pypi.example/simple")
    return text


def _urls(value: Any, path: Path, key: str) -> tuple[str, ...]:
    items = expect_type(value, list, path, key, "a list of URLs")
    return tuple(_url(item, path, f"{key}[{i}]") for i, item in enumerate(items))


def _find_links(value: Any, path: Path, key: str) -> tuple[str, ...]:
    out: list[str] = []
    for i, item in enumerate(expect_type(value, list, path, key, "a list of { url } or { path } tables")):
        entry = expect_type(item, dict, path, f"{key}[{i}]", "a { url } or { path } table")
        if len(entry) != 1 or not isinstance(next(iter(entry.values())), str) or next(iter(entry)) not in (
                "url", "path"):
            raise InputError(f"{path}: key '{key}[{i}]' must be {{ url = \"...\" }} or {{ path = \"...\" }}",
                             hint="write { url = \"https://...\" } or { path = \"...\" }")
        # pixi reads a relative path against the workspace: kept so (the exports must not depend on where the
        # checkout is) and written relative to the file that names it (PypiIndexes.options).
        out.append(_url(entry["url"], path, f"{key}[{i}].url") if "url" in entry else posixpath.normpath(entry["path"]))
    return tuple(out)


def _keys(path: Path, key: str, index: str | None, extra: tuple[str, ...], links: Any) -> tuple[tuple[str, str], ...]:
    where = [(index, f"{key}.index-url")] if index is not None else []
    where += [(url, f"{key}.extra-index-urls[{i}]") for i, url in enumerate(extra)]
    where += [(entry["url"], f"{key}.find-links[{i}].url") for i, entry in enumerate(links) if "url" in entry]
    return tuple((url, f"{path}: key '{k}'") for url, k in where)


def parse_pypi_options(value: Any, path: Path, key: str) -> PypiIndexes:
    """The index part of a ``pypi-options`` table (pixi_manifest/src/toml/pypi_options.rs); the other
    options (build isolation, index strategy, ...) decide how pixi resolves, not where pip finds a pin."""
    table = expect_type(value, dict, path, key, "a table")
    index = table.get("index-url")
    if index is not None:
        _url(index, path, f"{key}.index-url")
    extra = _urls(table.get("extra-index-urls", []), path, f"{key}.extra-index-urls")
    links = _find_links(table.get("find-links", []), path, f"{key}.find-links")
    return PypiIndexes(index, extra, links, _keys(path, key, index, extra, table.get("find-links", [])))


def _dedup(*parts: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(u for part in parts for u in part))


def merge_pypi_options(base: PypiIndexes, features: Sequence[tuple[str, PypiIndexes]], where: str) -> PypiIndexes:
    """An environment's indexes as pixi computes them (pixi_manifest/src/features_ext.rs, pypi_options):
    the features' options united (two different ``index-url`` are an error), then laid over the
    workspace's ``[workspace.pypi-options]``: a feature's index-url wins, lists are joined without repeats."""
    index: tuple[str, str] | None = None
    extra: tuple[str, ...] = ()
    links: tuple[str, ...] = ()
    keys = base.keys
    for name, opts in features:
        keys += opts.keys
        if opts.index_url is not None:
            if index is not None and index[1] != opts.index_url:
                raise InputError(f"{where}: features '{index[0]}' and '{name}' set different pypi-options index-url",
                                 hint="set index-url once (extra-index-urls may differ)")
            index = (name, opts.index_url)
        extra, links = _dedup(extra, opts.extra_index_urls), _dedup(links, opts.find_links)
    return PypiIndexes(index[1] if index else base.index_url, _dedup(base.extra_index_urls, extra),
                       _dedup(base.find_links, links), keys)


def render_requirements(header: Sequence[str], pins: Sequence[PypiPin], indexes: PypiIndexes, root: str = "") -> str:
    """A requirements file in pip's hash-checking format: every pin exact, each with its sha256 (``root``: see
    :meth:`PypiIndexes.options`)."""
    lines = [*header, *indexes.options(root)]
    for pin in sorted(pins, key=lambda p: p.name):
        lines += [f"{pin.requirement()} \\", f"    --hash=sha256:{pin.sha256}"]
    return "\n".join(lines) + "\n"
