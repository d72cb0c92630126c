"""Which plan variants a change of the recipes makes new (to be built): ``rocmlock bump``'s summary.

The plan is made twice, for the recipes as they are and as they would be after the change (a copy in a
temporary directory, the checkout's other top-level entries linked beside it because recipes read
``../../tools/...``); the variants of the second plan missing from the first are what must be rebuilt.
Build strings carry the hash of every variant value a recipe uses, so a new version or sha256 shows up
in the packages that use it and, through the exact pins, in those built against them.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

from rocmlock.build.plan import Plan, Variant, make_plan
from rocmlock.util.text import format_table
from rocmlock.workspace.model import Workspace


def rebuild_variants(
    ws: Workspace, recipes_dir: Path, files: Sequence[tuple[Path, str, str]]
) -> list[Variant]:
    """The variants to build once ``files`` (path, old text, new text) replace what is in ``recipes_dir``."""
    recipes_dir = recipes_dir.resolve()
    before = {v.id for v in make_plan(ws, recipes_dir=recipes_dir).variants}
    with tempfile.TemporaryDirectory(prefix="rocmlock-bump-") as tmp:
        staged = Path(tmp) / recipes_dir.name
        shutil.copytree(recipes_dir, staged, symlinks=True)
        for entry in recipes_dir.parent.iterdir():
            if entry.name != recipes_dir.name:
                (Path(tmp) / entry.name).symlink_to(entry)
        for path, _, new in files:
            (staged / path.resolve().relative_to(recipes_dir)).write_text(new)
        after: Plan = make_plan(ws, recipes_dir=staged)
    return [v for v in after.variants if v.id not in before and v.to_build]


def render_rebuild(variants: Sequence[Variant]) -> str:
    """The variants to rebuild as a table, like ``rocmlock plan``'s."""
    if not variants:
        return "no variant of the plan changes: nothing to rebuild"
    rows = [("#", "package", "version", "build", "environments")]
    rows += [
        (str(i), v.stage, v.version, v.build_string, ",".join(v.environments))
        for i, v in enumerate(variants, 1)
    ]
    return "\n".join([f"{len(variants)} variant(s) to rebuild (rocmlock plan):", *format_table(rows)])
