"""`rocmlock lock`: per-target solves, strict priority, pixi.lock v7, re-locks, --check, --update, errors."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import shutil
import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from channels import Pkg, build_channel, py
from lockhelpers import by_name, make_workspace, manifest, snapshot
from rattler import LockFile, install
from rocmlock.cli.main import main
from rocmlock.errors import InputError, OperationError
from rocmlock.lock.lockfile import read_lockfile
from rocmlock.lock.pipeline import lock_workspace
from rocmlock.lock.satisfy import environment_unsat, platform_unsat
from rocmlock.workspace.manifest import load_workspace

# ----------------------------------------------------------------------------- what gets locked


def test_each_environment_gets_its_own_target_builds(locked_ws: Path) -> None:
    mi250, mi300x = by_name(locked_ws / "pixi.lock", "mi250"), by_name(locked_ws / "pixi.lock", "mi300x")
    assert "rocm72_gfx90a" in mi250["pytorch"] and "rocm72_gfx90a" in mi250["flash-attn"]
    assert "rocm72_gfx942" in mi300x["pytorch"] and "rocm72_gfx942" in mi300x["flash-attn"]
    assert mi250["amdgpu-target"] == "1 gfx90a" and mi300x["amdgpu-target"] == "1 gfx942"
    assert {"llamafactory", "transformers", "peft", "numpy", "python", "rocm-version"} <= set(mi300x)


def test_strict_priority_keeps_forge_pytorch_out(locked_ws: Path, channels: dict[str, Path], tmp_path: Path) -> None:
    # forge has pytorch 2.99 (CPU and CUDA); the private channel comes first, so only 2.12.1 is visible.
    assert by_name(locked_ws / "pixi.lock", "mi300x")["pytorch"].startswith("2.12.1 ")
    extra = '\n[feature.any-torch.dependencies]\npytorch = "*"\n[environments.torch-only]\n' \
            'features = ["gfx942", "any-torch"]\n'
    root = tmp_path / "strict"
    root.mkdir()
    text = manifest(channels["private"].as_uri(), channels["forge"].as_uri(), priority="strict")
    (root / "pixi.toml").write_text(text.replace("\n[feature.rocm72", extra + "\n[feature.rocm72"))
    lock_workspace(root, environments=["torch-only"])
    assert by_name(root / "pixi.lock", "torch-only")["pytorch"].startswith("2.12.1 ")


@pytest.mark.parametrize(("option", "key"), [
    ('channel-priority = "disabled"', "workspace.channel-priority"),
    ('channel-priority = "flexible"', "workspace.channel-priority"),
    ('channel-priority = "strict"\nsolve-strategy = "lowest"', "workspace.solve-strategy"),
    ('channel-priority = "strict"\nexclude-newer = 2100-01-01', "workspace.exclude-newer"),
])
def test_solve_options_a_lock_cannot_record_are_refused(
        channels: dict[str, Path], tmp_path: Path, option: str, key: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    """pixi_core/src/lock_file/satisfiability/environment.rs (pixi v0.77.0) compares the lock's solve options
    (strategy, channel priority, exclude-newer) with the manifest's; py-rattler's LockFile writes none,
    so a lock solved with another value would be out of date for `pixi install --locked`. Refused,
    before anything is solved or written."""
    root = make_workspace(tmp_path / "ws", channels)
    text = (root / "pixi.toml").read_text()
    (root / "pixi.toml").write_text(text.replace('channel-priority = "strict"', option))
    assert main(["lock", "--manifest-path", str(root / "pixi.toml")]) == 2
    err = capsys.readouterr().err
    assert f"key '{key}'" in err and "cannot record" in err and "pixi lock" in err
    assert not (root / "pixi.lock").exists() and not (root / "envs").exists()


def test_lock_records_rich_platforms_and_channels(locked_ws: Path, channels: dict[str, Path]) -> None:
    lock = LockFile.from_path(locked_ws / "pixi.lock")
    plats = {p.name: p for p in lock.platforms()}
    assert set(plats) == {"linux-64-gfx90a", "linux-64-gfx942"}
    assert str(plats["linux-64-gfx942"].subdir) == "linux-64"
    assert set(plats["linux-64-gfx942"].virtual_packages) == {
        "__amdgpu=0", "__amdgpu_arch=9.4.2", "__unix=0=0", "__linux=4.18", "__glibc=2.28", "__archspec=0=x86_64"}
    env = lock.environment("mi300x")
    assert env is not None
    assert [str(c) for c in env.channels()] == [channels["private"].as_uri() + "/", channels["forge"].as_uri() + "/"]
    assert [p.name for p in env.platforms()] == ["linux-64-gfx942"]
    text = (locked_ws / "pixi.lock").read_text()
    assert text.startswith("version: 7\n")


def test_lock_satisfies_pixi_rules(locked_ws: Path) -> None:
    ws = load_workspace(locked_ws)
    locked = read_lockfile(locked_ws / "pixi.lock")
    assert locked is not None and set(locked.environments) == {"default", "mi250", "mi300x"}
    for env in ws.environments():
        assert environment_unsat(ws, env, locked) is None
        for plat in env.platforms:
            assert platform_unsat(env, plat, locked) is None


def test_lock_installs_into_a_prefix(locked_ws: Path, tmp_path: Path) -> None:
    env = LockFile.from_path(locked_ws / "pixi.lock").environment("mi300x")
    assert env is not None
    records = env.conda_repodata_records_for_platform(env.platforms()[0])
    assert records
    asyncio.run(install(records, tmp_path / "prefix", cache_dir=tmp_path / "pkgs", show_progress=False))
    meta = {p.name for p in (tmp_path / "prefix" / "conda-meta").glob("*.json")}
    assert any(m.startswith("pytorch-2.12.1-rocm72_gfx942") for m in meta)
    assert any(m.startswith("flash-attn-2.8.3-rocm72_gfx942") for m in meta)


def test_arch_constraint_keeps_other_target_builds_out(channels: dict[str, Path], tmp_path: Path) -> None:
    # Asking the gfx90a platform for the gfx942 pytorch build: its __amdgpu_arch constraint cannot match.
    extra = ('\n[feature.wrong.dependencies]\npytorch = { version = "*", build = "rocm72_gfx942*" }\n'
             '[feature.only90a]\nplatforms = ["linux-64-gfx90a"]\n'
             '[environments.wrong]\nfeatures = ["wrong", "only90a"]\n')
    root = make_workspace(tmp_path / "ws", channels, extra=extra)
    with pytest.raises(OperationError) as err:
        lock_workspace(root, environments=["wrong"])
    message = str(err.value)
    assert "environment 'wrong'" in message and "linux-64-gfx90a" in message and "gfx90a" in message
    assert "__amdgpu_arch" in message
    assert not (root / "pixi.lock").exists()


def test_root_manifest_locks_with_a_local_channel(channels: dict[str, Path], tmp_path: Path) -> None:
    # The repository's own pixi.toml, with conda-forge swapped for the test forge and ./channel holding
    # the private builds for all four of its targets.
    root = tmp_path / "ws"
    shutil.copytree(channels["private"], root / "channel")
    extra = [Pkg("rocm-env-check", "0.1", "0", subdir="noarch", noarch="generic")]
    for gfx, isa in (("gfx950", "9.5.0"), ("gfx1100", "11.0.0")):
        identity = (f"amdgpu-target * {gfx}", "rocm-version 7.2.*")
        extra += [Pkg("amdgpu-target", "1", gfx, subdir="noarch", noarch="generic"),
                  Pkg("pytorch", "2.12.1", f"rocm72_{gfx}_py312_h1a2b3c4_0", depends=(py(), "numpy", *identity),
                      constrains=(f"__amdgpu_arch =={isa}",)),
                  Pkg("flash-attn", "2.8.3", f"rocm72_{gfx}_py312_h5d6e7f8_0",
                      depends=(py(), f"pytorch ==2.12.1 rocm72_{gfx}_*", *identity),
                      constrains=(f"__amdgpu_arch =={isa}",))]
    build_channel(root / "channel", extra)
    text = (Path(__file__).resolve().parent.parent / "pixi.toml").read_text()
    (root / "pixi.toml").write_text(text.replace('"conda-forge"', f'"{channels["forge"].as_uri()}"'))
    gpu_envs = ["-e", "default", "-e", "mi250", "-e", "mi300x", "-e", "mi355x", "-e", "w7900"]
    assert main(["lock", "--manifest-path", str(root / "pixi.toml"), *gpu_envs]) == 0
    for env, gfx in (("mi250", "gfx90a"), ("mi300x", "gfx942"), ("mi355x", "gfx950"), ("w7900", "gfx1100")):
        assert f"rocm72_{gfx}_" in by_name(root / "pixi.lock", env)["flash-attn"]
    lock = LockFile.from_path(root / "pixi.lock")
    assert next(str(c) for c in lock.environment("mi355x").channels()) == "./channel"  # type: ignore[union-attr]
    ws = load_workspace(root)
    locked = read_lockfile(root / "pixi.lock")
    assert locked is not None
    for name in ("default", "mi250", "mi300x", "mi355x", "w7900"):
        env = ws.environment(name)
        assert environment_unsat(ws, env, locked) is None
        assert all(platform_unsat(env, plat, locked) is None for plat in env.platforms)
    assert main(["lock", "--check", "--manifest-path", str(root / "pixi.toml"), *gpu_envs]) == 0


def test_a_local_channel_is_written_as_pixi_writes_it_and_ties_the_lock_to_its_checkout(
        channels: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # pixi 0.77.0 writes each package of a path channel with its absolute path: pixi_core/src/lock_file/update.rs
    # (into_conda_package_data) -> rattler_lock 0.32.0 conda.rs `From<RepoDataRecord>`, where
    # `UrlOrPath::from(url).normalize()` turns a file:// URL into a path. Relative ones are not an option:
    # reading a package back (`TryFrom<CondaBinaryData> for RepoDataRecord`, `try_into_url`) fails with file_url's
    # NotAnAbsolutePath. prefix-dev/pixi#6322 (open) asks for relative ones; its fix (pixi#6332, rattler#2498)
    # is not merged. The channel line stays `./channel`, which pixi resolves against the workspace root
    # (lock_file/satisfiability/environment.rs).
    root = tmp_path / "ws"
    shutil.copytree(channels["private"], root / "channel")
    (root / "pixi.toml").write_text(manifest("./channel", channels["forge"].as_uri()))
    assert main(["lock", "--manifest-path", str(root / "pixi.toml")]) == 0
    text = (root / "pixi.lock").read_text()
    assert "- url: ./channel\n" in text
    private = [line.split("conda: ", 1)[1] for line in text.splitlines()
               if line.lstrip().startswith("- conda: ") and "/channel/" in line]
    assert private and all(loc.startswith(f"{root}/channel/") for loc in private), private
    relative = root / "relative.lock"
    relative.write_text(text.replace(f"conda: {root}/channel/", "conda: ./channel/"))
    env = LockFile.from_path(relative).environment("mi300x")
    assert env is not None
    with pytest.raises(Exception, match="not an absolute path"):
        env.conda_repodata_records_for_platform(next(iter(env.platforms())))
    # rocmlock reads such a lock as pixi would: each relative location against the lock's directory.
    read = read_lockfile(relative)
    assert read is not None
    records = [r for env in read.environments.values() for recs in env.records.values() for r in recs]
    local = [r for r in records if r.url.startswith("file://") and "/channel/" in r.url]
    assert {r.file_name for r in local} == {loc.rsplit("/", 1)[1] for loc in private}
    assert local and all(r.url == (root / "channel" / r.subdir / r.file_name).as_uri() for r in local), local
    assert {r.channel for r in local} == {(root / "channel").as_uri()}
    assert len(records) > len(local)  # the forge packages, by URL, alongside
    # conda resolves a path channel against the current directory (conda 26.7.1, conda/common/url.py
    # path_to_url), not against environment.yml: the exports name the channel by its file:// URL.
    assert f"  - {(root / 'channel').as_uri()}\n" in (root / "envs" / "mi300x" / "environment.yml").read_text()
    # So a lock made from a directory channel belongs to its checkout (docs/locking.md, "What pixi checks"): a copy
    # elsewhere still names the first checkout's files, and its exports are stale there.
    other = tmp_path / "other"
    shutil.copytree(root, other)
    capsys.readouterr()
    assert main(["lock", "--check", "--manifest-path", str(other / "pixi.toml")]) == 1
    assert "stale: envs/mi300x/environment.yml" in capsys.readouterr().err
    assert f"{root}/channel/" in (other / "pixi.lock").read_text()


# ----------------------------------------------------------------------------- re-locks


def test_two_locks_are_byte_identical(locked_ws: Path, channels: dict[str, Path], tmp_path: Path) -> None:
    other = make_workspace(tmp_path / "again", channels)
    assert main(["lock", "--manifest-path", str(other / "pixi.toml")]) == 0
    assert snapshot(other) == snapshot(locked_ws)


def test_noop_relock_changes_nothing(ws_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = snapshot(ws_copy)
    mtimes = {p: p.stat().st_mtime_ns for p in ws_copy.rglob("*") if p.is_file()}
    assert main(["lock", "--manifest-path", str(ws_copy / "pixi.toml"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["changes"] == {} and data["solved"] == [] and not data["written"]
    assert snapshot(ws_copy) == before
    assert {p: p.stat().st_mtime_ns for p in mtimes} == mtimes


def test_noop_fast_path_sees_every_change(ws_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["lock", "--manifest-path", str(ws_copy / "pixi.toml")]
    assert main(args) == 0  # records the stamp for this copy
    yml = ws_copy / "envs" / "mi300x" / "environment.yml"
    good = yml.read_text()
    yml.write_text("edited\n")
    assert main(args) == 0
    assert yml.read_text() == good
    assert main([*args, "-e", "nope"]) == 2
    assert main([*args, "--check"]) == 0
    (ws_copy / "envs" / "mi250" / "conda-linux-64-gfx90a.lock").unlink()
    assert main([*args, "--check"]) == 1
    assert not (ws_copy / "envs" / "mi250" / "conda-linux-64-gfx90a.lock").exists()


def test_a_manifest_edited_while_the_lock_runs_is_not_taken_for_the_one_locked(
        ws_copy: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The no-op stamp recorded pixi.toml as the file held it when the lock ended: edited back while a lock ran,
    the lock of the other manifest was then "up to date" for it (`lock --check` 0, `lock` wrote nothing). The
    stamp holds the bytes that were solved, so the edit is seen."""
    from rocmlock.lock import pipeline

    manifest = ws_copy / "pixi.toml"
    args = ["lock", "--manifest-path", str(manifest)]
    edited = manifest.read_text()
    original = edited.replace('llamafactory = "0.9.*"\n', "")
    assert original != edited
    manifest.write_text(original)
    real = pipeline.render_outputs

    def render_then_edit(*a: object, **k: object) -> object:
        out = real(*a, **k)  # type: ignore[arg-type]
        manifest.write_text(edited)  # the user's editor, during the lock
        return out

    monkeypatch.setattr(pipeline, "render_outputs", render_then_edit)
    assert main(args) == 0
    monkeypatch.setattr(pipeline, "render_outputs", real)
    capsys.readouterr()
    assert main([*args, "--check"]) == 1  # pixi.lock is of the manifest without llamafactory
    assert "llamafactory" in capsys.readouterr().err
    assert main(args) == 0 and "llamafactory" in (ws_copy / "pixi.lock").read_text()
    assert main([*args, "--check"]) == 0


