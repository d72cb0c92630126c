"""The example CI workflow: plan -> matrix from `rocmlock plan --json` -> self-hosted builds -> publish -> relock
-> pull request. Its security properties: tests/test_workflow_security.py."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from rocmlock.cli.main import build_parser, main
from rocmlock.gpu.targets import all_targets

REPO = Path(__file__).resolve().parent.parent
WORKFLOW = REPO / ".github" / "workflows" / "build-variants.yml"
MATRIX_SCRIPT = REPO / ".github" / "scripts" / "plan_matrix.py"


@pytest.fixture(scope="module")
def workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


def _steps_text(job: dict) -> str:
    return "\n".join(str(s.get("run", "")) for s in job["steps"])


def test_jobs_and_their_order(workflow: dict) -> None:
    jobs = workflow["jobs"]
    assert list(jobs) == ["plan", "build", "publish", "relock", "pull-request"]
    assert jobs["build"]["needs"] == "plan"
    assert jobs["publish"]["needs"] == "build"
    assert set(jobs["relock"]["needs"]) == {"plan", "build", "publish"}
    assert jobs["pull-request"]["needs"] == "relock"
    triggers = workflow.get(True) or workflow.get("on")  # YAML 1.1 reads the key `on` as True
    assert "workflow_dispatch" in triggers


def test_build_matrix_comes_from_the_plan(workflow: dict) -> None:
    plan, build = workflow["jobs"]["plan"], workflow["jobs"]["build"]
    assert plan["outputs"]["matrix"] == "${{ steps.plan.outputs.matrix }}"
    plan_step = next(s for s in plan["steps"] if s.get("id") == "plan")
    assert "rocmlock plan --json" in plan_step["run"] and ".github/scripts/plan_matrix.py" in plan_step["run"]
    assert build["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.matrix) }}"
    assert build["strategy"]["fail-fast"] is False
    assert build["runs-on"] == "${{ matrix.runs_on }}"
    assert build["if"] == "needs.plan.outputs.any == 'true'"
    text = _steps_text(build)
    assert "rocmlock doctor --build" in text and text.index("rocmlock doctor") < text.index("rocmlock build")
    assert "--channel" in text


def test_publish_and_relock_steps(workflow: dict) -> None:
    assert "rocmlock publish --from merged" in _steps_text(workflow["jobs"]["publish"])
    relock, pull_request = workflow["jobs"]["relock"], workflow["jobs"]["pull-request"]
    assert "rocmlock lock" in _steps_text(relock)
    upload = next(s for s in relock["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact@"))
    download = next(s for s in pull_request["steps"] if str(s.get("uses", "")).startswith("actions/download-artifact@"))
    assert upload["with"]["name"] == download["with"]["name"] and download["with"]["path"] == "${{ runner.temp }}/relock"
    assert upload["with"]["path"].split() == ["pixi.lock", "envs/"]
    pr = next(s for s in pull_request["steps"] if str(s.get("uses", "")).startswith("peter-evans/create-pull-request"))
    assert "pixi.lock" in pr["with"]["add-paths"] and "envs/**" in pr["with"]["add-paths"]


def test_every_rocmlock_command_in_the_workflow_parses(workflow: dict) -> None:
    parser = build_parser()
    found = 0
    for job in workflow["jobs"].values():
        for line in _steps_text(job).splitlines():
            line = line.strip()
            if not line.startswith("rocmlock "):
                continue
            line = line.replace('"${environments[@]}"', "-e mi300x").split(">")[0]  # from matrix.environments
            parser.parse_args(shlex.split(line)[1:])
            found += 1
    assert found >= 5


def test_secrets_are_never_echoed(workflow: dict) -> None:
    for job in workflow["jobs"].values():
        for step in job["steps"]:
            assert "secrets." not in str(step.get("run", "")), step


def _matrix(plan_json: Path) -> dict[str, str]:
    out = subprocess.run([sys.executable, str(MATRIX_SCRIPT), str(plan_json)], capture_output=True, text=True,
                         check=True).stdout
    return dict(line.split("=", 1) for line in out.splitlines())


def test_matrix_from_the_shipped_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--json", "--manifest-path", str(REPO / "pixi.toml")]) == 0
    plan = json.loads(capsys.readouterr().out)
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    outputs = _matrix(tmp_path / "plan.json")
    assert outputs["any"] == "true"
    include = json.loads(outputs["matrix"])["include"]
    assert [e["target"] for e in include] == sorted(e["target"] for e in include)
    envs_seen = set()
    for entry in include:
        assert entry["target"] in all_targets()
        assert entry["runs_on"] == ["self-hosted", "linux", "x64", "rocm", entry["target"]]
        args = build_parser().parse_args(["build", *shlex.split(entry["environments"])])
        envs_seen |= set(args.environments)
        assert entry["variants"] > 0
    planned_envs = {e for v in plan["variants"] for e in v["environments"]}
    assert envs_seen == planned_envs


def test_matrix_is_empty_when_everything_is_present(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--json", "--manifest-path", str(REPO / "pixi.toml")]) == 0
    plan = json.loads(capsys.readouterr().out)
    for v in plan["variants"]:
        v["present"] = True
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    outputs = _matrix(tmp_path / "plan.json")
    assert outputs["any"] == "false" and json.loads(outputs["matrix"]) == {"include": []}


def test_noarch_only_group_runs_on_a_hosted_runner(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--json", "--manifest-path", str(REPO / "pixi.toml")]) == 0
    plan = json.loads(capsys.readouterr().out)
    for v in plan["variants"]:
        v["present"] = v["subdir"] != "noarch"  # only the metapackages and noarch packages are missing
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    include = json.loads(_matrix(tmp_path / "plan.json")["matrix"])["include"]
    assert include and all(e["runs_on"] == ["ubuntu-latest"] for e in include)


# ----------------------------------------------------------------------------- which jobs run after what
#
# GitHub's job-level `if` evaluated over job results, to check the chain plan -> build -> publish -> relock ->
# pull-request against the outcomes a run can have. Semantics (docs.github.com "Evaluate expressions in workflows",
# status check functions; actions/runner#2205): a job whose `if` names no status function runs only when
# `success()`; `success()` is true when every job upstream (transitively) succeeded, so a skipped job upstream makes
# it false; `!cancelled()` alone runs after failures and skips; a job that does not run has result 'skipped'.

_TOKEN = re.compile(r"\s*(?:(?P<op>&&|\|\||==|!=|!|\(|\))|'(?P<str>[^']*)'|(?P<fn>[a-z]+)\(\)"
                    r"|(?P<ref>[A-Za-z_][\w.-]*))")
_STATUS_FUNCTIONS = ("success()", "failure()", "always()", "cancelled()")


def _needs(job: dict) -> list[str]:
    needs = job.get("needs", [])
    return [needs] if isinstance(needs, str) else list(needs)


def _evaluate(expr: str, context: dict[str, object], functions: dict[str, bool]) -> bool:
    """``expr`` (GitHub expression syntax, the subset the workflow uses) as Python, then evaluated."""
    expr = expr.strip().removeprefix("${{").removesuffix("}}")
    python, pos = [], 0
    while pos < len(expr.rstrip()):
        m = _TOKEN.match(expr, pos)
        assert m, f"cannot read {expr[pos:]!r}"
        pos = m.end()
        if m["op"]:
            python.append({"&&": "and", "||": "or", "!": "not"}.get(m["op"], m["op"]))
        elif m["str"] is not None:
            python.append(repr(m["str"]))
        elif m["fn"]:
            python.append(repr(functions[m["fn"]]))
        else:
            value: object = context
            for part in m["ref"].split("."):
                value = value.get(part, "") if isinstance(value, dict) else ""
            python.append(repr(value))
    return bool(eval(" ".join(python), {"__builtins__": {}}))  # the tokens above: literals and operators only


def _run_jobs(jobs: dict, outcomes: dict[str, str], outputs: dict[str, dict[str, str]],
              cancelled: bool = False) -> dict[str, str]:
    """Each job's result: ``outcomes[job]`` for a job that runs ('success' unless given), else 'skipped'."""
    results: dict[str, str] = {}

    def upstream(name: str) -> set[str]:
        direct = set(_needs(jobs[name]))
        return direct.union(*(upstream(n) for n in direct))

    for name, job in jobs.items():  # the workflow lists them in dependency order
        above = [results[n] for n in upstream(name)]
        functions = {"success": not cancelled and all(r == "success" for r in above),
                     "failure": any(r == "failure" for r in above), "always": True, "cancelled": cancelled}
        condition = str(job.get("if", "success()"))
        if not any(f in condition for f in _STATUS_FUNCTIONS):
            condition = f"success() && ({condition.strip().removeprefix('${{').removesuffix('}}')})"
        context = {"needs": {n: {"result": results[n], "outputs": outputs.get(n, {})} for n in _needs(job)}}
        runs = _evaluate(condition, context, functions)
        results[name] = outcomes.get(name, "success") if runs else "skipped"
    return results


