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


def _which_rocm_rows() -> dict[str, list[str]]:
    """docs/recipes.md's "Which ROCm for which GPU" table: each gfx of a row -> the row's cells."""
    text = (REPO / "docs" / "recipes.md").read_text()
    section = text.split("### Which ROCm for which GPU\n", 1)[1].split("\n### ", 1)[0]
    rows: dict[str, list[str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if not line.startswith("| ") or len(cells) != 4 or not re.search(r"\(gfx", cells[0]):
            continue
        for gfx in re.findall(r"gfx[0-9a-z]+", cells[0]):
            assert gfx not in rows, gfx
            rows[gfx] = cells
    return rows


def test_the_which_rocm_table_agrees_with_the_gpu_table() -> None:
    # The table is read by users choosing a ROCm: every target of gpu_targets.toml is in it once, and what it says of
    # 7.2 (not supported before first_rocm, no bitsandbytes before bnb_first_rocm, AOTriton 0.11.2b's experimental
    # tier) and of gfx950's AOTriton 0.13b regression follows the tables the code reads.
    from rocmlock.gpu.targets import AOTRITON_KNOWN_ISSUES, all_targets, version_tuple

    rows = _which_rocm_rows()
    targets = all_targets()
    assert set(rows) == set(targets)
    for gfx, target in targets.items():
        _, rocm72, rocm714, rocm10 = rows[gfx]
        if version_tuple(target.first_rocm) > (7, 2):
            assert rocm72.startswith(f"no: first ROCm {target.first_rocm}"), gfx
            continue
        assert not rocm72.startswith("no:"), gfx
        if not target.supports_bitsandbytes("7.2"):
            assert "no bitsandbytes" in rocm72 and "bitsandbytes" in rocm714, gfx
        if target.aotriton_tier("0.11.2b") == "experimental":
            assert "AOTriton experimental" in rocm72, gfx
        for release, issue_gfx in AOTRITON_KNOWN_ISSUES:
            assert (f"AOTriton {release}" in rocm10) == (issue_gfx == gfx), gfx
