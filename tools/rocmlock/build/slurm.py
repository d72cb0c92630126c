"""``rocmlock build --slurm``: the plan's variants as Slurm batch jobs, chained by ``--dependency=afterok``.

One job per variant still to build, submitted in ``rocmlock plan``'s order, each after the jobs of the variants
it needs that this run submits (what is built or published already is skipped as by ``rocmlock build``, and needs
no job). A job runs ``rocmlock build --variant ID`` in the workspace: the doctor's checks on its node, the build
into the shared output channel, the variant's log in ``<output>/logs/<id>.log`` and the job's own output in
``<output>/logs/slurm/<id>.out``; its JSON report is ``<output>/logs/slurm/<id>.json``. So the workspace, the
recipes and the output directory must be on a filesystem the nodes share.

Each job asks for the CPUs and memory of the MAX_JOBS rule of :func:`rocmlock.host.doctor.max_jobs_for` applied
to the smallest node of the partition (``MAX_JOBS`` when set, else ~5 GiB per compile job, bounded by its cores);
a noarch variant compiles nothing and asks for one CPU. Then the command waits: a variant whose job fails leaves
its dependents PENDING with Slurm's reason ``DependencyNeverSatisfied`` (theirs ``Dependency``); the summary
names them and the ``scancel`` that removes them.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from rocmlock.build.builder import (
    Builder,
    BuildOptions,
    BuildReport,
    Events,
    Outcome,
    build_plan,
    check_build_paths,
    package_file,
    pending,
    rattler_build_variant,
)
from rocmlock.build.plan import Plan, Variant
from rocmlock.channel.channel_dir import publish_lock, publish_to_directory
from rocmlock.errors import InputError, OperationError
from rocmlock.host.doctor import GIB_PER_JOB, Resources, max_jobs_for
from rocmlock.util import slurm
from rocmlock.util.fs import write_atomic
from rocmlock.util.runner import Runner, run_command
from rocmlock.util.text import printable

_SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")
# What an #SBATCH line can hold unquoted (sbatch splits its options at whitespace).
_SBATCH_SAFE = re.compile(r"[^\s'\"\\#]+")
MIB_PER_GIB = 1024
# squeue failures in a row that waiting survives.
MAX_MISSES = 5


@dataclass(frozen=True)
class SlurmBuild:
    """The build's inputs as a job repeats them: workspace, recipes, output, target channel and the options."""

    manifest: Path
    recipes_dir: Path
    output: Path
    channel: str | None = None
    partition: str | None = None
    time: str | None = None
    skip_doctor: bool = False
    sources: Path | None = None


@dataclass(frozen=True)
class Job:
    """One variant's batch job: its size, the variants it waits for, and (once submitted) its Slurm id."""

    variant: Variant
    cpus: int
    mem_mb: int
    after: tuple[str, ...]
    job_id: str = ""


def job_size(variant: Variant, node: tuple[int, int], env: Mapping[str, str]) -> tuple[int, int]:
    """(CPUs, MiB) for ``variant`` on a node of ``node`` = (CPUs, MiB): the build's MAX_JOBS rule for a compiling
    variant, one CPU for a noarch one; GIB_PER_JOB GiB per compile job, never more than the node has."""
    cpus, mem_mb = node
    if variant.subdir == "noarch":
        return 1, min(GIB_PER_JOB * MIB_PER_GIB, mem_mb)
    jobs = min(cpus, max_jobs_for(Resources(cpus, mem_mb * 2**20, 0), env))
    return jobs, min(jobs * GIB_PER_JOB * MIB_PER_GIB, mem_mb)


def plan_jobs(plan: Plan, output: Path, node: tuple[int, int], env: Mapping[str, str],
              stage: str | None = None) -> list[Job]:
    """The jobs of the variants still to build, in plan order, each after the submitted variants it needs."""
    todo = pending(plan, output, stage)
    check_build_paths(plan, output, todo)
    ids = {v.id for v in todo}
    jobs = []
    for variant in todo:
        if not _SAFE_ID.fullmatch(variant.id):
            raise InputError(f"variant id {variant.id!r} is no safe file or job name",
                             hint="recipe names, versions and build strings use letters, digits, . _ + -")
        cpus, mem = job_size(variant, node, env)
        jobs.append(Job(variant, cpus, mem, tuple(d for d in variant.depends_on if d in ids)))
    return jobs


