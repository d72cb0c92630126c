"""torchvision, torchaudio and the ROCm Triton: the recipes render for every variant with skips from
the GPU table, carry the GPU identity, pin the exact pytorch build (and pytorch/flash-attn the exact
Triton), their pinned sources and versions agree with recipes/variants.yaml and LLaMA-Factory's
bounds, the build scripts set the ROCm switches, a real solve picks exactly our builds, and
`rocmlock plan` orders the new stages between pytorch and llamafactory."""

from __future__ import annotations

import fnmatch
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import rattler_build as rb
from channels import Pkg, build_channel, py, solve_on_gpu_host
from rattler import Version, VersionSpec
from rocmlock.build.plan import make_plan
from rocmlock.build.recipes import Matrix, RenderedVariant, render_config, render_recipe, spec_name
from rocmlock.gpu.targets import get_target
from rocmlock.upstream.pins import load_table
from rocmlock.workspace.manifest import load_workspace
from shipped import ARCH_BUILD, RECIPES, ROOT, script_env, variant_grid

# recipe directory -> package, for the per-target extensions built against one pytorch build
EXTENSIONS = {"torchvision-rocm": "torchvision", "torchaudio-rocm": "torchaudio"}
NEW = (*EXTENSIONS, "triton-rocm")
# Triton JIT-compiles for the GPU it finds: one build per ROCm version and python, no gfx part.
TRITON_BUILD = re.compile(r"^rocm(?P<rocm>\d+)_py(?P<py>\d+)_h[0-9a-f]{7}_\d+$")
SHA256 = re.compile(r"[0-9a-f]{64}")


@pytest.fixture(scope="module")
def rendered(matrix: Matrix) -> dict[str, list[RenderedVariant]]:
    names = (*NEW, "pytorch-rocm", "flash-attn-rocm", "llamafactory")
    return {name: render_recipe(RECIPES / name / "recipe.yaml", matrix) for name in names}


def _key(v: RenderedVariant) -> tuple[str | None, ...]:
    return (v.variant_value("rocm_version"), v.variant_value("gpu_target"), v.variant_value("python"))


def _pinned(spec: str, candidates: list[RenderedVariant]) -> list[RenderedVariant]:
    """The rendered builds an ``name ==<ver> <build glob>`` spec matches."""
    _, version, build = spec.split()
    return [
        c for c in candidates if f"=={c.version}" == version and fnmatch.fnmatchcase(c.build_string, build)
    ]


# ----------------------------------------------------------------------------- rendering


@pytest.mark.parametrize("recipe", NEW)
@pytest.mark.parametrize("rocm", ["6.4", "7.2"])
def test_every_variant_renders_and_skips_follow_the_table(matrix: Matrix, recipe: str, rocm: str) -> None:
    variants = render_recipe(RECIPES / recipe / "recipe.yaml", matrix.narrowed({"rocm_version": [rocm]}))
    pythons, targets = matrix.get("python"), matrix.get("gpu_target")
    if recipe == "triton-rocm":
        assert sorted(v.variant_value("python") for v in variants) == sorted(pythons)
        assert all(v.variant_value("gpu_target") is None and not v.skipped for v in variants)
        return
    assert len(variants) == len(pythons) * len(targets)
    for v in variants:
        gfx = v.variant_value("gpu_target")
        assert v.package == EXTENSIONS[recipe]
        assert bool(v.skip_reason) == (not get_target(gfx).supports_rocm(rocm)), (gfx, rocm, v.skip_reason)
        if v.skip_reason:
            assert f"{gfx} needs ROCm >= " in v.skip_reason and "gpu_targets.toml" in v.skip_reason


