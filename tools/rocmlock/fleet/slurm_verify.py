"""``rocmlock verify --slurm``: the environment's probe on every node of a Slurm allocation, then ``report``.

One ``srun`` step, one task per node, each running the probe with ``--json``. The environment must be at the
same path on every node: on a filesystem they share, or unpacked on each (``rocmlock unpack`` to the same
prefix). ``srun --label`` prefixes every line a task prints with its rank, so the reports come back through srun
itself: no shared directory is needed for them. Each task's JSON and its readable table are written, atomically,
to ``<reports>/<node>.json`` and ``<node>.log`` on this host, and the directory is merged by
:func:`rocmlock.fleet.report.fleet_report`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rocmlock.errors import InputError, OperationError
from rocmlock.fleet.report import FleetReport, check_ratio, fleet_report
from rocmlock.fleet.report_read import HOSTNAME
from rocmlock.util import slurm
from rocmlock.util.fs import write_atomic
from rocmlock.util.runner import Runner, format_argv, run_command

_LABELED = re.compile(r"\s*(\d+): ?(.*)")
# The probe's top-level key (json.dumps(indent=2, sort_keys=True)): two spaces in, not a key of a check's data.
_HOST = re.compile(r'  "hostname": "([^"\\]*)",?')


@dataclass(frozen=True)
class SlurmOptions:
    """Where the probe runs: ``nodes`` or ``nodelist`` (else srun's default, one node), ``partition``, ``time``,
    and srun options passed as given."""

    nodes: int | None = None
    nodelist: str | None = None
    partition: str | None = None
    time: str | None = None
    srun_args: tuple[str, ...] = ()


def srun_command(probe: Sequence[str], opts: SlurmOptions) -> list[str]:
    """The ``srun`` argv: one task per node (unless ``srun_args`` set the tasks), labeled output, a failing node not
    stopping the others."""
    if opts.nodes is not None and opts.nodelist:
        raise InputError("pass --nodes or --nodelist, not both", hint="--nodelist names the nodes (and their count)")
    if opts.nodes is not None and opts.nodes < 1:
        raise InputError(f"--nodes {opts.nodes}: must be at least 1", hint="pass --nodes 1 or more")
    argv = ["srun", "--job-name=rocmlock-verify", "--label", "--kill-on-bad-exit=0"]
    # One task per node, unless the srun options given say how many tasks.
    if not any(a.startswith(("-n", "--ntasks")) for a in opts.srun_args):
        argv.insert(2, "--ntasks-per-node=1")
    argv += [f"--nodes={opts.nodes}"] if opts.nodes is not None else []
    argv += [f"--nodelist={opts.nodelist}"] if opts.nodelist else []
    argv += [f"--partition={opts.partition}"] if opts.partition else []
    argv += [f"--time={opts.time}"] if opts.time else []
    return [*argv, *opts.srun_args, *probe]


def split_labeled(text: str) -> tuple[dict[int, list[str]], list[str]]:
    """``srun --label`` output per task rank, and the lines without a label (srun's own messages)."""
    tasks: dict[int, list[str]] = {}
    other: list[str] = []
    for line in text.splitlines():
        match = _LABELED.fullmatch(line)
        if match:
            tasks.setdefault(int(match.group(1)), []).append(match.group(2))
        elif line.strip():
            other.append(line.strip())
    return tasks, other


_FALLBACK = re.compile(r"task-[0-9]+", re.IGNORECASE)
_NAME_LIMIT = 200


def _names(stdout: dict[int, list[str]], ranks: Sequence[int]) -> dict[int, str]:
    """A file name per task: the node's host name from its JSON when that is one and unique, else ``task-N``."""
    found: dict[int, str] = {}
    for rank in ranks:
        host = next((m.group(1) for line in stdout.get(rank, []) if (m := _HOST.fullmatch(line))), "")
        # Not a name the fallbacks use (a node called task-1 beside a task 1 without a host name: one report was
        # written over the other), and short enough for a file name with its temporary suffix (NAME_MAX 255).
        usable = HOSTNAME.fullmatch(host) and not _FALLBACK.fullmatch(host) and len(host) <= _NAME_LIMIT
        found[rank] = host if usable else ""
    taken = [n for n in found.values() if n]
    return {rank: name if name and taken.count(name) == 1 else f"task-{rank}" for rank, name in found.items()}


def write_reports(stdout: str, stderr: str, reports: Path) -> list[Path]:
    """Each task's JSON and log under ``reports`` (emptied of an earlier run's); returns the JSON files."""
    out, _ = split_labeled(stdout)
    err, _ = split_labeled(stderr)
    ranks = sorted(set(out) | set(err))
    reports.mkdir(parents=True, exist_ok=True)
    strangers = [p.name for p in reports.iterdir() if not p.name.endswith((".json", ".log"))]
    if strangers:
        raise InputError(f"{reports}: holds {strangers[0]}, not a report directory of `verify --slurm`",
                         hint="pass --reports with a new or an earlier reports directory")
    for old in reports.iterdir():
        old.unlink()
    written = []
    for rank, name in sorted(_names(out, ranks).items()):
        path = reports / f"{name}.json"
        write_atomic(path, "\n".join(out.get(rank, [])) + ("\n" if out.get(rank) else ""))
        write_atomic(reports / f"{name}.log", "\n".join(err.get(rank, [])) + "\n")
        written.append(path)
    return written


def verify_fleet(probe: Sequence[str], opts: SlurmOptions, reports: Path, min_ratio: float,
                 log: Callable[[str], None], runner: Runner = run_command) -> FleetReport:
    """Run the probe on the allocation's nodes; write their reports to ``reports``; merge them."""
    check_ratio(min_ratio)
    argv = srun_command(probe, opts)
    slurm.require("srun")
    log(f"> {format_argv(argv)}")
    result = runner(argv, check=False)
    tasks, srun_lines = split_labeled(result.stderr)
    for line in srun_lines:
        log(line)
    if not split_labeled(result.stdout)[0] and not tasks:
        raise OperationError(f"srun ran no probe ({result.returncode}): {result.last_error_line()}",
                             hint="check --partition/--nodes against `sinfo`; the environment's python must "
                                  "exist at the same path on every node")
    written = write_reports(result.stdout, result.stderr, reports)
    log(f"{len(written)} report(s) in {reports}")
    return fleet_report([reports], min_ratio)
