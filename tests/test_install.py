"""rocmlock install: a prefix from pixi.lock with rattler, exactly the locked packages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rocmlock.cli.main import main

WORKSPACE = """
[workspace]
name = "install-test"
channels = ["{private}", "{forge}"]
platforms = [
    {{ name = "linux-64-gfx90a", platform = "linux-64", __amdgpu = "0", __amdgpu_arch = "9.0.10" }},
    {{ name = "linux-64-gfx942", platform = "linux-64", __amdgpu = "0", __amdgpu_arch = "9.4.2" }},
]

[dependencies]
python = "3.12.*"
pytorch = "2.12.*"

[feature.gfx942]
platforms = ["linux-64-gfx942"]
dependencies = {{ amdgpu-target = {{ version = "*", build = "gfx942" }} }}

[environments]
mi300x = ["gfx942"]
"""


@pytest.fixture
def locked(tmp_path: Path, channels: dict[str, Path]) -> Path:
    manifest = tmp_path / "ws" / "pixi.toml"
    manifest.parent.mkdir()
    manifest.write_text(WORKSPACE.format(private=channels["private"].as_uri(), forge=channels["forge"].as_uri()))
    assert main(["lock", "--manifest-path", str(manifest)]) == 0
    return manifest


def test_install_puts_exactly_the_locked_packages_in_the_prefix(locked: Path, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    prefix = tmp_path / "env"
    assert main(["install", "--manifest-path", str(locked), "-e", "mi300x", "--prefix", str(prefix), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["platform"] == "linux-64-gfx942"
    meta = sorted(p.stem for p in (prefix / "conda-meta").glob("*.json"))
    assert meta == sorted(result["packages"])
    assert any(m.startswith("pytorch-2.12.1-rocm72_gfx942_") for m in meta)
    assert "amdgpu-target-1-gfx942" in meta


def test_install_needs_a_platform_when_the_environment_has_several(locked: Path, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["install", "--manifest-path", str(locked), "-e", "default", "--prefix", str(tmp_path / "d")])
    assert code == 2 and "-p/--platform" in capsys.readouterr().err
    assert main(["install", "--manifest-path", str(locked), "-e", "default", "-p", "linux-64-gfx90a",
                 "--prefix", str(tmp_path / "d")]) == 0


def test_install_errors(locked: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["install", "--manifest-path", str(locked), "-e", "nope", "--prefix", str(tmp_path / "x")]) == 2
    assert "locked environments: default, mi300x" in capsys.readouterr().err
    other = tmp_path / "empty" / "pixi.toml"
    other.parent.mkdir()
    assert main(["install", "--manifest-path", str(other), "-e", "mi300x", "--prefix", str(tmp_path / "y")]) == 2
    assert "run `rocmlock lock` first" in capsys.readouterr().err


def test_install_takes_the_workspace_directory_like_lock(locked: Path, tmp_path: Path) -> None:
    # --manifest-path may name pixi.toml's directory (lock, export and plan accept it too).
    prefix = tmp_path / "env"
    assert main(["install", "--manifest-path", str(locked.parent), "-e", "mi300x", "--prefix", str(prefix)]) == 0
    assert any(p.name.startswith("pytorch-2.12.1-") for p in (prefix / "conda-meta").glob("*.json"))


def test_a_failed_install_leaves_no_half_made_prefix(channels: dict[str, Path], tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    private = shutil.copytree(channels["private"], tmp_path / "private")
    manifest = tmp_path / "ws" / "pixi.toml"
    manifest.parent.mkdir()
    manifest.write_text(WORKSPACE.format(private=private.as_uri(), forge=channels["forge"].as_uri()))
    assert main(["lock", "--manifest-path", str(manifest)]) == 0
    monkeypatch.setenv("RATTLER_CACHE_DIR", str(tmp_path / "pkgs"))  # a cold package cache: it must download
    next(private.glob("linux-64/pytorch-*gfx942*.conda")).unlink()  # the channel lost a locked file
    prefix = tmp_path / "env"
    args = ["install", "--manifest-path", str(manifest), "-e", "mi300x", "--prefix", str(prefix)]
    assert main(args) == 1  # found before rattler starts: the local packages are checked first
    err = capsys.readouterr().err
    assert "pytorch-" in err and "no such file; nothing was installed" in err and not prefix.exists()
    # Where rattler itself fails midway (the check let through), nothing is left of a prefix it was making.
    monkeypatch.setattr("rocmlock.prefix.install.verify_local", lambda records, base: None)
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "nothing was left there" in err and "Traceback" not in err
    assert not prefix.exists()
    prefix.mkdir()  # an existing prefix is not removed, and the message says it may be changed
    assert main(args) == 1 and "may be partly changed" in capsys.readouterr().err and prefix.is_dir()


def test_a_package_changed_in_a_channel_directory_after_the_lock_is_not_installed(
        channels: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """rattler verifies what it downloads, but linked a package read from a directory as it found it: a file
    changed after the lock was installed, conda-meta still naming the lock's sha256; another package's bytes
    under the name panicked it. Each local package is checked against the lock's size and sha256 first."""
    import shutil

    private = shutil.copytree(channels["private"], tmp_path / "private")
    manifest = tmp_path / "ws" / "pixi.toml"
    manifest.parent.mkdir()
    manifest.write_text(WORKSPACE.format(private=private.as_uri(), forge=channels["forge"].as_uri()))
    assert main(["lock", "--manifest-path", str(manifest)]) == 0
    target = next(private.glob("noarch/amdgpu-target-*gfx942*.conda"))
    other = next(p for p in private.glob("noarch/amdgpu-target-*.conda") if p != target)
    args = ["install", "--manifest-path", str(manifest), "-e", "mi300x"]
    for change in ("same size", "other package"):
        data = target.read_bytes()
        if change == "same size":  # one byte flipped: the size the lock says, another sha256
            target.write_bytes(data[:100] + bytes([data[100] ^ 1]) + data[101:])
        else:
            shutil.copy(other, target)
        capsys.readouterr()
        prefix = tmp_path / change.replace(" ", "-")
        assert main([*args, "--prefix", str(prefix)]) == 1
        err = capsys.readouterr().err
        assert f"{target.name}: " in err and ("sha256" in err or "bytes, the lock says" in err), err
        assert "nothing was installed" in err and "Traceback" not in err and "panicked" not in err
        assert not prefix.exists()
        target.write_bytes(data)
    assert main([*args, "--prefix", str(tmp_path / "fine")]) == 0
    # A lock entry with an md5 alone (rattler_lock reads one): the md5 is checked. With no hash at all, nothing
    # could be checked: refused too.
    lock = manifest.parent / "pixi.lock"
    text = lock.read_text()
    for drop, says in ((("sha256", "size"), "md5 "), (("sha256", "size", "md5"), "records no sha256 or md5")):
        lines, inside = [], False
        for line in text.splitlines(keepends=True):
            if not line.startswith(" "):
                inside = line.startswith("- conda:") and line.rstrip().endswith(target.name)
            if not (inside and line.lstrip().split(":")[0] in drop):
                lines.append(line)
        lock.write_text("".join(lines))
        target.write_bytes(data[:100] + bytes([data[100] ^ 1]) + data[101:])
        capsys.readouterr()
        assert main([*args, "--prefix", str(tmp_path / "-".join(drop))]) == 1
        err = capsys.readouterr().err
        assert says in err and "nothing was installed" in err and "Traceback" not in err, err
        assert not (tmp_path / "-".join(drop)).exists()
        target.write_bytes(data)
        if "md5" not in drop:  # the right bytes pass by their md5 (checked as md5, not as a sha256)
            assert main([*args, "--prefix", str(tmp_path / "md5-only")]) == 0, capsys.readouterr().err


