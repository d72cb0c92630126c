"""``rocmlock report``: many nodes' probe reports (``rocm-env-check --json``) merged into one fleet table.

Reports come from any launcher (``rocmlock verify --slurm``, pdsh, ansible): files, or directories of ``*.json``.
Each node gets one row (GPUs, ROCm, verdict, failed checks, GEMM TFLOP/s and LoRA step time); a node whose GEMM
throughput is below ``min_ratio`` of the fleet's median, or whose step takes longer than the median over
``min_ratio``, is flagged (a throttled or faulty GPU); nodes that fail the same checks are grouped with the first
one's evidence and fix. A report that cannot be read is one line; the rest are still merged.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocmlock.errors import InputError
from rocmlock.fleet.report_read import NodeReport, Unreadable, read_report
from rocmlock.util.text import format_table, printable

DEFAULT_MIN_RATIO = 0.8


@dataclass(frozen=True)
class NodeRow:
    """A node of the fleet with its outlier flags (``gemm``, ``step``) against the fleet's medians."""

    report: NodeReport
    outliers: tuple[str, ...] = ()

    @property
    def verdict(self) -> str:
        if not self.report.ok:
            return "fail"
        return "slow" if self.outliers else "pass"

    def to_dict(self) -> dict[str, Any]:
        r = self.report
        return {"node": r.node, "source": r.source, "verdict": self.verdict, "ok": r.ok, "failed": list(r.failed),
                "warnings": r.warnings, "gpus": list(r.gpus), "expected_arch": r.expected_arch, "rocm": r.rocm,
                "gemm_tflops": r.gemm_tflops, "step_ms": _round(r.step_ms), "outliers": list(self.outliers)}


@dataclass(frozen=True)
class FleetReport:
    rows: tuple[NodeRow, ...]
    unreadable: tuple[Unreadable, ...]
    min_ratio: float
    gemm_median: float | None = None
    step_median: float | None = None
    groups: tuple[tuple[tuple[str, ...], tuple[NodeRow, ...]], ...] = field(default=())

    @property
    def ok(self) -> bool:
        """Every node passed, none is an outlier, every report was read."""
        return not self.unreadable and all(row.verdict == "pass" for row in self.rows)

    def count(self, verdict: str) -> int:
        return sum(row.verdict == verdict for row in self.rows)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok, "min_gemm_ratio": self.min_ratio,
            "medians": {"gemm_tflops": _round(self.gemm_median), "step_ms": _round(self.step_median)},
            "counts": {v: self.count(v) for v in ("pass", "fail", "slow")} | {"unreadable": len(self.unreadable)},
            "nodes": [row.to_dict() for row in self.rows],
            "failure_groups": [{"failed": list(key), "nodes": [r.report.node for r in rows]}
                               for key, rows in self.groups],
            "unreadable": [u.to_dict() for u in self.unreadable],
        }


def _round(value: float | None) -> float | None:
    """4 significant digits, as the probe reports: 3 decimals made a slow node's median 0.0."""
    return None if value is None else float(f"{value:.4g}")


def report_files(paths: Sequence[Path]) -> list[Path]:
    """The report files of ``paths``: each file as given, each directory's ``*.json`` (sorted); a file reached twice
    (named again, through its directory, a link or another spelling of its path) counts once, where first reached:
    a node's report given three times would make three rows and move the medians its outlier flags compare with."""
    files: list[Path] = []
    seen: set[object] = set()
    for path in paths:
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.name.endswith(".json"))
        elif path.exists() or path.is_symlink():
            found = [path]
        else:
            raise InputError(f"{printable(str(path))}: no such file or directory",
                             hint="pass probe reports (rocm-env-check --json) or directories of them")
        for file in found:
            if (key := _identity(file)) not in seen:
                seen.add(key)
                files.append(file)
    if not files:
        raise InputError(f"no reports (*.json) in {', '.join(printable(str(p)) for p in paths)}",
                         hint="write one per node with `rocm-env-check --json > DIR/$(hostname).json`")
    return files


def _identity(path: Path) -> object:
    """The file ``path`` names (device and inode, links followed); a path that cannot be looked at is its own
    (read_report says why it is unreadable)."""
    try:
        info = path.stat()
    except OSError:
        return str(path)
    return (info.st_dev, info.st_ino)


def check_ratio(min_ratio: float) -> float:
    """``--min-gemm-ratio``, when it is in (0, 1]."""
    if not 0 < min_ratio <= 1:
        raise InputError(f"--min-gemm-ratio {min_ratio}: must be above 0 and at most 1",
                         hint="0.8 flags nodes below 80% of the fleet's median GEMM throughput")
    return min_ratio


def fleet_report(paths: Sequence[Path], min_ratio: float = DEFAULT_MIN_RATIO) -> FleetReport:
    """Read every report under ``paths`` and merge them."""
    check_ratio(min_ratio)
    read = [read_report(p) for p in report_files(paths)]
    return merge([r for r in read if isinstance(r, NodeReport)], [r for r in read if isinstance(r, Unreadable)],
                 min_ratio)


def merge(nodes: Iterable[NodeReport], unreadable: Iterable[Unreadable],
          min_ratio: float = DEFAULT_MIN_RATIO) -> FleetReport:
    """The fleet of ``nodes``: sorted by node name, outliers flagged, identical failures grouped."""
    ordered = sorted(nodes, key=lambda n: (n.node, n.source))
    gemm = _median(n.gemm_tflops for n in ordered)
    step = _median(n.step_ms for n in ordered)
    rows = tuple(NodeRow(n, _outliers(n, gemm, step, min_ratio)) for n in ordered)
    groups: dict[tuple[str, ...], list[NodeRow]] = {}
    for row in rows:
        if row.report.failed:
            groups.setdefault(tuple(sorted(row.report.failed)), []).append(row)
    ranked = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    return FleetReport(rows, tuple(sorted(unreadable, key=lambda u: u.source)), min_ratio, gemm, step,
                       tuple((key, tuple(members)) for key, members in ranked))


