"""No pattern in tools/ (the package and the probe) ends a match with `$` (issue 33 item 14).

Python's `$` also matches before a final newline: `re.match(r"^gfx[0-9a-f]+$", "gfx942\\n")` matches, and a
hostile "gpu09\\n" passed for a host name split the report's table. A whole string is matched with `fullmatch` (or
`\\Z` where a pattern is searched); `$` stays only where re.MULTILINE asks for line ends."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_RE_CALLS = {"compile", "match", "search", "fullmatch", "findall", "finditer", "sub", "subn", "split"}


def _dollar(pattern: str) -> bool:
    """Whether ``pattern`` holds a `$` anchor (not an escaped `\\$`, not one inside a character class)."""
    return re.search(r"(?<!\\)\$", re.sub(r"\[(?:\\.|[^\]\\])*\]", "", pattern)) is not None


def _multiline(call: ast.Call) -> bool:
    flags = [*call.args[1:], *(k.value for k in call.keywords if k.arg == "flags")]
    return any("MULTILINE" in ast.dump(f) or "'M'" in ast.dump(f) for f in flags)


def anchored_patterns(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "re"
                and node.func.attr in _RE_CALLS and node.args):
            continue
        first = node.args[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str) and _dollar(first.value) \
                and not _multiline(node):
            found.append(f"{path.relative_to(REPO)}:{node.lineno}: re.{node.func.attr}({first.value!r})")
    return found


def test_the_scan_finds_the_slip() -> None:
    assert _dollar(r"^gfx[0-9a-f]{2,6}$") and _dollar(r"(?:_|$)")
    assert not _dollar(r"gfx[0-9a-f]{2,6}") and not _dollar(r"cost \$5") and not _dollar(r"[$]")
    assert re.match(r"^gfx[0-9a-f]{2,6}$", "gfx942\n") and not re.fullmatch(r"gfx[0-9a-f]{2,6}", "gfx942\n")


def test_no_pattern_in_tools_accepts_a_trailing_newline() -> None:
    files = sorted((REPO / "tools" / "rocmlock").rglob("*.py")) + [REPO / "tools" / "verify_env.py"]
    found = [hit for path in files for hit in anchored_patterns(path)]
    assert not found, "use fullmatch (or \\Z) instead of $:\n" + "\n".join(found)
