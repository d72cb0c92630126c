"""Benchmark `rocmlock lock` on a conda-forge-scale channel (a benchmark, not a test).

Generates (once, under --workdir):
- ``forge/``: a synthetic conda-forge-like channel of >= 20,000 records (C libraries, compiled
  python packages with one build per python minor, noarch python packages, python itself and a
  CPU/CUDA ``pytorch`` at a higher version), with dependencies layered eight levels deep. Its
  repodata.json is generated directly: the records are a synthetic input, and assembling 20,000
  archives would take longer than the benchmark itself. It is served over HTTP so the repodata
  cache matters.
- ``private/``: real packages (pytorch, flash-attn for four GPU targets, llamafactory, amdgpu-target,
  rocm-version) assembled with py-rattler-build and indexed with ``rattler.index``.
- ``ws/pixi.toml``: four GPU environments (mi250, mi300x, mi355x, w7900) on per-GPU rich platforms.

Measures the median wall time of ``python -m rocmlock lock`` (a fresh process each run) for a cold
lock (empty cache, no lock), a warm lock (cache kept, no lock) and a no-op re-lock (lock kept),
plus the bytes the no-op re-lock changed. Run: ``python benchmarks/bench_lock.py --runs 5``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import resource
import shutil
import statistics
import subprocess
import sys
import threading
import time
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from benchenv import child_env
from channels import Pkg, build_channel, py

PY_MINORS = ("3.10", "3.11", "3.12", "3.13")
GPUS = {"mi250": ("gfx90a", "9.0.10"), "mi300x": ("gfx942", "9.4.2"),
        "mi355x": ("gfx950", "9.5.0"), "w7900": ("gfx1100", "11.0.0")}
TOP_PACKAGES = 25  # direct dependencies of llamafactory taken from the forge channel


def _record(name: str, version: str, build: str, subdir: str, depends: list[str], noarch: bool = False) -> tuple[str, dict]:
    fn = f"{name}-{version}-{build}.conda"
    digest = hashlib.sha256(f"{subdir}/{fn}".encode()).hexdigest()
    rec = {"name": name, "version": version, "build": build, "build_number": 0, "depends": depends,
           "constrains": [], "subdir": subdir, "sha256": digest, "md5": digest[:32], "size": 4096,
           "timestamp": 1767225600000, "license": "MIT"}
    if noarch:
        rec["noarch"] = "python"
    return fn, rec


def _deps(rng: random.Random, pool: list[str], count: int) -> list[str]:
    picks = rng.sample(pool, min(count, len(pool))) if pool else []
    return [f"{p} >=1.0,<2" for p in sorted(picks)]


def generate_forge(root: Path, seed: int = 7, pylibs: int = 600, pures: int = 300) -> int:
    """Write the synthetic forge channel; returns its number of records."""
    rng = random.Random(seed)
    linux: dict[str, dict] = {}
    noarch: dict[str, dict] = {}
    clibs: list[str] = []
    for i in range(420):  # layer 0-1: C libraries depending on earlier C libraries
        name = f"clib{i:03d}"
        for v in range(8):
            fn, rec = _record(name, f"1.{v}.0", "h0_0", "linux-64", _deps(rng, clibs[-60:], rng.randint(0, 3)))
            linux[fn] = rec
        clibs.append(name)
    for minor in PY_MINORS:
        for patch in range(5):
            fn, rec = _record("python", f"{minor}.{patch}", "h0_0_cpython", "linux-64", _deps(rng, clibs, 4))
            linux[fn] = rec
    compiled: list[str] = []
    for i in range(pylibs):  # layers 2-5: compiled python packages, one build per python minor
        name = f"pylib{i:03d}"
        layer_pool = compiled[max(0, len(compiled) - 150):]
        for v in range(6):
            for minor in PY_MINORS:
                tag = minor.replace(".", "")
                depends = [py(minor), *_deps(rng, layer_pool, rng.randint(1, 3)), *_deps(rng, clibs, 1)]
                fn, rec = _record(name, f"1.{v}.0", f"py{tag}h0_0", "linux-64", depends)
                linux[fn] = rec
        compiled.append(name)
    pure: list[str] = []
    for i in range(pures):  # layers 6-7: noarch python packages on top
        name = f"pure{i:03d}"
        pool = compiled[-200:] + pure[-80:]
        for v in range(8):
            fn, rec = _record(name, f"1.{v}.0", "pyhd8ed1ab_0", "noarch",
                              ["python >=3.9", *_deps(rng, pool, rng.randint(1, 4))], noarch=True)
            noarch[fn] = rec
        pure.append(name)
    for v in ("2.98.0", "2.99.0"):  # conda-forge's pytorch: higher versions, CPU and CUDA builds
        for kind in ("cpu", "cuda128"):
            extra = ["__cuda"] if kind == "cuda128" else []
            fn, rec = _record("pytorch", v, f"{kind}_generic_py312h0_0", "linux-64",
                              [py("3.12"), "numpy", *extra])
            linux[fn] = rec
    for v in ("2.1.3", "2.2.0"):
        for minor in PY_MINORS:
            fn, rec = _record("numpy", v, f"py{minor.replace('.', '')}h0_0", "linux-64", [py(minor)])
            linux[fn] = rec
    for subdir, pkgs in (("linux-64", linux), ("noarch", noarch)):
        (root / subdir).mkdir(parents=True, exist_ok=True)
        data = {"info": {"subdir": subdir}, "packages": {}, "packages.conda": pkgs, "repodata_version": 1}
        (root / subdir / "repodata.json").write_text(json.dumps(data, sort_keys=True))
    return len(linux) + len(noarch)


def private_packages() -> list[Pkg]:
    """The private channel: ROCm builds for four targets plus llamafactory on top of the forge stack."""
    pkgs = [Pkg("rocm-version", "7.2", "0", subdir="noarch", noarch="generic")]
    for gfx, isa in GPUS.values():
        identity = (f"amdgpu-target * {gfx}", "rocm-version 7.2.*")
        pkgs.append(Pkg("amdgpu-target", "1", gfx, subdir="noarch", noarch="generic"))
        pkgs.append(Pkg("pytorch", "2.12.1", f"rocm72_{gfx}_py312_h1a2b3c4_0",
                        depends=(py(), "numpy", "pylib010 >=1.0,<2", *identity),
                        constrains=(f"__amdgpu_arch =={isa}",)))
        pkgs.append(Pkg("flash-attn", "2.8.3", f"rocm72_{gfx}_py312_h5d6e7f8_0",
                        depends=(py(), f"pytorch ==2.12.1 rocm72_{gfx}_*", *identity),
                        constrains=(f"__amdgpu_arch =={isa}",)))
    top = [f"pure{i:03d} >=1.0,<2" for i in range(300 - TOP_PACKAGES, 300)]
    pkgs.append(Pkg("llamafactory", "0.9.4", "pyh0_0", subdir="noarch", noarch="python",
                    depends=("python >=3.11", "pytorch >=2.4", *top)))
    return pkgs


def write_manifest(ws: Path, forge_url: str) -> None:
    plats = ",\n".join(f'    {{ name = "linux-64-{gfx}", platform = "linux-64", __amdgpu = "0", __amdgpu_arch = "{isa}" }}'
                       for gfx, isa in GPUS.values())
    feats = "\n".join(f'[feature.{gfx}]\nplatforms = ["linux-64-{gfx}"]\n'
                      f'dependencies = {{ amdgpu-target = {{ version = "*", build = "{gfx}" }} }}\n'
                      for gfx, _ in GPUS.values())
    envs = "\n".join(f'{env} = ["{gfx}", "train"]' for env, (gfx, _) in GPUS.items())
    ws.mkdir(parents=True, exist_ok=True)
    (ws / "pixi.toml").write_text(
        f'[workspace]\nname = "bench"\nchannels = ["../private", "{forge_url}"]\nplatforms = [\n{plats}\n]\n\n'
        f'[dependencies]\npython = "3.12.*"\n\n[feature.train.dependencies]\npytorch = "2.12.*"\n'
        f'flash-attn = "2.8.*"\nllamafactory = "0.9.*"\n\n{feats}\n[environments]\n{envs}\n')


def serve(directory: Path) -> tuple[ThreadingHTTPServer, str]:
    handler = partial(_QuietHandler, directory=str(directory))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/forge"


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


def run_lock(ws: Path, cache: Path) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "rocmlock", "lock", "--manifest-path", str(ws / "pixi.toml")],
                   check=True, capture_output=True, env={**child_env(), "ROCMLOCK_CACHE_DIR": str(cache)})
    return time.perf_counter() - start


def outputs(ws: Path) -> dict[str, bytes]:
    return {str(p.relative_to(ws)): p.read_bytes() for p in sorted(ws.rglob("*")) if p.is_file()
            and p.name != "pixi.toml"}


def reset(ws: Path, cache: Path | None) -> None:
    (ws / "pixi.lock").unlink(missing_ok=True)
    shutil.rmtree(ws / "envs", ignore_errors=True)
    if cache is not None:
        shutil.rmtree(cache, ignore_errors=True)


FLOOR = """
import asyncio, json, sys
from rattler import (BuildString, Channel, ChannelPriority, Gateway, GenericVirtualPackage, MatchSpec,
                     PackageName, Subdir, Version, solve)

