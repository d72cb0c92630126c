"""`.ci/run`, the README's second Quickstart command: the suite runs in a fresh venv it makes, with the venv's python."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CI_RUN = (REPO / ".ci" / "run").read_text()
# Commands only: comments and continuation lines of a comment block carry no code.
LINES = [line.strip() for line in CI_RUN.splitlines() if line.strip() and not line.strip().startswith("#")]


def _index(pattern: str) -> int:
    return next(i for i, line in enumerate(LINES) if re.search(pattern, line))


def test_the_venv_is_made_and_activated_before_any_install() -> None:
    made = _index(r'^python -m venv "\$VENV"$')
    activated = _index(r'^export VIRTUAL_ENV="\$VENV" PATH="\$VENV/bin:\$PATH"$')
    assert made < activated
    installs = [i for i, line in enumerate(LINES) if re.search(r"\bpip\b|\bpytest\b|quickstart\.sh", line)]
    assert installs and min(installs) > activated


def test_no_line_after_activation_reaches_another_interpreter() -> None:
    # After activation every `python` is the venv's; python3, an absolute interpreter path or a bare `pip`
    # would install into, or run, something else.
    activated = _index(r"^export VIRTUAL_ENV=")
    for line in LINES[activated + 1:]:
        command = r"(^|&&|\|\||;|\||\$\(|\bsudo\s|\$SUDO\s)\s*"
        assert not re.search(command + r"(python3(\.\d+)?|pip3?|/\S*/python\S*)(\s|\)|$)", line), line
        assert "--system-site-packages" not in line, line


def test_the_last_command_is_the_test_command_the_readme_prints() -> None:
    readme = (REPO / "README.md").read_text()
    assert "bash .ci/run                          # install the test dependencies, then run: python -m pytest -q tests" \
        in readme
    assert LINES[-1] == "python -m pytest -q tests"
    # A venv check right before it: the suite must not silently run in a system interpreter.
    assert "sys.prefix != sys.base_prefix" in LINES[-2]
    # Nothing may turn a failed or empty (exit 5) pytest run into success.
    assert CI_RUN.startswith("#!/usr/bin/env bash\n") and "set -euo pipefail" in CI_RUN
    assert "|| true" not in CI_RUN and "set +e" not in CI_RUN


def test_mypy_and_ruff_run_pinned_before_the_suite_and_fail_ci() -> None:
    # pyproject.toml's [tool.mypy] strict and [tool.ruff] hold only if something runs them: .ci/run does, with
    # pinned versions, before the test suite, and a finding fails CI (exit 1 with a line saying which check).
    pyproject = (REPO / "pyproject.toml").read_text()
    assert "[tool.mypy]\nstrict = true\n" in pyproject and "[tool.ruff]" in pyproject
    install = _index(r"^\$PIP mypy==[0-9.]+ types-PyYAML==[0-9.]+ ruff==[0-9.]+$")
    mypy = _index(r"^python -m mypy\b")
    ruff = _index(r"^python -m ruff check tools tests\b")
    assert install < mypy < LINES.index("python -m pytest -q tests")
    assert install < ruff < LINES.index("python -m pytest -q tests")
    for line in (LINES[mypy], LINES[ruff]):
        # Nothing turns a finding into success: the only fallback prints why and exits non-zero.
        assert re.fullmatch(r'python -m (mypy|ruff check tools tests)'
                            r'( \|\| \{ echo "\.ci/run: [^"]+" >&2; exit 1; \})?', line), line
    # Arguments left to pyproject.toml: `python -m mypy` checks its `files`, as a developer's run does.
    assert LINES[mypy].split(" || ")[0] == "python -m mypy"
    assert 'files = ["tools/rocmlock", "tools/verify_env.py"]' in pyproject


def _between(start: str, end: str) -> str:
    """The lines of .ci/run from the one that starts with ``start`` to the first one after it starting with ``end``,
    that one excluded."""
    first = CI_RUN.index("\n" + start) + 1
    return CI_RUN[first:CI_RUN.index("\n" + end, first) + 1]


def _cleanup_block() -> str:
    """.ci/run's background helpers and its EXIT trap."""
    block = _between("declare -A BG_PID BG_LOG", "# Debian's ROCm 7.2.4")
    assert "\ntrap cleanup EXIT\n" in block
    return block


def _venv_block() -> str:
    """The lines of .ci/run from the venv's path to its cleanup registration, `python -m venv` made a mkdir."""
    block = _between('VENV="${ROCMLOCK_CI_VENV', "export VIRTUAL_ENV=")
    assert "REMOVE_ON_EXIT+=" in block
    return _cleanup_block() + block.replace('python -m venv "$VENV"', 'mkdir -p "$VENV"')