ANY = {"plan": {"any": "true"}}
NOTHING = {"plan": {"any": "false"}}


@pytest.mark.parametrize(("outcomes", "outputs", "relocks"), [
    ({}, ANY, True),  # every build and the publish succeeded
    ({}, NOTHING, True),  # nothing to build: relock anyway, the channel may have changed under the lock
    ({"build": "failure"}, ANY, False),  # one target failed (a matrix job fails when any leg fails)
    ({"build": "cancelled"}, ANY, False),  # a build timed out / was cancelled
    ({"publish": "failure"}, ANY, False),
    ({"plan": "failure"}, ANY, False),
])
def test_relock_runs_only_when_every_build_and_the_publish_succeeded(
        workflow: dict, outcomes: dict[str, str], outputs: dict[str, dict[str, str]], relocks: bool) -> None:
    # A relock after a failed build would lock against a channel without that target's packages: the solve
    # falls back to other builds or fails, and the pull request would carry that lock.
    results = _run_jobs(workflow["jobs"], outcomes, outputs)
    assert (results["relock"] == "success") is relocks, results
    assert (results["pull-request"] == "success") is relocks, results
    if outcomes.get("build") in ("failure", "cancelled"):
        assert results["publish"] == "skipped", "nothing is published from a run where a build failed"


