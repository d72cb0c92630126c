"""The upstream table (data/upstreams.toml): which upstreams variants.yaml pins, how a release of each is
pinned, the pairing rules between them, and the PyPI -> conda-forge name table."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any, Literal

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from rocmlock.errors import InputError
from rocmlock.tomlcompat import tomllib

if TYPE_CHECKING:  # importlib.resources.abc is 3.11+; rocmlock keeps 3.10 imports working (tomlcompat)
    from importlib.resources.abc import Traversable

SourceKind = Literal["sdist", "archive", "git"]
RuleKind = Literal["minor-offset", "at-most", "series"]
Verdict = Literal["ok", "violated", "unknown"]
TABLE = "data/upstreams.toml"
SERIES = re.compile(r"^[0-9]+\.[0-9]+$")


@dataclass(frozen=True)
class Source:
    """One source of a recipe: its name (for --sha256/--rev), kind and the variants.yaml keys it fills."""

    name: str
    kind: SourceKind
    sha256_key: str | None = None
    rev_key: str | None = None
    url: str | None = None
    repo: str | None = None
    tag: str | None = None
    rev_file: str | None = None

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(k for k in (self.rev_key, self.sha256_key) if k)


@dataclass(frozen=True)
class Upstream:
    """An upstream project pinned in variants.yaml under its recipe package name."""

    name: str
    pypi: str
    version_key: str
    sources: tuple[Source, ...]
    recipe: str | None = None

    @property
    def keys(self) -> tuple[str, ...]:
        return (self.version_key, *(k for s in self.sources for k in s.keys))


@dataclass(frozen=True)
class Rule:
    """A pairing rule: which ``follower`` versions go with a ``leader`` version, and why."""

    name: str
    follower: str
    leader: str
    kind: RuleKind
    why: str
    follower_major: int = 0
    leader_major: int = 0
    offset: int = 0
    floor: str = ""
    series: tuple[tuple[str, str], ...] = field(default=())
    # A follower that variants.yaml does not pin (AOTriton): its data table under tools/rocmlock/data/, the
    # release that table pins, and how to record a new leader series there ({leader}, {series}).
    table: str = ""
    pinned: str = ""
    record: str = ""

    @property
    def recorded_in(self) -> str:
        """The file a missing leader series is recorded in."""
        return f"tools/rocmlock/data/{self.table}" if self.table else f"tools/rocmlock/{TABLE}"

    def record_hint(self, leader: str) -> str:
        """The fix when ``leader``'s series is not recorded: the rule's ``record``, or add it to the rule."""
        if self.record:
            major, minor = _minor(leader)
            return self.record.format(leader=leader, series=f"{major}.{minor}")
        return f"find it upstream ({self.why}) and add it to the rule in {self.recorded_in}"

    def check(self, leader: str, follower: str) -> Verdict:
        """Whether ``follower``'s version goes with ``leader``'s (``unknown``: the table has no answer)."""
        expected = self.expected_series(leader)
        if expected is None:
            return "unknown"
        got = _minor(follower)
        if self.kind == "at-most":
            return "ok" if _minor(self.floor) <= got <= _minor(leader) else "violated"
        return "ok" if got == _minor(expected) else "violated"

    def expected_series(self, leader: str) -> str | None:
        """The follower series the rule asks for (``at-most``: the leader's series, the upper bound)."""
        major, minor = _minor(leader)
        if self.kind == "minor-offset":
            return f"{self.follower_major}.{minor + self.offset}" if major == self.leader_major else None
        if self.kind == "at-most":
            return f"{major}.{minor}"
        return dict(self.series).get(f"{major}.{minor}")

    def leader_needs(self, follower: str) -> str:
        """Which leader versions ``follower``'s version goes with, in words (``pytorch 2.12.*``)."""
        major, minor = _minor(follower)
        if self.kind == "minor-offset":
            ok = major == self.follower_major and minor >= self.offset
            return f"{self.leader} {self.leader_major}.{minor - self.offset}.*" if ok else f"no {self.leader}"
        if self.kind == "at-most":
            return f"{self.leader} >={major}.{minor}"
        leaders = [f"{lead}.*" for lead, follow in self.series if follow == f"{major}.{minor}"]
        return (
            f"{self.leader} {' or '.join(leaders)}"
            if leaders
            else f"{self.leader}: not recorded in {self.recorded_in}"
        )

    def describe(self, leader: str) -> str:
        """What the rule asks of the follower for ``leader`` in words (``torchvision 0.27.*``)."""
        expected = self.expected_series(leader)
        if expected is None:
            return f"{self.follower} for {self.leader} {leader}: not recorded in {self.recorded_in}"
        if self.kind == "at-most":
            return f"{self.follower} >={self.floor},<={expected}.*"
        return f"{self.follower} {expected}.*"


@dataclass(frozen=True)
class Table:
    """The whole upstream table."""

    upstreams: tuple[Upstream, ...]
    rules: tuple[Rule, ...]
    conda_names: tuple[tuple[str, str], ...]

    def get(self, name: str, where: str = "NAME") -> Upstream:
        """The upstream called ``name``, or an InputError listing the known names."""
        for up in self.upstreams:
            if up.name == name:
                return up
        known = ", ".join(u.name for u in self.upstreams)
        raise InputError(f"{where}: unknown upstream '{name}'", hint=f"one of: {known}")

    def source(self, name: str, where: str) -> tuple[Upstream, Source]:
        """The upstream and source called ``name`` (``triton-llvm``), or an InputError listing them."""
        for up in self.upstreams:
            for src in up.sources:
                if src.name == name:
                    return up, src
        known = ", ".join(s.name for u in self.upstreams for s in u.sources)
        raise InputError(f"{where}: unknown source '{name}'", hint=f"one of: {known}")

    def rules_of(self, name: str) -> tuple[Rule, ...]:
        """The rules ``name`` takes part in, as follower or leader."""
        return tuple(r for r in self.rules if name in (r.follower, r.leader))

    def table_pins(self) -> dict[str, list[str]]:
        """The followers pinned by a data table of their own instead of variants.yaml (``aotriton``)."""
        return {r.follower: [r.pinned] for r in self.rules if r.table}

    def conda_name(self, pypi_name: str) -> str:
        """The conda-forge package of a PyPI project name."""
        norm = str(canonicalize_name(pypi_name))
        return dict(self.conda_names).get(norm, norm)


def parse_version(text: str, where: str) -> Version:
    """``text`` as a PEP 440 version, or an InputError naming ``where``."""
    try:
        return Version(text)
    except InvalidVersion:
        raise InputError(
            f"{where}: '{text}' is not a version", hint="write it as PyPI does, e.g. 2.13.0"
        ) from None


def _minor(version: str) -> tuple[int, int]:
    release = Version(version).release
    return release[0], release[1] if len(release) > 1 else 0


@cache
def load_table() -> Table:
    """The packaged upstream table (read once)."""
    return read_table(resources.files("rocmlock").joinpath("data"))


def read_table(data_dir: Traversable) -> Table:
    """The upstream table of ``data_dir`` (upstreams.toml, and the data tables its rules name)."""
    data = tomllib.loads(data_dir.joinpath("upstreams.toml").read_text())
    ups = tuple(_upstream(name, row) for name, row in data["upstream"].items())
    rules = tuple(_rule(row, data_dir) for row in data["pairing"])
    names = tuple(sorted((str(canonicalize_name(k)), v) for k, v in data["conda_names"].items()))
    return Table(ups, rules, names)


def _upstream(name: str, row: dict[str, Any]) -> Upstream:
    sources = tuple(Source(**src) for src in row["source"])
    return Upstream(name, row["pypi"], row["version_key"], sources, row.get("recipe"))


def _rule(row: dict[str, Any], data_dir: Traversable) -> Rule:
    fields = dict(row)
    fields["series"] = tuple(sorted(row.get("series", {}).items()))
    if row.get("table"):
        fields["pinned"], fields["series"] = _table_series(data_dir, row["table"], row["leader"])
    return Rule(**fields)


def _table_series(data_dir: Traversable, name: str, leader: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """A follower's data table (aotriton.toml): its ``version``, and the ``<leader>`` series it covers.

    The table pins one release, so every series it lists pairs with that release.
    """
    where = f"tools/rocmlock/data/{name}"
    try:
        data = tomllib.loads(data_dir.joinpath(name).read_text())
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{where}: not valid TOML: {exc}", hint="fix the syntax, or restore it from git") from None
    version = data.get("version")
    if not isinstance(version, str):
        raise InputError(f"{where}: key 'version' must be the release it pins (a string)")
    parse_version(version, f"{where}: key 'version'")
    series = data.get(leader)
    if not isinstance(series, list) or not series or not all(SERIES.fullmatch(str(s)) for s in series):
        raise InputError(
            f"{where}: key '{leader}' must list the {leader} series (major.minor) it was checked for",
            hint=f'e.g. {leader} = ["2.12"]',
        )
    return version, tuple((s, version) for s in sorted(set(series)))