def _median(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _outliers(node: NodeReport, gemm: float | None, step: float | None, min_ratio: float) -> tuple[str, ...]:
    flags = []
    if node.gemm_tflops is not None and gemm and node.gemm_tflops < min_ratio * gemm:
        flags.append("gemm")
    if node.step_ms is not None and step and node.step_ms > step / min_ratio:
        flags.append("step")
    return tuple(flags)


# ----------------------------------------------------------------------------- text


def _tally(gpus: Sequence[str]) -> str:
    counts: dict[str, int] = {}
    for gfx in gpus:
        counts[gfx] = counts.get(gfx, 0) + 1
    return ", ".join(f"{gfx} x{n}" if n > 1 else gfx for gfx, n in counts.items()) or "-"


def _gpu_cell(r: NodeReport) -> str:
    cell = _tally(r.gpus)
    if r.expected_arch and any(g != r.expected_arch for g in r.gpus):
        cell += f" (env: {r.expected_arch})"
    return cell


def _metric(value: float | None, flagged: bool, median: float | None) -> str:
    if value is None:
        return "-"
    text = f"{value:.4g}"
    if flagged and median:
        text += f" ! {value / median:.2f}x median"
    return text


def _labels(fleet: FleetReport) -> dict[int, str]:
    """Each report's name in the text: its node, and where several reports name the same node (VMs and
    containers share a hostname; two runs' ``task-0.json``) the environment's target and the report's path too,
    as few of its last parts as tell that node's reports apart (``run1/task-0.json``, ``run2/task-0.json``)."""
    by_node: dict[str, list[str]] = {}
    for row in fleet.rows:
        by_node.setdefault(row.report.node, []).append(row.report.source)
    labels = {}  # by the report object: two long paths may print alike
    for row in fleet.rows:
        r, sources = row.report, by_node[row.report.node]
        labels[id(r)] = r.node if len(sources) == 1 else \
            f"{r.node} ({r.expected_arch or 'no target'}, {_distinct_tails(sources)[r.source]})"
    return labels


def _distinct_tails(sources: list[str]) -> dict[str, str]:
    """Each path of ``sources`` (distinct) cut to its last parts, as few as keep them all distinct."""
    parts = {s: s.split("/") for s in dict.fromkeys(sources)}
    for keep in range(1, max(len(p) for p in parts.values()) + 1):
        tails = {s: "/".join(p[-keep:]) for s, p in parts.items()}
        if len(set(tails.values())) == len(tails):
            return tails
    return {s: s for s in sources}


def _row(row: NodeRow, fleet: FleetReport, labels: dict[int, str]) -> tuple[str, ...]:
    r = row.report
    verdict = row.verdict.upper() if row.verdict != "pass" else "pass"
    verdict += f" ({r.warnings} warn)" if r.warnings else ""
    return (labels[id(r)], _gpu_cell(r), r.rocm or "-", verdict, ", ".join(r.failed) or "-",
            _metric(r.gemm_tflops, "gemm" in row.outliers, fleet.gemm_median),
            _metric(r.step_ms, "step" in row.outliers, fleet.step_median))


def render_fleet(fleet: FleetReport) -> str:
    """The fleet table, then the failure groups with evidence and fix, the outliers and the unreadable reports."""
    lines: list[str] = []
    labels = _labels(fleet)
    if fleet.rows:
        header = ("node", "gpus", "rocm", "verdict", "failed checks", "gemm TF/s", "train ms/step")
        lines += format_table([header, *(_row(row, fleet, labels) for row in fleet.rows)])
    for key, rows in fleet.groups:
        names = [labels[id(r.report)] for r in rows]
        lines += ["", f"{len(names)} node(s) fail {', '.join(key)}: {', '.join(names)}"]
        first = {f.check: f for f in rows[0].report.failures}
        for check in key:
            lines.append(f"  {check}: {first[check].evidence or '(no evidence)'}")
            if first[check].fix:
                lines.append(f"    fix: {first[check].fix}")
    slow = [row for row in fleet.rows if row.outliers]
    if slow:
        lines += ["", (f"outliers (GEMM below {fleet.min_ratio:g}x the fleet median, or train step above the median "
                       f"/ {fleet.min_ratio:g}: a throttled or faulty GPU; `amd-smi metric` shows clocks, power and "
                       "temperature):")]
        for row in slow:
            lines.append(f"  {labels[id(row.report)]}: {_outlier_text(row, fleet)}")
    if fleet.unreadable:
        lines += ["", f"{len(fleet.unreadable)} report(s) not merged:"]
        lines += [f"  {u.source}: {u.reason}" for u in fleet.unreadable]
    counts = ", ".join(f"{fleet.count(v)} {v}" for v in ("pass", "fail", "slow"))
    lines += ["", f"{len(fleet.rows)} node(s): {counts}" + (f"; {len(fleet.unreadable)} unreadable report(s)"
                                                             if fleet.unreadable else "")]
    return "\n".join(lines).lstrip("\n")


def _outlier_text(row: NodeRow, fleet: FleetReport) -> str:
    r, parts = row.report, []
    if "gemm" in row.outliers and r.gemm_tflops is not None and fleet.gemm_median:
        parts.append(f"GEMM {r.gemm_tflops:.4g} TF/s against the median {fleet.gemm_median:.4g}")
    if "step" in row.outliers and r.step_ms is not None and fleet.step_median:
        parts.append(f"train step {r.step_ms:.4g} ms against the median {fleet.step_median:.4g}")
    return "; ".join(parts)
