"""``rocmlock outdated``: for every upstream pinned in recipes/variants.yaml, the pin, the newest release
on PyPI, where a bump's source values would come from, and which companions a bump drags along.

PyPI is the one source of versions (every upstream here publishes its releases there). What PyPI lacks
for some (no sdist: the GitHub archive's hash, a tag's commit) is looked up on GitHub; when the host
cannot reach it that cell says ``unknown (unreachable)`` and the command still succeeds.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from rocmlock.build.recipes import ENV_KEYS, VARIANTS_FILE
from rocmlock.errors import OperationError
from rocmlock.upstream.client import Client, Unreachable
from rocmlock.upstream.pairing import Rule
from rocmlock.upstream.pins import Source, Table, Upstream, load_table, version_placeholder
from rocmlock.upstream.pypijson import Project
from rocmlock.upstream.rocmreleases import RocmLine, rocm_line
from rocmlock.upstream.yamledit import load, values
from rocmlock.util.text import format_table

UNREACHABLE = "unknown (unreachable)"


@dataclass(frozen=True)
class Row:
    """One upstream: pinned, newest, source values for the newest, companions, or the error that hid them."""

    name: str
    pypi: str
    pinned: tuple[str, ...]
    newest: str | None
    sources: tuple[tuple[str, str], ...] = ()
    companions: tuple[str, ...] = ()
    error: str | None = None
    # Every final release above all the pins, oldest first (PyTorch: the releases a ROCm version could move to).
    newer: tuple[str, ...] = ()

    @property
    def behind(self) -> bool:
        return self.newest is not None and all(Version(p) < Version(self.newest) for p in self.pinned)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "pypi": self.pypi,
            "pinned": list(self.pinned),
            "newest": self.newest,
            "behind": self.behind,
            "sources": dict(self.sources),
            "companions": list(self.companions),
            "newer": list(self.newer),
            "error": self.error,
        }


@dataclass(frozen=True)
class Report:
    """Every tracked upstream, the version keys of variants.yaml no upstream claims, and the ROCm releases newer
    than the matrix (a line of its own: its lookup failing fails nothing)."""

    rows: tuple[Row, ...]
    untracked: tuple[str, ...] = ()
    rocm: RocmLine | None = None

    @property
    def ok(self) -> bool:
        return all(r.error is None for r in self.rows)

    def to_json(self) -> dict[str, Any]:
        return {"upstreams": [r.to_json() for r in self.rows], "untracked": list(self.untracked),
                "rocm": self.rocm.to_json() if self.rocm else None}


def outdated(recipes_dir: Path, client: Client, table: Table | None = None) -> Report:
    """Look up every upstream of ``recipes_dir``'s variants.yaml on PyPI (and GitHub where reachable)."""
    from rocmlock.upstream.bump import RECIPES, journal_root
    from rocmlock.util import journal

    table = table or load_table()
    journal.settle(journal_root(recipes_dir), RECIPES)  # an interrupted bump: finished before it is read
    doc = load(recipes_dir / VARIANTS_FILE)
    tracked = [u for u in table.upstreams if u.version_key in doc.data]
    claimed = {k for u in table.upstreams for k in u.keys}
    untracked = tuple(
        sorted(
            str(k) for k in doc.data if str(k).endswith("_version") and k not in claimed and k not in ENV_KEYS
        )
    )
    # {<upstream>_version} placeholders read at the pinned versions (Triton's commit at the pinned PyTorch's pin).
    companions = {version_placeholder(u.name): v[0] for u in tracked if len(v := values(doc, u.version_key)) == 1}
    rows = tuple(_row(u, tuple(values(doc, u.version_key)), client, table, companions) for u in tracked)
    matrix = values(doc, "rocm_version") if "rocm_version" in doc.data else []
    return Report(rows, untracked, rocm_line(matrix, client) if matrix else None)


def newest_release(project: Project) -> str | None:
    """The highest final release with at least one file that is not yanked."""
    final = [
        Version(v)
        for v, files in project.releases
        if files and not all(f.yanked for f in files) and _final(v)
    ]
    return str(max(final)) if final else None


def _final(version: str) -> bool:
    try:
        parsed = Version(version)
    except ValueError:
        return False
    return not (parsed.is_prerelease or parsed.is_devrelease)


