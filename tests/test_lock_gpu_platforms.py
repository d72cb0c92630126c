"""Issue 40, item 1: an environment over two rich GPU platforms, with no GPU-target feature, gets each platform's
own builds; a lock whose records contradict a platform's ``__amdgpu_arch`` is never written, checked or installed.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from channels import Pkg, build_channel
from lockhelpers import PLATFORMS, make_workspace, snapshot
from rocmlock.cli.main import main
from rocmlock.lock.lockfile import read_lockfile

# `both` names pytorch through `train` and no amdgpu-target feature: it spans both rich platforms.
BOTH = '\n[environments.both]\nfeatures = ["rocm72", "train"]\n'


def _records(lock: Path, env: str, platform: str) -> dict[str, str]:
    locked = read_lockfile(lock)
    assert locked is not None
    records = locked.records(env, platform)
    assert records is not None
    return {r.name.normalized: str(r.build) for r in records}


@pytest.fixture(scope="module")
def both_ws(channels: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = make_workspace(tmp_path_factory.mktemp("both") / "ws", channels, extra=BOTH)
    assert main(["lock", "--manifest-path", str(root)]) == 0
    return root


def test_each_rich_gpu_platform_gets_its_own_builds(both_ws: Path) -> None:
    """Failed before the fix: the gfx942 platform held the gfx90a pytorch, flash-attn and amdgpu-target."""
    lock = both_ws / "pixi.lock"
    on942, on90a = _records(lock, "both", "linux-64-gfx942"), _records(lock, "both", "linux-64-gfx90a")
    assert on942["amdgpu-target"] == "gfx942" and on90a["amdgpu-target"] == "gfx90a"
    assert on942["pytorch"].startswith("rocm72_gfx942_") and on942["flash-attn"].startswith("rocm72_gfx942_")
    assert on90a["pytorch"].startswith("rocm72_gfx90a_") and on90a["flash-attn"].startswith("rocm72_gfx90a_")
    exports = both_ws / "envs" / "both"
    assert "rocm72_gfx942_" in (exports / "conda-linux-64-gfx942.lock").read_text()
    assert "rocm72_gfx90a_" not in (exports / "conda-linux-64-gfx942.lock").read_text()


def _swapped(both_ws: Path, dest: Path) -> Path:
    """A copy of the workspace whose pixi.lock lists the gfx90a packages of `both` for the gfx942 platform and the
    other way round (a hand edit: the two `packages:` lists of the environment exchanged)."""
    shutil.copytree(both_ws, dest)
    text = (dest / "pixi.lock").read_text()
    start, end = text.index("\n  both:\n"), text.index("\n  default:\n")  # environments are written sorted
    block = text[start:end]
    swapped = block.replace("linux-64-gfx942:", "@@:").replace("linux-64-gfx90a:", "linux-64-gfx942:") \
        .replace("@@:", "linux-64-gfx90a:")
    assert swapped != block
    (dest / "pixi.lock").write_text(text[:start] + swapped + text[end:])
    on942 = _records(dest / "pixi.lock", "both", "linux-64-gfx942")
    assert on942["pytorch"].startswith("rocm72_gfx90a_")  # the edit did swap them
    return dest


def _one_line_naming_both_targets(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, err
    line = lines[0]
    assert "environment 'both'" in line and re.search(r"platform 'linux-64-gfx(942|90a)'", line), line
    assert "gfx942" in line and "9.4.2" in line and "gfx90a" in line and "9.0.10" in line
    assert re.search(r"\b(pytorch|flash-attn|amdgpu-target)\b", line), line
    assert "Traceback" not in err
    return line


def test_a_swapped_lock_fails_lock_check(both_ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ws = _swapped(both_ws, tmp_path / "ws")
    before = (ws / "pixi.lock").read_bytes()
    capsys.readouterr()
    assert main(["lock", "--check", "--manifest-path", str(ws)]) != 0
    _one_line_naming_both_targets(capsys.readouterr().err)
    assert (ws / "pixi.lock").read_bytes() == before


@pytest.mark.parametrize("command", [
    ["install", "-e", "both", "-p", "linux-64-gfx942", "--prefix", "{tmp}/prefix"],
    ["pack", "-e", "both", "-p", "linux-64-gfx942", "-o", "{tmp}/prefix"],
    ["export"],
])
def test_a_swapped_lock_is_not_installed_packed_or_exported(
        both_ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]) -> None:
    ws = _swapped(both_ws, tmp_path / "ws")
    exports = {p: p.read_bytes() for p in sorted((ws / "envs").rglob("*")) if p.is_file()}
    capsys.readouterr()
    args = [a.replace("{tmp}", str(tmp_path)) for a in command]
    assert main([args[0], "--manifest-path", str(ws), *args[1:]]) == 2
    _one_line_naming_both_targets(capsys.readouterr().err)
    assert not (tmp_path / "prefix").exists()
    assert {p: p.read_bytes() for p in sorted((ws / "envs").rglob("*")) if p.is_file()} == exports


def test_lock_re_solves_a_swapped_lock(both_ws: Path, tmp_path: Path) -> None:
    ws = _swapped(both_ws, tmp_path / "ws")
    assert main(["lock", "--manifest-path", str(ws)]) == 0
    assert _records(ws / "pixi.lock", "both", "linux-64-gfx942")["pytorch"].startswith("rocm72_gfx942_")
    assert _records(ws / "pixi.lock", "both", "linux-64-gfx90a")["pytorch"].startswith("rocm72_gfx90a_")


def test_a_solve_that_contradicts_the_platform_is_never_written(
        channels: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A package that names its target only through the amdgpu-target mutex (no __amdgpu_arch constraint) and
    only for gfx90a: the solver may take it for the gfx942 platform; the lock refuses to write that."""
    odd = build_channel(tmp_path / "odd", [
        Pkg("amdgpu-target", "1", "gfx90a", subdir="noarch", noarch="generic"),
        Pkg("rccl-tests", "2.0", "rocm72_gfx90a_0", depends=("amdgpu-target * gfx90a",)),
    ])
    extra = (f'\n[feature.odd]\nchannels = ["{odd.as_uri()}"]\ndependencies = {{ rccl-tests = "*" }}\n'
             '[feature.on942]\nplatforms = ["linux-64-gfx942"]\n'
             '[environments.odd]\nfeatures = ["odd", "on942"]\nno-default-feature = true\n')
    root = make_workspace(tmp_path / "ws", channels, extra=extra)
    assert main(["lock", "--manifest-path", str(root)]) != 0
    line = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("error:")]
    assert len(line) == 1 and "environment 'odd'" in line[0] and "linux-64-gfx942" in line[0]
    assert "amdgpu-target" in line[0] and "gfx90a" in line[0] and "gfx942" in line[0] and "9.4.2" in line[0]
    assert not (root / "pixi.lock").exists() and not (root / "envs").exists()


