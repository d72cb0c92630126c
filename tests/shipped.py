"""The repository's own recipes and pixi.toml, for the tests that check them: paths, the build-string
shape, the variant grid, a recipe's build-script environment, and the shipped manifest with a gfx908 GPU."""

from __future__ import annotations

import re
from pathlib import Path

import rattler_build as rb
from rocmlock.build.recipes import Matrix, render_config

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ROOT / "recipes"
MANIFEST = ROOT / "pixi.toml"
# rocm{XY}_{gfx}_py{XY}_h{hash}_{n}: the build string of every per-GPU-target package.
ARCH_BUILD = re.compile(r"^rocm(?P<rocm>\d+)_(?P<gfx>gfx[0-9a-f]+)_py(?P<py>\d+)_h[0-9a-f]{7}_\d+$")


def variant_grid(matrix: Matrix) -> set[tuple[str, str, str]]:
    """Every (rocm_version, gpu_target, python) combination of ``matrix``."""
    return {
        (r, g, p)
        for r in matrix.get("rocm_version")
        for g in matrix.get("gpu_target")
        for p in matrix.get("python")
    }


def script_env(matrix: Matrix, recipe: str, gfx: str = "gfx942", rocm: str = "7.2") -> dict[str, str]:
    """The ``build.script.env`` that ``recipe`` renders for ``gfx``, ROCm ``rocm`` and python 3.12."""
    one = matrix.narrowed({"gpu_target": [gfx], "python": ["3.12"], "rocm_version": [rocm]})
    (rv,) = rb.Stage0Recipe.from_file(str(RECIPES / recipe / "recipe.yaml")).render(
        one.to_variant_config(), render_config()
    )
    return rv.recipe.to_dict()["build"]["script"]["env"]


def manifest_with_gfx908(environment: str, features: tuple[str, ...]) -> str:
    """The shipped pixi.toml plus a gfx908 (MI100) platform and feature, and ``environment`` using ``features``."""
    text = MANIFEST.read_text().replace(
        '    { name = "linux-64-gfx90a"',
        '    { name = "linux-64-gfx908", platform = "linux-64", glibc = "2.28", __amdgpu = "0", '
        '__amdgpu_arch = "9.0.8" },\n    { name = "linux-64-gfx90a"')
    text += ('\n[feature.gfx908]\nplatforms = ["linux-64-gfx908"]\n'
             'dependencies = { amdgpu-target = { version = "*", build = "gfx908" } }\n')
    listed = ", ".join(f'"{f}"' for f in features)
    return text.replace("[environments]\n", f"[environments]\n{environment} = [{listed}]\n")


def keep_first_rocm(variants: Path) -> None:
    """Rewrite ``variants`` (a copy of recipes/variants.yaml) to its first rocm_version only: every key zipped with
    rocm_version keeps its first value. For the tests of one pin per upstream (bump, outdated) on the real file's
    layout; the shipped file pins one PyTorch per ROCm version (issue 34)."""
    import yaml

    text = variants.read_text()
    (group,) = [g for g in yaml.safe_load(text)["zip_keys"] if g[0] == "rocm_version"]
    out: list[str] = []
    current, kept = "", 0
    for line in text.splitlines(keepends=True):
        head = re.match(r"^([a-z0-9_]+):\s*$", line)
        if head:
            current, kept = head.group(1), 0
        elif not line.startswith("  - "):
            current = ""
        if current in group and line.startswith("  - "):
            kept += 1
            if kept > 1:
                continue
        out.append(line)
    variants.write_text("".join(out))
