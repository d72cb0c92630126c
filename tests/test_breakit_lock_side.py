"""What a break-it pass on the lock side found (2026-12-07), each planted back and seen to fail.

- A commit journal (``.rocmlock/txn/journal.json``, rocmlock.util.journal) that this workspace's own interrupted
  write did not leave is never applied: ``.rocmlock/`` can arrive with a checkout (``git add -f``) or a copy, and
  rolling such a journal forward deleted or wrote files anywhere, even under ``--check``.
- A locked dependency rattler cannot parse (a hand-edited pixi.lock) makes the lock stale, not a traceback.
- A credentials file rattler cannot parse is one line that never quotes it (serde quoted the password).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from rocmlock.cli.main import main


def _run(ws: Path, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main([argv[0], "--manifest-path", str(ws / "pixi.toml"), *argv[1:]])
    return code, capsys.readouterr().err


def _plant(ws: Path, data: object, staged: dict[str, bytes] | None = None) -> Path:
    txn = ws / ".rocmlock" / "txn"
    txn.mkdir(parents=True, exist_ok=True)
    for name, content in (staged or {}).items():
        (txn / name).write_bytes(content)
    (txn / "journal.json").write_text(json.dumps(data))
    return txn


def _own(ws: Path, entries: list[list[str | None]]) -> dict[str, object]:
    """A journal as this workspace's commit writes it (its root's device and inode)."""
    st = os.stat(ws)
    return {"root": [st.st_dev, st.st_ino], "entries": entries}


@pytest.mark.parametrize("command", [["export", "--check"], ["lock", "--check"], ["lock"], ["export"]])
def test_a_journal_that_came_with_a_checkout_deletes_and_writes_nothing(
        ws_copy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    lock_before = (ws_copy / "pixi.lock").read_bytes()
    # What the old format (a bare list) allowed: an absolute path, a path out of the workspace, a new file there.
    _plant(ws_copy, [[None, str(victim)], [None, "../victim.txt"], ["0.new", "../outside.txt"]], {"0.new": b"x"})
    code, err = _run(ws_copy, capsys, *command)
    assert code == 1, err
    lines = err.strip().splitlines()
    assert lines[0].startswith(f"error: {ws_copy}: {ws_copy}/.rocmlock/txn/journal.json was not left by an "
                               "interrupted write here") and "nothing was changed" in lines[0], err
    assert lines[1].startswith("hint: if it came with a checkout or a copy, delete") and len(lines) == 2, err
    assert victim.read_text() == "keep me\n" and not (tmp_path / "outside.txt").exists()
    assert (ws_copy / "pixi.lock").read_bytes() == lock_before


@pytest.mark.parametrize(("entries", "says"), [
    ([[None, "../victim.txt"]], "outside what rocmlock writes"),
    ([["0.new", ".git/hooks/post-checkout"]], "outside what rocmlock writes"),
    ([["0.new", ".rocmlock/writer.lock"]], "outside what rocmlock writes"),
    ([["0.new", "/tmp/x"]], "outside what rocmlock writes"),
    ([["0.new", "envs/x/./y"]], "outside what rocmlock writes"),
    ([["0.new", "pixi.lock\x1b[31m\n"]], "not a plain relative path"),
    ([["../0.new", "pixi.lock"]], "a staged file name rocmlock does not write"),
    ([[1, 2, 3]], "an entry that is not [staged, target]"),
])
def test_even_a_journal_of_this_directory_writes_only_below_it(
        ws_copy: Path, capsys: pytest.CaptureFixture[str], entries: list[list[object]], says: str) -> None:
    _plant(ws_copy, _own(ws_copy, entries), {"0.new": b"#!/bin/sh\necho owned\n"})
    code, err = _run(ws_copy, capsys, "lock", "--check")
    assert code == 1 and says in err and "\x1b" not in err and "Traceback" not in err, err
    assert not (ws_copy / ".git").exists() and not (ws_copy.parent / "victim.txt").exists()


def test_a_journal_copied_from_another_directory_is_not_applied(
        ws_copy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # An interrupted write of one workspace, then the directory copied (cp -r, a checkout with .rocmlock/ in it):
    # the copy's journal names the other root, so its moves are not this directory's to finish.
    _plant(ws_copy, _own(ws_copy, [["0.new", "pixi.lock"]]), {"0.new": b"not a lock\n"})
    copy = tmp_path / "copy"
    shutil.copytree(ws_copy, copy)
    before = (copy / "pixi.lock").read_bytes()
    code, err = _run(copy, capsys, "export", "--check")
    assert code == 1 and "not written by a commit in this directory" in err, err
    assert (copy / "pixi.lock").read_bytes() == before


def test_the_journal_of_this_directorys_own_interrupted_write_is_finished(
        ws_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lock = (ws_copy / "pixi.lock").read_bytes()
    (ws_copy / "pixi.lock").write_bytes(b"half\n")  # the old file, the new one staged and the journal committed
    _plant(ws_copy, _own(ws_copy, [["0.new", "pixi.lock"]]), {"0.new": lock})
    code, err = _run(ws_copy, capsys, "export", "--check")
    assert code == 0, err
    assert (ws_copy / "pixi.lock").read_bytes() == lock and not (ws_copy / ".rocmlock/txn/journal.json").exists()


def test_a_state_directory_that_is_a_symbolic_link_is_refused_and_its_target_kept(
        ws_copy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    elsewhere = tmp_path / "important"
    elsewhere.mkdir()
    (elsewhere / "notes.txt").write_text("keep me\n")
    (ws_copy / ".rocmlock").mkdir(exist_ok=True)
    shutil.rmtree(ws_copy / ".rocmlock" / "txn", ignore_errors=True)
    (ws_copy / ".rocmlock" / "txn").symlink_to(elsewhere)
    code, err = _run(ws_copy, capsys, "lock")
    assert code == 1 and "is a symbolic link" in err, err
    assert (elsewhere / "notes.txt").read_text() == "keep me\n"


def test_a_directory_where_an_output_goes_stops_the_write_before_the_commit_point(
        ws_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Found only when its rename failed, after the commit point: the error named the staged file
    (`.rocmlock/txn/0.new: Is a directory`) and every later `lock --check` and `export` stopped on "cannot finish an
    interrupted write" until it was fixed by hand. Now nothing is written, and the next run goes on."""
    target = ws_copy / "envs" / "mi300x" / "environment.yml"
    target.unlink()
    target.mkdir()
    before = {p: p.read_bytes() for p in ws_copy.rglob("*") if p.is_file() and ".rocmlock" not in p.parts}
    code, err = _run(ws_copy, capsys, "export")
    assert code == 1 and err.startswith(f"error: cannot write the lock outputs: {target}: "), err
    assert "nothing was changed" in err and "hint: move that directory out of the way" in err, err
    assert {p: p.read_bytes() for p in ws_copy.rglob("*") if p.is_file() and ".rocmlock" not in p.parts} == before
    assert not any((ws_copy / ".rocmlock" / "txn").iterdir())
    target.rmdir()
    assert _run(ws_copy, capsys, "export")[0] == 0 and target.is_file()


