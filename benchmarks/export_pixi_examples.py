"""`rocmlock export` over real pixi workspaces: every pixi.toml or pyproject.toml with a pixi.lock beside it under DIR.

    python benchmarks/export_pixi_examples.py /path/to/pixi-checkout [--skip-source] [--verbose]

Each workspace is copied to a temporary directory (nothing under DIR is written), exported in-process,
and counted as exported or refused; refusals are grouped by their message with the workspace names.
Prints the counts and the time each export took. Needs a pixi checkout (its examples/ and docs/ hold
the workspaces pixi's developers lock with pixi itself); nothing is downloaded.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))

from rocmlock.cli.main import main


def _workspaces(root: Path) -> list[Path]:
    """Each manifest with a pixi.lock beside it: a pixi.toml, else a pyproject.toml (rocmlock finds it as pixi does)."""
    locks = sorted(p.parent for p in root.rglob("pixi.lock"))
    return [d / "pixi.toml" if (d / "pixi.toml").is_file() else d / "pyproject.toml" for d in locks
            if (d / "pixi.toml").is_file() or (d / "pyproject.toml").is_file()]


def _export(manifest: Path, skip_source: bool) -> tuple[int, str, float]:
    with tempfile.TemporaryDirectory(prefix="rocmlock-survey-") as tmp:
        copy = Path(tmp) / manifest.parent.name
        copy.mkdir()
        for name in (manifest.name, "pixi.lock"):
            shutil.copy2(manifest.parent / name, copy / name)
        err = io.StringIO()
        args = ["export", "--manifest-path", str(copy / manifest.name), *(["--skip-source"] if skip_source else [])]
        start = time.perf_counter()
        with contextlib.redirect_stderr(err):
            code = main(args)
        elapsed = time.perf_counter() - start
    lines = err.getvalue().splitlines()
    message = next((line for line in lines if line.startswith("error: ")), lines[-1] if lines else "")
    return code, message.replace(str(copy), "<ws>"), elapsed


def _kind(message: str) -> str:
    """The refusal without workspace-specific names, so equal causes group together."""
    message = re.sub(r"'[^']*'", "'…'", re.sub(r" \(at line \d+, column \d+\)", "", message))
    return re.sub(r"\): .*$", ")", message) if "no export can pin" in message else message


def main_survey() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--skip-source", action="store_true")
    parser.add_argument("--verbose", action="store_true", help="print each workspace's outcome")
    args = parser.parse_args()
    found = _workspaces(args.root)
    ok: list[str] = []
    refused: dict[str, list[str]] = defaultdict(list)
    times: list[float] = []
    for ws in found:
        rel = str(ws.parent.relative_to(args.root))
        code, message, elapsed = _export(ws, args.skip_source)
        times.append(elapsed)
        if args.verbose:
            print(f"{code} {rel}: {message}")
        (ok.append(rel) if code == 0 else refused[_kind(message)].append(rel))
    print(f"{len(found)} workspaces with pixi.lock, {len(ok)} exported, {len(found) - len(ok)} refused")
    for kind, names in sorted(refused.items(), key=lambda kv: -len(kv[1])):
        print(f"  {len(names):3d} {kind}\n      {', '.join(names)}")
    if times:
        times.sort()
        print(f"export time per workspace: median {times[len(times) // 2]:.2f} s, max {times[-1]:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main_survey())
