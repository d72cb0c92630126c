"""``rocmlock plan``: variants per environment, dependency order from the recipes, skips with
reasons, the JSON build matrix, and ``present`` marking against a channel built here."""

from __future__ import annotations

import json
import re
import shutil
import tomllib
from pathlib import Path

import pytest
from channels import Pkg, build_channel
from rocmlock.build.plan import Plan, make_plan, render_plan
from rocmlock.build.recipes import load_matrix, recipe_packages
from rocmlock.cli.main import main
from rocmlock.errors import InputError
from rocmlock.gpu.targets import get_target
from rocmlock.workspace.manifest import load_workspace
from shipped import RECIPES

ROOT = Path(__file__).resolve().parents[1]
OURS = ("pytorch-rocm", "flash-attn-rocm", "llamafactory", "rocm-version", "amdgpu-target")
JSON_KEYS = {
    "id",
    "stage",
    "package",
    "version",
    "recipe",
    "variant",
    "build_string",
    "subdir",
    "depends_on",
    "environments",
    "present",
    "skip_reason",
}


def mirror(root: Path, recipes: tuple[str, ...] = OURS) -> Path:
    """A checkout-shaped copy: recipes/<some> + variants.yaml, and the tables they read (GPU, AOTriton, and the
    ROCm components their build scripts check, with the rows of these recipes' packages only: plan refuses a row
    naming a package no recipe builds)."""
    for name in recipes:
        shutil.copytree(ROOT / "recipes" / name, root / "recipes" / name)
    shutil.copy(ROOT / "recipes" / "variants.yaml", root / "recipes" / "variants.yaml")
    shutil.copy(ROOT / "recipes" / "rocm-build-env.sh", root / "recipes" / "rocm-build-env.sh")
    data = root / "tools" / "rocmlock" / "data"
    data.mkdir(parents=True)
    for table in ("gpu_targets.toml", "aotriton.toml"):
        shutil.copy(ROOT / "tools" / "rocmlock" / "data" / table, data / table)
    text = (ROOT / "tools" / "rocmlock" / "data" / "rocm_components.toml").read_text()
    packages = {n for name in recipes for n in recipe_packages(root / "recipes" / name / "recipe.yaml")}
    rows = [f"{p} = {json.dumps(keys)}\n" for p, keys in tomllib.loads(text)["packages"].items() if p in packages]
    (data / "rocm_components.toml").write_text(text[:text.index("\n[packages]\n") + 12] + "".join(rows))
    return root / "recipes"


def workspace(root: Path, envs: dict[str, tuple[str, str, str]], deps: str = "", pytorch: str = "2.12.*") -> Path:
    """pixi.toml with one environment per (gfx, rocm spec, python spec)."""
    platforms, features, environments = [], [], []
    for name, (gfx, rocm, python) in envs.items():
        isa = get_target(gfx).isa
        platforms.append(f'{{ name = "linux-64-{name}", platform = "linux-64", __amdgpu_arch = "{isa}" }}')
        features.append(
            f'[feature.{name}]\nplatforms = ["linux-64-{name}"]\n'
            f'dependencies = {{ amdgpu-target = {{ version = "*", build = "{gfx}" }}, '
            f'rocm-version = "{rocm}", python = "{python}" }}\n'
        )
        environments.append(f'{name} = ["{name}", "train"]')
    text = (
        '[workspace]\nname = "t"\nchannels = ["conda-forge"]\n'
        f"platforms = [{', '.join(platforms)}]\n\n"
        f'[feature.train.dependencies]\npytorch = "{pytorch}"\nflash-attn = "2.8.*"\nllamafactory = "*"\n{deps}\n'
        + "\n".join(features)
        + "\n[environments]\n"
        + "\n".join(environments)
        + "\n"
    )
    (root / "pixi.toml").write_text(text)
    return root / "pixi.toml"


def assert_dependency_order(plan: Plan) -> None:
    seen: set[str] = set()
    for v in plan.variants:
        assert set(v.depends_on) <= seen, f"{v.id} comes before {set(v.depends_on) - seen}"
        seen.add(v.id)


# ----------------------------------------------------------------------------- the root workspace