def _row(up: Upstream, pinned: tuple[str, ...], client: Client, table: Table, versions: dict[str, str]) -> Row:
    try:
        return _checked_row(up, pinned, client, table, versions)
    except OperationError as exc:  # unreachable, or an answer that is not what the API promises: this row only
        return Row(up.name, up.pypi, pinned, None, error=str(exc))


def _checked_row(up: Upstream, pinned: tuple[str, ...], client: Client, table: Table,
                 versions: dict[str, str]) -> Row:
    project = client.project(up.pypi)
    newest = newest_release(project)
    if newest is None:
        return Row(up.name, up.pypi, pinned, None, error=f"no final release of '{up.pypi}' on the index")
    sources = tuple(_sources(up, newest, client, versions))
    companions = [_companion(rule, up, newest, client, table) for rule in table.rules_of(up.name)]
    if any("none released" in c or "not recorded" in c for c in companions):
        complete = _newest_complete(up, client, table)
        if complete and complete != newest:
            companions.append(f"newest {up.name} with every companion released: {complete}")
    return Row(up.name, up.pypi, pinned, newest, sources, tuple(companions), newer=newer_releases(project, pinned))


def newer_releases(project: Project, pinned: tuple[str, ...]) -> tuple[str, ...]:
    """The final releases of ``project`` (with a file that is not yanked) above every pin, oldest first."""
    top = max(Version(p) for p in pinned)
    found = {Version(v) for v, files in project.releases
             if files and not all(f.yanked for f in files) and _final(v) and Version(v) > top}
    return tuple(str(v) for v in sorted(found))


def _sources(up: Upstream, version: str, client: Client, companions: dict[str, str]) -> list[tuple[str, str]]:
    """Per source of ``version``: the sdist sha256, the commit, and whether the archive can be hashed here."""
    out: list[tuple[str, str]] = []
    context = {**companions, "version": version, **client.hosts.placeholders()}
    for src in up.sources:
        if src.kind == "sdist":
            sdist = client.project(up.pypi).sdist(version)
            out.append((src.name, f"sdist sha256 {sdist.sha256}" if sdist else "no sdist on PyPI"))
            continue
        cells = []
        if src.rev_key:
            rev = _rev(src, context, client)
            cells.append(f"commit {rev}" if rev.startswith("unknown") else f"commit {rev}{_read_at(src, companions)}")
            if rev.startswith("unknown"):
                sha = f"sha256 {UNREACHABLE}" if rev == UNREACHABLE else "sha256 unknown (needs the commit)"
                out.append((src.name, "; ".join([*cells, sha] if src.sha256_key else cells)))
                continue
            context["rev"] = context[f"{src.name.replace('-', '_')}_rev"] = rev
        if src.sha256_key:
            url = (src.url or "").format(**context)
            cells.append(
                "sha256: `rocmlock bump` downloads the archive"
                if client.reachable(url)
                else f"sha256 {UNREACHABLE}"
            )
        out.append((src.name, "; ".join(cells)))
    return out


def _read_at(src: Source, companions: dict[str, str]) -> str:
    """`` (at pytorch 2.12.1)`` where the commit was read at another upstream's pinned version."""
    template = src.templates
    used = [f"{name.removesuffix('_version').replace('_', '-')} {value}" for name, value in sorted(companions.items())
            if "{" + name + "}" in template]
    return f" (at {', '.join(used)})" if used else ""


def _rev(src: Source, context: dict[str, str], client: Client) -> str:
    try:
        if src.tag and src.repo:
            return client.github_commit(src.repo, src.tag.format(**context))
        if files := src.rev_files(context):
            return client.commit_in_files(files, f"source '{src.name}'")
    except KeyError as exc:  # the rev_file names an earlier source's commit, which is not known either
        name = str(exc.args[0])
        if name.endswith("_version"):  # or another upstream's version, which variants.yaml pins several of
            return f"unknown (needs one pinned {name.removesuffix('_version').replace('_', '-')} version)"
        return f"unknown (needs the {name.removesuffix('_rev').replace('_', '-')} commit)"
    except Unreachable:
        return UNREACHABLE
    except OperationError as exc:
        return f"unknown ({exc})"
    return UNREACHABLE


