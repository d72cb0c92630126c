"""The lock outputs as one set: one writer at a time, and a kill at any instant leaves the old or the new set.
The same journal (rocmlock.util.journal) commits the files `bump` changes: the step-by-step kill runs on it too.

- every filesystem step of a real ``rocmlock lock`` in turn: the writer SIGKILLs itself right after step N
  (the steps of :mod:`rocmlock.lock.outputs` wrapped in the child), then the next command must see set A or set B;
- a kill loop: a child commits A, B, A, ... and is killed after a seeded random number of steps, 50 times;
- pairs of simultaneous ``rocmlock lock`` on one workspace, and a writer that cannot get the lock in time;
- errors while writing (a full disk, a read-only directory): exit 1, one line, the old set untouched.

Cost: about 40 s (some 30 short-lived ``rocmlock lock`` processes, 50 tiny ones).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from lockhelpers import manifest
from rocmlock.cli.main import main
from rocmlock.lock import outputs
from rocmlock.util import journal

# Wraps each filesystem step of the journal (rocmlock.util.journal, which rocmlock.lock.outputs and `bump` commit
# with) so that the process SIGKILLs itself right after step number `limit`; the scripts below define `limit` first.
COUNT_STEPS = textwrap.dedent("""
    import os, signal
    from rocmlock.util import journal
    count = [0]
    def counted(step):
        def run(*args):
            result = step(*args)
            count[0] += 1
            if count[0] == limit:
                os.kill(os.getpid(), signal.SIGKILL)
            return result
        return run
    for name in ("_write", "_rename", "_remove", "_mkdir", "_rmdir"):
        setattr(journal, name, counted(getattr(journal, name)))
""")

# The child: count the journal's steps, SIGKILL itself right after step N, run the CLI.
KILL_AFTER_STEP = "import sys\nlimit = int(sys.argv[1])\n" + COUNT_STEPS + textwrap.dedent("""
    from rocmlock.cli.main import main
    code = main(sys.argv[2:])
    sys.stdout.flush(); sys.stderr.flush()
    os._exit(code)
""")

# The child of the kill loop: commit the set that is not on disk, then the other, the first, ... and SIGKILL itself
# right after its Nth filesystem step (counted as in KILL_AFTER_STEP); N=0: one commit, then print its step count.
COMMIT_FOREVER = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    from rocmlock.lock import outputs
    root, sets, limit = Path(sys.argv[1]), json.loads(Path(sys.argv[2]).read_text()), int(sys.argv[3])
""") + COUNT_STEPS + textwrap.dedent("""
    lock = root / "pixi.lock"
    i = 1 if lock.is_file() and lock.read_text() == sets[0]["pixi.lock"] else 0  # start with the other set
    while True:
        this, other = sets[i % 2], sets[(i + 1) % 2]
        with outputs.exclusive(root):
            outputs.commit(root, {root / k: v for k, v in this.items()}, [root / k for k in other if k not in this])
        if limit == 0:
            print(count[0], flush=True)
            break
        i += 1
""")


