"""pixi.lock (v7) through ``rattler.LockFile``: build one from solved records, render it, read one back.

Platforms are written the way pixi writes them (pixi_core/src/lock_file/update.rs): one top-level
entry per manifest platform used by some environment, named like the manifest platform, with the
subdir and every declared virtual package (subdir defaults included) as ``__name=version[=build]``.

No secret is read from a lock nor written into one. pixi 0.77 writes a channel's URL as the manifest
spells it, credentials included (update.rs ``set_channels`` of ``into_base_url(..).to_string()``; rattler's
``ChannelUrl`` displays the URL as is, rattler_conda_types/src/channel/channel_url.rs), and the package URLs
the gateway built from it carry them too. So a lock is read with ``user:password@`` and ``/t/<token>/`` taken
out of every channel and package URL (the clean URL names the same file; the credentials come from the
manifest's channel URLs or RATTLER_AUTH_FILE); a fresh solve's records are redacted as they come
(rocmlock.lock.pipeline), so :func:`build_lockfile` is given, and writes, none. A query string or
fragment in a conda channel or package URL is refused on reading, the URL not shown: rattler builds a
package URL by joining ``<platform>/<file>`` onto the channel URL, which drops both
(:func:`rocmlock.util.credentials.refuse_query`), so no tool that locks with rattler writes one, and there is no
telling a secret in it from the rest.
"""

from __future__ import annotations

import os
import posixpath
import re
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rattler import LockChannel, LockFile, LockPlatform, RepoDataRecord, Subdir
from rattler.exceptions import ConversionError, ParseCondaLockError
from rattler.lock.package import CondaLockedBinaryPackage

from rocmlock.errors import InputError
from rocmlock.lockdiff.lockyaml import load_lock_yaml, refuse_anchors
from rocmlock.util.credentials import has_query, mask_queries, redact_url, refuse_query
from rocmlock.util.fs import read_regular
from rocmlock.util.text import escape, line_problem
from rocmlock.workspace.model import Environment
from rocmlock.workspace.pixi_compat import customised_virtual_packages, format_virtual_package
from rocmlock.workspace.platforms import Platform
from rocmlock.workspace.pypi import PypiPin, SourcePackage, split_packages


@dataclass(frozen=True)
class LockedPlatform:
    """A top-level lock platform: name, subdir and the virtual packages it records."""

    name: str
    subdir: str
    virtual_packages: tuple[str, ...]


@dataclass(frozen=True)
class LockedEnvironment:
    """One environment of a lock: its channels (as written) and records per platform name."""

    channels: tuple[str, ...]
    records: dict[str, list[RepoDataRecord]] = field(hash=False)
    # What pixi locks besides conda binaries, per platform name (see rocmlock.workspace.pypi).
    pypi: dict[str, list[PypiPin]] = field(default_factory=dict, hash=False)
    sources: dict[str, list[SourcePackage]] = field(default_factory=dict, hash=False)
    # The solve options pixi recorded (`options:`: strategy, channel-priority, exclude-newer, ...), as text.
    options: dict[str, str] = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class LockedWorkspace:
    """What a pixi.lock holds, in plain data."""

    platforms: dict[str, LockedPlatform] = field(hash=False)
    environments: dict[str, LockedEnvironment] = field(hash=False)

    def records(self, env: str, platform: str) -> list[RepoDataRecord] | None:
        """The records of ``env`` on ``platform``, or None when the lock lacks either."""
        locked = self.environments.get(env)
        return None if locked is None else locked.records.get(platform)


def lock_platform(platform: Platform) -> LockedPlatform:
    """The lock entry pixi expects for a manifest platform."""
    vps = tuple(format_virtual_package(vp) for vp in platform.declared_virtual_packages())
    return LockedPlatform(platform.name, platform.subdir, vps)


def redact_record(record: RepoDataRecord) -> RepoDataRecord:
    """``record`` with credentials removed from its URL and channel (for anything written)."""
    url, channel = redact_url(record.url), redact_url(record.channel or "")
    if url == record.url and channel == (record.channel or ""):
        return record
    return RepoDataRecord(record, record.file_name, url, channel)


