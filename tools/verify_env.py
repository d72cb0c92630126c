#!/usr/bin/env python3
"""rocm-env-check: is this environment able to fine-tune an LLM on an AMD GPU?

One standalone file, run by the environment's own python (``pixi run -e mi300x verify``,
``rocmlock verify -e mi300x``, or ``rocm-env-check`` inside a conda environment). It uses the
standard library, plus torch / flash_attn / transformers / peft / llamafactory (and zstandard, for
zstd-compressed GPU code before Python 3.14) when they import.
It never imports rocmlock: the expected GPU target and ROCm version come from flags
(``--expect-arch``, ``--expect-rocm``, ``--peak-tflops``) or from the environment's conda-meta
(the ``amdgpu-target`` and ``rocm-version`` packages), with a small built-in table as fallback.

Checks run in order, from the device files up to a training step; each one reports a status
(ok / warn / fail / skipped), the evidence it saw and a fix. A readable table goes to stdout
(``rocm-env-check > report.txt`` keeps it); with ``--json`` the report goes there instead and the table to
stderr. Progress, library chatter and errors go to stderr. Exit code: 0 when no required check failed, 1 otherwise,
2 for bad arguments.

Adding a check is adding one function decorated with ``@check(id, title)`` below the others:
it takes the :class:`Context` and returns an :class:`Outcome` (``ok(...)``, ``warn(...)``,
``fail(...)``, ``skip(...)``).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import glob
import io
import json
import math
import os
import re
import shutil
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROBE_VERSION = "0.1.0"
SCHEMA_VERSION = 1
STATUSES = ("ok", "warn", "fail", "skipped")

# gfx -> (ISA, dense bf16 peak TFLOP/s of the reference product (0 = unknown), flash-attn CK kernels exist,
# PyTorch's fused SDPA kernels (AOTriton) exist). A copy of rocmlock's data/gpu_targets.toml (a test keeps the two
# equal); flags override it.
TARGETS: dict[str, tuple[str, float, bool, bool]] = {
    "gfx908": ("9.0.8", 92.3, False, False),
    "gfx90a": ("9.0.10", 383.0, True, True),
    "gfx942": ("9.4.2", 1307.0, True, True),
    "gfx950": ("9.5.0", 2500.0, True, True),
    "gfx1100": ("11.0.0", 122.0, False, True),
    "gfx1101": ("11.0.1", 0.0, False, True),
    "gfx1102": ("11.0.2", 0.0, False, True),
    "gfx1150": ("11.5.0", 0.0, False, True),
    "gfx1151": ("11.5.1", 0.0, False, True),
    "gfx1152": ("11.5.2", 0.0, False, True),
    "gfx1153": ("11.5.3", 0.0, False, True),
    "gfx1200": ("12.0.0", 0.0, False, True),
    "gfx1201": ("12.0.1", 0.0, False, True),
}

# AOTriton release -> the targets it classes "experimental" (gpu_targets.toml aotriton_tier, from AOTriton's
# v3src/util.cc isArchExperimentallySupported() at each tag; a test keeps the two equal). PyTorch's SDPA then runs
# the math kernel on them unless TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL=1 was set before its first SDPA call
# (sdp_utils.cpp reads it once). 0.12b moved gfx1151 out (gfx1100 left with 0.11.1b); 0.13b dropped gfx1250.
AOTRITON_EXPERIMENTAL: dict[str, frozenset[str]] = {
    "0.11.2b": frozenset({"gfx1101", "gfx1102", "gfx1150", "gfx1151", "gfx1152", "gfx1153", "gfx1200"}),
    "0.12b": frozenset({"gfx1101", "gfx1102", "gfx1150", "gfx1152", "gfx1153", "gfx1200"}),
    "0.13b": frozenset({"gfx1101", "gfx1102", "gfx1150", "gfx1152", "gfx1153", "gfx1200"}),
}
# PyTorch series -> the AOTriton release its cmake/External/aotriton.cmake (__AOTRITON_VER) builds with, a copy of
# rocmlock's aotriton.toml [pytorch_releases] (a test keeps them equal): 2.12 is 0.11.2b (pytorch/pytorch#174105), 2.13 is 0.12b
# (pytorch/pytorch#184288, in v2.13.0). A newer series than those listed takes the newest release listed: AOTriton
# only moves forward, and from 0.12b on gfx1100 and gfx1151 are supported.
AOTRITON_OF_TORCH: dict[str, str] = {"2.12": "0.11.2b", "2.13": "0.12b"}
AOTRITON_VAR = "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL"
# (AOTriton release, target) -> a known defect of that release on that target that users feel, with its upstream
# issue; a copy of rocmlock's rocmlock.gpu.targets.AOTRITON_KNOWN_ISSUES (a test keeps them equal). ROCm/TheRock#7696
# ("Verified Issue", 2026-08-27, first identified in ROCm 10.0.0): AOTriton 0.13b selects a slower flash-attention
# backward kernel on MI350X (gfx950) than 0.11.2b's 3-kernel split, 9-25 % lower training throughput. The SDPA check
# reads the release torch really bundles (torch/lib/libaotriton_v2.so.<version>, 0.13.0 for 0.13b).
AOTRITON_KNOWN_ISSUES: dict[tuple[str, str], str] = {
    ("0.13b", "gfx950"): ("its flash-attention backward on gfx950 is a slower kernel than 0.11.2b's 3-kernel "
                          "split: 9-25 % lower training throughput (ROCm/TheRock#7696)"),
}
AOTRITON_ISSUE_FIX = ("train with flash-attn's CK kernels (LLaMA-Factory `flash_attn: fa2`; `rocmlock preset` picks "
                      "them where the environment has flash-attn), or use a PyTorch built with AOTriton 0.11.2b "
                      "(the issue's workaround)")

DRIVER_FIX = ("install and load the amdgpu kernel driver on the host: AMD's `amdgpu-install --usecase=dkms`, "
              "then `sudo modprobe amdgpu` (or reboot); `dmesg | grep -i amdgpu` shows why it did not load")
CONTAINER_FIX = ("start the container with `--device=/dev/kfd --device=/dev/dri --group-add video "
                 "--group-add render` (docker/podman; Kubernetes: request amd.com/gpu from the AMD device plugin)")
# What amd-smi / rocm-smi / rocminfo print when the kernel driver is missing; they may still exit 0.
# ROCm 7.2.4's amd-smi says "Drivers not loaded (amdgpu, ... not found in modules)" and exits 255, its
# rocm-smi logs "Driver not initialized (amdgpu not found in modules)" and exits 0, its rocminfo prints "ROCk module
# is NOT loaded" and exits 1 (run in tests/test_rocm72_probe.py).
DRIVER_MISSING_MARKERS = ("rock module is not loaded", "driver not initialized", "amdgpu not found in modules",
                          "driver_not_loaded", "amdgpu driver is not loaded", "unable to open /dev/kfd",
                          "drivers not loaded")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


# ----------------------------------------------------------------------------- report model


@dataclass(frozen=True)
class Outcome:
    """What one check found: status, the evidence it saw, the fix, machine-readable data."""

    status: str
    evidence: str
    fix: str = ""
    data: Mapping[str, Any] = field(default_factory=dict)


def _tally(items: Sequence[str]) -> str:
    """``["gfx942", "gfx942", "gfx90a"]`` -> ``"gfx90a x1, gfx942 x2"``."""
    return ", ".join(f"{item} x{items.count(item)}" for item in sorted(set(items)))


def ok(evidence: str, **data: Any) -> Outcome:
    return Outcome("ok", evidence, "", data)


def warn(evidence: str, fix: str, **data: Any) -> Outcome:
    return Outcome("warn", evidence, fix, data)


def fail(evidence: str, fix: str, **data: Any) -> Outcome:
    return Outcome("fail", evidence, fix, data)


def skip(evidence: str, fix: str = "", **data: Any) -> Outcome:
    return Outcome("skipped", evidence, fix, data)


@dataclass(frozen=True)
class Check:
    """A registered check; ``option`` names the flag (bench, train) that turns it on."""

    id: str
    title: str
    func: Callable[[Context], Outcome]
    required: bool = True
    option: str | None = None


CHECKS: list[Check] = []


Precondition = Callable[["Context"], "Outcome | None"]


def check(check_id: str, title: str, *, required: bool = True, option: str | None = None,
          needs: Sequence[Precondition] = ()) -> Callable[[Callable[[Context], Outcome]], Callable[[Context], Outcome]]:
    """Register a check; checks run in registration order.

    ``needs`` run first, in order; the first that returns an outcome (a skip: torch did not import, no
    GPU, ...) is the check's outcome.
    """

    def register(func: Callable[[Context], Outcome]) -> Callable[[Context], Outcome]:
        @functools.wraps(func)
        def run(ctx: Context) -> Outcome:
            for precondition in needs:
                early = precondition(ctx)
                if early is not None:
                    return early
            return func(ctx)

        CHECKS.append(Check(check_id, title, run, required, option))
        return run

    return register


@dataclass
class Context:
    """What the checks share: the options, the host view (``root``) and facts found so far."""

    root: Path
    prefix: Path
    environ: Mapping[str, str]
    expect_arch: str | None = None
    expect_arch_source: str = ""
    expect_rocm: str | None = None
    expect_rocm_source: str = ""
    peak_tflops: float | None = None
    device_mode: str = "auto"
    min_ratio: float = 0.3
    train_steps: int = 30
    train_backend: str = "auto"
    uid: int = field(default_factory=os.getuid)
    gids: tuple[int, ...] = field(default_factory=lambda: tuple(sorted({os.getegid(), *os.getgroups()})))
    facts: dict[str, Any] = field(default_factory=dict)

    def path(self, absolute: str) -> Path:
        """A system path (``/dev/kfd``) seen through ``--root``."""
        return self.root / absolute.lstrip("/")

    @property
    def real_root(self) -> bool:
        return self.root.resolve() == Path("/")

    @property
    def torch(self) -> Any:
        """The torch module, imported on first use (None when the import fails: see ``torch_error``)."""
        if "torch" not in self.facts:
            try:
                import torch
            except Exception as exc:  # noqa: BLE001 - an import fails with anything (missing .so, ABI, ...)
                self.facts["torch"], self.facts["torch_error"] = None, exc_text(exc)
            else:
                self.facts["torch"] = torch
        return self.facts["torch"]

    @property
    def is_rocm(self) -> bool:
        return self.torch is not None and bool(getattr(self.torch.version, "hip", None))

    @property
    def gpu_count(self) -> int:
        torch = self.torch
        return torch.cuda.device_count() if torch is not None and torch.cuda.is_available() else 0

    @property
    def device(self) -> str | None:
        """Where compute checks run: ``cuda`` (ROCm keeps the name), ``cpu`` on request, else None."""
        if self.torch is None:
            return None
        if self.device_mode == "cpu":
            return "cpu"
        return "cuda" if self.gpu_count else None


# ----------------------------------------------------------------------------- small helpers


def gfx_of(name: str) -> str:
    """``gfx942:sramecc+:xnack-`` -> ``gfx942``."""
    return name.split(":", 1)[0].strip().lower()


def gfx_from_kfd_version(value: int) -> str:
    """KFD's gfx_target_version (``90402``, ``90010``, ``110000``) -> ``gfx942``, ``gfx90a``, ``gfx1100``."""
    major, minor, step = value // 10000, (value // 100) % 100, value % 100
    return f"gfx{major}{minor:x}{step:x}"


