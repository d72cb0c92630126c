"""Benchmark ``rocmlock pack`` against the floor of hashing and copying the same bytes (a benchmark, not a test).

Generates (once, under --workdir) a channel of real packages totalling >= 100 MB: ``--big`` packages each
holding ``--mb`` MB of seeded random bytes (incompressible, so the .conda files are that large) plus a few
small ones, assembled with py-rattler-build and indexed with rattler; a workspace whose default environment
depends on all of them, locked with ``rocmlock lock``. The channel is served over HTTP on 127.0.0.1 with basic
auth (``rocmlock.channel.serve``, a separate process; credentials from a RATTLER_AUTH_FILE) while ``python -m rocmlock
pack`` runs in a fresh process (interpreter start, lock read, tar headers, every package downloaded into its
place in the bundle with its sha256 checked).

The floor: ``sha256sum`` of every package file then ``cp`` of them into a directory, on the same files. Each
figure is the median of --runs; MB/s is the packages' total size over the wall time.

    python benchmarks/bench_pack.py --runs 5
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import rattler_build as rb
from benchenv import child_env
from rattler.index import index_fs
from rocmlock.channel.serve import serving

TARGET_RATIO = 1.5
USER, PASSWORD = "bench", "bench-password"


def make_channel(root: Path, big: int, mb: int) -> list[str]:
    """``big`` packages of ``mb`` MB of random bytes and 4 small ones; returns their names."""
    import asyncio

    rng = random.Random(20261201)
    names = []
    for i in range(big + 4):
        name = f"blob{i:02d}" if i < big else f"small{i:02d}"
        files = root.parent / "files" / name
        (files / "share" / name).mkdir(parents=True, exist_ok=True)
        size = mb * 1_000_000 if i < big else 10_000
        (files / "share" / name / "data.bin").write_bytes(rng.randbytes(size))
        rb.assemble_package(name=name, version="1.0", target_platform="linux-64", build_string="0",
                            output_dir=str(root / "linux-64"), files_dir=str(files), timestamp=datetime(
                                2026, 1, 1, tzinfo=UTC), license="MIT", summary=f"benchmark payload {name}")
        names.append(name)
    (root / "noarch").mkdir(exist_ok=True)
    asyncio.run(index_fs(root))
    shutil.rmtree(root.parent / "files")
    return names


def workspace(root: Path, url: str, names: list[str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    deps = "\n".join(f'{n} = "*"' for n in names)
    (root / "pixi.toml").write_text(f'[workspace]\nname = "bench"\nchannels = ["{url}"]\nplatforms = ["linux-64"]\n'
                                    f"\n[dependencies]\n{deps}\n")
    return root


def timed(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float, float]:
    """(wall seconds, peak RSS in MiB, CPU seconds: user + system) of ``cmd`` in a fresh process."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"{cmd[2:4]} failed with exit code {proc.returncode}")
    return elapsed, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime


def floor(files: list[Path], dest: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of ``sha256sum`` then ``cp`` of ``files``."""
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(["sha256sum", *map(str, files)], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["cp", *map(str, files), str(dest)], check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/rocmlock-bench-pack"))
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--big", type=int, default=12, help="number of large packages")
    parser.add_argument("--mb", type=int, default=10, help="MB of payload per large package")
    args = parser.parse_args()
    work = args.workdir
    channel = work / "channel"
    if not (channel / "linux-64" / "repodata.json").exists():
        shutil.rmtree(work, ignore_errors=True)
        make_channel(channel, args.big, args.mb)
    files = sorted((channel / "linux-64").glob("*.conda"))
    total = sum(f.stat().st_size for f in files)
    names = sorted(f.name.rsplit("-", 2)[0] for f in files)
    auth = work / "auth.json"
    auth.write_text(json.dumps({"127.0.0.1": {"BasicHTTP": {"username": USER, "password": PASSWORD}}}))
    env = child_env(RATTLER_AUTH_FILE=str(auth))
    floors, packs, rss, floor_cpu, pack_cpu = [], [], [], [], []
    load = os.getloadavg()[0]
    with serving(channel, "bench", USER, PASSWORD) as url:
        ws = workspace(work / "ws", url, names)
        (ws / "pixi.lock").unlink(missing_ok=True)
        subprocess.run([sys.executable, "-m", "rocmlock", "lock", "--manifest-path", str(ws / "pixi.toml")],
                       check=True, env=env, stderr=subprocess.DEVNULL)
        out = work / "out" / "bench.tar"
        out.parent.mkdir(exist_ok=True)
        for _ in range(args.runs):
            wall, cpu = floor(files, work / "floor")
            floors.append(wall)
            floor_cpu.append(cpu)
            wall, peak, cpu = timed([sys.executable, "-m", "rocmlock", "pack", "--manifest-path", str(ws / "pixi.toml"),
                                "-e", "default", "-o", str(out)], env)
            packs.append(wall)
            rss.append(peak)
            pack_cpu.append(cpu)
    mb = total / 1e6
    f, p = statistics.median(floors), statistics.median(packs)
    print(f"{len(files)} packages, {mb:.1f} MB; median of {args.runs} runs")
    print(f"floor (sha256sum + cp):           {f:6.2f} s  {mb / f:7.1f} MB/s")
    print(f"rocmlock pack (HTTP, 127.0.0.1):  {p:6.2f} s  {mb / p:7.1f} MB/s")
    print(f"ratio pack / floor: {p / f:.2f} (target <= {TARGET_RATIO}); bundle {out.stat().st_size / 1e6:.1f} MB")
    print(f"peak RSS of rocmlock pack: {max(rss):.0f} MiB")
    fc, pc = statistics.median(floor_cpu), statistics.median(pack_cpu)
    print(f"CPU (user + system): floor {fc:.2f} s   pack {pc:.2f} s (the server's not counted)   ratio {pc / fc:.2f}; "
          f"load average {load:.1f} -> {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
