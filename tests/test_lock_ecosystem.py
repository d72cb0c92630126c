"""The pixi ecosystem's own tools on rocmlock's lock of the offline example (issue 36): pixi-sbom and pixi-policy,
from PyPI (tests/lock_tools.py), read what `rocmlock lock` wrote, with exactly the locked packages.

- pixi-sbom 1.15 writes CycloneDX 1.6 for one environment and platform: `-p` is needed, as its default (`linux-64`)
  is no platform of a rocmlock lock; cyclonedx-python-lib's strict validator accepts the document, and every
  locked package is a component with its version, sha256 and (GPU) build string. It reads envs/<env>/conda-lock.yml
  too (with `-p linux-64`), to the same packages.
- pixi-policy 0.3 checks the lock against examples/offline/pixi-policy.toml (docs/locking.md): the example passes;
  a CPU pytorch from another channel is a `bans.deny` error, a package from a channel it does not list a
  `sources.channels` one.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from example_ws import build_example
from lock_tools import tools_or_skip
from lockhelpers import PLATFORMS
from rocmlock.cli.main import main
from rocmlock.lock.lockfile import read_lockfile


@pytest.fixture(scope="module")
def tools() -> Path:
    return tools_or_skip()


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The locked offline example (tests/example_ws.py) with its pixi-policy.toml beside it, naming the example's
    directory channel instead of the served placeholder."""
    return build_example(tmp_path_factory.mktemp("example"), ("pixi.toml", "pixi-policy.toml"))


def _run(tool: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(tool), *args], capture_output=True, text=True, check=False, cwd=cwd)


def _sbom(tools: Path, cwd: Path, *args: str) -> str:
    proc = _run(tools / "pixi-sbom", *args, "--output", "-", cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


# One validator process for every document: loading cyclonedx-python-lib's schemas takes seconds.
VALIDATE = """import json, sys
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
validator = JsonStrictValidator(SchemaVersion.V1_6)
errors = [str(e) for e in map(validator.validate_str, json.load(sys.stdin)) if e]
sys.exit("; ".join(errors) if errors else 0)
"""


def _validate(tools: Path, documents: list[str]) -> list[dict[str, Any]]:
    valid = subprocess.run([str(tools / "python"), "-c", VALIDATE], input=json.dumps(documents), capture_output=True,
                           text=True, check=False)
    assert valid.returncode == 0, valid.stderr
    return [json.loads(d) for d in documents]


def _components(sbom: dict[str, Any]) -> dict[str, tuple[str, str, str]]:
    """name -> (version, sha256, build) of each component; the build from its purl and its pixi:build property."""
    out = {}
    for c in sbom["components"]:
        sha = next(h["content"] for h in c["hashes"] if h["alg"] == "SHA-256")
        props = {p["name"]: p["value"] for p in c.get("properties", [])}
        assert f"build={props['pixi:build']}&" in c["purl"], c["purl"]
        out[c["name"]] = (c["version"], sha, props["pixi:build"])
    return out


def _locked(ws: Path, env: str, platform: str) -> dict[str, tuple[str, str, str]]:
    locked = read_lockfile(ws / "pixi.lock")
    assert locked is not None
    return {r.name.normalized: (str(r.version), r.sha256.hex() if r.sha256 else "", str(r.build))
            for r in locked.environments[env].records[platform]}


def test_pixi_sbom_describes_exactly_the_locked_packages(tools: Path, example: Path) -> None:
    targets = [("mi250", "linux-64-gfx90a"), ("mi300x", "linux-64-gfx942")]
    documents = []
    for env, platform in targets:
        documents.append(_sbom(tools, example, "--lockfile", "pixi.lock", "-e", env, "-p", platform))
        # the exported conda-lock.yml, read by pixi-sbom as conda-lock's format
        documents.append(_sbom(tools, example, "--lockfile", f"envs/{env}/conda-lock.yml", "-p", "linux-64"))
    sboms = _validate(tools, documents)
    for (env, platform), sbom, from_conda_lock in zip(targets, sboms[::2], sboms[1::2], strict=True):
        assert sbom["specVersion"] == "1.6"
        props = {p["name"]: p["value"] for p in sbom["metadata"]["properties"]}
        assert (props["pixi:environment"], props["pixi:platform"]) == (env, platform)
        got = _components(sbom)
        assert got == _locked(example, env, platform)
        assert got["amdgpu-target"][2] == platform.rsplit("-", 1)[1]  # the GPU build string
        assert _components(from_conda_lock) == got


def test_pixi_sbom_needs_the_platform_named(tools: Path, example: Path) -> None:
    proc = _run(tools / "pixi-sbom", "--lockfile", "pixi.lock", "-e", "mi300x", "--output", "-", cwd=example)
    assert proc.returncode != 0 and "'linux-64' is not locked" in proc.stderr and "linux-64-gfx942" in proc.stderr


def _policy(tools: Path, ws: Path) -> tuple[int, list[dict[str, Any]]]:
    proc = _run(tools / "pixi-policy", "check", "--manifest-path", str(ws / "pixi.toml"), "--format", "json", cwd=ws)
    assert proc.returncode in (0, 1), proc.stderr
    report = json.loads(proc.stdout)
    assert report["summary"]["passed"] == (proc.returncode == 0)
    return proc.returncode, report["findings"]


def test_pixi_policy_passes_the_example_lock(tools: Path, example: Path) -> None:
    code, findings = _policy(tools, example)
    assert (code, findings) == (0, [])


def test_pixi_policy_fails_a_cpu_pytorch_and_an_unlisted_channel(tools: Path, example: Path, tmp_path: Path,
                                                                 channels: dict[str, Path]) -> None:
    # The tests' conda-forge-like channel carries pytorch 2.99.0 cpu_generic_py312h0_0: what a workspace locks when
    # the private channel is missing.
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "pixi.toml").write_text(f'[workspace]\nname = "p"\nchannels = ["{channels["forge"].as_uri()}"]\n'
                                  f'{PLATFORMS}\n\n[dependencies]\npytorch = "*"\n')
    assert main(["lock", "--manifest-path", str(ws / "pixi.toml")]) == 0
    (ws / "pixi-policy.toml").write_text((example / "pixi-policy.toml").read_text())
    code, findings = _policy(tools, ws)
    assert code == 1
    rules = {(f["rule"], f["package"]) for f in findings}
    assert ("bans.deny", "pytorch") in rules
    assert ("sources.channels", "numpy") in rules
    assert {f["platform"] for f in findings if f["rule"] == "bans.deny"} == {"linux-64-gfx90a", "linux-64-gfx942"}
