"""Slurm's commands as rocmlock runs them: ``srun``, ``sbatch --parsable``, ``squeue``, ``sinfo``, through the one
subprocess runner. Nothing here knows what is built or verified; ``build.slurm`` and ``fleet.slurm_verify`` do.

Facts checked against Slurm's source and man pages (22.05, Debian bookworm's ``slurm-wlm``, and upstream master):
``sbatch --parsable`` prints ``<jobid>`` or ``<jobid>;<cluster>``; ``--dependency=afterok:<id>[:<id>...]`` runs a
job once those ended with exit code 0; a job whose ``afterok`` dependency failed stays PENDING with reason
``DependencyNeverSatisfied`` (``WAIT_DEP_INVALID``, src/common/slurm_protocol_defs.c) unless the cluster's
``SchedulerParameters=kill_invalid_depend`` (or ``--kill-on-invalid-dep=yes``) cancels it
(``handle_invalid_dependency``, src/slurmctld/slurmctld.h); its own dependents stay PENDING with reason
``Dependency``. ``squeue -t all`` still lists a finished job for ``MinJobAge`` seconds (300 by default) and
answers ``Invalid job id specified`` (exit 1) when none of the ids given is known any more.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass

from rocmlock.errors import OperationError
from rocmlock.util.runner import Runner, run_command

JOB_ID = re.compile(r"(\d+)(?:;[\w.-]+)?")
# Job states after which a job never runs again (squeue's %T).
FINISHED = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED",
                      "BOOT_FAIL", "DEADLINE", "REVOKED", "SPECIAL_EXIT"})
NEVER_SATISFIED = "DependencyNeverSatisfied"


@dataclass(frozen=True)
class JobState:
    """A job as ``squeue`` shows it: its state (PENDING, RUNNING, COMPLETED, FAILED, ...) and pending reason."""

    state: str
    reason: str

    @property
    def finished(self) -> bool:
        return self.state in FINISHED

    @property
    def never_runs(self) -> bool:
        return self.state == "PENDING" and self.reason == NEVER_SATISFIED


def require(*tools: str) -> None:
    """Raise one line when a Slurm command is not on PATH."""
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        raise OperationError(f"Slurm is not on PATH: no {', '.join(missing)} found (run this on a Slurm login node, "
                             "or `module load slurm`)")


def parse_job_id(stdout: str) -> str:
    """The job id of ``sbatch --parsable``'s answer (``1234`` or ``1234;cluster``, on its last line: a job submit
    plugin may print more before it)."""
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    match = JOB_ID.fullmatch(lines[-1] if lines else "")
    if match is None:
        raise OperationError(f"sbatch --parsable answered {stdout.strip()[:80]!r}, not a job id")
    return match.group(1)


def submit(script: str, args: Sequence[str] = (), runner: Runner = run_command) -> str:
    """Submit the batch script at path ``script``; returns its job id."""
    result = runner(["sbatch", "--parsable", *args, script], check=False)
    if not result.ok:
        raise OperationError(f"sbatch {script} failed ({result.returncode}): {result.last_error_line()}",
                             hint="check the partition, time and resource options against `sinfo`")
    return parse_job_id(result.stdout)


def cancel(job_ids: Sequence[str], runner: Runner = run_command) -> None:
    """``scancel`` the jobs (best effort: a job that already ended is no error)."""
    if job_ids:
        runner(["scancel", *job_ids], check=False)


def job_states(job_ids: Sequence[str], runner: Runner = run_command) -> dict[str, JobState]:
    """The state of each job Slurm still knows; a job missing from the answer has left the controller."""
    if not job_ids:
        return {}
    result = runner(["squeue", "--noheader", "--states=all", "--format=%i|%T|%r", f"--jobs={','.join(job_ids)}"],
                    check=False)
    if not result.ok:
        if "Invalid job id" in result.stderr:
            return {}
        raise OperationError(f"squeue failed ({result.returncode}): {result.last_error_line()}")
    states = {}
    for line in result.stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 3 and parts[0] in job_ids:
            states[parts[0]] = JobState(parts[1], parts[2])
    return states


def node_size(partition: str | None, runner: Runner = run_command) -> tuple[int, int] | None:
    """(CPUs, memory in MiB) of the smallest node of ``partition`` (the default one when None), so a job sized to
    it fits every node; None when ``sinfo`` lists none."""
    argv = ["sinfo", "--noheader", "--format=%c %m"] + ([f"--partition={partition}"] if partition else [])
    result = runner(argv, check=False)
    if not result.ok:
        raise OperationError(f"sinfo failed ({result.returncode}): {result.last_error_line()}")
    sizes = []
    for line in result.stdout.splitlines():
        fields = [f.rstrip("+") for f in line.split()]
        if len(fields) == 2 and all(f.isdigit() for f in fields):
            sizes.append((int(fields[0]), int(fields[1])))
    return (min(c for c, _ in sizes), min(m for _, m in sizes)) if sizes else None
