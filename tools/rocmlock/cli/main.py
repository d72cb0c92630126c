"""The command line: the only code that touches argv, output streams and exit codes.

Exit codes: 0 ok, 1 an operation failed, 2 bad input.
This module parses and dispatches; each subcommand is a pair ``add_<name>(parser)`` / ``cmd_<name>(args) -> int``
in the ``cli_*.py`` module of its group (``cli_build``: plan, doctor, build, sources, publish; ``cli_lock``: lock,
export; ``cli_env``: install, pack, unpack, verify, preset; ``cli_upstream``: outdated, bump), and
``cli_common`` holds their shared output helpers and options. Core modules take data, return data and raise
:class:`rocmlock.errors.RocmlockError`; the handlers import them when they run, so ``rocmlock --help`` stays quick.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from rocmlock import __version__
from rocmlock.cli import build as cli_build
from rocmlock.cli import env as cli_env
from rocmlock.cli import lock as cli_lock
from rocmlock.cli import upstream as cli_upstream
from rocmlock.cli.common import err
from rocmlock.errors import RocmlockError

Handler = Callable[[argparse.Namespace], int]

_SUBCOMMANDS: list[tuple[str, str, Callable[[argparse.ArgumentParser], None], Handler]] = [
    ("plan", "which package variants the environments need, in build order", cli_build.add_plan,
     cli_build.cmd_plan),
    ("variants", "write the GPU variant keys of recipes/variants.yaml from the data tables (--write, --check)",
     cli_build.add_variants, cli_build.cmd_variants),
    ("lock", "solve every environment x platform; write pixi.lock and envs/ exports", cli_lock.add_lock,
     cli_lock.cmd_lock),
    ("export", "regenerate envs/<env>/ conda (and PyPI) exports from any pixi.lock without solving",
     cli_lock.add_export, cli_lock.cmd_export),
    ("doctor", "check this host's ROCm toolchain before building or running", cli_build.add_doctor,
     cli_build.cmd_doctor),
    ("build", "build the plan's variants in dependency order (skips what exists, resumes)", cli_build.add_build,
     cli_build.cmd_build),
    ("sources", "fill (fetch) or check a source cache for building on a host without network",
     cli_build.add_sources, cli_build.cmd_sources),
    ("publish", "upload built packages to a channel (directory, S3, prefix.dev, quetz, artifactory, anaconda)",
     cli_build.add_publish, cli_build.cmd_publish),
    ("install", "create a conda prefix from pixi.lock with rattler (exactly the locked packages)",
     cli_env.add_install, cli_env.cmd_install),
    ("pack", "pack one locked environment into a verified bundle for nodes without a channel", cli_env.add_pack,
     cli_env.cmd_pack),
    ("unpack", "check a bundle and this node's GPU, install the bundle, run its probe", cli_env.add_unpack,
     cli_env.cmd_unpack),
    ("verify", "run the post-install probe with an environment's python", cli_env.add_verify, cli_env.cmd_verify),
    ("preset", "write a LLaMA-Factory training YAML tuned to an environment's GPU", cli_env.add_preset,
     cli_env.cmd_preset),
    ("outdated", "which upstream pins of recipes/variants.yaml are behind PyPI, and their companions",
     cli_upstream.add_outdated, cli_upstream.cmd_outdated),
    ("bump", "move upstream pins in recipes/variants.yaml (hashes, companions, llamafactory's bounds)",
     cli_upstream.add_bump, cli_upstream.cmd_bump),
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
        err(f"error: {exc}")
        if exc.hint:
            err(f"hint: {exc.hint}")
        return exc.exit_code
    except OSError as exc:  # a file rocmlock had to read or write: one line, never a traceback
        where = f"{exc.filename}: " if exc.filename else ""
        err(f"error: {where}{exc.strerror or exc}")
        err("hint: check that the path exists, is writable and the disk is not full")
        return 1
    except KeyboardInterrupt:
        err("interrupted")
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
