"""The upstream table (data/upstreams.toml): which upstreams variants.yaml pins, how a release of each is
pinned, the pairing rules between them (read and checked by ``pairing``), and the PyPI -> conda-forge name
table."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from packaging.utils import canonicalize_name

from rocmlock.errors import InputError, expect_type
from rocmlock.upstream.pairing import NAME_PATTERN, Rule, read_rules
from rocmlock.util.tables import (
    Part,
    check_keys,
    check_placeholders,
    expect_choice,
    expect_match,
    expect_unique,
    key,
    read_toml,
)

if TYPE_CHECKING:  # importlib.resources.abc is 3.11+; rocmlock keeps 3.10 imports working (tomlcompat)
    from importlib.resources.abc import Traversable

SourceKind = Literal["sdist", "archive", "git"]
NAME = "upstreams.toml"
TABLE = f"data/{NAME}"
_PYPI = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")  # a project name (PEP 508)
_CONDA = re.compile(r"[a-z0-9][a-z0-9._-]*")
_VARIANT_KEY = re.compile(r"[a-z][a-z0-9_]*")
_DIR = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_HOSTS = ("github", "github_api", "github_raw")  # rocmlock's --github-* options (upstream.Hosts.placeholders)
_TOP = ("upstream", "pairing", "conda_names")
_TOP_EXAMPLES = {"upstream": "an [upstream.<name>] table per upstream", "pairing": "[[pairing]] rules",
                 "conda_names": "a [conda_names] table (PyPI name = conda-forge name where they differ)"}
UPSTREAM_KEYS = ("pypi", "version_key", "recipe", "source")
_UPSTREAM_EXAMPLES = {"pypi": 'pypi = "torch"', "version_key": 'version_key = "pytorch_version"',
                      "source": "a [[upstream.<name>.source]] table"}
# What each kind of source needs and may have (bump.resolve_values): an sdist's sha256 comes from PyPI, an archive
# is downloaded from url and hashed (its commit, if it has one, resolved first), a git source is a commit.
_SOURCE_KINDS: dict[SourceKind, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "sdist": (("sha256_key",), ()),
    "archive": (("url", "sha256_key"), ("rev_key", "repo", "tag", "rev_json", "rev_json_key", "rev_file")),
    "git": (("rev_key",), ("repo", "tag", "rev_json", "rev_json_key", "rev_file")),
}
SOURCE_KEYS = ("name", "kind", "sha256_key", "rev_key", "url", "repo", "tag", "rev_json", "rev_json_key", "rev_file")
_TEMPLATE = re.compile(r"(https://|\{github(_api|_raw)?\}/)\S+")
_SOURCE_STRINGS: dict[str, tuple[re.Pattern[str], str]] = {
    "sha256_key": (_VARIANT_KEY, "the variants.yaml key of its sha256, e.g. pytorch_sha256"),
    "rev_key": (_VARIANT_KEY, "the variants.yaml key of its commit, e.g. triton_git_rev"),
    "url": (_TEMPLATE, "the archive's URL template, https:// or {github}/..., e.g. {github}/o/r/archive/{rev}.tar.gz"),
    "repo": (re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+"), "a GitHub owner/repository, e.g. triton-lang/triton"),
    "tag": (re.compile(r"\S+"), "the release tag template, e.g. v{version}"),
    "rev_file": (_TEMPLATE, "the URL template of a file whose first line is the commit"),
    "rev_json": (_TEMPLATE, "the URL template of a JSON file holding the commit under rev_json_key"),
    "rev_json_key": (re.compile(r"[A-Za-z_][A-Za-z0-9_]*"), "the key of rev_json's object holding the commit"),
}
_SOURCE_EXAMPLES = {"name": 'name = "<source name>"', "kind": 'kind = "sdist" (or "archive", "git")',
                    "sha256_key": 'sha256_key = "<variants.yaml key>"', "rev_key": 'rev_key = "<variants.yaml key>"',
                    "url": 'url = "{github}/<owner>/<repo>/archive/refs/tags/v{version}.tar.gz"',
                    "repo": 'repo = "<owner>/<repo>"', "tag": 'tag = "v{version}"',
                    "rev_file": 'rev_file = "<URL template of a file holding the commit>"',
                    "rev_json": 'rev_json = "<URL template of a JSON file holding the commit>"',
                    "rev_json_key": 'rev_json_key = "<its key holding the commit>"'}


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
    rev_json: str | None = None
    rev_json_key: str | None = None

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(k for k in (self.rev_key, self.sha256_key) if k)

    @property
    def templates(self) -> str:
        """Every template the commit is read at (tag, rev_json, rev_file), for the placeholders they use."""
        return " ".join(t for t in (self.tag, self.rev_json, self.rev_file) if t)

    def rev_files(self, context: dict[str, str]) -> tuple[tuple[str, str | None], ...]:
        """Where the commit is read, in order: ``(url, JSON key)`` of rev_json, then ``(url, None)`` of rev_file
        (tried where rev_json answers 404). A KeyError names a placeholder ``context`` lacks."""
        files: list[tuple[str, str | None]] = []
        if self.rev_json:
            files.append((self.rev_json.format(**context), self.rev_json_key))
        if self.rev_file:
            files.append((self.rev_file.format(**context), None))
        return tuple(files)


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
class Table:
    """The whole upstream table."""

    upstreams: tuple[Upstream, ...]
    rules: tuple[Rule, ...]
    conda_names: tuple[tuple[str, str], ...]
    path: str = f"tools/rocmlock/{TABLE}"  # the file it was read from, for errors

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


@cache
def load_table() -> Table:
    """The packaged upstream table (read once)."""
    return read_table(resources.files("rocmlock").joinpath("data"))


def version_placeholder(upstream: str) -> str:
    """The template placeholder of ``upstream``'s version (``pytorch`` -> ``pytorch_version``)."""
    return f"{upstream.replace('-', '_')}_version"


