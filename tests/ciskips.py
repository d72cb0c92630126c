"""In CI a skipped test fails the run, unless tests/ci-skips.txt lists it with a reason.

A skip says "this machine lacks X". On a developer's machine that is information; in CI, whose job is to
provide X (.ci/run installs the system tools, builds the ROCm chroot, finds the source mirrors and a
CPython 3.10), it is a hole in the proof that no green run shows. So under CI every skip is collected,
the ones tests/ci-skips.txt allows are printed with their reason at the end, and any other one turns an
otherwise passing run into exit 1 (``pytest.ExitCode.TESTS_FAILED``), named in the same section.

tests/ci-skips.txt: one ``<node id pattern>  # <reason>`` a line (fnmatch patterns against pytest's node
id); blank lines and lines starting with ``#`` are comments; an entry without a reason is an error. Keep it
short: an entry is for a feature the CI machine truly lacks, not for a test that is inconvenient.

Loaded by tests/conftest.py (``pytest_configure`` below); a test runs it in a child pytest with ``-p ciskips``.
"""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ALLOWLIST = Path(__file__).with_name("ci-skips.txt")


def in_ci() -> bool:
    """The tests' one definition of "running in CI": ``CI`` is ``true``/``1``/``yes`` (.ci/run exports
    ``CI=true``; GitHub Actions, GitLab CI and most others set ``CI=true`` too)."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def read_allowlist(path: Path) -> list[tuple[str, str]]:
    """``(pattern, reason)`` for each entry of ``path`` (none when it does not exist)."""
    entries: list[tuple[str, str]] = []
    if not path.is_file():
        return entries
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        pattern, _, reason = line.partition("#")
        if not pattern.strip() or not reason.strip():
            raise pytest.UsageError(f"{path}:{number}: an entry is '<node id pattern>  # <reason>', got {raw!r}")
        entries.append((pattern.strip(), reason.strip()))
    return entries


def _skip_reason(report: pytest.CollectReport | pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # (path, line, "Skipped: why")
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


@dataclass(eq=False)  # a plugin must be hashable (pluggy keeps a set of them)
class SkipGate:
    """The plugin: records skips, fails an otherwise green CI run on an unlisted one, reports both."""

    allowlist: list[tuple[str, str]]
    skipped: dict[str, str] = field(default_factory=dict)

    def allowed_by(self, nodeid: str) -> str | None:
        return next((reason for pattern, reason in self.allowlist if fnmatch.fnmatchcase(nodeid, pattern)), None)

    def unlisted(self) -> dict[str, str]:
        return {n: r for n, r in self.skipped.items() if self.allowed_by(n) is None}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.skipped and not hasattr(report, "wasxfail"):
            self.skipped[report.nodeid] = _skip_reason(report)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.skipped:  # a module skipped as a whole (pytest.skip(allow_module_level=True), importorskip)
            self.skipped[report.nodeid] = _skip_reason(report)

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if in_ci() and self.unlisted() and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not in_ci() or not self.skipped:
            return
        terminalreporter.section("skips under CI (tests/ci-skips.txt)")
        for nodeid, why in sorted(self.skipped.items()):
            allowed = self.allowed_by(nodeid)
            if allowed is not None:
                terminalreporter.write_line(f"allowed: {nodeid}: {allowed}")
        unlisted = self.unlisted()
        for nodeid, why in sorted(unlisted.items()):
            terminalreporter.write_line(f"NOT ALLOWED: {nodeid}: {why}", red=True)
        if unlisted:
            terminalreporter.write_line(f"{len(unlisted)} skip(s) not in tests/ci-skips.txt fail this CI run: provide "
                                        "what they need in .ci/run, or list them there with the reason", red=True)


def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin("rocmlock-ci-skips"):
        config.pluginmanager.register(SkipGate(read_allowlist(ALLOWLIST)), "rocmlock-ci-skips")
