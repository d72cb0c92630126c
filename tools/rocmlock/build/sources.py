"""The sources a build needs, and a source cache that holds them for build hosts without network.

rattler-build keeps what it downloads in ``<output>/src_cache`` (rattler-build 0.73,
crates/rattler_build_core/src/source/mod.rs ``fetch_sources``): one ``.metadata/<key>.json`` per
entry (crates/rattler_build_source_cache/src/index.rs ``CacheEntry``) naming the archive
(``<key>_<file>``), its extracted tree (``<key>_extracted``) or a git checkout
(``git/checkouts/<h>/<rev>``), all relative to the cache directory. A lookup finds the entry by its
key (a hash of the URL and sha256, or of the git URL and rev) and, when its paths exist, uses them
without any network access (crates/rattler_build_source_cache/src/cache.rs ``try_url`` /
``get_git_source``). So a cache filled by rattler-build itself on a connected host (see
:mod:`rocmlock.build.sourcefetch`) and copied into the build's output directory makes the build offline.

``rocmlock-sources.json`` beside the entries is rocmlock's manifest: which source (URL without
credentials, sha256 or rev) is which cache key, so the build host can check that every source is
there, and its archive's sha256, before a build starts instead of failing on a network timeout.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from rocmlock.build.plan import Plan, Variant
from rocmlock.errors import InputError
from rocmlock.util.credentials import redact_url
from rocmlock.util.fs import file_sha256, path_problem, write_atomic
from rocmlock.util.text import escape

SourceKind = Literal["url", "git"]
MANIFEST = "rocmlock-sources.json"
METADATA = ".metadata"


@dataclass(frozen=True)
class Source:
    """One downloadable source of the rendered recipes (``path`` sources are local and not listed)."""

    kind: SourceKind
    url: str  # as the recipe renders it: it may hold credentials, so it is never printed or written
    pin: str  # the sha256 of a url source, the rev of a git source
    file_name: str | None
    used_by: tuple[str, ...]  # variant ids
    recipe: str  # the first recipe that uses it, for messages

    @property
    def shown(self) -> str:
        return redact_url(self.url)

    @property
    def identity(self) -> tuple[str, str, str, str]:
        """What the manifest matches on: no credentials, and the same on every host."""
        return (self.kind, self.shown, self.pin, self.file_name or "")

    def recipe_entry(self) -> dict[str, Any]:
        """The source as a recipe's ``source:`` item (no patches, filters or target directory)."""
        entry: dict[str, Any] = {"url": self.url, "sha256": self.pin} if self.kind == "url" else \
            {"git": self.url, "rev": self.pin}
        if self.file_name:
            entry["file_name"] = self.file_name
        return entry


_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,254}")  # a file name of .metadata/, never a path


@dataclass(frozen=True)
class CachedSource:
    """A manifest entry: a source, its cache key and the cache paths (relative) that make it up."""

    kind: SourceKind
    url: str  # without credentials
    pin: str
    file_name: str | None
    key: str
    paths: tuple[str, ...]
    commit: str | None = None

    @property
    def identity(self) -> tuple[str, str, str, str]:
        return (self.kind, self.url, self.pin, self.file_name or "")

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "url": self.url, "sha256" if self.kind == "url" else "rev": self.pin,
                "file_name": self.file_name, "key": self.key, "paths": list(self.paths), "commit": self.commit}

    @staticmethod
    def from_json(data: dict[str, Any]) -> CachedSource:
        """An entry of a manifest that came from another host: every field checked (a ValueError saying which),
        since its key and paths are joined to the cache and the build's output directories."""
        if not isinstance(data, dict) or data.get("kind") not in ("url", "git"):
            raise ValueError("an entry's kind is not 'url' or 'git'")
        kind = data["kind"]
        pin_key = "sha256" if kind == "url" else "rev"
        for name in ("url", pin_key, "key"):
            if not isinstance(data.get(name), str) or not data[name].isprintable():
                raise ValueError(f"an entry's {name} is not a string of printable characters")
        for name in ("file_name", "commit"):
            if data.get(name) is not None and not (isinstance(data[name], str) and data[name].isprintable()):
                raise ValueError(f"an entry's {name} is not a string of printable characters")
        if not _KEY.fullmatch(data["key"]):
            raise ValueError(f"the key {data['key'][:80]!r} is no cache key (letters, digits, '.', '_', '-')")
        paths = data.get("paths")
        if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
            raise ValueError("an entry's paths is not a list of strings")
        for rel in paths:
            problem = path_problem(rel) or ("has an empty part" if "" in rel.split("/") else None)
            if problem:
                raise ValueError(f"the path {rel[:80]!r} leaves the cache: it {problem}")
        return CachedSource(kind, data["url"], data[pin_key], data.get("file_name"), data["key"], tuple(paths),
                            data.get("commit"))


