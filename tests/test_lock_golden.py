"""Golden outputs of a lock (issue 40.4): the conda-lock.yml of every environment and pixi's diff JSON of
`rocmlock lock --json` and `rocmlock diff --json`, byte for byte as the code before the speed work wrote them.

The channel is a repodata.json written here (rattler solves from repodata alone), so every hash, size and
timestamp is fixed; its strings are chosen to make a YAML writer quote, and a diff keep, what needs it (names that
YAML reads as booleans or null, versions that read as floats, `*`, `:`, `#`, `'`, epochs, empty specs, long lists).
The temporary directory is written as ``<TMP>`` in the golden files. After a deliberate change of the output,
regenerate them with ``ROCMLOCK_REGEN_GOLDEN=1`` and review the diff.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from rocmlock.cli.main import main

GOLDEN = Path(__file__).parent / "golden_lock"
TARGETS = {"gfx90a": "9.0.10", "gfx942": "9.4.2"}


def _rec(name: str, version: str, build: str, subdir: str = "linux-64", depends: tuple[str, ...] = (),
         **extra: Any) -> tuple[str, dict[str, Any]]:
    fn = f"{name}-{version}-{build}.conda"
    digest = hashlib.sha256(f"{subdir}/{fn}".encode()).hexdigest()
    rec: dict[str, Any] = {"name": name, "version": version, "build": build, "build_number": 0,
                           "depends": list(depends), "constrains": [], "subdir": subdir, "sha256": digest,
                           "md5": digest[:32], "size": 4096 + len(fn), "timestamp": 1767225600000, "license": "MIT"}
    rec.update(extra)
    return fn, rec


def _channel(root: Path) -> None:
    py = "python >=3.12,<3.13.0a0"
    linux = dict([
        _rec("python", "3.12.1", "h0_0_cpython", depends=("clib-a >=1.0", "on", "yes")),
        _rec("python", "3.12.2", "h0_0_cpython", depends=("clib-a >=1.0", "on", "yes")),
        _rec("clib-a", "1.0", "h0_0", license="BSD-3-Clause AND MIT", license_family="BSD",
             constrains=["clib-b <2"]),
        _rec("clib-b", "1.10", "h0_0", depends=("clib-a 1.0.*",), license="'quoted' #1: yes, ~null"),
        _rec("on", "1.0", "0", license="null"),
        _rec("yes", "2!0.1", "0", depends=("clib-b",), license="1e3"),
        _rec("numpy", "2.1.3", "py312h0_0", depends=(py, "clib-b >=1.10", *(f"dep{i:02d}" for i in range(30)))),
        _rec("numpy", "2.2.0", "py312h0_0", depends=(py, "clib-b >=1.10", *(f"dep{i:02d}" for i in range(30)))),
        *(_rec(f"dep{i:02d}", "0.1", "h0_0", license="") for i in range(30)),
    ])
    noarch = dict([
        _rec("rocm-version", "7.2", "0", "noarch", noarch="generic"),
        _rec("purely", "3.0", "pyhd8ed1ab_0", "noarch", depends=("python >=3.9", "rocm-version"), noarch="python",
             license="Apache-2.0 WITH LLVM-exception"),
        *(_rec("amdgpu-target", "1", gfx, "noarch", noarch="generic") for gfx in TARGETS),
    ])
    for gfx, isa in TARGETS.items():
        fn, rec = _rec("pytorch", "2.12.1", f"rocm72_{gfx}_py312_h1a2b3c4_0",
                       depends=(py, "numpy", "purely", f"amdgpu-target * {gfx}", "rocm-version 7.2.*"),
                       constrains=[f"__amdgpu_arch =={isa}"])
        linux[fn] = rec
    for subdir, pkgs in (("linux-64", linux), ("noarch", noarch)):
        (root / subdir).mkdir(parents=True, exist_ok=True)
        data = {"info": {"subdir": subdir}, "packages": {}, "packages.conda": pkgs, "repodata_version": 1}
        (root / subdir / "repodata.json").write_text(json.dumps(data, sort_keys=True))


MANIFEST = """[workspace]
name = "golden"
channels = ["./channel"]
platforms = [
    { name = "linux-64-gfx90a", platform = "linux-64", glibc = "2.28", __amdgpu = "0", __amdgpu_arch = "9.0.10" },
    { name = "linux-64-gfx942", platform = "linux-64", glibc = "2.28", __amdgpu = "0", __amdgpu_arch = "9.4.2" },
]

[dependencies]
python = "3.12.*"
yes = "*"

[feature.train.dependencies]
pytorch = "2.12.*"

[feature.gfx90a]
platforms = ["linux-64-gfx90a"]
dependencies = { amdgpu-target = { version = "*", build = "gfx90a" } }

[feature.gfx942]
platforms = ["linux-64-gfx942"]
dependencies = { amdgpu-target = { version = "*", build = "gfx942" } }

[environments]
mi250 = ["gfx90a", "train"]
mi300x = ["gfx942", "train"]
"""


def _scrub(text: str, root: Path) -> str:
    return text.replace(root.as_uri(), "<TMP>").replace(str(root), "<TMP>")


def _conda_lock(path: Path, root: Path) -> str:
    """The file with the temporary directory as ``<TMP>``, and its content hashes (of the package URLs, which hold
    that directory) as ``<HASH>`` once checked against the URLs."""
    text = path.read_text()
    data = yaml.safe_load(text)
    for subdir, digest in data["metadata"]["content_hash"].items():
        urls = sorted(p["url"] for p in data["package"] if p["platform"] == subdir)
        assert digest == hashlib.sha256(json.dumps(urls).encode()).hexdigest()
        text = text.replace(f"    {subdir}: {digest}\n", f"    {subdir}: <HASH>\n", 1)
    return _scrub(text, root)


def _lock_json(ws: Path, capsys: pytest.CaptureFixture[str], *args: str) -> str:
    capsys.readouterr()
    assert main([*args, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    return _scrub(json.dumps({"version": data["version"], "environment": data["environment"]}, indent=2), ws)


def _check(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("ROCMLOCK_REGEN_GOLDEN") == "1":
        path.parent.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8"), f"{name} differs from its golden file"


def test_lock_outputs_and_diffs_are_the_golden_bytes(sandbox: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ws = sandbox / "ws"
    _channel(ws / "channel")
    (ws / "pixi.toml").write_text(MANIFEST)
    manifest = str(ws / "pixi.toml")
    _check("fresh-lock.json", _lock_json(ws, capsys, "lock", "--manifest-path", manifest))
    for env in ("default", "mi250", "mi300x"):
        _check(f"{env}.conda-lock.yml", _conda_lock(ws / "envs" / env / "conda-lock.yml", ws))
    old = sandbox / "old.lock"
    old.write_bytes((ws / "pixi.lock").read_bytes())
    # numpy down a minor (a changed entry keeping only the keys that differ), python pinned, `yes` dropped
    (ws / "pixi.toml").write_text(MANIFEST.replace('python = "3.12.*"\nyes = "*"\n',
                                                   'python = "3.12.1"\nnumpy = "2.1.*"\n'))
    _check("relock.json", _lock_json(ws, capsys, "lock", "--manifest-path", manifest))
    _check("mi300x.relock.conda-lock.yml", _conda_lock(ws / "envs" / "mi300x" / "conda-lock.yml", ws))
    _check("diff.json", _lock_json(ws, capsys, "diff", str(old), str(ws / "pixi.lock")))
