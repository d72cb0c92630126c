"""The docs site reads well (issue 35, item 5): docs/hooks/render_check.py fails `mkdocs build --strict` (.ci/run)
on a code line wider than the theme's code box and on a list that renders as a paragraph; these tests check that
the checks catch what they are for, on HTML rendered by the same Markdown the site uses."""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from pathlib import Path
from types import ModuleType

import markdown
import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
HOOKS = REPO / "docs" / "hooks"


def _hook(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, HOOKS / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _html(text: str) -> str:
    return markdown.markdown(text, extensions=["tables", "fenced_code", "admonition"])


def test_the_build_runs_the_check() -> None:
    config = yaml.load((REPO / "mkdocs.yml").read_text(), Loader=yaml.SafeLoader)
    assert "docs/hooks/render_check.py" in config["hooks"]
    # Issue 44: no page is exempt from the width checks (health, locking and recipes were).
    assert not hasattr(_hook("render_check"), "WIDTH_CHECKED")


def test_every_page_fits_the_code_box_and_the_content_width() -> None:
    check = _hook("render_check")
    for page in sorted((REPO / "docs").glob("*.md")):
        assert check.problems(page.name, _html(page.read_text())) == [], page.name


def test_a_list_without_a_blank_line_before_it_is_caught() -> None:
    check = _hook("render_check")
    broken = _html("**unpack** does this:\n1. admits the bundle\n2. checks the node\n")
    assert check.run_on_lists(broken) == ["unpack does this:"]
    assert check.problems("air-gapped.md", broken) == [
        "air-gapped.md: a list renders as a paragraph (put a blank line before it): unpack does this:"]
    assert check.run_on_lists(_html("**unpack** does this:\n\n1. admits the bundle\n2. checks the node\n")) == []


def test_a_code_line_wider_than_the_box_is_caught_on_checked_pages() -> None:
    check = _hook("render_check")
    width = _hook("cli_reference").CODE_COLUMNS
    page = _html(f"```text\n{'x' * width}\n{'&' * (width + 1)}\n```\n")
    assert check.wide_lines(page) == ["&" * (width + 1)]  # counted as shown: &amp; is one character
    assert len(check.problems("reference.md", page)) == 1
    assert check.problems("recipes.md", page) == [  # every page is held to the width (issue 44)
        f"recipes.md: a code line of {width + 1} characters is cut off (the code box shows {width}): {'&' * 60}"]


def _table(columns: list[str], *rows: list[str]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    return _html("\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows]) + "\n")


def test_a_table_wider_than_the_content_box_is_caught() -> None:
    check = _hook("render_check")
    # Eight columns cannot fit 688 px: a header cell is at least 100 px (recipes.md's versions matrix was 826 px
    # wide in chromium at 1280 px, the estimate 864).
    eight = _table([f"column{i}" for i in range(8)], ["x"] * 8)
    assert check.wide_tables(eight) == [(800, " | ".join(f"column{i}" for i in range(8)))]
    (problem,) = check.problems("recipes.md", eight)
    assert problem.startswith("recipes.md: a table is at least 800 px wide, cut off in the 688 px content box at "
                              "1280 px (fewer columns")
    assert check.wide_tables(_table([f"column{i}" for i in range(6)], ["x"] * 6)) == []
    # Code stays whole in the first column (docs/stylesheets/extra.css) and breaks in the others.
    command = "`conda create -p P --file environment.yml --override-channels -c <private> -c <forge>`"
    assert [w for w, _ in check.wide_tables(_table(["command", "a", "b", "c", "d"], [command, "", "", "", ""]))] \
        == [round(84 * check.CODE_CHAR_PX + 32 + 4 * 100)]
    assert check.wide_tables(_table(["a", "command", "b", "c", "d"], ["", command, "", "", ""])) == []
    # Words of text do not break.
    assert check.wide_tables(_table(["a", "b"], ["x" * 90, "y"])) == [(90 * 7 + 32 + 100, "a | b")]
    css = (REPO / "docs" / "stylesheets" / "extra.css").read_text()
    assert ".md-typeset td:first-child code {\n  white-space: nowrap;" in css


def test_the_command_reference_fits_the_code_box() -> None:
    reference = _hook("cli_reference")
    text = reference.render_reference()
    blocks = text.split("```text\n")[1:]
    assert blocks
    wide = [line for block in blocks for line in block.split("```", 1)[0].splitlines()
            if len(line) > reference.CODE_COLUMNS]
    assert wide == []


def test_the_product_table_of_adding_a_gpu_target_is_the_gpu_tables() -> None:
    from rocmlock.gpu.targets import all_targets

    text = (REPO / "docs" / "recipes.md").read_text()
    table = text.split("<!-- product-table:", 1)[1].split("\n\n", 1)[0].splitlines()[3:]
    assert table == [f"| {p} | `{t.gfx}` | `{t.isa}` |" for t in all_targets().values() for p in t.products]
    # The steps say that the new target's packages are built and published before the lock can solve.
    steps = text.split("## Adding a GPU target", 1)[1].split("\n## ", 1)[0]
    assert "rocmlock build -e" in steps and "rocmlock publish" in steps and "before you lock" in steps


def test_the_pixi_toml_of_adding_a_gpu_target_locks_its_environment_for_that_target(tmp_path: Path) -> None:
    from rocmlock.workspace.manifest import load_workspace

    text = (REPO / "docs" / "recipes.md").read_text()
    snippet = text.split("The `pixi.toml` of step 5", 1)[1].split("```toml\n", 1)[1].split("```", 1)[0]
    # The platform's inline table, over two lines (TOML 1.1, as pixi reads it) to fit the code box.
    platform = snippet.split("then:\n", 1)[1].split("\n]", 1)[0].strip().rstrip(",")
    assert platform.startswith('{ name = "linux-64-gfx1201"')
    feature = snippet.split("[feature.gfx1201]", 1)[1].split("[environments]", 1)[0]
    root = (REPO / "pixi.toml").read_text()
    root = root.replace("platforms = [\n", f"platforms = [\n    {platform},\n", 1)
    root = root.replace("[environments]\n", f"[feature.gfx1201]{feature}[environments]\nrx9070 = "
                        '["rocm72", "gfx1201", "train"]\n', 1)
    (tmp_path / "pixi.toml").write_text(root)
    env = load_workspace(tmp_path / "pixi.toml").environment("rx9070")
    assert env.gpu_target is not None and (env.gpu_target.gfx, env.gpu_target.isa) == ("gfx1201", "12.0.1")
    assert [p.name for p in env.platforms] == ["linux-64-gfx1201"]


def test_a_headless_browser_finds_what_overflows_at_1280_px(tmp_path: Path) -> None:
    """docs/hooks/browser_check.py lays pages out in chromium: a site of the theme and this site's stylesheet, one
    page with a table and a code block that fit and one of each that do not; only the two that do not are named.
    The real pages are measured by the same code in the strict build (.ci/run installs chromium)."""
    import subprocess

    from ciskips import in_ci

    browser = _hook("browser_check").find_browser()
    if browser is None:
        if in_ci():
            pytest.fail("CI must measure the docs in a headless browser: .ci/run installs Debian's chromium")
        pytest.skip("no chromium here (apt-get install chromium)")
    (tmp_path / "docs" / "stylesheets").mkdir(parents=True)
    (tmp_path / "docs" / "stylesheets" / "extra.css").write_text(
        (REPO / "docs" / "stylesheets" / "extra.css").read_text())
    (tmp_path / "mkdocs.yml").write_text("site_name: t\ntheme:\n  name: material\nextra_css:\n"
                                         "  - stylesheets/extra.css\nmarkdown_extensions:\n  - tables\n")
    narrow = "| a | b |\n|---|---|\n| `x` | y |\n"
    wide = "| " + " | ".join(f"column{i}" for i in range(8)) + " |\n" + "|---" * 8 + "|\n" + "| x " * 8 + "|\n"
    (tmp_path / "docs" / "index.md").write_text(
        f"# t\n\n{narrow}\n{wide}\n```text\n{'f' * 78}\n```\n\n```text\n{'w' * 120}\n```\n")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    subprocess.run([sys.executable, "-m", "mkdocs", "build", "--quiet", "--site-dir", str(tmp_path / "site")],
                   cwd=tmp_path, env=env, check=True, timeout=300)
    found = _hook("browser_check").measure(tmp_path / "site", [""], browser)
    assert list(found) == ["/"]
    code, table = found["/"]
    assert re.fullmatch(r"a code block is \d+ px wide in a 688 px box: w{60}", code), code
    assert re.fullmatch(r"a table is \d+ px wide in a 688 px content box: column0 \| column1 \| column2 \| .*",
                        table), table
    assert not list((tmp_path / "site").glob("_rocmlock*")), "the measuring page is removed"
