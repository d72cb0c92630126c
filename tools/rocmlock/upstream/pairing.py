"""The pairing rules of the upstream table (data/upstreams.toml's ``[[pairing]]``): which follower versions go
with a leader version (``minor-offset``, ``at-most``, ``series``, the last possibly read from a data table of its
own such as aotriton.toml), how each is read and checked, and what it asks for in words."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from packaging.version import InvalidVersion, Version

from rocmlock.errors import InputError, expect_type
from rocmlock.util.tables import (
    Part,
    check_keys,
    check_placeholders,
    did_you_mean,
    expect_choice,
    expect_match,
    expect_unique,
    expect_whole,
    key,
    read_toml,
)

if TYPE_CHECKING:  # importlib.resources.abc is 3.11+; rocmlock keeps 3.10 imports working (tomlcompat)
    from importlib.resources.abc import Traversable

RuleKind = Literal["minor-offset", "at-most", "series"]
Verdict = Literal["ok", "violated", "unknown"]
UPSTREAMS_FILE = "tools/rocmlock/data/upstreams.toml"  # where rules are written, for hints
SERIES = re.compile(r"[0-9]+\.[0-9]+")
NAME_PATTERN = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")  # upstream, source and rule names
TEXT_PATTERN = re.compile(r"\S(.*\S)?", re.DOTALL)
_RELEASE = re.compile(r"[0-9]+(\.[0-9]+)+")
_TABLE_FILE = re.compile(r"[a-z0-9_]+\.toml")
_RULE_KINDS: dict[RuleKind, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "minor-offset": (("follower_major", "leader_major", "offset"), ("stable_from",)),
    "at-most": (("floor",), ()),
    "series": ((), ("series", "table", "record")),
}
_RULE_COMMON = ("name", "follower", "leader", "kind", "why")
RULE_KEYS = (*_RULE_COMMON, "follower_major", "leader_major", "offset", "stable_from", "floor", "series", "table",
             "record")
_RULE_EXAMPLES = {"name": 'name = "<follower>-<leader>"', "follower": 'follower = "<upstream>"',
                  "leader": 'leader = "<upstream>"', "kind": 'kind = "series" (or "minor-offset", "at-most")',
                  "why": 'why = "<where the rule comes from>"', "follower_major": "follower_major = 0",
                  "leader_major": "leader_major = 2", "offset": "offset = 15", "floor": 'floor = "2.11"',
                  "series": 'series = { "2.12" = "3.7" }', "stable_from": 'stable_from = "0.29.2"'}


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
    # (minor-offset) the first follower release built on the leader's stable ABI: from it on, follower 0.N pairs
    # with every leader from 2.(N - offset) on (torchvision 0.29.2: one py3-none wheel, torch>=2.14.0).
    stable_from: str = ""
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
        return f"tools/rocmlock/data/{self.table}" if self.table else UPSTREAMS_FILE

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
        if self.stable(follower):
            lead = _minor(leader)
            return "ok" if lead[0] == self.leader_major and lead[1] >= got[1] - self.offset else "violated"
        if self.kind == "at-most":
            return "ok" if _minor(self.floor) <= got <= _minor(leader) else "violated"
        return "ok" if got == _minor(expected) else "violated"

    def stable(self, follower: str) -> bool:
        """Whether ``follower``'s version is at or after the rule's ``stable_from`` (built on the stable ABI)."""
        return bool(self.stable_from) and Version(follower) >= Version(self.stable_from)

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
        if self.kind == "minor-offset" and self.stable(follower) and major == self.follower_major:
            return f"{self.leader} >={self.leader_major}.{minor - self.offset}"
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
        if self.stable_from:
            return f"{self.follower} {expected}.*, or a stable-ABI {self.follower} >={self.stable_from} of an older series"
        return f"{self.follower} {expected}.*"


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


def read_rules(path: Path, data_dir: Traversable, value: Any, upstreams: set[str]) -> tuple[Rule, ...]:
    items = expect_type(value, list, path, "pairing", "a list of pairing rules ([[pairing]] tables)")
    rules = tuple(_rule(path, data_dir, ("pairing", i), row, upstreams) for i, row in enumerate(items))
    names: dict[str, str] = {}
    for i, rule in enumerate(rules):
        expect_unique(names, rule.name, path, key("pairing", i, "name"), "rule name")
    return rules


def _rule(path: Path, data_dir: Traversable, where: tuple[Part, ...], row: Any, upstreams: set[str]) -> Rule:
    row = expect_type(row, dict, path, key(*where), "a table of name, follower, leader, kind, why and its kind's keys")
    check_keys(row, path, where, RULE_KEYS, _RULE_COMMON, "a pairing rule",
               lambda k: f"add {_RULE_EXAMPLES[k]} to {key(*where)}")
    kind = expect_choice(row["kind"], _RULE_KINDS, path, key(*where, "kind"))
    required, optional = _RULE_KINDS[kind]
    check_keys(row, path, where, (*_RULE_COMMON, *required, *optional), required, f'a kind = "{kind}" rule',
               lambda k: f"add {_RULE_EXAMPLES[k]} to {key(*where)}", suggest=False)
    fields: dict[str, Any] = {
        "name": expect_match(row["name"], NAME_PATTERN, path, key(*where, "name"), "the rule's name, e.g. triton-pytorch"),
        "kind": kind,
        "why": expect_match(row["why"], TEXT_PATTERN, path, key(*where, "why"), "the reason for the rule, in words"),
        "leader": _member(path, key(*where, "leader"), row["leader"], upstreams),
    }
    fields["follower"] = _follower(path, where, row, upstreams, fields["leader"])
    for k in ("follower_major", "leader_major", "offset"):
        if k in row:
            fields[k] = expect_whole(row[k], path, key(*where, k), minimum=0 if k != "offset" else None)
    if "stable_from" in row:
        fields["stable_from"] = expect_match(row["stable_from"], _RELEASE, path, key(*where, "stable_from"),
                                             "the first follower release built on the stable ABI, e.g. 0.29.2")
    if "floor" in row:
        fields["floor"] = expect_match(row["floor"], SERIES, path, key(*where, "floor"),
                                       "the oldest follower series (major.minor), e.g. 2.11")
    if kind == "series":
        fields.update(_series_of(path, data_dir, where, row, fields["leader"]))
    return Rule(**fields)


def _member(path: Path, name: str, value: Any, upstreams: set[str]) -> str:
    text = expect_type(value, str, path, name, "an upstream of [upstream.<name>]")
    if text not in upstreams:
        raise InputError(f"{path}: key '{name}': there is no [upstream.{text}]{did_you_mean(text, upstreams)}",
                         hint=f"one of: {', '.join(sorted(upstreams))}")
    return text


def _follower(path: Path, where: tuple[Part, ...], row: dict[str, Any], upstreams: set[str], leader: str) -> str:
    name = key(*where, "follower")
    if "table" not in row:
        follower = _member(path, name, row["follower"], upstreams)
    else:  # pinned by a data table of its own, not by variants.yaml
        follower = expect_match(row["follower"], NAME_PATTERN, path, name, "the name of what the table pins, e.g. aotriton")
        if follower in upstreams:
            raise InputError(f"{path}: key '{name}': {follower} is an [upstream.{follower}], pinned in variants.yaml, "
                             f"but the rule's table ({key(*where, 'table')}) would pin it too",
                             hint="remove table (and record) from the rule, or the upstream")
    if follower == leader:
        raise InputError(f"{path}: key '{name}': a rule pairs two upstreams; {follower} is its leader too",
                         hint="give the rule another follower")
    return follower


def _series_of(path: Path, data_dir: Traversable, where: tuple[Part, ...], row: dict[str, Any],
               leader: str) -> dict[str, Any]:
    """A ``series`` rule's leader -> follower series: written in the rule, or read from its ``table``."""
    if "table" not in row:
        if "record" in row:
            raise InputError(f"{path}: key '{key(*where, 'record')}' is one only a rule with a table takes",
                             hint="remove it: a missing leader series of this rule is recorded in its series")
        if "series" not in row:
            raise InputError(f"{path}: key '{key(*where, 'series')}' is missing", hint=f"add {_RULE_EXAMPLES['series']}")
        return {"series": _series_table(path, (*where, "series"), row["series"])}
    if "series" in row:
        raise InputError(f"{path}: key '{key(*where, 'series')}': a rule with a table takes its series from the table",
                         hint="remove series here, and list the leader series in that table")
    table = expect_match(row["table"], _TABLE_FILE, path, key(*where, "table"),
                         "a data table under tools/rocmlock/data/, e.g. aotriton.toml")
    if not data_dir.joinpath(table).is_file():
        raise InputError(f"{path}: key '{key(*where, 'table')}': {data_dir} has no {table}",
                         hint="name a table of that directory, or add it there")
    fields: dict[str, Any] = {"table": table}
    if "record" in row:
        fields["record"] = expect_match(row["record"], TEXT_PATTERN, path, key(*where, "record"), "the hint, in words")
        check_placeholders(fields["record"], ("leader", "series"), path, key(*where, "record"))
    fields["pinned"], fields["series"] = _table_series(data_dir, table, leader)
    return fields