def _sbatch_value(value: str, what: str) -> str:
    if not _SBATCH_SAFE.fullmatch(value):
        raise InputError(f"{what} {value!r}: Slurm's #SBATCH lines cannot hold spaces or quotes",
                         hint="give it without spaces, quotes, # or backslashes (a path: move it to one without)")
    return value


def _log_dir(build: SlurmBuild) -> str:
    """The jobs' log directory for ``#SBATCH --output``. sbatch expands ``%j``, ``%x``, ``%%`` ... in that path
    (sbatch(1), "filename pattern"), so a '%' in it would put the log elsewhere than rocmlock says: refused."""
    logs = str(build.output / "logs" / "slurm")
    if "%" in logs:
        raise InputError(f"--output {build.output}: holds a '%', which sbatch expands in the jobs' log path "
                         "(%j is the job id), so their logs would not be where the summary says",
                         hint="use an output directory without '%'")
    return _sbatch_value(logs, "--output")


def batch_script(job: Job, build: SlurmBuild, job_ids: Mapping[str, str], env: Mapping[str, str]) -> str:
    """The batch script of ``job``; ``job_ids`` maps the variants it waits for to their Slurm job ids."""
    v, logs = job.variant, build.output / "logs" / "slurm"
    lines = ["#!/bin/bash", f"#SBATCH --job-name=rocmlock-{v.id}", f"#SBATCH --cpus-per-task={job.cpus}",
             f"#SBATCH --mem={job.mem_mb}M", f"#SBATCH --output={_log_dir(build)}/{v.id}.out"]
    lines += [f"#SBATCH --partition={_sbatch_value(build.partition, '--partition')}"] if build.partition else []
    lines += [f"#SBATCH --time={_sbatch_value(build.time, '--time')}"] if build.time else []
    if job.after:
        lines.append("#SBATCH --dependency=afterok:" + ":".join(job_ids[d] for d in job.after))
    cmd = [sys.executable, "-m", "rocmlock", "build", "--manifest-path", str(build.manifest), "--recipes-dir",
           str(build.recipes_dir), "--output", str(build.output), "--variant", v.id, "--json"]
    cmd += ["--channel", build.channel] if build.channel else []
    cmd += ["--sources", str(build.sources)] if build.sources else []
    cmd += ["--skip-doctor"] if build.skip_doctor else []
    lines += [f"# rocmlock build --slurm: {v.id} ({v.recipe})"
              + (f", after {', '.join(job.after)}" if job.after else ""),
              "set -eu", f"export MAX_JOBS={job.cpus}"]
    # The job runs the rocmlock that submitted it: its import path travels with it.
    if env.get("PYTHONPATH"):
        lines.append(f"export PYTHONPATH={shlex.quote(env['PYTHONPATH'])}")
    lines += [f"cd {shlex.quote(str(build.manifest.parent))}",
              f"{shlex.join(cmd)} > {shlex.quote(str(logs / f'{v.id}.json'))}", ""]
    return "\n".join(lines)


def dry_run(jobs: list[Job], build: SlurmBuild, env: Mapping[str, str]) -> str:
    """Every batch script, in submission order; the job ids they wait for shown as ``<variant id>``."""
    placeholders = {j.variant.id: f"<{j.variant.id}>" for j in jobs}
    return "\n".join(batch_script(j, build, placeholders, env) for j in jobs)


def submit_jobs(jobs: list[Job], build: SlurmBuild, env: Mapping[str, str], log: Callable[[str], None],
                runner: Runner = run_command) -> list[Job]:
    """Write each script to ``<output>/logs/slurm/<id>.sbatch`` and submit it; returns the jobs with their ids."""
    logs = build.output / "logs" / "slurm"
    logs.mkdir(parents=True, exist_ok=True)
    job_ids: dict[str, str] = {}
    submitted = []
    for job in jobs:
        script = logs / f"{job.variant.id}.sbatch"
        (logs / f"{job.variant.id}.json").unlink(missing_ok=True)  # an earlier run's report is not this job's
        write_atomic(script, batch_script(job, build, job_ids, env))
        try:
            job_ids[job.variant.id] = slurm.submit(str(script), runner=runner)
        except OperationError as exc:  # never half a chain in the queue
            slurm.cancel(list(job_ids.values()), runner)
            raise OperationError(f"{exc}; the {len(job_ids)} job(s) submitted before it were cancelled",
                                 hint=exc.hint) from None
        submitted.append(Job(job.variant, job.cpus, job.mem_mb, job.after, job_ids[job.variant.id]))
        log(f"submitted {job.variant.id}: job {job_ids[job.variant.id]} ({job.cpus} CPUs, {job.mem_mb} MiB)"
            + (f" after {', '.join(job.after)}" if job.after else ""))
    return submitted


