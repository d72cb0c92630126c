"""What pixi warns about when it loads a manifest, and rocmlock says alike (``Workspace.manifest_warnings``): a
``[target.<selector>]`` table that applies on none of the platforms it could (a typo such as ``linux64``) reaches no
environment (pixi_manifest toml/manifest.rs and toml/feature.rs, create_unsupported_selector_warning), a feature no
environment uses (Warning::unused_feature), a key under its deprecated name (Deprecation::renamed_field). pixi
warns at every load and goes on; ``lock``, ``export``, ``plan`` and ``build`` say so the same way, and the lock they
write is the one pixi writes. A selector pixi cannot parse is refused, as pixi refuses it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from channels import Pkg, build_channel
from rocmlock.cli.main import main
from rocmlock.lock.lockfile import read_lockfile
from rocmlock.workspace.manifest import load_workspace

PLATFORMS = ('platforms = ["linux-64", { name = "linux-64-gfx942", platform = "linux-64", __amdgpu = "0", '
             '__amdgpu_arch = "9.4.2" }, { name = "linux-64-gfx90a", platform = "linux-64", __amdgpu = "0", '
             '__amdgpu_arch = "9.0.10" }]')


def _manifest(root: Path, channel: str, body: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "pixi.toml").write_text(f'[workspace]\nname = "t"\nchannels = ["{channel}"]\n{PLATFORMS}\n\n{body}')
    return root / "pixi.toml"


def test_which_selectors_apply_nowhere(tmp_path: Path) -> None:
    manifest = _manifest(tmp_path, "https://example.invalid/c", """
[activation]
env = { A = "1" }
[target.linux64.dependencies]
typo = "*"
[target.linux-64.dependencies]
by-subdir = "*"
[target.unix.dependencies]
by-family = "*"
[target.win.activation]
scripts = ["x.bat"]
[target."linux-64-gfx9*".constraints]
by-glob = "<2"

[feature.gpu]
platforms = ["linux-64-gfx942"]
[feature.gpu.target.linux-64-gfx90a.dependencies]
not-this-features = "*"
[feature.gpu.target.linux-64-gfx942.dependencies]
exact = "*"
[feature.gpu.target."osx-*".dependencies]
no-glob-match = "*"

[environments]
gpu = ["gpu"]
""")
    warnings = load_workspace(manifest).manifest_warnings()
    named = [w.split("] matches")[0].split(": ", 1)[1] for w in warnings]
    assert named == ["[target.linux64", "[target.win", "[feature.gpu.target.linux-64-gfx90a",
                     "[feature.gpu.target.osx-*"], warnings
    assert all(w.startswith(f"{manifest}: ") and w.endswith("applies nowhere (pixi warns alike)") for w in warnings)
    # A selector that matches a workspace platform the feature does not list names the feature's platforms.
    assert "platforms of the feature 'gpu' (linux-64-gfx942)" in warnings[2]
    assert "platforms of the workspace (linux-64, linux-64-gfx942, linux-64-gfx90a)" in warnings[0]


@pytest.fixture(scope="module")
def channel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_channel(tmp_path_factory.mktemp("sel") / "ch", [Pkg("base", "1"), Pkg("typo", "1")])


def test_lock_and_export_warn_and_lock_what_pixi_locks(channel: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    manifest = _manifest(tmp_path / "ws", channel.as_uri(), '[dependencies]\nbase = "*"\n\n'
                         '[target.linux64.dependencies]\ntypo = "*"\n')
    assert main(["lock", "--manifest-path", str(manifest)]) == 0
    (line,) = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("warning:")]
    assert "[target.linux64] matches none of the platforms of the workspace" in line
    locked = read_lockfile(manifest.parent / "pixi.lock")
    assert locked is not None
    assert [r.name.normalized for r in locked.records("default", "linux-64") or []] == ["base"]
    # Every load says it again, as pixi does: the no-op re-lock (answered from the stamp) and the export.
    for argv in (["lock"], ["lock", "--check"], ["export"]):
        assert main([*argv, "--manifest-path", str(manifest)]) == 0
        assert sum(ln.startswith("warning: ") and "[target.linux64]" in ln
                   for ln in capsys.readouterr().err.splitlines()) == 1, argv


def test_the_no_op_repeats_only_what_a_stamp_holds_as_text(tmp_path: Path) -> None:
    """The stamp is a cache file: what it holds is printed escaped, and anything but a list of strings is nothing."""
    import json

    from rocmlock.lock import stamp

    manifest = _manifest(tmp_path / "ws", "https://example.invalid/c", "")
    stamp.record(tmp_path / "cache", manifest, [], ["a \x1b[2J b"])
    assert stamp.stamped(tmp_path / "cache", manifest) == ([], ("a \\x1b[2J b",))
    (path,) = (tmp_path / "cache" / "stamps").iterdir()
    for hostile in (5, "text", [1], {"a": 1}, None):
        path.write_text(json.dumps({**json.loads(path.read_text()), "warnings": hostile}))
        assert stamp.stamped(tmp_path / "cache", manifest) == ([], ()), hostile
    # A flood is cut to what a terminal can show: 100 lines of at most 2,000 characters.
    path.write_text(json.dumps({**json.loads(path.read_text()), "warnings": ["w" * 2001] * 101}))
    assert stamp.stamped(tmp_path / "cache", manifest) == ([], ("w" * 2000,) * 100)
    path.write_text("[]")
    assert stamp.stamped(tmp_path / "cache", manifest) is None


def test_a_pyproject_manifest_names_the_key_as_written(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "p"\n\n[tool.pixi.workspace]\nchannels = ["c"]\n'
                                             'platforms = ["linux-64"]\n\n[tool.pixi.target.linux64.dependencies]\n'
                                             'x = "*"\n')
    (warning,) = load_workspace(tmp_path / "pyproject.toml").manifest_warnings()
    assert "[tool.pixi.target.linux64] matches none" in warning


def test_a_feature_no_environment_uses_is_named(tmp_path: Path) -> None:
    """pixi's Warning::unused_feature: a GPU feature defined and left out of [environments] is never solved."""
    manifest = _manifest(tmp_path, "https://example.invalid/c", """
[feature.gfx942.dependencies]
pytorch = "*"
[feature.gfx90a.dependencies]
pytorch = "*"

[environments]
mi300x = { features = ["gfx942"], target.linux64.dependencies = { x = "*" } }
""")
    warnings = load_workspace(manifest).manifest_warnings()
    assert len(warnings) == 2, warnings
    assert "[feature.gfx90a] is used by no environment" in warnings[0] and "gfx942]" not in warnings[0]
    # An environment's inline keys are its own first feature: named as written, never "unused".
    assert "[environments.mi300x.target.linux64] matches none" in warnings[1]


