"""The package's shape: stage subpackages, imports that run downward only, no cycle, the entry points.

Each subpackage's ``__init__.py`` docstring ends with a ``May import: rocmlock.x, rocmlock.y.`` line; that line
is the layering, and this test holds every import in the package to it (function-local and ``TYPE_CHECKING``
imports included: a cycle through a lazy import is still a cycle in the design). The checker is tested on
small packages it must refuse, so a green run cannot come from a checker that finds nothing.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "tools" / "rocmlock"
# Modules allowed at the package's top level (issue 21: cli, __init__, __main__, errors, a few shared helpers).
TOP_LEVEL_LIMIT = 8
LINE_LIMIT = 500
_MAY_IMPORT = re.compile(r"^May import:(.*)\.\s*$", re.MULTILINE)


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, root: Path, modules: set[str]) -> Iterator[str]:
    """Every module of the package that ``path`` imports (anywhere in the file)."""
    top = root.name
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == top:
                    yield alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] != top:
                continue
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                yield sub if sub in modules else node.module
        elif isinstance(node, ast.ImportFrom) and node.level:
            raise AssertionError(f"{path}: relative import; the package imports absolutely (rocmlock.x.y)")


def import_graph(root: Path) -> dict[str, set[str]]:
    files = sorted(root.rglob("*.py"))
    modules = {module_name(p, root) for p in files}
    return {module_name(p, root): set(_imports(p, root, modules)) - {module_name(p, root)} for p in files}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def layering(root: Path) -> dict[str, set[str]]:
    """Each subpackage and the packages/modules its docstring says it may import."""
    allowed = {}
    for init in sorted(root.glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        match = _MAY_IMPORT.search(doc)
        assert match, f"{init}: the docstring has no 'May import: {root.name}.x, ...' line"
        allowed[f"{root.name}.{init.parent.name}"] = {m.strip() for m in match.group(1).split(",") if m.strip()}
    return allowed


def layer_violations(root: Path) -> list[str]:
    graph = import_graph(root)
    allowed = layering(root)
    top = root.name
    bad = []
    for mod, deps in sorted(graph.items()):
        parts = mod.split(".")
        unit = ".".join(parts[:2]) if len(parts) > 1 else mod
        for dep in sorted(deps):
            dep_parts = dep.split(".")
            dep_unit = ".".join(dep_parts[:2]) if len(dep_parts) > 1 else dep
            if dep_unit == unit or dep == top:
                continue
            if unit in allowed:
                ok = dep_unit in allowed[unit]
            else:  # a top-level module: errors and the shared helpers import no stage; __main__ only the CLI
                ok = mod == f"{top}.__main__" and dep_unit == f"{top}.cli"
            if not ok:
                bad.append(f"{mod} imports {dep}")
    return bad


# ----------------------------------------------------------------------------- the checker, on packages it must refuse


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "pkg"
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_checker_finds_a_cycle_through_a_lazy_import(tmp_path: Path) -> None:
    root = _package(tmp_path, {
        "__init__.py": "",
        "a/__init__.py": '"""A.\n\nMay import: pkg.b.\n"""\n',
        "a/x.py": "from pkg.b.y import f\n",
        "b/__init__.py": '"""B.\n\nMay import: pkg.a.\n"""\n',
        "b/y.py": "def f():\n    from pkg.a import x\n",
    })
    assert cycles(import_graph(root)) == [["pkg.a.x", "pkg.b.y"]]
    assert layer_violations(root) == []  # each arrow is declared: only the cycle test catches this one


def test_checker_finds_an_import_running_up(tmp_path: Path) -> None:
    root = _package(tmp_path, {
        "__init__.py": "",
        "errors.py": "",
        "low/__init__.py": '"""Low.\n\nMay import: pkg.errors.\n"""\n',
        "low/m.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.high.n import N\n",
        "high/__init__.py": '"""High.\n\nMay import: pkg.errors, pkg.low.\n"""\n',
        "high/n.py": "from pkg.low import m\nfrom pkg import errors\n",
    })
    assert cycles(import_graph(root)) == [["pkg.high.n", "pkg.low.m"]]
    assert layer_violations(root) == ["pkg.low.m imports pkg.high.n"]


def test_checker_refuses_a_subpackage_without_its_layer(tmp_path: Path) -> None:
    root = _package(tmp_path, {"__init__.py": "", "a/__init__.py": '"""No layer line."""\n'})
    with pytest.raises(AssertionError, match="May import"):
        layering(root)


# ----------------------------------------------------------------------------- rocmlock itself


def test_no_import_cycle() -> None:
    assert cycles(import_graph(PACKAGE)) == []


def test_imports_follow_the_stated_layers() -> None:
    assert layer_violations(PACKAGE) == []


def test_layers_are_a_dag_and_name_real_packages() -> None:
    allowed = layering(PACKAGE)
    assert set(allowed) >= {f"rocmlock.{p}" for p in
                            ("util", "gpu", "workspace", "lock", "build", "host", "channel", "prefix", "bundle", "image", "fleet",
                             "train", "upstream", "cli")}
    for unit, deps in allowed.items():
        for dep in deps:
            target = PACKAGE.parent / dep.replace(".", "/")
            assert target.is_dir() or target.with_suffix(".py").is_file(), f"{unit} names {dep}, which does not exist"
    graph = {unit: {d for d in deps if d in allowed} for unit, deps in allowed.items()}
    assert cycles(graph) == []


def test_top_level_is_small_and_modules_are_short() -> None:
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= TOP_LEVEL_LIMIT, top
    long = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > LINE_LIMIT}
    assert long == {}


def hintless_input_errors(root: Path) -> list[str]:
    """``file:line`` of every ``InputError(...)`` under ``root`` made without a ``hint``: bad input is one line
    that says what is wrong, and a ``hint:`` line that says what to do."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "InputError" and \
                    len(node.args) < 2 and not any(k.arg in ("hint", None) for k in node.keywords):
                found.append(f"{path.relative_to(root.parent)}:{node.lineno}")
    return found


