"""The commands that put a locked environment on a machine and use it: ``install``, ``pack``, ``unpack``,
``verify``, ``preset`` and ``audit``."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rocmlock.cli.common import env_arg, err, manifest_arg, platform_arg, print_json, print_report


def _locked_manifest(args: argparse.Namespace, command: str) -> Path:
    """The resolved manifest of a command that installs one ``-e`` environment from the pixi.lock beside it."""
    from rocmlock.errors import InputError
    from rocmlock.lock.pipeline import manifest_file

    if not args.environment:
        raise InputError(f"rocmlock {command} needs -e/--environment")
    return manifest_file(args.manifest_path).resolve()


def add_install(p: argparse.ArgumentParser) -> None:
    manifest_arg(p)
    env_arg(p, multiple=False)
    platform_arg(p)
    p.add_argument("--prefix", type=Path, required=True, metavar="DIR", help="where to create the environment")
    p.add_argument("--json", action="store_true", help="print what was installed as JSON on stdout")


def cmd_install(args: argparse.Namespace) -> int:
    from rocmlock.deploy.install import install_from_lock, left_out_warning, manifest_channels
    from rocmlock.lock.pipeline import LOCK_NAME

    manifest = _locked_manifest(args, "install")
    result = install_from_lock(manifest.parent / LOCK_NAME, args.environment, args.prefix.resolve(),
                               args.platform, channels=manifest_channels(manifest))
    if args.json:
        print_json(result.to_dict())
    if result.left_out:
        err("warning: " + left_out_warning(result.left_out, result.environment, result.platform, "installed"))
    err(f"installed {len(result.packages)} package(s) of '{result.environment}' [{result.platform}] "
        f"into {result.prefix}")
    return 0


def add_pack(p: argparse.ArgumentParser) -> None:
    manifest_arg(p)
    env_arg(p, multiple=False)
    platform_arg(p)
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


def cmd_pack(args: argparse.Namespace) -> int:
    from rocmlock.deploy.install import left_out, left_out_warning, manifest_channels
    from rocmlock.deploy.pack import pack_environment
    from rocmlock.lock.pipeline import LOCK_NAME
    from rocmlock.util.credentials import client_for_urls

    manifest = _locked_manifest(args, "pack")
    _, client = client_for_urls(manifest_channels(manifest))
    progress = _DownloadProgress()
    try:
        result = pack_environment(manifest.parent / LOCK_NAME, args.environment, args.platform, args.output,
                                  with_installer=args.with_installer, client=client, progress=progress, log=err)
    finally:
        progress.close()
    meta = result.metadata
    if args.json:
        print_json(result.to_dict())
    missing = left_out(manifest.parent / LOCK_NAME, meta.environment, meta.platform)
    if missing:
        err("warning: " + left_out_warning(missing, meta.environment, meta.platform, "in the bundle"))
    gpu = f"{meta.gpu_target}, ROCm {meta.rocm_version}" if meta.gpu_target else "no GPU target"
    err(f"packed {len(meta.packages)} package(s) of '{meta.environment}' [{meta.platform}; {gpu}] into "
        f"{result.output} ({result.size / 1e6:.1f} MB)")
    return 0


def add_unpack(p: argparse.ArgumentParser) -> None:
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


def cmd_unpack(args: argparse.Namespace) -> int:
    from rocmlock.deploy.unpack import unpack_bundle

    result = unpack_bundle(args.bundle, args.prefix, force=args.force, verify=not args.no_verify,
                           root=args.host_root, extract_dir=args.extract_dir, log=err)
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
    p.add_argument("--prefix", type=Path, metavar="DIR",
                   help="a conda environment's prefix instead of a pixi environment (default: $CONDA_PREFIX)")
    p.add_argument("--json", action="store_true", help="print the probe's report as JSON on stdout")
    p.add_argument("--bench", action="store_true", help="also measure bf16 GEMM TFLOP/s against the GPU's peak")
    p.add_argument("--train", action="store_true", help="also run a LoRA smoke training on a tiny local model")


def cmd_verify(args: argparse.Namespace) -> int:
    import os

    from rocmlock.deploy.verify import probe_command, resolve_target, run_probe
    from rocmlock.util.runner import format_argv

    target = resolve_target(args.manifest_path, args.environment, args.prefix, os.environ.get("CONDA_PREFIX"))
    cmd = probe_command(target, json_out=args.json, bench=args.bench, train=args.train)
    err(f"> {format_argv(cmd)}")
    return run_probe(cmd)


def add_preset(p: argparse.ArgumentParser) -> None:
    manifest_arg(p)
    env_arg(p, multiple=False)
    p.add_argument("--method", required=True, choices=["lora", "qlora", "full"],
                   help="LoRA, QLoRA (4-bit bitsandbytes) or full fine-tuning")
    p.add_argument("--model", default=None, metavar="PATH",
                   help="model_name_or_path: a local directory or a hub id (default: Qwen/Qwen2.5-7B-Instruct)")
    p.add_argument("--template", default=None, help="LLaMA-Factory chat template of the model (default: qwen)")
    p.add_argument("--dataset", default=None, help="LLaMA-Factory dataset name(s) (default: alpaca_en_demo)")
    p.add_argument("-o", "--output", type=Path, default=None, metavar="FILE",
                   help="the YAML to write (default: presets/<env>-<method>.yaml beside pixi.toml)")
    p.add_argument("--json", action="store_true", help="print what was written and why as JSON on stdout")


def cmd_preset(args: argparse.Namespace) -> int:
    from rocmlock.deploy.preset import (
        DEFAULT_DATASET,
        DEFAULT_MODEL,
        DEFAULT_TEMPLATE,
        PresetRequest,
        make_preset,
        write_preset,
    )
    from rocmlock.errors import InputError
    from rocmlock.workspace.manifest import load_workspace

    if not args.environment:
        raise InputError("rocmlock preset needs an environment", hint="pass -e ENV (e.g. -e mi300x-qlora)")
    request = PresetRequest(args.environment, args.method, args.model or DEFAULT_MODEL,
                            args.template or DEFAULT_TEMPLATE, args.dataset or DEFAULT_DATASET, args.output)
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
    p.add_argument("--prefix", type=Path, metavar="DIR", help="an installed environment instead of a bundle")
    p.add_argument("--target", metavar="GFX", help="the GPU to check against, e.g. gfx942 or gfx942:xnack- "
                   "(default: the prefix's amdgpu-target package, the bundle's target or the build string's)")
    p.add_argument("--json", action="store_true", help="print every file with device code and the verdict as JSON")


def cmd_audit(args: argparse.Namespace) -> int:
    from rocmlock.deploy.audit import audit_path, audit_prefix
    from rocmlock.errors import InputError

    if (args.source is None) == (args.prefix is None):
        raise InputError("rocmlock audit takes a BUNDLE or --prefix DIR (one of them)")
    report = audit_prefix(args.prefix, args.target) if args.prefix else audit_path(args.source, args.target)
    print_report(args, report.to_dict(), report.render())
    return 0 if report.ok else 1
