"""pixi.toml's tables, each read and validated: channels, channel-priority, a feature (the workspace's
own tables are the ``default`` one) and the ``[environments]`` entries.

Every error names the manifest and the key. Merging features into environments is ``workspace_resolve``'s.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from rocmlock.errors import InputError, expect_type
from rocmlock.workspace.dependencies import Dependency, parse_dependencies
from rocmlock.workspace.pixi_compat import check_channel
from rocmlock.workspace.pixi_keys import is_source_dependency
from rocmlock.workspace.platforms import KNOWN_SUBDIRS, Platform, check_platform_name, check_selector
from rocmlock.workspace.pypi import PypiIndexes, parse_pypi_options

__all__ = [
    "ENVIRONMENT_KEYS", "ENVIRONMENT_NAME", "Activation", "ChannelPriority", "EnvironmentSpec", "Feature", "parse_channels",
    "parse_environments", "parse_feature", "parse_priority", "referenced_platforms",
]

ChannelPriority = Literal["strict", "flexible", "disabled"]
# pixi_manifest/src/environment.rs, EnvironmentName::from_str; the name is also the directory envs/<name>/.
ENVIRONMENT_NAME = re.compile(r"[a-z0-9-]+")
ENVIRONMENT_NAME_MAX = 255
# The keys of an [environments.<name>] table that are not feature keys (pixi_manifest toml/environment.rs).
ENVIRONMENT_KEYS = ("features", "solve-group", "no-default-feature")


@dataclass(frozen=True)
class Activation:
    """One ``[activation]`` table (pixi_manifest/src/activation.rs: ``scripts`` and ``env``, nothing else)."""

    scripts: tuple[str, ...] | None = None
    env: tuple[tuple[str, str], ...] | None = None


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
    # [activation] ("") and [target.<selector>.activation], as written (workspace/activation.py merges them).
    activation: tuple[tuple[str, Activation], ...] = ()


@dataclass(frozen=True)
class EnvironmentSpec:
    """An ``[environments]`` entry as written."""

    name: str
    features: tuple[str, ...]
    solve_group: str | None = None
    no_default_feature: bool = False


def parse_priority(value: Any, path: Path, key: str) -> Any:
    """``channel-priority`` as written (None when absent); any other value than pixi's three is an error.
    Only ``strict`` can be recorded in pixi.lock, so `rocmlock lock` refuses the others (pixi_keys)."""
    if value is not None and (not isinstance(value, str) or value not in get_args(ChannelPriority)):
        raise InputError(f"{path}: key '{key}' is {value!r}, it must be one of strict, flexible, disabled",
                         hint="use one of: strict, flexible, disabled")
    return value


def parse_channels(value: Any, path: Path, key: str) -> tuple[tuple[str, int], ...]:
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
            , hint="write \"conda-forge\", a URL, or { channel = \"...\", priority = 1 }")
    return tuple(out)


def _combined_dependencies(table: dict[str, Any], path: Path, prefix: str) -> tuple[Dependency, ...]:
    # pixi_manifest/src/target.rs, combined_dependencies: run, host and build specs of one target
    # together, a later kind replacing a name of an earlier one (host-/build-dependencies are
    # deprecated aliases in a workspace, toml/manifest.rs).
    merged: dict[str, Dependency] = {}
    for key in ("dependencies", "host-dependencies", "build-dependencies"):
        merged.update({d.name: d for d in parse_dependencies(table.get(key, {}), path, f"{prefix}{key}")})
    return tuple(sorted(merged.values(), key=lambda d: d.name))


def parse_feature(name: str, table: dict[str, Any], path: Path, prefix: str, top: bool = False) -> Feature:
    deps = _combined_dependencies(table, path, prefix)
    target: list[tuple[str, tuple[Dependency, ...]]] = []
    constraints: list[tuple[str, tuple[Dependency, ...]]] = [("", _constraints(table, path, prefix))]
    activation = [("", _activation(table.get("activation"), path, f"{prefix}activation"))]
    for plat, ttable in sorted(expect_type(table.get("target", {}), dict, path, f"{prefix}target", "a table").items()):
        expect_type(ttable, dict, path, f"{prefix}target.{plat}", "a table")
        if "(" in plat:  # pixi_manifest/src/target.rs, parse_if_expression: a conditional selector
            raise InputError(f"{path}: key '{prefix}target.{plat}' (a conditional target) is not supported by rocmlock",
                             hint="use a platform, subdir or family selector, or `pixi lock` for such workspaces")
        check_selector(plat, path, f"{prefix}target.{plat}")
        target.append((plat, _combined_dependencies(ttable, path, f"{prefix}target.{plat}.")))
        constraints.append((plat, _constraints(ttable, path, f"{prefix}target.{plat}.")))
        activation.append((plat, _activation(ttable.get("activation"), path, f"{prefix}target.{plat}.activation")))
    channels: tuple[tuple[str, int], ...] | None = None
    platforms: tuple[str, ...] | None = None
    priority = None
    if not top:
        if "channels" in table:
            channels = parse_channels(table["channels"], path, f"{prefix}channels")
        priority = parse_priority(table.get("channel-priority"), path, f"{prefix}channel-priority")
        if "platforms" in table:
            plats = expect_type(table["platforms"], list, path, f"{prefix}platforms", "a list")
            for i, p in enumerate(plats):
                check_platform_name(expect_type(p, str, path, f"{prefix}platforms[{i}]", "a platform name"),
                                    path, f"{prefix}platforms[{i}]")
            platforms = tuple(dict.fromkeys(plats))
    pypi = parse_pypi_options(table["pypi-options"], path, f"{prefix}pypi-options") if "pypi-options" in table \
        else None
    return Feature(name, deps, tuple(target), channels, platforms, priority, pypi, constraints[0][1],
                   tuple(c for c in constraints[1:] if c[1]), tuple((s, a) for s, a in activation if a is not None))


def _activation(value: Any, path: Path, key: str) -> Activation | None:
    """An ``[activation]`` table: ``scripts`` a list of paths, ``env`` a table of strings; pixi refuses other keys
    (toml_span TableHelper::finalize), so does this."""
    if value is None:
        return None
    table = expect_type(value, dict, path, key, "a table")
    for other in sorted(set(table) - {"scripts", "env"}):
        raise InputError(f"{path}: key '{key}.{other}' is not an activation key", hint="use scripts or env")
    scripts = None
    if "scripts" in table:
        items = expect_type(table["scripts"], list, path, f"{key}.scripts", "a list")
        scripts = tuple(expect_type(s, str, path, f"{key}.scripts[{i}]", "a path") for i, s in enumerate(items))
    env = None
    if "env" in table:
        pairs = expect_type(table["env"], dict, path, f"{key}.env", "a table").items()
        env = tuple((k, expect_type(v, str, path, f"{key}.env.{k}", "a string")) for k, v in pairs)
    return Activation(scripts, env)


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
        raise InputError(f"{path}: key '{where}' must be a list of features or a table, got {type(spec).__name__}",
                         hint="write a list of features, e.g. [\"gfx942\"], or { features = [...] }")
    feats = _feature_names(spec.get("features", []), path, f"{where}.features")
    group = spec.get("solve-group")
    if group is not None:
        expect_type(group, str, path, f"{where}.solve-group", "a string")
    no_default = expect_type(spec.get("no-default-feature", False), bool, path, f"{where}.no-default-feature",
                             "a boolean")
    inline = {k: v for k, v in spec.items() if k not in ENVIRONMENT_KEYS}
    if inline:  # pixi_manifest toml/manifest.rs: an implicit feature, first of the environment's
        features[where] = parse_feature(where, inline, path, f"{where}.")
        feats = [where, *feats]
    return feats, group, no_default


def _feature_names(value: Any, path: Path, key: str) -> list[str]:
    for i, name in enumerate(expect_type(value, list, path, key, "a list")):
        expect_type(name, str, path, f"{key}[{i}]", "a feature name (a string)")
    return list(value)


def parse_environments(
    value: Any, path: Path, features: dict[str, Feature]
) -> dict[str, EnvironmentSpec]:
    envs: dict[str, EnvironmentSpec] = {}
    for name, spec in expect_type(value, dict, path, "environments", "a table").items():
        where = f"environments.{name}"
        if not ENVIRONMENT_NAME.fullmatch(name):
            raise InputError(f"{path}: key '{where}': '{name}' is not a valid environment name",
                             hint="use lowercase letters, digits and '-' (pixi's rule; it is also envs/<name>/)")
        if len(name) > ENVIRONMENT_NAME_MAX:  # found when envs/<name>/ failed to be made ("File name too long")
            raise InputError(f"{path}: key 'environments.{name[:40]}...': an environment name of {len(name)} "
                             f"characters; it names the directories envs/<name>/ and .pixi/envs/<name>/",
                             hint=f"at most {ENVIRONMENT_NAME_MAX} (a file name's limit on Linux, NAME_MAX)")
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


def referenced_platforms(platforms: tuple[Platform, ...], features: dict[str, Feature],
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
