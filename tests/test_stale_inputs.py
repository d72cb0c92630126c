"""Whatever a lock depends on, changed alone, makes it stale: the no-op stamp's inputs and satisfiability's.

Each test changes exactly one input of a locked workspace and expects `lock --check` to say so (exit 1, or
exit 2 where rocmlock refuses the new value), so a check that overlooks that input fails here. The rules
are pixi 0.77.0's (crates/pixi_core/src/lock_file/satisfiability/{environment,platform}.rs and
lock_file/outdated.rs); each test names the one it follows.
"""

from __future__ import annotations

import json
import shutil
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from channels import Pkg, build_channel
from lockhelpers import by_name, make_workspace, manifest, snapshot
from rattler import BuildString, PackageRecord, RepoDataRecord
from rocmlock.cli.main import main
from rocmlock.lock import stamp
from rocmlock.lock.lockfile import LockedPlatform, LockedWorkspace, align_platforms, read_lockfile
from rocmlock.lock.pipeline import lock_workspace
from rocmlock.lock.satisfy import Unsat, environment_unsat, platform_unsat, records_unsat
from rocmlock.workspace.manifest import load_workspace

NUMPY = 'numpy = "==2.2.0"\n'  # forge has numpy 2.1.3 and 2.2.0: a same-length edit picks the other



def _unchanged(cache: Path, manifest: Path) -> list[Path] | None:
    """The outputs :func:`rocmlock.lock.stamp.stamped` finds unchanged, else None."""
    found = stamp.stamped(cache, manifest)
    return None if found is None else found[0]

def _args(root: Path, *more: str) -> list[str]:
    return ["lock", "--manifest-path", str(root / "pixi.toml"), *more]


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, 1))


@pytest.fixture
def numpy_ws(channels: dict[str, Path], tmp_path: Path) -> Path:
    """A locked workspace whose [dependencies] pin numpy ==2.2.0, and whose no-op stamp is recorded."""
    root = make_workspace(tmp_path / "ws", channels)
    _edit(root / "pixi.toml", 'python = "3.12.*"\n', 'python = "3.12.*"\n' + NUMPY)
    assert main(_args(root)) == 0
    assert by_name(root / "pixi.lock", "mi300x")["numpy"].startswith("2.2.0 ")
    assert main(_args(root)) == 0  # satisfied and stamped: the next run takes the no-op path
    return root


# ----------------------------------------------------------------------------- the no-op stamp


