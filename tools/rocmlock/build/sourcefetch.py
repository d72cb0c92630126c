"""``rocmlock sources fetch``: fill a source cache on a host with network, with rattler-build itself.

Each missing source is fetched by building a throwaway noarch recipe whose only content is that source
(``url`` + ``sha256`` or ``git`` + ``rev``, as the real recipe renders it) into a staging directory
inside the cache: rattler-build downloads it, checks the sha256, extracts or checks out, and writes its
own index entry, so the entry has exactly the key and layout a later build looks up. rocmlock then
checks the archive's sha256 again, takes credentials out of what rattler-build wrote, and moves the
entry's paths into the cache, its index file last (an interrupted run leaves no entry that a build
would take for complete). The git database rattler-build keeps for later fetches is not kept: a build
reads only the checkout.
"""

from __future__ import annotations

import json
import re
import secrets
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmlock.build.sources import (
    MANIFEST,
    METADATA,
    CachedSource,
    Source,
    entry_problem,
    place_tree,
    read_manifest,
    remove_path,
    render_manifest,
)
from rocmlock.errors import OperationError
from rocmlock.util.credentials import one_line, redact_text, redact_url
from rocmlock.util.fs import file_sha256, write_atomic
from rocmlock.util.runner import Runner, run_command

STAGING_PREFIX = ".rocmlock-staging-"
# rattler-build stamps entries with the time of the download; the cache is the same from every run
# instead. rattler-build 0.73 never expires entries by these times (index.rs cleanup_old_entries has no
# caller), and a lookup does not read them.
FIXED_TIME = "2000-01-01T00:00:00Z"


class FetchFailed(OperationError):
    """A source could not be fetched or did not match its pin."""


@dataclass(frozen=True)
class FetchReport:
    cache: Path
    fetched: tuple[Source, ...]
    cached: tuple[Source, ...]

    def to_dict(self) -> dict[str, Any]:
        def rows(items: tuple[Source, ...]) -> list[dict[str, Any]]:
            return [{"kind": s.kind, "url": s.shown, "pin": s.pin, "used_by": list(s.used_by)} for s in items]

        return {"cache": str(self.cache), "fetched": rows(self.fetched), "cached": rows(self.cached)}


def fetch_sources(sources: Iterable[Source], cache: Path, log: Callable[[str], None] = lambda _: None,
                  runner: Runner = run_command) -> FetchReport:
    """Put every one of ``sources`` into ``cache`` (those already there and intact are kept)."""
    cache.mkdir(parents=True, exist_ok=True)
    _remove_stale_staging(cache)
    manifest = read_manifest(cache)
    fetched, cached = [], []
    for source in sources:
        entry = manifest.get(source.identity)
        if entry is not None and entry_problem(cache, entry) is None:
            cached.append(source)
            continue
        log(f"fetching {source.kind} {source.shown} @ {source.pin}")
        entry = _fetch_one(source, cache, runner)
        manifest[entry.identity] = entry
        write_atomic(cache / MANIFEST, render_manifest(manifest.values()))
        fetched.append(source)
    write_atomic(cache / MANIFEST, render_manifest(manifest.values()))
    return FetchReport(cache, tuple(fetched), tuple(cached))


def _remove_stale_staging(cache: Path) -> None:
    for leftover in cache.glob(f"{STAGING_PREFIX}*"):
        shutil.rmtree(leftover, ignore_errors=True)


