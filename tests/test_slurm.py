"""`verify --slurm` and `build --slurm` against a real Slurm (munged, slurmctld and slurmd started by the fixture on
127.0.0.1, tests/slurmcluster.py): the probe on several tasks of one srun step, the metapackage recipes built by
sbatch jobs chained with --dependency=afterok, one of them failing."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from ciskips import in_ci
from rocmlock.cli.main import main
from slurmcluster import Cluster, ClusterError, missing_tools, slurm_cluster

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """The one-node cluster; in CI (CI=true) a cluster that cannot start fails the tests instead of skipping them."""
    missing = missing_tools()
    if missing:
        message = f"Slurm/munge not installed ({', '.join(missing)}): apt-get install slurm-wlm munge (.ci/run does)"
        pytest.fail(message) if in_ci() else pytest.skip(message)
    try:
        with slurm_cluster() as started:
            yield started
    except ClusterError as exc:
        pytest.fail(f"the test cluster did not start: {exc}") if in_ci() else pytest.skip(str(exc))


@pytest.fixture
def slurm_env(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> Cluster:
    """The client commands pointed at the test cluster; a developer's own Slurm job (SLURM_JOB_ID, ...) left out."""
    for name in list(os.environ):
        if name.startswith("SLURM_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
    return cluster


# ----------------------------------------------------------------------------- verify --slurm

FAKE_PYTHON = """#!/bin/sh
# One fake node per srun task: its --root (sysfs, /dev, /etc/hostname, ROCm) and its tools (amd-smi, rocminfo).
root={fleet}/node$SLURM_PROCID
export PATH="$root/bin:$PATH" ROCM_PATH="$root/opt/rocm"
[ -f "$root/sitecustomize.py" ] && export PYTHONPATH="$root${{PYTHONPATH:+:$PYTHONPATH}}"
exec {python} "$@" --root "$root" --device cpu --only host --only tools --only rocm --only bench
"""

# A throttled GPU: this node's clock runs 20 times as fast, so every interval it measures (the GEMM bench's) is 20
# times as long. A delay added to each matmul (0.25 s, then 20 times the matmul's own time) was not enough on a
# loaded machine: there the node passed as not slow.
SLOW = """import time
_real = time.perf_counter
_start = _real()
time.perf_counter = lambda: _start + 20 * (_real() - _start)
"""


def _script(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)


def fake_node(root: Path, hostname: str, gfx: str, kfd: int, slow: bool = False) -> None:
    """A node as the probe sees it through --root: amdgpu loaded, one GPU of ``gfx``, ROCm 7.2 at /opt/rocm."""
    for rel, text in (("etc/hostname", f"{hostname}\n"), ("sys/module/amdgpu/initstate", "live\n"),
                      ("sys/class/kfd/kfd/topology/nodes/1/properties", f"gfx_target_version {kfd}\n"),
                      ("dev/kfd", ""), ("dev/dri/renderD128", ""), ("opt/rocm/.info/version", "7.2.0-43\n"),
                      ("opt/rocm/include/hip/hip_runtime.h", "")):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    _script(root / "bin" / "amd-smi", "#!/bin/sh\necho 'GPU: 0'\necho '    BDF: 0000:03:00.0'\n")
    _script(root / "bin" / "rocminfo", f"#!/bin/sh\necho 'Agent 2'\necho '  Name:                    {gfx}'\n")
    if slow:
        (root / "sitecustomize.py").write_text(SLOW)


def test_verify_slurm_runs_the_probe_on_every_task_and_reports_the_fleet(
        slurm_env: Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copy(REPO / "pixi.toml", tmp_path / "pixi.toml")
    fleet = tmp_path / "fleet"
    fake_node(fleet / "node0", "gpu-a", "gfx942", 90402)
    fake_node(fleet / "node1", "gpu-b", "gfx90a", 90010)  # the wrong GPU for mi300x
    fake_node(fleet / "node2", "gpu-c", "gfx942", 90402, slow=True)
    prefix = tmp_path / ".pixi" / "envs" / "mi300x"
    (prefix / "conda-meta").mkdir(parents=True)
    _script(prefix / "bin" / "python", FAKE_PYTHON.format(fleet=shlex.quote(str(fleet)),
                                                           python=shlex.quote(sys.executable)))
    reports = tmp_path / "reports"
    # One node here: three tasks on it stand for three nodes (srun options after --; a task count given there
    # replaces the one task per node).
    code = main(["verify", "-e", "mi300x", "--manifest-path", str(tmp_path / "pixi.toml"), "--slurm", "--bench",
                 "--reports", str(reports), "--min-gemm-ratio", "0.3", "--json", "--",
                 "--ntasks=3", "--overcommit"])
    out, err = capsys.readouterr()
    assert code == 1 and out, err
    fleet_report = json.loads(out)
    nodes = {n["node"]: n for n in fleet_report["nodes"]}
    assert sorted(nodes) == ["gpu-a", "gpu-b", "gpu-c"], err
    assert sorted(p.name for p in reports.iterdir()) == ["gpu-a.json", "gpu-a.log", "gpu-b.json", "gpu-b.log",
                                                         "gpu-c.json", "gpu-c.log"]
    assert "> srun --job-name=rocmlock-verify --label --kill-on-bad-exit=0 --ntasks=3 --overcommit" in err
    a, b, c = nodes["gpu-a"], nodes["gpu-b"], nodes["gpu-c"]
    assert (a["verdict"], a["gpus"], a["rocm"], a["failed"]) == ("pass", ["gfx942"], "7.2.0", [])
    assert (b["verdict"], b["gpus"], b["failed"]) == ("fail", ["gfx90a"], ["host.driver", "tools.rocminfo"])
    assert (c["verdict"], c["outliers"]) == ("slow", ["gemm"]), [(n["node"], n.get("gemm_tflops")) for n in nodes.values()]
    assert c["gemm_tflops"] < 0.3 * fleet_report["medians"]["gemm_tflops"]
    assert fleet_report["failure_groups"] == [{"failed": ["host.driver", "tools.rocminfo"], "nodes": ["gpu-b"]}]
    assert "PASS: every required check passed" in (reports / "gpu-a.log").read_text()
    # The same directory through `rocmlock report`: the table, the group's evidence, the outlier.
    assert main(["report", str(reports), "--min-gemm-ratio", "0.3"]) == 1
    table = capsys.readouterr().out
    assert "gfx90a (env: gfx942)" in table
    assert "1 node(s) fail host.driver, tools.rocminfo: gpu-b" in table
    assert "rocminfo sees gfx90a; this environment is for gfx942" in table
    assert "gpu-c: GEMM" in table and "3 node(s): 1 pass, 1 fail, 1 slow" in table


def test_verify_slurm_on_a_partition_slurm_does_not_have_is_one_error(
        slurm_env: Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copy(REPO / "pixi.toml", tmp_path / "pixi.toml")
    prefix = tmp_path / ".pixi" / "envs" / "mi300x"
    (prefix / "conda-meta").mkdir(parents=True)
    _script(prefix / "bin" / "python", f"#!/bin/sh\nexec {sys.executable} \"$@\"\n")
    code = main(["verify", "-e", "mi300x", "--manifest-path", str(tmp_path / "pixi.toml"), "--slurm",
                 "--partition", "nosuch", "--reports", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == 1
    assert "error: srun ran no probe" in err and "invalid partition" in err.lower()
    assert "Traceback" not in err


# ----------------------------------------------------------------------------- build --slurm

WORKSPACE = """
[workspace]
name = "slurm-build"
channels = ["conda-forge"]
platforms = ["linux-64"]

[dependencies]
python = "3.12.*"
rocm-version = "7.2.*"
fleet-top = "*"

[feature.gfx90a.dependencies]
amdgpu-target = { version = "*", build = "gfx90a" }

[feature.gfx942.dependencies]
amdgpu-target = { version = "*", build = "gfx942" }

[environments]
mi250 = ["gfx90a"]
mi300x = ["gfx942"]
"""

# Two noarch recipes over the shipped metapackages: fleet-smoke needs rocm-version and the target's amdgpu-target
# and fails to build for gfx90a; fleet-top needs fleet-smoke.
FLEET_SMOKE = """
schema_version: 1
package:
  name: fleet-smoke
  version: "1"
build:
  number: 0
  noarch: generic
  string: ${{ gpu_target }}
  script: |
    if [ "${{ gpu_target }}" = gfx90a ]; then echo "fleet-smoke: no kernels for gfx90a" >&2; exit 3; fi
    mkdir -p "$PREFIX/share/fleet-smoke"
    echo ${{ gpu_target }} > "$PREFIX/share/fleet-smoke/target"
requirements:
  run:
    - rocm-version ${{ rocm_version }}.*
    - amdgpu-target * ${{ gpu_target }}
"""
FLEET_TOP = """
schema_version: 1
package:
  name: fleet-top
  version: "1"
build:
  number: 0
  noarch: generic
  string: ${{ gpu_target }}
  script:
    - mkdir -p "$PREFIX/share/fleet-top"
requirements:
  run:
    - fleet-smoke * ${{ gpu_target }}
"""


@pytest.fixture
def build_ws(tmp_path: Path) -> Path:
    """A workspace beside recipes/ (the shipped rocm-version and amdgpu-target, the two above) and tools/ (the data
    table amdgpu-target reads)."""
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    for name in ("rocm-version", "amdgpu-target"):
        (recipes / name).symlink_to(REPO / "recipes" / name)
    (tmp_path / "tools").symlink_to(REPO / "tools")
    for name, text in (("fleet-smoke", FLEET_SMOKE), ("fleet-top", FLEET_TOP)):
        (recipes / name).mkdir()
        (recipes / name / "recipe.yaml").write_text(textwrap.dedent(text))
    (recipes / "variants.yaml").write_text('rocm_version: ["7.2"]\ngpu_target: [gfx90a, gfx942]\npython: ["3.12"]\n')
    (tmp_path / "pixi.toml").write_text(WORKSPACE)
    return tmp_path / "pixi.toml"


def _build(manifest: Path, *extra: str) -> int:
    return main(["build", "--manifest-path", str(manifest), "--recipes-dir", str(manifest.parent / "recipes"),
                 "--output", str(manifest.parent / "output"), "--slurm", *extra])


def test_build_slurm_chains_jobs_afterok_and_names_what_never_ran(
        slurm_env: Cluster, build_ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = _build(build_ws, "--json")
    out, err = capsys.readouterr()
    assert code == 1, err
    report = json.loads(out)
    status = {v["id"]: v["status"] for v in report["variants"]}
    rocm = next(vid for vid in status if vid.startswith("rocm-version-7.2-"))
    assert status == {"amdgpu-target-1-gfx90a": "built", "amdgpu-target-1-gfx942": "built",
                      rocm: "built", "fleet-smoke-1-gfx90a": "failed",
                      "fleet-smoke-1-gfx942": "built", "fleet-top-1-gfx90a": "blocked",
                      "fleet-top-1-gfx942": "built"}, err
    output = build_ws.parent / "output"
    assert sorted(p.name for p in (output / "noarch").glob("*.conda")) == [
        "amdgpu-target-1-gfx90a.conda", "amdgpu-target-1-gfx942.conda", "fleet-smoke-1-gfx942.conda",
        "fleet-top-1-gfx942.conda", f"{rocm}.conda"]
    jobs = report["jobs"]
    # The chain: each job waits, afterok, on the jobs of the variants it needs.
    script = (output / "logs" / "slurm" / "fleet-smoke-1-gfx942.sbatch").read_text()
    dependency = next(line for line in script.splitlines() if line.startswith("#SBATCH --dependency="))
    assert dependency == f"#SBATCH --dependency=afterok:{jobs['amdgpu-target-1-gfx942']}:{jobs[rocm]}"
    assert "#SBATCH --cpus-per-task=1" in script and "--variant fleet-smoke-1-gfx942" in script
    # The failure's log names it; the dependent job is still pending, by Slurm's own verdict.
    assert "no kernels for gfx90a" in (output / "logs" / "fleet-smoke-1-gfx90a.log").read_text()
    assert report["never_ran"] == ["fleet-top-1-gfx90a"]
    never = {v["id"]: v["reason"] for v in report["variants"]}["fleet-top-1-gfx90a"]
    assert never.startswith("never ran: needs fleet-smoke-1-gfx90a, which failed") and "DependencyNeverSatisfied" in never
    queue = slurm_env.run("squeue", "--noheader", "--format=%i %T %r", f"--jobs={jobs['fleet-top-1-gfx90a']}").stdout
    assert queue.split() == [jobs["fleet-top-1-gfx90a"], "PENDING", "DependencyNeverSatisfied"]
    slurm_env.run("scancel", jobs["fleet-top-1-gfx90a"])


def test_build_slurm_summary_names_the_jobs_left_pending(
        slurm_env: Cluster, build_ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A second run submits only what is missing (the failed chain) and its text summary says what never ran."""
    output = build_ws.parent / "output"
    assert _build(build_ws, "-e", "mi300x") == 0
    capsys.readouterr()
    assert _build(build_ws) == 1
    out, err = capsys.readouterr()
    assert "already built in the output directory" in out
    assert "never ran (their dependency failed; Slurm keeps them PENDING, DependencyNeverSatisfied): " \
           "fleet-top-1-gfx90a" in out
    assert "remove them with: scancel " in out
    assert "submitted fleet-smoke-1-gfx90a" in err and "submitted amdgpu-target-1-gfx942" not in err
    assert not (output / "noarch" / "fleet-smoke-1-gfx90a.conda").exists()
    slurm_env.run("scancel", "--name=rocmlock-fleet-top-1-gfx90a")


def test_build_slurm_dry_run_prints_the_scripts_sized_by_the_partition(
        slurm_env: Cluster, build_ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _build(build_ws, "--dry-run", "--partition", "gpu", "--time", "2:00:00") == 0
    out, err = capsys.readouterr()
    scripts = out.split("#!/bin/bash\n")[1:]
    assert len(scripts) == 7 and "7 job(s) would be submitted" in err
    names = [s.splitlines()[0].removeprefix("#SBATCH --job-name=rocmlock-") for s in scripts]
    assert names[:2] + [n.rsplit("-", 1)[0] for n in names[2:]] == [  # plan order; build strings end in a hash
        "amdgpu-target-1-gfx90a", "amdgpu-target-1-gfx942", "rocm-version-7.2", "fleet-smoke-1", "fleet-smoke-1",
        "fleet-top-1", "fleet-top-1"]
    top = scripts[-1]
    assert "#SBATCH --dependency=afterok:<fleet-smoke-1-gfx942>" in top
    assert "#SBATCH --partition=gpu" in top and "#SBATCH --time=2:00:00" in top
    assert not (build_ws.parent / "output" / "logs").exists()  # nothing written, nothing submitted
    assert _build(build_ws, "--dry-run") == 0 and capsys.readouterr().out == out.replace(
        "#SBATCH --partition=gpu\n", "").replace("#SBATCH --time=2:00:00\n", "")
    # With --json, stdout is JSON alone (it was the scripts): the same scripts, and the jobs in plan order.
    assert _build(build_ws, "--dry-run", "--partition", "gpu", "--time", "2:00:00", "--json") == 0
    data = json.loads(capsys.readouterr().out)
    assert data["dry_run"] is True and len(data["jobs"]) == 7 and data["scripts"] + "\n" == out


# ----------------------------------------------------------------------------- without Slurm


def test_without_slurm_on_path_each_command_says_so_in_one_line(
        build_ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert _build(build_ws) == 1
    assert capsys.readouterr().err.splitlines() == [
        "error: Slurm is not on PATH: no sbatch, squeue, sinfo found (run this on a Slurm login node, or "
        + "`module load slurm`)"]
    verify_ws = tmp_path / "verify"
    verify_ws.mkdir()
    shutil.copy(REPO / "pixi.toml", verify_ws / "pixi.toml")
    prefix = verify_ws / ".pixi" / "envs" / "mi300x"
    (prefix / "bin").mkdir(parents=True)
    _script(prefix / "bin" / "python", "#!/bin/sh\nexit 0\n")
    assert main(["verify", "-e", "mi300x", "--manifest-path", str(verify_ws / "pixi.toml"), "--slurm"]) == 1
    assert capsys.readouterr().err.splitlines()[0].startswith("error: Slurm is not on PATH: no srun found")
    # A dry run needs no Slurm: the jobs are sized by this host.
    assert _build(build_ws, "--dry-run") == 0
    out, err = capsys.readouterr()
    assert "no sinfo found" in err and "the jobs of this dry run are sized by this host" in err
    assert out.count("#!/bin/bash\n") == 7


def test_credentials_in_the_channel_never_reach_a_batch_script(
        build_ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _build(build_ws, "--dry-run", "--channel", "https://bob:s3cret@conda.example.org/rocm") == 2
    out, err = capsys.readouterr()
    assert "its credentials would be written into every batch script" in err
    assert "s3cret" not in out + err


def test_task_reports_are_named_by_a_valid_unique_host_name_else_by_rank(tmp_path: Path) -> None:
    from rocmlock.fleet.slurm_verify import write_reports

    def task(rank: int, host: str) -> str:
        body = ["{", '  "checks": [', '    {"data": {', '      "hostname": "nested-trap"', "    }}", "  ],",
                f'  "hostname": "{host}",', '  "probe": "rocm-env-check"', "}"]
        return "\n".join(f"{rank}: {line}" for line in body)

    stdout = "\n".join([task(0, "gpu-a"), task(1, "dup"), task(2, "dup"), task(3, "bad\\u001b]0;x"), task(4, "")])
    stderr = "srun: error: gpu-e: task 4: Exited with exit code 1\n0: PASS: every required check passed\n"
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "stale.json").write_text("{}")  # an earlier run's
    written = write_reports(stdout, stderr, reports)
    assert [p.name for p in written] == ["gpu-a.json", "task-1.json", "task-2.json", "task-3.json", "task-4.json"]
    assert sorted(p.name for p in reports.iterdir()) == sorted(
        [p.name for p in written] + [p.name.replace(".json", ".log") for p in written])
    assert json.loads((reports / "gpu-a.json").read_text())["hostname"] == "gpu-a"
    assert (reports / "gpu-a.log").read_text() == "PASS: every required check passed\n"
    (reports / "notes.txt").write_text("mine")
    with pytest.raises(Exception, match="not a report directory"):
        write_reports(stdout, stderr, reports)
    # A node named like a fallback (task-1) beside a task 1 without a host name: one report was written over the
    # other, and a node was lost. A host name too long for a file name with its temporary suffix failed the write
    # after the directory was emptied. Each task keeps a file of its own.
    (reports / "notes.txt").unlink()
    stdout = "\n".join([task(0, "task-1"), task(1, ""), task(2, "h" * 253)])
    written = write_reports(stdout, "", reports)
    assert [p.name for p in written] == ["task-0.json", "task-1.json", "task-2.json"]
    assert json.loads((reports / "task-0.json").read_text())["hostname"] == "task-1"


@pytest.mark.parametrize(("stdout", "job"), [("123\n", "123"), ("4567;cluster-a\n", "4567"),
                                             ("note from a submit plugin\n89\n", "89")])
def test_the_job_id_of_sbatch_parsable(stdout: str, job: str) -> None:
    from rocmlock.util.slurm import parse_job_id

    assert parse_job_id(stdout) == job


def test_an_answer_of_sbatch_that_is_no_job_id_is_one_error() -> None:
    from rocmlock.errors import OperationError
    from rocmlock.util.slurm import parse_job_id

    with pytest.raises(OperationError, match="not a job id"):
        parse_job_id("Submitted batch job\n")


def test_waiting_settles_on_cancelled_and_purged_jobs(build_ws: Path, tmp_path: Path) -> None:
    """Without a cluster: a cluster with kill_invalid_depend cancels the dependent (CANCELLED, not PENDING), and a job
    that finished more than MinJobAge ago is gone from squeue; its own report then says what it did."""
    from rocmlock.build.builder import pending
    from rocmlock.build.plan import make_plan
    from rocmlock.build.slurm import Job, SlurmBuild, wait_jobs
    from rocmlock.util.runner import CommandResult
    from rocmlock.workspace.manifest import load_workspace

    plan = make_plan(load_workspace(build_ws), ["mi250"], recipes_dir=build_ws.parent / "recipes")
    output = tmp_path / "output"
    todo = {v.stage: v for v in pending(plan, output)}
    jobs = [Job(v, 1, 1024, tuple(d for d in v.depends_on if d in {t.id for t in todo.values()}), str(i))
            for i, v in enumerate(todo.values(), 1)]
    ids = {j.variant.stage: j.job_id for j in jobs}
    logs = output / "logs" / "slurm"
    logs.mkdir(parents=True)
    for stage in ("amdgpu-target", "rocm-version", "fleet-smoke"):
        v = todo[stage]
        status = "failed" if stage == "fleet-smoke" else "built"
        (logs / f"{v.id}.json").write_text(json.dumps({"variants": [
            {"id": v.id, "stage": stage, "status": status, "reason": "\x1b[31mboom" if status == "failed" else "",
             "seconds": 1.5, "log": None}]}))
    # squeue knows only the dependent now: the others were purged; kill_invalid_depend cancelled it.
    answer = f"{ids['fleet-top']}|CANCELLED|DependencyNeverSatisfied\n"

    timeouts = ["slurm_load_jobs error: Socket timed out on send/recv operation"] * 2  # a busy controller, twice

    def runner(argv, **kw):  # type: ignore[no-untyped-def]
        if timeouts:
            return CommandResult(tuple(argv), 1, "", timeouts.pop())
        return CommandResult(tuple(argv), 0, answer, "")

    build = SlurmBuild(build_ws, build_ws.parent / "recipes", output)
    logged: list[str] = []
    result = wait_jobs(jobs, plan, build, logged.append, runner=runner, sleep=lambda s: None)
    retry = "squeue failed (1): slurm_load_jobs error: Socket timed out on send/recv operation (trying again)"
    assert logged == [retry, retry]
    outcome = {o.stage: (o.status, o.reason) for o in result.report.outcomes}
    assert outcome["amdgpu-target"] == ("built", f"(Slurm job {ids['amdgpu-target']})")
    assert outcome["fleet-smoke"] == ("failed", f"\\x1b[31mboom (Slurm job {ids['fleet-smoke']})")
    never = f"never ran: needs {todo['fleet-smoke'].id}, which failed (Slurm job {ids['fleet-top']} CANCELLED)"
    assert outcome["fleet-top"] == ("blocked", never)
    assert result.never == ()  # nothing left pending: nothing to scancel


def test_a_refused_submission_cancels_the_jobs_submitted_before_it(
        slurm_env: Cluster, build_ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The real sbatch, every job held so none runs; Slurm refuses the third (a partition it does not have).
    from rocmlock.build.builder import pending
    from rocmlock.build.plan import make_plan
    from rocmlock.build.slurm import SlurmBuild, plan_jobs, submit_jobs
    from rocmlock.errors import OperationError
    from rocmlock.util.runner import run_command
    from rocmlock.workspace.manifest import load_workspace

    plan = make_plan(load_workspace(build_ws), ["mi250"], recipes_dir=build_ws.parent / "recipes")
    output = build_ws.parent / "output"
    jobs = plan_jobs(plan, output, (1, 1024), {})
    assert len(jobs) == len(pending(plan, output)) == 4
    calls: list[str] = []

    def runner(argv, **kw):  # type: ignore[no-untyped-def]
        if argv[0] == "sbatch":
            calls.append(argv[-1])
            argv = [*argv[:-1], "--hold", *(["--partition=nosuch"] if len(calls) == 3 else []), argv[-1]]
        return run_command(argv, **kw)

    build = SlurmBuild(build_ws, build_ws.parent / "recipes", output)
    with pytest.raises(OperationError, match=r"(?i)invalid partition.*the 2 job\(s\) submitted before it were cancelled"):
        submit_jobs(jobs, build, {}, lambda line: None, runner=runner)
    queued = slurm_env.run("squeue", "--noheader", "--states=PENDING,RUNNING", "--format=%j").stdout.split()
    assert not {f"rocmlock-{j.variant.id}" for j in jobs[:2]} & set(queued)


def test_job_size_is_the_builds_max_jobs_rule_on_the_partitions_node() -> None:
    from rocmlock.build.plan import Variant
    from rocmlock.build.slurm import job_size

    def variant(subdir: str) -> Variant:
        return Variant("pytorch-2.12.1-x", "pytorch", "recipes/pytorch-rocm/recipe.yaml", "2.12.1", "x", subdir,
                       (("gpu_target", "gfx942"),))

    node = (64, 256 * 1024)  # 64 CPUs, 256 GiB
    assert job_size(variant("linux-64"), node, {}) == (51, 51 * 5 * 1024)  # ~5 GiB per compile job
    assert job_size(variant("linux-64"), node, {"MAX_JOBS": "8"}) == (8, 8 * 5 * 1024)
    assert job_size(variant("linux-64"), node, {"MAX_JOBS": "128"}) == (64, 256 * 1024)  # never past the node
    assert job_size(variant("linux-64"), (16, 8 * 1024), {}) == (1, 5 * 1024)
    assert job_size(variant("noarch"), node, {"MAX_JOBS": "8"}) == (1, 5 * 1024)


def test_on_the_nodes_the_environments_own_probe_comes_first(tmp_path: Path) -> None:
    """Other nodes have the environment (shared or unpacked), not necessarily this checkout."""
    from rocmlock.fleet.verify import PREFIX_PROBE, REPO_PROBE, ProbeTarget, probe_script

    target = ProbeTarget("prefix", tmp_path, None, None, None)
    assert probe_script(target, prefer_prefix=True) == REPO_PROBE  # none in the prefix
    (tmp_path / PREFIX_PROBE).parent.mkdir(parents=True)
    (tmp_path / PREFIX_PROBE).write_text("")
    assert probe_script(target, prefer_prefix=True) == tmp_path / PREFIX_PROBE
    assert probe_script(target) == REPO_PROBE


def test_what_sbatch_would_expand_or_bash_would_run_is_refused(
        build_ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 33 items 15 and 16, and 14's `$`: sbatch expands %j (the job id), %x, ... in #SBATCH --output, so the
    summary named a log that did not exist; a `$(...)` in the output path runs in every job's build; a partition
    "gpu\\n" passed the `^...$` check and split the #SBATCH line."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # a dry run sized by this host: no Slurm needed
    for argv, message in (
            (["--output", str(tmp_path / "out-%j")], "holds a '%', which sbatch expands in the jobs' log path"),
            (["--output", str(tmp_path / "out$(id)")], "holds '$', which rattler-build's build script would run"),
            (["--partition", "gpu\n"], "Slurm's #SBATCH lines cannot hold spaces or quotes")):
        code = main(["build", "--manifest-path", str(build_ws), "--recipes-dir", str(build_ws.parent / "recipes"),
                     "--slurm", "--dry-run", "--output", str(build_ws.parent / "output"), *argv])
        out, err = capsys.readouterr()
        errors = [line for line in err.splitlines() if line.startswith("error: ")]
        assert code == 2 and len(errors) == 1 and message in errors[0], err
        assert "#!/bin/bash" not in out
