"""Plain-text rendering shared by the reports (plan, build summary)."""

from __future__ import annotations

import re
from collections.abc import Sequence


def format_table(rows: Sequence[Sequence[str]]) -> list[str]:
    """``rows`` (the first one the header) as lines of left-aligned columns, two spaces apart, no trailing blanks."""
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]


def escape(text: str) -> str:
    """``text`` with every control character (newline, ESC, DEL, C1) as a Python escape: an untrusted name
    printed this way stays on its line and moves no cursor."""
    return "".join(c if c.isprintable() or c == " " else c.encode("unicode_escape").decode("ascii") for c in text)


# GitHub-flavoured markdown, as cmark-gfm (github.com's renderer; PyPI's cmarkgfm binds it) reads it. A backslash
# before ASCII punctuation is not plain text everywhere: the table row splitter reads `x\\|y|` as one cell `x|y`
# (the cell's `\` took the next `|`), and an escaped `@` or a plain `www.` is still autolinked (cmarkgfm
# 2025.10.22, tests/test_lock_diff_markdown.py). A numeric character reference is plain text in every context
# rocmlock writes one to: a table cell, a heading, an HTML block (`<summary>`).
_GFM_PLAIN = re.compile(r"[A-Za-z0-9 ._+!-]|[^\x00-\x7f]")


def gfm_text(text: str) -> str:
    """``text`` (a name or version from a file rocmlock did not write) as plain text of GitHub-flavoured markdown,
    in a table cell, a heading or an HTML block alike: no HTML, link, autolink or emphasis can come of it, and it
    ends no table cell (``|`` is ``&#124;``: GFM's ``\\|`` would show its backslash in an HTML block). Letters,
    digits, ``._+!-`` and an ``_`` inside a word (never emphasis) stay as they are, so a conda name or version reads
    as pixi-diff-to-markdown prints it; control characters are :func:`escape`d."""
    shown = escape(text)
    return "".join(_gfm_char(shown, i) for i in range(len(shown)))


def _gfm_char(text: str, i: int) -> str:
    c = text[i]
    if c == "@":  # cmark-gfm autolinks `x@y.z` after decoding references: an invisible WORD JOINER breaks it
        return "&#64;\u2060"
    if c == "_":  # CommonMark: an `_` between two letters or digits opens and closes no emphasis
        plain = 0 < i < len(text) - 1 and text[i - 1].isalnum() and text[i + 1].isalnum()
    else:  # GFM autolinks `www.` without a scheme
        plain = bool(_GFM_PLAIN.fullmatch(c)) and not (c == "." and text[max(0, i - 3):i].lower() == "www")
    return c if plain else f"&#{ord(c)};"


def line_problem(value: str, hash_allowed: bool = False) -> str | None:
    """Why ``value`` cannot go onto one line of a generated file (a control character; a ``#``, which starts
    a comment in YAML and requirements files and a hash in ``@EXPLICIT``, unless ``hash_allowed``), else None."""
    if value.isprintable():  # the common case, in C (a space is printable)
        return None if hash_allowed or "#" not in value else "holds a '#'"
    bad = next((c for c in value if not (c.isprintable() or c == " ")), None)
    if bad is not None:
        return f"holds the control character {bad.encode('unicode_escape').decode('ascii')}"
    if not hash_allowed and "#" in value:
        return "holds a '#'"
    return None


def printable(text: str, limit: int = 200) -> str:
    """``text`` safe for one terminal line: :func:`escape`d, at most ``limit`` characters. For strings read from
    files rocmlock did not write."""
    shown = escape(text)
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."


def bounded_line(text: str, limit: int = 2000) -> str:
    """``text`` :func:`escape`d for one terminal line of at most about ``limit`` characters: a longer one keeps its
    start and its end (where an error names the file and key, and where it suggests the fix) and says how much of
    its middle was left out. For errors that quote a value from a file rocmlock did not write (a 1 MB key)."""
    shown = escape(text)
    if len(shown) <= limit:
        return shown
    half = limit // 2
    return f"{shown[:half]} ... [{len(shown) - 2 * half:,} characters left out] ... {shown[-half:]}"


def printable_words(text: str, limit: int = 600) -> str:
    """:func:`printable`, but a text past ``limit`` is cut between words, not inside one (a fix line to act on)."""
    shown = escape(text)
    if len(shown) <= limit:
        return shown
    cut = shown[: limit - 3]
    space = cut.rfind(" ")
    return (cut[:space] if space > limit // 2 else cut).rstrip(" ,;:") + "..."
