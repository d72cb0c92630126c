"""Preflight checks of a ROCm host, so a build fails in seconds instead of at minute 90.

Each check is ok / warn / fail with a one-line fix. The toolchain checks run the host's real tools
(``hipconfig``, ``hipcc``/``amdclang++``) through an injectable runner; a tiny HIP kernel is compiled
with ``--offload-arch=<gfx>`` for every target the selected environments need, which is the only
reliable way to learn whether this toolchain can emit code for that GPU.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from rocmlock import magma, rocm_host
from rocmlock.errors import InputError
from rocmlock.rocm_host import HIP_HEADER, Host, holds_device_libs, holds_header
from rocmlock.runner import CommandResult
from rocmlock.targets import GpuTarget, all_targets, get_target, minor_version, version_tuple
from rocmlock.workspace import Environment, Workspace

__all__ = ["Check", "DoctorReport", "Host", "Resources", "render_report", "run_doctor"]

Status = Literal["ok", "warn", "fail"]
GIB = 1024**3
# PyTorch's own guidance: about 4-5 GB of RAM per parallel compile job (research/rocm-stack.md).
GIB_PER_JOB = 5
MIN_USEFUL_JOBS = 4
# A PyTorch ROCm build tree plus ccache and the package cache.
DISK_FAIL_GIB = 20
DISK_WARN_GIB = 50
COMPILE_TIMEOUT_S = 300.0
KERNEL = """#include <hip/hip_runtime.h>
__global__ void rocmlock_probe(float* x) { x[threadIdx.x] += 1.0f; }
"""


@dataclass(frozen=True)
class Check:
    """One finding: ``name`` is stable (``offload-arch:gfx942``), ``fix`` says what to do."""

    name: str
    status: Status
    message: str
    fix: str = ""


@dataclass(frozen=True)
class Resources:
    """What the host offers a build: CPU cores, memory, free disk where the build writes."""

    cores: int
    memory_bytes: int
    free_disk_bytes: int


@dataclass(frozen=True)
class DoctorReport:
    """All checks, plus the facts a build uses (``max_jobs``, the toolchain found)."""

    checks: tuple[Check, ...]
    targets: tuple[str, ...]
    max_jobs: int
    rocm_version: str | None = None
    hip_path: str | None = None
    compiler: str | None = None
    build: bool = False
    device_libs: str | None = None

    @property
    def failures(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if c.status == "fail")

    @property
    def ok(self) -> bool:
        return not self.failures

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data (``rocmlock doctor --json``)."""
        return {
            "ok": self.ok,
            "build": self.build,
            "targets": list(self.targets),
            "max_jobs": self.max_jobs,
            "rocm_version": self.rocm_version,
            "hip_path": self.hip_path,
            "compiler": self.compiler,
            "device_libs": self.device_libs,
            "checks": [{"name": c.name, "status": c.status, "message": c.message, "fix": c.fix}
                       for c in self.checks],
        }


# ----------------------------------------------------------------------------- inputs from the workspace


def workspace_targets(workspace: Workspace, environments: list[str] | None = None) -> tuple[GpuTarget, ...]:
    """The GPU targets the selected environments need, in the order of the target table."""
    wanted: set[str] = set()
    for env in workspace.environments(environments):
        if env.gpu_target is not None:
            wanted.add(env.gpu_target.gfx)
    return tuple(t for gfx, t in all_targets().items() if gfx in wanted)


def doctor_targets(names: Iterable[str], workspace: Workspace | None = None,
                   environments: list[str] | None = None) -> list[GpuTarget]:
    """The GPUs named (``--target gfx942``) plus the selected environments' targets, in table order."""
    gfx = {get_target(name).gfx for name in names}
    if workspace is not None:
        gfx |= {t.gfx for t in workspace_targets(workspace, environments)}
    return [t for name, t in all_targets().items() if name in gfx]


