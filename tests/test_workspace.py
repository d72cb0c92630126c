"""The pixi.toml model: pixi's merge rules for channels, dependencies and platforms, and its errors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from rattler import MatchSpec
from rocmlock.errors import InputError
from rocmlock.workspace.manifest import load_workspace
from rocmlock.workspace.pixi_compat import channel_base_url

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
    assert ws.environment_names() == ["default", "listed", "tabled"]
    tabled = ws.environment("tabled")
    assert tabled.solve_group == "g" and tabled.features == ("f",)
    assert [d.matchspec() for d in tabled.dependencies_for(tabled.platforms[0])] == ["conda-forge::a >=1 py*"]


@pytest.mark.parametrize(("extra", "message"), [
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
    with pytest.raises(InputError, match="key 'solve-strategy' is 'fastest'|solve-strategy' is 'fastest'"):
        load_workspace(write(tmp_path, BASE + 'solve-strategy = "fastest"\n'))
    conflict = BASE.replace('platforms = ["linux-64"]', 'platforms = [{ name = "g", platform = "linux-64", '
                            '__amdgpu_arch = "9.0.10" }]') + \
        '[dependencies]\namdgpu-target = { version = "*", build = "gfx942" }\n'
    with pytest.raises(InputError, match="conflicts with platform 'g'"):
        load_workspace(write(tmp_path, conflict)).environments()
    with pytest.raises(InputError, match="unknown environment 'nope'"):
        load_workspace(write(tmp_path, BASE)).environment("nope")


# ----------------------------------------------------------------------------- pixi's own parsing rules


def test_dependency_match_fields_go_into_the_spec(tmp_path: Path) -> None:
    """pixi_spec/src/detailed.rs and toml.rs (pixi v0.77.0): `build-number`, `md5` and `sha256` are part of
    the spec pixi matches locked records with; a version string is strict except that a bare version
    is taken as `==` (parse_version_string)."""
    digest = "315f5bdb76d078c43b8ac0064e4a0164612b1fce77c869345bfc94c75894edd3"
    text = BASE + f"""
