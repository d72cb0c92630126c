"""pixi's lock-file diff, from two pixi.lock texts: the JSON ``pixi update --json`` prints and the markdown table
pixi-diff-to-markdown makes of it (``rocmlock lock --json``/``--markdown``, ``rocmlock diff``).

The JSON is pixi's ``LockFileJsonDiff`` (prefix-dev/pixi crates/pixi_diff/src/lib.rs):
``{"version": 1, "environment": {ENV: {PLATFORM: [{"name", "before", "after", "type", "explicit"?}]}}}``.
Per environment and platform of the new lock a package is added, removed, or changed when its location (URL or
path) differs; ``before``/``after`` are its package entries as pixi.lock writes them (rattler's serializer writes
pixi.lock and the JSON alike, in the same key order), a changed package's keeping only the keys that differ (a key
the new entry lacks becomes null there); entries are sorted by name, ``explicit`` is written only when true
(a dependency the manifest names), and a platform or environment without a change is left out.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from itertools import zip_longest
from typing import Any, Literal

from rocmlock.errors import InputError
from rocmlock.util.credentials import mask_queries
from rocmlock.util.text import gfm_text

PackageType = Literal["conda", "pypi"]
# (environment, platform, type, name) -> whether the manifest names it: pixi's `explicit`.
Explicit = Callable[[str, str, PackageType, str], bool]


@dataclass(frozen=True)
class LockedEntry:
    """One package of one environment on one platform, with its entry in the lock's ``packages:`` list."""

    type: PackageType
    name: str
    location: str
    version: str
    build: str | None
    entry: dict[str, Any]


# environment -> platform -> the packages there, in the lock's order
LockPackages = dict[str, dict[str, list[LockedEntry]]]


def _bad(source: str, what: str) -> InputError:
    return InputError(f"{source}: {what}; not a pixi.lock", hint="pass two pixi.lock files (v6 or v7)")


def _conda_identity(location: str, entry: Mapping[str, Any]) -> tuple[str, str, str]:
    """Name, version and build of a conda entry: its own keys, else its file name (``name-version-build.ext``)."""
    stem = location.rsplit("/", 1)[-1].removesuffix(".conda").removesuffix(".tar.bz2")
    parts = stem.rsplit("-", 2)
    guess = parts if len(parts) == 3 else [stem, "", ""]
    return (str(entry.get("name", guess[0])), str(entry.get("version", guess[1])), str(entry.get("build", guess[2])))