def workspace_rocm_versions(workspace: Workspace, environments: list[str] | None = None) -> tuple[str, ...]:
    """The ROCm versions (``7.2``) the selected environments pin through ``rocm-version``."""
    found: set[str] = set()
    for env in workspace.environments(environments):
        dep = env.dependency("rocm-version")
        if dep is not None and dep.version not in ("", "*"):
            found.add(minor_version(dep.version))
    return tuple(sorted(found - {""}))


def workspace_packages(workspace: Workspace, environments: list[str] | None = None) -> tuple[str, ...]:
    """The packages of rocm_components.toml that the selected environments depend on directly and compile.

    flash-attn compiles (its CK extension) only for targets with CK kernels; its Triton backend builds nothing.
    """
    envs = list(workspace.environments(environments))

    def compiles(package: str, env: Environment) -> bool:
        if env.dependency(package) is None:
            return False
        return package != "flash-attn" or (env.gpu_target is not None and env.gpu_target.flash_attn_ck)

    return tuple(p for p in rocm_host.component_table() if any(compiles(p, env) for env in envs))


def detect_resources(where: Path) -> Resources:
    """Cores usable by this process, available memory and free disk at ``where`` (or its nearest parent).

    Memory is ``MemAvailable`` (what a build can use now, as ``recipes/rocm-build-env.sh`` counts it when it sizes
    ``MAX_JOBS`` outside rocmlock), falling back to ``MemTotal`` on kernels without it.
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    fields: dict[str, int] = {}
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in ("MemAvailable", "MemTotal") and rest.split():
                fields[key] = int(rest.split()[0]) * 1024
    except OSError:
        pass
    memory = fields.get("MemAvailable") or fields.get("MemTotal") or (
        os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    probe = where.resolve()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return Resources(cores, memory, shutil.disk_usage(probe).free)


def max_jobs_for(resources: Resources, env: Mapping[str, str]) -> int:
    """``MAX_JOBS`` when set, else ~5 GiB of memory per job, bounded by the cores."""
    if env.get("MAX_JOBS", "").isdigit() and int(env["MAX_JOBS"]) > 0:
        return int(env["MAX_JOBS"])
    return max(1, min(resources.cores, _jobs_by_memory(resources)))


def _jobs_by_memory(resources: Resources) -> int:
    return max(1, resources.memory_bytes // (GIB_PER_JOB * GIB))


# ----------------------------------------------------------------------------- toolchain checks


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


def check_rocm_components(rocm: Path | None, packages: Iterable[str], required: bool = True) -> Check | None:
    """The host-ROCm libraries the packages to build compile against (rocm_components.toml); None if none apply.

    ``required``: the packages are known to be built (a fail when one lacks a component); otherwise a warning.
    """
    missing = rocm_host.missing_components(rocm or Path("/nonexistent"), packages)
    if not missing:
        return None
    lacking = {pkg: comps for pkg, comps in missing.items() if comps}
    if not lacking:
        found = ", ".join(c.name for c in rocm_host.component_table()[next(iter(missing))])
        return Check("rocm-components", "ok", f"{' and '.join(missing)}: {found} found under {rocm}/include"
                     if len(missing) == 1 else f"{', '.join(missing)}: every component found under {rocm}/include")
    comps = {c for cs in lacking.values() for c in cs}
    message = "; ".join(f"{pkg} needs {', '.join(c.describe() for c in cs)}" for pkg, cs in lacking.items())
    return Check("rocm-components", "fail" if required else "warn",
                 f"missing under {rocm}/include: {message}",
                 f"apt-get install {' '.join(sorted(c.debian for c in comps))} (Debian/Ubuntu), or AMD's "
                 f"{' '.join(sorted(c.amd for c in comps))}")


MAGMA_FIX = ("apt-get install libmagma-rocm-dev where it is built for this ROCm (Debian sid's 2.9.0+ds-3 is ROCm 6's), "
             "else build MAGMA against this ROCm (PyTorch's .ci/docker/common/install_rocm_magma.sh); then export "
             f"{magma.KEY}=<its absolute prefix>")


def check_magma(env: Mapping[str, str], rocm: Path | None, packages: Iterable[str] | None,
                required: bool = True) -> Check | None:
    """MAGMA for the pytorch build (``ROCMLOCK_MAGMA_HOME``); None when pytorch is not among ``packages``.

    Without MAGMA pytorch still builds (some GPU linalg ops then raise), so the only failure is a
    ``ROCMLOCK_MAGMA_HOME`` the build would refuse, and only when pytorch is known to be built (``required``).
    """
    if packages is not None and "pytorch" not in packages:
        return None
    hip = magma.hip_runtime_of(rocm)
    given = env.get(magma.KEY, "")
    bad = "fail" if required and given else "warn"
    if magma.is_empty(env):
        return Check("magma", "warn", f"{magma.KEY} is set but empty: pytorch builds without MAGMA, as when unset",
                     f"unset {magma.KEY}, or set it to the absolute path of a MAGMA built for this ROCm")
    try:
        found = magma.given(env) or magma.discover(env, rocm)
    except InputError as exc:  # relative, missing, not a MAGMA: what rocmlock build and build.sh refuse
        return Check("magma", bad, str(exc), exc.hint)
    if found is not None and found.unreadable:
        return Check("magma", bad, f"MAGMA at {found.prefix}: cannot read {found.library} as a shared library "
                     f"({found.unreadable})", f"reinstall that MAGMA, point {magma.KEY} at another, or unset it")
    if found is None:
        return Check("magma", "warn", f"no MAGMA for the ROCm at {rocm}: pytorch builds without it "
                     "(torch.linalg.eig and the other GPU ops PyTorch runs on MAGMA raise)", MAGMA_FIX)
    if found.hip_runtime != hip or hip is None:
        return Check("magma", bad, f"MAGMA at {found.prefix} links {found.hip_runtime or 'no HIP runtime'} but the ROCm "
                     f"at {rocm} is {hip or 'unknown'}: built for another ROCm, pytorch cannot use it", MAGMA_FIX)
    if not given:
        return Check("magma", "warn", f"MAGMA at {found.prefix} ({found.library.name}, links {hip}) is not used: "
                     f"pytorch builds with MAGMA only when {magma.KEY} names it",
                     f"export {magma.KEY}={found.prefix} (the pytorch package then carries libmagma: README)")
    return Check("magma", "ok", f"MAGMA at {found.prefix} ({found.library}, links {hip}): pytorch builds with it "
                 "and carries libmagma")


def check_jobs(resources: Resources, env: Mapping[str, str]) -> tuple[Check, int]:
    jobs = max_jobs_for(resources, env)
    by_memory = _jobs_by_memory(resources)
    facts = f"{resources.cores} cores, {resources.memory_bytes / GIB:.0f} GiB available memory"
    if env.get("MAX_JOBS") and jobs > by_memory:
        return Check("max-jobs", "warn", f"MAX_JOBS={jobs} but {facts} supports {by_memory} (~{GIB_PER_JOB} GiB/job)",
                     f"export MAX_JOBS={min(by_memory, resources.cores)} or the compiler may be OOM-killed"), jobs
    if jobs < MIN_USEFUL_JOBS:
        return Check("max-jobs", "warn", f"MAX_JOBS={jobs} from {facts}: a PyTorch build will take many hours",
                     "build on a host with more cores and memory"), jobs
    return Check("max-jobs", "ok", f"MAX_JOBS={jobs} from {facts}"), jobs


def check_disk(resources: Resources, where: Path) -> Check:
    free = resources.free_disk_bytes / GIB
    if free < DISK_FAIL_GIB:
        return Check("disk", "fail", f"{free:.0f} GiB free at {where}; a PyTorch build needs ~{DISK_WARN_GIB} GiB",
                     "free space or pass --output on a larger disk")
    if free < DISK_WARN_GIB:
        return Check("disk", "warn", f"{free:.0f} GiB free at {where}; a PyTorch build needs ~{DISK_WARN_GIB} GiB",
                     "free space or pass --output on a larger disk")
    return Check("disk", "ok", f"{free:.0f} GiB free at {where}")


def check_ccache(host: Host) -> Check:
    found = host.find("ccache")
    if found:
        return Check("ccache", "ok", f"{found} (rebuilds after a failure reuse compiled objects)")
    return Check("ccache", "warn", "ccache not found: a rebuild after a failure recompiles everything",
                 "apt-get install ccache (or dnf install ccache)")


def check_gpu_driver(host: Host) -> Check:
    if host.kfd.exists():
        return Check("gpu-driver", "ok", f"{host.kfd} present (amdgpu kernel driver loaded)")
    return Check("gpu-driver", "warn", f"{host.kfd} missing: no AMD GPU driver on this host (building needs none; "
                 "running and `rocmlock verify` do)", "on a GPU host: load amdgpu, add the user to video and render")


def run_doctor(
    targets: Iterable[GpuTarget],
    *,
    build: bool = False,
    rocm_wanted: tuple[str, ...] = (),
    host: Host | None = None,
    workdir: Path = Path("."),
    resources: Resources | None = None,
    packages: tuple[str, ...] | None = None,
) -> DoctorReport:
    """Run every check; ``build`` adds the build-host checks (compiler, per-target compile, ROCm components, jobs,
    disk, ccache). ``packages``: the conda packages to be built (a missing ROCm component fails); None (no workspace):
    every package of rocm_components.toml, as warnings."""
    host = host or Host(env=dict(os.environ))
    targets = tuple(targets)
    search = rocm_host.searching(host)
    prefix = rocm_host.discover_prefix(search)
    hip_check, rocm = check_hip_path(host, build, rocm_host.find_device_libs(search, prefix)[0])
    version, source = rocm_host.find_version(search, rocm)
    device_libs, how = rocm_host.find_device_libs(search, rocm)
    compiler = find_compiler(host, rocm)
    checks = [hip_check, check_rocm_version(version, source, rocm_wanted, build),
              check_device_libs(host, compiler, device_libs, how, build), check_hip_platform(host, build),
              check_gpu_driver(host)]
    jobs = 1
    if build:
        resources = resources or detect_resources(workdir)
        checks.append(check_compiler(host, compiler))
        env = rocm_host.compile_env(host, rocm, device_libs)
        checks.extend(check_offload_arch(host, compiler, env, version, t) for t in targets)
        components = check_rocm_components(rocm, rocm_host.component_table() if packages is None else packages,
                                           required=packages is not None)
        checks.extend([components] if components else [])
        magma_check = check_magma(host.env, rocm, packages, required=packages is not None)
        checks.extend([magma_check] if magma_check else [])
        jobs_check, jobs = check_jobs(resources, host.env)
        checks.extend([jobs_check, check_disk(resources, workdir), check_ccache(host)])
    return DoctorReport(tuple(checks), tuple(t.gfx for t in targets), jobs, version,
                        str(rocm) if rocm else None, compiler, build, str(device_libs) if device_libs else None)


def render_report(report: DoctorReport) -> str:
    """The report as aligned text lines, a fix under each warn/fail."""
    width = max((len(c.name) for c in report.checks), default=0)
    lines = []
    for c in report.checks:
        lines.append(f"{c.status:<4}  {c.name:<{width}}  {c.message}")
        if c.fix and c.status != "ok":
            lines.append(f"{'':<4}  {'':<{width}}  fix: {c.fix}")
    verdict = "ok" if report.ok else f"{len(report.failures)} check(s) failed"
    lines.append(f"doctor: {verdict}")
    return "\n".join(lines)
