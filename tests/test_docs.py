"""The README stays a newcomer's few screens and the docs site stays whole (`.ci/run` builds it with --strict)."""

from __future__ import annotations

import argparse
import importlib.util
import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()


def test_readme_is_short_and_starts_with_the_two_command_quickstart() -> None:
    assert len(README.splitlines()) <= 400
    headings = re.findall(r"^## (.+)$", README, re.MULTILINE)
    assert headings[:3] == ["Quickstart", "Install", "Commands"]
    block = README.split("## Quickstart", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    assert [line.split("#")[0].strip() for line in block.splitlines()] == [
        "bash examples/offline/quickstart.sh", "bash .ci/run"]


def test_readme_links_reach_real_files() -> None:
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README)
    assert links
    missing = [link for link in links if "://" not in link and not (REPO / link).is_file()]
    assert missing == []


def test_every_docs_page_is_in_the_nav() -> None:
    config = yaml.load((REPO / "mkdocs.yml").read_text(), Loader=yaml.SafeLoader)
    nav = {next(iter(entry.values())) for entry in config["nav"]}
    pages = {str(p.relative_to(REPO / "docs")) for p in (REPO / "docs").glob("*.md")}
    assert nav == pages


def _hook():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("cli_reference", REPO / "docs" / "hooks" / "cli_reference.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_command_reference_covers_every_command_and_option() -> None:
    from rocmlock.cli.main import build_parser

    text = _hook().render_reference()
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, command in sub.choices.items():
        assert f"\n## rocmlock {name}\n" in text
        section = text.split(f"\n## rocmlock {name}\n", 1)[1].split("\n## rocmlock ", 1)[0]
        for action in command._actions:
            for flag in action.option_strings:
                assert flag in section, (name, flag)
    assert text == _hook().render_reference()  # the same page on every build


def test_the_reference_page_keeps_its_marker() -> None:
    hook = _hook()
    assert hook.MARKER in (REPO / "docs" / "reference.md").read_text()