[dependencies]
a = {{ version = "1.2", build-number = ">=3", sha256 = "{digest}" }}
b = {{ build-number = 2, md5 = "d41d8cd98f00b204e9800998ecf8427e", channel = "c" }}
c = "1.2"
"""
    ws = load_workspace(write(tmp_path, text))
    env = ws.environment("default")
    specs = [d.matchspec() for d in env.dependencies_for(env.platforms[0])]
    assert specs == [f'a ==1.2[build_number=">=3", sha256="{digest}"]',
                     'c::b *[build_number="2", md5="d41d8cd98f00b204e9800998ecf8427e"]', "c ==1.2"]
    a_spec = MatchSpec(specs[0])
    assert a_spec.build_number is not None and a_spec.sha256 is not None


@pytest.mark.parametrize(("deps", "message"), [
    ('a = { build-number = "x" }', "key 'dependencies.a.build-number' is 'x'"),
    ('a = { md5 = "zz" }', "key 'dependencies.a.md5' is 'zz'"),
    ('a = ">= 1.0"', "key 'dependencies.a' is '>= 1.0', not a valid version spec"),
    ('a = "1.2.*.*"', "not a valid version spec"),  # lenient only for an ambiguous bare version
    ('a = { version = "*", when = "__linux[" }', "key 'dependencies.a.when' is"),
    ('a = { version = "*", extra = ["x"] }', "key 'dependencies.a.extra' is not a pixi dependency key"),
])
def test_dependency_keys_are_used_or_refused(tmp_path: Path, deps: str, message: str) -> None:
    """pixi_spec/src/toml.rs (pixi v0.77.0, TomlSpec and parse_version_string): values pixi cannot parse and keys
    it does not know are errors, never dropped."""
    with pytest.raises(InputError) as err:
        load_workspace(write(tmp_path, BASE + "[dependencies]\n" + deps + "\n"))
    assert message in str(err.value)


def plats(tmp_path: Path, entries: str, extra: str = "") -> tuple[str, ...]:
    ws = load_workspace(write(tmp_path, BASE.replace('["linux-64"]', f"[{entries}]") + extra))
    return tuple(p.name for p in ws.platforms)


def test_platform_entries_parse_as_in_pixi(tmp_path: Path) -> None:
    """pixi_manifest/src/toml/platform.rs (pixi v0.77.0, TomlPixiPlatform): `name` may be left out (derived from
    the subdir and the customised packages, synthesize_name_string), `platform` may be left out when the
    name is a subdir, `osx` is an alias of `macos`."""
    assert plats(tmp_path, '{ platform = "linux-64", cuda = "12.0" }') == ("linux-64-cuda-12-0",)
    assert plats(tmp_path, '{ platform = "linux-64", archspec = "x86_64_v3" }') == ("linux-64-archspec-x86-64-v3",)
    assert plats(tmp_path, '{ platform = "linux-64", cuda = { driver = "12.0", arch = "8.6" } }') == (
        "linux-64-cuda-12-0-cuda-arch-8-6",)
    assert plats(tmp_path, '{ platform = "linux-64", __amdgpu_arch = "9.4.2" }') == ("linux-64-amdgpu-arch-9-4-2",)
    assert plats(tmp_path, '{ name = "osx-arm64" }, { platform = "linux-64" }') == ("osx-arm64", "linux-64")
    ws = load_workspace(write(tmp_path, BASE.replace('["linux-64"]', '[{ name = "m", platform = "osx-arm64", '
                                                                     'osx = "14.0" }]')))
    assert ws.platforms[0].customised_virtual_packages() == ["__osx=14.0"]


@pytest.mark.parametrize(("entries", "message"), [
    ('{ platform = "linux-64", glibc = "2.28", __glibc = "2.31" }', "declares '__glibc' a second time"),
    ('{ name = "g", platform = "osx-arm64", osx = "14", macos = "14" }', "is an alias for 'macos'"),
    ('{ name = "g", platform = "linux-64", cuda = { arch = "8.6" } }', "has no 'driver'"),
    ('{ name = "g", platform = "linux-64", __amdgpu = 0 }', "must be a string"),
    ('{ name = "g", platform = "linux-64", glibc = 2.28 }', "must be a string"),
    ('{ name = "g", platform = "linux-64", glibc = "" }', "not a valid version"),
    ('{ name = "linux-64", glibc = "2.31" }', "adds virtual packages to the subdir platform"),
    ('{ platform = "linux-64", glibc = "2.28" }', "adds virtual packages to the subdir platform"),
    ('{ name = "gpu" }', "not a conda subdir"),
    ('{ cuda = "12" }', "sets neither 'name' nor 'subdir'"),
    ('{ name = "linux", platform = "linux-64", cuda = "12" }', "reserved target selector"),
    ('{ name = "9x", platform = "linux-64", cuda = "12" }', "not a valid platform name"),
    ('{ name = "g", platform = "linux-64", gpu = "1" }', "not a platform key"),
    ('{ name = "g", platform = "linux-64", archspec = "x86-64-v3" }', "not a known archspec microarchitecture"),
    ('{ name = "g", platform = "linux-64", __archspec = "0=zen9000" }', "not a known archspec microarchitecture"),
])
def test_platform_entries_pixi_rejects(tmp_path: Path, entries: str, message: str) -> None:
    """pixi_manifest/src/toml/platform.rs and platform.rs (pixi v0.77.0): values are strings that parse as
    versions, a package is declared once, `cuda.arch` needs `cuda.driver`, a subdir-named entry carries
    no virtual packages (PixiPlatformError::IsSubdirPlatform), names are PixiPlatformName, an archspec name
    is one the archspec database knows (validate_archspec_name)."""
    with pytest.raises(InputError) as err:
        plats(tmp_path, entries)
    assert message in str(err.value)


def _declared(tmp_path: Path, entry: str) -> list[str]:
    ws = load_workspace(write(tmp_path, BASE.replace('["linux-64"]', f"[{entry}]")))
    return ws.platforms[0].customised_virtual_packages()


def test_the_subdir_key_of_pixi_0_85_reads_as_platform(tmp_path: Path) -> None:
    """pixi 0.85.0's release notes (2026-11-24): platform entries name their conda subdir with `subdir`; `platform`
    stays accepted (a pixi before 0.85 knows only it). Planted: `subdir` left out of the keys read: "not a platform
    key"."""
    assert plats(tmp_path, '{ subdir = "linux-64", cuda = "12.0" }') == ("linux-64-cuda-12-0",)
    assert _declared(tmp_path, '{ name = "g", subdir = "linux-64", cuda = "12.0" }') == \
        _declared(tmp_path, '{ name = "g", platform = "linux-64", cuda = "12.0" }') == ["__cuda=12.0"]
    ws = load_workspace(write(tmp_path, BASE.replace('["linux-64"]', '[{ name = "m", subdir = "osx-arm64" }]')))
    assert ws.platforms[0].subdir == "osx-arm64"
    for entry, message in [('{ name = "g", subdir = "linux-64", platform = "linux-64" }', "sets both 'subdir'"),
                           ('{ name = "g", subdir = "linux-65" }', "key 'workspace.platforms[0].subdir' has unknown"),
                           ('{ name = "g", subdir = 64 }', "must be a string")]:
        with pytest.raises(InputError, match=re.escape(message)):
            plats(tmp_path, entry)


