"""Two `rocmlock publish --to DIR` at once into one directory channel: each waits its turn (a lock file in the
channel), so neither replaces the other's file nor leaves repodata without the other's packages.

The races are real: pairs of `rocmlock publish` processes, released together by a barrier file once each has
imported rocmlock and rattler, into a channel that already holds packages (a new one each round). Without the
lock, of two builds of one file name the second replaced the first's files while both reported success (5 or 6
of 6 rounds per run). About 30 s.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest
import rocmlock
from channels import Pkg, build_channel, listed_in_repodata
from racehelpers import together
from rocmlock.cli.main import main

TOOLS = str(Path(rocmlock.__file__).resolve().parents[1])
LOCK = ".rocmlock-publish.lock"
ROUNDS = 6

TOGETHER = together("rattler.index, rocmlock.channel.channel_dir, rocmlock.channel.publish")


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _shas(channel: Path) -> dict[str, str]:
    """``{subdir/file: sha256}`` of the package files in ``channel`` (a source, or the channel published to)."""
    return {f"{p.parent.name}/{p.name}": _sha(p) for p in sorted(channel.glob("*/*.conda"))}


def _side(prefix: str, text: str = "") -> list[Pkg]:
    files = (("share/x.txt", text),) if text else ()
    return [*(Pkg(f"{prefix}-data{i}", "1.0", "0", subdir="noarch", noarch="generic", files=files) for i in range(3)),
            *(Pkg(f"{prefix}-lib{i}", "1.0", "0", subdir="linux-64", files=files) for i in range(3))]


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("sources")
    return {"a": build_channel(root / "a", _side("alpha")), "b": build_channel(root / "b", _side("beta")),
            "x": build_channel(root / "x", _side("same", "built on host x")),
            "y": build_channel(root / "y", _side("same", "built on host y")),
            "base": build_channel(root / "base", [Pkg("rocm-version", "7.2", "0", subdir="noarch", noarch="generic"),
                                                  Pkg("hip-hello", "7.2", "0", subdir="linux-64")])}


def _team_channel(sources: dict[str, Path], where: Path) -> Path:
    """A channel that already holds packages (and so repodata.json in each subdir), as a team's does."""
    assert main(["publish", "--from", str(sources["base"]), "--to", str(where / "channel")]) == 0
    return where / "channel"


def _together(channel: Path, *sources: Path) -> list[tuple[int, dict[str, list[str]], str]]:
    """Publish each of ``sources`` to ``channel`` in its own process, all started at the same instant."""
    channel.parent.mkdir(parents=True, exist_ok=True)
    barrier = Path(tempfile.mkdtemp(dir=channel.parent, prefix="barrier-"))
    procs = [subprocess.Popen([sys.executable, "-c", TOGETHER, str(barrier), str(n), str(len(sources)), "publish",
                               "--from", str(src), "--to", str(channel), "--json"],
                              env={**os.environ, "PYTHONPATH": TOOLS}, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for n, src in enumerate(sources)]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=180)
        assert "Traceback" not in err, err
        results.append((proc.returncode, json.loads(out) if out.strip() else {}, err))
    shutil.rmtree(barrier)
    return results


def _waited(results: list[tuple[int, dict[str, list[str]], str]]) -> int:
    return sum("waiting for another publish to " in err for _, _, err in results)


def _lost(channel: Path, source: Path, result: dict[str, list[str]]) -> list[str]:
    """What a publish reported as uploaded but the channel does not hold, or its repodata does not list, as sent."""
    sent, files, listed = _shas(source), _shas(channel), listed_in_repodata(channel)
    return [f"{key}: file {'ok' if files.get(key) == sent[key] else 'lost'}, "
            f"repodata {'ok' if listed.get(key) == sent[key] else 'lost'}"
            for key in result.get("uploaded", []) if files.get(key) != sent[key] or listed.get(key) != sent[key]]