def kfd_gpus(ctx: Context) -> list[tuple[str, tuple[int, int, int], int | None]]:
    """(gfx, ISA version, compute units or None) of every GPU node of KFD's topology, in node order.

    Compute units are ``simd_count / simd_per_cu``, as rattler counts them (conda/rattler#2806, amdgpu.rs).
    """
    def node(path: str) -> int:
        name = Path(path).parent.name
        return int(name) if name.isdigit() else 1 << 30

    gpus = []
    for props in sorted(glob.glob(str(ctx.path("/sys/class/kfd/kfd/topology/nodes/*/properties"))), key=node):
        text = read_text(Path(props)) or ""
        found = {k: int(v) for k, v in re.findall(r"^(gfx_target_version|simd_count|simd_per_cu)\s+(\d{1,20})\s*$",
                                                   text, re.MULTILINE)}
        value = found.get("gfx_target_version", 0)
        if value:
            units = found["simd_count"] // found["simd_per_cu"] if found.get("simd_count") is not None \
                and found.get("simd_per_cu") else None
            gpus.append((gfx_from_kfd_version(value), (value // 10000 % 100, value // 100 % 100, value % 100), units))
    return gpus


def rattler_pick(gpus: Sequence[tuple[str, tuple[int, int, int], int | None]]) -> str:
    """The GPU target rattler/pixi report as ``__amdgpu_arch``: the most compute units (unknown below any known),
    ties to the highest ISA (conda/rattler#2806, amdgpu.rs select_device)."""
    return max(gpus, key=lambda g: (g[2] is not None, g[2] or 0, g[1]))[0]


# rattler's AMD GPU overrides (py-rattler 0.28, conda/rattler#2806, rattler_virtual_packages amdgpu.rs), read as
# rattler reads them, so the probe answers as `rattler.VirtualPackage.detect` (and rocmlock's node checks) do:
# CONDA_OVERRIDE_AMDGPU "0" forces __amdgpu on, "" off, anything else is refused; CONDA_OVERRIDE_AMDGPU_ARCH is
# the ISA "major.minor.stepping" in decimal ("" for none); __amdgpu_arch exists only with __amdgpu.
AMDGPU_OVERRIDES = ("CONDA_OVERRIDE_AMDGPU", "CONDA_OVERRIDE_AMDGPU_ARCH")
_ISA = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+")


def amdgpu_seen(ctx: Context, found: Sequence[tuple[str, tuple[int, int, int], int | None]]
                ) -> tuple[bool, tuple[int, int, int] | None, str]:
    """(__amdgpu, __amdgpu_arch, where they come from) for KFD's GPUs ``found`` and rattler's overrides;
    a ValueError names a bad override as rattler refuses it."""
    present_override = ctx.environ.get(AMDGPU_OVERRIDES[0])
    arch_override = ctx.environ.get(AMDGPU_OVERRIDES[1])
    if present_override not in (None, "", "0"):
        raise ValueError(f"{AMDGPU_OVERRIDES[0]}={present_override!r}: __amdgpu is always '0'; set it to 0 (on) or "
                         "to an empty string (off)")
    # Each part is a u32 to rattler: 4294967295.0.0 is read, 4294967296.0.0 refused ("invalid AMDGPU ISA version").
    if arch_override and (not _ISA.fullmatch(arch_override) or
                          any(int(part) > 0xFFFFFFFF for part in arch_override.split("."))):
        raise ValueError(f"{AMDGPU_OVERRIDES[1]}={arch_override!r}: not an AMDGPU ISA version major.minor.stepping "
                         "(e.g. 9.4.2 for gfx942)")
    overrides = [f"{n}={ctx.environ[n]!r}" for n in AMDGPU_OVERRIDES if n in ctx.environ]
    source = f"rattler with {' '.join(overrides)}" if overrides else "/sys/class/kfd/kfd/topology/nodes"
    present = present_override == "0" if present_override is not None else bool(found)
    if not present:
        return False, None, source
    if arch_override is not None:
        isa = tuple(int(p) for p in arch_override.split(".")) if arch_override else None
        return True, (isa[0], isa[1], isa[2]) if isa else None, source
    pick = max(found, key=lambda g: (g[2] is not None, g[2] or 0, g[1]), default=None)
    return True, pick[1] if pick else None, source


def amdgpu_arch_picks(gpus: Sequence[tuple[str, tuple[int, int, int], int | None]]) -> str:
    """What ``__amdgpu_arch`` is on a node of several targets: rattler/pixi take the GPU with the most compute
    units, ties to the highest ISA (conda/rattler#2806); the CEP draft the highest ISA (conda/ceps#189)."""
    rattler = next(g for g in gpus if g[0] == rattler_pick(gpus))
    cep = max(gpus, key=lambda g: g[1])
    return (f"__amdgpu_arch is {'.'.join(map(str, rattler[1]))} ({rattler[0]}) for rattler/pixi (most compute "
            f"units) and {'.'.join(map(str, cep[1]))} ({cep[0]}) under the CEP draft (highest ISA)")


def major_minor(version: str) -> tuple[int, ...]:
    nums = re.findall(r"\d+", version)
    return tuple(int(n) for n in nums[:2])


def read_text(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return None


def conda_meta_record(prefix: Path, name: str) -> dict[str, Any] | None:
    """The installed record of package ``name`` in ``prefix/conda-meta`` (None when not installed)."""
    for path in sorted(prefix.joinpath("conda-meta").glob(f"{name}-*.json")):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        # A damaged record (valid JSON, not an object) is skipped like unreadable JSON, not a traceback.
        if isinstance(record, dict) and record.get("name") == name:
            return record
    return None


def group_db(ctx: Context) -> dict[int, tuple[str, tuple[str, ...]]]:
    """gid -> (name, members) from ``<root>/etc/group``."""
    out: dict[int, tuple[str, tuple[str, ...]]] = {}
    for line in (read_text(ctx.path("/etc/group")) or "").splitlines():
        parts = line.split(":")
        if len(parts) >= 4 and parts[2].isdigit():
            out[int(parts[2])] = (parts[0], tuple(m for m in parts[3].split(",") if m))
    return out


def user_name(ctx: Context) -> str:
    for line in (read_text(ctx.path("/etc/passwd")) or "").splitlines():
        parts = line.split(":")
        if len(parts) > 2 and parts[2] == str(ctx.uid):
            return parts[0]
    return ctx.environ.get("USER", f"uid {ctx.uid}")


def in_container(ctx: Context) -> str | None:
    """Why this looks like a container (None when it does not)."""
    for marker in ("/.dockerenv", "/run/.containerenv"):
        if ctx.path(marker).exists():
            return marker
    if ctx.environ.get("container"):
        return f"container={ctx.environ['container']}"
    if ctx.environ.get("KUBERNETES_SERVICE_HOST"):
        return "KUBERNETES_SERVICE_HOST is set"
    cgroup = read_text(ctx.path("/proc/1/cgroup")) or ""
    for word in ("docker", "kubepods", "containerd", "libpod", "lxc"):
        if word in cgroup:
            return f"/proc/1/cgroup mentions {word}"
    return None


def can_read_write(ctx: Context, path: Path) -> bool:
    """Would the kernel let this user open ``path`` read-write, judged from its mode bits?

    Mode bits are what a fake ``--root`` can express; on the real root ``os.access`` also counts,
    because desktops grant render nodes to the logged-in user through ACLs.
    """
    st = path.stat()
    if ctx.uid == 0:
        return True
    if st.st_uid == ctx.uid:
        bits = (stat.S_IRUSR | stat.S_IWUSR)
    elif st.st_gid in ctx.gids:
        bits = (stat.S_IRGRP | stat.S_IWGRP)
    else:
        bits = (stat.S_IROTH | stat.S_IWOTH)
    allowed = st.st_mode & bits == bits
    return allowed or (ctx.real_root and os.access(path, os.R_OK | os.W_OK))


def describe_file(ctx: Context, path: Path, groups: dict[int, tuple[str, tuple[str, ...]]]) -> str:
    st = path.stat()
    group = groups.get(st.st_gid, (str(st.st_gid),))[0]
    return f"/{path.relative_to(ctx.root)} (group {group}, mode {stat.S_IMODE(st.st_mode):04o})"


def find_tool(ctx: Context, name: str) -> str | None:
    """``name`` on PATH, else in ``$ROCM_PATH/bin``, ``$HIP_PATH/bin``, ``/opt/rocm/bin``."""
    dirs = [ctx.environ.get("PATH", "")]
    dirs += [str(Path(ctx.environ[v]) / "bin") for v in ("ROCM_PATH", "HIP_PATH") if ctx.environ.get(v)]
    dirs.append(str(ctx.path("/opt/rocm/bin")))
    return shutil.which(name, path=os.pathsep.join(dirs))


def run_tool(ctx: Context, argv: Sequence[str], timeout: float = 30.0) -> tuple[int, str]:
    """Run a host tool; returns (exit code, stdout+stderr without colour codes)."""
    try:
        proc = subprocess.run(list(argv), check=False, capture_output=True, text=True, timeout=timeout,
                              env=dict(ctx.environ), errors="replace")
    except subprocess.TimeoutExpired:
        return 124, f"timed out after {timeout:.0f} s"
    except OSError as exc:
        return 127, str(exc)
    return proc.returncode, ANSI.sub("", proc.stdout + proc.stderr)


def driver_marker(output: str) -> str | None:
    """The line in which a tool says the kernel driver is missing."""
    for line in output.splitlines():
        if any(m in line.lower() for m in DRIVER_MISSING_MARKERS):
            return line.strip()
    return None


def first_line(text: str, limit: int = 160) -> str:
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line if len(line) <= limit else line[: limit - 3] + "..."


def exc_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {first_line(str(exc)) or '(no message)'}"


# ----------------------------------------------------------------------------- host


@check("host.driver", "amdgpu kernel driver loaded; the environment's target among the GPUs")
def check_driver(ctx: Context) -> Outcome:
    module = ctx.path("/sys/module/amdgpu")
    found = kfd_gpus(ctx)
    try:
        present, isa, source = amdgpu_seen(ctx, found)
    except ValueError as exc:
        return fail(f"bad GPU override: {exc}", "fix or unset the variable (rattler refuses it too)")
    label = "KFD GPUs"
    if any(n in ctx.environ for n in AMDGPU_OVERRIDES):  # the node as rattler/pixi see it under the overrides
        label = "GPU as rattler sees it"
        found = [(gfx_from_kfd_version(isa[0] * 10000 + isa[1] * 100 + isa[2]), isa, None)] if isa else []
    seen = (f"__amdgpu_arch {'.'.join(map(str, isa))} from {source}" if isa else
            f"{'__amdgpu but ' if present else ''}no __amdgpu_arch from {source}")
    gpus = [g[0] for g in found]
    if not module.is_dir():
        nvidia = " (an NVIDIA driver is loaded: not ROCm)" if ctx.path("/sys/module/nvidia").is_dir() else ""
        return fail(f"/sys/module/amdgpu does not exist: the amdgpu driver is not loaded{nvidia}", DRIVER_FIX)
    state = (read_text(module / "initstate") or "live").strip()
    if state != "live":
        return fail(f"amdgpu initstate is '{state}'", DRIVER_FIX)
    if not gpus:
        return warn(f"amdgpu is loaded but KFD lists no GPU node (/sys/class/kfd/kfd/topology; {seen})",
                    "a GPU without compute support, or KFD disabled; check `dmesg | grep -i kfd`")
    summary = _tally(gpus)
    if ctx.expect_arch and ctx.expect_arch not in gpus:
        return fail(f"amdgpu loaded; {label}: {summary}; the environment is for {ctx.expect_arch} "
                    f"({ctx.expect_arch_source}), which is none of them ({seen})",
                    f"install the environment built for {rattler_pick(found)} "
                    "(its amdgpu-target) on this node", gfx=gpus)
    if len(set(gpus)) > 1:
        mine = [str(i) for i, g in enumerate(gpus) if g == ctx.expect_arch]
        listed = ", ".join(f"GPU {i} {g} ({u if u is not None else '?'} CUs)" for i, (g, _isa, u) in enumerate(found))
        fix = (f"export HIP_VISIBLE_DEVICES={','.join(mine)} (the {ctx.expect_arch} GPUs) so the environment uses "
               "only its target" if mine else "pass --expect-arch or install the environment's amdgpu-target package")
        return warn(f"amdgpu loaded; GPUs of {len(set(gpus))} targets: {listed}; {amdgpu_arch_picks(found)}", fix,
                    gfx=gpus)
    return ok(f"amdgpu loaded; {label}: {summary}; {seen}", gfx=gpus)


def device_files(ctx: Context) -> tuple[Path | None, list[Path]]:
    """(/dev/kfd or None, the /dev/dri/renderD* nodes) under ``--root``."""
    kfd = ctx.path("/dev/kfd")
    return (kfd if kfd.exists() else None), sorted(Path(r) for r in glob.glob(str(ctx.path("/dev/dri/renderD*"))))


@check("host.devices", "/dev/kfd and /dev/dri/renderD* present")
def check_devices(ctx: Context) -> Outcome:
    kfd, renders = device_files(ctx)
    container = in_container(ctx)
    missing = [n for n, present in (("/dev/kfd", kfd), ("/dev/dri/renderD*", renders)) if not present]
    if not missing:
        names = ", ".join(f"/{p.relative_to(ctx.root)}" for p in [kfd, *renders] if p)
        return ok(names + (f" (container: {container})" if container else ""))
    evidence = f"missing {' and '.join(missing)}"
    if container:
        return fail(f"{evidence}; in a container ({container})", CONTAINER_FIX)
    return fail(evidence, "the amdgpu driver creates these files; see host.driver. " + DRIVER_FIX)


@check("host.access", "this user can open the GPU device files")
def check_access(ctx: Context) -> Outcome:
    kfd, renders = device_files(ctx)
    files = [p for p in [kfd, *renders] if p]
    if not files:
        return skip("no device files (see host.devices)")
    groups = group_db(ctx)
    user = user_name(ctx)
    mine = sorted(groups.get(g, (str(g),))[0] for g in ctx.gids)
    denied = [f for f in files if not can_read_write(ctx, f)]
    who = f"user {user} (uid {ctx.uid}) in groups {', '.join(mine) or 'none'}"
    if not denied:
        return ok(f"read-write for {who}", groups=mine)
    needed = sorted({groups.get(f.stat().st_gid, (str(f.stat().st_gid),))[0] for f in denied})
    listed = [g for gid, (g, members) in groups.items() if g in needed and user in members and gid not in ctx.gids]
    evidence = f"{who} cannot open " + "; ".join(describe_file(ctx, f, groups) for f in denied)
    if listed:
        return fail(evidence + f"; /etc/group lists {user} in {', '.join(listed)} but this session lacks it",
                    "log out and back in (or run `newgrp render`) so the new group membership applies")
    if in_container(ctx):
        return fail(evidence, "add the device files' groups to the container: `--group-add video --group-add "
                              "render` (or the numeric gid: `--group-add $(stat -c %g /dev/kfd)`)")
    return fail(evidence, f"sudo usermod -aG {','.join(sorted(set(needed) | {'render', 'video'}))} {user}, "
                          "then log out and back in")


# ----------------------------------------------------------------------------- host tools


def _smi_gpus(tool: str, output: str) -> list[str]:
    if tool == "amd-smi":
        return re.findall(r"^\s*GPU:\s*(\d+)", output, re.MULTILINE)
    return sorted(set(re.findall(r"GPU\[(\d{1,9})\]", output)), key=int)  # (int() refuses 4,300 digits)


@check("tools.smi", "amd-smi / rocm-smi lists the GPUs")
def check_smi(ctx: Context) -> Outcome:
    for tool, argv in (("amd-smi", ["list"]), ("rocm-smi", ["--showproductname"])):
        exe = find_tool(ctx, tool)
        if exe:
            break
    else:
        return warn("neither amd-smi nor rocm-smi found (PATH, $ROCM_PATH/bin, /opt/rocm/bin)",
                    "install the host's ROCm (amd-smi ships with it) or add /opt/rocm/bin to PATH")
    code, output = run_tool(ctx, [exe, *argv])
    marker = driver_marker(output)
    if marker:
        return fail(f"no AMD GPU driver loaded: {exe} says \"{marker}\" (exit {code})", DRIVER_FIX)
    gpus = _smi_gpus(tool, output)
    if code != 0:
        return fail(f"{exe} {' '.join(argv)} exited {code}: {first_line(output)}",
                    "run it by hand; a ROCm install that does not match the driver is the usual cause")
    if not gpus:
        return fail(f"{exe} ran but lists no GPU: {first_line(output) or '(no output)'}",
                    "see host.driver and host.devices; in a container pass the --device flags")
    return ok(f"{tool} lists {len(gpus)} GPU(s)", count=len(gpus))


@check("tools.rocminfo", "rocminfo reports the GPU targets")
def check_rocminfo(ctx: Context) -> Outcome:
    exe = find_tool(ctx, "rocminfo")
    if not exe:
        return warn("rocminfo not found (PATH, $ROCM_PATH/bin, /opt/rocm/bin)",
                    "install the host's ROCm runtime (rocminfo) or add /opt/rocm/bin to PATH")
    code, output = run_tool(ctx, [exe])
    marker = driver_marker(output)
    if marker:
        return fail(f"no AMD GPU driver loaded: {exe} says \"{marker}\" (exit {code})", DRIVER_FIX)
    names = re.findall(r"^\s*Name:\s+(gfx[0-9a-f]+)", output, re.MULTILINE)
    if code != 0 or not names:
        return fail(f"rocminfo exited {code} with no gfx agent: {first_line(output) or '(no output)'}",
                    "see host.devices and host.access: rocminfo needs read-write /dev/kfd")
    found = ", ".join(sorted(set(names)))
    if ctx.expect_arch and ctx.expect_arch not in names:
        return fail(f"rocminfo sees {found}; this environment is for {ctx.expect_arch}",
                    f"install the environment built for {names[0]} (its amdgpu-target), not {ctx.expect_arch}")
    return ok(f"GPU agents: {found}", gfx=sorted(set(names)))


# ----------------------------------------------------------------------------- ROCm install


def rocm_version(root: Path) -> tuple[str, str] | None:
    """(version, file) of the ROCm at ``root``: .info/version, rocm-core's header, else HIP's."""
    text = (read_text(root / ".info" / "version") or "").strip()
    version = text.splitlines()[0].split("-")[0] if text else ""
    # A file of the host: a version (7.2.1, TheRock's 7.14.0rc20260930) or nothing read from it.
    if re.fullmatch(r"[0-9]{1,3}\.[0-9]{1,3}(\.[0-9]{1,4})?[A-Za-z0-9.+~]{0,40}", version):
        return version, ".info/version"
    for rel, prefix in (("include/rocm-core/rocm_version.h", "ROCM_VERSION"),
                        ("include/hip/hip_version.h", "HIP_VERSION")):
        text = read_text(root / rel) or ""
        parts = [re.search(rf"#define\s+{prefix}_{p}\s+(\d+)", text) for p in ("MAJOR", "MINOR", "PATCH")]
        if parts[0] and parts[1]:
            return ".".join(m.group(1) for m in parts if m), rel
    return None


@check("rocm.path", "HIP_PATH / ROCM_PATH point at a ROCm install")
def check_rocm_path(ctx: Context) -> Outcome:
    set_vars = {v: ctx.environ[v] for v in ("HIP_PATH", "ROCM_PATH") if ctx.environ.get(v)}
    export_fix = ("export ROCM_PATH=/opt/rocm HIP_PATH=/opt/rocm (the rocm-version package sets both when the "
                  "environment is activated: `pixi shell -e ENV`, `conda activate ENV`)")
    if not set_vars:
        default = ctx.path("/opt/rocm")
        sdk = therock_rocm(ctx)
        if sdk is not None:
            root, version, _exe = sdk
            if root is None:
                return warn(f"HIP_PATH and ROCM_PATH are unset; TheRock's ROCm {version or '?'} runtime packages "
                            "(rocm-sdk) without rocm-sdk-devel: torch runs, building a HIP extension does not",
                            "pip install 'rocm[devel]' (TheRock's index for this release), then activate the "
                            "environment")
            return warn(f"HIP_PATH and ROCM_PATH are unset; TheRock's ROCm {version or '?'} (rocm-sdk path --root: "
                        f"{root})", export_fix.replace("/opt/rocm", str(root)), version=version)
        if (default / "include/hip/hip_runtime.h").is_file():
            return warn("HIP_PATH and ROCM_PATH are unset; /opt/rocm exists", export_fix)
        distro = distro_rocm(ctx)
        if distro is not None:
            # Not `export ROCM_PATH=/usr` alone: clang then looks for the device libraries in /usr/amdgcn/bitcode.
            version, source = rocm_version(distro) or ("?", "no version file")
            return warn(f"HIP_PATH and ROCM_PATH are unset; a distribution's ROCm {version} is in /usr ({source})",
                        "activate the environment (`pixi shell -e ENV`, `conda activate ENV`): the rocm-version "
                        "package points ROCM_PATH/HIP_PATH at /usr and HIP_DEVICE_LIB_PATH at its device libraries")
        return fail("HIP_PATH and ROCM_PATH are unset and there is no ROCm in /opt/rocm or /usr",
                    "install ROCm on the host, then " + export_fix)
    problems = []
    for var, value in set_vars.items():
        path = Path(value)
        if not path.is_dir():
            problems.append(f"{var}={value} does not exist")
        elif not (path / "include/hip/hip_runtime.h").is_file():
            problems.append(f"{var}={value} has no include/hip/hip_runtime.h (builds fail with "
                            "'hip_runtime.h not found')")
        elif rocm_version(path) is None:
            problems.append(f"{var}={value} has no version file (.info/version, include/rocm-core/"
                            "rocm_version.h, include/hip/hip_version.h)")
    if problems:
        return fail("; ".join(problems), "point it at the ROCm install (usually /opt/rocm or /opt/rocm-X.Y.Z): "
                                         + export_fix)
    version, source = rocm_version(Path(next(iter(set_vars.values())))) or ("?", "")
    described = ", ".join(f"{k}={v}" for k, v in set_vars.items())
    if len({Path(v).resolve() for v in set_vars.values()}) > 1:
        return warn(f"{described} differ", "point HIP_PATH and ROCM_PATH at the same ROCm")
    return ok(f"{described}: ROCm {version} ({source})", version=version)


def therock_rocm(ctx: Context) -> tuple[Path | None, str | None, str] | None:
    """(devel tree or None, version, the rocm-sdk command) of TheRock's Python packages (ROCm 7.14 and later) when
    ``rocm-sdk`` is on PATH.

    ``rocm-sdk path --root`` prints ``<site-packages>/_rocm_sdk_devel`` and fails without ``rocm[devel]`` (a node
    that only runs needs none); ``rocm-sdk version`` prints the release (TheRock's rocm_sdk/__main__.py).
    """
    exe = shutil.which("rocm-sdk", path=ctx.environ.get("PATH", ""))
    if not exe:
        return None
    code, out = run_tool(ctx, [exe, "path", "--root"], timeout=600.0)
    lines = [ln.strip() for ln in out.splitlines() if ln.strip().startswith("/")]
    root = Path(lines[-1]) if code == 0 and lines else None
    root = root if root is not None and (root / "include/hip/hip_runtime.h").is_file() else None
    version = (rocm_version(root) or (None, ""))[0] if root is not None else None
    if version is None:
        code, out = run_tool(ctx, [exe, "version"])
        found = re.match(r"\s*(\d+\.\d+(?:\.\d+)?)", out) if code == 0 else None
        version = found.group(1) if found else None
    return root, version, exe


def distro_rocm(ctx: Context) -> Path | None:
    """A distribution's ROCm in /usr (Debian's 7.2.4: include/hip/hip_runtime.h and rocm-core there), else None."""
    usr = ctx.path("/usr")
    return usr if (usr / "include/hip/hip_runtime.h").is_file() else None


def host_rocm(ctx: Context) -> tuple[Path, str | None] | None:
    """(root, version) of the ROCm the environment uses: ROCM_PATH, HIP_PATH, else TheRock's Python packages
    (``rocm-sdk``), else /opt/rocm, else /usr.

    ROCM_PATH first, as the rocm-version activation, rocm-build-env.sh and doctor take them; /opt/rocm only where it
    holds ROCm (include/hip/hip_runtime.h), as rocm.path decides: a directory left behind by an uninstalled ROCm
    hid the distribution's in /usr and the version comparison was skipped.
    """
    for var in ("ROCM_PATH", "HIP_PATH"):
        if ctx.environ.get(var):
            root = Path(ctx.environ[var])
            return root, (rocm_version(root) or (None, ""))[0]
    sdk = therock_rocm(ctx)
    if sdk is not None and sdk[1] is not None:
        return sdk[0] or Path(sdk[2]), sdk[1]
    default = ctx.path("/opt/rocm")
    if (default / "include/hip/hip_runtime.h").is_file():
        return default, (rocm_version(default) or (None, ""))[0]
    distro = distro_rocm(ctx)
    return (distro, (rocm_version(distro) or (None, ""))[0]) if distro is not None else None


@check("rocm.version", "host ROCm matches the environment's rocm-version")
def check_rocm_version(ctx: Context) -> Outcome:
    root, found = host_rocm(ctx) or (None, None)
    if not ctx.expect_rocm:
        return skip("no rocm-version pin (no rocm-version package in conda-meta; --expect-rocm sets one)")
    if not found:
        return skip("host ROCm version unknown (see rocm.path)")
    if major_minor(found) != major_minor(ctx.expect_rocm):
        return fail(f"host ROCm {found} at {root}; the environment is built for ROCm "
                    f"{ctx.expect_rocm} ({ctx.expect_rocm_source})",
                    f"install ROCm {ctx.expect_rocm} on the host and point ROCM_PATH/HIP_PATH at it, or use an "
                    f"environment built for ROCm {'.'.join(map(str, major_minor(found)))}")
    return ok(f"ROCm {found} matches {ctx.expect_rocm} ({ctx.expect_rocm_source})")


# ----------------------------------------------------------------------------- torch

NO_TORCH_FIX = ("add pytorch to the environment's dependencies (pixi.toml: pytorch from the rocmlock channel), "
                "lock and install it again; for an environment that is not meant to train, such as the offline "
                "example's, this failure is expected")
REINSTALL_FIX = ("install the ROCm build of pytorch for this GPU: `pixi install -e ENV` (the rocmlock channel "
                 "first, strict channel priority), or `conda install -c <rocmlock channel> pytorch`; "
                 "`conda list pytorch` must show a build string like rocm72_gfx942_py312_...")


# rocmlock.prefix.marker.MARKER: in the prefix until `rocmlock install` or `unpack` finished installing it.
INSTALL_MARKER = ".rocmlock-install-incomplete"


@check("env.complete", "no rocmlock install or unpack of the environment was interrupted")
def check_env_complete(ctx: Context) -> Outcome:
    marker = ctx.prefix / INSTALL_MARKER
    if marker.is_file():
        return fail(f"{marker} is there: a rocmlock install or unpack into {ctx.prefix} was interrupted (killed, "
                    "or the machine went down), so its packages may be half linked",
                    "run the same `rocmlock install` or `rocmlock unpack` again: it sees the marker and installs "
                    "the environment again")
    return ok(f"no {INSTALL_MARKER} in {ctx.prefix}")


def _torch_imported(ctx: Context) -> Outcome | None:
    return skip("torch did not import") if ctx.torch is None else None


@check("torch.import", "torch imports")
def check_torch_import(ctx: Context) -> Outcome:
    start = time.perf_counter()
    torch = ctx.torch
    if torch is None:
        error = ctx.facts["torch_error"]
        # No torch at all in a conda environment that holds no pytorch package: nobody asked for one (rocmlock's
        # offline example leaves it out on purpose, so that its packages build in seconds). Still a failure: the
        # environment cannot train; but the fix is the manifest, not a reinstall.
        if (error.startswith("ModuleNotFoundError: No module named 'torch'")
                and ctx.prefix.joinpath("conda-meta").is_dir() and conda_meta_record(ctx.prefix, "pytorch") is None):
            return fail(f"import torch failed: {error}; this environment has no pytorch package (conda-meta): it "
                        "was not asked for one (rocmlock's offline example has none on purpose, so the torch, "
                        "compute and train checks cannot pass there)", NO_TORCH_FIX)
        return fail(f"import torch failed: {error}", REINSTALL_FIX)
    took = time.perf_counter() - start
    return ok(f"torch {torch.__version__} from {Path(torch.__file__).parent} ({took:.1f} s)",
              version=torch.__version__)


def _conda_build(ctx: Context, name: str) -> str:
    record = conda_meta_record(ctx.prefix, name)
    return f"; conda-meta: {name} {record.get('version')} {record.get('build')}" if record else ""


@check("torch.build", "torch is a ROCm build", needs=(_torch_imported,))
def check_torch_build(ctx: Context) -> Outcome:
    torch = ctx.torch
    hip, cuda = getattr(torch.version, "hip", None), getattr(torch.version, "cuda", None)
    installed = _conda_build(ctx, "pytorch")
    if hip:
        return ok(f"ROCm build: torch {torch.__version__}, HIP {hip}{installed}", hip=hip)
    if cuda:
        return fail(f"not ROCm: a CUDA {cuda} build (torch {torch.__version__}){installed}", REINSTALL_FIX,
                    cuda=cuda)
    return fail(f"not ROCm: a CPU build (torch {torch.__version__}; torch.version.hip and .cuda are None)"
                f"{installed}", REINSTALL_FIX)


def _visible_devices(ctx: Context) -> str:
    names = ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")
    shown = [f"{n}={ctx.environ[n]!r}" for n in names if n in ctx.environ]
    return f"; {', '.join(shown)}" if shown else ""


@check("torch.gpu", "torch sees the GPUs", needs=(_torch_imported,))
def check_torch_gpu(ctx: Context) -> Outcome:
    torch = ctx.torch
    count = ctx.gpu_count
    if count == 0:
        if not ctx.is_rocm:
            return fail(f"torch.cuda.is_available() is False: this torch has no ROCm support{_visible_devices(ctx)}",
                        "see torch.build")
        return fail(f"torch.cuda.is_available() is False with a ROCm build{_visible_devices(ctx)}",
                    "fix the host checks above (driver, /dev/kfd access); unset or correct HIP_VISIBLE_DEVICES / "
                    "ROCR_VISIBLE_DEVICES")
    names = [torch.cuda.get_device_name(i) for i in range(count)]
    summary = _tally(names)
    return ok(f"{count} device(s): {summary}{_visible_devices(ctx)}", count=count, names=names)


def _device_targets(torch: Any) -> list[str]:
    return [gfx_of(getattr(torch.cuda.get_device_properties(i), "gcnArchName", "") or "")
            for i in range(torch.cuda.device_count())]


def _not_rocm(ctx: Context) -> Outcome | None:
    """The skip for identity checks when torch is not a ROCm build or sees no GPU."""
    torch = ctx.torch
    if torch is None or not ctx.gpu_count:
        return skip("no GPU visible to torch (see torch.gpu)")
    if not ctx.is_rocm:
        props = torch.cuda.get_device_properties(0)
        return skip(f"not ROCm: {props.name} (compute capability {props.major}.{props.minor}) has no gfx target")
    return None


@check("torch.arch", "each GPU is the environment's target", needs=(_not_rocm,))
def check_torch_arch(ctx: Context) -> Outcome:
    targets = _device_targets(ctx.torch)
    found = _tally(targets)
    override = ctx.environ.get("HSA_OVERRIDE_GFX_VERSION")
    if not ctx.expect_arch:
        return warn(f"GPUs: {found}; no expected target", "pass --expect-arch, or install the environment's "
                    "amdgpu-target package (rocmlock environments have one)", gfx=targets)
    wrong = sorted({t for t in targets if t != ctx.expect_arch})
    if wrong and ctx.expect_arch not in targets:
        return fail(f"GPUs: {found}; the environment is for {ctx.expect_arch} ({ctx.expect_arch_source})",
                    f"install the environment built for {wrong[0]}; HSA_OVERRIDE_GFX_VERSION only hides this",
                    gfx=targets)
    if wrong:
        # A node of several targets: the environment's GPUs work, kernels launched on the others fail.
        mine = ",".join(str(i) for i, t in enumerate(targets) if t == ctx.expect_arch)
        return warn(f"GPUs: {found}; the environment is for {ctx.expect_arch} ({ctx.expect_arch_source}): torch "
                    f"device(s) {mine} only", f"export HIP_VISIBLE_DEVICES so torch sees only the {ctx.expect_arch} "
                    "GPUs (without it, work on the others fails with 'invalid device function')", gfx=targets)
    if override:
        return warn(f"GPUs: {found}, but HSA_OVERRIDE_GFX_VERSION={override} is set",
                    "unset HSA_OVERRIDE_GFX_VERSION: it is a diagnostic workaround, not a fix", gfx=targets)
    return ok(f"GPUs: {found} == expected {ctx.expect_arch} ({ctx.expect_arch_source})", gfx=targets)


@check("torch.arch_list", "torch has kernels for the GPU's target", needs=(_not_rocm,))
def check_torch_arch_list(ctx: Context) -> Outcome:
    built = sorted({gfx_of(a) for a in ctx.torch.cuda.get_arch_list()})
    targets = sorted(set(_device_targets(ctx.torch)))
    missing = [t for t in targets if t not in built]
    if missing:
        return fail(f"torch is built for {', '.join(built) or 'nothing'}; the GPU is {', '.join(missing)} "
                    "(kernels fail with 'invalid device function' / hipErrorNoBinaryForGpu)",
                    f"install the pytorch build for {missing[0]} (build string rocmXY_{missing[0]}_...)")
    return ok(f"torch.cuda.get_arch_list(): {', '.join(built)}", arch_list=built)


# ----------------------------------------------------------------------------- kernels
# The environment's GPU code, read without rocmlock: a HIP library keeps clang offload bundles in its .hip_fatbin
# section (plain "__CLANG_OFFLOAD_BUNDLE__" or compressed "CCOB" v2/v3, zlib or zstd: clang's
# lib/Driver/OffloadBundler.cpp), a kernel image is an AMDGPU ELF whose e_flags name the processor. Only bundle
# headers are read (at most KERNEL_HEADER_LIMIT bytes are decompressed). rocmlock's own reader (`rocmlock audit`)
# is the full one; tests keep the tables below equal to it.

# AMDGPUUsage "AMDGPU Generic Processors": the processors a generic target's code runs on.
GENERIC_TARGETS: dict[str, tuple[str, ...]] = {
    "gfx9-generic": ("gfx900", "gfx902", "gfx904", "gfx906", "gfx909", "gfx90c"),
    "gfx9-4-generic": ("gfx940", "gfx941", "gfx942", "gfx950"),
    "gfx10-1-generic": ("gfx1010", "gfx1011", "gfx1012", "gfx1013"),
    "gfx10-3-generic": ("gfx1030", "gfx1031", "gfx1032", "gfx1033", "gfx1034", "gfx1035", "gfx1036"),
    "gfx11-generic": ("gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1152", "gfx1153"),
    "gfx12-generic": ("gfx1200", "gfx1201"),
}
# EF_AMDGPU_MACH of the table's targets and the generic ones (llvm/include/llvm/BinaryFormat/ELF.h).
ELF_MACH = {0x30: "gfx908", 0x3F: "gfx90a", 0x4C: "gfx942", 0x4F: "gfx950", 0x41: "gfx1100", 0x46: "gfx1101",
            0x47: "gfx1102", 0x43: "gfx1150", 0x4A: "gfx1151", 0x55: "gfx1152", 0x58: "gfx1153", 0x48: "gfx1200",
            0x4E: "gfx1201", 0x51: "gfx9-generic", 0x52: "gfx10-1-generic",
            0x53: "gfx10-3-generic", 0x54: "gfx11-generic", 0x59: "gfx12-generic", 0x5F: "gfx9-4-generic"}
KERNEL_HEADER_LIMIT = 1 << 20


class KernelReadError(Exception):
    """Device code this probe cannot read: damaged, or zstd without a zstd module."""


def _decompress_start(payload: bytes, method: int, limit: int) -> bytes:
    """At most ``limit`` bytes from the start of a CCOB payload (method 0 zlib, 1 zstd)."""
    import zlib

    if method == 0:
        return zlib.decompressobj().decompress(payload, limit)
    try:
        from compression import zstd  # type: ignore[import-not-found,unused-ignore]  # Python 3.14+

        # clang's frames are single-segment: the window is the whole bundle (up to zstd's 2 GiB maximum).
        reader: Any = zstd.ZstdFile(io.BytesIO(payload), options={zstd.DecompressionParameter.window_log_max: 31})
    except ImportError:
        try:
            import zstandard  # type: ignore[import-not-found,unused-ignore]
        except ImportError:
            raise KernelReadError("zstd-compressed bundles, and this python has no zstd module "
                                  "(`pip install zstandard`)") from None
        # clang's frames are single-segment: the window is the whole bundle (up to zstd's 2 GiB maximum).
        reader = zstandard.ZstdDecompressor(max_window_size=1 << 31).stream_reader(io.BytesIO(payload))
    with reader:
        return bytes(reader.read(limit))


def _bundle_ids(data: bytes) -> tuple[list[str], int]:
    """The target IDs (``gfx942:xnack-``) of the plain bundle at the start of ``data``, and the header's end."""
    count = int.from_bytes(data[24:32], "little")
    if len(data) < 32 or count > 4096:
        raise KernelReadError("a damaged offload bundle header")
    pos, ids = 32, []
    for _ in range(count):
        id_len = int.from_bytes(data[pos + 16:pos + 24], "little")
        entry = data[pos + 24:pos + 24 + id_len].decode("ascii", "replace")
        if id_len > 1024 or len(entry) != id_len:
            raise KernelReadError("a damaged offload bundle header")
        pos += 24 + id_len
        parts = entry.split("-", 5)
        if len(parts) == 6 and parts[1] in ("amdgcn", "spirv64"):
            ids.append(parts[5])
    return ids, pos


def fatbin_target_ids(data: Any, start: int, end: int) -> list[str]:
    """Every AMDGPU target ID of the bundles in the .hip_fatbin section ``data[start:end]`` (bytes or an mmap;
    only headers are copied: a header needs no more than KERNEL_HEADER_LIMIT bytes, compressed or not)."""
    ids: list[str] = []
    pos, cap = start, KERNEL_HEADER_LIMIT
    while True:
        found = [i for i in (data.find(b"__CLANG_OFFLOAD_BUNDLE__", pos, end), data.find(b"CCOB", pos, end)) if i >= 0]
        if not found:
            return ids
        pos = min(found)
        head = data[pos:min(pos + 32, end)]
        if head[:4] != b"CCOB":
            more, size = _bundle_ids(data[pos:min(pos + cap, end)])
            ids += more
            pos += max(size, 1)
            continue
        version, method = struct.unpack_from("<HH", head, 4) if len(head) >= 8 else (0, 0)
        sizes = {2: ("<II", 24), 3: ("<QQ", 32)}.get(version)
        if sizes is None or method not in (0, 1) or len(head) < sizes[1]:
            raise KernelReadError(f"a compressed bundle (CCOB) of version {version}, method {method}")
        total, size = struct.unpack_from(sizes[0], head, 8)
        if total < sizes[1] or pos + total > end:
            raise KernelReadError("a compressed bundle whose size runs past its section")
        # cap bytes out need at most cap + a block's worth in (zstd and deflate never grow data much).
        payload = data[pos + sizes[1]:pos + min(total, sizes[1] + cap + (1 << 17))]
        ids += _bundle_ids(_decompress_start(payload, method, min(size, cap)))[0]
        pos += total


# TheRock's kpack (ROCm/rocm-kpack; rocmlock.gpu.kpack is the full reader, this one reads what the check needs): a
# kpacked library's ".rocm_kpack_ref" section is a MessagePack map {"kernel_name", "kpack_search_paths"}, each
# "HIPK" wrapper of ".hipFatBinSegment" carries its code object index (u32 at offset 16); the loader looks up
# "<kernel_name>#<index>" in the first archive, along the search paths (relative to the library, "@GFXARCH@" the
# GPU's name), whose gfx_arches list the name. An archive: "KPAK", u32 version 1, u64 TOC offset; the TOC is one
# MessagePack map to the end of the file, its "toc" {key: {arch: entry}}.
KPACK_TOC_LIMIT = 16 << 20


@dataclass(frozen=True)
class KpackRef:
    """A kpacked library's marker: the TOC key stem, its archive search paths, the index of each HIPK wrapper."""

    kernel_name: str
    search_paths: tuple[str, ...]
    indices: tuple[int, ...]


def unpack_msgpack(data: bytes, pos: int = 0, depth: int = 0, budget: list[int] | None = None) -> tuple[Any, int]:
    """The MessagePack object at ``data[pos:]`` and where it ends (the types kpack writes); KernelReadError when
    damaged. Every count is checked against the bytes left, nesting against 8 levels, the values decoded against
    a million (``budget``): bounded work."""
    budget = [1_000_000] if budget is None else budget
    budget[0] -= 1
    if depth > 8 or pos >= len(data) or budget[0] < 0:
        raise KernelReadError("damaged MessagePack data (nested too deep, cut short or over a million values)")
    b, pos = data[pos], pos + 1
    if b <= 0x7F or b >= 0xE0:
        return (b if b <= 0x7F else b - 0x100), pos
    if b in (0xC0, 0xC2, 0xC3):
        return {0xC0: None, 0xC2: False, 0xC3: True}[b], pos
    numbers = {0xCA: ">f", 0xCB: ">d", 0xCC: ">B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q", 0xD0: ">b", 0xD1: ">h",
               0xD2: ">i", 0xD3: ">q", 0xC4: ">B", 0xC5: ">H", 0xC6: ">I", 0xD9: ">B", 0xDA: ">H", 0xDB: ">I",
               0xDC: ">H", 0xDD: ">I", 0xDE: ">H", 0xDF: ">I"}
    if b in numbers:
        width = struct.calcsize(numbers[b])
        if pos + width > len(data):
            raise KernelReadError("damaged MessagePack data (cut short)")
        n, pos = struct.unpack_from(numbers[b], data, pos)[0], pos + width
        if b <= 0xD3 and b not in (0xC4, 0xC5, 0xC6):
            return n, pos
    elif 0x80 <= b <= 0xBF:
        n = b & (0x1F if b >= 0xA0 else 0x0F)
    else:
        raise KernelReadError(f"MessagePack type 0x{b:02x}, which kpack does not write")
    per = 2 if (0x80 <= b <= 0x8F or b >= 0xDE) else 1
    if n * per > len(data) - pos:
        raise KernelReadError(f"damaged MessagePack data ({n} elements claimed, {len(data) - pos} bytes left)")
    if b >= 0xA0 and not 0xDC <= b <= 0xDF:  # str or bin
        raw = data[pos:pos + n]
        return (raw if b in (0xC4, 0xC5, 0xC6) else raw.decode("utf-8", "replace")), pos + n
    items = []
    for _ in range(n * per):
        item, pos = unpack_msgpack(data, pos, depth + 1, budget)
        items.append(item)
    if per == 1:
        return items, pos
    return {k: v for k, v in zip(items[::2], items[1::2]) if isinstance(k, str | int)}, pos


def _kpack_ref(data: Any, sections: Mapping[bytes, tuple[int, int]]) -> KpackRef:
    start, size = sections[b".rocm_kpack_ref"]
    meta = unpack_msgpack(bytes(data[start:start + min(size, 1 << 16)]))[0]
    name = meta.get("kernel_name") if isinstance(meta, dict) else None
    paths = meta.get("kpack_search_paths") if isinstance(meta, dict) else None
    paths = [p for p in paths if isinstance(p, str)] if isinstance(paths, list) else []
    start, size = sections.get(b".hipFatBinSegment", (0, 0))
    wrappers = [bytes(data[i:i + 24]) for i in range(start, start + size - size % 24, 24)][:1 << 16]
    indices = sorted({struct.unpack_from("<I", w, 16)[0] for w in wrappers if w[:4] == b"HIPK"})
    if not isinstance(name, str) or not paths or not indices or any(w[:4] == b"HIPF" for w in wrappers):
        raise KernelReadError("a damaged kpack marker (.rocm_kpack_ref without a kernel name, search paths or "
                              "HIPK wrappers)")
    return KpackRef(name, tuple(paths), tuple(indices))


def kpack_archive_toc(path: Path) -> tuple[list[str], dict[str, set[str]]]:
    """The gfx_arches of a .kpack archive and, per TOC key, the architectures it holds; KernelReadError."""
    with open(path, "rb") as f:
        head = f.read(16)
        size = os.fstat(f.fileno()).st_size
        if len(head) < 16 or head[:4] != b"KPAK" or struct.unpack_from("<I", head, 4)[0] != 1:
            raise KernelReadError("not a version 1 kpack archive")
        offset, = struct.unpack_from("<Q", head, 8)
        if not 16 <= offset < size or size - offset > KPACK_TOC_LIMIT:
            raise KernelReadError(f"a kpack archive whose TOC (offset {offset}) is outside it or over 16 MiB")
        f.seek(offset)
        toc = unpack_msgpack(f.read(size - offset))[0]
    if not isinstance(toc, dict) or not isinstance(toc.get("toc"), dict):
        raise KernelReadError("a kpack archive without a TOC map")
    arches = [a for a in toc.get("gfx_arches") or [] if isinstance(a, str)]
    return arches, {k: {a for a in v if isinstance(a, str)} for k, v in toc["toc"].items() if isinstance(v, dict)}


KpackArchives = Mapping[str, tuple[list[str], dict[str, set[str]]]]


def kpack_index(archives: KpackArchives) -> dict[int, list[tuple[str, str]]]:
    """The archives by what is left of a path around each name its archive lists (``.kpack/x_gfx942.kpack``:
    ``(".kpack/x_", ".kpack")`` for gfx942), as hashes (the pair is compared again at a look-up): a search path's
    @GFXARCH@ is then one look-up, not a pass over every archive (a 1 MB tree took a minute and 420 MB)."""
    index: dict[int, list[tuple[str, str]]] = {}
    for path in sorted(archives):
        for arch in dict.fromkeys(archives[path][0]):
            at = path.find(arch) if arch and "/" not in arch else -1  # the loader puts a name in one component
            while at >= 0:
                index.setdefault(hash((path[:at], path[at + len(arch):])), []).append((path, arch))
                at = path.find(arch, at + 1)
    return index


def kpack_served(ref: KpackRef, where: str, archives: KpackArchives,
                 index: Mapping[int, list[tuple[str, str]]] | None = None) -> list[str]:
    """The GPU names whose archive (the first along ``ref``'s search paths listing the name; paths relative to the
    prefix) holds every code object of the library at ``where``; ``index``: :func:`kpack_index` of ``archives``."""
    index = kpack_index(archives) if index is None else index
    first: dict[str, str] = {}
    for raw in dict.fromkeys(ref.search_paths):
        full = os.path.normpath(os.path.join(os.path.dirname(where), raw))
        if raw.startswith("/") or full.startswith(".."):
            continue
        head, sep, tail = full.partition("@GFXARCH@")
        if not sep:
            for name in archives[full][0] if full in archives else ():
                first.setdefault(name, full)
            continue
        for path, name in index.get(hash((head, tail)), ()):
            if len(path) == len(head) + len(name) + len(tail) and path.startswith(head) and path.endswith(tail):
                first.setdefault(name, path)
    keys = [f"{ref.kernel_name}#{i}" for i in ref.indices]
    return [name for name, path in first.items() if all(name in archives[path][1].get(key, ()) for key in keys)]


def terminal_safe(text: str) -> str:
    """``text`` from a file the probe did not write, safe for one terminal line: control characters (ESC, newline)
    as Python escapes."""
    return "".join(c if c.isprintable() or c == " " else c.encode("unicode_escape").decode("ascii") for c in text)


def device_code_ids(path: Path) -> list[str] | KpackRef | None:
    """The target IDs of the device code in ELF file ``path`` (None: no device code; KernelReadError: unreadable).
    A standalone code object's list has one ID with a ``code object `` prefix; a kpacked library gives its marker."""
    import mmap

    with open(path, "rb") as f:
        if f.read(4) != b"\x7fELF" or os.fstat(f.fileno()).st_size < 64:
            return None
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            if data[4:6] != b"\x02\x01":
                return None
            if struct.unpack_from("<H", data, 0x12)[0] == 224:  # EM_AMDGPU: a code object
                mach = struct.unpack_from("<I", data, 0x30)[0] & 0xFF
                return [f"code object {ELF_MACH.get(mach, f'EF_AMDGPU_MACH 0x{mach:x}')}"]
            shoff, = struct.unpack_from("<Q", data, 0x28)
            shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
            if shnum == 0:
                return None
            if shentsize < 64 or shstrndx >= shnum or shoff + shnum * shentsize > len(data):
                raise KernelReadError("a truncated or damaged ELF file")
            headers = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
            names = headers[shstrndx][4]
            sections = {bytes(data[names + name:names + name + 64]).split(b"\0", 1)[0]: (offset, size)
                        for name, kind, _flags, _addr, offset, size in headers
                        if kind != 8 and offset + size <= len(data)}  # SHT_NOBITS: nothing in the file
            if b".rocm_kpack_ref" in sections:  # its .hip_fatbin, if left, is no longer loaded
                return _kpack_ref(data, sections)
            if b".hip_fatbin" in sections:
                offset, size = sections[b".hip_fatbin"]
                return fatbin_target_ids(data, offset, offset + size)
    return None


def code_runs_on(target_id: str, gpu: str) -> bool:
    """AMDGPUUsage: the processor or a generic target listing it; a feature set on/off must match the GPU's mode
    where the GPU's name states it (``gfx942:sramecc+:xnack-``)."""
    processor, *features = target_id.split(":")
    gpu_processor, *gpu_features = gpu.split(":")
    if processor not in (gpu_processor, "amdgcnspirv") and gpu_processor not in GENERIC_TARGETS.get(processor, ()):
        return False
    stated = {f[:-1]: f[-1] for f in gpu_features}
    return all(f[:-1] not in stated or stated[f[:-1]] == f[-1] for f in features)


def _gpu_names(ctx: Context) -> list[str]:
    """The GPUs' target names: torch's (with their xnack/sramecc mode) on ROCm, else KFD's topology."""
    torch = ctx.torch
    if torch is not None and ctx.is_rocm and ctx.gpu_count:
        return sorted({str(getattr(torch.cuda.get_device_properties(i), "gcnArchName", "") or "").strip()
                       for i in range(ctx.gpu_count)} - {""})
    gpus = set()
    for props in glob.glob(str(ctx.path("/sys/class/kfd/kfd/topology/nodes/*/properties"))):
        m = re.search(r"^gfx_target_version\s+(\d{1,20})\s*$", read_text(Path(props)) or "", re.MULTILINE)
        if m and int(m.group(1)):
            gpus.add(gfx_from_kfd_version(int(m.group(1))))
    return sorted(gpus)


def _scan_prefix(prefix: Path) -> Iterator[tuple[str, list[str] | str]]:
    """(path relative to the prefix, its target IDs or why they cannot be read) for every file with GPU code; a
    kpacked library's IDs are the GPU names its archives serve it for (kpack_served)."""
    refs: dict[str, KpackRef] = {}
    archives: dict[str, tuple[list[str], dict[str, set[str]]]] = {}
    for dirpath, dirnames, filenames in os.walk(prefix):
        dirnames[:] = sorted(d for d in dirnames if Path(dirpath) != prefix or d not in ("pkgs", "conda-meta"))
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if path.is_symlink() or not path.is_file():
                continue
            rel = str(path.relative_to(prefix))
            try:
                if name.endswith(".kpack"):
                    archives[rel] = kpack_archive_toc(path)
                    continue
                ids = device_code_ids(path)
            except Exception as exc:  # noqa: BLE001 - damaged data; zlib and zstd raise their own types
                yield rel, first_line(str(exc) or type(exc).__name__)
                continue
            if isinstance(ids, KpackRef):
                refs[rel] = ids
            elif ids is not None:
                yield rel, ids
    index = kpack_index(archives)
    for rel, ref in sorted(refs.items()):
        yield rel, kpack_served(ref, rel, archives, index) or [
            f"no kpack archive for it at {first_line(terminal_safe(', '.join(ref.search_paths)), 300)}"]


def _without_kernels(files: Mapping[str, list[str]], gpus: list[str]) -> dict[str, list[str]]:
    """The files without kernels for every GPU. Standalone code objects sit beside their alternatives for other
    targets (rocBLAS's library/, one per target): those of a directory count together, as `rocmlock audit` counts
    them."""
    def serves(ids: list[str], gpu: str) -> bool:
        return any(code_runs_on(i.removeprefix("code object "), gpu) for i in ids)

    alone = {p for p, ids in files.items() if ids and ids[0].startswith("code object ")}
    served = {(os.path.dirname(p), g) for p in alone for g in gpus if serves(files[p], g)}
    return {p: [i.removeprefix("code object ") for i in ids] for p, ids in files.items()
            if not all((os.path.dirname(p), g) in served if p in alone else serves(ids, g) for g in gpus)}


@check("kernels.prefix", "the environment's GPU code has kernels for this GPU")
def check_kernels(ctx: Context) -> Outcome:
    gpus = _gpu_names(ctx)
    # On a node of several targets the environment serves the GPUs of its own (host.driver names the others).
    gpus = [g for g in gpus if gfx_of(g) == ctx.expect_arch] or gpus
    if not gpus:
        return skip("no AMD GPU seen (no ROCm device in torch, no GPU node in /sys/class/kfd): nothing to check "
                    "the environment's GPU code against; `rocmlock audit --prefix DIR --target GFX` checks it anywhere")
    files = dict(_scan_prefix(ctx.prefix))
    unread = {p: why for p, why in files.items() if isinstance(why, str)}
    missing = _without_kernels({p: ids for p, ids in files.items() if not isinstance(ids, str)}, gpus)
    data = {"gpus": gpus, "files": {p: v if isinstance(v, str) else sorted({i.removeprefix("code object ")
                                                                             for i in v}) for p, v in files.items()}}
    seen = f"{len(files)} file(s) with GPU code in {ctx.prefix}"
    if missing:
        shown = "; ".join(f"{terminal_safe(p)} ({terminal_safe(', '.join(sorted(set(ids)))) or 'no AMDGPU code'})"
                          for p, ids in sorted(missing.items())[:5])
        return fail(f"{seen}; {len(missing)} without kernels for {', '.join(gpus)}: {shown}"
                    + (" ..." if len(missing) > 5 else ""),
                    "install the packages built for this GPU (build string rocmXY_<gfx>_...); `rocmlock audit "
                    "--prefix DIR` lists what each file holds (hipErrorNoBinaryForGpu otherwise)", **data)
    if unread:
        path, why = min(unread.items())
        return warn(f"{seen}; {len(unread)} could not be read: {terminal_safe(path)}: {terminal_safe(why)}",
                    "`rocmlock audit --prefix DIR` reads every form (pip install zstandard for zstd bundles here)",
                    **data)
    return ok(f"{seen}, all with kernels for {', '.join(gpus)}", **data)


# ----------------------------------------------------------------------------- compute


def _device_or_skip(ctx: Context) -> Outcome | None:
    if ctx.torch is None:
        return skip("torch did not import")
    if ctx.device is None:
        return skip("no GPU (see torch.gpu); `--device cpu` runs the compute checks on the CPU")
    return None


def _device(ctx: Context) -> str:
    """``ctx.device`` in a check that ``needs`` :func:`_device_or_skip` (which skips the check without one)."""
    device = ctx.device
    if device is None:  # a check registered without the precondition: run_check reports it as a probe bug
        raise RuntimeError("no compute device, and the check does not need _device_or_skip")
    return device


def _where(ctx: Context) -> str:
    if ctx.device == "cpu":
        return "on cpu"
    name = ctx.torch.cuda.get_device_name(0)
    return f"on {name}" + ("" if ctx.is_rocm else " (not ROCm)")


def _out_of_bounds(*errors: tuple[float, float]) -> bool:
    """True when any ``(error, bound)`` has an error that is NaN, infinite or above its bound."""
    return any(not math.isfinite(err) or err > bound for err, bound in errors)


def _rel_err(torch: Any, got: Any, ref: Any) -> float:
    got, ref = got.detach().double().cpu(), ref.detach().double().cpu()
    return float((got - ref).norm() / ref.norm().clamp_min(1e-30))


@check("compute.matmul", "fp32 matmul matches the CPU", needs=(_device_or_skip,))
def check_matmul(ctx: Context) -> Outcome:
    torch = ctx.torch
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(512, 512, generator=gen), torch.randn(512, 512, generator=gen)
    ref = a.double() @ b.double()
    got = (a.to(ctx.device) @ b.to(ctx.device))
    err = _rel_err(torch, got, ref)
    # 1e-2 admits TF32/reduced-precision GEMM paths; wrong kernels give errors near 1.
    if _out_of_bounds((err, 1e-2)):
        return fail(f"relative error {err:.2e} {_where(ctx)}", "the GPU math library (hipBLAS/hipBLASLt) "
                    "returns wrong results: check that ROCm matches the torch build (rocm.version)")
    return ok(f"512x512 relative error {err:.1e} {_where(ctx)}", rel_err=err)


def _mlp(torch: Any, device: str, dtype: Any) -> tuple[Any, float, list[Any]]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 64))
    gen = torch.Generator().manual_seed(1)
    x, y = torch.randn(64, 256, generator=gen), torch.randn(64, 64, generator=gen)
    model = model.to(device=device, dtype=dtype)
    loss = torch.nn.functional.mse_loss(model(x.to(device, dtype)).float(), y.to(device))
    loss.backward()
    return model, float(loss.detach()), [p.grad.detach().float().cpu() for p in model.parameters()]


@check("compute.bf16", "bf16 forward and backward match fp32", needs=(_device_or_skip,))
def check_bf16(ctx: Context) -> Outcome:
    torch = ctx.torch
    _, loss16, grads16 = _mlp(torch, _device(ctx), torch.bfloat16)
    _, loss32, grads32 = _mlp(torch, "cpu", torch.float32)
    loss_err = abs(loss16 - loss32) / max(abs(loss32), 1e-12)
    grad_err = max(_rel_err(torch, g, r) for g, r in zip(grads16, grads32))
    # bf16 keeps 8 bits of mantissa: a few percent of error is normal, broken kernels are far off.
    if _out_of_bounds((loss_err, 0.05), (grad_err, 0.1)):
        return fail(f"bf16 vs fp32: loss error {loss_err:.2e}, worst gradient error {grad_err:.2e} {_where(ctx)}",
                    "bf16 training is broken on this device: check the target (torch.arch) and ROCm version")
    return ok(f"MLP loss error {loss_err:.1e}, gradient error {grad_err:.1e} {_where(ctx)}",
              loss_err=loss_err, grad_err=grad_err)


def _attention_inputs(torch: Any, device: str, layout: str) -> list[Any]:
    """bf16 q, k, v (batch 2, 4 heads, 256 tokens, head dim 64) as leaf tensors in ``layout`` (bhsd/bshd)."""
    gen = torch.Generator().manual_seed(2)
    shape = (2, 4, 256, 64) if layout == "bhsd" else (2, 256, 4, 64)
    return [torch.randn(*shape, generator=gen).to(device, torch.bfloat16).requires_grad_(True) for _ in range(3)]


def _reference_attention(torch: Any, q: Any, k: Any, v: Any) -> Any:
    """Causal softmax(q k^T / sqrt(d)) v in fp32, in (batch, heads, seq, dim)."""
    q, k, v = (t.float() for t in (q, k, v))
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1) @ v


def _compare_attention(torch: Any, out: Any, inputs: list[Any], ref_fn: Callable[..., Any]) -> tuple[float, float]:
    """(output error, worst gradient error) of ``out`` against ``ref_fn`` on detached copies of ``inputs``."""
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(3)).to(out.device, out.dtype)
    out.backward(grad)
    refs = [t.detach().clone().requires_grad_(True) for t in inputs]
    ref = ref_fn(*refs)
    ref.backward(grad.float())
    out_err = _rel_err(torch, out, ref)
    grad_err = max(_rel_err(torch, t.grad, r.grad) for t, r in zip(inputs, refs))
    return out_err, grad_err


