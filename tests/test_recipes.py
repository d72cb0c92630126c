"""The recipes: every variant of the shipped matrix renders, skips agree with the GPU table,
identity (build string, run deps, constraints) is right, the metapackages really build, index and
install, the activation script behaves, and the build scripts pass bash -n and shellcheck."""

from __future__ import annotations

import asyncio
import fnmatch
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import rattler_build as rb
from channels import solve_on_gpu_host
from rattler import install
from rattler.index import index_fs
from rocmlock.build.recipes import Matrix, load_matrix, render_recipe, spec_name
from rocmlock.errors import InputError
from rocmlock.gpu.targets import get_target
from shipped import ARCH_BUILD, RECIPES, script_env, variant_grid

ARCH_RECIPES = ("pytorch-rocm", "flash-attn-rocm")
OURS = ("pytorch-rocm", "flash-attn-rocm", "llamafactory", "rocm-version", "amdgpu-target")


@pytest.fixture(scope="module")
def rendered(matrix: Matrix) -> dict[str, list]:
    return {name: render_recipe(RECIPES / name / "recipe.yaml", matrix) for name in OURS}


def expected_skip(recipe: str, rocm: str, gfx: str) -> bool:
    """The skip rule straight from rocmlock.gpu.targets, to hold the recipes' own skip_reason to."""
    target = get_target(gfx)
    if not target.supports_rocm(rocm):
        return True
    return recipe == "flash-attn-rocm" and not (target.flash_attn_ck or target.flash_attn_triton)


def test_shipped_matrix_renders_every_valid_variant_and_no_invalid_one(
    matrix: Matrix, rendered: dict
) -> None:
    combos = variant_grid(matrix)
    for name in ARCH_RECIPES:
        seen = {
            (v.variant_value("rocm_version"), v.variant_value("gpu_target"), v.variant_value("python")): v
            for v in rendered[name]
        }
        assert set(seen) == combos, name
        valid = {c for c, v in seen.items() if not v.skipped}
        assert valid == {c for c in combos if not expected_skip(name, c[0], c[1])}, name
        assert valid, name
    # gfx908 has neither flash-attn backend: the shipped matrix holds an invalid flash-attn variant.
    gfx908 = [v for v in rendered["flash-attn-rocm"] if v.variant_value("gpu_target") == "gfx908"]
    assert gfx908 and all("no CK kernels for gfx908" in v.skip_reason for v in gfx908)
    assert len(rendered["llamafactory"]) == 1 and not rendered["llamafactory"][0].skipped
    assert {v.build_string for v in rendered["amdgpu-target"]} == set(matrix.get("gpu_target"))
    # One rocm-version package per ROCm of the matrix (7.2 and 7.14: rattler-build orders them as strings).
    assert sorted(v.version for v in rendered["rocm-version"]) == sorted(matrix.get("rocm_version"))
    assert {"7.2", "7.14"} <= set(matrix.get("rocm_version"))


def test_gfx950_needs_rocm_7_and_the_reason_says_so(matrix: Matrix) -> None:
    older = matrix.narrowed(
        {"rocm_version": ["6.4", "7.2"], "gpu_target": ["gfx950", "gfx942"], "python": ["3.12"]}
    )
    for name in ARCH_RECIPES:
        by = {
            (v.variant_value("rocm_version"), v.variant_value("gpu_target")): v
            for v in render_recipe(RECIPES / name / "recipe.yaml", older)
        }
        assert "gfx950 needs ROCm >= 7.0" in by[("6.4", "gfx950")].skip_reason
        assert "asks ROCm 6.4" in by[("6.4", "gfx950")].skip_reason
        assert not by[("7.2", "gfx950")].skipped and not by[("6.4", "gfx942")].skipped


def test_build_strings_unique_per_rocm_target_python(rendered: dict) -> None:
    for name in ARCH_RECIPES:
        strings = [v.build_string for v in rendered[name]]
        assert len(set(strings)) == len(strings), name
        for v in rendered[name]:
            m = ARCH_BUILD.match(v.build_string)
            assert m, v.build_string
            assert m["rocm"] == v.variant_value("rocm_version").replace(".", "")
            assert m["gfx"] == v.variant_value("gpu_target")
            assert m["py"] == v.variant_value("python").replace(".", "")


