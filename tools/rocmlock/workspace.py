"""The pixi workspace model: pixi.toml read once, validated, and resolved into environments.

pixi.toml is TOML 1.1 (multi-line inline tables, trailing commas), read with ``tomli`` as pixi reads
it. Every key pixi 0.77 accepts is accepted here. The keys that decide a conda solve are modelled;
keys that change a solve in ways ``rocmlock lock`` cannot honour (PyPI dependencies, source
dependencies, solve options pixi records in its lock, ...) are listed in ``Workspace.lock_refusals``
(rocmlock.pixi_keys), so that ``lock`` refuses them while ``export`` and the others work; keys that
do not change a solve (tasks, activation, ...) are ignored.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from rocmlock.dependencies import Dependency, parse_dependencies
from rocmlock.errors import InputError, expect_type

# pixi's virtual-package defaults and channel URL rules live in pixi_compat; re-exported here.
from rocmlock.pixi_compat import (
    ARCHSPEC,
    CHANNEL_ALIAS,
    DEFAULT_GLIBC,
    DEFAULT_LINUX,
    VirtualPackage,
    channel_base_url,
    check_channel,
    customised_virtual_packages,
    format_virtual_package,
    is_local_channel,
    parse_virtual_package,
    subdir_default_virtual_packages,
)
from rocmlock.pixi_keys import (
    LockRefusal,
    check_known_keys,
    check_solve_options,
    is_source_dependency,
    lock_refusals,
)
from rocmlock.platforms import KNOWN_SUBDIRS, Platform, check_platform_name, parse_platforms
from rocmlock.pypi import DEFAULT_INDEXES, PypiIndexes, merge_pypi_options, parse_pypi_options
from rocmlock.targets import GpuTarget, get_target, target_for_isa

ChannelPriority = Literal["strict", "flexible", "disabled"]
# pixi_manifest/src/environment.rs, EnvironmentName::from_str; the name is also the directory envs/<name>/.
ENVIRONMENT_NAME = re.compile(r"[a-z0-9-]+")
# The keys of an [environments.<name>] table that are not feature keys (pixi_manifest toml/environment.rs).
ENVIRONMENT_KEYS = ("features", "solve-group", "no-default-feature")
__all__ = [
    "ARCHSPEC", "CHANNEL_ALIAS", "DEFAULT_GLIBC", "DEFAULT_LINUX", "Dependency", "Environment", "Feature",
    "Platform", "VirtualPackage", "Workspace", "channel_base_url", "customised_virtual_packages",
    "format_virtual_package", "is_local_channel",
    "load_workspace", "parse_virtual_package", "parse_workspace", "subdir_default_virtual_packages",
]


@dataclass(frozen=True)
class Feature:
    """A pixi feature (``default`` is the workspace's own tables)."""

    name: str
    dependencies: tuple[Dependency, ...] = ()
    target_dependencies: tuple[tuple[str, tuple[Dependency, ...]], ...] = ()
    # None: the feature names no channels and so uses the workspace's (pixi's rule).
    channels: tuple[tuple[str, int], ...] | None = None
    platforms: tuple[str, ...] | None = None
    channel_priority: ChannelPriority | None = None
    pypi_options: PypiIndexes | None = None
    # [constraints] (pixi_manifest toml/feature.rs): limit a package if it is installed, never add it.
    constraints: tuple[Dependency, ...] = ()
    target_constraints: tuple[tuple[str, tuple[Dependency, ...]], ...] = ()


@dataclass(frozen=True)
class EnvironmentSpec:
    """An ``[environments]`` entry as written."""

    name: str
    features: tuple[str, ...]
    solve_group: str | None = None
    no_default_feature: bool = False


@dataclass(frozen=True)
class Environment:
    """An environment resolved against its features: what one solve per platform needs."""

    name: str
    features: tuple[str, ...]
    channels: tuple[str, ...]
    platforms: tuple[Platform, ...]
    dependencies: tuple[tuple[str, tuple[Dependency, ...]], ...]
    gpu_target: GpuTarget | None
    solve_group: str | None = None
    channel_priority: ChannelPriority = "strict"
    # Where pip finds the environment's PyPI pins (pixi's merged pypi-options).
    pypi_indexes: PypiIndexes = DEFAULT_INDEXES
    constraints: tuple[tuple[str, tuple[Dependency, ...]], ...] = ()

    def constraints_for(self, platform: Platform) -> tuple[Dependency, ...]:
        """The ``[constraints]`` of this environment on ``platform`` (merged like the dependencies)."""
        return dict(self.constraints).get(platform.name, ())

    def dependencies_for(self, platform: Platform) -> tuple[Dependency, ...]:
        """The dependencies of this environment on ``platform`` (target-specific ones merged in).

        A name may appear more than once when several features constrain it; every spec applies.
        """
        return dict(self.dependencies)[platform.name]

    def platform(self, name: str) -> Platform:
        """This environment's platform called ``name``."""
        return next(p for p in self.platforms if p.name == name)

    def dependency(self, name: str, platform: Platform | None = None) -> Dependency | None:
        """The dependency named ``name`` (on the first platform unless one is given)."""
        plat = platform or (self.platforms[0] if self.platforms else None)
        if plat is None:
            return None
        return next((d for d in self.dependencies_for(plat) if d.name == name), None)


@dataclass(frozen=True)
class Workspace:
    """A validated pixi.toml."""

    path: Path
    name: str
    channels: tuple[tuple[str, int], ...]
    platforms: tuple[Platform, ...]
    channel_priority: ChannelPriority
    features: dict[str, Feature] = field(hash=False)
    environment_specs: dict[str, EnvironmentSpec] = field(hash=False)
    # Keys `rocmlock lock` cannot honour (pixi_keys.lock_refusals); empty for a workspace it can lock.
    lock_refusals: tuple[LockRefusal, ...] = ()
    pypi_options: PypiIndexes = DEFAULT_INDEXES

    @property
    def root(self) -> Path:
        return self.path.parent

    def channel_url(self, channel: str) -> str:
        """``channel`` (as written in the manifest) as a base URL; paths are relative to :attr:`root`."""
        return channel_base_url(channel, self.root)

    def environment_names(self) -> list[str]:
        """Environment names as declared; ``default`` first when pixi would create it."""
        return list(self.environment_specs)

    def environment(self, name: str) -> Environment:
        """Resolve environment ``name``; an unknown name is an error that lists the known ones."""
        spec = self.environment_specs.get(name)
        if spec is None:
            known = ", ".join(self.environment_specs)
            raise InputError(f"{self.path}: unknown environment '{name}'", hint=f"known environments: {known}")
        return _resolve(self, spec)

    def environments(self, names: list[str] | None = None) -> list[Environment]:
        """Resolve the named environments (all when ``names`` is empty)."""
        return [self.environment(n) for n in (names or self.environment_names())]


# ----------------------------------------------------------------------------- parsing


def load_workspace(path: str | Path) -> Workspace:
    """Read and validate ``pixi.toml`` or a ``pyproject.toml`` with ``[tool.pixi]`` (a file or its directory)."""
    from rocmlock.pixi_pyproject import PYPROJECT, find_manifest, load_pyproject

    path = find_manifest(Path(path))
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise InputError(f"{path}: no such manifest", hint="pass --manifest-path to a pixi.toml") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read manifest: {exc.strerror}") from None
    except UnicodeDecodeError as exc:  # pixi reads the manifest as UTF-8 too (TOML requires it)
        raise InputError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.object[exc.start:exc.start + 1]!r})",
                         hint="save pixi.toml as UTF-8") from None
    # TOML 1.1 (multi-line inline tables, trailing commas), which pixi reads and Python 3.11's tomllib
    # (TOML 1.0) does not. Imported here: `rocmlock unpack` on a bare node never reads a manifest.
    import tomli

    try:
        data = tomli.loads(text)
    except tomli.TOMLDecodeError as exc:
        raise InputError(f"{path}: invalid TOML: {exc}", hint="fix the syntax at that line") from None
    except RecursionError as exc:  # tomli: "TOML inline arrays/tables are nested more than the allowed 400 levels"
        raise InputError(f"{path}: invalid TOML: {exc}", hint="flatten the nesting") from None
    if path.name == PYPROJECT:
        return load_pyproject(data, path.resolve())
    return parse_workspace(data, path.resolve())


