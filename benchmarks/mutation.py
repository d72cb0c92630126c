"""Mutation testing of rocmlock's trust-deciding modules with mutmut 3 (PyPI), within a 2-core machine.

    python benchmarks/mutation.py                 # every group of benchmarks/mutation.toml
    python benchmarks/mutation.py stamp satisfy   # a few
    python benchmarks/mutation.py --list

Needs ``pip install mutmut==3.8.1`` (a developer tool: not in CI, not a test dependency). mutmut 3 finds a
package only under ./, src/ or source/ (mutmut/utils/file_utils.py, setup_source_paths; format_utils.py,
get_mutant_name strips ``src.``), and rocmlock lives in tools/: each group runs in a scratch copy of the
checkout (git's tracked and untracked-but-not-ignored files) with tools/rocmlock also at src/rocmlock, and a
[tool.mutmut] table written for that group: only its modules are mutated, only its test files run. The
checkout is never written to. Per group it prints mutants, killed, survived (and other outcomes) and the
surviving mutants' names; ``--show`` prints their diffs. Figures: benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "benchmarks" / "mutation.toml"
# What the selected tests read from the checkout besides the package (cwd is the copy's mutants/ directory).
ALSO_COPY = ["tools", "recipes", "examples", "pixi.toml", "README.md", "CHANGELOG.md", ".ci", ".github"]


# Imported first by every child Python a test starts with the mutated package on its path. mutmut's statistics
# run sets MUTANT_UNDER_TEST=stats, and a trampoline in that mode records the hit through mutmut's config, which a
# child loads from its own cwd (mutmut/stats.py record_trampoline_hit -> configuration.py _load_config resolves
# ./mutants strictly): a test whose child runs in tmp_path crashed there ("failed to collect stats"). A child's
# hits could never reach the parent's statistics anyway, so a child runs unmutated code during that phase only.
CHILD_SITECUSTOMIZE = """import os
if os.environ.get("MUTANT_UNDER_TEST") == "stats":
    os.environ["MUTANT_UNDER_TEST"] = ""
