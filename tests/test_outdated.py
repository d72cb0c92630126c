"""`rocmlock outdated` against a local PyPI/GitHub stand-in, on a copy of the real recipes/variants.yaml."""

from __future__ import annotations

import hashlib
import json
import shutil
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest
from fakeupstream import FakeUpstream, Reply, closed_port_url, network_args
from rocmlock.cli.main import main
from rocmlock.upstream.pins import load_table
from rocmlock.upstream.yamledit import load, values
from shipped import RECIPES, ROOT, keep_first_rocm

AOT = tomllib.loads((ROOT / "tools/rocmlock/data/aotriton.toml").read_text())
SERIES = ", ".join(AOT["pytorch"])


@pytest.fixture
def recipes(tmp_path: Path) -> Path:
    shutil.copy(RECIPES / "variants.yaml", tmp_path / "variants.yaml")
    keep_first_rocm(tmp_path / "variants.yaml")  # one pin per upstream; the shipped two: the tests at the end
    return tmp_path


@pytest.fixture
def recipes_both(tmp_path: Path) -> Path:
    """The shipped variants.yaml as it is: ROCm 7.2 and 7.14, each with its own PyTorch (2.12.1, 2.14.1)."""
    shutil.copy(RECIPES / "variants.yaml", tmp_path / "variants.yaml")
    return tmp_path


def outdated(recipes: Path, fake_url: str, github: str, *extra: str) -> int:
    return main(["outdated", "--recipes-dir", str(recipes), *network_args(fake_url, github, retries=0), *extra])


def publish_all(fake: FakeUpstream, recipes: Path, newer: dict[str, str]) -> dict[str, str]:
    """Every tracked upstream on the fake PyPI with its pinned release, plus ``newer`` (name -> version)."""
    doc = load(recipes / "variants.yaml")
    pins = {}
    for up in load_table().upstreams:
        pins[up.name] = values(doc, up.version_key)[0]
        versions = {pins[up.name], *([newer[up.name]] if up.name in newer else [])}
        kind = "sdist" if up.sources[0].kind == "sdist" else "bdist_wheel"
        fake.add_project(
            up.pypi,
            {
                v: [fake.file(f"{up.pypi}-{v}.tar.gz", f"{up.pypi}{v}".encode(), packagetype=kind)]
                for v in versions
            },
        )
    return pins


def test_report_lists_pins_newest_sources_and_companions(
    recipes: Path, fake: FakeUpstream, capsys: pytest.CaptureFixture[str]
) -> None:
    pins = publish_all(
        fake,
        recipes,
        {
            "pytorch": "2.15.0",
            "torchvision": "0.30.0",
            "triton": "3.9.0",
            "flash-attn": "9.0.0",
            "bitsandbytes": "9.1.0",
        },
    )
    fake.add("/api/repos/bitsandbytes-foundation/bitsandbytes/commits/9.1.0", Reply(body=b"c" * 40))
    fake.add("/pytorch/pytorch/releases/download/v2.15.0/pytorch-v2.15.0.tar.gz", Reply(body=b"x"))
    fake.add("/api/repos/pytorch/pytorch/commits/v2.15.0", Reply(body=b"f" * 40))
    assert outdated(recipes, fake.url, fake.url, "--json") == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["upstreams"]}
    assert set(rows) == {u.name for u in load_table().upstreams}
    assert rows["pytorch"]["pinned"] == [pins["pytorch"]] and rows["pytorch"]["newest"] == "2.15.0"
    assert rows["pytorch"]["behind"] and not rows["deepspeed"]["behind"]
    assert rows["pytorch"]["companions"] == [
        "torchvision 0.30.0 (torchvision-pytorch)",
        f"torchaudio {pins['torchaudio']} (torchaudio-pytorch)",
        "triton 3.9.0 (triton-pytorch)",
        # AOTriton is no PyPI project: its release and the series it was checked for are aotriton.toml's.
        (f"aotriton for pytorch 2.15.0: not recorded in tools/rocmlock/data/aotriton.toml (aotriton-pytorch; "
        f"it pins {AOT['version']}, checked for pytorch {SERIES})"),
        # so the newest torch a bump takes today is the pinned one (its series is the table's)
        f"newest pytorch with every companion released: {pins['pytorch']}",
    ]
    # 0.30.0 is after the stable-ABI 0.29.2: any torch from 2.15 on (issue 42)
    assert rows["torchvision"]["companions"] == ["needs pytorch >=2.15 (torchvision-pytorch)"]
    sha = hashlib.sha256(b"flash-attn9.0.0").hexdigest()
    assert rows["flash-attn"]["sources"] == {"flash-attn": f"sdist sha256 {sha}"}
    assert rows["bitsandbytes"]["sources"] == {"bitsandbytes": f"commit {'c' * 40}"}
    assert rows["pytorch"]["sources"] == {"pytorch": "sha256: `rocmlock bump` downloads the archive",
                                          "pytorch-git": f"commit {'f' * 40}"}