def test_the_noop_path_loads_no_solver_and_a_change_still_solves(ws_copy: Path) -> None:
    """issue 26: a no-op `rocmlock lock` answers without importing rattler (rocmlock.lock.noop); any change, -e, -p
    or --update takes the full pipeline, which does."""
    import subprocess
    import sys

    manifest = str(ws_copy / "pixi.toml")
    assert main(["lock", "--manifest-path", manifest]) == 0  # records the stamp for this copy
    code = ("import sys; from rocmlock.cli.main import main; code = main(sys.argv[1:]); "
            "print(code, 'rattler' in sys.modules)")

    def run(*args: str) -> tuple[str, str]:
        out = subprocess.run([sys.executable, "-c", code, "lock", "--manifest-path", manifest, *args],
                             capture_output=True, text=True, check=True)
        return out.stdout.strip(), out.stderr

    assert run() == ("0 False", "up to date, nothing written\n")
    assert run("--check") == ("0 False", "up to date\n")
    assert run("-e", "mi300x")[0] == "0 True"  # a selection is validated against the manifest: the pipeline
    (ws_copy / "envs" / "mi250" / "environment.yml").write_text("edited\n")
    assert run("--check")[0] == "1 True"


def test_a_partial_lock_is_never_taken_for_a_complete_one(
        channels: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """pixi_core/src/lock_file/outdated.rs (find_unsatisfiable_targets; pixi v0.77.0): `pixi install --locked`
    needs every manifest environment, `default` included, in the lock and satisfied. A run limited by -e on a
    workspace never locked in full says what is missing, and records no no-op stamp, so the next full run
    (or --check) does not answer "up to date"."""
    root = make_workspace(tmp_path / "ws", channels)
    args = ["lock", "--manifest-path", str(root / "pixi.toml")]
    assert main([*args, "-e", "mi300x"]) == 0
    err = capsys.readouterr().err
    assert "warning: pixi.lock does not hold default [" in err and "mi250 [linux-64-gfx90a]" in err
    assert main([*args, "-e", "mi300x", "--json"]) == 0  # the selection itself is up to date ...
    data = json.loads(capsys.readouterr().out)
    assert not data["written"] and {"environment": "mi250", "platform": "linux-64-gfx90a"} in data["not_locked"]
    assert main([*args, "--check"]) == 1  # ... the workspace is not
    assert "stale: pixi.lock" in capsys.readouterr().err
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "does not hold" not in err and "up to date" not in err
    locked = read_lockfile(root / "pixi.lock")
    assert locked is not None and set(locked.environments) == {"default", "mi250", "mi300x"}
    # Complete and stamped; a change to one environment locked with -e for another leaves the lock stale.
    assert main(args) == 0 and "up to date, nothing written" in capsys.readouterr().err
    text = (root / "pixi.toml").read_text()
    (root / "pixi.toml").write_text(text.replace('llamafactory = "0.9.*"\n', ""))
    assert main([*args, "-e", "default"]) == 0
    assert main([*args, "--check"]) == 1


def test_check_passes_after_lock_and_fails_after_manifest_change(
        ws_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest_path = str(ws_copy / "pixi.toml")
    assert main(["lock", "--check", "--manifest-path", manifest_path]) == 0
    text = (ws_copy / "pixi.toml").read_text().replace('llamafactory = "0.9.*"\n', "")
    (ws_copy / "pixi.toml").write_text(text)
    before = snapshot(ws_copy)
    capsys.readouterr()
    assert main(["lock", "--check", "--manifest-path", manifest_path]) == 1
    err = capsys.readouterr().err
    assert "stale: pixi.lock" in err and "stale: envs/mi300x/environment.yml" in err
    assert "- llamafactory 0.9.4 pyh0_0" in err
    assert snapshot(ws_copy) == before


def test_change_summary_and_update_moves_a_package(
        channels: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    private = tmp_path / "private"
    shutil.copytree(channels["private"], private)
    root = tmp_path / "ws"
    root.mkdir()
    (root / "pixi.toml").write_text(manifest(private.as_uri(), channels["forge"].as_uri()))
    args = ["lock", "--manifest-path", str(root / "pixi.toml"), "--json"]
    assert main(args) == 0
    first = json.loads(capsys.readouterr().out)
    added = first["changes"]["mi300x"]["linux-64-gfx942"]
    assert {"kind": "+", "name": "llamafactory", "old": None, "new": "0.9.4 pyh0_0"} in added

    build_channel(private, [Pkg("llamafactory", "0.9.5", "pyh0_0", subdir="noarch", noarch="python",
                                depends=("python >=3.11", "pytorch >=2.4", "transformers >=4.55", "peft >=0.18"))])
    assert main(args) == 0  # a newer version alone moves nothing
    assert json.loads(capsys.readouterr().out)["changes"] == {}
    assert by_name(root / "pixi.lock", "mi300x")["llamafactory"] == "0.9.4 pyh0_0"

    assert main([*args, "--update", "llamafactory"]) == 0
    out = capsys.readouterr()
    changes = json.loads(out.out)["changes"]
    expected = {"kind": "~", "name": "llamafactory", "old": "0.9.4 pyh0_0", "new": "0.9.5 pyh0_0"}
    assert changes["mi300x"]["linux-64-gfx942"] == [expected]
    assert changes["mi250"]["linux-64-gfx90a"] == [expected]
    assert "~ llamafactory 0.9.4 pyh0_0 -> 0.9.5 pyh0_0" in out.err
    assert by_name(root / "pixi.lock", "mi300x")["llamafactory"] == "0.9.5 pyh0_0"
    assert "llamafactory=0.9.5=pyh0_0" in (root / "envs" / "mi300x" / "environment.yml").read_text()


def test_update_everything_and_partial_environment(ws_copy: Path) -> None:
    result = lock_workspace(ws_copy, environments=["mi300x"], update=[])
    assert result.solved == (("mi300x", "linux-64-gfx942"),)
    assert not result.changes and not result.written
    with pytest.raises(InputError, match="--update names 'pytroch'"):
        lock_workspace(ws_copy, update=["pytroch"])


def test_relock_after_manifest_change_keeps_other_packages(ws_copy: Path) -> None:
    before = by_name(ws_copy / "pixi.lock", "mi300x")
    text = (ws_copy / "pixi.toml").read_text().replace('llamafactory = "0.9.*"\n', "")
    (ws_copy / "pixi.toml").write_text(text)
    result = lock_workspace(ws_copy)
    assert ("mi300x", "linux-64-gfx942") in result.solved
    after = by_name(ws_copy / "pixi.lock", "mi300x")
    assert set(before) - set(after) == {"llamafactory", "transformers", "peft"}
    assert all(after[name] == before[name] for name in after)


def test_platform_change_is_detected_and_recorded(ws_copy: Path) -> None:
    text = (ws_copy / "pixi.toml").read_text().replace('glibc = "2.28"', 'glibc = "2.31"')
    (ws_copy / "pixi.toml").write_text(text)
    result = lock_workspace(ws_copy)
    assert result.reasons[("mi300x", "linux-64-gfx942")] == "platform 'linux-64-gfx942' changed its virtual packages"
    assert result.written and not result.changes
    lock = (ws_copy / "pixi.lock").read_text()
    assert "__glibc=2.31" in lock and "__glibc=2.28" not in lock


def test_solve_group_shares_one_solve(channels: dict[str, Path], tmp_path: Path) -> None:
    extra = ('\n[feature.np-old.dependencies]\nnumpy = "<2.2"\n[feature.bare.dependencies]\nnumpy = "*"\n'
             '[environments.a]\nfeatures = ["gfx942", "np-old"]\nsolve-group = "g"\n'
             '[environments.b]\nfeatures = ["gfx942", "bare"]\nsolve-group = "g"\n'
             '[environments.c]\nfeatures = ["gfx942", "bare"]\n')
    root = make_workspace(tmp_path / "ws", channels, extra=extra)
    lock_workspace(root, environments=["a", "b", "c"])
    # b alone would take numpy 2.2.0; in a's solve group it gets a's numpy.
    assert by_name(root / "pixi.lock", "a")["numpy"] == by_name(root / "pixi.lock", "b")["numpy"] == "2.1.3 py312h0_0"
    assert by_name(root / "pixi.lock", "c")["numpy"] == "2.2.0 py312h0_0"
    assert set(by_name(root / "pixi.lock", "b")) == {"numpy", "python", "amdgpu-target"}


# ----------------------------------------------------------------------------- credentials


class _AuthHandler(SimpleHTTPRequestHandler):
    token = base64.b64encode(b"alice:s3cret").decode()

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        if self.headers.get("Authorization") != f"Basic {self.token}":
            self.send_response(401)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.path.startswith("/t/tok123/"):  # an anaconda.org-style token path
            self.path = self.path[len("/t/tok123"):]
        super().do_GET()


@pytest.fixture
def auth_server(channels: dict[str, Path]) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_AuthHandler, directory=str(channels["private"].parent)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_credentials_in_urls_are_never_written_or_printed(
        auth_server: str, channels: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    private = f"http://alice:s3cret@{auth_server}/t/tok123/private"
    root = tmp_path / "ws"
    root.mkdir()
    (root / "pixi.toml").write_text(manifest(private, channels["forge"].as_uri()))
    assert main(["lock", "--manifest-path", str(root / "pixi.toml"), "--json", "-e", "mi300x"]) == 0
    out = capsys.readouterr()
    files = snapshot(root)
    written = b"".join(v for k, v in files.items() if k != "pixi.toml").decode() + out.out + out.err
    assert f"http://{auth_server}/private/" in written
    for secret in ("s3cret", "alice", "tok123", "/t/"):
        assert secret not in written
    assert "rocm72_gfx942" in by_name(root / "pixi.lock", "mi300x")["pytorch"]


def test_auth_file_provides_credentials(
        auth_server: str, channels: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "pixi.toml").write_text(manifest(f"http://{auth_server}/private", channels["forge"].as_uri()))
    args = ["lock", "--manifest-path", str(root / "pixi.toml"), "-e", "mi300x"]
    assert main(args) == 1  # no credentials: 401
    err = capsys.readouterr().err
    assert f"channel http://{auth_server}/private refused" in err and "401" in err and "RATTLER_AUTH_FILE" in err
    assert not (root / "pixi.lock").exists()
    auth = tmp_path / "auth.json"
    # rattler's auth file is keyed by host (without the port).
    auth.write_text(json.dumps({"127.0.0.1": {"BasicHTTP": {"username": "alice", "password": "s3cret"}}}))
    monkeypatch.setenv("RATTLER_AUTH_FILE", str(auth))
    assert main(args) == 0
    assert "s3cret" not in (root / "pixi.lock").read_text()


# ----------------------------------------------------------------------------- errors


def _error_case(root: Path, capsys: pytest.CaptureFixture[str], args: list[str]) -> tuple[int, str]:
    before = snapshot(root)
    capsys.readouterr()
    code = main(["lock", "--manifest-path", str(root / "pixi.toml"), *args])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert snapshot(root) == before, "an error must leave every output untouched"
    return code, err


def test_error_malformed_toml(ws_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with (ws_copy / "pixi.toml").open("a") as fh:
        fh.write("\n[broken\n")
    code, err = _error_case(ws_copy, capsys, [])
    assert code == 2 and "pixi.toml" in err and "line" in err


def test_error_unknown_feature_and_environment(ws_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _error_case(ws_copy, capsys, ["-e", "mi999"])
    assert code == 2 and "unknown environment 'mi999'" in err and "mi300x" in err
    code, err = _error_case(ws_copy, capsys, ["-p", "linux-64-gfx000"])
    assert code == 2 and "unknown platform" in err
    text = (ws_copy / "pixi.toml").read_text().replace('["rocm72", "gfx90a", "train"]', '["rocm72", "gfx90", "train"]')
    (ws_copy / "pixi.toml").write_text(text)
    code, err = _error_case(ws_copy, capsys, [])
    assert code == 2 and "unknown feature 'gfx90'" in err


def test_error_unknown_gpu_target(ws_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (ws_copy / "pixi.toml").read_text().replace('build = "gfx942"', 'build = "gfx943"')
    (ws_copy / "pixi.toml").write_text(text)
    code, err = _error_case(ws_copy, capsys, [])
    assert code == 2 and "unknown GPU target 'gfx943'" in err and "did you mean 'gfx942'" in err


def test_error_unsolvable_environment(ws_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (ws_copy / "pixi.toml").read_text().replace('flash-attn = "2.8.*"', 'flash-attn = "3.0.*"')
    (ws_copy / "pixi.toml").write_text(text)
    code, err = _error_case(ws_copy, capsys, [])
    assert code == 1 and "cannot solve environment" in err and "flash-attn" in err
    assert "GPU target gfx9" in err and "platform 'linux-64-gfx9" in err
    # Every environment that cannot be solved is named, not only the first; rattler's explanation follows on lines
    # of its own (no literal "\\n"), and the hint says what to run.
    first = err.splitlines()[0]
    failing = sorted(set(re.findall(r"environment '([^']+)'", first)))
    assert len(failing) >= 2, first
    assert "\\n" not in err
    for env in failing:
        assert f"-e {env}" in err
    assert "rocmlock plan" in err and "rocmlock build" in err and "rocmlock publish --to" in err
    details = err.splitlines()[1:-1]
    assert details and all(line.startswith("  ") for line in details)
    # --json: the failure is a JSON object on stdout too.
    capsys.readouterr()
    assert main(["lock", "--manifest-path", str(ws_copy / "pixi.toml"), "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["exit_code"] == 1 and data["error"] == first.removeprefix("error: ")
    assert "rocmlock build" in data["hint"] and any("flash-attn" in line for line in data["details"])


def test_error_unreachable_channel(ws_copy: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    text = (ws_copy / "pixi.toml").read_text()
    start = text.index("channels = [")
    end = text.index("]", start)
    missing = (tmp_path / "nowhere").as_uri()
    (ws_copy / "pixi.toml").write_text(f'{text[:start]}channels = ["{missing}"{text[end:]}')
    code, err = _error_case(ws_copy, capsys, [])
    assert code == 1 and "cannot be reached" in err and "nowhere does not exist" in err
    # Not there yet is a channel of one's own not built: the hint says to build and publish it, not only to edit
    # a path that may be right (the checkout's own pixi.toml names ./channel before anything is published).
    assert f"`rocmlock publish --to {tmp_path / 'nowhere'}`" in err
    (tmp_path / "nowhere").write_text("")
    code, err = _error_case(ws_copy, capsys, [])
    assert code == 1 and "nowhere is not a directory" in err and "fix the channel path" in err
    # Port 9 (discard) refuses connections: the error names the channel, with its password removed.
    (ws_copy / "pixi.toml").write_text(f'{text[:start]}channels = ["http://u:pw@127.0.0.1:9/ch"{text[end:]}')
    code, err = _error_case(ws_copy, capsys, ["--check"])
    assert code == 1 and "cannot read the channels" in err and "http://127.0.0.1:9/ch" in err
    assert "pw" not in err
    # rattler's "Caused by:" chain is folded into the one error line (the first cause and the root cause).
    assert [line.split(":")[0] for line in err.strip().splitlines()] == ["error", "hint"], err
    assert "Connection refused" in err


def test_error_manifest_that_is_not_utf8(ws_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with (ws_copy / "pixi.toml").open("ab") as fh:
        fh.write(b'\n# caf\xe9, written in Latin-1\n')
    code, err = _error_case(ws_copy, capsys, [])
    lines = [line for line in err.splitlines() if not line.startswith("hint: ")]
    assert code == 2 and len(lines) == 1 and "pixi.toml" in lines[0] and "UTF-8" in lines[0], err


@pytest.mark.parametrize("command", [["lock"], ["lock", "--check"], ["export"]])
def test_a_missing_manifest_is_one_line_and_creates_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                            command: list[str]) -> None:
    """A mistyped --manifest-path (or a directory without a manifest) names the file and writes nothing: no
    `.rocmlock/` state directory, and no directory the path only names."""
    (tmp_path / "empty").mkdir()
    for where in (tmp_path / "empty", tmp_path / "empty" / "pixi.toml", tmp_path / "typo" / "sub" / "pixi.toml"):
        assert main([*command, "--manifest-path", str(where)]) == 2
        err = capsys.readouterr().err
        assert "no such manifest" in err.splitlines()[0] and "Traceback" not in err, err
        assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == ["empty"]


def test_error_manifest_nested_too_deeply(ws_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # tomli stops past 400 nested inline arrays/tables with a RecursionError (not a TOMLDecodeError).
    with (ws_copy / "pixi.toml").open("a") as fh:
        fh.write("\n[tasks]\ndeep = " + "[" * 500 + "]" * 500 + "\n")
    code, err = _error_case(ws_copy, capsys, [])
    lines = [line for line in err.splitlines() if not line.startswith("hint: ")]
    assert code == 2 and len(lines) == 1 and "pixi.toml" in lines[0] and "nested" in lines[0], err
