"""`rocmlock audit` speed on a prefix-sized tree, and its memory on a decompression bomb.

    python benchmarks/bench_audit.py [--files 20000] [--libs 200] [--runs 3] [--bundles 32000] [--member-gib 4]
    python benchmarks/bench_audit.py --kpack-only [--frames 8000] [--archives 2000] [--kpack-libs 8]

The tree: ``--files`` small non-ELF files (Python sources, as an environment is mostly made of) and ``--libs`` hard
links to PyPI's bitsandbytes 0.50.1 ``libbitsandbytes_rocm72.so`` (25 MB, two zstd bundles; links cost no disk),
audited against gfx942 in a fresh process each run (interpreter start included). The bomb: a 16 GiB
single-bundle .hip_fatbin (a hand-made zstd frame of RLE blocks, 512 KiB on disk) audited in a fresh process; its
peak resident memory is read from ``VmHWM`` (``getrusage`` would give the parent's peak: it survives exec). The
section of many bundles (issue 33): ``--bundles`` bundles of one small kernel each, 400 bytes apart (32,000 make a
12.8 MB section), plain and zstd-compressed, read by ``read_fatbin`` in this process. The large member (issue 33):
a ``.conda`` of a few hundred KiB holding a ``--member-gib`` GiB library (zeros, then a gfx942 bundle), audited in
a fresh process with ``TMPDIR`` an empty directory: the time, the peak resident memory and what was written there.
kpack (issue 41, cause K; ``--kpack-only`` runs these alone), each in a fresh process, time and peak RSS: a sparse
zstd-per-kernel archive whose one frame claims 400 MB (8 KiB on disk) scanned mapped; a ``.conda`` of one archive of
``--frames`` frames, a TOC entry each, audited as a package (the one-pass reader); a prefix of ``--archives`` small
archives and ``--kpack-libs`` kpacked libraries of 2,600 search paths each (about 1 MB), by ``rocmlock audit
--prefix`` and by the probe's ``kernels.prefix`` scan. Figures: benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "tests"), str(REPO / "tools")]

from devicecode_helpers import (
    bnb_library,
    ccob,
    code_objects,
    host_elf,
    padded_host_elf,
    plain_bundle,
    streamed_conda,
)

GFX942 = "hipv4-amdgcn-amd-amdhsa--gfx942"


def make_tree(root: Path, files: int, libs: int) -> Path:
    (root / "conda-meta").mkdir(parents=True)
    (root / "conda-meta/amdgpu-target-1-gfx942.json").write_text("{}")
    for i in range(files):
        path = root / f"lib/python3.12/site-packages/pkg{i // 500}/mod{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"x = {i}\n")
    lib = bnb_library()
    for i in range(libs):
        target = root / f"lib/hip{i // 50}/libkernels{i}.so"
        target.parent.mkdir(parents=True, exist_ok=True)
        os.link(lib, target)
    return root


def bomb(path: Path, size: int = 16 << 30) -> Path:
    block = 1 << 17
    header = plain_bundle([(GFX942, b"")])[:32] + struct.pack("<QQQ", 4096, size - 4096, len(GFX942)) + GFX942.encode()
    frame = struct.pack("<I", 0xFD2FB528) + bytes([0xC0, 10 << 3]) + struct.pack("<Q", size)
    frame += (len(header) << 3).to_bytes(3, "little") + header
    full, rest = divmod(size - len(header), block)
    frame += (((block << 3) | 2).to_bytes(3, "little") + b"\0") * full + ((rest << 3) | 3).to_bytes(3, "little") + b"\0"
    section = b"CCOB" + struct.pack("<HHQQ", 3, 1, 32 + len(frame), size) + b"\0" * 8 + frame
    (path / "lib").mkdir(parents=True)
    (path / "lib/libbomb.so").write_bytes(host_elf(section))
    return path


def run_audit(prefix: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(REPO / "tools")}
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "rocmlock", "audit", "--prefix", str(prefix), "--json"],
                          capture_output=True, text=True, env=env, check=False)
    took = time.perf_counter() - start
    assert proc.returncode == 0, proc.stderr
    return took


def bomb_rss(prefix: Path) -> tuple[float, float]:
    code = ("import sys, time; from pathlib import Path; from rocmlock.gpu.devicecode import scan_tree\n"
            "t = time.perf_counter(); found = scan_tree(Path(sys.argv[1])); t = time.perf_counter() - t\n"
            "assert [str(x) for x in found[0].targets] == ['gfx942'], found\n"
            "peak = next(line for line in open('/proc/self/status') if line.startswith('VmHWM:'))\n"
            "print(int(peak.split()[1]) / 1024, t)")
    out = subprocess.run([sys.executable, "-c", code, str(prefix)], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(REPO / "tools")}).stdout.split()
    return float(out[0]), float(out[1])


def many_bundles(count: int, compressed: bool) -> float:
    """Seconds to read a section of ``count`` one-kernel bundles, each padded to 400 bytes."""
    from rocmlock.gpu.offload import read_fatbin

    code_object = (b"\x7fELF\x02\x01\x01\x40\x04" + b"\0" * 9 + struct.pack("<H", 224) + b"\0" * 28
                   + struct.pack("<I", 0x34C) + b"\0" * 12)  # EM_AMDGPU, gfx942 (V4+: xnack/sramecc any)
    one = plain_bundle([(GFX942, code_object)])
    one = ccob(one) if compressed else one
    section = (one + b"\0" * (400 - len(one))) * count
    start = time.process_time()  # CPU time: the figure of the reader, not of the other processes of the machine
    assert len(read_fatbin(section)) == count
    return time.process_time() - start


LARGE_MEMBER = """
import sys, time
from rocmlock.cli.main import main
start = time.perf_counter()
code = main(["audit", sys.argv[1]])
took = time.perf_counter() - start
peak = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print("figures", code, took, int(peak.split()[1]) // 1024)
"""


def large_member(tmp: Path, gib: int) -> tuple[int, float, int, int]:
    """(package bytes, seconds, peak RSS MiB, bytes written to TMPDIR) for a .conda with a ``gib`` GiB library."""
    section = ccob(plain_bundle([(GFX942, code_objects()["gfx942"])]))
    pkg = streamed_conda(tmp / "big-1.0-rocm72_gfx942_h0_0.conda", "lib/libbig.so",
                         padded_host_elf((gib << 30) - 4096, section))
    scratch = tmp / "scratch"
    scratch.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO / "tools"), "TMPDIR": str(scratch)}
    out = subprocess.run([sys.executable, "-c", LARGE_MEMBER, str(pkg)], capture_output=True, text=True, env=env,
                         check=True).stdout.split("figures")[1].split()
    assert out[0] == "0", out
    written = sum(p.stat().st_size for p in scratch.rglob("*"))
    return pkg.stat().st_size, float(out[1]), int(out[2]), written


KPACK_CHILD = """
import sys, time
sys.path[:0] = sys.argv[1:3]
case, arg = sys.argv[3], sys.argv[4]
start = time.perf_counter()
if case == "sparse":
    from rocmlock.gpu.devicecode import scan_file
    from pathlib import Path
    assert scan_file(Path(arg), "s.kpack").kind == "kpack-archive"
elif case == "package":
    from rocmlock.cli.main import main
    assert main(["audit", arg, "--json"]) == 0
elif case == "tree":
    from rocmlock.cli.main import main
    assert main(["audit", "--prefix", arg, "--json"]) == 0
else:
    import importlib.util
    spec = importlib.util.spec_from_file_location("probe", sys.argv[2] + "/verify_env.py")
    probe = importlib.util.module_from_spec(spec)
    sys.modules["probe"] = probe
    spec.loader.exec_module(probe)
    files = dict(probe._scan_prefix(__import__("pathlib").Path(arg)))
    assert all(v == ["gfx942"] for k, v in files.items() if k.endswith(".so")), files
took = time.perf_counter() - start
peak = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print("figures", took, int(peak.split()[1]) // 1024)
"""


def kpack_run(case: str, arg: Path) -> tuple[float, int]:
    """(seconds, peak RSS MiB) of one kpack case in a fresh process (its output to /dev/null)."""
    out = subprocess.run([sys.executable, "-c", KPACK_CHILD, str(REPO / "tests"), str(REPO / "tools"), case, str(arg)],
                         capture_output=True, text=True, check=True).stdout.split("figures")[1].split()
    return float(out[0]), int(out[1])


def kpack_cases(tmp: Path, frames: int, archives: int, libs: int) -> None:
    from devicecode_helpers import kpacked_elf, small_kpack, sparse_zstd_kpack, zstd_kpack
    from test_kpack import real_code_object

    head = real_code_object("gfx942")[:64]
    sparse = sparse_zstd_kpack(tmp / "s.kpack", "gfx942", "k", 400 << 20)
    took, rss = kpack_run("sparse", sparse)
    print(f"sparse archive, one 400 MB zstd frame ({sparse.stat().st_blocks * 512 // 1024} KiB on disk): "
          f"{took:.2f} s, peak RSS {rss} MiB")
    package = streamed_conda(tmp / "k-1.0-rocm72_gfx942_h0_0.conda", ".kpack/x_gfx942.kpack",
                             (zstd_kpack("gfx942", "k", frames, head), 0, b""))
    took, rss = kpack_run("package", package)
    print(f"a {package.stat().st_size // 1024} KiB .conda, one archive of {frames} zstd frames: {took:.2f} s, "
          f"peak RSS {rss} MiB")
    root = tmp / "env"
    (root / "conda-meta").mkdir(parents=True)
    (root / "conda-meta/amdgpu-target-1-gfx942.json").write_text("{}")
    (root / "lib/.kpack").mkdir(parents=True)
    for i in range(archives):
        (root / f"lib/.kpack/x{i}_gfx942.kpack").write_bytes(small_kpack(["gfx942"], ["k#0"], head))
    paths = [".kpack/@GFXARCH@"] * 1300 + [f".kpack/x{j}_@GFXARCH@.kpack" for j in range(1300)]
    for i in range(libs):
        (root / f"lib/lib{i}.so").write_bytes(kpacked_elf("k", paths))
    size = sum(f.stat().st_size for f in root.rglob("*") if f.is_file())
    for case in ("tree", "probe"):
        took, rss = kpack_run(case, root)
        print(f"a {size / 1e6:.2f} MB prefix, {archives} archives, {libs} libraries of 2600 search paths, "
              f"{'rocmlock audit' if case == 'tree' else 'the probe'}: {took:.2f} s, peak RSS {rss} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=20000)
    parser.add_argument("--libs", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--bundles", type=int, default=32000)
    parser.add_argument("--member-gib", type=int, default=4)
    parser.add_argument("--kpack-only", action="store_true", help="only the kpack cases (issue 41)")
    parser.add_argument("--frames", type=int, default=8000)
    parser.add_argument("--archives", type=int, default=2000)
    parser.add_argument("--kpack-libs", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rocmlock-bench-audit-") as tmp:
        kpack_cases(Path(tmp), args.frames, args.archives, args.kpack_libs)
    if args.kpack_only:
        return
    for compressed in (False, True):
        took = min(many_bundles(args.bundles, compressed) for _ in range(args.runs))
        print(f"a {args.bundles * 400 / 1e6:.1f} MB section of {args.bundles} {'zstd' if compressed else 'plain'} "
              f"bundles: {took:.2f} s CPU (best of {args.runs})")
    with tempfile.TemporaryDirectory(prefix="rocmlock-bench-audit-") as tmp:
        size, took, rss, written = large_member(Path(tmp), args.member_gib)
        print(f"a {size // 1024} KiB .conda holding a {args.member_gib} GiB library: {took:.1f} s, peak RSS {rss} MiB, "
              f"{written} bytes written to TMPDIR")
    with tempfile.TemporaryDirectory(prefix="rocmlock-bench-audit-") as tmp:
        tree = make_tree(Path(tmp) / "env", args.files, args.libs)
        times = [run_audit(tree) for _ in range(args.runs)]
        print(f"audit of {args.files} files + {args.libs} HIP libraries (2 zstd bundles each): "
              f"median {statistics.median(times):.2f} s of {args.runs} runs")
        rss, took = bomb_rss(bomb(Path(tmp) / "bomb"))
        print(f"16 GiB zstd bomb: read in {took:.3f} s, peak RSS {rss:.0f} MiB (interpreter included)")


if __name__ == "__main__":
    main()
