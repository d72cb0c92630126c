"""The GPU facts as variant keys of recipes/variants.yaml (issue 24, item 1).

The recipes read no table with rattler-build's experimental ``load_from_file`` any more (conda-build cannot pass
``--experimental``); ``rocmlock variants --write`` writes the facts into variants.yaml, zipped with gpu_target /
rocm_version, and these tests hold that copy to the tables, so gpu_targets.toml and aotriton.toml stay the one
source. conda-build itself renders and builds the recipes in tests/test_conda_build.py.
"""

from __future__ import annotations

import re
import shutil
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from rocmlock.build import variantkeys
from rocmlock.cli.main import main
from shipped import RECIPES, ROOT

DATA = ROOT / "tools/rocmlock/data"


def _shipped() -> dict[str, list[str]]:
    return {k: [str(v) for v in vs] for k, vs in yaml.safe_load((RECIPES / "variants.yaml").read_text()).items()
            if k != "zip_keys"}


def test_the_shipped_keys_are_the_tables_read_independently() -> None:
    # Read the tables with tomllib here, not through rocmlock, so a bug in the generator cannot agree with itself.
    gpus = tomllib.loads((DATA / "gpu_targets.toml").read_text())
    aot = tomllib.loads((DATA / "aotriton.toml").read_text())
    shipped = _shipped()
    for i, gfx in enumerate(shipped["gpu_target"]):
        row = gpus[gfx]
        image = aot["targets"].get(gfx, "")
        assert shipped["gpu_isa"][i] == row["isa"]
        assert shipped["gpu_first_rocm"][i] == row["first_rocm"]
        assert shipped["gpu_flash_attn_backend"][i] == (
            "ck" if row["flash_attn_ck"] else "triton" if row["flash_attn_triton"] else "none")
        assert shipped["gpu_aotriton"][i] == ("1" if row["aotriton"] else "0")
        assert shipped["gpu_aotriton_image"][i] == image
        assert shipped["gpu_aotriton_image_sha256"][i] == aot["images"].get(image, "")
        assert shipped["gpu_bnb_first_rocm"][i] == row["bnb_first_rocm"]
        assert shipped["gpu_wavefront_size"][i] == str(row["wavefront_size"])
    assert shipped["aotriton_runtime_sha256"] == [aot["runtime"].get(r, "") for r in shipped["rocm_version"]]
    # aotriton_release, not _version: `rocmlock outdated` takes every *_version key for an upstream pin.
    assert shipped["aotriton_release"] == [aot["version"]]
    for key in ("base_url", "manylinux", "arch"):
        assert shipped[f"aotriton_{key}"] == [aot[key]]
    zips = yaml.safe_load((RECIPES / "variants.yaml").read_text())["zip_keys"]
    assert list(variantkeys.GPU_ZIP) in zips
    # rocm_version's group: its table keys, then the pins each ROCm version builds (issue 34).
    (rocm_group,) = [g for g in zips if g[0] == "rocm_version"]
    assert rocm_group[:len(variantkeys.ROCM_ZIP)] == list(variantkeys.ROCM_ZIP)
    assert {"pytorch_version", "pytorch_sha256", "pytorch_git_rev", "torchvision_version", "triton_git_rev"} <= set(
        rocm_group)


def test_the_shipped_file_is_what_the_command_writes(capsys: pytest.CaptureFixture[str]) -> None:
    _, text, new = variantkeys.regenerate(RECIPES)
    assert text == new
    assert main(["variants", "--check", "--recipes-dir", str(RECIPES)]) == 0
    assert main(["variants", "--recipes-dir", str(RECIPES)]) == 0
    assert capsys.readouterr().out == text


def test_no_recipe_needs_an_experimental_feature() -> None:
    for recipe in sorted(RECIPES.glob("*/recipe.yaml")):
        assert "load_from_file" not in recipe.read_text(), recipe
    for module in sorted((ROOT / "tools/rocmlock").rglob("*.py")):
        assert "experimental=True" not in module.read_text(), module


