"""``rocmlock bump NAME=VERSION ...``: move upstream pins in recipes/variants.yaml, correctly and atomically.

The pipeline: validate the request -> load variants.yaml round-trip -> check the pairing rules on the
pins as they would be -> resolve each new version's values (PyPI sdist digests, commits and archive
hashes given or computed) -> fill the zip positions -> rewrite a recipe's run requirements from the
new sdist (llamafactory) -> diff; then (``write_bump``) every changed file committed as one set through the
journal the lock outputs use (:mod:`rocmlock.util.journal`), or none.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from rocmlock.build.recipes import VARIANTS_FILE
from rocmlock.errors import InputError, OperationError
from rocmlock.upstream.client import Client, Unreachable
from rocmlock.upstream.pairing import Rule, parse_version
from rocmlock.upstream.pins import Source, Table, Upstream, load_table, version_placeholder
from rocmlock.upstream.yamledit import Document, load, set_value, values, zip_group
from rocmlock.util import journal
from rocmlock.util.credentials import mask_query

Log = Callable[[str], None]
SHA256 = re.compile(r"[0-9a-f]{64}")
COMMIT = re.compile(r"[0-9a-f]{40}")
# bump's files (variants.yaml and a recipe) go through the journal the lock outputs use (rocmlock.util.journal):
# a kill at any step leaves the old pair or the new one, and the next bump (or outdated) finishes the write.
RECIPES = journal.Subject("the recipes", "`rocmlock bump`")


@dataclass(frozen=True)
class BumpRequest:
    """What to bump: ``(upstream, version)`` pairs, and per-source hashes and commits given by hand."""

    versions: tuple[tuple[str, str], ...]
    sha256: tuple[tuple[str, str], ...] = ()
    revs: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Change:
    """One value of variants.yaml that moves."""

    key: str
    old: str
    new: str


@dataclass(frozen=True)
class BumpResult:
    """What changed (files as old/new text), and whether it was written."""

    files: tuple[tuple[Path, str, str], ...]
    changes: tuple[Change, ...]
    notes: tuple[str, ...] = field(default=())
    written: bool = False

    def diff(self, root: Path) -> str:
        """A unified diff of every changed file, paths relative to ``root``."""
        out: list[str] = []
        for path, old, new in self.files:
            name = _relative(path, root)
            out.extend(
                difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{name}", f"b/{name}")
            )
        return "".join(out)

    def to_json(self, root: Path) -> dict[str, Any]:
        return {
            "changes": [{"key": c.key, "old": c.old, "new": c.new} for c in self.changes],
            "files": [_relative(p, root) for p, _, _ in self.files],
            "notes": list(self.notes),
            "written": self.written,
        }


def bump(
    recipes_dir: Path,
    request: BumpRequest,
    client: Client,
    log: Log = lambda _: None,
    table: Table | None = None,
) -> BumpResult:
    """What ``request`` changes in ``recipes_dir``'s variants.yaml (and a recipe that follows an sdist).

    Nothing is written: :func:`write_bump` does that, so a caller can show the diff (and plan) first.
    """
    table = table or load_table()
    journal.settle(journal_root(recipes_dir), RECIPES)  # an interrupted bump is finished before anything is read
    ups = _validate(request, table)
    for up, _ in ups:
        _check_recipe(table, up, recipes_dir)
    doc = load(recipes_dir / VARIANTS_FILE)
    positions = {up.name: _position(doc, up, version) for up, version in ups}
    pins = _pins_after(doc, table, ups)
    check_pairings(table, pins, {up.name for up, _ in ups}, {up.name: version for up, version in ups})
    companions = {version_placeholder(name): v[0] for name, v in pins.items() if len(v) == 1}
    changes: list[Change] = []
    docs: list[Document] = [doc]
    notes: list[str] = []
    for up, version in ups:
        old_version = values(doc, up.version_key)[positions[up.name]]
        if parse_version(version, up.name) < parse_version(old_version, up.version_key):
            notes.append(f"{up.name}: {old_version} -> {version} is a downgrade")
        new_values = resolve_values(up, version, request, client, log, companions)
        changes.extend(_fill(doc, up, positions[up.name], new_values))
        if up.recipe:
            recipe_doc, recipe_notes = _sync_recipe(
                recipes_dir / up.recipe / "recipe.yaml",
                up,
                version,
                values(doc, "python"),
                client,
                table,
                log,
            )
            docs.append(recipe_doc)
            notes.extend(recipe_notes)
    files = tuple((d.path, d.original, d.dump()) for d in docs)
    files = tuple(f for f in files if f[1] != f[2])
    if not files:
        notes.append("nothing to change: already pinned")
    return BumpResult(files, tuple(changes), tuple(notes))


def journal_root(recipes_dir: Path) -> Path:
    """Where bump's writer lock and journal live (``.rocmlock/`` of the checkout: the recipes directory's parent,
    beside pixi.toml's, so a bump and a lock of one checkout take turns)."""
    return recipes_dir.resolve().parent


