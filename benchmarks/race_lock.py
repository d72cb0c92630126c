"""Two (or more) `rocmlock lock` started together on one workspace after an edit: how many runs fail.

Issue 40, item 3: a fresh checkout of a locked workspace (no ``.rocmlock/``: it is git-ignored), one dependency
removed from pixi.toml, then ``--runs`` processes of ``nice python -m rocmlock lock --manifest-path`` started back
to back, as a user or two CI jobs would (``--barrier``: each imports rocmlock and rattler first and all are
released together, as tests/test_lock_concurrent.py does, which hits a race far more often). Each round is a new checkout. A run fails when it exits non-zero; a
round is also counted wrong when the outputs afterwards are not exactly the set one lock alone writes, or when
something is left in ``.rocmlock/`` beside the lock file and its ``.gitignore``.

    python benchmarks/race_lock.py --rounds 50 --runs 2                 # this tree
    python benchmarks/race_lock.py --rounds 50 --runs 2 --tools /tmp/old/tools   # another tree
    python benchmarks/race_lock.py --rounds 50 --runs 4 --barrier

(``git archive <commit> tools | tar -x -C /tmp/old`` gives an old tree.) The channels are the tests' own
(tests/channels.py, built with py-rattler-build, no network).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE / "tests"))

DROPPED = 'llamafactory = "0.9.*"\n'  # the dependency the edit removes
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--runs", type=int, default=2, help="runs started together per round")
    parser.add_argument("--barrier", action="store_true", help="release the runs together once they are loaded")
    parser.add_argument("--tools", type=Path, default=HERE / "tools", help="the tree's tools/ directory")
    args = parser.parse_args()
    from channels import build_channel, forge_packages, private_packages
    from lockhelpers import manifest
    from racehelpers import TOGETHER, left_in_state, outputs

    work = Path(tempfile.mkdtemp(prefix="rocmlock-race-"))
    env = {**os.environ, "PYTHONPATH": str(args.tools.resolve()), "ROCMLOCK_CACHE_DIR": str(work / "cache")}
    lock = [sys.executable, "-m", "rocmlock", "lock", "--manifest-path"]
    try:
        forge = build_channel(work / "forge", forge_packages())
        private = build_channel(work / "private", private_packages())
        text = manifest(private.as_uri(), forge.as_uri())
        assert DROPPED in text
        base, edited = work / "base", work / "edited"
        for root, content in ((base, text), (edited, text.replace(DROPPED, ""))):
            root.mkdir()
            (root / "pixi.toml").write_text(content)
            subprocess.run([*lock, str(root / "pixi.toml")], env=env, check=True, capture_output=True)
        expected = outputs(edited)
        failed_runs, wrong_sets, left = 0, 0, 0
        errors: dict[str, int] = {}

        def launcher(i: int) -> list[str]:
            if args.barrier:  # run i waits at the barrier until all are loaded
                return [sys.executable, "-c", TOGETHER, str(work / "barrier"), str(i), str(args.runs)]
            return [sys.executable, "-m", "rocmlock"]

        start = time.perf_counter()
        for n in range(args.rounds):
            root = work / f"r{n}"
            shutil.copytree(base, root, ignore=shutil.ignore_patterns(".rocmlock"))  # a fresh checkout
            (root / "pixi.toml").write_text(text.replace(DROPPED, ""))
            (work / "barrier").mkdir()
            procs = [subprocess.Popen(["nice", "-n", str(i % 2 * 5), *launcher(i), *lock[3:], str(root / "pixi.toml")],
                                      env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                     for i in range(args.runs)]
            for proc in procs:
                _, err = proc.communicate(timeout=300)
                if proc.returncode != 0:
                    failed_runs += 1
                    line = err.strip().splitlines()[0] if err.strip() else f"exit {proc.returncode}"
                    errors[line.replace(str(root), "<ws>")] = errors.get(line.replace(str(root), "<ws>"), 0) + 1
            wrong_sets += outputs(root) != expected
            left += bool(left_in_state(root))
            shutil.rmtree(root)
            shutil.rmtree(work / "barrier")
        took = time.perf_counter() - start
    finally:
        shutil.rmtree(work, ignore_errors=True)
    how = "released by a barrier" if args.barrier else "started back to back"
    print(f"{args.rounds} rounds x {args.runs} runs, {how} ({took:.0f} s): {failed_runs} failed runs, "
          f"{wrong_sets} rounds with a wrong output set, {left} rounds leaving files in .rocmlock/")
    for line, count in sorted(errors.items()):
        print(f"  {count} x {line}")
    return 1 if failed_runs or wrong_sets or left else 0


if __name__ == "__main__":
    sys.exit(main())