def test_no_line_is_a_conda_build_selector() -> None:
    # conda-build reads variants.yaml with its selector preprocessing (conda_build/metadata.py `sel_pat`, applied by
    # variants.parse_config_file): a line ending in "[...]" is a selector and is dropped when it evaluates false.
    # A zip group written `- [a, b]` vanished that way, and conda-build then multiplied the GPU keys out (8**9
    # combinations, tens of GB). Every line must read as plain YAML to it.
    sel_pat = re.compile(r"(.+?)\s*(#.*)?\[([^\[\]]+)\](?(2)[^\(\)]*)$")
    for n, line in enumerate((RECIPES / "variants.yaml").read_text().splitlines(), 1):
        assert not sel_pat.match(line), f"variants.yaml:{n}: {line}"


def _checkout(root: Path) -> Path:
    shutil.copytree(RECIPES, root / "recipes")
    shutil.copytree(DATA, root / "tools/rocmlock/data")
    (root / "pixi.toml").write_text((ROOT / "pixi.toml").read_text())
    return root / "tools/rocmlock/data/gpu_targets.toml"


def test_a_table_change_makes_the_copy_stale_until_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    table = _checkout(tmp_path)
    text = table.read_text()
    old = '[gfx942]\nisa = "9.4.2"\narchitecture = "cdna3"\nfamily = "gfx9"\nsub_family = "gfx9_4"\n'
    old += 'generic = "gfx9-4-generic"\nxnack = "supported"\nproducts = ["MI300A", "MI300X", "MI325X"]\nfirst_rocm = "6.0"'
    assert old in text
    table.write_text(text.replace(old, old.replace('first_rocm = "6.0"', 'first_rocm = "6.1"')))
    # gfx950 to gfx1201, in variants.yaml's gpu_target order.
    rest = "'7.0', '6.0', '6.1', '7.2', '7.2', '7.0', '7.14', '7.14', '6.4', '6.4'"
    variants = tmp_path / "recipes/variants.yaml"
    plan = ["plan", "--manifest-path", str(tmp_path / "pixi.toml"), "-e", "mi300x", "--json"]
    capsys.readouterr()
    assert main(plan) == 2
    out = capsys.readouterr()
    assert out.out == "" and "Traceback" not in out.err
    assert out.err.splitlines() == [
        (f"error: {variants}: key 'gpu_first_rocm' is ['5.0', '5.0', '6.0', {rest}], but the "
        f"tables in {table.parent} give ['5.0', '5.0', '6.1', {rest}]"),
        f"hint: {variantkeys.FIX}"]
    before = variants.read_text()
    assert main(["variants", "--check", "--manifest-path", str(tmp_path / "pixi.toml")]) == 1
    assert variants.read_text() == before  # --check writes nothing
    assert main(["variants", "--write", "--manifest-path", str(tmp_path / "pixi.toml")]) == 0
    assert variants.read_text() == before.replace('  - "6.0"  # gfx942', '  - "6.1"  # gfx942')
    assert main(["variants", "--check", "--manifest-path", str(tmp_path / "pixi.toml")]) == 0
    assert main(plan) == 0


