"""Small conda channels built by the tests themselves (no network): py-rattler-build + rattler.index."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import rattler_build as rb
from rattler import BuildString, Channel, GenericVirtualPackage, PackageName, RepoDataRecord, Version, solve
from rattler.index import index_fs

# A fixed timestamp keeps package archives (and so their hashes) byte-identical across runs.
FIXED_TIME = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Pkg:
    name: str
    version: str
    build: str = "0"
    subdir: str = "linux-64"
    depends: tuple[str, ...] = ()
    constrains: tuple[str, ...] = ()
    build_number: int = 0
    noarch: str | None = None
    files: tuple[tuple[str, str], ...] = field(default=())


def build_channel(root: Path, packages: list[Pkg]) -> Path:
    """Assemble ``packages`` into ``root/<subdir>/`` and index the channel; returns ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "noarch").mkdir(exist_ok=True)
    for pkg in packages:
        kwargs = {}
        if pkg.files:
            src = root.parent / f".files-{pkg.name}-{pkg.version}-{pkg.build}"
            for rel, text in pkg.files:
                (src / rel).parent.mkdir(parents=True, exist_ok=True)
                (src / rel).write_text(text)
            kwargs["files_dir"] = str(src)
        rb.assemble_package(
            name=pkg.name, version=pkg.version, target_platform=pkg.subdir, build_string=pkg.build,
            output_dir=str(root / pkg.subdir), files=[] if not pkg.files else None,
            depends=list(pkg.depends), constrains=list(pkg.constrains), build_number=pkg.build_number,
            noarch=pkg.noarch, timestamp=FIXED_TIME, license="MIT", summary=f"test package {pkg.name}", **kwargs,
        )
    asyncio.run(index_fs(str(root)))
    return root


def py(ver: str = "3.12") -> str:
    """The run pin of a package built for python ``ver``: ``python >=3.12,<3.13.0a0``."""
    major, minor = ver.split(".")[:2]
    return f"python >={ver},<{major}.{int(minor) + 1}.0a0"


TARGETS = {"gfx90a": "9.0.10", "gfx942": "9.4.2"}


def forge_packages() -> list[Pkg]:
    """A conda-forge-like channel: python, numpy, pytorch CPU/CUDA at a higher version, pure-python libs."""
    return [
        Pkg("python", "3.12.7", "h0_0_cpython"),
        Pkg("python", "3.11.10", "h0_0_cpython"),
        Pkg("numpy", "2.1.3", "py312h0_0", depends=(py(),)),
        Pkg("numpy", "2.2.0", "py312h0_0", depends=(py(),)),
        Pkg("pytorch", "2.99.0", "cpu_generic_py312h0_0", depends=(py(), "numpy")),
        Pkg("pytorch", "2.99.0", "cuda128_generic_py312h0_0", depends=(py(), "numpy", "__cuda")),
        Pkg("transformers", "4.57.0", "pyhd8ed1ab_0", subdir="noarch", noarch="python", depends=("python >=3.10",)),
        Pkg("peft", "0.18.0", "pyhd8ed1ab_0", subdir="noarch", noarch="python", depends=("python >=3.10",)),
        Pkg("requests", "2.32.3", "pyhd8ed1ab_0", subdir="noarch", noarch="python", depends=("python >=3.8",)),
        Pkg("requests", "2.32.4", "pyhd8ed1ab_0", subdir="noarch", noarch="python", depends=("python >=3.8",)),
    ]


def private_packages(torch_version: str = "2.12.1") -> list[Pkg]:
    """The private channel: ROCm pytorch/flash-attn for two targets, llamafactory and the metapackages."""
    pkgs = [Pkg("rocm-version", "7.2", "0", subdir="noarch", noarch="generic")]
    for gfx, isa in TARGETS.items():
        pkgs.append(Pkg("amdgpu-target", "1", gfx, subdir="noarch", noarch="generic"))
        identity = (f"amdgpu-target * {gfx}", "rocm-version 7.2.*")
        pkgs.append(Pkg("pytorch", torch_version, f"rocm72_{gfx}_py312_h1a2b3c4_0",
                        depends=(py(), "numpy", *identity), constrains=(f"__amdgpu_arch =={isa}",)))
        pkgs.append(Pkg("flash-attn", "2.8.3", f"rocm72_{gfx}_py312_h5d6e7f8_0",
                        depends=(py(), f"pytorch =={torch_version} rocm72_{gfx}_*", *identity),
                        constrains=(f"__amdgpu_arch =={isa}",)))
    pkgs.append(Pkg("llamafactory", "0.9.4", "pyh0_0", subdir="noarch", noarch="python",
                    depends=("python >=3.11", "pytorch >=2.4", "transformers >=4.55", "peft >=0.18")))
    return pkgs


def solve_on_gpu_host(channels: list[Path], specs: list[str], isa: str) -> list[RepoDataRecord]:
    """Solve ``specs`` against ``channels`` as a linux-64 host with an AMD GPU of ISA ``isa`` (``9.4.2``)."""
    vps = [("__unix", "0"), ("__linux", "5.10"), ("__glibc", "2.28"), ("__amdgpu", "0"), ("__amdgpu_arch", isa)]
    return asyncio.run(
        solve(
            [Channel(c.as_uri()) for c in channels],
            specs,
            platforms=["linux-64", "noarch"],
            virtual_packages=[GenericVirtualPackage(PackageName(n), Version(v), BuildString("0")) for n, v in vps],
        )
    )


def listed_in_repodata(channel: Path) -> dict[str, str]:
    """``{subdir/file: sha256}`` of what a channel's ``*/repodata.json`` files list."""
    out = {}
    for repodata in sorted(channel.glob("*/repodata.json")):
        data = json.loads(repodata.read_text())
        for key in ("packages", "packages.conda"):
            for name, record in (data.get(key) or {}).items():
                out[f"{repodata.parent.name}/{name}"] = record["sha256"]
    return out
