"""`rocmlock bump` against a local PyPI/GitHub stand-in (tests/fakeupstream.py), on a copy of the real
recipes.

Versions are read from the copied recipes/variants.yaml, so the tests hold whatever it pins.
About 10 s (the rebuild summary test plans 4 times).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest
from fakeupstream import FakeUpstream, Reply, closed_port_url, network_args, sdist
from rocmlock.cli.main import main
from rocmlock.upstream.pins import load_table
from rocmlock.upstream.yamledit import load, values
from shipped import MANIFEST, RECIPES, ROOT, keep_first_rocm

# PyPI's Warehouse names sdists <normalized name>-<version>.tar.gz (PEP 625).
SDIST_NAMES = {"flash-attn": "flash_attn", "llamafactory": "llamafactory", "deepspeed": "deepspeed"}


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """A checkout copy: recipes/ copied, tools/ linked (the recipes read ../../tools/...)."""
    shutil.copytree(RECIPES, tmp_path / "recipes")
    (tmp_path / "tools").symlink_to(ROOT / "tools")
    keep_first_rocm(tmp_path / "recipes" / "variants.yaml")  # one pin per upstream; two: the tests at the end
    return tmp_path


def bump(ws: Path, fake_url: str, *args: str, github: str | None = None, manifest: Path | None = None) -> int:
    return main(["bump", *args, "--recipes-dir", str(ws / "recipes"),
                 "--manifest-path", str(manifest or ws / "no-pixi.toml"), *network_args(fake_url, github)])


def pinned(ws: Path, key: str) -> str:
    return values(load(ws / "recipes" / "variants.yaml"), key)[0]


def add_sdist(
    fake: FakeUpstream, name: str, version: str, data: bytes | None = None, sha256: str | None = None
) -> str:
    data = data if data is not None else f"{name} {version}".encode()
    fake.add_project(name, {version: [fake.file(f"{SDIST_NAMES[name]}-{version}.tar.gz", data, sha256)]})
    return hashlib.sha256(data).hexdigest()


def snapshot(ws: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in sorted((ws / "recipes").rglob("*")) if p.is_file()}


def test_round_trip_changes_exactly_the_bumped_lines(
    ws: Path, fake: FakeUpstream, capsys: pytest.CaptureFixture[str]
) -> None:
    path = ws / "recipes" / "variants.yaml"
    before = path.read_text().splitlines(True)
    old_version, old_sha = pinned(ws, "flash_attn_version"), pinned(ws, "flash_attn_sha256")
    new_version = f"{old_version}.post9"
    sha = add_sdist(fake, "flash-attn", new_version)
    assert bump(ws, fake.url, f"flash-attn={new_version}") == 0
    after = path.read_text().splitlines(True)
    changed = [(a, b) for a, b in zip(before, after, strict=True) if a != b]
    # Every comment, key, quote and indent byte for byte; only the version and its sha256 moved.
    assert changed == [
        (f'  - "{old_version}"\n', f'  - "{new_version}"\n'),
        (f"  - {old_sha}\n", f"  - {sha}\n"),
    ]
    out = capsys.readouterr().out
    assert f'+  - "{new_version}"' in out and f"+  - {sha}" in out and out.count("\n+ ") == 2


def test_a_variants_file_with_crlf_line_ends_is_refused_not_rewritten(
    ws: Path, fake: FakeUpstream, capsys: pytest.CaptureFixture[str]
) -> None:
    # read_text() turned CRLF into LF, and the bump wrote every line back with LF (16,684 bytes changed for two
    # pins), while its diff showed two lines.
    path = ws / "recipes" / "variants.yaml"
    new_version = f"{pinned(ws, 'flash_attn_version')}.post9"
    path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))
    before = snapshot(ws)
    add_sdist(fake, "flash-attn", new_version)
    assert bump(ws, fake.url, f"flash-attn={new_version}") == 2
    assert "holds CR (Windows) line ends" in capsys.readouterr().err
    assert snapshot(ws) == before


def test_dry_run_writes_nothing_but_shows_the_diff(
    ws: Path, fake: FakeUpstream, capsys: pytest.CaptureFixture[str]
) -> None:
    before = snapshot(ws)
    new_version = f"{pinned(ws, 'deepspeed_version')}.post1"
    sha = add_sdist(fake, "deepspeed", new_version)
    assert bump(ws, fake.url, f"deepspeed={new_version}", "--dry-run") == 0
    out, err = capsys.readouterr()
    assert snapshot(ws) == before
    assert f"+  - {sha}" in out and "dry run: nothing written" in err


def test_the_same_bump_gives_the_same_bytes(ws: Path, fake: FakeUpstream, tmp_path: Path) -> None:
    other = tmp_path / "other"
    shutil.copytree(ws / "recipes", other / "recipes")
    new_version = f"{pinned(ws, 'deepspeed_version')}.post1"
    add_sdist(fake, "deepspeed", new_version)
    assert bump(ws, fake.url, f"deepspeed={new_version}") == 0
    assert bump(other, fake.url, f"deepspeed={new_version}") == 0
    assert snapshot(ws).values() and list(snapshot(ws).values()) == list(snapshot(other).values())


def _torch_2_15(fake: FakeUpstream) -> dict[str, str]:
    """PyPI releases of torch 2.15.0 with its companions, and their GitHub sources on the fake GitHub."""
    for name, version in (("torch", "2.15.0"), ("torchvision", "0.30.0"), ("triton", "3.9.0")):
        fake.add_project(
            name,
            {version: [fake.file(f"{name}-{version}-cp312-linux_x86_64.whl", packagetype="bdist_wheel")]},
        )
    rev, llvm = "a" * 40, "b" * 40
    archives = {
        "pytorch": "/pytorch/pytorch/releases/download/v2.15.0/pytorch-v2.15.0.tar.gz",
        "torchvision": "/pytorch/vision/archive/refs/tags/v0.30.0.tar.gz",
        "triton-llvm": f"/llvm/llvm-project/archive/{llvm}.tar.gz",
    }
    for name, path in archives.items():
        fake.add(path, Reply(body=name.encode()))
    # Triton's commit is PyTorch's pin (its pin file at the tag of the torch the bump ends with), a git source.
    fake.add("/raw/pytorch/pytorch/v2.15.0/.ci/docker/ci_commit_pins/triton.txt", Reply(body=rev.encode() + b"\n"))
    fake.add(f"/raw/triton-lang/triton/{rev}/cmake/llvm-hash.txt", Reply(body=llvm.encode() + b"\n"))
    # PyTorch's own commit (the recipe's git source where no archive hash is pinned): its tag's, from GitHub's API.
    fake.add("/api/repos/pytorch/pytorch/commits/v2.15.0", Reply(body=b"d" * 40))
    shas = {name: hashlib.sha256(name.encode()).hexdigest() for name in archives}
    return {
        "pytorch_version": "2.15.0",
        "pytorch_sha256": shas["pytorch"],
        "pytorch_git_rev": "d" * 40,
        "torchvision_version": "0.30.0",
        "torchvision_sha256": shas["torchvision"],
        "triton_version": "3.9.0",
        "triton_git_rev": rev,
        "triton_llvm_rev": llvm,
        "triton_llvm_sha256": shas["triton-llvm"],
    }


def test_pytorch_with_companions_takes_commits_and_hashes_from_github(
    ws: Path, fake: FakeUpstream, aotriton_covers: Callable[..., None]
) -> None:
    aotriton_covers("2.15")  # as if someone had taken 2.15's AOTriton release into aotriton.toml
    expected = _torch_2_15(fake)
    path = ws / "recipes" / "variants.yaml"
    old_doc, before = load(path), path.read_text().splitlines()
    assert bump(ws, fake.url, "pytorch=2.15.0", "torchvision=0.30.0", "triton=3.9.0") == 0
    doc = load(path)
    assert {key: values(doc, key)[0] for key in expected} == expected
    # Line for line: only the value lines of the keys that moved differ, the rest (comments too) is unchanged.
    moved = sum(values(old_doc, key)[0] != value for key, value in expected.items())
    after = path.read_text().splitlines()
    assert len(after) == len(before) and sum(a != b for a, b in zip(before, after, strict=True)) == moved


def test_github_unreachable_needs_hashes_and_commits_given(
    ws: Path, fake: FakeUpstream, capsys: pytest.CaptureFixture[str], aotriton_covers: Callable[..., None]
) -> None:
    aotriton_covers("2.15")
    expected = _torch_2_15(fake)
    before = snapshot(ws)
    down = closed_port_url()
    assert bump(ws, fake.url, "pytorch=2.15.0", "torchvision=0.30.0", "triton=3.9.0", github=down) == 2
    err = capsys.readouterr().err
    assert "source 'pytorch' is needed and its archive is unreachable" in err
    assert "hint: pass --sha256 pytorch=HEX" in err and snapshot(ws) == before
    given = [
        "--sha256",
        f"pytorch={expected['pytorch_sha256']}",
        "--rev",
        f"pytorch-git={expected['pytorch_git_rev']}",
        "--sha256",
        f"torchvision={expected['torchvision_sha256']}",
        "--rev",
        f"triton={expected['triton_git_rev']}",
        "--rev",
        f"triton-llvm={expected['triton_llvm_rev']}",
        "--sha256",
        f"triton-llvm={expected['triton_llvm_sha256']}",
    ]
    assert (
        bump(ws, fake.url, "pytorch=2.15.0", "torchvision=0.30.0", "triton=3.9.0", *given, github=down) == 0
    )
    doc = load(ws / "recipes" / "variants.yaml")
    assert {key: values(doc, key)[0] for key in expected} == expected


@pytest.mark.parametrize(
    ("args", "rule", "hint"),
    [
        (
            ["pytorch=2.15.0"],
            "pairing rule 'torchvision-pytorch'",
            "bump it in the same command: torchvision 0.30.*",
        ),
        (["pytorch=2.15.0", "torchvision=0.30.0"], "pairing rule 'triton-pytorch'", "triton 3.9.*"),
        (["torchvision=0.30.0"], "pairing rule 'torchvision-pytorch'", "pytorch >=2.15"),
        (["torchaudio=2.99.0"], "pairing rule 'torchaudio-pytorch'", "pytorch >=2.99"),
        (
            ["pytorch=2.16.0", "torchvision=0.31.0"],
            "which triton goes with pytorch 2.16.0 is not recorded",
            "add it to the rule in tools/rocmlock/data/upstreams.toml",
        ),
        # Every library companion fits 2.13 (torchvision 0.28, triton 3.7, torchaudio 2.11), the table not.
        (
            ["pytorch=2.13.0", "torchvision=0.28.0"],
            "which aotriton goes with pytorch 2.13.0 is not recorded in tools/rocmlock/data/aotriton.toml",
            "update tools/rocmlock/data/aotriton.toml from PyTorch 2.13.0's cmake/External/aotriton.cmake",
        ),
    ],
)
def test_a_pairing_violation_is_refused_with_the_rule_named(
    ws: Path, args: list[str], rule: str, hint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    before = snapshot(ws)
    # No server at all: the rules are checked before anything is looked up.
    assert bump(ws, closed_port_url(), *args) == 2
    err = capsys.readouterr().err
    assert rule in err and hint in err and "Traceback" not in err
    assert snapshot(ws) == before


# ----------------------------------------------------------------------------- AOTriton (data/aotriton.toml)

AOT = tomllib.loads((ROOT / "tools/rocmlock/data/aotriton.toml").read_text())


def _torch_release(fake: FakeUpstream, version: str) -> str:
    """torch ``version`` on the fake PyPI and its release asset on the fake GitHub; the asset's sha256."""
    wheel = fake.file(f"torch-{version}-cp312-linux_x86_64.whl", packagetype="bdist_wheel")
    fake.add_project("torch", {version: [wheel]})
    asset = f"/pytorch/pytorch/releases/download/v{version}/pytorch-v{version}.tar.gz"
    fake.add(asset, Reply(body=version.encode()))
    fake.add(f"/api/repos/pytorch/pytorch/commits/v{version}", Reply(body=b"e" * 40))  # the tag's commit
    return hashlib.sha256(version.encode()).hexdigest()