def build_lockfile(locked: LockedWorkspace) -> LockFile:
    """A ``rattler.LockFile`` with ``locked``'s platforms, channels and records (sorted, so output is stable).

    The records are written as given: they hold no credentials (:func:`read_lockfile` takes them out, and
    rocmlock.lock.pipeline redacts a solve's), so none is redacted again, 12,000 times per lock."""
    platforms = {
        name: LockPlatform(name, subdir=Subdir(p.subdir), virtual_packages=list(p.virtual_packages))
        for name, p in sorted(locked.platforms.items())
    }
    lock = LockFile(list(platforms.values()))
    for env_name, env in sorted(locked.environments.items()):
        lock.set_channels(env_name, [LockChannel(redact_url(c)) for c in env.channels])
        for plat_name, records in sorted(env.records.items()):
            for record in sorted(records, key=lambda r: view(r).name):
                lock.add_conda_package(env_name, platforms[plat_name], record)
    return lock


def render_lockfile(locked: LockedWorkspace) -> str:
    """The text of pixi.lock for ``locked`` (rattler writes it; nothing is hand-formatted)."""
    lock = build_lockfile(locked)
    text = _written_unnamed(lock)
    if text is not None:
        return text
    with tempfile.TemporaryDirectory(prefix="rocmlock-") as tmp:
        out = Path(tmp) / "pixi.lock"
        lock.to_path(out)
        return out.read_text(encoding="utf-8")


def _written_unnamed(lock: LockFile) -> str | None:
    """``lock`` as rattler writes it, through an unnamed file, or None where there is none to write to.

    py-rattler 0.28's ``LockFile`` writes only to a path. The path is an unnamed file here (``O_TMPFILE``, reached
    through ``/proc/self/fd``), which vanishes with the process however it ends: a named scratch file was left in
    the temporary directory by a lock killed while rattler wrote it."""
    try:
        fd = os.open(tempfile.gettempdir(), os.O_TMPFILE | os.O_RDWR, 0o600)
    except (OSError, AttributeError):  # not Linux, or a file system without unnamed files
        return None
    try:
        lock.to_path(Path(f"/proc/self/fd/{fd}"))
        with open(fd, encoding="utf-8", closefd=False) as text:
            return text.read()
    except Exception:  # noqa: BLE001 - no /proc, say: written the named way, which reports what fails
        return None
    finally:
        os.close(fd)


# A pixi.lock of hundreds of environments and platforms is tens of MB; far more is no lock (a link to /dev/zero).
LOCK_LIMIT = 256 << 20


def lock_bytes(path: Path, remedy: str | None = None) -> bytes:
    """The bytes of the lock at ``path``: a regular file (a FIFO would hang the reader, ``/dev/zero`` fill the
    memory) of at most :data:`LOCK_LIMIT` bytes, else an InputError (exit 2). ``remedy``: the hint for a lock that
    is not the workspace's own (``rocmlock diff``'s arguments), in place of mending the workspace's pixi.lock."""
    try:
        return read_regular(path, LOCK_LIMIT, "a lock is a file",
                            hint=remedy or "put the lock file itself there (`git checkout pixi.lock`), or remove it "
                                           "and run `rocmlock lock`")
    except OSError as exc:
        raise InputError(f"{path}: cannot read the lock file: {exc.strerror}",
                         hint=remedy or "check its permissions, or remove it and run rocmlock lock") from None


def read_lockfile(path: Path, remedy: str | None = None) -> LockedWorkspace | None:
    """Read ``path`` back; None when it does not exist. A lock rattler cannot parse is an input error, and so is
    one that is no regular file or is too large (:func:`lock_bytes`), found before rattler opens it. ``remedy``: see
    :func:`lock_bytes`."""
    if not path.exists():
        return None
    data = lock_bytes(path, remedy)
    refuse_anchors(data, path)  # before rattler expands an alias into a copy (issue 41 J)
    try:
        lock = LockFile.from_path(path)
    except (ParseCondaLockError, OSError, ValueError) as exc:
        raise unreadable_lock(path, str(exc), data, remedy) from None
    return _from_lockfile(lock, path, _environment_options(data))


