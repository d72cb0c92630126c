"""Run DeepSpeed's setup.py with the GPU target and wavefront size of the variant, not of the build host.

DeepSpeed's op builders ask ``rocminfo`` for the GPU (and override PYTORCH_ROCM_ARCH with it) and for
the wavefront size (falling back to 32 when no GPU is visible, which is wrong for CDNA's 64). Both are
cached in class attributes of ``OpBuilder``; setting them first makes the build depend only on the
variant. ``--check-installed-ops FILE`` instead checks that every DS_BUILD_* op asked for was built.
"""

from __future__ import annotations

import ast
import importlib
import os
import runpy
import sys


def _pin_builders(gfx: str, wavefront: str) -> None:
    # setup.py imports the top-level op_builder; the deepspeed package carries its own copy.
    for name in ("op_builder.builder", "deepspeed.ops.op_builder.builder"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        module.OpBuilder._rocm_gpu_arch = gfx
        module.OpBuilder._rocm_wavefront_size = wavefront


def _check_installed_ops(path: str) -> int:
    wanted = os.environ["ROCMLOCK_DS_BUILD_OPS"].split()
    with open(path, encoding="utf-8") as fh:
        tree = ast.parse(fh.read())
    installed: dict[str, bool] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "installed_ops":
            installed = ast.literal_eval(node.value)
    sys.path.insert(0, os.getcwd())
    # Importable only inside the source tree, so imported here.
    from op_builder.all_ops import ALL_OPS

    missing = [op for op, builder in ALL_OPS.items() if builder.BUILD_VAR in wanted and not installed.get(op)]
    if missing:
        print(f"rocmlock build: requested ops were not built: {', '.join(sorted(missing))}", file=sys.stderr)
        return 1
    print(f"rocmlock build: prebuilt ops: {', '.join(sorted(op for op, on in installed.items() if on))}")
    return 0


def main() -> int:
    if sys.argv[1:2] == ["--check-installed-ops"]:
        return _check_installed_ops(sys.argv[2])
    sys.path.insert(0, os.getcwd())
    _pin_builders(os.environ["ROCMLOCK_GPU_TARGET"], os.environ["ROCMLOCK_WAVEFRONT_SIZE"])
    sys.argv = ["setup.py", *sys.argv[1:]]
    runpy.run_path("setup.py", run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