jobs, cache = json.load(open(sys.argv[1])), sys.argv[2]

async def main():
    gateway = Gateway(cache_dir=cache)
    return await asyncio.gather(*(solve(
        [Channel(c) for c in job["channels"]], [MatchSpec(s) for s in job["specs"]], gateway=gateway,
        platforms=[Subdir(job["subdir"]), Subdir("noarch")], channel_priority=ChannelPriority.Strict,
        virtual_packages=[GenericVirtualPackage(PackageName(n), Version(v), BuildString(b or "0"))
                          for n, v, b in job["virtual_packages"]]) for job in jobs))

print(sum(len(r) for r in asyncio.run(main())))
"""


def floor_jobs(ws: Path, out: Path) -> None:
    """The solves `rocmlock lock` runs for ``ws``, as plain data for :data:`FLOOR` (which imports rattler only)."""
    from rocmlock.lock.solve import make_job
    from rocmlock.workspace.manifest import load_workspace

    workspace = load_workspace(ws / "pixi.toml")
    jobs = [make_job(workspace, env, plat) for env in workspace.environments() for plat in env.platforms]
    assert all(j.channel_priority == "strict" for j in jobs)
    out.write_text(json.dumps([{"channels": list(j.channels), "specs": list(j.specs), "subdir": j.platform.subdir,
                                "virtual_packages": [list(v) for v in j.virtual_packages]} for j in jobs]))


def _timed(argv: list[str], cache: Path, cwd: Path | None = None, cpu: list[float] | None = None) -> float:
    """Wall seconds of ``argv``; its CPU seconds (user + system, every thread) appended to ``cpu``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True, cwd=cwd, env={**child_env(), "ROCMLOCK_CACHE_DIR": str(cache)})
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if cpu is not None:
        cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return wall