# What git writes around each side of a conflict (git-merge(1), "HOW CONFLICTS ARE PRESENTED"; diff3 adds |||||||).
_CONFLICT = re.compile(r"(<{7}|\|{7}|={7}|>{7})(?: |\Z)")
DISCARD_HINT = "`rocmlock lock --discard-lock` re-solves every environment from pixi.toml"


def conflict_markers(text: str) -> list[tuple[int, str]]:
    """The merge-conflict marker lines of ``text``: (1-based line number, marker)."""
    return [(n, m[1]) for n, line in enumerate(text.splitlines(), 1) if (m := _CONFLICT.match(line))]


def unreadable_lock(path: Path, parser_error: str, data: bytes | None = None,
                    remedy: str | None = None) -> InputError:
    """One line saying what is wrong with the lock at ``path`` (merge conflict markers, a YAML syntax error's line
    and column, or what rattler's parser reports) and a hint that works. Never "delete it": a lock with PyPI or
    source packages can only be made again by pixi, and a lock kept gives ``rocmlock lock`` its pins back.
    ``remedy``: see :func:`lock_bytes` (a lock written by a newer pixi keeps its own hint)."""
    if "newer lockfile format" in parser_error:
        return InputError(f"{path}: cannot read the lock file: {mask_queries(parser_error)}",
                          hint="it was written by a newer pixi than this py-rattler reads: upgrade py-rattler, or lock "
                               "with a pixi that writes format 7")
    try:
        text = (lock_bytes(path, remedy) if data is None else data).decode("utf-8")
    except InputError as exc:
        return exc
    except UnicodeDecodeError as exc:
        what = f"not UTF-8 text (byte {exc.start})"
        return InputError(f"{path}: cannot read the lock file: {what}",
                          hint=remedy or f"restore it (`git checkout pixi.lock`), then `rocmlock lock`; or "
                                         f"{DISCARD_HINT}")
    markers = conflict_markers(text)
    if markers:
        first = ", ".join(f"{m} at line {n}" for n, m in markers[:3])
        count = sum(m == "<<<<<<<" for _, m in markers)
        return InputError(
            f"{path}: cannot read the lock file: {count or 1} unresolved merge conflict(s) ({first})",
            hint=remedy or "take one side whole, `git checkout --ours pixi.lock` (or `--theirs`), then `rocmlock "
                           f"lock` re-solves what pixi.toml changed since; or {DISCARD_HINT} (every pin dropped)")
    return InputError(f"{path}: cannot read the lock file: {_yaml_problem(text) or mask_queries(parser_error)}",
                      hint=remedy or f"restore it (`git checkout pixi.lock`), then `rocmlock lock`; or "
                                     f"{DISCARD_HINT} (every pin dropped)")


