"""The device-code audit on libraries ROCm 7.2.4's hipcc compiles in the test chroot (tests/rocm72chroot.py):
one target (a plain bundle), two targets with --offload-compress (CCOB v3 zstd, and v2 with
COMPRESSED_BUNDLE_FORMAT_VERSION=2), a generic target (--offload-arch=gfx9-4-generic), target features
(gfx942:xnack+), a standalone code object (--cuda-device-only), each checked against `llvm-objdump --offloading`,
and code object files of `--genco` (plain and compressed bundles) against `clang-offload-bundler --list`;
then a gfx90a library in a gfx942 prefix is named by `rocmlock audit`, and a bundle carrying it is refused on a
fake gfx942 node. Cost: eight small hipcc runs, about 1 min on 2 shared cores.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
import rocm72chroot
from rocmlock.cli.main import main
from rocmlock.gpu.devicecode import scan_file
from rocmlock.gpu.offload import parse_target_id

KERNEL = """#include <hip/hip_runtime.h>
__global__ void axpy(float a, const float* x, float* y) { y[threadIdx.x] += a * x[threadIdx.x]; }
extern "C" void run_axpy(float a, const float* x, float* y) { axpy<<<1, 64>>>(a, x, y); }
"""
BUILDS = {
    "one.so": ("--offload-arch=gfx942", ""),
    "two.so": ("--offload-arch=gfx90a --offload-arch=gfx1100 --offload-compress", ""),
    "two-v2.so": ("--offload-arch=gfx90a --offload-arch=gfx1100 --offload-compress", "2"),
    "generic.so": ("--offload-arch=gfx9-4-generic", ""),
    "features.so": ("--offload-arch=gfx942:xnack+ --offload-arch=gfx90a:xnack-", ""),
    "gfx90a.so": ("--offload-arch=gfx90a", ""),
}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rocm72chroot.require_chroot()
    work = tmp_path_factory.mktemp("hip")
    (work / "k.hip").write_text(KERNEL)
    script = ["set -e", "cd /mnt/work"]
    for out, (flags, version) in BUILDS.items():
        env = f"COMPRESSED_BUNDLE_FORMAT_VERSION={version} " if version else ""
        script.append(f"{env}hipcc -shared -fPIC {flags} -o {out} k.hip")
    script.append("hipcc --cuda-device-only --no-gpu-bundle-output --offload-arch=gfx942 -o kernel.hsaco k.hip")
    # Code object files for hipModuleLoad (issue 33): --genco writes an offload bundle file, compressed on request.
    script.append("hipcc --genco --offload-arch=gfx90a --offload-arch=gfx942 -o genco.co k.hip")
    script.append("hipcc --genco --offload-compress --offload-arch=gfx90a --offload-arch=gfx1100 -o genco-z.co k.hip")
    proc = rocm72chroot.run(["sh", "-c", "\n".join(script)], env={"HIP_PLATFORM": "amd"}, work=work, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return work


def _objdump(work: Path, name: str) -> set[str]:
    """The target IDs llvm-objdump finds in a library's offload bundles."""
    proc = rocm72chroot.run(["llvm-objdump-22", "--offloading", f"/mnt/work/{name}"], work=work)
    assert proc.returncode == 0, proc.stderr
    return {m.split("--", 1)[1] for m in re.findall(r"hipv4-amdgcn-amd-amdhsa--[\w:+-]+", proc.stdout)}


@pytest.mark.parametrize(("name", "targets", "compressed"), [
    ("one.so", ["gfx942"], b""),
    ("two.so", ["gfx90a", "gfx1100"], b"CCOB\x03\x00"),
    ("two-v2.so", ["gfx90a", "gfx1100"], b"CCOB\x02\x00"),
    ("generic.so", ["gfx9-4-generic"], b""),
    ("features.so", ["gfx90a:xnack-", "gfx942:xnack+"], b""),
])
def test_hipcc_libraries_read_as_llvm_objdump_lists_them(built: Path, name: str, targets: list[str],
                                                         compressed: bytes) -> None:
    code = scan_file(built / name, name)
    assert code is not None and code.kind == "fatbin" and not code.error, code
    assert sorted(str(t) for t in code.targets) == sorted(_objdump(built, name)) == sorted(targets)
    data = (built / name).read_bytes()
    assert compressed in data if compressed else b"CCOB" not in data


def _bundler_list(work: Path, name: str) -> set[str]:
    """The AMDGPU target IDs clang-offload-bundler lists in a code object file (llvm-objdump reads only ELF)."""
    proc = rocm72chroot.run(["clang-offload-bundler-22", "--list", "--type=o", f"--input=/mnt/work/{name}"],
                            work=work)
    assert proc.returncode == 0, proc.stderr
    return {m.split("--", 1)[1] for m in re.findall(r"hipv4-amdgcn-amd-amdhsa--[\w:+-]+", proc.stdout)}


