"""The bitsandbytes recipe's own build.sh, run for real against Debian's ROCm 7.2.4 in the chroot
(tests/rocm72/make-chroot.sh), for gfx942, with the variables rattler-build gives a build script.

The source is the pinned commit (recipes/variants.yaml, bitsandbytes_git_rev) taken from a local mirror,
never the network: $ROCMLOCK_MIRRORS/bitsandbytes.git (default ../shared/mirrors next to the checkout; see its
README). The python prefix is a venv with Debian's scikit-build-core/setuptools/trove-classifiers (the
recipe's host requirements; build.sh installs with --no-build-isolation). The library's code objects are then
checked with `llvm-objdump --offloading`: exactly one bundle, for gfx942.
Cost: one CMake configure + build of the HIP backend for one target, about 1-3 min on 2 shared cores.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import rocm72chroot

PY = "python3.14"  # Debian sid's python3 in the chroot (tests/rocm72/packages.txt)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    rocm72chroot.require_chroot()
    mirror = rocm72chroot.require_mirror("bitsandbytes.git")
    work = tmp_path_factory.mktemp("bnb")
    return work, rocm72chroot.build_bitsandbytes(work, mirror, "gfx942")


def test_build_sh_builds_the_hip_library_for_gfx942(built: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    work, proc = built
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    log = proc.stdout + proc.stderr
    # rocm-build-env.sh found Debian's ROCm in /usr with ROCM_PATH unset, and its device libraries.
    assert ("rocmlock build: ROCm 7.2.4 at /usr, device libraries in /usr/lib/llvm-22/lib/clang/22/amdgcn/bitcode"
            in log)
    # The recipe checked the host-ROCm components it needs first (tools/rocmlock/data/rocm_components.toml).
    assert "rocmlock build: host ROCm components for bitsandbytes found under /usr/include" in log
    assert "HIP Targets: gfx942" in log
    lib = work / "src/bitsandbytes/libbitsandbytes_rocm72.so"
    assert lib.is_file()
    # build.sh's pip step installed the package around it into the prefix.
    installed = work / f"prefix/lib/{PY}/site-packages/bitsandbytes/libbitsandbytes_rocm72.so"
    assert installed.is_file() and installed.read_bytes() == lib.read_bytes()


def test_code_objects_hold_exactly_gfx942(built: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    work, proc = built
    assert proc.returncode == 0
    dump = rocm72chroot.run(["llvm-objdump-22", "--offloading",
                             "/mnt/work/src/bitsandbytes/libbitsandbytes_rocm72.so"], work=work)
    assert dump.returncode == 0, dump.stderr
    bundles = re.findall(r"hipv4-amdgcn-amd-amdhsa-[\w:+-]*", dump.stdout)
    assert bundles, dump.stdout[-2000:]
    assert set(bundles) == {"hipv4-amdgcn-amd-amdhsa--gfx942"}, dump.stdout[-2000:]