def _yaml_problem(text: str) -> str | None:
    """A YAML syntax error of ``text`` as "line L, column C: problem", None when it parses (rattler's own message
    then says what does not fit the lock format). The parser quotes none of the value, so no URL's query."""
    try:  # here, not at the top: `pack --with-installer`'s node-side rocmlock has py-rattler and tomli only
        import yaml
    except ImportError:
        return None
    try:
        yaml.compose(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        return f"invalid YAML at {where}{exc.problem or exc.context}"
    except yaml.YAMLError as exc:
        return f"invalid YAML: {exc}"
    return None


def count_pins(path: Path) -> int:
    """How many locked packages (conda and PyPI, per environment and platform) ``path`` holds; a lock rattler cannot
    read is counted from its text (every ``- conda:``/``- pypi:`` line, both sides of a merge conflict)."""
    try:
        locked = read_lockfile(path)
    except InputError:
        text = lock_bytes(path).decode("utf-8", "replace")
        return len(re.findall(r"^\s+- (?:conda|pypi): ", text, flags=re.MULTILINE))
    if locked is None:
        return 0
    return sum(len(recs) for env in locked.environments.values() for recs in env.records.values()) + \
        sum(len(pins) for env in locked.environments.values() for pins in env.pypi.values()) + \
        sum(len(srcs) for env in locked.environments.values() for srcs in env.sources.values())


def _clean_url(url: str, path: Path, where: str) -> str:
    """``url`` of the lock without its credentials; an InputError (the URL not shown) when it has a query."""
    if "://" in url:  # a local channel's path may hold a '?'; a path is never a secret
        refuse_query(url, f"{path}: {where}", what="no conda channel or package URL has",
                     hint="remove it from pixi.lock, or delete pixi.lock and lock again; if the lock was shared, "
                          "revoke the secret (a channel's secret goes in RATTLER_AUTH_FILE)")
    return redact_url(url)


def _clean_records(records: Sequence[RepoDataRecord], path: Path, where: str) -> list[RepoDataRecord]:
    for record in records:
        if has_query(record.url) or has_query(record.channel or ""):  # the messages only for a record refused
            name = record.name.normalized
            _clean_url(record.url, path, f"{where}, package '{name}'")
            _clean_url(record.channel or "", path, f"{where}, the channel of package '{name}'")
    return [redact_record(r) for r in records]


@dataclass(frozen=True, eq=False)
class RecordView:
    """The strings of a record that the exports and checks read (issue 40: each read from rattler once per lock,
    not once per reader: a name alone was read 15 times a record). ``problem``: :func:`record_problem`'s answer.
    Compared and hashed by identity: one view per record and run, a cheap key for what is built from it."""

    name: str
    version: str
    build: str
    url: str
    subdir: str
    sha256: str | None
    md5: str | None
    depends: tuple[str, ...]
    constrains: tuple[str, ...]
    problem: str | None


_views: list[dict[int, tuple[RepoDataRecord, RecordView]]] = []


@contextmanager
def record_views() -> Iterator[None]:
    """Within it, :func:`view` answers each record (the same object) once; nothing is kept after it."""
    _views.append({})
    try:
        yield
    finally:
        _views.pop()


def view(record: RepoDataRecord) -> RecordView:
    """``record``'s :class:`RecordView` (read once per :func:`record_views` scope)."""
    cache = _views[-1] if _views else None
    hit = cache.get(id(record)) if cache is not None else None
    if hit is not None and hit[0] is record:
        return hit[1]
    name, version, build, url = record.name.normalized, str(record.version), str(record.build), record.url
    problem = None
    for what, value in (("name", name), ("version", version), ("build", build), ("file name", record.file_name),
                        ("url", url), ("channel", record.channel or "")):
        if why := line_problem(value):
            problem = f"package '{escape(name)}': its {what} {why}"
            break
    sha256, md5 = record.sha256, record.md5
    found = RecordView(name, version, build, url, record.subdir, sha256.hex() if sha256 else None,
                       md5.hex() if md5 else None, tuple(record.depends), tuple(record.constrains), problem)
    if cache is not None:
        cache[id(record)] = (record, found)  # the record kept alive: its id is not reused within the scope
    return found


def record_problem(record: RepoDataRecord) -> str | None:
    """Why a string of ``record`` cannot go onto one line of an export (a control character, or a ``#``: a
    comment in environment.yml, the hash in ``@EXPLICIT``), else None."""
    return view(record).problem


def pin_problem(pin: PypiPin) -> str | None:
    """Why a string of the PyPI ``pin`` cannot go onto one line of a requirements file, else None."""
    for what, value, hash_ok in (("name", pin.name, False), ("version", pin.version, False),
                                 ("sha256", pin.sha256, False), ("url", pin.url or "", True)):
        problem = line_problem(value, hash_allowed=hash_ok)
        if problem:
            return f"PyPI package '{escape(pin.name)}': its {what} {problem}"
    return None


UNSAFE_HINT = ("a lock holds only what a channel served; lock again from channels you trust "
               "(`rocmlock lock --update`) or fix the channel's repodata")


def _check_strings(path: Path, where: str, records: Sequence[RepoDataRecord], pins: Sequence[PypiPin]) -> None:
    problem = next((p for p in map(record_problem, records) if p), None) or \
        next((p for p in map(pin_problem, pins) if p), None)
    if problem:
        raise InputError(f"{path}: {where}: {problem}", hint=UNSAFE_HINT)



def _environment_options(raw: bytes) -> dict[str, dict[str, str]]:
    """Each environment's ``options:`` in the lock's bytes ``raw`` (py-rattler 0.28 reads them but does not expose them).

    Only the ``environments:`` block is parsed, less each environment's ``packages:`` list (its bulk); rattler
    has already read the whole file, so it is well-formed YAML (and UTF-8)."""
    kept: list[str] = []
    inside = skipping = False
    for line in raw.decode("utf-8", "replace").splitlines():
        if line[:1] not in ("", " ", "-", "#"):  # a top-level key
            inside, skipping = line.rstrip() == "environments:", False
        elif inside and line.strip() and len(line) - len(line.lstrip(" ")) <= 4:
            skipping = line.strip().startswith("packages:")
        if inside and not skipping:
            kept.append(line)
    if not any("options" in line or "\\" in line for line in kept):
        # No key can read `options` (quoted or not; only an escape could spell it otherwise): PyYAML is not loaded
        # (10 ms of `install`, `image` and `unpack`, which read every lock rattler writes, and rattler writes none).
        return {}
    try:  # here, not at the top: `pack --with-installer`'s node-side rocmlock has py-rattler and tomli only, and
        import yaml  # unpack needs no solve options
    except ImportError:
        return {}
    try:  # as rattler reads it: an environment named `on` stays "on" (YAML 1.1 made it True), a date its text
        data = load_lock_yaml("\n".join(kept)) if kept else None
    except yaml.YAMLError:
        return {}
    envs = data.get("environments") if isinstance(data, dict) else None
    return {str(name): {str(k): str(v) for k, v in env["options"].items()}
            for name, env in (envs.items() if isinstance(envs, dict) else ())
            if isinstance(env, dict) and isinstance(env.get("options"), dict)}


def _from_lockfile(lock: LockFile, path: Path, options: dict[str, dict[str, str]]) -> LockedWorkspace:
    platforms = {
        p.name: LockedPlatform(p.name, str(p.subdir), tuple(p.virtual_packages)) for p in lock.platforms()
    }
    envs: dict[str, LockedEnvironment] = {}
    # Sorted: py-rattler's order varies from run to run, and the first refused URL must be the same every time.
    for name, env in sorted(lock.environments(), key=lambda item: item[0]):
        channels = tuple(_clean_url(str(c), path, f"environment '{escape(name)}', channel {i + 1}")
                         for i, c in enumerate(_channels(env)))
        for i, text in enumerate((name, *channels)):
            problem = line_problem(text)
            if problem:
                what = f"channel {i}" if i else "its name"
                raise InputError(f"{path}: environment '{escape(name)}': {what} {problem}", hint=UNSAFE_HINT)
        records: dict[str, list[RepoDataRecord]] = {}
        pypi: dict[str, list[PypiPin]] = {}
        sources: dict[str, list[SourcePackage]] = {}
        for plat in sorted(env.platforms(), key=lambda p: p.name):
            records[plat.name] = _clean_records(_conda_records(env, plat, path), path,
                                                f"environment '{name}' [{plat.name}]")
            pins, srcs = split_packages(env.packages(plat) or [])
            _check_strings(path, f"environment '{escape(name)}' [{escape(plat.name)}]", records[plat.name], pins)
            if pins:
                pypi[plat.name] = pins
            if srcs:
                sources[plat.name] = srcs
        envs[name] = LockedEnvironment(channels, records, pypi, sources, options.get(name, {}))
    return LockedWorkspace(platforms, envs)


def _conda_records(env: Any, plat: LockPlatform, path: Path) -> list[RepoDataRecord]:
    """The conda binaries of ``env`` on ``plat``. A ``conda:`` location that is a relative path (a local channel
    pixi wrote relative to the workspace) is taken relative to the lock's directory, as pixi does (it joins
    the workspace root and the locked path: pixi_core/src/lock_file/resolve/pypi.rs), where py-rattler 0.28
    raises ``ConversionError`` ("The path is not an absolute path")."""
    try:
        return env.conda_repodata_records_for_platform(plat) or []
    except ConversionError:
        pass
    records = []
    for pkg in env.packages(plat) or []:
        if not isinstance(pkg, CondaLockedBinaryPackage):
            continue
        location = str(pkg.location)
        if "://" in location or location.startswith("/"):
            records.append(pkg.repo_data_record())
            continue
        file = Path(os.path.normpath(path.absolute().parent / location))
        record = pkg.package_record
        if record is None or not location or file.name != posixpath.basename(location):
            raise InputError(f"{path}: package '{escape(pkg.name)}': conda location '{escape(location)}' "
                             "names no file", hint="restore the lock or lock again")
        records.append(RepoDataRecord(record, file.name, file.as_uri(), file.parent.parent.as_uri()))
    return records


def _channels(env: object) -> Sequence[LockChannel]:
    return env.channels()  # type: ignore[attr-defined,no-any-return]


def _identity(subdir: str, vps: Sequence[str]) -> tuple[str, tuple[str, ...]]:
    return subdir, tuple(customised_virtual_packages(subdir, vps))


def align_platforms(locked: LockedWorkspace, manifest_platforms: Sequence[Platform]) -> LockedWorkspace:
    """Rename locked platforms to the manifest's names where subdir + customised virtual packages match.

    pixi writes rich platforms as ``p1``, ``p2``, ... and maps them back by this identity when it
    reads a lock (pixi_core/src/lock_file/platform_rename.rs); doing the same lets rocmlock read a
    lock that pixi wrote. A name already used by the manifest, or an ambiguous match, is left alone.
    """
    names = {p.name for p in manifest_platforms}
    by_identity: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for plat in manifest_platforms:
        key = _identity(plat.subdir, [format_virtual_package(v) for v in plat.declared_virtual_packages()])
        by_identity.setdefault(key, []).append(plat.name)
    renames: dict[str, str] = {}
    for name, lplat in locked.platforms.items():
        matches = by_identity.get(_identity(lplat.subdir, lplat.virtual_packages), [])
        if name not in names and len(matches) == 1 and matches[0] not in locked.platforms:
            renames[name] = matches[0]
    if not renames:
        return locked
    platforms = {renames.get(n, n): LockedPlatform(renames.get(n, n), p.subdir, p.virtual_packages)
                 for n, p in locked.platforms.items()}
    envs = {name: LockedEnvironment(env.channels, {renames.get(p, p): r for p, r in env.records.items()},
                                    {renames.get(p, p): r for p, r in env.pypi.items()},
                                    {renames.get(p, p): r for p, r in env.sources.items()}, env.options)
            for name, env in locked.environments.items()}
    return LockedWorkspace(platforms, envs)


def empty_platforms(locked: LockedWorkspace, environments: Sequence[Environment]) -> LockedWorkspace:
    """A locked environment's platforms that pixi.lock cannot list (no packages there) as empty record lists.

    pixi.lock has no entry for an environment x platform without packages (``packages: {}``), and pixi reads the
    absence as an empty list (pixi 0.77 satisfiability/platform.rs, verify_platform_satisfiability): such a
    platform, where the manifest asks for no package, is locked (not solved again), exported (an empty
    environment conda can create) and installed (an empty prefix), whichever command reads the lock.
    """
    platforms, envs = dict(locked.platforms), dict(locked.environments)
    for env in environments:
        lenv = locked.environments.get(env.name)
        if lenv is None:
            continue
        empty = [p for p in env.platforms if p.name not in lenv.records and not env.dependencies_for(p)]
        for plat in empty:
            platforms.setdefault(plat.name, lock_platform(plat))
        if empty:
            envs[env.name] = replace(lenv, records={**lenv.records, **{p.name: [] for p in empty}})
    return LockedWorkspace(platforms, envs)