def parse_workspace(data: dict[str, Any], path: Path) -> Workspace:
    """Build a :class:`Workspace` from parsed TOML; every error names ``path`` and the key."""
    table_key = "workspace" if "workspace" in data else "project" if "project" in data else None
    if table_key is None:
        hint = "this is a package manifest (pixi-build): pass the workspace's pixi.toml" if "package" in data \
            else "add [workspace] with name, channels, platforms"
        raise InputError(f"{path}: missing [workspace] table", hint=hint)
    ws = expect_type(data[table_key], dict, path, table_key, "a table")
    if "channels" not in ws:
        raise InputError(f"{path}: [{table_key}] has no 'channels'", hint=f"add channels = [...] to [{table_key}]")
    channels = _parse_channels(ws["channels"], path, f"{table_key}.channels")
    # pixi_manifest toml/workspace.rs: `platforms` is optional (none: every environment has no platform).
    platforms = parse_platforms(ws.get("platforms", []), path, f"{table_key}.platforms")
    priority = _parse_priority(ws.get("channel-priority", "strict"), path, f"{table_key}.channel-priority")
    check_solve_options(ws, data, path, table_key)
    features = {"default": _parse_feature("default", data, path, "", top=True)}
    for fname, ftable in expect_type(data.get("feature", {}), dict, path, "feature", "a table").items():
        if fname == "default":  # pixi_manifest toml/manifest.rs: the top-level tables are the default feature
            raise InputError(f"{path}: key 'feature.default': the feature 'default' is reserved and cannot be redefined",
                             hint="put its tables at the top level ([dependencies], ...) or give the feature another name")
        expect_type(ftable, dict, path, f"feature.{fname}", "a table")
        features[fname] = _parse_feature(fname, ftable, path, f"feature.{fname}.")
    envs = _parse_environments(data.get("environments", {}), path, features)
    platforms = _referenced_platforms(platforms, features, path)
    check_known_keys(data, path, table_key)  # last, as pixi's TableHelper::finalize: a wrong type is named first
    return Workspace(
        path=path,
        name=expect_type(ws.get("name", path.parent.name), str, path, f"{table_key}.name", "a string"),
        channels=channels,
        platforms=platforms,
        channel_priority=priority,
        features=features,
        environment_specs=envs,
        lock_refusals=lock_refusals(data, table_key),
        pypi_options=parse_pypi_options(ws.get("pypi-options", {}), path, f"{table_key}.pypi-options"),
    )