def write_bump(result: BumpResult, recipes_dir: Path) -> BumpResult:
    """Write every changed file of ``result`` as one set (:mod:`rocmlock.util.journal`); the result marked written.

    The files are compared with what :func:`bump` read, under the writer lock: one that changed meanwhile (an
    editor, another bump) stops the write before anything is changed."""
    if not result.files:
        return result
    root = journal_root(recipes_dir)
    with journal.exclusive(root, RECIPES):
        for path, old, _ in result.files:
            if path.read_text() != old:
                raise OperationError(f"{path} changed while bump ran; nothing was written",
                                     hint="run the bump again")
        journal.commit(root, RECIPES, {path.resolve(): new for path, _, new in result.files})
    return replace(result, written=True)


def _upstream(table: Table, name: str, version: str, where: str) -> Upstream:
    """The upstream called ``name``; a PyPI spelling of one (torch, flash_attn) is refused naming the right one."""
    canonical = canonicalize_name(name)
    for up in table.upstreams:
        if name != up.name and canonical in (up.name, canonicalize_name(up.pypi)):
            raise InputError(f"{where}: unknown upstream '{name}'",
                             hint=f"'{name}' is PyPI's name of {up.name}: {up.name}={version}")
    return table.get(name, where)


def _validate(request: BumpRequest, table: Table) -> list[tuple[Upstream, str]]:
    ups: list[tuple[Upstream, str]] = []
    for name, version in request.versions:
        where = f"bump {name}={version}"
        if version.startswith("="):  # pip's `name==version`
            raise InputError(f"{where}: one '=' between the name and the version",
                             hint=f"{name}={version.lstrip('=')}")
        up = _upstream(table, name, version, where)
        parse_version(version, where)
        if any(u.name == name for u, _ in ups):
            raise InputError(f"{where}: {name} is named twice", hint="give each upstream one version")
        ups.append((up, version))
    named = {u.name for u, _ in ups}
    for option, given, pattern, what in (
        ("--sha256", request.sha256, SHA256, "64 lowercase hex digits"),
        ("--rev", request.revs, COMMIT, "a full 40-hex commit"),
    ):
        for name, value in given:
            up, _ = table.source(name, f"{option} {name}")
            if up.name not in named:
                raise InputError(f"{option} {name}: {up.name} is not bumped", hint=f"add {up.name}=VERSION")
            if not pattern.fullmatch(value):
                raise InputError(f"{option} {name}={value}: not {what}",
                                 hint="write NAME=VALUE as --help shows")
    return ups


def _check_recipe(table: Table, up: Upstream, recipes_dir: Path) -> None:
    """The recipe whose run requirements follow ``up``'s sdist (``recipe`` in upstreams.toml) is in ``recipes_dir``."""
    if up.recipe and not (recipes_dir / up.recipe / "recipe.yaml").is_file():
        raise InputError(
            f"{table.path}: key 'upstream.{up.name}.recipe' names '{up.recipe}', but {recipes_dir} has no "
            f"{up.recipe}/recipe.yaml",
            hint="name the directory of the recipe whose run requirements follow the sdist's pyproject.toml, or "
                 "remove the key",
        )


def _position(doc: Document, up: Upstream, version: str) -> int:
    """The list position of variants.yaml that ``version`` replaces."""
    pinned = values(doc, up.version_key)
    if len(pinned) == 1:
        return 0
    series = [i for i, v in enumerate(pinned) if v.split(".")[:2] == version.split(".")[:2]]
    if len(series) != 1:
        raise InputError(
            f"{doc.path}: key '{up.version_key}' pins {', '.join(pinned)}; "
            f"cannot tell which one {version} replaces",
            hint="edit that list by hand",
        )
    return series[0]


