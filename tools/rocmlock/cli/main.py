"""The command line: the only code that touches argv, output streams and exit codes.

Exit codes: 0 ok, 1 an operation failed, 2 bad input.
This module parses and dispatches; each subcommand is a pair ``add_<name>(parser)`` / ``cmd_<name>(args) -> int``
in the module of its group (``rocmlock.cli.build``: plan, doctor, build, sources, publish; ``.lock``: lock,
export, diff; ``.env``: install, pack, image, unpack, audit, verify, report, preset; ``.upstream``: outdated,
bump), imported only when one of its commands runs, and ``rocmlock.cli.common`` holds their shared output helpers
and options. Core modules
take data, return data and raise :class:`rocmlock.errors.RocmlockError`; the handlers import them when they run,
so ``rocmlock --help`` stays quick and a command loads only its own stage.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import re
import sys
from collections.abc import Callable, Container, Sequence
from pathlib import Path
from typing import NoReturn

from rocmlock import __version__
from rocmlock.cli.common import err, shown
from rocmlock.errors import RocmlockError
from rocmlock.util.tables import did_you_mean

Handler = Callable[[argparse.Namespace], int]


class UsageError(Exception):
    """A command line argparse refused; raised instead of argparse's exit so that main adds what would help."""

    def __init__(self, parser: argparse.ArgumentParser, message: str) -> None:
        super().__init__(message)
        self.parser = parser
        self.message = message


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose errors reach :func:`main` (the subcommands' parsers are of this class too)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(self, message)

# name, one-line help, the module of its group. `rocmlock lock ...` imports rocmlock.cli.lock alone (and, when
# its handler runs, the lock stage): the other groups' modules, and the stages they import, stay unloaded.
_SUBCOMMANDS: list[tuple[str, str, str]] = [
    ("plan", "which package variants the environments need, in build order", "build"),
    ("variants", "write the GPU variant keys of recipes/variants.yaml from the data tables (--write, --check)",
     "build"),
    ("lock", "solve every environment x platform; write pixi.lock and envs/ exports", "lock"),
    ("export", "regenerate envs/<env>/ conda (and PyPI) exports from any pixi.lock without solving", "lock"),
    ("diff", "what changed between two pixi.lock files, as pixi's diff JSON or pixi-diff-to-markdown's tables",
     "lock"),
    ("doctor", "check this host's ROCm toolchain before building or running", "build"),
    ("build", "build the plan's variants in dependency order (skips what exists, resumes)", "build"),
    ("sources", "fill (fetch) or check a source cache for building on a host without network", "build"),
    ("publish", "upload built packages to a channel (directory, S3, prefix.dev, quetz, artifactory, anaconda)",
     "build"),
    ("install", "create a conda prefix from pixi.lock with rattler (exactly the locked packages)", "env"),
    ("pack", "pack one locked environment into a verified bundle for nodes without a channel", "env"),
    ("image", "build an OCI image of one locked environment (a layout directory, or push it to a registry)", "env"),
    ("unpack", "check a bundle and this node's GPU, install the bundle, run its probe", "env"),
    ("audit", "which files hold GPU code, for which targets; exit 1 naming those that cannot run on the GPU",
     "env"),
    ("verify", "run the post-install probe with an environment's python", "env"),
    ("report", "merge many nodes' probe reports into one table: failures grouped, slow GPUs flagged", "env"),
    ("preset", "write a LLaMA-Factory training YAML tuned to an environment's GPU", "env"),
    ("outdated", "which upstream pins of recipes/variants.yaml are behind PyPI, and their companions", "upstream"),
    ("bump", "move upstream pins in recipes/variants.yaml (hashes, companions, llamafactory's bounds)", "upstream"),
]
COMMANDS = tuple(name for name, _, _ in _SUBCOMMANDS)


def build_parser(full: Container[str] | None = None) -> argparse.ArgumentParser:
    """The argument parser for ``rocmlock``.

    ``full`` names the subcommands whose options are added (every one when None: the docs' reference and the
    tests); the others are listed by name and help only, which is all ``rocmlock --help`` and an unknown
    command's error need, so their modules are not imported.
    """
    parser = _Parser(
        prog="rocmlock",
        description="Per-GPU-target conda/pixi environments for LLM fine-tuning on AMD GPUs.",
    )
    parser.add_argument("--version", action="version", version=f"rocmlock {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, help_text, group in _SUBCOMMANDS:
        p = sub.add_parser(name, help=help_text, description=help_text)
        if full is None or name in full:
            module = importlib.import_module(f"rocmlock.cli.{group}")
            getattr(module, f"add_{name}")(p)
            p.set_defaults(handler=getattr(module, f"cmd_{name}"))
    return parser


def _command(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` runs: its first word that is not an option (only options come before it)."""
    return next((a for a in argv if not a.startswith("-")), None)


def _subparser(parser: argparse.ArgumentParser, command: str | None) -> argparse.ArgumentParser:
    for action in parser._actions:  # argparse keeps its subparsers in the one _SubParsersAction
        if isinstance(action, argparse._SubParsersAction) and command in action.choices:
            return action.choices[command]  # type: ignore[no-any-return]
    return parser


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """``argv`` parsed; an argument the command does not take is the command's error (its usage, the nearest
    option), not the top-level parser's."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        sub = _subparser(parser, getattr(args, "command", None))
        options = [o for a in sub._actions for o in a.option_strings]
        first = next((e for e in extra if e.startswith("-")), extra[0])
        close = difflib.get_close_matches(first.split("=", 1)[0], options, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise UsageError(sub, f"unrecognized arguments: {' '.join(extra)}{hint}")
    return args


def _manifest_hint(argv: list[str]) -> str:
    """Which environments -e can name, for the manifest ``argv`` names (or the one pixi would find)."""
    from rocmlock.cli.env import environments_hint

    pre = _Parser(add_help=False)
    pre.add_argument("--manifest-path", type=Path, default=None)
    try:
        given = pre.parse_known_args(argv)[0].manifest_path
    except UsageError:
        given = None
    return environments_hint(given or _discovered_manifest())


def _unknown_option(parser: argparse.ArgumentParser, argv: list[str]) -> str | None:
    """The first option of ``argv`` that ``parser`` does not take (nor takes as an abbreviation), with the nearest
    it does take: a mistyped ``--prefx X`` makes argparse report only the ``--prefix`` it then misses."""
    options = [o for a in parser._actions for o in a.option_strings]
    for arg in argv:
        if arg == "--":
            break
        name = arg.split("=", 1)[0]
        if name.startswith("--") and not any(o.startswith(name) for o in options):
            close = difflib.get_close_matches(name, options, n=1)
            return f"unrecognized option {name}" + (f" (did you mean {close[0]}?)" if close else "")
    return None


def _usage_error(exc: UsageError, argv: list[str]) -> int:
    """argparse's message under the usage of the command it is about, and a hint where one can be given."""
    if exc.message == "the following arguments are required: COMMAND":  # bare `rocmlock`: what it can do
        sys.stderr.write(exc.parser.format_help())
        err(f"{exc.parser.prog}: error: no command given; pick one of the commands above "
            "(`rocmlock COMMAND --help` for its options)")
        return 2
    sys.stderr.write(exc.parser.format_usage())
    message = exc.message
    if message.startswith("the following arguments are required:"):
        message = _unknown_option(exc.parser, argv) or message
    choice = re.match(r"argument COMMAND: invalid choice: '([^']*)'", message)
    if choice:
        message += did_you_mean(choice.group(1), COMMANDS)
    err(f"{exc.parser.prog}: error: {shown(message)}")
    if message.startswith("the following arguments are required:") and "-e/--environment" in message:
        err(f"hint: {shown(_manifest_hint(argv))}")
    return 2


def _discovered_manifest() -> Path:
    """The manifest pixi would use here, or ./pixi.toml (whose absence the command reports) when there is none."""
    from rocmlock.workspace.pyproject import discover_manifest

    return discover_manifest(Path.cwd()) or Path("pixi.toml")


def _no_encoding_errors() -> None:
    """A name from a lock or a package in a terminal that cannot show it (``LC_ALL=C``: Python writes ASCII) is
    written as ``\\xf3``, as Python writes it on stderr, never a UnicodeEncodeError traceback."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)  # a test's capture may not be a TextIOWrapper
        if reconfigure is not None and (stream.encoding or "").lower().replace("-", "") != "utf8":
            reconfigure(errors="backslashreplace")


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``rocmlock``; returns the exit code."""
    _no_encoding_errors()
    args_list = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser({_command(args_list) or ""})
    try:
        args = _parse(parser, args_list)
    except UsageError as exc:
        return _usage_error(exc, args_list)
    try:
        # No --manifest-path: look for it as pixi does, unless the command reads none by default (`diff`).
        if getattr(args, "manifest_path", "") is None and not getattr(args, "manifest_optional", False):
            args.manifest_path = _discovered_manifest()
        code = int(args.handler(args))
        sys.stdout.flush()  # here, so that a reader gone (EPIPE) is met below, not in run()'s final flush
        return code
    except BrokenPipeError:
        return _reader_gone()
    except RocmlockError as exc:
        # A name from a bundle or a lock may hold a newline or an escape sequence: one line, nothing moved.
        # Bounded too: a message may quote a value of any length (a 1 MB platform key).
        err(f"error: {shown(str(exc))}")
        for line in exc.details:  # each on a line of its own, escaped as the message is
            err(f"  {shown(line)}")
        if exc.hint:
            err(f"hint: {shown(exc.hint)}")
        return exc.exit_code
    except OSError as exc:  # a file rocmlock had to read or write: one line, never a traceback
        where = f"{exc.filename}: " if exc.filename else ""
        err(f"error: {shown(where + str(exc.strerror or exc))}")
        err("hint: check that the path exists, is writable and the disk is not full")
        return 1
    except KeyboardInterrupt:
        err("interrupted")
        return 130


def _reader_gone() -> int:
    """stdout's reader closed it (``rocmlock diff --json | head``): a normal end, not an error to report. As the
    Python docs' "Note on SIGPIPE" (library/signal.html) does: point stdout at /dev/null so that the interpreter's
    own flush cannot fail again, and exit 1 with no message (what Python does on EPIPE)."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 1


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
