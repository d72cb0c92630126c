"""build-variants.yml is least-privilege, checked from the YAML so a regression fails without zizmor too.

zizmor (`.ci/run`) audits the same file; these tests pin the properties the trust model of docs/building-publishing.md states:
per-job permissions (write only in `pull-request`), actions pinned by commit, checkouts that do not persist
the token, matrix/output values reaching scripts only through `env:`, secrets only in jobs bound to a
deployment environment, and rattler's auth file outside the workspace and removed in an `always()` step.
The shell the workflow runs is executed here with bash (`defaults.run.shell: bash`; GitHub runs it as
`bash --noprofile --norc -eo pipefail {0}`).
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
WORKFLOW = REPO / ".github" / "workflows" / "build-variants.yml"
AUTH_PATH = '"$RUNNER_TEMP/rattler-auth.json"'
UPLOAD_SECRETS = {"PREFIX_API_KEY", "QUETZ_API_KEY", "ARTIFACTORY_TOKEN", "ANACONDA_API_KEY", "AWS_ACCESS_KEY_ID",
                  "AWS_SECRET_ACCESS_KEY"}
PINNED = re.compile(r"^\s*(?:-\s+)?uses:\s+([\w.-]+/[\w.-]+)@([0-9a-f]{40}) # v\d+\.\d+\.\d+\s*$")


@pytest.fixture(scope="module")
def workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


def _steps(workflow: dict) -> list[tuple[str, dict]]:
    return [(name, step) for name, job in workflow["jobs"].items() for step in job["steps"]]


def _secrets(value: object) -> set[str]:
    return set(re.findall(r"secrets\.(\w+)", str(value)))


def test_permissions_are_per_job_and_write_only_where_the_pull_request_is_opened(workflow: dict) -> None:
    assert workflow["permissions"] == {}
    for name, job in workflow["jobs"].items():
        expected = ({"contents": "write", "pull-requests": "write"} if name == "pull-request"
                    else {"contents": "read"})
        assert job["permissions"] == expected, name


def test_every_action_is_pinned_to_a_commit_with_its_version_in_a_comment(workflow: dict) -> None:
    uses_lines = [line for line in WORKFLOW.read_text().splitlines() if re.match(r"^\s*(-\s+)?uses:", line)]
    assert uses_lines and all(PINNED.match(line) for line in uses_lines), uses_lines
    # The same action at the same commit everywhere (one place to bump).
    sha_of: dict[str, set[str]] = {}
    for line in uses_lines:
        action, sha = PINNED.match(line).groups()  # type: ignore[union-attr]
        sha_of.setdefault(action, set()).add(sha)
    assert all(len(shas) == 1 for shas in sha_of.values()), sha_of
    assert len(uses_lines) == sum(1 for _, step in _steps(workflow) if "uses" in step)


def test_checkouts_do_not_persist_the_token(workflow: dict) -> None:
    checkouts = [step for _, step in _steps(workflow) if step.get("uses", "").startswith("actions/checkout@")]
    assert len(checkouts) == len(workflow["jobs"])
    assert all(step["with"]["persist-credentials"] is False for step in checkouts)


def test_no_expression_is_expanded_inside_a_script(workflow: dict) -> None:
    for job, step in _steps(workflow):
        assert "${{" not in step.get("run", ""), (job, step["run"])


def test_secrets_live_in_step_env_of_jobs_bound_to_an_environment(workflow: dict) -> None:
    assert "secrets" not in str(workflow.get("env", "")), "no workflow-wide secret"
    for name, job in workflow["jobs"].items():
        outside_steps = {k: v for k, v in job.items() if k != "steps"}
        assert not _secrets(outside_steps), name
        used = set().union(*(_secrets(step.get("env", {})) for step in job["steps"]))
        assert not any(_secrets({k: v for k, v in s.items() if k != "env"}) for s in job["steps"]), name
        if name == "pull-request":
            assert not used and "environment" not in job
            runs = [step["run"] for step in job["steps"] if "run" in step]
            assert all(line.startswith(("cp ", "mkdir ")) for run in runs for line in run.splitlines()), runs
        else:
            assert used and job["environment"] == ("channel-publish" if name == "publish" else "channel-read")
        assert bool(used & UPLOAD_SECRETS) == (name == "publish"), name


def test_auth_file_is_outside_the_workspace_and_removed_always(workflow: dict) -> None:
    assert "RATTLER_AUTH_FILE" not in str(workflow.get("env", ""))
    for name, job in workflow["jobs"].items():
        runs = [step.get("run", "") for step in job["steps"]]
        writes = [i for i, run in enumerate(runs) if "$AUTH_JSON" in run]
        if name == "pull-request":
            assert not writes
            continue
        assert len(writes) == 1, name
        assert f"> {AUTH_PATH}" in runs[writes[0]] and "umask 077" in runs[writes[0]]
        removal = next(i for i, step in enumerate(job["steps"]) if step.get("run") == f"rm -f {AUTH_PATH}")
        assert job["steps"][removal]["if"] == "always()"
        rocmlock_steps = [i for i, run in enumerate(runs) if re.search(r"^\s*rocmlock ", run, re.MULTILINE)]
        assert rocmlock_steps and writes[0] < min(rocmlock_steps) and max(rocmlock_steps) < removal, name


def test_pull_request_job_runs_after_a_run_with_nothing_to_build(workflow: dict) -> None:
    # success() of a job looks at every job upstream, so a skipped build would skip it (actions/runner#2205).
    job = workflow["jobs"]["pull-request"]
    assert job["needs"] == "relock"
    # A cancelled run relocks nothing (always() would run relock after a cancel too).
    assert workflow["jobs"]["relock"]["if"].startswith("${{ !cancelled() && ")
    assert job["if"] == "${{ !cancelled() && needs.relock.result == 'success' }}"
    cpr = next(s for s in job["steps"] if s.get("uses", "").startswith("peter-evans/create-pull-request@"))
    assert cpr["with"]["add-paths"].split() == ["pixi.lock", "envs/**"]  # whatever else the artifact holds


def _step(workflow: dict, job: str, name_prefix: str) -> dict:
    return next(s for s in workflow["jobs"][job]["steps"] if s.get("name", "").startswith(name_prefix))


def _bash(script: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script], cwd=cwd,
                          env={"PATH": os.environ["PATH"], **env}, capture_output=True, text=True, check=False)


def test_auth_file_steps_write_then_remove_it(workflow: dict, tmp_path: Path) -> None:
    workspace, temp = tmp_path / "ws", tmp_path / "runner-temp"
    workspace.mkdir()
    temp.mkdir()
    github_env = tmp_path / "github_env"
    env = {"RUNNER_TEMP": str(temp), "GITHUB_ENV": str(github_env), "AUTH_JSON": '{"s3://b": {"S3Credentials": 1}}'}
    write = _step(workflow, "build", "Write rattler's auth file")
    assert _bash(write["run"], workspace, env).returncode == 0
    auth = temp / "rattler-auth.json"
    assert auth.read_text() == env["AUTH_JSON"] and stat.S_IMODE(auth.stat().st_mode) == 0o600
    assert github_env.read_text() == f"RATTLER_AUTH_FILE={auth}\n" and not list(workspace.iterdir())
    remove = next(s for s in workflow["jobs"]["build"]["steps"] if s.get("if") == "always()" and "run" in s)
    assert _bash(remove["run"], workspace, env).returncode == 0 and not auth.exists()


def _fake_rocmlock(tmp_path: Path) -> tuple[Path, Path]:
    bindir, argv_file = tmp_path / "bin", tmp_path / "argv"
    bindir.mkdir()
    fake = bindir / "rocmlock"
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" >> {argv_file}\n')
    fake.chmod(0o755)
    return bindir, argv_file


HOSTILE = "-e mi300x -e $(touch${IFS}pwned) -e `touch pwned2`;touch pwned3 -e *"
HOSTILE_ARGS = ["-e", "mi300x", "-e", "$(touch${IFS}pwned)", "-e", "`touch", "pwned2`;touch", "pwned3", "-e", "*"]


@pytest.mark.parametrize("step_prefix, expected", [
    ("Doctor", ["doctor", "--build", *HOSTILE_ARGS]),
    ("Build ", ["build", *HOSTILE_ARGS, "--channel", "s3://b/p", "--output", "output", "--keep-going"]),
])
def test_matrix_environments_are_arguments_never_shell_code(workflow: dict, tmp_path: Path, step_prefix: str,
                                                            expected: list[str]) -> None:
    bindir, argv_file = _fake_rocmlock(tmp_path)
    (tmp_path / "a-file").write_text("")  # an unquoted * would expand to it
    step = _step(workflow, "build", step_prefix)
    assert step["env"]["ENVIRONMENTS"] == "${{ matrix.environments }}"
    env = {"PATH": f"{bindir}:{os.environ['PATH']}", "CHANNEL": "s3://b/p", "ENVIRONMENTS": HOSTILE}
    result = _bash(step["run"], tmp_path, env)
    assert result.returncode == 0, result.stderr
    assert argv_file.read_text().splitlines() == expected
    assert not list(tmp_path.glob("pwned*"))


def test_merge_step_keeps_one_copy_of_each_package_and_no_logs(workflow: dict, tmp_path: Path) -> None:
    files = {
        "artifacts/packages-gfx90a/noarch/meta-1-0.conda": "first",
        "artifacts/packages-gfx90a/linux-64/torch-2-gfx90a.conda": "a",
        "artifacts/packages-gfx90a/logs/torch.log": "log",
        "artifacts/packages-gfx942/noarch/meta-1-0.conda": "second",
        "artifacts/packages-gfx942/linux-64/torch-2-gfx942.tar.bz2": "b",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    result = _bash(_step(workflow, "publish", "Merge")["run"], tmp_path, {})
    assert result.returncode == 0, result.stderr
    merged = sorted(str(p.relative_to(tmp_path / "merged")) for p in (tmp_path / "merged").rglob("*") if p.is_file())
    assert merged == ["linux-64/torch-2-gfx90a.conda", "linux-64/torch-2-gfx942.tar.bz2", "noarch/meta-1-0.conda"]
    assert (tmp_path / "merged/noarch/meta-1-0.conda").read_text() == "first"


def test_pull_request_job_takes_only_the_lock_files_from_the_artifact(workflow: dict, tmp_path: Path) -> None:
    # The relock job ran PyPI code: its artifact lands outside the checkout, and only pixi.lock and envs/ enter it.
    job = workflow["jobs"]["pull-request"]
    download = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/download-artifact@"))
    assert download["with"]["path"] == "${{ runner.temp }}/relock"
    workspace, artifact = tmp_path / "ws", tmp_path / "temp" / "relock"
    (workspace / ".git" / "hooks").mkdir(parents=True)
    (workspace / "envs" / "old").mkdir(parents=True)
    (workspace / "envs" / "old" / "environment.yml").write_text("old")
    (workspace / "pixi.lock").write_text("old")
    for rel, text in {"pixi.lock": "new", "envs/mi300x/environment.yml": "env", ".git/hooks/post-commit": "evil",
                      "setup.py": "evil"}.items():
        (artifact / rel).parent.mkdir(parents=True, exist_ok=True)
        (artifact / rel).write_text(text)
    result = _bash(_step(workflow, "pull-request", "Take pixi.lock")["run"], workspace,
                   {"RUNNER_TEMP": str(tmp_path / "temp")})
    assert result.returncode == 0, result.stderr
    files = sorted(str(p.relative_to(workspace)) for p in workspace.rglob("*") if p.is_file())
    assert files == ["envs/mi300x/environment.yml", "envs/old/environment.yml", "pixi.lock"]
    assert (workspace / "pixi.lock").read_text() == "new"
