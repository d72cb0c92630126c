"""MkDocs hook: fails the build when a page renders badly (issues 35 and 44); every page is checked, none exempt.

- A code block line wider than the theme's code box (:data:`CODE_COLUMNS`) is cut off on screen.
- A table whose narrowest layout (:func:`table_min_px`) is wider than the content box at 1280 px
  (:data:`CONTENT_PX`) is cut off at the right edge (a cell's words cannot wrap below their own width).
- A list written without a blank line before it renders as one paragraph: a ``<p>`` whose later lines start with
  ``1.`` or ``-``.
- After the build, when a headless browser is on PATH (Debian's ``chromium``; ``.ci/run`` installs it), every
  page is laid out at 1280 px and each code block or table wider than its box fails the build
  (docs/hooks/browser_check.py): the estimates above are checked against a real layout.
  ``ROCMLOCK_DOCS_BROWSER=off`` skips that step; another name picks the browser.

``mkdocs build --strict`` (``.ci/run``) runs it; tests/test_docs_render.py checks the checks.
"""

from __future__ import annotations

import html
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from browser_check import find_browser, measure
from cli_reference import CODE_COLUMNS

# The layout of the Material theme at 1280 px, as chromium measures it (docs/hooks/browser_check.py): the
# content box is 688 px; a table cell has 1.25em (16 px) of padding each side and a header cell is at least 5rem
# (100 px, padding included: the theme's boxes are border-box) wide; table text is 12.8 px, about 7 px a character (DejaVu Sans, the fallback where Roboto cannot be
# fetched, is wider than Roboto: the estimate errs wide), code in a cell 6.6 px a character (0.85em monospace).
CONTENT_PX = 688
CELL_PADDING_PX = 32
HEADER_MIN_PX = 100
TEXT_CHAR_PX = 7.0
CODE_CHAR_PX = 6.6
_PRE = re.compile(r"<pre[^>]*>(.*?)</pre>", re.DOTALL)
_TABLE = re.compile(r"<table[^>]*>(.*?)</table>", re.DOTALL)
_ROW = re.compile(r"<tr[^>]*>(.*?)</tr>", re.DOTALL)
_CELL = re.compile(r"<(t[hd])[^>]*>(.*?)</t[hd]>", re.DOTALL)
_CODE = re.compile(r"<code[^>]*>(.*?)</code>", re.DOTALL)
_P = re.compile(r"<p>(.*?)</p>", re.DOTALL)
_TAG = re.compile(r"<[^>]+>")
_LIST_LINE = re.compile(r"\s*(\d+\.|[-*+])\s")


def _text(fragment: str) -> str:
    return html.unescape(_TAG.sub("", fragment))


def wide_lines(page_html: str, limit: int = CODE_COLUMNS) -> list[str]:
    """Every line of a ``<pre>`` block of ``page_html`` longer than ``limit`` characters."""
    return [line for block in _PRE.findall(page_html) for line in _text(block).splitlines() if len(line) > limit]


def _cell_min_px(cell: str, *, header: bool, first_column: bool) -> float:
    """The narrowest a cell can be laid out: its widest unbreakable piece, plus the padding.

    Words of text do not break; code does (the theme's ``word-break: break-word``), except in a table's first
    column's body cells, where docs/stylesheets/extra.css keeps each code span whole (``white-space: nowrap``).
    """
    widest = 0.0
    if first_column and not header:
        widest = max((len(_text(code)) * CODE_CHAR_PX for code in _CODE.findall(cell)), default=0.0)
    words = _text(_CODE.sub(" ", cell)).split()
    widest = max([widest] + [len(word) * TEXT_CHAR_PX for word in words])
    return max(widest + CELL_PADDING_PX, HEADER_MIN_PX if header else 0.0)


def table_min_px(table_html: str) -> float:
    """The narrowest layout of a ``<table>``'s inner HTML, in px: the sum of its columns' widest cells."""
    columns: dict[int, float] = {}
    for row in _ROW.findall(table_html):
        for index, (tag, cell) in enumerate(_CELL.findall(row)):
            width = _cell_min_px(cell, header=tag == "th", first_column=index == 0)
            columns[index] = max(columns.get(index, 0.0), width)
    return sum(columns.values())


def wide_tables(page_html: str, limit: float = CONTENT_PX) -> list[tuple[int, str]]:
    """Every table of ``page_html`` that cannot be narrower than ``limit`` px: (its width, its header row)."""
    out = []
    for table in _TABLE.findall(page_html):
        width = table_min_px(table)
        if width > limit:
            header = " | ".join(_text(cell).strip() for _, cell in _CELL.findall(_ROW.findall(table)[0]))
            out.append((round(width), header))
    return out


def run_on_lists(page_html: str) -> list[str]:
    """The first line of every paragraph that swallowed a list (a later line starting ``1.`` or ``-``)."""
    out = []
    for para in _P.findall(page_html):
        lines = _text(para).splitlines()
        if any(_LIST_LINE.match(line) for line in lines[1:]):
            out.append(lines[0])
    return out


def problems(src_uri: str, page_html: str) -> list[str]:
    """What renders badly on page ``src_uri``, one line each."""
    found = [f"{src_uri}: a list renders as a paragraph (put a blank line before it): {first[:60]}"
             for first in run_on_lists(page_html)]
    found += [f"{src_uri}: a code line of {len(line)} characters is cut off (the code box shows "
              f"{CODE_COLUMNS}): {line[:60]}" for line in wide_lines(page_html)]
    found += [f"{src_uri}: a table is at least {width} px wide, cut off in the {CONTENT_PX} px content box at "
              f"1280 px (fewer columns, or shorter words and code in the first column; or make it a list): "
              f"{header[:60]}" for width, header in wide_tables(page_html)]
    return found


def on_post_page(output: str, page: Any, **_: Any) -> str:
    from mkdocs.exceptions import PluginError

    found = problems(page.file.src_uri, output)
    if found:
        raise PluginError("\n".join(found))
    return output


PHONE = 390  # px: a phone's width (iPhone 12-15's viewport), for the home page


def on_post_build(config: Any, **_: Any) -> None:
    """Lays every page out in a headless browser at 1280 px, and the home page at :data:`PHONE` px (when a
    browser is on PATH), and fails on what overflows."""
    import os

    from mkdocs.exceptions import PluginError

    if os.environ.get("ROCMLOCK_DOCS_BROWSER", "").lower() == "off":
        return
    browser = find_browser()
    if browser is None:
        return
    site = Path(config["site_dir"])
    pages = sorted(str(p.parent.relative_to(site)) + "/" for p in site.rglob("index.html")
                   if p.parent != site and not p.parent.name.startswith(("assets", "search")))
    try:
        found = measure(site, [""] + pages, browser)
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as exc:
        raise PluginError(f"docs/hooks/browser_check.py: {exc} (ROCMLOCK_DOCS_BROWSER=off skips this check)")
    problems_found = [f"{page or 'index'} at 1280 px: {what}" for page, items in sorted(found.items()) for what in items]
    # The home page on a phone too (issue 44: at 390 px its diagram was cut). The other pages' code blocks scroll
    # sideways there, as Material's do on every narrow screen; the home page is where a newcomer lands.
    try:
        phone = measure(site, [""], browser, width=PHONE)
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as exc:
        raise PluginError(f"docs/hooks/browser_check.py: {exc} (ROCMLOCK_DOCS_BROWSER=off skips this check)")
    problems_found += [f"index at {PHONE} px: {what}" for items in phone.values() for what in items]
    if problems_found:
        raise PluginError("\n".join(problems_found))
