"""MkDocs hook: fails the build when a page renders badly (issue 35).

- A code block line wider than the theme's code box (:data:`CODE_COLUMNS`) is cut off on screen; the pages of
  :data:`WIDTH_CHECKED` (the command reference among them) must fit it.
- A list written without a blank line before it renders as one paragraph: a ``<p>`` whose later lines start with
  ``1.`` or ``-`` is one, on every page.

``mkdocs build --strict`` (``.ci/run``) runs it; tests/test_docs_render.py checks the checks.
"""

from __future__ import annotations

import html
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cli_reference import CODE_COLUMNS

WIDTH_CHECKED = {"index.md", "install.md", "try-it.md", "air-gapped.md", "reference.md", "architecture.md",
                 "build-host.md", "building-publishing.md", "development.md", "qlora-deepspeed.md",
                 "containers.md"}
_PRE = re.compile(r"<pre[^>]*>(.*?)</pre>", re.DOTALL)
_P = re.compile(r"<p>(.*?)</p>", re.DOTALL)
_TAG = re.compile(r"<[^>]+>")
_LIST_LINE = re.compile(r"\s*(\d+\.|[-*+])\s")


def _text(fragment: str) -> str:
    return html.unescape(_TAG.sub("", fragment))


def wide_lines(page_html: str, limit: int = CODE_COLUMNS) -> list[str]:
    """Every line of a ``<pre>`` block of ``page_html`` longer than ``limit`` characters."""
    return [line for block in _PRE.findall(page_html) for line in _text(block).splitlines() if len(line) > limit]


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
    if src_uri in WIDTH_CHECKED:
        found += [f"{src_uri}: a code line of {len(line)} characters is cut off (the code box shows "
                  f"{CODE_COLUMNS}): {line[:60]}" for line in wide_lines(page_html)]
    return found


def on_post_page(output: str, page: Any, **_: Any) -> str:
    from mkdocs.exceptions import PluginError

    found = problems(page.file.src_uri, output)
    if found:
        raise PluginError("\n".join(found))
    return output
