"""A pixi.lock that cannot be read (merge conflict, broken YAML): one line that says what is wrong, and hints that
work: take one side with git, or `rocmlock lock --discard-lock` (re-solves everything, says what it drops)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from lockhelpers import snapshot
from rocmlock.cli.main import main
from rocmlock.lock.lockfile import count_pins, read_lockfile


def _git(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c",
                           "init.defaultBranch=main", "-c", "commit.gpgsign=false", *args],
                          cwd=root, capture_output=True, text=True, check=False)


def _relock_without(root: Path, line: str, message: str) -> None:
    manifest = root / "pixi.toml"
    manifest.write_text(manifest.read_text().replace(line + "\n", ""))
    assert main(["lock", "--manifest-path", str(root)]) == 0
    assert _git(root, "commit", "-qam", message).returncode == 0


@pytest.fixture
def conflicted(ws_copy: Path) -> Path:
    """A real `git merge` of two branches that each re-locked after removing a different package: pixi.lock (and
    the exports) conflict; pixi.toml is then resolved by hand (both removals), pixi.lock left as git wrote it."""
    root = ws_copy
    assert _git(root, "init", "-q").returncode == 0
    (root / ".gitignore").write_text(".rocmlock/\n")
    assert _git(root, "add", "-A").returncode == 0 and _git(root, "commit", "-qm", "base").returncode == 0
    assert _git(root, "checkout", "-qb", "theirs").returncode == 0
    _relock_without(root, 'flash-attn = "2.8.*"', "no flash-attn")
    assert _git(root, "checkout", "-q", "main").returncode == 0
    _relock_without(root, 'llamafactory = "0.9.*"', "no llamafactory")
    assert _git(root, "merge", "-q", "theirs").returncode != 0  # the conflict
    manifest = (root / "pixi.toml").read_text()
    assert "<<<<<<< " in (root / "pixi.lock").read_text()
    resolved = "\n".join(line for line in manifest.splitlines()
                         if not line.startswith(("<<<<<<<", "=======", ">>>>>>>")) and "flash-attn" not in line
                         and "llamafactory" not in line)
    (root / "pixi.toml").write_text(resolved + "\n")
    return root


def test_a_merge_conflict_is_named_with_its_markers_and_a_hint_that_works(
        conflicted: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lock = conflicted / "pixi.lock"
    lines = lock.read_text().splitlines()
    first = next(n for n, line in enumerate(lines, 1) if line.startswith("<<<<<<< "))
    capsys.readouterr()
    for argv in (["lock"], ["lock", "--update"], ["export"], ["install", "-e", "mi300x", "--prefix", "p"]):
        assert main([*argv, "--manifest-path", str(conflicted)]) == 2, argv
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 2, err
        assert err[0].startswith(f"error: {lock}: cannot read the lock file: ") and "merge conflict" in err[0], err
        assert f"<<<<<<< at line {first}" in err[0], err
        assert "git checkout --ours pixi.lock" in err[1] and "rocmlock lock --discard-lock" in err[1], err
    # The first hint, followed: one side whole, then `rocmlock lock` re-solves what the manifest changed.
    assert _git(conflicted, "checkout", "--ours", "pixi.lock").returncode == 0
    assert main(["lock", "--manifest-path", str(conflicted)]) == 0
    assert main(["lock", "--check", "--manifest-path", str(conflicted)]) == 0
    locked = read_lockfile(lock)
    assert locked is not None
    names = {r.name.normalized for recs in locked.environments["mi300x"].records.values() for r in recs}
    assert "pytorch" in names and not names & {"flash-attn", "llamafactory"}


def test_discard_lock_resolves_everything_says_what_it_drops_and_check_writes_nothing(
        conflicted: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lock = conflicted / "pixi.lock"
    # Counted from the text (both sides of each conflict): every `- conda:` line under environments.
    pins = sum(1 for line in lock.read_text().splitlines() if line.lstrip().startswith("- conda: ")
               and line.startswith(" "))
    assert pins and count_pins(lock) == pins
    before = snapshot(conflicted)
    capsys.readouterr()
    assert main(["lock", "--discard-lock", "--check", "--manifest-path", str(conflicted)]) == 1
    err = capsys.readouterr().err
    assert f"--discard-lock: would drop the {pins} pin(s) of pixi.lock" in err, err
    assert "run `rocmlock lock --discard-lock`" in err and snapshot(conflicted) == before
    assert main(["lock", "--discard-lock", "--manifest-path", str(conflicted)]) == 0
    assert f"--discard-lock: dropped the {pins} pin(s)" in capsys.readouterr().err
    assert main(["lock", "--check", "--manifest-path", str(conflicted)]) == 0
    locked = read_lockfile(lock)
    assert locked is not None and set(locked.environments) == {"default", "mi250", "mi300x"}
    # A readable lock: every locked package of every environment and platform, counted exactly.
    pins = sum(len(recs) for env in locked.environments.values() for recs in env.records.values())
    assert pins == count_pins(lock) and pins > 0
    assert main(["lock", "--discard-lock", "--json", "--manifest-path", str(conflicted)]) == 0
    assert json.loads(capsys.readouterr().out)["discarded_pins"] == pins


def test_discard_lock_takes_no_selection(ws_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for extra in (["-e", "mi300x"], ["-p", "linux-64-gfx942"], ["--update"]):
        assert main(["lock", "--discard-lock", *extra, "--manifest-path", str(ws_copy)]) == 2
        err = capsys.readouterr().err
        assert "--discard-lock re-solves every environment" in err and len(err.splitlines()) == 2


@pytest.mark.parametrize(("text", "where"), [
    ("version: 7\nplatforms: [\n", "line 3, column 1"),
    ("version: 7\nenvironments:\n  default:\n    channels:\n  - url: x\n   bad: [\n", "line 5, column 3"),
    ("version: 7\nenvironments:\n  default: 5\n", "invalid type: integer `5`"),  # valid YAML, not a lock
])
def test_broken_yaml_is_named_with_its_line_and_column(ws_copy: Path, text: str, where: str,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    (ws_copy / "pixi.lock").write_text(text)
    capsys.readouterr()
    assert main(["lock", "--manifest-path", str(ws_copy)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and where in err[0], err
    assert "git checkout pixi.lock" in err[1] and "--discard-lock" in err[1], err
    assert main(["lock", "--discard-lock", "--manifest-path", str(ws_copy)]) == 0
    assert "dropped the 0 pin(s)" in capsys.readouterr().err
    assert read_lockfile(ws_copy / "pixi.lock") is not None
