"""`rocmlock outdated` and `rocmlock bump`'s pairing check on PyPI's own answers, recorded (tests/pypi_recorded/).

The JSON API answers of every tracked upstream were recorded from pypi.org on 2026-12-06 and trimmed to what rocmlock
reads (info.version and requires_dist, per release the sdist and the linux x86_64 / pure wheels with filename, url,
packagetype, sha256 and yanked; releases from a little below the pins on). tests/pypi_recorded/README.md says how.
They hold the world issue 42 describes: torch 2.15.0 (requires ``triton~=3.9.0``), torchvision 0.29.2 and no 0.30
(one py3-none wheel, ``torch>=2.14.0``), triton 3.9.0, torchaudio 2.11.1, bitsandbytes 0.50.2.
GitHub is a closed port here: every cell that needs it says unreachable, and the command still succeeds.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from fakeupstream import FakeUpstream, closed_port_url, network_args
from rocmlock.cli.main import main
from rocmlock.upstream.pins import load_table
from shipped import RECIPES

RECORDED = Path(__file__).parent / "pypi_recorded"


def serve_recorded(fake: FakeUpstream) -> None:
    for up in load_table().upstreams:
        fake.add_json(f"/pypi/{up.pypi}/json", json.loads((RECORDED / f"{up.pypi}.json").read_text()))


@pytest.fixture
def recipes(tmp_path: Path) -> Path:
    """The shipped variants.yaml as it is (ROCm 7.2 and 7.14, each with its own PyTorch)."""
    shutil.copy(RECIPES / "variants.yaml", tmp_path / "variants.yaml")
    return tmp_path


def test_recorded_answers_cover_every_tracked_upstream() -> None:
    names = {p.stem for p in RECORDED.glob("*.json")}
    assert names == {u.pypi for u in load_table().upstreams}


def test_outdated_on_pypis_answers_pairs_pytorch_2_15_with_torchvision_0_29_2(
    recipes: Path, fake: FakeUpstream, capsys: pytest.CaptureFixture[str]
) -> None:
    serve_recorded(fake)
    args = ["outdated", "--recipes-dir", str(recipes), *network_args(fake.url, closed_port_url(), retries=0)]
    assert main([*args, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    rows = {r["name"]: r for r in report["upstreams"]}
    torch = rows["pytorch"]
    assert torch["newest"] == "2.15.0" and torch["behind"] and torch["error"] is None
    assert "2.15.0" in torch["newer"]
    # There is no torchvision 0.30: the stable-ABI 0.29.2 (torch>=2.14.0) is the companion of torch 2.15.0, not a
    # "none released" that would send the reader back to torch 2.14.
    assert "torchvision 0.29.2 (torchvision-pytorch)" in torch["companions"], torch["companions"]
    assert "triton 3.9.0 (triton-pytorch)" in torch["companions"], torch["companions"]
    # The AOTriton PyTorch 2.15's cmake names is not in aotriton.toml (its aotriton.cmake was not read here): said so.
    assert any(c.startswith("aotriton for pytorch 2.15.0: not recorded in tools/rocmlock/data/aotriton.toml")
               for c in torch["companions"]), torch["companions"]
    assert rows["triton"]["companions"] == ["needs pytorch 2.15.* (triton-pytorch)"]
    # torchvision's own row: 0.29.2 needs a torch from 2.14 on (both pinned PyTorch 2.14.1 and 2.15.0 qualify)
    vision = rows["torchvision"]
    assert vision["newest"] == "0.29.2" and vision["behind"]
    assert "needs pytorch >=2.14 (torchvision-pytorch)" in vision["companions"], vision["companions"]
    assert rows["triton"]["newest"] == "3.9.0"
    assert rows["torchaudio"]["newest"] == "2.11.1"
    assert rows["bitsandbytes"]["newest"] == "0.50.2"
    # what PyPI lacks comes from GitHub, unreachable here: said so, not guessed
    assert rows["torchvision"]["sources"]["torchvision"] == "sha256 unknown (unreachable)"
    assert report["rocm"]["error"] == "unknown (unreachable)"
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "  companion: torchvision 0.29.2 (torchvision-pytorch)" in text


@pytest.mark.parametrize(("torch", "vision", "ok"), [
    ("2.15.0", "0.29.2", True),   # stable ABI: 0.29.2 with every torch from 2.14 on
    ("2.14.1", "0.29.2", True),
    ("2.13.0", "0.29.2", False),  # below its torch>=2.14.0
    ("2.15.0", "0.29.1", False),  # a per-CPython build of torch 2.14: exact pairing
    ("2.14.1", "0.29.1", True),
    ("2.12.1", "0.27.1", True),
    ("2.15.0", "0.30.0", True),   # the series a 0.30 would have
])
def test_the_torchvision_rule_takes_stable_abi_releases_for_later_torch(torch: str, vision: str, ok: bool) -> None:
    (rule,) = [r for r in load_table().rules if r.name == "torchvision-pytorch"]
    assert (rule.check(torch, vision) == "ok") is ok
