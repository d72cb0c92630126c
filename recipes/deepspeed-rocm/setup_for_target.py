"""Run DeepSpeed's setup.py with the GPU target and wavefront size of the variant, not of the build host.

DeepSpeed's op builders ask ``rocminfo`` for the GPU (and override PYTORCH_ROCM_ARCH with it) and for
the wavefront size (falling back to 32 when no GPU is visible, which is wrong for CDNA's 64). Both are
cached in class attributes of ``OpBuilder``; setting them first makes the build depend only on the
variant. setup.py skips a requested op that it finds incompatible with only a warning; this wrapper
fails instead, so a package never claims ops it does not have.

The CPU ops (cpu_adam, cpu_adagrad, cpu_lion, async_io) would compile with ``OpBuilder.cpu_arch()`` =
``-march=native`` and ``simd_width()`` = ``-D__AVX512__`` where the build host has AVX-512 (op_builder/builder.py,
DeepSpeed 0.18.4): a package that dies with SIGILL on a node with an older CPU than the build host. Both are
pinned to the variant's CPU baseline instead (``deepspeed_cpu_baseline`` in recipes/variants.yaml): x86-64-v3
(AVX2, DeepSpeed's ``__AVX256__`` path) by default, x86-64-v4 (AVX-512) where every node has it.

Environment: ROCMLOCK_GPU_TARGET, ROCMLOCK_WAVEFRONT_SIZE, ROCMLOCK_DS_BUILD_OPS (DS_BUILD_* names),
ROCMLOCK_CPU_BASELINE (x86-64-v2, x86-64-v3 or x86-64-v4).
Arguments: passed to setup.py (``bdist_wheel --dist-dir DIR``).
"""

from __future__ import annotations

import importlib
import os
import runpy
import sys
from typing import Any


# CPU baseline -> (DeepSpeed's cpu_arch() flag, its simd_width() define). __SCALAR__ below AVX2, as upstream.
CPU_BASELINES = {
    "x86-64-v2": ("-march=x86-64-v2", "-D__SCALAR__"),
    "x86-64-v3": ("-march=x86-64-v3", "-D__AVX256__"),
    "x86-64-v4": ("-march=x86-64-v4", "-D__AVX512__"),
}


def pin_builders(gfx: str, wavefront: str, cpu_baseline: str = "x86-64-v3") -> list[str]:
    """Set the cached GPU arch and wavefront size, and the CPU flags, on every importable copy of ``OpBuilder``."""
    march, simd = CPU_BASELINES[cpu_baseline]
    pinned = []
    # setup.py imports the top-level op_builder; the deepspeed package carries its own copy.
    for name in ("op_builder.builder", "deepspeed.ops.op_builder.builder"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        module.OpBuilder._rocm_gpu_arch = gfx
        module.OpBuilder._rocm_wavefront_size = wavefront
        module.OpBuilder.cpu_arch = lambda self, flag=march: flag
        module.OpBuilder.simd_width = lambda self, flag=simd: flag
        pinned.append(name)
    return pinned


def missing_ops(setup_globals: dict[str, Any], wanted: list[str]) -> list[str]:
    """The requested ops (by DS_BUILD_* name) that setup.py did not compile."""
    installed = setup_globals.get("install_ops", {})
    return sorted(op for op, builder in setup_globals.get("ALL_OPS", {}).items()
                  if getattr(builder, "BUILD_VAR", None) in wanted and not installed.get(op))


def main(argv: list[str]) -> int:
    sys.path.insert(0, os.getcwd())
    baseline = os.environ.get("ROCMLOCK_CPU_BASELINE", "x86-64-v3")
    if baseline not in CPU_BASELINES:
        print(f"rocmlock build: ROCMLOCK_CPU_BASELINE={baseline} (deepspeed_cpu_baseline in recipes/variants.yaml) "
              f"is not one of {', '.join(CPU_BASELINES)}", file=sys.stderr)
        return 2
    pinned = pin_builders(os.environ["ROCMLOCK_GPU_TARGET"], os.environ["ROCMLOCK_WAVEFRONT_SIZE"], baseline)
    if not pinned:
        print("rocmlock build: no op_builder module to pin (run from the DeepSpeed source tree)", file=sys.stderr)
        return 1
    sys.argv = ["setup.py", *argv]
    setup_globals = runpy.run_path("setup.py", run_name="__main__")
    missing = missing_ops(setup_globals, os.environ["ROCMLOCK_DS_BUILD_OPS"].split())
    if missing:
        print(f"rocmlock build: requested ops were not built: {', '.join(missing)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