def test_shipped_matrix_has_every_valid_variant_and_unique_build_strings(
    matrix: Matrix, rendered: dict
) -> None:
    combos = variant_grid(matrix)
    for recipe in EXTENSIONS:
        variants = rendered[recipe]
        assert {_key(v) for v in variants} == combos
        # Skipped exactly where the ROCm predates the target (gfx1152 and gfx1153 on 7.2), each saying why.
        for v in variants:
            rocm, gfx, _ = _key(v)
            assert v.skipped == (not get_target(gfx).supports_rocm(rocm)), (gfx, rocm)
            assert not v.skipped or f"{gfx} needs ROCm >= 7.14" in v.skip_reason
        strings = [v.build_string for v in variants]
        assert len(set(strings)) == len(strings)
        for v in variants:
            m = ARCH_BUILD.match(v.build_string)
            assert m, v.build_string
            rocm, gfx, python = _key(v)
            assert (m["rocm"], m["gfx"], m["py"]) == (rocm.replace(".", ""), gfx, python.replace(".", ""))
    tritons = rendered["triton-rocm"]
    rocms = matrix.get("rocm_version")
    assert len({v.build_string for v in tritons}) == len(tritons) == len(matrix.get("python")) * len(rocms)
    for v in tritons:
        m = TRITON_BUILD.match(v.build_string)
        assert m and m["py"] == v.variant_value("python").replace(".", "")
        assert m["rocm"] == v.variant_value("rocm_version").replace(".", "") and v.variant_value("rocm_version") in rocms
        assert v.package == "triton" and v.subdir == "linux-64"


def test_gpu_identity_in_run_requirements_and_constraints(rendered: dict) -> None:
    for recipe in EXTENSIONS:
        for v in rendered[recipe]:
            rocm, gfx, _ = _key(v)
            run = v.specs("run")
            assert f"amdgpu-target * {gfx}" in run and f"rocm-version {rocm}.*" in run
            assert f"amdgpu-target * {gfx}" in v.specs("host")
            assert v.run_constraints == (f"__amdgpu_arch =={get_target(gfx).isa}",)
    for v in rendered["triton-rocm"]:
        # ROCm-specific (the host's HIP runtime), not target-specific: no mutex, no arch constraint.
        assert f"rocm-version {v.variant_value('rocm_version')}.*" in v.specs("run") and v.run_constraints == ()
        assert "amdgpu-target" not in {spec_name(s) for s in v.specs("run")}


@pytest.mark.parametrize("recipe", sorted(EXTENSIONS))
def test_exact_pytorch_pin_matches_exactly_one_pytorch_build(rendered: dict, recipe: str) -> None:
    torches = rendered["pytorch-rocm"]
    for v in rendered[recipe]:
        (pin,) = [s for s in v.specs("run") if spec_name(s) == "pytorch"]
        assert pin in v.specs("host"), "built against the pytorch it runs with"
        (torch,) = _pinned(pin, torches)
        assert _key(torch) == _key(v)


def test_pytorch_and_flash_attn_triton_backend_pin_exactly_one_triton(rendered: dict) -> None:
    tritons = rendered["triton-rocm"]
    for torch in rendered["pytorch-rocm"]:
        (pin,) = [s for s in torch.specs("run") if spec_name(s) == "triton"]
        (triton,) = _pinned(pin, tritons)
        assert triton.variant_value("python") == torch.variant_value("python")
    for fa in rendered["flash-attn-rocm"]:
        pins = [s for s in fa.specs("run") if spec_name(s) == "triton"]
        if fa.skipped:
            continue
        if get_target(fa.variant_value("gpu_target")).flash_attn_ck:
            assert pins == [], "the CK backend gets Triton through pytorch only"
            continue
        (triton,) = _pinned(pins[0], tritons)
        assert triton.variant_value("python") == fa.variant_value("python")


# ----------------------------------------------------------------------------- versions and sources


def _render(matrix: Matrix, recipe: str, rocm: str = "7.2") -> Any:
    one = matrix.narrowed({"gpu_target": ["gfx942"], "python": ["3.12"], "rocm_version": [rocm]})
    (rv,) = rb.Stage0Recipe.from_file(str(RECIPES / recipe / "recipe.yaml")).render(
        one.to_variant_config(), render_config()
    )
    return rv


def _source(matrix: Matrix, recipe: str, rocm: str = "7.2") -> list[dict]:
    return list(_render(matrix, recipe, rocm).recipe.to_dict()["source"])