def _parse_priority(value: Any, path: Path, key: str) -> Any:
    """``channel-priority`` as written (None when absent); any other value than pixi's three is an error.
    Only ``strict`` can be recorded in pixi.lock, so `rocmlock lock` refuses the others (pixi_keys)."""
    if value is not None and (not isinstance(value, str) or value not in get_args(ChannelPriority)):
        raise InputError(f"{path}: key '{key}' is {value!r}, it must be one of strict, flexible, disabled",
                         hint="use one of: strict, flexible, disabled")
    return value


def _parse_channels(value: Any, path: Path, key: str) -> tuple[tuple[str, int], ...]:
    out: list[tuple[str, int]] = []
    for i, item in enumerate(expect_type(value, list, path, key, "a list")):
        if isinstance(item, str):
            out.append((check_channel(item, path, f"{key}[{i}]"), 0))
        elif isinstance(item, dict) and isinstance(item.get("channel"), str):
            check_channel(item["channel"], path, f"{key}[{i}]")
            priority = item.get("priority", 0)
            if not isinstance(priority, int) or isinstance(priority, bool):
                raise InputError(f"{path}: key '{key}[{i}].priority' must be an integer, "
                                 f"got {type(priority).__name__}", hint="e.g. priority = 10 (higher comes first)")
            out.append((item["channel"], priority))
        else:
            raise InputError(
                f"{path}: key '{key}[{i}]' must be a channel name, URL or {{ channel, priority }} table"
            )
    return tuple(out)


def _combined_dependencies(table: dict[str, Any], path: Path, prefix: str) -> tuple[Dependency, ...]:
    # pixi_manifest/src/target.rs, combined_dependencies: run, host and build specs of one target
    # together, a later kind replacing a name of an earlier one (host-/build-dependencies are
    # deprecated aliases in a workspace, toml/manifest.rs).
    merged: dict[str, Dependency] = {}
    for key in ("dependencies", "host-dependencies", "build-dependencies"):
        merged.update({d.name: d for d in parse_dependencies(table.get(key, {}), path, f"{prefix}{key}")})
    return tuple(sorted(merged.values(), key=lambda d: d.name))