# ----------------------------------------------------------------------------- what the plan needs


def plan_sources(plan: Plan, variants: Iterable[Variant]) -> tuple[Source, ...]:
    """Every url and git source of ``variants``' rendered recipes, once each, sorted."""
    found: dict[tuple[str, str, str, str], Source] = {}
    for variant in variants:
        for source in _variant_sources(plan, variant):
            seen = found.get((source.kind, source.url, source.pin, source.file_name or ""))
            if seen is not None:
                source = Source(seen.kind, seen.url, seen.pin, seen.file_name, (*seen.used_by, variant.id),
                                seen.recipe)
            found[(source.kind, source.url, source.pin, source.file_name or "")] = source
    return tuple(sorted(found.values(), key=lambda s: (s.identity, s.url)))


def _variant_sources(plan: Plan, variant: Variant) -> list[Source]:
    from rocmlock.build.recipes import render_exact

    recipe = plan.recipe_path(variant)
    rendered = render_exact(recipe, dict(variant.variant), variant.subdir, variant.build_string)
    if rendered is None:
        raise InputError(f"{variant.recipe} no longer renders build {variant.build_string}",
                         hint="re-run `rocmlock plan`: the recipe or variants.yaml changed")
    out = []
    for index, item in enumerate(rendered.recipe.sources):
        source = _source(item.to_dict(), recipe, index, variant.id)
        if source is not None:
            out.append(source)
    return out


def _source(data: dict[str, Any], recipe: Path, index: int, variant_id: str) -> Source | None:
    where = f"{recipe}: source {index}"
    if "git" in data:
        if not data.get("rev"):
            raise InputError(f"{where}: git source without a rev", hint="pin the commit: `rev: <40-hex sha>`")
        return Source("git", _git_location(str(data["git"]), recipe.parent), str(data["rev"]), None, (variant_id,),
                      str(recipe))
    if "url" not in data:
        return None  # a path source: on disk already
    urls = data["url"] if isinstance(data["url"], list) else [data["url"]]
    if len(urls) != 1:
        raise InputError(f"{where}: {len(urls)} mirror URLs", hint="an offline cache needs one URL per source")
    if not data.get("sha256"):
        raise InputError(f"{where}: url source without sha256 ({redact_url(str(urls[0]))})",
                         hint="add `sha256:`: a cache entry must be verifiable")
    return Source("url", str(urls[0]), str(data["sha256"]).lower(), data.get("file_name"), (variant_id,),
                  str(recipe))


def _git_location(value: str, recipe_dir: Path) -> str:
    """A git URL as is; a local path made absolute (rattler-build resolves it against the recipe's directory)."""
    if "://" in value or ("@" in value and ":" in value.split("@", 1)[1]):
        return value
    return str((recipe_dir / value).resolve())


# ----------------------------------------------------------------------------- the cache directory