def _set(root: Path) -> dict[str, bytes]:
    """The output set, plus any stray file outside .rocmlock (which must not exist)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and ".rocmlock" not in p.parts and p.name != "pixi.toml"}


def _manifest_b(text: str) -> str:
    # Every environment changes (numpy 2.2.0 -> 2.1.3, default gains numpy), one is added and one (mi250) goes:
    # B rewrites every file A shares with it, creates new ones and removes mi250's exports (and their directory).
    # Its feature goes with it: a feature no environment uses is one pixi (and rocmlock) warns about.
    mi250 = 'mi250 = ["rocm72", "gfx90a", "train"]\n'
    gfx90a = '[feature.gfx90a]\nplatforms = ["linux-64-gfx90a"]\n' \
             'dependencies = { amdgpu-target = { version = "*", build = "gfx90a" } }\n'
    assert mi250 in text and gfx90a in text
    return text.replace('python = "3.12.*"', 'python = "3.12.*"\nnumpy = "2.1.*"', 1).replace(mi250, "") \
        .replace(gfx90a, "") + 'other = ["gfx942"]\n'


@pytest.fixture(scope="module")
def sets(channels: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``a``: a workspace locked with manifest A whose pixi.toml is already B; ``b``: B locked from scratch."""
    base = tmp_path_factory.mktemp("sets")
    text = manifest(channels["private"].as_uri(), channels["forge"].as_uri())
    a, b = base / "a", base / "b"
    for root, content in ((a, text), (b, _manifest_b(text))):
        root.mkdir()
        (root / "pixi.toml").write_text(content)
        assert main(["lock", "--manifest-path", str(root / "pixi.toml")]) == 0
    (a / "pixi.toml").write_text(_manifest_b(text))
    new, old = set(_set(b)), set(_set(a))
    assert new - old and old - new and all(k.startswith("envs/mi250/") for k in old - new)
    assert all(_set(a)[k] != _set(b)[k] for k in old & new)
    return {"a": a, "b": b}


def _child_env(cache: Path) -> dict[str, str]:
    env = {**os.environ, "ROCMLOCK_CACHE_DIR": str(cache), "ROCMLOCK_TEST_NORMAL_EXIT": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(outputs.__file__).parents[1]), env.get("PYTHONPATH", "")])
    return env


def _assert_old_or_new(root: Path, sets: dict[str, Path], what: str) -> str:
    """Run the next command (``lock --check``); the set must then be exactly A or B. Returns which."""
    code = main(["lock", "--check", "--manifest-path", str(root / "pixi.toml")])
    now, a, b = _set(root), _set(sets["a"]), _set(sets["b"])
    assert now in (a, b), f"{what}: a mixed set: {sorted(k for k in now if now[k] != b.get(k))} are not B's"
    which = "b" if now == b else "a"
    assert code == (0 if which == "b" else 1), f"{what}: --check exit {code} with set {which}"
    return which