def _parse_feature(name: str, table: dict[str, Any], path: Path, prefix: str, top: bool = False) -> Feature:
    deps = _combined_dependencies(table, path, prefix)
    target: list[tuple[str, tuple[Dependency, ...]]] = []
    constraints: list[tuple[str, tuple[Dependency, ...]]] = [("", _constraints(table, path, prefix))]
    for plat, ttable in sorted(expect_type(table.get("target", {}), dict, path, f"{prefix}target", "a table").items()):
        expect_type(ttable, dict, path, f"{prefix}target.{plat}", "a table")
        if "(" in plat:  # pixi_manifest/src/target.rs, parse_if_expression: a conditional selector
            raise InputError(f"{path}: key '{prefix}target.{plat}' (a conditional target) is not supported by rocmlock",
                             hint="use a platform, subdir or family selector, or `pixi lock` for such workspaces")
        target.append((plat, _combined_dependencies(ttable, path, f"{prefix}target.{plat}.")))
        constraints.append((plat, _constraints(ttable, path, f"{prefix}target.{plat}.")))
    channels: tuple[tuple[str, int], ...] | None = None
    platforms: tuple[str, ...] | None = None
    priority = None
    if not top:
        if "channels" in table:
            channels = _parse_channels(table["channels"], path, f"{prefix}channels")
        priority = _parse_priority(table.get("channel-priority"), path, f"{prefix}channel-priority")
        if "platforms" in table:
            plats = expect_type(table["platforms"], list, path, f"{prefix}platforms", "a list")
            for i, p in enumerate(plats):
                check_platform_name(expect_type(p, str, path, f"{prefix}platforms[{i}]", "a platform name"),
                                    path, f"{prefix}platforms[{i}]")
            platforms = tuple(dict.fromkeys(plats))
    pypi = parse_pypi_options(table["pypi-options"], path, f"{prefix}pypi-options") if "pypi-options" in table \
        else None
    return Feature(name, deps, tuple(target), channels, platforms, priority, pypi, constraints[0][1],
                   tuple(c for c in constraints[1:] if c[1]))


def _constraints(table: dict[str, Any], path: Path, prefix: str) -> tuple[Dependency, ...]:
    value = table.get("constraints", {})
    for name, spec in expect_type(value, dict, path, f"{prefix}constraints", "a table").items():
        if is_source_dependency(spec):  # pixi: SourceConstraintNotSupported (satisfiability/platform.rs)
            raise InputError(f"{path}: key '{prefix}constraints.{name}' is a source spec, which [constraints] "
                             "does not take", hint="give a version (and build) instead")
    return parse_dependencies(value, path, f"{prefix}constraints")


def _environment_table(spec: Any, path: Path, where: str,
                       features: dict[str, Feature]) -> tuple[list[str], str | None, bool]:
    """(features, solve-group, no-default-feature) of one ``[environments]`` entry, each type checked."""
    if isinstance(spec, list):
        return _feature_names(spec, path, where), None, False
    if not isinstance(spec, dict):
        raise InputError(f"{path}: key '{where}' must be a list of features or a table, got {type(spec).__name__}")
    feats = _feature_names(spec.get("features", []), path, f"{where}.features")
    group = spec.get("solve-group")
    if group is not None:
        expect_type(group, str, path, f"{where}.solve-group", "a string")
    no_default = expect_type(spec.get("no-default-feature", False), bool, path, f"{where}.no-default-feature",
                             "a boolean")
    inline = {k: v for k, v in spec.items() if k not in ENVIRONMENT_KEYS}
    if inline:  # pixi_manifest toml/manifest.rs: an implicit feature, first of the environment's
        features[where] = _parse_feature(where, inline, path, f"{where}.")
        feats = [where, *feats]
    return feats, group, no_default


def _feature_names(value: Any, path: Path, key: str) -> list[str]:
    for i, name in enumerate(expect_type(value, list, path, key, "a list")):
        expect_type(name, str, path, f"{key}[{i}]", "a feature name (a string)")
    return list(value)


