"""The pairing rules of tools/rocmlock/data/upstreams.toml, evaluated on their own."""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

import pytest
from rocmlock.errors import InputError
from rocmlock.upstream.pins import load_table, read_table
from shipped import ROOT

DATA = ROOT / "tools/rocmlock/data"
AOT = tomllib.loads((DATA / "aotriton.toml").read_text())


def rule(name: str):  # type: ignore[no-untyped-def]
    return next(r for r in load_table().rules if r.name == name)


@pytest.mark.parametrize(
    ("name", "leader", "follower", "verdict"),
    [
        ("torchvision-pytorch", "2.12.1", "0.27.1", "ok"),
        ("torchvision-pytorch", "2.4.0", "0.19.0", "ok"),
        ("torchvision-pytorch", "2.12.1", "0.28.0", "violated"),
        (
            "torchvision-pytorch",
            "3.0.0",
            "0.15.0",
            "unknown",
        ),  # a torch 3 is not covered by the 2.(N-15) rule
        ("torchaudio-pytorch", "2.12.1", "2.11.0", "ok"),
        ("torchaudio-pytorch", "2.12.1", "2.12.0", "ok"),
        ("torchaudio-pytorch", "2.12.1", "2.13.0", "violated"),  # newer than torch
        ("torchaudio-pytorch", "2.12.1", "2.10.0", "violated"),  # before the stable-ABI floor
        ("triton-pytorch", "2.12.1", "3.7.1", "ok"),
        ("triton-pytorch", "2.12.1", "3.8.0", "violated"),
        ("triton-pytorch", "2.15.0", "3.9.0", "ok"),
        ("triton-pytorch", "2.13.0", "3.7.1", "ok"),  # two torch series on one Triton series
        ("triton-pytorch", "2.14.0", "3.7.1", "violated"),
        # Not recorded: bump refuses until someone checks it.
        ("triton-pytorch", "2.16.0", "3.9.0", "unknown"),
    ],
)
def test_rule_verdicts(name: str, leader: str, follower: str, verdict: str) -> None:
    assert rule(name).check(leader, follower) == verdict


def test_rules_name_the_other_side() -> None:
    assert rule("torchvision-pytorch").describe("2.15.0") == (
        "torchvision 0.30.*, or a stable-ABI torchvision >=0.29.2 of an older series")
    # From 0.29.2 on torchvision is one stable-ABI wheel: any torch from its series on (issue 42)
    assert rule("torchvision-pytorch").leader_needs("0.30.1") == "pytorch >=2.15"
    assert rule("torchvision-pytorch").leader_needs("0.29.2") == "pytorch >=2.14"
    assert rule("torchvision-pytorch").leader_needs("0.29.1") == "pytorch 2.14.*"
    assert rule("torchaudio-pytorch").describe("2.15.0") == "torchaudio >=2.11,<=2.15.*"
    assert rule("triton-pytorch").leader_needs("3.7.1") == "pytorch 2.12.* or 2.13.*"


def test_every_rule_joins_two_known_upstreams_and_conda_names_map() -> None:
    table = load_table()
    names = {u.name for u in table.upstreams}
    # A follower is an upstream of variants.yaml, or pinned by a data table of its own (AOTriton), never both.
    assert all(r.leader in names and (r.follower in names) != bool(r.table) for r in table.rules)
    assert table.table_pins() == {"aotriton": [AOT["version"]]}
    assert table.conda_name("torch") == "pytorch" and table.conda_name("Matplotlib") == "matplotlib-base"
    assert table.conda_name("hf_transfer") == "hf-transfer"


# ----------------------------------------------------------------------------- aotriton-pytorch (aotriton.toml)


def test_aotriton_pairs_with_the_pytorch_series_its_table_lists() -> None:
    aot = rule("aotriton-pytorch")
    assert aot.pinned == AOT["version"] and aot.recorded_in == "tools/rocmlock/data/aotriton.toml"
    for series in AOT["pytorch"]:
        assert aot.check(f"{series}.0", aot.pinned) == aot.check(f"{series}.9", aot.pinned) == "ok"
    assert aot.check("2.99.0", aot.pinned) == "unknown"  # not recorded: bump refuses until someone checks it
    assert aot.describe("2.99.0") == (
        "aotriton for pytorch 2.99.0: not recorded in tools/rocmlock/data/aotriton.toml"
    )
    assert "from PyTorch 2.99.0's cmake/External/aotriton.cmake" in aot.record_hint("2.99.0")
    assert 'pytorch = ["2.99"]' in aot.record_hint("2.99.0")
    # The other rules keep pointing at upstreams.toml.
    assert rule("triton-pytorch").record_hint("2.99.0").endswith("add it to the rule in "
                                                                 "tools/rocmlock/data/upstreams.toml")


