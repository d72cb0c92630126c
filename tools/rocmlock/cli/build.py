"""The build-side commands: ``plan``, ``doctor``, ``build``, ``sources`` and ``publish``, and the build's progress."""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rocmlock.cli.common import (
    env_arg,
    err,
    manifest_arg,
    print_json,
    print_report,
    recipes_arg,
    stage_arg,
    warn,
)

if TYPE_CHECKING:  # the handlers import core modules when they run, so `rocmlock --help` stays quick
    from rocmlock.build.plan import Plan
    from rocmlock.workspace.model import Workspace


def _load_plan(args: argparse.Namespace, channel: str | None = None) -> tuple[Workspace, Plan]:
    """The workspace of ``--manifest-path`` and the plan of its ``-e`` environments and ``--recipes-dir``."""
    from rocmlock.build.plan import make_plan
    from rocmlock.workspace.manifest import load_workspace

    ws = load_workspace(args.manifest_path)
    for warning in ws.manifest_warnings():  # as `lock` says them (and pixi, at every load of the manifest)
        warn(warning)
    return ws, make_plan(ws, args.environments or None, channel=channel, recipes_dir=args.recipes_dir)


def add_plan(p: argparse.ArgumentParser) -> None:
    manifest_arg(p)
    env_arg(p)
    p.add_argument("--json", action="store_true", help="print the build matrix as JSON on stdout")
    p.add_argument("--channel", metavar="URL", help="mark the variants this channel (URL or directory) already holds")
    recipes_arg(p)


def cmd_plan(args: argparse.Namespace) -> int:
    from rocmlock.build.plan import render_plan

    _, plan = _load_plan(args, channel=args.channel)
    print_report(args, plan.to_json(), render_plan(plan))
    for problem in plan.problems:
        warn(problem)
    return 0


def add_variants(p: argparse.ArgumentParser) -> None:
    manifest_arg(p)
    recipes_arg(p)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite the generated keys of recipes/variants.yaml")
    mode.add_argument("--check", action="store_true", help="exit 1 when they differ from the tables (writes nothing)")
    p.add_argument("--gpu-target", action="append", default=[], metavar="GFX",
                   help="print the whole config narrowed to this target (repeatable), its GPU keys with it: a -m file "
                        "for rattler-build or conda-build, whose --variant cannot narrow a zipped key")
    p.add_argument("--rocm-version", action="append", default=[], metavar="X.Y",
                   help="with --gpu-target: narrow rocm_version too (repeatable)")


def cmd_variants(args: argparse.Namespace) -> int:
    from rocmlock.build.variantkeys import regenerate
    from rocmlock.util.fs import write_atomic

    recipes_dir = args.recipes_dir or args.manifest_path.parent / "recipes"
    if args.gpu_target or args.rocm_version:
        return _narrowed_variants(args, recipes_dir)
    path, old, new = regenerate(recipes_dir)
    if args.check:
        if old != new:
            err(f"error: {path}: the generated GPU keys differ from the tables")
            err("hint: run `rocmlock variants --write`")
            return 1
        return 0
    if args.write:
        if old != new:
            write_atomic(path, new)
        err(f"{path}: generated keys {'rewritten' if old != new else 'already current'}")
        return 0
    print(new, end="")
    return 0


def _narrowed_variants(args: argparse.Namespace, recipes_dir: Path) -> int:
    from rocmlock.build.recipes import load_matrix
    from rocmlock.errors import InputError

    if args.write or args.check:
        raise InputError("--gpu-target/--rocm-version print a narrowed config; they do not go with --write or --check",
                         hint="run `rocmlock variants --write` on its own first")
    overrides = {k: v for k, v in (("gpu_target", args.gpu_target), ("rocm_version", args.rocm_version)) if v}
    narrowed = load_matrix(recipes_dir).narrowed(overrides)
    said = ", ".join(f"{k} {' '.join(v)}" for k, v in overrides.items())
    print(narrowed.to_yaml(f"# {recipes_dir / 'variants.yaml'} narrowed to {said} by `rocmlock variants`.\n"
                           "# Generated: pass it to rattler-build or conda-build with -m, do not edit it.\n"), end="")
    return 0


