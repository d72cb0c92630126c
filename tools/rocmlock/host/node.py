"""What a node offers a bundle: its GPUs' gfx targets (from KFD's sysfs topology) and its ROCm version.

A node may hold GPUs of different targets (an MI300X beside an MI210, a workstation's Radeon beside its APU).
Each GPU's compute units are read too (``simd_count / simd_per_cu``), because the two rules that pick one GPU to
stand for the node in ``__amdgpu_arch`` disagree there: rattler (conda/rattler#2806,
crates/rattler_virtual_packages/src/amdgpu.rs ``select_device``) takes the GPU with the most compute units, ties
to the highest ISA; the CEP draft (conda/ceps#189, "the highest AMDGPU ISA version among the detected devices")
takes the highest ISA. :func:`gpu_choice` says what each picks.

The GPUs are read the way the post-install probe reads them (tools/verify_env.py ``check_driver``; the probe
is standalone and imports nothing of ours, so the few lines are repeated here):
``/sys/class/kfd/kfd/topology/nodes/*/properties`` ``gfx_target_version`` (0 for CPU nodes). ROCm is found
as doctor finds it (:mod:`rocmlock.host.rocm`: ``$HIP_PATH`` / ``$ROCM_PATH`` / ``rocm-sdk path --root`` /
``/opt/rocm`` / a distribution's ``/usr``; the version from ``.info/version``, rocm-core's header or ``hipconfig``);
TheRock's runtime packages without a devel tree by ``rocm-sdk version``. ``root``
stands for ``/`` so tests (and a container with the host mounted) can show another machine.

What the node *is* for a solver (``__amdgpu``/``__amdgpu_arch``) is rattler's answer, not a list kept here
(py-rattler 0.28, conda/rattler#2806: ``rattler.VirtualPackage.detect`` reports both, and honours
``CONDA_OVERRIDE_AMDGPU`` (``0`` on, empty off) and ``CONDA_OVERRIDE_AMDGPU_ARCH`` (``9.4.2``, empty for none)):
:func:`node_gpus` asks rattler on ``/`` and wherever an override is set; below another root, where rattler cannot
look, KFD's GPUs are read and picked by rattler's rule (:func:`rattler_pick`). The tests compare both with
rattler's own detection of the same KFD tree (tests/test_amdgpu_detect.py).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from rocmlock.errors import InputError
from rocmlock.gpu.targets import all_targets, isa_of, minor_version
from rocmlock.host import therock
from rocmlock.host.rocm import Host, discover_prefix, find_version, holds_header, sdk_runtime

KFD_NODES = "sys/class/kfd/kfd/topology/nodes"


@dataclass(frozen=True)
class Gpu:
    """One KFD GPU node: its index among the GPUs (as HIP_VISIBLE_DEVICES counts them), its gfx target, its ISA
    version (``gfx_target_version`` decoded: gfx90a is (9, 0, 10)) and its compute units (None: KFD did not say)."""

    index: int
    gfx: str
    isa: tuple[int, int, int] = (0, 0, 0)
    compute_units: int | None = None

    @property
    def isa_version(self) -> str:
        """The ``__amdgpu_arch`` version of this GPU: ``9.4.2``, ``9.0.10``, ``11.0.0``."""
        return ".".join(str(p) for p in self.isa)

    def describe(self) -> str:
        units = f", {self.compute_units} CUs" if self.compute_units is not None else ""
        return f"GPU {self.index} {self.gfx} ({self.isa_version}{units})"


@dataclass(frozen=True)
class AmdGpu:
    """``__amdgpu`` (``present``) and ``__amdgpu_arch`` (``isa``: ``9.4.2``, None when not known) of a node, and
    where they come from (``source``: rattler's detection, its overrides, or KFD read with rattler's rule)."""

    present: bool
    isa: str | None
    source: str

    def describe(self) -> str:
        if not self.present:
            return f"no __amdgpu from {self.source}"
        if self.isa is None:
            return f"__amdgpu but no __amdgpu_arch from {self.source}"
        return f"__amdgpu_arch {self.isa} ({gfx_of_isa(self.isa)}) from {self.source}"


@dataclass(frozen=True)
class Node:
    """The GPUs and the ROCm of a host, and what a solver sees of its GPU (``amdgpu``)."""

    gpus: tuple[Gpu, ...]
    rocm_root: Path | None
    rocm_version: str | None
    amdgpu: AmdGpu = AmdGpu(False, None, "")


# rattler's overrides (conda/rattler#2806, rattler_virtual_packages amdgpu.rs; checked with py-rattler 0.28).
OVERRIDES = ("CONDA_OVERRIDE_AMDGPU", "CONDA_OVERRIDE_AMDGPU_ARCH")


def gfx_of_isa(isa: str) -> str:
    """``9.4.2`` -> ``gfx942``, ``9.0.10`` -> ``gfx90a``, ``11.0.0`` -> ``gfx1100`` (LLVM's processor name)."""
    major, minor, step = (int(p) for p in isa.split("."))
    return f"gfx{major}{minor:x}{step:x}"


def overridden() -> bool:
    """True when the process environment sets an AMD GPU override (rattler reads them from there)."""
    return any(name in os.environ for name in OVERRIDES)


def rattler_amdgpu() -> AmdGpu:
    """``__amdgpu``/``__amdgpu_arch`` as rattler detects them on this host, its overrides applied
    (``VirtualPackage.detect(VirtualPackageOverrides.from_env())``); a bad override is one line naming it."""
    from rattler import VirtualPackage, VirtualPackageOverrides
    from rattler.exceptions import DetectVirtualPackageError

    try:
        found = [vp.into_generic() for vp in VirtualPackage.detect(VirtualPackageOverrides.from_env())]
    except DetectVirtualPackageError as exc:
        names = " / ".join(n for n in OVERRIDES if n in os.environ) or "a CONDA_OVERRIDE_* variable"
        raise InputError(f"rattler cannot detect this host's virtual packages: {str(exc).splitlines()[0]}",
                         hint=f"fix {names}: CONDA_OVERRIDE_AMDGPU is 0 (on) or empty (off), "
                              "CONDA_OVERRIDE_AMDGPU_ARCH the ISA version such as 9.4.2 (gfx942)") from None
    by_name = {vp.name.normalized: str(vp.version) for vp in found}
    source = "rattler with " + " ".join(f"{n}={os.environ[n]!r}" for n in OVERRIDES if n in os.environ) \
        if overridden() else "rattler's detection"
    return AmdGpu("__amdgpu" in by_name, by_name.get("__amdgpu_arch"), source)


def node_gpus(root: Path) -> tuple[tuple[Gpu, ...], AmdGpu]:
    """The GPUs the node checks go by, and what a solver sees of them.

    With an override set, the node is what rattler reports under it (one GPU of that ISA, or none), as pixi
    would see it; on ``/`` rattler's detection names ``__amdgpu_arch`` and KFD lists the GPUs (rattler's alone
    when KFD lists none: ROCm on WSL, found through HIP); below another root KFD's GPUs, picked by rattler's rule.
    """
    kfd = read_gpus(root)
    if not overridden() and root != Path("/"):
        pick = rattler_pick(kfd)
        return kfd, AmdGpu(bool(kfd), pick.isa_version if pick else None, f"/{KFD_NODES}")
    seen = rattler_amdgpu()
    if kfd and not overridden():
        return kfd, seen
    if seen.isa is None:
        return (), seen
    major, minor, step = (int(p) for p in seen.isa.split("."))
    return (Gpu(0, gfx_of_isa(seen.isa), (major, minor, step)),), seen


def gfx_from_kfd_version(value: int) -> str:
    """KFD's ``gfx_target_version`` (``90402``, ``90010``, ``110000``) -> ``gfx942``, ``gfx90a``, ``gfx1100``."""
    major, minor, step = value // 10000, (value // 100) % 100, value % 100
    return f"gfx{major}{minor:x}{step:x}"


def _node_index(path: Path) -> int:
    return int(path.parent.name) if path.parent.name.isdigit() else 1 << 30


def _property(text: str, name: str) -> int | None:
    # At most 20 digits (KFD writes u32/u64 values): a longer run from a file under --host-root is no value, not
    # an int() that refuses it (Python's limit is 4,300 digits) with a traceback.
    m = re.search(rf"^{name}\s+(\d{{1,20}})\s*$", text, re.MULTILINE)
    return int(m.group(1)) if m else None


def read_gpus(root: Path) -> tuple[Gpu, ...]:
    """The GPU nodes KFD lists below ``root``, in node order (CPU nodes report gfx_target_version 0)."""
    found: list[tuple[int, int | None]] = []
    for props in sorted((root / KFD_NODES).glob("*/properties"), key=_node_index):
        try:
            text = props.read_text(errors="replace")
        except OSError:
            continue
        value = _property(text, "gfx_target_version")
        if value:
            simds, per_cu = _property(text, "simd_count"), _property(text, "simd_per_cu")
            found.append((value, simds // per_cu if simds is not None and per_cu else None))
    return tuple(Gpu(i, gfx_from_kfd_version(v), (v // 10000 % 100, v // 100 % 100, v % 100), units)
                 for i, (v, units) in enumerate(found))


def rattler_pick(gpus: tuple[Gpu, ...]) -> Gpu | None:
    """The GPU rattler (and pixi on it) reports as ``__amdgpu_arch``: most compute units (an unknown count below
    any known one), ties to the highest ISA (conda/rattler#2806, amdgpu.rs ``select_device``)."""
    return max(gpus, key=lambda g: (g.compute_units is not None, g.compute_units or 0, g.isa), default=None)


def cep_pick(gpus: tuple[Gpu, ...]) -> Gpu | None:
    """The GPU the CEP draft reports as ``__amdgpu_arch``: the highest ISA version (conda/ceps#189)."""
    return max(gpus, key=lambda g: g.isa, default=None)


def gpu_choice(gpus: tuple[Gpu, ...], gpu_target: str | None = None) -> str | None:
    """On a node with GPUs of more than one target, a line naming every GPU, the ``__amdgpu_arch`` that rattler
    and the CEP draft report, and for ``gpu_target`` the GPUs it runs on; None on a node of one target."""
    if len({g.gfx for g in gpus}) < 2:
        return None
    rattler, cep = rattler_pick(gpus), cep_pick(gpus)
    assert rattler is not None and cep is not None
    line = (f"GPUs of {len({g.gfx for g in gpus})} targets: {', '.join(g.describe() for g in gpus)}; "
            f"__amdgpu_arch is {rattler.isa_version} ({rattler.gfx}) for rattler/pixi (most compute units, "
            f"conda/rattler#2806) and {cep.isa_version} ({cep.gfx}) under the CEP draft (highest ISA, "
            "conda/ceps#189)")
    mine = [g for g in gpus if g.gfx == gpu_target]
    if not mine:
        return line
    line += f"; {gpu_target} is GPU {', '.join(str(g.index) for g in mine)}: export HIP_VISIBLE_DEVICES=" \
            f"{','.join(str(g.index) for g in mine)} so the environment uses only those"
    if rattler.gfx != gpu_target:
        line += (f"; a solver that detects __amdgpu_arch refuses the {gpu_target} packages here: install with "
                 f"CONDA_OVERRIDE_AMDGPU_ARCH={mine[0].isa_version}")
    return line


def _rocm_prefix(root: Path, env: Mapping[str, str], host: Host) -> Path | None:
    """HIP_PATH/ROCM_PATH as given; else /opt/rocm or a distribution's /usr below ``root``; on the real root
    also where ``hipconfig --path`` says (:func:`rocmlock.host.rocm.discover_prefix`)."""
    for var in ("HIP_PATH", "ROCM_PATH"):
        if env.get(var):
            return Path(env[var])
    if (root / "opt/rocm").is_dir():
        return root / "opt/rocm"
    if root == Path("/"):
        return discover_prefix(host)
    return root / "usr" if holds_header(root / "usr") else None


def read_node(root: Path, env: Mapping[str, str]) -> Node:
    """The node below ``root``; the ROCm version as doctor finds it (:func:`rocmlock.host.rocm.find_version`).

    Below another root no command of this host runs: its ``hipconfig`` would describe this host."""
    host = Host(env) if root == Path("/") else Host(env, which=lambda _name, _path: None)
    gpus, amdgpu = node_gpus(root)
    prefix = _rocm_prefix(root, env, host)
    if root == Path("/") and not any(env.get(v) for v in ("HIP_PATH", "ROCM_PATH")) \
            and (prefix is None or not therock.is_python_tree(prefix)):
        # TheRock's runtime packages without rocm-sdk-devel (all a node that only runs needs): no tree to name,
        # but `rocm-sdk version` says which ROCm the environment's PyTorch will load.
        runtime = sdk_runtime(host)
        if runtime is not None:
            return Node(gpus, Path(runtime[0]), runtime[1], amdgpu)
    version, _source = find_version(host, prefix)
    return Node(gpus, prefix, version, amdgpu)


def _products(gfx: str) -> str:
    target = all_targets().get(gfx)
    return f"{gfx} ({', '.join(target.products[:2])})" if target and target.products else gfx


def node_problem(node: Node, gpu_target: str | None, rocm_version: str | None) -> str | None:
    """Why this node cannot run a bundle built for ``gpu_target`` and ROCm ``rocm_version``; None if it can."""
    if gpu_target is None:
        return None
    wanted = _products(gpu_target)
    if not node.gpus:
        what = node.amdgpu.describe() if node.amdgpu.source else f"no GPU in /{KFD_NODES}"
        lead = "no AMD GPU of a known ISA" if node.amdgpu.present else "no AMD GPU"
        fix = f"unset {' and '.join(n for n in OVERRIDES if n in os.environ)}, or set " \
              f"CONDA_OVERRIDE_AMDGPU_ARCH={isa_of(gpu_target)} on a node of that GPU" if overridden() else \
            "unpack it on a GPU node (is the amdgpu driver loaded?)"
        return f"{lead} on this node ({what}): the bundle was built for {wanted}; {fix}"
    if not any(g.gfx == gpu_target for g in node.gpus):
        seen = ", ".join(f"GPU {g.index} is {g.gfx}" for g in node.gpus)
        # On a node of several targets, the one rattler would solve for (the most compute units) is the one to pack.
        pick = gfx_of_isa(node.amdgpu.isa) if node.amdgpu.isa else (rattler_pick(node.gpus) or node.gpus[0]).gfx
        return (f"{seen}; the bundle was built for {wanted}, which is none of them ({node.amdgpu.describe()}): "
                f"pack the environment of this node's target (`rocmlock pack -e <env for {pick}>`)")
    if rocm_version is None:
        return None
    if node.rocm_version is None:
        where = node.rocm_root or "$HIP_PATH, $ROCM_PATH or /opt/rocm"
        return (f"no ROCm found at {where}: the bundle needs ROCm {rocm_version}; install it, or set "
                "ROCM_PATH to where it is")
    if minor_version(node.rocm_version) != minor_version(rocm_version):
        return (f"this node has ROCm {node.rocm_version} ({node.rocm_root}), the bundle was built for ROCm "
                f"{rocm_version}: pack an environment locked for ROCm {minor_version(node.rocm_version)}, "
                "or install that ROCm")
    return None
