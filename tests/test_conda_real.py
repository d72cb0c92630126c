"""conda-build builds the recipes and real conda installs every export (issue 24, item 3).

Everything here runs the real tools from tests/conda_tools.py's venvs (conda 26.7.1 + conda-build 26.7.1 +
conda-index 0.12.1 + conda-lock 4.0.3, and conda 24.11.3), offline, against channels the tests make:

- ``conda-render`` of every recipe with recipes/variants.yaml gives the variants ``rocmlock plan`` renders;
- ``conda-build`` of the noarch recipes (amdgpu-target for every target, rocm-version, rocm-env-check) into a
  channel indexed by conda-index: the packages equal rocmlock's own build of the same variants, and
  ``rocmlock lock`` locks the offline example (examples/offline) from that channel to the same pins;
- conda 26.7.1 and 24.11.3 install every export of that lock (environment.yml, the ``@EXPLICIT`` files, a bundle's
  environment.yml with its documented offline command), and the installed ``conda-meta`` is the lock;
- conda-lock 4.0.3 locks an exported environment.yml with conda 26.7.1 to the same pins, and installs the exported
  conda-lock.yml; conda-lockfiles 0.2.2 has conda 26.7.1 create it (`conda env create -f conda-lock.yml`).

Without the mirrors (../shared/mirrors or ROCMLOCK_MIRRORS) these tests fail under CI=true and skip elsewhere.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from ciskips import in_ci
from conda_tools import Conda, CondaUnavailable, ensure_venv
from rocmlock.build.recipes import load_matrix, render_recipe
from rocmlock.cli.main import main
from rocmlock.lock.lockfile import read_lockfile
from shipped import RECIPES, ROOT

EXAMPLE = ROOT / "examples/offline"
VARIANTS = RECIPES / "variants.yaml"
NOARCH = ("amdgpu-target", "rocm-version", "rocm-env-check")
PLATFORMS = {"mi250": "linux-64-gfx90a", "mi300x": "linux-64-gfx942"}
# Every export `rocmlock lock` writes for the example: environment.yml (for the first platform) and one @EXPLICIT
# file per platform of each environment; default has no GPU feature, so both platforms.
EXPORTS = {"default": ("linux-64-gfx90a", "linux-64-gfx942"), "mi250": ("linux-64-gfx90a",),
           "mi300x": ("linux-64-gfx942",)}
EXPLICIT = [(env, platform) for env, platforms in sorted(EXPORTS.items()) for platform in platforms]
# conda adds `pip` to python's dependencies unless told not to (conda/core/subdir_data.py,
# add_pip_as_python_dependency); the example's python (a host shim) has no pip beside it. The export's header
# says to set this; the tests run the command it gives.
NO_PIP = {"CONDA_ADD_PIP_AS_PYTHON_DEPENDENCY": "false"}


def _conda(name: str, home: Path) -> Conda:
    try:
        return Conda(ensure_venv(name), home, name)
    except CondaUnavailable as exc:
        if in_ci():
            pytest.fail(f"CI must run real conda (tests/conda_tools.py): {exc}")
        pytest.skip(f"no conda venv here: {exc}")


@pytest.fixture(scope="module")
def conda26(tmp_path_factory: pytest.TempPathFactory) -> Conda:
    return _conda("conda26", tmp_path_factory.mktemp("conda26"))


@pytest.fixture(scope="module", params=["conda26", "conda24"])
def conda(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Conda:
    return _conda(request.param, tmp_path_factory.mktemp(request.param))


def _ok(proc: Any, what: str) -> str:
    assert proc.returncode == 0, f"{what} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return str(proc.stdout)


# ----------------------------------------------------------------------------- conda-render


@pytest.mark.parametrize("recipe", sorted(p.parent.name for p in RECIPES.glob("*/recipe.yaml")))
def test_conda_render_gives_the_variants_rocmlock_renders(conda26: Conda, recipe: str) -> None:
    out = _ok(conda26.run("conda-render", str(RECIPES / recipe), "-m", str(VARIANTS)), f"conda-render {recipe}")
    # conda-build prints each rendered variant as its own YAML document with no `---` between them
    # (conda_build/_rattler_build/compat.py, process_recipe); each starts with schema_version.
    docs = [yaml.safe_load(d) for d in re.split(r"(?m)^(?=schema_version: )", out) if d.strip()]
    got = sorted((d["package"]["name"], str(d["package"]["version"]), d["build"]["string"],
                  tuple(d.get("requirements", {}).get("run_constraints", []))) for d in docs)
    ours = render_recipe(RECIPES / recipe / "recipe.yaml", load_matrix(RECIPES))
    assert got == sorted((v.package, v.version, v.build_string, v.run_constraints) for v in ours)
    assert len(got) == len(set(got)), "conda-build rendered a variant twice (zip_keys not applied)"
    # Where the recipe varies by ROCm, both ROCm versions of the matrix, 7.2 and 7.14: conda-render gave them too.
    rocms = {v.variant_value("rocm_version") for v in ours} - {None}
    assert rocms in (set(), {"7.2", "7.14"}), rocms
    if recipe == "pytorch-rocm":  # issue 34: each ROCm version its own PyTorch; 2.14.1 by the commit of its tag
        assert {(d["build"]["string"].split("_")[0], str(d["package"]["version"])) for d in docs} == {
            ("rocm72", "2.12.1"), ("rocm714", "2.14.1")}
        for d in docs:
            first = d["source"][0]
            assert ("git" in first) == d["build"]["string"].startswith("rocm714_"), first
            assert first.get("rev", "5c4886908584029761b579af026dcfb627c84070") == (
                "5c4886908584029761b579af026dcfb627c84070")


def test_conda_render_takes_a_config_narrowed_to_one_target(conda26: Conda, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    # conda-build has no --variant: `rocmlock variants --gpu-target` writes the -m file for one target.
    capsys.readouterr()
    assert main(["variants", "--recipes-dir", str(RECIPES), "--gpu-target", "gfx1100"]) == 0
    (tmp_path / "gfx1100.yaml").write_text(capsys.readouterr().out)
    out = _ok(conda26.run("conda-render", str(RECIPES / "flash-attn-rocm"), "-m", str(tmp_path / "gfx1100.yaml")),
              "conda-render flash-attn-rocm")
    docs = [yaml.safe_load(d) for d in re.split(r"(?m)^(?=schema_version: )", out) if d.strip()]
    # Both ROCm versions of the matrix (7.2 and 7.14), every python.
    assert sorted(d["build"]["string"].split("_h")[0] for d in docs) == sorted(
        f"rocm{rocm}_gfx1100_py{py}" for rocm in ("72", "714") for py in ("311", "312", "313"))
    assert {d["build"]["script"]["env"]["ROCMLOCK_FLASH_ATTN_BACKEND"] for d in docs} == {"triton"}


def test_conda_build_builds_a_variant_the_recipe_skips(conda26: Conda, tmp_path: Path) -> None:
    # What the README says differs from `rocmlock build`: conda-build 26.7.1 hands each rendered variant to
    # py-rattler-build's run_build (conda_build/_rattler_build/compat.py, process_recipe), and neither render() nor
    # run_build() applies build.skip, so a skipped variant is built. When this fails, conda-build skips: update
    # the README ("Building with conda-build").
    recipe = tmp_path / "skips"
    recipe.mkdir()
    (recipe / "recipe.yaml").write_text(
        'schema_version: 1\ncontext:\n  skip_reason: ${{ "no backend" if gpu_target == "gfx908" else "" }}\n'
        'package:\n  name: skips\n  version: "1"\nbuild:\n  noarch: generic\n  string: ${{ gpu_target }}\n'
        '  skip:\n    - skip_reason\n')
    (tmp_path / "two.yaml").write_text("gpu_target:\n  - gfx908\n  - gfx942\n")
    _ok(conda26.run("conda-build", str(recipe), "-m", str(tmp_path / "two.yaml"), "--output-folder",
                    str(tmp_path / "out"), "--no-test", "--override-channels", "-c", (tmp_path / "none").as_uri()),
        "conda-build")
    assert sorted(p.name for p in (tmp_path / "out/noarch").glob("*.conda")) == [
        "skips-1-gfx908.conda", "skips-1-gfx942.conda"]


# ----------------------------------------------------------------------------- conda-build, then rocmlock lock


@dataclass(frozen=True)
class Example:
    """The offline example built twice (conda-build, rocmlock build) and locked from each channel."""

    conda_build: Path  # conda-build's output folder, indexed by conda-index: a channel
    rocmlock_build: Path  # rocmlock build's output channel
    workspace: Path  # the example locked from the conda-build channel
    rocmlock_workspace: Path  # the same, locked from rocmlock's channel


def _python_shim(channel: Path) -> None:
    """The example channel's host-python package, as the quickstart makes it (examples/offline/quickstart.py)."""
    spec = importlib.util.spec_from_file_location("quickstart", EXAMPLE / "quickstart.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.python_shim(channel)


def _lock(workspace: Path, channel: Path) -> Path:
    workspace.mkdir(parents=True)
    text = (EXAMPLE / "pixi.toml").read_text()
    assert '"http://127.0.0.1:8000/rocmlock-example"' in text
    (workspace / "pixi.toml").write_text(text.replace('"http://127.0.0.1:8000/rocmlock-example"',
                                                      f'"{channel.as_uri()}"'))
    assert main(["lock", "--manifest-path", str(workspace / "pixi.toml")]) == 0
    return workspace


@pytest.fixture(scope="module")
def example(conda26: Conda, tmp_path_factory: pytest.TempPathFactory) -> Example:
    root = tmp_path_factory.mktemp("example")
    cb, rb_out = root / "conda-build", root / "rocmlock-build"
    _ok(conda26.run("conda-build", *(str(RECIPES / r) for r in NOARCH), "-m", str(VARIANTS),
                    "--output-folder", str(cb), "--no-test", "--override-channels", "-c", (root / "none").as_uri()),
        "conda-build")
    _python_shim(cb)
    _ok(conda26.run("python", "-m", "conda_index", str(cb)), "python -m conda_index")
    assert main(["build", "--manifest-path", str(EXAMPLE / "pixi.toml"), "--recipes-dir", str(RECIPES),
                 "--output", str(rb_out), "--skip-doctor"]) == 0
    _python_shim(rb_out)
    assert main(["publish", "--from", str(rb_out), "--to", str(root / "rocmlock-channel")]) == 0
    return Example(cb, root / "rocmlock-channel", _lock(root / "ws", cb),
                   _lock(root / "ws-rocmlock", root / "rocmlock-channel"))


def _repodata(channel: Path) -> dict[str, dict[str, Any]]:
    data = json.loads((channel / "noarch/repodata.json").read_text())
    return {**data.get("packages", {}), **data.get("packages.conda", {})}


FIELDS = ("name", "version", "build", "build_number", "depends", "constrains", "noarch", "subdir", "license")


def test_conda_build_makes_every_target_as_the_recipes_render(example: Example) -> None:
    built = _repodata(example.conda_build)
    matrix = load_matrix(RECIPES)
    for recipe in NOARCH:
        for v in render_recipe(RECIPES / recipe / "recipe.yaml", matrix):
            record = built[f"{v.package}-{v.version}-{v.build_string}.conda"]
            assert record.get("constrains", []) == list(v.run_constraints)
    targets = {r["build"] for r in built.values() if r["name"] == "amdgpu-target"}
    assert targets == set(matrix.get("gpu_target"))


def test_conda_build_and_rocmlock_build_make_the_same_packages(example: Example) -> None:
    ours, theirs = _repodata(example.rocmlock_build), _repodata(example.conda_build)
    # rocmlock builds what the example's environments need (two targets, ROCm 7.2); conda-build every target and
    # every ROCm version of the matrix (7.2 and 7.14).
    assert {f for f in ours if not f.startswith("python-")} == {
        "amdgpu-target-1-gfx90a.conda", "amdgpu-target-1-gfx942.conda",
        *(f for f in theirs if f.startswith(("rocm-version-7.2-", "rocm-env-check-")))}
    assert {theirs[f]["version"] for f in theirs if f.startswith("rocm-version-")} == {"7.2", "7.14"}
    for filename, record in ours.items():
        assert {k: record.get(k) for k in FIELDS} == {k: theirs[filename].get(k) for k in FIELDS}, filename


def _pins(workspace: Path, env: str, platform: str) -> dict[str, tuple[str, str]]:
    return {name: pin[:2] for name, pin in _locked(workspace, env, platform).items()}


def test_rocmlock_locks_from_the_conda_build_channel(example: Example) -> None:
    for env, platform in EXPLICIT:
        pins = _pins(example.workspace, env, platform)
        assert pins == _pins(example.rocmlock_workspace, env, platform)
        gpu = {"amdgpu-target"} if env in PLATFORMS else set()
        assert set(pins) == {*gpu, "python", "rocm-env-check", "rocm-version"}
        if gpu:
            assert pins["amdgpu-target"] == ("1", platform.rsplit("-", 1)[1])
    written = {p.relative_to(example.workspace / "envs").as_posix()
               for p in (example.workspace / "envs").rglob("*") if p.is_file()}
    assert written == {f"{env}/{name}" for env in EXPORTS for name in ("environment.yml", "conda-lock.yml")} | {
        f"{env}/conda-{platform}.lock" for env, platform in EXPLICIT}


# ----------------------------------------------------------------------------- conda installs the exports


def _installed(prefix: Path) -> dict[str, tuple[str, str, str]]:
    """conda-meta of ``prefix``: name -> (version, build, sha256)."""
    out = {}
    for meta in (prefix / "conda-meta").glob("*.json"):
        record = json.loads(meta.read_text())
        out[record["name"]] = (record["version"], record["build"], record["sha256"])
    return out


def _locked(workspace: Path, env: str, platform: str | None = None) -> dict[str, tuple[str, str, str]]:
    """The lock's records of ``env`` on ``platform`` (default: its first, environment.yml's): name -> (version,
    build, sha256)."""
    locked = read_lockfile(workspace / "pixi.lock")
    assert locked is not None
    return {r.name.normalized: (str(r.version), str(r.build), r.sha256.hex() if r.sha256 else "")
            for r in locked.environments[env].records[platform or EXPORTS[env][0]]}


@pytest.mark.parametrize("env", sorted(EXPORTS))
def test_conda_env_create_installs_the_environment_yml(example: Example, conda: Conda, env: str,
                                                       tmp_path: Path) -> None:
    # conda 24.11 also reads the `defaults` an empty .condarc stands for, which CI cannot reach ("Checked against":
    # it fails there); --offline keeps it out and still reads file:// channels. conda 26.7 needs neither.
    prefix = tmp_path / "env"
    offline = ["--offline"] if conda.name == "conda24" else []
    _ok(conda.run("conda", "env", "create", "-f", str(example.workspace / "envs" / env / "environment.yml"),
                  "-p", str(prefix), *offline, **NO_PIP), "conda env create")
    assert _installed(prefix) == _locked(example.workspace, env)


def test_conda_26_creates_from_environment_yml_with_override_channels(example: Example, conda26: Conda,
                                                                     tmp_path: Path) -> None:
    # The header's other command (conda 26.7+): the file's channels only, no .condarc ones.
    prefix = tmp_path / "env"
    _ok(conda26.run("conda", "create", "-p", str(prefix), "--file",
                    str(example.workspace / "envs/mi300x/environment.yml"), "--override-channels",
                    "-c", example.conda_build.as_uri(), **NO_PIP), "conda create --file environment.yml")
    assert _installed(prefix) == _locked(example.workspace, "mi300x")


@pytest.mark.parametrize(("env", "platform"), EXPLICIT)
def test_conda_create_installs_the_explicit_file(example: Example, conda: Conda, env: str, platform: str,
                                                 tmp_path: Path) -> None:
    # Neither setting is needed: an @EXPLICIT file reads no channel and runs no solver (conda 24.9+).
    prefix = tmp_path / "env"
    explicit = example.workspace / "envs" / env / f"conda-{platform}.lock"
    _ok(conda.run("conda", "create", "-p", str(prefix), "--file", str(explicit)), "conda create --file")
    assert _installed(prefix) == _locked(example.workspace, env, platform)


def test_the_bundles_documented_offline_command_installs_it(example: Example, conda: Conda, tmp_path: Path) -> None:
    bundle = tmp_path / "mi300x.tar"
    assert main(["pack", "--manifest-path", str(example.workspace / "pixi.toml"), "-e", "mi300x",
                 "-o", str(bundle)]) == 0
    extracted = tmp_path / "bundle"
    with tarfile.open(bundle) as tar:
        tar.extractall(extracted, filter="data")
    header = (extracted / "environment.yml").read_text()
    assert "conda env create -p ./env -f environment.yml --offline" in header
    assert "CONDA_ADD_PIP_AS_PYTHON_DEPENDENCY=false" in header
    _ok(conda.run("conda", "env", "create", "-p", "./env", "-f", "environment.yml", "--offline", cwd=extracted,
                  **NO_PIP), "the bundle's conda env create")
    assert _installed(extracted / "env") == _locked(example.workspace, "mi300x")
    shutil.rmtree(extracted)


# ----------------------------------------------------------------------------- conda-lock


def test_conda_lock_locks_an_exported_environment_yml_to_the_same_pins(example: Example, conda26: Conda,
                                                                       tmp_path: Path) -> None:
    # conda-lock 4.0.3 runs the conda it is given (`--conda`) for `create --dry-run --json`; the venv's `conda`
    # script is conda.cli.main_pip (see Conda.run), so it gets a two-line wrapper running `python -m conda`.
    wrapper = tmp_path / "conda"
    wrapper.write_text(f'#!/bin/sh\nexec "{conda26.bin / "python"}" -m conda "$@"\n')
    wrapper.chmod(0o755)
    out = tmp_path / "conda-lock.yml"
    _ok(conda26.run("conda-lock", "lock", "-f", str(example.workspace / "envs/mi300x/environment.yml"),
                    "-p", "linux-64", "--conda", str(wrapper), "--lockfile", str(out), cwd=tmp_path, **NO_PIP),
        "conda-lock lock")
    packages = yaml.safe_load(out.read_text())["package"]
    got = {}
    for p in packages:
        filename = p["url"].rsplit("/", 1)[1]
        build = filename.removesuffix(".conda").removeprefix(f"{p['name']}-{p['version']}-")
        assert p["url"] == f"{example.conda_build.as_uri()}/noarch/{filename}"
        got[p["name"]] = (str(p["version"]), build, p["hash"]["sha256"])
    assert got == _locked(example.workspace, "mi300x")


@pytest.mark.parametrize("env", sorted(EXPORTS))
def test_conda_lock_installs_the_exported_conda_lock_yml(example: Example, conda26: Conda, env: str,
                                                         tmp_path: Path) -> None:
    # envs/<env>/conda-lock.yml (issue 36): conda-lock 4.0.3 parses it with its strict v1 models, renders the
    # linux-64 solution to an explicit file and has conda create exactly the locked packages.
    wrapper = tmp_path / "conda"
    wrapper.write_text(f'#!/bin/sh\nexec "{conda26.bin / "python"}" -m conda "$@"\n')
    wrapper.chmod(0o755)
    lockfile = example.workspace / "envs" / env / "conda-lock.yml"
    meta = yaml.safe_load(lockfile.read_text())["metadata"]
    assert meta["platforms"] == ["linux-64"]
    assert meta["custom_metadata"].get("amdgpu-target") == {"mi250": "gfx90a", "mi300x": "gfx942"}.get(env)
    assert meta["custom_metadata"]["rocmlock-platforms.linux-64"] == ", ".join(EXPORTS[env])
    prefix = tmp_path / "env"
    _ok(conda26.run("conda-lock", "install", "--conda", str(wrapper), "-p", str(prefix), str(lockfile),
                    cwd=tmp_path, **NO_PIP), "conda-lock install")
    assert _installed(prefix) == _locked(example.workspace, env)


@pytest.mark.parametrize("env", sorted(EXPORTS))
def test_conda_env_create_installs_the_conda_lock_yml_with_conda_lockfiles(example: Example, conda26: Conda, env: str,
                                                                          tmp_path: Path) -> None:
    # conda-lockfiles 0.2.2 (conda's plugin for lock files, in the conda26 venv) reads conda-lock.yml for
    # `conda env create -f`; it refuses a custom_metadata without `created_by` ("missing required field").
    prefix = tmp_path / "env"
    _ok(conda26.run("conda", "env", "create", "-p", str(prefix), "-f",
                    str(example.workspace / "envs" / env / "conda-lock.yml"), **NO_PIP),
        "conda env create -f conda-lock.yml")
    assert _installed(prefix) == _locked(example.workspace, env)
