"""The command line: the only module that touches argv, output streams and exit codes.

Exit codes: 0 ok, 1 an operation failed, 2 bad input.
Each subcommand is a pair ``_add_<name>(subparsers)`` / ``_cmd_<name>(args) -> int``; core modules
take data, return data and raise :class:`rocmlock.errors.RocmlockError`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rocmlock import __version__
from rocmlock.credentials import redact_text
from rocmlock.errors import RocmlockError

if TYPE_CHECKING:  # the handlers import core modules when they run, so `rocmlock --help` stays quick
    from rocmlock.lock import LockResult
    from rocmlock.plan import Plan
    from rocmlock.workspace import Workspace

Handler = Callable[[argparse.Namespace], int]


def _err(message: str) -> None:
    print(redact_text(message), file=sys.stderr)


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=True))


def _print_report(args: argparse.Namespace, data: Any, text: str) -> None:
    """With ``--json`` the data on stdout, else the text for people."""
    if args.json:
        _print_json(data)
    else:
        print(text)


def _manifest_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--manifest-path", type=Path, default=Path("pixi.toml"),
                        help="the workspace's pixi.toml (default: ./pixi.toml)")


def _env_arg(parser: argparse.ArgumentParser, multiple: bool = True) -> None:
    if multiple:
        parser.add_argument("-e", "--environment", action="append", default=[], dest="environments",
                            metavar="ENV", help="only this environment (repeatable; default: all)")
    else:
        parser.add_argument("-e", "--environment", dest="environment", metavar="ENV", help="the environment")


# ----------------------------------------------------------------------------- subcommands
# (each command registers itself in _SUBCOMMANDS at the bottom)


def _add_doctor(p: argparse.ArgumentParser) -> None:
    _manifest_arg(p)
    _env_arg(p)
    p.add_argument("--build", action="store_true",
                   help="also check the build toolchain: compiler, a kernel per GPU target, jobs, disk, ccache")
    p.add_argument("--target", action="append", default=[], dest="targets", metavar="GFX",
                   help="also check this GPU target (repeatable; works without a pixi.toml)")
    p.add_argument("--json", action="store_true", help="print the report as JSON on stdout")


def _cmd_doctor(args: argparse.Namespace) -> int:
    from rocmlock.doctor import (
        doctor_targets,
        render_report,
        run_doctor,
        workspace_packages,
        workspace_rocm_versions,
    )
    from rocmlock.pixi_pyproject import find_manifest
    from rocmlock.workspace import load_workspace

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
    _print_report(args, report.to_dict(), render_report(report))
    return 0 if report.ok else 1


def _add_lock(p: argparse.ArgumentParser) -> None:
    _manifest_arg(p)
    _env_arg(p)
    p.add_argument("-p", "--platform", action="append", default=[], dest="platforms", metavar="PLATFORM",
                   help="only this platform (repeatable; default: all)")
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 and list each stale output if anything would change")
    p.add_argument("--update", nargs="*", metavar="PKG", default=None,
                   help="let these packages (all when none are named) move to newer versions")
    p.add_argument("--json", action="store_true", help="print the changes as JSON on stdout")


def _report_lock(result: LockResult, args: argparse.Namespace, verb: str) -> int:
    data = result.to_json()
    if args.json:
        _print_json(data)
    for warning in result.warnings:
        _err(f"warning: {warning}")
    for line in result.change_lines():
        _err(line)
    if result.not_locked:
        missing = ", ".join(f"{env} [{plat}]" for env, plat in result.not_locked)
        _err(f"warning: pixi.lock does not hold {missing}; `pixi install --locked` refuses a lock without every "
             "environment: run `rocmlock lock` without -e/-p")
    gone = set(data["no_longer_generated"])
    if args.check:
        for path in data["stale"]:
            _err(f"stale: {path} (no longer generated)" if path in gone else f"stale: {path}")
        _err("up to date" if result.up_to_date else f"{len(data['stale'])} output(s) would change; run `rocmlock {verb}`")
        return 0 if result.up_to_date else 1
    written = len(data["stale"]) - len(gone)
    removed = f", removed {len(gone)} no longer generated" if gone else ""
    _err(f"wrote {written} file(s){removed}" if result.written else "up to date, nothing written")
    return 0


def _cmd_lock(args: argparse.Namespace) -> int:
    from rocmlock.lock import lock_workspace

    result = lock_workspace(args.manifest_path, environments=args.environments or None,
                            platforms=args.platforms or None, update=args.update, check=args.check,
                            on_wait=_err)
    return _report_lock(result, args, "lock")


def _add_export(p: argparse.ArgumentParser) -> None:
    _manifest_arg(p)
    _env_arg(p)
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if an export is stale")
    p.add_argument("--skip-source", action="store_true",
                   help="leave out source packages (pixi-build, git/path PyPI dependencies) with a warning "
                        "instead of refusing")
    p.add_argument("--json", action="store_true", help="print the result as JSON on stdout")


def _cmd_export(args: argparse.Namespace) -> int:
    from rocmlock.lock import export_workspace

    result = export_workspace(args.manifest_path, environments=args.environments or None, check=args.check,
                              skip_source=args.skip_source, on_wait=_err)
    return _report_lock(result, args, "export")


def _add_plan(p: argparse.ArgumentParser) -> None:
    _manifest_arg(p)
    _env_arg(p)
    p.add_argument("--json", action="store_true", help="print the build matrix as JSON on stdout")
    p.add_argument("--channel", metavar="URL", help="mark the variants this channel (URL or directory) already holds")
    p.add_argument("--recipes-dir", type=Path, default=None,
                   help="the recipes (default: recipes/ beside the manifest)")


def _cmd_plan(args: argparse.Namespace) -> int:
    from rocmlock.plan import make_plan, render_plan
    from rocmlock.workspace import load_workspace

    plan = make_plan(load_workspace(args.manifest_path), args.environments or None, channel=args.channel,
                     recipes_dir=args.recipes_dir)
    _print_report(args, plan.to_json(), render_plan(plan))
    for problem in plan.problems:
        _err(f"warning: {problem}")
    return 0


def _add_verify(p: argparse.ArgumentParser) -> None:
    _manifest_arg(p)
    _env_arg(p, multiple=False)
    p.add_argument("--prefix", type=Path, metavar="DIR",
                   help="a conda environment's prefix instead of a pixi environment (default: $CONDA_PREFIX)")
    p.add_argument("--json", action="store_true", help="print the probe's report as JSON on stdout")
    p.add_argument("--bench", action="store_true", help="also measure bf16 GEMM TFLOP/s against the GPU's peak")
    p.add_argument("--train", action="store_true", help="also run a LoRA smoke training on a tiny local model")


def _cmd_verify(args: argparse.Namespace) -> int:
    import os

    from rocmlock.runner import format_argv
    from rocmlock.verify import probe_command, resolve_target, run_probe

    target = resolve_target(args.manifest_path, args.environment, args.prefix, os.environ.get("CONDA_PREFIX"))
    cmd = probe_command(target, json_out=args.json, bench=args.bench, train=args.train)
    _err(f"> {format_argv(cmd)}")
    return run_probe(cmd)


def _add_preset(p: argparse.ArgumentParser) -> None:
    _manifest_arg(p)
    _env_arg(p, multiple=False)
    p.add_argument("--method", required=True, choices=["lora", "qlora", "full"],
                   help="LoRA, QLoRA (4-bit bitsandbytes) or full fine-tuning")
    p.add_argument("--model", default=None, metavar="PATH",
                   help="model_name_or_path: a local directory or a hub id (default: Qwen/Qwen2.5-7B-Instruct)")
    p.add_argument("--template", default=None, help="LLaMA-Factory chat template of the model (default: qwen)")
    p.add_argument("--dataset", default=None, help="LLaMA-Factory dataset name(s) (default: alpaca_en_demo)")
    p.add_argument("-o", "--output", type=Path, default=None, metavar="FILE",
                   help="the YAML to write (default: presets/<env>-<method>.yaml beside pixi.toml)")
    p.add_argument("--json", action="store_true", help="print what was written and why as JSON on stdout")


def _cmd_preset(args: argparse.Namespace) -> int:
    from rocmlock.errors import InputError
    from rocmlock.preset import (
        DEFAULT_DATASET,
        DEFAULT_MODEL,
        DEFAULT_TEMPLATE,
        PresetRequest,
        make_preset,
        write_preset,
    )
    from rocmlock.workspace import load_workspace

    if not args.environment:
        raise InputError("rocmlock preset needs an environment", hint="pass -e ENV (e.g. -e mi300x-qlora)")
    request = PresetRequest(args.environment, args.method, args.model or DEFAULT_MODEL,
                            args.template or DEFAULT_TEMPLATE, args.dataset or DEFAULT_DATASET, args.output)
    preset = make_preset(load_workspace(args.manifest_path), request)
    write_preset(preset)
    for note in preset.notes:
        _err(note)
    for path in preset.files():
        _err(f"wrote {path}")
    _err(f"train with: {preset.train_command()}")
    if args.json:
        _print_json(preset.to_json())
    return 0


def _add_build(p: argparse.ArgumentParser) -> None:
    _manifest_arg(p)
    _env_arg(p)
    p.add_argument("--stage", metavar="NAME", help="only the variants of this package (e.g. pytorch)")
    p.add_argument("--output", type=Path, metavar="DIR",
                   help="output channel directory, first channel of later stages (default: output/ beside the manifest)")
    p.add_argument("--channel", metavar="URL", help="the target channel: variants it holds are not rebuilt")
    p.add_argument("--keep-going", action="store_true", help="after a failure, still build the independent variants")
    p.add_argument("--skip-doctor", action="store_true", help="do not run the toolchain checks first")
    p.add_argument("--recipes-dir", type=Path, default=None,
                   help="the recipes (default: recipes/ beside the manifest)")
    p.add_argument("--sources", type=Path, metavar="DIR", default=None,
                   help="a source cache filled by `rocmlock sources fetch`: every source must be there, and the "
                        "build takes them from it instead of the network")
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


def _build_doctor(ws: Workspace, plan: Plan, args: argparse.Namespace, output: Path) -> dict[str, str]:
    import os

    from rocmlock.build import doctor_gate
    from rocmlock.doctor import render_report

    if args.skip_doctor:
        return {}
    report, blocked = doctor_gate(ws, plan, output, args.stage, args.environments or None)
    if report is None:
        return {}
    # The recipes hand MAX_JOBS from this environment to their build scripts (recipe.yaml, env.get).
    os.environ.setdefault("MAX_JOBS", str(report.max_jobs))
    if not report.ok:
        _err(render_report(report))
        _err("doctor failed: the GPU variants it concerns are blocked; metapackages and noarch packages still build")
    return blocked


def _build_sources(plan: Plan, args: argparse.Namespace, output: Path) -> None:
    from rocmlock.build import pending
    from rocmlock.sources import check_cache, install_cache, plan_sources

    entries = check_cache(args.sources, plan_sources(plan, pending(plan, output, args.stage)))
    target = install_cache(args.sources, entries, output)
    _err(f"sources: {len(entries)} from {args.sources} (in {target})")


def _add_sources(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=["fetch", "check"],
                   help="fetch: fill DIR with every source the plan's variants need (run where there is network); "
                        "check: verify that DIR holds them all, with their hashes")
    _manifest_arg(p)
    _env_arg(p)
    p.add_argument("--stage", metavar="NAME", help="only the variants of this package (e.g. pytorch)")
    p.add_argument("--to", type=Path, metavar="DIR", default=None,
                   help="the source cache directory (default: sources/ beside the manifest); give it to "
                        "`rocmlock build --sources DIR` on the build host")
    p.add_argument("--recipes-dir", type=Path, default=None,
                   help="the recipes (default: recipes/ beside the manifest)")
    p.add_argument("--json", action="store_true", help="print what was fetched and found as JSON on stdout")


def _cmd_sources(args: argparse.Namespace) -> int:
    from rocmlock.build import pending
    from rocmlock.plan import make_plan
    from rocmlock.sources import check_cache, plan_sources
    from rocmlock.workspace import load_workspace

    ws = load_workspace(args.manifest_path)
    plan = make_plan(ws, args.environments or None, recipes_dir=args.recipes_dir)
    wanted = plan_sources(plan, pending(plan, None, args.stage))
    cache = (args.to or ws.root / "sources").resolve()
    if args.action == "check":
        entries = check_cache(cache, wanted)
        _print_report(args, {"cache": str(cache), "sources": [e.to_json() for e in entries]},
                      f"{cache}: all {len(entries)} sources present, hashes checked")
        return 0
    from rocmlock.sourcefetch import fetch_sources

    report = fetch_sources(wanted, cache, log=_err)
    _print_report(args, report.to_dict(), f"{cache}: {len(report.fetched)} fetched, {len(report.cached)} already "
                  f"there ({len(wanted)} sources)")
    return 0


def _cmd_build(args: argparse.Namespace) -> int:
    from rocmlock.build import BuildOptions, build_channels, build_plan, render_summary
    from rocmlock.plan import make_plan
    from rocmlock.workspace import load_workspace

    ws = load_workspace(args.manifest_path)
    plan = make_plan(ws, args.environments or None, channel=args.channel, recipes_dir=args.recipes_dir)
    output = (args.output or ws.root / "output").resolve()
    if args.sources is not None:
        _build_sources(plan, args, output)
    blocked = _build_doctor(ws, plan, args, output)
    opts = BuildOptions(output, build_channels(ws, args.channel), args.stage, args.keep_going, blocked)
    progress = _BuildProgress()
    try:
        report = build_plan(plan, opts, events=progress)
    finally:
        progress.close()
    _print_report(args, report.to_dict(), render_summary(report))
    return 0 if report.ok else 1


def _add_publish(p: argparse.ArgumentParser) -> None:
    p.add_argument("--to", required=True, metavar="URL",
                   help="a directory/file:// URL, s3://bucket/prefix, https://prefix.dev/<channel>, "
                        "quetz+https://host/<channel>, artifactory+https://host/artifactory/<channel>, "
                        "anaconda://<owner>")
    p.add_argument("--from", dest="source", type=Path, default=Path("output"), metavar="DIR",
                   help="the packages to publish: a build output directory (default: ./output)")
    p.add_argument("--force", action="store_true", help="overwrite a different file of the same name")
    p.add_argument("--json", action="store_true", help="print what was uploaded and skipped as JSON on stdout")


def _cmd_publish(args: argparse.Namespace) -> int:
    from rocmlock.publish import publish

    result = publish(args.source, args.to, force=args.force, log=_err)
    if args.json:
        _print_json(result.to_dict())
    _err(f"published to {result.destination}: {len(result.uploaded)} uploaded, {len(result.skipped)} already there"
         + (f", {len(result.replaced)} replaced (--force)" if result.replaced else ""))
    return 0


def _add_install(p: argparse.ArgumentParser) -> None:
    _manifest_arg(p)
    _env_arg(p, multiple=False)
    p.add_argument("-p", "--platform", dest="platform", metavar="PLATFORM",
                   help="the lock platform (default: the environment's only one)")
    p.add_argument("--prefix", type=Path, required=True, metavar="DIR", help="where to create the environment")
    p.add_argument("--json", action="store_true", help="print what was installed as JSON on stdout")


def _cmd_install(args: argparse.Namespace) -> int:
    from rocmlock.errors import InputError
    from rocmlock.install import install_from_lock, left_out_warning, manifest_channels
    from rocmlock.lock import LOCK_NAME, manifest_file

    if not args.environment:
        raise InputError("rocmlock install needs -e/--environment")
    manifest = manifest_file(args.manifest_path).resolve()
    result = install_from_lock(manifest.parent / LOCK_NAME, args.environment, args.prefix.resolve(),
                               args.platform, channels=manifest_channels(manifest))
    if args.json:
        _print_json(result.to_dict())
    if result.left_out:
        _err("warning: " + left_out_warning(result.left_out, result.environment, result.platform, "installed"))
    _err(f"installed {len(result.packages)} package(s) of '{result.environment}' [{result.platform}] "
         f"into {result.prefix}")
    return 0


def _upstream_args(p: argparse.ArgumentParser) -> None:
    _manifest_arg(p)
    p.add_argument("--recipes-dir", type=Path, default=None,
                   help="the recipes with variants.yaml (default: recipes/ beside the manifest)")
    p.add_argument("--index-url", default=None, metavar="URL",
                   help="PyPI's JSON API root or a mirror's (default: https://pypi.org/pypi)")
    p.add_argument("--github-url", default=None, metavar="URL", help="GitHub (default: https://github.com)")
    p.add_argument("--github-api-url", default=None, metavar="URL",
                   help="GitHub's REST API (default: https://api.github.com)")
    p.add_argument("--github-raw-url", default=None, metavar="URL",
                   help="GitHub's raw files (default: https://raw.githubusercontent.com)")
    p.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS", help="per request (default: 30)")
    p.add_argument("--retries", type=int, default=3, help="retries of a failed request (default: 3)")
    p.add_argument("--backoff", type=float, default=0.5, metavar="SECONDS",
                   help="backoff factor between retries (default: 0.5: 0.5s, 1s, 2s, ...)")
    p.add_argument("--json", action="store_true", help="print the result as JSON on stdout")


def _client(args: argparse.Namespace) -> Any:
    from rocmlock.upstream import Client, Hosts, HttpOptions

    defaults = Hosts()
    hosts = Hosts(args.index_url or defaults.index_url, args.github_url or defaults.github,
                  args.github_api_url or defaults.github_api, args.github_raw_url or defaults.github_raw)
    return Client(hosts, HttpOptions(args.timeout, args.retries, args.backoff))


def _recipes_dir(args: argparse.Namespace) -> Path:
    return args.recipes_dir or args.manifest_path.resolve().parent / "recipes"


def _add_outdated(p: argparse.ArgumentParser) -> None:
    _upstream_args(p)


def _cmd_outdated(args: argparse.Namespace) -> int:
    from rocmlock.outdated import outdated, render_report

    report = outdated(_recipes_dir(args), _client(args))
    _print_report(args, report.to_json(), render_report(report))
    return 0 if report.ok else 1


def _add_bump(p: argparse.ArgumentParser) -> None:
    p.add_argument("versions", nargs="+", metavar="NAME=VERSION",
                   help="an upstream and its new version (flash-attn=2.8.3.post2)")
    p.add_argument("--sha256", action="append", default=[], metavar="NAME=HEX",
                   help="a source archive's sha256 (repeatable; needed where GitHub is unreachable)")
    p.add_argument("--rev", action="append", default=[], metavar="NAME=COMMIT",
                   help="a source's commit (repeatable; e.g. --rev triton=... --rev triton-llvm=...)")
    p.add_argument("--dry-run", action="store_true", help="show the diff and the rebuild summary; write nothing")
    _upstream_args(p)


def _pairs(values: list[str], option: str) -> tuple[tuple[str, str], ...]:
    from rocmlock.errors import InputError

    out = []
    for value in values:
        name, sep, rest = value.partition("=")
        if not sep or not name or not rest:
            raise InputError(f"{option} '{value}': expected NAME=VALUE", hint="e.g. pytorch=2.13.0")
        out.append((name.strip(), rest.strip()))
    return tuple(out)


def _cmd_bump(args: argparse.Namespace) -> int:
    from rocmlock.bump import BumpRequest, bump, write_bump

    recipes_dir = _recipes_dir(args)
    request = BumpRequest(_pairs(args.versions, "NAME=VERSION"), _pairs(args.sha256, "--sha256"),
                          _pairs(args.rev, "--rev"))
    result = bump(recipes_dir, request, _client(args), log=_err)
    root = recipes_dir.resolve().parent
    summary = _rebuild_summary(args, recipes_dir, result.files) if result.files else None  # before writing
    if not args.dry_run:
        result = write_bump(result)
    if args.json:
        _print_json({**result.to_json(root), "rebuild": summary[0] if summary else []})
    else:
        print(result.diff(root), end="")
        if summary:
            print(summary[1])
    for note in result.notes:
        _err(note)
    _err("dry run: nothing written" if args.dry_run else f"wrote {len(result.files)} file(s)" if result.written
         else "nothing written")
    return 0


def _rebuild_summary(args: argparse.Namespace, recipes_dir: Path, files: Any) -> tuple[list[str], str] | None:
    from rocmlock.rebuild import rebuild_variants, render_rebuild
    from rocmlock.workspace import load_workspace

    if not args.manifest_path.exists():
        _err(f"no {args.manifest_path}: run `rocmlock plan` in the workspace to see what must be rebuilt")
        return None
    try:
        variants = rebuild_variants(load_workspace(args.manifest_path), recipes_dir, files)
    except RocmlockError as exc:  # the bump itself is fine; say why there is no summary
        _err(f"warning: no rebuild summary: {exc}")
        return None
    return [v.id for v in variants], render_rebuild(variants)


def _add_pack(p: argparse.ArgumentParser) -> None:
    _manifest_arg(p)
    _env_arg(p, multiple=False)
    p.add_argument("-p", "--platform", dest="platform", metavar="PLATFORM",
                   help="the lock platform (default: the environment's only one)")
    p.add_argument("-o", "--output", type=Path, metavar="FILE",
                   help="the bundle to write (default: ./<env>-<platform>.tar)")
    p.add_argument("--with-installer", action="store_true",
                   help="also add the wheels and install.sh that run `rocmlock unpack` on a node without rocmlock")
    p.add_argument("--json", action="store_true", help="print what was packed as JSON on stdout")


class _DownloadProgress:
    """rich progress on stderr: bytes fetched of the lock's total, and the rate."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

        console = Console(stderr=True)
        # Not on a terminal (a log, CI): no bar, and no empty line where it was.
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                                 TransferSpeedColumn(), console=console, transient=True,
                                 disable=not console.is_terminal)
        self.task: Any = None

    def __call__(self, total: int, count: int) -> Callable[[int], None]:
        self.progress.start()
        self.task = self.progress.add_task(f"fetching {count} packages", total=total or None)
        return lambda n: self.progress.advance(self.task, n)

    def close(self) -> None:
        if self.task is not None:
            self.progress.stop()


