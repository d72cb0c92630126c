"""``--base debootstrap:SUITE[:PKG,...]`` (rocmlock.image.debianbase) with a stand-in debootstrap on PATH that
writes the kind of tree the real one leaves (logs, apt lists with the suite's Release, the host's resolv.conf,
/etc/shadow with today's day, byte code, device nodes, setuid and sticky modes, hard links): what depends on the
day is gone, what a system needs is kept, the cache is reused without root, and errors are one line. The real
debootstrap, twice to one digest and run by podman, is tests/test_image_run.py's."""

from __future__ import annotations

import gzip
import json
import os
import tarfile
from pathlib import Path

import pytest
from rocmlock.cli.main import main
from rocmlock.errors import InputError, OperationError
from rocmlock.image import debianbase

RELEASE_DATE = "Sat, 10 Jan 2026 10:00:00 UTC"
EPOCH = 1768039200
FAKE = r"""#!/bin/bash
# a stand-in for debootstrap: [options] SUITE TARGET MIRROR
set -e
args=(); for a in "$@"; do case "$a" in --*) echo "$a" >>"$LOG";; *) args+=("$a");; esac; done
suite="${args[0]}"; t="${args[1]}"; mirror="${args[2]}"
if [ -n "$FAIL" ]; then echo "E: Failed getting release file $mirror/dists/$suite/Release" >&2; exit 1; fi
mkdir -p "$t"/{etc/apt,var/log/apt,var/lib/apt/lists,var/cache/apt/archives,var/cache/debconf,var/lib/dpkg,tmp,dev,proc}
mkdir -p "$t"/usr/{bin,lib/python3.11/__pycache__} "$t"/var/cache/ldconfig
printf 'Origin: Debian\nSuite: %s\nDate: %s\n' "$suite" "$DATE" >"$t/var/lib/apt/lists/x_dists_${suite}_Release"
echo "$mirror" >"$t/var/lib/apt/lists/x_Packages"
echo "$(date +%s%N)" >"$t/var/log/dpkg.log"; echo log >"$t/var/log/apt/eipp.log.xz"
echo "nameserver 10.1.2.3" >"$t/etc/resolv.conf"; hostname >"$t/etc/hostname"
echo "root:*:$(( $(date +%s) / 86400 )):0:99999:7:::" >"$t/etc/shadow"; chmod 640 "$t/etc/shadow"
echo old >"$t/var/lib/dpkg/status-old"; echo "$RANDOM" >"$t/var/cache/ldconfig/aux-cache"
echo "$RANDOM" >"$t/usr/lib/python3.11/__pycache__/os.cpython-311.pyc"; echo 'x = 1' >"$t/usr/lib/python3.11/os.py"
touch -d '2020-01-01 00:00:00 UTC' "$t/usr/lib/python3.11/os.py"
echo "deb $mirror $suite main" >"$t/etc/apt/sources.list"; echo deb >"$t/var/cache/apt/archives/a.deb"
printf '#!/bin/sh\n' >"$t/usr/bin/sh"; chmod 755 "$t/usr/bin/sh"; ln -s usr/bin "$t/bin"
printf 'su\n' >"$t/usr/bin/su"; chmod 4755 "$t/usr/bin/su"; chmod 1777 "$t/tmp"
printf 'perl\n' >"$t/usr/bin/perl"; ln "$t/usr/bin/perl" "$t/usr/bin/perl5.36.0"
mkdir -p "$t/dev/pts"; mknod "$t/dev/null" c 1 3 2>/dev/null || echo fake >"$t/dev/null"
"""


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in debootstrap first on PATH, root assumed (the real one refuses otherwise), a fresh cache."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "debootstrap").write_text(FAKE)
    (bindir / "debootstrap").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    monkeypatch.setenv("LOG", str(tmp_path / "args.log"))
    monkeypatch.setenv("DATE", RELEASE_DATE)
    monkeypatch.setenv("ROCMLOCK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("ROCMLOCK_DEBIAN_MIRROR", raising=False)
    monkeypatch.delenv("FAIL", raising=False)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    return tmp_path


def _members(layout: Path) -> tuple[str, dict[str, tarfile.TarInfo], dict[str, bytes], dict]:  # type: ignore[type-arg]
    index = json.loads((layout / "index.json").read_text())
    (desc,) = index["manifests"]
    assert desc["annotations"]["org.opencontainers.image.ref.name"] == "base"
    manifest = json.loads((layout / "blobs/sha256" / desc["digest"][7:]).read_bytes())
    config = json.loads((layout / "blobs/sha256" / manifest["config"]["digest"][7:]).read_bytes())
    (layer,) = manifest["layers"]
    data = gzip.decompress((layout / "blobs/sha256" / layer["digest"][7:]).read_bytes())
    infos: dict[str, tarfile.TarInfo] = {}
    contents: dict[str, bytes] = {}
    with tarfile.open(fileobj=__import__("io").BytesIO(data)) as tar:
        for info in tar:
            infos[info.name] = info
            if info.isfile():
                fh = tar.extractfile(info)
                assert fh is not None
                contents[info.name] = fh.read()
    return desc["digest"], infos, contents, config


def test_two_bases_made_apart_are_one_digest_and_keep_what_a_system_needs(fake: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    first = debianbase.debian_base("debootstrap:bookworm:python3", "amd64", fake / "c1")
    monkeypatch.setenv("DATE", RELEASE_DATE)  # the same mirror state, another minute, another cache
    second = debianbase.debian_base("debootstrap:bookworm:python3", "amd64", fake / "c2")
    digest, infos, contents, config = _members(first)
    assert _members(second)[0] == digest
    args = (fake / "args.log").read_text().split()
    assert "--variant=minbase" in args and "--include=python3" in args and "--arch=amd64" in args
    # the day and the machine are gone
    for gone in ("etc/resolv.conf", "etc/hostname", "var/log/dpkg.log", "var/log/apt/eipp.log.xz",
                 "var/lib/dpkg/status-old", "var/cache/ldconfig/aux-cache", "var/cache/apt/archives/a.deb",
                 "usr/lib/python3.11/__pycache__/os.cpython-311.pyc", "dev/null", "dev/pts"):
        assert gone not in infos, gone
    assert not [n for n in infos if n.startswith("var/lib/apt/lists/") and infos[n].isfile()]
    assert contents["etc/shadow"] == f"root:*:{EPOCH // 86400}:0:99999:7:::\n".encode()
    assert contents["etc/apt/sources.list"] == b"deb http://deb.debian.org/debian bookworm main\n"
    # what a system needs is kept: modes, links, the empty directories the runtime mounts on
    assert infos["usr/bin/su"].mode == 0o4755 and infos["tmp"].mode == 0o1777 and infos["etc/shadow"].mode == 0o640
    assert infos["bin"].issym() and infos["bin"].linkname == "usr/bin"
    assert infos["usr/bin/perl5.36.0"].islnk() and infos["usr/bin/perl5.36.0"].linkname == "usr/bin/perl"
    assert infos["dev"].isdir() and infos["proc"].isdir()
    assert all(i.uname == "" and i.gname == "" for i in infos.values())
    # times clamped to the Release date; older ones kept
    assert max(i.mtime for i in infos.values()) == EPOCH
    assert infos["usr/lib/python3.11/os.py"].mtime == 1577836800
    assert config["created"] == "2026-01-10T10:00:00Z" and config["config"]["Cmd"] == ["/bin/sh"]
    assert config["rootfs"]["diff_ids"][0].startswith("sha256:") and config["architecture"] == "amd64"


def test_a_later_release_is_another_digest_and_the_cache_is_reused_without_root(
        fake: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    layout = debianbase.debian_base("debootstrap:bookworm", "amd64")
    digest = _members(layout)[0]
    (fake / "bin/debootstrap").write_text("#!/bin/sh\nexit 9\n")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert debianbase.debian_base("debootstrap:bookworm", "amd64") == layout  # cached: neither root nor debootstrap
    with pytest.raises(OperationError, match="needs root") as refused:
        debianbase.debian_base("debootstrap:trixie", "amd64")
    assert "cached for this suite" not in refused.value.message  # no trixie base cached: none to name
    with pytest.raises(OperationError, match="needs root") as refused:  # the cache it was given, named
        debianbase.debian_base("debootstrap:trixie", "amd64", fake / "given")
    assert f"not in the cache ({fake / 'given' / 'bases'})" in refused.value.message
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    (fake / "bin/debootstrap").write_text(FAKE)
    monkeypatch.setenv("DATE", "Sun, 11 Jan 2026 10:00:00 UTC")
    assert _members(debianbase.debian_base("debootstrap:bookworm", "amd64", fake / "other"))[0] != digest


def test_a_base_cached_with_other_gzip_bytes_is_made_again(fake: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A base cached by a rocmlock whose gzip writer wrote other bytes (another ``pgzip.FORMAT``) is not reused: it
    would give another digest than the same base made now."""
    layout = debianbase.debian_base("debootstrap:bookworm", "amd64")
    assert debianbase.debian_base("debootstrap:bookworm", "amd64") == layout
    monkeypatch.setattr(debianbase, "PGZIP_FORMAT", debianbase.PGZIP_FORMAT + 1)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)  # without root it cannot be made again, and says why
    with pytest.raises(OperationError, match=r"needs root.*the 1 cached for this suite .*another rocmlock version"):
        debianbase.debian_base("debootstrap:bookworm", "amd64")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    again = debianbase.debian_base("debootstrap:bookworm", "amd64")
    assert again != layout and (again / "index.json").is_file()


def test_a_failing_mirror_is_one_line_without_its_credentials_and_leaves_no_cache(
        fake: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROCMLOCK_DEBIAN_MIRROR", "https://bob:s3cret@mirror.example/debian")
    monkeypatch.setenv("FAIL", "1")
    with pytest.raises(OperationError) as info:
        debianbase.debian_base("debootstrap:bookworm", "amd64")
    assert "Failed getting release file" in info.value.message and "s3cret" not in str(info.value)
    assert "\n" not in info.value.message
    assert not [p for p in (fake / "cache/bases").iterdir() if not p.name.endswith(".lock")]
    monkeypatch.delenv("FAIL")
    layout = debianbase.debian_base("debootstrap:bookworm", "amd64")
    sources = _members(layout)[2]["etc/apt/sources.list"]
    assert sources == b"deb https://mirror.example/debian bookworm main\n"
    assert b"s3cret" not in b"".join(p.read_bytes() for p in layout.rglob("*") if p.is_file() and
                                     p.stat().st_size < 1 << 20)


@pytest.mark.parametrize(("ref", "message"), [
    ("debootstrap:", "is not a Debian suite name"),
    ("debootstrap:Bookworm", "is not a Debian suite name"),
    ("debootstrap:../../etc", "is not a Debian suite name"),
    ("debootstrap:bookworm:python3,--foreign", "is not a Debian package name"),
    ("debootstrap:bookworm:python3,", "is not a Debian package name"),
])
def test_a_bad_debootstrap_reference_is_one_line_and_exit_2(
        fake: Path, locked_ws: Path, capsys: pytest.CaptureFixture[str], ref: str, message: str) -> None:
    out = fake / "out"
    assert main(["image", "--manifest-path", str(locked_ws / "pixi.toml"), "-e", "mi300x", "--base", ref,
                 "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not out.exists() and not (fake / "args.log").exists()  # debootstrap never ran


def test_a_mirror_that_is_not_a_url_is_refused(fake: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROCMLOCK_DEBIAN_MIRROR", "--foreign")
    with pytest.raises(InputError, match="not an http"):
        debianbase.debian_base("debootstrap:bookworm", "amd64")


def test_the_builder_knows_the_reference_without_importing_the_module() -> None:
    """``rocmlock image`` imports rocmlock.image.debianbase only for a debootstrap base (issue 43, speed): both
    spell the prefix from rocmlock.image.ociref, and an image with another base never loads the module."""
    import subprocess
    import sys

    from rocmlock.image import ociref

    assert debianbase.DEBOOTSTRAP is ociref.DEBOOTSTRAP == "debootstrap:"
    code = ("import sys; import rocmlock.image.builder, rocmlock.cli.main; "
            "sys.exit('rocmlock.image.debianbase' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