def test_a_same_length_manifest_edit_is_seen(numpy_ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The stamp hashes the manifest's bytes, not its size: "==2.2.0" -> "==2.1.3" is as long."""
    _edit(numpy_ws / "pixi.toml", NUMPY, NUMPY.replace("2.2.0", "2.1.3"))
    before = snapshot(numpy_ws)
    capsys.readouterr()
    assert main(_args(numpy_ws, "--check")) == 1
    assert "stale: pixi.lock" in capsys.readouterr().err
    assert snapshot(numpy_ws) == before
    assert main(_args(numpy_ws)) == 0  # and the no-op path does not hand back the old lock
    assert by_name(numpy_ws / "pixi.lock", "mi300x")["numpy"].startswith("2.1.3 ")


@pytest.mark.parametrize("output", ["pixi.lock", "envs/mi300x/environment.yml", "envs/mi250/conda-linux-64-gfx90a.lock"])
def test_a_same_length_output_edit_is_seen(ws_copy: Path, output: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Each output's bytes are stamped too: one changed character (same size) is stale, and a lock rewrites it."""
    assert main(_args(ws_copy)) == 0  # records the stamp for this copy
    path = ws_copy / output
    good = path.read_text()
    # A character inside a package name: the file keeps its size and still parses.
    bad = good.replace("llamafactory", "llamafactorz", 1)
    assert bad != good and len(bad) == len(good)
    path.write_text(bad)
    capsys.readouterr()
    assert main(_args(ws_copy, "--check")) != 0
    assert path.read_text() == bad
    if output != "pixi.lock":  # a renamed package in pixi.lock is a lock to re-solve; an export is rewritten
        assert f"stale: {output}" in capsys.readouterr().err
        assert main(_args(ws_copy)) == 0
        assert path.read_text() == good


def _files(tmp_path: Path) -> tuple[Path, list[Path]]:
    manifest = tmp_path / "pixi.toml"
    manifest.write_text('[workspace]\nname = "a"\n')
    outs = [tmp_path / "pixi.lock", tmp_path / "envs.yml"]
    for i, p in enumerate(outs):
        p.write_text(f"output {i}\n")
    return manifest, outs


@pytest.mark.parametrize("where", ["ROCMLOCK_CACHE_DIR", "XDG_CACHE_HOME", "workspace"])
def test_the_cache_goes_where_the_docs_say_and_nowhere_else(ws_copy: Path, tmp_path: Path, where: str,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # docs/locking.md: $ROCMLOCK_CACHE_DIR, else $XDG_CACHE_HOME/rocmlock, else <workspace>/.rocmlock/cache. A
    # cache written elsewhere would also leave the no-op stamp where the next run does not look.
    monkeypatch.delenv("ROCMLOCK_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    if where != "workspace":
        monkeypatch.setenv(where, str(tmp_path / "set"))
    expected = {"ROCMLOCK_CACHE_DIR": tmp_path / "set", "XDG_CACHE_HOME": tmp_path / "set" / "rocmlock",
                "workspace": ws_copy / ".rocmlock" / "cache"}[where]
    assert stamp.default_cache_dir(ws_copy) == expected
    shutil.rmtree(ws_copy / ".rocmlock", ignore_errors=True)
    assert main(_args(ws_copy)) == 0
    assert any(expected.rglob("*.json")), "the stamp is written below the cache directory"
    # (<workspace>/.rocmlock holds the writer lock and the commit journal whatever the cache: util/journal.py.)
    others = [p for p in (tmp_path / "set", ws_copy / ".rocmlock" / "cache") if p not in (expected, *expected.parents)]
    assert not [p for p in others if p.exists()], others
    assert not (tmp_path / "home").exists()


def test_the_stamp_covers_each_of_its_inputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """_unchanged answers None once any input differs: the manifest's or an output's bytes (same length),
    an output's name, the set of outputs, the rocmlock version; the manifest path keys the stamp."""
    manifest, outs = _files(tmp_path)
    cache = tmp_path / "cache"
    stamp.record(cache, manifest, outs)
    assert _unchanged(cache, manifest) == sorted(outs)
    for path in (manifest, *outs):
        good = path.read_bytes()
        path.write_bytes(good.replace(b"a", b"b").replace(b"0", b"1").replace(b"1\n", b"2\n"))
        assert len(path.read_bytes()) == len(good) and path.read_bytes() != good
        assert _unchanged(cache, manifest) is None, path
        path.write_bytes(good)
        assert _unchanged(cache, manifest) == sorted(outs)
    monkeypatch.setattr(stamp, "__version__", "0.0.0-other")
    assert _unchanged(cache, manifest) is None
    monkeypatch.undo()
    other = tmp_path / "elsewhere.toml"
    other.write_bytes(manifest.read_bytes())
    assert _unchanged(cache, other) is None
    # Same bytes under another output name, or an output more or fewer: a different digest.
    digest = stamp.digest(manifest, outs)
    renamed = tmp_path / "envs.ym_"
    renamed.write_bytes(outs[1].read_bytes())
    assert digest is not None
    assert stamp.digest(manifest, [outs[0], renamed]) != digest
    assert stamp.digest(manifest, outs[:1]) != digest
    assert stamp.digest(manifest, [*outs, renamed]) != digest
    # Bytes moved from one file to the next (same total): different.
    outs[0].write_text("output 0\nou")
    outs[1].write_text("tput 1\n")
    assert stamp.digest(manifest, outs) != digest
    outs[1].unlink()
    assert stamp.digest(manifest, outs) is None and _unchanged(cache, manifest) is None


# ----------------------------------------------------------------------------- package rules


def _record(name: str, version: str, build: str) -> RepoDataRecord:
    pkg = PackageRecord(name, version, BuildString(build), 0, "linux-64")
    return RepoDataRecord(pkg, f"{name}-{version}-{build}.conda",
                          f"https://c.example/linux-64/{name}-{version}-{build}.conda", "https://c.example/")


@pytest.mark.parametrize(("spec", "ok"), [
    ('{ version = "2.2.0", build = "py312*" }', True),
    ('{ version = "2.2.0", build = "py311*" }', False),   # the version matches, the build does not
    ('{ version = "2.2.0", build = "py312h0_0" }', True),
    ('{ version = "2.2.0", build = "py312h0_1" }', False),
    ('{ version = "2.1.*", build = "py312*" }', False),
])
def test_a_locked_record_must_match_the_build_string(tmp_path: Path, spec: str, ok: bool) -> None:
    """pixi_core/src/lock_file/satisfiability/platform.rs (pixi v0.77.0, verify_package_platform_satisfiability):
    a locked record satisfies a spec when the whole MatchSpec matches it, build string included."""
    (tmp_path / "pixi.toml").write_text(
        '[workspace]\nname = "t"\nchannels = ["c"]\nplatforms = ["linux-64"]\n[dependencies]\nnumpy = ' + spec + "\n")
    env = load_workspace(tmp_path).environment("default")
    reason = records_unsat(env, env.platforms[0], [_record("numpy", "2.2.0", "py312h0_0")])
    assert (reason is None) is ok, reason
    if not ok:
        assert "locked numpy 2.2.0 py312h0_0 does not match" in str(reason)


def test_a_build_pin_the_lock_does_not_meet_is_stale(ws_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The same rule through the CLI: a build string added to a dependency makes the lock stale."""
    _edit(ws_copy / "pixi.toml", 'python = "3.12.*"', 'python = { version = "3.12.*", build = "nomatch*" }')
    assert main(_args(ws_copy, "--check", "-e", "default")) == 1
    err = capsys.readouterr().err
    assert "cannot solve environment 'default'" in err


# ----------------------------------------------------------------------------- satisfiability, one input at a time

def _unsat(root: Path, env_name: str, platform: str) -> tuple[str | None, bool]:
    """(why ``env_name`` on ``platform`` is out of date, whether pixi would solve it from scratch)."""
    ws = load_workspace(root)
    env = ws.environment(env_name)
    locked = read_lockfile(root / "pixi.lock")
    assert locked is not None
    found = environment_unsat(ws, env, locked)
    if found is not None:
        return found.reason, found.from_scratch
    return platform_unsat(env, env.platform(platform), locked), False


@pytest.fixture(scope="session")
def spare_channel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A third channel: one package nothing asks for."""
    return build_channel(tmp_path_factory.mktemp("spare") / "spare", [Pkg("spare", "1", subdir="noarch", noarch="generic")])


def _channels_line(*uris: str) -> str:
    return "channels = [" + ", ".join(f'"{u}"' for u in uris) + "]"


# (what changes, how, the reason's start, solved from scratch); `P`, `F`, `S` are the private, forge and spare
# channels' URIs. The rules: pixi_core/src/lock_file/satisfiability/environment.rs (pixi v0.77.0) and, for
# what pixi keeps of the old records, lock_file/outdated.rs (find_unsatisfiable_targets).
CHANGES = [
    # ChannelsMismatch: "the order matters here"; removed, reordered, prepended or another URL -> from scratch.
    ("channel order", ("channels", "F", "P"), "channels changed", True),
    ("channel removed", ("channels", "P"), "channels changed", True),
    ("channel prepended", ("channels", "S", "P", "F"), "channels changed", True),
    ("channel inserted", ("channels", "P", "S", "F"), "channels changed", True),
    ("channel URL", ("channels", "P", "S"), "channels changed", True),
    # ChannelsExtended: a lower-priority channel appended; the lock is out of date, its records still hold.
    ("channel appended", ("channels", "P", "F", "S"), "channels added", False),
    # PlatformDefinitionChanged -> from scratch.
    ("virtual package", ('glibc = "2.28", __amdgpu = "0", __amdgpu_arch = "9.4.2"',
                         'glibc = "2.31", __amdgpu = "0", __amdgpu_arch = "9.4.2"'), "platform 'linux-64-gfx942' changed its virtual", True),
    ("subdir", ('{ name = "linux-64-gfx942", platform = "linux-64"', '{ name = "linux-64-gfx942", platform = "linux-aarch64"'),
     "platform 'linux-64-gfx942' changed subdir", True),
    # platform.rs: the manifest's specs, the features that bring them, constraints, target-specific specs.
    ("dependency", ('llamafactory = "0.9.*"', 'llamafactory = "0.8.*"'), "locked llamafactory 0.9.4", False),
    ("feature", ('mi300x = { features = ["rocm72", "gfx942", "train"] }', 'mi300x = { features = ["rocm72", "gfx942"] }'),
     "locked package(s) no longer needed", False),
    ("constraint", ("[environments]", '[constraints]\npeft = "<0.18"\n\n[environments]'), "locked peft 0.18.0", False),
    ("target dependency", ("[environments]", '[target.linux-64.dependencies]\npeft = ">0.18"\n\n[environments]'),
     "locked peft 0.18.0", False),
    # A solve group's environments are checked against the group's channels (grouped_env.channels()).
    ("solve group", ('mi300x = { features = ["rocm72", "gfx942", "train"] }',
                     ('mi300x = { features = ["rocm72", "gfx942", "train"], solve-group = "g" }\n'
                      'spare = { features = ["spare"], solve-group = "g" }\n[feature.spare]\nchannels = ["S"]')),
     "channels added", False),
]


@pytest.mark.parametrize(("change", "edit", "reason", "scratch"), CHANGES, ids=[c[0] for c in CHANGES])
def test_each_input_changed_alone_makes_the_lock_stale(
        ws_copy: Path, channels: dict[str, Path], spare_channel: Path, change: str, edit: tuple[str, ...],
        reason: str, scratch: bool) -> None:
    uris = {"P": channels["private"].as_uri(), "F": channels["forge"].as_uri(), "S": spare_channel.as_uri()}
    assert _unsat(ws_copy, "mi300x", "linux-64-gfx942") == (None, False)
    path = ws_copy / "pixi.toml"
    if edit[0] == "channels":
        _edit(path, _channels_line(uris["P"], uris["F"]), _channels_line(*(uris[c] for c in edit[1:])))
    else:
        _edit(path, edit[0], edit[1].replace('"S"', f'"{uris["S"]}"'))
    found, from_scratch = _unsat(ws_copy, "mi300x", "linux-64-gfx942")
    assert found is not None and found.startswith(reason), found
    assert from_scratch is scratch


# ----------------------------------------------------------------------------- re-solved from scratch, or not


@pytest.fixture
def moved_ws(channels: dict[str, Path], tmp_path: Path) -> tuple[Path, Path]:
    """A workspace locked against a copy of the private channel that has since gained llamafactory 0.9.5:
    a re-solve that keeps the old records as preferences stays on 0.9.4, one from scratch takes 0.9.5."""
    private = tmp_path / "private"
    shutil.copytree(channels["private"], private)
    root = tmp_path / "ws"
    root.mkdir()
    (root / "pixi.toml").write_text(manifest(private.as_uri(), channels["forge"].as_uri()))
    assert main(_args(root)) == 0
    build_channel(private, [Pkg("llamafactory", "0.9.5", "pyh0_0", subdir="noarch", noarch="python",
                                depends=("python >=3.11", "pytorch >=2.4", "transformers >=4.55", "peft >=0.18"))])
    return root, private


def _conda_urls(lock: Path) -> list[str]:
    return [line.split("conda: ", 1)[1] for line in lock.read_text().splitlines() if line.lstrip().startswith("- conda: ")]


def test_a_moved_channel_is_solved_from_scratch(moved_ws: tuple[Path, Path], tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """pixi v0.77.0 lock_file/outdated.rs: ChannelsMismatch puts the environment in disregard_locked_content,
    so nothing of the old channel's records survives: every package URL names the new channel."""
    root, private = moved_ws
    moved = tmp_path / "moved"
    shutil.copytree(private, moved)
    _edit(root / "pixi.toml", private.as_uri(), moved.as_uri())
    capsys.readouterr()
    assert main(_args(root, "--check", "--json")) == 1
    data = json.loads(capsys.readouterr().out)
    assert {s["reason"].split(" (")[0] for s in data["solved"]} == {"channels changed"}
    assert main(_args(root)) == 0
    urls = _conda_urls(root / "pixi.lock")
    # pixi writes a local package as a path, a remote one as a URL.
    assert urls and not [u for u in urls if u.startswith((f"{private}/", f"{private.as_uri()}/"))]
    assert any(u.startswith(f"{moved}/") for u in urls)
    assert by_name(root / "pixi.lock", "mi300x")["llamafactory"] == "0.9.5 pyh0_0"
    assert main(_args(root, "--check")) == 0


def test_an_appended_channel_keeps_the_locked_packages(moved_ws: tuple[Path, Path], spare_channel: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """ChannelsExtended (outdated.rs): lower-priority channels appended leave the locked records valid; the
    lock is out of date (its channel list), the re-solve keeps them as preferences."""
    root, private = moved_ws
    _edit(root / "pixi.toml", f'"{private.as_uri()}", ', f'"{private.as_uri()}", "{spare_channel.as_uri()}", ')
    # ^ inserted before forge: a mismatch. Appended after forge instead:
    _edit(root / "pixi.toml", f'"{spare_channel.as_uri()}", ', "")
    text = (root / "pixi.toml").read_text()
    forge_end = text.index('"]\nchannel-priority')
    (root / "pixi.toml").write_text(text[:forge_end] + f'", "{spare_channel.as_uri()}' + text[forge_end:])
    capsys.readouterr()
    assert main(_args(root, "--check", "--json")) == 1
    data = json.loads(capsys.readouterr().out)
    assert {s["reason"].split(" (")[0] for s in data["solved"]} == {"channels added"}
    assert data["changes"] == {}
    assert main(_args(root)) == 0
    assert by_name(root / "pixi.lock", "mi300x")["llamafactory"] == "0.9.4 pyh0_0"
    assert spare_channel.as_uri() in (root / "pixi.lock").read_text()


def test_a_changed_platform_definition_is_solved_from_scratch(moved_ws: tuple[Path, Path]) -> None:
    """PlatformDefinitionChanged (outdated.rs): the records were solved under other virtual packages."""
    root, _ = moved_ws
    _edit(root / "pixi.toml", 'glibc = "2.28", __amdgpu = "0", __amdgpu_arch = "9.4.2"',
          'glibc = "2.31", __amdgpu = "0", __amdgpu_arch = "9.4.2"')
    assert main(_args(root)) == 0
    assert by_name(root / "pixi.lock", "mi300x")["llamafactory"] == "0.9.5 pyh0_0"
    assert by_name(root / "pixi.lock", "mi250")["llamafactory"] == "0.9.4 pyh0_0"  # untouched


@pytest.mark.parametrize(("option", "value"), [
    ("channel-priority", "disabled"), ("strategy", "lowest-version"), ("exclude-newer", '"2023-10-01T00:00:00Z"')])
def test_a_lock_solved_with_other_options_is_solved_again(
        moved_ws: tuple[Path, Path], option: str, value: str, capsys: pytest.CaptureFixture[str]) -> None:
    """SolveStrategyMismatch / ChannelPriorityMismatch / ExcludeNewerMismatch (satisfiability/environment.rs,
    pixi v0.77.0; the lock layout of tests/data/non-satisfiability/mismatch-*2/pixi.lock): a lock pixi solved
    with other options than the manifest's is re-solved from scratch, and rocmlock's lock records none."""
    root, _ = moved_ws
    lock = root / "pixi.lock"
    text = lock.read_text()
    marker = "  mi300x:\n    channels:\n"
    head, tail = text.split(marker)
    channel_lines = tail.split("    packages:\n", 1)
    lock.write_text(head + marker + channel_lines[0] + f"    options:\n      {option}: {value}\n    packages:\n"
                    + channel_lines[1])
    capsys.readouterr()
    assert main(_args(root, "--check", "--json")) == 1
    data = json.loads(capsys.readouterr().out)
    assert [s["environment"] for s in data["solved"]] == ["mi300x"]
    want = {"channel-priority": "strict", "strategy": "highest", "exclude-newer": "none"}[option]
    assert data["solved"][0]["reason"] == \
        f"the lock was solved with {option} {value.strip(chr(34))}, the manifest asks for {want}"
    assert main(_args(root)) == 0
    assert "options:" not in lock.read_text()
    assert by_name(lock, "mi300x")["llamafactory"] == "0.9.5 pyh0_0"


def test_options_at_their_defaults_are_satisfied(ws_copy: Path) -> None:
    """pixi writes `pypi-prerelease-mode: if-necessary-or-explicit` (and may write a default explicitly):
    the same solve, nothing to re-solve."""
    lock = ws_copy / "pixi.lock"
    text = lock.read_text()
    lock.write_text(text.replace("  mi300x:\n    channels:\n", "  mi300x:\n    options:\n      channel-priority: strict\n"
                                 "      pypi-prerelease-mode: if-necessary-or-explicit\n    channels:\n", 1))
    assert _unsat(ws_copy, "mi300x", "linux-64-gfx942") == (None, False)


@pytest.mark.parametrize(("old", "new", "key"), [
    ('channel-priority = "strict"', 'channel-priority = "disabled"', "workspace.channel-priority"),
    ('channel-priority = "strict"', 'solve-strategy = "lowest"', "workspace.solve-strategy"),
    ('channel-priority = "strict"', 'exclude-newer = "2026-01-01"', "workspace.exclude-newer"),
])
def test_a_solve_option_changed_in_the_manifest_is_never_up_to_date(
        ws_copy: Path, old: str, new: str, key: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The manifest side of the same rules: rocmlock cannot solve or record those values, so a locked workspace
    whose manifest now asks for them is refused (exit 2, one line), never reported up to date."""
    _edit(ws_copy / "pixi.toml", old, new)
    before = snapshot(ws_copy)
    capsys.readouterr()
    assert main(_args(ws_copy, "--check")) == 2
    err = capsys.readouterr().err
    assert f"key '{key}'" in err and "Traceback" not in err
    assert snapshot(ws_copy) == before


# ----------------------------------------------------------------------------- channels = []


def _no_channels(ws: Path) -> None:
    text = (ws / "pixi.toml").read_text()
    start = text.index("channels = [")
    (ws / "pixi.toml").write_text(text[:start] + "channels = []" + text[text.index("]", start) + 1:])


@pytest.mark.parametrize("command", [["lock"], ["lock", "--check"]])
def test_empty_channels_are_refused_where_dependencies_must_be_solved(
        ws_copy: Path, command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """pixi accepts `channels = []` (its tests/data/workspaces/host-dependency); an environment with dependencies
    has nothing to solve them from: refused in one line naming it, before anything is written."""
    _no_channels(ws_copy)
    before = snapshot(ws_copy)
    capsys.readouterr()
    assert main([*command, "--manifest-path", str(ws_copy / "pixi.toml")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"error: {ws_copy / 'pixi.toml'}: environment '"), err
    assert err[0].endswith("but no channels to solve them from") and "(python" in err[0], err
    assert len(err) == 2 and err[1].startswith("hint: name the channels"), err
    assert snapshot(ws_copy) == before


@pytest.mark.parametrize("command", [
    ["export"], ["install", "-e", "mi300x", "--prefix", "PREFIX"], ["pack", "-e", "mi300x", "-o", "BUNDLE"],
    ["preset", "-e", "mi300x", "--method", "lora"]])
def test_empty_channels_are_no_error_for_what_reads_the_lock(
        ws_copy: Path, tmp_path: Path, command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """What reads the lock takes its packages and channels from the lock: the manifest's `channels = []` changes
    none of what it writes."""
    manifest = ["--manifest-path", str(ws_copy / "pixi.toml")]
    locked = by_name(ws_copy / "pixi.lock", "mi300x")  # name -> "version build"
    files = {f"{name}-{pin.replace(' ', '-')}.conda" for name, pin in locked.items()}
    before = snapshot(ws_copy)
    if command[0] == "preset":  # the same preset from the manifest with its channels
        assert main([*command, "-o", str(tmp_path / "with-channels.yaml"), *manifest]) == 0
    _no_channels(ws_copy)
    shutil.rmtree(ws_copy / "envs")  # export writes them again, from the lock alone
    argv = [a.replace("PREFIX", str(tmp_path / "prefix")).replace("BUNDLE", str(tmp_path / "b.tar")) for a in command]
    capsys.readouterr()
    assert main([*argv, *manifest]) == 0
    err = capsys.readouterr().err
    if command[0] == "export":
        envs = {k: v for k, v in before.items() if k.startswith("envs/")}
        assert envs and {k: v for k, v in snapshot(ws_copy).items() if k.startswith("envs/")} == envs
        channels = yaml.safe_load((ws_copy / "envs/mi300x/environment.yml").read_text())["channels"]
        assert len(channels) == 2 and all(c.startswith("file://") for c in channels)  # the lock's two channels
    elif command[0] == "install":
        metas = [json.loads(p.read_text()) for p in (tmp_path / "prefix/conda-meta").glob("*.json")]
        assert {m["name"]: f"{m['version']} {m['build']}" for m in metas} == locked
        assert f"installed {len(locked)} package(s) of 'mi300x'" in err
    elif command[0] == "pack":
        with tarfile.open(tmp_path / "b.tar") as tar:
            packed = {Path(n).name for n in tar.getnames() if n.endswith(".conda")}
        assert packed == files and f"packed {len(locked)} package(s) of 'mi300x'" in err
    else:
        preset = ws_copy / "presets/mi300x-lora.yaml"
        assert preset.read_text() == (tmp_path / "with-channels.yaml").read_text()
        assert f"wrote {preset}" in err


def test_pixis_workspace_without_channels_locks_and_exports(tmp_path: Path) -> None:
    # prefix-dev/pixi tests/data/workspaces/host-dependency/pixi.toml, and its pixi.lock (`channels: []`).
    (tmp_path / "pixi.toml").write_text('[workspace]\nchannels = []\nplatforms = []\npreview = ["pixi-build"]\n')
    (tmp_path / "pixi.lock").write_text("version: 6\nenvironments:\n  default:\n    channels: []\n    options:\n"
                                        "      pypi-prerelease-mode: if-necessary-or-explicit\n    packages: {}\n"
                                        "packages: []\n")
    manifest = ["--manifest-path", str(tmp_path / "pixi.toml")]
    assert main(["export", *manifest]) == 0
    assert main(["lock", *manifest]) == 0
    assert main(["lock", "--check", *manifest]) == 0
    assert "    channels: []\n    packages: {}\n" in (tmp_path / "pixi.lock").read_text()
    # With a platform, an environment of no packages: environment.yml's channels are an empty list, not null.
    (tmp_path / "pixi.toml").write_text('[workspace]\nchannels = []\nplatforms = ["linux-64"]\n')
    assert main(["lock", *manifest]) == 0
    data = yaml.safe_load((tmp_path / "envs/default/environment.yml").read_text())
    assert data["channels"] == [] and data["dependencies"] == []


def test_an_environment_whose_features_all_drop_the_channels_and_has_no_dependencies_locks(
        ws_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _edit(ws_copy / "pixi.toml", "[environments]\n",
          '[feature.none]\nchannels = []\n\n[environments]\nbare = { features = ["none"], no-default-feature = true }\n')
    assert main(_args(ws_copy)) == 0
    assert main(_args(ws_copy, "--check")) == 0
    _edit(ws_copy / "pixi.toml", "[feature.none]\nchannels = []\n", '[feature.none]\nchannels = []\n'
          '[feature.none.dependencies]\npython = "*"\n')
    capsys.readouterr()
    assert main(_args(ws_copy)) == 2
    assert "environment 'bare' has dependencies on platform" in capsys.readouterr().err


# ----------------------------------------------------------------------------- solve groups

GROUPED = ('\n[feature.np-old.dependencies]\nnumpy = "<2.2"\n[feature.bare.dependencies]\nnumpy = "*"\n'
           '[environments.a]\nfeatures = ["gfx942", "np-old"]\nGROUP_A\n'
           '[environments.b]\nfeatures = ["gfx942", "bare"]\nGROUP_B\n')


def test_one_environment_solved_again_takes_its_solve_group_along(
        channels: dict[str, Path], tmp_path: Path) -> None:
    """pixi v0.77.0 lock_file/outdated.rs, map_outdated_targets_to_solve_groups: "If one of the environments in a
    solve-group is no longer satisfied by the lock file all the environments in the same solve-group have to be
    recomputed" -- else b would keep numpy 2.1.3 from a solve whose other half is gone."""
    extra = GROUPED.replace("GROUP_A", 'solve-group = "g"').replace("GROUP_B", 'solve-group = "g"')
    root = make_workspace(tmp_path / "ws", channels, extra=extra)
    assert lock_workspace(root, environments=["a", "b"]).written
    assert by_name(root / "pixi.lock", "b")["numpy"] == "2.1.3 py312h0_0"
    _edit(root / "pixi.toml", 'numpy = "<2.2"', 'numpy = ">=2.2"')
    result = lock_workspace(root, environments=["a", "b"], check=True)
    assert result.reasons[("b", "linux-64-gfx942")] == "solve group 'g' is solved again for environment 'a'"
    lock_workspace(root, environments=["a", "b"])
    assert by_name(root / "pixi.lock", "a")["numpy"] == by_name(root / "pixi.lock", "b")["numpy"] == "2.2.0 py312h0_0"


def test_a_solve_group_whose_locks_disagree_is_solved_again(channels: dict[str, Path], tmp_path: Path) -> None:
    """find_inconsistent_solve_groups (outdated.rs): the environments of a solve group must lock one record per
    package name. a and b, locked apart (numpy 2.1.3 and 2.2.0), then put in one group: each still satisfies its
    own manifest, the group does not."""
    root = make_workspace(tmp_path / "ws", channels, extra=GROUPED.replace("GROUP_A\n", "").replace("GROUP_B\n", ""))
    lock_workspace(root, environments=["a", "b"])
    assert by_name(root / "pixi.lock", "b")["numpy"] == "2.2.0 py312h0_0"
    _edit(root / "pixi.toml", 'features = ["gfx942", "np-old"]\n', 'features = ["gfx942", "np-old"]\nsolve-group = "g"\n')
    _edit(root / "pixi.toml", 'features = ["gfx942", "bare"]\n', 'features = ["gfx942", "bare"]\nsolve-group = "g"\n')
    assert _unsat(root, "b", "linux-64-gfx942") == (None, False)  # each environment alone is satisfied
    result = lock_workspace(root, environments=["a", "b"], check=True)
    assert result.reasons[("a", "linux-64-gfx942")] == "solve group 'g' locks numpy differently in its environments"
    lock_workspace(root, environments=["a", "b"])
    assert by_name(root / "pixi.lock", "a")["numpy"] == by_name(root / "pixi.lock", "b")["numpy"] == "2.1.3 py312h0_0"


# ----------------------------------------------------------------------------- platforms the lock and manifest do not share


def _locked(root: Path) -> LockedWorkspace:
    locked = read_lockfile(root / "pixi.lock")
    assert locked is not None
    return locked


def test_a_platform_of_another_subdir_only_the_lock_has_is_stale(ws_copy: Path) -> None:
    """satisfiability/environment.rs (pixi v0.77.0), AdditionalPlatformsInLockFile: a locked platform the
    environment lacks, unless its subdir is one the environment targets (a legacy bare-subdir name); the
    locked records stay preferences (outdated.rs adds the platform to the outdated set only)."""
    ws = load_workspace(ws_copy)
    env = ws.environment("mi300x")
    locked = _locked(ws_copy)
    lenv = locked.environments["mi300x"]
    osx = LockedPlatform("osx-arm64", "osx-arm64", ("__unix=0=0", "__osx=13.0", "__archspec=1=m1"))
    win = LockedPlatform("win-64", "win-64", ("__win=0=0", "__archspec=1=x86_64"))
    records = {**lenv.records, "osx-arm64": [], "win-64": []}
    other = LockedWorkspace({**locked.platforms, "osx-arm64": osx, "win-64": win},
                            {**locked.environments, "mi300x": replace(lenv, records=records)})
    assert environment_unsat(ws, env, other) == \
        Unsat("the lock has platform(s) the environment does not: osx-arm64, win-64")
    # The same extra name on a subdir the environment targets: the same target under an old name.
    legacy = LockedPlatform("linux-64", "linux-64", ())
    same = LockedWorkspace({**locked.platforms, "linux-64": legacy},
                           {**locked.environments, "mi300x": replace(lenv, records={**lenv.records, "linux-64": []})})
    assert environment_unsat(ws, env, same) is None


def test_every_shared_platform_is_compared_even_after_one_the_lock_lacks(ws_copy: Path) -> None:
    """PlatformDefinitionChanged is checked for every platform both hold: a platform missing from the lock
    (the first of `default`'s) does not end the check before the changed one."""
    ws = load_workspace(ws_copy)
    env = ws.environment("default")
    assert [p.name for p in env.platforms] == ["linux-64-gfx90a", "linux-64-gfx942"]
    locked = _locked(ws_copy)
    gfx942 = locked.platforms["linux-64-gfx942"]
    changed = tuple(v.replace("__glibc=2.28", "__glibc=2.31") for v in gfx942.virtual_packages)
    platforms = {"linux-64-gfx942": replace(gfx942, virtual_packages=changed)}
    other = LockedWorkspace(platforms, locked.environments)
    assert environment_unsat(ws, env, other) == Unsat("platform 'linux-64-gfx942' changed its virtual packages", True)
    # ... and the platform the lock lacks is reported per platform, not as satisfied.
    assert platform_unsat(env, env.platforms[0], other) == "platform 'linux-64-gfx90a' is not locked"


def test_a_locked_platform_without_this_environments_records_is_not_locked(ws_copy: Path) -> None:
    """The platform is in the lock (another environment uses it) but this environment has no records there."""
    ws = load_workspace(ws_copy)
    env = ws.environment("default")
    locked = _locked(ws_copy)
    lenv = locked.environments["default"]
    records = {k: v for k, v in lenv.records.items() if k != "linux-64-gfx942"}
    other = LockedWorkspace(locked.platforms, {**locked.environments, "default": replace(lenv, records=records)})
    assert platform_unsat(env, env.platforms[1], other) == "platform 'linux-64-gfx942' is not locked"
    assert platform_unsat(env, env.platforms[0], other) is None


# ----------------------------------------------------------------------------- PyPI index options


def test_pypi_options_count_only_with_pypi_dependencies(ws_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """satisfiability/environment.rs (pixi v0.77.0): the PyPI indexes are compared ("Do some more checks if we have
    pypi dependencies") only for an environment with PyPI dependencies. Without any, another index changes no
    solve and the lock stays up to date; with some, `rocmlock lock` cannot lock the workspace at all (exit 2,
    `pixi lock` then `rocmlock export`), so it never calls such a lock up to date."""
    _edit(ws_copy / "pixi.toml", "[environments]", '[pypi-options]\nindex-url = "https://pypi.example.org/simple"\n\n'
                                                   "[environments]")
    assert main(_args(ws_copy, "--check")) == 0
    _edit(ws_copy / "pixi.toml", "[environments]", '[pypi-dependencies]\nrequests = "*"\n\n[environments]')
    capsys.readouterr()
    assert main(_args(ws_copy, "--check")) == 2
    assert "key 'pypi-dependencies' holds PyPI dependencies" in capsys.readouterr().err


def test_the_channel_reasons_list_the_channels(ws_copy: Path, channels: dict[str, Path], spare_channel: Path,
                                               tmp_path: Path) -> None:
    """What `--json` and the summary say: the appended channels, or the whole old and new lists; a new
    environment is "not in the lock"."""
    p, f, s = channels["private"].as_uri(), channels["forge"].as_uri(), spare_channel.as_uri()
    other = build_channel(tmp_path / "other", [Pkg("other", "1", subdir="noarch", noarch="generic")]).as_uri()
    path = ws_copy / "pixi.toml"
    _edit(path, _channels_line(p, f), _channels_line(p, f, s, other))
    assert _unsat(ws_copy, "mi300x", "linux-64-gfx942") == (f"channels added ({s}/, {other}/)", False)
    _edit(path, _channels_line(p, f, s, other), _channels_line(f, p))
    assert _unsat(ws_copy, "mi300x", "linux-64-gfx942") == (f"channels changed ({p}/, {f}/ -> {f}/, {p}/)", True)
    _edit(path, _channels_line(f, p), _channels_line(p, f))
    _edit(path, "[environments]\n", '[environments]\nnew = ["gfx942"]\n')
    assert _unsat(ws_copy, "new", "linux-64-gfx942") == ("not in the lock", False)


def test_options_survive_pixis_platform_names(ws_copy: Path) -> None:
    """A pixi-written lock names rich platforms p1, p2, ... (lock_file/platform_rename.rs); mapping them back to the
    manifest's names keeps each environment's recorded solve options, so a lock pixi solved with another channel
    priority is still re-solved from scratch."""
    lock = ws_copy / "pixi.lock"
    text = lock.read_text().replace("linux-64-gfx90a", "p1").replace("linux-64-gfx942", "p2")
    lock.write_text(text.replace("  mi300x:\n    channels:\n",
                                 "  mi300x:\n    options:\n      channel-priority: disabled\n    channels:\n", 1))
    ws = load_workspace(ws_copy)
    locked = align_platforms(_locked(ws_copy), ws.platforms)
    assert set(locked.platforms) == {"linux-64-gfx90a", "linux-64-gfx942"}
    assert environment_unsat(ws, ws.environment("mi300x"), locked) == \
        Unsat("the lock was solved with channel-priority disabled, the manifest asks for strict", True)
    assert environment_unsat(ws, ws.environment("mi250"), locked) is None