def _cmd_pack(args: argparse.Namespace) -> int:
    from rocmlock.credentials import client_for_urls
    from rocmlock.errors import InputError
    from rocmlock.install import left_out, left_out_warning, manifest_channels
    from rocmlock.lock import LOCK_NAME, manifest_file
    from rocmlock.pack import pack_environment

    if not args.environment:
        raise InputError("rocmlock pack needs -e/--environment")
    manifest = manifest_file(args.manifest_path).resolve()
    _, client = client_for_urls(manifest_channels(manifest))
    progress = _DownloadProgress()
    try:
        result = pack_environment(manifest.parent / LOCK_NAME, args.environment, args.platform, args.output,
                                  with_installer=args.with_installer, client=client, progress=progress, log=_err)
    finally:
        progress.close()
    meta = result.metadata
    if args.json:
        _print_json(result.to_dict())
    missing = left_out(manifest.parent / LOCK_NAME, meta.environment, meta.platform)
    if missing:
        _err("warning: " + left_out_warning(missing, meta.environment, meta.platform, "in the bundle"))
    gpu = f"{meta.gpu_target}, ROCm {meta.rocm_version}" if meta.gpu_target else "no GPU target"
    _err(f"packed {len(meta.packages)} package(s) of '{meta.environment}' [{meta.platform}; {gpu}] into "
         f"{result.output} ({result.size / 1e6:.1f} MB)")
    return 0


