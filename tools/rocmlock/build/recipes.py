"""The recipes under ``recipes/``: discovery, the shipped variant matrix, offline rendering.

Rendering goes through py-rattler-build (``Stage0Recipe.from_file(...).render(VariantConfig)``),
never through a hand-written Jinja evaluator, so what ``rocmlock plan`` shows is what
``rattler-build build`` (or ``conda-build``) would build. The recipes read GPU facts as variant keys
of ``variants.yaml`` generated from ``tools/rocmlock/data`` (:mod:`rocmlock.build.variantkeys`), so
no experimental rattler-build feature is needed, and state why a variant cannot be built in their
``context.skip_reason`` (``build.skip`` uses the same value), so one place decides a skip and
its reason. py-rattler-build's ``render`` does not apply ``build.skip`` itself; the rendered
``skip_reason`` is how we see it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import rattler_build as rb
from rattler_build.tool_config import PlatformConfig

from rocmlock.build import variantkeys
from rocmlock.errors import InputError
from rocmlock.gpu.targets import get_target
from rocmlock.util.text import escape

VARIANTS_FILE = "variants.yaml"
RECIPE_FILE = "recipe.yaml"
# The variant keys an environment decides; every other key of variants.yaml is taken as written.
ENV_KEYS = ("rocm_version", "gpu_target", "python")
REQUIREMENT_SECTIONS = ("build", "host", "run")


@dataclass(frozen=True)
class Matrix:
    """A variant configuration: key -> values, plus groups of keys that vary together. ``data``: the tables its
    generated GPU keys come from (``variantkeys.data_dir``); narrowing gpu_target or rocm_version recomputes them."""

    values: tuple[tuple[str, tuple[str, ...]], ...]
    zip_keys: tuple[tuple[str, ...], ...] = ()
    data: Path | None = None

    def get(self, key: str) -> tuple[str, ...]:
        return dict(self.values).get(key, ())

    def narrowed(self, overrides: Mapping[str, Iterable[str]]) -> Matrix:
        """This matrix with ``overrides`` replacing some keys' values (zipped siblings follow)."""
        values = {k: list(v) for k, v in self.values}
        for key, new in overrides.items():
            new = list(dict.fromkeys(new))
            group = next((g for g in self.zip_keys if key in g), None)
            # gpu_target / rocm_version zipped only with keys computed from the tables: any value, keys recomputed
            # below. Zipped with pinned values too (each ROCm's PyTorch): only the values listed, siblings follow.
            pinned = [s for s in group or () if s != key and s not in variantkeys.ALL_KEYS]
            if group is None or (self.data is not None and key in ("gpu_target", "rocm_version") and not pinned):
                values[key] = new
                continue
            if pinned and key == "rocm_version" and self.data is not None:
                # A ROCm the file does not list (an environment's "6.4.*") takes the pins of the listed ROCm nearest
                # below it, else of the lowest listed; its table keys are recomputed below for its own value.
                listed = values[key]
                picks = [_nearest_rocm(listed, v) for v in new]
                for sibling in group:
                    values[sibling] = [values[sibling][i] for i in picks]
                values[key] = new
                continue
            keep = [i for i, v in enumerate(values[key]) if v in new]
            if not keep:
                raise InputError(
                    f"recipes/{VARIANTS_FILE}: {key} {new} is not in the zipped values {values[key]}",
                    hint=f"add it to {key} (and its zip_keys siblings {list(group)})",
                )
            for sibling in group:
                values[sibling] = [values[sibling][i] for i in keep]
        if self.data is not None:  # the GPU keys of the targets and ROCm versions asked, from the tables
            values.update(variantkeys.derived(values["gpu_target"], values["rocm_version"], self.data))
        return Matrix(tuple((k, tuple(v)) for k, v in sorted(values.items())), self.zip_keys, self.data)

    def to_yaml(self, header: str = "") -> str:
        """This matrix as a variant config file rattler-build and conda-build read (``-m``): every value a quoted
        string, zip groups as block lists (conda-build reads a line ending in a bracketed list as a selector)."""
        import yaml

        data: dict[str, Any] = {k: list(v) for k, v in self.values}
        data["zip_keys"] = [list(g) for g in self.zip_keys]
        body = yaml.safe_dump(data, sort_keys=False, default_flow_style=False, default_style=None, width=1000)
        return header + body

    def to_variant_config(self) -> rb.VariantConfig:
        return rb.VariantConfig(
            {k: list(v) for k, v in self.values}, zip_keys=[list(g) for g in self.zip_keys]
        )