# ----------------------------------------------------------------------------- waiting and the summary


@dataclass(frozen=True)
class SlurmResult:
    """The build's report (one outcome per variant) and the jobs left pending that can never run."""

    report: BuildReport
    jobs: tuple[Job, ...]
    never: tuple[Job, ...]


def _job_report(job: Job, output: Path) -> Outcome | None:
    """The outcome the job's ``rocmlock build --variant --json`` wrote, when it wrote one for its variant."""
    try:
        data = json.loads((output / "logs" / "slurm" / f"{job.variant.id}.json").read_text())
        entry = next(e for e in data["variants"] if e["id"] == job.variant.id)
        status, reason, seconds = entry["status"], str(entry["reason"]), float(entry["seconds"])
        log = entry.get("log")
    except (OSError, ValueError, TypeError, KeyError, StopIteration, RecursionError):
        return None  # no report, or not one `rocmlock build --json` wrote: the job's state decides
    if status not in ("built", "skipped", "failed", "blocked"):
        return None
    return Outcome(job.variant.id, job.variant.stage, status, printable(reason), seconds,
                   printable(log, 4096) if isinstance(log, str) else None)


class _Tracker:
    """What is known of each job while the command waits."""

    def __init__(self, jobs: list[Job], output: Path) -> None:
        self.jobs, self.output = jobs, output
        self.outcomes: dict[str, Outcome] = {}
        self.never: dict[str, str] = {}

    def bad(self, variant_id: str) -> str | None:
        """How a variant went wrong ('failed', 'never ran'), None while it is fine or unknown."""
        if variant_id in self.never:
            return "never ran"
        outcome = self.outcomes.get(variant_id)
        return "failed" if outcome is not None and outcome.status in ("failed", "blocked") else None

    def update(self, states: Mapping[str, slurm.JobState]) -> bool:
        """Settle what the states settle; True when every job has finished or can never run."""
        for job in self.jobs:  # plan order: a variant's dependencies are settled before it
            vid = job.variant.id
            if vid in self.outcomes or vid in self.never:
                continue
            state = states.get(job.job_id)
            broken = next(((d, self.bad(d)) for d in job.after if self.bad(d)), None)
            if state is None or state.finished:
                self.outcomes[vid] = self._finished(job, state, broken)
            # Slurm's own word for a failed dependency (it re-checks them every scheduling pass); a dependency that
            # never runs leaves the job waiting with reason "Dependency".
            elif state.state == "PENDING" and (state.never_runs or (broken is not None and broken[1] == "never ran")):
                needs = f"needs {broken[0]}, which {broken[1]}" if broken else "a dependency did not end well"
                self.never[vid] = f"never ran: {needs} (Slurm job {job.job_id}: {state.reason or 'Dependency'})"
        return len(self.outcomes) + len(self.never) == len(self.jobs)

    def _finished(self, job: Job, state: slurm.JobState | None, broken: tuple[str, str | None] | None) -> Outcome:
        v, out_log = job.variant, str(self.output / "logs" / "slurm" / f"{job.variant.id}.out")
        outcome = _job_report(job, self.output)
        if outcome is not None:
            return Outcome(outcome.id, outcome.stage, outcome.status,
                           f"{outcome.reason} (Slurm job {job.job_id})".lstrip(), outcome.seconds, outcome.log)
        if broken is not None:  # kill_invalid_depend: Slurm cancelled it instead of leaving it pending
            return Outcome(v.id, v.stage, "blocked", f"never ran: needs {broken[0]}, which {broken[1]} (Slurm job "
                           f"{job.job_id} {state.state if state else 'gone'})", 0.0, out_log)
        if state is not None and state.state == "COMPLETED" and package_file(self.output, v) is not None:
            return Outcome(v.id, v.stage, "built", f"(Slurm job {job.job_id})", 0.0, out_log)
        what = state.state if state is not None else "ended"
        return Outcome(v.id, v.stage, "failed", f"Slurm job {job.job_id} {what} with no build report", 0.0, out_log)