def _add_unpack(p: argparse.ArgumentParser) -> None:
    p.add_argument("bundle", type=Path, metavar="FILE", help="a bundle of `rocmlock pack` (or its extracted directory)")
    p.add_argument("--prefix", type=Path, required=True, metavar="DIR", help="where to create the environment")
    p.add_argument("--force", action="store_true",
                   help="install even when this node's GPU or ROCm does not match (never skips the integrity check)")
    p.add_argument("--no-verify", action="store_true", help="do not run the environment's probe afterwards")
    p.add_argument("--extract-dir", type=Path, metavar="DIR",
                   help="extract the bundle here and keep it, with an @EXPLICIT file for conda "
                        "(default: a temporary directory)")
    p.add_argument("--host-root", type=Path, default=Path("/"), metavar="DIR",
                   help="read the node's GPUs and ROCm below DIR instead of / (a container with the host mounted)")
    p.add_argument("--json", action="store_true", help="print what was installed and the probe's verdict as JSON")


def _cmd_unpack(args: argparse.Namespace) -> int:
    from rocmlock.unpack import unpack_bundle

    result = unpack_bundle(args.bundle, args.prefix, force=args.force, verify=not args.no_verify,
                           root=args.host_root, extract_dir=args.extract_dir, log=_err)
    if args.json:
        _print_json(result.to_dict())
    if result.explicit is not None:
        _err(f"conda users: `conda create -p DIR --file {result.explicit}` installs the same packages")
    if result.probe is None:
        return 0
    _err(f"> {result.probe.command}")
    _err(result.probe.summary)
    if not result.ok:
        _err(f"error: the environment is installed at {result.prefix}, but its probe failed; it stays installed "
             f"(run `{result.probe.command.removesuffix(' --json')}` there for the full report)")
        return 1
    return 0


