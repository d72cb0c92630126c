"""rocmlock publish --to <directory> killed at each stage, and --force: the channel's repodata only ever lists
whole files with the bytes it names, and the next publish finishes the job and leaves no leftovers.

The kills are real: a child process runs the CLI with one function wrapped to send itself SIGKILL in the middle
of copying a package (``shutil.copyfile``), between moving two packages into the channel (``os.replace``), or
while indexing (``rattler.index.index_fs``). About 5 s.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import rocmlock
from channels import Pkg, build_channel, listed_in_repodata
from rocmlock.cli.main import main

TOOLS = str(Path(rocmlock.__file__).resolve().parents[1])
SCRATCH = ".rocmlock-publish-"

KILL_COPY = """
import os, shutil, signal, sys
def half_then_die(src, dst, *args, **kwargs):
    data = open(src, "rb").read()
    with open(dst, "wb") as fh:
        fh.write(data[: len(data) // 2])
    os.kill(os.getpid(), signal.SIGKILL)
shutil.copyfile = half_then_die
from rocmlock.cli.main import main
main(sys.argv[1:])
"""

KILL_MOVE = """
import os, signal, sys
real, moved = os.replace, []
def second_package_dies(src, dst, *args, **kwargs):
    if str(dst).endswith(".conda"):
        if moved:
            os.kill(os.getpid(), signal.SIGKILL)
        moved.append(dst)
    return real(src, dst, *args, **kwargs)
os.replace = second_package_dies
from rocmlock.cli.main import main
main(sys.argv[1:])
"""

KILL_INDEX = """
import importlib, os, signal, sys
async def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)
# `rattler.index` as an attribute is its submodule rattler/index/index.py; the package is in sys.modules.
importlib.import_module("rattler.index").index_fs = die
from rocmlock.cli.main import main
main(sys.argv[1:])
"""


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _packages(version: str, text: str = "") -> list[Pkg]:
    files = (("share/x.txt", text),) if text else ()
    return [Pkg("rocm-version", version, "0", subdir="noarch", noarch="generic", files=files),
            Pkg("amdgpu-target", version, "gfx942", subdir="noarch", noarch="generic"),
            Pkg("hip-hello", version, "0", subdir="linux-64")]


def _package_files(channel: Path) -> dict[str, str]:
    """Every file in a subdir that is not the index's own (repodata*, shards/), with its sha256."""
    return {f"{p.parent.name}/{p.name}": _sha(p) for sub in channel.iterdir()
            if sub.is_dir() and not sub.name.startswith(".") for p in sub.iterdir()
            if p.is_file() and not p.name.startswith("repodata")}


def _check(channel: Path, whole: set[str], allow_missing: bool = False) -> None:
    """Listed files are there with the listed bytes; every file in a subdir is a whole package (sha in ``whole``)."""
    files = _package_files(channel)
    for key, sha in listed_in_repodata(channel).items():
        if allow_missing and key not in files:
            continue
        assert files.get(key) == sha, f"repodata lists {key} with sha256 {sha}, the file is {files.get(key)}"
    assert set(files.values()) <= whole, f"not a whole package: {files}"


def _tree(root: Path) -> list[str]:
    # rattler names shard files by a hash of their content, which differs from one index run to the next
    # (msgpack of unordered maps): shards are counted, not named.
    return sorted(str(p.relative_to(root)) if p.parent.name != "shards" else f"{p.parent.relative_to(root)}/*"
                  for p in root.rglob("*"))


def _killed(script: str, *argv: str) -> None:
    proc = subprocess.run([sys.executable, "-c", script, *argv], env={**os.environ, "PYTHONPATH": TOOLS},
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == -signal.SIGKILL, proc.stderr


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("sources")
    return {"old": build_channel(root / "old", _packages("7.1")), "new": build_channel(root / "new", _packages("7.2")),
            "other": build_channel(root / "other", _packages("7.2", text="rebuilt"))}


def _whole(*sources: Path) -> set[str]:
    return {_sha(p) for s in sources for p in s.glob("*/*.conda")}


def _publish(source: Path, channel: Path, *extra: str) -> int:
    return main(["publish", "--from", str(source), "--to", str(channel), *extra])


@pytest.fixture
def channel(sources: dict[str, Path], tmp_path: Path) -> Path:
    """A team channel that already holds the old packages."""
    assert _publish(sources["old"], tmp_path / "channel") == 0
    return tmp_path / "channel"


@pytest.fixture(scope="module")
def clean(sources: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What old + new published without interruption look like."""
    channel = tmp_path_factory.mktemp("clean") / "channel"
    assert _publish(sources["old"], channel) == 0 and _publish(sources["new"], channel) == 0
    return channel


@pytest.mark.parametrize("script", [KILL_COPY, KILL_MOVE, KILL_INDEX], ids=["copy", "move", "index"])
def test_a_publish_killed_leaves_whole_packages_and_the_rerun_finishes_without_leftovers(
        sources: dict[str, Path], channel: Path, clean: Path, script: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    listed_before, files_before = listed_in_repodata(channel), _package_files(channel)
    _killed(script, "publish", "--from", str(sources["new"]), "--to", str(channel))
    _check(channel, _whole(sources["old"], sources["new"]))
    assert listed_in_repodata(channel) == listed_before, "nothing new is listed before the index runs"
    if script == KILL_COPY:
        assert _package_files(channel) == files_before, "a copy killed half-way leaves the subdirs as they were"
    assert _publish(sources["new"], channel) == 0
    err = capsys.readouterr().err
    if script != KILL_INDEX:  # killed in the index, the staging directory is already gone
        assert f"removed 1 leftover(s) of an interrupted run in {channel}" in err
    _check(channel, _whole(sources["old"], sources["new"]))
    assert listed_in_repodata(channel) == listed_in_repodata(clean)
    assert _tree(channel) == _tree(clean), "no staging directory or partial file stays behind"


def test_force_replaces_the_file_and_its_repodata_entry(sources: dict[str, Path], channel: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert _publish(sources["new"], channel) == 0
    assert _publish(sources["other"], channel) == 1, "a different file under the same name needs --force"
    assert _publish(sources["other"], channel, "--force") == 0
    capsys.readouterr()
    new = {f"noarch/{p.name}": _sha(p) for p in sources["other"].glob("noarch/rocm-version-*.conda")}
    listed = listed_in_repodata(channel)
    assert {k: listed[k] for k in new} == new, "repodata names the new bytes, not the replaced file's"
    _check(channel, _whole(sources["old"], sources["new"], sources["other"]))


def test_a_force_publish_killed_while_replacing_is_repaired_by_the_rerun(
        sources: dict[str, Path], channel: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _publish(sources["new"], channel) == 0
    whole = _whole(sources["old"], sources["new"], sources["other"])
    _killed(KILL_INDEX, "publish", "--from", str(sources["other"]), "--to", str(channel), "--force")
    # The one window a replacement has: the old file is out, the index that drops it did not run. Repodata may
    # then list a file that is gone (a client gets "not found"), never one with other bytes than it names.
    _check(channel, whole, allow_missing=True)
    assert _publish(sources["other"], channel, "--force") == 0
    capsys.readouterr()
    _check(channel, whole)
    replaced = {f"noarch/{p.name}": _sha(p) for p in sources["other"].glob("noarch/rocm-version-*.conda")}
    assert {k: listed_in_repodata(channel)[k] for k in replaced} == replaced
    assert not list(channel.glob(f"{SCRATCH}*"))