def test_gpu_identity_in_run_requirements_and_constraints(rendered: dict) -> None:
    for name in ARCH_RECIPES:
        for v in rendered[name]:
            gfx, rocm = v.variant_value("gpu_target"), v.variant_value("rocm_version")
            assert f"amdgpu-target * {gfx}" in v.specs("run")
            assert f"rocm-version {rocm}.*" in v.specs("run")
            # One virtual-package guard (pytorch also constrains libopenblas: test_pytorch_pins_openmp_openblas).
            assert [c for c in v.run_constraints if c.startswith("__")] == [f"__amdgpu_arch =={get_target(gfx).isa}"]
    for v in rendered["amdgpu-target"]:
        assert v.subdir == "noarch"
        assert v.run_constraints == (f"__amdgpu_arch =={get_target(v.build_string).isa}",)


def test_flash_attn_pins_the_exact_pytorch_build_it_was_built_against(rendered: dict) -> None:
    torches = {
        (v.variant_value("rocm_version"), v.variant_value("gpu_target"), v.variant_value("python")): v
        for v in rendered["pytorch-rocm"]
    }
    for fa in rendered["flash-attn-rocm"]:
        key = (fa.variant_value("rocm_version"), fa.variant_value("gpu_target"), fa.variant_value("python"))
        torch = torches[key]
        for section in ("host", "run"):
            (pin,) = [s for s in fa.specs(section) if s.startswith("pytorch ")]
            _, version, build = pin.split()
            assert version == f"=={torch.version}"
            assert fnmatch.fnmatchcase(torch.build_string, build)
            others = [t for k, t in torches.items() if k != key]
            assert not any(fnmatch.fnmatchcase(t.build_string, build) for t in others)


def test_flash_attn_backend_and_pytorch_aotriton_follow_the_table(matrix: Matrix, rendered: dict) -> None:
    for gfx in ("gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1201"):
        target = get_target(gfx)
        env = script_env(matrix, "flash-attn-rocm", gfx)
        assert env["ROCMLOCK_FLASH_ATTN_BACKEND"] == ("ck" if target.flash_attn_ck else "triton")
        assert env["ROCMLOCK_GPU_TARGET"] == gfx
        fa = next(
            v
            for v in rendered["flash-attn-rocm"]
            if v.variant_value("gpu_target") == gfx and v.variant_value("python") == "3.12"
        )
        assert ("triton" in {spec_name(s) for s in fa.specs("run")}) == (not target.flash_attn_ck)
    for gfx in ("gfx908", "gfx942"):
        env = script_env(matrix, "pytorch-rocm", gfx)
        assert env["ROCMLOCK_AOTRITON"] == ("1" if get_target(gfx).aotriton else "0")
    assert script_env(matrix, "pytorch-rocm", "gfx908")["ROCMLOCK_AOTRITON"] == "0"


def test_llamafactory_is_noarch_with_upstream_bounds(rendered: dict) -> None:
    (lf,) = rendered["llamafactory"]
    assert lf.subdir == "noarch" and lf.package == "llamafactory"
    run = lf.specs("run")
    assert "pytorch >=2.4.0" in run
    assert any(s.startswith("transformers >=4.55.0,<=") for s in run)
    assert all(not s.startswith("torch ") for s in run), "torch is called pytorch on conda-forge"
    assert "python >=3.11" in run


def test_sources_pinned_by_url_and_sha256(matrix: Matrix) -> None:
    from rocmlock.build.recipes import render_config

    one = matrix.narrowed({"gpu_target": ["gfx942"], "python": ["3.12"], "rocm_version": ["7.2"]})
    versions = dict(one.values)
    for name, key in (
        ("pytorch-rocm", "pytorch"),
        ("flash-attn-rocm", "flash_attn"),
        ("llamafactory", "llamafactory"),
    ):
        (rv,) = rb.Stage0Recipe.from_file(str(RECIPES / name / "recipe.yaml")).render(
            one.to_variant_config(), render_config()
        )
        source = rv.recipe.to_dict()["source"][0]  # pytorch's AOTriton sources: tests/test_aotriton_sources.py
        assert re.fullmatch(r"[0-9a-f]{64}", source["sha256"]), name
        assert source["sha256"] == versions[f"{key}_sha256"][0]
        assert source["url"].startswith("https://") and source["url"].endswith(
            f"{versions[f'{key}_version'][0]}.tar.gz"
        )


def test_unknown_gpu_target_in_matrix_is_an_input_error(tmp_path: Path) -> None:
    (tmp_path / "variants.yaml").write_text('rocm_version: ["7.2"]\ngpu_target: [gfx943]\npython: ["3.12"]\n')
    with pytest.raises(InputError, match="did you mean 'gfx942'"):
        load_matrix(tmp_path)