@check("compute.sdpa", "scaled_dot_product_attention forward and backward", needs=(_device_or_skip,))
def check_sdpa(ctx: Context) -> Outcome:
    torch = ctx.torch
    inputs = _attention_inputs(torch, _device(ctx), "bhsd")
    out = torch.nn.functional.scaled_dot_product_attention(*inputs, is_causal=True)
    out_err, grad_err = _compare_attention(torch, out, inputs, lambda q, k, v: _reference_attention(torch, q, k, v))
    if _out_of_bounds((out_err, 0.02), (grad_err, 0.05)):
        tier = _aotriton_tier(ctx)
        experimental_ran = bool(tier) and ctx.environ.get(AOTRITON_VAR) == "1"
        return fail(f"SDPA vs reference: output error {out_err:.2e}, gradient error {grad_err:.2e} {_where(ctx)}"
                    f"{tier}", f"AOTriton's experimental kernels are wrong here: unset {AOTRITON_VAR} and train with "
                    "flash-attn (`flash_attn: fa2`)" if experimental_ran else
                    "the attention kernels (AOTriton) are wrong for this GPU: check torch.arch_list and ROCm")
    evidence = (f"bf16 causal, output error {out_err:.1e}, gradient error {grad_err:.1e} {_where(ctx)}"
                f"{_aotriton_tier(ctx)}")
    issue = _aotriton_issue(ctx)
    if issue:  # correct, but a known slow kernel of the bundled AOTriton on this GPU
        return warn(evidence + issue, AOTRITON_ISSUE_FIX, out_err=out_err, grad_err=grad_err)
    return ok(evidence, out_err=out_err, grad_err=grad_err)