def test_every_input_error_says_what_to_do(tmp_path: Path) -> None:
    assert hintless_input_errors(PACKAGE) == []
    # The checker itself: a hint by keyword, by position or in **kwargs passes; none does not.
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg/m.py").write_text('raise InputError("a", hint="b")\nraise InputError("a", "b")\n'
                                       'raise InputError("a", **kw)\nraise InputError(f"{x}: bad")\n')
    assert hintless_input_errors(tmp_path / "pkg") == ["pkg/m.py:4"]


# ----------------------------------------------------------------------------- the public entry points


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(argv, check=False, capture_output=True, text=True, env=env, cwd=REPO,
                          timeout=120)


def test_console_script_and_module_entry_point() -> None:
    import rocmlock

    out = _run(sys.executable, "-m", "rocmlock", "--version")
    assert out.returncode == 0 and rocmlock.__version__ in out.stdout, out.stderr
    script = Path(sys.executable).parent / "rocmlock"
    found = str(script) if script.exists() else shutil.which("rocmlock")
    assert found, "the rocmlock console script is not installed next to this python"
    out = _run(found, "--version")
    assert out.returncode == 0 and rocmlock.__version__ in out.stdout, out.stderr


def test_python_api_of_the_readme() -> None:
    # docs/locking.md "Python API": the lock pipeline from rocmlock.lock, loaded lazily.
    code = ("import sys, rocmlock.lock as L; assert 'rocmlock.lock.pipeline' not in sys.modules; "
            "from rocmlock.lock import lock_workspace, export_workspace, LockResult; "
            "from rocmlock.build.plan import make_plan; "
            "assert lock_workspace.__module__ == 'rocmlock.lock.pipeline'; print('api ok')")
    out = _run(sys.executable, "-c", code)
    assert out.returncode == 0 and "api ok" in out.stdout, out.stderr
    import rocmlock.lock

    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        rocmlock.lock.nothing  # noqa: B018


def test_standalone_probe_runs() -> None:
    out = _run(sys.executable, str(REPO / "tools" / "verify_env.py"), "--help")
    assert out.returncode == 0 and "usage" in out.stdout.lower(), out.stderr


