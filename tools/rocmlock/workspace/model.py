"""An environment resolved against its features as pixi does: channels, platforms, the dependencies and
constraints of each platform, channel-priority, PyPI indexes and the GPU target."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from pathlib import Path

from rocmlock.errors import InputError
from rocmlock.gpu.targets import GpuTarget, get_target, target_for_isa
from rocmlock.util.tables import did_you_mean
from rocmlock.util.text import escape
from rocmlock.workspace.dependencies import Dependency
from rocmlock.workspace.pixi_compat import channel_base_url
from rocmlock.workspace.pixi_keys import LockRefusal
from rocmlock.workspace.platforms import Platform
from rocmlock.workspace.pypi import DEFAULT_INDEXES, PypiIndexes, merge_pypi_options
from rocmlock.workspace.tables import ChannelPriority, EnvironmentSpec, Feature

__all__ = ["Environment", "Workspace", "resolve_environment"]


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
    # Keys pixi reads under an old name and warns about (key, new name): rocmlock reads them too, and says so.
    deprecated: tuple[tuple[str, str], ...] = ()
    # The manifest's bytes as read and parsed (load_workspace): what a lock was solved from, whatever the file
    # holds by the time the lock is written.
    source: bytes = field(default=b"", hash=False, compare=False, repr=False)

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
            raise InputError(f"{self.path}: unknown environment '{name}'{did_you_mean(name, self.environment_specs)}",
                             hint=f"known environments: {known}")
        return resolve_environment(self, spec)

    def environments(self, names: list[str] | None = None) -> list[Environment]:
        """Resolve the named environments (all when ``names`` is empty)."""
        return [self.environment(n) for n in (names or self.environment_names())]

    def manifest_warnings(self) -> tuple[str, ...]:
        """What pixi warns about on loading this manifest, one line each: a key under a deprecated name, read as its
        new one (:func:`rocmlock.workspace.manifest.deprecated_keys`), a feature no environment uses (pixi_manifest
        toml/manifest.rs, Warning::unused_feature: its dependencies are never solved), and a ``[target.<selector>]``
        table that applies on none of the platforms it could, so that its dependencies, constraints and activation
        reach no environment (a typo such as ``linux64``; toml/manifest.rs and toml/feature.rs,
        create_unsupported_selector_warning): a selector must match a workspace platform and, in a feature that lists
        ``platforms``, one of those."""
        table = "tool.pixi." if self.path.name == "pyproject.toml" else ""  # keys named as written
        used = {f for spec in self.environment_specs.values() for f in spec.features}
        out = [f"{self.path}: [{table}feature.{escape(name)}] is used by no environment: its dependencies are never "
               "solved (pixi warns alike); add it to one in [environments], or remove it"
               for name in self.features if name != "default" and not name.startswith("environments.")
               and name not in used]
        out += [f"{self.path}: key '{table}{escape(key)}' is deprecated: use '{table}{escape(new)}' (pixi warns alike)"
                for key, new in self.deprecated]
        for feat in self.features.values():
            if feat.name == "default":
                where = f"[{table}target"
            elif feat.name.startswith("environments."):  # an environment's inline keys: its own feature
                where = f"[{table}{feat.name}.target"
            else:
                where = f"[{table}feature.{feat.name}.target"
            selectors = dict.fromkeys(s for s, _ in (*feat.target_dependencies, *feat.target_constraints,
                                                     *feat.activation) if s)
            for selector in selectors:
                matching = [p.name for p in self.platforms if _selector_rank(selector, p) is not None]
                own = [p for p in matching if feat.platforms is None or p in feat.platforms]
                if not own:
                    among = ", ".join(feat.platforms if matching and feat.platforms is not None
                                      else (p.name for p in self.platforms)) or "none"
                    whose = f"feature '{feat.name}'" if matching else "workspace"
                    out.append(f"{self.path}: {escape(where)}.{escape(selector)}] matches none of the platforms of "
                               f"the {whose} ({escape(among)}): what it declares applies nowhere (pixi warns alike)")
        return tuple(out)


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


def resolve_environment(ws: Workspace, spec: EnvironmentSpec) -> Environment:
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