def bundled_aotriton(torch: Any) -> str | None:
    """The version of the AOTriton runtime ``torch`` ships, from the name of torch/lib/libaotriton_v2.so.<X.Y.Z>
    (``0.13.0`` for AOTriton 0.13b); None when torch has no such file (a CUDA build, or AOTriton linked elsewhere)."""
    lib = os.path.join(os.path.dirname(str(getattr(torch, "__file__", "") or "")), "lib")
    prefix = "libaotriton_v2.so."
    try:
        names = os.listdir(lib)
    except OSError:
        return None
    found = [n[len(prefix):] for n in names if n.startswith(prefix) and re.fullmatch(r"[0-9]+(\.[0-9]+)*",
                                                                                    n[len(prefix):])]
    return max(found, key=lambda v: tuple(int(p) for p in v.split("."))) if found else None


def _release_numbers(release: str) -> tuple[int, ...]:
    """``0.13b`` -> ``(0, 13)``, ``0.13.0`` -> ``(0, 13)``: an AOTriton release and its soname compare equal."""
    numbers = [int(p) for p in re.findall(r"[0-9]+", release.split("b")[0])]
    while len(numbers) > 2 and numbers[-1] == 0:
        numbers.pop()
    return tuple(numbers)


def _aotriton_issue(ctx: Context) -> str:
    """For a GPU with a known defect of the AOTriton torch bundles (AOTRITON_KNOWN_ISSUES): the defect, said."""
    if ctx.device in (None, "cpu") or not ctx.is_rocm:
        return ""
    bundled = bundled_aotriton(ctx.torch)
    if bundled is None:
        return ""
    gpus = set(_device_targets(ctx.torch))
    notes = [f"; {gfx} with AOTriton {release} (torch/lib/libaotriton_v2.so.{bundled}): {text}"
             for (release, gfx), text in AOTRITON_KNOWN_ISSUES.items()
             if gfx in gpus and _release_numbers(release) == _release_numbers(bundled)]
    return "".join(notes)


