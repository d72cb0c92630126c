"""Remake the real kpack fixtures in this folder with AMD's own tool (not run by the suite; see README.md).

    python tests/kpack_fixtures/make_fixtures.py ROCM_KPACK_CHECKOUT

Needs root and the ROCm 7.2.4 chroot (tests/rocm72chroot.py) and a checkout of ROCm/rocm-kpack (MIT; GitHub only,
not on PyPI). In the chroot: Debian's hipcc builds ``libaxpy.so`` for gfx942 and gfx1100 (plain offload bundles)
into a TheRock-style artifact (``artifact_manifest.txt`` naming the prefix ``axpy/stage``); rocm-kpack's
``split_artifacts`` tool (clang-offload-bundler-22 unbundles) writes the host-only library (``.rocm_kpack_ref``,
``HIPK`` wrapper, ``.hip_fatbin`` zero-paged) and one ``.kpack`` per target; its ``PackedKernelArchive`` API then
re-packs the gfx942 archive with its ``ZstdCompressor`` (``zstd-per-kernel``). The outputs are overlaid as
TheRock's generic and per-target artifacts are at install time, under ``real/``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import rocm72chroot

KERNEL = """#include <hip/hip_runtime.h>
__global__ void axpy(float a, const float* x, float* y) { y[threadIdx.x] += a * x[threadIdx.x]; }
extern "C" void run_axpy(float a, const float* x, float* y) { axpy<<<1, 64>>>(a, x, y); }
"""
SCRIPT = """set -e
cd /mnt/work
pip install --no-index --no-deps --target site wheels/*.whl >/dev/null
mkdir -p artifact/axpy/stage/lib
echo axpy/stage > artifact/artifact_manifest.txt
hipcc -shared -fPIC --offload-arch=gfx942 --offload-arch=gfx1100 -o artifact/axpy/stage/lib/libaxpy.so k.hip
sed 's/axpy/scale/g' k.hip > k2.hip
hipcc -shared -fPIC --offload-arch=gfx942 --offload-arch=gfx1100 -o artifact/axpy/stage/lib/libtwo.so k.hip k2.hip
cp artifact/axpy/stage/lib/libaxpy.so fat-libaxpy.so
mkdir -p bin && ln -sf /usr/bin/clang-offload-bundler-22 bin/clang-offload-bundler
PATH=/mnt/work/bin:$PATH PYTHONPATH=/mnt/work/rocm-kpack/python:/mnt/work/site python3 -m rocm_kpack.tools.split_artifacts \\
    --artifact-dir artifact --output-dir split --artifact-prefix axpy_lib
PYTHONPATH=/mnt/work/rocm-kpack/python:/mnt/work/site python3 - <<'PY'
from pathlib import Path
from rocm_kpack.compression import ZstdCompressor
from rocm_kpack.kpack import PackedKernelArchive
src = PackedKernelArchive.read(Path("split/axpy_lib_gfx942/axpy/stage/.kpack/axpy_lib_gfx942.kpack"))
out = PackedKernelArchive(src.group_name, src.gfx_arch_family, src.gfx_arches, compressor=ZstdCompressor())
for path, arches in src.toc.items():
    for arch, entry in arches.items():
        out.add_kernel(out.prepare_kernel(path, arch, src.get_kernel(path, arch), entry.get("metadata")))
out.finalize_archive()
out.write(Path("axpy_lib_gfx942-zstd.kpack"))
PY
"""


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    checkout = Path(argv[0])
    wheels = Path(tempfile.mkdtemp(prefix="kpack-wheels-"))
    # rocm-kpack needs msgpack (and zstandard, which the chroot's /venv has, rocmlock's dependency): the chroot's Python's wheel.
    subprocess.run([sys.executable, "-m", "pip", "download", "msgpack==1.2.4", "--only-binary=:all:",
                    "--python-version", "3.14", "--platform", "manylinux2014_x86_64", "-d", str(wheels)], check=True)
    with tempfile.TemporaryDirectory(prefix="kpack-fixtures-") as tmp:
        work = Path(tmp)
        (work / "k.hip").write_text(KERNEL)
        shutil.copytree(checkout / "python", work / "rocm-kpack/python")
        shutil.copytree(wheels, work / "wheels")
        proc = rocm72chroot.run(["sh", "-c", SCRIPT], env={"HIP_PLATFORM": "amd"}, work=work, timeout=900)
        print(proc.stdout[-3000:], proc.stderr[-3000:])
        if proc.returncode:
            return 1
        real = HERE / "real"
        shutil.rmtree(real, ignore_errors=True)
        (real / "lib").mkdir(parents=True)
        (real / ".kpack").mkdir()
        for lib in ("libaxpy.so", "libtwo.so"):
            shutil.copy(work / f"split/axpy_lib_generic/axpy/stage/lib/{lib}", real / "lib" / lib)
        for gfx in ("gfx942", "gfx1100"):
            shutil.copy(work / f"split/axpy_lib_{gfx}/axpy/stage/.kpack/axpy_lib_{gfx}.kpack", real / ".kpack")
        shutil.copy(work / "axpy_lib_gfx942-zstd.kpack", real / "axpy_lib_gfx942-zstd.kpack")
        shutil.copy(work / "fat-libaxpy.so", real / "fat-libaxpy.so")
    shutil.rmtree(wheels)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
