"""Every pixi.toml pixi 0.77 reads: TOML 1.1, the newer keys, and what `lock` honours or refuses.

Keys and their meaning are pixi v0.77.0's: crates/pixi_manifest/src/toml/{manifest,workspace,feature,
environment,target,pypi_options}.rs, crates/pixi_spec/src/toml.rs (dependency tables, `when`) and
crates/pixi_spec/src/exclude_newer.rs. Costs about 10 s (a few small solves against the session channels).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from lockhelpers import by_name
from pixilock import write_pixi_lock
from rattler import LockFile, MatchSpec
from rocmlock.cli.main import main
from rocmlock.errors import InputError
from rocmlock.lock.lockfile import LockedPlatform
from rocmlock.lock.pipeline import lock_workspace
from rocmlock.workspace.manifest import load_workspace
from rocmlock.workspace.pypi import PypiIndexes

LINUX = LockedPlatform("linux-64", "linux-64", ("__unix=0=0", "__linux=4.18", "__glibc=2.28"))


def _ws(root: Path, forge: Path, body: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "pixi.toml").write_text(f'[workspace]\nname = "k"\nchannels = ["{forge.as_uri()}"]\n'
                                    f'platforms = ["linux-64"]\n\n{body}')
    return root / "pixi.toml"


def _workspace_key(manifest: Path, line: str) -> None:
    text = manifest.read_text()
    manifest.write_text(text.replace('platforms = ["linux-64"]\n', f'platforms = ["linux-64"]\n{line}\n', 1))


# A task table written the way pixi's own examples write them: TOML 1.1 multi-line inline tables with a
# trailing comma (pixi's examples/tasks/pixi.toml, examples/simple-calculator/pixi.toml). Python 3.11's
# tomllib (TOML 1.0) rejects it; pixi and tomli 2.5 read it.
TOML_11 = """[dependencies]
python = "3.12.*"

[tasks]
build = {
    cmd = "make",
    cwd = "src",
}
"""


def test_toml_11_manifest_locks_and_exports(tmp_path: Path, channels: dict[str, Path]) -> None:
    manifest = _ws(tmp_path / "ws", channels["forge"], TOML_11)
    assert main(["lock", "--manifest-path", str(manifest)]) == 0
    assert by_name(manifest.parent / "pixi.lock", "default")["python"].startswith("3.12.7 ")
    assert main(["export", "--manifest-path", str(manifest), "--check"]) == 0


def test_doctor_reads_a_toml_11_manifest_and_its_target_decides(tmp_path: Path, channels: dict[str, Path],
                                                                monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    # The GPU target is written in TOML 1.1 too (a multi-line inline table); doctor runs on a described node (one
    # MI300X in KFD's topology, no ROCm), so what the manifest says decides the exit code, not this machine.
    from rocmlock.host import doctor
    from rocmlock.host.rocm import Host
    from test_heterogeneous_nodes import KFD, MI300X, kfd_tree

    node = kfd_tree(tmp_path / "node", MI300X, rocm=None)
    monkeypatch.setattr(doctor, "Host", lambda env: Host(env={"PATH": ""}, which=lambda _n, _p: None,
                                                         kfd=node / "dev/kfd", sysroot=node))
    for gfx, code in (("gfx942", 0), ("gfx90a", 1)):
        target = (f'\n[feature.gpu.dependencies]\namdgpu-target = {{\n    version = "*",\n    build = "{gfx}",\n}}\n'
                  '\n[environments]\nmi = ["gpu"]\n')
        manifest = _ws(tmp_path / gfx, channels["forge"], TOML_11 + target)
        capsys.readouterr()
        assert main(["doctor", "--manifest-path", str(manifest), "--json"]) == code
        report = json.loads(capsys.readouterr().out)
        assert report["targets"] == [gfx] and report["ok"] is (code == 0)
        gpus = next(c for c in report["checks"] if c["name"] == "gpus")
        assert gpus["status"] == ("ok" if code == 0 else "fail"), gpus
        assert gpus["message"].startswith("GPU 0 gfx942 (9.4.2, 304 CUs)") and KFD in gpus["message"], gpus
        assert ("the environments checked are for gfx90a: none of them runs on this node" in gpus["message"]) \
            is (code == 1), gpus


def test_when_dependencies_are_solved_with_their_condition(tmp_path: Path, channels: dict[str, Path]) -> None:
    body = """[dependencies]