def _nearest_rocm(listed: Sequence[str], rocm: str) -> int:
    """The position in ``listed`` (major.minor ROCm versions) of ``rocm``, else of the highest listed version below
    it, else of the lowest listed."""
    def key(version: str) -> tuple[int, ...]:
        return tuple(int(p) if p.isdigit() else -1 for p in version.split("."))

    below = [i for i, v in enumerate(listed) if key(v) <= key(rocm)]
    if below:
        return max(below, key=lambda i: key(listed[i]))
    return min(range(len(listed)), key=lambda i: key(listed[i]))


@dataclass(frozen=True)
class RenderedVariant:
    """One variant of one recipe, rendered."""

    recipe: Path
    package: str
    version: str
    build_string: str
    subdir: str
    variant: tuple[tuple[str, str], ...]
    requirements: tuple[tuple[str, tuple[str, ...]], ...]
    run_constraints: tuple[str, ...]
    skip_reason: str

    @property
    def skipped(self) -> bool:
        return bool(self.skip_reason)

    def specs(self, section: str) -> tuple[str, ...]:
        return dict(self.requirements).get(section, ())

    def requirement_names(self) -> frozenset[str]:
        """Package names this variant needs to build or run (build, host and run)."""
        return frozenset(spec_name(s) for section in REQUIREMENT_SECTIONS for s in self.specs(section))

    def variant_value(self, key: str) -> str | None:
        return dict(self.variant).get(key)


def spec_name(spec: str) -> str:
    """``"pytorch ==2.12.1 rocm72_*"`` -> ``"pytorch"``."""
    return spec.split()[0].split("::")[-1].split("[")[0]


# ----------------------------------------------------------------------------- discovery


def discover_recipes(recipes_dir: Path) -> list[Path]:
    """Every ``<recipes_dir>/<name>/recipe.yaml``, sorted by directory name."""
    if not recipes_dir.is_dir():
        raise InputError(
            f"{recipes_dir}: no recipes directory",
            hint=variantkeys.NO_RECIPES_HINT,
        )
    found = sorted(p for p in recipes_dir.glob(f"*/{RECIPE_FILE}") if p.is_file())
    if not found:
        raise InputError(
            f"{recipes_dir}: no */{RECIPE_FILE} found", hint="each recipe lives in its own directory"
        )
    return found


def recipe_packages(recipe: Path) -> tuple[str, ...]:
    """The package names ``recipe`` builds (``package.name``, and each output's), as written there."""
    try:
        data = rb.Stage0Recipe.from_file(str(recipe)).to_dict()
    except Exception as exc:  # noqa: BLE001 - parse errors become one InputError naming the recipe
        raise InputError(f"{recipe}: cannot read: {_first_line(exc)}", hint="check the recipe's YAML") from None
    outputs = [data, *data.get("outputs", [])]
    return tuple(str(o["package"]["name"]) for o in outputs if isinstance(o.get("package"), dict) and
                 "name" in o["package"])


def load_matrix(recipes_dir: Path) -> Matrix:
    """Read ``<recipes_dir>/variants.yaml`` through rattler-build and validate its gpu targets."""
    path = recipes_dir / VARIANTS_FILE
    if not path.is_file():
        raise InputError(f"{path}: no variant configuration",
                         hint=f"{variantkeys.NO_RECIPES_HINT}; there, restore it from git")
    try:
        config = rb.VariantConfig.from_file(str(path))
    except Exception as exc:  # noqa: BLE001 - py-rattler-build raises its own hierarchy; one message is enough
        raise InputError(f"{path}: cannot read variant configuration: {_parse_message(exc)}",
                         hint="fix the YAML there (git diff recipes/variants.yaml shows what changed)") from None
    values = tuple((k, tuple(str(v) for v in vals)) for k, vals in sorted(config.to_dict().items()))
    data = variantkeys.data_dir(recipes_dir)
    zips = tuple(tuple(g) for g in (config.zip_keys or ()))
    for key in ENV_KEYS:
        if not dict(values).get(key):
            raise InputError(f"{path}: key '{key}' is missing or empty", hint=f"list at least one {key}")
    for gfx in dict(values)["gpu_target"]:
        get_target(gfx, f"{path}: key 'gpu_target'")
    variantkeys.check_zips(dict(values), [list(g) for g in zips], path)  # else an IndexError in Matrix.narrowed
    added, groups = variantkeys.check_matrix(dict(values), zips, path, data)
    values = tuple(sorted({**dict(values), **{k: tuple(v) for k, v in added.items()}}.items()))
    return Matrix(values, zips + tuple(groups), data)