def test_install_refuses_a_prefix_that_is_not_a_new_directory_or_an_environment(
        locked: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`--prefix ''` (an unset shell variable) is the current directory: here the checkout, which got conda-meta/
    and a CACHEDIR.TAG (backup tools then skip the whole checkout). As `rocmlock unpack` does, install takes a new
    or empty directory or an existing conda environment, and refuses anything else before touching it."""
    args = ["install", "--manifest-path", str(locked), "-e", "mi300x", "--prefix"]
    before = sorted(p.name for p in locked.parent.iterdir())
    monkeypatch.chdir(locked.parent)
    for prefix in ("", str(locked.parent), str(locked)):
        assert main([*args, prefix]) == 2
        err = capsys.readouterr().err
        assert "--prefix" in err.splitlines()[0] and "Traceback" not in err, err
        assert sorted(p.name for p in locked.parent.iterdir()) == before
    env = tmp_path / "env"
    assert main([*args, str(env)]) == 0  # a new directory, then the same environment again (an update)
    assert main([*args, str(env)]) == 0
    (tmp_path / "empty").mkdir()
    assert main([*args, str(tmp_path / "empty")]) == 0


@pytest.mark.parametrize("command", [["install", "--prefix", "P"], ["pack"]])
def test_a_missing_environment_lists_the_environments(command: list[str], tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    # issue 26: `rocmlock pack` without -e did not say which environments there are.
    (tmp_path / "pixi.toml").write_text('[workspace]\nname = "w"\nchannels = ["c"]\nplatforms = ["linux-64"]\n'
                                        '[environments]\nmi250 = []\nmi300x = []\n')
    assert main([*command, "--manifest-path", str(tmp_path)]) == 2
    err = capsys.readouterr().err.splitlines()
    # issue 35: the command's usage shows -e as required; argparse's line, then the environments.
    assert err[0].startswith(f"usage: rocmlock {command[0]} ") and " -e ENV" in err[0] and "[-e ENV]" not in err[0]
    assert err[-2] == f"rocmlock {command[0]}: error: the following arguments are required: -e/--environment"
    assert err[-1] == "hint: pass -e ENV, one of: default, mi250, mi300x"



def test_an_unreachable_channel_is_one_line_like_lock_and_pack(channels: dict[str, Path], tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """rattler's install error is a 7-line "Caused by:" chain (fetch, cache layer, retries, request, connect,
    tcp, os error): folded by rocmlock.util.credentials.one_line into the first and last link, plus the URL."""
    manifest = tmp_path / "ws" / "pixi.toml"
    manifest.parent.mkdir()
    manifest.write_text(WORKSPACE.format(private=channels["private"].as_uri(), forge=channels["forge"].as_uri()))
    assert main(["lock", "--manifest-path", str(manifest)]) == 0
    lock = manifest.parent / "pixi.lock"
    # The private channel moved to a host that refuses connections (port 9, discard: nothing listens).
    moved = "http://127.0.0.1:9/private/"
    lock.write_text(lock.read_text().replace(f"{channels['private'].as_uri()}/", moved)
                    .replace(f"{channels['private']}/", moved))
    monkeypatch.setenv("RATTLER_CACHE_DIR", str(tmp_path / "pkgs"))  # a cold cache: it must download
    capsys.readouterr()
    assert main(["install", "--manifest-path", str(manifest), "-e", "mi300x", "--prefix", str(tmp_path / "e")]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and err[1].startswith("hint: "), err
    assert "Caused by" not in err[0] and "failed to fetch " in err[0] and "Connection refused" in err[0], err
    assert "(from http://127.0.0.1:9/private/" in err[0], err


def test_the_install_marker_is_unlinked_while_locked_and_a_vanished_one_is_no_interruption(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two installs into one prefix: the first unlinked its marker after letting go of its lock, so the second took
    the marker for an interrupted install's ("installing it again"), and the first then failed on the marker the
    second held. Now the marker goes while locked; a lock won on a marker unlinked meanwhile is taken again on
    the file at the path; and `interrupted` never makes a marker."""
    import fcntl
    import os

    from rocmlock.prefix import marker

    prefix = tmp_path / "env"
    prefix.mkdir()
    assert marker.interrupted(prefix, "install") is None and not (prefix / marker.MARKER).exists()
    with marker.installing(prefix, True, "install"):
        assert (prefix / marker.MARKER).read_text() == "created\n"
    assert not (prefix / marker.MARKER).exists()
    # The first install finishes (unlinks its marker) between the second's open and its flock.
    real_flock, calls = fcntl.flock, []

    def flock(fd: int, op: int) -> None:
        calls.append(fd)
        if len(calls) == 1:
            (prefix / marker.MARKER).unlink()
        real_flock(fd, op)

    monkeypatch.setattr(marker.fcntl, "flock", flock)
    with marker.held(prefix, "install") as fd:
        on_disk = os.stat(prefix / marker.MARKER)
        assert (os.fstat(fd).st_ino, os.fstat(fd).st_dev) == (on_disk.st_ino, on_disk.st_dev)
    assert len(calls) == 2
