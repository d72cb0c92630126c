"""Plain-text rendering shared by the reports (plan, build summary)."""

from __future__ import annotations

from collections.abc import Sequence


def format_table(rows: Sequence[Sequence[str]]) -> list[str]:
    """``rows`` (the first one the header) as lines of left-aligned columns, two spaces apart, no trailing blanks."""
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]


def printable(text: str, limit: int = 200) -> str:
    """``text`` safe for one terminal line: control characters (escape sequences, newlines) as ``?``, at most
    ``limit`` characters. For strings read from files rocmlock did not write."""
    shown = text if len(text) <= limit else text[: limit - 3] + "..."
    return shown if shown.isprintable() else "".join(c if c.isprintable() else "?" for c in shown)