def aotriton_of_torch(version: str) -> str | None:
    """The AOTriton release a PyTorch ``version`` (``2.13.0+rocm7.2``) was built with; None before the first series
    listed (or an unreadable version)."""
    try:
        series = tuple(int(p) for p in version.split("+")[0].split(".")[:2])
    except ValueError:
        return None
    known = sorted((tuple(int(p) for p in s.split(".")), release) for s, release in AOTRITON_OF_TORCH.items())
    older = [release for s, release in known if s <= series]
    return older[-1] if older else None


def _experimental_targets(torch: Any) -> tuple[str, list[str]]:
    """The AOTriton release of ``torch`` and which of its GPUs that release classes experimental."""
    release = aotriton_of_torch(str(getattr(torch, "__version__", ""))) or ""
    tier = AOTRITON_EXPERIMENTAL.get(release, frozenset())
    return release, sorted({g for g in _device_targets(torch) if g in tier})


def _aotriton_tier(ctx: Context) -> str:
    """For a GPU whose AOTriton kernels are experimental: which SDPA kernel ran, and what the variable risks."""
    if ctx.device in (None, "cpu") or not ctx.is_rocm:
        return ""
    release, experimental = _experimental_targets(ctx.torch)
    if not experimental:
        return ""
    tier = f"; AOTriton {release} classes {', '.join(experimental)} experimental"
    if ctx.environ.get(AOTRITON_VAR) == "1":
        return f"{tier}, {AOTRITON_VAR}=1: AOTriton's kernels ran and are checked above"
    return (f"{tier} and {AOTRITON_VAR} is not 1: SDPA ran the math kernel (correct, unfused: slow, O(seq^2) "
            "memory); train with flash-attn (`flash_attn: fa2`), or set it to 1 and rerun this check")


