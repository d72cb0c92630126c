"""``rocmlock image`` under hostile input (issue 41, causes A-G): base images whose JSON, layers or blobs lie,
layer bombs, an ``-o`` that holds another layout, ``SOURCE_DATE_EPOCH``, locked packages that write outside the
prefix, and ``--push`` references without a registry. Each is one line and exit 2 with nothing written, or (for
``-o``) an image added to what was there."""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import io
import json
import subprocess
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rattler.index import index_fs
from rocmlock.cli.main import main
from test_image import ENV, _layout_manifest, _synthetic_base, image

Json = dict[str, Any]
LIBC = {"usr/lib64/libc.so.6": b"GLIBC_2.34\x00", "bin/sh": b""}  # the least a base must have


def _put(layout: Path, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    (layout / "blobs/sha256" / digest).write_bytes(data)
    return f"sha256:{digest}"


def _desc(layout: Path, value: Json | bytes, media_type: str) -> Json:
    data = value if isinstance(value, bytes) else json.dumps(value).encode()
    return {"mediaType": media_type, "digest": _put(layout, data), "size": len(data)}


def _rewrite(layout: Path, *, config: Callable[[Json], Any] | None = None,
             manifest: Callable[[Json], Any] | None = None, index: Callable[[Json], Any] | None = None) -> None:
    """The layout's config, manifest and index.json changed by the callables, every digest and size kept true
    (a callable may return bytes to replace the blob's whole text)."""
    idx = json.loads((layout / "index.json").read_text())
    man = json.loads((layout / "blobs/sha256" / idx["manifests"][0]["digest"][7:]).read_bytes())
    if config is not None:
        cfg = json.loads((layout / "blobs/sha256" / man["config"]["digest"][7:]).read_bytes())
        new = config(cfg)
        man["config"] = _desc(layout, cfg if new is None else new, man["config"]["mediaType"])
    if manifest is not None:
        new = manifest(man)
        man = man if new is None else new
    idx["manifests"][0].update(_desc(layout, man, idx["manifests"][0]["mediaType"]))
    if index is not None:
        new = index(idx)
        idx = idx if new is None else new
    (layout / "index.json").write_text(json.dumps(idx) if not isinstance(idx, bytes) else idx.decode())


def refused(ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """The image build with ``args`` exits 2 with one line, writing nothing; its stderr."""
    assert image(ws, *args, "-o", str(tmp_path / "out")) == 2
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert "Traceback" not in err and lines[0].startswith("error: ") and len(lines) <= 2, err
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".rocmlock-image-*"))
    return err


def _nested_index(platform: object) -> Callable[[Json], Json]:
    def edit(idx: Json) -> Json:
        layout = _CURRENT[0]
        inner = dict(idx["manifests"][0], platform=platform)
        outer = _desc(layout, {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                               "manifests": [inner]}, "application/vnd.oci.image.index.v1+json")
        outer["annotations"] = {"org.opencontainers.image.ref.name": "base"}
        return dict(idx, manifests=[outer])
    return edit


_CURRENT: list[Path] = []