def test_github_unreachable_is_a_cell_not_a_failure(
    recipes: Path, fake: FakeUpstream, capsys: pytest.CaptureFixture[str]
) -> None:
    publish_all(fake, recipes, {"triton": "3.9.0", "torchvision": "0.30.0", "bitsandbytes": "9.1.0"})
    assert outdated(recipes, fake.url, closed_port_url()) == 0
    out = capsys.readouterr().out
    assert "  source triton: commit unknown (unreachable)\n" in out  # a git source: no archive to hash
    assert (
        "  source triton-llvm: commit unknown (needs the triton commit); sha256 unknown (needs the commit)"
        in out
    )
    assert "  source torchvision: sha256 unknown (unreachable)" in out
    assert "  source bitsandbytes: commit unknown (unreachable)" in out


def test_a_project_missing_on_the_index_fails_its_row_only(
    recipes: Path, fake: FakeUpstream, capsys: pytest.CaptureFixture[str]
) -> None:
    publish_all(fake, recipes, {})
    fake.routes.pop("/pypi/deepspeed/json")
    assert outdated(recipes, fake.url, closed_port_url()) == 1
    out = capsys.readouterr().out
    assert "deepspeed: " in out and "not found (HTTP 404)" in out
    assert "pytorch" in out and "up to date" in out


def test_version_keys_no_upstream_claims_are_listed(
    recipes: Path, fake: FakeUpstream, capsys: pytest.CaptureFixture[str]
) -> None:
    path = recipes / "variants.yaml"
    path.write_text(path.read_text() + '\nfoo_version:\n  - "1.0"\n')
    publish_all(fake, recipes, {})
    assert outdated(recipes, fake.url, closed_port_url()) == 0
    assert (
        "not tracked (no row in tools/rocmlock/data/upstreams.toml): foo_version" in capsys.readouterr().out
    )


def test_an_unrecorded_pairing_shows_what_pypi_metadata_says(
    recipes: Path, fake: FakeUpstream, capsys: pytest.CaptureFixture[str]
) -> None:
    publish_all(fake, recipes, {"triton": "3.10.0"})
    fake.add_project(
        "torch",
        {"2.16.0": [fake.file("torch-2.16.0-cp312-linux_x86_64.whl", packagetype="bdist_wheel")]},
        requires_dist=["filelock", 'triton==3.10.0; platform_system == "Linux"'],
    )
    assert outdated(recipes, fake.url, closed_port_url()) == 0
    out = capsys.readouterr().out
    assert (
        "companion: triton for pytorch 2.16.0: not recorded in tools/rocmlock/data/upstreams.toml "
        "(triton-pytorch); "
        "PyPI's torch 2.16.0 requires triton==3.10.0"
    ) in out


@pytest.fixture
def covers_2_14(aotriton_covers: Callable[..., None]) -> None:
    aotriton_covers(*AOT["pytorch"], "2.14")


@pytest.mark.usefixtures("covers_2_14")  # AOTriton as if checked for 2.14: the library companions decide
def test_the_newest_leader_with_every_companion_released_is_named(
    recipes: Path, fake: FakeUpstream, capsys: pytest.CaptureFixture[str]
) -> None:
    publish_all(fake, recipes, {"torchvision": "0.29.1", "triton": "3.8.0"})
    wheels = {
        v: [fake.file(f"torch-{v}-cp312-linux_x86_64.whl", packagetype="bdist_wheel")]
        for v in ("2.14.0", "2.14.1", "2.15.0")
    }
    fake.add_project("torch", wheels)
    assert outdated(recipes, fake.url, closed_port_url(), "--json") == 0
    (torch,) = [r for r in json.loads(capsys.readouterr().out)["upstreams"] if r["name"] == "pytorch"]
    assert torch["newest"] == "2.15.0"
    # only the per-CPython 0.29.1 (a torch 2.14 build) is on this index: no torchvision for 2.15 yet
    assert ("torchvision 0.30.*, or a stable-ABI torchvision >=0.29.2 of an older series: none released on PyPI yet "
            "(torchvision-pytorch)") in torch["companions"]
    # torchvision 0.29 and triton 3.8 exist: 2.14.1 is the newest torch a bump can take today.
    assert torch["companions"][-1] == "newest pytorch with every companion released: 2.14.1"