def test_plan_on_the_root_workspace() -> None:
    plan = make_plan(load_workspace(ROOT / "pixi.toml"))
    assert_dependency_order(plan)
    stages = [v.stage for v in plan.variants]
    first = {s: stages.index(s) for s in set(stages)}
    assert max(first["amdgpu-target"], first["rocm-version"]) < first["pytorch"] < first["flash-attn"]
    assert first["pytorch"] < first["llamafactory"]
    torch = {dict(v.variant)["gpu_target"]: v for v in plan.variants if v.stage == "pytorch"}
    assert set(torch) == {"gfx90a", "gfx942", "gfx950", "gfx1100"}
    for gfx, v in torch.items():
        assert v.build_string.startswith(f"rocm72_{gfx}_py312_h")
        assert dict(v.variant)["rocm_version"] == "7.2" and dict(v.variant)["python"] == "3.12"
    mi300x = [v for v in plan.variants if "mi300x" in v.environments]
    assert {v.stage for v in mi300x} >= {
        "amdgpu-target",
        "rocm-version",
        "pytorch",
        "flash-attn",
        "llamafactory",
    }
    assert not plan.skipped and not plan.problems
    assert plan.recipe_path(torch["gfx942"]) == ROOT / "recipes" / "pytorch-rocm" / "recipe.yaml"
    assert len({v.id for v in plan.variants}) == len(plan.variants)


def test_environment_filter_and_text_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "-e", "mi300x", "--manifest-path", str(ROOT / "pixi.toml")]) == 0
    out = capsys.readouterr().out
    assert "rocm72_gfx942_py312_h" in out and "gfx90a" not in out
    assert out.index("amdgpu-target") < out.index("pytorch") < out.index("flash-attn")
    assert main(["plan", "-e", "nope", "--manifest-path", str(ROOT / "pixi.toml")]) == 2
    assert "unknown environment 'nope'" in capsys.readouterr().err


# ----------------------------------------------------------------------------- small workspaces


def test_impossible_variants_are_reported_with_their_reason(tmp_path: Path) -> None:
    mirror(tmp_path)
    manifest = workspace(
        tmp_path,
        {
            "old950": ("gfx950", "6.4.*", "3.12.*"),
            "mi100": ("gfx908", "7.2.*", "3.12.*"),
            "w7900": ("gfx1100", "7.2.*", "3.11.*"),
        },
    )
    plan = make_plan(load_workspace(manifest))
    assert_dependency_order(plan)
    by = {(v.stage, dict(v.variant).get("gpu_target")): v for v in plan.variants}
    assert "gfx950 needs ROCm >= 7.0" in by[("pytorch", "gfx950")].skip_reason
    assert by[("pytorch", "gfx950")].build_string.startswith("rocm64_gfx950_py312_")
    assert "gfx950 needs ROCm >= 7.0" in by[("flash-attn", "gfx950")].skip_reason
    assert "no CK kernels for gfx908" in by[("flash-attn", "gfx908")].skip_reason
    assert by[("pytorch", "gfx908")].skip_reason is None
    # RDNA: the Triton backend, not a skip.
    assert by[("flash-attn", "gfx1100")].skip_reason is None
    assert by[("flash-attn", "gfx1100")].build_string.startswith("rocm72_gfx1100_py311_")
    # llamafactory still builds: some pytorch it can run with (gfx908, gfx1100) is buildable.
    assert by[("llamafactory", None)].skip_reason is None
    text = render_plan(plan)
    assert "skipped pytorch-2.12.1-rocm64_gfx950_py312_" in text and "3 skipped" in text