def read_table(data_dir: Traversable) -> Table:
    """The upstream table of ``data_dir`` (upstreams.toml, and the data tables its rules name), validated: an
    InputError naming the file and the key otherwise."""
    path = Path(str(data_dir.joinpath(NAME)))
    data = read_toml(path)
    check_keys(data, path, (), _TOP, _TOP, NAME, lambda name: f"add {_TOP_EXAMPLES[name]} (the comment at the top "
                                                              "of the file says what it holds)")
    ups = _upstreams(path, expect_type(data["upstream"], dict, path, "upstream", "a table of [upstream.<name>]"))
    rules = read_rules(path, data_dir, data["pairing"], {u.name for u in ups})
    return Table(ups, rules, _conda_names(path, data["conda_names"]), str(path))


def _upstreams(path: Path, rows: dict[str, Any]) -> tuple[Upstream, ...]:
    if not rows:
        raise InputError(f"{path}: key 'upstream' must list at least one upstream", hint=_TOP_EXAMPLES["upstream"])
    # {<upstream>_version} (pytorch_version): the version another upstream has after the bump (Triton's commit is
    # the one PyTorch's pin file names at PyTorch's release tag).
    companions = tuple(version_placeholder(name) for name in rows)
    ups = tuple(_upstream(path, name, row, companions) for name, row in rows.items())
    pypi: dict[str, str] = {}
    sources: dict[str, str] = {}
    variant_keys: dict[str, str] = {}  # each variants.yaml key is filled by one source of one upstream
    for up in ups:
        expect_unique(pypi, str(canonicalize_name(up.pypi)), path, key("upstream", up.name, "pypi"), "PyPI project")
        expect_unique(variant_keys, up.version_key, path, key("upstream", up.name, "version_key"), "variants.yaml key")
        for i, src in enumerate(up.sources):
            where = ("upstream", up.name, "source", i)
            expect_unique(sources, src.name, path, key(*where, "name"), "source name")
            for field_name in ("rev_key", "sha256_key"):
                value = getattr(src, field_name)
                if value:
                    expect_unique(variant_keys, value, path, key(*where, field_name), "variants.yaml key")
    return ups


def _upstream(path: Path, name: str, row: Any, companions: tuple[str, ...]) -> Upstream:
    where = ("upstream", name)
    if not NAME_PATTERN.fullmatch(name):
        raise InputError(f"{path}: key '{key(*where)}' is not an upstream name (the recipe's package name: lower "
                         "case letters and digits, - between words)", hint="e.g. [upstream.flash-attn]")
    row = expect_type(row, dict, path, key(*where), f"a table ([{key(*where)}], then its keys)")
    check_keys(row, path, where, UPSTREAM_KEYS, ("pypi", "version_key", "source"), "an upstream",
               lambda k: f"add {_UPSTREAM_EXAMPLES[k]} under [{key(*where)}]")
    pypi = expect_match(row["pypi"], _PYPI, path, key(*where, "pypi"), "the project's name on PyPI, e.g. torch")
    version_key = expect_match(row["version_key"], _VARIANT_KEY, path, key(*where, "version_key"),
                               "the recipes/variants.yaml key of its version, e.g. pytorch_version")
    recipe = (expect_match(row["recipe"], _DIR, path, key(*where, "recipe"), "a directory of recipes/, e.g. llamafactory")
              if "recipe" in row else None)
    what = f"a non-empty list of sources ([[{key(*where, 'source')}]] tables)"
    items = expect_type(row["source"], list, path, key(*where, "source"), what)
    if not items:
        raise InputError(f"{path}: key '{key(*where, 'source')}' must be {what}, got an empty list",
                         hint="list at least one source")
    sources: list[Source] = []
    for i, item in enumerate(items):
        sources.append(_source(path, (*where, "source", i), item, sources, companions))
    return Upstream(name, pypi, version_key, tuple(sources), recipe)