def paired(work: Path, url: str, runs: int) -> dict[str, object]:
    """Fresh `rocmlock lock --json` (solves, pixi.lock, the diff printed, every export) against the raw solve
    floor, and the no-op re-lock against `python -c "import rattler"`, alternating so load hits both alike."""
    ws, cache = work / "ws", work / "cache"
    write_manifest(ws, url)
    jobs, floor_cache = work / "floor-jobs.json", work / "floor-cache"
    floor_jobs(ws, jobs)
    lock = [sys.executable, "-m", "rocmlock", "lock", "--json", "--manifest-path", str(ws / "pixi.toml")]
    floor = [sys.executable, "-c", FLOOR, str(jobs), str(floor_cache)]
    reset(ws, None)
    _timed(lock, cache)  # warm both repodata caches and the .pyc files
    _timed(floor, cache)
    fresh, solve_floor, fresh_cpu, floor_cpu = [], [], [], []
    for _ in range(runs):
        reset(ws, None)
        shutil.rmtree(cache / "stamps", ignore_errors=True)
        fresh.append(_timed(lock, cache, cpu=fresh_cpu))
        solve_floor.append(_timed(floor, cache, cpu=floor_cpu))
    noop, rattler_import = [], []
    before = outputs(ws)
    # A workspace locked a while ago, as a CI job or a pre-commit hook finds it: the first no-op after the outputs
    # have settled (rocmlock.lock.stamp.SETTLED_NS) checks their bytes and records their stat; the rest are timed.
    time.sleep(2.5)
    _timed(lock, cache)
    plain = [sys.executable, "-m", "rocmlock", "lock", "--manifest-path", str(ws / "pixi.toml")]
    for _ in range(runs):
        noop.append(_timed(plain, cache))  # as a pre-commit hook or CI runs it (bench_cli_startup.py likewise)
        rattler_import.append(_timed([sys.executable, "-c", "import rattler"], cache))
    assert outputs(ws) == before, "the no-op re-lock changed a file"
    med = statistics.median
    return {"fresh_lock_s": round(med(fresh), 3), "solve_floor_s": round(med(solve_floor), 3),
            "fresh_over_floor": round(med(fresh) / med(solve_floor), 2),
            # CPU seconds (user + system, every thread): the floor's over its wall tells how busy it keeps the
            # cores; the lock's CPU beyond the floor's is the work it adds (the machine's load moves it less).
            "fresh_lock_cpu_s": round(med(fresh_cpu), 3), "solve_floor_cpu_s": round(med(floor_cpu), 3),
            "floor_cores_busy": round(med(floor_cpu) / med(solve_floor), 2),
            "noop_relock_s": round(med(noop), 3), "import_rattler_s": round(med(rattler_import), 3),
            "noop_over_import": round(med(noop) / med(rattler_import), 2),
            # Each run's ratio to the run beside it, then their median (each pair timed back to back): a load that
            # comes and goes moves both runs of a pair, so this moves less than the ratio of the medians.
            "fresh_over_floor_paired": round(med([a / b for a, b in zip(fresh, solve_floor, strict=True)]), 2),
            "noop_over_import_paired": round(med([a / b for a, b in zip(noop, rattler_import, strict=True)]), 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/rocmlock-bench"))
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--big", action="store_true",
                        help="a 30,056-record forge channel (1,000 compiled, 333 noarch python packages), and only "
                             "the paired figures: fresh lock / raw solve floor, no-op re-lock / import rattler")
    args = parser.parse_args()
    work: Path = args.workdir
    if not (work / "forge" / "noarch" / "repodata.json").exists():
        records = generate_forge(work / "forge", **({"pylibs": 1000, "pures": 333} if args.big else {}))
        build_channel(work / "private", private_packages())
    else:
        records = sum(len(json.loads((work / "forge" / s / "repodata.json").read_text())["packages.conda"])
                      for s in ("linux-64", "noarch"))
    server, url = serve(work)
    if args.big:
        report = {"forge_records": records, "runs": args.runs, **paired(work, url, args.runs)}
        server.shutdown()
        print(json.dumps(report, indent=2))
        return 0
    ws, cache = work / "ws", work / "cache"
    write_manifest(ws, url)
    cold, warm, noop, changed = [], [], [], []
    for _ in range(args.runs):
        reset(ws, cache)
        cold.append(run_lock(ws, cache))
    for _ in range(args.runs):
        reset(ws, None)
        warm.append(run_lock(ws, cache))
    for _ in range(args.runs):
        before = outputs(ws)
        noop.append(run_lock(ws, cache))
        after = outputs(ws)
        changed.append(sum(len(after.get(k, b"")) for k in set(before) | set(after) if before.get(k) != after.get(k)))
    slow_noop = []
    for _ in range(args.runs):  # the same no-op without the stamp: satisfiability check + re-render
        shutil.rmtree(cache / "stamps", ignore_errors=True)
        before = outputs(ws)
        slow_noop.append(run_lock(ws, cache))
        assert outputs(ws) == before
    server.shutdown()
    lock = (ws / "pixi.lock").read_text()
    report = {"forge_records": records, "runs": args.runs, "locked_packages": lock.count("\n- conda: "),
              "cold_lock_s": round(statistics.median(cold), 3), "warm_lock_s": round(statistics.median(warm), 3),
              "noop_relock_s": round(statistics.median(noop), 3), "noop_bytes_changed": max(changed),
              "noop_relock_without_stamp_s": round(statistics.median(slow_noop), 3)}
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
