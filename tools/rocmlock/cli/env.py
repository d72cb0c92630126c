"""The commands that put a locked environment on a machine and use it: ``install``, ``pack``, ``image``, ``unpack``,
``verify``, ``preset`` and ``audit``."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rocmlock.cli.common import (
    Once,
    bounded,
    env_arg,
    err,
    manifest_arg,
    platform_arg,
    print_json,
    print_report,
    seconds,
    warn,
)

if TYPE_CHECKING:  # the handlers import core modules when they run, so `rocmlock --help` stays quick
    from rocmlock.fleet.verify import ProbeTarget


def _locked_manifest(args: argparse.Namespace, command: str) -> Path:
    """The resolved manifest of a command that installs one ``-e`` environment from the pixi.lock beside it."""
    from rocmlock.lock.noop import manifest_file

    return manifest_file(args.manifest_path).resolve()  # -e is required (argparse; main adds the hint)


def environments_hint(manifest: Path) -> str:
    """Which environments ``-e`` can name: those of the manifest, or how to see them when it cannot be read."""
    from rocmlock.errors import InputError
    from rocmlock.workspace.manifest import load_workspace

    try:
        names = load_workspace(manifest).environment_names()
    except InputError:
        return f"pass -e ENV, one of the environments of {manifest}"
    return f"pass -e ENV, one of: {', '.join(names)}"


def add_install(p: argparse.ArgumentParser) -> None:
    manifest_arg(p)
    env_arg(p, multiple=False, required=True)
    platform_arg(p)
    p.add_argument("--prefix", action=Once, type=Path, required=True, metavar="DIR",
                   help="where to create the environment")
    p.add_argument("--json", action="store_true", help="print what was installed as JSON on stdout")


def cmd_install(args: argparse.Namespace) -> int:
    from rocmlock.lock.noop import LOCK_NAME
    from rocmlock.prefix.install import install_from_lock, left_out_warning, manifest_channels

    manifest = _locked_manifest(args, "install")
    result = install_from_lock(manifest.parent / LOCK_NAME, args.environment, args.prefix.resolve(),
                               args.platform, channels=manifest_channels(manifest), on_wait=err, say=err)
    if args.json:
        print_json(result.to_dict())
    if result.left_out:
        warn(left_out_warning(result.left_out, result.environment, result.platform, "installed"))
    if result.gpu_warning:
        warn(result.gpu_warning)
    err(f"installed {len(result.packages)} package(s) of '{result.environment}' [{result.platform}] "
        f"into {result.prefix}")
    return 0


def add_image(p: argparse.ArgumentParser) -> None:
    manifest_arg(p)
    env_arg(p, multiple=False, required=True)
    platform_arg(p)
    p.add_argument("--base", metavar="REF", help="the base image: oci:DIR[:TAG] (an OCI layout), REGISTRY/REPO:TAG "
                   "(fetched with skopeo), or debootstrap:SUITE[:PKG,...] (Debian minbase made here from "
                   "$ROCMLOCK_DEBIAN_MIRROR, cached; root the first time); it needs /bin/sh and a glibc the lock's "
                   "platform accepts")
    p.add_argument("--no-base", action="store_true", help="no base: the environment alone, which cannot run on its "
                   "own (a layer to COPY --from in a Dockerfile of yours)")
    p.add_argument("--prefix", action=Once, default="/opt/env", metavar="DIR",
                   help="where the environment lives in the image "
                   "(default /opt/env; pixi's layout: /app/.pixi/envs/<env>)")
    out = p.add_argument_group("where the image goes (one or both)")
    out.add_argument("-o", "--output", action=Once, type=Path, metavar="DIR",
                     help="write an OCI image layout directory (an existing layout gets the image added, its other "
                          "tags kept)")
    out.add_argument("--push", metavar="REGISTRY/REPO:TAG", help="push to a registry with skopeo (credentials: "
                     "`skopeo login`, docker's config.json or REGISTRY_AUTH_FILE; never on the command line)")
    out.add_argument("--sif", type=Path, metavar="FILE", help="also convert it to an Apptainer SIF (apptainer build "
                     "FILE oci:LAYOUT:TAG; apptainer must be installed)")
    p.add_argument("--tag", metavar="TAG", help="the tag in the layout (default: --push's tag, else the environment)")
    p.add_argument("--insecure-registry", action="store_true",
                   help="plain HTTP / unverified TLS to the registries (always so for 127.0.0.1 and localhost)")
    p.add_argument("--compression-level", type=bounded(1, 9, int), default=None, metavar="N",
                   help="gzip level of the environment's layer, 1 (fastest) to 9 (smallest); default 5, podman's "
                        "(each level gives the same bytes on every machine, another digest than the others)")
    p.add_argument("--json", action="store_true", help="print the image's digest, labels and size as JSON on stdout")


def cmd_image(args: argparse.Namespace) -> int:
    from rocmlock.errors import InputError
    from rocmlock.image.builder import build_image
    from rocmlock.image.hints import run_hints
    from rocmlock.lock.noop import LOCK_NAME
    from rocmlock.prefix.install import left_out_warning, manifest_channels
    from rocmlock.util.pgzip import zlib_note

    if args.output is None and args.push is None and args.sif is None:
        raise InputError("rocmlock image: nowhere to put the image",
                         hint="pass -o DIR, --push REGISTRY/REPO:TAG, --sif FILE, or several")
    manifest = _locked_manifest(args, "image")
    result = build_image(manifest.parent / LOCK_NAME, args.environment, platform=args.platform, base_ref=args.base,
                         output=args.output, push=args.push, tag=args.tag,
                         channels=manifest_channels(manifest), insecure=args.insecure_registry, prefix=args.prefix,
                         manifest=manifest, no_base=args.no_base, sif=args.sif.resolve() if args.sif else None,
                         level=args.compression_level)
    if args.json:
        print_json(result.to_dict())
    if result.left_out:
        warn(left_out_warning(result.left_out, result.environment, result.platform, "in the image"))
    where = " and ".join(w for w in (f"oci:{result.output}:{result.tag}" if result.output else "",
                                     f"pushed to {result.pushed}" if result.pushed else "",
                                     f"SIF {result.sif}" if result.sif else "") if w)
    err(f"image of '{result.environment}' [{result.platform}], {result.packages} package(s): {result.digest} ({where})")
    if note := zlib_note():
        err("note: " + note)
    for line in run_hints(result):
        err(line)
    return 0


def add_pack(p: argparse.ArgumentParser) -> None:
    manifest_arg(p)
    env_arg(p, multiple=False, required=True)
    platform_arg(p)
    p.add_argument("-o", "--output", action=Once, type=Path, metavar="FILE",
                   help="the bundle to write (default: ./<env>-<platform>.tar)")
    p.add_argument("--with-installer", action="store_true",
                   help="also add the wheels and install.sh that run `rocmlock unpack` on a node without rocmlock")
    p.add_argument("--sign", type=Path, metavar="KEY",
                   help="sign the bundle's metadata (every member's sha256) with this OpenSSH private key "
                        "(ssh-keygen -Y sign, namespace rocmlock-bundle)")
    p.add_argument("--ignore-pypi-non-wheel", action="store_true",
                   help="leave out PyPI packages that are not wheels (sdists, git or path dependencies) with a "
                        "warning instead of refusing the pack (pixi-pack's option)")
    p.add_argument("--read-timeout", type=seconds, default=60.0, metavar="S",
                   help="give up a download that sends no byte for S seconds (default: 60, conda's)")
    p.add_argument("--stall-timeout", type=seconds, default=300.0, metavar="S",
                   help="give up a download that sends less than 1 MB in S seconds (default: 300)")
    p.add_argument("--json", action="store_true", help="print what was packed as JSON on stdout")


def _may_be_terminal() -> bool:
    """Whether rich could take stderr for a terminal (rich's ``Console.is_terminal``: ``TTY_COMPATIBLE=1``, else a
    non-empty ``FORCE_COLOR``, else ``isatty``); when not, rich is not imported at all (its progress modules
    took about a tenth of a second of pack's start, for a bar that is then disabled)."""
    if os.environ.get("TTY_COMPATIBLE") == "1" or os.environ.get("FORCE_COLOR"):
        return True
    try:
        return sys.stderr.isatty()
    except ValueError:  # closed
        return False


class _DownloadProgress:
    """rich progress on stderr: bytes fetched of the lock's total, the rate and the time left."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )

        console = Console(stderr=True)
        # Not on a terminal (a log, CI): no bar, and no empty line where it was.
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                                 TransferSpeedColumn(), TimeRemainingColumn(), console=console, transient=True,
                                 disable=not console.is_terminal)
        self.task: Any = None

    def __call__(self, total: int, count: int) -> Callable[[int], None]:
        self.progress.start()
        self.task = self.progress.add_task(f"fetching {count} packages", total=total or None)
        return lambda n: self.progress.advance(self.task, n)

    def close(self) -> None:
        if self.task is not None:
            self.progress.stop()


def cmd_pack(args: argparse.Namespace) -> int:
    from rocmlock.bundle.pack import pack_environment
    from rocmlock.lock.noop import LOCK_NAME
    from rocmlock.prefix.fetch import Timeouts
    from rocmlock.prefix.install import left_out_warning, manifest_channels
    from rocmlock.util.credentials import client_for_urls

    manifest = _locked_manifest(args, "pack")
    _, client = client_for_urls(manifest_channels(manifest))
    progress = _DownloadProgress() if _may_be_terminal() else None
    try:
        result = pack_environment(manifest.parent / LOCK_NAME, args.environment, args.platform, args.output,
                                  with_installer=args.with_installer, client=client, sign=args.sign,
                                  timeouts=Timeouts(args.read_timeout, args.stall_timeout),
                                  ignore_pypi_non_wheel=args.ignore_pypi_non_wheel,
                                  progress=progress, log=err)
    finally:
        if progress is not None:
            progress.close()
    meta = result.metadata
    if args.json:
        print_json(result.to_dict())
    if result.left_out:
        warn("--ignore-pypi-non-wheel: " + left_out_warning(result.left_out, meta.environment, meta.platform,
                                                            "in the bundle"))
    wheels = f" and {result.wheels} PyPI wheel(s)" if result.wheels else ""
    gpu = f"{meta.gpu_target}, ROCm {meta.rocm_version}" if meta.gpu_target else "no GPU target"
    err(f"packed {len(meta.packages)} package(s){wheels} of '{meta.environment}' [{meta.platform}; {gpu}] into "
        f"{result.output} ({result.size / 1e6:.1f} MB)")
    return 0


def add_unpack(p: argparse.ArgumentParser) -> None:
    p.add_argument("bundle", type=Path, metavar="FILE", help="a bundle of `rocmlock pack` (or its extracted directory)")
    p.add_argument("--prefix", action=Once, type=Path, required=True, metavar="DIR",
                   help="where to create the environment")
    p.add_argument("--force", action="store_true",
                   help="install even when this node's GPU or ROCm does not match (never skips the integrity check)")
    p.add_argument("--no-verify", action="store_true", help="do not run the environment's probe afterwards")
    p.add_argument("--extract-dir", type=Path, metavar="DIR",
                   help="extract the bundle here and keep it, with an @EXPLICIT file for conda "
                        "(default: a temporary directory)")
    p.add_argument("--host-root", type=Path, default=Path("/"), metavar="DIR",
                   help="read the node's GPUs and ROCm below DIR instead of / (a container with the host mounted)")
    p.add_argument("--trusted-signers", type=Path, metavar="FILE",
                   help="install only a bundle whose metadata is signed by a key of this OpenSSH allowed_signers "
                        "file (ssh-keygen -Y verify); --force never skips this")
    p.add_argument("--json", action="store_true", help="print what was installed and the probe's verdict as JSON")


def cmd_unpack(args: argparse.Namespace) -> int:
    from rocmlock.bundle.unpack import unpack_bundle

    result = unpack_bundle(args.bundle, args.prefix, force=args.force, verify=not args.no_verify,
                           root=args.host_root, extract_dir=args.extract_dir,
                           trusted_signers=args.trusted_signers, log=err)
    if args.json:
        print_json(result.to_dict())
    if result.explicit is not None:
        err(f"conda users: `conda create -p DIR --file {result.explicit}` installs the same packages")
    if result.probe is None:
        return 0
    err(f"> {result.probe.command}")
    err(result.probe.summary)
    if not result.ok:
        err(f"error: the environment is installed at {result.prefix}, but its probe failed; it stays installed "
            f"(run `{result.probe.command.removesuffix(' --json')}` there for the full report)")
        return 1
    return 0


def add_verify(p: argparse.ArgumentParser) -> None:
    manifest_arg(p)
    env_arg(p, multiple=False)
    p.add_argument("--prefix", action=Once, type=Path, metavar="DIR",
                   help="a conda environment's prefix instead of a pixi environment (default: $CONDA_PREFIX)")
    p.add_argument("--image", type=Path, metavar="SIF", help="run the check inside this Apptainer image of `rocmlock "
                   "image --sif` (apptainer exec --rocm SIF /opt/rocmlock/check), with -e ENV's expectations")
    p.add_argument("--json", action="store_true", help="print the probe's report as JSON on stdout")
    p.add_argument("--bench", action="store_true", help="also measure bf16 GEMM TFLOP/s against the GPU's peak")
    p.add_argument("--train", action="store_true", help="also run a LoRA smoke training on a tiny local model")
    slurm = p.add_argument_group("a fleet through Slurm (the environment at the same path on every node)")
    slurm.add_argument("--slurm", action="store_true", help="run the probe on every node of one srun step, then "
                       "merge the reports as `rocmlock report` does")
    nodes = slurm.add_mutually_exclusive_group()
    nodes.add_argument("--nodes", type=int, metavar="N", help="this many nodes (srun --nodes)")
    nodes.add_argument("--nodelist", metavar="LIST", help="these nodes (srun --nodelist, e.g. gpu[01-16])")
    slurm.add_argument("--partition", metavar="P", help="srun --partition")
    slurm.add_argument("--time", metavar="T", help="srun --time (e.g. 15:00)")
    slurm.add_argument("--reports", type=Path, metavar="DIR",
                       help="where the nodes' reports go (default: ./verify-<env>; emptied first)")
    _min_ratio_arg(slurm)
    slurm.add_argument("srun_args", nargs="*", metavar="-- SRUN_ARGS", help="more srun options, after --")


def _min_ratio_arg(p: argparse._ActionsContainer) -> None:
    p.add_argument("--min-gemm-ratio", type=float, default=0.8, metavar="R",
                   help="flag a node below R x the fleet's median GEMM TFLOP/s, or above its median train step "
                        "time / R (default 0.8)")


def cmd_verify(args: argparse.Namespace) -> int:
    import os

    from rocmlock.errors import InputError
    from rocmlock.fleet.verify import probe_command, resolve_target, run_probe
    from rocmlock.util.runner import format_argv

    if not args.slurm and (args.srun_args or args.nodes is not None or args.nodelist or args.partition or args.time
                           or args.reports):
        raise InputError("--nodes, --nodelist, --partition, --time, --reports and srun options go with --slurm",
                         hint="add --slurm, or leave them out")
    if args.image is not None:
        return _verify_image(args)
    target = resolve_target(args.manifest_path, args.environment, args.prefix, os.environ.get("CONDA_PREFIX"))
    if args.slurm:
        return _verify_slurm(args, target)
    cmd = probe_command(target, json_out=args.json, bench=args.bench, train=args.train)
    err(f"> {format_argv(cmd)}")
    return run_probe(cmd)


def _verify_image(args: argparse.Namespace) -> int:
    from rocmlock.fleet.verify import probe_command, run_probe
    from rocmlock.image.sif import image_target, require_image
    from rocmlock.util.runner import format_argv

    image = require_image(args.image, args.prefix, slurm=args.slurm)
    target = image_target(args.manifest_path, args.environment, args.image)
    if args.slurm:
        return _verify_slurm(args, target, image)
    cmd = probe_command(target, json_out=args.json, bench=args.bench, train=args.train, image=image)
    err(f"> {format_argv(cmd)}")
    return run_probe(cmd)


def _verify_slurm(args: argparse.Namespace, target: ProbeTarget, image: list[str] | None = None) -> int:
    from rocmlock.fleet.report import render_fleet
    from rocmlock.fleet.slurm_verify import SlurmOptions, verify_fleet
    from rocmlock.fleet.verify import probe_command

    opts = SlurmOptions(args.nodes, args.nodelist, args.partition, args.time, tuple(args.srun_args))
    reports = args.reports or Path(f"verify-{args.environment or target.prefix.name}")
    cmd = probe_command(target, json_out=True, bench=args.bench, train=args.train, prefer_prefix=True,
                        image=image or ())
    fleet = verify_fleet(cmd, opts, reports.resolve(), args.min_gemm_ratio, err)
    print_report(args, fleet.to_dict(), render_fleet(fleet))
    return 0 if fleet.ok else 1


def add_report(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="+", type=Path, metavar="PATH",
                   help="probe reports (rocm-env-check --json, one per node) or directories of *.json")
    p.add_argument("--json", action="store_true", help="print the merged report as JSON on stdout")
    _min_ratio_arg(p)


def cmd_report(args: argparse.Namespace) -> int:
    from rocmlock.fleet.report import fleet_report, render_fleet

    fleet = fleet_report(args.paths, args.min_gemm_ratio)
    for bad in fleet.unreadable if args.json else ():  # the table lists them too
        warn(f"{bad.source}: {bad.reason}")
    print_report(args, fleet.to_dict(), render_fleet(fleet))
    return 0 if fleet.ok else 1


def add_preset(p: argparse.ArgumentParser) -> None:
    manifest_arg(p)
    env_arg(p, multiple=False, required=True)
    p.add_argument("--method", required=True, choices=["lora", "qlora", "full"],
                   help="LoRA, QLoRA (4-bit bitsandbytes) or full fine-tuning")
    p.add_argument("--model", default=None, metavar="PATH",
                   help="model_name_or_path: a local directory or a hub id (default: Qwen/Qwen2.5-7B-Instruct)")
    p.add_argument("--template", default=None, help="LLaMA-Factory chat template of the model (default: qwen)")
    p.add_argument("--dataset", default=None, help="LLaMA-Factory dataset name(s) (default: alpaca_en_demo)")
    p.add_argument("-o", "--output", action=Once, type=Path, default=None, metavar="FILE",
                   help="the YAML to write (default: presets/<env>-<method>.yaml beside pixi.toml; "
                        "presets/<env>.yaml when <env> ends in -<method>)")
    p.add_argument("--gpu-memory", default=None, metavar="SIZE",
                   help="the GPU's memory, e.g. 48GiB (default: that of the target's smallest product, "
                        "e.g. 24 GiB for gfx1100: a Radeon PRO W7900 has 48)")
    p.add_argument("--json", action="store_true", help="print what was written and why as JSON on stdout")


def cmd_preset(args: argparse.Namespace) -> int:
    from rocmlock.errors import InputError
    from rocmlock.train.preset import (
        DEFAULT_DATASET,
        DEFAULT_MODEL,
        DEFAULT_TEMPLATE,
        PresetRequest,
        make_preset,
        parse_gpu_memory,
        write_preset,
    )
    from rocmlock.workspace.manifest import load_workspace

    memory = parse_gpu_memory(args.gpu_memory) if args.gpu_memory is not None else None
    for flag, value in (("--model", args.model), ("--template", args.template), ("--dataset", args.dataset)):
        # One line of the YAML each: a newline would make it another key's text, an escape sequence would reach
        # the terminal with the notes; an empty one was the default without a word.
        if value is not None and (not value.strip() or not value.isprintable()):
            raise InputError(f"{flag} {value!r}: " + ("empty" if not value.strip() else
                                                      "holds a control character (a newline, an escape)"),
                             hint=f"leave {flag} out for the default, or give one line of text")
    request = PresetRequest(args.environment, args.method, args.model or DEFAULT_MODEL,
                            args.template or DEFAULT_TEMPLATE, args.dataset or DEFAULT_DATASET, args.output,
                            memory)
    preset = make_preset(load_workspace(args.manifest_path), request)
    write_preset(preset)
    for note in preset.notes:
        err(note)
    for path in preset.files():
        err(f"wrote {path}")
    err(f"train with: {preset.train_command()}")
    if args.json:
        print_json(preset.to_json())
    return 0


def add_audit(p: argparse.ArgumentParser) -> None:
    p.add_argument("source", nargs="?", type=Path, metavar="BUNDLE",
                   help="a bundle of `rocmlock pack` (tar or extracted directory) or one package file")
    p.add_argument("--prefix", action=Once, type=Path, metavar="DIR",
                   help="an installed environment instead of a bundle")
    p.add_argument("--target", metavar="GFX", help="the GPU to check against, e.g. gfx942 or gfx942:xnack- "
                   "(default: the prefix's amdgpu-target package, the bundle's target or the build string's)")
    p.add_argument("--json", action="store_true", help="print every file with device code and the verdict as JSON")


def cmd_audit(args: argparse.Namespace) -> int:
    from rocmlock.bundle.audit import audit_path, audit_prefix
    from rocmlock.errors import InputError

    if (args.source is None) == (args.prefix is None):
        raise InputError("rocmlock audit takes a BUNDLE or --prefix DIR (one of them)",
                         hint="rocmlock audit BUNDLE, or rocmlock audit --prefix DIR")
    report = audit_prefix(args.prefix, args.target) if args.prefix else audit_path(args.source, args.target)
    print_report(args, report.to_dict(), report.render())
    return 0 if report.ok else 1