def add_doctor(p: argparse.ArgumentParser) -> None:
    manifest_arg(p)
    env_arg(p)
    p.add_argument("--build", action="store_true",
                   help="also check the build toolchain: compiler, a kernel per GPU target, jobs, disk, ccache")
    p.add_argument("--target", action="append", default=[], dest="targets", metavar="GFX",
                   help="also check this GPU target (repeatable; works without a pixi.toml)")
    p.add_argument("--json", action="store_true", help="print the report as JSON on stdout")


def cmd_doctor(args: argparse.Namespace) -> int:
    from rocmlock.host.doctor import doctor_targets, run_doctor, workspace_packages, workspace_rocm_versions
    from rocmlock.host.doctor_report import render_report
    from rocmlock.workspace.manifest import load_workspace
    from rocmlock.workspace.pyproject import find_manifest

    # Outside a workspace (no ./pixi.toml or pyproject.toml with [tool.pixi], nothing named) doctor still checks
    # the host and --target.
    in_workspace = (args.environments or find_manifest(args.manifest_path).exists()
                    or args.manifest_path != Path("pixi.toml"))
    ws = load_workspace(args.manifest_path) if in_workspace else None
    targets = doctor_targets(args.targets, ws, args.environments)
    wanted = workspace_rocm_versions(ws, args.environments) if ws else ()
    root = ws.root if ws else Path(".")
    packages = workspace_packages(ws, args.environments) if ws else None
    report = run_doctor(targets, build=args.build, rocm_wanted=wanted, workdir=root, packages=packages)
    print_report(args, report.to_dict(), render_report(report))
    return 0 if report.ok else 1


def add_build(p: argparse.ArgumentParser) -> None:
    manifest_arg(p)
    env_arg(p)
    stage_arg(p)
    p.add_argument("--output", type=Path, metavar="DIR",
                   help="output channel directory, first channel of later stages (default: output/ beside the manifest)")
    p.add_argument("--channel", metavar="URL", help="the target channel: variants it holds are not rebuilt")
    p.add_argument("--keep-going", action="store_true", help="after a failure, still build the independent variants")
    p.add_argument("--skip-doctor", action="store_true", help="do not run the toolchain checks first")
    recipes_arg(p)
    p.add_argument("--sources", type=Path, metavar="DIR", default=None,
                   help="a source cache filled by `rocmlock sources fetch`: every source must be there, and the "
                        "build takes them from it instead of the network")
    p.add_argument("--variant", metavar="ID", help="only this variant of the plan (what a job of --slurm runs)")
    p.add_argument("--slurm", action="store_true",
                   help="submit the variants as Slurm batch jobs chained by --dependency=afterok, then wait for them")
    p.add_argument("--partition", metavar="P", help="--slurm: the partition to submit to")
    p.add_argument("--time", metavar="T", help="--slurm: each job's time limit (sbatch --time)")
    p.add_argument("--dry-run", action="store_true", help="--slurm: print the batch scripts, submit nothing")
    p.add_argument("--json", action="store_true", help="print the build report as JSON on stdout")


