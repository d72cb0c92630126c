"""The example CI workflow: plan -> matrix from `rocmlock plan --json` -> self-hosted builds -> publish -> relock
-> pull request. Its security properties: tests/test_workflow_security.py."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from rocmlock.cli import build_parser, main
from rocmlock.targets import all_targets

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
    assert set(jobs["relock"]["needs"]) == {"plan", "publish"}
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