# The default dispatch against each backend forced with torch.nn.attention.sdpa_kernel, fwd+bwd, within this many
# seconds. A silent math fallback is the costliest attention bug: measured on an H200 (bf16 causal, 4x32 heads,
# seq 4096, head 128) the default took 4.1 ms, math 109 ms and 33.7 GiB against 1.7 GiB.
SDPA_BUDGET_S = 1.5
# cuDNN last: its first call at a new shape builds an execution plan (seconds on an H200, measured), and the
# comparison that matters is fused against math.
SDPA_BACKENDS = ("flash", "efficient", "math", "cudnn")
EXPERIMENTAL_AOTRITON = "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL"


def _sdpa_run(torch: Any, inputs: list[Any], grad: Any, backend: Any, device: str) -> float:
    """Seconds of one causal SDPA forward + backward, under ``backend`` (None: the default dispatch)."""
    from torch.nn.attention import sdpa_kernel

    with sdpa_kernel(backend) if backend is not None else contextlib.nullcontext():
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        out = torch.nn.functional.scaled_dot_product_attention(*inputs, is_causal=True)
        out.backward(grad)
        if device == "cuda":
            torch.cuda.synchronize()
    for t in inputs:
        t.grad = None
    return time.perf_counter() - start


def _sdpa_timings(torch: Any, device: str) -> tuple[str | None, dict[str, float | str]]:
    """(the backend the default dispatch picks, ms per fwd+bwd of the default and of each forced backend, or why
    it did not run); a warm-up call first, then the best of up to three, all within SDPA_BUDGET_S."""
    import warnings

    from torch.nn.attention import SDPBackend

    shape = (1, 16, 2048, 128) if device == "cuda" else (1, 4, 256, 64)
    gen = torch.Generator().manual_seed(4)
    inputs = [torch.randn(*shape, generator=gen).to(device, torch.bfloat16).requires_grad_(True) for _ in range(3)]
    grad = torch.randn(shape, generator=gen).to(device, torch.bfloat16)
    members = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
               "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}
    chosen = None
    with contextlib.suppress(AttributeError, RuntimeError, TypeError):  # a private API: else timing decides
        value = int(torch._fused_sdp_choice(*inputs, is_causal=True))
        chosen = next((name for name, m in members.items() if int(m.value) == value), f"backend {value}")
    times: dict[str, float | str] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Flash attention was not compiled for ..." per unavailable backend
        # The budget starts after the default's first call: loading the GPU's attention kernels for this shape is a
        # one-time cost of the process (on an H200 it alone spent a 1.5 s budget, so no backend was compared).
        with contextlib.suppress(RuntimeError, NotImplementedError):
            _sdpa_run(torch, inputs, grad, None, device)
        deadline = time.perf_counter() + SDPA_BUDGET_S
        for name in ("default", *SDPA_BACKENDS):
            if name != "default" and time.perf_counter() > deadline:
                times[name] = "not timed (time budget spent)"
                continue
            try:
                _sdpa_run(torch, inputs, grad, members.get(name), device)  # warm-up: kernels load on first use
                runs = [_sdpa_run(torch, inputs, grad, members.get(name), device)]
                runs += [_sdpa_run(torch, inputs, grad, members.get(name), device)
                         for _ in range(2) if time.perf_counter() < deadline]
                times[name] = round(1000 * min(runs), 3)
            except (RuntimeError, NotImplementedError) as exc:  # "No available kernel", out of memory, ...
                times[name] = f"unavailable: {first_line(str(exc), 80)}"
    return chosen, times


def _sdpa_fused_expected(ctx: Context, gpu: str) -> tuple[bool, str]:
    """Whether a fused SDPA kernel should serve this GPU, and why (gpu_targets.toml's aotriton column on ROCm)."""
    if ctx.is_rocm:
        row = TARGETS.get(gpu)
        return (bool(row and row[3]), f"{gpu} has AOTriton kernels (gpu_targets.toml)" if row and row[3]
                else f"no fused kernel listed for {gpu or 'this GPU'}")
    return True, "a CUDA GPU has fused kernels"


@check("compute.sdpa_kernel", "the default SDPA dispatch runs a fused kernel (bf16 causal, fwd+bwd)",
       needs=(_device_or_skip,))
def check_sdpa_kernel(ctx: Context) -> Outcome:
    torch, device = ctx.torch, _device(ctx)
    chosen, times = _sdpa_timings(torch, device)
    timed = {k: v for k, v in times.items() if isinstance(v, float)}
    if chosen is None and "default" in timed:  # no torch._fused_sdp_choice: the forced backend it runs as fast as
        rest = {k: v for k, v in timed.items() if k != "default"}
        chosen = min(rest, key=lambda k: abs(rest[k] - timed["default"])) if rest else None
    shown = ", ".join(f"{k} {v:.2f} ms" if isinstance(v, float) else f"{k} {v.split(':')[0]}" for k, v in
                      times.items())
    evidence = f"default dispatch runs {chosen or 'an unknown kernel'} ({shown}) {_where(ctx)}"
    data = {"chosen": chosen, "ms": times}
    if device != "cuda" or chosen != "math":
        return ok(evidence, **data)
    gpu = _device_targets(torch)[0] if ctx.is_rocm else ""
    expected, why = _sdpa_fused_expected(ctx, gpu)
    fused_ran = [k for k in ("flash", "efficient", "cudnn") if k in timed]
    if not expected and not fused_ran:
        return warn(evidence + f": only the math kernel serves this GPU ({why})",
                    "attention is slow and its memory grows with seq^2: train with shorter sequences", **data)
    release, experimental = _experimental_targets(torch) if ctx.is_rocm else ("", [])
    fix = (f"set {EXPERIMENTAL_AOTRITON}=1: AOTriton {release} treats {gpu} as experimental and PyTorch uses it only "
           "then" if gpu in experimental and EXPERIMENTAL_AOTRITON not in ctx.environ else
           "install the pytorch built with AOTriton for this GPU (USE_FLASH_ATTENTION / USE_MEM_EFF_ATTENTION; "
           "rocmlock's pytorch recipe does); a forced backend that runs shows the kernels exist")
    return fail(evidence + f": the math kernel, though {why}" + (f" and {', '.join(fused_ran)} ran when forced"
                                                                  if fused_ran else ""), fix, **data)


# ----------------------------------------------------------------------------- flash-attn

TRITON_VAR = "FLASH_ATTENTION_TRITON_AMD_ENABLE"


def _import_flash_attn(ctx: Context) -> tuple[Any, str, bool]:
    """(flash_attn_func, backend, fell back to Triton); raises what the import raises."""
    import importlib
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        interface = importlib.import_module("flash_attn.flash_attn_interface")
    fell_back = any("falling back to triton" in str(w.message).lower() for w in caught)
    if getattr(interface, "USE_TRITON_ROCM", False):
        backend = "triton"
    else:
        backend = "ck" if ctx.is_rocm else "cuda"
    return interface.flash_attn_func, backend, fell_back


@check("flash_attn", "flash-attn imports; flash_attn_func forward and backward", needs=(_torch_imported,))
def check_flash_attn(ctx: Context) -> Outcome:
    import importlib.util

    record = conda_meta_record(ctx.prefix, "flash-attn")
    if importlib.util.find_spec("flash_attn") is None and record is None:
        return skip("flash-attn is not installed (LLaMA-Factory then uses SDPA: `flash_attn: sdpa`)")
    try:
        func, backend, fell_back = _import_flash_attn(ctx)
    except Exception as exc:  # noqa: BLE001 - a compiled extension fails to import in many ways
        if "flash_attn_2_cuda" in str(exc) and ctx.environ.get(TRITON_VAR) != "TRUE":
            return fail(f"import flash_attn failed: {exc_text(exc)}; {TRITON_VAR} is not set",
                        f"this flash-attn is the Triton build: export {TRITON_VAR}=TRUE (at import time too)")
        return fail(f"import flash_attn failed: {exc_text(exc)}{_conda_build(ctx, 'flash-attn')}",
                    "reinstall the flash-attn built for this torch and target (`pixi install -e ENV`); "
                    "'undefined symbol' means it was built against another torch")
    import flash_attn

    name = f"flash-attn {getattr(flash_attn, '__version__', '?')} ({backend} backend)"
    if ctx.device != "cuda":
        return skip(f"{name} imports; no GPU to run it on (see torch.gpu)")
    inputs = _attention_inputs(ctx.torch, "cuda", "bshd")
    out = func(*inputs, causal=True)

    def reference(q: Any, k: Any, v: Any) -> Any:
        return _reference_attention(ctx.torch, *(t.transpose(1, 2) for t in (q, k, v))).transpose(1, 2)

    out_err, grad_err = _compare_attention(ctx.torch, out, inputs, reference)
    if _out_of_bounds((out_err, 0.02), (grad_err, 0.05)):
        return fail(f"{name}: output error {out_err:.2e}, gradient error {grad_err:.2e} {_where(ctx)}",
                    "flash-attn kernels are wrong for this GPU: reinstall the build for this target")
    evidence = f"{name}: output error {out_err:.1e}, gradient error {grad_err:.1e} {_where(ctx)}"
    if fell_back:
        return warn(evidence + "; flash_attn_2_cuda missing, fell back to Triton",
                    f"export {TRITON_VAR}=TRUE to choose the Triton backend on purpose, or install the CK build")
    return ok(evidence, backend=backend, out_err=out_err, grad_err=grad_err)


# ----------------------------------------------------------------------------- --bench


def _peak(ctx: Context) -> tuple[float, str]:
    if ctx.peak_tflops:
        return ctx.peak_tflops, "--peak-tflops"
    gfx = next(iter(_device_targets(ctx.torch)), ctx.expect_arch) if ctx.is_rocm and ctx.gpu_count else None
    if gfx and TARGETS.get(gfx, ("", 0.0))[1] > 0:
        return TARGETS[gfx][1], f"{gfx} table"
    return 0.0, ""


def _significant(value: float) -> float:
    """``value`` to 4 significant digits: a fleet's median compares nodes of any speed (3 decimals made a CPU's
    0.0004 TFLOP/s a 0.0 that no outlier falls below)."""
    return float(f"{value:.4g}")


def _time_gemm(torch: Any, device: str, n: int, budget_s: float) -> float:
    """TFLOP/s of repeated bf16 n x n matmuls for about ``budget_s`` seconds."""
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for _ in range(3):  # warm-up: library heuristics, clocks
        a @ b
    sync()
    iters, start = 0, time.perf_counter()
    while True:
        for _ in range(10):
            a @ b
        sync()
        iters += 10
        elapsed = time.perf_counter() - start
        if elapsed >= budget_s:
            return 2.0 * n**3 * iters / elapsed / 1e12


@check("bench.gemm", "bf16 GEMM throughput against the target's peak", option="bench",
       needs=(_device_or_skip,))
def check_bench(ctx: Context) -> Outcome:
    device = _device(ctx)
    n = 8192 if device == "cuda" else 256
    tflops = _time_gemm(ctx.torch, device, n, 2.0 if device == "cuda" else 0.5)
    peak, source = _peak(ctx)
    if not peak:
        return ok(f"{tflops:.4g} TFLOP/s ({n}x{n} bf16) {_where(ctx)}; peak unknown (--peak-tflops)",
                  tflops=_significant(tflops))
    ratio = tflops / peak
    evidence = f"{tflops:.4g} TFLOP/s ({n}x{n} bf16) = {ratio:.0%} of {peak:g} ({source}) {_where(ctx)}"
    if ratio < ctx.min_ratio:
        return warn(evidence + f", below {ctx.min_ratio:.0%}",
                    "look for other processes on the GPU (`amd-smi process`), low clocks or power caps "
                    "(`amd-smi metric`), and a torch without hipBLASLt", tflops=_significant(tflops),
                    ratio=round(ratio, 3))
    return ok(evidence, tflops=_significant(tflops), peak=peak, ratio=round(ratio, 3))


# ----------------------------------------------------------------------------- --train

TRAIN_TEXTS = (
    "the gpu trains a small model with low rank adapters",
    "a tiny llama learns these few sentences by heart",
    "loss goes down when the gradients reach the adapters",
    "bf16 kernels and attention run forward and backward",
    "rocm and pytorch agree on the target of this device",
    "the probe builds its own tokenizer and needs no download",
    "eight short lines are enough for a smoke test",
    "when the loss falls the environment can fine tune",
)


# The adapter on lm_head lets a randomly initialised model memorise the texts within a few dozen steps.
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head")