def test_sources_pinned_by_url_and_real_looking_sha256(matrix: Matrix) -> None:
    values = dict(matrix.values)
    for recipe, key, repo in (
        ("torchvision-rocm", "torchvision", "vision"),
        ("torchaudio-rocm", "torchaudio", "audio"),
    ):
        for i, rocm in enumerate(values["rocm_version"]):
            (source,) = _source(matrix, recipe, rocm)
            # torchvision goes with each ROCm's PyTorch (zipped with rocm_version); torchaudio is one for both.
            at = i if key == "torchvision" else 0
            version = values[f"{key}_version"][at]
            assert source["url"] == f"https://github.com/pytorch/{repo}/archive/refs/tags/v{version}.tar.gz"
            assert source["sha256"] == values[f"{key}_sha256"][at] and SHA256.fullmatch(source["sha256"])
    triton, llvm = _source(matrix, "triton-rocm")
    # Issue 28: PyTorch 2.12.1's own Triton (pytorch/pytorch#186814 pinned release/3.7.x at 5d6048aa), a git
    # source; its LLVM ac5dc54d is an llvm/llvm-project commit, with the archive sha256 conda-forge's
    # triton-feedstock pins for that URL (commit 1fdf08c, recipe/recipe.yaml line 23).
    assert triton == {"git": "https://github.com/triton-lang/triton.git",
                      "rev": "5d6048aa0a324e090ada215b609ea76620133845"}
    assert values["triton_git_rev"][0] == triton["rev"] and "triton_sha256" not in values
    assert llvm == {"url": "https://github.com/llvm/llvm-project/archive/ac5dc54d509169d387fcfd495d71853d81c46484.tar.gz",
                    "sha256": "76fbbc3c1193db34ff975472c9cfcaee2264e0c6081b71729e229cd8572ab5b8",
                    "target_directory": "llvm-project"}
    assert values["triton_llvm_rev"][0] == "ac5dc54d509169d387fcfd495d71853d81c46484"
    assert values["triton_llvm_sha256"][0] == llvm["sha256"]
    # Issue 34: ROCm 7.14's PyTorch 2.14.1 pins Triton 3.8.0 at 675c5987 (release/2.14's pin file before AMD's fork
    # moved it, ROCm/pytorch#3627). That commit's cmake/llvm-info.json was not verified: no LLVM source, and the
    # variant is skipped saying which keys are empty, rather than built against a guessed LLVM.
    rv = _render(matrix, "triton-rocm", "7.14")
    assert rv.recipe.to_dict()["source"] == [{"git": "https://github.com/triton-lang/triton.git",
                                              "rev": "675c59878aa2280b31f722aaf42b825fcee21de8"}]
    reason = rv.recipe.to_dict()["context"]["skip_reason"]
    assert reason.startswith("triton 3.8.0 (675c59878aa2280b31f722aaf42b825fcee21de8) for ROCm 7.14 has no verified "
                             "LLVM pin: triton_llvm_rev and triton_llvm_sha256 are empty"), reason
    # Issue 42: the reason names the file that commit has (llvm-info.json) and the one command that fills the pin.
    assert "cmake/llvm-info.json" in reason and reason.endswith(
        "`rocmlock bump triton=3.8.0 --rev triton=675c59878aa2280b31f722aaf42b825fcee21de8` fills both on a host "
        "that reaches GitHub"), reason
    assert values["triton_llvm_rev"][1] == values["triton_llvm_sha256"][1] == ""
    # PyTorch 2.14.1 itself: no archive hash (pytorch_sha256 ""), so the full commit of its tag, a git source.
    assert _source(matrix, "pytorch-rocm", "7.14") == [{"git": "https://github.com/pytorch/pytorch.git",
                                                        "rev": "5c4886908584029761b579af026dcfb627c84070"}]
    assert values["pytorch_sha256"][1] == "" and SHA256.fullmatch(values["pytorch_sha256"][0])