def _parse_environments(
    value: Any, path: Path, features: dict[str, Feature]
) -> dict[str, EnvironmentSpec]:
    envs: dict[str, EnvironmentSpec] = {}
    for name, spec in expect_type(value, dict, path, "environments", "a table").items():
        where = f"environments.{name}"
        if not ENVIRONMENT_NAME.fullmatch(name):
            raise InputError(f"{path}: key '{where}': '{name}' is not a valid environment name",
                             hint="use lowercase letters, digits and '-' (pixi's rule; it is also envs/<name>/)")
        feats, group, no_default = _environment_table(spec, path, where, features)
        for f in feats:
            if f == where:
                continue
            if f not in features or f == "default":
                known = ", ".join(sorted(f for f in features if f != "default" and "." not in f)) or "none"
                raise InputError(f"{path}: key '{where}' uses unknown feature '{f}'",
                                 hint=f"known features: {known}")
        envs[name] = EnvironmentSpec(name, tuple(feats), group, no_default)
    if "default" not in envs:
        envs = {"default": EnvironmentSpec("default", ()), **envs}
    return envs


# ----------------------------------------------------------------------------- resolving


def _features(ws: Workspace, spec: EnvironmentSpec) -> list[Feature]:
    # pixi orders an environment's features as listed, then the default feature.
    feats = [ws.features[f] for f in spec.features]
    if not spec.no_default_feature:
        feats.append(ws.features["default"])
    return feats


def _group_features(ws: Workspace, spec: EnvironmentSpec) -> list[Feature]:
    """The features whose channels an environment is solved, locked and checked with.

    pixi uses the solve group's channels for each of its environments (pixi_core workspace/solve_group.rs,
    SolveGroup::features: every environment's features in declaration order, first mention wins;
    lock_file/update.rs writes and satisfiability/environment.rs compares ``grouped_env.channels()``).
    """
    if spec.solve_group is None:
        return _features(ws, spec)
    members = [s for s in ws.environment_specs.values() if s.solve_group == spec.solve_group]
    unique: dict[str, Feature] = {}
    for member in members:
        for feat in _features(ws, member):
            unique.setdefault(feat.name, feat)
    return list(unique.values())


def _resolve(ws: Workspace, spec: EnvironmentSpec) -> Environment:
    feats = _features(ws, spec)
    where = f"{ws.path}: environment '{spec.name}'"
    channels = _merge_channels(ws, _group_features(ws, spec))
    platforms = _environment_platforms(ws, feats, where)
    deps_by_platform = [(plat.name, _platform_specs(feats, plat)) for plat in platforms]
    target = _gpu_target(platforms, deps_by_platform, where)
    return Environment(
        name=spec.name,
        features=tuple(f.name for f in feats),
        channels=channels,
        platforms=platforms,
        dependencies=tuple(deps_by_platform),
        gpu_target=target,
        solve_group=spec.solve_group,
        channel_priority=_channel_priority(ws, feats, where),
        pypi_indexes=merge_pypi_options(ws.pypi_options, [(f.name, f.pypi_options) for f in feats
                                                           if f.pypi_options is not None], where),
        constraints=tuple((p.name, _platform_specs(feats, p, constraints=True)) for p in platforms),
    )


def _selector_rank(selector: str, plat: Platform) -> int | None:
    """How specific ``[target.<selector>]`` is for ``plat`` (higher wins), or None when it does not apply.

    pixi_manifest/src/target.rs (TargetSelector::matches, family_name_to_selector) and platform.rs
    (PlatformGlob: ``*`` is the only wildcard, matched against the whole platform name)."""
    if "*" in selector:
        return 3 if fnmatch.fnmatchcase(plat.name, selector) else None
    family = plat.subdir.split("-", 1)[0]
    ranks = {plat.name: 3, plat.subdir: 2, family: 1, "unix": 0 if family in ("linux", "osx") else None}
    if family == "osx":
        ranks["macos"] = 1
    return ranks.get(selector)


def _platform_specs(feats: list[Feature], plat: Platform, constraints: bool = False) -> tuple[Dependency, ...]:
    # pixi (pixi_manifest feature.rs, combined_dependencies; combined_constraints alike): within a feature
    # a more specific target replaces the spec of the same name; across features every spec applies.
    out: list[Dependency] = []
    for feat in feats:
        merged = {dep.name: dep for dep in (feat.constraints if constraints else feat.dependencies)}
        targets = [(r, deps) for sel, deps in (feat.target_constraints if constraints else feat.target_dependencies)
                   if (r := _selector_rank(sel, plat)) is not None]
        for _, tdeps in sorted(targets, key=lambda t: t[0]):
            merged.update({dep.name: dep for dep in tdeps})
        out.extend(dep for dep in merged.values() if dep not in out)
    return tuple(sorted(out, key=lambda d: (d.name, d.matchspec())))