def _tiny_llama(torch: Any) -> tuple[Any, Any]:
    """A 2-layer Llama and a word-level tokenizer trained on TRAIN_TEXTS: nothing is downloaded."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    raw = Tokenizer(models.WordLevel(unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    raw.train_from_iterator(TRAIN_TEXTS, trainers.WordLevelTrainer(
        special_tokens=["<pad>", "<unk>", "<s>", "</s>"], show_progress=False))
    tok = PreTrainedTokenizerFast(tokenizer_object=raw, pad_token="<pad>", unk_token="<unk>", bos_token="<s>",
                                  eos_token="</s>")
    config = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    torch.manual_seed(0)
    return LlamaForCausalLM(config), tok


def _train_peft(ctx: Context, workdir: Path) -> tuple[list[float], list[float]]:
    """LoRA on the tiny Llama with transformers + peft; the loss and the gradient norm of each step."""
    from peft import LoraConfig, get_peft_model

    torch = ctx.torch
    model, tok = _tiny_llama(torch)
    lora = LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, task_type="CAUSAL_LM", target_modules=list(LORA_TARGETS))
    model = get_peft_model(model, lora).to(ctx.device)
    batch = tok([f"<s> {t} </s>" for t in TRAIN_TEXTS], padding=True, return_tensors="pt").to(ctx.device)
    labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-2)
    autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if ctx.device == "cuda"
                else contextlib.nullcontext())
    losses, norms = [], []
    for _ in range(ctx.train_steps):
        with autocast:
            loss = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=labels).loss
        loss.backward()
        # The norm before the step, as Trainer logs it (max_norm=inf: measured, not clipped).
        norms.append(float(torch.nn.utils.clip_grad_norm_(params, float("inf"))))
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses, norms


def _llamafactory_config(ctx: Context, workdir: Path) -> Path:
    """Write the tiny model, a dataset and a LLaMA-Factory LoRA config under ``workdir``."""
    model, tok = _tiny_llama(ctx.torch)
    model.save_pretrained(workdir / "model")
    tok.save_pretrained(workdir / "model")
    data = workdir / "data"
    data.mkdir()
    rows = [{"instruction": a, "input": "", "output": b} for a, b in zip(TRAIN_TEXTS, TRAIN_TEXTS[1:])]  # noqa: RUF007 - pairwise is 3.10+
    (data / "probe.json").write_text(json.dumps(rows))
    (data / "dataset_info.json").write_text(json.dumps({"probe": {"file_name": "probe.json"}}))
    settings: dict[str, Any] = {
        "model_name_or_path": workdir / "model", "stage": "sft", "do_train": True, "finetuning_type": "lora",
        "lora_target": ",".join(LORA_TARGETS), "lora_rank": 8, "dataset": "probe", "dataset_dir": data,
        "template": "empty", "cutoff_len": 64, "overwrite_cache": True, "preprocessing_num_workers": 1,
        "output_dir": workdir / "out", "logging_steps": 1, "save_strategy": "no", "overwrite_output_dir": True,
        "report_to": "none", "per_device_train_batch_size": 4, "gradient_accumulation_steps": 1,
        "learning_rate": 1.0e-2, "max_steps": ctx.train_steps, "lr_scheduler_type": "constant",
        "disable_tqdm": True, "bf16": ctx.device == "cuda",
    }
    config = workdir / "train_lora.yaml"
    # JSON scalars are YAML scalars; quoting every string keeps YAML from reading "no" as false.
    config.write_text("".join(f"{k}: {json.dumps(v if isinstance(v, (bool, int, float)) else str(v))}\n"
                              for k, v in settings.items()))
    return config


def _train_llamafactory(ctx: Context, workdir: Path, cli: str) -> tuple[list[float], list[float]]:
    """``llamafactory-cli train`` on a generated config; the logged losses and gradient norms (Trainer's
    ``grad_norm`` in trainer_state.json's log_history; none where it was not written)."""
    config = _llamafactory_config(ctx, workdir)
    env = dict(ctx.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", WANDB_DISABLED="true")
    # One device: with several visible, llamafactory-cli would start torchrun on all of them.
    visible = ctx.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]
    env["CUDA_VISIBLE_DEVICES"] = "" if ctx.device == "cpu" else visible
    proc = subprocess.run([cli, "train", str(config)], check=False, capture_output=True, text=True, env=env,
                          timeout=900, errors="replace")
    log = workdir / "out" / "trainer_log.jsonl"
    losses = [json.loads(ln)["loss"] for ln in (read_text(log) or "").splitlines() if '"loss"' in ln]
    if proc.returncode != 0 or not losses:
        lines = [ln.strip() for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
        # The last error line names the cause (a missing module, a bad config key); the rest is traceback.
        cause = next((ln for ln in reversed(lines) if re.search(r"Error|error:", ln)), lines[-1] if lines else "")
        raise TrainError(f"llamafactory-cli train {config.name} exited {proc.returncode}: {first_line(cause)}")
    try:
        history = json.loads(read_text(workdir / "out" / "trainer_state.json") or "{}").get("log_history", [])
        norms = [float(h["grad_norm"]) for h in history if isinstance(h, dict) and "grad_norm" in h]
    except (ValueError, TypeError, AttributeError):
        norms = []
    return [float(x) for x in losses], norms


class TrainError(Exception):
    """The training command failed; the message is the evidence."""


def _train_backend(ctx: Context) -> tuple[str, str | None]:
    import importlib.util

    choice = ctx.train_backend
    cli = shutil.which("llamafactory-cli", path=os.pathsep.join([ctx.environ.get("PATH", ""),
                                                                  str(Path(sys.executable).parent)]))
    if choice == "llamafactory" or (choice == "auto" and cli and importlib.util.find_spec("llamafactory")):
        return "llamafactory", cli
    return "peft", None


# A gradient norm this many times the first steps' is an explosion (bf16 overflow, a broken kernel), even when
# the loss still falls for a while.
GRAD_EXPLODE_FACTOR = 100.0


def _grad_problem(norms: list[float]) -> str | None:
    """Why the gradient norms show a broken step (non-finite, or exploding), or None."""
    if not norms:
        return None
    bad = [i for i, n in enumerate(norms) if not math.isfinite(n)]
    if bad:
        return f"the gradient norm is {norms[bad[0]]} at step {bad[0] + 1}"
    start = sum(norms[:3]) / len(norms[:3])
    worst = max(range(len(norms)), key=lambda i: norms[i])
    if norms[worst] > GRAD_EXPLODE_FACTOR * max(start, 1e-6):
        return (f"the gradient norm explodes: {norms[worst]:.3g} at step {worst + 1}, "
                f"{norms[worst] / max(start, 1e-6):.0f}x the first steps' {start:.3g}")
    return None


@check("train.lora", "LoRA fine-tuning of a tiny local Llama: the loss falls, the gradients stay finite",
       option="train",
       needs=(_device_or_skip,))
def check_train(ctx: Context) -> Outcome:
    backend, cli = _train_backend(ctx)
    missing = [m for m in ("transformers", "peft", "tokenizers") if not _importable(m)]
    if backend == "peft" and missing:
        return fail(f"{', '.join(missing)} not installed: cannot fine-tune",
                    "install llamafactory (it brings transformers and peft): `pixi install -e ENV`")
    if backend == "llamafactory" and not cli:
        return fail("llamafactory-cli not found", "reinstall llamafactory in this environment")
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="rocm-env-check-") as tmp:
        try:
            losses, norms = _train_llamafactory(ctx, Path(tmp), cli) if cli and backend == "llamafactory" \
                else _train_peft(ctx, Path(tmp))
        except TrainError as exc:
            return fail(str(exc), "LLaMA-Factory itself fails: `llamafactory-cli env` shows its stack; install "
                                  "what it names; `--train-backend peft` checks torch + peft without it")
    took = time.perf_counter() - start
    first, last = sum(losses[:3]) / len(losses[:3]), sum(losses[-3:]) / len(losses[-3:])
    grads = f", grad norm {norms[0]:.3g} -> {norms[-1]:.3g} (max {max(norms):.3g})" if norms else ""
    evidence = (f"{backend}: {len(losses)} steps in {took:.1f} s, loss {first:.3f} -> {last:.3f}{grads} {_where(ctx)}")
    data = {"backend": backend, "losses": [round(x, 4) for x in losses], "seconds": round(took, 2),
            "grad_norms": [round(x, 4) if math.isfinite(x) else str(x) for x in norms]}
    problem = _grad_problem(norms)
    if problem:
        return fail(f"{evidence}: {problem}", "a kernel computes wrong gradients or bf16 overflows here: see "
                    "compute.bf16, compute.sdpa and torch.arch_list (a library without code for this GPU)", **data)
    if not all(math.isfinite(x) for x in losses) or not last < 0.8 * first:
        return fail(evidence + ": the loss did not fall",
                    "gradients do not reach the LoRA weights or are wrong: see compute.bf16 and compute.sdpa",
                    **data)
    return ok(evidence, **data)


def _importable(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


# ----------------------------------------------------------------------------- bitsandbytes, DeepSpeed
# Registered after the training smoke run so that the order of the checks above stays as it was;
# they run in the default probe whenever the package is installed (QLoRA / DeepSpeed environments).


def _installed(ctx: Context, module: str, package: str) -> bool:
    return _importable(module) or conda_meta_record(ctx.prefix, package) is not None


@check("bnb.linear4bit", "bitsandbytes 4-bit linear forward and backward against its dequantized weight",
       needs=(_torch_imported,))
def check_bnb(ctx: Context) -> Outcome:
    if not _installed(ctx, "bitsandbytes", "bitsandbytes"):
        return skip("bitsandbytes is not installed (QLoRA needs it: environments with the qlora feature)")
    early = _device_or_skip(ctx)
    if early:
        return skip(f"bitsandbytes is installed; {early.evidence}")
    try:
        import bitsandbytes as bnb
        import bitsandbytes.functional as bnb_functional
    except Exception as exc:  # noqa: BLE001 - a native library fails to load in many ways
        return fail(f"import bitsandbytes failed: {exc_text(exc)}{_conda_build(ctx, 'bitsandbytes')}",
                    "reinstall the bitsandbytes built for this torch and target (`pixi install -e ENV`)")
    native = Path(str(getattr(bnb.cextension.lib, "_name", "") or "none")).name
    name = f"bitsandbytes {bnb.__version__} ({native})"
    if ctx.device == "cuda" and ctx.is_rocm and "rocm" not in native:
        hip = ".".join(str(ctx.torch.version.hip).split(".")[:2])
        return fail(f"{name}: no HIP library loaded for torch's ROCm {hip}",
                    f"install the bitsandbytes built for ROCm {hip} and this target (libbitsandbytes_rocm"
                    f"{hip.replace('.', '')}.so); BNB_ROCM_VERSION only picks among libraries that exist")
    out_err, grad_err, quant_err = _bnb_linear4bit(ctx, bnb, bnb_functional)
    evidence = (f"{name}: nf4 Linear4bit 256->128, output error {out_err:.1e}, input-gradient error {grad_err:.1e} "
                f"against the dequantized weight (4-bit quantization error {quant_err:.2f}) {_where(ctx)}")
    data = {"version": bnb.__version__, "native": native, "out_err": out_err, "grad_err": grad_err,
            "quant_err": quant_err}
    # bf16 compute gives ~1e-2; a kernel for the wrong target gives garbage or NaN.
    if _out_of_bounds((out_err, 0.03), (grad_err, 0.03)) or not quant_err < 0.2:
        return fail(evidence, "the 4-bit kernels are wrong on this device: reinstall the bitsandbytes built for "
                              "this GPU target (build string rocmXY_<gfx>_...)", **data)
    return ok(evidence, **data)


def _bnb_linear4bit(ctx: Context, bnb: Any, functional: Any) -> tuple[float, float, float]:
    """(output error, input-gradient error, weight quantization error) of a 4-bit layer vs its dequantized weight."""
    torch = ctx.torch
    dtype = torch.bfloat16
    torch.manual_seed(0)
    layer = bnb.nn.Linear4bit(256, 128, bias=True, compute_dtype=dtype, quant_type="nf4")
    original = layer.weight.data.detach().clone().float()
    layer = layer.to(ctx.device)  # moving the layer quantizes its weight
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(32, 256, generator=gen).to(ctx.device, dtype).requires_grad_(True)
    out = layer(x)
    grad = torch.randn(out.shape, generator=gen).to(ctx.device, out.dtype)
    out.backward(grad)
    weight = functional.dequantize_4bit(layer.weight.data, layer.weight.quant_state).float()
    ref_x = x.detach().float().requires_grad_(True)
    ref = ref_x @ weight.t() + layer.bias.detach().float()
    ref.backward(grad.float())
    return _rel_err(torch, out, ref), _rel_err(torch, x.grad, ref_x.grad), _rel_err(torch, weight, original)


def _import_deepspeed(ctx: Context) -> Any:
    """deepspeed, with its logging quieted."""
    import contextlib
    import importlib
    import logging

    # DeepSpeed logs to stdout, where --json puts the report: its logger goes to stderr, errors only.
    with contextlib.redirect_stdout(sys.stderr):
        module = importlib.import_module("deepspeed")
    logger = logging.getLogger("DeepSpeed")
    logger.setLevel(logging.ERROR)
    for handler in logger.handlers:
        if isinstance(handler, logging.StreamHandler) and handler.stream in (sys.stdout, sys.__stdout__):
            handler.setStream(sys.stderr)
    return module


def _deepspeed_installed(ctx: Context) -> Outcome | None:
    if _installed(ctx, "deepspeed", "deepspeed"):
        return None
    return skip("DeepSpeed is not installed (environments with the deepspeed feature have it)")


@check("deepspeed.ops", "DeepSpeed ops prebuilt for this torch and compatible here (ds_report)",
       needs=(_torch_imported, _deepspeed_installed))
def check_deepspeed_ops(ctx: Context) -> Outcome:
    try:
        deepspeed = _import_deepspeed(ctx)
        from deepspeed.accelerator import get_accelerator
        from deepspeed.git_version_info import installed_ops, torch_info
        from deepspeed.ops.op_builder.all_ops import ALL_OPS
    except Exception as exc:  # noqa: BLE001 - its ops and accelerator detection fail in many ways
        return fail(f"import deepspeed failed: {exc_text(exc)}{_conda_build(ctx, 'deepspeed')}",
                    "reinstall the deepspeed built for this torch (`pixi install -e ENV`)")
    accelerator = get_accelerator().device_name()
    with _quiet_fds():  # is_compatible() of some ops compiles a test program and prints its errors
        compatible = {op: bool(b.is_compatible(False)) for op, b in sorted(ALL_OPS.items()) if b is not None}
    prebuilt = sorted(op for op, on in installed_ops.items() if on)
    data = {"version": deepspeed.__version__, "accelerator": accelerator, "prebuilt": prebuilt,
            "compatible": compatible, "torch_info": dict(torch_info)}
    name = f"deepspeed {deepspeed.__version__} (accelerator {accelerator})"
    summary = (f"{name}: prebuilt {', '.join(prebuilt) or 'none'}; compatible here "
               f"{sum(compatible.values())}/{len(compatible)}")
    if not (ctx.is_rocm and ctx.gpu_count):
        return ok(summary + " (not a ROCm GPU: build checks not applied)", **data)
    if accelerator != "cuda":
        return fail(summary, "DeepSpeed did not pick the GPU: unset DS_ACCELERATOR or set it to cuda", **data)
    mismatch = _deepspeed_build_mismatch(ctx.torch, torch_info) if prebuilt else ""
    if mismatch:
        return fail(f"{summary}; {mismatch}", "install the deepspeed built against this exact pytorch "
                                              "(rocmlock's deepspeed pins it): `pixi install -e ENV`", **data)
    if not prebuilt:
        return warn(summary, "every op JIT-compiles at first use (hipcc and minutes on each node): install "
                             "rocmlock's deepspeed build, which prebuilds the ROCm training ops", **data)
    return ok(summary, **data)


def _deepspeed_build_mismatch(torch: Any, torch_info: Mapping[str, Any]) -> str:
    """Why prebuilt ops do not fit this torch (built against another torch or HIP version), or ""."""
    built_torch, built_hip = str(torch_info.get("version", "")), str(torch_info.get("hip_version", ""))
    here_torch = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    here_hip = ".".join(str(torch.version.hip).split(".")[:2])
    if built_torch and built_torch != here_torch:
        return f"ops were built against torch {built_torch}, this is torch {here_torch}"
    if built_hip and built_hip != here_hip:
        return f"ops were built for HIP {built_hip}, torch uses HIP {here_hip}"
    return ""


class _quiet_fds:
    """Silence file descriptors 1 and 2 (compiler output of DeepSpeed's compatibility probes)."""

    def __enter__(self) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        self.saved = [os.dup(1), os.dup(2)]
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        os.close(devnull)

    def __exit__(self, *exc: object) -> None:
        for fd, saved in zip((1, 2), self.saved):
            os.dup2(saved, fd)
            os.close(saved)


@check("deepspeed.zero2", "one ZeRO-2 optimizer step of a tiny model (single process)",
       needs=(_torch_imported, _deepspeed_installed, _device_or_skip))
def check_deepspeed_zero2(ctx: Context) -> Outcome:
    try:
        deepspeed = _import_deepspeed(ctx)
    except Exception as exc:  # noqa: BLE001 - reported in detail by deepspeed.ops
        return fail(f"import deepspeed failed: {exc_text(exc)}", "see deepspeed.ops")
    import contextlib
    import io

    start = time.perf_counter()
    # initialize() prints ZeRO memory summaries with print(): keep them out of the report.
    with _single_process_world(ctx), contextlib.redirect_stdout(io.StringIO()):
        loss0, loss1, optimizer = _zero2_step(ctx, deepspeed)
    evidence = (f"ZeRO-2 with {optimizer}: loss {loss0:.4f} -> {loss1:.4f} after one step "
                f"({time.perf_counter() - start:.1f} s) {_where(ctx)}")
    data = {"optimizer": optimizer, "loss_before": loss0, "loss_after": loss1}
    if not (math.isfinite(loss0) and math.isfinite(loss1)) or not loss1 < loss0:
        return fail(evidence, "the ZeRO-2 step did not reduce the loss: check compute.bf16 and deepspeed.ops",
                    **data)
    return ok(evidence, **data)


class _single_process_world:
    """A one-process torch.distributed world (rank 0 of 1 on a free local port).

    The world outlives the check and is destroyed at exit: DeepSpeed caches its process groups, so
    a second world in the same process (the probe's tests call main() repeatedly) would not work.
    """

    KEYS = ("MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE")

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.saved: dict[str, str | None] = {}

    def __enter__(self) -> None:
        import atexit
        import socket

        dist = self.ctx.torch.distributed
        # DeepSpeed reads these on every initialize(), also when the world already exists.
        self.saved = {k: os.environ.get(k) for k in self.KEYS}
        os.environ.update(MASTER_ADDR="127.0.0.1", RANK="0", LOCAL_RANK="0", WORLD_SIZE="1")
        if dist.is_available() and dist.is_initialized():
            return
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(sock.getsockname()[1])
        atexit.register(lambda: dist.is_initialized() and dist.destroy_process_group())

    def __exit__(self, *exc: object) -> None:
        for key, value in self.saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _zero2_step(ctx: Context, deepspeed: Any) -> tuple[float, float, str]:
    """Loss before and after one ZeRO-2 step of a small MLP, and the optimizer that took it."""
    torch = ctx.torch
    from deepspeed.git_version_info import installed_ops

    on_gpu = ctx.device == "cuda"
    if not on_gpu:
        # The CPU accelerator would JIT-compile its shared-memory allreduce, which one process never uses.
        from deepspeed import ops as deepspeed_ops

        deepspeed_ops.__compatible_ops__["deepspeed_shm_comm"] = False
    deepspeed.init_distributed(dist_backend="nccl" if on_gpu else "gloo", verbose=False)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 16))
    config: dict[str, Any] = {"train_micro_batch_size_per_gpu": 16, "gradient_accumulation_steps": 1,
                              "zero_optimization": {"stage": 2}, "bf16": {"enabled": on_gpu},
                              "steps_per_print": 10**9, "zero_allow_untested_optimizer": True}
    # DeepSpeed's own Adam is its fused_adam op: use it when it is prebuilt, never JIT-compile it here.
    if on_gpu and installed_ops.get("fused_adam"):
        config["optimizer"] = {"type": "Adam", "params": {"lr": 1e-2}}
        engine, optimizer, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                                       config=config)
    else:
        engine, optimizer, _, _ = deepspeed.initialize(
            model=model, optimizer=torch.optim.AdamW(model.parameters(), lr=1e-2), config=config)
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(16, 64, generator=gen).to(engine.device)
    y = torch.randn(16, 16, generator=gen).to(engine.device)
    dtype = next(engine.module.parameters()).dtype

    def loss() -> Any:
        return torch.nn.functional.mse_loss(engine(x.to(dtype)).float(), y)

    before = loss()
    engine.backward(before)
    engine.step()
    with torch.no_grad():
        after = loss()
    inner = getattr(optimizer, "optimizer", optimizer)
    return float(before.detach()), float(after), f"{type(optimizer).__name__}({type(inner).__name__})"


