"""The commands that follow upstream releases: ``outdated`` and ``bump`` (recipes/variants.yaml's pins)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rocmlock.cli.common import (
    bounded,
    err,
    manifest_arg,
    print_json,
    print_report,
    recipes_arg,
    seconds,
    shown,
    warn,
)
from rocmlock.errors import InputError, RocmlockError


def _upstream_args(p: argparse.ArgumentParser) -> None:
    manifest_arg(p)
    recipes_arg(p, "the recipes with variants.yaml")
    p.add_argument("--index-url", default=None, metavar="URL",
                   help="PyPI's JSON API root or a mirror's (default: https://pypi.org/pypi)")
    p.add_argument("--github-url", default=None, metavar="URL", help="GitHub (default: https://github.com)")
    p.add_argument("--github-api-url", default=None, metavar="URL",
                   help="GitHub's REST API (default: https://api.github.com)")
    p.add_argument("--github-raw-url", default=None, metavar="URL",
                   help="GitHub's raw files (default: https://raw.githubusercontent.com)")
    p.add_argument("--timeout", type=seconds, default=30.0, metavar="SECONDS", help="per request (default: 30)")
    p.add_argument("--retries", type=bounded(0, 100, int), default=3, help="retries of a failed request (default: 3)")
    p.add_argument("--backoff", type=bounded(0, 3600), default=0.5, metavar="SECONDS",
                   help="backoff factor between retries (default: 0.5: 0.5s, 1s, 2s, ...)")
    p.add_argument("--json", action="store_true", help="print the result as JSON on stdout")


def _client(args: argparse.Namespace) -> Any:
    from rocmlock.upstream.client import Client, Hosts, HttpOptions, check_root_url

    for option in ("index_url", "github_url", "github_api_url", "github_raw_url"):
        if getattr(args, option):
            flag = "--" + option.replace("_", "-")
            if not getattr(args, option).isprintable():  # it would reach every error line as it is
                raise InputError(f"{flag}: not a URL (it holds a control character)",
                                 hint="e.g. --index-url https://pypi.org/pypi")
            check_root_url(getattr(args, option), flag)
    defaults = Hosts()
    hosts = Hosts(args.index_url or defaults.index_url, args.github_url or defaults.github,
                  args.github_api_url or defaults.github_api, args.github_raw_url or defaults.github_raw)
    return Client(hosts, HttpOptions(args.timeout, args.retries, args.backoff))


def _recipes_dir(args: argparse.Namespace) -> Path:
    recipes_dir: Path = args.recipes_dir or args.manifest_path.resolve().parent / "recipes"
    return recipes_dir


def add_outdated(p: argparse.ArgumentParser) -> None:
    _upstream_args(p)


def cmd_outdated(args: argparse.Namespace) -> int:
    from rocmlock.upstream.outdated import outdated, render_report

    report = outdated(_recipes_dir(args), _client(args))
    print_report(args, report.to_json(), render_report(report))
    return 0 if report.ok else 1


def add_bump(p: argparse.ArgumentParser) -> None:
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


def cmd_bump(args: argparse.Namespace) -> int:
    from rocmlock.upstream.bump import BumpRequest, bump, write_bump

    recipes_dir = _recipes_dir(args)
    request = BumpRequest(_pairs(args.versions, "NAME=VERSION"), _pairs(args.sha256, "--sha256"),
                          _pairs(args.rev, "--rev"))
    result = bump(recipes_dir, request, _client(args), log=err)
    root = recipes_dir.resolve().parent
    summary = _rebuild_summary(args, recipes_dir, result.files) if result.files else None  # before writing
    if not args.dry_run:
        result = write_bump(result, recipes_dir)
    if args.json:
        print_json({**result.to_json(root), "rebuild": summary[0] if summary else []})
    else:
        print(result.diff(root), end="")
        if summary:
            print(summary[1])
    for note in result.notes:
        err(shown(note))  # names and bounds read from an sdist
    err("dry run: nothing written" if args.dry_run else f"wrote {len(result.files)} file(s)" if result.written
        else "nothing written")
    return 0


def _rebuild_summary(args: argparse.Namespace, recipes_dir: Path, files: Any) -> tuple[list[str], str] | None:
    from rocmlock.build.rebuild import rebuild_variants, render_rebuild
    from rocmlock.workspace.manifest import load_workspace

    if not args.manifest_path.exists():
        err(f"no {args.manifest_path}: run `rocmlock plan` in the workspace to see what must be rebuilt")
        return None
    try:
        variants = rebuild_variants(load_workspace(args.manifest_path), recipes_dir, files)
    except RocmlockError as exc:  # the bump itself is fine; say why there is no summary
        warn(f"no rebuild summary: {exc}")
        return None
    return [v.id for v in variants], render_rebuild(variants)
