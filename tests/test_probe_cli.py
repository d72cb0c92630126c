"""`rocmlock verify`: the probe runs with the environment's python and the workspace's expectations."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hostpython import python_shim
from rocmlock.cli.main import main
from rocmlock.fleet.verify import REPO_PROBE, probe_command, resolve_target, rocm_from_spec

REPO = Path(__file__).resolve().parents[1]


def fake_env(prefix: Path, packages: dict[str, tuple[str, str]] | None = None) -> Path:
    """A prefix whose bin/python is this interpreter and whose conda-meta lists ``packages``."""
    (prefix / "bin").mkdir(parents=True)
    python_shim(prefix / "bin" / "python")
    (prefix / "conda-meta").mkdir()
    for name, (version, build) in (packages or {}).items():
        (prefix / "conda-meta" / f"{name}-{version}-{build}.json").write_text(
            json.dumps({"name": name, "version": version, "build": build}))
    return prefix


def test_fake_env_python_is_this_interpreter_with_its_packages(tmp_path: Path) -> None:
    # In a venv, a symlink to sys.executable outside the venv starts the base interpreter (no pyvenv.cfg
    # beside it) and loses the venv's site-packages; the suite must behave the same in a venv.
    prefix = fake_env(tmp_path / "env")
    code = "import sys; print(sys.prefix)"
    out = subprocess.run([str(prefix / "bin" / "python"), "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == sys.prefix


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    shutil.copy(REPO / "pixi.toml", tmp_path / "pixi.toml")
    return tmp_path / "pixi.toml"


def test_environment_not_installed_says_pixi_install(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", "-e", "mi300x", "--manifest-path", str(workspace)]) == 1
    err = capsys.readouterr().err
    assert f"environment 'mi300x' is not installed: no python at {workspace.parent}/.pixi/envs/mi300x/bin/python" in err
    hint = next(line for line in err.splitlines() if line.startswith("hint: "))
    # Both ways to install it, and how to verify a prefix rocmlock installed (issue 26: only pixi was named).
    assert f"`pixi install -e mi300x --manifest-path {workspace}`" in hint
    assert f"`rocmlock install -e mi300x --prefix DIR --manifest-path {workspace}`" in hint
    assert "`rocmlock verify --prefix DIR`" in hint


def test_environment_gets_target_rocm_and_peak_from_the_workspace(workspace: Path) -> None:
    prefix = fake_env(workspace.parent / ".pixi" / "envs" / "mi300x")
    target = resolve_target(workspace, "mi300x", None)
    assert (target.expect_arch, target.expect_rocm, target.peak_tflops) == ("gfx942", "7.2", 1307.0)
    assert probe_command(target, json_out=True, train=True) == [
        str(prefix / "bin" / "python"), str(REPO_PROBE), "--prefix", str(prefix), "--expect-arch", "gfx942",
        "--expect-rocm", "7.2", "--peak-tflops", "1307", "--json", "--train"]


def test_verify_runs_the_probe_with_the_environment_python(
        workspace: Path, capfd: pytest.CaptureFixture[str]) -> None:
    prefix = fake_env(workspace.parent / ".pixi" / "envs" / "mi250")
    code = main(["verify", "-e", "mi250", "--manifest-path", str(workspace), "--json"])
    out, err = capfd.readouterr()
    report = json.loads(out)
    assert code == 1 and report["ok"] is False  # no GPU here, CPU torch
    assert report["prefix"] == str(prefix)
    assert report["expected"] == {"arch": "gfx90a", "arch_source": "--expect-arch", "rocm": "7.2",
                                  "rocm_source": "--expect-rocm"}
    assert f"> {prefix}/bin/python {REPO_PROBE} --prefix {prefix} --expect-arch gfx90a" in err
    assert "FAIL     torch.build" in err


def test_prefix_expectations_come_from_its_conda_meta(tmp_path: Path) -> None:
    prefix = fake_env(tmp_path / "env", {"amdgpu-target": ("1", "gfx90a"), "rocm-version": ("7.2", "0")})
    target = resolve_target(Path("pixi.toml"), None, prefix)
    assert (target.expect_arch, target.expect_rocm, target.peak_tflops) == ("gfx90a", "7.2", 383.0)


def test_a_conda_meta_record_that_is_no_json_object_is_skipped(tmp_path: Path) -> None:
    # Valid JSON that is no object was read with .get() (an AttributeError traceback from `rocmlock verify
    # --prefix`): it is skipped like unreadable JSON, and the real record beside it counts.
    prefix = fake_env(tmp_path / "env", {"amdgpu-target": ("1", "gfx90a")})
    (prefix / "conda-meta" / "amdgpu-target-0-gfx942.json").write_text("[]")  # sorts before the real one
    (prefix / "conda-meta" / "rocm-version-7.2-0.json").write_text("null")
    target = resolve_target(Path("pixi.toml"), None, prefix)
    assert (target.expect_arch, target.expect_rocm) == ("gfx90a", None)


def test_active_conda_prefix_is_the_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capfd: pytest.CaptureFixture[str]) -> None:
    prefix = fake_env(tmp_path / "env", {"amdgpu-target": ("1", "gfx1100")})
    monkeypatch.setenv("CONDA_PREFIX", str(prefix))
    assert main(["verify", "--json"]) == 1
    report = json.loads(capfd.readouterr().out)
    assert report["expected"]["arch"] == "gfx1100" and report["prefix"] == str(prefix)


def test_prefix_without_python_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", "--prefix", str(tmp_path)]) == 1
    assert f"{tmp_path}: no python at {tmp_path}/bin/python" in capsys.readouterr().err
    # A path that is no directory is bad input (2), as for install, unpack and audit; it was 1, "no python at
    # pixi.toml/bin/python".
    (tmp_path / "pixi.toml").write_text("")
    for wrong, says in ((tmp_path / "pixi.toml", "not a directory"), (tmp_path / "missing", "no such directory")):
        assert main(["verify", "--prefix", str(wrong)]) == 2
        assert capsys.readouterr().err.splitlines()[0] == f"error: --prefix {wrong}: {says}"


@pytest.mark.parametrize(("argv", "message"), [
    (["-e", "mi300x", "--prefix", "/x"], "pass either -e/--environment or --prefix, not both"),
    ([], "no environment to verify"),
    (["-e", "nosuch"], "unknown environment 'nosuch'"),
])
def test_bad_input_exits_2(workspace: Path, argv: list[str], message: str,
                           capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", "--manifest-path", str(workspace), *argv]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(("spec", "version"), [("7.2.*", "7.2"), (">=6.4,<6.5", "6.4"), ("*", None)])
def test_rocm_version_from_a_spec(spec: str, version: str | None) -> None:
    assert rocm_from_spec(spec) == version


def test_the_probes_table_is_the_result_on_stdout(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """Issue 44: `rocm-env-check > report.txt` and `rocmlock verify --prefix ... | less` captured 0 bytes; the
    table is the result (stdout), the command line run and errors are for people (stderr). With --json the report
    is the result and the table goes to stderr."""
    prefix = fake_env(tmp_path / "env", {"amdgpu-target": ("1", "gfx90a")})
    capfd.readouterr()
    assert main(["verify", "--prefix", str(prefix)]) == 1  # no GPU here
    out, err = capfd.readouterr()
    assert out.startswith("rocm-env-check ") and "STATUS   CHECK" in out
    assert out.rstrip().splitlines()[-1].startswith("FAIL: ")
    # stderr: the command run, and what libraries print (DeepSpeed's accelerator warning), never the table.
    assert err.splitlines()[0] == (f"> {prefix}/bin/python {REPO_PROBE} --prefix {prefix} --expect-arch gfx90a "
                                   "--peak-tflops 383")
    assert "STATUS" not in err and "FAIL" not in err
    # The probe itself, as `rocm-env-check > report.txt` runs it.
    report = tmp_path / "report.txt"
    with report.open("w") as stdout:
        proc = subprocess.run([sys.executable, str(REPO_PROBE), "--prefix", str(prefix), "--only", "host"],
                              stdout=stdout, stderr=subprocess.PIPE, text=True, check=False)
    assert proc.returncode == 1 and proc.stderr == ""
    assert "STATUS   CHECK" in report.read_text() and "FAIL     host.devices" in report.read_text()
    proc = subprocess.run([sys.executable, str(REPO_PROBE), "--prefix", str(prefix), "--only", "host", "--json"],
                          capture_output=True, text=True, check=False)
    assert json.loads(proc.stdout)["ok"] is False and "STATUS   CHECK" in proc.stderr