def test_aotriton_is_listed_with_its_release_and_the_series_it_was_checked_for(
    recipes: Path, fake: FakeUpstream, capsys: pytest.CaptureFixture[str]
) -> None:
    pins = publish_all(fake, recipes, {})
    patch = pins["pytorch"].rsplit(".", 1)[0] + ".99"
    fake.add_project("torch", {v: [fake.file(f"torch-{v}-cp312-linux_x86_64.whl", packagetype="bdist_wheel")]
                               for v in (pins["pytorch"], patch)})
    assert outdated(recipes, fake.url, closed_port_url()) == 0
    out = capsys.readouterr().out
    assert (f"  companion: aotriton {AOT['version']} (aotriton-pytorch; tools/rocmlock/data/aotriton.toml, "
            f"checked for pytorch {SERIES})") in out


@pytest.mark.usefixtures("covers_2_14")
def test_the_newest_leader_is_held_back_by_an_unrecorded_aotriton_series(
    recipes: Path, fake: FakeUpstream, capsys: pytest.CaptureFixture[str]
) -> None:
    publish_all(fake, recipes, {"torchvision": "0.30.0", "triton": "3.9.0"})
    wheels = {
        v: [fake.file(f"torch-{v}-cp312-linux_x86_64.whl", packagetype="bdist_wheel")]
        for v in ("2.14.0", "2.15.0")
    }
    fake.add_project("torch", wheels)
    fake.add_project("torchvision", {v: [fake.file(f"torchvision-{v}.whl", packagetype="bdist_wheel")]
                                     for v in ("0.29.0", "0.30.0")})
    fake.add_project("triton", {v: [fake.file(f"triton-{v}.whl", packagetype="bdist_wheel")]
                                for v in ("3.8.0", "3.9.0")})
    assert outdated(recipes, fake.url, closed_port_url(), "--json") == 0
    (torch,) = [r for r in json.loads(capsys.readouterr().out)["upstreams"] if r["name"] == "pytorch"]
    assert torch["companions"][-2:] == [
        (f"aotriton for pytorch 2.15.0: not recorded in tools/rocmlock/data/aotriton.toml (aotriton-pytorch; "
        f"it pins {AOT['version']}, checked for pytorch {SERIES}, 2.14)"),
        # every library companion of 2.15 is on PyPI; the AOTriton table is what a bump to it still needs
        "newest pytorch with every companion released: 2.14.0",
    ]


@pytest.mark.parametrize("layout", ["llvm-hash.txt", "llvm-info.json"])
def test_tritons_commit_is_read_at_the_pinned_pytorchs_pin_file(
    recipes: Path, fake: FakeUpstream, capsys: pytest.CaptureFixture[str], layout: str
) -> None:
    # Issue 42: a Triton commit after triton-lang/triton#10358 has cmake/llvm-info.json ("llvm_hash") and no
    # llvm-hash.txt; one before it only the text file (the JSON answers 404 there).
    pins = publish_all(fake, recipes, {"triton": "3.7.2"})
    rev, llvm = "d" * 40, "e" * 40
    fake.add(f"/raw/pytorch/pytorch/v{pins['pytorch']}/.ci/docker/ci_commit_pins/triton.txt",
             Reply(body=rev.encode() + b"\n"))
    body = (json.dumps({"llvm_hash": llvm, "build_number": 1, "sha256sum": {"ubuntu-x64": "f" * 64}}).encode()
            if layout.endswith(".json") else llvm.encode() + b"\n")
    fake.add(f"/raw/triton-lang/triton/{rev}/cmake/{layout}", Reply(body=body))
    assert outdated(recipes, fake.url, fake.url, "--json") == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["upstreams"]}
    assert rows["triton"]["sources"] == {
        "triton": f"commit {rev} (at pytorch {pins['pytorch']})",
        "triton-llvm": f"commit {llvm}; sha256 unknown (unreachable)",
    }


# ----------------------------------------------------------------------------- ROCm releases and newer PyTorch

TAGS = "/api/repos/ROCm/TheRock/tags"