@pytest.mark.parametrize("selector", ['""', '"é"', '"linux-64-gfx9?"', '"gfx[9]*"', '"-x"', '"x-"', '"a b"',
                                      '"lin\\u001bux"', f'"{"a" * 65}"', f'"{"a" * 64}*"'])
def test_a_selector_pixi_cannot_parse_is_refused(tmp_path: Path, selector: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """pixi's TargetSelector::from_str refuses these (a glob's only wildcard is '*'; a name is PixiPlatformName's);
    fnmatch took `?` and `[9]` as wildcards and `""` matched nothing, silently (planted: without the check each of
    these locked)."""
    manifest = _manifest(tmp_path, "https://example.invalid/c", f'[feature.f.target.{selector}.dependencies]\nx = "*"\n'
                                                                '[environments]\ne = ["f"]\n')
    assert main(["lock", "--check", "--manifest-path", str(manifest)]) == 2
    err = capsys.readouterr().err
    (line,) = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert "is not a target selector pixi reads" in line and "feature.f.target." in line and "\x1b" not in err


@pytest.mark.parametrize("selector", ["linux", "unix", "win", "osx", "macos", "linux-64", "noarch", "win-arm64",
                                      "linux-64-gfx942", '"linux-64-gfx9*"', '"*"', '"**"', "A1", "b-2-c"])
def test_every_selector_pixi_reads_is_read(tmp_path: Path, selector: str) -> None:
    manifest = _manifest(tmp_path, "https://example.invalid/c", f'[target.{selector}.dependencies]\nx = "*"\n')
    load_workspace(manifest)


def test_plan_says_it_too_on_stderr(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`rocmlock plan`, the first command of a GPU workspace, warns as `lock` does; its JSON on stdout stays JSON."""
    import json

    manifest = _manifest(tmp_path, "https://example.invalid/c", '[feature.gfx90a.dependencies]\npytorch = "*"\n')
    recipes = Path(__file__).resolve().parents[1] / "recipes"
    assert main(["plan", "--json", "--manifest-path", str(manifest), "--recipes-dir", str(recipes)]) == 0
    out, err = capsys.readouterr()
    json.loads(out)
    assert [ln for ln in err.splitlines() if ln.startswith("warning:")] == \
        [(f"warning: {manifest}: [feature.gfx90a] is used by no environment: its dependencies are never solved "
          "(pixi warns alike); add it to one in [environments], or remove it")]


def test_keys_under_an_old_name_are_read_and_named(tmp_path: Path) -> None:
    """pixi reads `[project]`, and `host-`/`build-dependencies` at the top level and in a feature, as their new names
    and warns (Deprecation::renamed_field); in a target it reads them without a word (toml/target.rs)."""
    (tmp_path / "pixi.toml").write_text('[project]\nname = "t"\nchannels = ["c"]\nplatforms = ["linux-64"]\n\n'
                                        '[host-dependencies]\nx = "*"\n[target.linux-64.build-dependencies]\ny = "*"\n'
                                        '[feature.f.build-dependencies]\nz = "*"\n[environments]\ne = ["f"]\n')
    ws = load_workspace(tmp_path / "pixi.toml")
    assert [w.split(": ", 1)[1] for w in ws.manifest_warnings()] == [
        "key 'project' is deprecated: use 'workspace' (pixi warns alike)",
        "key 'host-dependencies' is deprecated: use 'dependencies' (pixi warns alike)",
        "key 'feature.f.build-dependencies' is deprecated: use 'feature.f.dependencies' (pixi warns alike)"]
    (env,) = [e for e in ws.environments() if e.name == "e"]
    assert [d.name for d in env.dependencies_for(ws.platforms[0])] == ["x", "y", "z"]  # read all the same


def test_a_platform_name_is_at_most_64_bytes_as_in_pixi(tmp_path: Path) -> None:
    """pixi's MAX_PLATFORM_NAME_BYTES bounds a rich platform's name as it bounds a selector (one check serves both)."""
    from rocmlock.errors import InputError

    for length, ok in ((64, True), (65, False)):
        (tmp_path / "pixi.toml").write_text(
            f'[workspace]\nname = "t"\nchannels = ["c"]\nplatforms = [{{ name = "{"a" * length}", '
            'platform = "linux-64" }]\n')
        if ok:
            load_workspace(tmp_path / "pixi.toml")
        else:
            with pytest.raises(InputError, match="not a valid platform name"):
                load_workspace(tmp_path / "pixi.toml")
