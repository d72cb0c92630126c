"""What every command of the CLI shares: its output streams and the options several commands take.

Part of the command line (``cli.py`` and the ``cli_*.py`` modules), the only code that prints; the core
modules take data, return data and raise.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rocmlock.util.credentials import redact_text
from rocmlock.util.text import bounded_line


def err(message: str) -> None:
    """A line for people on stderr, with any credential in it redacted."""
    print(redact_text(message), file=sys.stderr)


def shown(text: str) -> str:
    """``text`` for one line of an error or a warning: credentials redacted, then escaped and bounded
    (:func:`rocmlock.util.text.bounded_line`). In that order: a cut through a URL leaves ``https://bob:s3`` that
    the redaction no longer reads as a URL with a password."""
    return bounded_line(redact_text(text))


def warn(message: str) -> None:
    """``warning: <message>`` on one bounded line (:func:`shown`): a warning may quote a name of any length from
    pixi.toml or a lock."""
    err(f"warning: {shown(message)}")


def without_cycle_collector(handler: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """``handler`` run with Python's cyclic garbage collector off, and on again after (if it was on).

    For the commands that turn a solve into files (``lock``, ``export``; issue 40): they allocate hundreds of
    thousands of containers that live until the process ends (records, their strings, the rendered outputs), and
    each of CPython's gen-2 collections walks all of them again; the few cycles they make are freed at exit anyway
    (the command is one short process). A fresh lock of the 30,056-record bench spent 0.05 s in the collector
    (12 gen-1 passes and one gen-2, timed with ``gc.callbacks``), 0.002 s with it off; peak RSS unchanged
    (262-274 MiB either way). Mercurial's ``util.nogc`` does the same for its bulk reads.
    """
    @functools.wraps(handler)
    def run(args: argparse.Namespace) -> int:
        enabled = gc.isenabled()
        gc.disable()
        try:
            return handler(args)
        finally:
            if enabled:
                gc.enable()
    return run


def print_json(data: Any) -> None:
    """Machine output on stdout: sorted, indented JSON."""
    print(json.dumps(data, indent=2, sort_keys=True))


def print_report(args: argparse.Namespace, data: Any, text: str) -> None:
    """With ``--json`` the data on stdout, else the text for people."""
    if args.json:
        print_json(data)
    else:
        print(text)


def manifest_arg(parser: argparse.ArgumentParser) -> None:
    """``--manifest-path``: the workspace's pixi.toml."""
    parser.add_argument("--manifest-path", type=Path, default=None,
                        help="the workspace's pixi.toml (default: found as pixi finds it, in this directory or the "
                             "nearest parent with a workspace's pixi.toml or pyproject.toml)")


class Once(argparse.Action):
    """An option that names one thing (the environment of ``pack``, a ``--prefix``): given twice it is an error,
    not the last one silently (``pack -e mi300x -e mi250`` packed mi250 alone, while ``-e`` repeats on ``lock``)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        seen: set[str] = namespace.__dict__.setdefault("_once_given", set())
        if self.dest in seen:
            parser.error(f"{'/'.join(self.option_strings)} given twice: this command takes one")
        seen.add(self.dest)
        setattr(namespace, self.dest, values)


def env_arg(parser: argparse.ArgumentParser, multiple: bool = True, required: bool = False) -> None:
    """``-e/--environment``: repeatable into ``args.environments``, or one into ``args.environment``."""
    if multiple:
        parser.add_argument("-e", "--environment", action="append", default=[], dest="environments",
                            metavar="ENV", help="only this environment (repeatable; default: all)")
    else:
        parser.add_argument("-e", "--environment", dest="environment", metavar="ENV", required=required,
                            action=Once, help="the environment")


def platform_arg(parser: argparse.ArgumentParser) -> None:
    """``-p/--platform``: the one lock platform of a command that acts on one environment."""
    parser.add_argument("-p", "--platform", dest="platform", metavar="PLATFORM", action=Once,
                        help="the lock platform (default: the environment's only one)")


def recipes_arg(parser: argparse.ArgumentParser, what: str = "the recipes") -> None:
    """``--recipes-dir``: where the recipes are, recipes/ beside the manifest unless given."""
    parser.add_argument("--recipes-dir", type=Path, default=None,
                        help=f"{what} (default: recipes/ beside the manifest)")


def stage_arg(parser: argparse.ArgumentParser) -> None:
    """``--stage``: only one package's variants of the plan."""
    parser.add_argument("--stage", metavar="NAME", help="only the variants of this package (e.g. pytorch)")


def seconds(text: str) -> float:
    """An argparse ``type``: a number of seconds above 0 and below 10^9 (not ``inf``, ``nan``, 0 or negative,
    which the HTTP clients take for no limit or refuse with a traceback)."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < 1e9:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds > 0")
    return value


def bounded(low: float, high: float, kind: Callable[[str], float] = float) -> Callable[[str], float]:
    """An argparse ``type``: a number (``kind``: float or int) from ``low`` to ``high`` (``nan`` is not)."""
    def parse(text: str) -> float:
        try:
            value: float | None = kind(text)
        except ValueError:
            value = None
        if value is None or not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number from {low:g} to {high:g}")
        return value
    return parse