def _pins_after(doc: Document, table: Table, ups: list[tuple[Upstream, str]]) -> dict[str, list[str]]:
    # A follower pinned by a data table of its own (AOTriton) cannot be bumped here: a leader series that
    # table does not list is refused like any unrecorded pairing, before anything is looked up.
    pins = table.table_pins()
    pins.update({u.name: values(doc, u.version_key) for u in table.upstreams if u.version_key in doc.data})
    for up, version in ups:
        pins[up.name][_position(doc, up, version)] = version
    return pins


def check_pairings(table: Table, pins: Mapping[str, list[str]], bumped: set[str],
                   moved: Mapping[str, str] | None = None) -> None:
    """An InputError naming the first pairing rule the ``pins`` break among rules involving ``bumped``.

    A follower pinned by a data table of its own (AOTriton) is checked against the leader versions this bump sets
    (``moved``) only: variants.yaml may pin another leader beside them (ROCm 7.14's PyTorch 2.14.1) that the table
    does not cover and that the bump leaves alone (that PyTorch's cmake fetches its own AOTriton)."""
    for rule in table.rules:
        if not {rule.leader, rule.follower} & bumped or rule.leader not in pins or rule.follower not in pins:
            continue
        leaders = pins[rule.leader]
        if rule.table and moved is not None:
            leaders = [v for v in leaders if moved.get(rule.leader) == v]
        for leader in leaders:
            verdicts = {rule.check(leader, follower) for follower in pins[rule.follower]}
            if "ok" in verdicts:
                continue
            followers = ", ".join(pins[rule.follower])
            if "unknown" in verdicts:
                raise InputError(
                    f"pairing rule '{rule.name}': which {rule.follower} goes with {rule.leader} {leader} "
                    f"is not recorded in {rule.recorded_in}{_pinned_for(rule)}",
                    hint=rule.record_hint(leader),
                )
            raise InputError(
                f"pairing rule '{rule.name}': {rule.follower} {followers} does not go with "
                f"{rule.leader} {leader} ({rule.why})",
                hint=_pairing_hint(rule, leader, pins[rule.follower][0], bumped),
            )


def _pinned_for(rule: Rule) -> str:
    """For a follower pinned by its own table: which release that is and the leader series it covers."""
    if not rule.table:
        return ""
    series = ", ".join(lead for lead, _ in rule.series)
    return f" ({rule.follower} {rule.pinned} there is for {rule.leader} {series})"


def _pairing_hint(rule: Rule, leader: str, follower: str, bumped: set[str]) -> str:
    if rule.follower not in bumped:
        return (
            f"bump it in the same command: {rule.describe(leader)} (`rocmlock outdated` lists the releases)"
        )
    if rule.leader not in bumped:
        return f"bump it in the same command: {rule.leader_needs(follower)}, or pick another {rule.follower}"
    return f"pick versions the rule allows: {rule.describe(leader)} with {rule.leader} {leader}"


