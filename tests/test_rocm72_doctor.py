"""rocmlock doctor inside the Debian ROCm 7.2.4 chroot (tests/rocm72/make-chroot.sh), on both ROCm layouts.

The four reference cases of issue 13: Debian's layout (ROCm in /usr) with ROCM_PATH/HIP_PATH unset and with
ROCM_PATH=/usr; AMD's layout (/opt/rocm -> /opt/rocm-7.2.4, .info/version) with ROCM_PATH unset and set.
`/venv/bin/rocmlock` runs in the chroot, so doctor reads the chroot's real paths and runs its real hipcc.
Cost: ~3 s per compiled target on this machine; ~40 s for the module.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import rocm72chroot

TARGETS = ("gfx90a", "gfx942", "gfx950", "gfx1100")
CASES = {
    "debian-unset": ({}, False),
    "debian-rocm-path-usr": ({"ROCM_PATH": "/usr"}, False),
    "amd-unset": ({}, True),
    "amd-rocm-path-set": ({"ROCM_PATH": "/opt/rocm-7.2.4"}, True),
}


def _doctor(env: dict[str, str], amd: bool, *targets: str) -> tuple[int, dict[str, Any], dict[str, dict[str, str]]]:
    argv = ["/venv/bin/rocmlock", "doctor", "--build", "--json"]
    for gfx in targets:
        argv += ["--target", gfx]
    proc = rocm72chroot.run(argv, env=env, amd_layout=amd)
    assert proc.stdout.strip(), proc.stderr
    report = json.loads(proc.stdout)
    return proc.returncode, report, {c["name"]: c for c in report["checks"]}


@pytest.mark.parametrize("case", CASES)
def test_reference_case_passes_and_compiles_every_target(case: str) -> None:
    env, amd = CASES[case]
    targets = TARGETS if case == "debian-unset" else ("gfx942",)
    code, report, checks = _doctor(env, amd, *targets)
    # Nothing fails on a working ROCm 7.2.4 (the disk check needs 20 GiB free where it runs).
    assert code == 0, [c for c in checks.values() if c["status"] == "fail"]
    assert report["rocm_version"] == "7.2.4"
    for gfx in targets:
        assert checks[f"offload-arch:{gfx}"]["status"] == "ok", checks[f"offload-arch:{gfx}"]
    assert checks["hip-path"]["status"] == "ok"
    if amd:
        assert report["hip_path"] == env.get("ROCM_PATH", "/opt/rocm")
        assert checks["rocm-version"]["message"].endswith(f"(from {report['hip_path']}/.info/version)")
        assert report["device_libs"] == f"{report['hip_path']}/amdgcn/bitcode"
    else:
        assert report["hip_path"] == "/usr"
        # Debian has no .info/version: the version comes from rocm-core's header.
        assert checks["rocm-version"]["message"] == "ROCm 7.2.4 (from /usr/include/rocm-core/rocm_version.h)"
        assert report["device_libs"] == "/usr/lib/llvm-22/lib/clang/22/amdgcn/bitcode"
    # The chroot has every host-ROCm component bitsandbytes', deepspeed's and torchaudio's builds need, not pytorch's
    # (MIOpen, RCCL, ...) nor torchvision's and flash-attn's (hipSPARSE, hipSOLVER): tools/rocmlock/data/
    # rocm_components.toml. Without a workspace that is a warning naming only what is missing.
    components = checks["rocm-components"]
    assert components["status"] == "warn", components
    # Component names only in the message (issue 26: with headers and package names it was 2,500 characters on
    # one line); the packages to install are in the fix.
    message = components["message"]
    assert "pytorch needs " in message and "MIOpen" in message.split("pytorch needs ")[1].split(";")[0]
    assert "hipSPARSE" in message.split("torchvision needs ")[1].split(";")[0]
    assert "flash-attn needs hipSPARSE" in message and "hipSOLVER" in message
    assert "libmiopen-dev" in components["fix"] and "libhipsparse-dev" in components["fix"]
    for package in ("bitsandbytes", "deepspeed", "torchaudio"):
        assert package not in message
    assert "hipBLAS," not in message and "hipCUB" not in message and len(message) < 400
    # No advice that breaks a working setup: an unset ROCM_PATH is never "fixed" to /usr.
    assert not any("ROCM_PATH=/usr" in c["fix"] for c in checks.values())


def test_rocm_path_usr_warns_with_the_export_that_makes_plain_hipcc_work() -> None:
    code, _, checks = _doctor({"ROCM_PATH": "/usr"}, False)
    assert code == 0  # a warning: builds get HIP_DEVICE_LIB_PATH from rocm-build-env.sh
    libs = checks["device-libs"]
    assert libs["status"] == "warn"
    assert "cannot find ROCm device library" in libs["message"]
    assert libs["fix"].startswith("export HIP_DEVICE_LIB_PATH=/usr/lib/llvm-22/lib/clang/22/amdgcn/bitcode")
    # Following the fix silences it: the compiler now links the device libraries from there.
    fixed = {"ROCM_PATH": "/usr", "HIP_DEVICE_LIB_PATH": "/usr/lib/llvm-22/lib/clang/22/amdgcn/bitcode"}
    _, _, checks = _doctor(fixed, False)
    assert checks["device-libs"]["status"] == "ok"
    assert checks["device-libs"]["message"] == "hipcc links /usr/lib/llvm-22/lib/clang/22/amdgcn/bitcode"


def test_a_failed_compile_shows_the_compilers_error_line() -> None:
    code, _, checks = _doctor({"HIP_DEVICE_LIB_PATH": "/tmp"}, False, "gfx942")
    assert code == 1
    assert checks["device-libs"]["status"] == "fail"
    assert checks["device-libs"]["message"] == "HIP_DEVICE_LIB_PATH=/tmp holds no ocml.bc"
    message = checks["offload-arch:gfx942"]["message"]
    # The line that says why, in full (hipcc's last line is only "failed to execute: <command>").
    assert message.startswith("cannot compile for gfx942: clang++: error: cannot find ROCm device library;")
    assert message.endswith("or pass '-nogpulib' to build without ROCm device library")
