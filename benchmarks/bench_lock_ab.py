"""A/B of `rocmlock lock` between two source trees, interleaved so both see the same machine load.

Uses bench_lock.py's channels and workspace (run bench_lock.py once first to generate them). Each round runs,
for tree A then tree B (the order alternates), a warm lock (repodata cache kept, no pixi.lock, no stamp) and a
no-op re-lock, each `python -m rocmlock lock` in a fresh process with PYTHONPATH set to that tree's `tools/`.
Prints the median of each. Run: ``python benchmarks/bench_lock_ab.py --base /tmp/old/tools --runs 8``
(``git archive <commit> tools | tar -x -C /tmp/old`` gives an old tree).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_lock as bench

HERE_TOOLS = Path(__file__).resolve().parent.parent / "tools"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--base", type=Path, required=True, help="the other tree's tools/ directory")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/rocmlock-bench"))
    parser.add_argument("--runs", type=int, default=8)
    args = parser.parse_args()
    server, url = bench.serve(args.workdir)
    ws, cache = args.workdir / "ws", args.workdir / "cache"
    bench.write_manifest(ws, url)
    trees = {"base": args.base.resolve(), "current": HERE_TOOLS}

    def run(tree: str) -> float:
        env = {**bench.child_env(), "ROCMLOCK_CACHE_DIR": str(cache), "PYTHONPATH": str(trees[tree])}
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "rocmlock", "lock", "--manifest-path", str(ws / "pixi.toml")],
                       check=True, capture_output=True, env=env)
        return time.perf_counter() - start

    warm: dict[str, list[float]] = {k: [] for k in trees}
    noop: dict[str, list[float]] = {k: [] for k in trees}
    bench.reset(ws, cache)
    run("current")  # fills the repodata cache
    for i in range(args.runs):
        for tree in ("base", "current") if i % 2 else ("current", "base"):
            bench.reset(ws, None)
            shutil.rmtree(cache / "stamps", ignore_errors=True)
            warm[tree].append(run(tree))
            before = bench.outputs(ws)
            noop[tree].append(run(tree))
            assert bench.outputs(ws) == before, "a no-op re-lock changed a file"
    for tree in trees:
        print(f"{tree}: warm lock {statistics.median(warm[tree]):.2f} s, "
              f"no-op re-lock {statistics.median(noop[tree]):.3f} s (medians of {args.runs})")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
