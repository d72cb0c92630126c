"""recipes/rocmlock: rocmlock itself as a noarch python conda package (`pixi global install rocmlock`).

Built for real with py-rattler-build from the recipe, installed into a prefix with rattler (which writes the
`bin/rocmlock` entry point a noarch python package declares), and run from there. No conda channel is reachable
here, so the build's host requirements come from a test channel: `python` is a stand-in whose `bin/python` runs
this machine's python3 (as in the offline example), `pip` and `setuptools` are empty stand-ins because that
python3 has both. The package's run requirements (py-rattler, ...) are conda-forge's; the test links the package
and the python stand-in without a solve, as nothing else here provides them.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
import rattler_build as rb
import rocmlock
import yaml
from rattler import Channel, Platform, SparseRepoData, install
from rattler.index import index_fs

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "recipes" / "rocmlock" / "recipe.yaml"
PY = ".".join(str(v) for v in sys.version_info[:3])


def _recipe() -> dict:  # type: ignore[type-arg]
    return yaml.safe_load(RECIPE.read_text())


def test_recipe_version_and_requirements_follow_pyproject() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    recipe = _recipe()
    assert recipe["context"]["version"] == project["version"] == rocmlock.__version__
    # pyproject's PEP 508 specs, spelled as conda match specs; the PyPI names are conda-forge's names too.
    wanted = {d.replace("==", " ").replace(">=", " >=") for d in project["dependencies"]}
    run = set(recipe["requirements"]["run"])
    assert run - {f"python {project['requires-python']}"} == wanted
    assert f"python {project['requires-python']}" in run
    assert recipe["build"]["python"]["entry_points"] == [
        "rocmlock = " + tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]["rocmlock"]]


def _stand_ins(channel: Path) -> None:
    files = channel.parent / "python-files"
    (files / "bin").mkdir(parents=True)
    # conda-forge's python has bin/python3.X, which entry points name, and bin/python: both run this interpreter.
    for name in ("python", f"python{sys.version_info[0]}.{sys.version_info[1]}"):
        (files / "bin" / name).write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
        (files / "bin" / name).chmod(0o755)
    out = str(channel / "noarch")
    rb.assemble_package(name="python", version=PY, target_platform="noarch", build_string="host_stand_in",
                        output_dir=out, files_dir=str(files), noarch="generic", license="MIT", summary="test")
    for name, version in (("pip", "26.0"), ("setuptools", "80.0")):
        rb.assemble_package(name=name, version=version, target_platform="noarch", build_string="host_stand_in",
                            output_dir=out, files=[], noarch="generic", depends=["python"], license="MIT",
                            summary="test")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("rocmlock-package")
    channel = root / "channel"
    (channel / "noarch").mkdir(parents=True)
    _stand_ins(channel)
    asyncio.run(index_fs(str(channel)))
    (variant,) = rb.Stage0Recipe.from_file(str(RECIPE)).render(rb.VariantConfig())
    result = variant.run_build(output_dir=str(root / "output"), channels=[channel.as_uri()])
    (package,) = result.packages
    return Path(package), channel


def test_the_package_is_noarch_python_with_every_module_and_table(built: tuple[Path, Path]) -> None:
    package, _ = built
    assert package.name == f"rocmlock-{rocmlock.__version__}-pyh{package.name.split('-pyh')[1]}"
    assert package.parent.name == "noarch"
    names = zipfile.ZipFile(package).namelist()
    assert any(n.startswith("pkg-rocmlock-") for n in names)


def test_installed_with_rattler_the_entry_point_runs(built: tuple[Path, Path], tmp_path: Path) -> None:
    package, channel = built
    (channel / "noarch" / package.name).write_bytes(package.read_bytes())
    asyncio.run(index_fs(str(channel)))
    repo = SparseRepoData(Channel(channel.as_uri()), "noarch", str(channel / "noarch" / "repodata.json"))
    records = [r for name in ("python", "rocmlock") for r in repo.load_records(name)]
    assert {r.name.normalized for r in records} == {"python", "rocmlock"}
    prefix = tmp_path / "prefix"
    asyncio.run(install(records, target_prefix=prefix, platform=Platform.current()))
    site = prefix / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    assert (site / "rocmlock" / "data" / "gpu_targets.toml").is_file()
    script = prefix / "bin" / "rocmlock"
    assert script.read_text().startswith(f"#!{prefix}/bin/python")  # rattler wrote the entry point
    # A conda python has its prefix's site-packages on sys.path by itself; the stand-in runs this machine's
    # python3, so the test puts it there (and nothing else of this checkout).
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")} | {"PYTHONPATH": str(site)}
    out = subprocess.run([str(script), "--version"], capture_output=True, text=True, env=env, cwd=tmp_path,
                         check=False)
    assert (out.returncode, out.stdout.strip()) == (0, f"rocmlock {rocmlock.__version__}"), out.stderr
    where = subprocess.run([str(prefix / "bin" / "python"), "-c", "import rocmlock; print(rocmlock.__file__)"],
                           capture_output=True, text=True, env=env, cwd=tmp_path, check=True).stdout.strip()
    assert where == str(site / "rocmlock" / "__init__.py")
