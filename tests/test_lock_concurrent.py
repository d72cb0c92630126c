"""`lock`, `export`, `install` and `lock --check` started together on one workspace: every run exits 0 (a writer
waits its turn, saying so), the outputs end as the one set a single lock writes, and nothing is left behind.

Issue 40, item 3. Each round is a fresh checkout of a locked workspace (no ``.rocmlock/``: it is git-ignored),
as CI jobs and a user's two terminals meet it; two or four real ``rocmlock`` processes are released together by a
barrier file once each has imported rocmlock and rattler. Before the fix, a writer made ``.rocmlock/.gitignore``
through ``.gitignore.tmp`` *before* taking the writer lock, so two first writers could each write the temporary
file and the second rename found it gone: exit 1, ``cannot write the lock outputs here (No such file or
directory)``. Against that code every case below failed, each within its first two rounds.

Figures (2 shared CPU cores, 2026-12-06; ``/tmp/old`` = ``git archive 0cfe699 tools``, the tree before the fix):

- ``python benchmarks/race_lock.py --rounds 50 --runs 2 --barrier``: 0 failed runs of 100, every round the one
  set, nothing left in ``.rocmlock/``; with ``--tools /tmp/old/tools``: 40 failed runs of 100, all that error.
- the same with ``--runs 4``: 0 of 200; before the fix 78 of 200.
- without ``--barrier`` (runs started back to back under ``nice``, as the issue did): 0 of 100 on both trees
  here; Python's start-up spreads two processes further apart than the race window on this machine, so the
  test releases its runs by a barrier.

About 80 s.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import rocmlock
from lockhelpers import manifest
from racehelpers import TOGETHER, left_in_state, outputs
from rocmlock.cli.main import main
from rocmlock.lock.lockfile import read_lockfile

TOOLS = str(Path(rocmlock.__file__).resolve().parents[1])
DROPPED = 'llamafactory = "0.9.*"\n'  # the edit: one dependency removed from pixi.toml
def _installed(prefix: Path) -> set[str]:
    return {p.stem for p in (prefix / "conda-meta").glob("*.json")}


def _locked(root: Path, env: str) -> set[str]:
    locked = read_lockfile(root / "pixi.lock")
    assert locked is not None
    (records,) = locked.environments[env].records.values()
    return {f"{r.name.normalized}-{r.version}-{r.build}" for r in records}


@pytest.fixture(scope="module")
def checkouts(channels: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``old``: locked; ``new``: its manifest less one dependency, locked alone (the set every round must end at)."""
    base = tmp_path_factory.mktemp("checkouts")
    text = manifest(channels["private"].as_uri(), channels["forge"].as_uri())
    assert DROPPED in text
    out = {}
    for name, content in (("old", text), ("new", text.replace(DROPPED, ""))):
        root = base / name
        root.mkdir()
        (root / "pixi.toml").write_text(content)
        assert main(["lock", "--manifest-path", str(root / "pixi.toml")]) == 0
        out[name] = root
    assert _locked(out["old"], "mi300x") != _locked(out["new"], "mi300x")
    return out


def _together(commands: list[list[str]], where: Path) -> list[tuple[int, str]]:
    """Run the ``rocmlock`` ``commands`` released at once; each one's exit code and stderr."""
    barrier = where / "barrier"
    barrier.mkdir()
    env = {**os.environ, "ROCMLOCK_CACHE_DIR": str(where.parent / "cache"),
           "PYTHONPATH": os.pathsep.join([TOOLS, os.environ.get("PYTHONPATH", "")])}
    procs = [subprocess.Popen([sys.executable, "-c", TOGETHER, str(barrier), str(i), str(len(commands)), *cmd],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for i, cmd in enumerate(commands)]
    errs = [p.communicate(timeout=300)[1] for p in procs]
    return [(p.returncode, err) for p, err in zip(procs, errs, strict=True)]


# (what runs together, from which checkout, rounds). "new" with nothing to do: lock --check may run beside the
# writers, as its answer (up to date) is the same before and after them.
MIXES = {
    "two locks after an edit": (["lock", "lock"], "old", 10),
    "lock, lock, export, install after an edit": (["lock", "lock", "export", "install"], "old", 6),
    "lock, export, install, check with nothing to do": (["lock", "export", "install", "check"], "new", 4),
}


@pytest.mark.parametrize("mix", list(MIXES))
def test_runs_started_together_all_succeed_and_leave_one_set(checkouts: dict[str, Path], tmp_path: Path,
                                                            mix: str) -> None:
    kinds, start, rounds = MIXES[mix]
    expected = outputs(checkouts["new"])
    waited = 0
    for n in range(rounds):
        where = tmp_path / f"r{n}"
        root = where / "ws"
        shutil.copytree(checkouts[start], root, ignore=shutil.ignore_patterns(".rocmlock"))  # a fresh checkout
        (root / "pixi.toml").write_text((checkouts["new"] / "pixi.toml").read_text())  # the edit (or none)
        ws = ["--manifest-path", str(root / "pixi.toml")]
        argv = {"lock": ["lock", *ws], "export": ["export", *ws], "check": ["lock", "--check", *ws],
                "install": ["install", *ws, "-e", "mi300x", "--prefix", str(where / "env")]}
        results = _together([argv[k] for k in kinds], where)
        for kind, (code, err) in zip(kinds, results, strict=True):
            assert code == 0 and "Traceback" not in err, f"round {n}, {kind}: exit {code}: {err}"
            assert not any(line.startswith(("error:", "hint:")) for line in err.splitlines()), err
            waited += "waiting for process" in err  # a run that waited said so, and for whom
        assert outputs(root) == expected, f"round {n}: not the set one lock writes"
        assert left_in_state(root) == [], f"round {n}: left in .rocmlock/"
        assert main(["lock", "--check", *ws]) == 0
        if "install" in kinds:  # one whole lock's environment: the old one or the new one, never a mix
            assert _installed(where / "env") in (_locked(checkouts["old"], "mi300x"),
                                                  _locked(checkouts["new"], "mi300x"))
        shutil.rmtree(where)
    if kinds.count("lock") + kinds.count("export") > 1:  # writers that met: the rounds really overlapped
        assert waited, "no writer ever waited for another: the runs did not overlap"


def test_the_edit_changes_what_is_locked(checkouts: dict[str, Path]) -> None:
    """The rounds above would prove nothing if the edit left the lock as it was: the writers must write."""
    old, new = outputs(checkouts["old"]), outputs(checkouts["new"])
    changed = sorted(k for k in new if old.get(k) != new[k] and k != "pixi.toml")
    assert "pixi.lock" in changed and any(k.startswith("envs/mi300x/") for k in changed), changed
    gone = _locked(checkouts["old"], "mi300x") - _locked(checkouts["new"], "mi300x")
    assert any(name.startswith("llamafactory-") for name in gone), sorted(gone)