def test_versions_pair_with_pytorch_and_satisfy_llamafactory(matrix: Matrix, rendered: dict) -> None:
    (audio,) = matrix.get("torchaudio_version")
    rocms = matrix.get("rocm_version")
    runtime = matrix.get("aotriton_runtime_sha256")
    # One PyTorch per ROCm version (7.2: 2.12.1, 7.14: 2.14.1), its torchvision and Triton beside it.
    assert dict(zip(rocms, matrix.get("pytorch_version"), strict=True)) == {"7.2": "2.12.1", "7.14": "2.14.1"}
    # The pairing rules (torchvision/torch, torchaudio/torch, triton/torch) are data in
    # tools/rocmlock/data/upstreams.toml, the same rules `rocmlock bump` enforces.
    table = load_table()
    keys = {u.name: u.version_key for u in table.upstreams}
    assert {r.name for r in table.rules} >= {"torchvision-pytorch", "torchaudio-pytorch", "triton-pytorch"}
    (lf,) = rendered["llamafactory"]
    bounds = {spec_name(s): s for s in lf.specs("run")}
    for i, rocm in enumerate(rocms):
        def pin(name: str, i: int = i) -> str:
            pinned = matrix.get(keys[name])
            return pinned[i] if len(pinned) == len(rocms) else pinned[0]

        for rule in table.rules:
            if rule.table:
                # AOTriton's release is pinned by tools/rocmlock/data/aotriton.toml, for the ROCm versions with a
                # prebuilt runtime there; elsewhere (7.14) PyTorch's own cmake/External/aotriton.cmake fetches it.
                verdict = rule.check(pin(rule.leader), rule.pinned)
                assert verdict == ("ok" if runtime[i] else "unknown"), (rule.name, rocm, verdict)
                continue
            assert rule.check(pin(rule.leader), pin(rule.follower)) == "ok", (rule.name, rocm, rule.why)
        for name, version in (("torchvision", pin("torchvision")), ("torchaudio", audio), ("pytorch", pin("pytorch"))):
            assert VersionSpec(bounds[name].split(" ", 1)[1]).matches(Version(version)), (rocm, bounds[name])


# ----------------------------------------------------------------------------- build scripts


def test_build_scripts_set_the_rocm_switches() -> None:
    expected = {
        "torchvision-rocm": (
            "export FORCE_CUDA=1",
            'export PYTORCH_ROCM_ARCH="${ROCMLOCK_GPU_TARGET}"',
            "export TORCHVISION_USE_ROCJPEG=0",
            "rocmlock_rocm_env",
        ),
        "torchaudio-rocm": (
            "export USE_ROCM=1",
            "export USE_CUDA=0",
            'export PYTORCH_ROCM_ARCH="${ROCMLOCK_GPU_TARGET}"',
            "rocmlock_rocm_env",
        ),
        "triton-rocm": (
            "export TRITON_OFFLINE_BUILD=1",
            # Issue 13, finding 1: Triton's setup.py builds the nvidia and amd backends whatever the environment
            # says, and its core links NVPTX, so LLVM needs NVPTX as in conda-forge's triton build.sh.
            '-DLLVM_TARGETS_TO_BUILD="host;NVPTX;AMDGPU"',
        ),
    }
    for recipe, lines in expected.items():
        script = (RECIPES / recipe / "build.sh").read_text()
        for line in lines:
            assert line in script, (recipe, line)
        assert "--no-build-isolation" in script and "--no-deps" in script
    triton = (RECIPES / "triton-rocm" / "build.sh").read_text()
    assert "export TRITON_CODEGEN_BACKENDS" not in triton  # setup.py does not read it
    test = (RECIPES / "triton-rocm" / "recipe.yaml").read_text()
    assert "'amd' in names" in test and "names == ['amd']" not in test


def test_triton_build_removes_werror_and_notices_when_upstream_moves(tmp_path: Path) -> None:
    # Issue 13, finding 2: Triton's CMakeLists.txt adds -Werror to CMAKE_CXX_FLAGS (the line conda-forge's
    # triton-feedstock patches, recipe/patches/0001-Remove-Werror-...). build.sh's own lines, run on that line:
    script = (RECIPES / "triton-rocm" / "build.sh").read_text()
    start = script.index("grep -q 'CMAKE_CXX_FLAGS")
    end = script.index("\n", script.index("sed -i '/CMAKE_CXX_FLAGS/"))
    snippet = 'rocmlock_die() { echo "$*" >&2; exit 1; }\n' + script[start:end] + "\n"
    cmake = tmp_path / "CMakeLists.txt"
    cmake.write_text('if(NOT MSVC)\n  set(CMAKE_CXX_FLAGS "${CMAKE_CXX_FLAGS} -Werror -Wno-covered-switch-default ")\n')
    subprocess.run(["bash", "-c", snippet], cwd=tmp_path, check=True)
    assert cmake.read_text() == 'if(NOT MSVC)\n  set(CMAKE_CXX_FLAGS "${CMAKE_CXX_FLAGS} -Wno-covered-switch-default ")\n'
    out = subprocess.run(["bash", "-c", snippet], cwd=tmp_path, capture_output=True, text=True, check=False)
    assert out.returncode == 1 and "no longer sets -Werror" in out.stderr


