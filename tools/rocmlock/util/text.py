"""Plain-text rendering shared by the reports (plan, build summary)."""

from __future__ import annotations

from collections.abc import Sequence


def format_table(rows: Sequence[Sequence[str]]) -> list[str]:
    """``rows`` (the first one the header) as lines of left-aligned columns, two spaces apart, no trailing blanks."""
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
