"""The rocm-env-check recipe builds offline, installs into an environment and runs there as a command."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import rattler_build as rb
from hostpython import python_shim
from rattler import Channel, install, solve
from rattler.index import index_fs

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "recipes" / "rocm-env-check" / "recipe.yaml"
PROBE = REPO / "tools" / "verify_env.py"


@pytest.fixture(scope="module")
def probe_channel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """rocm-env-check built by rattler-build with no channel at all, then indexed."""
    channel = tmp_path_factory.mktemp("probe-channel")
    (rendered,) = rb.Stage0Recipe.from_file(str(RECIPE)).render(rb.VariantConfig())
    rendered.run_build(tool_config=rb.ToolConfiguration(test_strategy="native"), output_dir=str(channel),
                       channels=[], no_build_id=True)
    shutil.rmtree(channel / "bld", ignore_errors=True)
    asyncio.run(index_fs(str(channel)))
    return channel


def test_recipe_version_is_the_probe_version() -> None:
    version = re.search(r'^PROBE_VERSION = "([^"]+)"', PROBE.read_text(), re.MULTILINE)
    assert version
    (rendered,) = rb.Stage0Recipe.from_file(str(RECIPE)).render(rb.VariantConfig())
    assert (rendered.recipe.package.name, str(rendered.recipe.package.version)) == ("rocm-env-check", version[1])


def test_builds_offline_as_one_noarch_package(probe_channel: Path) -> None:
    repodata = json.loads((probe_channel / "noarch" / "repodata.json").read_text())
    (record,) = repodata["packages.conda"].values()
    assert record["name"] == "rocm-env-check" and record["noarch"] == "generic"
    assert record["depends"] == ["python >=3.8"]


@pytest.fixture(scope="module")
def probe_prefix(probe_channel: Path, channels: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An environment for gfx942 / ROCm 7.2 with rocm-env-check, solved and installed by rattler."""
    prefix = tmp_path_factory.mktemp("env") / "mi300x"
    records = asyncio.run(solve(
        [Channel(probe_channel.as_uri()), Channel(channels["private"].as_uri()), Channel(channels["forge"].as_uri())],
        ["rocm-env-check", "python 3.12.*", "amdgpu-target * gfx942", "rocm-version 7.2.*"],
        platforms=["linux-64", "noarch"]))
    asyncio.run(install(records, str(prefix), show_progress=False))
    return prefix


def test_installs_the_command_and_the_probe(probe_prefix: Path) -> None:
    command = probe_prefix / "bin" / "rocm-env-check"
    assert os.access(command, os.X_OK)
    assert (probe_prefix / "share/rocm-env-check/verify_env.py").read_bytes() == PROBE.read_bytes()


def test_the_command_checks_its_own_environment(probe_prefix: Path) -> None:
    # The test channel's python is an empty stand-in: the wrapper falls back to python3 on PATH.
    bindir = probe_prefix.parent / "hostbin"
    bindir.mkdir(exist_ok=True)
    (bindir / "python3").unlink(missing_ok=True)
    python_shim(bindir / "python3")
    env = {**os.environ, "PATH": f"{bindir}:/usr/bin:/bin", "HIP_PATH": "/usr"}
    proc = subprocess.run([str(probe_prefix / "bin" / "rocm-env-check"), "--only", "rocm", "--json"],
                          capture_output=True, text=True, env=env, check=False, timeout=120)
    report = json.loads(proc.stdout)
    assert report["prefix"] == str(probe_prefix)
    assert report["expected"] == {"arch": "gfx942", "arch_source": "amdgpu-target package", "rocm": "7.2",
                                  "rocm_source": "rocm-version package"}
    # Debian's ROCm 5.2 headers under HIP_PATH=/usr do not match the environment's ROCm 7.2.
    assert [c["status"] for c in report["checks"]] == ["ok", "fail"]
    assert proc.returncode == 1