def _series_table(path: Path, where: tuple[Part, ...], value: Any) -> tuple[tuple[str, str], ...]:
    what = 'a table of leader series = follower series (major.minor), e.g. { "2.12" = "3.7" }'
    table = expect_type(value, dict, path, key(*where), what)
    if not table:
        raise InputError(f"{path}: key '{key(*where)}' must be {what}, got an empty table",
                         hint="fill it, or remove the key")
    for lead, follow in table.items():
        if not SERIES.fullmatch(lead):
            raise InputError(f"{path}: key '{key(*where, lead)}' is not a leader series (major.minor)",
                             hint='quote it: "2.12" = "3.7" (a bare 2.12 is a nested key)')
        expect_match(follow, SERIES, path, key(*where, lead), "the follower series (major.minor), e.g. 3.7")
    return tuple(sorted(table.items()))


def _table_series(data_dir: Traversable, name: str, leader: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """A follower's data table (aotriton.toml): its ``version``, and the ``<leader>`` series it covers.

    The table pins one release, so every series it lists pairs with that release.
    """
    where = f"tools/rocmlock/data/{name}"
    data = read_toml(Path(str(data_dir.joinpath(name))), shown=where)
    version = data.get("version")
    if not isinstance(version, str):
        raise InputError(f"{where}: key 'version' must be the release it pins (a string)",
                         hint="write it as a string, e.g. \"2.14.0\"")
    parse_version(version, f"{where}: key 'version'")
    series = data.get(leader)
    if not isinstance(series, list) or not series or not all(SERIES.fullmatch(str(s)) for s in series):
        raise InputError(
            f"{where}: key '{leader}' must list the {leader} series (major.minor) it was checked for",
            hint=f'e.g. {leader} = ["2.12"]',
        )
    return version, tuple((s, version) for s in sorted(set(series)))