def resolve_values(
    up: Upstream, version: str, request: BumpRequest, client: Client, log: Log,
    companions: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Every variants.yaml value of ``up`` at ``version``: the version, each source's commit and sha256.

    ``companions``: ``{<upstream>_version}`` placeholders, each upstream's version after the bump.
    """
    project = client.project(up.pypi)
    if project.files(version) is None:
        raise InputError(
            f"bump {up.name}={version}: '{up.pypi}' has no release {version} on "
            f"{mask_query(client.hosts.index_url)}",
            hint=f"the newest is {project.latest}",
        )
    out = {up.version_key: version}
    context = {**(companions or {}), "version": version, **client.hosts.placeholders()}
    shas, revs = dict(request.sha256), dict(request.revs)
    for src in up.sources:
        if src.kind == "sdist":
            out[src.sha256_key or ""] = _sdist_sha256(up, src, version, shas.get(src.name), client)
            continue
        if src.rev_key:
            rev = revs.get(src.name) or _resolve_rev(src, context, client, log)
            out[src.rev_key] = context["rev"] = context[f"{src.name.replace('-', '_')}_rev"] = rev
        if src.sha256_key:
            out[src.sha256_key] = shas.get(src.name) or _archive_sha256(src, context, client, log)
    return out


def _sdist_sha256(up: Upstream, src: Source, version: str, given: str | None, client: Client) -> str:
    sdist = client.project(up.pypi).sdist(version)
    if sdist is None or not SHA256.fullmatch(sdist.sha256):
        raise OperationError(
            f"bump {up.name}={version}: PyPI has no sdist with a sha256 for it",
            hint="the recipe builds from the sdist; pick a release that has one",
        )
    if given and given != sdist.sha256:
        raise InputError(
            f"--sha256 {src.name}={given}: PyPI's sdist {sdist.filename} has sha256 {sdist.sha256}",
            hint="drop --sha256 for PyPI sdists (the index's digest is used) or check your source",
        )
    return sdist.sha256


def _resolve_rev(src: Source, context: dict[str, str], client: Client, log: Log) -> str:
    try:
        if src.tag and src.repo:
            tag = src.tag.format(**context)
            log(f"resolving {src.repo} tag {tag}")
            rev = client.github_commit(src.repo, tag)
        elif files := src.rev_files(context):
            log(f"reading {' (or, where absent, '.join(mask_query(url) for url, _ in files)}{')' * (len(files) - 1)}")
            rev = client.commit_in_files(files, f"source '{src.name}'")
        else:
            rev = ""
    except KeyError as exc:  # a {<upstream>_version} of an upstream variants.yaml pins several versions of
        raise InputError(
            f"source '{src.name}' reads its commit at {{{exc.args[0]}}}, which is not one version here",
            hint=f"pass --rev {src.name}=COMMIT from a source you checked",
        ) from None
    except Unreachable as exc:
        raise InputError(
            f"the commit of source '{src.name}' is needed and GitHub is unreachable from this host ({exc})",
            hint=f"pass --rev {src.name}=COMMIT from a source you checked",
        ) from None
    if not COMMIT.fullmatch(rev):
        raise OperationError(
            f"source '{src.name}': {rev[:60]!a} is not a commit", hint=f"pass --rev {src.name}=COMMIT"
        )
    return rev


def _archive_sha256(src: Source, context: dict[str, str], client: Client, log: Log) -> str:
    url = (src.url or "").format(**context)
    log(f"downloading {mask_query(url)} to hash it")
    try:
        return client.sha256_of(url)
    except Unreachable as exc:
        raise InputError(
            f"the sha256 of source '{src.name}' is needed and its archive is unreachable from this host "
            f"({exc})",
            hint=f"pass --sha256 {src.name}=HEX from a source you checked "
            "(conda-forge's feedstocks pin the same archives)",
        ) from None


def _fill(doc: Document, up: Upstream, position: int, new_values: Mapping[str, str]) -> list[Change]:
    # Other keys zipped with the version (a rocm_version column, another upstream) keep their values; a key
    # named like this upstream's (triton_*) that the table does not fill would go stale with a new version.
    prefix = up.version_key.removesuffix("version")
    stale = [k for k in zip_group(doc, up.version_key) if k not in new_values and k.startswith(prefix)]
    if stale:
        raise InputError(
            f"{doc.path}: zip_keys group of {up.version_key} has {', '.join(stale)}, which rocmlock "
            f"does not fill for {up.name}",
            hint="add it to the source in tools/rocmlock/data/upstreams.toml, or bump this upstream by hand",
        )
    changes: list[Change] = []
    for key, value in new_values.items():
        old = values(doc, key)[position]
        if set_value(doc, key, position, value):
            changes.append(Change(key, old, value))
    return changes


def _sync_recipe(
    path: Path, up: Upstream, version: str, pythons: list[str], client: Client, table: Table, log: Log
) -> tuple[Document, list[str]]:
    from rocmlock.upstream.reqsync import conda_requirements, pyproject_dependencies, retag_comments, sync_run

    sdist = client.project(up.pypi).sdist(version)
    assert sdist is not None  # resolve_values checked it
    url = sdist.url
    log(f"downloading {mask_query(url)} for its pyproject.toml")
    data = client.download(url, sdist.sha256)
    deps = pyproject_dependencies(data, f"{sdist.filename} from {mask_query(url)}")
    reqs = conda_requirements(deps, table, pythons, sdist.filename)
    doc = load(path)
    notes = sync_run(
        doc, reqs, keep=("python",)
    )  # python is the recipe's own (requires-python, not a dependency)
    cited = re.search(r"\((\S+) pyproject\.toml", doc.original)  # "# core (0.9.5 pyproject.toml ...)"
    if cited:
        retag_comments(doc, cited.group(1), version)
    return doc, [f"{path.parent.name}: {n}" for n in notes]


def _relative(path: Path, root: Path) -> str:
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)