def test_pixi_0_82_and_0_85_spellings_lock_the_same_bytes(both_ws: Path, channels: dict[str, Path],
                                                          tmp_path: Path) -> None:
    """The rich platforms written as pixi 0.85 writes them (`subdir`) with pixi 0.82's `amdgpu = "gfx942"` lock
    to the same pixi.lock and exports as the raw `__amdgpu`/`__amdgpu_arch` keys (workspace/platforms.py)."""
    newer = PLATFORMS.replace('platform = "linux-64"', 'subdir = "linux-64"') \
        .replace('__amdgpu = "0", __amdgpu_arch = "9.0.10"', 'amdgpu = "gfx90a"') \
        .replace('__amdgpu = "0", __amdgpu_arch = "9.4.2"', 'amdgpu = "gfx942"')
    assert newer.count("amdgpu = ") == 2 and "__amdgpu" not in newer
    root = make_workspace(tmp_path / "ws", channels, extra=BOTH)
    text = (root / "pixi.toml").read_text()
    (root / "pixi.toml").write_text(text.replace(PLATFORMS, newer))
    assert main(["lock", "--manifest-path", str(root)]) == 0
    ours, theirs = snapshot(root), snapshot(both_ws)
    assert ours.pop("pixi.toml") != theirs.pop("pixi.toml")
    assert ours == theirs
