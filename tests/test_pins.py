"""The pairing rules of tools/rocmlock/data/upstreams.toml, evaluated on their own."""

from __future__ import annotations

import pytest
from rocmlock.pins import load_table


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
    assert rule("torchvision-pytorch").describe("2.15.0") == "torchvision 0.30.*"
    assert rule("torchvision-pytorch").leader_needs("0.30.1") == "pytorch 2.15.*"
    assert rule("torchaudio-pytorch").describe("2.15.0") == "torchaudio >=2.11,<=2.15.*"
    assert rule("triton-pytorch").leader_needs("3.7.1") == "pytorch 2.12.* or 2.13.*"


def test_every_rule_joins_two_known_upstreams_and_conda_names_map() -> None:
    table = load_table()
    names = {u.name for u in table.upstreams}
    assert all({r.leader, r.follower} <= names for r in table.rules)
    assert table.conda_name("torch") == "pytorch" and table.conda_name("Matplotlib") == "matplotlib-base"
    assert table.conda_name("hf_transfer") == "hf-transfer"
