"""A pixi workspace in pyproject.toml (``[tool.pixi]``), read as pixi 0.77 reads it.

Rules from pixi v0.77.0 crates/pixi_manifest/src/pyproject.rs (``into_workspace_manifest``: name from
``[project]``, a python dependency from ``requires-python``, ``[project] dependencies`` / extras / dependency
groups as PyPI dependencies of the default feature / of features of their name) and discovery.rs (a
directory's pixi.toml first, then a pyproject.toml with ``[tool.pixi]``). Five of the 54 pixi.lock
workspaces in pixi's examples/ are such files (docker, pybind11, detectron2-from-source, ...).
Costs about 3 s (one small solve).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pixilock import write_pixi_lock
from rocmlock.cli.main import main
from rocmlock.lock.lockfile import LockedPlatform
from rocmlock.workspace.manifest import load_workspace

LINUX = LockedPlatform("linux-64", "linux-64", ("__unix=0=0", "__linux=4.18", "__glibc=2.28"))


def _pyproject(root: Path, forge: Path, project: str = "", tool: str = "") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    path = root / "pyproject.toml"
    path.write_text(f'[project]\nname = "pyp-demo"\nversion = "0.1.0"\n{project}\n'
                    f'[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n\n'
                    f'[tool.pixi.workspace]\nchannels = ["{forge.as_uri()}"]\nplatforms = ["linux-64"]\n\n{tool}')
    return path


def test_pyproject_workspace_takes_name_python_and_features_from_the_standard_tables(
        tmp_path: Path, channels: dict[str, Path]) -> None:
    path = _pyproject(tmp_path, channels["forge"],
                      'requires-python = ">= 3.12"\ndependencies = ["rich"]\n'
                      '[project.optional-dependencies]\ntest = ["pytest"]\n\n[dependency-groups]\nlint = ["ruff"]\n',
                      '[tool.pixi.dependencies]\nnumpy = "*"\n\n[tool.pixi.environments]\ntest = ["test", "lint"]\n')
    ws = load_workspace(tmp_path)  # a directory without pixi.toml: its pyproject.toml, as pixi discovers it
    assert ws.path == path and ws.name == "pyp-demo"
    default = ws.environment("default")
    assert default.dependency("python").version == ">=3.12"  # type: ignore[union-attr]
    assert ws.environment("test").features[:2] == ("test", "lint")
    assert [r.key for r in ws.lock_refusals] == ["project.dependencies", "project.optional-dependencies.test",
                                                 "dependency-groups.lint"]


def test_pixi_python_wins_over_requires_python_and_exact_pins_lose_their_equals(
        tmp_path: Path, channels: dict[str, Path]) -> None:
    path = _pyproject(tmp_path / "a", channels["forge"], 'requires-python = ">=3.10"\n',
                      '[tool.pixi.dependencies]\npython = "3.12.*"\n')
    assert load_workspace(path).environment("default").dependency("python").version == "3.12.*"  # type: ignore[union-attr]
    path = _pyproject(tmp_path / "b", channels["forge"], 'requires-python = "==3.12.7"\n')
    assert load_workspace(path).environment("default").dependency("python").version == "3.12.7"  # type: ignore[union-attr]
    path = _pyproject(tmp_path / "c", channels["forge"])
    assert load_workspace(path).environment("default").dependency("python").version == "*"  # type: ignore[union-attr]
    assert load_workspace(path).lock_refusals == ()


def test_pyproject_without_pypi_dependencies_locks_and_exports(
        tmp_path: Path, channels: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    path = _pyproject(tmp_path, channels["forge"], 'requires-python = ">=3.12,<3.13"\n')
    assert main(["lock", "--manifest-path", str(tmp_path)]) == 0
    yml = yaml.safe_load((tmp_path / "envs" / "default" / "environment.yml").read_text())
    assert any(d.startswith("python=3.12.") for d in yml["dependencies"])
    assert main(["lock", "--check", "--manifest-path", str(path)]) == 0
    assert main(["export", "--check", "--manifest-path", str(path)]) == 0


def test_pyproject_with_pypi_dependencies_is_refused_by_lock_and_exported_from_pixis_lock(
        tmp_path: Path, channels: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    path = _pyproject(tmp_path, channels["forge"], 'requires-python = ">=3.12"\ndependencies = ["rich"]\n')
    assert main(["lock", "--manifest-path", str(path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == (f"error: {path}: key 'project.dependencies' holds PyPI dependencies; rocmlock lock solves "
                      "conda packages only: rocmlock lock cannot honour it") and len(err) == 2
    write_pixi_lock(tmp_path / "pixi.lock", channels["forge"], "default", LINUX, ["python 3.12.*"], [], [])
    assert main(["export", "--manifest-path", str(path)]) == 0
    assert (tmp_path / "envs" / "default" / "conda-linux-64.lock").is_file()


@pytest.mark.parametrize(("tool", "expected"), [
    ('[tool.pixi.workspace]\nplatforms = ["linux-64"]\n', "[tool.pixi.workspace] has no 'channels'"),
    ('[tool.pixi.workspace]\nchannels = "x"\n', "key 'tool.pixi.workspace.channels' must be"),
    ('[tool.pixi.dependencies]\nnumpy = "*"\n', "missing [tool.pixi.workspace] table"),
    ("[tool.black]\nline-length = 80\n", "no [tool.pixi] table"),
])
def test_pyproject_errors_name_the_key_as_written(
        tmp_path: Path, tool: str, expected: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "pyproject.toml"
    path.write_text(f'[project]\nname = "p"\n\n{tool}')
    assert main(["lock", "--check", "--manifest-path", str(path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"error: {path}: ") and expected in err[0], err
    assert len(err) <= 2 and "Traceback" not in "".join(err)


@pytest.mark.parametrize(("project", "expected"), [
    ("name = 5", "key 'project.name' must be a string, got int"),
    ('name = "p"\ndynamic = "version"', "key 'project.dynamic' must be a list of field names, got str"),
    ('name = "p"\ndependencies = [5]', "key 'project.dependencies[0]' must be a requirement string, got int"),
    ('name = "p"\n[project.optional-dependencies]\ntest = [true]',
     "key 'project.optional-dependencies.test[0]' must be a requirement string, got bool"),
])
def test_pep_621_fields_of_the_wrong_type_are_refused_naming_the_key(
        tmp_path: Path, channels: dict[str, Path], project: str, expected: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    # pixi reads [project] with the pyproject-toml crate, which holds PEP 621's types; these were accepted (a
    # name of 5) or reported as "holds PyPI dependencies" (a break-it pass).
    path = tmp_path / "pyproject.toml"
    path.write_text(f'[project]\n{project}\n\n[tool.pixi.workspace]\nchannels = ["{channels["forge"].as_uri()}"]\n'
                    'platforms = ["linux-64"]\n')
    assert main(["lock", "--check", "--manifest-path", str(path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"error: {path}: {expected}", err


def test_pixi_toml_is_preferred_and_a_pyproject_without_tool_pixi_is_no_manifest(
        tmp_path: Path, channels: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "p"\n')
    assert main(["lock", "--check", "--manifest-path", str(tmp_path)]) == 2
    assert f"{tmp_path / 'pixi.toml'}: no such manifest" in capsys.readouterr().err
    _pyproject(tmp_path, channels["forge"])
    (tmp_path / "pixi.toml").write_text(f'[workspace]\nname = "from-pixi-toml"\nchannels = ["{channels["forge"].as_uri()}"]\n')
    assert load_workspace(tmp_path).name == "from-pixi-toml"


def test_doctor_in_a_pyproject_workspace_reads_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    # Outside a workspace doctor checks the host only; a pyproject.toml with [tool.pixi] is a workspace.
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "p"\n\n[tool.pixi.workspace]\nplatforms = []\n')
    monkeypatch.chdir(tmp_path)
    assert main(["doctor", "--json"]) == 2
    assert "[tool.pixi.workspace] has no 'channels'" in capsys.readouterr().err
