"""The doctor's checks of the host's ROCm toolchain: where ROCm is, its version, the device libraries, the
HIP platform, the compiler, and a tiny HIP kernel compiled for every target (``--offload-arch=<gfx>``).

The tools run through the host's injectable runner (:class:`rocmlock.host.rocm.Host`).
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path

from rocmlock.gpu.targets import GpuTarget, version_tuple
from rocmlock.host import rocm as rocm_host
from rocmlock.host import therock
from rocmlock.host.doctor_report import Check, Status
from rocmlock.host.node import gfx_of_isa, gpu_choice, node_gpus, rattler_pick
from rocmlock.host.rocm import HIP_HEADER, Host, holds_device_libs, holds_header
from rocmlock.util.runner import CommandResult

__all__ = [
    "KERNEL", "check_compiler", "check_device_libs", "check_gpu_driver", "check_gpus", "check_hip_path",
    "check_hip_platform",
    "check_offload_arch", "check_rocm_version", "compiler_verdict", "find_compiler",
]

COMPILE_TIMEOUT_S = 300.0
KERNEL = """#include <hip/hip_runtime.h>
__global__ void rocmlock_probe(float* x) { x[threadIdx.x] += 1.0f; }
"""


def _export_fix(prefix: Path | None, device_libs: Path | None) -> str:
    """The exports that make ``prefix`` work, HIP_DEVICE_LIB_PATH included where clang would not find them."""
    if prefix is None:
        return "install ROCm (hipcc) and export HIP_PATH/ROCM_PATH to its prefix"
    fix = f"export HIP_PATH={prefix} ROCM_PATH={prefix}"
    if device_libs is not None and not holds_device_libs(prefix / "amdgcn/bitcode"):
        fix += f" HIP_DEVICE_LIB_PATH={device_libs}"
    return fix


def check_hip_path(host: Host, build: bool, device_libs: Path | None = None) -> tuple[Check, Path | None]:
    """HIP_PATH / ROCM_PATH set and holding ``include/hip/hip_runtime.h``, or unset with ROCm where tools look."""
    candidate = rocm_host.discover_prefix(host)
    for var in rocm_host.ROCM_VARS:
        value = host.env.get(var)
        if value and not holds_header(value):
            return Check("hip-path", "fail", f"{var}={value} does not hold {HIP_HEADER} "
                         "(the build stops with 'hip_runtime.h not found')",
                         _export_fix(candidate, device_libs)), candidate
    set_vars = rocm_host.set_rocm_vars(host.env)
    if set_vars:
        return _check_set_rocm(host, build, set_vars), Path(host.env[set_vars[0]])
    if candidate == rocm_host.DEFAULT_ROCM:
        return Check("hip-path", "ok", f"HIP_PATH/ROCM_PATH unset; the default {candidate} holds {HIP_HEADER}"), \
            candidate
    if candidate is not None and therock.is_python_tree(candidate):
        # rocm-build-env.sh and the rocm-version activation ask `rocm-sdk path --root` too and export it.
        return Check("hip-path", "ok", f"HIP_PATH/ROCM_PATH unset; TheRock's Python packages: `rocm-sdk path "
                     f"--root` is {candidate}, which holds {HIP_HEADER}"), candidate
    if host.find(therock.ROCM_SDK):
        # TheRock's packages are this environment's ROCm, but without rocm-sdk-devel there is nothing to build with.
        used = f"; the ROCm at {candidate} would be used instead" if candidate else ""
        return Check("hip-path", "fail" if build else "warn",
                     f"{therock.ROCM_SDK} is on PATH but `rocm-sdk path --root` names no ROCm tree: "
                     f"{therock.DEVEL_PACKAGE} (the headers and tools) is not installed{used}",
                     therock.package_fix([therock.DEVEL_PACKAGE])), candidate
    if candidate is not None and rocm_host.is_distro_layout(candidate):
        # The compiler's and CMake's default search paths include /usr: nothing needs the variables, and
        # rocm-build-env.sh / the rocm-version activation export them (with HIP_DEVICE_LIB_PATH) where needed.
        return Check("hip-path", "ok", f"HIP_PATH/ROCM_PATH unset; the distribution's ROCm in {candidate} holds "
                     f"{HIP_HEADER} (found without them)"), candidate
    where = f"ROCm is at {candidate}, not the default {rocm_host.DEFAULT_ROCM}" if candidate else "no ROCm found"
    return Check("hip-path", "fail" if build else "warn",
                 f"HIP_PATH/ROCM_PATH unset and {where}: builds fail with 'hip_runtime.h not found'",
                 _export_fix(candidate, device_libs)), candidate


def _check_set_rocm(host: Host, build: bool, set_vars: list[str]) -> Check:
    """ROCM_PATH (else HIP_PATH) names a ROCm: one hipcc can run from, the only one named, and which it overrides."""
    status: Status = "fail" if build else "warn"
    var, value = set_vars[0], host.env[set_vars[0]]
    if re.search(r"\s", value):
        # ROCm 7.2's hipcc runs clang through `sh -c` unquoted (tests/test_rocm72_layouts.py).
        version = rocm_host.find_version(host, Path(value))[0] or "X.Y.Z"
        first_word = re.split(r"\s", value)[0]
        return Check("hip-path", status, f"{var}={value} has a space, which hipcc cannot run clang from (every "
                     f"compile fails with '{first_word}: not found')",
                     f"link it from a path without one (ln -s '{value}' /opt/rocm-{version}) and point "
                     "HIP_PATH/ROCM_PATH there")
    if len(set_vars) == 2 and not rocm_host.same_install(host.env["HIP_PATH"], value):
        return Check("hip-path", status, f"HIP_PATH={host.env['HIP_PATH']} and ROCM_PATH={value} are different ROCm "
                     "installs: hipcc takes HIP from HIP_PATH and the rest from ROCM_PATH (rocm-build-env.sh refuses "
                     "this)", f"export HIP_PATH={value} (or unset HIP_PATH)")
    both = " and ".join(f"{v}={host.env[v]}" for v in set_vars)
    default = rocm_host.DEFAULT_ROCM
    unused = ""
    if holds_header(default) and not rocm_host.same_install(default, value):
        real = os.path.realpath(default)
        named = f"{default} -> {real}" if real != str(default) else str(default)
        unused = f" ({var} wins: the ROCm at {named} is not used)"
    return Check("hip-path", "ok", f"{both}: {HIP_HEADER} found{unused}")


def check_device_libs(host: Host, compiler: str | None, device_libs: Path | None, how: str, build: bool) -> Check:
    """ROCm's device libraries (``ocml.bc`` ...): found, and found by the compiler in the user's environment.

    The compiler is asked (``-###``, nothing compiled) with the environment as it is plus HIP_PLATFORM=amd:
    a setup that works is reported as working, whatever layout it has.
    """
    status: Status = "fail" if build else "warn"
    if how == "HIP_DEVICE_LIB_PATH" and device_libs is not None and not holds_device_libs(device_libs):
        return Check("device-libs", status, f"HIP_DEVICE_LIB_PATH={device_libs} holds no {rocm_host.DEVICE_LIB_PROBE}",
                     "point HIP_DEVICE_LIB_PATH at ROCm's amdgcn/bitcode directory, or unset it")
    dry = rocm_host.dry_run_device_libs(host, compiler, {**host.env, "HIP_PLATFORM": "amd"}) if compiler else None
    if dry is not None and dry.ok:
        return Check("device-libs", "ok", f"{Path(compiler or '').name} links {dry.device_libs}")
    if device_libs is None:
        return Check("device-libs", status, f"no ROCm device libraries ({rocm_host.DEVICE_LIB_PROBE}) under "
                     "ROCm or the compiler's resource directory: every HIP compile fails "
                     "with 'cannot find ROCm device library'",
                     "install ROCm's device libraries (rocm-device-libs) and export HIP_DEVICE_LIB_PATH to them")
    if dry is not None:
        # Builds get HIP_DEVICE_LIB_PATH from rocm-build-env.sh; a plain hipcc in this shell does not.
        rocm = host.env.get("ROCM_PATH") or host.env.get("HIP_PATH")
        why = f" with ROCM_PATH={rocm} (clang looks in {Path(rocm) / 'amdgcn/bitcode'})" if rocm else ""
        return Check("device-libs", "warn", f"the compiler does not find the device libraries in {device_libs}"
                     f"{why}: {dry.error}",
                     f"export HIP_DEVICE_LIB_PATH={device_libs}" + (" (or unset ROCM_PATH)" if rocm else ""))
    return Check("device-libs", "ok", f"{device_libs} (from {how})")


def check_rocm_version(version: str | None, source: str, wanted: tuple[str, ...], build: bool) -> Check:
    """The ROCm version is known, and matches what the plan builds for."""
    if version is None:
        return Check("rocm-version", "fail" if build else "warn",
                     f"no ROCm version found (.info/version, {rocm_host.VERSION_HEADER}, hipconfig --version)",
                     "install ROCm and set ROCM_PATH to it")
    mine = version_tuple(version)[:2]
    if wanted and all(version_tuple(w)[:2] != mine for w in wanted):
        return Check("rocm-version", "fail" if build else "warn",
                     f"ROCm {version} (from {source}) but the environments pin rocm-version {', '.join(wanted)}",
                     f"build on a host with ROCm {wanted[-1]} and point ROCM_PATH/HIP_PATH at it")
    return Check("rocm-version", "ok", f"ROCm {version} (from {source})")


def check_hip_platform(host: Host, build: bool) -> Check:
    """``HIP_PLATFORM=amd`` when ``nvcc`` is on PATH: hipcc otherwise compiles for NVIDIA without saying so."""
    platform = host.env.get("HIP_PLATFORM", "")
    nvcc = host.find("nvcc")
    status: Status = "fail" if build else "warn"
    if platform and platform not in ("amd", "hcc"):
        return Check("hip-platform", status, f"HIP_PLATFORM={platform}: hipcc compiles for NVIDIA",
                     "export HIP_PLATFORM=amd")
    if nvcc and not platform:
        return Check("hip-platform", status,
                     f"nvcc is on PATH ({nvcc}) and HIP_PLATFORM is unset: hipcc picks the NVIDIA platform",
                     "export HIP_PLATFORM=amd")
    return Check("hip-platform", "ok", f"HIP_PLATFORM={platform}" if platform else "no nvcc on PATH")


def find_compiler(host: Host, rocm: Path | None) -> str | None:
    """``hipcc`` (or ``amdclang++``) from ROCm's bin directory first, then PATH."""
    for name in ("hipcc", "amdclang++"):
        if rocm is not None and (rocm / "bin" / name).is_file():
            return str(rocm / "bin" / name)
        found = host.find(name)
        if found:
            return found
    return None


def check_compiler(host: Host, compiler: str | None) -> Check:
    if compiler is None:
        return Check("compiler", "fail", "neither hipcc nor amdclang++ found (ROCm bin or PATH)",
                     "install ROCm's hipcc and put $ROCM_PATH/bin on PATH")
    res = host.run([compiler, "--version"], env={**host.env, "HIP_PLATFORM": "amd"})
    first = res.stdout.strip().splitlines()[0] if res is not None and res.stdout.strip() else "version unknown"
    return Check("compiler", "ok", f"{compiler} ({first})")


def compiler_verdict(res: CommandResult | None) -> str:
    """The line that says why a compile failed: the compiler's first ``error:`` line, else its last line."""
    if res is None:
        return "the compiler did not start"
    for text in (res.stderr, res.stdout):
        for line in text.splitlines():
            if "error:" in line or "error :" in line:
                return line.strip()
    # hipcc runs clang through the shell: when that cannot start it, the shell's line says why, and hipcc's own
    # last line ("failed to execute: <command>") does not.
    shell = [line.strip() for text in (res.stderr, res.stdout) for line in text.splitlines()
             if line.strip().endswith((": not found", "No such file or directory"))]
    return shell[0] if shell else res.last_error_line()


def check_offload_arch(host: Host, compiler: str | None, env: Mapping[str, str], rocm_version: str | None,
                       target: GpuTarget) -> Check:
    """Compile a tiny HIP kernel with ``--offload-arch=<gfx>`` in the build's environment (``env``).

    Compiled as the fixed environment would (HIP_PLATFORM=amd, HIP_DEVICE_LIB_PATH where needed): those traps
    are reported on their own, so the per-target result says only whether the toolchain can emit code for it.
    """
    name = f"offload-arch:{target.gfx}"
    if compiler is None:
        return Check(name, "fail", f"cannot test {target.gfx}: no HIP compiler", "see the 'compiler' check")
    with tempfile.TemporaryDirectory(prefix="rocmlock-doctor-") as tmp:
        src = Path(tmp) / "probe.hip"
        src.write_text(KERNEL)
        argv = [compiler, *(["-x", "hip"] if "clang" in Path(compiler).name else []),
                f"--offload-arch={target.gfx}", "-c", str(src), "-o", str(Path(tmp) / "probe.o")]
        res = host.run(argv, env=env, cwd=Path(tmp), timeout=COMPILE_TIMEOUT_S)
    if res is not None and res.ok:
        return Check(name, "ok", f"compiled a HIP kernel for {target.gfx} ({', '.join(target.products)})")
    verdict = compiler_verdict(res)
    too_old = rocm_version is not None and version_tuple(rocm_version) < version_tuple(target.first_rocm)
    if too_old or "invalid target id" in verdict.lower():
        found = f" (found ROCm {rocm_version})" if rocm_version else ""
        return Check(name, "fail",
                     f"toolchain too old for {target.gfx}, needs ROCm >= {target.first_rocm}{found}: {verdict}",
                     f"install ROCm >= {target.first_rocm} and point HIP_PATH/ROCM_PATH at it")
    return Check(name, "fail", f"cannot compile for {target.gfx}: {verdict}",
                 f"run: HIP_PLATFORM=amd {Path(compiler).name} --offload-arch={target.gfx} -c probe.hip")



def check_gpus(host: Host, targets: tuple[GpuTarget, ...], build: bool) -> Check | None:
    """Every GPU KFD lists, against the targets checked: None on a host without GPUs (``gpu-driver`` says so).

    Off a build host (``build`` False) a node none of whose GPUs is a target fails; a node with GPUs of several
    targets warns, naming what rattler and the CEP draft report as ``__amdgpu_arch`` there (:mod:`rocmlock.host.node`).
    A build host compiles for any target, so its GPUs only inform.
    """
    gpus, amdgpu = node_gpus(host.sysroot)
    if not gpus:
        return Check("gpus", "warn", f"no GPU of a known ISA: {amdgpu.describe()}",
                     "set CONDA_OVERRIDE_AMDGPU_ARCH as well (the ISA, e.g. 9.4.2)") if amdgpu.present else None
    wanted = [t.gfx for t in targets]
    present = [g for g in wanted if any(gpu.gfx == g for gpu in gpus)]
    listed = ", ".join(g.describe() for g in gpus)
    if wanted and not present and not build:
        pick = gfx_of_isa(amdgpu.isa) if amdgpu.isa else (rattler_pick(gpus) or gpus[0]).gfx
        return Check("gpus", "fail", f"{listed}; the environments checked are for {', '.join(wanted)}: none of "
                     f"them runs on this node ({amdgpu.describe()})",
                     f"use the environment built for {pick} (`rocmlock doctor --target {pick}`, "
                     f"`pixi install -e <env for {pick}>`)")
    mixed = gpu_choice(gpus, present[0] if len(present) == 1 else None)
    if mixed:
        return Check("gpus", "ok" if build else "warn", mixed,
                     "" if build else "pin each job to the GPUs of its environment's target (HIP_VISIBLE_DEVICES)")
    return Check("gpus", "ok", f"{listed}; {amdgpu.describe()}")


def check_gpu_driver(host: Host) -> Check:
    if host.kfd.exists():
        return Check("gpu-driver", "ok", f"{host.kfd} present (amdgpu kernel driver loaded)")
    return Check("gpu-driver", "warn", f"{host.kfd} missing: no AMD GPU driver on this host (building needs none; "
                 "running and `rocmlock verify` do)", "on a GPU host: load amdgpu, add the user to video and render")
