"""An environment's ``[activation]`` on one platform, merged from its features as pixi merges it.

pixi (crates/pixi_core/src/workspace/environment.rs, ``Environment::activation_scripts`` and ``activation_env``;
crates/pixi_manifest/src/feature.rs, ``Feature::activation_scripts`` / ``activation_env``):
- features in the environment's order: those it lists, then the default feature (unless no-default-feature);
- within a feature the targets that match the platform, most specific first, the feature's own table last;
- ``scripts``: each feature's first matching target that has ``scripts``; every feature's list, concatenated;
- ``env``: within a feature and across features, the first definition of a name wins.
pixi_core/src/activation.rs (``get_activator``) then sets ``env`` after the scripts have run (post-activation).
"""

from __future__ import annotations

from dataclasses import dataclass

from rocmlock.workspace.model import Workspace, _features, _selector_rank
from rocmlock.workspace.platforms import Platform
from rocmlock.workspace.tables import Activation, Feature

__all__ = ["EnvironmentActivation", "environment_activation"]


@dataclass(frozen=True)
class EnvironmentActivation:
    """The workspace's activation of one environment on one platform: scripts (paths as written, relative to the
    workspace) and variables, in pixi's order."""

    scripts: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()


def _matching(feature: Feature, platform: Platform) -> list[Activation]:
    """``feature``'s activation tables that apply on ``platform``, most specific first, its own table last."""
    ranked = [(rank, i, act) for i, (sel, act) in enumerate(feature.activation) if sel
              and (rank := _selector_rank(sel, platform)) is not None]
    out = [act for _, _, act in sorted(ranked, key=lambda t: (-t[0], -t[1]))]
    out += [act for sel, act in feature.activation if not sel]
    return out


def environment_activation(ws: Workspace, environment: str, platform_name: str) -> EnvironmentActivation:
    """The merged ``[activation]`` of ``environment`` on its platform ``platform_name`` (see the module)."""
    env = ws.environment(environment)
    platform = next((p for p in env.platforms if p.name == platform_name),
                    Platform(platform_name, platform_name))
    scripts: list[str] = []
    values: dict[str, str] = {}
    for feature in _features(ws, ws.environment_specs[environment]):
        tables = _matching(feature, platform)
        scripts += next((list(t.scripts) for t in tables if t.scripts is not None), [])
        for table in tables:
            for name, value in table.env or ():
                values.setdefault(name, value)
    return EnvironmentActivation(tuple(scripts), tuple(values.items()))
