"""``rocmlock image``: a reproducible OCI image of a locked environment on a real Debian base, pushed to a real
registry (Debian's docker-registry on 127.0.0.1), pulled back with skopeo, unpacked with umoci, its conda-meta
compared with the lock and its probe run inside the unpacked rootfs."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import hashlib
import io
import json
import os
import shutil
import socket
import subprocess
import tarfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from rattler.index import index_fs
from rocmlock.cli.main import main
from rocmlock.lock.lockfile import read_lockfile

ENV = "mi300x"


@pytest.fixture(scope="module")
def base() -> Path:
    from ocibase import debian_base_for_tests

    return debian_base_for_tests()


def need_tools(*tools: str) -> None:
    """Fail (in CI, which installs them: .ci/run) or skip (elsewhere) a test whose system tools are missing."""
    from ciskips import in_ci

    missing = [t for t in tools if shutil.which(t) is None and not Path(f"/usr/sbin/{t}").exists()]
    if missing:
        why = f"{', '.join(missing)} not installed (apt-get install {' '.join(missing)})"
        if in_ci():
            pytest.fail(why)
        pytest.skip(why)


def image(ws: Path, *args: str) -> int:
    """``rocmlock image`` of ``ws``'s environment; without ``--base`` in ``args`` the environment alone (``--no-base``,
    which must be asked for: tests of that refusal call ``main`` themselves)."""
    base = () if "--base" in args or "--no-base" in args else ("--no-base",)
    return main(["image", "--manifest-path", str(ws / "pixi.toml"), "-e", ENV, *base, *args])


def _layout_manifest(layout: Path) -> tuple[str, dict]:  # type: ignore[type-arg]
    index = json.loads((layout / "index.json").read_text())
    (desc,) = index["manifests"]
    return desc["digest"], json.loads((layout / "blobs/sha256" / desc["digest"][7:]).read_bytes())


def _blob(layout: Path, digest: str) -> bytes:
    return (layout / "blobs/sha256" / digest[7:]).read_bytes()


def locked_names(ws: Path, env: str = ENV, platform: str | None = None) -> set[str]:
    locked = read_lockfile(ws / "pixi.lock")
    assert locked is not None
    by_platform = locked.environments[env].records
    (records,) = [by_platform[platform]] if platform else by_platform.values()
    return {f"{r.name.normalized}-{r.version}-{r.build}" for r in records}


@pytest.fixture(scope="module")
def built(locked_ws: Path, base: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("image") / "layout"
    assert image(locked_ws, "--base", f"oci:{base}:base", "-o", str(out)) == 0
    return out


def test_the_image_is_the_base_plus_one_layer_holding_exactly_the_locked_environment(
        built: Path, base: Path, locked_ws: Path) -> None:
    digest, manifest = _layout_manifest(built)
    _, base_manifest = _layout_manifest(base)
    assert [l["digest"] for l in manifest["layers"][:-1]] == [l["digest"] for l in base_manifest["layers"]]
    top = manifest["layers"][-1]
    data = _blob(built, top["digest"])
    assert "sha256:" + hashlib.sha256(data).hexdigest() == top["digest"] and len(data) == top["size"]
    config = json.loads(_blob(built, manifest["config"]["digest"]))
    raw = gzip.decompress(data)
    assert config["rootfs"]["diff_ids"][-1] == "sha256:" + hashlib.sha256(raw).hexdigest()
    with tarfile.open(fileobj=gzip.GzipFile(fileobj=io.BytesIO(data))) as tar:
        members = tar.getmembers()
        names = [m.name for m in members]
        assert names == sorted(names)
        assert {(m.uid, m.gid, m.uname, m.gname) for m in members} == {(0, 0, "", "")}
        assert len({m.mtime for m in members}) == 1
        metas = {n.rsplit("/", 1)[1][:-5] for n in names if n.startswith("opt/env/conda-meta/") and n.endswith(".json")}
        assert metas == locked_names(locked_ws)
        for m in members:
            if m.name.startswith("opt/env/conda-meta/") and m.isfile():
                text = tar.extractfile(m).read().decode()  # type: ignore[union-attr]
                # No host path: the staging directory and rattler's package cache are nowhere in it.
                assert "extracted_package_dir" not in text and ".rocmlock-image-" not in text
                assert "rattler" not in text and str(Path.home()) not in text
        assert "opt/rocmlock/verify_env.py" in names and "opt/rocmlock/check" in names
    env = dict(e.split("=", 1) for e in config["config"]["Env"])
    assert env["PATH"].startswith("/opt/env/bin:") and env["CONDA_PREFIX"] == "/opt/env"
    assert "ROCM_PATH" not in env  # the Debian base has no ROCm: never a path without it (rocm-version's rule)
    labels = config["config"]["Labels"]
    lock_sha = hashlib.sha256((locked_ws / "pixi.lock").read_bytes()).hexdigest()
    assert labels["io.rocmlock.lock.sha256"] == lock_sha and labels["io.rocmlock.environment"] == ENV
    assert labels["io.rocmlock.gpu-target"] == "gfx942" and labels["io.rocmlock.rocm-version"].startswith("7.2")
    assert labels["io.rocmlock.check"] == "/opt/rocmlock/check"
    assert labels["io.rocmlock.probe"] == "/opt/rocmlock/verify_env.py" and labels["io.rocmlock.prefix"] == "/opt/env"
    # The Debian base has bash (essential in minbase): the entrypoint activates, then runs it by default.
    assert config["config"]["Entrypoint"] == ["/opt/rocmlock/entrypoint"] and config["config"]["Cmd"] == ["/bin/bash"]
    assert config["config"]["Healthcheck"]["Test"] == ["CMD", "/opt/rocmlock/check"]
    assert digest.startswith("sha256:")


def test_two_builds_in_other_directories_give_the_same_digest(built: Path, base: Path, locked_ws: Path,
                                                               tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    again = tmp_path / "elsewhere" / "again"
    monkeypatch.setenv("RATTLER_CACHE_DIR", str(tmp_path / "another-package-cache"))  # and another package cache
    assert image(locked_ws, "--base", f"oci:{base}:base", "-o", str(again)) == 0
    assert _layout_manifest(again)[0] == _layout_manifest(built)[0]
    assert sorted(p.name for p in (again / "blobs/sha256").iterdir()) == \
        sorted(p.name for p in (built / "blobs/sha256").iterdir())
    # SOURCE_DATE_EPOCH changes the dates, so the digest; nothing else moves.
    other = tmp_path / "epoch"
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    assert image(locked_ws, "--base", f"oci:{base}:base", "-o", str(other)) == 0
    digest, manifest = _layout_manifest(other)
    assert digest != _layout_manifest(built)[0]
    assert json.loads(_blob(other, manifest["config"]["digest"]))["created"] == "2023-11-14T22:13:20Z"


def test_the_compression_level_changes_the_layers_bytes_and_nothing_it_holds(built: Path, base: Path,
                                                                              locked_ws: Path, tmp_path: Path) -> None:
    """The default is level 5 (podman's): `--compression-level 5` is the same image; level 1 and 9 are other gzip
    streams of the same tar (the same diff_id), so other digests, each the same from build to build."""
    def layer(out: Path) -> tuple[str, str, bytes]:
        digest, manifest = _layout_manifest(out)
        config = json.loads(_blob(out, manifest["config"]["digest"]))
        return digest, config["rootfs"]["diff_ids"][-1], _blob(out, manifest["layers"][-1]["digest"])

    made = {level: tmp_path / f"level{level}" for level in ("5", "1", "9", "1-again")}
    for level, out in made.items():
        assert image(locked_ws, "--base", f"oci:{base}:base", "-o", str(out),
                     "--compression-level", level.split("-")[0]) == 0
    default, five, one, nine, again = (layer(p) for p in (built, *made.values()))
    assert five == default
    assert again == one and one[0] != default[0] and nine[0] != default[0] != one[0]
    levels = [json.loads(_blob(p, _layout_manifest(p)[1]["config"]["digest"]))["config"]["Labels"]
              ["io.rocmlock.layer.gzip-level"] for p in (built, *made.values())]
    assert levels == ["5", "5", "1", "9", "1"]
    assert one[1] == nine[1] == default[1]  # the same tar
    assert gzip.decompress(one[2]) == gzip.decompress(default[2])
    assert len(one[2]) > len(default[2]) >= len(nine[2])


def test_a_build_with_zlib_ng_says_its_digest_differs_from_stock_zlibs(
        locked_ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Image digests are the same on any machine whose Python has stock zlib (docs/containers.md); one whose zlib is
    zlib-ng (Fedora's) writes other gzip bytes, and the build says so in one line. Stock zlib: no such line."""
    import zlib

    assert image(locked_ws, "-o", str(tmp_path / "stock")) == 0
    assert "Python's zlib" not in capsys.readouterr().err
    monkeypatch.setattr(zlib, "ZLIB_RUNTIME_VERSION", "1.3.1.zlib-ng\x1b[2J")
    assert image(locked_ws, "-o", str(tmp_path / "ng")) == 0
    (note,) = [line for line in capsys.readouterr().err.splitlines() if "Python's zlib" in line]
    assert note.startswith("note: ") and "1.3.1.zlib-ng" in note and "diff_id" in note and "\x1b" not in note


def test_a_base_whose_glibc_is_older_than_the_locks_is_refused_before_building(
        base: Path, ws_copy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = ws_copy / "pixi.toml"
    lock = ws_copy / "pixi.lock"
    # The Debian 12 base has glibc 2.36; a lock for glibc 2.99 platforms cannot run on it.
    lock.write_text(lock.read_text().replace("__glibc=2.28", "__glibc=2.99"))
    manifest.write_text(manifest.read_text().replace('glibc = "2.28"', 'glibc = "2.99"'))
    assert image(ws_copy, "--base", f"oci:{base}:base", "-o", str(tmp_path / "out")) == 2
    err = capsys.readouterr().err
    assert "its glibc is 2.36" in err and "needs glibc >= 2.99" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".rocmlock-image-*"))


