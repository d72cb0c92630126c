"""The recipes' build environment (recipes/rocm-build-env.sh) and the rocm-version activation script, inside the
Debian ROCm 7.2.4 chroot (tests/rocm72/make-chroot.sh), on both layouts: each must leave an environment in
which a plain `hipcc --offload-arch=gfx942` compiles, and never point at a ROCm path that does not exist.
Cost: about 3 s per case (one real compile each); ~30 s for the module.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import rocm72chroot

RECIPES = Path(__file__).resolve().parent.parent / "recipes"
DEBIAN_LIBS = "/usr/lib/llvm-22/lib/clang/22/amdgcn/bitcode"
# case: (environment given, AMD layout, expected ROCM_PATH, expected HIP_DEVICE_LIB_PATH after activation)
CASES = {
    "debian-unset": ({}, False, "/usr", DEBIAN_LIBS),
    "debian-rocm-path-usr": ({"ROCM_PATH": "/usr"}, False, "/usr", DEBIAN_LIBS),
    "amd-unset": ({}, True, "/opt/rocm", ""),
    "amd-rocm-path-set": ({"ROCM_PATH": "/opt/rocm-7.2.4"}, True, "/opt/rocm-7.2.4", ""),
}
KERNEL = """#include <hip/hip_runtime.h>
__global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }
"""
SHOW_AND_COMPILE = """
echo "ROCM_PATH=${ROCM_PATH:-} HIP_PATH=${HIP_PATH:-} HIP_DEVICE_LIB_PATH=${HIP_DEVICE_LIB_PATH:-}"
HIP_PLATFORM=amd hipcc --offload-arch=gfx942 -c /mnt/work/k.hip -o /mnt/work/k.o && echo compiled
"""


@pytest.fixture
def work(tmp_path: Path) -> Path:
    (tmp_path / "k.hip").write_text(KERNEL)
    shutil.copy(RECIPES / "rocm-build-env.sh", tmp_path / "rocm-build-env.sh")
    for name, version in (("activate-7.2.sh", "7.2"), ("activate-6.4.sh", "6.4")):
        text = (RECIPES / "rocm-version/activate.sh").read_text().replace("@ROCM_VERSION@", version)
        (tmp_path / name).write_text(text)
    shutil.copy(RECIPES / "rocm-version/deactivate.sh", tmp_path / "deactivate.sh")
    return tmp_path


def _sh(script: str, env: dict[str, str], amd: bool, work: Path, shell: str = "sh") -> tuple[int, str, str]:
    proc = rocm72chroot.run([shell, "-c", script], env=env, amd_layout=amd, work=work)
    return proc.returncode, proc.stdout, proc.stderr


@pytest.mark.parametrize("case", CASES)
def test_activation_leaves_a_working_hipcc(case: str, work: Path) -> None:
    env, amd, rocm, libs = CASES[case]
    code, out, err = _sh(". /mnt/work/activate-7.2.sh\n" + SHOW_AND_COMPILE, env, amd, work)
    assert code == 0, err
    assert f"ROCM_PATH={rocm} HIP_PATH={rocm} HIP_DEVICE_LIB_PATH={libs}\n" in out
    assert out.endswith("compiled\n") and err == ""  # the host's 7.2.4 is a 7.2: no warning


def test_activation_warns_on_another_rocm_version_from_rocm_core(work: Path) -> None:
    # Debian has no .info/version: the version comes from include/rocm-core/rocm_version.h.
    code, _, err = _sh(". /mnt/work/activate-6.4.sh", {}, False, work)
    assert code == 0
    assert "built for ROCm 6.4, but the ROCm at /usr is 7.2.4" in err


def test_deactivation_removes_the_device_lib_path_it_set(work: Path) -> None:
    script = (". /mnt/work/activate-7.2.sh\n. /mnt/work/deactivate.sh\n"
              'echo "after ${ROCM_PATH:-unset} ${HIP_DEVICE_LIB_PATH:-unset}"')
    assert _sh(script, {}, False, work)[1].strip() == "after unset unset"
    given = {"ROCM_PATH": "/usr", "HIP_DEVICE_LIB_PATH": DEBIAN_LIBS}
    assert _sh(script, given, False, work)[1].strip() == f"after /usr {DEBIAN_LIBS}"


BUILD_ENV = """set -euo pipefail
. /mnt/work/rocm-build-env.sh
rocmlock_rocm_env
"""


@pytest.mark.parametrize("case", CASES)
def test_build_env_finds_rocm_and_its_device_libs(case: str, work: Path) -> None:
    env, amd, rocm, _ = CASES[case]
    env = {**env, "ROCMLOCK_ROCM_VERSION": "7.2", "ROCMLOCK_GPU_TARGET": "gfx942"}
    code, out, err = _sh(BUILD_ENV + SHOW_AND_COMPILE, env, amd, work, shell="bash")
    assert code == 0, err
    # The build always says where the device libraries are (clang's own search would miss Debian's with
    # ROCM_PATH=/usr); on AMD's layout that is <rocm>/amdgcn/bitcode.
    libs = DEBIAN_LIBS if not amd else f"{rocm}/amdgcn/bitcode"
    assert f"ROCM_PATH={rocm} HIP_PATH={rocm} HIP_DEVICE_LIB_PATH={libs}\n" in out
    assert out.endswith("compiled\n")
    assert f"rocmlock build: ROCm 7.2.4 at {rocm}, device libraries in {libs}" in err


def test_build_env_refuses_another_rocm_version(work: Path) -> None:
    env = {"ROCMLOCK_ROCM_VERSION": "7.1", "ROCMLOCK_GPU_TARGET": "gfx942"}
    code, _, err = _sh(BUILD_ENV, env, False, work, shell="bash")
    assert code == 1
    assert "this variant is for ROCm 7.1 but the ROCm at /usr is '7.2.4'" in err