# ----------------------------------------------------------------------------- main

_SUBCOMMANDS: list[tuple[str, str, Callable[[argparse.ArgumentParser], None], Handler]] = [
    ("plan", "which package variants the environments need, in build order", _add_plan, _cmd_plan),
    ("lock", "solve every environment x platform; write pixi.lock and envs/ exports", _add_lock, _cmd_lock),
    ("export", "regenerate envs/<env>/ conda (and PyPI) exports from any pixi.lock without solving", _add_export,
     _cmd_export),
    ("doctor", "check this host's ROCm toolchain before building or running", _add_doctor, _cmd_doctor),
    ("build", "build the plan's variants in dependency order (skips what exists, resumes)", _add_build, _cmd_build),
    ("sources", "fill (fetch) or check a source cache for building on a host without network", _add_sources,
     _cmd_sources),
    ("publish", "upload built packages to a channel (directory, S3, prefix.dev, quetz, artifactory, anaconda)",
     _add_publish, _cmd_publish),
    ("install", "create a conda prefix from pixi.lock with rattler (exactly the locked packages)", _add_install,
     _cmd_install),
    ("pack", "pack one locked environment into a verified bundle for nodes without a channel", _add_pack,
     _cmd_pack),
    ("unpack", "check a bundle and this node's GPU, install the bundle, run its probe", _add_unpack, _cmd_unpack),
    ("verify", "run the post-install probe with an environment's python", _add_verify, _cmd_verify),
    ("preset", "write a LLaMA-Factory training YAML tuned to an environment's GPU", _add_preset, _cmd_preset),
    ("outdated", "which upstream pins of recipes/variants.yaml are behind PyPI, and their companions",
     _add_outdated, _cmd_outdated),
    ("bump", "move upstream pins in recipes/variants.yaml (hashes, companions, llamafactory's bounds)",
     _add_bump, _cmd_bump),
]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for ``rocmlock``."""
    parser = argparse.ArgumentParser(
        prog="rocmlock",
        description="Per-GPU-target conda/pixi environments for LLM fine-tuning on AMD GPUs.",
    )
    parser.add_argument("--version", action="version", version=f"rocmlock {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, help_text, add, handler in _SUBCOMMANDS:
        p = sub.add_parser(name, help=help_text, description=help_text)
        add(p)
        p.set_defaults(handler=handler)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``rocmlock``; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args))
    except RocmlockError as exc:
        _err(f"error: {exc}")
        if exc.hint:
            _err(f"hint: {exc.hint}")
        return exc.exit_code
    except OSError as exc:  # a file rocmlock had to read or write: one line, never a traceback
        where = f"{exc.filename}: " if exc.filename else ""
        _err(f"error: {where}{exc.strerror or exc}")
        _err("hint: check that the path exists, is writable and the disk is not full")
        return 1
    except KeyboardInterrupt:
        _err("interrupted")
        return 130



def run() -> None:
    """Console entry point: ``main()``, then leave without interpreter finalization.

    py-rattler's background (tokio) threads can crash the interpreter while it shuts down (a segfault
    after the command finished, seen in about 1 in 10 runs of commands that index or solve); the exit
    code would then be 139 for a command that succeeded. Flushing and ``os._exit`` avoids it.
    """
    import os

    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    run()
