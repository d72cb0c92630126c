"""ROCm from TheRock (7.14 and later): as Python packages (``rocm-sdk path --root``) and as a tarball, found by
``doctor``, ``recipes/rocm-build-env.sh``, the ``rocm-version`` activation and the probe the way they find AMD's
/opt/rocm and a distribution's /usr (tests/test_rocm72_layouts.py). The trees are TheRock's layout as its sources
describe it (tests/therock_layout.py says which file says what); ``rocm-sdk`` is a stand-in script.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from rocmlock.gpu.targets import get_target
from rocmlock.host import therock
from rocmlock.host.doctor import run_doctor
from rocmlock.host.doctor_report import Check
from rocmlock.host.node import read_node
from rocmlock.host.rocm import Host, discover_prefix, find_device_libs, find_version
from test_probe import load_probe
from therock_layout import COMPONENT_HEADERS, install_tree, path_with, rocm_sdk_stub, site_packages

RECIPES = Path(__file__).resolve().parent.parent / "recipes"


@pytest.fixture
def sdk(tmp_path: Path) -> tuple[Path, Path]:
    """(devel tree, bin dir with rocm-sdk) of TheRock 7.14.0 packages with the gfx942 device package."""
    site = tmp_path / "venv/lib/python3.12/site-packages"
    tree = site_packages(site)
    return tree, rocm_sdk_stub(tmp_path / "venv/bin", site).parent


def _host(bindir: Path, **env: str) -> Host:
    return Host(env={"PATH": path_with(bindir), **env}, kfd=bindir / "no-kfd", sysroot=bindir / "no-sys")


def _checks(host: Host, *targets: str, build: bool = True, packages: tuple[str, ...] | None = ("pytorch",),
            ) -> dict[str, Check]:
    report = run_doctor([get_target(t) for t in targets], build=build, host=host, packages=packages,
                        rocm_wanted=("7.14",))
    return {c.name: c for c in report.checks}


# ----------------------------------------------------------------------------- the layout itself


def test_the_layouts_are_told_apart(tmp_path: Path, sdk: tuple[Path, Path]) -> None:
    tree, _bindir = sdk
    assert therock.layout_of(tree) == "therock-python"
    assert therock.layout_of(install_tree(tmp_path / "therock-dist")) == "therock-tarball"
    opt = tmp_path / "opt/rocm-7.2.4"
    (opt / ".info").mkdir(parents=True)
    (opt / ".info/version").write_text("7.2.4-123\n")
    assert therock.layout_of(opt) == "amd"
    assert therock.layout_of(tmp_path / "usr", distro_root=tmp_path / "usr") == "distro"


def test_rocm_sdk_path_root_is_found_first_with_its_version_and_device_libraries(sdk: tuple[Path, Path]) -> None:
    tree, bindir = sdk
    host = _host(bindir)
    assert discover_prefix(host) == tree
    assert find_version(host, tree) == ("7.14.0", f"{tree}/.info/version")
    # <rocm>/amdgcn is TheRock's link to lib/llvm/amdgcn: where clang looks for ROCM_PATH.
    assert find_device_libs(host, tree) == (tree / "amdgcn/bitcode", "<rocm>/amdgcn/bitcode")


def test_without_info_version_the_version_is_what_rocm_sdk_says(sdk: tuple[Path, Path]) -> None:
    tree, bindir = sdk
    (tree / ".info/version").unlink()
    (tree / "include/rocm-core/rocm_version.h").unlink()
    assert find_version(_host(bindir), tree) == ("7.14.0", "rocm-sdk version")


def test_dist_targets_reads_dist_info_and_refuses_anything_else(tmp_path: Path) -> None:
    tree = install_tree(tmp_path / "t", targets=("gfx1100", "gfx1151"))
    assert therock.dist_targets(tree) == ("gfx1100", "gfx1151")
    for hostile in ('{"dist_amdgpu_targets": 5}', "[]", "{not json", '{"dist_amdgpu_targets": "gfx942;rm -rf"}',
                    b"\xff\xfe"):
        path = tree / "share/therock/dist_info.json"
        path.write_bytes(hostile if isinstance(hostile, bytes) else hostile.encode())
        assert therock.dist_targets(tree) is None


# ----------------------------------------------------------------------------- doctor


def test_doctor_build_on_therock_packages(sdk: tuple[Path, Path]) -> None:
    tree, bindir = sdk
    checks = _checks(_host(bindir), "gfx942")
    assert checks["hip-path"].status == "ok"
    assert checks["hip-path"].message == (f"HIP_PATH/ROCM_PATH unset; TheRock's Python packages: `rocm-sdk path "
                                          f"--root` is {tree}, which holds include/hip/hip_runtime.h")
    assert checks["rocm-version"].status == "ok"
    assert checks["rocm-components"].status == "ok"
    assert checks["therock"].status == "ok"
    assert checks["therock"].message == (f"TheRock's ROCm (therock-python) at {tree}; rocm-sdk-core, "
                                         "rocm-sdk-libraries, rocm-sdk-devel, rocm-sdk-device-gfx942 installed; "
                                         "built for gfx942, gfx950")


def test_doctor_names_the_device_package_a_target_lacks(sdk: tuple[Path, Path]) -> None:
    _tree, bindir = sdk
    check = _checks(_host(bindir), "gfx942", "gfx950")["therock"]
    assert check.status == "warn"  # a build compiles without device code; a run on gfx950 needs it
    assert "rocm-sdk-device-gfx950 not installed" in check.message
    assert check.fix == "pip install 'rocm[device-gfx950]' (TheRock's index for this ROCm release), then rocm-sdk init"


def test_doctor_fails_a_target_the_therock_build_has_no_kernels_for(sdk: tuple[Path, Path]) -> None:
    _tree, bindir = sdk
    check = _checks(_host(bindir), "gfx90a")["therock"]
    assert "built for gfx942, gfx950, not gfx90a" in check.message
    assert "'rocm[device-gfx90a]'" in check.fix


def test_doctor_names_rocm_sdk_devel_for_a_missing_header(sdk: tuple[Path, Path]) -> None:
    tree, bindir = sdk
    (tree / "include/hipblaslt/hipblaslt.h").unlink()
    check = _checks(_host(bindir), "gfx942")["rocm-components"]
    assert check.status == "fail" and "pytorch needs hipBLASLt" in check.message
    assert check.fix == ("TheRock's rocm-sdk-devel (hipBLASLt): pip install 'rocm[devel]' (TheRock's index for this "
                         "ROCm release), then rocm-sdk init")


def test_doctor_names_rocm_sdk_libraries_when_it_is_not_installed(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    tree = site_packages(site, headers=tuple(h for h in COMPONENT_HEADERS if not h.startswith("hipblas/")))
    for info in site.glob("rocm_sdk_libraries-*.dist-info"):
        for f in info.iterdir():
            f.unlink()
        info.rmdir()
    checks = _checks(_host(rocm_sdk_stub(tmp_path / "bin", site).parent), "gfx942")
    assert checks["rocm-components"].fix.startswith("TheRock's rocm-sdk-libraries (hipBLAS): "
                                                    "pip install 'rocm[libraries]'")
    assert checks["therock"].status == "fail" and "rocm-sdk-libraries" in checks["therock"].message
    assert tree.is_dir()


def test_doctor_with_rocm_sdk_but_no_devel_package_names_it(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    site_packages(site, devel=False)
    check = _checks(_host(rocm_sdk_stub(tmp_path / "bin", site).parent), "gfx942")["hip-path"]
    assert check.status == "fail"
    assert check.message.startswith("rocm-sdk is on PATH but `rocm-sdk path --root` names no ROCm tree: "
                                    "rocm-sdk-devel (the headers and tools) is not installed")
    assert check.fix.startswith("pip install 'rocm[devel]'")


def test_doctor_on_a_therock_tarball_through_rocm_path(tmp_path: Path) -> None:
    tree = install_tree(tmp_path / "therock-dist-linux-gfx110X-all-7.14.0", targets=("gfx1100", "gfx1101"))
    checks = _checks(Host(env={"PATH": "/nonexistent", "ROCM_PATH": str(tree)}, which=lambda _n, _p: None,
                          kfd=tmp_path / "kfd", sysroot=tmp_path), "gfx1100")
    assert checks["hip-path"].status == "ok"
    assert checks["rocm-version"].status == "ok"
    assert checks["therock"].status == "ok"
    assert checks["therock"].message == f"TheRock's ROCm (therock-tarball) at {tree}; built for gfx1100, gfx1101"
    (tree / "include/miopen/miopen.h").unlink()
    fix = _checks(Host(env={"PATH": "/nonexistent", "ROCM_PATH": str(tree)}, which=lambda _n, _p: None,
                       kfd=tmp_path / "kfd", sysroot=tmp_path), "gfx1100")["rocm-components"].fix
    assert fix.startswith("this TheRock tree lacks MIOpen: extract TheRock's full SDK tarball")


# ----------------------------------------------------------------------------- a node (unpack's ROCm check)


def test_a_node_reads_the_rocm_of_therock_packages_with_or_without_devel(tmp_path: Path,
                                                                          sdk: tuple[Path, Path]) -> None:
    tree, bindir = sdk
    node = read_node(Path("/"), {"PATH": str(bindir)})
    assert (node.rocm_root, node.rocm_version) == (tree, "7.14.0")
    site = tmp_path / "runtime/site-packages"
    site_packages(site, devel=False)
    runtime_bin = rocm_sdk_stub(tmp_path / "runtime/bin", site).parent
    node = read_node(Path("/"), {"PATH": str(runtime_bin)})
    assert (node.rocm_root, node.rocm_version) == (runtime_bin / "rocm-sdk", "7.14.0")
    # ROCM_PATH set wins, as everywhere.
    other = install_tree(tmp_path / "therock-dist", version="7.2.4")
    assert read_node(Path("/"), {"PATH": str(runtime_bin), "ROCM_PATH": str(other)}).rocm_version == "7.2.4"


# ----------------------------------------------------------------------------- rocm-build-env.sh and the activation


def _bash(script: str, path: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=False, timeout=60,
                          env={"PATH": path, **env})


def test_rocm_build_env_exports_the_rocm_sdk_tree(sdk: tuple[Path, Path]) -> None:
    tree, bindir = sdk
    (tree / "bin").mkdir()
    (tree / "bin/hipcc").write_text("#!/bin/sh\n")
    (tree / "bin/hipcc").chmod(0o755)
    proc = _bash(f'set -euo pipefail; . {RECIPES}/rocm-build-env.sh; rocmlock_rocm_env; '
                 'echo "ROCM_PATH=$ROCM_PATH ROCM_HOME=$ROCM_HOME HIP_DEVICE_LIB_PATH=$HIP_DEVICE_LIB_PATH"',
                 path_with(bindir), ROCMLOCK_ROCM_VERSION="7.14", ROCMLOCK_GPU_TARGET="gfx942")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == (f"ROCM_PATH={tree} ROCM_HOME={tree} HIP_DEVICE_LIB_PATH={tree}/amdgcn/bitcode")
    assert f"rocmlock build: ROCm 7.14.0 at {tree}" in proc.stderr
    wrong = _bash(f'set -euo pipefail; . {RECIPES}/rocm-build-env.sh; rocmlock_rocm_env',
                  path_with(bindir), ROCMLOCK_ROCM_VERSION="7.2", ROCMLOCK_GPU_TARGET="gfx942")
    assert wrong.returncode != 0
    assert f"this variant is for ROCm 7.2 but the ROCm at {tree} is '7.14.0'" in wrong.stderr


def test_rocm_build_env_says_when_rocm_sdk_has_no_devel_tree(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    site_packages(site, devel=False)
    proc = _bash(f". {RECIPES}/rocm-build-env.sh; rocmlock_find_rocm",
                 path_with(rocm_sdk_stub(tmp_path / "bin", site).parent))
    assert "rocm-sdk is on PATH but `rocm-sdk path --root` names no ROCm (rocm-sdk-devel missing?)" in proc.stderr
    assert "_rocm_sdk" not in proc.stdout


@pytest.mark.parametrize(("built_for", "warned"), [("7.14", False), ("7.2", True)])
def test_activation_points_rocm_path_at_the_rocm_sdk_tree(sdk: tuple[Path, Path], tmp_path: Path,
                                                          built_for: str, warned: bool) -> None:
    tree, bindir = sdk
    activate = tmp_path / "activate.sh"
    activate.write_text((RECIPES / "rocm-version/activate.sh").read_text().replace("@ROCM_VERSION@", built_for))
    proc = subprocess.run(["sh", "-c", f'set -eu; . {activate}; echo "$ROCM_PATH|$HIP_PATH|${{HIP_DEVICE_LIB_PATH-unset}}"'],
                          capture_output=True, text=True, check=False, timeout=60, env={"PATH": path_with(bindir)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"{tree}|{tree}|unset"  # <rocm>/amdgcn/bitcode holds them: nothing to add
    assert (f"built for ROCm {built_for}, but the ROCm at {tree} is 7.14" in proc.stderr) is warned


# ----------------------------------------------------------------------------- the probe


def test_probe_finds_the_rocm_sdk_tree_and_compares_its_version(sdk: tuple[Path, Path], tmp_path: Path) -> None:
    tree, bindir = sdk
    probe = load_probe()
    ctx = probe.Context(root=tmp_path / "root", prefix=tmp_path / "env", environ={"PATH": path_with(bindir)},
                        expect_rocm="7.14", expect_rocm_source="--expect-rocm")
    out = probe.check_rocm_path(ctx)
    assert out.status == "warn"
    assert out.evidence == f"HIP_PATH and ROCM_PATH are unset; TheRock's ROCm 7.14.0 (rocm-sdk path --root: {tree})"
    assert probe.check_rocm_version(ctx).status == "ok"
    ctx.expect_rocm = "7.2"
    assert probe.check_rocm_version(ctx).evidence.startswith(f"host ROCm 7.14.0 at {tree}")


def test_probe_on_a_node_with_runtime_packages_only(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    site_packages(site, devel=False)
    probe = load_probe()
    ctx = probe.Context(root=tmp_path / "root", prefix=tmp_path / "env",
                        environ={"PATH": path_with(rocm_sdk_stub(tmp_path / "bin", site).parent)},
                        expect_rocm="7.14", expect_rocm_source="--expect-rocm")
    out = probe.check_rocm_path(ctx)
    assert out.status == "warn" and "runtime packages (rocm-sdk) without rocm-sdk-devel" in out.evidence
    assert probe.check_rocm_version(ctx).status == "ok"
    ctx.expect_rocm = "7.2"
    assert probe.check_rocm_version(ctx).evidence.startswith(f"host ROCm 7.14.0 at {tmp_path / 'bin/rocm-sdk'};")


def test_probe_on_a_therock_tarball_through_rocm_path(tmp_path: Path) -> None:
    tree = install_tree(tmp_path / "therock-dist-linux-gfx94X-dcgpu-7.14.0")
    probe = load_probe()
    ctx = probe.Context(root=tmp_path / "root", prefix=tmp_path / "env",
                        environ={"PATH": "/nonexistent", "ROCM_PATH": str(tree), "HIP_PATH": str(tree)},
                        expect_rocm="7.14", expect_rocm_source="--expect-rocm")
    out = probe.check_rocm_path(ctx)
    assert (out.status, out.evidence) == ("ok", f"HIP_PATH={tree}, ROCM_PATH={tree}: ROCm 7.14.0 (.info/version)")
    assert probe.check_rocm_version(ctx).status == "ok"