def test_simultaneous_publishes_of_different_packages_all_land(sources: dict[str, Path], tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    # Without the lock this held too in every round here: rattler's index retries a repodata.json write that
    # raced another (rattler_index/src/lib.rs, index_subdir: ConditionNotMatch). It is the guarantee as a whole.
    failures, waited = [], 0
    for n in range(ROUNDS):
        channel = _team_channel(sources, tmp_path / f"round{n}")
        results = _together(channel, sources["a"], sources["b"])
        waited += _waited(results)
        (a_code, a, a_err), (b_code, b, b_err) = results
        assert a_code == 0 and b_code == 0, a_err + b_err
        assert sorted(a["uploaded"]) == sorted(_shas(sources["a"])), a
        assert sorted(b["uploaded"]) == sorted(_shas(sources["b"])), b
        lost = _lost(channel, sources["a"], a) + _lost(channel, sources["b"], b)
        if lost:
            failures.append(f"round {n}: {lost}")
    assert not failures, f"{len(failures)} of {ROUNDS} rounds lost a package: {failures}"
    assert waited, "the publishes never overlapped: the test proved nothing"


def test_simultaneous_publishes_of_one_name_with_other_bytes_one_wins_the_other_says_so(
        sources: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    failures, waited = [], 0
    for n in range(ROUNDS):
        channel = _team_channel(sources, tmp_path / f"round{n}")
        results = _together(channel, sources["x"], sources["y"])
        waited += _waited(results)
        won = [i for i, (code, _, _) in enumerate(results) if code == 0]
        lost_codes = [(code, err) for code, _, err in results if code != 0]
        if len(won) != 1:
            files, listed = _shas(channel), listed_in_repodata(channel)
            wrong = sorted(k for k in files if listed.get(k) != files[k])
            failures.append(f"round {n}: {len(won)} publishes succeeded, reporting "
                            f"{[len(r[1].get('uploaded', [])) for r in results]} uploads; repodata names other "
                            f"bytes than the file for {len(wrong)} of {len(files)}")
            continue
        code, err = lost_codes[0]
        assert code == 1 and "already has a different" in err and "nothing was uploaded" in err, err
        winner = (sources["x"], sources["y"])[won[0]]
        assert results[won[0]][1]["uploaded"] == sorted(_shas(winner))
        expected = {**_shas(sources["base"]), **_shas(winner)}
        if _shas(channel) != expected or listed_in_repodata(channel) != expected:
            failures.append(f"round {n}: the channel does not hold (or list) exactly the winner's bytes")
    assert not failures, f"{len(failures)} of {ROUNDS} rounds replaced silently: {failures}"
    assert waited, "the publishes never overlapped: the test proved nothing"


def _cli(*argv: str, prefix: tuple[str, ...] = ()) -> subprocess.Popen[str]:
    return subprocess.Popen([*prefix, sys.executable, "-m", "rocmlock", *argv], env={**os.environ, "PYTHONPATH": TOOLS},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_publish_waits_for_the_one_that_holds_the_channel_and_says_so(sources: dict[str, Path],
                                                                       tmp_path: Path) -> None:
    channel = _team_channel(sources, tmp_path)
    fd = os.open(channel / LOCK, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # this test process is the other publish
        proc = _cli("publish", "--from", str(sources["a"]), "--to", str(channel), "--json")
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert line.startswith(f"waiting for another publish to {channel} to finish (process {os.getpid()} ("), line
        # It waits (how long: test_the_publish_lock_waits_as_long_as_it_takes) and does nothing meanwhile.
        assert listed_in_repodata(channel) == _shas(sources["base"]), "and does nothing to the channel meanwhile"
    finally:
        os.close(fd)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert json.loads(out)["uploaded"] == sorted(_shas(sources["a"]))
    assert listed_in_repodata(channel) == {**_shas(sources["base"]), **_shas(sources["a"])}


def test_the_publish_lock_waits_as_long_as_it_takes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No timeout: with an injected clock that moves an hour at each poll, the waiting publish still takes the lock
    when the other lets go after 200 polls (200 hours), and says once whom it waited for."""
    from rocmlock.channel.channel_dir import publish_lock
    from rocmlock.util import oslock

    channel = tmp_path / "channel"
    channel.mkdir()
    holder = os.open(channel / LOCK, os.O_RDWR | os.O_CREAT)
    fcntl.flock(holder, fcntl.LOCK_EX)  # another open file description: flock conflicts within a process too
    now, polls = [0.0], [0]

    def sleep(seconds: float) -> None:
        assert seconds == oslock.POLL
        now[0] += 3600.0
        polls[0] += 1
        if polls[0] == 200:
            os.close(holder)  # the other publish ends

    # oslock's clock only (its module reference to `time`), not the process's.
    monkeypatch.setattr(oslock, "time", SimpleNamespace(monotonic=lambda: now[0], sleep=sleep))
    heard: list[str] = []
    with publish_lock(channel, heard.append):
        assert polls[0] == 200
    assert len(heard) == 1 and heard[0].startswith(f"waiting for another publish to {channel} to finish")


def test_the_lock_file_is_no_package_and_a_channel_only_read_gets_none(sources: dict[str, Path], tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    channel = _team_channel(sources, tmp_path)
    assert (channel / LOCK).is_file() and (channel / LOCK).stat().st_size == 0
    assert listed_in_repodata(channel) == _shas(sources["base"]), "repodata lists the packages, not the lock file"
    assert not any(LOCK in p.read_text() for p in channel.glob("*/repodata.json"))
    before = sorted(str(p.relative_to(channel)) for p in channel.rglob("*"))
    # The channel as --from (read only), its lock file beside the subdirs: only packages are published.
    assert main(["publish", "--from", str(channel), "--to", str(tmp_path / "mirror"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["uploaded"] == sorted(_shas(sources["base"]))
    assert sorted(str(p.relative_to(channel)) for p in channel.rglob("*")) == before
    assert not (sources["base"] / LOCK).exists(), "a --from channel is read, never locked"
    assert listed_in_repodata(tmp_path / "mirror") == _shas(sources["base"])


def test_a_lock_file_made_under_umask_077_is_readable_by_all(sources: dict[str, Path], tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        channel = _team_channel(sources, tmp_path)
    finally:
        os.umask(old)
    assert (channel / LOCK).stat().st_mode & 0o777 == 0o644, "any user who may publish here can open it to lock"


# Another user's files: root runs the publish without CAP_DAC_OVERRIDE (setpriv(1) drops it), so mode bits apply
# as they would to a second user of a shared channel directory.
NO_OVERRIDE = ("setpriv", "--bounding-set=-dac_override,-dac_read_search", "--inh-caps=-dac_override,-dac_read_search")


@pytest.mark.parametrize(("lock_mode", "works"), [(0o644, True), (0o600, False)])
def test_a_lock_file_of_another_user(sources: dict[str, Path], tmp_path: Path, lock_mode: int, works: bool) -> None:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv(1) to act as a user the lock file does not belong to")
    channel = _team_channel(sources, tmp_path)
    os.chown(channel / LOCK, 65534, 65534)  # nobody's: this user may not open it for writing
    (channel / LOCK).chmod(lock_mode)
    proc = _cli("publish", "--from", str(sources["a"]), "--to", str(channel), prefix=NO_OVERRIDE)
    _, err = proc.communicate(timeout=120)
    lines = err.strip().splitlines()
    if works:  # locked through a read-only descriptor
        assert proc.returncode == 0 and lines[-1].endswith("6 uploaded, 0 already there"), err
        assert listed_in_repodata(channel) == {**_shas(sources["base"]), **_shas(sources["a"])}
    else:
        error = f"error: cannot publish to {channel}: cannot open its lock file {channel / LOCK}; nothing was uploaded"
        hint = f"hint: make it readable by every user who publishes there (chmod a+r {channel / LOCK})"
        assert proc.returncode == 1 and lines == [error, hint], err
        assert listed_in_repodata(channel) == _shas(sources["base"]) == _shas(channel)


def test_a_channel_this_user_may_not_write_fails_as_before_and_gets_no_lock_file(
        sources: dict[str, Path], tmp_path: Path) -> None:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv(1) to act as a user the directory does not let write")
    channel = build_channel(tmp_path / "channel", [])  # made by another tool: no lock file yet
    channel.chmod(0o555)
    proc = _cli("publish", "--from", str(sources["a"]), "--to", str(channel), prefix=NO_OVERRIDE)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1 and "Permission denied" in err and "Traceback" not in err, err
    assert not (channel / LOCK).exists() and _shas(channel) == {}


def test_a_filesystem_without_locks_publishes_unlocked_and_says_so(sources: dict[str, Path], tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """An NFS mount without its lock daemon answers ENOLCK to every flock: publishing there works as before."""
    def no_locks(fd: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(fcntl, "flock", no_locks)
    channel = tmp_path / "channel"
    assert main(["publish", "--from", str(sources["a"]), "--to", str(channel)]) == 0
    err = capsys.readouterr().err
    assert f"cannot lock {channel / LOCK} (No locks available): publishing without the lock" in err
    assert listed_in_repodata(channel) == _shas(sources["a"]) == _shas(channel)