def _llvm_check(tmp_path: Path, pinned: str) -> Callable[[], subprocess.CompletedProcess[str]]:
    """build.sh's own LLVM check, run in ``tmp_path`` (a Triton tree's cmake/) with ``pinned`` as the recipe's pin."""
    script = (RECIPES / "triton-rocm" / "build.sh").read_text()
    start = script.index("if [ -f cmake/llvm-info.json ]")
    end = script.index("\n\n", start)
    snippet = 'rocmlock_die() { echo "$*" >&2; exit 1; }\n' + script[start:end] + '\necho "ok ${llvm_file}"\n'
    (tmp_path / "cmake").mkdir(exist_ok=True)
    # build.sh runs with the host prefix's python first on PATH; here the test's own.
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "ROCMLOCK_TRITON_LLVM_REV": pinned}
    return lambda: subprocess.run(["bash", "-c", snippet], cwd=tmp_path, env=env, capture_output=True, text=True,
                                  check=False)


def test_triton_build_stops_when_its_llvm_hash_is_not_the_pinned_llvm(matrix: Matrix, tmp_path: Path) -> None:
    # Whoever moves triton_git_rev must move triton_llvm_rev with it. build.sh's own lines, run against a Triton
    # tree of the old layout (cmake/llvm-hash.txt, before triton-lang/triton#10358):
    pinned = script_env(matrix, "triton-rocm")["ROCMLOCK_TRITON_LLVM_REV"]
    assert pinned == matrix.get("triton_llvm_rev")[0]
    run = _llvm_check(tmp_path, pinned)
    (tmp_path / "cmake/llvm-hash.txt").write_text(pinned + "\n")
    out = run()
    assert (out.returncode, out.stdout) == (0, "ok cmake/llvm-hash.txt\n"), out.stderr
    # The v3.7.1 tag (f797708c, pinned before issue 28) names the fork commit 1f126a6d...: not the pinned LLVM.
    (tmp_path / "cmake/llvm-hash.txt").write_text("1f126a6dea50d185c0781743a667390037ae88bd\n")
    out = run()
    assert out.returncode == 1 and f"pins triton_llvm_rev {pinned}" in out.stderr


def test_triton_build_reads_llvm_info_json_where_the_commit_has_it(tmp_path: Path) -> None:
    """Issue 42: triton-lang/triton#10358 replaced cmake/llvm-hash.txt with cmake/llvm-info.json
    ({"llvm_hash", "build_number", "sha256sum": {...}}); Triton 3.8.0's commits have only the JSON. build.sh reads its
    llvm_hash (the JSON wins where a tree has both), and refuses another commit, a missing key or no pin file."""
    pinned = "4611156032e1ebac68b2b8f6107b1475a7c60800"  # llvm-info.json of triton-lang/triton 0d6ac4a9 (stored copy)
    info = {"llvm_hash": pinned, "build_number": 1, "sha256sum": {"ubuntu-x64": "38a3" + "0" * 60}}
    run = _llvm_check(tmp_path, pinned)
    (tmp_path / "cmake/llvm-info.json").write_text(json.dumps(info, indent=2) + "\n")
    out = run()
    assert (out.returncode, out.stdout) == (0, "ok cmake/llvm-info.json\n"), out.stderr
    (tmp_path / "cmake/llvm-hash.txt").write_text("1f126a6dea50d185c0781743a667390037ae88bd\n")  # stale leftover
    out = run()
    assert (out.returncode, out.stdout) == (0, "ok cmake/llvm-info.json\n"), out.stderr
    (tmp_path / "cmake/llvm-info.json").write_text(json.dumps({**info, "llvm_hash": "c" * 40}))
    out = run()
    assert out.returncode == 1, out.stdout
    assert f"cmake/llvm-info.json names LLVM {'c' * 40}, variants.yaml pins triton_llvm_rev {pinned}" in out.stderr
    (tmp_path / "cmake/llvm-info.json").write_text(json.dumps({"build_number": 1}))
    out = run()
    assert out.returncode == 1 and "names LLVM nothing" in out.stderr, out.stderr
    (tmp_path / "cmake/llvm-info.json").write_text("<html>")
    out = run()
    assert out.returncode == 1 and "cmake/llvm-info.json is not a JSON object" in out.stderr, out.stderr
    for name in ("llvm-info.json", "llvm-hash.txt"):
        (tmp_path / "cmake" / name).unlink()
    out = run()
    assert out.returncode == 1 and "neither cmake/llvm-info.json nor cmake/llvm-hash.txt" in out.stderr


