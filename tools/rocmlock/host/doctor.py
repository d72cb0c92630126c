"""Preflight checks of a ROCm host, so a build fails in seconds instead of at minute 90.

Each check is ok / warn / fail with a one-line fix. The toolchain checks run the host's real tools
(``hipconfig``, ``hipcc``/``amdclang++``) through an injectable runner; a tiny HIP kernel is compiled
with ``--offload-arch=<gfx>`` for every target the selected environments need, which is the only
reliable way to learn whether this toolchain can emit code for that GPU.

This module picks what to check from the workspace, sizes the build host (jobs, disk, ccache) and runs
every check; the checks themselves are in ``doctor_toolchain`` (ROCm and its compiler) and
``doctor_components`` (the ROCm libraries and MAGMA the packages link), the report in ``doctor_report``.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from rocmlock.gpu.targets import GpuTarget, all_targets, get_target, minor_version
from rocmlock.host import rocm as rocm_host
from rocmlock.host.doctor_components import check_magma, check_rocm_components, check_therock
from rocmlock.host.doctor_report import Check, DoctorReport, render_report
from rocmlock.host.doctor_toolchain import (
    check_compiler,
    check_device_libs,
    check_gpu_driver,
    check_gpus,
    check_hip_path,
    check_hip_platform,
    check_offload_arch,
    check_rocm_version,
    find_compiler,
)
from rocmlock.host.rocm import Host
from rocmlock.util.text import escape
from rocmlock.workspace.model import Environment, Workspace

__all__ = ["Check", "DoctorReport", "Host", "Resources", "render_report", "run_doctor"]

GIB = 1024**3
# PyTorch's own guidance: about 4-5 GB of RAM per parallel compile job (research/rocm-stack.md).
GIB_PER_JOB = 5
MIN_USEFUL_JOBS = 4
# A PyTorch ROCm build tree plus ccache and the package cache.
DISK_FAIL_GIB = 20
DISK_WARN_GIB = 50


@dataclass(frozen=True)
class Resources:
    """What the host offers a build: CPU cores, memory, free disk where the build writes."""

    cores: int
    memory_bytes: int
    free_disk_bytes: int


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


# ----------------------------------------------------------------------------- build-host resources


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


_MAX_JOBS = re.compile(r"[1-9][0-9]{0,2}")  # as recipes/rocm-build-env.sh's rocmlock_max_jobs takes it


def max_jobs_for(resources: Resources, env: Mapping[str, str]) -> int:
    """``MAX_JOBS`` when it is a positive whole number (below 1000), else ~5 GiB of memory per job, bounded by the
    cores: what the recipes' ``rocmlock_max_jobs`` exports."""
    if _MAX_JOBS.fullmatch(env.get("MAX_JOBS", "")):
        return int(env["MAX_JOBS"])
    return max(1, min(resources.cores, _jobs_by_memory(resources)))


def _jobs_by_memory(resources: Resources) -> int:
    return max(1, resources.memory_bytes // (GIB_PER_JOB * GIB))


def check_jobs(resources: Resources, env: Mapping[str, str]) -> tuple[Check, int]:
    jobs = max_jobs_for(resources, env)
    by_memory = _jobs_by_memory(resources)
    facts = f"{resources.cores} cores, {resources.memory_bytes / GIB:.0f} GiB available memory"
    if env.get("MAX_JOBS") and not _MAX_JOBS.fullmatch(env["MAX_JOBS"]):
        return Check("max-jobs", "warn", f"MAX_JOBS={escape(env['MAX_JOBS'][:40])!r} is not a positive whole number: "
                     f"the build computes {jobs} from {facts}", "unset MAX_JOBS, or set it to 1-999"), jobs
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


# ----------------------------------------------------------------------------- the run


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
    found = rocm_host.find_device_libs(search, prefix)
    hip_check, rocm = check_hip_path(host, build, found[0])
    version, source = rocm_host.find_version(search, rocm)
    # Usually the ROCm discovered is the one used: its search (hipconfig, clang) is not run again.
    device_libs, how = found if rocm == prefix else rocm_host.find_device_libs(search, rocm)
    compiler = find_compiler(host, rocm)
    checks = [hip_check, check_rocm_version(version, source, rocm_wanted, build),
              check_device_libs(host, compiler, device_libs, how, build), check_hip_platform(host, build),
              check_gpu_driver(host)]
    gpus = check_gpus(host, targets, build)
    therock_check = check_therock(rocm, tuple(t.gfx for t in targets), build)
    checks.extend(c for c in (gpus, therock_check) if c is not None)
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
