"""Benchmark ``rocmlock report`` over 1,000 node reports (a benchmark, not a test). Goal: under 1 s.

The reports are synthetic in their numbers only: the probe (tools/verify_env.py) runs once here with ``--json``
(every default check: host, tools, ROCm, torch, compute, flash-attn, ...), and each node's report is that one with
its own ``hostname``, a ``bench.gemm`` result and a ``train.lora`` result of 30 steps added as the probe writes
them (seeded random TFLOP/s and step times, 2% of the nodes slow, 5% with the wrong GPU). Each figure is the
median of --runs of ``python -m rocmlock report DIR --json`` in a fresh process (interpreter start included).

    python benchmarks/bench_report.py --runs 5
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
GOAL_S = 1.0


def probe_template() -> dict[str, Any]:
    proc = subprocess.run([sys.executable, str(REPO / "tools" / "verify_env.py"), "--json"], capture_output=True,
                          text=True, check=False, timeout=600)
    template: dict[str, Any] = json.loads(proc.stdout)
    return template


def node_report(template: dict[str, Any], i: int, rng: random.Random) -> dict[str, Any]:
    report = copy.deepcopy(template)
    report["hostname"] = f"gpu{i:04d}"
    # A healthy node: what failed on this GPU-less machine passes there.
    report["ok"], report["failed"] = True, []
    for check in report["checks"]:
        check["status"] = "ok" if check["status"] == "fail" else check["status"]
    slow = rng.random() < 0.02
    tflops = rng.gauss(620.0, 15.0) * (0.4 if slow else 1.0)
    step = rng.gauss(0.045, 0.002) * (2.5 if slow else 1.0)
    losses = [round(2.5 * 0.93**k + rng.random() * 0.01, 4) for k in range(30)]
    report["checks"] += [
        {"id": "bench.gemm", "title": "bf16 GEMM throughput against the target's peak", "status": "ok",
         "evidence": f"{tflops:.4g} TFLOP/s (8192x8192 bf16)", "fix": "", "required": True, "seconds": 2.1,
         "data": {"tflops": round(tflops, 3), "peak": 1307.0, "ratio": round(tflops / 1307.0, 3)}},
        {"id": "train.lora", "title": "LoRA fine-tuning of a tiny local Llama: the loss falls", "status": "ok",
         "evidence": "peft: 30 steps", "fix": "", "required": True, "seconds": round(step * 30, 2),
         "data": {"backend": "peft", "losses": losses, "seconds": round(step * 30, 2)}}]
    if rng.random() < 0.05:
        report["failed"] = [*report["failed"], "torch.arch"]
        report["ok"] = False
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/rocmlock-bench-report"))
    args = parser.parse_args()
    reports = args.workdir / f"reports-{args.nodes}"
    if not reports.is_dir():
        template, rng = probe_template(), random.Random(27)
        reports.mkdir(parents=True)
        for i in range(args.nodes):
            (reports / f"gpu{i:04d}.json").write_text(json.dumps(node_report(template, i, rng), indent=2))
    size = sum(p.stat().st_size for p in reports.iterdir())
    times, out = [], ""
    for _ in range(args.runs):
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "rocmlock", "report", str(reports), "--json"],
                              capture_output=True, text=True, check=False)
        times.append(time.perf_counter() - start)
        out = proc.stdout
    counts = json.loads(out)["counts"]
    median = statistics.median(times)
    print(f"{args.nodes} reports ({size / 1e6:.1f} MB) in {reports}: {counts}")
    print(f"rocmlock report: median {median:.3f} s of {args.runs} runs (min {min(times):.3f}, max {max(times):.3f});"
          f" goal < {GOAL_S} s: {'met' if median < GOAL_S else 'NOT met'}")
    return 0 if median < GOAL_S else 1


if __name__ == "__main__":
    sys.exit(main())
