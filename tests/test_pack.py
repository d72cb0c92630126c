"""rocmlock pack / unpack: a locked environment as a verified bundle, installed after checking bundle and node.

The nodes are fake sysfs trees (``--host-root``), as the probe's tests fake them. pixi-pack's ``pixi-unpack``
is a Rust binary from GitHub releases / conda-forge, neither reachable here: the layout test checks our
bundle against what its source reads (QuantCo/pixi-pack 0.7.10, src/unpack.rs) and replays its install steps
with rattler. About 40 s in all (most of it the installer test: a venv and pip from the bundle).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tarfile
from pathlib import Path

import pytest
from rocmlock.bundle.layout import FIXED_MTIME
from rocmlock.cli.main import main
from rocmlock.lock.lockfile import read_lockfile

ENV, PLATFORM = "mi300x", "linux-64-gfx942"
KFD = "sys/class/kfd/kfd/topology/nodes"


def fake_node(root: Path, gfx_target_versions: list[int], rocm: str | None = "7.2.1") -> Path:
    """A host tree: a CPU node 0, one KFD node per GPU, and /opt/rocm/.info/version."""
    for i, version in enumerate([0, *gfx_target_versions]):
        props = root / KFD / str(i) / "properties"
        props.parent.mkdir(parents=True, exist_ok=True)
        props.write_text(f"cpu_cores_count {0 if i else 16}\ngfx_target_version {version}\n")
    if rocm:
        (root / "opt/rocm/.info").mkdir(parents=True, exist_ok=True)
        (root / "opt/rocm/.info/version").write_text(f"{rocm}-42\n")
    return root


def pack(ws: Path, out: Path, *extra: str, env: str = ENV) -> int:
    return main(["pack", "--manifest-path", str(ws / "pixi.toml"), "-e", env, "-o", str(out), *extra])


def unpack(bundle: Path, prefix: Path, host: Path, *extra: str) -> int:
    return main(["unpack", str(bundle), "--prefix", str(prefix), "--host-root", str(host), *extra])


def installed(prefix: Path) -> set[tuple[str, str, str, str]]:
    out = set()
    for meta in (prefix / "conda-meta").glob("*.json"):
        rec = json.loads(meta.read_text())
        out.add((rec["name"], rec["version"], rec["build"], rec["sha256"]))
    return out


def locked_set(ws: Path, env: str = ENV, platform: str = PLATFORM) -> set[tuple[str, str, str, str]]:
    locked = read_lockfile(ws / "pixi.lock")
    assert locked is not None
    return {(r.name.normalized, str(r.version), str(r.build), r.sha256.hex())
            for r in locked.environments[env].records[platform]}


@pytest.fixture(scope="module")
def bundle(locked_ws: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bundle") / "mi300x.tar"
    assert pack(locked_ws, out) == 0
    return out


def test_pack_then_unpack_installs_exactly_the_locked_packages(bundle: Path, locked_ws: Path, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    prefix = tmp_path / "env"
    assert unpack(bundle, prefix, fake_node(tmp_path / "host", [90402]), "--json") == 0
    assert installed(prefix) == locked_set(locked_ws)
    report = json.loads(capsys.readouterr().out)
    assert report["gpu_target"] == "gfx942" and report["rocm_version"] == "7.2" and report["probe"] is None
    assert not list(tmp_path.glob(".rocmlock-unpack*")), "the extraction and package cache beside it are removed"


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): os.readlink(p).encode() if p.is_symlink() else p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_symlink() or p.is_file()}


def test_one_bundle_unpacked_twice_into_one_prefix_gives_the_same_bytes_and_the_locks_urls(
        bundle: Path, locked_ws: Path, tmp_path: Path) -> None:
    # rattler records where it installed each package from and its package cache: for an unpack, a temporary
    # directory removed at the end, another one each run. The records name the lock's URLs instead (as
    # `rocmlock install` and the image do) and no path of the host.
    host, prefix = fake_node(tmp_path / "host", [90402]), tmp_path / "env"
    trees = []
    for _ in range(2):
        assert unpack(bundle, prefix, host, "--no-verify") == 0
        trees.append(_tree(prefix))
        shutil.rmtree(prefix)
    assert trees[0] == trees[1]
    locked = read_lockfile(locked_ws / "pixi.lock")
    assert locked is not None
    lock_urls = {r.file_name: r.url for r in locked.environments[ENV].records[PLATFORM]}
    metas = {name: json.loads(data) for name, data in trees[0].items()
             if name.startswith("conda-meta/") and name.endswith(".json")}
    assert {m["fn"]: m["url"] for m in metas.values()} == lock_urls
    for meta in metas.values():
        assert meta["channel"] == meta["url"].rsplit("/", 2)[0] + "/"
        assert not {"extracted_package_dir", "package_tarball_full_path", "link"} & meta.keys()
    assert not [n for n, data in trees[0].items()
                if b".rocmlock-unpack" in data or (n.startswith("conda-meta/") and str(tmp_path).encode() in data)]


def test_two_packs_of_one_lock_are_byte_identical(bundle: Path, locked_ws: Path, tmp_path: Path) -> None:
    again = tmp_path / "again.tar"
    assert pack(locked_ws, again) == 0
    assert again.read_bytes() == bundle.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["again.tar"], "no staging or temporary file is left"


def test_the_bundle_has_exactly_pixi_packs_layout(bundle: Path, locked_ws: Path, tmp_path: Path) -> None:
    # pixi-unpack (src/unpack.rs) reads the tar uncompressed, pixi-pack.json as PixiPackMetadata
    # (version "1", platform == the current platform), and repodata.json of every directory under
    # channel/, then installs every package listed there; environment.yml is pixi-pack's (src/pack.rs).
    with tarfile.open(bundle, mode="r:") as tar:  # "r:" fails on a compressed file
        members = tar.getmembers()
    names = [m.name for m in members]
    packages = sorted(f"channel/{r.subdir}/{r.file_name}"
                      for r in read_lockfile(locked_ws / "pixi.lock").environments[ENV].records[PLATFORM])  # type: ignore[union-attr]
    assert sorted(n for n in names if n.endswith(".conda")) == packages
    assert set(names) - set(packages) == {"channel", "channel/linux-64", "channel/noarch",
                                          "channel/linux-64/repodata.json", "channel/noarch/repodata.json",
                                          "environment.yml", "pixi-pack.json", "rocmlock-pack.json"}
    assert names == sorted(names), "sorted like pixi-pack's walkdir sort_by_file_name"
    assert {(m.uid, m.gid, m.uname, m.gname, m.mtime) for m in members} == {(0, 0, "", "", FIXED_MTIME)}
    assert all(m.isdir() or m.isfile() for m in members)

    shutil.unpack_archive(bundle, tmp_path / "x", format="tar")
    x = tmp_path / "x"
    assert json.loads((x / "pixi-pack.json").read_text()) == {"version": "1", "pixi-pack-version": "0.7.10",
                                                              "platform": "linux-64"}
    env_yml = [line for line in (x / "environment.yml").read_text().splitlines() if not line.startswith("#")]
    assert env_yml[:3] == ["channels:", "  - ./channel", "dependencies:"]
    assert sorted(env_yml[3:]) == sorted(f"  - {n}={v}={b}" for n, v, b, _ in locked_set(locked_ws))

    # pixi-unpack's steps, with rattler: every directory of channel/ has a repodata.json; each listed
    # package, by its file URL, installs; the prefix is the lock's environment.
    import asyncio

    from rattler import Channel, RepoData, install

    dirs = sorted(p for p in (x / "channel").iterdir())
    assert all(d.is_dir() and (d / "repodata.json").is_file() for d in dirs)
    records = [r for d in dirs for r in RepoData.from_path(d / "repodata.json").into_repo_data(
        Channel(str(x / "channel")))]
    asyncio.run(install(records, tmp_path / "pixi-unpacked", cache_dir=tmp_path / "cache", show_progress=False))
    assert installed(tmp_path / "pixi-unpacked") == locked_set(locked_ws)


def test_the_bundles_environment_yml_is_for_conda_23_to_26_on_a_node_without_network(bundle: Path,
                                                                                     tmp_path: Path) -> None:
    # pixi-unpack never reads environment.yml (pixi-pack src/unpack.rs reads pixi-pack.json and
    # channel/*/repodata.json; its README: "The environment.yml and repodata.json files are only for this use
    # case"): the file serves only `conda env create -p ./env -f environment.yml`. pixi-pack writes
    # `- nodefaults` there (src/pack.rs create_environment_file); conda 26.7's `env create` is `create`, which
    # fetches it as a channel and fails, even with network (conda/cli/install.py). Without it, conda before
    # 26.7 adds the .condarc channels (`defaults`), unreachable on such a node: `--offline` makes conda skip
    # every channel that is not file:// (conda/gateways/repodata/__init__.py) on 23.11 to 26.7 alike.
    # conda adds `pip` to python's dependencies (add_pip_as_python_dependency, conda/core/subdir_data.py),
    # and this lock has python without pip. Run by hand with conda 23.11.0, 24.11.3 and 26.7.1 (README).
    with tarfile.open(bundle, mode="r:") as tar:
        text = tar.extractfile("environment.yml").read().decode()  # type: ignore[union-attr]
    assert "nodefaults" not in text.replace("# No `nodefaults`", "")
    assert [line for line in text.splitlines() if line.startswith("  - ./")] == ["  - ./channel"]
    assert "conda env create -p ./env -f environment.yml --offline" in text
    assert "CONDA_ADD_PIP_AS_PYTHON_DEPENDENCY=false" in text


def test_the_pip_note_is_there_only_when_python_is_locked_without_pip() -> None:
    from rocmlock.bundle.layout import BundledPackage, render_environment_yml

    def pkg(name: str) -> BundledPackage:
        return BundledPackage("noarch", f"{name}-1-0.conda", name, "1", "0", "0" * 64, 1)

    assert "CONDA_ADD_PIP" not in render_environment_yml("e", (pkg("rocm-version"),))
    assert "CONDA_ADD_PIP" not in render_environment_yml("e", (pkg("python"), pkg("pip")))
    assert "CONDA_ADD_PIP" in render_environment_yml("e", (pkg("python"),))


def _flip_byte_of(bundle: Path, member: str, out: Path) -> Path:
    shutil.copy(bundle, out)
    with tarfile.open(out, mode="r:") as tar:
        offset = tar.getmember(member).offset_data
    with out.open("r+b") as fh:
        fh.seek(offset + 100)
        byte = fh.read(1)
        fh.seek(offset + 100)
        fh.write(bytes([byte[0] ^ 0xFF]))
    return out


def test_a_corrupted_package_is_refused_and_nothing_is_installed(bundle: Path, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    member = "channel/linux-64/pytorch-2.12.1-rocm72_gfx942_py312_h1a2b3c4_0.conda"
    bad = _flip_byte_of(bundle, member, tmp_path / "bad.tar")
    prefix = tmp_path / "env"
    host = fake_node(tmp_path / "host", [90402])
    assert unpack(bad, prefix, host) == 2
    err = capsys.readouterr().err
    assert f"error: {bad}: {member}: sha256 " in err and "differs from the bundle's metadata" in err
    assert ".rocmlock-unpack-" not in err, "the message names the bundle, not a scratch directory it removed"
    assert not prefix.exists()
    # --force skips the node check only, never this one.
    assert unpack(bad, prefix, host, "--force") == 2
    assert not prefix.exists()


@pytest.mark.parametrize("cut", ["rocmlock-pack.json", "channel/noarch/repodata.json"])
def test_a_truncated_bundle_is_damaged_not_a_foreign_one(bundle: Path, tmp_path: Path, cut: str,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    # A copy cut short (a full USB disk, an interrupted scp) at or inside a member's header: tarfile stops
    # there without an error (TarFile.next treats a truncated header after the first as the end), so the
    # members after it were simply missing: "not a bundle of `rocmlock pack`", pointing at pixi-unpack.
    with tarfile.open(bundle, mode="r:") as tar:
        header = tar.getmember(cut).offset
    for length in (header, header + 100):
        short = tmp_path / f"short-{length}.tar"
        short.write_bytes(bundle.read_bytes()[:length])
        assert unpack(short, tmp_path / "env", fake_node(tmp_path / "host", [90402])) == 2
        err = capsys.readouterr().err
        assert f"error: {short}: truncated: it ends inside the archive" in err, err
        assert "copy it again" in err and "pixi-unpack" not in err
        assert not (tmp_path / "env").exists() and not list(tmp_path.glob(".rocmlock-unpack*"))


def test_a_damaged_repodata_is_named_inside_the_bundle(bundle: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    x = tmp_path / "x"
    shutil.unpack_archive(bundle, x, format="tar")
    (x / "channel/noarch/repodata.json").write_text("{")
    bad = tmp_path / "bad.tar"
    with tarfile.open(bad, "w") as tar:
        for path in sorted(x.rglob("*")):
            tar.add(path, str(path.relative_to(x)), recursive=False)
    assert unpack(bad, tmp_path / "env", fake_node(tmp_path / "host", [90402])) == 2
    err = capsys.readouterr().err
    # Every member's sha256 is in the metadata: the damage is found before the file is parsed.
    assert f"error: {bad}: channel/noarch/repodata.json: sha256 " in err and "differs from the bundle's" in err, err
    assert ".rocmlock-unpack-" not in err and not (tmp_path / "env").exists()


def test_a_member_outside_the_bundle_is_refused_before_anything_is_extracted(
        bundle: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import io

    evil = tmp_path / "evil.tar"
    shutil.copy(bundle, evil)
    with tarfile.open(evil, "a") as tar:
        tar.addfile(tarfile.TarInfo("../escaped.txt"), io.BytesIO(b""))
    assert unpack(evil, tmp_path / "env", fake_node(tmp_path / "host", [90402])) == 2
    assert "member '../escaped.txt' is not a plain file or directory inside the bundle" in capsys.readouterr().err
    assert not (tmp_path / "escaped.txt").exists() and not (tmp_path / "env").exists()


def test_a_package_added_to_the_extracted_bundle_is_refused(bundle: Path, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    x = tmp_path / "x"
    shutil.unpack_archive(bundle, x, format="tar")
    shutil.copy(x / "channel/noarch/peft-0.18.0-pyhd8ed1ab_0.conda", x / "channel/noarch/evil-1-0.conda")
    assert unpack(x, tmp_path / "env", fake_node(tmp_path / "host", [90402])) == 2
    assert "member 'channel/noarch/evil-1-0.conda' is not in the bundle's metadata" in capsys.readouterr().err


def test_a_gfx942_bundle_is_refused_on_a_gfx90a_node_and_force_overrides(
        bundle: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    host = fake_node(tmp_path / "host", [90010, 90010])
    prefix = tmp_path / "env"
    assert unpack(bundle, prefix, host) == 1
    err = capsys.readouterr().err
    assert "error: GPU 0 is gfx90a, GPU 1 is gfx90a; the bundle was built for gfx942" in err
    assert not prefix.exists()
    assert unpack(bundle, prefix, host, "--force") == 0
    assert "node check skipped (--force): GPU 0 is gfx90a" in capsys.readouterr().err
    assert (prefix / "conda-meta").is_dir()


def test_a_gfx942_bundle_is_accepted_where_one_of_the_gpus_is_gfx942(bundle: Path, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert unpack(bundle, tmp_path / "env", fake_node(tmp_path / "host", [90010, 90402]), "--no-verify") == 0
    assert "node check: a gfx942 GPU, ROCm 7.2 found" in capsys.readouterr().err


@pytest.mark.parametrize(("gpus", "rocm", "message", "needed"), [
    ([], "7.2.1", "no AMD GPU on this node", "built for gfx942"),
    ([90402], None, "no ROCm found at", "needs ROCm 7.2"),
    ([90402], "7.1.0", "this node has ROCm 7.1.0", "built for ROCm 7.2"),
])
def test_unpack_refuses_a_node_without_gpu_or_rocm_or_with_another_rocm(
        bundle: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], gpus: list[int], rocm: str | None,
        message: str, needed: str) -> None:
    assert unpack(bundle, tmp_path / "env", fake_node(tmp_path / "host", gpus, rocm)) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-2].startswith(f"error: {message}") and needed in err[-2] and err[-1].startswith("hint: --force")
    assert not (tmp_path / "env").exists()


def test_packing_an_environment_missing_from_the_lock_is_a_clear_error(locked_ws: Path, tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert pack(locked_ws, tmp_path / "x.tar", env="mi355x") == 2
    err = capsys.readouterr().err
    # The nearest locked name is suggested (issue 35).
    assert err.splitlines()[0] == (f"error: {locked_ws / 'pixi.lock'}: no environment 'mi355x' "
                                   "(did you mean 'mi300x'?)")
    assert "Traceback" not in err and not list(tmp_path.iterdir())


def test_a_package_whose_bytes_differ_from_the_lock_fails_the_pack_and_leaves_nothing(
        ws_copy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lock = ws_copy / "pixi.lock"
    record = next(r for r in read_lockfile(lock).environments[ENV].records[PLATFORM]  # type: ignore[union-attr]
                  if r.name.normalized == "numpy")
    lock.write_text(lock.read_text().replace(record.sha256.hex(), hashlib.sha256(b"other").hexdigest()))
    out = tmp_path / "out" / "b.tar"
    assert pack(ws_copy, out) == 1
    err = capsys.readouterr().err
    assert f"{record.file_name}: sha256 {record.sha256.hex()} differs from the lock's" in err
    assert not list(out.parent.iterdir()), "no bundle, no staging directory"


# ----------------------------------------------------------------------------- the probe, credentials

PROBE = """#!/bin/sh
if [ -n "$FAKE_PROBE_FAIL" ]; then echo '{"ok": false, "failed": ["host.driver"]}'; exit 1; fi
echo '{"ok": true, "failed": []}'
"""

PROBE_WS = """[workspace]
name = "probe"
channels = ["{url}"]
platforms = [{{ name = "linux-64-gfx942", platform = "linux-64", __amdgpu = "0", __amdgpu_arch = "9.4.2" }}]

