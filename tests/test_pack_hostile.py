"""unpack against bundles made by an attacker with a copy of a real one (issue 22).

Each test takes the bundle ``rocmlock pack`` wrote, changes what an attacker would (tar members, metadata,
repodata, packages with a crafted ``info/paths.json``), and, unless the test is about the digests, writes
every sha256 of the metadata afresh, as an attacker without the signing key can: the check under test must
be what refuses it. Every refusal is exit 2, one ``error:`` line (a ``hint:`` after it), no prefix, and no
file written anywhere but where unpack may write (a snapshot of the whole test directory before and after).
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rocmlock.bundle.admit import DAMAGED
from rocmlock.errors import InputError
from rocmlock.prefix.pkgcheck import check_packages
from test_pack import fake_node, installed, pack, unpack
from test_pack_robust import _one_error

FOREIGN = "peft-0.18.0-pyhd8ed1ab_0.conda"


@pytest.fixture(scope="module")
def bundle(locked_ws: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("hostile") / "mi300x.tar"
    assert pack(locked_ws, out) == 0
    return out


def extracted(bundle: Path, where: Path) -> Path:
    with tarfile.open(bundle) as tar:
        tar.extractall(where, filter="data")
    return where


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def rehash(x: Path, edit: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """The metadata of the tree ``x`` with every sha256 and size taken from the files as they are now."""
    meta: dict[str, Any] = json.loads((x / "rocmlock-pack.json").read_text())
    if edit:
        edit(meta)
    for pkg in meta["packages"]:
        path = x / "channel" / pkg["subdir"] / pkg["file"]
        if path.is_file():
            pkg["sha256"], pkg["size"] = sha256(path), path.stat().st_size
    meta["files"] = {m: sha256(x / m) if (x / m).is_file() else d for m, d in meta["files"].items()}
    (x / "rocmlock-pack.json").write_text(json.dumps(meta, indent=2, sort_keys=True))
    return meta


def retar(x: Path, out: Path, extra: list[tarfile.TarInfo] | None = None) -> Path:
    with tarfile.open(out, "w") as tar:
        for path in sorted(x.rglob("*")):
            tar.add(path, path.relative_to(x).as_posix(), recursive=False)
        for info in extra or []:
            tar.addfile(info, io.BytesIO(b"x" * info.size))
    return out


def snapshot(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*")}


def refused(tmp_path: Path, bad: Path, capsys: pytest.CaptureFixture[str], *extra: str,
            allowed: tuple[str, ...] = (), hint: str | None = None, code: int = 2) -> str:
    """Unpack ``bad``: exit ``code``, one error line (and ``hint``, when given, as its hint), nothing written in
    ``tmp_path`` (``allowed`` excepted)."""
    host = fake_node(tmp_path / "host", [90402])
    before = snapshot(tmp_path)
    assert unpack(bad, tmp_path / "env", host, *extra) == code
    err = capsys.readouterr().err
    line = _one_error(err, after_log="--trusted-signers" in extra)
    if hint is not None:
        assert err.strip().splitlines()[-1] == f"hint: {hint}", err
    assert not (tmp_path / "env").exists()
    assert snapshot(tmp_path) - before <= set(allowed), snapshot(tmp_path) - before
    return line


# ----------------------------------------------------------------------------- repodata, file names, metadata


def test_a_repodata_base_url_pointing_outside_the_bundle_is_refused(bundle: Path, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    # CEP-15 base_url: rattler would take every package of that subdir from there, unchecked.
    x = extracted(bundle, tmp_path / "x")
    elsewhere = tmp_path / "elsewhere" / "noarch"
    shutil.copytree(x / "channel" / "noarch", elsewhere)
    for url in (elsewhere.parent.as_uri() + "/", "http://127.0.0.1:9/"):
        repodata = json.loads((x / "channel/noarch/repodata.json").read_text())
        repodata["info"]["base_url"] = url
        repodata["repodata_version"] = 2
        (x / "channel/noarch/repodata.json").write_text(json.dumps(repodata))
        rehash(x)
        line = refused(tmp_path, retar(x, tmp_path / "bad.tar"), capsys, allowed=("bad.tar",), hint=DAMAGED)
        assert line.startswith(f"error: {tmp_path / 'bad.tar'}: "), line  # the bundle as the user named it
        assert "channel/noarch/repodata.json: has keys" in line and "base_url" in line, line
        (tmp_path / "bad.tar").unlink()


def test_a_repodata_record_with_its_own_url_is_refused(bundle: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    x = extracted(bundle, tmp_path / "x")
    repodata = json.loads((x / "channel/noarch/repodata.json").read_text())
    repodata["packages.conda"][FOREIGN]["url"] = (tmp_path / "evil.conda").as_uri()
    (x / "channel/noarch/repodata.json").write_text(json.dumps(repodata))
    rehash(x)
    line = refused(tmp_path, x, capsys)
    assert f"the record of '{FOREIGN}' names a url, file or channel of its own" in line


@pytest.mark.parametrize("name", ["%2e%2e%2fpeft-0.18.0-pyhd8ed1ab_0.conda", "peft-0.18.0-pyhd8ed1ab_0%2e.conda",
                                  "peft-0.18.0-pyhd8ed1ab_0.zip", "peft-0.18.0-other_0.conda",
                                  "peft-0.18.0-pyhd8ed1ab_0\n.conda"])
def test_a_package_file_name_that_is_not_plain_is_refused(bundle: Path, tmp_path: Path, name: str,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    # rattler percent-decodes a file name in a URL: %2e%2e%2f... would install ../peft-..., a file nobody checked.
    x = extracted(bundle, tmp_path / "x")
    (x / "channel/noarch" / FOREIGN).rename(x / "channel/noarch" / name)
    repodata = json.loads((x / "channel/noarch/repodata.json").read_text())
    repodata["packages.conda"][name] = repodata["packages.conda"].pop(FOREIGN)
    (x / "channel/noarch/repodata.json").write_text(json.dumps(repodata))

    def rename(meta: dict[str, Any]) -> None:
        next(p for p in meta["packages"] if p["file"] == FOREIGN)["file"] = name

    rehash(x, rename)
    line = refused(tmp_path, x, capsys) if "\n" in name else \
        refused(tmp_path, retar(x, tmp_path / "bad.tar"), capsys, allowed=("bad.tar",))
    assert "rocmlock-pack.json: key 'packages' has a package whose its file" in line or "is not a plain" in line, line
    assert "\n" not in line


@pytest.mark.parametrize(("key", "value"), [
    ("platform", "x/../../../../tmp/PWNED"), ("platform", "linux-64\n@EXPLICIT"),
    ("environment", "mi300x\n@EXPLICIT\nhttp://evil/x.conda"), ("environment", "../up"),
    ("subdir", "linux-64/../x"), ("gpu", {"target": "gfx942/../../x", "isa": "9.4.2"}),
    ("gpu", {"target": "gfx942", "isa": "9.4.2\n"}), ("rocm-version", "7.2\x1b[2J"), ("lock-sha256", "../x"),
])
def test_every_metadata_string_is_checked_before_a_path_is_built_from_it(
        bundle: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str, value: Any) -> None:
    x = extracted(bundle, tmp_path / "x")
    rehash(x, lambda meta: meta.__setitem__(key, value))
    keep = tmp_path / "kept"
    line = refused(tmp_path, retar(x, tmp_path / "bad.tar"), capsys, "--extract-dir", str(keep),
                   allowed=("bad.tar",))
    assert f"rocmlock-pack.json: key '{key}" in line, line
    assert "\x1b" not in line and not keep.exists() and not Path("/tmp/PWNED.lock").exists()


@pytest.mark.parametrize(("url", "says"), [
    ("https://bob:pw@example.com/ch/noarch/FILE", "is not a plain http(s) or file URL"),
    ("https://example.com/t/tk-0123456789abcdef0123456789abcdef012345/ch/noarch/FILE", "holds a credential"),
    ("https://example.com/ch/noarch/FILE?token=x", "is not a plain http(s) or file URL"),
    ("https://example.com/ch/noarch/FILE\x1b[2J", "is not a plain http(s) or file URL"),
    ("https://example.com/ch/noarch/other-1.0-0.conda", "is not the URL of"),
    ("ftp://example.com/ch/noarch/FILE", "is not a plain http(s) or file URL"),
])
def test_a_package_url_in_the_metadata_is_checked_before_it_reaches_the_prefix(
        bundle: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], url: str, says: str) -> None:
    # The lock's URL of each package goes into the unpacked prefix's records: a credential, a line break or
    # another file's URL there is refused before anything is installed.
    x = extracted(bundle, tmp_path / "x")

    def edit(meta: dict[str, Any]) -> None:
        meta["packages"][0]["url"] = url.replace("FILE", meta["packages"][0]["file"])

    rehash(x, edit)
    line = refused(tmp_path, retar(x, tmp_path / "bad.tar"), capsys, allowed=("bad.tar",))
    assert "has a package whose url" in line and says in line and "\x1b" not in line and "pw@" not in line, line


@pytest.mark.parametrize(("text", "says"), [
    ("not json", "pixi-pack.json: cannot read it: "),
    ("[]", "pixi-pack.json: expected version '1' and platform 'linux-64'"),
    ('{"version": "2", "platform": "linux-64"}', "pixi-pack.json: expected version '1' and platform 'linux-64'"),
    ('{"version": "1", "platform": "osx-arm64"}', "pixi-pack.json: expected version '1' and platform 'linux-64'"),
    ('{"version": "1"}', "pixi-pack.json: expected version '1' and platform 'linux-64'"),
])
def test_a_pixi_pack_json_that_disagrees_with_the_metadata_is_refused(
        bundle: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, says: str) -> None:
    # pixi-unpack reads pixi-pack.json (version "1", platform == this machine's: src/unpack.rs); a bundle whose two
    # metadata files disagree was not written by pack, whatever its digests say.
    x = extracted(bundle, tmp_path / "x")
    (x / "pixi-pack.json").write_text(text)
    rehash(x)
    line = refused(tmp_path, retar(x, tmp_path / "bad.tar"), capsys, allowed=("bad.tar",), hint=DAMAGED)
    assert line.startswith(f"error: {tmp_path / 'bad.tar'}: {says}"), line


def test_a_bundle_for_another_platform_says_which_and_what_to_do(bundle: Path, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    # Both metadata files agree on osx-arm64: an honest bundle for another machine (exit 1: nothing is wrong with
    # it, it is in the wrong place), refused before anything is installed.
    x = extracted(bundle, tmp_path / "x")
    pixi_pack = json.loads((x / "pixi-pack.json").read_text())
    (x / "pixi-pack.json").write_text(json.dumps({**pixi_pack, "platform": "osx-arm64"}))
    (x / "channel/linux-64").rename(x / "channel/osx-arm64")
    repodata = x / "channel/osx-arm64/repodata.json"
    repodata.write_text(repodata.read_text().replace('"linux-64"', '"osx-arm64"'))

    def move(meta: dict[str, Any]) -> None:
        meta["subdir"] = "osx-arm64"
        for pkg in meta["packages"]:
            pkg["subdir"] = pkg["subdir"].replace("linux-64", "osx-arm64")
        meta["files"] = {m.replace("linux-64", "osx-arm64"): d for m, d in meta["files"].items()}

    rehash(x, move)
    line = refused(tmp_path, retar(x, tmp_path / "bad.tar"), capsys, "--force", allowed=("bad.tar",), code=1,
                   hint="pack the environment with -p for a linux-64 platform")
    assert line == "error: the bundle is for osx-arm64 (linux-64-gfx942), this machine is linux-64", line


def test_a_bundle_without_a_rocm_version_checks_the_gpu_alone(bundle: Path, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    x = extracted(bundle, tmp_path / "x")
    rehash(x, lambda meta: meta.__setitem__("rocm-version", None))
    assert unpack(x, tmp_path / "env", fake_node(tmp_path / "host", [90402]), "--no-verify") == 0
    err = capsys.readouterr().err
    assert "node check: a gfx942 GPU found, as the bundle needs" in err, err


def test_a_changed_environment_yml_is_refused(bundle: Path, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    x = extracted(bundle, tmp_path / "x")
    text = (x / "environment.yml").read_text()
    (x / "environment.yml").write_text(text.replace("  - ./channel", "  - https://evil.example/channel"))
    line = refused(tmp_path, retar(x, tmp_path / "bad.tar"), capsys, allowed=("bad.tar",))
    assert "environment.yml: sha256 " in line and "differs from the bundle's metadata" in line


@pytest.mark.parametrize("member", ["junk.txt", "channel/noarch/notes.txt", "installer/evil.sh", "pypi/x.whl",
                                    "channel/linux-64/extra-1-0.conda"])
def test_a_member_the_format_does_not_define_is_refused_before_extraction(
        bundle: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], member: str) -> None:
    bad = tmp_path / "bad.tar"
    shutil.copy(bundle, bad)
    with tarfile.open(bad, "a") as tar:
        for i in range(3):
            info = tarfile.TarInfo(member if i == 0 else f"junk/{i}")
            info.size = 4
            tar.addfile(info, io.BytesIO(b"junk"))
    line = refused(tmp_path, bad, capsys, allowed=())
    assert f"member '{min(member, 'junk/1')}' is not in the bundle's metadata (3 such member(s))" in line, line


def test_a_member_name_with_an_escape_sequence_is_printed_escaped(bundle: Path, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.tar"
    shutil.copy(bundle, bad)
    with tarfile.open(bad, "a") as tar:
        tar.addfile(tarfile.TarInfo("a\x1b[31m\nb"), io.BytesIO(b""))
    line = refused(tmp_path, bad, capsys)
    assert "member 'a\\x1b[31m\\nb' is not a plain file" in line, line


def test_a_symlink_in_a_bundle_directory_is_refused(bundle: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    x = extracted(bundle, tmp_path / "x")
    target = x / "channel/noarch" / FOREIGN
    (tmp_path / "outside.conda").write_bytes(target.read_bytes())
    target.unlink()
    target.symlink_to(tmp_path / "outside.conda")
    assert f"'channel/noarch/{FOREIGN}' is not a plain file or directory" in refused(tmp_path, x, capsys)


def test_a_directory_that_never_was_a_bundle_is_named_as_such(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    # Its link was reported first, with "the bundle is damaged: copy it again" (as `audit` of it says: not a bundle).
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.txt").write_text("hi\n")
    (notes / "link").symlink_to("a.txt")
    line = refused(tmp_path, notes, capsys, hint="a plain pixi-pack bundle installs with `pixi-unpack`")
    assert line == f"error: {notes}: no rocmlock-pack.json: not a bundle of `rocmlock pack`", line


# ----------------------------------------------------------------------------- packages that write outside


def tar_bz2_package(where: Path, name: str, paths: list[str], entries: list[tarfile.TarInfo],
                    link: dict[str, Any] | None = None) -> Path:
    """A noarch .tar.bz2 conda package written by hand: index.json, paths.json listing ``paths``, ``entries``."""
    index = {"name": name, "version": "1", "build": "0", "build_number": 0, "depends": [], "subdir": "noarch",
             "noarch": "generic", "license": "MIT"}
    files = {"info/index.json": json.dumps(index).encode(),
             "info/paths.json": json.dumps({"paths_version": 1, "paths": [
                 {"_path": p, "path_type": "hardlink", "sha256": hashlib.sha256(b"x").hexdigest(),
                  "size_in_bytes": 1} for p in paths]}).encode()}
    if link is not None:
        files["info/link.json"] = json.dumps(link).encode()
    out = where / f"{name}-1-0.tar.bz2"
    with tarfile.open(out, "w:bz2") as tar:
        for member, data in files.items():
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for info in entries:
            tar.addfile(info, io.BytesIO(b"x" * info.size) if info.isfile() else None)
    return out


def with_package(bundle: Path, x: Path, package: Path) -> Path:
    """``bundle`` extracted into ``x`` with ``package`` added to its channel, repodata and metadata."""
    extracted(bundle, x)
    dest = x / "channel/noarch" / package.name
    shutil.copy(package, dest)
    name = package.name.split("-")[0]
    repodata = json.loads((x / "channel/noarch/repodata.json").read_text())
    repodata["packages"][package.name] = {
        "name": name, "version": "1", "build": "0", "build_number": 0, "depends": [], "subdir": "noarch",
        "noarch": "generic", "sha256": sha256(dest), "size": dest.stat().st_size,
        "md5": hashlib.md5(dest.read_bytes()).hexdigest()}
    (x / "channel/noarch/repodata.json").write_text(json.dumps(repodata))
    rehash(x, lambda meta: meta["packages"].append({"subdir": "noarch", "file": package.name, "name": name,
                                                    "version": "1", "build": "0", "sha256": "", "size": 0}))
    return x


def _file(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = 1
    return info


def _symlink(name: str, target: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = tarfile.SYMTYPE, target
    return info


@pytest.mark.parametrize(("paths", "entries", "link", "says"), [
    (["../evilpkg-1-0/x"], [_file("x")], None, "info/paths.json names '../evilpkg-1-0/x', which climbs out"),
    (["/tmp/rocmlock-abs"], [_file("x")], None, "info/paths.json names '/tmp/rocmlock-abs', which is absolute"),
    (["x"], [_file("../evilpkg-1-0/x")], None, "../evilpkg-1-0/x"),  # rattler's reader refuses it already
    (["bin/sh"], [_symlink("bin/sh", "/bin/sh")], None, "its entry 'bin/sh' links to '/bin/sh', outside"),
    (["lib/a"], [_symlink("lib/a", "../../etc/passwd")], None, "links to '../../etc/passwd', outside"),
    (["x"], [_file("x")], {"noarch": {"type": "python", "entry_points": ["../../evil = m:f"]}},
     "info/link.json has the entry point '../../evil'"),
    (["x\n../y"], [_file("x")], None, "info/paths.json names 'x\\n../y', which is empty or holds a control"),
    # Each link's text stays inside (d/up/.. reads as d), but the kernel follows d/up first: esc is the prefix's
    # parent. Checked as the prefix will resolve it, through the package's links.
    (["d/up", "esc"], [_symlink("d/up", ".."), _symlink("esc", "d/up/..")], None,
     "its entry 'esc' links to 'd/up/..', which leaves the environment through its links"),
    (["a", "b"], [_symlink("a", "b"), _symlink("b", "a")], None, "its entry 'a' links to 'b', a chain of more than 40"),
    # The link's own directory runs through a link: A -> . puts A/B/esc at B/esc, whose ../.. is the prefix's
    # parent (the text A/B/../.. reads as the prefix itself).
    (["A", "A/B/esc"], [_symlink("A", "."), _symlink("A/B/esc", "../..")], None,
     "its entry 'A/B/esc' links to '../..', which leaves the environment through its links"),
])
def test_a_package_whose_paths_leave_the_prefix_is_refused_before_rattler_links_it(
        bundle: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], paths: list[str],
        entries: list[tarfile.TarInfo], link: dict[str, Any] | None, says: str) -> None:
    # rattler links what paths.json says: ../ beside the prefix; an absolute path panicked it (rc 134).
    package = tar_bz2_package(tmp_path, "evilpkg", paths, entries, link)
    x = with_package(bundle, tmp_path / "x", package)
    line = refused(tmp_path, retar(x, tmp_path / "bad.tar"), capsys, "--force", allowed=("bad.tar",),
                   hint="the bundle holds a package that would write outside its environment: do not install it; "
                        "find out where it came from")
    assert line.startswith(f"error: {tmp_path / 'bad.tar'}: channel/noarch/evilpkg-1-0.tar.bz2: "), line
    assert says in line, line
    assert not Path("/tmp/rocmlock-abs").exists() and not (tmp_path / "evilpkg-1-0").exists()


def test_a_hand_made_package_with_plain_paths_installs(bundle: Path, tmp_path: Path) -> None:
    # The check refuses the paths above, not hand-made packages or relative links inside the prefix.
    package = tar_bz2_package(tmp_path, "okpkg", ["share/ok/x", "share/ok/y"],
                              [_file("share/ok/x"), _symlink("share/ok/y", "x")])
    x = with_package(bundle, tmp_path / "x", package)
    assert unpack(x, tmp_path / "env", fake_node(tmp_path / "host", [90402])) == 0
    assert ("okpkg", "1", "0", sha256(package)) in installed(tmp_path / "env")
    assert (tmp_path / "env/share/ok/y").resolve() == (tmp_path / "env/share/ok/x").resolve()


def test_links_are_resolved_through_every_package_of_the_install(tmp_path: Path) -> None:
    """One package's link may lead out only through another's: the check reads the links of all packages as the
    one prefix they make (a link through a link to a directory inside, and libfoo.so chains, stay accepted)."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = tar_bz2_package(tmp_path / "a", "uppkg", ["d/up", "lib/libz.so.1", "lib/libz.so", "lib64"],
                            [_symlink("d/up", ".."), _file("lib/libz.so.1"), _symlink("lib/libz.so", "libz.so.1"),
                             _symlink("lib64", "lib")])
    fine = tar_bz2_package(tmp_path / "b", "finepkg", ["bin/z", "share/w"],
                           [_symlink("bin/z", "../lib64/libz.so"), _symlink("share/w", "../d/up/lib")])
    check_packages({"uppkg.tar.bz2": first, "finepkg.tar.bz2": fine}, tmp_path / "b.tar", hint="h")
    (tmp_path / "c").mkdir()
    escape = tar_bz2_package(tmp_path / "c", "escpkg", ["esc"], [_symlink("esc", "d/up/..")])
    with pytest.raises(InputError) as caught:
        check_packages({"uppkg.tar.bz2": first, "escpkg.tar.bz2": escape}, tmp_path / "b.tar", hint="h")
    assert str(caught.value) == (f"{tmp_path / 'b.tar'}: escpkg.tar.bz2: its entry 'esc' links to 'd/up/..', which "
                                 "leaves the environment through its links; nothing was installed")