# A: every field of the base's JSON has its type, or the build stops in one line naming the blob and the key.
@pytest.mark.parametrize(("edit", "says"), [
    ({"index": lambda i: dict(i, manifests=5)}, "index.json: 'manifests' is the number 5, not a list"),
    ({"index": lambda i: i["manifests"][0].update(annotations="base")},
     "index.json: 'manifests[0].annotations' is the string 'base', not an object of strings"),
    ({"manifest": lambda m: dict(m, config="x")}, "'config' is the string 'x', not an object"),
    ({"config": lambda c: c["rootfs"].update(diff_ids=3)}, "'rootfs.diff_ids' is the number 3, not a list of strings"),
    ({"config": lambda c: c.update(config=[])}, "'config' is a list, not an object"),
    ({"config": lambda c: c.update(config={"Labels": ["a=b"]})}, "'config.Labels' is a list, not an object of strings"),
    ({"config": lambda c: c.update(config={"Env": "PATH=/x"})}, "'config.Env' is the string 'PATH=/x'"),
    ({"config": lambda c: c.update(config={"Labels": {"a": 1}})},
     "'config.Labels' is an object holding a non-string, not an object of strings"),
    ({"config": lambda c: c.update(history=5)}, "'history' is the number 5, not a list"),
    ({"config": lambda c: c.update(architecture=None)}, "no 'architecture'"),
    ({"manifest": lambda m: m["layers"][0].update(size="12")}, "'layers[0].size' is the string '12', not an integer"),
    ({"index": _nested_index("linux/amd64")},
     "'manifests[0].platform' is the string 'linux/amd64', not an object"),
    ({"config": lambda c: b'{"a":' + b"[" * 200_000 + b"]" * 200_000 + b"}"}, "JSON nested too deeply"),
    ({"config": lambda c: c.update(x=json.loads("[" * 100 + "]" * 100))}, "JSON nested deeper than 64 levels"),
    # Python's json reads 1e400 as inf and NaN as nan; copied into the config they came out as Infinity/NaN,
    # which skopeo and podman refuse ("invalid character 'I'"), with the build's exit 0.
    ({"config": lambda c: json.dumps(c).encode()[:-1] + b', "x-vendor": 1e400}'}, "the number 1e400 is beyond"),
    ({"config": lambda c: json.dumps(c).encode()[:-1] + b', "x-vendor": NaN}'}, "the number NaN is beyond"),
    # An integer past 64 bits was copied digit for digit: Go's readers (int64 durations, float64 where untyped)
    # refuse it. 401 digits, and one past uint64.
    ({"config": lambda c: json.dumps(c).encode()[:-1] + b', "x-vendor": ' + b"9" * 401 + b"}"},
     "the number " + "9" * 40 + " is beyond"),
    ({"config": lambda c: c.setdefault("config", {}).update(Healthcheck={"Interval": 1 << 64})},
     "the number 18446744073709551616 is"),
])
def test_base_json_of_the_wrong_type_is_one_line(locked_ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                edit: dict[str, Callable[[Json], Any]], says: str) -> None:
    layout = _synthetic_base(tmp_path / "base", [LIBC])
    _CURRENT[:] = [layout]
    _rewrite(layout, **edit)
    err = refused(locked_ws, tmp_path, capsys, "--base", f"oci:{layout}:base")
    assert says in err
    blob = "index.json" if "index" in edit else "config sha256:" if "config" in edit else "manifest sha256:"
    assert blob in err or "image index" in err


def test_a_nested_index_with_a_platform_object_is_followed(locked_ws: Path, tmp_path: Path) -> None:
    layout = _synthetic_base(tmp_path / "base", [LIBC])
    _CURRENT[:] = [layout]
    _rewrite(layout, index=_nested_index({"architecture": "amd64", "os": "linux"}))
    assert image(locked_ws, "--base", f"oci:{layout}:base", "-o", str(tmp_path / "out")) == 0


# The manifest and config are used only when their bytes are their digest: a config changed in place (an
# LD_PRELOAD slipped into its Env) is refused, as is a manifest changed in place.
@pytest.mark.parametrize("blob", ["config", "manifest"])
def test_a_json_blob_changed_under_its_digest_is_refused(locked_ws: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str], blob: str) -> None:
    layout = _synthetic_base(tmp_path / "base", [LIBC])
    digest, manifest = _layout_manifest(layout)
    path = layout / "blobs/sha256" / (manifest["config"]["digest"] if blob == "config" else digest)[7:]
    value = json.loads(path.read_bytes())
    if blob == "config":
        value["config"] = {"Env": ["LD_PRELOAD=/tmp/evil.so"]}
    else:
        value["annotations"] = {"x": "y"}
    path.write_bytes(json.dumps(value).encode())
    err = refused(locked_ws, tmp_path, capsys, "--base", f"oci:{layout}:base")
    assert f"{blob} sha256:" in err and "does not match its digest" in err