def test_build_scripts_pass_bash_n_and_shellcheck() -> None:
    assert shutil.which("shellcheck"), "shellcheck is missing: apt-get install shellcheck (.ci/run does)"
    scripts = [str(RECIPES / r / "build.sh") for r in NEW]
    for script in scripts:
        result = subprocess.run(["bash", "-n", script], check=False, capture_output=True, text=True)
        assert result.returncode == 0, f"{script}: {result.stderr}"
    result = subprocess.run(
        ["shellcheck", "-x", "-P", "SCRIPTDIR", *scripts], check=False, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout


def test_build_host_settings_reach_the_build_scripts(matrix: Matrix, monkeypatch: pytest.MonkeyPatch) -> None:
    # rattler-build's strict isolation forwards nothing: each recipe passes what its build reads.
    monkeypatch.setenv("HIP_PATH", "/opt/rocm-7.2.0")
    monkeypatch.setenv("MAX_JOBS", "7")
    for recipe in EXTENSIONS:
        env = script_env(matrix, recipe)
        # ROCM_PATH stays unset; rocm-build-env.sh takes HIP_PATH then (tests/test_recipes.py, test_rocm72_env.py).
        assert env["HIP_PATH"] == "/opt/rocm-7.2.0" and "ROCM_PATH" not in env
        assert env["MAX_JOBS"] == "7" and env["ROCMLOCK_GPU_TARGET"] == "gfx942"
        assert env["ROCMLOCK_ROCM_VERSION"] == "7.2"
    env = script_env(matrix, "triton-rocm")
    assert (
        env["MAX_JOBS"] == "7" and env["ROCMLOCK_ROCM_VERSION"] == "7.2" and "ROCMLOCK_GPU_TARGET" not in env
    )


# ----------------------------------------------------------------------------- a real solve




def _as_pkg(v: RenderedVariant, keep: set[str]) -> Pkg:
    """A stand-in package with the rendered identity (name, version, build, pins that name ``keep``)."""
    depends = tuple(py() if spec_name(s) == "python" else s for s in v.specs("run") if spec_name(s) in keep)
    return Pkg(v.package, v.version, v.build_string, depends=depends, constrains=v.run_constraints)


def test_solve_takes_our_builds_and_never_conda_forge_torchvision(rendered: dict, tmp_path: Path) -> None:
    keep = {"python", "pytorch", "triton", "amdgpu-target", "rocm-version"}
    ours = [
        _as_pkg(v, keep)
        for name in ("pytorch-rocm", *NEW)
        for v in rendered[name]
        if v.variant_value("python") == "3.12" and v.variant_value("gpu_target") in (None, "gfx942", "gfx90a")
    ]
    ours += [Pkg("rocm-version", "7.2", "0", subdir="noarch", noarch="generic")]
    ours += [
        Pkg(
            "amdgpu-target",
            "1",
            g,
            subdir="noarch",
            noarch="generic",
            constrains=(f"__amdgpu_arch =={get_target(g).isa}",),
        )
        for g in ("gfx942", "gfx90a")
    ]
    private = build_channel(tmp_path / "private", ours)
    forge = build_channel(
        tmp_path / "forge",
        [
            Pkg("python", "3.12.7", "h0_0_cpython"),
            Pkg("pytorch", "2.99.0", "cpu_generic_py312h0_0", depends=(py(),)),
            # conda-forge's extensions pin conda-forge's pytorch builds; a higher version must not win.
            Pkg("torchvision", "0.99.0", "cpu_py312h0_0", depends=(py(), "pytorch * cpu*")),
            Pkg("triton", "9.9.9", "cuda129py312h0_0", depends=(py(), "__cuda")),
        ],
    )
    records = solve_on_gpu_host([private, forge], ["torchvision", "torchaudio", "python 3.12.*"], "9.4.2")
    got = {r.name.normalized: r for r in records}
    assert str(got["amdgpu-target"].build) == "gfx942"
    for name in ("pytorch", "torchvision", "torchaudio"):
        assert str(got[name].build).startswith("rocm72_gfx942_py312_h"), (name, got[name].build)
        assert "/private/" in str(got[name].url), got[name].url
    assert str(got["triton"].build).startswith("rocm72_py312_h") and str(got["triton"].version) == "3.7.1"


# ----------------------------------------------------------------------------- the plan


def test_plan_orders_triton_torch_extensions_and_llamafactory() -> None:
    workspace = load_workspace(ROOT / "pixi.toml")
    plan = make_plan(workspace)
    assert not plan.skipped and not plan.problems
    position = {v.id: i for i, v in enumerate(plan.variants)}
    for v in plan.variants:
        assert all(position[d] < position[v.id] for d in v.depends_on), v.id
    by_stage: dict[str, list] = {}
    for v in plan.variants:
        by_stage.setdefault(v.stage, []).append(v)
    # One Triton serves every target (same ROCm, same python), and comes before every pytorch.
    (triton,) = by_stage["triton"]
    with_torch = {e for v in by_stage["pytorch"] for e in v.environments}
    assert set(triton.environments) == with_torch >= {"mi300x", "w7900"}
    for torch in by_stage["pytorch"]:
        assert triton.id in torch.depends_on
    # The RDNA flash-attn (Triton backend) depends on it directly; the CK one through pytorch only.
    for fa in by_stage["flash-attn"]:
        direct = triton.id in fa.depends_on
        assert direct == (not get_target(dict(fa.variant)["gpu_target"]).flash_attn_ck)
    assert any(triton.id in fa.depends_on for fa in by_stage["flash-attn"]), "w7900 has the Triton backend"
    (lf,) = by_stage["llamafactory"]
    targets = {dict(v.variant)["gpu_target"] for v in by_stage["pytorch"]}
    for stage in ("torchvision", "torchaudio"):
        assert {dict(v.variant)["gpu_target"] for v in by_stage[stage]} == targets >= {"gfx942", "gfx1100"}
        for v in by_stage[stage]:
            gfx = dict(v.variant)["gpu_target"]
            (torch,) = [plan.get(d) for d in v.depends_on if plan.get(d).stage == "pytorch"]
            assert dict(torch.variant)["gpu_target"] == gfx
            assert position[torch.id] < position[v.id] < position[lf.id]
            assert v.id in lf.depends_on


def test_torchaudio_is_cpu_kernels_only_and_nothing_uses_it_on_the_gpu() -> None:
    # torchaudio 2.11 compiles GPU kernels only for USE_CUDA builds (pytorch/audio#4180): the ROCm package holds CPU
    # kernels, so its build requires no host ROCm component (hipCUB/rocPRIM were unused) and says so.
    import tomllib

    components = tomllib.loads((ROOT / "tools/rocmlock/data/rocm_components.toml").read_text())
    assert "torchaudio" not in components["packages"]
    build = (RECIPES / "torchaudio-rocm" / "build.sh").read_text()
    assert "rocmlock_require_rocm_components" not in build and "pytorch/audio#4180" in build
    assert "CPU-kernels-only" in (RECIPES / "torchaudio-rocm" / "recipe.yaml").read_text()
    # The probe and the presets never touch torchaudio, so they cannot depend on GPU kernels it lacks.
    for path in (ROOT / "tools/verify_env.py", ROOT / "tools/rocmlock/train/preset.py"):
        assert "torchaudio" not in path.read_text(), path
