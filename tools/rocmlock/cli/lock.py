"""The ``lock`` and ``export`` commands: pixi.lock and the envs/ exports, and how their changes are reported."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from rocmlock.cli.common import env_arg, err, manifest_arg, print_json, warn, without_cycle_collector
from rocmlock.errors import RocmlockError
from rocmlock.util.credentials import redact_text

if TYPE_CHECKING:  # the handlers import core modules when they run, so `rocmlock --help` stays quick
    from rocmlock.lock.result import LockResult


def add_lock(p: argparse.ArgumentParser) -> None:
    manifest_arg(p)
    env_arg(p)
    p.add_argument("-p", "--platform", action="append", default=[], dest="platforms", metavar="PLATFORM",
                   help="only this platform (repeatable; default: all)")
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 and list each stale output if anything would change")
    p.add_argument("--update", nargs="*", metavar="PKG", default=None,
                   help="let these packages (all when none are named) move to newer versions")
    p.add_argument("--discard-lock", action="store_true",
                   help="ignore pixi.lock (unreadable or merge-conflicted too) and re-solve every environment from "
                        "pixi.toml; says how many pins it drops (with --check: writes nothing)")
    _diff_output(p, "pixi.lock's changes", " and rocmlock's own keys beside it")


def _diff_output(p: argparse.ArgumentParser, what: str, extra: str = "") -> None:
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true",
                     help=f"print {what} as JSON on stdout: pixi's diff (`pixi update --json`: version, "
                          f"environment){extra}")
    out.add_argument("--markdown", action="store_true",
                     help=f"print {what} on stdout as the markdown tables pixi-diff-to-markdown makes (one per "
                          "environment and platform), for a pull request comment")


def _print_pixi_json(data: dict[str, object]) -> None:
    # Not print_json: pixi's key order (version, environment; name, before, after, type) is kept, as pixi prints it.
    from rocmlock.util.jsonwrite import dumps_indented  # json.dumps(data, indent=2), faster (issue 40)

    print(dumps_indented(data))


def _report_lock(result: LockResult, args: argparse.Namespace, verb: str) -> int:
    data = result.to_json(diff=args.json)  # the diff is built only to be printed
    if args.json:
        _print_pixi_json(data)
    if getattr(args, "markdown", False):
        print(result.markdown())
    for warning in result.warnings:
        warn(warning)
    if result.discarded is not None:
        would = "would drop" if args.check else "dropped"
        err(f"--discard-lock: {would} the {result.discarded} pin(s) of pixi.lock; every environment re-solved "
            "from pixi.toml")
    if lines := result.change_lines():
        err("\n".join(lines))  # one write: a fresh lock of four GPU environments lists thousands
    if result.not_locked:
        missing = ", ".join(f"{env} [{plat}]" for env, plat in result.not_locked)
        warn(f"pixi.lock does not hold {missing}; `pixi install --locked` refuses a lock without every "
             "environment: run `rocmlock lock` without -e/-p")
    gone = set(data["no_longer_generated"])
    if args.check:
        root = result.manifest.parent
        for path in data["stale"]:
            # A file not written yet (a new environment's exports, a first lock) is missing, not out of date.
            state = "stale" if path in gone or (root / path).exists() else "missing"
            err(f"{state}: {path} (no longer generated)" if path in gone else f"{state}: {path}")
        err("up to date" if result.up_to_date else f"{len(data['stale'])} output(s) would change; run `rocmlock {verb}`")
        return 0 if result.up_to_date else 1
    written = len(data["stale"]) - len(gone)
    removed = f", removed {len(gone)} no longer generated" if gone else ""
    err(f"wrote {written} file(s){removed}" if result.written else "up to date, nothing written")
    return 0


def _json_on_failure(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """With ``--json``, a failure also prints a JSON object on stdout (``error``, ``hint``, ``details``,
    ``exit_code``) before the CLI reports it on stderr as usual, so a script reading stdout never gets nothing."""
    def wrapped(args: argparse.Namespace) -> int:
        try:
            return run(args)
        except RocmlockError as exc:
            if args.json:
                print_json({"error": redact_text(str(exc)), "hint": redact_text(exc.hint or ""),
                            "details": [redact_text(line) for line in exc.details], "exit_code": exc.exit_code})
            raise
    return wrapped


@without_cycle_collector
@_json_on_failure
def cmd_lock(args: argparse.Namespace) -> int:
    if not (args.environments or args.platforms or args.update is not None or args.discard_lock):
        from rocmlock.lock.noop import lock_if_unchanged

        # Nothing changed since the last full lock: answered without loading the solver (rocmlock.lock.noop).
        same = lock_if_unchanged(args.manifest_path, on_wait=err)
        if same is not None:
            return _report_lock(same, args, "lock")
    from rocmlock.lock.pipeline import lock_workspace

    result = lock_workspace(args.manifest_path, environments=args.environments or None,
                            platforms=args.platforms or None, update=args.update, check=args.check,
                            on_wait=err, discard_lock=args.discard_lock)
    return _report_lock(result, args, "lock --discard-lock" if args.discard_lock else "lock")


def add_export(p: argparse.ArgumentParser) -> None:
    manifest_arg(p)
    env_arg(p)
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if an export is stale")
    p.add_argument("--skip-source", action="store_true",
                   help="leave out source packages (pixi-build, git/path PyPI dependencies) with a warning "
                        "instead of refusing")
    p.add_argument("--json", action="store_true", help="print the result as JSON on stdout")


@without_cycle_collector
@_json_on_failure
def cmd_export(args: argparse.Namespace) -> int:
    from rocmlock.lock.pipeline import export_workspace

    result = export_workspace(args.manifest_path, environments=args.environments or None, check=args.check,
                              skip_source=args.skip_source, on_wait=err)
    return _report_lock(result, args, "export")


def add_diff(p: argparse.ArgumentParser) -> None:
    p.add_argument("old", metavar="OLD", help="the pixi.lock before (e.g. `git show origin/main:pixi.lock > old.lock`)")
    p.add_argument("new", metavar="NEW", help="the pixi.lock after")
    p.add_argument("--manifest-path", type=Path, default=None,
                   help="mark the packages this pixi.toml names as explicit, as `rocmlock lock --json` does "
                        "(default: none is)")
    p.set_defaults(manifest_optional=True)  # cli.main: no pixi.toml is looked for when --manifest-path is not given
    _diff_output(p, "the changes")


def cmd_diff(args: argparse.Namespace) -> int:
    from rocmlock.lock.pipeline import diff_workspace_locks
    from rocmlock.lockdiff.diff import diff_json, diff_markdown, diff_text

    diff = diff_workspace_locks(Path(args.old), Path(args.new), args.manifest_path)
    if args.json:
        _print_pixi_json(diff_json(diff))
    elif args.markdown:
        print(diff_markdown(diff))
    else:
        print("\n".join(diff_text(diff)) or "no changes")
    return 0