@pytest.mark.parametrize("args, message", [
    (["-e", "nope", "-o", "OUT", "--no-base"], "no environment 'nope'"),
    (["-o", "OUT", "--base", "oci:/nonexistent/layout"], "not an OCI image layout"),
    (["-o", "OUT", "--base", "oci:BASE:missing-tag"], "no image tagged 'missing-tag'"),
    (["--push", "user:secret@127.0.0.1:1/x:y", "--no-base"], "credentials never go into it"),
    ([], "nowhere to put the image"),
    (["-o", "OUT", "--tag", "../up", "--no-base"], "not an image tag"),
    (["--push", "127.0.0.1:1/x/y", "--no-base"], "no tag"),
    (["-o", "OUT"], "no --base: the image would hold the environment alone"),
    (["-o", "OUT", "--no-base", "--base", "oci:BASE:base"], "--base and --no-base together"),
    (["-o", "OUT", "--no-base", "--prefix", "opt/env"], "not an absolute path"),
    (["-o", "OUT", "--no-base", "--prefix", "/usr/local"], "inside or above a system directory"),
    (["-o", "OUT", "--no-base", "--prefix", "/opt/../etc"], "not an absolute path"),
    (["-o", "OUT", "--base", ""], "--base '' names no image"),  # an unset variable: not a silent --no-base
    (["-o", "OUT", "--no-base", "--tag", ""], "--tag '': not an image tag"),
    (["-o", "OUT", "--no-base", "--compression-level", "0"], "'0' is not a number from 1 to 9"),
    (["-o", "OUT", "--no-base", "--compression-level", "10"], "'10' is not a number from 1 to 9"),
    (["-o", "OUT", "--no-base", "--compression-level", "5.5"], "'5.5' is not a number from 1 to 9"),
])
def test_bad_input_is_one_line_and_exit_2_with_nothing_written(
        base: Path, locked_ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        args: list[str], message: str) -> None:
    args = [a.replace("OUT", str(tmp_path / "out")).replace("BASE", str(base)) for a in args]
    assert main(["image", "--manifest-path", str(locked_ws / "pixi.toml"), *(["-e", ENV] if "-e" not in args else []),
                 *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and "secret" not in err
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".rocmlock-image-*"))


