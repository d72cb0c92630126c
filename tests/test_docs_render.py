"""The docs site reads well (issue 35, item 5): docs/hooks/render_check.py fails `mkdocs build --strict` (.ci/run)
on a code line wider than the theme's code box and on a list that renders as a paragraph; these tests check that
the checks catch what they are for, on HTML rendered by the same Markdown the site uses."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import markdown
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
    assert {"reference.md", "index.md", "try-it.md", "install.md", "air-gapped.md"} <= _hook("render_check").WIDTH_CHECKED


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
    assert check.problems("recipes.md", page) == []  # not (yet) held to the width


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
    platform = next(line.strip().rstrip(",") for line in snippet.splitlines() if "linux-64-gfx1201" in line)
    feature = snippet.split("[feature.gfx1201]", 1)[1].split("[environments]", 1)[0]
    root = (REPO / "pixi.toml").read_text()
    root = root.replace("platforms = [\n", f"platforms = [\n    {platform},\n", 1)
    root = root.replace("[environments]\n", f"[feature.gfx1201]{feature}[environments]\nrx9070 = "
                        '["rocm72", "gfx1201", "train"]\n', 1)
    (tmp_path / "pixi.toml").write_text(root)
    env = load_workspace(tmp_path / "pixi.toml").environment("rx9070")
    assert env.gpu_target is not None and (env.gpu_target.gfx, env.gpu_target.isa) == ("gfx1201", "12.0.1")
    assert [p.name for p in env.platforms] == ["linux-64-gfx1201"]
