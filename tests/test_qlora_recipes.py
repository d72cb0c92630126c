"""bitsandbytes and DeepSpeed: the recipes render for every variant with skips from the GPU table,
the DeepSpeed op selection holds against the real DeepSpeed op builders, the build wrapper pins the
target, `rocmlock plan` orders the new stages, and a workspace with qlora/deepspeed environments locks."""

from __future__ import annotations

import fnmatch
import re
import sys
import textwrap
from pathlib import Path

import pytest
from channels import TARGETS, Pkg, build_channel, forge_packages, private_packages, py
from lockhelpers import FEATURE_TABLES, by_name, manifest
from rocmlock.build.plan import make_plan
from rocmlock.build.recipes import Matrix, render_recipe
from rocmlock.cli.main import main
from rocmlock.gpu.targets import all_targets, get_target
from rocmlock.workspace.manifest import load_workspace
from shipped import ARCH_BUILD, RECIPES, ROOT, manifest_with_gfx908, script_env

NEW = {"bitsandbytes-rocm": "bitsandbytes", "deepspeed-rocm": "deepspeed"}
# Ops upstream marks incompatible with ROCm, or that need NVIDIA-only libraries / an old Triton.
NOT_ON_ROCM = {"DS_BUILD_SPARSE_ATTN", "DS_BUILD_GDS", "DS_BUILD_EVOFORMER_ATTN", "DS_BUILD_CUTLASS_OPS",
               "DS_BUILD_FP_QUANTIZER"}


def render(name: str, matrix: Matrix) -> list:
    return render_recipe(RECIPES / name / "recipe.yaml", matrix)


def expected_skip(recipe: str, rocm: str, gfx: str) -> bool:
    target = get_target(gfx)
    if not target.supports_rocm(rocm):
        return True
    return recipe == "bitsandbytes-rocm" and not target.supports_bitsandbytes(rocm)


# ----------------------------------------------------------------------------- rendering


@pytest.mark.parametrize("recipe", sorted(NEW))
@pytest.mark.parametrize("rocm", ["6.4", "7.2", "7.14"])
def test_every_variant_renders_and_skips_follow_the_table(matrix: Matrix, recipe: str, rocm: str) -> None:
    variants = render(recipe, matrix.narrowed({"rocm_version": [rocm]}))
    pythons, targets = matrix.get("python"), matrix.get("gpu_target")
    assert len(variants) == len(pythons) * len(targets)
    for v in variants:
        gfx = v.variant_value("gpu_target")
        assert v.package == NEW[recipe]
        assert bool(v.skip_reason) == expected_skip(recipe, rocm, gfx), (gfx, rocm, v.skip_reason)
        if v.skip_reason:
            assert gfx in v.skip_reason and rocm in v.skip_reason and "gpu_targets.toml" in v.skip_reason


def test_bitsandbytes_skip_reasons_name_the_table_column(matrix: Matrix) -> None:
    at_72 = {v.variant_value("gpu_target"): v.skip_reason
             for v in render("bitsandbytes-rocm", matrix.narrowed({"rocm_version": ["7.2"]}))}
    assert "bnb_first_rocm" in at_72["gfx908"] and "7.14" in at_72["gfx908"]
    # gfx1152 and gfx1153 need ROCm 7.14 itself (first_rocm); gfx908 has bitsandbytes from 7.14 on.
    assert {gfx for gfx, reason in at_72.items() if reason} == {"gfx908", "gfx1152", "gfx1153"}
    assert "first_rocm" in at_72["gfx1152"] and "bnb_first_rocm" not in at_72["gfx1152"]
    at_714 = {v.variant_value("gpu_target"): v.skip_reason
              for v in render("bitsandbytes-rocm", matrix.narrowed({"rocm_version": ["7.14"]}))}
    assert not any(at_714.values()), at_714
    at_64 = {v.variant_value("gpu_target"): v.skip_reason
             for v in render("bitsandbytes-rocm", matrix.narrowed({"rocm_version": ["6.4"]}))}
    assert "needs ROCm >= 7.0" in at_64["gfx950"] and not at_64["gfx1201"] and not at_64["gfx942"]


