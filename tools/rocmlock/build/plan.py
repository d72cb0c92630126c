"""``rocmlock plan``: which package variants the workspace's environments need, in build order.

For each environment the recipes are rendered offline with the environment's ROCm version, GPU
target and python; the packages it needs are its dependencies plus whatever those need among
the recipes' outputs (a closure over rendered requirement names, so a new recipe slots in without
code here). Variants are merged across environments, ordered so that every variant comes after
the variants it needs, marked ``present`` when a channel already holds them, and kept with their
reason when they cannot be built.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rattler import Version, VersionSpec

from rocmlock.build.recipes import (
    ENV_KEYS,
    Matrix,
    RenderedVariant,
    discover_recipes,
    load_matrix,
    recipe_packages,
    render_recipe,
)
from rocmlock.channel.repodata import query_channel
from rocmlock.errors import InputError, OperationError
from rocmlock.host import rocm as rocm_host
from rocmlock.util.credentials import credentials_hint, redact_text, redact_url, refused
from rocmlock.util.fs import relative_path
from rocmlock.util.text import format_table
from rocmlock.workspace.dependencies import Dependency
from rocmlock.workspace.model import Environment, Workspace

# Which environment dependency narrows which variant key.
KEY_DEPENDENCY = {"rocm_version": "rocm-version", "python": "python"}
_PLAIN_VERSION = re.compile(r"(?:==)?\s*(\d+(?:\.\d+)*)(?:\.\*)?")
_NUMBER = re.compile(r"\d+(?:\.\d+)*")


@dataclass(frozen=True)
class Variant:
    """One package variant of the plan: a CI job when it is not present and not skipped."""

    id: str
    stage: str
    recipe: str
    version: str
    build_string: str
    subdir: str
    variant: tuple[tuple[str, str], ...]
    depends_on: tuple[str, ...] = ()
    environments: tuple[str, ...] = ()
    present: bool = False
    skip_reason: str | None = None

    @property
    def to_build(self) -> bool:
        return not self.present and self.skip_reason is None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "stage": self.stage,
            "package": self.stage,
            "version": self.version,
            "recipe": self.recipe,
            "variant": dict(self.variant),
            "build_string": self.build_string,
            "subdir": self.subdir,
            "depends_on": list(self.depends_on),
            "environments": list(self.environments),
            "present": self.present,
            "skip_reason": self.skip_reason,
        }


@dataclass(frozen=True)
class Plan:
    """The variants the environments need, in dependency order."""

    manifest: Path
    recipes_dir: Path
    environments: tuple[str, ...]
    variants: tuple[Variant, ...]
    channel: str | None = None
    # Environment specs no rendered variant satisfies (e.g. pytorch 2.13.* while the recipes build 2.12.1).
    problems: tuple[str, ...] = ()

    def get(self, variant_id: str) -> Variant:
        return next(v for v in self.variants if v.id == variant_id)

    def recipe_path(self, variant: Variant) -> Path:
        """The absolute path of ``variant``'s recipe.yaml (``Variant.recipe`` is relative to the checkout)."""
        return (self.recipes_dir.parent / variant.recipe).resolve()

    @property
    def to_build(self) -> tuple[Variant, ...]:
        return tuple(v for v in self.variants if v.to_build)

    @property
    def skipped(self) -> tuple[Variant, ...]:
        return tuple(v for v in self.variants if v.skip_reason is not None)

    def to_json(self) -> dict[str, Any]:
        return {
            # Relative paths: the matrix is the same on every machine that checks out the repo.
            "manifest": self.manifest.name,
            "recipes_dir": relative_path(self.recipes_dir, self.manifest.parent),
            "channel": redact_url(self.channel) if self.channel else None,
            "environments": list(self.environments),
            "variants": [v.to_json() for v in self.variants],
            "problems": list(self.problems),
        }


@dataclass
class _Node:
    """A variant while the plan is assembled (mutable; frozen into :class:`Variant` at the end)."""

    rendered: RenderedVariant
    skip_reason: str | None
    environments: set[str] = field(default_factory=set)
    depends_on: set[str] = field(default_factory=set)

    @property
    def id(self) -> str:
        r = self.rendered
        return f"{r.package}-{r.version}-{r.build_string}"