def _companion(rule: Rule, up: Upstream, newest: str, client: Client, table: Table) -> str:
    """What ``rule`` asks of the other side when ``up`` moves to ``newest``."""
    if rule.table:
        return _table_companion(rule, newest)
    if up.name == rule.follower:
        return f"needs {rule.leader_needs(newest)} ({rule.name})"
    if rule.expected_series(newest) is None:
        follower = table.get(rule.follower)
        return f"{rule.describe(newest)} ({rule.name}){_metadata_says(up, follower, newest, client)}"
    try:
        fit = _fitting(rule, newest, client, table)
    except OperationError as exc:
        return f"{rule.describe(newest)}: PyPI lookup failed ({exc})"
    if fit is None:
        return f"{rule.describe(newest)}: none released on PyPI yet ({rule.name})"
    return f"{rule.follower} {fit} ({rule.name})"


def _table_companion(rule: Rule, newest: str) -> str:
    """A follower pinned by its own data table (AOTriton): its release, the leader series it was checked for."""
    checked = f"checked for {rule.leader} {', '.join(lead for lead, _ in rule.series)}"
    if rule.check(newest, rule.pinned) == "ok":
        return f"{rule.follower} {rule.pinned} ({rule.name}; {rule.recorded_in}, {checked})"
    return f"{rule.describe(newest)} ({rule.name}; it pins {rule.pinned}, {checked})"


def _fitting(rule: Rule, leader: str, client: Client, table: Table) -> Version | None:
    """The newest final release of the follower that ``rule`` allows with ``leader`` (None: none, or unknown)."""
    if rule.table:  # not on PyPI: the one release its table pins, when the table covers leader's series
        return Version(rule.pinned) if rule.check(leader, rule.pinned) == "ok" else None
    project = client.project(table.get(rule.follower).pypi)
    fits = [
        Version(v) for v, files in project.releases if files and _final(v) and rule.check(leader, v) == "ok"
    ]
    return max(fits) if fits else None


def _newest_complete(up: Upstream, client: Client, table: Table) -> str | None:
    """The newest release of ``up`` for which every companion it leads has a release on PyPI."""
    rules = [r for r in table.rules if r.leader == up.name]
    candidates = sorted(
        (Version(v) for v, files in client.project(up.pypi).releases if files and _final(v)), reverse=True
    )
    for version in candidates:
        try:
            if all(_fitting(rule, str(version), client, table) is not None for rule in rules):
                return str(version)
        except OperationError:
            return None
    return None


def _metadata_says(leader: Upstream, follower: Upstream, version: str, client: Client) -> str:
    """What the leader's own metadata on PyPI requires of the follower, when PyPI shows it for ``version``.

    The JSON API carries ``requires_dist`` of the newest release only (torch 2.15.0: ``triton~=3.9.0;
    platform_system == "Linux"``), so this is a lead for whoever records the rule, not the rule itself.
    """
    project = client.project(leader.pypi)
    if project.latest != version:
        return ""
    for text in project.requires_dist:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        if canonicalize_name(req.name) == canonicalize_name(follower.pypi) and str(req.specifier):
            return f"; PyPI's {leader.pypi} {version} requires {req.name}{req.specifier}"
    return ""


def render_report(report: Report) -> str:
    """The report as a table for people, then each upstream's sources and companions."""
    rows = [("upstream", "pinned", "newest", "status")]
    for r in report.rows:
        status = "error" if r.error else "behind" if r.behind else "up to date"
        rows.append((r.name, ", ".join(r.pinned), r.newest or "?", status))
    lines = format_table(rows)
    for r in report.rows:
        if r.error:
            lines.append(f"{r.name}: {r.error}")
            continue
        if not r.behind:
            continue
        lines.append(f"{r.name} {r.newest}:")
        if len(r.newer) > 1:
            lines.append(f"  newer than the pins: {', '.join(r.newer)}")
        lines += [f"  source {name}: {cell}" for name, cell in r.sources]
        lines += [f"  companion: {c}" for c in r.companions]
    if report.rocm:
        lines.append(report.rocm.render())
    if report.untracked:
        lines.append(
            f"not tracked (no row in tools/rocmlock/data/upstreams.toml): {', '.join(report.untracked)}"
        )
    return "\n".join(lines)