@pytest.mark.parametrize("recipe", sorted(NEW))
def test_identity_and_exact_pytorch_pin(matrix: Matrix, recipe: str) -> None:
    torches = {v.build_string: v for v in render("pytorch-rocm", matrix)}
    variants = render(recipe, matrix)
    assert len({v.build_string for v in variants}) == len(variants)
    for v in variants:
        m = ARCH_BUILD.match(v.build_string)
        gfx, python, rocm = (v.variant_value(k) for k in ("gpu_target", "python", "rocm_version"))
        short = rocm.replace(".", "")
        assert m and m["gfx"] == gfx and m["rocm"] == short and m["py"] == python.replace(".", "")
        run = v.specs("run")
        assert f"amdgpu-target * {gfx}" in run and f"rocm-version {rocm}.*" in run
        assert v.run_constraints == (f"__amdgpu_arch =={get_target(gfx).isa}",)
        (pin,) = [s for s in run if s.startswith("pytorch ")]
        assert pin in v.specs("host")
        _, version, build = pin.split()
        matching = [b for b, t in torches.items() if fnmatch.fnmatchcase(b, build) and f"=={t.version}" == version]
        assert len(matching) == 1, (pin, matching)
        assert matching[0].startswith(f"rocm{short}_{gfx}_py{python.replace('.', '')}_h")


def test_bitsandbytes_source_is_the_release_commit_and_cmake_is_hip(matrix: Matrix) -> None:
    recipe = (RECIPES / "bitsandbytes-rocm" / "recipe.yaml").read_text()
    assert "rev: ${{ bitsandbytes_git_rev }}" in recipe
    assert all(re.fullmatch(r"[0-9a-f]{40}", rev) for rev in matrix.get("bitsandbytes_git_rev"))
    script = (RECIPES / "bitsandbytes-rocm" / "build.sh").read_text()
    for flag in ("-DCOMPUTE_BACKEND=hip", '-DBNB_ROCM_ARCH="${ROCMLOCK_GPU_TARGET}"', "BNB_SKIP_CMAKE=1"):
        assert flag in script
    assert script_env(matrix, "bitsandbytes-rocm", "gfx942")["ROCMLOCK_GPU_TARGET"] == "gfx942"


def test_deepspeed_sdist_pin_and_llamafactory_bound(matrix: Matrix) -> None:
    (version,) = matrix.get("deepspeed_version")
    (sha,) = matrix.get("deepspeed_sha256")
    assert re.fullmatch(r"[0-9a-f]{64}", sha)
    # LLaMA-Factory's requirements/deepspeed.txt allows deepspeed <= 0.18.4.
    assert tuple(int(p) for p in version.split(".")) <= (0, 18, 4)


# ----------------------------------------------------------------------------- DeepSpeed ops


def test_deepspeed_ops_and_wavefront_follow_the_table(matrix: Matrix) -> None:
    for gfx, target in all_targets().items():
        env = script_env(matrix, "deepspeed-rocm", gfx)
        assert env["ROCMLOCK_WAVEFRONT_SIZE"] == str(target.wavefront_size)
        assert env["ROCMLOCK_WAVEFRONT_SIZE"] == ("32" if target.is_rdna else "64")
        ops = set(env["ROCMLOCK_DS_BUILD_OPS"].split())
        assert {"DS_BUILD_CPU_ADAM", "DS_BUILD_FUSED_ADAM", "DS_BUILD_UTILS"} <= ops
        assert not ops & NOT_ON_ROCM


def _op_builders() -> dict[str, type]:
    """Every op builder class of the installed DeepSpeed (the CUDA/ROCm ones), by BUILD_VAR."""
    import importlib
    import pkgutil

    import deepspeed.ops.op_builder as pkg

    out: dict[str, type] = {}
    for info in pkgutil.iter_modules(pkg.__path__):
        module = importlib.import_module(f"deepspeed.ops.op_builder.{info.name}")
        for obj in vars(module).values():
            if isinstance(obj, type) and getattr(obj, "BUILD_VAR", None) and obj.__module__ == module.__name__:
                out[obj.BUILD_VAR] = obj
    return out