def test_o_that_is_a_link_to_nothing_is_not_written_through(locked_ws: Path, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """As GNU cp will not write through a dangling symlink: the layout would land where the link points, with the
    directories on the way made (planted: -o resolved first, as before, wrote tmp/elsewhere/layout)."""
    link = tmp_path / "out"
    link.symlink_to(tmp_path / "elsewhere" / "layout")
    assert image(locked_ws, "--no-base", "-o", str(link)) == 2
    err = capsys.readouterr().err
    assert "a symbolic link to nothing" in err and "Traceback" not in err
    assert not (tmp_path / "elsewhere").exists() and link.is_symlink()
    # A link to an empty directory (or a layout) is followed.
    (tmp_path / "elsewhere" / "layout").mkdir(parents=True)
    assert image(locked_ws, "--no-base", "-o", str(link)) == 0
    assert (tmp_path / "elsewhere" / "layout" / "index.json").is_file() and link.is_symlink()


def test_spellings_of_one_prefix_are_one_prefix() -> None:
    # The prefix is in every digest (paths, activation, labels): the same directory written otherwise must not give
    # another image. PurePosixPath keeps a leading "//", which POSIX leaves to the system.
    from rocmlock.image.files import check_prefix

    assert {check_prefix(p) for p in ("/opt/env", "/opt/env/", "//opt//env", "///opt/./env//")} == {"/opt/env"}


# ----------------------------------------------------------------------------- a real registry


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _bcrypt(password: str) -> str:
    """``password`` hashed with bcrypt by the system's libcrypt (libxcrypt), what distribution's htpasswd reads."""
    import ctypes

    lib = ctypes.CDLL("libcrypt.so.1")
    lib.crypt_gensalt.restype = lib.crypt.restype = ctypes.c_char_p
    salt = lib.crypt_gensalt(b"$2b$", 5, None, 0)
    return str(lib.crypt(password.encode(), salt).decode())


@contextlib.contextmanager
def registry(root: Path, user: str | None = None, password: str = "") -> Iterator[str]:
    """Debian's docker-registry (distribution 2.8) on 127.0.0.1, storage under ``root``; htpasswd auth for ``user``.
    Without it the test fails in CI (.ci/run installs it) and is skipped elsewhere, saying what to install."""
    need_tools("docker-registry", "skopeo", "umoci")
    port = _free_port()
    config = root / "config.yml"
    root.mkdir(parents=True, exist_ok=True)
    auth = ""
    if user:
        (root / "htpasswd").write_text(f"{user}:{_bcrypt(password)}\n")
        auth = f"auth:\n  htpasswd:\n    realm: test\n    path: {root}/htpasswd\n"
    config.write_text(f"version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {root}/data\n"
                      f"http:\n  addr: 127.0.0.1:{port}\n{auth}")
    proc = subprocess.Popen([shutil.which("docker-registry") or "/usr/sbin/docker-registry", "serve", str(config)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=1):
                    break
            except urllib.error.HTTPError:  # 401: it is up, and asks for credentials
                break
            except OSError:
                pass
            time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_pushed_pulled_unpacked_the_rootfs_holds_the_lock_and_its_probe_fails_honestly(
        built: Path, base: Path, locked_ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with registry(tmp_path / "registry") as host:
        ref = f"{host}/rocmlock/{ENV}:v1"
        assert image(locked_ws, "--base", f"oci:{base}:base", "--push", ref) == 0
        pulled = tmp_path / "pulled"
        subprocess.run(["skopeo", "copy", "--quiet", "--src-tls-verify=false", f"docker://{ref}", f"oci:{pulled}:v1"],
                       check=True)
        inspect = json.loads(subprocess.run(["skopeo", "inspect", "--tls-verify=false", f"docker://{ref}"],
                                            check=True, capture_output=True).stdout)
        # A base from the registry (skopeo fetches it): the same layers as from the layout, and its name labelled.
        subprocess.run(["skopeo", "copy", "--quiet", "--dest-tls-verify=false", f"oci:{base}:base",
                        f"docker://{host}/debian:12"], check=True)
        from_registry = tmp_path / "from-registry"
        assert image(locked_ws, "--base", f"{host}/debian:12", "-o", str(from_registry)) == 0
        assert main(["image", "--manifest-path", str(locked_ws / "pixi.toml"), "-e", ENV, "--base",
                     f"{host}/no-such-image:1", "-o", str(tmp_path / "never")]) == 1
        assert not (tmp_path / "never").exists()
        err = capsys.readouterr().err.splitlines()
        assert err[-2].startswith(f"error: fetching the base image {host}/no-such-image:1: ") and err[-1].startswith("hint:")
    layers = [l["digest"] for l in _layout_manifest(from_registry)[1]["layers"]]
    assert layers == [l["digest"] for l in _layout_manifest(built)[1]["layers"]]
    labels = json.loads(_blob(from_registry, _layout_manifest(from_registry)[1]["config"]["digest"]))["config"]["Labels"]
    assert labels["org.opencontainers.image.base.name"] == f"{host}/debian:12"
    # The registry holds the very manifest that was built (skopeo --preserve-digests), so the same digest.
    digest, _ = _layout_manifest(built)
    assert inspect["Digest"] == digest
    assert inspect["Labels"]["io.rocmlock.environment"] == ENV
    subprocess.run(["umoci", "unpack", "--image", f"{pulled}:v1", str(tmp_path / "bundle")], check=True,
                   capture_output=True)
    rootfs = tmp_path / "bundle/rootfs"
    metas = {p.name[:-5] for p in (rootfs / "opt/env/conda-meta").glob("*.json")}
    assert metas == locked_names(locked_ws)
    # The probe inside the unpacked image, in a chroot; and the same probe on the same environment outside.
    inside = subprocess.run([shutil.which("chroot", path="/usr/sbin:/usr/bin:/sbin:/bin") or "chroot", str(rootfs), "/opt/rocmlock/check", "--json"], capture_output=True, text=True,
                            env={"PATH": "/usr/bin:/bin"}, check=False)
    # Outside: the host's system python (isolated: not the test venv, whose torch the image does not have).
    outside = subprocess.run(["/usr/bin/python3", "-I", str(rootfs / "opt/rocmlock/verify_env.py"), "--prefix",
                              str(rootfs / "opt/env"), "--json"], capture_output=True, text=True, check=False,
                             env={"PATH": "/usr/bin:/bin"})
    assert inside.returncode == outside.returncode == 1, (inside.stdout[-2000:], inside.stderr[-2000:])
    report_in, report_out = json.loads(inside.stdout), json.loads(outside.stdout)

    def statuses(report: dict) -> dict[str, str]:  # type: ignore[type-arg]
        return {c["id"]: c["status"] for c in report["checks"]}

    inner, outer = statuses(report_in), statuses(report_out)
    # No GPU here, in the chroot or out of it: the probe says so and fails.
    assert inner["host.devices"] == outer["host.devices"] == "fail"
    # What it says about the environment itself (torch and up) is the same inside the image and outside; the
    # host/tools/rocm checks read the machine, and this host may have a distribution ROCm the Debian base has not.
    machine = ("host.", "tools.", "rocm.")
    assert {k: v for k, v in inner.items() if not k.startswith(machine)} == \
        {k: v for k, v in outer.items() if not k.startswith(machine)}
    assert inner["torch.import"] == "fail"


def test_the_offline_examples_environments_are_pushed_and_pulled_back_exactly(base: Path, tmp_path: Path) -> None:
    """Issue 37's "done when": every environment of the bundled example (examples/offline, built and locked as the
    quickstart does) becomes an image in a real registry; pulled back and unpacked, each holds exactly its lock,
    with the environment and GPU target labelled."""
    from example_ws import build_example

    ws = build_example(tmp_path / "example")
    locked = read_lockfile(ws / "pixi.lock")
    assert locked is not None and sorted(locked.environments) == ["default", "mi250", "mi300x"]
    with registry(tmp_path / "registry") as host:
        # default spans both GPU platforms (no gfx feature): an image is of one platform, named with -p.
        for env, platform, gfx in (("default", "linux-64-gfx942", None), ("mi250", None, "gfx90a"),
                                   ("mi300x", None, "gfx942")):
            ref = f"{host}/rocmlock-example/{env}:v1"
            assert main(["image", "--manifest-path", str(ws / "pixi.toml"), "-e", env, "--base", f"oci:{base}:base",
                         *(["-p", platform] if platform else []), "--push", ref]) == 0
            inspect = json.loads(subprocess.run(["skopeo", "inspect", "--tls-verify=false", f"docker://{ref}"],
                                                check=True, capture_output=True).stdout)
            assert inspect["Labels"]["io.rocmlock.environment"] == env
            if gfx:
                assert inspect["Labels"]["io.rocmlock.gpu-target"] == gfx
            pulled = tmp_path / f"pulled-{env}"
            subprocess.run(["skopeo", "copy", "--quiet", "--src-tls-verify=false", f"docker://{ref}",
                            f"oci:{pulled}:v1"], check=True)
            bundle = tmp_path / f"bundle-{env}"
            subprocess.run(["umoci", "unpack", "--image", f"{pulled}:v1", str(bundle)], check=True,
                           capture_output=True)
            metas = {p.name[:-5] for p in (bundle / "rootfs/opt/env/conda-meta").glob("*.json")}
            assert metas == locked_names(ws, env, platform)


def test_a_registry_that_refuses_the_push_is_exit_1_and_one_line(base: Path, locked_ws: Path, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    port = _free_port()  # nothing listens there
    assert image(locked_ws, "--base", f"oci:{base}:base", "--push", f"127.0.0.1:{port}/x/y:z",
                 "-o", str(tmp_path / "out")) == 1
    err = capsys.readouterr().err
    assert "pushing the image to 127.0.0.1" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".rocmlock-image-*"))


# ----------------------------------------------------------------------------- base images read from their layers


def _synthetic_base(root: Path, layers: list[dict[str, str | bytes]], zstd: bool = False) -> Path:
    """An OCI layout whose layers hold ``{path: bytes (a file) | "->target" (a symlink)}``, in that order
    (gzip'd, or zstd'd)."""
    from rocmlock.image import oci

    blobs = oci.start_layout(root)
    descs, diff_ids = [], []
    for files in layers:
        raw = io.BytesIO()
        with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for name, content in files.items():
                info = tarfile.TarInfo(name)
                if isinstance(content, str):
                    info.type, info.linkname = tarfile.SYMTYPE, content.removeprefix("->")
                    tar.addfile(info)
                else:
                    info.size = len(content)
                    tar.addfile(info, io.BytesIO(content))
        if zstd:
            import zstandard

            data = zstandard.ZstdCompressor().compress(raw.getvalue())
        else:
            data = gzip.compress(raw.getvalue(), mtime=0)
        diff_id, digest, size = (f"sha256:{hashlib.sha256(raw.getvalue()).hexdigest()}",
                                 f"sha256:{hashlib.sha256(data).hexdigest()}", len(data))
        (blobs / "sha256" / digest[7:]).write_bytes(data)
        descs.append({"mediaType": oci.LAYER_GZIP.replace("gzip", "zstd") if zstd else oci.LAYER_GZIP,
                      "digest": digest, "size": size})
        diff_ids.append(diff_id)
    config = {"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": diff_ids}}
    oci.finish_layout(root, {"schemaVersion": 2, "mediaType": oci.MANIFEST,
                             "config": oci.put_json(blobs, config, oci.CONFIG), "layers": descs}, "base")
    return root


def test_the_glibc_is_read_through_symlinks_and_whiteouts_of_the_layers(tmp_path: Path) -> None:
    from rocmlock.image import oci

    newer = b"\x7fELF...GNU C Library (GNU libc) stable release version 2.40.\n...GLIBC_2.40\x00"
    layout = _synthetic_base(tmp_path / "layout", [
        {"usr/lib64/libc.so.6": newer, "opt/rocm/.info/version": b"7.2.0\n"},
        # The next layer deletes that libc and the ROCm, and brings an old-style libc.so.6 -> libc-2.17.so.
        {"usr/lib64/.wh.libc.so.6": b"", "opt/.wh.rocm": b"", "lib/x86_64-linux-gnu/libc.so.6": "->libc-2.17.so",
         "lib/x86_64-linux-gnu/libc-2.17.so": b"GLIBC_2.17\x00"},
    ])
    base = oci.read_layout(layout, "base", "amd64", "test")
    assert oci.rootfs_facts(base) == oci.RootfsFacts(glibc=(2, 17), rocm=False)
    # An opaque directory hides the layers below it, not what its own layer puts there (before or after it).
    opaque = _synthetic_base(tmp_path / "opaque" / "layout", [
        {"usr/lib64/libc.so.6": newer, "opt/rocm/.info/version": b"7.2.0\n"},
        {"usr/lib64/libc.so.6": b"GLIBC_2.41\x00", "usr/lib64/.wh..wh..opq": b"", "opt/rocm/.wh..wh..opq": b""},
    ])
    assert oci.rootfs_facts(oci.read_layout(opaque, "base", "amd64", "test")) == oci.RootfsFacts((2, 41), False)
    zstd = _synthetic_base(tmp_path / "zstd" / "layout", [{"usr/lib64/libc.so.6": newer}], zstd=True)
    assert oci.rootfs_facts(oci.read_layout(zstd, "base", "amd64", "test")).glibc == (2, 40)
    only_first = _synthetic_base(tmp_path / "first" / "layout", [{"usr/lib64/libc.so.6": newer,
                                                                  "opt/rocm/.info/version": b"7.2.0\n"}])
    first = oci.read_layout(only_first, None, "amd64", "test")
    assert oci.rootfs_facts(first) == oci.RootfsFacts(glibc=(2, 40), rocm=True)
    with pytest.raises(Exception, match="for amd64"):
        oci.read_layout(only_first, None, "arm64", "test")


def test_the_bases_shell_is_found_through_merged_usr_and_a_base_without_one_is_refused(
        locked_ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from rocmlock.image import oci

    libc = {"usr/lib64/libc.so.6": b"GLIBC_2.34\x00"}
    cases = [({"bin": "->usr/bin", "usr/bin/sh": "->dash", "usr/bin/dash": b""}, "/bin/sh"),
             ({"bin/sh": "->bash", "bin/bash": b""}, "/bin/bash"),
             ({"usr/bin/sh": b"", "bin/true": b""}, None),  # /bin is a directory of its own without sh
             ({}, None)]
    for i, (files, shell) in enumerate(cases):
        layout = _synthetic_base(tmp_path / f"s{i}", [{**libc, **files}])
        assert oci.rootfs_facts(oci.read_layout(layout, "base", "amd64", "t")).shell == shell, files
    assert image(locked_ws, "--base", f"oci:{tmp_path / 's3'}:base", "-o", str(tmp_path / "out")) == 2
    err = capsys.readouterr().err
    assert "no /bin/sh in the image" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_a_base_without_glibc_is_refused(locked_ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    layout = _synthetic_base(tmp_path / "musl", [{"lib/ld-musl-x86_64.so.1": b"musl"}])
    assert image(locked_ws, "--base", f"oci:{layout}", "-o", str(tmp_path / "out")) == 2
    err = capsys.readouterr().err
    assert "no glibc (libc.so.6) found in the image" in err and "glibc >= 2.28" in err
    assert not (tmp_path / "out").exists()


def test_a_base_with_rocm_gets_rocm_path_and_a_rebuild_moves_the_tag(locked_ws: Path, tmp_path: Path) -> None:
    layout = _synthetic_base(tmp_path / "rocm", [{"usr/lib64/libc.so.6": b"GLIBC_2.34\x00",
                                                  "opt/rocm/.info/version": b"7.2.0-43\n",
                                                  "bin": "->usr/bin", "usr/bin/sh": "->dash", "usr/bin/dash": b""}])
    out = tmp_path / "out"
    assert image(locked_ws, "--base", f"oci:{layout}:base", "-o", str(out)) == 0
    first = _layout_manifest(out)[0]
    before = {p.name for p in (out / "blobs/sha256").iterdir()}
    assert image(locked_ws, "--no-base", "-o", str(out)) == 0  # no base: the environment alone, its tag moved to it
    digest, manifest = _layout_manifest(out)
    assert digest != first and len(manifest["layers"]) == 1
    # Added to the layout (as skopeo copy ... oci:DIR:TAG does): the first image's blobs stay, the tag moved.
    assert before < {p.name for p in (out / "blobs/sha256").iterdir()}
    env = dict(e.split("=", 1) for e in json.loads(_blob(out, manifest["config"]["digest"]))["config"]["Env"])
    assert "ROCM_PATH" not in env
    assert image(locked_ws, "--base", f"oci:{layout}:base", "-o", str(out)) == 0
    assert _layout_manifest(out)[0] == first
    config = json.loads(_blob(out, _layout_manifest(out)[1]["config"]["digest"]))
    env = dict(e.split("=", 1) for e in config["config"]["Env"])
    assert env["ROCM_PATH"] == env["HIP_PATH"] == "/opt/rocm"


PLACEHOLDER = "/opt/anaconda1anaconda2anaconda3"  # conda's prefix placeholder (conda-build, rattler-build)


def _placeholder_package(path: Path) -> None:
    """A conda package (.tar.bz2, written here) whose etc/placeholder.conf holds the prefix placeholder as a text
    file of paths.json, as conda-build writes a file that named its build prefix."""
    text = f"prefix={PLACEHOLDER}\n".encode()
    index = {"name": "placeholder", "version": "1.0", "build": "0", "build_number": 0, "depends": [],
             "subdir": "linux-64", "platform": "linux", "arch": "x86_64", "license": "MIT", "timestamp": 1767225600000}
    paths = {"paths_version": 1, "paths": [{"_path": "etc/placeholder.conf", "path_type": "hardlink",
                                            "sha256": hashlib.sha256(text).hexdigest(), "size_in_bytes": len(text),
                                            "prefix_placeholder": PLACEHOLDER, "file_mode": "text"}]}
    files = {"info/index.json": json.dumps(index).encode(), "info/paths.json": json.dumps(paths).encode(),
             "info/has_prefix": f"{PLACEHOLDER} text etc/placeholder.conf\n".encode(),
             "info/files": b"etc/placeholder.conf\n", "etc/placeholder.conf": text}
    with tarfile.open(path, "w:bz2") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 1767225600
            tar.addfile(info, io.BytesIO(data))


def test_a_bundle_and_an_image_of_one_environment_hold_the_same_package_bytes(tmp_path: Path) -> None:
    from channels import Pkg, build_channel

    channel = build_channel(tmp_path / "channel", [
        Pkg("payload", "1.0", files=(("bin/payload", "#!/bin/sh\necho payload\n"),
                                     ("share/payload/data.txt", "the same bytes everywhere\n"))),
        Pkg("helper", "2.0", noarch="generic", subdir="noarch", files=(("share/helper/readme", "helper\n"),)),
    ])
    _placeholder_package(channel / "linux-64" / "placeholder-1.0-0.tar.bz2")
    asyncio.run(index_fs(str(channel)))
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "pixi.toml").write_text(
        f'[workspace]\nname = "b"\nchannels = ["{channel.as_uri()}"]\n'
        'platforms = [{ name = "linux-64-g", platform = "linux-64", glibc = "2.28" }]\n'
        '[dependencies]\npayload = "*"\nhelper = "*"\nplaceholder = "*"\n[environments]\nmi300x = []\n')
    assert main(["lock", "--manifest-path", str(ws / "pixi.toml")]) == 0
    assert main(["pack", "--manifest-path", str(ws / "pixi.toml"), "-e", ENV, "-o", str(tmp_path / "b.tar")]) == 0
    (tmp_path / "host").mkdir()  # a host without GPU or ROCm: --force installs anyway
    assert main(["unpack", str(tmp_path / "b.tar"), "--prefix", str(tmp_path / "env"), "--force", "--no-verify",
                 "--host-root", str(tmp_path / "host")]) == 0
    assert image(ws, "--no-base", "-o", str(tmp_path / "image")) == 0
    _, manifest = _layout_manifest(tmp_path / "image")
    in_image: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(_blob(tmp_path / "image", manifest["layers"][-1]["digest"]))) as tar:
        for m in tar.getmembers():
            if m.isfile() and m.name.startswith("opt/env/"):
                in_image[m.name.removeprefix("opt/env/")] = tar.extractfile(m).read()  # type: ignore[union-attr]
    unpacked = {p.relative_to(tmp_path / "env").as_posix(): p.read_bytes()
                for p in (tmp_path / "env").rglob("*") if p.is_file()}

    def packages(files: dict[str, bytes]) -> dict[str, bytes]:
        return {k: v for k, v in files.items() if not k.startswith("conda-meta/") and k != "CACHEDIR.TAG"}

    # The prefix placeholder became the prefix inside the image, not the stage it was built in.
    conf = "etc/placeholder.conf"
    assert in_image.pop(conf) == b"prefix=/opt/env\n"
    assert unpacked.pop(conf) == f"prefix={tmp_path / 'env'}\n".encode()
    assert packages(in_image) == packages(unpacked)
    assert packages(in_image)["share/payload/data.txt"] == b"the same bytes everywhere\n"

    def hashes(files: dict[str, bytes]) -> set[tuple[str, str]]:
        recs = [json.loads(v) for k, v in files.items() if k.startswith("conda-meta/") and k.endswith(".json")]
        return {(r["fn"], r["sha256"]) for r in recs}

    assert hashes(in_image) == hashes(unpacked) and len(hashes(in_image)) == 3


@pytest.mark.parametrize("size", [0, 1, 1 << 20, (1 << 20) + 1, 3 * (1 << 20) + 12345])
def test_the_parallel_gzip_writes_the_same_valid_stream_whatever_the_threads(tmp_path: Path, size: int) -> None:
    import random

    from rocmlock.util.pgzip import ParallelGzip

    rng = random.Random(size)
    data = b"".join(rng.randbytes(4096) if i % 3 == 0 else b"repeated text " * 300 for i in range(size // 4096 + 1))
    data = data[:size]
    streams = []
    for threads in (1, 4):
        buf = io.BytesIO()
        with ParallelGzip(buf, threads=threads) as gz:
            for i in range(0, size, 70_001):  # writes that straddle the chunks
                gz.write(data[i:i + 70_001])
        streams.append(buf.getvalue())
    assert streams[0] == streams[1]
    assert gzip.decompress(streams[0]) == data
    (tmp_path / "x.gz").write_bytes(streams[0])
    assert subprocess.run(["gzip", "-t", str(tmp_path / "x.gz")], check=False).returncode == 0


def test_a_base_layer_whose_bytes_are_not_its_digest_is_refused(locked_ws: Path, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    layout = _synthetic_base(tmp_path / "base", [{"usr/lib64/libc.so.6": b"GLIBC_2.34\x00", "bin/sh": b""},
                                                 {"etc/motd": b"hello\n"}])
    _, manifest = _layout_manifest(layout)
    blob = layout / "blobs/sha256" / manifest["layers"][1]["digest"][7:]
    data = bytearray(blob.read_bytes())
    data[-9] ^= 0xFF  # inside the gzip trailer: still a readable layer for the glibc check, but other bytes
    blob.write_bytes(bytes(data))
    assert image(locked_ws, "--base", f"oci:{layout}:base", "-o", str(tmp_path / "out")) == 2
    err = capsys.readouterr().err
    assert "do not match its digest" in err or "cannot be read" in err
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".rocmlock-image-*"))


def test_a_private_registry_gets_the_credentials_of_the_auth_file_and_they_go_nowhere(
        locked_ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    import base64

    password = "s3cret-Pa55-" + os.urandom(6).hex()
    with registry(tmp_path / "registry", "pusher", password) as host:
        ref = f"{host}/private/{ENV}:v1"
        monkeypatch.setenv("REGISTRY_AUTH_FILE", str(tmp_path / "none.json"))
        (tmp_path / "none.json").write_text('{"auths": {}}')
        assert image(locked_ws, "--no-base", "--push", ref, "-o", str(tmp_path / "refused")) == 1
        refused = capsys.readouterr().err
        assert "unauthorized" in refused and "level=fatal" not in refused and 'msg="' not in refused
        assert f"error: pushing the image to {ref}: " in refused and "Traceback" not in refused
        assert not (tmp_path / "refused").exists()
        token = base64.b64encode(f"pusher:{password}".encode()).decode()
        (tmp_path / "auth.json").write_text(json.dumps({"auths": {host: {"auth": token}}}))
        monkeypatch.setenv("REGISTRY_AUTH_FILE", str(tmp_path / "auth.json"))
        assert image(locked_ws, "--no-base", "--push", ref, "-o", str(tmp_path / "layout"), "--json") == 0
        out = capsys.readouterr()
        digest = json.loads(out.out)["digest"]
        inspect = subprocess.run(["skopeo", "inspect", "--tls-verify=false", f"docker://{ref}"], check=True,
                                 capture_output=True, text=True)
        assert json.loads(inspect.stdout)["Digest"] == digest
    for text in (out.out, out.err, refused):
        assert password not in text and token not in text
    for blob in (tmp_path / "layout/blobs/sha256").iterdir():
        data = blob.read_bytes()
        with contextlib.suppress(OSError):
            data = gzip.decompress(data)
        assert password.encode() not in data and token.encode() not in data
