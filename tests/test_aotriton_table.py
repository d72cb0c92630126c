"""tools/rocmlock/data/aotriton.toml validated before the pytorch recipe renders from it (rocmlock.build.aotriton).

Without it, a wrong type or a bad sha256 there was a render error naming the recipe ("Invalid SHA256 checksum",
"undefined value"), and a target gpu_targets.toml gives AOTriton kernels but [targets] lacks rendered with no
AOTriton pinned, build.sh then blaming the ROCm ("no prebuilt runtime pinned"). Each test writes a copy of the
shipped table with one thing wrong, as tests/test_pins.py does, and reads it through the real loader; the plan tests
render a checkout-shaped copy (recipes/ beside tools/rocmlock/data/, as tests/test_plan.py's mirror) whose table is
broken, through `rocmlock plan`.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

import pytest
from rocmlock.build import aotriton, variantkeys
from rocmlock.cli.main import main
from rocmlock.errors import InputError
from rocmlock.gpu.targets import all_targets
from rocmlock.util.toml import tomllib
from shipped import RECIPES, ROOT
from tomlwrite import changed, write_toml

DATA = ROOT / "tools/rocmlock/data"
SHIPPED = tomllib.loads((DATA / "aotriton.toml").read_text())


def _changed(tmp_path: Path, key: tuple[str | int, ...], value: Any) -> Path:
    """A copy of the shipped table with ``key`` (a path into it) set to ``value``, or deleted when value is ...."""
    return write_toml(tmp_path / "aotriton.toml", changed(SHIPPED, key, value))


def _refused(path: Path) -> InputError:
    with pytest.raises(InputError) as exc:
        aotriton.read_table(path)
    assert "\n" not in str(exc.value) and str(exc.value).startswith(f"{path}: "), str(exc.value)
    return exc.value


def test_the_shipped_table_and_a_rewritten_copy_load(tmp_path: Path) -> None:
    table = aotriton.read_table(DATA / "aotriton.toml")
    assert table.version == SHIPPED["version"] and dict(table.runtime) == SHIPPED["runtime"]
    assert [image for image, _ in table.images] == list(SHIPPED["images"])  # aotriton.cmake's order is kept
    assert table.image_for("gfx1151") == "amd-gfx11xx" and table.image_for("gfx908") is None
    rewritten = aotriton.read_table(write_toml(tmp_path / "aotriton.toml", SHIPPED))  # the writer the tests use
    assert dataclasses.replace(rewritten, path=table.path) == table


# Every key, and one entry of each list and table, given values of each wrong type.
WRONG_TYPES = [
    (("pytorch",), "2.12", "must be a non-empty list of the PyTorch series", "got str"),
    (("pytorch",), {"a": "2.12"}, "must be a non-empty list", "got dict"),
    (("pytorch",), 2.12, "must be a non-empty list", "got float"),
    (("pytorch", 0), 2.12, "must be a major.minor string", "got float"),
    (("pytorch", 0), ["2.12"], "must be a major.minor string", "got list"),
    (("version",), 3, "must be the AOTriton release (__AOTRITON_VER)", "got int"),
    (("version",), ["0.11.2b"], "must be the AOTriton release", "got list"),
    (("version",), True, "must be the AOTriton release", "got bool"),
    (("base_url",), 7, "must be an https URL without a trailing slash", "got int"),
    (("base_url",), {"url": "https://x"}, "must be an https URL", "got dict"),
    (("manylinux",), 228, "must be the runtime's manylinux tag", "got int"),
    (("manylinux",), ["manylinux_2_28"], "must be the runtime's manylinux tag", "got list"),
    (("arch",), 64, "must be the runtime's CPU architecture", "got int"),
    (("arch",), False, "must be the runtime's CPU architecture", "got bool"),
    (("runtime",), "7.2", "must be a table of a sha256 strings", "got str"),
    (("runtime",), [SHIPPED["runtime"]["7.2"]], "must be a table", "got list"),
    (("runtime", "7.2"), 1, "must be a sha256 string", "got int"),
    (("runtime", "7.2"), [SHIPPED["runtime"]["7.2"]], "must be a sha256 string", "got list"),
    (("runtime", "7.2"), {"sha256": SHIPPED["runtime"]["7.2"]}, "must be a sha256 string", "got dict"),
    (("images",), 5, "must be a table of a sha256 strings", "got int"),
    (("images", "amd-gfx942"), 942, "must be a sha256 string", "got int"),
    (("images", "amd-gfx942"), True, "must be a sha256 string", "got bool"),
    (("targets",), ["amd-gfx942"], "must be a table of a kernel image names", "got list"),
    (("targets", "gfx942"), 942, "must be a kernel image name", "got int"),
    (("targets", "gfx942"), ["amd-gfx942"], "must be a kernel image name", "got list"),
    (("pytorch_releases",), ["0.12b"], "must be a table of an AOTriton release strings", "got list"),
    (("pytorch_releases", "2.13"), 13, "must be an AOTriton release string", "got int"),
]


@pytest.mark.parametrize(("key", "value", "message", "got"), WRONG_TYPES,
                         ids=[f"{'.'.join(map(str, k))}={type(v).__name__}" for k, v, _, _ in WRONG_TYPES])
def test_every_key_of_a_wrong_type_is_named(tmp_path: Path, key: tuple[str | int, ...], value: Any, message: str,
                                            got: str) -> None:
    shown = {("pytorch", 0): "pytorch[0]", ("runtime", "7.2"): 'runtime."7.2"',
             ("pytorch_releases", "2.13"): 'pytorch_releases."2.13"'}.get(key, ".".join(map(str, key)))
    error = _refused(_changed(tmp_path, key, value))
    assert str(error).startswith(f"{tmp_path}/aotriton.toml: key '{shown}' {message}"), str(error)
    assert str(error).endswith(got), str(error)


@pytest.mark.parametrize("key", aotriton.KEYS)
def test_every_missing_key_is_named(tmp_path: Path, key: str) -> None:
    error = _refused(_changed(tmp_path, (key,), ...))
    assert str(error) == f"{tmp_path}/aotriton.toml: key '{key}' is missing"
    assert error.hint and "aotriton.cmake" in error.hint


BAD_VALUES = [
    (("pytorch",), [], "key 'pytorch' must be a non-empty list", "got an empty list"),
    (("pytorch", 0), "2.12.1", "key 'pytorch[0]' must be a major.minor string", "got '2.12.1'"),
    (("version",), "0.11 2b", "key 'version' must be the AOTriton release", "got '0.11 2b'"),
    (("base_url",), "http://github.com/x", "key 'base_url' must be an https URL", "got 'http://github.com/x'"),
    (("base_url",), "https://github.com/x/", "key 'base_url' must be an https URL without a trailing slash", "/x/'"),
    (("manylinux",), "manylinux2014", "key 'manylinux' must be the runtime's manylinux tag", "'manylinux2014'"),
    (("runtime", "7.2"), SHIPPED["runtime"]["7.2"].upper(), "key 'runtime.\"7.2\"' must be a sha256 (64 lowercase",
     "'"),
    (("runtime", "7.2"), SHIPPED["runtime"]["7.2"][:-1], "key 'runtime.\"7.2\"' must be a sha256", "'"),
    (("images", "amd-gfx942"), "sha256:" + SHIPPED["images"]["amd-gfx942"], "key 'images.amd-gfx942' must be a sha256",
     "'"),
    (("runtime", "7"), SHIPPED["runtime"]["7.2"], "key 'runtime.7' is not a ROCm major.minor version", "version"),
    (("images", "gfx942"), SHIPPED["images"]["amd-gfx942"], "key 'images.gfx942' is not a kernel image name", "name"),
    (("targets", "mi300x"), "amd-gfx942", "key 'targets.mi300x' is not a gfx target name", "name"),
    (("surprise",), 1, "key 'surprise' is not one aotriton.toml takes", "takes"),
    (("pytorch_releases", "2.12"), "0.12b", ("key 'pytorch_releases.\"2.12\"' must be \"0.11.2b\": series 2.12 is "
     "listed in 'pytorch' for this release"), "release"),
    (("pytorch_releases", "2.12"), ..., "key 'pytorch_releases.\"2.12\"' must be \"0.11.2b\"", "release"),
    (("pytorch_releases", "2"), "0.12b", "key 'pytorch_releases.2' is not a PyTorch series", "(major.minor)"),
    (("pytorch_releases", "2.13"), "0.12 b", "key 'pytorch_releases.\"2.13\"' must be an AOTriton release",
     "got '0.12 b'"),
]


@pytest.mark.parametrize(("key", "value", "message", "end"), BAD_VALUES,
                         ids=[f"{'.'.join(map(str, k))}={v!s:.20}" for k, v, _, _ in BAD_VALUES])
def test_bad_values_are_named(tmp_path: Path, key: tuple[str | int, ...], value: Any, message: str, end: str) -> None:
    error = _refused(_changed(tmp_path, key, value))
    assert str(error).startswith(f"{tmp_path}/aotriton.toml: {message}") and str(error).endswith(end), str(error)


def test_unreadable_or_not_toml(tmp_path: Path) -> None:
    path = tmp_path / "aotriton.toml"
    assert str(_refused(path)) == f"{path}: not found"
    path.write_text("[targets\n")
    assert str(_refused(path)).startswith(f"{path}: not valid TOML: ")
    path.write_bytes(b"version = \"\xff\"\n")
    assert str(_refused(path)).startswith(f"{path}: cannot read: ")


def test_targets_must_agree_with_gpu_targets_and_images(tmp_path: Path) -> None:
    with_kernels = {gfx for gfx, t in all_targets().items() if t.aotriton}
    assert "gfx942" in with_kernels and not all_targets()["gfx908"].aotriton
    # A target with kernels but no entry: refused (it used to render with no AOTriton pinned).
    error = _refused(_changed(tmp_path, ("targets", "gfx942"), ...))
    assert str(error) == (f"{tmp_path}/aotriton.toml: key 'targets.gfx942' is missing: gpu_targets.toml gives gfx942 "
                          "AOTriton kernels (aotriton = true), so the pytorch recipe needs its kernel image")
    assert error.hint and "set aotriton = false for gfx942 in gpu_targets.toml" in error.hint
    # A target without kernels (gfx908) pins none, so an entry for it is a mistake, not a pin.
    error = _refused(_changed(tmp_path, ("targets", "gfx908"), "amd-gfx90a"))
    assert "key 'targets.gfx908': gpu_targets.toml gives gfx908 no AOTriton kernels (aotriton = false)" in str(error)
    error = _refused(_changed(tmp_path, ("targets", "gfx9999"), "amd-gfx942"))
    assert "key 'targets.gfx9999': gfx9999 is not in gpu_targets.toml" in str(error)
    error = _refused(_changed(tmp_path, ("targets", "gfx942"), "amd-gfx943"))
    assert str(error).endswith("key 'targets.gfx942' names image 'amd-gfx943', which [images] lacks")
    # The kernels table is an argument: what gpu_targets.toml says decides, not a list kept here.
    no942 = {gfx: t.aotriton and gfx != "gfx942" for gfx, t in all_targets().items()}
    assert "gfx942" in str(_refused_with(write_toml(tmp_path / "aotriton.toml", SHIPPED), no942))


def _refused_with(path: Path, kernels: dict[str, bool]) -> InputError:
    with pytest.raises(InputError) as exc:
        aotriton.read_table(path, kernels)
    return exc.value


# ----------------------------------------------------------------------------- through `rocmlock plan`


def _checkout(root: Path) -> Path:
    """recipes/ and the tables they load, laid out as in the repository (the recipes read ../../tools/...)."""
    shutil.copytree(RECIPES, root / "recipes")
    shutil.copytree(DATA, root / "tools/rocmlock/data")
    (root / "pixi.toml").write_text((ROOT / "pixi.toml").read_text())
    return root / "tools/rocmlock/data/aotriton.toml"


def test_plan_reads_the_table_beside_the_recipes(tmp_path: Path) -> None:
    # variants.yaml's GPU keys are generated from (and checked against) the tables of the checkout the recipes
    # are in; recipes without one are held to rocmlock's own.
    table = _checkout(tmp_path)
    assert variantkeys.data_dir(tmp_path / "recipes") == table.parent
    assert variantkeys.data_dir(tmp_path / "lone/recipes") == RECIPES.parent / "tools/rocmlock/data"


@pytest.mark.parametrize(("old", "new", "message"), [
    ('"7.2" = "cd8a', '"7.2" = "zz8a', "key 'runtime.\"7.2\"' must be a sha256 (64 lowercase hex digits)"),
    ('gfx942 = "amd-gfx942"\n', "", "key 'targets.gfx942' is missing: gpu_targets.toml gives gfx942"),
    ('version = "0.11.2b"', "version = 0.112", "key 'version' must be the AOTriton release"),
])
def test_plan_refuses_a_broken_table_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], old: str,
                                                 new: str, message: str) -> None:
    table = _checkout(tmp_path)
    text = table.read_text()
    assert old in text
    table.write_text(text.replace(old, new))
    code = main(["plan", "--manifest-path", str(tmp_path / "pixi.toml"), "-e", "mi300x"])
    out = capsys.readouterr()
    assert code == 2 and out.out == "" and "Traceback" not in out.err
    first = out.err.splitlines()[0]
    assert first.startswith(f"error: {table}: {message}"), out.err
    assert len(out.err.splitlines()) <= 2  # the error, and a hint where there is one


def test_a_pytorch_release_without_tiers_in_the_gpu_table_is_refused(tmp_path: Path) -> None:
    """The presets read the tier of the AOTriton release of an environment's PyTorch: every release of
    [pytorch_releases] needs one in every gpu_targets.toml row (0.12b has them; 0.14b does not exist)."""
    from rocmlock.build import variantkeys

    shutil.copytree(DATA, tmp_path / "data")
    write_toml(tmp_path / "data/aotriton.toml", changed(SHIPPED, ("pytorch_releases", "2.14"), "0.14b"))
    with pytest.raises(InputError) as exc:
        variantkeys.derived(["gfx942"], ["7.2"], tmp_path / "data")
    assert str(exc.value) == (f"{tmp_path}/data/gpu_targets.toml: key 'gfx908.aotriton_tier' has no entry for "
                              "AOTriton 0.14b, the release of a PyTorch series in aotriton.toml [pytorch_releases]")
    # 0.12b's tiers are recorded: the shipped table passes, and 0.11b's "none" for gfx1152 is no kernel rule there.
    assert variantkeys.derived(["gfx1152"], ["7.14"], DATA)["gpu_aotriton"] == ["1"]