def _tags(*names: str) -> bytes:
    return json.dumps([{"name": n, "commit": {"sha": "0" * 40}} for n in names]).encode()


def test_rocm_releases_newer_than_the_matrix_and_pytorch_releases_newer_than_the_pins(
    recipes_both: Path, fake: FakeUpstream, capsys: pytest.CaptureFixture[str]
) -> None:
    recipes = recipes_both  # pytorch pins 2.12.1 (ROCm 7.2) and 2.14.1 (7.14): newer is newer than both
    publish_all(fake, recipes, {"pytorch": "2.15.0"})
    # Every release after the newest pin, with a pre-release and a yanked one that do not count.
    fake.add_project("torch", {v: [fake.file(f"torch-{v}.tar.gz", v.encode(), packagetype="bdist_wheel",
                                             yanked=v == "2.14.3")]
                               for v in ("2.12.1", "2.13.0", "2.14.1", "2.14.2", "2.14.3", "2.15.0", "2.16.0rc1")})
    # ROCm/TheRock's tags over two pages (GitHub's Link header), with tags that are no release.
    page2 = f"{fake.url}{TAGS}/page2"
    fake.add(TAGS, Reply(body=_tags("therock-7.9.0", "pytorch-triage/apr20-green", "therock-7.14"),
                         content_type="application/json", headers=(("Link", f'<{page2}>; rel="next"'),)))
    fake.add(f"{TAGS}/page2", Reply(body=_tags("therock-10.0", "therock-10.1.1", "therock-10.1", "therock-x"),
                                    content_type="application/json"))
    assert outdated(recipes, fake.url, fake.url, "--json") == 0
    report = json.loads(capsys.readouterr().out)
    rows = {r["name"]: r for r in report["upstreams"]}
    assert rows["pytorch"]["pinned"] == ["2.12.1", "2.14.1"]
    assert rows["pytorch"]["newer"] == ["2.14.2", "2.15.0"]
    assert report["rocm"] == {"matrix": ["7.2", "7.14"], "released": ["7.9", "7.14", "10.0", "10.1"],
                              "newer": ["10.0", "10.1"], "source": "github.com/ROCm/TheRock tags", "error": None}
    assert outdated(recipes, fake.url, fake.url) == 0
    out = capsys.readouterr().out
    assert "  newer than the pins: 2.14.2, 2.15.0\n" in out
    assert ("rocm: matrix 7.2, 7.14; newer releases 10.0, 10.1 (ROCm/TheRock's tags): add them to rocm_version in "
            "recipes/variants.yaml once their pins are known") in out


@pytest.mark.parametrize(("reply", "error"), [
    (Reply(body=b'{"message": "rate limited"}', content_type="application/json"), "not a list of tags"),
    (Reply(body=b"[1, 2]", content_type="application/json"), "not a list of tags"),
    (Reply(body=b"<html>", content_type="text/html"), "not a list of tags"),
    (Reply(status=403), "HTTP 403"),
])
def test_a_bad_tags_answer_is_the_rocm_lines_error_only(
    recipes: Path, fake: FakeUpstream, capsys: pytest.CaptureFixture[str], reply: Reply, error: str
) -> None:
    publish_all(fake, recipes, {})
    fake.add(TAGS, reply)
    assert outdated(recipes, fake.url, fake.url, "--json") == 0
    rocm = json.loads(capsys.readouterr().out)["rocm"]
    assert rocm["newer"] == [] and error in rocm["error"]


def test_rocm_releases_unreachable_are_unknown_not_a_failure(
    recipes_both: Path, fake: FakeUpstream, capsys: pytest.CaptureFixture[str]
) -> None:
    publish_all(fake, recipes_both, {})
    assert outdated(recipes_both, fake.url, closed_port_url()) == 0
    assert "rocm: matrix 7.2, 7.14; newer releases unknown (unreachable) (ROCm/TheRock's tags)" in \
        capsys.readouterr().out


def test_a_link_header_to_another_host_is_not_followed(
    recipes: Path, fake: FakeUpstream, capsys: pytest.CaptureFixture[str]
) -> None:
    publish_all(fake, recipes, {})
    fake.add(TAGS, Reply(body=_tags("therock-7.14"), content_type="application/json",
                         headers=(("Link", f'<{closed_port_url()}/next>; rel="next"'),)))
    assert outdated(recipes, fake.url, fake.url, "--json") == 0
    rocm = json.loads(capsys.readouterr().out)["rocm"]
    assert rocm["released"] == ["7.14"] and rocm["error"] is None