def _channel_priority(ws: Workspace, feats: list[Feature], where: str) -> ChannelPriority:
    found = {f.channel_priority for f in feats if f.channel_priority is not None}
    if len(found) > 1:
        raise InputError(f"{where} combines features with different channel-priority values",
                         hint="set channel-priority once, in [workspace]")
    return found.pop() if found else ws.channel_priority


def _merge_channels(ws: Workspace, feats: list[Feature]) -> tuple[str, ...]:
    # pixi (features_ext.rs, prioritized_channels): every feature contributes its own channels or,
    # when it names none, the workspace's; a stable sort by priority (high first), then first wins.
    entries: list[tuple[str, int]] = []
    for feat in feats:
        entries.extend(ws.channels if feat.channels is None else feat.channels)
    order: list[str] = []
    for chan, _ in sorted(entries, key=lambda e: -e[1]):
        if chan not in order:
            order.append(chan)
    return tuple(order)


def _referenced_platforms(platforms: tuple[Platform, ...], features: dict[str, Feature],
                          path: Path) -> tuple[Platform, ...]:
    """The workspace platforms after the features' ``platforms`` lists are checked against them.

    pixi_manifest/src/toml/manifest.rs (migrate_system_requirements_to_platforms): when every
    declared platform is a plain subdir, a feature may name another subdir, which joins the
    workspace's platforms; otherwise every name must be a declared platform.
    """
    out = list(platforms)
    simple = all(not p.is_rich for p in platforms)
    for feat in features.values():
        for name in feat.platforms or ():
            if any(p.name == name for p in out):
                continue
            if simple and name in KNOWN_SUBDIRS:
                out.append(Platform(name, name))
                continue
            known = ", ".join(p.name for p in platforms)
            key = f"{feat.name}.platforms" if "." in feat.name else f"feature.{feat.name}.platforms"
            raise InputError(f"{path}: key '{key}' names platform '{name}', "
                             "which the workspace does not declare",
                             hint=f"the workspace declares: {known}")
    return tuple(out)


def _environment_platforms(ws: Workspace, feats: list[Feature], where: str) -> tuple[Platform, ...]:
    # pixi_manifest/src/features_ext.rs (FeaturesExt::platforms): a platform is the environment's when
    # every feature names it, by name or by its bare subdir; where a feature pins a platform by exact
    # name, the subdir shorthand no longer drags in the other platforms of that subdir.
    def supports(feat: Feature, plat: Platform) -> bool:
        return feat.platforms is None or plat.name in feat.platforms or plat.subdir in feat.platforms

    exact = {n for f in feats for n in f.platforms or ()}
    exact_subdirs = {p.subdir for p in ws.platforms if p.name in exact}
    # Features that share no platform leave the environment with none: pixi accepts that and locks the
    # environment empty (its examples/constructor-minimal), so rocmlock does too.
    return tuple(p for p in ws.platforms if all(supports(f, p) for f in feats)
                 and (p.name in exact or p.subdir not in exact_subdirs))


def _gpu_target(
    platforms: tuple[Platform, ...], deps: list[tuple[str, tuple[Dependency, ...]]], where: str
) -> GpuTarget | None:
    from_dep: GpuTarget | None = None
    for _, plat_deps in deps:
        for dep in plat_deps:
            if dep.name == "amdgpu-target" and dep.build:
                from_dep = get_target(dep.build, f"{where}, dependency 'amdgpu-target' build")
    platform_targets = {
        plat.name: target_for_isa(isa, f"{where}, platform '{plat.name}'")
        for plat in platforms
        if (isa := plat.virtual_package("__amdgpu_arch")) is not None
    }
    for plat_name, found in platform_targets.items():
        if from_dep and found != from_dep:
            raise InputError(
                f"{where}: amdgpu-target build '{from_dep.gfx}' conflicts with platform '{plat_name}' "
                f"(__amdgpu_arch {found.isa} is {found.gfx})",
                hint="make the amdgpu-target build and the platform's __amdgpu_arch name the same GPU",
            )
    # An environment over several GPU platforms without an amdgpu-target pin has no single target;
    # each platform is still solved with its own __amdgpu_arch.
    distinct = set(platform_targets.values())
    from_platform = distinct.pop() if len(distinct) == 1 and len(platform_targets) == len(platforms) else None
    return from_dep or from_platform
