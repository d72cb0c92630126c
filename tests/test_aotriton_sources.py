"""AOTriton as hash-pinned sources of the pytorch recipe (issue 13, finding 5).

PyTorch's cmake/External/aotriton.cmake downloads AOTriton's runtime and per-arch kernel images at configure time;
the recipe pins the same files as rattler-build sources from tools/rocmlock/data/aotriton.toml, so the source cache
holds them and build.sh hands them to CMake as AOTRITON_INSTALLED_PREFIX. These tests render every shipped pytorch
variant, hold the table to gpu_targets.toml and to aotriton.cmake's image rule, check that `rocmlock sources` sees
the new sources, and run build.sh's AOTriton block against a PyTorch tree that does or does not name the pins.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import rattler_build as rb
from rocmlock.build import variantkeys
from rocmlock.build.plan import make_plan
from rocmlock.build.recipes import Matrix, load_matrix, render_config
from rocmlock.build.sources import plan_sources
from rocmlock.gpu.targets import all_targets
from rocmlock.workspace.manifest import load_workspace
from shipped import MANIFEST, RECIPES

AOT = tomllib.loads(resources.files("rocmlock").joinpath("data/aotriton.toml").read_text())
BASE = f"{AOT['base_url']}/{AOT['version']}"


def _sources(matrix: Matrix, gfx: str, rocm: str = "7.2") -> list[dict[str, Any]]:
    one = matrix.narrowed({"gpu_target": [gfx], "python": ["3.12"], "rocm_version": [rocm]})
    (rv,) = rb.Stage0Recipe.from_file(str(RECIPES / "pytorch-rocm/recipe.yaml")).render(
        one.to_variant_config(), render_config())
    return rv.recipe.to_dict()["source"]  # type: ignore[no-any-return]


def _cmake_image_for(gfx: str) -> str | None:
    """aotriton.cmake's choice for PYTORCH_ROCM_ARCH=gfx: `string(SUBSTRING ${image} 7 -1 gfx_pattern)`,
    `string(REPLACE "x" "." gfx_regex ...)`, `if(target MATCHES ${gfx_regex})` over __AOTRITON_IMAGE_LIST in order."""
    for image in AOT["images"]:
        if re.search(image[7:].replace("x", "."), gfx):
            return image
    return None


def test_every_pytorch_variant_pins_its_runtime_and_target_image(matrix: Matrix) -> None:
    for gfx in matrix.get("gpu_target"):
        for rocm in matrix.get("rocm_version"):
            sources = _sources(matrix, gfx, rocm)
            # Each ROCm's PyTorch (zipped with rocm_version): the release asset, or its tag's commit (7.14's 2.14.1).
            at = matrix.get("rocm_version").index(rocm)
            if matrix.get("pytorch_sha256")[at]:
                assert sources[0]["url"].endswith(f"pytorch-v{matrix.get('pytorch_version')[at]}.tar.gz")
            else:
                assert sources[0] == {"git": "https://github.com/pytorch/pytorch.git",
                                      "rev": matrix.get("pytorch_git_rev")[at]}
            if not all_targets()[gfx].aotriton:
                assert len(sources) == 1, f"{gfx} has no AOTriton kernels but pins {sources[1:]}"
                continue
            if rocm not in AOT["runtime"]:  # no prebuilt runtime for this ROCm (7.14): aotriton.cmake's own path
                assert len(sources) == 1, f"ROCm {rocm} has no prebuilt AOTriton runtime but pins {sources[1:]}"
                continue
            image = AOT["targets"][gfx]
            runtime, images = sources[1:]
            assert runtime == {
                "url": f"{BASE}/aotriton-{AOT['version']}-manylinux_2_28_x86_64-rocm{rocm}-shared.tar.gz",
                "sha256": AOT["runtime"][rocm], "target_directory": "aotriton/runtime"}
            assert images == {"url": f"{BASE}/aotriton-{AOT['version']}-images-{image}.tar.gz",
                              "sha256": AOT["images"][image], "target_directory": "aotriton/images"}
            for source in (runtime, images):
                assert re.fullmatch(r"[0-9a-f]{64}", source["sha256"]), source


def test_gfx1151_and_gfx1201_take_the_family_images(matrix: Matrix) -> None:
    assert _sources(matrix, "gfx1151")[2]["url"].endswith("-images-amd-gfx11xx.tar.gz")
    assert _sources(matrix, "gfx1201")[2]["url"].endswith("-images-amd-gfx120x.tar.gz")


def test_table_agrees_with_gpu_targets_and_the_cmake_rule() -> None:
    with_kernels = {gfx for gfx, t in all_targets().items() if t.aotriton}
    assert set(AOT["targets"]) == with_kernels
    for gfx, target in all_targets().items():
        assert AOT["targets"].get(gfx) == (_cmake_image_for(gfx) if target.aotriton else None), gfx
    assert set(AOT["targets"].values()) <= set(AOT["images"])


def test_table_is_for_the_pinned_pytorch_series() -> None:
    # The table belongs to one PyTorch series; moving pytorch_version out of it must bring the table along. Each ROCm
    # version pins its own PyTorch: the table's release goes with those whose runtime it pins (7.2: 2.12.1). ROCm
    # 7.14's PyTorch 2.14.1 gets no AOTriton pin (no runtime here, and 2.14's aotriton.cmake was not read), so its
    # build takes what that file names.
    matrix = load_matrix(RECIPES)
    pinned = dict(zip(matrix.get("rocm_version"), matrix.get("pytorch_version"), strict=True))
    runtime = dict(zip(matrix.get("rocm_version"), matrix.get("aotriton_runtime_sha256"), strict=True))
    assert any(runtime.values()) and not runtime["7.14"]
    for rocm, version in pinned.items():
        if runtime[rocm]:
            assert ".".join(version.split(".")[:2]) in AOT["pytorch"], (
                f"variants.yaml pins pytorch {version} for ROCm {rocm} but tools/rocmlock/data/aotriton.toml is for "
                f"{AOT['pytorch']}: take the AOTriton release and sha256s from that PyTorch's "
                "cmake/External/aotriton.cmake")


def test_a_rocm_without_a_prebuilt_runtime_pins_no_aotriton(matrix: Matrix, tmp_path: Path) -> None:
    # aotriton.cmake builds the runtime from git for a HIP version its list lacks; nothing to pin then.
    lines = (RECIPES / "variants.yaml").read_text().replace('rocm_version:\n  - "7.2"', 'rocm_version:\n  - "6.1"')
    (tmp_path / "variants.yaml").write_text(lines)
    _, _, regenerated = variantkeys.regenerate(tmp_path)  # what `rocmlock variants --write` writes
    (tmp_path / "variants.yaml").write_text(regenerated)
    assert '\naotriton_runtime_sha256:\n  - ""  # 6.1\n' in regenerated
    older = load_matrix(tmp_path)
    assert "6.1" not in AOT["runtime"]
    assert len(_sources(older, "gfx942", "6.1")) == 1


def test_a_prepared_prefix_overrides_the_pinned_sources(matrix: Matrix, monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:
    monkeypatch.setenv("AOTRITON_INSTALLED_PREFIX", str(tmp_path))
    assert len(_sources(matrix, "gfx942")) == 1


def test_rocmlock_sources_lists_the_aotriton_archives() -> None:
    # `rocmlock sources fetch|check` and `build --sources` take the rendered recipes' sources (sources.plan_sources).
    plan = make_plan(load_workspace(MANIFEST), ["mi300x", "w7900"], recipes_dir=RECIPES)
    pins = {(s.kind, s.url, s.pin) for s in plan_sources(plan, plan.to_build)}
    runtime = f"{BASE}/aotriton-{AOT['version']}-manylinux_2_28_x86_64-rocm7.2-shared.tar.gz"
    assert ("url", runtime, AOT["runtime"]["7.2"]) in pins
    for image in ("amd-gfx942", "amd-gfx11xx"):
        assert ("url", f"{BASE}/aotriton-{AOT['version']}-images-{image}.tar.gz", AOT["images"][image]) in pins
    assert not any("amd-gfx90a" in url for _, url, _ in pins)


# ----------------------------------------------------------------------------- build.sh's AOTriton block


def _block() -> str:
    build = (RECIPES / "pytorch-rocm/build.sh").read_text()
    start = build.index("rocmlock_aotriton_from_sources() {")
    end = build.index("\nfi\n", build.index('elif [ "${ROCMLOCK_AOTRITON}" = 1 ]; then')) + 4
    return ('rocmlock_die() { echo "$*" >&2; exit 1; }\n' + build[start:end]
            + 'echo "prefix=${AOTRITON_INSTALLED_PREFIX:-}"\n')


def _pytorch_tree(root: Path, cmake_text: str, image: str = "amd-gfx942") -> Path:
    (root / "cmake/External").mkdir(parents=True)
    (root / "cmake/External/aotriton.cmake").write_text(cmake_text)
    (root / "aotriton/runtime/lib").mkdir(parents=True)
    (root / "aotriton/runtime/lib/libaotriton_v2.so").write_text("")
    (root / f"aotriton/images/lib/aotriton.images/{image}").mkdir(parents=True)
    (root / f"aotriton/images/lib/aotriton.images/{image}/__signature__").write_text("")
    return root


def _run(cwd: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "ROCMLOCK_AOTRITON": "1", "PKG_VERSION": "2.12.1", "ROCMLOCK_GPU_TARGET": "gfx942",
           "ROCMLOCK_ROCM_VERSION": "7.2", "ROCMLOCK_AOTRITON_PINNED": "1", "ROCMLOCK_AOTRITON_VERSION": "0.11.2b",
           "ROCMLOCK_AOTRITON_IMAGE": "amd-gfx942",
           "ROCMLOCK_AOTRITON_SHA256S": f"{AOT['runtime']['7.2']} {AOT['images']['amd-gfx942']}", **extra}
    return subprocess.run(["bash", "-c", _block()], cwd=cwd, env=env, capture_output=True, text=True, check=False)


def _cmake(version: str, *shas: str) -> str:
    # The lines build.sh checks, as aotriton.cmake writes them (set(__AOTRITON_VER "..."), quoted sha256 lists).
    listed = "\n".join(f'      "{s}"  # entry' for s in shas)
    return f'  set(__AOTRITON_VER "{version}")\n  set(__AOTRITON_SHA256_LIST\n{listed}\n      )\n'


def test_build_joins_the_pinned_trees_when_pytorch_names_them(tmp_path: Path) -> None:
    tree = _pytorch_tree(tmp_path, _cmake("0.11.2b", AOT["runtime"]["7.2"], AOT["images"]["amd-gfx942"]))
    out = _run(tree)
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"prefix={tree / 'aotriton/runtime'}\n"
    assert (tree / "aotriton/runtime/lib/aotriton.images/amd-gfx942/__signature__").is_file()
    assert "from the pinned sources" in out.stderr


def test_build_stops_when_pytorch_names_another_release(tmp_path: Path) -> None:
    tree = _pytorch_tree(tmp_path, _cmake("0.12b", AOT["runtime"]["7.2"], AOT["images"]["amd-gfx942"]))
    out = _run(tree)
    assert out.returncode == 1
    assert 'does not set __AOTRITON_VER "0.11.2b"' in out.stderr and "aotriton.toml" in out.stderr


def test_build_stops_when_a_pinned_sha256_is_not_pytorchs(tmp_path: Path) -> None:
    tree = _pytorch_tree(tmp_path, _cmake("0.11.2b", AOT["runtime"]["7.2"]))
    out = _run(tree)
    assert out.returncode == 1 and f"does not list sha256 {AOT['images']['amd-gfx942']}" in out.stderr


def test_build_stops_when_the_image_tree_is_missing(tmp_path: Path) -> None:
    tree = _pytorch_tree(tmp_path, _cmake("0.11.2b", AOT["runtime"]["7.2"], AOT["images"]["amd-gfx942"]),
                         image="amd-gfx950")
    out = _run(tree)
    assert out.returncode == 1 and "no lib/aotriton.images/amd-gfx942" in out.stderr


def test_a_prepared_prefix_wins_over_the_pinned_sources(tmp_path: Path) -> None:
    prefix = tmp_path / "prepared"
    (prefix / "lib").mkdir(parents=True)
    (prefix / "lib/libaotriton_v2.so").write_text("")
    out = _run(tmp_path, AOTRITON_INSTALLED_PREFIX=str(prefix))  # no PyTorch tree: the pins are not looked at
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"prefix={prefix}\n"


def test_build_names_the_table_when_a_target_with_kernels_has_no_image(matrix: Matrix, tmp_path: Path) -> None:
    # rattler-build (or conda-build) run by hand on a variants.yaml whose gpu_aotriton_image for gfx942 was
    # emptied by hand (rocmlock plan refuses that copy first: tests/test_variant_keys.py): the recipe renders no
    # image, and build.sh says which key is wrong instead of blaming the ROCm for having no prebuilt runtime.
    shutil.copytree(RECIPES / "pytorch-rocm", tmp_path / "recipes/pytorch-rocm")
    one = matrix.narrowed({"gpu_target": ["gfx942"], "python": ["3.12"], "rocm_version": ["7.2"]})
    values = {k: list(v) for k, v in one.values}
    assert values["gpu_aotriton"] == ["1"] and values["gpu_aotriton_image"] == ["amd-gfx942"]
    values["gpu_aotriton_image"] = [""]
    config = rb.VariantConfig(values, zip_keys=[list(g) for g in one.zip_keys])
    (rv,) = rb.Stage0Recipe.from_file(str(tmp_path / "recipes/pytorch-rocm/recipe.yaml")).render(
        config, render_config())
    rendered = rv.recipe.to_dict()
    env = rendered["build"]["script"]["env"]
    assert len(rendered["source"]) == 1 and env["ROCMLOCK_AOTRITON"] == "1" and "ROCMLOCK_AOTRITON_IMAGE" not in env
    given = {k: env.get(k, "") for k in ("ROCMLOCK_AOTRITON_PINNED", "ROCMLOCK_AOTRITON_IMAGE",
                                         "ROCMLOCK_AOTRITON_SHA256S")}
    out = _run(tmp_path, **given)
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr == ("recipes/variants.yaml: gpu_aotriton_image is empty for gfx942, but gpu_aotriton = 1 "
                          "(AOTriton kernels): add the kernel image PyTorch 2.12.1's cmake/External/aotriton.cmake "
                          "picks for it to [targets] of tools/rocmlock/data/aotriton.toml (or set aotriton = false "
                          "in gpu_targets.toml), then run `rocmlock variants --write`; or export "
                          "AOTRITON_INSTALLED_PREFIX\n")
    # A ROCm without a prebuilt runtime (image known, nothing pinned) still downloads at configure time.
    out = _run(tmp_path, ROCMLOCK_AOTRITON_PINNED="", ROCMLOCK_AOTRITON_SHA256S="")
    assert out.returncode == 0 and "will be downloaded at configure time (no prebuilt runtime" in out.stderr