@pytest.mark.parametrize(("name", "targets", "magic"), [
    ("genco.co", ["gfx90a", "gfx942"], b"__CLANG_OFFLOAD_BUNDLE__"),
    ("genco-z.co", ["gfx90a", "gfx1100"], b"CCOB\x03\x00"),
])
def test_hipcc_genco_code_object_files_are_device_code(built: Path, tmp_path: Path, name: str, targets: list[str],
                                                       magic: bytes, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 33: a `hipcc --genco` file (what hipModuleLoad loads) was "no device code found", exit 0."""
    assert (built / name).read_bytes().startswith(magic)
    code = scan_file(built / name, name)
    assert code is not None and code.kind == "offload-bundle" and not code.error, code
    assert sorted(str(t) for t in code.targets) == sorted(_bundler_list(built, name)) == sorted(targets)
    prefix = tmp_path / "env"
    (prefix / "conda-meta").mkdir(parents=True)
    (prefix / "conda-meta/amdgpu-target-1-gfx942.json").write_text("{}")
    (prefix / "share/kernels").mkdir(parents=True)
    (prefix / "share/kernels" / name).write_bytes((built / name).read_bytes())
    capsys.readouterr()
    assert main(["audit", "--prefix", str(prefix)]) == (0 if "gfx942" in targets else 1)
    out = capsys.readouterr().out
    verdict = "ok" if "gfx942" in targets else "FAIL"
    assert re.search(rf"{verdict} +share/kernels/{name} +{', '.join(targets)} \(code object file of 1 bundle", out)


def test_generic_and_feature_code_runs_where_amdgpuusage_says(built: Path) -> None:
    generic = scan_file(built / "generic.so", "generic.so")
    assert generic is not None
    assert [g for g in ("gfx90a", "gfx942", "gfx950") if generic.runs_on(parse_target_id(g))] == ["gfx942", "gfx950"]
    features = scan_file(built / "features.so", "features.so")
    assert features is not None
    assert features.runs_on(parse_target_id("gfx942:xnack+")) and features.runs_on(parse_target_id("gfx942"))
    assert not features.runs_on(parse_target_id("gfx942:xnack-"))
    hsaco = scan_file(built / "kernel.hsaco", "kernel.hsaco")
    assert hsaco is not None and hsaco.kind == "code-object" and [str(t) for t in hsaco.targets] == ["gfx942"]


def test_a_gfx90a_library_in_a_gfx942_prefix_is_named(built: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    prefix = tmp_path / "env"
    (prefix / "conda-meta").mkdir(parents=True)
    (prefix / "conda-meta/amdgpu-target-1-gfx942.json").write_text("{}")
    for name in ("one.so", "generic.so", "gfx90a.so"):
        (prefix / "lib").mkdir(exist_ok=True)
        (prefix / "lib" / name).write_bytes((built / name).read_bytes())
    capsys.readouterr()
    assert main(["audit", "--prefix", str(prefix)]) == 1
    out = capsys.readouterr().out
    assert re.search(r"FAIL +lib/gfx90a.so +gfx90a \(1 bundle\(s\)\)", out)
    assert re.search(r"ok +lib/generic.so +gfx9-4-generic", out) and re.search(r"ok +lib/one.so +gfx942", out)
    assert out.rstrip().endswith("1 of 3 file(s) with device code cannot run on gfx942: lib/gfx90a.so")


def test_a_bundle_with_a_gfx90a_library_is_refused_on_a_gfx942_node(built: Path, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from channels import build_channel, forge_packages, private_packages
    from devicecode_helpers import make_package
    from lockhelpers import lock_fresh_workspace
    from rattler.index import index_fs
    from test_pack import fake_node

    private = [p for p in private_packages() if not (p.name == "pytorch" and "gfx942" in p.build)]
    channels = {"forge": build_channel(tmp_path / "forge", forge_packages()),
                "private": build_channel(tmp_path / "private", private)}
    make_package(channels["private"] / "linux-64", "pytorch", "rocm72_gfx942_py312_h1a2b3c4_0",
                 {"lib/libtorch_hip.so": built / "gfx90a.so"}, version="2.12.1",
                 depends=("python >=3.12,<3.13.0a0", "numpy", "amdgpu-target * gfx942", "rocm-version 7.2.*"),
                 constrains=("__amdgpu_arch ==9.4.2",))
    asyncio.run(index_fs(str(channels["private"])))
    ws = lock_fresh_workspace(tmp_path / "ws", channels)
    bundle = tmp_path / "mi300x.tar"
    assert main(["pack", "--manifest-path", str(ws / "pixi.toml"), "-e", "mi300x", "-o", str(bundle)]) == 0
    capsys.readouterr()
    prefix = tmp_path / "env"
    assert main(["unpack", str(bundle), "--prefix", str(prefix), "--host-root",
                 str(fake_node(tmp_path / "host", [90402]))]) == 1
    err = capsys.readouterr().err
    assert ("error: the bundle holds GPU code that cannot run on this node's gfx942: "
            "pytorch-2.12.1-rocm72_gfx942_py312_h1a2b3c4_0.conda/lib/libtorch_hip.so") in err
    assert not prefix.exists()
