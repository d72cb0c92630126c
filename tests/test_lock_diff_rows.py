"""The rows of a lock diff, case by case (issue 41: what the mutation run of group lockdiff left alive).

The markdown is compared with the real pixi-diff-to-markdown where that tool answers; the text lines (`rocmlock diff`)
and the refusals of a file that is not a lock are asserted word for word; the entries built from records in memory
(rocmlock.lock.lockentry) are compared with what rattler renders for the same records, record shape by shape.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from rattler import BuildString, PackageRecord, RepoDataRecord
from rocmlock.errors import InputError
from rocmlock.lock.lockentry import conda_entry, memory_lock_packages
from rocmlock.lock.lockfile import LockedEnvironment, LockedPlatform, LockedWorkspace, render_lockfile
from rocmlock.lock.pipeline import diff_lock_files
from rocmlock.lockdiff.diff import (
    LockedEntry,
    PackageChange,
    change_type,
    diff_json,
    diff_locks,
    diff_markdown,
    diff_text,
    lock_packages,
)
from test_lock_diff import FORGE, _lock_text, _to_markdown, tools  # noqa: F401 - the fixture, shared


def _entry(name: str, version: str, build: str, location: str | None = None, **extra: Any) -> LockedEntry:
    url = location or f"{FORGE}/{name}-{version}-{build}.conda"
    return LockedEntry("conda", name, url, version, build, {"conda": url, **extra})


def test_text_lines_name_each_kind_of_change_and_why_a_same_pin_moved() -> None:
    old = {"e": {"linux-64": [_entry("gone", "1.0", "h0_0"), _entry("moved", "2.0", "h0_1", sha256="a" * 64),
                              _entry("rebuilt", "2.0", "h0_1", sha256="b" * 64), _entry("up", "1.0", "")]}}
    new = {"e": {"linux-64": [_entry("added", "0.1", "h0_0"),
                              _entry("moved", "2.0", "h0_1", "https://mirror.example/cf/linux-64/moved.conda",
                                     sha256="a" * 64),
                              _entry("rebuilt", "2.0", "h0_1", "https://mirror.example/cf/linux-64/rebuilt.conda",
                                     sha256="c" * 64), _entry("up", "1.1", "")]}}
    assert diff_text(diff_locks(old, new)) == [
        "e [linux-64]",
        "  + added 0.1 h0_0",
        "  - gone 1.0 h0_0",
        (f"  ~ moved 2.0 h0_1 (only its URL changed: {FORGE}/moved-2.0-h0_1.conda -> "
        "https://mirror.example/cf/linux-64/moved.conda)"),
        (f"  ~ rebuilt 2.0 h0_1 (another file (sha256) at another URL: {FORGE}/rebuilt-2.0-h0_1.conda -> "
        "https://mirror.example/cf/linux-64/rebuilt.conda)"),
        "  ~ up 1.0 -> 1.1",  # no build string: no trailing blank
    ]


@pytest.mark.parametrize(("before", "after", "kind"), [
    (("1.0", "h0_0"), ("1.0", "h0_0"), "Other"),  # the same pin at another URL
    (("1.0", "h0_0"), ("1.0", "h1_0"), "Only build string"),
    (("1.0", "h0_0"), ("1.0.0", "h0_0"), "Other"),  # equal versions spelled apart: no segment moved
    (("1.2", "h0_0"), ("1.2.1", "h0_0"), "Patch Upgrade"),  # the shorter one padded with 0
    (("1.2.1", "h0_0"), ("1.2", "h0_0"), "Patch Downgrade"),
    (("2", "h0_0"), ("1.9", "h0_0"), "Major Downgrade"),
    (("1.2.3.4", "h0_0"), ("1.2.3.3", "h0_0"), "Other"),
    (("1.0", "h0_0"), ("1.0:bad", "h0_0"), "Other"),  # a version rattler cannot read
])
def test_change_type(before: tuple[str, str], after: tuple[str, str], kind: str) -> None:
    old = _entry("p", *before)
    new = _entry("p", *after, location=f"https://mirror.example/cf/linux-64/p-{after[0]}-{after[1]}.conda")
    assert change_type(PackageChange(old, new, False)) == kind
    assert change_type(PackageChange(None, new, False)) == "Added"
    assert change_type(PackageChange(old, None, False)) == "Removed"


def test_markdown_of_ties_explicit_removals_and_links_equals_pixi_diff_to_markdown(tools: Path,  # noqa: F811
                                                                                    tmp_path: Path) -> None:
    old = _lock_text({"gpu": {"linux-64": [("Cased-Name", "1.0", "h0_0"), ("dropped", "1.0", "h0_0"),
                                           ("moved", "1.0", "h0_0"), ("eq", "1.0", "h0_0"),
                                           ("dot.ted", "1.0", "pypi"), ("short", "1.2", "h0_0")]},
                      "ten": {"linux-64": [(f"lib{i}", "1.0", "h0_0") for i in range(10)]},
                      "eleven": {"linux-64": [(f"mod{i}", "1.0", "h0_0") for i in range(11)]}})
    new = yaml.safe_load(_lock_text({"gpu": {"linux-64": [("Cased-Name", "1.1", "h0_0"), ("moved", "1.0", "h0_0"),
                                                          ("eq", "1.0.0", "h0_0"), ("dot.ted", "1.1", "pypi"),
                                                          ("short", "1.2.1", "h0_0")]},
                                     "ten": {"linux-64": [(f"lib{i}", "1.1", "h0_0") for i in range(10)]},
                                     "eleven": {"linux-64": [(f"mod{i}", "1.1", "h0_0") for i in range(11)]}}))
    for pkg in new["packages"]:  # moved: the same file from prefix.dev's mirror
        if "/moved-" in pkg.get("conda", ""):
            pkg["conda"] = pkg["conda"].replace("https://conda.anaconda.org/", "https://repo.prefix.dev/")
    for refs in new["environments"]["gpu"]["packages"].values():
        for ref in refs:
            if "/moved-" in ref.get("conda", ""):
                ref["conda"] = ref["conda"].replace("https://conda.anaconda.org/", "https://repo.prefix.dev/")
    explicit = {("gpu", "linux-64", "conda", "dropped"), ("gpu", "linux-64", "conda", "cased-name")}
    diff = diff_locks(lock_packages(old, "old"), lock_packages(yaml.safe_dump(new, sort_keys=False), "new"),
                      lambda env, plat, kind, name: (env, plat, kind, name) in explicit)
    data = diff_json(diff)
    rows = {r["name"]: r for r in data["environment"]["gpu"]["linux-64"]}
    assert rows["dropped"]["explicit"] is True and rows["dropped"]["after"] is None  # a removal keeps its mark
    assert rows["cased-name"]["explicit"] is True and "explicit" not in rows["moved"]
    assert rows["dot_ted"]["type"] == "pypi"  # a PyPI name normalised as pixi writes it; a conda name lower-cased
    ours = diff_markdown(diff)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    # pixi-diff-to-markdown 0.3.10 stops on `eq` (1.0 -> 1.0.0: assert False); without that row it agrees.
    without_eq = {**data, "environment": {**data["environment"], "gpu": {"linux-64": [
        r for r in data["environment"]["gpu"]["linux-64"] if r["name"] != "eq"]}}}
    theirs = _to_markdown(tools, json.dumps(without_eq), cwd, "--merge-dependencies", "no")
    assert theirs == diff_markdown(_without(diff, "eq")) + "\n"
    assert "|**dropped**|1.0||Removed|" in ours
    assert "|[eq](https://prefix.dev/channels/conda-forge/packages/eq)|1.0|1.0.0|Other|" in ours
    assert "[moved](https://prefix.dev/channels/conda-forge/packages/moved)" in ours  # repo.prefix.dev links too
    assert "|[dot_ted](https://pypi.org/project/dot_ted)|1.0|1.1|Minor Upgrade|" in ours
    # a table of more than 10 rows folds them all, closed it alone: open the gpu table and the one of exactly 10
    assert theirs.count("<details open>\n<summary>linux-64</summary>") == 2 and theirs.count("<details>\n") == 1


def _without(diff: Any, name: str) -> Any:
    return {env: {plat: [c for c in rows if c.package.name != name] for plat, rows in plats.items()}
            for env, plats in diff.items()}


@pytest.mark.parametrize(("doc", "message"), [
    ("version: 7\nenvironments: [1]\npackages: []\n", ("x.lock: no environments: mapping and packages: list; "
                                                       "not a pixi.lock")),
    ("version: 7\nenvironments: {}\npackages: {}\n", "x.lock: no environments: mapping and packages: list"),
    ("[1, 2]\n", "x.lock: no environments: mapping and packages: list"),
    ("version: 7\nenvironments: {}\npackages: [{name: x}]\n",
     "x.lock: a packages: entry without a conda: or pypi: location"),
    ("version: 7\nenvironments: {e: [1]}\npackages: []\n", "x.lock: environment 'e' has no packages: mapping"),
    ("version: 7\nenvironments: {e: {packages: {linux-64: [{foo: 1}]}}}\npackages: []\n",
     "x.lock: an environment's package reference has no conda: or pypi: location (['foo'])"),
    (("version: 7\nenvironments: {e: {packages: {linux-64: [{conda: 'https://h/c/linux-64/a-1-0.conda'}]}}}\n"
     "packages: []\n"), "x.lock: the conda package 'https://h/c/linux-64/a-1-0.conda' is not in its packages: list"),
    ("version: 7\nenvironments: {e: {\n", "x.lock: invalid YAML ("),
])
def test_a_file_that_is_not_a_lock_is_named_with_what_is_wrong(doc: str, message: str) -> None:
    with pytest.raises(InputError) as exc:
        lock_packages(doc, "x.lock")
    assert str(exc.value).startswith(message) and "\n" not in str(exc.value), str(exc.value)
    assert exc.value.hint == "pass two pixi.lock files (v6 or v7)"


def test_a_v6_entry_without_name_keys_is_named_by_its_file_and_its_own_keys_win() -> None:
    doc = {"version": 6, "environments": {"e": {"channels": [], "packages": {"linux-64": [
        {"conda": f"{FORGE}/zlib-1.3.1-hb9d3cd8_2.tar.bz2"}, {"conda": f"{FORGE}/odd.conda"},
        {"conda": f"{FORGE}/renamed-9-x_1.conda"}]}}},
        "packages": [{"conda": f"{FORGE}/zlib-1.3.1-hb9d3cd8_2.tar.bz2"}, {"conda": f"{FORGE}/odd.conda"},
                     {"conda": f"{FORGE}/renamed-9-x_1.conda", "name": "real", "version": "1.0", "build": "b_0"}]}
    got = lock_packages(yaml.safe_dump(doc), "v6.lock")["e"]["linux-64"]
    assert [(p.name, p.version, p.build) for p in got] == [("zlib", "1.3.1", "hb9d3cd8_2"), ("odd", "", ""),
                                                           ("real", "1.0", "b_0")]


def test_diff_of_lock_files_names_the_one_missing(tmp_path: Path) -> None:
    lock = render_lockfile(_workspace([_record(f"{CH}/linux-64/a-1.0-h0_0.conda")]))
    for present, missing in (("old.lock", "new.lock"), ("new.lock", "old.lock")):
        (tmp_path / present).write_text(lock, encoding="utf-8")
        (tmp_path / missing).unlink(missing_ok=True)
        with pytest.raises(InputError) as exc:
            diff_lock_files(tmp_path / "old.lock", tmp_path / "new.lock")
        assert str(exc.value) == f"{tmp_path / missing}: no such file"
        assert exc.value.hint == "pass the old and the new pixi.lock"
    (tmp_path / "old.lock").write_text(lock, encoding="utf-8")
    changed = lock.replace("a-1.0-h0_0", "a-1.1-h0_0")
    assert changed != lock
    (tmp_path / "new.lock").write_text(changed, encoding="utf-8")
    assert diff_text(diff_lock_files(tmp_path / "old.lock", tmp_path / "new.lock")) == [
        "default [linux-64]", "  ~ a 1.0 h0_0 -> 1.1 h0_0"]


# ----------------------------------------------------------------------------- entries from records

def _record(url: str, build: str = "h0_0", build_number: int = 0, subdir: str = "linux-64",
            channel: str | None = None, noarch: str | None = None, **extra: Any) -> RepoDataRecord:
    name, version = url.rsplit("/", 1)[-1].rsplit("-", 2)[:2]
    record = PackageRecord(name, version, BuildString(build), build_number, subdir, noarch=noarch, **extra)
    return RepoDataRecord(record, url.rsplit("/", 1)[-1], url, channel or url.rsplit("/", 2)[0] + "/")


CH = "https://example.org/ch"
SHAPES = {
    "build number the build string says": _record(f"{CH}/linux-64/a-1.0-h0_5.conda", "h0_5", 5),
    "build number it does not say": _record(f"{CH}/linux-64/a-1.0-h0_5.conda", "h0_5", 7),
    "build string of digits": _record(f"{CH}/linux-64/a-1.0-312.conda", "312", 0),
    "trailing number past u64": _record(f"{CH}/linux-64/a-1.0-h18446744073709551616.conda",
                                        "h18446744073709551616", 0),
    "trailing number at u64's top": _record(f"{CH}/linux-64/a-1.0-h18446744073709551615.conda",
                                            "h18446744073709551615", 0),
    "url not below a subdir": _record(f"{CH}/pkgs/a-1.0-h0_0.conda"),
    "channel not the url's": _record(f"{CH}/linux-64/a-1.0-h0_0.conda", channel="https://other.example/mirror/"),
    "noarch python": _record(f"{CH}/noarch/a-1.0-pyh0_0.conda", "pyh0_0", subdir="noarch", noarch="python"),
    "noarch generic with py in its build": _record(f"{CH}/noarch/a-1.0-pyh0_0.conda", "pyh0_0", subdir="noarch",
                                                   noarch="generic"),
    "a query in a license URL": _record(f"{CH}/linux-64/a-1.0-h0_0.conda", license="see https://x.org/l?sig=s"),
    "a fragment in a license URL": _record(f"{CH}/linux-64/a-1.0-h0_0.conda", license="see https://x.org/l#frag"),
    "a user in a license URL": _record(f"{CH}/linux-64/a-1.0-h0_0.conda", license="see https://u:p@x.org/l"),
    "a token path in a license URL": _record(f"{CH}/linux-64/a-1.0-h0_0.conda", license="see https://x.org/t/tk/l"),
    "a plain license URL": _record(f"{CH}/linux-64/a-1.0-h0_0.conda", license="see https://x.org/l"),
    "a file URL": _record("file:///srv/ch/linux-64/a-1.0-h0_0.conda", channel="file:///srv/ch/"),
}


def _workspace(records: list[RepoDataRecord]) -> LockedWorkspace:
    return LockedWorkspace({"linux-64": LockedPlatform("linux-64", "linux-64", ())},
                           {"default": LockedEnvironment((CH,), {"linux-64": records})})


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_an_entry_built_from_a_record_is_what_rattler_writes(shape: str) -> None:
    locked = _workspace([SHAPES[shape]])
    memory = memory_lock_packages(locked)
    assert memory is not None, shape
    assert memory == lock_packages(render_lockfile(locked), "pixi.lock")


def test_records_of_one_url_are_built_once_and_each_platform_sorted_by_location() -> None:
    b, a = _record(f"{CH}/linux-64/b-1.0-h0_0.conda"), _record(f"{CH}/linux-64/a-1.0-h0_0.conda")
    locked = LockedWorkspace({"linux-64": LockedPlatform("linux-64", "linux-64", ()),
                              "linux-64-g": LockedPlatform("linux-64-g", "linux-64", ())},
                             {"default": LockedEnvironment((CH,), {"linux-64": [b, a], "linux-64-g": [a]})})
    memory = memory_lock_packages(locked)
    assert memory is not None and memory == lock_packages(render_lockfile(locked), "pixi.lock")
    assert [p.name for p in memory["default"]["linux-64"]] == ["a", "b"]
    assert memory["default"]["linux-64"][0] is memory["default"]["linux-64-g"][0]


@pytest.mark.parametrize("url", [f"{CH}/linux-64/a-1.0-h0_0.conda?x=1", "https://example.org/a-1.0-h0_0.conda",
                                 f"{CH}/linux-64/a%2D1.0-h0_0.conda"])
def test_a_record_of_a_shape_not_built_falls_back_to_the_text(url: str) -> None:
    record = PackageRecord("a", "1.0", BuildString("h0_0"), 0, "linux-64")
    assert conda_entry(RepoDataRecord(record, "a-1.0-h0_0.conda", url, CH + "/")) is None
    locked = _workspace([RepoDataRecord(record, "a-1.0-h0_0.conda", url, CH + "/")])
    assert memory_lock_packages(locked) is None


def test_a_key_null_on_one_side_is_a_change_not_an_equal_key() -> None:
    # pixi's compute_json_diff compares values, and a key missing from one side is not a key holding null there
    old = yaml.safe_load(_lock_text({"e": {"linux-64": [("a", "1.0", "h0_0")]}}))
    new = yaml.safe_load(_lock_text({"e": {"linux-64": [("a", "1.1", "h0_0")]}}))
    old["packages"][0]["license_family"] = None  # null before, absent after
    new["packages"][0]["md5"] = None  # null after, its md5 before
    new["packages"][0]["size"] = None  # null after, absent before
    diff = diff_locks(lock_packages(yaml.safe_dump(old), "old"), lock_packages(yaml.safe_dump(new), "new"))
    (row,) = diff_json(diff)["environment"]["e"]["linux-64"]
    assert row["before"] == {"conda": f"{FORGE}/a-1.0-h0_0.conda", "md5": "2" * 32, "license_family": None}
    assert row["after"] == {"conda": f"{FORGE}/a-1.1-h0_0.conda", "md5": None, "size": None,
                            "license_family": None}


def test_packages_of_a_removed_platform_or_environment_keep_their_explicit_mark() -> None:
    old = lock_packages(_lock_text({"e": {"linux-64": [("a", "1.0", "h0_0")], "osx-64": [("a", "1.0", "h0_0")]},
                                    "gone": {"linux-64": [("a", "1.0", "h0_0")]}}), "old")
    new = lock_packages(_lock_text({"e": {"linux-64": [("a", "1.0", "h0_0"), ("b", "1.0", "h0_0")]}}), "new")
    marked = {("e", "osx-64", "conda", "a"), ("gone", "linux-64", "conda", "a"), ("e", "linux-64", "conda", "b")}
    data = diff_json(diff_locks(old, new, lambda env, plat, kind, name: (env, plat, kind, name) in marked))
    assert data["environment"]["e"]["osx-64"][0]["explicit"] is True  # a removed platform
    assert data["environment"]["gone"]["linux-64"][0]["explicit"] is True  # a removed environment
    assert data["environment"]["e"]["linux-64"][0]["explicit"] is True  # an added package


def test_a_lock_with_an_anchor_or_bad_yaml_is_refused_naming_it() -> None:
    with pytest.raises(InputError) as exc:
        lock_packages("version: 7\nenvironments: &a {}\npackages: []\n", "anchored.lock")
    assert str(exc.value).startswith("anchored.lock") and "anchor" in str(exc.value)
    bad = "version: 7\nenvironments: {e: {\n"
    with pytest.raises(InputError) as exc:
        lock_packages(bad, "x.lock")
    try:
        yaml.safe_load(bad)
    except yaml.YAMLError as error:
        first = str(error).splitlines()[0]
    assert str(exc.value) == f"x.lock: invalid YAML ({first}); not a pixi.lock"


def test_a_diff_of_exactly_ten_rows_is_not_folded_as_the_tool_does(tools: Path, tmp_path: Path) -> None:  # noqa: F811
    old = _lock_text({"e": {"linux-64": [(f"lib{i}", "1.0", "h0_0") for i in range(10)]}})
    new = yaml.safe_load(_lock_text({"e": {"linux-64": [(f"lib{i}", "1.1", "h0_0") for i in range(10)]
                                                       + [("wheel", "2.0", "pypi")]}}))
    new["environments"]["e"]["packages"]["linux-64"] = new["environments"]["e"]["packages"]["linux-64"][:10]
    diff = diff_locks(lock_packages(old, "old"), lock_packages(yaml.safe_dump(new, sort_keys=False), "new"))
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    theirs = _to_markdown(tools, json.dumps(diff_json(diff)), cwd, "--merge-dependencies", "no")
    assert theirs == diff_markdown(diff) + "\n" and "<details" not in theirs


def test_links_follow_the_tools_rules_for_other_hosts(tools: Path, tmp_path: Path) -> None:  # noqa: F811
    old = _lock_text({"e": {"linux-64": [("fast", "1.0", "h0_0"), ("idx", "1.0", "pypi")]}})
    new = yaml.safe_load(_lock_text({"e": {"linux-64": [("fast", "1.1", "h0_0"), ("idx", "1.1", "pypi")]}}))
    moves = {"https://conda.anaconda.org/": "https://fast.prefix.dev/",
             "https://files.pythonhosted.org/packages/": "https://pypi.example.org/files/"}

    def move(value: str) -> str:
        for a, b in moves.items():
            value = value.replace(a, b)
        return value

    new["packages"] = [{k: move(v) if isinstance(v, str) else v for k, v in p.items()} for p in new["packages"]]
    new["environments"]["e"]["packages"]["linux-64"] = [
        {k: move(v) for k, v in ref.items()} for ref in new["environments"]["e"]["packages"]["linux-64"]]
    diff = diff_locks(lock_packages(old, "old"), lock_packages(yaml.safe_dump(new, sort_keys=False), "new"))
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    theirs = _to_markdown(tools, json.dumps(diff_json(diff)), cwd, "--merge-dependencies", "no")
    assert theirs == diff_markdown(diff) + "\n"
    assert "|[fast](https://prefix.dev/channels/conda-forge/packages/fast)|" in theirs  # fast.prefix.dev links
    assert "|idx|1.0|1.1|" in theirs  # a wheel from another index: no PyPI link


def test_text_lines_of_a_wheel_have_no_build() -> None:
    old = lock_packages(_lock_text({"e": {"linux-64": [("Wheel.Pkg", "1.0", "pypi")]}}), "old")
    new = lock_packages(_lock_text({"e": {"linux-64": [("Wheel.Pkg", "1.1", "pypi")]}}), "new")
    assert diff_text(diff_locks(old, new)) == ["e [linux-64]", "  ~ wheel_pkg 1.0 -> 1.1"]


SHAPES_MORE = {
    "channel without its slash": _record(f"{CH}/linux-64/a-1.0-h0_0.conda", channel=CH),
    "channel of another path without its slash": _record(f"{CH}/linux-64/a-1.0-h0_0.conda",
                                                         channel="https://other.example/m"),
    "a secret in a dependency": _record(f"{CH}/linux-64/a-1.0-h0_0.conda",
                                        depends=["b @ https://u:p@x.org/b-1.0-0.conda"]),
    "a secret in a constraint": _record(f"{CH}/linux-64/a-1.0-h0_0.conda",
                                        constrains=["b @ https://x.org/b-1.0-0.conda?sig=1"]),
    "a percent in the channel path": _record(f"{CH}/x%20y/linux-64/a-1.0-h0_0.conda", channel=f"{CH}/x%20y/"),
}


@pytest.mark.parametrize("shape", sorted(SHAPES_MORE))
def test_more_entries_built_from_records_are_what_rattler_writes(shape: str) -> None:
    locked = _workspace([SHAPES_MORE[shape]])
    memory = memory_lock_packages(locked)
    text = lock_packages(render_lockfile(locked), "pixi.lock")
    assert memory is None or memory == text, shape
    if "percent" not in shape:
        assert memory is not None, shape


def test_an_environment_with_pypi_pins_or_source_packages_is_read_from_the_text() -> None:
    # The records in memory are conda packages only; a lock that also pins wheels or source packages is diffed
    # from the text rattler rendered (else its PyPI rows would be missing from the diff).
    from rocmlock.workspace.pypi import PypiPin

    conda = [_record(f"{CH}/linux-64/a-1.0-h0_0.conda")]
    plain = LockedEnvironment((CH,), {"linux-64": conda})
    wheel = LockedEnvironment((CH,), {"linux-64": conda}, pypi={"linux-64": [PypiPin("w", "1.0", "0" * 64)]})
    platforms = {"linux-64": LockedPlatform("linux-64", "linux-64", ())}
    assert memory_lock_packages(LockedWorkspace(platforms, {"e": plain})) is not None
    assert memory_lock_packages(LockedWorkspace(platforms, {"e": wheel})) is None
    assert memory_lock_packages(LockedWorkspace(platforms, {"e": plain, "f": wheel})) is None