# B: a layer whose diff_id, size or media type disagrees with its manifest and config is refused, as umoci
# refuses to unpack it ("diffid mismatch", "verified reader size mismatch", "blob is not correct mediatype").
@pytest.mark.parametrize(("edit", "says", "umoci_says"), [
    ({"config": lambda c: c["rootfs"]["diff_ids"].__setitem__(1, "sha256:" + "1" * 64)},
     "the config's diff_id sha256:1111", "diffid mismatch"),
    ({"manifest": lambda m: m["layers"][1].update(size=m["layers"][1]["size"] + 1)},
     "the manifest says", "size mismatch"),
    ({"manifest": lambda m: m["layers"][1].update(mediaType="application/vnd.example.layer+gzip")},
     "is not an image layer", "not correct mediatype"),
    ({"manifest": lambda m: m["layers"][1].update(mediaType="application/vnd.oci.image.layer.v1.tar+zstd")},
     "cannot be read as a tar+zstd layer", None),
])
def test_a_base_layer_that_is_not_what_manifest_and_config_say_is_refused(
        locked_ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        edit: dict[str, Callable[[Json], Any]], says: str, umoci_says: str | None) -> None:
    layout = _synthetic_base(tmp_path / "base", [LIBC, {"etc/motd": b"hello\n"}])
    _rewrite(layout, **edit)
    assert says in refused(locked_ws, tmp_path, capsys, "--base", f"oci:{layout}:base")
    if umoci_says:  # the premise: umoci will not unpack this base either
        proc = subprocess.run(["umoci", "unpack", "--rootless", "--image", f"{layout}:base", str(tmp_path / "b")],
                              capture_output=True, text=True, check=False)
        assert proc.returncode != 0 and umoci_says in proc.stderr


# C: layer bombs are bounded by what is read, not by what a header declares.
def _tar_header(name: str, size: int, kind: bytes) -> bytes:
    info = tarfile.TarInfo(name)
    info.size, info.type = size, kind
    return info.tobuf(format=tarfile.GNU_FORMAT)


def _layer_base(tmp_path: Path, data: bytes, media_type: str, diff_id: str) -> Path:
    layout = _synthetic_base(tmp_path / "base", [LIBC])

    def manifest(m: Json) -> None:
        m["layers"].append({"mediaType": media_type, "digest": _put(layout, data), "size": len(data)})

    _rewrite(layout, config=lambda c: c["rootfs"]["diff_ids"].append(diff_id), manifest=manifest)
    return layout