# ----------------------------------------------------------------------------- build scripts


def _shell_files() -> list[Path]:
    return sorted([*RECIPES.glob("*/build.sh"), RECIPES / "rocm-build-env.sh"])


def test_build_scripts_pass_bash_n() -> None:
    for script in _shell_files():
        result = subprocess.run(["bash", "-n", str(script)], check=False, capture_output=True, text=True)
        assert result.returncode == 0, f"{script}: {result.stderr}"


def test_build_and_activation_scripts_pass_shellcheck() -> None:
    assert shutil.which("shellcheck"), "shellcheck is missing: apt-get install shellcheck (.ci/run does)"
    scripts = [str(p) for p in _shell_files()]
    result = subprocess.run(
        ["shellcheck", "-x", "-P", "SCRIPTDIR", *scripts], check=False, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout
    sourced = [
        *RECIPES.glob("rocm-version/*activate.sh"),
        *RECIPES.glob("flash-attn-rocm/*activate-triton.sh"),
    ]
    assert len(sourced) == 4
    result = subprocess.run(["shellcheck", *map(str, sourced)], check=False, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


# ----------------------------------------------------------------------------- metapackages, for real


@pytest.fixture(scope="module")
def meta_channel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """rocm-version 7.2 and amdgpu-target gfx942/gfx90a built by rattler-build from the recipes, indexed."""
    from rocmlock.build.recipes import render_config

    channel = tmp_path_factory.mktemp("meta-channel")
    one = load_matrix(RECIPES).narrowed({"rocm_version": ["7.2"], "gpu_target": ["gfx942", "gfx90a"]})
    tool = rb.ToolConfiguration(test_strategy="native")
    for name in ("rocm-version", "amdgpu-target"):
        stage0 = rb.Stage0Recipe.from_file(str(RECIPES / name / "recipe.yaml"))
        for rv in stage0.render(one.to_variant_config(), render_config()):
            rv.run_build(tool_config=tool, output_dir=str(channel), channels=[], no_build_id=True)
    shutil.rmtree(channel / "bld", ignore_errors=True)
    asyncio.run(index_fs(str(channel)))
    return channel


def _solve(channel: Path, specs: list[str], isa: str) -> list:
    return solve_on_gpu_host([channel], specs, isa)


@pytest.fixture(scope="module")
def meta_prefix(meta_channel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    records = _solve(meta_channel, ["rocm-version 7.2.*", "amdgpu-target * gfx942"], "9.4.2")
    prefix = tmp_path_factory.mktemp("prefix")
    asyncio.run(install(records, str(prefix), show_progress=False))
    return prefix


def test_metapackages_build_index_and_install(meta_channel: Path, meta_prefix: Path) -> None:
    names = sorted(p.name for p in (meta_channel / "noarch").glob("*.conda"))
    assert names[:2] == ["amdgpu-target-1-gfx90a.conda", "amdgpu-target-1-gfx942.conda"]
    assert len(names) == 3 and re.fullmatch(r"rocm-version-7\.2-h[0-9a-f]{7}_0\.conda", names[2])
    repodata = (meta_channel / "noarch" / "repodata.json").read_text()
    assert "amdgpu-target-1-gfx942.conda" in repodata and "__amdgpu_arch ==9.4.2" in repodata
    installed = sorted(p.name for p in (meta_prefix / "conda-meta").glob("*.json"))
    assert [n.rsplit("-", 2)[0] for n in installed if n != "history"] == ["amdgpu-target", "rocm-version"]
    assert "amdgpu-target-1-gfx942.json" in installed
    script = meta_prefix / "etc/conda/activate.d/rocm-version_activate.sh"
    assert script.is_file() and "7.2" in script.read_text() and "@ROCM_VERSION@" not in script.read_text()
    assert (meta_prefix / "etc/conda/deactivate.d/rocm-version_deactivate.sh").is_file()


def test_amdgpu_target_mutex_refuses_another_gpu(meta_channel: Path) -> None:
    with pytest.raises(Exception, match="amdgpu"):
        _solve(meta_channel, ["amdgpu-target * gfx942"], "9.0.10")
    records = _solve(meta_channel, ["amdgpu-target"], "9.0.10")
    assert [str(r.build) for r in records] == ["gfx90a"]


def _activate(prefix: Path, env: dict[str, str], tail: str = "") -> subprocess.CompletedProcess[str]:
    script = prefix / "etc/conda/activate.d/rocm-version_activate.sh"
    body = f'. "{script}"\necho "ROCM_PATH=${{ROCM_PATH:-}}"\necho "HIP_PATH=${{HIP_PATH:-}}"\n{tail}'
    return subprocess.run(
        ["bash", "-c", body], env={"PATH": "/usr/bin:/bin", **env}, capture_output=True, text=True, check=True
    )


def _fake_rocm(root: Path, version: str) -> Path:
    (root / ".info").mkdir(parents=True, exist_ok=True)
    (root / ".info/version").write_text(f"{version}\n")
    return root


def test_activation_points_at_the_distro_rocm_when_unset(meta_prefix: Path) -> None:
    # This host (and CI's) has Debian 12's ROCm 5.2 in /usr (.ci/run installs hipcc) and no /opt/rocm: the
    # activation points at /usr, never at a missing /opt/rocm, and says where the device libraries are.
    # Both ROCm 7.2.4 layouts: tests/test_rocm72_env.py.
    assert not Path("/opt/rocm").exists() and Path("/usr/include/hip/hip_runtime.h").is_file()
    out = _activate(meta_prefix, {}, 'echo "HIP_DEVICE_LIB_PATH=${HIP_DEVICE_LIB_PATH:-}"')
    assert "ROCM_PATH=/usr\n" in out.stdout and "HIP_PATH=/usr\n" in out.stdout
    assert "HIP_DEVICE_LIB_PATH=/usr/lib/x86_64-linux-gnu/amdgcn/bitcode\n" in out.stdout
    # Debian 12's 5.2 has neither .info/version nor rocm-core's header: the version comes from hipconfig --version,
    # as rocm-build-env.sh and doctor read it (the activation compared nothing here and said nothing).
    assert "this environment was built for ROCm 7.2, but the ROCm at /usr is 5.2\n" in out.stderr


def test_activation_keeps_hip_path_and_follows_it(meta_prefix: Path, tmp_path: Path) -> None:
    rocm = _fake_rocm(tmp_path / "rocm-7.2.0", "7.2.0-43")
    out = _activate(meta_prefix, {"HIP_PATH": str(rocm)})
    assert f"ROCM_PATH={rocm}\n" in out.stdout and f"HIP_PATH={rocm}\n" in out.stdout
    assert out.stderr == ""
    rocm_other = _fake_rocm(tmp_path / "other", "7.2.1")
    out = _activate(meta_prefix, {"HIP_PATH": str(rocm_other), "ROCM_PATH": str(rocm)})
    assert f"ROCM_PATH={rocm}\n" in out.stdout and f"HIP_PATH={rocm_other}\n" in out.stdout


def test_activation_warns_on_host_version_mismatch(meta_prefix: Path, tmp_path: Path) -> None:
    rocm = _fake_rocm(tmp_path / "rocm-6.4", "6.4.1-120")
    out = _activate(meta_prefix, {"ROCM_PATH": str(rocm)})
    # The version as the build and doctor read it: AMD's -<build> suffix is not part of it.
    assert "built for ROCm 7.2, but the ROCm at" in out.stderr and f"{rocm} is 6.4.1\n" in out.stderr
    assert f"HIP_PATH={rocm}\n" in out.stdout
    # 7.20 is not 7.2: the match is on the whole minor version.
    assert (
        "built for ROCm 7.2"
        in _activate(meta_prefix, {"ROCM_PATH": str(_fake_rocm(tmp_path / "x", "7.20.0"))}).stderr
    )


def test_deactivation_undoes_only_what_activation_set(meta_prefix: Path, tmp_path: Path) -> None:
    rocm = _fake_rocm(tmp_path / "rocm", "7.2.0")
    deactivate = meta_prefix / "etc/conda/deactivate.d/rocm-version_deactivate.sh"
    tail = f'. "{deactivate}"\necho "after ROCM_PATH=${{ROCM_PATH:-unset}} HIP_PATH=${{HIP_PATH:-unset}}"\n'
    out = _activate(meta_prefix, {"ROCM_PATH": str(rocm)}, tail)
    assert f"after ROCM_PATH={rocm} HIP_PATH=unset" in out.stdout


# ----------------------------------------------------------------------------- the build environment


# Every recipe whose build.sh runs rocmlock_rocm_env (finding 4 of issue 13: bitsandbytes and deepspeed
# passed none of the host's settings into rattler-build's isolated build).
ROCM_BUILD_RECIPES = ("pytorch-rocm", "flash-attn-rocm", "torchvision-rocm", "torchaudio-rocm",
                      "bitsandbytes-rocm", "deepspeed-rocm")


def test_build_host_settings_reach_the_build_script(matrix: Matrix, monkeypatch: pytest.MonkeyPatch) -> None:
    # rattler-build's strict isolation forwards nothing: the recipe passes them explicitly.
    assert sorted(ROCM_BUILD_RECIPES) == sorted(
        p.parent.name for p in RECIPES.glob("*/build.sh") if "rocmlock_rocm_env" in p.read_text())
    for recipe in ROCM_BUILD_RECIPES:
        env = script_env(matrix, recipe, "gfx942")
        # Unset stays unset (empty values are left out of the script's environment): rocm-build-env.sh then
        # finds the host's ROCm itself (/opt/rocm, hipconfig --path, a distribution's /usr), no baked /opt/rocm.
        assert "ROCM_PATH" not in env and "MAX_JOBS" not in env and "HIP_PATH" not in env, recipe
    monkeypatch.setenv("HIP_PATH", "/opt/rocm-7.2.0")
    monkeypatch.setenv("ROCM_PATH", "/opt/rocm-7.2.0")
    monkeypatch.setenv("HIP_DEVICE_LIB_PATH", "/opt/rocm-7.2.0/amdgcn/bitcode")
    monkeypatch.setenv("MAX_JOBS", "7")
    monkeypatch.setenv("CCACHE_DIR", "/var/cache/ccache")
    for recipe in ROCM_BUILD_RECIPES:
        env = script_env(matrix, recipe, "gfx942")
        assert env["ROCM_PATH"] == "/opt/rocm-7.2.0" and env["HIP_PATH"] == "/opt/rocm-7.2.0", recipe
        assert env["HIP_DEVICE_LIB_PATH"] == "/opt/rocm-7.2.0/amdgcn/bitcode", recipe
        assert env["MAX_JOBS"] == "7" and env["CCACHE_DIR"] == "/var/cache/ccache", recipe
        assert env["ROCMLOCK_ROCM_VERSION"] == "7.2", recipe


def _build_env(tmp_path: Path, env: dict[str, str], body: str) -> subprocess.CompletedProcess[str]:
    script = f'set -euo pipefail\n. "{RECIPES / "rocm-build-env.sh"}"\n{body}'
    return subprocess.run(
        ["bash", "-c", script],
        env={"PATH": "/usr/bin:/bin", **env},
        check=False,
        capture_output=True,
        text=True,
    )


def _fake_rocm_tree(root: Path, version: str) -> Path:
    _fake_rocm(root, version)
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "hipcc").write_text("#!/bin/sh\n")
    (root / "bin" / "hipcc").chmod(0o755)
    (root / "lib/llvm/amdgcn/bitcode").mkdir(parents=True)
    (root / "lib/llvm/amdgcn/bitcode/ocml.bc").write_text("")
    return root


def test_build_env_sets_every_rocm_path_explicitly(tmp_path: Path) -> None:
    rocm = _fake_rocm_tree(tmp_path / "rocm", "7.2.0-43")
    out = _build_env(
        tmp_path,
        {"ROCM_PATH": str(rocm), "ROCMLOCK_ROCM_VERSION": "7.2", "ROCMLOCK_GPU_TARGET": "gfx942"},
        'rocmlock_rocm_env\necho "$ROCM_PATH|$ROCM_HOME|$HIP_PATH|$HIP_DEVICE_LIB_PATH|$HIP_PLATFORM"',
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"{rocm}|{rocm}|{rocm}|{rocm}/lib/llvm/amdgcn/bitcode|amd"


def test_build_env_refuses_a_host_rocm_of_another_version_or_none(tmp_path: Path) -> None:
    rocm = _fake_rocm_tree(tmp_path / "rocm", "6.4.1")
    base = {"ROCMLOCK_ROCM_VERSION": "7.2", "ROCMLOCK_GPU_TARGET": "gfx942"}
    out = _build_env(tmp_path, {**base, "HIP_PATH": str(rocm)}, "rocmlock_rocm_env")
    assert out.returncode == 1 and "for ROCm 7.2" in out.stderr and "'6.4.1'" in out.stderr
    out = _build_env(tmp_path, {**base, "ROCM_PATH": str(tmp_path / "none")}, "rocmlock_rocm_env")
    assert out.returncode == 1 and out.stderr == (f"rocmlock build: ROCM_PATH={tmp_path / 'none'} does not exist; point "
                                                  "it at a ROCm 7.2 install, or unset it to use /opt/rocm or /usr\n")
    (tmp_path / "empty").mkdir()
    out = _build_env(tmp_path, {**base, "ROCM_PATH": str(tmp_path / "empty")}, "rocmlock_rocm_env")
    assert out.returncode == 1 and "no ROCm at" in out.stderr


def test_max_jobs_from_memory_unless_set(tmp_path: Path) -> None:
    out = _build_env(tmp_path, {"MAX_JOBS": "3"}, 'rocmlock_max_jobs\necho "$MAX_JOBS"')
    assert out.stdout.strip() == "3"
    out = _build_env(tmp_path, {"MAX_JOBS": ""}, 'rocmlock_max_jobs\necho "$MAX_JOBS"')
    jobs = int(out.stdout.strip())
    # ~5 GB per job, at least 1, at most one per CPU this process may use.
    assert 1 <= jobs <= len(os.sched_getaffinity(0))


def test_flash_attn_triton_activation_sets_the_import_switch() -> None:
    activate = RECIPES / "flash-attn-rocm" / "activate-triton.sh"
    deactivate = RECIPES / "flash-attn-rocm" / "deactivate-triton.sh"
    body = (
        f'. "{activate}"\necho "on=$FLASH_ATTENTION_TRITON_AMD_ENABLE"\n'
        f'. "{deactivate}"\necho "off=${{FLASH_ATTENTION_TRITON_AMD_ENABLE:-unset}}"\n'
    )
    out = subprocess.run(["sh", "-c", body], env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True, check=True)
    assert out.stdout == "on=TRUE\noff=unset\n"
    # A user's explicit choice wins and survives deactivation.
    env = {"PATH": "/usr/bin:/bin", "FLASH_ATTENTION_TRITON_AMD_ENABLE": "FALSE"}
    out = subprocess.run(["sh", "-c", body], env=env, capture_output=True, text=True, check=True)
    assert out.stdout == "on=FALSE\noff=FALSE\n"
    build = (RECIPES / "flash-attn-rocm" / "build.sh").read_text()
    assert "activate-triton.sh" in build and "etc/conda/activate.d/flash-attn_activate.sh" in build


# ----------------------------------------------------------------------------- issue 13's recipe findings


def _rendered(matrix: Matrix, recipe: str, gfx: str = "gfx942", rocm: str = "7.2") -> dict:  # type: ignore[type-arg]
    from rocmlock.build.recipes import render_config

    one = matrix.narrowed({"gpu_target": [gfx], "python": ["3.12"], "rocm_version": [rocm]})
    (rv,) = rb.Stage0Recipe.from_file(str(RECIPES / recipe / "recipe.yaml")).render(
        one.to_variant_config(), render_config())
    return rv.recipe.to_dict()  # type: ignore[no-any-return]


def test_pytorch_arch_test_passes_on_a_gpu_less_build_host(matrix: Matrix, tmp_path: Path) -> None:
    # Finding 3: torch.cuda.get_arch_list() is [] where no GPU is visible (the build host); the recipe test reads
    # torch._C._cuda_getArchFlags(), the compiled-in list get_arch_list() returns on a GPU host. Run the rendered
    # test command against a stand-in torch that behaves as a ROCm build on a GPU-less host.
    script = next(line for t in _rendered(matrix, "pytorch-rocm")["tests"] for line in t.get("script", [])
                  if "archs" in line)
    assert "get_arch_list" not in script
    # rattler-build renders the test's Jinja when it runs it.
    script = script.replace("${{ gpu_target }}", "gfx942")
    command = re.fullmatch(r'python -c "(.*)"', script.strip()).group(1)  # type: ignore[union-attr]
    for flags, code in (("gfx942", 0), ("gfx90a", 1)):
        (tmp_path / "torch").mkdir(exist_ok=True)
        (tmp_path / "torch/__init__.py").write_text(
            f"class _C:\n    _cuda_getArchFlags = staticmethod(lambda: {flags!r})\n"
            "class cuda:\n    get_arch_list = staticmethod(lambda: [])\n")
        out = subprocess.run(["python", "-c", command], env={**os.environ, "PYTHONPATH": str(tmp_path)},
                             capture_output=True, text=True, check=False)
        assert out.returncode == code, out.stderr
    assert "target gfx942 missing from ['gfx90a']" in out.stderr


def test_pytorch_pins_openmp_openblas(matrix: Matrix) -> None:
    # Finding 7: conda-forge's pytorch constrains libopenblas to its OpenMP build (pthreads OpenBLAS next to
    # PyTorch's OpenMP warns and can hang): in the build prefix and in every environment that installs it.
    reqs = _rendered(matrix, "pytorch-rocm")["requirements"]
    assert "libopenblas * openmp_*" in reqs["host"]
    assert "libopenblas * openmp_*" in reqs["run_constraints"]


def test_pytorch_offline_aotriton_from_a_prepared_prefix(matrix: Matrix, monkeypatch: pytest.MonkeyPatch,
                                                         tmp_path: Path) -> None:
    # Finding 5: with USE_FLASH_ATTENTION=1, PyTorch's aotriton.cmake downloads AOTriton at configure time unless
    # AOTRITON_INSTALLED_PREFIX names an installed one; the recipe passes that through to build.sh, which checks it.
    assert "AOTRITON_INSTALLED_PREFIX" not in script_env(matrix, "pytorch-rocm", "gfx942")
    monkeypatch.setenv("AOTRITON_INSTALLED_PREFIX", str(tmp_path / "aotriton"))
    assert script_env(matrix, "pytorch-rocm", "gfx942")["AOTRITON_INSTALLED_PREFIX"] == str(tmp_path / "aotriton")
    build = (RECIPES / "pytorch-rocm/build.sh").read_text()
    block = build[build.index('if [ "${ROCMLOCK_AOTRITON}" = 1 ] && '):build.index("\nfi\n", build.index(
        'elif [ "${ROCMLOCK_AOTRITON}" = 1 ]')) + 4]
    body = 'rocmlock_die() { echo "$*" >&2; exit 1; }\n' + block + 'echo "prefix=${AOTRITON_INSTALLED_PREFIX:-}"\n'
    # What the recipe renders for gfx942 (its kernel image is known whether or not a prefix overrides the pins).
    env = {"PATH": "/usr/bin:/bin", "ROCMLOCK_AOTRITON": "1", "PKG_VERSION": "2.12.1", "ROCMLOCK_GPU_TARGET": "gfx942",
           "ROCMLOCK_AOTRITON_IMAGE": "amd-gfx942", "AOTRITON_INSTALLED_PREFIX": str(tmp_path / "aotriton")}
    out = subprocess.run(["bash", "-c", body], env=env, capture_output=True, text=True, check=False)
    assert out.returncode == 1 and "has no lib/libaotriton_v2.so" in out.stderr
    (tmp_path / "aotriton/lib").mkdir(parents=True)
    (tmp_path / "aotriton/lib/libaotriton_v2.so").write_text("")
    out = subprocess.run(["bash", "-c", body], env=env, capture_output=True, text=True, check=True)
    assert out.stdout == f"prefix={tmp_path / 'aotriton'}\n"
    out = subprocess.run(["bash", "-c", body], env={**env, "AOTRITON_INSTALLED_PREFIX": ""}, capture_output=True,
                         text=True, check=True)
    assert "will be downloaded at configure time" in out.stderr


def test_build_env_names_every_missing_rocm_component(tmp_path: Path) -> None:
    # bitsandbytes' build needs hipBLAS, hipBLASLt, hipRAND, rocBLAS, hipCUB and rocPRIM from the host ROCm
    # (tools/rocmlock/data/rocm_components.toml); a ROCm with only hipBLAS stops before CMake, naming the rest.
    rocm = _fake_rocm_tree(tmp_path / "rocm", "7.2.0")
    (rocm / "include/hipblas").mkdir(parents=True)
    (rocm / "include/hipblas/hipblas.h").write_text("")
    env = {"ROCM_PATH": str(rocm), "ROCMLOCK_ROCM_VERSION": "7.2", "ROCMLOCK_GPU_TARGET": "gfx942",
           "RECIPE_DIR": str(RECIPES / "bitsandbytes-rocm"), "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}
    out = _build_env(tmp_path, env, "rocmlock_rocm_env\nrocmlock_require_rocm_components bitsandbytes")
    assert out.returncode == 1
    message = out.stderr.strip().splitlines()[-1]
    assert message.startswith(f"rocmlock build: bitsandbytes needs these ROCm components, missing under {rocm}: ")
    for name in ("hipBLASLt (include/hipblaslt/hipblaslt.h; Debian/Ubuntu: libhipblaslt-dev, AMD: hipblaslt-dev)",
                 "hipRAND", "rocBLAS", "hipCUB (include/hipcub/hipcub.hpp", "rocPRIM"):
        assert name in message
    assert "hipBLAS (" not in message
    out = _build_env(tmp_path, env, "rocmlock_rocm_env\nrocmlock_require_rocm_components triton")
    assert out.returncode == 0, out.stderr  # nothing listed for it



@pytest.mark.parametrize("table", ["[components\n", "components = 1\n[packages]\nbitsandbytes = ['x']\n",
                                   "[components]\n[packages]\nbitsandbytes = ['hipcub']\n"])
def test_build_env_malformed_component_table_is_one_line(tmp_path: Path, table: str) -> None:
    # A hand-run rattler-build reaches rocmlock_require_rocm_components without rocmlock plan's validation of the
    # table: a malformed one stops the build with the reason and the file, not a Python traceback.
    rocm = _fake_rocm_tree(tmp_path / "rocm", "7.2.0")
    recipe_dir = tmp_path / "checkout/recipes/bitsandbytes-rocm"
    recipe_dir.mkdir(parents=True)
    data = tmp_path / "checkout/tools/rocmlock/data"
    data.mkdir(parents=True)
    (data / "rocm_components.toml").write_text(table)
    env = {"ROCM_PATH": str(rocm), "ROCMLOCK_ROCM_VERSION": "7.2", "ROCMLOCK_GPU_TARGET": "gfx942",
           "RECIPE_DIR": str(recipe_dir), "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}
    out = _build_env(tmp_path, env, "rocmlock_rocm_env\nrocmlock_require_rocm_components bitsandbytes")
    assert out.returncode == 1
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert lines[-1] == (f"rocmlock build: cannot read {recipe_dir}/../../tools/rocmlock/data/rocm_components.toml "
                         "(malformed; `rocmlock plan` names the key)")
    assert lines[-2].split(":")[0] in ("TOMLDecodeError", "TypeError", "KeyError")

def _component_table() -> dict:
    import tomllib

    return tomllib.loads((RECIPES.parent / "tools/rocmlock/data/rocm_components.toml").read_text())


_CK_COMMENT = ("        # The CK extension includes torch's HIP headers, which include hipBLAS, hipBLASLt, hipSPARSE and hipSOLVER\n"
               "        # headers from the host ROCm (tools/rocmlock/data/rocm_components.toml); the Triton backend compiles nothing.\n")


@pytest.mark.parametrize("package", sorted(_component_table()["packages"]))
def test_build_env_checks_every_row_and_its_recipe_calls_it(tmp_path: Path, package: str) -> None:
    # Each row of tools/rocmlock/data/rocm_components.toml: the recipe building that package checks it right after
    # rocmlock_rocm_env, and a ROCm without any of its components stops naming each with both packages.
    table = _component_table()
    recipe = next(p.parent for p in RECIPES.glob("*/recipe.yaml")
                  if re.search(rf"^  name: {re.escape(package)}$", p.read_text(), re.MULTILINE))
    script = (recipe / "build.sh").read_text()
    if package == "flash-attn":
        # Only the CK backend compiles an extension (rocm_components.toml): checked first thing in that branch.
        assert f"    ck)\n{_CK_COMMENT}        rocmlock_require_rocm_components {package}\n" in script
    else:
        assert f"rocmlock_rocm_env\nrocmlock_require_rocm_components {package}\n" in script
    rocm = _fake_rocm_tree(tmp_path / "rocm", "7.2.0")
    env = {"ROCM_PATH": str(rocm), "ROCMLOCK_ROCM_VERSION": "7.2", "ROCMLOCK_GPU_TARGET": "gfx942",
           "RECIPE_DIR": str(recipe), "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}
    out = _build_env(tmp_path, env, f"rocmlock_rocm_env\nrocmlock_require_rocm_components {package}")
    assert out.returncode == 1
    message = out.stderr.strip().splitlines()[-1]
    assert message.startswith(f"rocmlock build: {package} needs these ROCm components, missing under {rocm}: ")
    for key in table["packages"][package]:
        c = table["components"][key]
        assert f"{c['name']} (include/{c['header']}; Debian/Ubuntu: {c['debian']}, AMD: {c['amd']})" in message
    for key in table["packages"][package]:
        header = rocm / "include" / table["components"][key]["header"]
        header.parent.mkdir(parents=True, exist_ok=True)
        header.write_text("")
    out = _build_env(tmp_path, env, f"rocmlock_rocm_env\nrocmlock_require_rocm_components {package}")
    assert out.returncode == 0, out.stderr