# ----------------------------------------------------------------------------- public API


def make_plan(
    workspace: Workspace,
    environments: list[str] | None = None,
    channel: str | None = None,
    recipes_dir: Path | None = None,
) -> Plan:
    """The build plan for ``environments`` of ``workspace`` (all when empty).

    ``recipes_dir`` defaults to ``recipes/`` beside the manifest. ``channel`` (a URL or a local
    directory) marks the variants it already holds as ``present``.
    """
    channel = channel_read_url(channel) if channel else None  # a bad --channel fails before the recipes render
    recipes_dir = (recipes_dir or workspace.root / "recipes").resolve()
    recipes = discover_recipes(recipes_dir)
    matrix = load_matrix(recipes_dir)
    check_tables(recipes)
    envs = workspace.environments(environments)
    nodes: dict[str, _Node] = {}
    problems: list[str] = []
    for env in envs:
        for node in _environment_nodes(env, recipes, matrix, problems):
            merged = nodes.setdefault(node.id, node)
            merged.environments |= node.environments
            merged.depends_on |= node.depends_on
    ordered = _topological(nodes)
    _propagate_skips(ordered, nodes)
    present = channel_contents(channel, {n.rendered.package for n in ordered}) if channel else frozenset()
    variants = tuple(_freeze(n, recipes_dir, present) for n in ordered)
    return Plan(workspace.path, recipes_dir, tuple(e.name for e in envs), variants, channel, tuple(problems))


def check_tables(recipes: list[Path]) -> None:
    """rocm_components.toml, which the recipes' build scripts read, validated against the packages the recipes
    build before anything renders. (gpu_targets.toml and aotriton.toml are validated by ``load_matrix``: the
    GPU keys of variants.yaml are generated from them.)"""
    rocm_host.check_build_scripts(recipes, {name for recipe in recipes for name in recipe_packages(recipe)})


def channel_contents(channel: str, names: Iterable[str]) -> frozenset[tuple[str, str, str]]:
    """``(name, version, build)`` of every record of ``names`` in ``channel`` (linux-64 and noarch)."""
    url = _channel_url(channel)
    names = sorted(set(names))
    if not names:
        return frozenset()
    try:
        records = query_channel(url, ["linux-64", "noarch"], names)
    except Exception as exc:  # noqa: BLE001 - rattler's fetch errors are many; the message names the channel
        first = redact_text(str(exc).splitlines()[0])
        raise OperationError(
            f"cannot read channel {redact_url(url)}: {first}",
            hint=credentials_hint(url) if refused(first)
            else "check the URL/path and that the channel is indexed (repodata.json)",
        ) from None
    return frozenset((r.name.normalized, str(r.version), str(r.build)) for r in records)


# ----------------------------------------------------------------------------- per environment


def _environment_nodes(
    env: Environment, recipes: list[Path], matrix: Matrix, problems: list[str]
) -> list[_Node]:
    if not env.platforms:  # an environment whose features share no platform needs nothing built
        return []
    values, unmatched = _environment_values(env, matrix)
    env_matrix = matrix.narrowed(values)
    subdir = env.platforms[0].subdir
    rendered = [rv for path in recipes for rv in render_recipe(path, env_matrix, subdir)]
    by_package: dict[str, list[RenderedVariant]] = {}
    for rv in rendered:
        by_package.setdefault(rv.package, []).append(rv)
    needed = _needed_packages(env, by_package)
    if unmatched is not None:
        if needed:  # a spec no shipped value admits matters only where a recipe package is needed
            raise unmatched
        return []
    nodes: list[_Node] = []
    for package in sorted(needed):
        nodes.extend(_select(env, package, by_package[package], problems))
    _link(nodes, needed)
    return nodes


def _environment_values(env: Environment, matrix: Matrix) -> tuple[dict[str, list[str]], InputError | None]:
    """The matrix values the environment asks for; a key whose spec admits no shipped value keeps them all
    and comes back as the error to raise if the environment needs a recipe package."""
    values: dict[str, list[str]] = {}
    unmatched: InputError | None = None
    for key in ENV_KEYS:
        if key == "gpu_target":
            values[key] = [env.gpu_target.gfx] if env.gpu_target else list(matrix.get(key))
            continue
        dep = _dependency(env, KEY_DEPENDENCY[key])
        try:
            values[key] = _values_for(env, dep, matrix.get(key))
        except _NoShippedValue as exc:
            values[key], unmatched = list(matrix.get(key)), unmatched or exc
    return values, unmatched