def test_a_pytorch_series_aotriton_toml_does_not_cover_is_refused_before_any_lookup(
    ws: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = snapshot(ws)
    assert bump(ws, closed_port_url(), "pytorch=2.13.0", "torchvision=0.28.0") == 2
    err = capsys.readouterr().err
    # One error line naming the table, its release and the series it covers; one hint saying what to copy.
    assert err.splitlines() == [
        (
            "error: pairing rule 'aotriton-pytorch': which aotriton goes with pytorch 2.13.0 is not recorded in "
            f"tools/rocmlock/data/aotriton.toml (aotriton {AOT['version']} there is for pytorch "
            f"{', '.join(AOT['pytorch'])})"
        ),
        (
            "hint: update tools/rocmlock/data/aotriton.toml from PyTorch 2.13.0's cmake/External/aotriton.cmake "
            "(version = __AOTRITON_VER, [runtime] = __AOTRITON_SHA256_LIST, "
            "[images] = __AOTRITON_IMAGE_SHA256_LIST, [targets] by its image rule) and set its "
            'pytorch = ["2.13"], or add "2.13" there if that file names the same release and sha256s'
        ),
    ]
    assert snapshot(ws) == before


def test_a_patch_bump_within_aotriton_tomls_series_passes(ws: Path, fake: FakeUpstream) -> None:
    old = pinned(ws, "pytorch_version")
    major, minor, patch = (int(p) for p in old.split(".")[:3])
    assert f"{major}.{minor}" in AOT["pytorch"]
    new = f"{major}.{minor}.{patch + 1}"
    sha = _torch_release(fake, new)
    assert bump(ws, fake.url, f"pytorch={new}") == 0
    assert (pinned(ws, "pytorch_version"), pinned(ws, "pytorch_sha256")) == (new, sha)
    assert pinned(ws, "pytorch_git_rev") == "e" * 40


def test_a_series_aotriton_toml_lists_is_bumped_to(
    ws: Path, fake: FakeUpstream, aotriton_covers: Callable[..., None]
) -> None:
    aotriton_covers("2.12", "2.13")  # 2.13's aotriton.cmake named the same release and hashes
    sha = _torch_release(fake, "2.13.0")
    fake.add_project("torchvision", {"0.28.0": [fake.file("torchvision-0.28.0-cp312-linux_x86_64.whl",
                                                          packagetype="bdist_wheel")]})
    fake.add("/pytorch/vision/archive/refs/tags/v0.28.0.tar.gz", Reply(body=b"vision"))
    assert bump(ws, fake.url, "pytorch=2.13.0", "torchvision=0.28.0") == 0
    assert (pinned(ws, "pytorch_version"), pinned(ws, "pytorch_sha256")) == ("2.13.0", sha)
    assert pinned(ws, "torchvision_version") == "0.28.0"


def test_bad_requests_exit_2_with_one_line(
    ws: Path, fake: FakeUpstream, capsys: pytest.CaptureFixture[str]
) -> None:
    add_sdist(fake, "deepspeed", "9.9.9")
    cases = [
        (["torch=2.15.0"], "unknown upstream 'torch'"),
        # PyPI's spellings of a name: the recipe's name is the one to give, and the hint says which.
        (["torch=2.15.0"], "hint: 'torch' is PyPI's name of pytorch: pytorch=2.15.0"),
        (["flash_attn=2.8.4"], "hint: 'flash_attn' is PyPI's name of flash-attn: flash-attn=2.8.4"),
        (["DeepSpeed=9.9.9"], "hint: 'DeepSpeed' is PyPI's name of deepspeed: deepspeed=9.9.9"),
        # pip's `==` habit: one '=' separates name and version.
        (["deepspeed==9.9.9"], "bump deepspeed==9.9.9: one '=' between the name and the version"),
        (["deepspeed==9.9.9"], "hint: deepspeed=9.9.9"),
        (["deepspeed"], "expected NAME=VALUE"),
        (["deepspeed=not-a-version"], "'not-a-version' is not a version"),
        (["deepspeed=9.9.8"], "'deepspeed' has no release 9.9.8"),
        (["deepspeed=9.9.9", "--sha256", "deepspeed=abc"], "not 64 lowercase hex digits"),
        (["deepspeed=9.9.9", "--rev", "triton=" + "a" * 40], "triton is not bumped"),
        (
            ["deepspeed=9.9.9", "--sha256", "deepspeed=" + "0" * 64],
            "PyPI's sdist deepspeed-9.9.9.tar.gz has sha256",
        ),
    ]
    for args, message in cases:
        assert bump(ws, fake.url, *args) == 2, args
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, (args, err)


def test_a_second_zip_position_is_chosen_by_series(tmp_path: Path, fake: FakeUpstream) -> None:
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    text = (
        'python:\n  - "3.12"\n# two flash-attn lines\nflash_attn_version:\n  - "2.7.4"\n  - "2.8.3"\n'
        "flash_attn_sha256:\n  - " + "1" * 64 + "  # 2.7.4\n  - " + "2" * 64 + "  # 2.8.3\n"
        "zip_keys:\n  - [flash_attn_version, flash_attn_sha256]\n"
    )
    (recipes / "variants.yaml").write_text(text)
    sha = add_sdist(fake, "flash-attn", "2.7.4.post1")
    assert bump(tmp_path, fake.url, "flash-attn=2.7.4.post1") == 0
    assert (recipes / "variants.yaml").read_text() == text.replace('"2.7.4"', '"2.7.4.post1"').replace(
        "1" * 64, sha
    )


def test_rebuild_summary_lists_the_new_variants(
    ws: Path, fake: FakeUpstream, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copy(MANIFEST, ws / "pixi.toml")
    new_version = f"{pinned(ws, 'flash_attn_version')}.post9"
    add_sdist(fake, "flash-attn", new_version)
    assert (
        bump(ws, fake.url, f"flash-attn={new_version}", "--dry-run", "--json", manifest=ws / "pixi.toml") == 0
    )
    data = json.loads(capsys.readouterr().out)
    assert data["written"] is False and data["files"] == ["recipes/variants.yaml"]
    assert data["rebuild"] and all(i.startswith(f"flash-attn-{new_version}-") for i in data["rebuild"])
    assert {c["key"] for c in data["changes"]} == {"flash_attn_version", "flash_attn_sha256"}
    # Written for real, the summary is the same: the plan is made before the files change.
    assert bump(ws, fake.url, f"flash-attn={new_version}", "--json", manifest=ws / "pixi.toml") == 0
    written = json.loads(capsys.readouterr().out)
    assert written["written"] is True and written["rebuild"] == data["rebuild"]
    assert pinned(ws, "flash_attn_version") == new_version


def test_url_templates_are_the_recipes_source_urls() -> None:
    """upstreams.toml's archive URLs are what the recipes download; its keys are the recipes' keys."""
    github = {"github": "https://github.com"}
    for up in load_table().upstreams:
        key = up.sources[0].keys[0]
        recipe = next(p for p in RECIPES.glob("*/recipe.yaml") if f"${{{{ {key} }}}}" in p.read_text())
        text = recipe.read_text()
        assert f"${{{{ {up.version_key} }}}}" in text, (recipe, up.version_key)
        for src in up.sources:
            for key in src.keys:
                assert f"${{{{ {key} }}}}" in text, (recipe, key)
            if src.url:
                url = src.url.format(version="${{ version }}", rev=f"${{{{ {src.rev_key} }}}}", **github)
                assert f"url: {url}" in text, (recipe, url)


# ----------------------------------------------------------------------------- llamafactory's run reqs

PYPI_NAMES = {
    "pytorch": "torch",
    "matplotlib-base": "matplotlib",
}  # the inverse of upstreams.toml's conda_names


def _current_requirements(recipe: Path) -> list[str]:
    """The recipe's run requirements from the sdist (all but python), as PyPI requirement strings."""
    run = load(recipe).data["requirements"]["run"]
    out = []
    for entry in run:
        name, _, spec = str(entry).partition(" ")
        if name != "python":
            out.append(PYPI_NAMES.get(name, name) + spec)
    return out


def _pyproject(deps: list[str]) -> str:
    return (
        '[project]\nname = "llamafactory"\ndynamic = ["version"]\ndependencies = [\n'
        + "".join(f"    {json.dumps(d)},\n" for d in deps)
        + "]\n"
    )


def test_llamafactory_run_requirements_follow_the_new_sdist(
    ws: Path, fake: FakeUpstream, capsys: pytest.CaptureFixture[str]
) -> None:
    recipe = ws / "recipes" / "llamafactory" / "recipe.yaml"
    original = recipe.read_text()
    before = [str(e) for e in load(recipe).data["requirements"]["run"]]
    deps = _current_requirements(recipe)
    assert before[1].startswith("pytorch ") and any(d.startswith("matplotlib>") for d in deps)
    deps.pop()  # upstream dropped its last dependency
    deps[0] = "torch>=2.99.0"  # raised a floor
    deps.insert(
        2, "Brand_New.Pkg >= 1.0, < 2 ; sys_platform == 'linux'"
    )  # added one (odd spelling on purpose)
    deps.append("pywin32>=300; sys_platform == 'win32'")  # never on Linux
    data = sdist("llamafactory", "9.9.9", _pyproject(deps))
    sha = add_sdist(fake, "llamafactory", "9.9.9", data)
    assert bump(ws, fake.url, "llamafactory=9.9.9") == 0
    run = [str(e) for e in load(recipe).data["requirements"]["run"]]
    # python (the recipe's own) stays first; the rest in the pyproject's order, conda-forge names
    # (torch -> pytorch, matplotlib -> matplotlib-base, PEP 503 normalized), a new one after its predecessor.
    assert run == [before[0], "pytorch >=2.99.0", before[2], "brand-new-pkg >=1.0,<2", *before[3:-1]]
    new_text = recipe.read_text()
    old_comments = [line for line in original.splitlines() if line.lstrip().startswith("#")]
    new_comments = [line for line in new_text.splitlines() if line.lstrip().startswith("#")]
    # Every comment stays where it was; one citing the version ("core (0.9.5 pyproject.toml") follows it.
    assert [re.sub(r"\(\S+ pyproject", "(X pyproject", c) for c in new_comments] == [
        re.sub(r"\(\S+ pyproject", "(X pyproject", c) for c in old_comments
    ]
    cited = [c for c in old_comments if re.search(r"\(\S+ pyproject\.toml", c)]
    assert sum("(9.9.9 pyproject.toml" in c for c in new_comments) == len(cited)
    assert pinned(ws, "llamafactory_sha256") == sha
    out = capsys.readouterr().out
    assert "+    - pytorch >=2.99.0" in out and "+    - brand-new-pkg >=1.0,<2" in out


def test_a_wrong_checksum_writes_nothing(
    ws: Path, fake: FakeUpstream, capsys: pytest.CaptureFixture[str]
) -> None:
    before = snapshot(ws)
    data = sdist("llamafactory", "9.9.9", _pyproject(["torch>=2.4.0"]))
    add_sdist(fake, "llamafactory", "9.9.9", data, sha256="f" * 64)  # the index's digest lies
    assert bump(ws, fake.url, "llamafactory=9.9.9") == 1
    err = capsys.readouterr().err
    assert f"expected {'f' * 64}" in err and "do not pin it" in err
    assert snapshot(ws) == before  # neither variants.yaml nor the recipe


def test_a_downgrade_is_done_but_said(
    ws: Path, fake: FakeUpstream, capsys: pytest.CaptureFixture[str]
) -> None:
    old = pinned(ws, "deepspeed_version")
    add_sdist(fake, "deepspeed", "0.0.1")
    assert bump(ws, fake.url, "deepspeed=0.0.1") == 0
    assert f"deepspeed: {old} -> 0.0.1 is a downgrade" in capsys.readouterr().err
    assert pinned(ws, "deepspeed_version") == "0.0.1"


def test_dynamic_dependencies_are_refused(
    ws: Path, fake: FakeUpstream, capsys: pytest.CaptureFixture[str]
) -> None:
    before = snapshot(ws)
    data = sdist(
        "llamafactory", "9.9.9", '[project]\nname = "llamafactory"\ndynamic = ["version", "dependencies"]\n'
    )
    add_sdist(fake, "llamafactory", "9.9.9", data)
    assert bump(ws, fake.url, "llamafactory=9.9.9") == 1
    assert "no static [project] dependencies" in capsys.readouterr().err
    assert snapshot(ws) == before


@pytest.mark.parametrize(("dep", "says"), [
    ("transformers===4.99\x1b[31mRED\x1b]0Xpwned\x07", "is no version bound a conda match spec can hold"),
    ("newpkg===1", "is no version bound a conda match spec can hold"),
    ("bad req ]\x1b[2J", "is not a requirement"),
])
def test_an_sdist_dependency_that_is_no_conda_bound_is_refused_escaped(
    ws: Path, fake: FakeUpstream, capsys: pytest.CaptureFixture[str], dep: str, says: str
) -> None:
    """PEP 440's `===` takes any text: an sdist's `transformers===4.99<ESC>[31m...` went into recipe.yaml as it was,
    and its note cleared the terminal. Refused, in one escaped line with a hint, nothing written."""
    before = snapshot(ws)
    add_sdist(fake, "llamafactory", "9.9.9", sdist("llamafactory", "9.9.9", _pyproject(["torch>=2.4.0", dep])))
    assert bump(ws, fake.url, "llamafactory=9.9.9") == 1
    err = capsys.readouterr().err
    assert says in err and "\x1b" not in err and "\x07" not in err, err
    assert err.splitlines()[-1] == "hint: edit the recipe's run requirements by hand", err
    assert snapshot(ws) == before


def test_zip_groups_are_read_generically(
    tmp_path: Path, fake: FakeUpstream, capsys: pytest.CaptureFixture[str]
) -> None:
    """Another column zipped with the version keeps its value; an unknown key of the upstream's is refused."""
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    text = (
        'rocm_version:\n  - "6.4"\n  - "7.2"\ndeepspeed_version:\n  - "0.17.1"\n  - "0.18.4"\n'
        "deepspeed_sha256:\n  - " + "1" * 64 + "\n  - " + "2" * 64 + "\n"
        "zip_keys:\n  - [rocm_version, deepspeed_version, deepspeed_sha256]\n"
    )
    (recipes / "variants.yaml").write_text(text)
    sha = add_sdist(fake, "deepspeed", "0.18.5")
    assert bump(tmp_path, fake.url, "deepspeed=0.18.5") == 0
    assert (recipes / "variants.yaml").read_text() == text.replace('"0.18.4"', '"0.18.5"').replace(
        "2" * 64, sha
    )
    (recipes / "variants.yaml").write_text(
        text.replace("deepspeed_sha256]", "deepspeed_sha256, deepspeed_patch]")
        + "deepspeed_patch:\n  - a\n  - b\n"
    )
    assert bump(tmp_path, fake.url, "deepspeed=0.18.5") == 2
    assert "has deepspeed_patch, which rocmlock does not fill for deepspeed" in capsys.readouterr().err


def test_triton_alone_takes_pytorchs_pin_its_llvm_and_the_llvm_archives_hash(
    ws: Path, fake: FakeUpstream, capsys: pytest.CaptureFixture[str]
) -> None:
    # Issue 28: the Triton commit is the one PyTorch's pin file names at the tag of the pinned torch (nothing
    # bumps pytorch here), the LLVM commit is that commit's cmake/llvm-hash.txt, the sha256 is the LLVM archive's.
    torch = pinned(ws, "pytorch_version")
    fake.add_project("triton", {"3.7.2": [fake.file("triton-3.7.2-cp312-linux_x86_64.whl", packagetype="bdist_wheel")]})
    rev, llvm = "d" * 40, "e" * 40
    fake.add(f"/raw/pytorch/pytorch/v{torch}/.ci/docker/ci_commit_pins/triton.txt", Reply(body=rev.encode() + b"\n"))
    fake.add(f"/raw/triton-lang/triton/{rev}/cmake/llvm-hash.txt", Reply(body=llvm.encode() + b"\n"))
    fake.add(f"/llvm/llvm-project/archive/{llvm}.tar.gz", Reply(body=b"llvm archive"))
    assert bump(ws, fake.url, "triton=3.7.2") == 0, capsys.readouterr().err
    assert [pinned(ws, k) for k in ("triton_version", "triton_git_rev", "triton_llvm_rev", "triton_llvm_sha256")] == [
        "3.7.2", rev, llvm, hashlib.sha256(b"llvm archive").hexdigest()]


def test_tritons_llvm_is_read_from_llvm_info_json_where_the_commit_has_it(
    ws: Path, fake: FakeUpstream, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 42: since triton-lang/triton#10358 a Triton commit pins its LLVM in cmake/llvm-info.json
    ({"llvm_hash", "build_number", "sha256sum"}), and cmake/llvm-hash.txt is gone (404). The JSON is read first."""
    torch = pinned(ws, "pytorch_version")
    fake.add_project("triton", {"3.7.2": [fake.file("triton-3.7.2-cp312-linux_x86_64.whl", packagetype="bdist_wheel")]})
    rev, llvm = "d" * 40, "4611156032e1ebac68b2b8f6107b1475a7c60800"
    fake.add(f"/raw/pytorch/pytorch/v{torch}/.ci/docker/ci_commit_pins/triton.txt", Reply(body=rev.encode() + b"\n"))
    info = {"llvm_hash": llvm, "build_number": 1, "sha256sum": {"ubuntu-x64": "3" * 64}}
    fake.add(f"/raw/triton-lang/triton/{rev}/cmake/llvm-info.json", Reply(body=json.dumps(info).encode()))
    # a stale text file beside it is not what the commit pins: the JSON wins
    fake.add(f"/raw/triton-lang/triton/{rev}/cmake/llvm-hash.txt", Reply(body=b"1" * 40 + b"\n"))
    fake.add(f"/llvm/llvm-project/archive/{llvm}.tar.gz", Reply(body=b"llvm archive"))
    assert bump(ws, fake.url, "triton=3.7.2") == 0, capsys.readouterr().err
    assert [pinned(ws, k) for k in ("triton_git_rev", "triton_llvm_rev", "triton_llvm_sha256")] == [
        rev, llvm, hashlib.sha256(b"llvm archive").hexdigest()]


@pytest.mark.parametrize(("body", "says"), [
    (b"<html>login</html>", "answered the string '<html>login</html>' for the commit of source 'triton-llvm'"),
    (b'["4611156032e1ebac68b2b8f6107b1475a7c60800"]', "answered JSON without a string 'llvm_hash'"),
    (b'{"llvm_hash": 4611156032, "build_number": 1}', "answered JSON without a string 'llvm_hash'"),
    (b'{"llvm_hash": "4611156032e1"}', "for the commit of source 'triton-llvm'"),
])
def test_a_hostile_llvm_info_json_is_refused_and_nothing_is_written(
    ws: Path, fake: FakeUpstream, capsys: pytest.CaptureFixture[str], body: bytes, says: str
) -> None:
    torch = pinned(ws, "pytorch_version")
    fake.add_project("triton", {"3.7.2": [fake.file("triton-3.7.2-cp312-linux_x86_64.whl", packagetype="bdist_wheel")]})
    rev = "d" * 40
    fake.add(f"/raw/pytorch/pytorch/v{torch}/.ci/docker/ci_commit_pins/triton.txt", Reply(body=rev.encode() + b"\n"))
    fake.add(f"/raw/triton-lang/triton/{rev}/cmake/llvm-info.json", Reply(body=body))
    before = snapshot(ws)
    assert bump(ws, fake.url, "triton=3.7.2") == 1
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err, err
    assert snapshot(ws) == before


# ----------------------------------------------------------------------------- one PyTorch per ROCm version


@pytest.fixture
def ws_both(tmp_path: Path) -> Path:
    """A checkout copy with the shipped variants.yaml as it is: ROCm 7.2 and 7.14, each with its own PyTorch."""
    shutil.copytree(RECIPES, tmp_path / "recipes")
    (tmp_path / "tools").symlink_to(ROOT / "tools")
    return tmp_path


def test_a_patch_bump_moves_only_its_rocm_versions_pins(ws_both: Path, fake: FakeUpstream) -> None:
    """Issue 34: pytorch_version pins 2.12.1 (ROCm 7.2) and 2.14.1 (7.14, by commit, no archive hash). A bump of
    the 2.12 series fills 7.2's position (release asset hash and tag commit); 7.14's pins stay as they were, and
    AOTriton (aotriton.toml, checked for 2.12 only) does not refuse it for the 2.14.1 it does not pin."""
    path = ws_both / "recipes" / "variants.yaml"
    before = load(path)
    sha = _torch_release(fake, "2.12.2")
    assert bump(ws_both, fake.url, "pytorch=2.12.2") == 0
    doc = load(path)
    assert values(doc, "pytorch_version") == ["2.12.2", "2.14.1"]
    assert values(doc, "pytorch_sha256") == [sha, ""]
    assert values(doc, "pytorch_git_rev") == ["e" * 40, values(before, "pytorch_git_rev")[1]]
    for key in ("rocm_version", "triton_git_rev", "torchvision_version", "aotriton_runtime_sha256"):
        assert values(doc, key) == values(before, key), key


def test_a_version_of_neither_series_is_refused(ws_both: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = snapshot(ws_both)
    assert bump(ws_both, closed_port_url(), "pytorch=2.13.0") == 2
    err = capsys.readouterr().err
    assert "key 'pytorch_version' pins 2.12.1, 2.14.1; cannot tell which one 2.13.0 replaces" in err
    assert snapshot(ws_both) == before


def test_rocm_714s_triton_llvm_pin_is_completed_by_a_bump_where_github_answers(
    ws_both: Path, fake: FakeUpstream
) -> None:
    """7.14's Triton 3.8.0 is pinned by commit without its LLVM (not verified here). On a host that reaches GitHub,
    `rocmlock bump triton=3.8.0 --rev triton=<the commit>` reads that commit's cmake/llvm-hash.txt and hashes the
    LLVM archive, filling 7.14's position only (pytorch_version pins two series, so the commit is given)."""
    path = ws_both / "recipes" / "variants.yaml"
    before = load(path)
    rev, llvm = values(before, "triton_git_rev")[1], "c" * 40
    fake.add_project("triton", {"3.8.0": [fake.file("triton-3.8.0-cp312-linux_x86_64.whl", packagetype="bdist_wheel")]})
    fake.add(f"/raw/triton-lang/triton/{rev}/cmake/llvm-hash.txt", Reply(body=llvm.encode() + b"\n"))
    fake.add(f"/llvm/llvm-project/archive/{llvm}.tar.gz", Reply(body=b"llvm"))
    assert bump(ws_both, fake.url, "triton=3.8.0", "--rev", f"triton={rev}") == 0
    doc = load(path)
    assert values(doc, "triton_llvm_rev") == [values(before, "triton_llvm_rev")[0], llvm]
    assert values(doc, "triton_llvm_sha256") == [values(before, "triton_llvm_sha256")[0],
                                                 hashlib.sha256(b"llvm").hexdigest()]
    assert values(doc, "triton_git_rev") == values(before, "triton_git_rev")