# ----------------------------------------------------------------------------- Triton's run-time compiler


@check("triton.cc", "a C compiler for Triton's launcher (torch.compile, flash-attn's Triton backend)",
       required=False)
def check_triton_cc(ctx: Context) -> Outcome:
    # Triton builds a small launcher module with the host's C compiler at the first kernel launch:
    # $CC, else gcc, else clang, else "Failed to find C compiler" (triton/runtime/build.py). The triton
    # package brings no compiler, so a node image without one fails at the first torch.compile'd step.
    if not _installed(ctx, "triton", "triton"):
        return skip("triton is not installed")
    path = ctx.environ.get("PATH", "")
    given = ctx.environ.get("CC")
    if given:
        found = shutil.which(given, path=path)
        if found:
            return ok(f"CC={given} ({found})", cc=found)
        return warn(f"CC={given} is not an executable on PATH: Triton's first kernel launch fails",
                    "set CC to an installed C compiler, or unset it to use gcc/clang")
    for name in ("gcc", "clang"):
        found = shutil.which(name, path=path)
        if found:
            return ok(f"{name} at {found}", cc=found)
    return warn("no C compiler ($CC, gcc, clang on PATH): Triton compiles its launcher at the first kernel "
                "launch and fails with 'Failed to find C compiler'",
                "install gcc on the node (apt-get install gcc, dnf install gcc) or into the environment "
                "(conda-forge's gcc), or set CC")


# ----------------------------------------------------------------------------- running and reporting


def resolve_expectations(ctx: Context, args: argparse.Namespace) -> None:
    """Expected target / ROCm / peak: flags first, then the prefix's amdgpu-target and rocm-version packages."""
    if args.expect_arch:
        ctx.expect_arch, ctx.expect_arch_source = gfx_of(args.expect_arch), "--expect-arch"
    elif (record := conda_meta_record(ctx.prefix, "amdgpu-target")) is not None:
        ctx.expect_arch, ctx.expect_arch_source = gfx_of(str(record.get("build", ""))), "amdgpu-target package"
    if args.expect_rocm:
        ctx.expect_rocm, ctx.expect_rocm_source = args.expect_rocm.rstrip(".*"), "--expect-rocm"
    elif (record := conda_meta_record(ctx.prefix, "rocm-version")) is not None:
        ctx.expect_rocm, ctx.expect_rocm_source = str(record.get("version")), "rocm-version package"
    ctx.peak_tflops = args.peak_tflops


def selected_checks(options: set[str], only: Sequence[str]) -> list[Check]:
    """Registered checks in order: those without an option, those whose option was given, filtered by --only."""
    chosen = [c for c in CHECKS if c.option is None or c.option in options]
    if only:
        chosen = [c for c in chosen if any(c.id == o or c.id.startswith(o.rstrip(".") + ".") for o in only)]
    return chosen


def run_check(ctx: Context, chk: Check, debug: bool) -> dict[str, Any]:
    """Run one check; an exception becomes a failure with its message, never a traceback (unless --debug)."""
    start = time.perf_counter()
    try:
        outcome = chk.func(ctx)
    except Exception as exc:
        if debug:
            raise
        outcome = fail(f"the check raised {exc_text(exc)}",
                       "rerun with --debug for the traceback; an unexpected environment or a probe bug")
    return {
        "id": chk.id, "title": chk.title, "status": outcome.status, "evidence": outcome.evidence,
        "fix": outcome.fix, "required": chk.required, "seconds": round(time.perf_counter() - start, 2),
        "data": dict(outcome.data),
    }


def node_name(ctx: Context) -> str:
    """The node's name for fleet reports (``rocmlock report``): the kernel's, or ``<root>/etc/hostname`` under a
    ``--root`` other than / (a container with the host mounted, a test's fake node)."""
    if not ctx.real_root:
        name = (read_text(ctx.path("/etc/hostname")) or "").strip()
        if name:
            return name
    return socket.gethostname()


def build_report(ctx: Context, results: list[dict[str, Any]]) -> dict[str, Any]:
    failed = [r["id"] for r in results if r["required"] and r["status"] == "fail"]
    return {
        "schema": SCHEMA_VERSION, "probe": "rocm-env-check", "version": PROBE_VERSION, "ok": not failed,
        "hostname": node_name(ctx), "rocm": (host_rocm(ctx) or (None, None))[1],
        "failed": failed, "python": sys.version.split()[0], "prefix": str(ctx.prefix),
        "expected": {"arch": ctx.expect_arch, "arch_source": ctx.expect_arch_source or None,
                     "rocm": ctx.expect_rocm, "rocm_source": ctx.expect_rocm_source or None},
        "checks": results,
    }


def render_table(report: dict[str, Any]) -> str:
    """The human-readable report: one line per check, the fix under each one that is not ok."""
    exp = report["expected"]
    lines = [f"rocm-env-check {report['version']}: python {report['python']}, prefix {report['prefix']}",
             f"expected target: {exp['arch'] or 'none'}" + (f" ({exp['arch_source']})" if exp["arch"] else "")
             + f", ROCm: {exp['rocm'] or 'none'}" + (f" ({exp['rocm_source']})" if exp["rocm"] else ""), ""]
    width = max((len(r["id"]) for r in report["checks"]), default=5)
    lines.append(f"  {'STATUS':<8} {'CHECK':<{width}}  EVIDENCE")
    for r in report["checks"]:
        status = r["status"].upper() if r["status"] == "fail" else r["status"]
        optional = "" if r["required"] or r["status"] != "fail" else " (not required)"
        lines.append(f"  {status:<8} {r['id']:<{width}}  {r['evidence']}{optional}")
        if r["fix"] and r["status"] in ("fail", "warn"):
            lines.append(f"  {'':<8} {'':<{width}}  fix: {r['fix']}")
    warns = sum(r["status"] == "warn" for r in report["checks"])
    tail = f" ({warns} warning{'s' if warns != 1 else ''})" if warns else ""
    if report["ok"]:
        lines += ["", f"PASS: every required check passed{tail}"]
    else:
        lines += ["", f"FAIL: {len(report['failed'])} required check(s) failed: {', '.join(report['failed'])}{tail}"]
    # The prefix's conda-meta (an amdgpu-target build, a rocm-version version), file names and tools' output
    # reach these lines: none may move the cursor or forge a line of its own (a build "gfx942\x1b[2J\nPASS: ...").
    return "\n".join(terminal_safe(line) for line in lines)


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """While checks run, whatever libraries print (Python or native code) goes to stderr: stdout is the JSON's."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:
        saved = None
    if saved is not None:
        os.dup2(2, 1)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        if saved is not None:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rocm-env-check", description=__doc__.split("\n\n")[0])
    p.add_argument("--version", action="version", version=f"rocm-env-check {PROBE_VERSION}")
    p.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    p.add_argument("--bench", action="store_true", help="also measure bf16 GEMM TFLOP/s against the peak")
    p.add_argument("--train", action="store_true", help="also run a LoRA smoke training (no download)")
    p.add_argument("--expect-arch", metavar="GFX", help="the GPU target the environment is for (gfx942)")
    p.add_argument("--expect-rocm", metavar="X.Y", help="the ROCm version the environment is built for")
    p.add_argument("--peak-tflops", type=float, metavar="N", help="dense bf16 peak for --bench's ratio")
    p.add_argument("--min-ratio", type=float, default=0.3, help="--bench warns below this share of peak (0.3)")
    p.add_argument("--device", choices=("auto", "cpu"), default="auto",
                   help="cpu: run compute, bench and train checks on the CPU (tests the probe itself)")
    p.add_argument("--train-steps", type=int, default=30, help="optimizer steps of --train (30)")
    p.add_argument("--train-backend", choices=("auto", "llamafactory", "peft"), default="auto",
                   help="auto: llamafactory-cli when LLaMA-Factory is installed, else transformers + peft")
    p.add_argument("--only", action="append", default=[], metavar="ID",
                   help="run only these checks or groups (host, tools, rocm, torch, compute, ...); repeatable")
    p.add_argument("--prefix", type=Path, default=Path(sys.prefix),
                   help="the environment whose conda-meta is read (default: this python's prefix)")
    p.add_argument("--root", type=Path, default=Path("/"),
                   help="read /sys, /dev, /proc, /etc and /opt/rocm under this directory (for tests)")
    p.add_argument("--debug", action="store_true", help="let a check's exception propagate with its traceback")
    return p


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """Run the probe; returns the exit code (0: no required check failed)."""
    args = build_parser().parse_args(argv)
    if not args.prefix.is_dir():
        print(f"rocm-env-check: error: --prefix {args.prefix}: no such directory "
              "(pass the environment's prefix, e.g. $CONDA_PREFIX)", file=sys.stderr)
        return 2
    ctx = Context(root=args.root, prefix=args.prefix, environ=dict(os.environ if environ is None else environ),
                  device_mode=args.device, min_ratio=args.min_ratio, train_steps=max(args.train_steps, 4),
                  train_backend=args.train_backend)
    resolve_expectations(ctx, args)
    options = {name for name in ("bench", "train") if getattr(args, name)}
    only = [o for item in args.only for o in item.split(",") if o]
    checks = selected_checks(options, only)
    if not checks:
        print(f"rocm-env-check: error: no check matches --only {','.join(only)}", file=sys.stderr)
        return 2
    with stdout_to_stderr():
        results = [run_check(ctx, chk, args.debug) for chk in checks]
    report = build_report(ctx, results)
    # The result is the table, unless --json makes the report the result (then the table is for the person
    # watching, on stderr, and stdout stays parseable).
    print(render_table(report), file=sys.stderr if args.json else sys.stdout)
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