def _data(tmp_path: Path, old: str, new: str) -> Path:
    shutil.copytree(DATA, tmp_path, dirs_exist_ok=True)
    text = (tmp_path / "aotriton.toml").read_text()
    assert old in text
    (tmp_path / "aotriton.toml").write_text(text.replace(old, new))
    return tmp_path


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ('pytorch = ["', 'pytorch = "2.12"\nold = ["', "key 'pytorch' must list the pytorch series"),
        ('pytorch = ["', 'pytorch = ["2.12.1", "', "key 'pytorch' must list the pytorch series"),
        ("pytorch = [", "pytorch = [] # ", "key 'pytorch' must list the pytorch series"),
        ('version = "', 'version = "not a version', "key 'version': 'not a version"),
        ('version = "', 'release = "', "key 'version' must be the release it pins"),
        ("[targets]", "[targets", "not valid TOML: "),  # was a TOMLDecodeError traceback from bump/outdated
    ],
)
def test_a_malformed_aotriton_table_is_refused_naming_file_and_key(
    tmp_path: Path, old: str, new: str, message: str
) -> None:
    with pytest.raises(InputError) as exc:
        read_table(_data(tmp_path, old, new))
    assert str(exc.value).startswith("tools/rocmlock/data/aotriton.toml: ") and message in str(exc.value)


def test_an_aotriton_table_that_is_not_utf8_is_refused_naming_the_file(tmp_path: Path) -> None:
    # Read through tables.read_toml as the other tables are: a UnicodeDecodeError traceback from bump/outdated.
    data = _data(tmp_path, "[targets]", "[targets]")
    with (data / "aotriton.toml").open("ab") as fh:
        fh.write(b"# \xff\n")
    with pytest.raises(InputError) as exc:
        read_table(data)
    assert str(exc.value).startswith("tools/rocmlock/data/aotriton.toml: cannot read: ")


@pytest.mark.parametrize("pytorch", [["2.12.1", "2.15.0"], ["2.15.0", "2.12.1"]])
def test_every_pinned_leader_is_checked(pytorch: list[str]) -> None:
    """variants.yaml may pin two PyTorch releases: a follower must go with each of them, not just the first
    (torchvision 0.27.1 is built for 2.12 only)."""
    from rocmlock.upstream.bump import check_pairings

    table = load_table()
    pins = {"pytorch": pytorch, "torchvision": ["0.27.1"]}
    with pytest.raises(InputError, match=r"torchvision 0\.27\.1 does not go with pytorch 2\.15\.0"):
        check_pairings(table, pins, {"torchvision"})
    # Both leaders met by one of the followers each: accepted.
    check_pairings(table, {"pytorch": pytorch, "torchvision": ["0.27.1", "0.30.0"]}, {"torchvision"})


@pytest.mark.parametrize(("name", "follower", "needs"), [
    ("torchvision-pytorch", "0.15.0", "pytorch 2.0.*"),   # the first series the offset reaches
    ("torchvision-pytorch", "0.14.0", "no pytorch"),
    ("torchvision-pytorch", "1.30.0", "no pytorch"),      # another major: the rule says nothing for it
    ("triton-pytorch", "9.9.0", "pytorch: not recorded in tools/rocmlock/data/upstreams.toml"),
])
def test_leader_needs_at_the_edges(name: str, follower: str, needs: str) -> None:
    assert rule(name).leader_needs(follower) == needs


def test_a_one_component_version_is_its_series_zero() -> None:
    """`3` is series 3.0 (packaging's release tuple has one element)."""
    assert rule("torchaudio-pytorch").describe("3") == "torchaudio >=2.11,<=3.0.*"
    assert rule("torchvision-pytorch").leader_needs("1") == "no pytorch"


def test_an_unknown_source_names_the_known_ones() -> None:
    table = load_table()
    known = ", ".join(s.name for u in table.upstreams for s in u.sources)
    with pytest.raises(InputError) as err:
        table.source("nope", "bump --sha256")
    assert str(err.value) == "bump --sha256: unknown source 'nope'" and err.value.hint == f"one of: {known}"
    assert "pytorch, " in known


def test_only_rules_of_a_bumped_upstream_with_both_sides_pinned_are_checked() -> None:
    """check_pairings judges the rules a bump touches: a broken pair elsewhere is not this bump's to refuse, and a
    rule whose other side is not pinned has nothing to compare."""
    from rocmlock.upstream.bump import check_pairings

    table = load_table()
    # torchvision 0.27.1 does not go with pytorch 2.15.0, but only triton is bumped (and goes with 2.15).
    check_pairings(table, {"pytorch": ["2.15.0"], "torchvision": ["0.27.1"], "triton": ["3.9.0"]}, {"triton"})
    check_pairings(table, {"pytorch": ["2.15.0"]}, {"pytorch"})  # no follower pinned
    with pytest.raises(InputError, match=r"torchvision 0\.27\.1, 0\.28\.0 does not go with pytorch 2\.15\.0"):
        check_pairings(table, {"pytorch": ["2.15.0"], "torchvision": ["0.27.1", "0.28.0"]}, {"pytorch"})


def test_an_unknown_upstream_names_the_known_ones() -> None:
    table = load_table()
    with pytest.raises(InputError) as err:
        table.get("nope", "bump nope=1")
    assert str(err.value) == "bump nope=1: unknown upstream 'nope'"
    assert err.value.hint == f"one of: {', '.join(u.name for u in table.upstreams)}"
    assert table.get("pytorch").name == "pytorch"