class _NoShippedValue(InputError):
    """An environment's spec that admits none of the shipped values of a matrix key."""


def _admits_minor(spec: VersionSpec, text: str, minor: str) -> bool:
    """Whether ``spec`` admits some version of the ``minor`` series (``3.12``: 3.12, 3.12.x, ...).

    ``>=3.12.3,<3.13`` (what `pixi add python` writes) admits 3.12 although not ``3.12`` itself: probed are
    the minor, a late patch of it, and each version of that series the spec names and one just above it.
    """
    probes = {minor, f"{minor}.999999"}
    for number in _NUMBER.findall(text):
        if number == minor or number.startswith(f"{minor}."):
            probes |= {number, f"{number}.1"}
    return any(spec.matches(Version(p)) for p in probes)


def _dependency(env: Environment, name: str) -> Dependency | None:
    for plat in env.platforms:
        dep = env.dependency(name, plat)
        if dep is not None:
            return dep
    return None


def _values_for(env: Environment, dep: Dependency | None, shipped: tuple[str, ...]) -> list[str]:
    """The minor versions an environment's spec asks for (``"7.2.*"`` -> ``["7.2"]``)."""
    if dep is None or dep.version.strip() in ("", "*"):
        return list(shipped)
    plain = _PLAIN_VERSION.fullmatch(dep.version.strip())
    if plain:
        # An exact minor version is a request, even when the shipped matrix does not list it.
        return [".".join(plain.group(1).split(".")[:2])]
    try:
        spec = VersionSpec(dep.version)
    except Exception:  # noqa: BLE001 - rattler raises its own parse error type
        raise InputError(f"environment '{env.name}': cannot parse {dep.name} spec '{dep.version}'",
                         hint="write a conda match spec, e.g. \">=2.5,<3\"") from None
    chosen = [v for v in shipped if _admits_minor(spec, dep.version, v)]
    if not chosen:
        raise _NoShippedValue(
            f"environment '{env.name}': {dep.name} '{dep.version}' matches none of {list(shipped)}",
            hint=f'pin {dep.name} to a minor version ("X.Y.*") or add one to recipes/variants.yaml',
        )
    return chosen


def _needed_packages(env: Environment, by_package: dict[str, list[RenderedVariant]]) -> set[str]:
    """The environment's dependencies that recipes build, plus what those need, transitively."""
    wanted = {d.name for plat in env.platforms for d in env.dependencies_for(plat)}
    needed = wanted & set(by_package)
    todo = list(needed)
    while todo:
        for rv in by_package[todo.pop()]:
            for name in rv.requirement_names() & set(by_package):
                if name not in needed:
                    needed.add(name)
                    todo.append(name)
    return needed


def _select(
    env: Environment, package: str, variants: list[RenderedVariant], problems: list[str]
) -> list[_Node]:
    """The variants of ``package`` that satisfy the environment's own spec for it (if any)."""
    dep = _dependency(env, package)
    chosen = [rv for rv in variants if dep is None or _satisfies(rv, dep)]
    if not chosen and dep is not None:
        built = ", ".join(sorted({f"{rv.version} {rv.build_string}" for rv in variants}))
        problems.append(
            f"environment '{env.name}' asks {dep.matchspec()}, "
            f"but the recipe of {package} builds only {built} "
            "(bump the version in recipes/variants.yaml or relax the spec in pixi.toml)"
        )
    return [_Node(rv, rv.skip_reason or None, {env.name}) for rv in chosen]


def _satisfies(rv: RenderedVariant, dep: Dependency) -> bool:
    try:
        version_ok = dep.version.strip() in ("", "*") or VersionSpec(dep.version).matches(Version(rv.version))
    except Exception:  # noqa: BLE001 - an unparsable spec is reported by the solve, not here
        version_ok = True
    return version_ok and (dep.build is None or fnmatch.fnmatchcase(rv.build_string, dep.build))


