"""Plain-text rendering shared by the reports (plan, build summary)."""

from __future__ import annotations

from collections.abc import Sequence


def format_table(rows: Sequence[Sequence[str]]) -> list[str]:
    """``rows`` (the first one the header) as lines of left-aligned columns, two spaces apart, no trailing blanks."""
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]


def escape(text: str) -> str:
    """``text`` with every control character (newline, ESC, DEL, C1) as a Python escape: an untrusted name
    printed this way stays on its line and moves no cursor."""
    return "".join(c if c.isprintable() or c == " " else c.encode("unicode_escape").decode("ascii") for c in text)


def line_problem(value: str, hash_allowed: bool = False) -> str | None:
    """Why ``value`` cannot go onto one line of a generated file (a control character; a ``#``, which starts
    a comment in YAML and requirements files and a hash in ``@EXPLICIT``, unless ``hash_allowed``), else None."""
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


def printable_words(text: str, limit: int = 600) -> str:
    """:func:`printable`, but a text past ``limit`` is cut between words, not inside one (a fix line to act on)."""
    shown = escape(text)
    if len(shown) <= limit:
        return shown
    cut = shown[: limit - 3]
    space = cut.rfind(" ")
    return (cut[:space] if space > limit // 2 else cut).rstrip(" ,;:") + "..."
