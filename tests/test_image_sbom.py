"""What ``rocmlock image`` puts beside the environment, checked byte by byte in the built layer: the probe exactly
once, and the environment's CycloneDX SBOM at ``/opt/rocmlock/sbom.cdx.json``, named with its sha256 in the labels,
checked against the real pixi-sbom (tests/lock_tools.py) run on the same pixi.lock environment and against
cyclonedx-python-lib's strict CycloneDX 1.6 validator.

The workspace's channel lives in a directory named ``ch+x`` and its packages have versions ``2.5.1+rocm7.2`` and
``1!2.0``: the purls must be percent-encoded exactly as pixi-sbom encodes them (``%2B``; the channel's name is
the last segment of its URL, ``ch%2Bx``, encoded once more: ``ch%252Bx``).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import subprocess
import tarfile
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from rocmlock.cli.main import main

PROBE = Path(__file__).resolve().parent.parent / "tools" / "verify_env.py"
SBOM = "/opt/rocmlock/sbom.cdx.json"


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two environments: ``probed`` has rocm-env-check (the probe at share/rocm-env-check/verify_env.py, as
    recipes/rocm-env-check installs it), ``plain`` has not. ``plus`` is declared by three features (one in a
    target table): pixi-sbom lists them sorted by name in ``pixi:declared-in``."""
    from channels import Pkg, build_channel

    root = tmp_path_factory.mktemp("sbom")
    probe = PROBE.read_text()
    channel = build_channel(root / "ch+x", [
        Pkg("plus", "2.5.1+rocm7.2", "py312_h1_0"),
        Pkg("epoch", "1!2.0", "h_0", depends=("plus >=2", "__glibc >=2.17")),
        Pkg("rocm-env-check", "0.1.0", "0", subdir="noarch", noarch="generic",
            files=(("share/rocm-env-check/verify_env.py", probe), ("bin/rocm-env-check", "#!/bin/sh\n"))),
    ])
    (root / "ws").mkdir()
    (root / "ws/pixi.toml").write_text(
        f'[workspace]\nname = "sbom-test"\nchannels = ["{channel.as_uri()}"]\nplatforms = ["linux-64"]\n'
        '[dependencies]\nepoch = "*"\nplus = "*"\n[feature.probe.dependencies]\nrocm-env-check = "*"\n'
        '[feature.probe.target.linux-64.dependencies]\nplus = ">=2"\n'
        '[feature.alpha.dependencies]\nplus = "*"\n'
        '[environments]\nprobed = ["probe", "alpha"]\nplain = []\n')
    assert main(["lock", "--manifest-path", str(root / "ws/pixi.toml")]) == 0
    return root / "ws"