class _BuildProgress:
    """rich progress on stderr: the current variant with its elapsed time, one line per finished variant."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.console = Console(stderr=True)
        self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                                 console=self.console, transient=True)
        self.task: Any = None

    def start(self, variant: Any, index: int, total: int) -> None:
        self.progress.start()
        self.task = self.progress.add_task(f"[{index}/{total}] building {variant.id}")

    def finish(self, outcome: Any) -> None:
        if self.task is not None:
            self.progress.remove_task(self.task)
            self.task = None
        self.progress.console.print(f"{outcome.status:<8} {outcome.id}" + (f"  ({outcome.reason})" if outcome.reason
                                    else ""), highlight=False, markup=False, soft_wrap=True)

    def close(self) -> None:
        self.progress.stop()


class PlainProgress:
    """Progress for a log that is no terminal (CI, ``| tee``, a Slurm job's output): rich draws nothing there, and
    a PyTorch build is hours of silence. A line when a variant starts (with its log), one every ``interval`` seconds
    while it builds (elapsed time, lines in its log), one when it finishes."""

    def __init__(self, output: Path, interval: float, write: Callable[[str], None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.output, self.interval, self.write, self.clock = output, interval, write, clock
        self.current: tuple[str, float] | None = None
        self.due = 0.0
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name="rocmlock-build-progress", daemon=True)
        self.thread.start()

    def _log(self, variant_id: str) -> Path:
        return self.output / "logs" / f"{variant_id}.log"

    def start(self, variant: Any, index: int, total: int) -> None:
        with self.lock:
            self.current = (variant.id, self.clock())
            self.due = self.clock() + self.interval
        self.write(f"[{index}/{total}] building {variant.id} (log: {self._log(variant.id)})")

    def tick(self) -> None:
        """Write a progress line when one is due (the thread calls this; tests call it with their clock)."""
        with self.lock:
            if self.current is None or self.clock() < self.due:
                return
            variant_id, started = self.current
            self.due = self.clock() + self.interval
        try:
            with self._log(variant_id).open("rb") as fh:
                lines = f"{sum(1 for _ in fh)} lines"
        except OSError:
            lines = "not written yet"
        minutes = int(self.clock() - started) // 60
        self.write(f"still building {variant_id}: {minutes // 60}h {minutes % 60:02d}m so far "
                   f"(log: {self._log(variant_id)}, {lines})")

    def _run(self) -> None:
        while not self.stopped.wait(min(self.interval, 60.0)):
            self.tick()

    def finish(self, outcome: Any) -> None:
        with self.lock:
            self.current = None
        reason = f"  ({outcome.reason})" if outcome.reason else ""
        self.write(f"{outcome.status:<8} {outcome.id} in {round(outcome.seconds)}s{reason}")

    def close(self) -> None:
        self.stopped.set()
        self.thread.join()


def _progress(output: Path) -> PlainProgress | _BuildProgress:
    """rich on a terminal; plain lines (every ROCMLOCK_PROGRESS_SECONDS, default 300) otherwise."""
    import os

    if sys.stderr.isatty():
        return _BuildProgress()
    try:
        interval = float(os.environ.get("ROCMLOCK_PROGRESS_SECONDS", "300"))
    except ValueError:
        interval = 300.0
    return PlainProgress(output, interval if interval > 0 else 300.0, err)


def _build_doctor(ws: Workspace, plan: Plan, args: argparse.Namespace, output: Path) -> dict[str, str]:
    import os

    from rocmlock.build.builder import doctor_gate
    from rocmlock.host.doctor_report import render_report

    if args.skip_doctor:
        return {}
    report, blocked = doctor_gate(ws, plan, output, args.stage, args.environments or None)
    if report is None:
        return {}
    # The recipes hand MAX_JOBS from this environment to their build scripts (recipe.yaml, env.get).
    os.environ.setdefault("MAX_JOBS", str(report.max_jobs))
    if not report.ok:
        err(render_report(report))
        err("doctor failed: the GPU variants it concerns are blocked; metapackages and noarch packages still build")
    return blocked


def _build_sources(plan: Plan, args: argparse.Namespace, output: Path) -> None:
    from rocmlock.build.builder import pending
    from rocmlock.build.sources import check_cache, install_cache, plan_sources

    entries = check_cache(args.sources, plan_sources(plan, pending(plan, output, args.stage)))
    target = install_cache(args.sources, entries, output)
    err(f"sources: {len(entries)} from {args.sources} (in {target})")


def cmd_build(args: argparse.Namespace) -> int:
    import os

    from rocmlock.build.builder import (
        BuildOptions,
        build_channels,
        build_plan,
        check_build_paths,
        check_magma_home,
        render_summary,
        select_variant,
    )
    from rocmlock.errors import InputError

    if args.slurm:
        return _build_slurm(args)
    if args.dry_run or args.partition or args.time:
        raise InputError("--dry-run, --partition and --time go with --slurm",
                         hint="add --slurm, or leave them out")
    ws, plan = _load_plan(args, channel=args.channel)
    if args.variant:
        plan = select_variant(plan, args.variant)
    output = _directory_arg((args.output or ws.root / "output").resolve(), "--output")
    check_build_paths(plan, output, plan.variants)
    for warning in check_magma_home(plan, output, args.stage, os.environ):
        warn(warning)
    if args.sources is not None:
        _build_sources(plan, args, output)
    blocked = _build_doctor(ws, plan, args, output)
    opts = BuildOptions(output, build_channels(ws, args.channel), args.stage, args.keep_going, blocked)
    progress = _progress(output)
    try:
        if args.variant:  # a job of --slurm, beside the other jobs that write the same output
            from rocmlock.build.slurm import build_in_job

            report = build_in_job(plan, opts, err, events=progress)
        else:
            report = build_plan(plan, opts, events=progress)
    finally:
        progress.close()
    print_report(args, report.to_dict(), render_summary(report))
    return 0 if report.ok else 1


def _slurm_node(args: argparse.Namespace, output: Path) -> tuple[int, int]:
    """(CPUs, MiB) of the partition's smallest node; a dry run where Slurm does not answer sizes them by this host."""
    from rocmlock.errors import OperationError
    from rocmlock.host.doctor import detect_resources
    from rocmlock.util import slurm

    try:
        slurm.require(*(("sinfo",) if args.dry_run else ("sbatch", "squeue", "sinfo")))
        node = slurm.node_size(args.partition)
        if node is None:
            raise OperationError(f"sinfo lists no node{f' in partition {args.partition}' if args.partition else ''}",
                                 hint="`sinfo` shows the partitions and their nodes")
        return node
    except OperationError as exc:
        if not args.dry_run:
            raise
        here = detect_resources(output)
        err(f"{exc}; the jobs of this dry run are sized by this host ({here.cores} CPUs, "
            f"{here.memory_bytes >> 30} GiB)")
        return here.cores, here.memory_bytes >> 20


def _directory_arg(path: Path, flag: str) -> Path:
    """``path`` for a directory option: one that exists as something else is bad input, named (exit 2), not a
    "File exists" from the first mkdir under it (exit 1)."""
    from rocmlock.errors import InputError

    if path.exists() and not path.is_dir():
        raise InputError(f"{flag} {path}: a file, not a directory",
                         hint=f"give {flag} a directory (it is created)")
    return path


def _build_slurm(args: argparse.Namespace) -> int:
    import os

    from rocmlock.build.builder import render_summary
    from rocmlock.build.slurm import SlurmBuild, dry_run, plan_jobs, render_never, submit_jobs, wait_jobs
    from rocmlock.errors import InputError
    from rocmlock.util.credentials import redact_url

    if args.variant or args.keep_going:
        raise InputError("--slurm builds every variant of the plan and keeps going (Slurm runs what it can)",
                         hint="drop --variant and --keep-going")
    channel = args.channel
    if channel and redact_url(channel) != channel:
        raise InputError(f"--channel {redact_url(channel)}: its credentials would be written into every batch script",
                         hint="give them through RATTLER_AUTH_FILE (keyed by host) instead of the URL")
    if channel and "://" not in channel:  # a job runs in the workspace's directory, not this one
        channel = str(Path(channel).expanduser().resolve())
    ws, plan = _load_plan(args, channel=channel)
    output = _directory_arg((args.output or ws.root / "output").resolve(), "--output")
    build = SlurmBuild(plan.manifest.resolve(), plan.recipes_dir, output, channel, args.partition, args.time,
                       args.skip_doctor, args.sources.resolve() if args.sources else None)
    jobs = plan_jobs(plan, output, _slurm_node(args, output), os.environ, args.stage)
    if args.dry_run:
        scripts = dry_run(jobs, build, os.environ)
        if getattr(args, "json", False):  # stdout is JSON alone (the scripts were printed as they are)
            print_json({"dry_run": True, "jobs": [j.variant.id for j in jobs], "scripts": scripts})
        else:
            print(scripts)
        err(f"{len(jobs)} job(s) would be submitted (--dry-run: nothing was)")
        return 0
    result = wait_jobs(submit_jobs(jobs, build, os.environ, err), plan, build, err, stage=args.stage)
    data = result.report.to_dict() | {"jobs": {j.variant.id: j.job_id for j in result.jobs},
                                      "never_ran": [j.variant.id for j in result.never]}
    print_report(args, data, "\n".join(t for t in (render_summary(result.report), render_never(result)) if t))
    return 0 if result.report.ok else 1


def add_sources(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=["fetch", "check"],
                   help="fetch: fill DIR with every source the plan's variants need (run where there is network); "
                        "check: verify that DIR holds them all, with their hashes")
    manifest_arg(p)
    env_arg(p)
    stage_arg(p)
    p.add_argument("--to", type=Path, metavar="DIR", default=None,
                   help="the source cache directory (default: sources/ beside the manifest); give it to "
                        "`rocmlock build --sources DIR` on the build host")
    recipes_arg(p)
    p.add_argument("--json", action="store_true", help="print what was fetched and found as JSON on stdout")


def cmd_sources(args: argparse.Namespace) -> int:
    from rocmlock.build.builder import pending
    from rocmlock.build.sources import check_cache, plan_sources

    ws, plan = _load_plan(args)
    wanted = plan_sources(plan, pending(plan, None, args.stage))
    cache = _directory_arg((args.to or ws.root / "sources").resolve(), "--to")
    if args.action == "check":
        entries = check_cache(cache, wanted)
        print_report(args, {"cache": str(cache), "sources": [e.to_json() for e in entries]},
                     f"{cache}: all {len(entries)} sources present, hashes checked")
        return 0
    from rocmlock.build.sourcefetch import fetch_sources

    report = fetch_sources(wanted, cache, log=err)
    print_report(args, report.to_dict(), f"{cache}: {len(report.fetched)} fetched, {len(report.cached)} already "
                 f"there ({len(wanted)} sources)")
    return 0


def add_publish(p: argparse.ArgumentParser) -> None:
    p.add_argument("--to", required=True, metavar="URL",
                   help="a directory/file:// URL, s3://bucket/prefix, https://prefix.dev/<channel>, "
                        "quetz+https://host/<channel>, artifactory+https://host/artifactory/<channel>, "
                        "anaconda://<owner>")
    p.add_argument("--from", dest="source", type=Path, default=Path("output"), metavar="DIR",
                   help="the packages to publish: a build output directory (default: ./output)")
    p.add_argument("--force", action="store_true", help="overwrite a different file of the same name")
    p.add_argument("--json", action="store_true", help="print what was uploaded and skipped as JSON on stdout")


def cmd_publish(args: argparse.Namespace) -> int:
    from rocmlock.channel.publish import publish

    result = publish(args.source, args.to, force=args.force, log=err)
    if args.json:
        print_json(result.to_dict())
    err(f"published to {result.destination}: {len(result.uploaded)} uploaded, {len(result.skipped)} already there"
        + (f", {len(result.replaced)} replaced (--force)" if result.replaced else ""))
    return 0