python = "3.12.*"
numpy = { version = "*", when = "__unix" }
peft = { version = "*", when = "__win" }
requests = { version = "*", when = { package = "python", version = ">=3.12" } }
transformers = { version = "*", when = { all = ["__linux", { any = ["__win", "python 3.11.*"] }] } }
"""
    manifest = _ws(tmp_path / "ws", channels["forge"], body)
    env = load_workspace(manifest).environment("default")
    specs = {MatchSpec(d.matchspec()).name.normalized: MatchSpec(d.matchspec()) for d in env.dependencies_for(
        env.platforms[0])}
    assert specs["transformers"].condition == '__linux and (__win or python[version="3.11.*"])'
    lock_workspace(manifest)
    locked = by_name(manifest.parent / "pixi.lock", "default")
    assert "numpy" in locked and "requests" in locked  # __unix holds on linux-64; python is 3.12
    assert "peft" not in locked and "transformers" not in locked
    again = lock_workspace(manifest, cache_dir=tmp_path / "fresh-cache")  # no stamp: the satisfiability check
    assert again.solved == () and again.changes == ()


def test_dependency_table_keys_become_match_spec_fields(tmp_path: Path, channels: dict[str, Path]) -> None:
    body = """[dependencies]
a = { version = ">=1", extras = ["dev", "test"], flags = ["cuda"], license = "MIT", subdir = "linux-64" }
b = { version = "*", file-name = "b-1-0.conda", track-features = ["x"], license-family = "BSD" }
"""
    env = load_workspace(_ws(tmp_path, channels["forge"], body)).environment("default")
    a, b = (MatchSpec(d.matchspec()) for d in env.dependencies_for(env.platforms[0]))
    assert a.extras == ["dev", "test"] and a.subdir == "linux-64" and str(a.version) == ">=1"
    assert "flags=[cuda]" in str(a) and 'license="MIT"' in str(a)
    assert b.file_name == "b-1-0.conda" and 'license_family="BSD"' in str(b) and 'track_features="x"' in str(b)


def test_constraints_limit_what_is_locked_and_never_add(tmp_path: Path, channels: dict[str, Path]) -> None:
    # pixi v0.77.0: [constraints] go to the solver as constraints (pixi_core lock_file/update.rs) and a locked
    # package that violates one makes the lock stale (satisfiability/platform.rs, ConstraintViolated).
    body = '[dependencies]\npython = "3.12.*"\nnumpy = "*"\n[constraints]\nnumpy = "<2.2"\npeft = "<0.1"\n'
    manifest = _ws(tmp_path / "ws", channels["forge"], body)
    lock_workspace(manifest)
    locked = by_name(manifest.parent / "pixi.lock", "default")
    assert locked["numpy"].startswith("2.1.3 ") and "peft" not in locked
    assert lock_workspace(manifest, cache_dir=tmp_path / "c1").solved == ()  # satisfied: kept
    manifest.write_text(manifest.read_text().replace('numpy = "<2.2"', 'numpy = ">=2.2"'))
    again = lock_workspace(manifest, cache_dir=tmp_path / "c2")
    assert again.solved == (("default", "linux-64"),) and "violates constraint" in again.reasons[again.solved[0]]
    assert by_name(manifest.parent / "pixi.lock", "default")["numpy"].startswith("2.2.0 ")


def test_host_and_build_dependencies_join_the_environment(tmp_path: Path, channels: dict[str, Path]) -> None:
    body = '[dependencies]\npython = "3.12.*"\n[host-dependencies]\nnumpy = "2.1.*"\n' \
           '[target.linux-64.build-dependencies]\nrequests = "*"\n'
    env = load_workspace(_ws(tmp_path, channels["forge"], body)).environment("default")
    assert [d.matchspec() for d in env.dependencies_for(env.platforms[0])] == [
        "numpy 2.1.*", "python 3.12.*", "requests *"]


def test_platform_glob_and_macos_target_selectors(tmp_path: Path, channels: dict[str, Path]) -> None:
    # pixi v0.77.0 target.rs (TargetSelector: PlatformGlob, family_name_to_selector "osx" | "macos").
    body = """[dependencies]