[dependencies]
rocm-version = "7.2.*"
rocm-env-check = "*"
amdgpu-target = {{ version = "*", build = "gfx942" }}
"""


@pytest.fixture(scope="module")
def probe_channel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A channel whose rocm-env-check prints a report and fails when $FAKE_PROBE_FAIL is set."""
    import rattler_build as rb
    from channels import FIXED_TIME, Pkg, build_channel

    root = tmp_path_factory.mktemp("probe")
    channel = build_channel(root / "channel", [Pkg("rocm-version", "7.2", subdir="noarch", noarch="generic"),
                                               Pkg("amdgpu-target", "1", "gfx942", subdir="noarch", noarch="generic")])
    files = root / "files"
    (files / "bin").mkdir(parents=True)
    (files / "bin/rocm-env-check").write_text(PROBE)
    (files / "bin/rocm-env-check").chmod(0o755)
    rb.assemble_package(name="rocm-env-check", version="0.1.0", target_platform="noarch", build_string="0",
                        output_dir=str(channel / "noarch"), files_dir=str(files), noarch="generic",
                        timestamp=FIXED_TIME, license="MIT", summary="fake probe")
    return build_channel(channel, [])


def _probe_ws(root: Path, url: str) -> Path:
    root.mkdir(parents=True)
    (root / "pixi.toml").write_text(PROBE_WS.format(url=url))
    assert main(["lock", "--manifest-path", str(root / "pixi.toml")]) == 0
    return root


