"""CLI start-up: a no-op `rocmlock lock` against `python -c "import rattler"`, interleaved, in fresh processes.

    python benchmarks/bench_cli_startup.py [--runs 15] [--workdir DIR]

Makes a locked workspace once with the quickstart (`examples/offline/quickstart.sh --workdir DIR`), then times,
alternating the two so machine load hits both alike: `python -m rocmlock lock` in that workspace (nothing to
do: the no-op fast path) and `python -c "import rattler"` (the floor any rattler-based tool pays). Prints each
one's median and the ratio of medians, plus the rocmlock modules the no-op run imported. Goal (issue 26): the
ratio within 2x. No server is needed: a no-op lock reads no channel.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchenv import child_env

REPO = Path(__file__).resolve().parents[1]


def _time(argv: list[str], cwd: Path, env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/rocmlock-bench-startup"))
    args = ap.parse_args()
    workspace = args.workdir / "workspace"
    if not (workspace / "pixi.lock").is_file():
        subprocess.run(["bash", str(REPO / "examples/offline/quickstart.sh"), "--workdir", str(args.workdir)],
                       check=True, stdout=subprocess.DEVNULL)
    env = child_env(PYTHONPATH=str(REPO / "tools"))
    lock = [sys.executable, "-m", "rocmlock", "lock"]
    floor = [sys.executable, "-c", "import rattler"]
    subprocess.run(lock, cwd=workspace, env=env, check=True)  # warm the stamp and the .pyc files
    ours, base = [], []
    for _ in range(args.runs):
        ours.append(_time(lock, workspace, env))
        base.append(_time(floor, workspace, env))
    script = ("import sys; from rocmlock.cli.main import main; main(['lock']); "
              "print(' '.join(sorted(m for m in sys.modules if m.startswith('rocmlock.'))))")
    loaded = subprocess.run([sys.executable, "-c", script],
                            cwd=workspace, env=env, check=True, capture_output=True, text=True).stdout.split()
    m_ours, m_base = statistics.median(ours), statistics.median(base)
    print(f"no-op `rocmlock lock`: median {m_ours * 1000:.0f} ms (min {min(ours) * 1000:.0f}, max "
          f"{max(ours) * 1000:.0f}) over {args.runs} runs")
    print(f"`python -c 'import rattler'`: median {m_base * 1000:.0f} ms (min {min(base) * 1000:.0f}, max "
          f"{max(base) * 1000:.0f})")
    print(f"ratio of medians: {m_ours / m_base:.2f}x (goal: within 2x)")
    print(f"rattler imported by the no-op run: {_imports_rattler(workspace, env)}")
    print(f"rocmlock modules loaded ({len(loaded)}): {' '.join(loaded)}")
    return 0


def _imports_rattler(workspace: Path, env: dict[str, str]) -> bool:
    script = "import sys; from rocmlock.cli.main import main; main(['lock']); print('rattler' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", script], cwd=workspace, env=env, check=True,
                         capture_output=True, text=True).stdout
    return out.strip().endswith("True")


if __name__ == "__main__":
    sys.exit(main())
