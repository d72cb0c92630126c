"""tests/ciskips.py: in CI an unlisted skip fails the run, listed ones are printed with their reason."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ciskips import ALLOWLIST, in_ci, read_allowlist

HERE = Path(__file__).resolve().parent
SAMPLE = """
import pytest

def test_passes():
    assert True

def test_needs_a_frobnicator():
    pytest.skip("no frobnicator here")

@pytest.mark.xfail(reason="known", strict=True)
def test_expected_failure():
    assert False
"""


def _run(tmp_path: Path, ci: str | None, allowlist: str = "", extra: str = "") -> subprocess.CompletedProcess[str]:
    """A child pytest over a sample suite with the real conftest.py and ciskips.py, and ``allowlist``."""
    suite = tmp_path / "suite"
    suite.mkdir(exist_ok=True)
    for name in ("conftest.py", "ciskips.py"):
        shutil.copy(HERE / name, suite / name)
    (suite / "ci-skips.txt").write_text(allowlist)
    (suite / "test_sample.py").write_text(SAMPLE + extra)
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS")}
    if ci is not None:
        env["CI"] = ci
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(suite),
                           str(suite)], cwd=suite, env=env, capture_output=True, text=True, check=False, timeout=300)


@pytest.mark.parametrize("ci", ["true", "1", "yes", "TRUE"])
def test_an_unlisted_skip_fails_a_ci_run(tmp_path: Path, ci: str) -> None:
    proc = _run(tmp_path, ci)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "NOT ALLOWED: test_sample.py::test_needs_a_frobnicator: no frobnicator here" in proc.stdout
    assert "1 passed, 1 skipped, 1 xfailed" in proc.stdout  # the run itself was green


@pytest.mark.parametrize("ci", [None, "", "false", "0"])
def test_outside_ci_a_skip_is_only_a_skip(tmp_path: Path, ci: str | None) -> None:
    proc = _run(tmp_path, ci)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "NOT ALLOWED" not in proc.stdout and "skips under CI" not in proc.stdout


def test_a_listed_skip_passes_and_its_reason_is_printed(tmp_path: Path) -> None:
    proc = _run(tmp_path, "true", "# comment\n\ntest_sample.py::test_needs_a_frob*  # CI has no frobnicator card\n")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "allowed: test_sample.py::test_needs_a_frobnicator: CI has no frobnicator card" in proc.stdout
    assert "NOT ALLOWED" not in proc.stdout


def test_a_failure_stays_a_failure_and_a_module_skip_counts(tmp_path: Path) -> None:
    proc = _run(tmp_path, "true", "test_sample.py::test_needs_a_frobnicator  # listed\n",
                extra="\ndef test_fails():\n    assert False\n")
    assert proc.returncode == 1 and "1 failed" in proc.stdout
    (tmp_path / "suite" / "test_whole.py").write_text('import pytest\npytest.skip("no gadget", allow_module_level=True)\n')
    proc = _run(tmp_path, "true", "test_sample.py::test_needs_a_frobnicator  # listed\n")
    assert proc.returncode == 1 and "NOT ALLOWED: test_whole.py: no gadget" in proc.stdout


def test_an_entry_without_a_reason_is_refused(tmp_path: Path) -> None:
    proc = _run(tmp_path, "true", "test_sample.py::test_needs_a_frobnicator\n")
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "ci-skips.txt:1: an entry is '<node id pattern>  # <reason>'" in proc.stdout + proc.stderr


def test_the_committed_allowlist_is_short_and_gives_reasons() -> None:
    entries = read_allowlist(ALLOWLIST)
    assert len(entries) <= 5 and all(reason for _, reason in entries)


def test_ci_is_one_definition(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test that asks "am I in CI?" asks ciskips.in_ci: nothing else reads the CI variable."""
    for value, expected in (("true", True), ("1", True), ("yes", True), ("false", False), ("", False)):
        monkeypatch.setenv("CI", value)
        assert in_ci() is expected
    readers = [p.name for p in HERE.glob("*.py") if p.name not in ("ciskips.py", Path(__file__).name)
               and ('environ.get("CI"' in p.read_text() or "environ['CI']" in p.read_text()
                    or 'environ["CI"]' in p.read_text())]
    assert readers == []