def wait_jobs(jobs: list[Job], plan: Plan, build: SlurmBuild, log: Callable[[str], None],
              runner: Runner = run_command, sleep: Callable[[float], None] = time.sleep,
              stage: str | None = None) -> SlurmResult:
    """Poll ``squeue`` until every job finished or waits on a failed one; the report covers every variant of the
    plan (those that needed no job as ``rocmlock build`` skips them)."""
    started, delay, misses = time.monotonic(), 1.0, 0
    tracker = _Tracker(jobs, build.output)
    while True:
        try:
            states = slurm.job_states([j.job_id for j in jobs], runner)
            misses = 0
        except OperationError as exc:  # a busy controller times out now and then: give it a few polls
            misses += 1
            if misses > MAX_MISSES:
                raise
            log(f"{exc} (trying again)")
        else:
            if tracker.update(states):
                break
        sleep(delay)
        delay = min(delay * 1.5, 30.0)
    by_id = {j.variant.id: j for j in jobs}
    outcomes = []
    for variant in plan.variants if stage is None else [v for v in plan.variants if v.stage == stage]:
        if variant.id in tracker.outcomes:
            outcomes.append(tracker.outcomes[variant.id])
        elif variant.id in tracker.never:
            outcomes.append(Outcome(variant.id, variant.stage, "blocked", tracker.never[variant.id], 0.0,
                                    str(build.output / "logs" / "slurm" / f"{variant.id}.out")))
        else:
            outcomes.append(_skipped(variant, build.output))
    never = tuple(by_id[v] for v in tracker.never)
    if never:
        log(f"{len(never)} job(s) can never run: " + ", ".join(f"{j.variant.id} ({j.job_id})" for j in never))
    return SlurmResult(BuildReport(build.output, tuple(outcomes), time.monotonic() - started), tuple(jobs), never)


def _skipped(variant: Variant, output: Path) -> Outcome:
    if variant.skip_reason is not None:
        reason = f"recipe skips it: {variant.skip_reason}"
    elif variant.present:
        reason = "present in the target channel"
    else:
        reason = "already built in the output directory" if package_file(output, variant) else "not submitted"
    return Outcome(variant.id, variant.stage, "skipped", reason)


def render_never(result: SlurmResult) -> str:
    """The lines after the summary table that name the jobs left pending and how to remove them."""
    if not result.never:
        return ""
    names = ", ".join(j.variant.id for j in result.never)
    return (f"never ran (their dependency failed; Slurm keeps them PENDING, DependencyNeverSatisfied): {names}\n"
            f"remove them with: scancel {' '.join(j.job_id for j in result.never)}")


# ----------------------------------------------------------------------------- inside a job

JOBS_DIR = ".rocmlock-jobs"


def build_in_job(plan: Plan, opts: BuildOptions, log: Callable[[str], None],
                 builder: Builder = rattler_build_variant, events: Events | None = None) -> BuildReport:
    """Build the plan's one variant as a job does, beside other jobs writing the same output channel.

    rattler-build names its work directory in the output by package and second (``rattler-build_<name>_<epoch>``):
    two variants of one package whose jobs start together shared it and one failed. So the job builds into its own
    directory under ``<output>/.rocmlock-jobs/`` (not a subdir: no index reads it), with the output channel first
    among its channels, then publishes the package into the output under the channel's lock and indexes it.
    """
    (variant,) = plan.variants
    if package_file(opts.output, variant) is not None:
        return BuildReport(opts.output, (Outcome(variant.id, variant.stage, "skipped",
                                                 "already built in the output directory"),), 0.0)
    work = opts.output / JOBS_DIR / variant.id
    shutil.rmtree(work, ignore_errors=True)
    inner = replace(opts, output=work, channels=(opts.output.resolve().as_uri(), *opts.channels))
    report = build_plan(plan, inner, builder, events)
    (outcome,) = report.outcomes
    if outcome.log:
        (opts.output / "logs").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(outcome.log, opts.output / "logs" / f"{variant.id}.log")
        outcome = replace(outcome, log=str(opts.output / "logs" / f"{variant.id}.log"))
    built = package_file(work, variant)
    if outcome.status == "built" and built is not None:
        key = f"{variant.subdir}/{built.name}"
        with publish_lock(opts.output, log):
            publish_to_directory(opts.output, {key: built}, [key], log)
        shutil.rmtree(work, ignore_errors=True)
    return BuildReport(opts.output, (outcome,), report.seconds)