def test_a_kill_after_each_filesystem_step_leaves_the_old_or_the_new_set(
        sets: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    seen = []
    for step in range(1, 200):
        root = tmp_path / f"k{step}"
        shutil.copytree(sets["a"], root)
        proc = subprocess.run([sys.executable, "-c", KILL_AFTER_STEP, str(step), "lock", "--manifest-path",
                               str(root / "pixi.toml")], check=False, env=_child_env(tmp_path / "cache"),
                              capture_output=True, text=True, timeout=120)
        assert "Traceback" not in proc.stderr
        killed = proc.returncode == -signal.SIGKILL
        assert killed or proc.returncode == 0, proc.stderr
        seen.append(_assert_old_or_new(root, sets, f"killed after step {step}"))
        with outputs.exclusive(root):  # the next writer cleans whatever the interrupted one left
            txn = root / ".rocmlock" / "txn"
            assert not txn.exists() or not list(txn.iterdir())
        assert (root / "envs" / "mi250").is_dir() == (seen[-1] == "a")  # an emptied export directory goes too
        if not killed:  # the writer ran to its end: every step has had its kill
            break
        shutil.rmtree(root)
    # ... and a writer after an interrupted one ends at B.
    assert main(["lock", "--manifest-path", str(root / "pixi.toml")]) == 0
    assert _set(root) == _set(sets["b"])
    capsys.readouterr()
    assert step > 2 * len(_set(sets["b"])), "fewer filesystem steps than files: does the child wrap them?"
    # Kills before the commit point leave A, after it B (after recovery): both must have happened.
    assert seen[0] == "a" and seen[-1] == "b" and seen == sorted(seen), seen


def _synthetic_sets() -> list[dict[str, str]]:
    # A has an environment (e3) that B lacks: committing B removes its files, committing A brings them back.
    files = ["pixi.lock", *(f"envs/e{i}/{n}" for i in range(4) for n in ("environment.yml", "conda-x.lock"))]
    return [{f: f"{tag} {f}\n" * 200 for f in files if tag == "A" or "/e3/" not in f} for tag in ("A", "B")]


def test_random_kills_of_a_committing_writer_leave_a_whole_set(tmp_path: Path) -> None:
    """A writer that commits A, B, A, ... is killed after a (seeded) random number of filesystem steps, 50 times,
    each new writer starting on what the last one left: steps of a commit and of the recovery of an interrupted
    one alike. Counted steps, not a timer: the same kills on any machine, however fast or loaded."""
    pair = _synthetic_sets()
    spec = tmp_path / "sets.json"
    spec.write_text(json.dumps(pair))
    root = tmp_path / "ws"
    root.mkdir()
    expected = [{k: v.encode() for k, v in s.items()} for s in pair]
    env = _child_env(tmp_path / "cache")
    once = subprocess.run([sys.executable, "-c", COMMIT_FOREVER, str(root), str(spec), "0"], env=env,
                          capture_output=True, text=True, timeout=120, check=True)
    per_commit = int(once.stdout)
    assert per_commit > 2 * len(pair[0]), "fewer filesystem steps than files: does the child wrap them?"
    rng = random.Random(20261201)
    outcomes = set()
    midway = 0
    for kill in range(50):
        step = rng.randint(1, 3 * per_commit)  # anywhere in the next three commits
        proc = subprocess.run([sys.executable, "-c", COMMIT_FOREVER, str(root), str(spec), str(step)], env=env,
                              capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode == -signal.SIGKILL, proc.stderr
        txn = root / ".rocmlock" / "txn"
        midway += bool(list(txn.iterdir()))  # killed inside a commit: staged files or a journal remain
        with outputs.exclusive(root):  # the next command: recovers, then reads
            now = _set(root)
        assert now in expected, f"kill {kill} (after step {step}): a mixed or partial set"
        assert not txn.exists() or not list(txn.iterdir())
        outcomes.add(expected.index(now))
    assert {0, 1} <= outcomes
    assert midway >= 5, f"only {midway} of 50 kills landed inside a commit"


def test_simultaneous_locks_take_turns(sets: dict[str, Path], tmp_path: Path) -> None:
    for pair in range(3):
        root = tmp_path / f"p{pair}"
        shutil.copytree(sets["a"], root)
        args = [sys.executable, "-m", "rocmlock", "lock", "--manifest-path", str(root / "pixi.toml")]
        procs = [subprocess.Popen(args, env=_child_env(tmp_path / "cache"), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for _ in range(2)]
        results = [p.communicate(timeout=120) for p in procs]
        for proc, (_, err) in zip(procs, results):
            assert proc.returncode == 0 and "Traceback" not in err, err
        assert _set(root) == _set(sets["b"])


def test_a_writer_that_cannot_get_the_lock_in_time_names_the_holder(
        sets: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    root = shutil.copytree(sets["a"], tmp_path / "ws")
    before = _set(root)
    monkeypatch.setenv("ROCMLOCK_LOCK_TIMEOUT", "0.3")
    fd = os.open(root / ".rocmlock" / "writer.lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert main(["lock", "--manifest-path", str(root / "pixi.toml")]) == 1
        err = capsys.readouterr().err
        assert f"process {os.getpid()}" in err and "is writing the lock outputs" in err
        assert "waiting for" in err and "Traceback" not in err
        assert main(["export", "--manifest-path", str(root / "pixi.toml")]) == 1
        assert _set(root) == before
    finally:
        os.close(fd)
    assert main(["lock", "--manifest-path", str(root / "pixi.toml")]) == 0


@pytest.mark.parametrize("value", ["abc", "-1", "nan"])
def test_a_lock_timeout_that_is_not_a_number_of_seconds_is_bad_input(
        sets: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], value: str) -> None:
    """``ROCMLOCK_LOCK_TIMEOUT=abc`` is a typo, not "wait 60 s": exit 2 naming the variable, nothing written."""
    root = shutil.copytree(sets["a"], tmp_path / "ws")
    before = _set(root)
    monkeypatch.setenv("ROCMLOCK_LOCK_TIMEOUT", value)
    assert main(["lock", "--manifest-path", str(root / "pixi.toml")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("error: ROCMLOCK_LOCK_TIMEOUT") and "seconds" in err[0] and len(err) == 2, err
    assert _set(root) == before


@pytest.mark.parametrize(("step", "nth", "code"), [("_write", 3, errno.ENOSPC), ("_write", 1, errno.EROFS),
                                                   ("_mkdir", 1, errno.EROFS)])
def test_an_error_while_writing_leaves_the_old_set(sets: dict[str, Path], tmp_path: Path, step: str, nth: int,
                                                  code: int, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    root = shutil.copytree(sets["a"], tmp_path / "ws")
    before = _set(root)
    real = getattr(journal, step)
    calls = []

    def failing(path: Path, *rest: object) -> None:
        calls.append(path)
        if len(calls) == nth:  # 3: some files are staged already
            raise OSError(code, os.strerror(code), str(path))
        real(path, *rest)

    monkeypatch.setattr(journal, step, failing)
    assert main(["lock", "--manifest-path", str(root / "pixi.toml")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("error: ") and os.strerror(code) in err[0] and len(err) == 2, err
    assert err[1].startswith("hint: ")
    assert _set(root) == before
    assert not list((root / ".rocmlock" / "txn").iterdir())


def test_a_writer_that_cannot_make_the_state_directory_goes_on_unlocked(sets: dict[str, Path], tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    # A read-only checkout of a locked workspace has no .rocmlock (it is git-ignored): no lock file, and none can
    # be made, so no rocmlock ever wrote here. A lock that writes nothing goes on unlocked (it failed with
    # "cannot write the lock outputs here (No such file or directory)").
    root = shutil.copytree(sets["b"], tmp_path / "ws", ignore=shutil.ignore_patterns(outputs.STATE_DIR))
    monkeypatch.setenv("ROCMLOCK_CACHE_DIR", str(tmp_path / "cache"))

    def read_only(path: Path, *rest: object) -> None:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))

    monkeypatch.setattr(journal, "_mkdir", read_only)
    assert journal._open_lock(root, root / outputs.STATE_DIR / outputs.LOCK_NAME, True, outputs.OUTPUTS) == \
        (None, fcntl.LOCK_SH)
    assert main(["lock", "--manifest-path", str(root / "pixi.toml")]) == 0
    assert capsys.readouterr().err.strip() == "up to date, nothing written"
    assert not (root / outputs.STATE_DIR).exists()


def test_check_after_a_comment_only_edit_writes_nothing(sets: dict[str, Path], tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    root = shutil.copytree(sets["b"], tmp_path / "ws")
    monkeypatch.setenv("ROCMLOCK_CACHE_DIR", str(tmp_path / "cache"))
    assert main(["lock", "--manifest-path", str(root / "pixi.toml")]) == 0  # stamps this copy
    with (root / "pixi.toml").open("a") as fh:
        fh.write("# a comment\n")

    def everything() -> dict[str, tuple[bytes, int]]:
        return {str(p): (p.read_bytes(), p.stat().st_mtime_ns) for d in (root, tmp_path / "cache")
                for p in sorted(d.rglob("*")) if p.is_file()}

    before = everything()
    assert main(["lock", "--check", "--manifest-path", str(root / "pixi.toml")]) == 0
    assert main(["export", "--check", "--manifest-path", str(root / "pixi.toml")]) == 0
    assert everything() == before


# Real filesystems: a tmpfs too small for the new set, and a read-only bind mount, each in a private mount
# namespace (`unshare -m`, which needs CAP_SYS_ADMIN: root in CI). Where the kernel refuses the mount the test
# is skipped with that reason; the injected errors above cover the same code paths everywhere.
IN_NAMESPACE = textwrap.dedent("""
    set -u
    case "$MODE" in
      full) mount -t tmpfs -o size="$SIZE" tmpfs "$WS" && cp -a "$SRC/." "$WS/" ;;
      ro) cp -a "$SRC/." "$WS/" && mount --bind "$WS" "$WS" && mount -o remount,bind,ro "$WS" ;;
    esac || { echo "mount refused" > "$OUT/refused"; exit 0; }
    "$PYTHON" -m rocmlock lock --manifest-path "$WS/pixi.toml" > /dev/null 2> "$OUT/err"
    echo $? > "$OUT/code"
    mkdir "$OUT/ws" && cp -a "$WS/." "$OUT/ws/"
""")


def _pages(root: Path) -> int:
    return sum(-(-p.stat().st_size // 4096) for p in root.rglob("*") if p.is_file())


@pytest.mark.parametrize(("mode", "start"), [("full", "a"), ("ro", "a"), ("ro", "b")])
def test_a_real_full_disk_or_read_only_mount_leaves_the_old_set(sets: dict[str, Path], tmp_path: Path,
                                                                mode: str, start: str) -> None:
    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1) here; the injected-error test covers this path")
    ws, out = tmp_path / "ws", tmp_path / "out"
    ws.mkdir()
    out.mkdir()
    env = {**_child_env(tmp_path / "cache"), "MODE": mode, "SRC": str(sets[start]), "WS": str(ws), "OUT": str(out),
           "PYTHON": sys.executable, "SIZE": str((_pages(sets["a"]) + 4) * 4096)}
    proc = subprocess.run(["unshare", "-m", "sh", "-c", IN_NAMESPACE], env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    if proc.returncode != 0 or (out / "refused").exists():
        pytest.skip(f"the kernel refused a private mount ({proc.stderr.strip()[:200]}); injected errors cover it")
    err = (out / "err").read_text().strip().splitlines()
    if start == "b":  # already up to date: a read-only checkout is no obstacle to a lock that writes nothing
        assert (out / "code").read_text().strip() == "0" and err == ["up to date, nothing written"], err
        assert _set(out / "ws") == _set(sets["b"])
        return
    assert (out / "code").read_text().strip() == "1", err
    cause = "No space left on device" if mode == "full" else "Read-only file system"
    assert len(err) == 2 and err[0].startswith("error: ") and cause in err[0] and err[1].startswith("hint: "), err
    assert _set(out / "ws") == _set(sets["a"])
    txn = out / "ws" / ".rocmlock" / "txn"
    assert not txn.exists() or not list(txn.iterdir())


# ----------------------------------------------------------------------------- bump: the same journal


def _bump_args(root: Path, fake_url: str) -> list[str]:
    from fakeupstream import network_args

    return ["bump", "llamafactory=9.9.9", "--recipes-dir", str(root / "recipes"),
            "--manifest-path", str(root / "no-pixi.toml"), *network_args(fake_url)]


def _recipes(root: Path) -> dict[str, bytes]:
    """Every file under recipes/ (stray .bak/.tmp files included, which must not exist)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted((root / "recipes").rglob("*")) if p.is_file()}


def test_a_kill_after_each_filesystem_step_of_bump_leaves_the_old_or_the_new_pair(
        fake: object, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`bump llamafactory=...` changes variants.yaml and recipes/llamafactory/recipe.yaml: killed after any step
    of the journal, what the next bump reads (after it settles) is the old pair or the new one, nothing else."""
    from fakeupstream import FakeUpstream, sdist
    from rocmlock.upstream.bump import RECIPES, journal_root
    from shipped import RECIPES as SHIPPED
    from shipped import ROOT

    assert isinstance(fake, FakeUpstream)
    deps = ["transformers>=4.99.0", "numpy<3", "brand-new>=1"]
    data = sdist("llamafactory", "9.9.9", '[project]\nname = "llamafactory"\ndynamic = ["version"]\n'
                                          f"dependencies = {json.dumps(deps)}\n")
    fake.add_project("llamafactory", {"9.9.9": [fake.file("llamafactory-9.9.9.tar.gz", data)]})

    def checkout(name: str) -> Path:
        root = tmp_path / name
        shutil.copytree(SHIPPED, root / "recipes")
        (root / "tools").symlink_to(ROOT / "tools")
        return root

    old_root, new_root = checkout("old"), checkout("new")
    assert main(_bump_args(new_root, fake.url)) == 0
    old, new = _recipes(old_root), _recipes(new_root)
    changed = sorted(k for k in new if new[k] != old[k])
    assert changed == ["recipes/llamafactory/recipe.yaml", "recipes/variants.yaml"] and set(old) == set(new)
    seen = []
    for step in range(1, 100):
        root = checkout(f"k{step}")
        proc = subprocess.run([sys.executable, "-c", KILL_AFTER_STEP, str(step), *_bump_args(root, fake.url)],
                              check=False, env=_child_env(tmp_path / "cache"), capture_output=True, text=True,
                              timeout=120)
        assert "Traceback" not in proc.stderr
        killed = proc.returncode == -signal.SIGKILL
        assert killed or proc.returncode == 0, proc.stderr
        journal.settle(journal_root(root / "recipes"), RECIPES)  # what the next bump does before it reads
        now = _recipes(root)
        assert now in (old, new), f"killed after step {step}: a mixed pair or a leftover file"
        seen.append("old" if now == old else "new")
        with journal.exclusive(journal_root(root / "recipes"), RECIPES):  # the next writer cleans what was staged
            txn = root / ".rocmlock" / "txn"
            assert not txn.exists() or not list(txn.iterdir())
        if not killed:
            break
        shutil.rmtree(root)
    assert main(_bump_args(root, fake.url)) == 0 and _recipes(root) == new  # and the next bump ends at the new pair
    capsys.readouterr()
    assert step > 2 * len(changed), "fewer filesystem steps than files: does the child wrap them?"
    assert seen[0] == "old" and seen[-1] == "new" and seen == sorted(seen, reverse=True), seen


# The child: SIGKILL itself right after rattler wrote pixi.lock's text for the lock being made (before the commit).
KILL_AFTER_RENDER = textwrap.dedent("""
    import os, signal, sys
    from rattler import LockFile
    from rocmlock.cli.main import main
    real = LockFile.to_path
    def to_path(self, path):
        real(self, path)
        os.kill(os.getpid(), signal.SIGKILL)
    LockFile.to_path = to_path
    main(sys.argv[1:])
""")


def test_a_lock_killed_while_rattler_writes_pixi_lock_leaves_no_scratch_file(sets: dict[str, Path],
                                                                               tmp_path: Path) -> None:
    """pixi.lock's text is written by rattler to an unnamed file (O_TMPFILE): killed there, the lock leaves the old
    set and nothing in the temporary directory. Planted: the named scratch directory it used before stayed there
    (rocmlock-XXXX/pixi.lock)."""
    root, scratch = tmp_path / "ws", tmp_path / "tmp"
    shutil.copytree(sets["a"], root)
    scratch.mkdir()
    proc = subprocess.run([sys.executable, "-c", KILL_AFTER_RENDER, "lock", "--manifest-path", str(root / "pixi.toml")],
                          check=False, env={**_child_env(tmp_path / "cache"), "TMPDIR": str(scratch)},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert list(scratch.rglob("*")) == []
    assert _set(root) == _set(sets["a"])


def test_pixi_lock_text_is_the_same_without_unnamed_files(sets: dict[str, Path],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Where O_TMPFILE is missing (not Linux, or a file system without it), rattler writes to a named scratch file,
    and the text is the same."""
    from rocmlock.lock.lockfile import read_lockfile, render_lockfile

    locked = read_lockfile(sets["a"] / "pixi.lock")
    assert locked is not None
    unnamed = render_lockfile(locked)
    assert unnamed == (sets["a"] / "pixi.lock").read_text(encoding="utf-8")
    monkeypatch.delattr(os, "O_TMPFILE")
    assert render_lockfile(locked) == unnamed