# ----------------------------------------------------------------------------- signed bundles


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two real OpenSSH keys (ssh-keygen), an allowed_signers file that trusts the first."""
    root = tmp_path_factory.mktemp("keys")
    for name in ("build", "other"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(root / name)],
                       check=True)
    allowed = root / "allowed_signers"
    allowed.write_text(f'build@host namespaces="rocmlock-bundle" {(root / "build.pub").read_text()}')
    return {"build": root / "build", "other": root / "other", "allowed": allowed}


@pytest.fixture(scope="module")
def signed(locked_ws: Path, keys: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("signed") / "mi300x.tar"
    assert pack(locked_ws, out, "--sign", str(keys["build"])) == 0
    return out


def test_a_signed_bundle_installs_with_trusted_signers(signed: Path, keys: dict[str, Path], tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    with tarfile.open(signed) as tar:
        assert "rocmlock-pack.json.sig" in tar.getnames()
        sig = tar.extractfile("rocmlock-pack.json.sig").read()  # type: ignore[union-attr]
    assert sig.startswith(b"-----BEGIN SSH SIGNATURE-----")
    host = fake_node(tmp_path / "host", [90402])
    assert unpack(signed, tmp_path / "env", host, "--trusted-signers", str(keys["allowed"])) == 0
    assert "signature ok: the metadata is signed by build@host (ED25519 key SHA256:" in capsys.readouterr().err
    # The signature is checked by ssh-keygen itself, not by a string compare: it verifies by hand too.
    with tarfile.open(signed) as tar:
        data = tar.extractfile("rocmlock-pack.json").read()  # type: ignore[union-attr]
    (tmp_path / "m.sig").write_bytes(sig)
    ok = subprocess.run(["ssh-keygen", "-Y", "verify", "-f", str(keys["allowed"]), "-I", "build@host",
                         "-n", "rocmlock-bundle", "-s", str(tmp_path / "m.sig")], input=data, capture_output=True,
                        check=False)
    assert ok.returncode == 0, ok.stderr


def test_unsigned_or_foreign_signed_bundles_are_refused_even_with_force(
        bundle: Path, locked_ws: Path, keys: dict[str, Path], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    trust = ("--trusted-signers", str(keys["allowed"]), "--force")
    assert "not signed, and --trusted-signers" in refused(tmp_path, bundle, capsys, *trust)
    foreign = tmp_path / "foreign.tar"
    assert pack(locked_ws, foreign, "--sign", str(keys["other"])) == 0
    capsys.readouterr()
    assert f"its signature is not by a key of {keys['allowed']}" in refused(tmp_path, foreign, capsys, *trust)
    # A directory given for the signers file is named as one ("no such file" said that it was missing).
    line = refused(tmp_path, foreign, capsys, "--trusted-signers", str(tmp_path), "--force")
    assert f"--trusted-signers {tmp_path}: a directory, not an allowed_signers file" in line


def test_any_change_to_a_signed_byte_is_refused(signed: Path, keys: dict[str, Path], tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    trust = ("--trusted-signers", str(keys["allowed"]), "--force")
    # 1. The metadata rewritten to match a changed member (what an attacker without the key can do).
    x = extracted(signed, tmp_path / "x")
    (x / "environment.yml").write_text((x / "environment.yml").read_text() + "# changed\n")
    rehash(x)
    assert "bad signature: the metadata is not what build@host signed" in refused(tmp_path, x, capsys, *trust)
    shutil.rmtree(x)
    # 2. A package changed, the metadata left alone: the signature holds, the package's sha256 does not.
    bad = tmp_path / "bad.tar"
    shutil.copy(signed, bad)
    with tarfile.open(bad) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith(FOREIGN))
    with bad.open("r+b") as fh:
        fh.seek(member.offset_data + 100)
        byte = fh.read(1)
        fh.seek(member.offset_data + 100)
        fh.write(bytes([byte[0] ^ 1]))
    line = refused(tmp_path, bad, capsys, *trust, allowed=("bad.tar",))
    assert f"{member.name}: sha256 " in line and "differs from the bundle's metadata" in line


def test_signing_with_a_missing_or_bad_key_is_one_line_and_writes_nothing(
        locked_ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "notakey").write_text("not a key\n")
    (tmp_path / "notakey").chmod(0o600)
    for key in ("missing", "notakey"):
        assert pack(locked_ws, tmp_path / "out.tar", "--sign", str(tmp_path / key)) == 2
        line = _one_error(capsys.readouterr().err)
        assert line.startswith(f"error: --sign {tmp_path / key}: "), line
        assert sorted(p.name for p in tmp_path.iterdir()) == ["notakey"]


@pytest.mark.parametrize(("stdout", "stderr"), [
    ('{"ok": false, "failed": ["\\u001b[31mRED\\nFAKE: probe passed\\r"]}', ""),
    ("", "garbage\n\x1b[31mRED\x1b]0;title\x07\n"),
])
def test_the_bundles_probe_output_reaches_the_terminal_escaped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stdout: str, stderr: str) -> None:
    """The probe that unpack runs is the bundle's program: its failed check ids and its last line of output were
    printed as they came (an escape sequence coloured the terminal, set its title, forged a "probe passed" line)."""
    from rocmlock.bundle import unpack as unpack_module
    from rocmlock.util.runner import CommandResult

    monkeypatch.setattr(unpack_module, "run_command", lambda argv, **kw: CommandResult(tuple(argv), 1, stdout, stderr))
    meta = unpack_module.BundleMetadata("e", "linux-64", "linux-64", "gfx942", None, "7.2", "0" * 64, "0",
                                        "bin/rocm-env-check", ())
    outcome = unpack_module._run_probe(tmp_path, meta, {})
    assert not outcome.ok and outcome.summary.isprintable(), outcome.summary
    assert "\\x1b[31mRED" in outcome.summary