def test_a_new_target_listed_without_a_row_names_the_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    table = _checkout(tmp_path)
    variants = tmp_path / "recipes/variants.yaml"
    variants.write_text(variants.read_text().replace("  - gfx1201\n", "  - gfx1201\n  - gfx1030\n", 1))
    capsys.readouterr()
    assert main(["variants", "--write", "--manifest-path", str(tmp_path / "pixi.toml")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {table}: no row for gpu_target 'gfx1030'\nhint: add a [gfx1030] table"), err
    assert "gfx1030" not in variants.read_text().split(variantkeys.BEGIN)[1]


@pytest.mark.parametrize(("edit", "says"), [
    # The documented "add a ROCm version" step, without its pins: rattler-build zips by position.
    (lambda t: t.replace('  - "7.14"\n', '  - "7.14"\n  - "7.1"\n', 1), "has 2 value(s) but 'rocm_version' has 3"),
    (lambda t: t.replace("zip_keys:\n", "zip_keys:\n  - [no_such_key, rocm_version]\n", 1), "names 'no_such_key'"),
    (lambda t: t + "\nzz: " + "[" * 5000 + "]" * 5000 + "\n", "cannot read"),
])
def test_a_zip_that_cannot_pair_is_one_line_for_variants_plan_and_check(
        edit: Callable[[str], str], says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`variants --write` and `--check` passed such a file and `plan`/`build` then ended in an IndexError or a
    KeyError traceback; a deep YAML was a RecursionError in `variants`."""
    _checkout(tmp_path)
    variants = tmp_path / "recipes/variants.yaml"
    variants.write_text(edit(variants.read_text()))
    capsys.readouterr()
    for argv in (["variants", "--check"], ["variants", "--write"], ["plan"]):
        assert main([*argv, "--manifest-path", str(tmp_path / "pixi.toml")]) == 2, argv
        err = capsys.readouterr().err
        assert says in err and "Traceback" not in err and err.startswith(f"error: {variants}: "), (argv, err)


def test_narrowing_to_an_unlisted_rocm_derives_its_keys() -> None:
    from rocmlock.build.recipes import load_matrix

    matrix = load_matrix(RECIPES).narrowed({"rocm_version": ["6.4", "7.2"], "gpu_target": ["gfx1100"]})
    aot = tomllib.loads((DATA / "aotriton.toml").read_text())
    assert matrix.get("aotriton_runtime_sha256") == (aot["runtime"]["6.4"], aot["runtime"]["7.2"])
    assert matrix.get("gpu_isa") == ("11.0.0",) and matrix.get("gpu_flash_attn_backend") == ("triton",)


def test_each_rocm_version_keeps_its_own_pins_when_narrowed() -> None:
    """Issue 34: 7.2 builds PyTorch 2.12.1 from its release asset, 7.14 PyTorch 2.14.1 from the full commit of
    its tag (no archive hash), each with its own Triton and torchvision; a ROCm not listed takes the pins of the
    listed one nearest below it (6.4: the lowest listed, 7.2; 10.0: 7.14)."""
    import rattler_build as rb
    from rocmlock.build.recipes import load_matrix, render_config

    matrix = load_matrix(RECIPES)
    for rocm, torch, vision, triton in (("7.2", "2.12.1", "0.27.1", "3.7.1"), ("7.14", "2.14.1", "0.29.1", "3.8.0"),
                                        ("6.4", "2.12.1", "0.27.1", "3.7.1"), ("10.0", "2.14.1", "0.29.1", "3.8.0")):
        one = matrix.narrowed({"rocm_version": [rocm], "gpu_target": ["gfx942"], "python": ["3.12"]})
        assert (one.get("pytorch_version"), one.get("torchvision_version"), one.get("triton_version")) == (
            (torch,), (vision,), (triton,)), rocm
        assert re.fullmatch(r"[0-9a-f]{40}", one.get("pytorch_git_rev")[0])
    both = matrix.narrowed({"rocm_version": ["7.14", "7.2"], "gpu_target": ["gfx942"], "python": ["3.12"]})
    assert both.get("pytorch_version") == ("2.14.1", "2.12.1")
    assert both.get("aotriton_runtime_sha256")[1] and not both.get("aotriton_runtime_sha256")[0]
    sources = {}
    for v in rb.Stage0Recipe.from_file(str(RECIPES / "pytorch-rocm/recipe.yaml")).render(
            both.to_variant_config(), render_config()):
        sources[v.variant["rocm_version"]] = v.recipe.to_dict()["source"]
    assert sources["7.2"][0]["url"].endswith("/pytorch-v2.12.1.tar.gz") and "git" not in sources["7.2"][0]
    assert sources["7.14"][0] == {"git": "https://github.com/pytorch/pytorch.git",
                                  "rev": "5c4886908584029761b579af026dcfb627c84070"}


def test_a_config_narrowed_to_one_target_builds_that_target(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # rattler-build's --variant cannot narrow a zipped key (gpu_target=gfx942 alone leaves its 8-long siblings: the
    # render fails), and conda-build has no --variant: `rocmlock variants --gpu-target` writes the -m file instead.
    import rattler_build as rb
    from rocmlock.build.recipes import render_config

    capsys.readouterr()
    assert main(["variants", "--recipes-dir", str(RECIPES), "--gpu-target", "gfx942", "--rocm-version", "6.4"]) == 0
    one = tmp_path / "gfx942.yaml"
    one.write_text(capsys.readouterr().out)
    config = rb.VariantConfig.from_file(str(one))
    (target,) = rb.Stage0Recipe.from_file(str(RECIPES / "amdgpu-target/recipe.yaml")).render(config, render_config())
    assert target.recipe.build.string == "gfx942"
    assert target.recipe.requirements.to_dict()["run_constraints"] == ["__amdgpu_arch ==9.4.2"]
    torch = rb.Stage0Recipe.from_file(str(RECIPES / "pytorch-rocm/recipe.yaml")).render(config, render_config())
    aot = tomllib.loads((DATA / "aotriton.toml").read_text())
    assert sorted(v.variant["python"] for v in torch) == ["3.11", "3.12", "3.13"]
    for v in torch:
        assert v.recipe.build.string.startswith("rocm64_gfx942_py")
        assert v.recipe.to_dict()["source"][1]["sha256"] == aot["runtime"]["6.4"]


def test_a_config_with_none_of_the_keys_gets_them_from_the_tables(tmp_path: Path) -> None:
    # A team's own recipes dir with a minimal variants.yaml: rocmlock computes the keys (and their zip groups),
    # as it does when it narrows; only a copy that has them must equal the tables.
    from rocmlock.build.recipes import load_matrix

    (tmp_path / "variants.yaml").write_text('rocm_version: ["7.2"]\ngpu_target: [gfx90a, gfx1100]\npython: ["3.12"]\n')
    matrix = load_matrix(tmp_path)
    assert matrix.get("gpu_isa") == ("9.0.10", "11.0.0")
    assert matrix.get("gpu_wavefront_size") == ("64", "32")
    assert variantkeys.GPU_ZIP in matrix.zip_keys and variantkeys.ROCM_ZIP in matrix.zip_keys


@pytest.mark.parametrize(("args", "message"), [
    (["--gpu-target", "gfx942", "--rocm-version", "7.2\nx: 1"],
     "error: rocm_version '7.2\\nx: 1' is not a ROCm major.minor version"),
    (["--gpu-target", "gfx1030"], f"error: {DATA / 'gpu_targets.toml'}: no row for gpu_target 'gfx1030'"),
    (["--gpu-target", "gfx942", "--write"], "error: --gpu-target/--rocm-version print a narrowed config"),
])
def test_bad_variants_arguments_are_one_line_and_print_nothing(args: list[str], message: str,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    before = (RECIPES / "variants.yaml").read_text()
    capsys.readouterr()
    assert main(["variants", "--recipes-dir", str(RECIPES), *args]) == 2
    out = capsys.readouterr()
    assert out.out == "" and "Traceback" not in out.err
    assert out.err.splitlines()[0].startswith(message), out.err
    assert len(out.err.splitlines()) <= 2
    assert (RECIPES / "variants.yaml").read_text() == before


def test_a_merge_that_left_a_second_block_or_key_is_refused(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 33 item 17: `--write` rewrites the first generated block, while PyYAML, rattler-build and conda-build
    take a key's last value: a stale second block (or a key given twice) passed `--check` and was built from."""
    _checkout(tmp_path)
    variants = tmp_path / "recipes/variants.yaml"
    text = variants.read_text()
    block = text[text.index(variantkeys.BEGIN):text.index(variantkeys.END) + len(variantkeys.END) + 1]
    stale = block.replace('  - "6.0"  # gfx942', '  - "6.1"  # gfx942')
    manifest = ["--manifest-path", str(tmp_path / "pixi.toml")]
    begin, end = text[:text.index(variantkeys.BEGIN)].count("\n") + 1, text.count("\n") + 1
    two_blocks = (f"{variants}: the generated block's line '{variantkeys.BEGIN[:40]}...' is there 2 times "
                  f"(lines {begin}, {end}): a merge left two blocks")
    python_line = text.splitlines().index("python:") + 1
    two_keys = (f"{variants}: key 'python' at line {end} is there already (line {python_line}); YAML readers take "
                "the last one silently")
    for doubled, first in ((text + stale, two_blocks), (text + 'python: ["3.11"]\n', two_keys)):
        variants.write_text(doubled)
        for mode in ("--check", "--write"):
            assert main(["variants", mode, *manifest]) == 2
            out, err = capsys.readouterr()
            assert out == "" and err.splitlines()[0] == f"error: {first}", err
            assert len(err.splitlines()) == 2 and variants.read_text() == doubled
    variants.write_text(text)
    assert main(["variants", "--check", *manifest]) == 0