# ----------------------------------------------------------------------------- a locked dependency edited by hand


@pytest.mark.parametrize("dep", ["python\x1b[2J >=3.8", "(((", "python >=<3", ""])
def test_a_locked_dependency_rattler_cannot_read_makes_the_lock_stale_not_a_traceback(
        ws_copy: Path, capsys: pytest.CaptureFixture[str], dep: str) -> None:
    # pixi takes such a lock as unsatisfiable (PlatformUnsat::FailedToParseMatchSpec) and solves again.
    lock = ws_copy / "pixi.lock"
    text = lock.read_text()
    first = text.index("  depends:\n  - ") + len("  depends:\n  - ")
    end = text.index("\n", first)
    lock.write_text(text[:first] + json.dumps(dep) + text[end:])
    code = main(["lock", "--check", "--json", "--manifest-path", str(ws_copy / "pixi.toml")])
    out, err = capsys.readouterr()
    assert code == 1 and "Traceback" not in err and "\x1b" not in out + err, err
    reasons = [s["reason"] for s in json.loads(out)["solved"]]
    assert any("is not a dependency rattler can read" in r for r in reasons), reasons
    code, err = _run(ws_copy, capsys, "lock")
    assert code == 0 and "\x1b" not in err, err
    assert json.dumps(dep) not in lock.read_text()


# ----------------------------------------------------------------------------- a credentials file rattler cannot parse


@pytest.mark.parametrize("content", ['{"127.0.0.1": "s3cr3tPASSWD"}', "s3cr3tPASSWD not json",
                                     '{"h": {"BasicHTTP": {"username": "u", "password": 5}}}'])
def test_a_credentials_file_rattler_cannot_parse_is_one_line_that_never_shows_it(
        ws_copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        content: str) -> None:
    # serde's message quotes the value it did not expect: the password itself (found by a break-it pass).
    auth = tmp_path / "auth.json"
    auth.write_text(content)
    monkeypatch.setenv("RATTLER_AUTH_FILE", str(auth))
    code, err = _run(ws_copy, capsys, "lock", "--discard-lock")
    assert code == 2 and "Traceback" not in err, err
    assert err.splitlines()[0].startswith(f"error: {auth}: not a credentials file rattler can read"), err
    assert "s3cr3t" not in err and len(err.strip().splitlines()) == 2, err


def test_the_process_a_run_waits_for_is_named_without_its_escape_sequences(tmp_path: Path) -> None:
    # The holder's command line is its own choice (exec -a): the "waiting for process N (...)" line printed it raw.
    import subprocess
    import time

    from rocmlock.util import oslock

    lock = tmp_path / "writer.lock"
    lock.write_text("")
    proc = subprocess.Popen(["bash", "-c", f"exec -a $'evil\\e[31mRED' flock {lock} sleep 30"])
    try:
        deadline = time.monotonic() + 10
        # Until flock holds it, holder() answers "another process" (no pid in /proc/locks yet): wait for the pid,
        # not for the word (the loop ended at once when bash was slow to exec flock, on a loaded machine).
        while not (who := oslock.holder(lock)).startswith("process ") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert who.startswith(f"process {proc.pid} (evil") and "\x1b" not in who and "\\x1b[31mRED" in who, who
    finally:
        proc.kill()
        proc.wait()


def test_an_environment_and_platforms_it_does_not_have_is_an_error_not_up_to_date(
        ws_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _run(ws_copy, capsys, "lock", "-e", "mi250", "-p", "linux-64-gfx942")
    assert code == 2 and "up to date" not in err, err
    assert err.splitlines()[0] == f"error: {ws_copy / 'pixi.toml'}: environment 'mi250' has no platform linux-64-gfx942"
    assert err.splitlines()[1] == "hint: their platforms: linux-64-gfx90a", err
