"""What a node offers a bundle: its GPUs' gfx targets (from KFD's sysfs topology) and its ROCm version.

The GPUs are read the way the post-install probe reads them (tools/verify_env.py ``check_driver``; the probe
is standalone and imports nothing of ours, so the few lines are repeated here):
``/sys/class/kfd/kfd/topology/nodes/*/properties`` ``gfx_target_version`` (0 for CPU nodes). ROCm is found
as doctor finds it (:mod:`rocmlock.host.rocm`: ``$HIP_PATH`` / ``$ROCM_PATH`` / ``/opt/rocm`` / a
distribution's ``/usr``; the version from ``.info/version``, rocm-core's header or ``hipconfig``). ``root``
stands for ``/`` so tests (and a container with the host mounted) can show another machine.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from rocmlock.gpu.targets import all_targets, minor_version
from rocmlock.host.rocm import Host, discover_prefix, find_version, holds_header

KFD_NODES = "sys/class/kfd/kfd/topology/nodes"


@dataclass(frozen=True)
class Gpu:
    """One KFD GPU node: its index among the GPUs and its gfx target."""

    index: int
    gfx: str


@dataclass(frozen=True)
class Node:
    """The GPUs and the ROCm of a host."""

    gpus: tuple[Gpu, ...]
    rocm_root: Path | None
    rocm_version: str | None


def gfx_from_kfd_version(value: int) -> str:
    """KFD's ``gfx_target_version`` (``90402``, ``90010``, ``110000``) -> ``gfx942``, ``gfx90a``, ``gfx1100``."""
    major, minor, step = value // 10000, (value // 100) % 100, value % 100
    return f"gfx{major}{minor:x}{step:x}"


def _node_index(path: Path) -> int:
    return int(path.parent.name) if path.parent.name.isdigit() else 1 << 30


def read_gpus(root: Path) -> tuple[Gpu, ...]:
    """The GPU nodes KFD lists below ``root``, in node order (CPU nodes report gfx_target_version 0)."""
    gfx: list[str] = []
    for props in sorted((root / KFD_NODES).glob("*/properties"), key=_node_index):
        try:
            text = props.read_text(errors="replace")
        except OSError:
            continue
        m = re.search(r"^gfx_target_version\s+(\d+)", text, re.MULTILINE)
        if m and int(m.group(1)):
            gfx.append(gfx_from_kfd_version(int(m.group(1))))
    return tuple(Gpu(i, g) for i, g in enumerate(gfx))


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
    prefix = _rocm_prefix(root, env, host)
    version, _source = find_version(host, prefix)
    return Node(read_gpus(root), prefix, version)


def _products(gfx: str) -> str:
    target = all_targets().get(gfx)
    return f"{gfx} ({', '.join(target.products[:2])})" if target and target.products else gfx


def node_problem(node: Node, gpu_target: str | None, rocm_version: str | None) -> str | None:
    """Why this node cannot run a bundle built for ``gpu_target`` and ROCm ``rocm_version``; None if it can."""
    if gpu_target is None:
        return None
    wanted = _products(gpu_target)
    if not node.gpus:
        return (f"no AMD GPU on this node (no GPU in /{KFD_NODES}): the bundle was built for {wanted}; "
                "unpack it on a GPU node (is the amdgpu driver loaded?)")
    if not any(g.gfx == gpu_target for g in node.gpus):
        seen = ", ".join(f"GPU {g.index} is {g.gfx}" for g in node.gpus)
        return (f"{seen}; the bundle was built for {wanted}: pack the environment of this node's target "
                f"(`rocmlock pack -e <env for {node.gpus[0].gfx}>`)")
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