def test_a_pax_header_declaring_gigabytes_is_refused_before_it_is_read(
        locked_ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # 256 MiB of PAX record behind its header, as gzip members of 1 MiB zeros (about 1 KiB each)
    zeros = gzip.compress(b"\0" * (1 << 20), compresslevel=9, mtime=0)
    data = gzip.compress(_tar_header("././@PaxHeader", 256 << 20, tarfile.XHDTYPE), mtime=0) + zeros * 256
    err = refused(locked_ws, tmp_path, capsys, "--base",
                  f"oci:{_layer_base(tmp_path, data, 'application/vnd.oci.image.layer.v1.tar+gzip', 'sha256:' + '0' * 64)}:base")
    assert "a PAX header record of 268435456 bytes (more than 1 MiB)" in err


def test_a_zstd_layer_expanding_past_its_bound_stops_there(locked_ws: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    import zstandard

    # A member declaring 1 TB, then frames of 16 MiB zeros: about 1 KiB of zstd each, 4 GiB in all.
    frame = zstandard.ZstdCompressor(level=19).compress(b"\0" * (16 << 20))
    head = zstandard.ZstdCompressor().compress(_tar_header("big", 1 << 40, tarfile.REGTYPE))
    data = head + frame * 256
    assert len(data) < 1 << 20
    layout = _layer_base(tmp_path, data, "application/vnd.oci.image.layer.v1.tar+zstd", "sha256:" + "0" * 64)
    err = refused(locked_ws, tmp_path, capsys, "--base", f"oci:{layout}:base")
    assert "decompresses to more than 1100 times its size plus 64 MiB" in err and "bomb" in err


# D: -o onto a layout adds the image to it; nothing of what was there is deleted.
def test_o_onto_an_existing_layout_adds_the_image_and_keeps_everything_there(locked_ws: Path, tmp_path: Path) -> None:
    layout = _synthetic_base(tmp_path / "dir", [LIBC])
    index = json.loads((layout / "index.json").read_text())
    other = dict(index["manifests"][0], annotations={"org.opencontainers.image.ref.name": "other"})
    index["manifests"].append(other)
    (layout / "index.json").write_text(json.dumps(index))
    (layout / "README").write_text("mine\n")
    before = {p.name: p.read_bytes() for p in (layout / "blobs/sha256").iterdir()}
    assert image(locked_ws, "--base", f"oci:{layout}:base", "-o", str(layout)) == 0
    after = json.loads((layout / "index.json").read_text())
    tags = [m["annotations"]["org.opencontainers.image.ref.name"] for m in after["manifests"]]
    assert tags == ["base", "other", ENV]
    assert (layout / "README").read_text() == "mine\n"
    assert all((layout / "blobs/sha256" / name).read_bytes() == data for name, data in before.items())
    assert not list(tmp_path.glob("**/.rocmlock-image-*"))
    for tag in tags:  # every image of the layout still unpacks (umoci checks every digest and diff_id)
        proc = subprocess.run(["umoci", "unpack", "--rootless", "--image", f"{layout}:{tag}", str(tmp_path / tag)],
                              capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stderr
    assert (tmp_path / ENV / "rootfs/opt/env/conda-meta").is_dir()


def test_o_with_a_colon_is_refused_before_the_build(locked_ws: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    # skopeo, podman and apptainer read oci:PATH:TAG up to the first ':': no printed hint could name the layout.
    out = tmp_path / "a:b" / "img"
    assert image(locked_ws, "-o", str(out)) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {out}: -o holds a ':', and skopeo, podman and apptainer read") and "Traceback" not in err
    assert not (tmp_path / "a:b").exists()


def test_o_onto_a_layout_with_a_damaged_index_is_refused_and_left_alone(
        locked_ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert image(locked_ws, "-o", str(out)) == 0
    (out / "index.json").write_text('{"schemaVersion": 2, "manifests": {"x": 1}}')
    files = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert image(locked_ws, "-o", str(out), "--tag", "v2") == 2
    err = capsys.readouterr().err
    assert "index.json: 'manifests' is an object holding a non-string, not a list" in err
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == files
    # A number Python reads as infinity: written back, the index would hold Infinity and every tag of the layout
    # (not only ours) would be unreadable to skopeo and umoci.
    assert image(locked_ws, "-o", str(tmp_path / "fresh")) == 0
    capsys.readouterr()
    index = tmp_path / "fresh/index.json"
    index.write_bytes(index.read_bytes()[:-1] + b',"x-vendor":1e400}')
    files = {p: p.read_bytes() for p in (tmp_path / "fresh").rglob("*") if p.is_file()}
    assert image(locked_ws, "-o", str(tmp_path / "fresh"), "--tag", "v2") == 2
    assert "index.json: the number 1e400 is beyond what JSON readers take back" in capsys.readouterr().err
    assert {p: p.read_bytes() for p in (tmp_path / "fresh").rglob("*") if p.is_file()} == files


# E: SOURCE_DATE_EPOCH is ASCII digits naming a time the image's RFC 3339 dates can hold.
@pytest.mark.parametrize("value", ["\u00b2", "9" * 5000, "99999999999999999", "253402300800", "-1", " 1", "1e9", ""])
def test_a_bad_source_date_epoch_is_one_line(locked_ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", value)
    err = refused(locked_ws, tmp_path, capsys)
    assert "SOURCE_DATE_EPOCH=" in err and "not a Unix time" in err and len(err) < 600


def test_the_last_second_of_9999_is_a_valid_epoch(locked_ws: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "253402300799")
    assert image(locked_ws, "-o", str(tmp_path / "out")) == 0
    _, manifest = _layout_manifest(tmp_path / "out")
    config = json.loads((tmp_path / "out/blobs/sha256" / manifest["config"]["digest"][7:]).read_bytes())
    assert config["created"] == "9999-12-31T23:59:59Z"


# F: a locked package is admitted as unpack admits a bundle's, before rattler links anything.
def _package(where: Path, name: str, path: str) -> Path:
    index = {"name": name, "version": "1", "build": "0", "build_number": 0, "depends": [], "subdir": "noarch",
             "noarch": "generic", "license": "MIT"}
    files = {"info/index.json": json.dumps(index).encode(),
             "info/paths.json": json.dumps({"paths_version": 1, "paths": [
                 {"_path": path, "path_type": "hardlink", "sha256": hashlib.sha256(b"x").hexdigest(),
                  "size_in_bytes": 1}]}).encode(), "etc/x": b"x"}
    out = where / f"{name}-1-0.tar.bz2"
    with tarfile.open(out, "w:bz2") as tar:
        for member, data in files.items():
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out


@pytest.mark.parametrize(("path", "says"), [("../../../../../../../tmp/rocmlock-image-escape", "climbs out with '..'"),
                                            ("/tmp/rocmlock-image-abs", "is absolute")])
def test_a_locked_package_writing_outside_the_prefix_is_refused_before_linking(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], path: str, says: str) -> None:
    channel = tmp_path / "channel"
    (channel / "noarch").mkdir(parents=True)
    _package(channel / "noarch", "evil", path)
    asyncio.run(index_fs(str(channel)))
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "pixi.toml").write_text(
        f'[workspace]\nname = "e"\nchannels = ["{channel.as_uri()}"]\nplatforms = ["linux-64"]\n'
        f'[dependencies]\nevil = "*"\n[environments]\n{ENV} = []\n')
    assert main(["lock", "--manifest-path", str(ws / "pixi.toml")]) == 0
    capsys.readouterr()
    err = refused(ws, tmp_path, capsys)
    assert f"evil-1-0.tar.bz2: info/paths.json names '{path}', which {says}; nothing was installed" in err
    assert not Path("/tmp/rocmlock-image-escape").exists() and not Path("/tmp/rocmlock-image-abs").exists()
    assert not list(tmp_path.rglob("rocmlock-image-escape"))


# G: a reference names its registry, or it is refused (never read as Docker Hub, never with TLS off).
@pytest.mark.parametrize(("args", "says"), [
    (["--push", "127.0.0.1:5077"], "it reads as Docker Hub's image '127.0.0.1' with the tag '5077'"),
    (["--push", "localhost:5077"], "Docker Hub's image 'localhost'"),
    (["--push", "team/env:v1"], "'team' is not a registry"),
    (["--push", "127.0.0.1:5077/Team/env:v1"], "not a reference"),
    (["--base", "debian:12"], "Docker Hub's image 'debian' with the tag '12'"),
])
def test_a_reference_without_a_registry_is_refused(locked_ws: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str], args: list[str],
                                                   says: str) -> None:
    err = refused(locked_ws, tmp_path, capsys, *args)
    assert says in err and "REGISTRY/REPOSITORY:TAG" in err


# The checks themselves, one by one (the builds above go through them; these pin their edges and messages).
@pytest.mark.parametrize(("data", "says"), [
    (b"[1]", "blob: a list, not a JSON object"),
    (b"null", "blob: null, not a JSON object"),
    (b"{", "blob: not JSON"),
    (b"\xff{}", "blob: not JSON"),
    (b'{"architecture": true}', "'architecture' is the boolean true, not a string"),
    (b'{"architecture": 1.5}', "'architecture' is the number 1.5, not a string"),
    (b'{"config": "' + b"a" * 100 + b'"}', "'config' is the string '" + "a" * 60 + "', not an object"),
    (b'{"config": {"Env": {"A": "b"}}}', "'config.Env' is an object, not a list of strings"),
    (b'{"config": {"ArgsEscaped": "yes"}}', "'config.ArgsEscaped' is the string 'yes', not a boolean"),
    (b'{"history": [{"empty_layer": 1}]}', "'history[0].empty_layer' is the number 1, not a boolean"),
    (b'{"architecture": null}', "blob: no 'architecture'"),
])
def test_the_json_checks_say_what_and_where(data: bytes, says: str) -> None:
    from rocmlock.errors import InputError
    from rocmlock.image import ocischema

    base = {"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": []}}
    if data.startswith(b"{") and data != b"{":
        data = json.dumps({**base, **json.loads(data)}).encode()
    with pytest.raises(InputError) as caught:
        ocischema.load(data, "blob", ocischema.CONFIG)
    assert says in str(caught.value) and caught.value.hint == ocischema.DAMAGED


@pytest.mark.parametrize(("size", "ok"), [(0, True), ((1 << 63) - 1, True), (-1, False), (1 << 63, False),
                                          (True, False)])
def test_a_size_is_a_non_negative_int64(size: int, ok: bool) -> None:
    from rocmlock.errors import InputError
    from rocmlock.image import ocischema

    desc = json.dumps({"mediaType": "m", "digest": "d", "size": size}).encode()
    if ok:
        assert ocischema.load(desc, "d", ocischema.DESCRIPTOR)["size"] == size
    else:
        with pytest.raises(InputError, match="'size' is the (number|boolean) .*, not an integer"):
            ocischema.load(desc, "d", ocischema.DESCRIPTOR)


@pytest.mark.parametrize(("number", "ok"), [("18446744073709551615", True), ("18446744073709551616", False),
                                            ("-9223372036854775808", True), ("-9223372036854775809", False),
                                            ("9" * 401, False), ("9" * 5000, False)])
def test_an_untyped_integer_is_read_up_to_64_bits(number: str, ok: bool) -> None:
    """uint64's largest and int64's smallest are taken (an extension key may hold either), one past is refused, and
    so is anything longer than 20 digits before Python converts it (past 4,300 digits int() itself refuses)."""
    from rocmlock.errors import InputError
    from rocmlock.image import ocischema

    data = b'{"x-vendor": ' + number.encode() + b"}"
    if ok:
        assert ocischema.load(data, "blob")["x-vendor"] == int(number)
    else:
        with pytest.raises(InputError, match="is beyond what JSON readers take back"):
            ocischema.load(data, "blob")


def test_json_nesting_is_refused_past_64_levels_only() -> None:
    from rocmlock.errors import InputError
    from rocmlock.image import ocischema

    assert ocischema.load(("{\"x\":" + "[" * 63 + "]" * 63 + "}").encode(), "blob")  # 64 levels with the object
    with pytest.raises(InputError, match="blob: JSON nested deeper than 64 levels") as deep:
        ocischema.load(("{\"x\":" + "[" * 64 + "]" * 64 + "}").encode(), "blob")
    assert deep.value.hint == ocischema.DAMAGED
    with pytest.raises(InputError, match="nested deeper"):  # the deep one after a shallow sibling
        ocischema.load(("{\"a\": [[1], " + "[" * 64 + "]" * 64 + "]}").encode(), "blob")
    with pytest.raises(InputError, match="blob: JSON nested too deeply") as caught:
        ocischema.load(b"[" * 200_000 + b"]" * 200_000, "blob")
    assert caught.value.hint == ocischema.DAMAGED


@pytest.mark.parametrize(("ref", "domain", "path", "tag", "loopback"), [
    ("docker://127.0.0.1:5000/x/y:z", "127.0.0.1:5000", "x/y", "z", True),
    ("localhost/team/env:v1", "localhost", "team/env", "v1", True),
    ("localhost:5000/env", "localhost:5000", "env", None, True),
    ("[::1]:5000/a/b:v1", "[::1]:5000", "a/b", "v1", True),
    ("docker.io/library/debian:12", "docker.io", "library/debian", "12", False),
    ("registry.example.com:443/ml/mi300x__a.b-c:2026-01", "registry.example.com:443", "ml/mi300x__a.b-c", "2026-01",
     False),
    ("Registry.Example.com/x", "Registry.Example.com", "x", None, False),
    ("127.0.0.2:5000/x:y", "127.0.0.2:5000", "x", "y", False),
    ("reg.io/a/b@sha256:" + "0" * 64, "reg.io", "a/b", None, False),
    ("r.io/" + "a" * 250 + ":t", "r.io", "a" * 250, "t", False),  # 255 characters: the longest name
])
def test_references_that_name_their_registry_are_read_by_the_grammar(ref: str, domain: str, path: str,
                                                                      tag: str | None, loopback: bool) -> None:
    from rocmlock.image import ociref

    parsed = ociref.parse(ref, "--push")
    assert (parsed.domain, parsed.path, parsed.tag, parsed.loopback) == (domain, path, tag, loopback)
    assert str(parsed) == ref.removeprefix("docker://")
    assert parsed.digest == (ref.rpartition("@")[2] if "@" in ref else None)


@pytest.mark.parametrize(("ref", "shown", "says"), [
    ("user:secret@127.0.0.1:1/x:y", "127.0.0.1:1/x:y", "credentials never go into it"),
    ("docker://user:secret@127.0.0.1:1/x:y", "127.0.0.1:1/x:y", "credentials never go into it"),
    ("https://registry.example.com/x:y", "https://registry.example.com/x:y", "credentials never go into it"),
    ("LOCALHOST/x:y", "LOCALHOST/x:y", "'LOCALHOST' is not a registry"),
    ("registry.example.com/x:" + "t" * 129, "registry.example.com/x:" + "t" * 129, "not a reference"),
    ("registry.example.com/-x:y", "registry.example.com/-x:y", "not a reference"),
    ("registry.example.com/x@sha256:abc", "registry.example.com/x@sha256:abc", "not a reference"),
    ("team", "team", "no registry and no repository"),
    ("r.io/" + "a" * 251, "r.io/" + "a" * 195, "the name is longer than 255 characters"),
    # skopeo refuses it only after the whole build: "both a tag and digest are currently not supported".
    ("127.0.0.1:5077/r/q:v@sha256:" + "a" * 64, "127.0.0.1:5077/r/q:v@sha256:" + "a" * 64,
     "both a tag and a digest"),
])
def test_references_that_are_not_are_refused(ref: str, shown: str, says: str) -> None:
    from rocmlock.errors import InputError
    from rocmlock.image import ociref

    with pytest.raises(InputError) as caught:
        ociref.parse(ref, "--push")
    assert says in str(caught.value) and "secret" not in str(caught.value)
    assert str(caught.value).startswith(f"--push {shown}: ")


def _tar_layer(tmp_path: Path, headers: bytes) -> tuple[Path, str]:
    raw = headers + b"\0" * 1024
    (tmp_path / "layer").write_bytes(raw)
    return tmp_path / "layer", "sha256:" + hashlib.sha256(raw).hexdigest()


def _pax(keys: dict[str, str], kind: bytes = tarfile.XGLTYPE) -> bytes:
    body = b""
    for key, value in keys.items():
        item = f" {key}={value}\n".encode()
        n = len(item) + 1
        while len(str(n)) + len(item) != n:
            n = len(str(n)) + len(item)
        body += str(n).encode() + item
    return _tar_header("pax", len(body), kind) + body + b"\0" * (-len(body) % 512)


@pytest.mark.parametrize(("keys", "ok"), [(1000, True), (1001, False)])
def test_global_pax_keys_are_bounded(tmp_path: Path, keys: int, ok: bool) -> None:
    from rocmlock.errors import InputError
    from rocmlock.image import ocilayer

    headers = _pax({f"k{i}": "v" for i in range(keys)}) + _pax({"last": "v"}) + _tar_header("f", 0, tarfile.REGTYPE)
    path, diff_id = _tar_layer(tmp_path, headers)

    def read() -> None:
        with ocilayer.open_layer(path, "application/vnd.oci.image.layer.v1.tar", diff_id, "layer") as layer:
            list(layer.members())

    if ok:
        read()  # a global header applies to the member after it: tarfile needs one
    else:
        with pytest.raises(InputError, match="more than 1000 global PAX keys"):
            read()


def test_a_gnu_long_name_past_1_mib_is_refused_before_it_is_read(tmp_path: Path) -> None:
    from rocmlock.errors import InputError
    from rocmlock.image import ocilayer

    path, diff_id = _tar_layer(tmp_path, _tar_header("././@LongLink", (1 << 20) + 1, tarfile.GNUTYPE_LONGNAME))
    with pytest.raises(InputError, match=r"a GNU header record of 1048577 bytes \(more than 1 MiB\)"), \
            ocilayer.open_layer(path, "application/vnd.oci.image.layer.v1.tar", diff_id, "layer") as layer:
        list(layer.members())