_PATH = re.compile(r"tools/rocmlock/[\w/]+\.(?:py|toml)")


def test_every_package_path_named_in_the_repository_exists() -> None:
    """Recipes, scripts, benchmarks, CI and docs name files of the package by path: each must exist."""
    listed = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    missing = set()
    for name in listed:
        path = REPO / name
        if name == "CHANGELOG.md" or not path.is_file() or path.suffix not in {".py", ".sh", ".yaml", ".yml", ".md",
                                                                                ".toml", ""}:
            continue
        for ref in _PATH.findall(path.read_text(errors="replace")):
            if not (REPO / ref).is_file():
                missing.add(f"{name}: {ref}")
    assert missing == set()


def test_a_command_loads_only_its_own_stage(tmp_path: Path) -> None:
    """`rocmlock lock` (issue 26): neither the build nor the upstream stage, nor their CLI modules, is imported."""
    (tmp_path / "pixi.toml").write_text('[workspace]\nname = "w"\nchannels = []\nplatforms = []\n')
    code = ("import sys; from rocmlock.cli.main import main; main(['lock', '--manifest-path', sys.argv[1]]); "
            "print(' '.join(sorted(m for m in sys.modules if m.startswith('rocmlock'))))")
    out = _run(sys.executable, "-c", code, str(tmp_path / "pixi.toml"))
    loaded = set(out.stdout.split())
    assert "rocmlock.cli.lock" in loaded, out.stderr  # the run reached its command
    stray = sorted(m for m in loaded if m.split(".")[1:2] in (["build"], ["upstream"], ["channel"], ["bundle"],
                                                                   ["image"], ["fleet"], ["train"], ["prefix"])
                   or m in {"rocmlock.cli.build", "rocmlock.cli.env", "rocmlock.cli.upstream"})
    assert stray == []


# ----------------------------------------------------------------------------- the rooms (issue 45)
ROOM_SHARE_LIMIT = 0.125  # issue 45: no subpackage holds more than ~12 % of the package's lines
_ROW = re.compile(r"^\| `(\w+)/` \| .*? \| ([^|]*) \|$", re.MULTILINE)


def _room_graph() -> dict[str, set[str]]:
    """Room -> the rooms its ``May import:`` line names (``errors`` and the top level left out)."""
    return {unit.split(".")[1]: {d.split(".")[1] for d in deps if d.count(".") == 1 and d != "rocmlock.errors"}
            for unit, deps in layering(PACKAGE).items()}


def test_rooms_are_a_dag_and_none_is_too_big() -> None:
    rooms = _room_graph()
    assert cycles({f"rocmlock.{k}": {f"rocmlock.{d}" for d in v} for k, v in rooms.items()}) == []
    lines = {room: sum(len(p.read_text().splitlines()) for p in (PACKAGE / room).rglob("*.py")) for room in rooms}
    total = sum(len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py"))
    assert {room: n for room, n in lines.items() if n > ROOM_SHARE_LIMIT * total} == {}, total


@pytest.mark.parametrize("page", ["docs/architecture.md", "README.md"])
def test_the_documented_rooms_are_the_layers(page: str) -> None:
    """Each subpackage table names every room, and its 'may import' column says what the ``May import:`` line
    says: the rooms it names, or (``... and below``) those and what they may import in turn."""
    rooms = _room_graph()
    rows = {room: text for room, text in _ROW.findall((REPO / page).read_text()) if room != "cli"}
    assert set(rows) == set(rooms) - {"cli"}, page

    def below(named: set[str]) -> set[str]:
        seen, todo = set(named), list(named)
        while todo:
            for dep in rooms.get(todo.pop(), set()) - seen:
                seen.add(dep)
                todo.append(dep)
        return seen

    for room, text in rows.items():
        named = set(re.findall(r"`(\w+)`", text)) - {"errors"}
        reach = below(named) if "and below" in text else named
        assert named <= rooms[room] and rooms[room] <= reach, (page, room, sorted(named), sorted(rooms[room]))