def test_every_target_plans_for_both_rocm_versions_with_a_reason_for_each_skip(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 34: the shipped matrix holds ROCm 7.2 and 7.14; an environment that leaves ROCm open plans both, for
    every shipped target, and every variant that cannot be built says why."""
    mirror(tmp_path, (*OURS, "bitsandbytes-rocm"))
    targets = load_matrix(tmp_path / "recipes").get("gpu_target")
    assert {"gfx1102", "gfx1150", "gfx1152", "gfx1153", "gfx1200"} <= set(targets)
    # pytorch open too: each ROCm version builds its own (7.2: 2.12.1, 7.14: 2.14.1; recipes/variants.yaml).
    manifest = workspace(tmp_path, {gfx: (gfx, "*", "3.12.*") for gfx in targets}, deps='bitsandbytes = "*"',
                         pytorch=">=2.12")
    plan = make_plan(load_workspace(manifest))
    assert_dependency_order(plan)
    by = {(v.stage, dict(v.variant).get("gpu_target"), dict(v.variant).get("rocm_version")): v
          for v in plan.variants}
    for gfx in targets:
        target = get_target(gfx)
        for rocm in ("7.2", "7.14"):
            for stage in ("pytorch", "flash-attn", "bitsandbytes"):
                v = by[(stage, gfx, rocm)]
                assert v.build_string.startswith(f"rocm{rocm.replace('.', '')}_{gfx}_py312_h"), v.id
                buildable = target.supports_rocm(rocm) and (
                    stage != "flash-attn" or target.flash_attn_ck or target.flash_attn_triton) and (
                    stage != "bitsandbytes" or target.supports_bitsandbytes(rocm))
                assert (v.skip_reason is None) == buildable, (v.id, v.skip_reason)
                # The pytorch of that ROCm, and the extensions built against it.
                assert dict(v.variant).get("pytorch_version") == {"7.2": "2.12.1", "7.14": "2.14.1"}[rocm], v.id
            assert by[("pytorch", gfx, "7.14")].version == "2.14.1"
            assert by[("pytorch", gfx, "7.2")].version == "2.12.1"
    # The reasons, one per kind: a target newer than the ROCm, no flash-attn backend, no bitsandbytes build.
    assert "gfx1152 needs ROCm >= 7.14" in by[("pytorch", "gfx1152", "7.2")].skip_reason
    assert by[("pytorch", "gfx1152", "7.14")].skip_reason is None
    assert "no CK kernels for gfx908" in by[("flash-attn", "gfx908", "7.14")].skip_reason
    assert "bnb_first_rocm" in by[("bitsandbytes", "gfx908", "7.2")].skip_reason
    assert by[("bitsandbytes", "gfx908", "7.14")].skip_reason is None
    assert main(["plan", "--manifest-path", str(manifest)]) == 0
    out = capsys.readouterr().out
    assert "rocm714_gfx1151_py312_h" in out and "rocm72_gfx1151_py312_h" in out
    assert re.search(r"pytorch +2\.14\.1 +rocm714_gfx1151_py312_h", out)
    assert re.search(r"pytorch +2\.12\.1 +rocm72_gfx1151_py312_h", out)
    skipped = [line for line in out.splitlines() if line.startswith("skipped ")]
    assert len(skipped) == len(plan.skipped) == 9 and all(": " in line for line in skipped)
    assert any(line.startswith("skipped pytorch-2.12.1-rocm72_gfx1153_py312_") and line.endswith(
        "gfx1153 needs ROCm >= 7.14 (first_rocm in gpu_targets.toml); this variant asks ROCm 7.2") for line in skipped)


def test_a_variant_whose_every_dependency_is_skipped_is_skipped(tmp_path: Path) -> None:
    mirror(tmp_path)
    plan = make_plan(load_workspace(workspace(tmp_path, {"old950": ("gfx950", "6.4.*", "3.12.*")})))
    (lf,) = [v for v in plan.variants if v.stage == "llamafactory"]
    assert lf.skip_reason and lf.skip_reason.startswith("needs pytorch, but pytorch-2.12.1-rocm64_gfx950")
    assert {v.stage for v in plan.to_build} == {"amdgpu-target", "rocm-version"}


def test_json_is_a_ci_build_matrix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mirror(tmp_path)
    manifest = workspace(tmp_path, {"a": ("gfx942", "7.2.*", "3.12.*"), "b": ("gfx942", "7.2.*", "3.12.*")})
    assert main(["plan", "--json", "--manifest-path", str(manifest)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["manifest"] == "pixi.toml" and data["recipes_dir"] == "recipes" and data["problems"] == []
    ids = [v["id"] for v in data["variants"]]
    assert len(ids) == len(set(ids)) == 5  # one of each: environments a and b share every variant
    for v in data["variants"]:
        assert set(v) == JSON_KEYS
        assert v["environments"] == ["a", "b"]
        assert all(dep in ids[: ids.index(v["id"])] for dep in v["depends_on"])
        assert v["recipe"].startswith("recipes/") and v["recipe"].endswith("/recipe.yaml")
    fa = next(v for v in data["variants"] if v["stage"] == "flash-attn")
    torch = next(v for v in data["variants"] if v["stage"] == "pytorch")
    assert torch["id"] in fa["depends_on"]
    assert fa["variant"]["gpu_target"] == "gfx942" and fa["variant"]["pytorch_version"] == torch["version"]
    # Byte-identical on a second run: CI can diff it.
    assert main(["plan", "--json", "--manifest-path", str(manifest)]) == 0
    assert json.loads(capsys.readouterr().out) == data


def test_present_marking_against_a_channel(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mirror(tmp_path)
    manifest = workspace(tmp_path, {"mi300x": ("gfx942", "7.2.*", "3.12.*")})
    before = make_plan(load_workspace(manifest))
    torch = next(v for v in before.variants if v.stage == "pytorch")
    rocm = next(v for v in before.variants if v.stage == "rocm-version")
    channel = build_channel(
        tmp_path / "channel",
        [
            Pkg("amdgpu-target", "1", "gfx942", subdir="noarch", noarch="generic"),
            Pkg("rocm-version", rocm.version, rocm.build_string, subdir="noarch", noarch="generic"),
            Pkg("pytorch", torch.version, torch.build_string),
            # Same name and version, another build: not the variant the plan needs.
            Pkg("flash-attn", "2.8.3", "rocm72_gfx942_py312_h0000000_0"),
        ],
    )
    assert main(["plan", "--json", "--channel", str(channel), "--manifest-path", str(manifest)]) == 0
    data = json.loads(capsys.readouterr().out)
    present = {v["stage"] for v in data["variants"] if v["present"]}
    assert present == {"amdgpu-target", "rocm-version", "pytorch"}
    assert data["channel"] == str(channel)
    plan = make_plan(load_workspace(manifest), channel=channel.as_uri())
    assert {v.stage for v in plan.to_build} == {"flash-attn", "llamafactory"}
    assert "3 present" in render_plan(plan)


def test_missing_channel_directory_is_an_input_error(tmp_path: Path) -> None:
    mirror(tmp_path)
    manifest = workspace(tmp_path, {"a": ("gfx942", "7.2.*", "3.12.*")})
    assert main(["plan", "--channel", str(tmp_path / "nowhere"), "--manifest-path", str(manifest)]) == 2



@pytest.mark.parametrize("channel", ["https://u:pw-81c3@[::1/x", "quetz+https://u:pw-81c3@[::1/t/tok-9a/x"])
def test_a_channel_url_that_does_not_parse_is_one_line_without_its_secret(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], channel: str) -> None:
    mirror(tmp_path)
    manifest = workspace(tmp_path, {"a": ("gfx942", "7.2.*", "3.12.*")})
    assert main(["plan", "--channel", channel, "--manifest-path", str(manifest)]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if not line.startswith("hint: ")]
    assert len(lines) == 1 and "not a valid URL" in lines[0], err
    assert "Traceback" not in err and "pw-81c3" not in err and "tok-9a" not in err

def test_environment_spec_no_recipe_satisfies_is_a_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mirror(tmp_path)
    manifest = workspace(tmp_path, {"a": ("gfx942", "7.2.*", "3.12.*")})
    manifest.write_text(manifest.read_text().replace('pytorch = "2.12.*"', 'pytorch = "2.13.*"'))
    assert main(["plan", "--manifest-path", str(manifest)]) == 0
    captured = capsys.readouterr()
    assert "asks pytorch 2.13.*, but the recipe of pytorch builds only 2.12.1" in captured.err
    plan = make_plan(load_workspace(manifest))
    assert plan.problems and not any(v.stage == "pytorch" for v in plan.variants)


def test_unpinned_python_plans_every_shipped_python(tmp_path: Path) -> None:
    mirror(tmp_path)
    manifest = workspace(tmp_path, {"a": ("gfx942", "7.2.*", "*")})
    plan = make_plan(load_workspace(manifest))
    pythons = sorted(dict(v.variant)["python"] for v in plan.variants if v.stage == "pytorch")
    assert pythons == ["3.11", "3.12", "3.13"]
    for fa in (v for v in plan.variants if v.stage == "flash-attn"):
        (dep,) = [d for d in fa.depends_on if d.startswith("pytorch-")]
        assert f"_py{dict(fa.variant)['python'].replace('.', '')}_" in dep


def test_a_new_recipe_slots_into_the_order_without_code(tmp_path: Path) -> None:
    recipes = mirror(tmp_path)
    (recipes / "quantkit").mkdir()
    (recipes / "quantkit" / "recipe.yaml").write_text(
        "schema_version: 1\n"
        "context:\n  rocm_short: ${{ rocm_version | replace('.', '') }}\n"
        "package: {name: quantkit, version: '1.0'}\n"
        "build:\n  string: rocm${{ rocm_short }}_${{ gpu_target }}_h${{ hash }}_0\n"
        "requirements:\n  host:\n    - pytorch ==${{ pytorch_version }} rocm${{ rocm_short }}_${{ gpu_target }}_*\n"
        "  run:\n    - flash-attn\n    - amdgpu-target * ${{ gpu_target }}\n"
    )
    manifest = workspace(tmp_path, {"a": ("gfx942", "7.2.*", "3.12.*")}, deps='quantkit = "*"')
    plan = make_plan(load_workspace(manifest))
    assert_dependency_order(plan)
    stages = [v.stage for v in plan.variants]
    assert stages.index("quantkit") > stages.index("flash-attn") > stages.index("pytorch")
    (qk,) = [v for v in plan.variants if v.stage == "quantkit"]
    assert {d.split("-")[0] for d in qk.depends_on} == {"pytorch", "flash", "amdgpu"}


def test_recipes_that_need_each_other_are_an_input_error(tmp_path: Path) -> None:
    recipes = mirror(tmp_path, ("rocm-version", "amdgpu-target"))
    for name, other in (("aaa", "bbb"), ("bbb", "aaa")):
        (recipes / name).mkdir()
        (recipes / name / "recipe.yaml").write_text(
            f"schema_version: 1\npackage: {{name: {name}, version: '1'}}\nbuild: {{noarch: generic}}\n"
            f"requirements:\n  run:\n    - {other}\n"
        )
    manifest = workspace(tmp_path, {"a": ("gfx942", "7.2.*", "3.12.*")}, deps='aaa = "*"')
    manifest.write_text(
        manifest.read_text().replace('pytorch = "2.12.*"\nflash-attn = "2.8.*"\nllamafactory = "*"\n', "")
    )
    with pytest.raises(InputError, match="cycle: (aaa|bbb)-1-"):
        make_plan(load_workspace(manifest))


def test_broken_recipe_is_an_input_error_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recipes = mirror(tmp_path)
    (recipes / "broken").mkdir()
    (recipes / "broken" / "recipe.yaml").write_text(
        "schema_version: 1\npackage:\n  name: broken\n  version: ${{ no_such_key }}\n"
    )
    manifest = workspace(tmp_path, {"a": ("gfx942", "7.2.*", "3.12.*")})
    assert main(["plan", "--manifest-path", str(manifest)]) == 2
    err = capsys.readouterr().err
    assert "broken/recipe.yaml: cannot render" in err and "no_such_key" in err


@pytest.mark.parametrize(("spec", "pythons"), [
    # `pixi add python` writes a lower bound with the patch and an upper bound on the next minor
    # (pixi's examples/qgis, examples/multi-machine: ">=3.12.3,<3.13", ">=3.13.13,<4").
    (">=3.12.3,<3.13", ["3.12"]),
    (">=3.12.3", ["3.12", "3.13"]),
    (">3.11.2,<3.11.9", ["3.11"]),
    ("~=3.12.1", ["3.12"]),
    (">=3.11,<3.13", ["3.11", "3.12"]),
])
def test_a_spec_with_a_patch_bound_plans_the_minor_it_admits(tmp_path: Path, spec: str, pythons: list[str]) -> None:
    mirror(tmp_path)
    manifest = workspace(tmp_path, {"a": ("gfx942", "7.2.*", spec)})
    plan = make_plan(load_workspace(manifest))
    assert sorted(dict(v.variant)["python"] for v in plan.variants if v.stage == "pytorch") == pythons


def test_an_environment_that_needs_no_recipe_package_plans_nothing_whatever_its_python(tmp_path: Path) -> None:
    # A docs or lint environment beside the GPU ones (pixi's examples/solve-groups: python "<=3.10") needs
    # nothing built; only an environment that needs a recipe package must match a shipped python.
    mirror(tmp_path)
    manifest = workspace(tmp_path, {"a": ("gfx942", "7.2.*", "3.12.*")})
    manifest.write_text(manifest.read_text().replace(
        "\n[environments]\n", '\n[feature.docs.dependencies]\npython = "<=3.10"\n\n[environments]\ndocs = ["docs"]\n'))
    plan = make_plan(load_workspace(manifest))
    assert not any("docs" in v.environments for v in plan.variants)
    assert any("a" in v.environments for v in plan.variants)
    manifest.write_text(manifest.read_text().replace('docs = ["docs"]', 'docs = ["docs", "train"]'))
    with pytest.raises(InputError, match=r"environment 'docs': python '<=3.10' matches none of"):
        make_plan(load_workspace(manifest), ["docs"])


STACK = ("triton", "pytorch", "torchvision", "torchaudio", "flash-attn", "bitsandbytes", "deepspeed", "llamafactory")


def _full_stack_714(root: Path) -> Path:
    """Every shipped recipe, and one gfx950 environment of ROCm 7.14 asking the whole training stack."""
    mirror(root, tuple(p.name for p in (ROOT / "recipes").iterdir() if (p / "recipe.yaml").is_file()))
    deps = "\n".join(f'{name} = "*"' for name in ("triton", "torchvision", "torchaudio", "bitsandbytes", "deepspeed"))
    return workspace(root, {"mi355": ("gfx950", "7.14.*", "3.12.*")}, deps=deps, pytorch="*")


def test_a_rocm_7_14_environment_plans_the_full_stack_each_skip_saying_why(tmp_path: Path) -> None:
    """Issue 42: a 7.14 environment plans Triton, PyTorch, torchvision, torchaudio, flash-attn, bitsandbytes,
    DeepSpeed and LLaMA-Factory. Today Triton 3.8.0's LLVM pin is unverified (docs/recipes.md, "Versions matrix"),
    so Triton is skipped saying exactly that and how to fill it, and the rest is skipped for the reason that is
    true: it needs what cannot be built. With the pin filled, the whole stack is `build`."""
    manifest = _full_stack_714(tmp_path)
    plan = make_plan(load_workspace(manifest))
    by = {v.stage: v for v in plan.variants}
    assert set(STACK) <= set(by)
    assert all(dict(by[s].variant).get("rocm_version") == "7.14" for s in STACK if s != "llamafactory")
    triton = by["triton"].skip_reason or ""
    assert triton.startswith("triton 3.8.0 (675c59878aa2280b31f722aaf42b825fcee21de8) for ROCm 7.14 has no verified "
                             "LLVM pin: triton_llvm_rev and triton_llvm_sha256 are empty"), triton
    assert "cmake/llvm-info.json" in triton
    assert triton.endswith("`rocmlock bump triton=3.8.0 --rev triton=675c59878aa2280b31f722aaf42b825fcee21de8` "
                           "fills both on a host that reaches GitHub")
    assert (by["pytorch"].skip_reason or "").startswith(f"needs triton, but {by['triton'].id} cannot be built")
    for stage in STACK[2:]:
        assert (by[stage].skip_reason or "").startswith(f"needs pytorch, but {by['pytorch'].id}"), stage
    # The day the pin is verified (these values stand in for it), nothing of the stack is skipped.
    variants = tmp_path / "recipes" / "variants.yaml"
    text = variants.read_text()
    text = re.sub(r'(triton_llvm_rev:\n  - [0-9a-f]{40}\n)  - ""', r"\g<1>  - " + "a" * 40, text)
    text = re.sub(r'(triton_llvm_sha256:\n  - [0-9a-f]{64}\n)  - ""', r"\g<1>  - " + "b" * 64, text)
    variants.write_text(text)
    filled = {v.stage: v for v in make_plan(load_workspace(manifest)).variants}
    assert {s: filled[s].skip_reason for s in STACK} == dict.fromkeys(STACK)


def test_a_variant_file_rattler_build_cannot_read_is_its_message_not_a_rust_dump(tmp_path: Path) -> None:
    # rattler-build's errors print in Rust's debug form (ParseError { path: ..., source: Generic { message: ...
    # span: Span { ... } } }): the message alone, escaped (a break-it pass).
    recipes = tmp_path / "recipes"
    shutil.copytree(RECIPES, recipes)
    with (recipes / "variants.yaml").open("a") as fh:
        fh.write("rocm_version:\n  - \"7.2\\x1b[2J\"\n")
    with pytest.raises(InputError) as info:
        load_matrix(recipes)
    message = info.value.message
    assert message.startswith(f"{recipes / 'variants.yaml'}: cannot read variant configuration: Duplicate key"), message
    assert "ParseError" not in message and "Span" not in message and "\x1b" not in message, message
