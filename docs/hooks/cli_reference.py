"""MkDocs hook: fills reference.md's ``<!-- cli-reference -->`` marker with every command's ``--help``.

The text comes from ``rocmlock.cli.main.build_parser()``, the parser the command line itself uses, so the page
cannot drift from the code. argparse wraps to ``$COLUMNS``: fixed here so the page is the same on every machine.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

MARKER = "<!-- cli-reference -->"
# The widest line a code block of the Material theme shows without scrolling (its 61rem grid, both sidebars, 0.85em
# monospace: about 80 characters); docs/hooks/render_check.py holds every page's code to it.
CODE_COLUMNS = 78
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))


def render_reference() -> str:
    """Markdown for every subcommand: a heading, its one-line help and its full ``--help`` text."""
    import argparse

    os.environ["COLUMNS"] = str(CODE_COLUMNS)
    from rocmlock.cli.main import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {choice.dest: choice.help for choice in sub._choices_actions}
    out = ["## rocmlock", "", "```text", parser.format_help().rstrip(), "```", ""]
    for name, command in sub.choices.items():
        out += [f"## rocmlock {name}", "", f"{helps.get(name) or ''}", "", "```text", command.format_help().rstrip(),
                "```", ""]
    return "\n".join(out)


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if page.file.src_uri != "reference.md":
        return markdown
    if MARKER not in markdown:
        raise ValueError(f"docs/reference.md: the {MARKER} marker is missing")
    return markdown.replace(MARKER, render_reference())