def _build(ws: Path, env: str, out: Path) -> Path:
    assert main(["image", "--manifest-path", str(ws / "pixi.toml"), "-e", env, "--no-base", "-o", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def built(ws: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build(ws, "probed", tmp_path_factory.mktemp("image") / "layout")


def _manifest(layout: Path) -> tuple[str, dict[str, Any]]:
    (desc,) = json.loads((layout / "index.json").read_text())["manifests"]
    return desc["digest"], json.loads((layout / "blobs/sha256" / desc["digest"][7:]).read_bytes())


def _config(layout: Path) -> dict[str, Any]:
    _, manifest = _manifest(layout)
    return json.loads((layout / "blobs/sha256" / manifest["config"]["digest"][7:]).read_bytes())  # type: ignore[no-any-return]


def _files(layout: Path) -> dict[str, bytes]:
    """Every regular file of the image's top layer (rocmlock's): its path in the image -> its bytes."""
    _, manifest = _manifest(layout)
    data = gzip.decompress((layout / "blobs/sha256" / manifest["layers"][-1]["digest"][7:]).read_bytes())
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return {"/" + m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


def test_the_probe_is_in_the_image_once_the_environments_when_it_has_one(ws: Path, built: Path,
                                                                          tmp_path: Path) -> None:
    probe = PROBE.read_bytes()
    for layout, where in ((built, "/opt/env/share/rocm-env-check/verify_env.py"),
                          (_build(ws, "plain", tmp_path / "plain"), "/opt/rocmlock/verify_env.py")):
        files = _files(layout)
        assert [p for p, data in files.items() if data == probe] == [where]
        assert _config(layout)["config"]["Labels"]["io.rocmlock.probe"] == where
        assert f" {where} --prefix /opt/env " in files["/opt/rocmlock/check"].decode()


def _pixi_sbom(tools: Path, ws: Path, env: str, epoch: int) -> dict[str, Any]:
    proc = subprocess.run([str(tools / "pixi-sbom"), "-q", "--lockfile", "pixi.lock", "-e", env, "-p", "linux-64",
                           "--output", "-"], capture_output=True, text=True, check=False, cwd=ws,
                          env={"SOURCE_DATE_EPOCH": str(epoch), "PATH": "/usr/bin:/bin", "HOME": str(ws)})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)  # type: ignore[no-any-return]


def test_the_sbom_is_the_environments_as_pixi_sbom_writes_it_and_its_label_names_it(ws: Path, built: Path) -> None:
    from lock_tools import tools_or_skip
    from test_lock_ecosystem import _validate

    tools = tools_or_skip()
    files = _files(built)
    labels = _config(built)["config"]["Labels"]
    data = files[SBOM]
    assert labels["io.rocmlock.sbom"] == SBOM and labels["io.rocmlock.sbom.sha256"] == hashlib.sha256(data).hexdigest()
    (ours,) = _validate(tools, [data.decode()])  # cyclonedx-python-lib's strict CycloneDX 1.6 validator
    # Exactly the installed packages: one component per conda-meta record of the layer.
    metas = {p.rsplit("/", 1)[1][:-5] for p in files if p.startswith("/opt/env/conda-meta/") and p.endswith(".json")}
    assert {f"{c['name']}-{c['version']}-{c['properties'][0]['value']}" for c in ours["components"]} == metas
    assert len(metas) == 3
    # The same as pixi-sbom writes for this environment when SOURCE_DATE_EPOCH is the image's date.
    created = _config(built)["created"]
    theirs = _pixi_sbom(tools, ws, "probed", int(datetime.fromisoformat(created).timestamp()))
    assert ours["metadata"]["timestamp"] == theirs["metadata"]["timestamp"] == created
    assert (ours["specVersion"], ours["metadata"]["properties"][:3]) == \
        (theirs["specVersion"], theirs["metadata"]["properties"])
    assert ours["metadata"]["component"] == theirs["metadata"]["component"]

    def comparable(c: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in c.items() if k not in ("properties", "licenses", "cpe")}

    assert [comparable(c) for c in ours["components"]] == [comparable(c) for c in theirs["components"]]
    assert {c["purl"] for c in ours["components"]} == {
        "pkg:conda/plus@2.5.1%2Brocm7.2?build=py312_h1_0&channel=ch%252Bx&subdir=linux-64&type=conda",
        "pkg:conda/epoch@1!2.0?build=h_0&channel=ch%252Bx&subdir=linux-64&type=conda",
        "pkg:conda/rocm-env-check@0.1.0?build=0&channel=ch%252Bx&subdir=noarch&type=conda"}
    # The pixi:* properties, pixi:direct and pixi:declared-in (from pixi.toml) included, and the dependency graph
    assert [c["properties"] for c in ours["components"]] == [c["properties"] for c in theirs["components"]]
    assert ours["dependencies"] == theirs["dependencies"]
    declared = {c["name"]: p["value"] for c in ours["components"] for p in c["properties"]
                if p["name"] == "pixi:declared-in"}
    assert declared == {"epoch": "default", "plus": "alpha,default,probe", "rocm-env-check": "probe"}
    assert any(d["dependsOn"] for d in ours["dependencies"] if d["ref"] != "root")


def test_two_builds_are_one_digest_and_the_date_moves_the_sbom_with_the_image(ws: Path, built: Path, tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    again = _build(ws, "probed", tmp_path / "elsewhere" / "again")
    assert _manifest(again)[0] == _manifest(built)[0]
    assert _files(again)[SBOM] == _files(built)[SBOM]
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    dated = _build(ws, "probed", tmp_path / "dated")
    sbom = json.loads(_files(dated)[SBOM])
    assert sbom["metadata"]["timestamp"] == "2023-11-14T22:13:20Z"
    assert _config(dated)["config"]["Labels"]["io.rocmlock.sbom.sha256"] == \
        hashlib.sha256(_files(dated)[SBOM]).hexdigest() != _config(built)["config"]["Labels"]["io.rocmlock.sbom.sha256"]


def test_the_locks_strings_are_data_in_the_sbom_and_credentials_never_reach_it(ws: Path) -> None:
    from rocmlock.image import sbom
    from rocmlock.prefix.install import select_environment

    records = select_environment(ws / "pixi.lock", "plain", None).records
    secret = "s3cret-pw"
    for r in records:
        r.channel = f"https://bob:{secret}@example.invalid/t/tok-{secret}/my-chan/"
        r.url = f"https://bob:{secret}@example.invalid/t/tok-{secret}/my-chan/linux-64/{r.file_name}"
        r.license = 'MIT\n", "injected": "x'
    data = sbom.document(records, root_name='w"\n', environment="plain", platform="linux-64",
                         lock_name="pixi.lock", lock_sha256="0" * 64, prefix="/opt/env",
                         created="2026-01-01T00:00:00Z", tool_version="0.1.0")
    assert secret not in data.decode() and "bob" not in data.decode()
    doc = json.loads(data)
    assert doc["metadata"]["component"]["name"] == 'w"\n'
    for c in doc["components"]:
        assert "injected" not in c and c["licenses"] == [{"license": {"name": 'MIT\n", "injected": "x'}}]
        assert "channel=my-chan&" in c["purl"] and c["supplier"] == {"name": "my-chan",
                                                                     "url": ["https://example.invalid/my-chan/"]}
        assert c["externalReferences"][0]["url"].startswith("https://example.invalid/my-chan/linux-64/")