def read_manifest(cache: Path) -> dict[tuple[str, str, str, str], CachedSource]:
    """The manifest of ``cache`` (empty when there is none)."""
    path = cache / MANIFEST
    if not path.is_file():
        return {}
    try:
        entries = [CachedSource.from_json(e) for e in json.loads(path.read_text())["sources"]]
        return {e.identity: e for e in entries}
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        raise InputError(f"{path}: not a rocmlock source manifest ({escape(str(exc))})",
                         hint="fill the directory again with `rocmlock sources fetch`") from None


def render_manifest(entries: Iterable[CachedSource]) -> str:
    """The manifest text: entries sorted by source, no timestamps."""
    ordered = sorted(entries, key=lambda e: e.identity)
    return json.dumps({"version": 1, "sources": [e.to_json() for e in ordered]}, indent=2, sort_keys=True) + "\n"


def entry_problem(cache: Path, entry: CachedSource) -> str | None:
    """Why ``entry`` is not usable in ``cache`` (missing index file or path, archive hash), else ``None``."""
    if not (cache / METADATA / f"{entry.key}.json").is_file():
        return f"its index entry {METADATA}/{entry.key}.json is missing"
    missing = [p for p in entry.paths if not (cache / p).exists()]
    if missing:
        return f"{missing[0]} is missing"
    if entry.kind == "url":
        archive = cache / entry.paths[0]
        actual = file_sha256(archive)
        if actual != entry.pin:
            return f"{entry.paths[0]} has sha256 {actual}, not {entry.pin}"
    return None


def check_cache(cache: Path, sources: Iterable[Source]) -> tuple[CachedSource, ...]:
    """The manifest entries of ``sources``; an InputError naming the first source ``cache`` lacks."""
    if not cache.is_dir():
        raise InputError(f"{cache}: no such source cache directory",
                         hint="fill one with `rocmlock sources fetch --to DIR` on a host with network")
    manifest = read_manifest(cache)
    found = []
    for source in sources:
        entry = manifest.get(source.identity)
        problem = "not in the cache" if entry is None else entry_problem(cache, entry)
        if problem is not None or entry is None:
            raise InputError(f"{cache}: {source.kind} source {source.shown} ({source.recipe}): {problem}",
                             hint="run `rocmlock sources fetch --to DIR` for the same environments on a host "
                                  "with network and copy DIR here")
        found.append(entry)
    return tuple(found)


def install_cache(cache: Path, entries: Iterable[CachedSource], output: Path) -> Path:
    """Make ``entries`` of ``cache`` entries of ``<output>/src_cache``, where rattler-build looks.

    Files are hard-linked where the file system allows (copied otherwise); rattler-build reads them and
    never writes into them, but it rewrites an entry's index file on each use, so that one is copied.
    Each entry's paths land under temporary names first and its index file last: an interruption
    leaves no entry that rattler-build would take for complete.
    """
    target = output / "src_cache"
    if target.resolve() == cache.resolve():
        return target
    for entry in entries:
        index = target / METADATA / f"{entry.key}.json"
        if index.is_file() and all((target / p).exists() for p in entry.paths):
            continue
        for rel in entry.paths:
            place_tree(cache / rel, target / rel, link=True)
        write_atomic(index, (cache / METADATA / f"{entry.key}.json").read_bytes())
    return target


def place_tree(src: Path, dest: Path, *, link: bool) -> None:
    """``src`` (a file or a tree) at ``dest``, replacing what is there, through a temporary name.

    ``link`` hard-links (copying across file systems); else ``src`` is moved.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.rocmlock-tmp")
    remove_path(tmp)
    if not link:
        os.replace(src, tmp)
    elif src.is_dir():
        shutil.copytree(src, tmp, symlinks=True, copy_function=_link_or_copy)
    else:
        _link_or_copy(str(src), str(tmp))
    remove_path(dest)  # an orphan of an interrupted run: it had no index file, so nothing used it
    os.replace(tmp, dest)


def remove_path(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def _link_or_copy(src: str, dest: str) -> None:
    try:
        os.link(src, dest)
    except OSError:
        shutil.copy2(src, dest)
