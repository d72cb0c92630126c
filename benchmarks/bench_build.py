"""Benchmark: re-running ``rocmlock build`` on the shipped matrix when every variant already exists.

PyTorch, flash-attn and the other compiled stages cannot be built on this machine, so the "everything is
built" state is made by assembling a placeholder package (empty, with the planned name, version, build
string and subdir) for every variant of ``rocmlock plan`` on the root pixi.toml. Two cases:

  output   the placeholders sit in the build output directory (a second run after a complete build)
  channel  they sit in a separate, indexed channel passed as ``--channel`` (already published)

Each figure is the wall time of ``python -m rocmlock build --json`` in a fresh process (interpreter start,
recipe rendering and the skip decisions included); the run must report every variant skipped.

    python benchmarks/bench_build.py --runs 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import rattler_build as rb
from rattler.index import index_fs
from rocmlock.build.plan import make_plan
from rocmlock.workspace.manifest import load_workspace

REPO = Path(__file__).resolve().parent.parent
TARGET_S = 5.0


def placeholders(root: Path) -> int:
    """One empty package per planned variant under ``root/<subdir>/``; returns how many."""
    plan = make_plan(load_workspace(REPO / "pixi.toml"))
    for v in plan.variants:
        (root / v.subdir).mkdir(parents=True, exist_ok=True)
        rb.assemble_package(name=v.stage, version=v.version, target_platform=v.subdir, build_string=v.build_string,
                            output_dir=str(root / v.subdir), files=[], noarch="generic" if v.subdir == "noarch"
                            else None, timestamp=datetime(2026, 1, 1, tzinfo=UTC),
                            license="MIT", summary=f"benchmark placeholder for {v.id}")
    (root / "noarch").mkdir(exist_ok=True)
    asyncio.run(index_fs(root))
    return len(plan.variants)


def timed_build(*args: str) -> tuple[float, dict]:
    cmd = [sys.executable, "-m", "rocmlock", "build", "--manifest-path", str(REPO / "pixi.toml"), "--json", *args]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"rocmlock build failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return seconds, json.loads(proc.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rocmlock-bench-build-") as tmp:
        output, channel, empty = Path(tmp) / "output", Path(tmp) / "channel", Path(tmp) / "empty-output"
        count = placeholders(output)
        placeholders(channel)
        cases = {"output": ["--output", str(output)],
                 "channel": ["--output", str(empty), "--channel", str(channel)]}
        print(f"{count} variants in the plan of {REPO / 'pixi.toml'}")
        for name, extra in cases.items():
            times = []
            for _ in range(args.runs):
                seconds, report = timed_build(*extra)
                counts = report["counts"]
                assert counts["skipped"] == count and counts["built"] == 0, counts
                times.append(seconds)
            median = statistics.median(times)
            verdict = "met" if max(times) < TARGET_S else "MISSED"
            print(f"{name:8} median {median:.2f}s  max {max(times):.2f}s  ({args.runs} runs, all {count} skipped, "
                  f"target < {TARGET_S:.0f}s {verdict})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