def test_deepspeed_op_selection_against_the_real_op_builders(matrix: Matrix,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from deepspeed.ops.op_builder.builder import OpBuilder

    builders = _op_builders()
    ops = script_env(matrix, "deepspeed-rocm", "gfx942")["ROCMLOCK_DS_BUILD_OPS"].split()
    assert set(ops) <= set(builders), set(ops) - set(builders)
    # Under a ROCm PyTorch, upstream declares sparse attention and GDS incompatible.
    monkeypatch.setattr(OpBuilder, "_is_rocm_pytorch", True)
    for var in ("DS_BUILD_SPARSE_ATTN", "DS_BUILD_GDS"):
        assert builders[var]().is_compatible() is False
    for var in ops:
        if var != "DS_BUILD_AIO":  # needs libaio headers, which the recipe brings and this host lacks
            assert builders[var]().is_compatible(), var


def test_build_wrapper_pins_target_and_fails_on_skipped_ops(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from deepspeed.ops.op_builder.builder import OpBuilder

    monkeypatch.setattr(OpBuilder, "_rocm_gpu_arch", None)
    monkeypatch.setattr(OpBuilder, "_rocm_wavefront_size", None)
    # The wrapper also pins the CPU flags on the class: restored afterwards.
    monkeypatch.setattr(OpBuilder, "cpu_arch", OpBuilder.cpu_arch)
    monkeypatch.setattr(OpBuilder, "simd_width", OpBuilder.simd_width)
    # The wrapper puts the CWD on sys.path and sets sys.argv, as setup.py expects: undo both afterwards.
    monkeypatch.setattr(sys, "path", [str(RECIPES / "deepspeed-rocm"), *sys.path])
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    import setup_for_target as wrapper

    # A stand-in setup.py that reports what DeepSpeed's builder would use, and which ops it built.
    (tmp_path / "setup.py").write_text(textwrap.dedent("""
        import pathlib
        from types import SimpleNamespace
        from deepspeed.ops.op_builder.builder import OpBuilder
        pathlib.Path("seen.txt").write_text(OpBuilder.get_rocm_gpu_arch() + " " + OpBuilder.get_rocm_wavefront_size())
        ALL_OPS = {"cpu_adam": SimpleNamespace(BUILD_VAR="DS_BUILD_CPU_ADAM"),
                   "fused_adam": SimpleNamespace(BUILD_VAR="DS_BUILD_FUSED_ADAM")}
        install_ops = {"cpu_adam": True, "fused_adam": False}
    """))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ROCMLOCK_GPU_TARGET", "gfx942")
    monkeypatch.setenv("ROCMLOCK_WAVEFRONT_SIZE", "64")
    monkeypatch.setenv("ROCMLOCK_DS_BUILD_OPS", "DS_BUILD_CPU_ADAM")
    assert wrapper.main(["bdist_wheel"]) == 0
    assert (tmp_path / "seen.txt").read_text() == "gfx942 64"
    monkeypatch.setenv("ROCMLOCK_DS_BUILD_OPS", "DS_BUILD_CPU_ADAM DS_BUILD_FUSED_ADAM")
    assert wrapper.main(["bdist_wheel"]) == 1


def test_cpu_ops_compile_for_the_baseline_not_the_build_hosts_cpu(matrix: Matrix,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 13, finding 6: DeepSpeed 0.18.4's CPU ops use -march=native (and -D__AVX512__ where the build host
    # has it), so a package built on a new CPU dies with SIGILL on an older node. The real cpu_adam builder's
    # compiler flags, after the wrapper pinned them:
    import torch.utils.cpp_extension  # noqa: F401  (the builders use it; setup.py imports it first)
    from deepspeed.ops.op_builder.builder import OpBuilder
    from deepspeed.ops.op_builder.cpu_adam import CPUAdamBuilder

    monkeypatch.setattr(sys, "path", [str(RECIPES / "deepspeed-rocm"), *sys.path])
    for attr in ("cpu_arch", "simd_width", "_rocm_gpu_arch", "_rocm_wavefront_size"):
        monkeypatch.setattr(OpBuilder, attr, getattr(OpBuilder, attr))
    import setup_for_target as wrapper

    def cpu_adam_flags() -> list[str]:
        builder = CPUAdamBuilder()
        builder.build_for_cpu = True  # as setup.py decides on a host without a visible GPU (builder.py)
        return builder.cxx_args()

    assert "-march=native" in cpu_adam_flags()  # upstream's default, on this host
    assert "deepspeed.ops.op_builder.builder" in wrapper.pin_builders("gfx942", "64", "x86-64-v3")
    flags = cpu_adam_flags()
    assert "-march=x86-64-v3" in flags and "-D__AVX256__" in flags
    assert "-march=native" not in flags and "-D__AVX512__" not in flags
    wrapper.pin_builders("gfx942", "64", "x86-64-v4")
    assert {"-march=x86-64-v4", "-D__AVX512__"} <= set(cpu_adam_flags())
    # The shipped variant passes the baseline to the build; an unknown one is refused before setup.py runs.
    assert script_env(matrix, "deepspeed-rocm", "gfx942")["ROCMLOCK_CPU_BASELINE"] == "x86-64-v3"
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    monkeypatch.setenv("ROCMLOCK_CPU_BASELINE", "native")
    for var in ("ROCMLOCK_GPU_TARGET", "ROCMLOCK_WAVEFRONT_SIZE", "ROCMLOCK_DS_BUILD_OPS"):
        monkeypatch.setenv(var, "x")
    assert wrapper.main(["bdist_wheel"]) == 2


# ----------------------------------------------------------------------------- plan


def test_plan_orders_the_new_stages_after_their_pytorch() -> None:
    names = ["mi300x-qlora", "mi300x-deepspeed", "mi250-qlora"]
    plan = make_plan(load_workspace(ROOT / "pixi.toml"), names)
    assert not plan.skipped and not plan.problems
    position = {v.id: i for i, v in enumerate(plan.variants)}
    for v in plan.variants:
        assert all(position[d] < position[v.id] for d in v.depends_on), v.id
    new = [v for v in plan.variants if v.stage in ("bitsandbytes", "deepspeed")]
    assert {(v.stage, dict(v.variant)["gpu_target"]) for v in new} == {
        ("bitsandbytes", "gfx942"), ("bitsandbytes", "gfx90a"), ("deepspeed", "gfx942"), ("deepspeed", "gfx90a")}
    for v in new:
        gfx = dict(v.variant)["gpu_target"]
        torch = [plan.get(d) for d in v.depends_on if plan.get(d).stage == "pytorch"]
        assert [t.build_string.split("_")[1] for t in torch] == [gfx]
        assert {plan.get(d).stage for d in v.depends_on} >= {"pytorch", "rocm-version", "amdgpu-target"}
    by_env = {e: {v.stage for v in plan.variants if e in v.environments} for e in names}
    assert "bitsandbytes" in by_env["mi300x-qlora"] and "deepspeed" not in by_env["mi300x-qlora"]
    assert "deepspeed" in by_env["mi300x-deepspeed"] and "bitsandbytes" not in by_env["mi300x-deepspeed"]
    assert {"bitsandbytes", "deepspeed"} <= by_env["mi250-qlora"]


def test_plan_reports_qlora_on_a_target_bitsandbytes_lacks(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "pixi.toml").write_text(manifest_with_gfx908("mi100-qlora", ("rocm72", "gfx908", "qlora")))
    assert main(["plan", "-e", "mi100-qlora", "--manifest-path", str(tmp_path / "pixi.toml"),
                 "--recipes-dir", str(RECIPES)]) == 0
    out = capsys.readouterr().out
    assert "skipped bitsandbytes-0.50.1-rocm72_gfx908" in out and "bnb_first_rocm" in out


# ----------------------------------------------------------------------------- lock


def qlora_packages(torch_version: str = "2.12.1") -> list[Pkg]:
    """bitsandbytes and deepspeed test builds per target, pinned like the recipes pin them."""
    pkgs = []
    for gfx, isa in TARGETS.items():
        identity = (f"amdgpu-target * {gfx}", "rocm-version 7.2.*")
        torch = f"pytorch =={torch_version} rocm72_{gfx}_py312_*"
        pkgs.append(Pkg("bitsandbytes", "0.50.1", f"rocm72_{gfx}_py312_h0a1b2c3_0",
                        depends=(py(), torch, "numpy", *identity), constrains=(f"__amdgpu_arch =={isa}",)))
        pkgs.append(Pkg("deepspeed", "0.18.4", f"rocm72_{gfx}_py312_h4d5e6f7_0",
                        depends=(py(), torch, "numpy", *identity), constrains=(f"__amdgpu_arch =={isa}",)))
    # A newer pytorch in the private channel that no bitsandbytes/deepspeed was built against.
    pkgs.append(Pkg("pytorch", "2.12.9", "rocm72_gfx942_py312_h9f9f9f9_0",
                    depends=(py(), "numpy", "amdgpu-target * gfx942", "rocm-version 7.2.*"),
                    constrains=("__amdgpu_arch ==9.4.2",)))
    return pkgs


@pytest.fixture(scope="module")
def qlora_channels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("qlora-channels")
    return {"forge": build_channel(root / "forge", forge_packages()),
            "private": build_channel(root / "private", private_packages() + qlora_packages())}


QLORA_FEATURES = FEATURE_TABLES + """
[feature.qlora.dependencies]
bitsandbytes = "0.50.*"

[feature.deepspeed.dependencies]
deepspeed = "0.18.*"

[environments]
mi300x-qlora = ["rocm72", "gfx942", "train", "qlora"]
mi300x-deepspeed = ["rocm72", "gfx942", "train", "deepspeed"]
mi250-qlora = ["rocm72", "gfx90a", "train", "qlora", "deepspeed"]
"""


def test_lock_workspace_with_qlora_and_deepspeed_environments(qlora_channels: dict[str, Path],
                                                              tmp_path: Path) -> None:
    (tmp_path / "pixi.toml").write_text(manifest(qlora_channels["private"].as_uri(),
                                                 qlora_channels["forge"].as_uri(), features=QLORA_FEATURES))
    assert main(["lock", "--manifest-path", str(tmp_path / "pixi.toml")]) == 0
    lock = tmp_path / "pixi.lock"
    qlora, ds, mi250 = (by_name(lock, e) for e in ("mi300x-qlora", "mi300x-deepspeed", "mi250-qlora"))
    assert qlora["bitsandbytes"].startswith("0.50.1 rocm72_gfx942_") and "deepspeed" not in qlora
    assert ds["deepspeed"].startswith("0.18.4 rocm72_gfx942_") and "bitsandbytes" not in ds
    assert mi250["bitsandbytes"].startswith("0.50.1 rocm72_gfx90a_")
    assert mi250["deepspeed"].startswith("0.18.4 rocm72_gfx90a_")
    # The exact-build pin holds pytorch at the build bitsandbytes/deepspeed were made against,
    # although the private channel offers a newer gfx942 pytorch.
    for env in (qlora, ds):
        assert env["pytorch"] == "2.12.1 rocm72_gfx942_py312_h1a2b3c4_0"
    assert mi250["pytorch"].startswith("2.12.1 rocm72_gfx90a_")
    # The conda exports pin the new packages too.
    env_yml = (tmp_path / "envs" / "mi300x-qlora" / "environment.yml").read_text()
    assert "bitsandbytes=0.50.1=rocm72_gfx942_" in env_yml
    assert main(["lock", "--manifest-path", str(tmp_path / "pixi.toml"), "--check"]) == 0


def test_build_gate_checks_the_rocm_components_of_the_packages_it_builds(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # `rocmlock build` runs doctor first; the packages it is about to build decide which host-ROCm components
    # doctor checks (tools/rocmlock/data/rocm_components.toml: bitsandbytes').
    from rocmlock.build.builder import doctor_gate
    from rocmlock.host import doctor

    ws = load_workspace(ROOT / "pixi.toml")
    plan = make_plan(ws, ["mi300x-qlora"])
    seen: dict[str, object] = {}

    def fake_run_doctor(targets: object, **kw: object) -> doctor.DoctorReport:
        seen.update(kw)
        return doctor.DoctorReport((), (), 1)

    monkeypatch.setattr(doctor, "run_doctor", fake_run_doctor)
    doctor_gate(ws, plan, tmp_path)
    packages = seen["packages"]
    assert isinstance(packages, tuple) and "bitsandbytes" in packages and "pytorch" in packages
    assert "deepspeed" not in packages
    # flash-attn compiles its CK extension for gfx942 (its components are checked), nothing on gfx1100's Triton
    # backend (rocm_components.toml).
    assert "flash-attn" in packages
    doctor_gate(ws, make_plan(ws, ["w7900"]), tmp_path)
    assert "flash-attn" not in seen["packages"] and "pytorch" in seen["packages"]  # type: ignore[operator]