def test_a_cancelled_run_relocks_nothing(workflow: dict) -> None:
    results = _run_jobs(workflow["jobs"], {"build": "cancelled"}, ANY, cancelled=True)
    assert results["relock"] == results["pull-request"] == "skipped", results


def test_the_job_simulation_reads_the_conditions() -> None:
    # The evaluator itself: precedence (&& before ||), negation, a missing output as ''.
    ctx = {"needs": {"a": {"result": "failure", "outputs": {}}}}
    fns = {"success": False, "failure": True, "always": True, "cancelled": False}
    assert _evaluate("${{ !cancelled() && needs.a.result != 'success' }}", ctx, fns)
    assert _evaluate("needs.a.outputs.any != 'true' || needs.a.result == 'success' && failure()", ctx, fns)
    assert not _evaluate("(needs.a.outputs.any == 'true' || success()) && always()", ctx, fns)


@pytest.mark.parametrize(("channel", "read"), [
    ("quetz+https://quetz.example.com/rocm", "https://quetz.example.com/get/rocm"),
    ("artifactory+https://host.example.com/artifactory/rocm", "https://host.example.com/artifactory/rocm"),
    ("anaconda://team", "https://conda.anaconda.org/team"),
    ("prefix://team-rocm", "https://repo.prefix.dev/team-rocm"),
    ("https://prefix.dev/team-rocm", "https://repo.prefix.dev/team-rocm"),
    ("s3://bucket/rocm", "s3://bucket/rocm"),
    ("https://conda.example.com/rocm", "https://conda.example.com/rocm"),
])
def test_the_workflows_one_channel_value_is_read_by_plan_and_build(tmp_path: Path, channel: str, read: str) -> None:
    # build-variants.yml passes $ROCMLOCK_CHANNEL to `plan --channel`, `build --channel` and `publish --to`:
    # every `--to` form must name the channel those two read (quetz serves it under /get/<channel>).
    from rocmlock.build.builder import build_channels
    from rocmlock.build.plan import channel_read_url
    from rocmlock.workspace.manifest import load_workspace

    (tmp_path / "pixi.toml").write_text('[workspace]\nname = "t"\nchannels = ["conda-forge"]\nplatforms = ["linux-64"]\n')
    assert channel_read_url(channel) == read
    assert build_channels(load_workspace(tmp_path / "pixi.toml"), channel)[0] == read