def test_the_amdgpu_key_of_pixi_0_82_declares_what_the_raw_keys_do(tmp_path: Path) -> None:
    """pixi 0.82.0's release notes (2026-10-13, prefix-dev/pixi#7144): `amdgpu = true` declares a GPU, `amdgpu =
    "gfx90a"` its architecture, as rattler's __amdgpu_arch ISA version (conda/rattler#2806: a target id's features
    dropped). Planted: the gfx name kept as the version, or `true` given an arch: an equality below fails."""
    raw942 = _declared(tmp_path, '{ name = "g", subdir = "linux-64", __amdgpu = "0", __amdgpu_arch = "9.4.2" }')
    assert _declared(tmp_path, '{ name = "g", subdir = "linux-64", amdgpu = "gfx942" }') == raw942
    assert raw942 == ["__amdgpu=0", "__amdgpu_arch=9.4.2"]
    assert _declared(tmp_path, '{ name = "g", subdir = "linux-64", amdgpu = "gfx90a:xnack-" }') == \
        ["__amdgpu=0", "__amdgpu_arch=9.0.10"]
    assert _declared(tmp_path, '{ name = "g", subdir = "linux-64", amdgpu = "gfx1100" }')[1] == "__amdgpu_arch=11.0.0"
    assert _declared(tmp_path, '{ name = "g", subdir = "linux-64", amdgpu = "gfx90a:sramecc+:xnack+" }')[1] == \
        "__amdgpu_arch=9.0.10"
    assert _declared(tmp_path, '{ name = "g", subdir = "linux-64", amdgpu = true }') == ["__amdgpu=0"]


@pytest.mark.parametrize(("entry", "message"), [
    ('{ name = "g", subdir = "linux-64", amdgpu = false }', "is false, which declares nothing"),
    ('{ name = "g", subdir = "linux-64", amdgpu = 1 }', 'must be true or a GPU target such as "gfx942", got int'),
    ('{ name = "g", subdir = "linux-64", amdgpu = "9.4.2" }', "must be a GPU target as LLVM names it"),
    # get_target reads these as gfx942; pixi.toml is read by pixi too, so only what LLVM names a target passes
    ('{ name = "g", subdir = "linux-64", amdgpu = " GFX942 " }', "got ' GFX942 '"),
    ('{ name = "g", subdir = "linux-64", amdgpu = "GFX942" }', 'write amdgpu = "gfx942"'),
    ('{ name = "g", subdir = "linux-64", amdgpu = "gfx942:anything" }', "got 'gfx942:anything'"),
    ('{ name = "g", subdir = "linux-64", amdgpu = "gfx90a:xnack-:sramecc+" }', "a target id such as gfx90a:xnack-"),
    # a generic target is code's, not a GPU's: rocminfo never names one
    ('{ name = "g", subdir = "linux-64", amdgpu = "gfx9-4-generic" }', "got 'gfx9-4-generic'"),
    ('{ name = "g", subdir = "linux-64", amdgpu = "gfx942\\u001b[31m" }', "got 'gfx942\\x1b[31m'"),
    ('{ name = "g", subdir = "linux-64", amdgpu = "gfx943" }', "did you mean 'gfx942'?"),
    ('{ name = "g", subdir = "linux-64", amdgpu = "gfx942", __amdgpu_arch = "9.4.2" }',
     "declares '__amdgpu_arch' a second time"),
    ('{ name = "g", subdir = "linux-64", amdgpu = true, __amdgpu = "0" }', "declares '__amdgpu' a second time"),
    ('{ subdir = "linux-64", amdgpu = "gfx942" }', "sets amdgpu but no name"),
])
def test_the_amdgpu_key_refuses_in_one_line(tmp_path: Path, entry: str, message: str) -> None:
    """An entry without a name is refused: the name pixi 0.82+ derives from `amdgpu` is not in its release notes,
    and a guessed one would not match what its features name."""
    with pytest.raises(InputError) as err:
        plats(tmp_path, entry)
    assert message in f"{err.value} hint: {err.value.hint}"
    assert "\n" not in str(err.value) and "\x1b" not in str(err.value)