"""


def _tracked_files() -> list[str]:
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, check=True,
                         capture_output=True).stdout.decode()
    return [p for p in out.split("\0") if p and (REPO / p).is_file()]


def _scratch(root: Path, modules: list[str], tests: list[str], children: int, pytest_args: list[str]) -> None:
    for rel in _tracked_files():
        dest = root / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, dest)
    shutil.copytree(root / "tools" / "rocmlock", root / "src" / "rocmlock")
    # The probe beside the package, where fleet/verify.py's REPO_PROBE finds it (image and pack copy it).
    shutil.copy2(root / "tools" / "verify_env.py", root / "src" / "verify_env.py")
    # Beside the package, so that it is on every child's path that has the mutated package on it (some tests
    # hand their children PYTHONPATH=<the imported rocmlock's parent>); mutmut copies src/ as it is, less the
    # modules it mutates, and strips the "src." of module names.
    (root / "src" / "sitecustomize.py").write_text(CHILD_SITECUSTOMIZE)
    table = {
        "source_paths": ["src"],
        "only_mutate": [f"src/rocmlock/{m}" for m in modules],
        "pytest_add_cli_args_test_selection": tests,
        # A group's "pytest_args": e.g. --deselect of a test that times itself (mutmut's trampolines slow it).
        "pytest_add_cli_args": ["-p", "no:cacheprovider", "-q", *pytest_args],
        "also_copy": ALSO_COPY,
        # py-rattler's tokio threads do not survive fork(): workers come from a clean fork server.
        "process_isolation": "forkserver",
        "use_git_change_detection": False,
    }
    lines = ["", "[tool.mutmut]"] + [f"{k} = {json.dumps(v)}" for k, v in table.items()]
    with (root / "pyproject.toml").open("a") as f:
        f.write("\n".join(lines) + "\n")


def _env(root: Path | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CI")}
    if root is not None:
        # Child processes the tests start (`python -c ...`, `-m rocmlock`) import the mutated copy too (mutmut puts
        # it on sys.path in-process only), with the mutant mutmut names in their environment.
        env["PYTHONPATH"] = str(root / "mutants" / "src")
    # tests/conftest.py leaves through os._exit after a run (py-rattler's exit crash); in-process pytest runs
    # (mutmut calls pytest.main) must return instead.
    env["ROCMLOCK_TEST_NORMAL_EXIT"] = "1"
    return env


def _results(root: Path) -> dict[str, str]:
    proc = subprocess.run([sys.executable, "-m", "mutmut", "results", "--all", "true"], cwd=root, env=_env(),
                          capture_output=True, text=True, check=True)
    found = re.findall(r"^\s+(\S+): (\S.*)$", proc.stdout, re.MULTILINE)
    return dict(found)


def run_group(name: str, group: dict[str, list[str]], workdir: Path, children: int, show: bool) -> dict[str, object]:
    root = workdir / name
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    _scratch(root, group["modules"], group["tests"], children, group.get("pytest_args", []))
    start = time.monotonic()
    # "mutants": fnmatch patterns of mutant names (a module's functions), where one group covers part of a module.
    patterns = group.get("mutants", [])
    # PYTHONPATH names mutants/src (_env): it must exist when mutmut starts, or the first import caches "no such
    # directory" for it (sys.path_importer_cache holds None) and the statistics run imports the installed,
    # unmutated rocmlock: no trampoline is hit and mutmut stops ("could not find any test case for any mutant").
    (root / "mutants" / "src").mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([sys.executable, "-m", "mutmut", "run", "--max-children", str(children), *patterns],
                          cwd=root, env=_env(root), capture_output=True, text=True, check=False)
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        raise SystemExit(f"mutation.py: mutmut run failed for group '{name}' (exit {proc.returncode}); "
                         f"the copy is {root}")
    results = {k: v for k, v in _results(root).items()
               if not patterns or any(fnmatch.fnmatchcase(k, p) for p in patterns)}
    counts: dict[str, int] = {}
    for status in results.values():
        counts[status] = counts.get(status, 0) + 1
    survivors = sorted(k for k, v in results.items() if v == "survived")
    print(f"{name}: {len(results)} mutants, {counts.get('killed', 0)} killed, {counts.get('survived', 0)} survived"
          f" ({', '.join(f'{v} {k}' for k, v in sorted(counts.items()) if k not in ('killed', 'survived'))})"
          f" in {seconds:.0f} s")
    for mutant in survivors:
        print(f"  survived: {mutant}")
        if show:
            diff = subprocess.run([sys.executable, "-m", "mutmut", "show", mutant], cwd=root, env=_env(),
                                  capture_output=True, text=True, check=False).stdout
            print("    " + diff.strip().replace("\n", "\n    "))
    return {"group": name, "mutants": len(results), "counts": counts, "survived": survivors, "seconds": round(seconds)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("groups", nargs="*", help="groups of benchmarks/mutation.toml (default: all)")
    parser.add_argument("--workdir", type=Path, help="where the scratch copies go (default: a new temporary one)")
    parser.add_argument("--max-children", type=int, default=2, help="parallel mutants (default 2: the machine's cores)")
    parser.add_argument("--show", action="store_true", help="print each surviving mutant's diff")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--list", action="store_true", help="list the groups and exit")
    args = parser.parse_args(argv)
    groups = tomllib.loads(CONFIG.read_text())["group"]
    if args.list:
        for name, group in groups.items():
            print(f"{name}: {', '.join(group['modules'])} <- {', '.join(group['tests'])}")
        return 0
    unknown = [g for g in args.groups if g not in groups]
    if unknown:
        print(f"mutation.py: unknown group '{unknown[0]}' (known: {', '.join(groups)})", file=sys.stderr)
        return 2
    if subprocess.run([sys.executable, "-c", "import mutmut"], check=False).returncode != 0:
        print("mutation.py: mutmut is not installed: pip install mutmut==3.8.1", file=sys.stderr)
        return 2
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="rocmlock-mutation-"))
    figures = [run_group(name, groups[name], workdir, args.max_children, args.show)
               for name in (args.groups or list(groups))]
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