python = "3.12.*"
[target."linux-64-gfx*".dependencies]
numpy = "*"
[target.macos.dependencies]
requests = "*"
"""
    manifest = _ws(tmp_path, channels["forge"], body)
    manifest.write_text(manifest.read_text().replace('platforms = ["linux-64"]', 'platforms = [\n'
        '  { name = "linux-64-gfx942", platform = "linux-64", __amdgpu_arch = "9.4.2" },\n'
        '  "linux-64",\n  "osx-arm64",\n]'))
    env = load_workspace(manifest).environment("default")
    names = {p.name: [d.name for d in env.dependencies_for(p)] for p in env.platforms}
    assert names == {"linux-64-gfx942": ["numpy", "python"], "linux-64": ["python"],
                     "osx-arm64": ["python", "requests"]}


def test_inline_environment_keys_are_an_implicit_first_feature(tmp_path: Path, channels: dict[str, Path]) -> None:
    body = """[dependencies]
python = "3.12.*"
[feature.f.dependencies]
numpy = "*"
[environments.x]
features = ["f"]
dependencies = { requests = "2.32.3" }
pypi-options = { extra-index-urls = ["https://x.example/simple"] }
"""
    ws = load_workspace(_ws(tmp_path, channels["forge"], body))
    x = ws.environment("x")
    assert x.features == ("environments.x", "f", "default")
    assert [d.matchspec() for d in x.dependencies_for(x.platforms[0])] == [
        "numpy *", "python 3.12.*", "requests ==2.32.3"]
    assert x.pypi_indexes == PypiIndexes(None, ("https://x.example/simple",))


def test_pypi_options_merge_like_pixi(tmp_path: Path, channels: dict[str, Path]) -> None:
    body = """[workspace.pypi-options]
index-url = "https://base.example/simple"
extra-index-urls = ["https://a.example/simple"]
[pypi-options]
extra-index-urls = ["https://a.example/simple", "https://b.example/simple"]
find-links = [{ path = "wheels" }]
[feature.mirror.pypi-options]
index-url = "https://mirror.example/simple"
[feature.other.pypi-options]
index-url = "https://other.example/simple"
[environments]
m = ["mirror"]
clash = ["mirror", "other"]
"""
    ws = load_workspace(_ws(tmp_path, channels["forge"], body))
    assert ws.environment("default").pypi_indexes == PypiIndexes(
        "https://base.example/simple", ("https://a.example/simple", "https://b.example/simple"),
        ("wheels",))
    assert ws.environment("m").pypi_indexes.index_url == "https://mirror.example/simple"
    with pytest.raises(InputError, match="set different pypi-options index-url"):
        ws.environment("clash")


@pytest.mark.parametrize(("body", "key"), [
    # a relative exclude-newer in [workspace], the shape of 10 of pixi's own example workspaces
    ('workspace: exclude-newer = "7d"', "workspace.exclude-newer"),
    ('[pypi-dependencies]\nrequests = "*"\n', "pypi-dependencies"),
    ('[feature.f.target.linux-64.pypi-dependencies]\nrequests = "*"\n', "feature.f.target.linux-64.pypi-dependencies"),
    ('[dependencies]\nmine = { path = "./mine" }\n', "dependencies.mine"),
    ('[feature.f.dependencies]\nmine = { git = "https://example.invalid/mine.git", branch = "main" }\n',
     "feature.f.dependencies.mine"),
    ('[dev]\nmine = { path = "." }\n', "dev"),
    ('[system-requirements]\ncuda = "12"\n', "system-requirements"),
    ('[exclude-newer]\nnumpy = "7d"\n', "exclude-newer"),
    ('[environments.e]\nsolve-strategy = "lowest"\n', "environments.e.solve-strategy"),
])
def test_keys_lock_cannot_honour_are_refused_in_one_line(
        tmp_path: Path, channels: dict[str, Path], body: str, key: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    manifest = _ws(tmp_path / "ws", channels["forge"], "" if body.startswith("workspace: ") else body)
    if body.startswith("workspace: "):
        _workspace_key(manifest, body.removeprefix("workspace: "))
    ws = load_workspace(manifest)  # every other command reads it
    assert ws.lock_refusals[0].key == key
    assert main(["lock", "--manifest-path", str(manifest)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and err[0].startswith(f"error: {manifest}: key '{key}' ")
    assert "rocmlock lock cannot honour it" in err[0]
    assert err[1] == "hint: lock this workspace with `pixi lock`; `rocmlock export` then writes envs/ " \
                     "from that pixi.lock"
    assert not (manifest.parent / "pixi.lock").exists()


def test_a_refused_workspace_exports_from_the_lock_pixi_wrote(
        tmp_path: Path, channels: dict[str, Path]) -> None:
    body = '[dependencies]\npython = "3.12.*"\nnumpy = { version = "*", when = "__unix" }\n'
    manifest = _ws(tmp_path / "ws", channels["forge"], body)
    _workspace_key(manifest, 'exclude-newer = "7d"')
    assert main(["lock", "--manifest-path", str(manifest)]) == 2
    write_pixi_lock(manifest.parent / "pixi.lock", channels["forge"], "default", LINUX,
                    ["python 3.12.*", "numpy"], [], [])
    assert main(["export", "--manifest-path", str(manifest)]) == 0
    yml = (manifest.parent / "envs" / "default" / "environment.yml").read_text()
    assert "  - numpy=2.2.0=py312h0_0\n" in yml and "  - python=3.12.7=" in yml


@pytest.mark.parametrize("value", ["7d", "1h30m", "2 weeks", "2026-01-31", "2026-01-31T00:00:00Z"])
def test_exclude_newer_values_pixi_accepts(tmp_path: Path, channels: dict[str, Path], value: str) -> None:
    manifest = _ws(tmp_path, channels["forge"], "")
    _workspace_key(manifest, f'exclude-newer = "{value}"')
    assert load_workspace(manifest).lock_refusals[0].key == "workspace.exclude-newer"


def test_an_environment_whose_features_share_no_platform_is_locked_empty(
        tmp_path: Path, channels: dict[str, Path]) -> None:
    # pixi v0.77.0 features_ext.rs (FeaturesExt::platforms) returns an empty set without an error; pixi's
    # examples/constructor-minimal has such an environment, locked as `packages: {}`.
    body = """[dependencies]