def test_feature_platforms_follow_pixi(tmp_path: Path) -> None:
    """pixi_manifest/src/features_ext.rs (FeaturesExt::platforms) and toml/manifest.rs (pixi v0.77.0): a feature
    names platforms by name or bare subdir; pinning one by exact name drops the other platforms of that
    subdir. In a workspace of plain subdirs, a feature may name another subdir, which joins the workspace."""
    rich = '"linux-64", { name = "gpu", platform = "linux-64", __amdgpu_arch = "9.4.2" }, "osx-arm64"'
    extra = ('[feature.base]\nplatforms = ["linux-64", "osx-arm64"]\n[feature.g]\nplatforms = ["gpu"]\n'
             '[environments]\nbase = ["base"]\ngpu = ["base", "g"]\n')
    ws = load_workspace(write(tmp_path, BASE.replace('["linux-64"]', f"[{rich}]") + extra))
    assert [p.name for p in ws.environment("base").platforms] == ["linux-64", "osx-arm64"]
    # "linux-64" in base matches gpu by its subdir; g pins gpu by name, which drops plain linux-64.
    assert [p.name for p in ws.environment("gpu").platforms] == ["gpu"]
    # Plain-subdir workspace: a feature's extra subdir becomes a workspace platform.
    simple = '[feature.mac]\nplatforms = ["osx-arm64"]\n[environments]\nmac = ["mac"]\n'
    ws = load_workspace(write(tmp_path, BASE + simple))
    assert [p.name for p in ws.platforms] == ["linux-64", "osx-arm64"]
    assert [p.name for p in ws.environment("mac").platforms] == ["osx-arm64"]
    with pytest.raises(InputError, match="names platform 'nope', which the workspace does not declare"):
        load_workspace(write(tmp_path, BASE.replace('["linux-64"]', f"[{rich}]")
                             + '[feature.x]\nplatforms = ["nope"]\n'))


def test_solve_group_environments_share_the_group_channels(tmp_path: Path) -> None:
    """pixi_core/src/lock_file/satisfiability/environment.rs and update.rs (pixi v0.77.0) use the solve group's
    channels (all its environments' features, workspace/solve_group.rs) for each environment."""
    text = BASE + """
[feature.extra]
channels = ["https://x.example/extra"]
[environments]
a = { features = ["extra"], solve-group = "g" }
b = { features = [], solve-group = "g" }
c = []
"""
    ws = load_workspace(write(tmp_path, text))
    assert ws.environment("a").channels == ws.environment("b").channels == (
        "https://x.example/extra", "./channel", "conda-forge")
    assert ws.environment("c").channels == ("./channel", "conda-forge")


@pytest.mark.parametrize(("extra", "message"), [
    ('[target."if(__linux)".dependencies]\na = "*"\n', "(a conditional target) is not supported"),
    ('[exclude-newer]\nnumpy = "yesterday"\n', "key 'exclude-newer.numpy' is 'yesterday', neither a duration"),
    ('[feature.f]\nsolve-strategy = "newest"\n', "key 'feature.f.solve-strategy' is 'newest'"),
])
def test_solve_changing_keys_are_refused(tmp_path: Path, extra: str, message: str) -> None:
    """pixi_manifest/src/target.rs (parse_if_expression), pixi_spec/src/exclude_newer.rs and
    pixi_manifest/src/workspace.rs (SolveStrategy), pixi v0.77.0: keys that change a solve are read as pixi reads
    them, and refused when rocmlock cannot honour them."""
    with pytest.raises(InputError) as err:
        load_workspace(write(tmp_path, BASE + extra))
    assert message in str(err.value)