def _link(nodes: list[_Node], needed: set[str]) -> None:
    """Each node depends on the nodes of the packages it requires whose shared variant keys agree."""
    for node in nodes:
        keys = dict(node.rendered.variant)
        for name in sorted(node.rendered.requirement_names() & needed):
            for other in nodes:
                if other is node or other.rendered.package != name:
                    continue
                shared = keys.keys() & dict(other.rendered.variant).keys()
                if all(keys[k] == dict(other.rendered.variant)[k] for k in shared):
                    node.depends_on.add(other.id)


def _topological(nodes: dict[str, _Node]) -> list[_Node]:
    """Nodes ordered by dependency depth, then package name, then id (stable across runs)."""
    depth: dict[str, int] = {}

    def visit(node_id: str, stack: tuple[str, ...]) -> int:
        if node_id in stack:
            cycle = " -> ".join((*stack[stack.index(node_id) :], node_id))
            raise InputError(
                f"recipes depend on each other in a cycle: {cycle}",
                hint="a recipe's host/run requirements must not lead back to itself",
            )
        if node_id not in depth:
            deps = nodes[node_id].depends_on
            depth[node_id] = 1 + max((visit(d, (*stack, node_id)) for d in deps), default=-1)
        return depth[node_id]

    for node_id in nodes:
        visit(node_id, ())
    return sorted(nodes.values(), key=lambda n: (depth[n.id], n.rendered.package, n.id))


def _propagate_skips(ordered: list[_Node], nodes: dict[str, _Node]) -> None:
    """A variant whose every candidate for a required package is skipped cannot be built either."""
    for node in ordered:
        if node.skip_reason is not None:
            continue
        by_name: dict[str, list[str]] = {}
        for dep_id in sorted(node.depends_on):
            by_name.setdefault(nodes[dep_id].rendered.package, []).append(dep_id)
        for name, ids in sorted(by_name.items()):
            if all(nodes[i].skip_reason is not None for i in ids):
                node.skip_reason = f"needs {name}, but {', '.join(ids)} cannot be built"
                break


def _freeze(node: _Node, recipes_dir: Path, present: frozenset[tuple[str, str, str]]) -> Variant:
    rv = node.rendered
    recipe = relative_path(rv.recipe, recipes_dir.parent)
    return Variant(
        id=node.id,
        stage=rv.package,
        recipe=recipe,
        version=rv.version,
        build_string=rv.build_string,
        subdir=rv.subdir,
        variant=rv.variant,
        depends_on=tuple(sorted(node.depends_on)),
        environments=tuple(sorted(node.environments)),
        present=(rv.package, rv.version, rv.build_string) in present,
        skip_reason=node.skip_reason,
    )


def channel_read_url(channel: str) -> str:
    """A ``--channel`` URL as clients read it: ``publish --to``'s forms are accepted (quetz+https://h/c reads
    https://h/get/c), so build-variants.yml passes one value to plan, build and publish."""
    from rocmlock.channel.publish import read_url  # the URL rules of the --to forms live with publish

    return read_url(channel)


def _channel_url(channel: str) -> str:
    if "://" in channel:
        return channel
    path = Path(channel).expanduser().resolve()
    if not path.is_dir():
        raise InputError(
            f"--channel {channel}: no such directory", hint="pass a channel URL or an indexed directory"
        )
    return path.as_uri()


# ----------------------------------------------------------------------------- text


def render_plan(plan: Plan) -> str:
    """The plan as a table for people: build order, status, environments; then skips and problems."""
    rows = [("#", "package", "version", "build", "status", "environments")]
    for i, v in enumerate(plan.variants, 1):
        status = "skip" if v.skip_reason is not None else "present" if v.present else "build"
        rows.append((str(i), v.stage, v.version, v.build_string, status, ",".join(v.environments)))
    lines = format_table(rows)
    counts = (
        f"{len(plan.variants)} variants: {len(plan.to_build)} to build, "
        f"{sum(v.present for v in plan.variants)} present, {len(plan.skipped)} skipped"
    )
    lines.append(counts)
    for v in plan.skipped:
        lines.append(f"skipped {v.id}: {v.skip_reason}")
    for problem in plan.problems:
        lines.append(f"problem: {problem}")
    return "\n".join(lines)