python = "3.12.*"
[feature.a]
platforms = ["linux-64"]
[feature.b]
platforms = ["osx-arm64"]
[environments]
none = ["a", "b"]
"""
    manifest = _ws(tmp_path / "ws", channels["forge"], body)
    manifest.write_text(manifest.read_text().replace('platforms = ["linux-64"]', 'platforms = ["linux-64", "osx-arm64"]', 1))
    ws = load_workspace(manifest)
    assert ws.environment("none").platforms == ()
    result = lock_workspace(manifest, platforms=["linux-64"])
    assert ("none", "linux-64") not in result.solved
    lock = LockFile.from_path(manifest.parent / "pixi.lock")
    none = lock.environment("none")
    assert none is not None and none.platforms() == [] and [str(c) for c in none.channels()] == [
        channels["forge"].as_uri() + "/"]
    assert main(["export", "--manifest-path", str(manifest), "-e", "none"]) == 0
    assert not (manifest.parent / "envs" / "none").exists()


def test_a_workspace_without_platforms_is_read_as_pixi_reads_it(tmp_path: Path, channels: dict[str, Path]) -> None:
    # pixi v0.77.0 toml/workspace.rs: `platforms` is optional (`unwrap_or_default`); its docs' task examples
    # (docs/source_files/pixi_tomls/tasks_depends_on.toml, ...) leave it out.
    manifest = _ws(tmp_path / "ws", channels["forge"], '[dependencies]\npython = "3.12.*"\n')
    manifest.write_text(manifest.read_text().replace('platforms = ["linux-64"]\n', ""))
    assert load_workspace(manifest).environment("default").platforms == ()
    assert main(["lock", "--manifest-path", str(manifest)]) == 0
    lock = LockFile.from_path(manifest.parent / "pixi.lock")
    assert lock.platforms() == [] and lock.environment("default") is not None
    assert main(["export", "--manifest-path", str(manifest), "--check"]) == 0