def _source(path: Path, where: tuple[Part, ...], row: Any, earlier: list[Source],
            companions: tuple[str, ...]) -> Source:
    row = expect_type(row, dict, path, key(*where), "a table of name, kind and the keys its kind takes")
    check_keys(row, path, where, SOURCE_KEYS, ("name", "kind"), "a source",
               lambda k: f"add {_SOURCE_EXAMPLES[k]} to {key(*where)}")
    name = expect_match(row["name"], NAME_PATTERN, path, key(*where, "name"),
                        "the source's name (what --sha256/--rev take), e.g. triton-llvm")
    kind = expect_choice(row["kind"], _SOURCE_KINDS, path, key(*where, "kind"))
    required, optional = _SOURCE_KINDS[kind]
    check_keys(row, path, where, ("name", "kind", *required, *optional), required, f'a kind = "{kind}" source',
               lambda k: f"add {_SOURCE_EXAMPLES[k]} to {key(*where)}", suggest=False)
    text = {k: expect_match(row[k], _SOURCE_STRINGS[k][0], path, key(*where, k), _SOURCE_STRINGS[k][1])
            for k in (*required, *optional) if k in row}
    if ("repo" in text) != ("tag" in text):
        missing = "tag" if "repo" in text else "repo"
        raise InputError(f"{path}: key '{key(*where, missing)}' is missing: repo and tag name the release tag "
                         "whose commit --rev defaults to, together", hint=f"add {_SOURCE_EXAMPLES[missing]}")
    if ("rev_json" in text) != ("rev_json_key" in text):
        missing = "rev_json_key" if "rev_json" in text else "rev_json"
        raise InputError(f"{path}: key '{key(*where, missing)}' is missing: rev_json and rev_json_key name the JSON "
                         "file and the key that hold the commit, together", hint=f"add {_SOURCE_EXAMPLES[missing]}")
    if "rev_key" in text and not {"tag", "rev_file", "rev_json"} & set(text):
        raise InputError(f"{path}: key '{key(*where, 'rev_key')}': nothing says where the commit comes from",
                         hint=f"add {_SOURCE_EXAMPLES['repo']} and {_SOURCE_EXAMPLES['tag']}, or "
                              f"{_SOURCE_EXAMPLES['rev_file']}, or {_SOURCE_EXAMPLES['rev_json']}")
    revs = [f"{s.name.replace('-', '_')}_rev" for s in earlier if s.rev_key]
    before = ("version", *_HOSTS, *companions, *revs)  # what tag and rev_file see: not this source's commit yet
    after = (*before, "rev", f"{name.replace('-', '_')}_rev") if "rev_key" in text else before
    for k, allowed in (("tag", before), ("rev_file", before), ("rev_json", before), ("url", after)):
        if k in text:
            check_placeholders(text[k], allowed, path, key(*where, k))
    return Source(name=name, kind=kind, **text)


def _conda_names(path: Path, value: Any) -> tuple[tuple[str, str], ...]:
    rows = expect_type(value, dict, path, "conda_names", "a table of PyPI name = conda-forge name")
    seen: dict[str, str] = {}
    for pypi, conda in rows.items():
        name = key("conda_names", pypi)
        if not _PYPI.fullmatch(pypi):
            raise InputError(f"{path}: key '{name}' is not a PyPI project name", hint='e.g. torch = "pytorch"')
        expect_match(conda, _CONDA, path, name, "the conda-forge package name, e.g. pytorch")
        expect_unique(seen, str(canonicalize_name(pypi)), path, name, "PyPI project (normalized)")
    return tuple(sorted((str(canonicalize_name(k)), v) for k, v in rows.items()))