def _fetch_one(source: Source, cache: Path, runner: Runner) -> CachedSource:
    staging = cache / f"{STAGING_PREFIX}{secrets.token_hex(4)}"
    try:
        _rattler_fetch(source, staging)
        key, meta = _staged_entry(staging / "src_cache", source)
        entry = _entry(source, key, meta)
        src_cache = staging / "src_cache"
        if source.kind == "url":
            _verify_archive(source, src_cache / entry.paths[0])
        else:
            _verify_commit(source, entry.commit)
            _scrub_checkout(src_cache / entry.paths[0], source, runner)
        for rel in entry.paths:
            place_tree(src_cache / rel, cache / rel, link=False)
        write_atomic(cache / METADATA / f"{key}.json", _clean_metadata(meta))
        return entry
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _rattler_fetch(source: Source, staging: Path) -> None:
    """rattler-build fetches ``source`` into ``<staging>/src_cache`` (a build of a recipe with only it)."""
    import rattler_build as rb

    recipe = {"package": {"name": "rocmlock-source-fetch", "version": "0"},
              "source": [source.recipe_entry()],
              "build": {"noarch": "generic", "script": ["true"]}}
    try:
        stage0 = rb.Stage0Recipe.from_yaml(json.dumps(recipe))
        rendered = stage0.render(rb.VariantConfig())[0]
        rendered.run_build(output_dir=str(staging), channels=[], no_include_recipe=True)
    except Exception as exc:  # noqa: BLE001 - py-rattler-build's error types; the message says what failed
        raise _failure(source, str(exc)) from None


def _failure(source: Source, text: str) -> FetchFailed:
    """rattler-build's error (several lines, staging paths) as one line about the recipe's source."""
    where = f"{source.recipe}: {source.kind} source {source.shown}"
    # cache.rs CacheError::ValidationFailed: "... checksum validation failed for <path>: actual: <hex> expected: <hex>"
    actual = re.search(r"actual:\s*([0-9a-f]{32,64})", text)
    if "validation failed" in text and actual:
        return FetchFailed(f"{where}: sha256 mismatch: the download has {actual.group(1)}, the recipe pins "
                           f"{source.pin}", hint="check the pin (recipes/variants.yaml) and where the URL points")
    detail = " ".join(redact_text(one_line(text)).removeprefix("PyRattlerBuildError: ").split())
    return FetchFailed(f"{where}: {detail}",
                       hint="this host needs network access to the source; run `rocmlock sources fetch` where it has")


def _staged_entry(src_cache: Path, source: Source) -> tuple[str, dict[str, Any]]:
    indexes = sorted((src_cache / METADATA).glob("*.json"))
    if len(indexes) != 1:
        raise FetchFailed(f"{source.recipe}: {source.shown}: rattler-build left {len(indexes)} cache index "
                          "entries, expected 1", hint="this rattler-build's source cache is not the layout rocmlock "
                          "knows (rattler-build 0.73); report it")
    return indexes[0].stem, json.loads(indexes[0].read_text())


def _entry(source: Source, key: str, meta: dict[str, Any]) -> CachedSource:
    paths = [str(meta["cache_path"])]
    if meta.get("extracted_path"):
        paths.append(str(meta["extracted_path"]))
    return CachedSource(source.kind, source.shown, source.pin, source.file_name, key, tuple(paths),
                        meta.get("git_commit"))


def _verify_archive(source: Source, archive: Path) -> None:
    actual = file_sha256(archive)
    if actual != source.pin:
        raise FetchFailed(f"{source.recipe}: url source {source.shown}: sha256 {actual}, expected {source.pin}",
                          hint="the download does not match the recipe's sha256: check the pin")


def _verify_commit(source: Source, commit: str | None) -> None:
    """A rev that is a full commit id must be what was checked out (a branch or tag rev records its commit)."""
    if re.fullmatch(r"[0-9a-f]{40}", source.pin) and commit != source.pin:
        raise FetchFailed(f"{source.recipe}: git source {source.shown}: checked out {commit}, expected {source.pin}",
                          hint="the repository does not hold that commit at that URL")


def _scrub_checkout(checkout: Path, source: Source, runner: Runner) -> None:
    """No credentials, no staging path and no reflog timestamps in the checkout's ``.git``."""
    remove_path(checkout / ".git" / "logs")
    remove_path(checkout / ".git" / "FETCH_HEAD")
    runner(["git", "-C", str(checkout), "remote", "set-url", "origin", redact_url(source.url)])


def _clean_metadata(meta: dict[str, Any]) -> str:
    clean = dict(meta)
    clean["url"] = redact_url(str(meta["url"]))
    clean["created"] = clean["last_accessed"] = FIXED_TIME
    clean["lock_file"] = None  # the staging directory's lock; rattler-build takes its own when it reads
    return redact_text(json.dumps(clean, indent=2) + "\n")
