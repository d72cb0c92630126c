"""Whatever a lock depends on, changed alone, makes it stale: the no-op stamp's inputs and satisfiability's.

Each test changes exactly one input of a locked workspace and expects `lock --check` to say so (exit 1, or
exit 2 where rocmlock refuses the new value), so a check that overlooks that input fails here. The rules
are pixi 0.77.0's (crates/pixi_core/src/lock_file/satisfiability/{environment,platform}.rs and
lock_file/outdated.rs); each test names the one it follows.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from lockhelpers import by_name, make_workspace, snapshot
from rattler import BuildString, PackageRecord, RepoDataRecord
from rocmlock.cli.main import main
from rocmlock.lock import stamp
from rocmlock.lock.satisfy import records_unsat
from rocmlock.workspace.manifest import load_workspace

NUMPY = 'numpy = "==2.2.0"\n'  # forge has numpy 2.1.3 and 2.2.0: a same-length edit picks the other


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


def test_the_stamp_covers_each_of_its_inputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """stamp.unchanged answers None once any input differs: the manifest's or an output's bytes (same length),
    an output's name, the set of outputs, the rocmlock version; the manifest path keys the stamp."""
    manifest, outs = _files(tmp_path)
    cache = tmp_path / "cache"
    stamp.record(cache, manifest, outs)
    assert stamp.unchanged(cache, manifest) == sorted(outs)
    for path in (manifest, *outs):
        good = path.read_bytes()
        path.write_bytes(good.replace(b"a", b"b").replace(b"0", b"1").replace(b"1\n", b"2\n"))
        assert len(path.read_bytes()) == len(good) and path.read_bytes() != good
        assert stamp.unchanged(cache, manifest) is None, path
        path.write_bytes(good)
        assert stamp.unchanged(cache, manifest) == sorted(outs)
    monkeypatch.setattr(stamp, "__version__", "0.0.0-other")
    assert stamp.unchanged(cache, manifest) is None
    monkeypatch.undo()
    other = tmp_path / "elsewhere.toml"
    other.write_bytes(manifest.read_bytes())
    assert stamp.unchanged(cache, other) is None
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
    assert stamp.digest(manifest, outs) is None and stamp.unchanged(cache, manifest) is None


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