def _clean(value: Any) -> Any:
    """``value`` (a lock entry, as read) with every URL's credentials removed and its query masked: a lock pixi
    wrote may hold both (rocmlock.lock.lockfile), and the diff is printed. The same package with and without
    credentials is then one location, as rocmlock re-writes such a lock without them."""
    if isinstance(value, str):
        return mask_queries(value) if "://" in value else value
    if isinstance(value, list):
        return [_clean(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    return value


def clean_entry(entry: dict[str, Any]) -> dict[str, Any]:
    """A lock entry as the diff shows it: see :func:`_clean`."""
    return _clean(entry)  # type: ignore[no-any-return]


def _make_entry(ref: Mapping[str, Any], entries: Mapping[tuple[str, str], dict[str, Any]], source: str) -> LockedEntry:
    kind: PackageType = "conda" if "conda" in ref else "pypi"
    location = _clean(ref.get(kind))
    if not isinstance(location, str):
        raise _bad(source, f"an environment's package reference has no conda: or pypi: location ({sorted(ref)})")
    entry = entries.get((kind, location))
    if entry is None:
        raise _bad(source, f"the {kind} package {location!r} is not in its packages: list")
    if kind == "pypi":
        return LockedEntry(kind, str(entry.get("name", "")), location, str(entry.get("version", "")), None, entry)
    name, version, build = _conda_identity(location, entry)
    return LockedEntry(kind, name, location, version, build, entry)


def lock_packages(text: str, source: str) -> LockPackages:
    """What ``text`` (a pixi.lock; ``source`` names it in errors) locks, per environment and platform."""
    import yaml  # here: the no-op lock (rocmlock.lock.noop, through rocmlock.lock.result) imports this module

    from rocmlock.lockdiff.lockyaml import load_lock_yaml, refuse_anchors

    refuse_anchors(text, source)
    try:  # as rattler reads it: no YAML 1.1 dates, booleans or base-60 numbers where the lock has strings
        data = load_lock_yaml(text)
    except yaml.YAMLError as exc:
        raise _bad(source, f"invalid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict) or not isinstance(data.get("environments", {}), dict) \
            or not isinstance(data.get("packages", []), list):
        raise _bad(source, "no environments: mapping and packages: list")
    entries: dict[tuple[str, str], dict[str, Any]] = {}
    for entry in data.get("packages") or []:
        kind = "conda" if isinstance(entry, dict) and "conda" in entry else "pypi"
        if not isinstance(entry, dict) or not isinstance(entry.get(kind), str):
            raise _bad(source, "a packages: entry without a conda: or pypi: location")
        entry = _clean(entry)
        entries.setdefault((kind, entry[kind]), entry)
    out: LockPackages = {}
    for env, body in (data.get("environments") or {}).items():
        platforms = (body or {}).get("packages") or {} if isinstance(body, dict) else None
        if not isinstance(platforms, dict):
            raise _bad(source, f"environment {str(env)!r} has no packages: mapping")
        out[str(env)] = {str(plat): [_make_entry(ref, entries, source) for ref in refs or [] if isinstance(ref, dict)]
                         for plat, refs in platforms.items()}
    return out


def _json_name(pkg: LockedEntry) -> str:
    # pixi: a conda name normalized, a PyPI name as its dist-info name (pep508_rs, as_dist_info_name: `-` -> `_`)
    return pkg.name.lower() if pkg.type == "conda" else pkg.name.lower().replace("-", "_").replace(".", "_")


def _changed_keys(before: dict[str, Any], after: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """pixi's ``compute_json_diff``: drop the keys both sides hold equal; a key only ``before`` has is null after."""
    a = {k: v for k, v in before.items() if after.get(k, _MISSING) != v}
    b = {k: v for k, v in after.items() if before.get(k, _MISSING) != v}
    b.update({k: None for k in a if k not in after})
    return a, b


_MISSING = object()


@dataclass(frozen=True)
class PackageChange:
    """One row of the diff: ``before``/``after`` are the locked packages (None: added/removed)."""

    before: LockedEntry | None
    after: LockedEntry | None
    explicit: bool

    @property
    def package(self) -> LockedEntry:
        return self.after or self.before  # type: ignore[return-value]  # one of them is set

    def to_json(self) -> dict[str, Any]:
        """pixi's ``JsonPackageDiff``."""
        before = self.before.entry if self.before else None
        after = self.after.entry if self.after else None
        if before is not None and after is not None:
            before, after = _changed_keys(before, after)
        row: dict[str, Any] = {"name": _json_name(self.package), "before": before, "after": after,
                               "type": self.package.type}
        if self.explicit:
            row["explicit"] = True
        return row


# environment -> platform -> the changes there, sorted by name
LockDiff = dict[str, dict[str, list[PackageChange]]]


def _platform_diff(env: str, platform: str, old: list[LockedEntry], new: list[LockedEntry],
                   explicit: Explicit) -> list[PackageChange]:
    previous = {(p.type, p.name.lower()): p for p in old}
    added: list[PackageChange] = []
    changed: list[PackageChange] = []
    for pkg in new:
        prev = previous.pop((pkg.type, pkg.name.lower()), None)
        mark = explicit(env, platform, pkg.type, pkg.name.lower())
        if prev is None:
            added.append(PackageChange(None, pkg, mark))
        elif prev.location != pkg.location:
            changed.append(PackageChange(prev, pkg, mark))
    removed = [PackageChange(p, None, explicit(env, platform, p.type, p.name.lower())) for p in previous.values()]
    # pixi: added, then removed, then changed, sorted (stably) by the JSON name
    return sorted(added + removed + changed, key=lambda c: _json_name(c.package))


def _nothing_explicit(env: str, platform: str, kind: PackageType, name: str) -> bool:
    return False


def diff_locks(old: LockPackages | None, new: LockPackages, explicit: Explicit | None = None) -> LockDiff:
    """pixi's ``LockFileDiff::from_lock_files`` from ``old`` (None: no lock yet) to ``new``."""
    mark = explicit or _nothing_explicit
    old = old or {}
    out: LockDiff = {}
    for env, platforms in new.items():
        before = old.get(env, {})
        env_diff = {plat: _platform_diff(env, plat, before.get(plat, []), pkgs, mark)
                    for plat, pkgs in platforms.items()}
        env_diff.update({plat: _platform_diff(env, plat, pkgs, [], mark)
                         for plat, pkgs in before.items() if plat not in platforms})
        if kept := {plat: rows for plat, rows in env_diff.items() if rows}:
            out[env] = kept
    for env, platforms in old.items():
        if env not in new and platforms:  # pixi keeps a removed environment's platforms, empty ones too
            out[env] = {plat: _platform_diff(env, plat, pkgs, [], mark) for plat, pkgs in platforms.items()}
    return out


def diff_json(diff: LockDiff) -> dict[str, Any]:
    """pixi's ``LockFileJsonDiff``: ``{"version": 1, "environment": ...}``. The row of a package added to several
    environments and platforms is one object (to be read, not changed), so a writer may encode it once."""
    added: dict[tuple[int, bool], dict[str, Any]] = {}

    def row(change: PackageChange) -> dict[str, Any]:
        if change.before is not None or change.after is None:
            return change.to_json()
        key = (id(change.after.entry), change.explicit)  # the entries live in ``diff``
        found = added.get(key)
        if found is None:
            found = added[key] = change.to_json()
        return found

    return {"version": 1, "environment": {env: {plat: [row(c) for c in rows] for plat, rows in plats.items()}
                                          for env, plats in diff.items()}}


# ----------------------------------------------------------------------------- markdown

# pixi-diff-to-markdown 0.3.10 (PyPI), models.py ChangeType, in its order (the table's sort order).
CHANGE_TYPES = ("Added", "Removed", "Major Upgrade", "Major Downgrade", "Minor Upgrade", "Minor Downgrade",
                "Patch Upgrade", "Patch Downgrade", "Other", "Only build string")
_DOWNGRADES = ("Major Downgrade", "Minor Downgrade", "Patch Downgrade")
# create_links_for_packages (on by default): models.py TableRow.generate_table_line
_CHANNEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_LINKED_CHANNELS = ("conda-forge", "bioconda", "nvidia", "rapidsai", "robostack", "robostack-humble",
                    "robostack-staging")
MAX_EXPANDED_ROWS = 10
FOOTNOTES = "[^1]: **Bold** means explicit dependency.\n[^2]: Dependency got downgraded.\n"


def change_type(change: PackageChange) -> str:
    """pixi-diff-to-markdown's ``UpdateSpec.change_type``: which version segment moved, and which way."""
    if change.before is None:
        return "Added"
    if change.after is None:
        return "Removed"
    old, new = change.before, change.after
    if old.version == new.version:
        return "Other" if old.build == new.build else "Only build string"
    from rattler import Version  # here: the no-op lock reports an empty diff without loading rattler

    try:
        a, b = Version(old.version), Version(new.version)
    except Exception:  # noqa: BLE001  # rattler raises its own error types for a version it cannot parse
        return "Other"
    # No segment differs where the versions differ only in spelling (1.0 -> 1.0.0, equal as versions): "Other".
    # (pixi-diff-to-markdown 0.3.10 stops there on `assert False, "padded_vars is not empty"`.)
    padded = zip_longest(a.segments(), b.segments(), fillvalue=[0])
    first = next((i for i, (x, y) in enumerate(padded) if x != y), 3)
    level = ("Major", "Minor", "Patch")[first] if first < 3 else None
    return f"{level} {'Downgrade' if a > b else 'Upgrade'}" if level else "Other"


def _before_after(change: PackageChange, kind: str) -> tuple[str, str]:
    if kind == "Added":
        return "", change.package.version
    if kind == "Removed":
        return change.package.version, ""
    assert change.before is not None and change.after is not None
    if kind == "Only build string":
        return change.before.build or "", change.after.build or ""
    return change.before.version, change.after.version


def _link(change: PackageChange, text: str) -> str:
    after = change.after
    if after is None:
        return text
    # The name from the lock goes into the link's URL percent-encoded (a `)` would end it); a conda or PyPI name
    # is left as it is.
    loc, name = after.location, urllib.parse.quote(_json_name(after), safe="")
    if after.type == "pypi":
        return f"[{text}](https://pypi.org/project/{name})" if loc.startswith(
            "https://files.pythonhosted.org/packages") else text
    for channel in _LINKED_CHANNELS:
        if loc.startswith(f"https://conda.anaconda.org/{channel}"):
            text = f"[{text}](https://prefix.dev/channels/{channel}/packages/{name})"
            break
    if loc.startswith(("https://prefix.dev/", "https://repo.prefix.dev/", "https://fast.prefix.dev/")):
        channel = loc.split("/")[3]
        # A name from the lock goes into a link of a pull request comment: a channel name or none (`)`, `|`, `]`
        # in a hostile lock's URL would end the link or the table row).
        if _CHANNEL_NAME.fullmatch(channel):
            text = f"[{text}](https://prefix.dev/channels/{channel}/packages/{name})"
    return text


def _row(change: PackageChange) -> str:
    kind = change_type(change)
    before, after = _before_after(change, kind)
    name = gfm_text(_json_name(change.package))
    name = _link(change, f"**{name}**" if change.explicit else name) + ("[^2]" if kind in _DOWNGRADES else "")
    return f"|{name}|{_cell(before)}|{_cell(after)}|{kind}|"


def _cell(text: str) -> str:
    """A lock's version or build string as a table cell of a pull request comment: a hostile lock's ``|`` would
    split the row, a trailing ``\\`` take the next ``|``, ``<img ...>`` or ``[approve](...)`` render."""
    return gfm_text(text)


def _table(rows: list[PackageChange]) -> str:
    ordered = sorted(rows, key=lambda c: (not c.explicit, CHANGE_TYPES.index(change_type(c)), _json_name(c.package)))
    return "\n".join(["|Dependency[^1]|Before|After|Change|", "|-|-|-|-|", *map(_row, ordered)])


def diff_markdown(diff: LockDiff) -> str:
    """The markdown ``pixi-diff-to-markdown --merge-dependencies no`` prints for :func:`diff_json` (default columns,
    tables folded into ``<details>`` when one has more than 10 rows), without its final newline."""
    if not diff:
        return "No diff"
    longest = max(len(rows) for plats in diff.values() for rows in plats.values())
    fold = longest > MAX_EXPANDED_ROWS
    lines: list[str] = []
    for env, plats in diff.items():
        lines += [f"# {gfm_text(env)}", ""]
        for plat, rows in plats.items():
            opener = "<details open>" if len(rows) <= MAX_EXPANDED_ROWS else "<details>"
            lines += [opener, f"<summary>{gfm_text(plat)}</summary>"] if fold else [f"## {gfm_text(plat)}"]
            lines += ["", _table(rows)]
            lines += ["", "</details>", ""] if fold else [""]
    return "\n".join(lines) + "\n" + FOOTNOTES


def diff_text(diff: LockDiff) -> list[str]:
    """The changes for people: an ``env [platform]`` line, then ``+``/``-``/``~`` lines like ``rocmlock lock``'s."""
    lines = []
    for env, plats in diff.items():
        for plat, rows in plats.items():
            lines.append(f"{env} [{plat}]")
            for c in rows:
                pin = [f"{p.version} {p.build or ''}".rstrip() if p else "" for p in (c.before, c.after)]  # wheel: none
                kind = "+" if c.before is None else "-" if c.after is None else "~"
                text = {"+": pin[1], "-": pin[0], "~": f"{pin[0]} -> {pin[1]}"}[kind]
                if kind == "~" and pin[0] == pin[1]:  # the same pin from another place (channel, port, mirror)
                    assert c.before is not None and c.after is not None
                    same = c.before.entry.get("sha256") == c.after.entry.get("sha256")
                    what = "only its URL changed" if same else "another file (sha256) at another URL"
                    text = f"{pin[0]} ({what}: {c.before.location} -> {c.after.location})"
                lines.append(f"  {kind} {_json_name(c.package)} {text}")
    return lines
