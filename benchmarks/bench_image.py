"""Benchmark ``rocmlock image`` against ``rocmlock install`` of the same environment plus ``tar`` of its bytes.

Generates (once, under --workdir) a file:// channel of ``--big`` packages of ``--mb`` MB each, half seeded random
bytes (incompressible, like GPU code objects) and half repetitive text (like headers and Python sources), plus a
few small ones, assembled with py-rattler-build; a workspace whose environment depends on all of them, locked with
``rocmlock lock``. Then, alternating, each in a fresh process with rattler's package cache warm for both:

- the floor: ``python -m rocmlock install -e default --prefix P`` then ``tar -cf`` of P (GNU tar, uncompressed);
- ``python -m rocmlock image -e default --no-base -o DIR`` (install into a stage, gzip'd reproducible layer, OCI
  layout).

Medians of --runs, wall and CPU (user + system, which the machine's load moves much less); the target is image
within 2x of the floor (issue 37).

    python benchmarks/bench_image.py --runs 5
"""

from __future__ import annotations

import argparse
import asyncio
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

TARGET_RATIO = 2.0


def make_channel(root: Path, big: int, mb: int) -> list[str]:
    rng = random.Random(20261203)
    names = []
    for i in range(big + 4):
        name = f"blob{i:02d}" if i < big else f"small{i:02d}"
        files = root.parent / "files" / name
        (files / "lib" / name).mkdir(parents=True, exist_ok=True)
        size = mb * 1_000_000 if i < big else 10_000
        (files / "lib" / name / "code.bin").write_bytes(rng.randbytes(size // 2))
        line = f"// {name}: a header line that repeats, as sources and headers do\n".encode()
        (files / "lib" / name / "text.h").write_bytes(line * (size // 2 // len(line)))
        rb.assemble_package(name=name, version="1.0", target_platform="linux-64", build_string="0",
                            output_dir=str(root / "linux-64"), files_dir=str(files),
                            timestamp=datetime(2026, 1, 1, tzinfo=UTC), license="MIT", summary=f"payload {name}")
        names.append(name)
    (root / "noarch").mkdir(exist_ok=True)
    asyncio.run(index_fs(root))
    shutil.rmtree(root.parent / "files")
    return names


def prepare(workdir: Path, big: int, mb: int) -> Path:
    ws = workdir / f"ws-{big}x{mb}"
    if (ws / "pixi.lock").is_file():
        return ws
    names = make_channel(workdir / f"channel-{big}x{mb}", big, mb)
    ws.mkdir(parents=True, exist_ok=True)
    deps = "\n".join(f'{n} = "*"' for n in names)
    url = (workdir / f"channel-{big}x{mb}").as_uri()
    (ws / "pixi.toml").write_text(f'[workspace]\nname = "bench"\nchannels = ["{url}"]\n'
                                  f'platforms = ["linux-64"]\n\n[dependencies]\n{deps}\n')
    subprocess.run([sys.executable, "-m", "rocmlock", "lock", "--manifest-path", str(ws / "pixi.toml")], check=True,
                   stdout=subprocess.DEVNULL, env=child_env())
    return ws


def timed(*cmds: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + system of the commands, every thread) of ``cmds`` one after the other.

    The CPU time does not move with the machine's load as the wall time does (2 shared cores here)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    for cmd in cmds:
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=child_env())
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/rocmlock-bench-image"))
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--big", type=int, default=8, help="packages of --mb MB each (8)")
    parser.add_argument("--mb", type=int, default=10)
    parser.add_argument("--compression-level", type=int, default=None,
                        help="passed to rocmlock image (default: its own, 5)")
    args = parser.parse_args()
    ws = prepare(args.workdir, args.big, args.mb)
    manifest = str(ws / "pixi.toml")
    out = args.workdir / "out"
    rocmlock = [sys.executable, "-m", "rocmlock"]
    floors, images, floor_cpu, image_cpu = [], [], [], []
    load = os.getloadavg()[0]
    for run in range(args.runs + 1):  # the first run of each warms rattler's package cache and is not counted
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        floor = timed([*rocmlock, "install", "--manifest-path", manifest, "-e", "default", "--prefix", str(out / "env")],
                      ["tar", "-cf", str(out / "env.tar"), "-C", str(out / "env"), "."])
        level = [] if args.compression_level is None else ["--compression-level", str(args.compression_level)]
        image = timed([*rocmlock, "image", "--manifest-path", manifest, "-e", "default", "--no-base",
                       "-o", str(out / "image"), *level])
        if run:
            floors.append(floor[0])
            images.append(image[0])
            floor_cpu.append(floor[1])
            image_cpu.append(image[1])
    size = sum(p.stat().st_size for p in (out / "env").rglob("*") if p.is_file()) / 1e6
    layer = max(p.stat().st_size for p in (out / "image/blobs/sha256").iterdir()) / 1e6
    floor, image = statistics.median(floors), statistics.median(images)
    print(f"environment: {args.big + 4} packages, {size:.0f} MB installed; image layer {layer:.0f} MB (gzip)")
    print(f"install + tar: {floor:.2f} s   image: {image:.2f} s   ratio {image / floor:.2f} "
          f"(target <= {TARGET_RATIO}) [{args.runs} runs]")
    pairs = sorted(i / f for i, f in zip(images, floors, strict=True))
    print(f"paired: median of the {len(pairs)} runs' own ratios {statistics.median(pairs):.2f} "
          f"({pairs[0]:.2f}-{pairs[-1]:.2f}; each image run right after its floor run, so a load that moves both "
          "moves the ratio less)")
    fc, ic = statistics.median(floor_cpu), statistics.median(image_cpu)
    print(f"CPU (user + system): install + tar {fc:.2f} s   image {ic:.2f} s   ratio {ic / fc:.2f}; "
          f"load average {load:.1f} -> {os.getloadavg()[0]:.1f}")
    shutil.rmtree(out, ignore_errors=True)
    return 0 if image / floor <= TARGET_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
