"""The pixi.toml model: pixi's merge rules for channels, dependencies and platforms, and its errors."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from rocmlock.errors import InputError
from rocmlock.workspace import channel_base_url, load_workspace

ROOT = Path(__file__).resolve().parent.parent


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "pixi.toml"
    path.write_text(text)
    return path


BASE = '[workspace]\nname = "t"\nchannels = ["./channel", "conda-forge"]\nplatforms = ["linux-64"]\n'


def test_root_manifest_declares_four_gpu_environments() -> None:
    ws = load_workspace(ROOT / "pixi.toml")
    targets = {e.name: e.gpu_target.gfx for e in ws.environments() if e.gpu_target}
    expected = {"mi250": "gfx90a", "mi300x": "gfx942", "mi355x": "gfx950", "w7900": "gfx1100"}
    assert expected.items() <= targets.items()
    assert all(e.gpu_target for e in ws.environments() if e.name != "default")
    mi300x = ws.environment("mi300x")
    assert [p.name for p in mi300x.platforms] == ["linux-64-gfx942"]
    assert mi300x.platforms[0].customised_virtual_packages() == ["__amdgpu=0", "__amdgpu_arch=9.4.2"]
    assert [ws.channel_url(c) for c in mi300x.channels] == [
        (ROOT / "channel").as_uri() + "/", "https://conda.anaconda.org/conda-forge/"]
    names = {d.name for d in mi300x.dependencies_for(mi300x.platforms[0])}
    assert {"pytorch", "flash-attn", "llamafactory", "amdgpu-target", "rocm-version", "python"} <= names


def test_channel_urls(tmp_path: Path) -> None:
    assert channel_base_url("conda-forge", tmp_path) == "https://conda.anaconda.org/conda-forge/"
    assert channel_base_url("./channel", tmp_path) == (tmp_path / "channel").as_uri() + "/"
    assert channel_base_url("../x", tmp_path / "a") == (tmp_path / "x").as_uri() + "/"
    assert channel_base_url("https://h.example/c/", tmp_path) == "https://h.example/c/"


def test_feature_channels_follow_pixi_rules(tmp_path: Path) -> None:
    text = BASE + """
[feature.plain.dependencies]
a = "*"
[feature.extra]
channels = [{ channel = "https://x.example/high", priority = 10 }, "https://x.example/low"]
[environments]
plain = ["plain"]
mixed = ["extra", "plain"]
"""
    ws = load_workspace(write(tmp_path, text))
    # A feature naming no channels uses the workspace's; priority sorts first, then first mention wins.
    assert ws.environment("plain").channels == ("./channel", "conda-forge")
    assert ws.environment("mixed").channels == (
        "https://x.example/high", "https://x.example/low", "./channel", "conda-forge")


def test_dependencies_merge_like_pixi(tmp_path: Path) -> None:
    text = BASE.replace('platforms = ["linux-64"]', 'platforms = ["linux-64", { name = "gpu", platform = '
                        '"linux-64", __amdgpu_arch = "9.4.2" }]') + """
[dependencies]
numpy = ">=2"
[target.linux-64.dependencies]
numpy = ">=2.1"
[target.gpu.dependencies]
numpy = ">=2.2"
[feature.pin.dependencies]
numpy = "<3"
[environments]
pinned = ["pin"]
"""
    ws = load_workspace(write(tmp_path, text))
    env = ws.environment("pinned")
    plain, gpu = env.platforms
    # Within a feature the most specific target wins; across features every spec applies.
    assert [d.matchspec() for d in env.dependencies_for(plain)] == ["numpy <3", "numpy >=2.1"]
    assert [d.matchspec() for d in env.dependencies_for(gpu)] == ["numpy <3", "numpy >=2.2"]
    assert env.gpu_target is None and gpu.virtual_package("__amdgpu_arch") == "9.4.2"


def test_rich_platform_virtual_packages(tmp_path: Path) -> None:
    text = BASE.replace('platforms = ["linux-64"]', 'platforms = [{ name = "old", platform = "linux-64", '
                        'glibc = "2.17", archspec = "x86_64_v3", __amdgpu = "0" }, "osx-arm64", '
                        '{ name = "nv", platform = "linux-64", cuda = { driver = "12.0", arch = "8.6" } }]')
    ws = load_workspace(write(tmp_path, text))
    old, mac, nv = ws.platforms
    assert nv.customised_virtual_packages() == ["__cuda=12.0", "__cuda_arch=8.6"]
    assert sorted(old.declared_virtual_packages()) == [
        ("__amdgpu", "0", ""), ("__archspec", "0", "x86_64_v3"), ("__glibc", "2.17", ""),
        ("__linux", "4.18", ""), ("__unix", "0", "0")]
    assert old.customised_virtual_packages() == ["__amdgpu=0", "__archspec=0=x86_64_v3", "__glibc=2.17"]
    assert mac.customised_virtual_packages() == []
    assert ("__osx", "13.0", "") in mac.declared_virtual_packages()


def test_environment_forms_and_legacy_project(tmp_path: Path) -> None:
    text = BASE.replace("[workspace]", "[project]") + """
exclude-newer = 2026-01-31
[feature.f.dependencies]
a = { version = ">=1", build = "py*", channel = "conda-forge" }
[environments]
listed = ["f"]
tabled = { features = ["f"], solve-group = "g", no-default-feature = true }
[tasks]
lock = "rocmlock lock"
[activation]
scripts = ["x.sh"]
"""
    ws = load_workspace(write(tmp_path, text))
    assert ws.exclude_newer == datetime(2026, 1, 31, tzinfo=UTC)
    assert ws.environment_names() == ["default", "listed", "tabled"]
    tabled = ws.environment("tabled")
    assert tabled.solve_group == "g" and tabled.features == ("f",)
    assert [d.matchspec() for d in tabled.dependencies_for(tabled.platforms[0])] == ["conda-forge::a >=1 py*"]


@pytest.mark.parametrize(("extra", "message"), [
    ('[pypi-dependencies]\nrequests = "*"\n', "key 'pypi-dependencies' is not supported"),
    ('[dependencies]\nmine = { path = "./mine" }\n', "key 'dependencies.mine.path' (a source dependency)"),
    ('[environments]\nx = ["nope"]\n', "unknown feature 'nope'"),
    ('[feature.g.dependencies]\namdgpu-target = { version = "*", build = "gfx943" }\n[environments]\nx = ["g"]\n',
     "did you mean 'gfx942'"),
])
def test_manifest_errors(tmp_path: Path, extra: str, message: str) -> None:
    with pytest.raises(InputError, match="pixi.toml") as err:
        load_workspace(write(tmp_path, BASE + extra)).environments()
    assert message in str(err.value)


def test_manifest_error_details(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"invalid TOML: .*line 3"):
        load_workspace(write(tmp_path, '[workspace]\nname = "t"\nchannels = ["a" "b"]\n'))
    with pytest.raises(InputError, match="exclude-newer"):
        load_workspace(write(tmp_path, BASE + 'exclude-newer = "last tuesday"\n'))
    conflict = BASE.replace('platforms = ["linux-64"]', 'platforms = [{ name = "g", platform = "linux-64", '
                            '__amdgpu_arch = "9.0.10" }]') + \
        '[dependencies]\namdgpu-target = { version = "*", build = "gfx942" }\n'
    with pytest.raises(InputError, match="conflicts with platform 'g'"):
        load_workspace(write(tmp_path, conflict)).environments()
    with pytest.raises(InputError, match="unknown environment 'nope'"):
        load_workspace(write(tmp_path, BASE)).environment("nope")
