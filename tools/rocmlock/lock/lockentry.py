"""pixi.lock's package entries built from the records in memory, for the diff of the lock just written (issue 40).

``rocmlock lock`` prints pixi's diff, whose rows hold each package's entry as pixi.lock writes it
(:mod:`rocmlock.lockdiff.diff`). The lock it writes comes from records it holds (``LockedWorkspace``), so the new side
of the diff is built from those records here rather than by parsing the text rattler rendered.

rattler writes a conda package (rattler_lock's v7 ``CondaPackageDataModel``, crates/rattler_lock/src/parse/models/
v7/conda_package_data.rs, ``From<&CondaBinaryData>``) as ``conda: <location>`` followed, in this order, by: name,
version, build (each only when it differs from what the file name ``name-version-build.ext`` says), build_number
(only when it differs from the build string's trailing number, 0 without one), subdir (only when it differs from the
URL's second-to-last path segment; always for a path), noarch (only when it differs from the derived one: ``noarch``
subdir and ``py`` in the build string is python, ``noarch`` otherwise generic, else none), sha256, md5, depends and
constrains (when not empty), channel (only when it differs from the URL less its last two segments; written without
a trailing slash), license, license_family, size, timestamp (milliseconds) and, in py-rattler 0.28, the
``indexed_timestamp`` after it (crates/rattler_lock/src/utils/derived_fields.rs holds the derivations). A ``file://``
package URL is written as its path.

Only the shapes this module derives for sure are built; a record with anything else (purls, features, run exports,
legacy .tar.bz2 hashes, a file name that does not spell its name, version and build, a percent-encoded path, ...)
makes :func:`memory_lock_packages` return None and the caller read the entries from the rendered text instead.
``tests/test_lock_diff_memory.py`` holds the two equal on real locks.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from functools import cache
from typing import Any

from rattler import RepoDataRecord, Subdir

from rocmlock.lock.lockfile import LockedWorkspace
from rocmlock.lockdiff.diff import LockedEntry, LockPackages, clean_entry

# The keys of PackageRecord.to_json() (RepoDataRecord's adds fn, url, channel) that an entry is built from here;
# arch and platform are derived from the subdir and never written.
_KNOWN = frozenset({"arch", "platform", "build", "build_number", "depends", "constrains", "license",
                    "license_family", "md5", "name", "noarch", "sha256", "size", "subdir", "timestamp",
                    "indexed_timestamp", "version", "fn", "url", "channel"})
_TRAILING_NUMBER = re.compile(r"[0-9]+\Z")
_EXTENSIONS = (".conda", ".tar.bz2")


@cache
def _is_platform(subdir: str) -> bool:
    try:
        Subdir(subdir)
    except Exception:  # noqa: BLE001  # rattler raises its own error type for a name it does not know
        return False
    return True


def _build_number(build: str) -> int:
    """rattler's ``derive_build_number_from_build``: the build string's trailing ASCII digits as a u64, else 0."""
    found = _TRAILING_NUMBER.search(build)
    if found is None:
        return 0
    number = int(found.group())
    return number if number < 1 << 64 else 0


def _noarch(subdir: str, build: str) -> str | None:
    if subdir != "noarch":
        return None
    return "python" if "py" in build else "generic"


def _secret_possible(text: str) -> bool:
    """Whether the diff's cleaning (:func:`rocmlock.lockdiff.diff.clean_entry`) could change ``text``."""
    return "://" in text and ("?" in text or "#" in text or "@" in text or "/t/" in text)


def conda_entry(record: RepoDataRecord) -> LockedEntry | None:
    """``record`` as the diff reads it from pixi.lock (its entry as rattler writes it); None for a shape not built
    here."""
    data = json.loads(record.to_json())
    if not data.keys() <= _KNOWN:
        return None
    url, name, version, build = data.get("url"), data.get("name"), data.get("version"), data.get("build")
    subdir, channel, noarch = data.get("subdir"), data.get("channel"), data.get("noarch")
    texts = (url, name, version, build, subdir, channel)  # strings in rattler's JSON, or left out
    if None in texts or "" in texts or noarch not in (None, "python", "generic"):
        return None
    file_name = url.rsplit("/", 1)[-1]
    stem = next((file_name[:-len(ext)] for ext in _EXTENSIONS if file_name.endswith(ext)), None)
    if file_name != data.get("fn") or stem is None or stem.rsplit("-", 2) != [name, version, build] \
            or "%" in url or "?" in url or "#" in url or "://" not in channel:
        return None
    if url.startswith("file:///"):
        location, derived_subdir, derived_channel = url[len("file://"):], None, None
    elif url.startswith(("http://", "https://")):
        parent = url.rsplit("/", 2)
        if len(parent) != 3 or "/" not in parent[0].partition("://")[2]:  # a URL at the host's root: no channel
            return None
        location, derived_subdir, derived_channel = url, parent[1] if _is_platform(parent[1]) else None, \
            parent[0] + "/"
    else:
        return None
    entry: dict[str, Any] = {"conda": location}
    if data.get("build_number", 0) != _build_number(build):
        entry["build_number"] = data.get("build_number", 0)
    if subdir != derived_subdir:
        entry["subdir"] = subdir
    derived_noarch = _noarch(derived_subdir or subdir, build)
    if noarch != derived_noarch:
        if noarch is None:  # rattler's "none" where it would derive one: its spelling is not built here
            return None
        entry["noarch"] = noarch
    for key in ("sha256", "md5"):
        if key in data:
            entry[key] = data[key]
    for key in ("depends", "constrains"):
        if data.get(key):
            entry[key] = data[key]
    if (channel if channel.endswith("/") else channel + "/") != derived_channel:
        entry["channel"] = channel.rstrip("/")
    for key in ("license", "license_family", "size", "timestamp", "indexed_timestamp"):
        if key in data:
            entry[key] = data[key]
    texts = (url, channel, *(v for v in entry.values() if type(v) is str),
             *entry.get("depends", ()), *entry.get("constrains", ()))
    if any(map(_secret_possible, texts)):
        entry = clean_entry(entry)
    return LockedEntry("conda", name, entry["conda"], version, build, entry)


def memory_lock_packages(locked: LockedWorkspace) -> LockPackages | None:
    """What the pixi.lock rendered from ``locked`` locks, per environment and platform, as
    :func:`rocmlock.lockdiff.diff.lock_packages` reads it from that text; None when a record has a shape not built here
    (then read the text). Each package is built once, however many environments and platforms hold it."""
    built: dict[str, LockedEntry] = {}
    out: LockPackages = {}
    for env_name, env in sorted(locked.environments.items()):
        if any(env.pypi.values()) or any(env.sources.values()):
            return None  # the lock rendered from it holds conda packages only; not a lock this module mirrors
        platforms: dict[str, list[LockedEntry]] = {}
        for plat_name, records in sorted(env.records.items()):
            if records:  # pixi.lock lists no platform without packages
                entries = _entries(records, built)
                if entries is None:
                    return None
                platforms[plat_name] = entries
        out[env_name] = platforms
    return out


def _entries(records: Sequence[RepoDataRecord], built: dict[str, LockedEntry]) -> list[LockedEntry] | None:
    out = []
    for record in records:
        url = record.url
        entry = built.get(url)
        if entry is None:
            entry = conda_entry(record)
            if entry is None:
                return None
            built[url] = entry
        out.append(entry)
    return sorted(out, key=lambda e: e.location)  # rattler lists a platform's packages by location