# ----------------------------------------------------------------------------- rendering


def render_config(target_platform: str = "linux-64") -> rb.RenderConfig:
    """Offline render settings; no experimental features, as conda-build renders the recipes too."""
    return rb.RenderConfig(platform=PlatformConfig(target_platform=target_platform))


def render_recipe(recipe: Path, matrix: Matrix, target_platform: str = "linux-64") -> list[RenderedVariant]:
    """Render ``recipe`` for every combination of ``matrix`` (no network, no solve)."""
    try:
        stage0 = rb.Stage0Recipe.from_file(str(recipe))
        rendered = stage0.render(matrix.to_variant_config(), render_config(target_platform))
    except Exception as exc:  # noqa: BLE001 - parse and render errors become one InputError naming the recipe
        raise InputError(
            f"{recipe}: cannot render: {_first_line(exc)}",
            hint="check the recipe's Jinja and that recipes/variants.yaml defines its keys",
        ) from None
    out = [_rendered(recipe, rv, target_platform) for rv in rendered]
    return sorted(out, key=lambda v: (v.package, v.version, v.build_string))


def render_exact(recipe: Path, values: Mapping[str, str], subdir: str, build_string: str) -> Any | None:
    """py-rattler-build's rendered variant of ``recipe`` for exactly ``values``, or ``None`` when no
    variant with ``build_string`` renders any more (the recipe or variants.yaml changed since the plan)."""
    stage0 = rb.Stage0Recipe.from_file(str(recipe))
    config = rb.VariantConfig({k: [v] for k, v in values.items()})
    platform = "linux-64" if subdir == "noarch" else subdir
    return next((r for r in stage0.render(config, render_config(platform))
                 if str(r.recipe.build.string) == build_string), None)


def _rendered(recipe: Path, rv: Any, target_platform: str) -> RenderedVariant:
    stage1 = rv.recipe
    reqs = stage1.requirements.to_dict()
    requirements = tuple((s, tuple(_spec_text(x) for x in reqs.get(s, []))) for s in REQUIREMENT_SECTIONS)
    variant = tuple(sorted((k, str(v)) for k, v in rv.variant.items() if k != "target_platform"))
    noarch = stage1.build.noarch
    return RenderedVariant(
        recipe=recipe,
        package=str(stage1.package.name),
        version=str(stage1.package.version),
        build_string=str(stage1.build.string),
        subdir="noarch" if noarch else target_platform,
        variant=variant,
        requirements=requirements,
        run_constraints=tuple(_spec_text(x) for x in reqs.get("run_constraints", [])),
        skip_reason=str(stage1.context.get("skip_reason") or "").strip(),
    )


def _spec_text(item: Any) -> str:
    # Pins (pin_subpackage / pin_compatible) render as small tables; their name is what matters here.
    if isinstance(item, dict):
        for value in item.values():
            if isinstance(value, dict) and "name" in value:
                return str(value["name"])
    return str(item)


def _parse_message(exc: BaseException) -> str:
    """rattler-build's message of a variant file it cannot read: its errors print as Rust's debug form
    (``ParseError { path: ..., source: Generic { message: "...", span: ... } }``); the message alone, escaped."""
    text = _first_line(exc)
    found = re.search(r'message: "((?:[^"\\]|\\.)*)"', text)
    return escape(found.group(1).replace('\\"', '"') if found else text)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]
