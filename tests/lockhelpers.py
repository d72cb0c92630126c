"""Shared pieces of the lock tests: a two-GPU workspace over the session channels, and snapshots."""

from __future__ import annotations

from pathlib import Path

from rocmlock.cli.main import main
from rocmlock.lock.lockfile import read_lockfile

PLATFORMS = """platforms = [
    { name = "linux-64-gfx90a", platform = "linux-64", glibc = "2.28", __amdgpu = "0", __amdgpu_arch = "9.0.10" },
    { name = "linux-64-gfx942", platform = "linux-64", glibc = "2.28", __amdgpu = "0", __amdgpu_arch = "9.4.2" },
]"""

FEATURE_TABLES = """
[dependencies]
python = "3.12.*"

[feature.rocm72.dependencies]
rocm-version = "7.2.*"

[feature.train.dependencies]
pytorch = "2.12.*"
flash-attn = "2.8.*"
llamafactory = "0.9.*"

[feature.gfx90a]
platforms = ["linux-64-gfx90a"]
dependencies = { amdgpu-target = { version = "*", build = "gfx90a" } }

[feature.gfx942]
platforms = ["linux-64-gfx942"]
dependencies = { amdgpu-target = { version = "*", build = "gfx942" } }
"""
FEATURES = FEATURE_TABLES + """
[environments]
mi250 = ["rocm72", "gfx90a", "train"]
mi300x = { features = ["rocm72", "gfx942", "train"] }
"""


def manifest(private: str, forge: str, extra: str = "", priority: str = "strict", features: str = FEATURES) -> str:
    return (f'[workspace]\nname = "t"\nchannels = ["{private}", "{forge}"]\n'
            f'channel-priority = "{priority}"\n{PLATFORMS}\n{features}{extra}')


def make_workspace(root: Path, channels: dict[str, Path], **kwargs: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "pixi.toml").write_text(manifest(channels["private"].as_uri(), channels["forge"].as_uri(), **kwargs))
    return root


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and ".rocmlock" not in p.parts}


def by_name(lock: Path, env: str) -> dict[str, str]:
    locked = read_lockfile(lock)
    assert locked is not None
    (records,) = locked.environments[env].records.values()
    return {r.name.normalized: f"{r.version} {r.build}" for r in records}


def lock_fresh_workspace(root: Path, channels: dict[str, Path]) -> Path:
    """A new workspace at ``root`` locked once with `rocmlock lock`."""
    make_workspace(root, channels)
    assert main(["lock", "--manifest-path", str(root / "pixi.toml")]) == 0
    return root