def test_the_venv_is_removed_when_the_run_ends_unless_kept(tmp_path: Path) -> None:
    import os
    import subprocess

    script = "set -euo pipefail\n" + _venv_block() + 'echo "$VENV"\n'
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROCMLOCK_CI_")} | {"TMPDIR": str(tmp_path)}
    for failing in (False, True):  # the trap runs on a failure too
        out = subprocess.run(["bash", "-c", script + ("exit 3\n" if failing else "")], env=env, capture_output=True,
                             text=True, check=False)
        assert out.returncode == (3 if failing else 0), out.stderr
        assert not Path(out.stdout.strip()).exists() and list(tmp_path.iterdir()) == []
    kept = subprocess.run(["bash", "-c", script], env=env | {"ROCMLOCK_CI_KEEP_VENV": "1"}, capture_output=True,
                          text=True, check=True)
    assert Path(kept.stdout.strip()).is_dir()
    named = tmp_path / "mine" / "venv"  # a venv the caller named is the caller's: never removed
    out = subprocess.run(["bash", "-c", script], env=env | {"ROCMLOCK_CI_VENV": str(named)}, capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip() == str(named) and named.is_dir()


def test_ci_says_it_is_ci_and_nothing_it_needs_is_optional() -> None:
    """tests/ciskips.py fails a CI run on an unlisted skip only where CI is set: .ci/run sets it, before anything
    runs. What the suite needs is installed or the run stops: no branch that quietly leaves it out."""
    exported = _index(r"^export CI=true$")
    assert exported < _index(r"^python -m venv ") < LINES.index("python -m pytest -q tests")
    assert not any(re.match(r"if .*command -v apt-get", line) for line in LINES)
    assert not any(re.match(r"if \[ -f examples/offline/quickstart\.sh \]", line) for line in LINES)
    assert "bash examples/offline/quickstart.sh" in LINES
    assert re.search(r"^command -v apt-get >/dev/null 2>&1 \|\| \{$", CI_RUN, re.MULTILINE)
    assert not re.search(r"^\s*(if|\[).*(ROCMLOCK_MIRRORS|shared/mirrors).*\bthen\b.*\n\s*echo[^\n]*skip", CI_RUN)


def test_background_steps_stop_ci_when_they_fail_and_die_with_a_run_that_stops(tmp_path: Path) -> None:
    """`background NAME CMD...` runs a long step (the ROCm chroot, the Debian base) while the venv installs;
    `finish NAME` waits for it, prints its log and fails the run with its name when it failed; a run that stops
    before then kills it, children included (its process group), and leaves no log behind."""
    import os
    import subprocess
    import time

    assert re.search(r"^background chroot \$SUDO bash tests/rocm72/make-chroot\.sh$", CI_RUN, re.MULTILINE)
    assert re.search(r"^background ocibase python tests/ocibase\.py$", CI_RUN, re.MULTILINE)
    # Both are waited for, after every install into the venv and before the quickstart and the suite.
    last_install = max(i for i, line in enumerate(LINES) if line.startswith("$PIP"))
    for name in ("chroot", "ocibase"):
        assert last_install < LINES.index(f"finish {name}") < LINES.index("bash examples/offline/quickstart.sh")
    assert last_install < _index(r"^background ocibase ")  # nothing installs into the venv it imports from

    env = {**os.environ, "TMPDIR": str(tmp_path)}
    head = "set -euo pipefail\n" + _cleanup_block()
    # A finished job is not killed at exit: its process group id may be another process's by then (`kill` is
    # traced here, on stdout, by a function of that name: cleanup sends its stderr to /dev/null).
    trace = 'kill() { echo "kill $*"; command kill "$@"; }\n'
    ok = subprocess.run(["bash", "-c", head + trace + "background a bash -c 'echo made; exit 0'\nfinish a\n"
                         "echo after\n"], env=env, capture_output=True, text=True, check=False)
    assert ok.returncode == 0 and ok.stdout == "made\nafter\n", (ok.stdout, ok.stderr)
    assert "kill" not in ok.stdout + ok.stderr
    bad = subprocess.run(["bash", "-c", head + "background a bash -c 'echo why; exit 7'\nfinish a\necho after\n"],
                         env=env, capture_output=True, text=True, check=False)
    assert bad.returncode == 1 and bad.stdout == "why\n", (bad.stdout, bad.stderr)
    assert bad.stderr.strip() == ".ci/run: a failed (exit 7; its output is above)"
    pids = tmp_path / "pids"
    stopped = subprocess.run(["bash", "-c", head + f"background a bash -c 'sleep 300 & echo $! >{pids}; wait'\n"
                              "sleep 0.5\nexit 3\n"], env=env, capture_output=True, text=True, check=False)
    assert stopped.returncode == 3, stopped.stderr
    child = int(pids.read_text())
    for _ in range(50):  # the grandchild `sleep` is killed with its group
        if not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]:
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"the background step's child {child} outlived the run")
    pids.unlink()
    assert list(tmp_path.iterdir()) == []  # no log left behind, whichever way the run ended
