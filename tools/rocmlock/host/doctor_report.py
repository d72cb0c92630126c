"""The doctor's report: one :class:`Check` per finding, the :class:`DoctorReport` of a run, and its text form."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from rocmlock.util.text import escape

__all__ = ["Check", "DoctorReport", "Status", "render_report"]

Status = Literal["ok", "warn", "fail"]


@dataclass(frozen=True)
class Check:
    """One finding: ``name`` is stable (``offload-arch:gfx942``), ``fix`` says what to do."""

    name: str
    status: Status
    message: str
    fix: str = ""


@dataclass(frozen=True)
class DoctorReport:
    """All checks, plus the facts a build uses (``max_jobs``, the toolchain found)."""

    checks: tuple[Check, ...]
    targets: tuple[str, ...]
    max_jobs: int
    rocm_version: str | None = None
    hip_path: str | None = None
    compiler: str | None = None
    build: bool = False
    device_libs: str | None = None

    @property
    def failures(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if c.status == "fail")

    @property
    def ok(self) -> bool:
        return not self.failures

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data (``rocmlock doctor --json``)."""
        return {
            "ok": self.ok,
            "build": self.build,
            "targets": list(self.targets),
            "max_jobs": self.max_jobs,
            "rocm_version": self.rocm_version,
            "hip_path": self.hip_path,
            "compiler": self.compiler,
            "device_libs": self.device_libs,
            "checks": [{"name": c.name, "status": c.status, "message": c.message, "fix": c.fix}
                       for c in self.checks],
        }


def render_report(report: DoctorReport) -> str:
    """The report as aligned text lines, a fix under each warn/fail."""
    width = max((len(c.name) for c in report.checks), default=0)
    lines = []
    for c in report.checks:  # messages quote the host's files and environment: escaped, one line each
        lines.append(f"{c.status:<4}  {escape(c.name):<{width}}  {escape(c.message)}")
        if c.fix and c.status != "ok":
            lines.append(f"{'':<4}  {'':<{width}}  fix: {escape(c.fix)}")
    verdict = "ok" if report.ok else f"{len(report.failures)} check(s) failed"
    lines.append(f"doctor: {verdict}")
    return "\n".join(lines)
