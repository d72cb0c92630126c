"""Compile times against Debian's ROCm 7.2.4 in the test chroot (tests/rocm72/make-chroot.sh must have made it).

    python benchmarks/bench_rocm72.py [--mirrors DIR]

Prints: one `hipcc --offload-arch=<gfx> -c` of doctor's probe kernel per target, `rocmlock doctor --build` for
gfx90a/gfx942/gfx950/gfx1100, and the bitsandbytes recipe's build.sh for gfx942 (configure + build + pip
install, from the pinned commit in $ROCMLOCK_MIRRORS/bitsandbytes.git). Figures: benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import rocm72chroot

TARGETS = ("gfx90a", "gfx942", "gfx950", "gfx1100")
KERNEL = ("#include <hip/hip_runtime.h>\n"
          "__global__ void rocmlock_probe(float* x) { x[threadIdx.x] += 1.0f; }\n")


def _timed(label: str, argv: list[str], **kw: object) -> None:
    start = time.perf_counter()
    proc = rocm72chroot.run(argv, **kw)  # type: ignore[arg-type]
    took = time.perf_counter() - start
    print(f"{label:<44} {took:7.1f} s  (exit {proc.returncode})", flush=True)
    if proc.returncode != 0:
        print(proc.stdout[-2000:] + proc.stderr[-2000:], file=sys.stderr)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirrors", type=Path, default=rocm72chroot.MIRRORS)
    args = parser.parse_args()
    reason = rocm72chroot.unavailable_reason()
    if reason:
        print(f"bench_rocm72: {reason}", file=sys.stderr)
        return 2
    print(f"{os.cpu_count()} cores; chroot {rocm72chroot.CHROOT}")
    with tempfile.TemporaryDirectory(prefix="bench-rocm72-") as tmp:
        work = Path(tmp)
        (work / "k.hip").write_text(KERNEL)
        for gfx in TARGETS:
            _timed(f"hipcc --offload-arch={gfx} -c (one kernel)",
                   ["hipcc", f"--offload-arch={gfx}", "-c", "/mnt/work/k.hip", "-o", "/mnt/work/k.o"],
                   env={"HIP_PLATFORM": "amd"}, work=work)
        argv = ["/venv/bin/rocmlock", "doctor", "--build"] + [a for g in TARGETS for a in ("--target", g)]
        _timed("rocmlock doctor --build (4 targets)", argv)
    mirror = args.mirrors / "bitsandbytes.git"
    if not mirror.is_dir():
        print(f"bench_rocm72: no {mirror}; skipping the bitsandbytes build", file=sys.stderr)
        return 0
    with tempfile.TemporaryDirectory(prefix="bench-rocm72-bnb-") as tmp:
        start = time.perf_counter()
        proc = rocm72chroot.build_bitsandbytes(Path(tmp), mirror, "gfx942")
        took = time.perf_counter() - start
        print(f"{'bitsandbytes build.sh, gfx942':<44} {took:7.1f} s  (exit {proc.returncode})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