def test_unpack_runs_the_environments_probe_and_its_verdict_is_the_exit_code(
        probe_channel: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    ws = _probe_ws(tmp_path / "ws", probe_channel.as_uri())
    assert pack(ws, tmp_path / "b.tar", env="default") == 0
    host = fake_node(tmp_path / "host", [90402])
    assert unpack(tmp_path / "b.tar", tmp_path / "ok", host) == 0
    assert "probe passed" in capsys.readouterr().err
    monkeypatch.setenv("FAKE_PROBE_FAIL", "1")
    assert unpack(tmp_path / "b.tar", tmp_path / "bad", host, "--json") == 1
    captured = capsys.readouterr()
    assert json.loads(captured.out)["probe"]["failed"] == ["host.driver"]
    assert "probe failed: host.driver" in captured.err and "it stays installed" in captured.err
    assert (tmp_path / "bad/bin/rocm-env-check").is_file()
    assert unpack(tmp_path / "b.tar", tmp_path / "unverified", host, "--no-verify") == 0


def test_a_credential_in_the_channel_url_never_reaches_the_bundle(probe_channel: Path, tmp_path: Path) -> None:
    from rocmlock.channel.serve import serving

    # No auth file: the only credentials are the URL's, which lock and pack hand to rattler in memory.
    secret = "s3cr3t-Pa55-" + os.urandom(4).hex()
    with serving(probe_channel, "private", "packer", secret) as url:
        ws = _probe_ws(tmp_path / "ws", url.replace("http://", f"http://packer:{secret}@"))
        assert pack(ws, tmp_path / "b.tar", env="default") == 0
    data = (tmp_path / "b.tar").read_bytes()
    assert secret.encode() not in data and b"packer" not in data
    x = tmp_path / "x"
    shutil.unpack_archive(tmp_path / "b.tar", x, format="tar")
    for path in x.rglob("*"):
        if path.is_file() and not path.name.endswith(".conda"):
            assert secret not in path.read_text() and "packer" not in path.read_text(), path


def test_a_kept_extraction_gets_an_explicit_file_with_its_file_urls(bundle: Path, locked_ws: Path,
                                                                    tmp_path: Path) -> None:
    keep = tmp_path / "kept"
    assert unpack(bundle, tmp_path / "env", fake_node(tmp_path / "host", [90402]), "--extract-dir", str(keep)) == 0
    lines = (keep / f"conda-{PLATFORM}.lock").read_text().splitlines()
    urls = lines[lines.index("@EXPLICIT") + 1:]
    assert len(urls) == len(locked_set(locked_ws))
    for line in urls:
        url, sha = line.split("#sha256:")
        assert url.startswith((keep / "channel").as_uri() + "/")
        path = Path(url.removeprefix("file://"))
        assert hashlib.sha256(path.read_bytes()).hexdigest() == sha


def _python310() -> str | None:
    """A CPython 3.10 of this machine (pyenv's, or python3.10 on PATH), as a node's python3 stand-in."""
    import glob
    import subprocess

    # pyenv's root is $PYENV_ROOT, ~/.pyenv by default (CI runs as root: /root/.pyenv there).
    roots = dict.fromkeys([os.environ.get("PYENV_ROOT", ""), os.path.expanduser("~/.pyenv"), "/root/.pyenv"])
    pyenv = [p for root in roots if root for p in sorted(glob.glob(f"{root}/versions/3.10.*/bin/python3.10"))]
    for candidate in [shutil.which("python3.10"), *pyenv]:
        if candidate:
            proc = subprocess.run([candidate, "-c", "import sys, venv; print(sys.executable)"], capture_output=True,
                                  text=True, check=False)
            if proc.returncode == 0:
                return proc.stdout.strip()
    return None


@pytest.mark.parametrize("node_python", ["this", "3.10"])
def test_with_installer_a_node_without_rocmlock_installs_the_bundle(locked_ws: Path, tmp_path: Path,
                                                                     node_python: str) -> None:
    # Needs PyPI (pip download of py-rattler's wheel), as CI has; then the node side runs with no network:
    # pip --no-index from the bundle's wheels, in a venv of the node's python. About 15 s each. 3.10: the
    # python3 of Ubuntu 22.04 (a ROCm 7.2 platform); rocmlock's floor is 3.11, `unpack` runs on 3.10 (tomli
    # for tomllib; py-rattler's wheel is cp310-abi3).
    import subprocess
    import sys

    python = sys.executable if node_python == "this" else _python310()
    if python is None:
        pytest.skip("no CPython 3.10 on this machine to stand in for a node's python3")
    assert pack(locked_ws, tmp_path / "b.tar", "--with-installer") == 0
    assert pack(locked_ws, tmp_path / "again.tar", "--with-installer") == 0
    assert (tmp_path / "b.tar").read_bytes() == (tmp_path / "again.tar").read_bytes(), "rocmlock's wheel too"
    x = tmp_path / "x"
    shutil.unpack_archive(tmp_path / "b.tar", x, format="tar")
    wheels = sorted(p.name for p in (x / "installer/wheels").iterdir())
    assert [w.split("-")[0] for w in wheels] == ["py_rattler", "rocm_bootstrap", "rocmlock", "tomli"]
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {"PATH": os.defpath, "HOME": str(tmp_path), "TMPDIR": str(scratch), "PYTHON": python}
    proc = subprocess.run(["sh", str(x / "installer/install.sh"), "--prefix", str(tmp_path / "env"),
                           "--host-root", str(fake_node(tmp_path / "host", [90402]))],
                          env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    assert installed(tmp_path / "env") == locked_set(locked_ws)
    assert "node check: a gfx942 GPU" in proc.stderr
    assert not list(scratch.iterdir()), "the temporary venv is removed"


def test_the_tar_writer_writes_what_tarfile_would(tmp_path: Path) -> None:
    # bundle.write_tar copies files with copy_file_range and leaves holes for the packages that are downloaded
    # into place; the bytes must be tarfile's own for the same members.
    from rocmlock.bundle.layout import Member, _tarinfo, members_of_tree, sort_members, write_tar

    payload = os.urandom(70_001)
    tree = tmp_path / "tree"
    (tree / "wheels").mkdir(parents=True)
    (tree / "wheels" / ("long-" * 30 + ".whl")).write_bytes(os.urandom(5000))
    (tree / "install.sh").write_text("#!/bin/sh\n")
    (tree / "install.sh").chmod(0o755)
    members = sort_members([*members_of_tree(tree, "installer"), Member("channel", is_dir=True),
                            Member("channel/noarch", is_dir=True), Member("channel/noarch/a.conda", size=70_001),
                            Member("channel.txt", data=b""), Member("channel/noarch/repodata.json", data=b"{}")])
    assert [m.name for m in members][:4] == ["channel", "channel/noarch", "channel/noarch/a.conda",
                                             "channel/noarch/repodata.json"]
    with (tmp_path / "ours.tar").open("wb") as fh:
        offsets = write_tar(members, fh.fileno())
        os.pwrite(fh.fileno(), payload, offsets["channel/noarch/a.conda"])
    with tarfile.open(tmp_path / "theirs.tar", "w", format=tarfile.GNU_FORMAT) as tar:
        for m in members:
            data = payload if m.name.endswith("a.conda") else m.data if m.data is not None else \
                m.path.read_bytes() if m.path else None
            tar.addfile(_tarinfo(m), None if data is None else __import__("io").BytesIO(data))
    assert (tmp_path / "ours.tar").read_bytes() == (tmp_path / "theirs.tar").read_bytes()


def test_a_package_larger_than_the_locked_size_never_overwrites_the_next_member(
        ws_copy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import re

    lock = ws_copy / "pixi.lock"
    text = lock.read_text()
    block = re.search(r"- conda: \S+/numpy-2\.2\.0-py312h0_0\.conda\n(?:  .*\n)*?  size: (\d+)\n", text)
    assert block is not None
    lock.write_text(text.replace(block.group(0), block.group(0).replace(f"size: {block.group(1)}", "size: 100")))
    out = tmp_path / "out" / "b.tar"
    assert pack(ws_copy, out) == 1
    assert "numpy-2.2.0-py312h0_0.conda: larger than the lock's size 100" in capsys.readouterr().err
    assert not list(out.parent.iterdir())


def test_a_distribution_rocm_in_usr_is_found_by_its_version_header(bundle: Path, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    # Debian's ROCm 7.2.4 layout: /usr, no .info/version, the version in rocm-core's rocm_version.h.
    host = fake_node(tmp_path / "host", [90402], rocm=None)
    (host / "usr/include/hip").mkdir(parents=True)
    (host / "usr/include/hip/hip_runtime.h").write_text("")
    (host / "usr/include/rocm-core").mkdir(parents=True)
    (host / "usr/include/rocm-core/rocm_version.h").write_text(
        "#define ROCM_VERSION_MAJOR 7\n#define ROCM_VERSION_MINOR 2\n#define ROCM_VERSION_PATCH 4\n")
    assert unpack(bundle, tmp_path / "env", host) == 0
    assert "node check: a gfx942 GPU, ROCm 7.2 found" in capsys.readouterr().err


REAL_PROBE_WS = """[workspace]
name = "real-probe"
channels = ["{probe}", "{private}", "{forge}"]
platforms = [{{ name = "linux-64-gfx942", platform = "linux-64", __amdgpu = "0", __amdgpu_arch = "9.4.2" }}]

[dependencies]
python = "3.12.*"
rocm-version = "7.2.*"
rocm-env-check = "*"
amdgpu-target = {{ version = "*", build = "gfx942" }}
"""


def test_unpack_runs_the_real_rocm_env_check_and_reports_its_verdict(
        channels: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The rocm-env-check recipe built for real (as tests/test_probe_recipe.py does); on this GPU-less host the
    # probe fails (no amdgpu driver): unpack must run it from the new prefix, show its failed checks, exit 1
    # and keep the prefix. The test channel's python is empty: the wrapper falls back to python3 on PATH.
    import asyncio

    import rattler_build as rb
    from hostpython import python_shim
    from rattler.index import index_fs

    recipe = Path(__file__).resolve().parents[1] / "recipes/rocm-env-check/recipe.yaml"
    probe = tmp_path / "probe-channel"
    (rendered,) = rb.Stage0Recipe.from_file(str(recipe)).render(rb.VariantConfig())
    rendered.run_build(tool_config=rb.ToolConfiguration(test_strategy="skip"), output_dir=str(probe),
                       channels=[], no_build_id=True)
    shutil.rmtree(probe / "bld", ignore_errors=True)
    asyncio.run(index_fs(str(probe)))
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "pixi.toml").write_text(REAL_PROBE_WS.format(probe=probe.as_uri(), private=channels["private"].as_uri(),
                                                       forge=channels["forge"].as_uri()))
    assert main(["lock", "--manifest-path", str(ws / "pixi.toml")]) == 0
    assert pack(ws, tmp_path / "b.tar", env="default") == 0
    bindir = tmp_path / "hostbin"
    bindir.mkdir()
    python_shim(bindir / "python3")
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")
    # The probe's torch checks would take 20 s of this machine (importing the host's CPU torch) to fail the
    # same way; a torch that cannot be imported makes them fail at once.
    (tmp_path / "notorch/torch").mkdir(parents=True)
    (tmp_path / "notorch/torch/__init__.py").write_text("raise ImportError('no torch in this test')\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "notorch"))
    capsys.readouterr()
    assert unpack(tmp_path / "b.tar", tmp_path / "env", fake_node(tmp_path / "host", [90402]), "--json") == 1
    captured = capsys.readouterr()
    probe_result = json.loads(captured.out)["probe"]
    assert probe_result["command"] == f"{tmp_path / 'env/bin/rocm-env-check'} --json"
    assert probe_result["failed"] and not probe_result["ok"] and probe_result["exit_code"] == 1
    assert f"probe failed: {', '.join(probe_result['failed'])}" in captured.err
    assert (tmp_path / "env/share/rocm-env-check/verify_env.py").is_file()
    assert "host.driver" in probe_result["failed"], "no amdgpu driver here"
