"""Messages that misled a newcomer (issue 44, item 4): each one's exact new text, and the exit code with it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from rocmlock.cli.main import main

REPO = Path(__file__).resolve().parent.parent
FORGE = "https://conda.anaconda.org/conda-forge/linux-64"


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str], str]:
    capsys.readouterr()
    code = main(argv)
    out = capsys.readouterr()
    return code, out.err.splitlines(), out.out


def _lock(path: Path, envs: dict[str, list[tuple[str, str, str]]], base: str = FORGE) -> Path:
    """A pixi.lock v7 of conda packages: environment -> (name, version, build) on linux-64."""
    packages: dict[str, dict[str, Any]] = {}
    body: dict[str, Any] = {}
    for env, pkgs in envs.items():
        refs = []
        for name, version, build in pkgs:
            url = f"{base}/{name}-{version}-{build}.conda"
            packages[url] = {"conda": url, "sha256": "1" * 64, "md5": "2" * 32, "license": "MIT"}
            refs.append({"conda": url})
        body[env] = {"channels": [{"url": base.rsplit("/", 1)[0] + "/"}], "packages": {"linux-64": refs}}
    path.write_text(yaml.safe_dump({"version": 6, "environments": body, "packages": list(packages.values())},
                                   sort_keys=False))
    return path


# ----------------------------------------------------------------------------- the command line


def test_bare_rocmlock_lists_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    code, err, out = _run([], capsys)
    assert code == 2 and out == ""
    text = "\n".join(err)
    # Every command with its one-line help, as `rocmlock --help` shows them (was: only "required: COMMAND").
    for command in ("plan", "lock", "diff", "install", "audit", "verify", "preset", "bump"):
        assert f"\n    {command} " in text, command
    assert err[-1] == ("rocmlock: error: no command given; pick one of the commands above "
                       "(`rocmlock COMMAND --help` for its options)")


def test_a_mistyped_required_option_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    # `--prefx X`: argparse reported only the --prefix it then missed.
    code, err, out = _run(["install", "-e", "mi300x", "--prefx", "X"], capsys)
    assert code == 2 and out == ""
    assert err[0].startswith("usage: rocmlock install ")
    assert err[-1] == "rocmlock install: error: unrecognized option --prefx (did you mean --prefix?)"
    # An abbreviation argparse accepts is no typo: the missing option is still what is said.
    code, err, _ = _run(["install", "-e", "mi300x", "--plat", "linux-64"], capsys)
    assert code == 2 and err[-1] == "rocmlock install: error: the following arguments are required: --prefix"


@pytest.mark.parametrize(("argv", "option"), [
    (["pack", "-e", "mi300x", "-e", "mi250", "-o", "x.tar"], "-e/--environment"),
    (["install", "-e", "mi300x", "--environment=mi250", "--prefix", "a"], "-e/--environment"),
    (["install", "-e", "mi300x", "--prefix", "a", "--prefix", "b"], "--prefix"),
    (["image", "-e", "mi300x", "--no-base", "-o", "a", "--output", "b"], "-o/--output"),
    (["install", "-e", "mi300x", "-p", "linux-64", "-p", "osx-64", "--prefix", "a"], "-p/--platform"),
])
def test_an_option_that_names_one_thing_given_twice_is_refused(argv: list[str], option: str,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    # `pack -e mi300x -e mi250` packed mi250 alone and said nothing, though -e repeats on lock, export and plan.
    code, err, out = _run(argv, capsys)
    assert code == 2 and out == ""
    assert err[-1] == f"rocmlock {argv[0]}: error: {option} given twice: this command takes one"


# ----------------------------------------------------------------------------- diff


def _many(n: int) -> list[tuple[str, str, str]]:
    return [(f"pkg{i:05d}", "1.0", "h0_0") for i in range(n)]


def test_diff_json_into_head_ends_quietly(tmp_path: Path) -> None:
    """`rocmlock diff OLD NEW --json | head`: EPIPE is the reader's normal end, not "Broken pipe" with a disk-full
    hint. Output well past a pipe's buffer (64 KiB) so that the write meets the closed pipe."""
    old = _lock(tmp_path / "old.lock", {"default": []})
    new = _lock(tmp_path / "new.lock", {"default": _many(3000)})
    env = {**os.environ, "PYTHONPATH": str(REPO / "tools")}
    proc = subprocess.Popen([sys.executable, "-m", "rocmlock", "diff", str(old), str(new), "--json"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline() == b"{\n"
    proc.stdout.close()  # what `head -1` does after its line
    stderr = proc.stderr.read().decode()
    assert proc.wait(60) == 1  # what Python itself exits with on EPIPE (docs.python.org library/signal "SIGPIPE")
    assert stderr == ""


def test_diff_where_only_the_url_changed_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pins = [("python", "3.11.7", "host_shim"), ("zlib", "1.3", "h0_0")]
    old = _lock(tmp_path / "old.lock", {"default": pins}, "http://127.0.0.1:41001/rocmlock-example/noarch")
    new = _lock(tmp_path / "new.lock", {"default": pins[:1] + [("zlib", "1.3.1", "h0_0")]},
                "http://127.0.0.1:41999/rocmlock-example/noarch")
    code, err, out = _run(["diff", str(old), str(new)], capsys)
    assert code == 0, err
    assert out.splitlines() == [
        "default [linux-64]",
        ("  ~ python 3.11.7 host_shim (only its URL changed: "
        "http://127.0.0.1:41001/rocmlock-example/noarch/python-3.11.7-host_shim.conda -> "
        "http://127.0.0.1:41999/rocmlock-example/noarch/python-3.11.7-host_shim.conda)"),
        "  ~ zlib 1.3 h0_0 -> 1.3.1 h0_0"]
    # The same pin, but another file: that is said, not "only its URL".
    text = new.read_text().replace("1" * 64, "3" * 64)
    new.write_text(text)
    _, _, out = _run(["diff", str(old), str(new)], capsys)
    assert "  ~ python 3.11.7 host_shim (another file (sha256) at another URL: http://127.0.0.1:41001/" in out


def test_diff_given_a_manifest_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "pixi.toml").write_text('[workspace]\nname = "w"\nchannels = ["c"]\nplatforms = ["linux-64"]\n')
    lock = _lock(tmp_path / "pixi.lock", {"default": []})
    code, err, out = _run(["diff", str(tmp_path / "pixi.toml"), str(lock)], capsys)
    assert code == 2 and out == ""
    assert err == [(f"error: {tmp_path / 'pixi.toml'}: a manifest (.toml) where a lock file was expected; "
                   "rocmlock diff compares two pixi.lock files"),
                   "hint: e.g. `git show HEAD:pixi.lock > old.lock`, then `rocmlock diff old.lock pixi.lock`"]


# ----------------------------------------------------------------------------- install


def test_an_environment_declared_but_not_locked_says_run_lock(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "pixi.toml").write_text('[workspace]\nname = "w"\nchannels = ["c"]\nplatforms = ["linux-64"]\n'
                                        '[environments]\nmi300x = []\nmi300x-b = []\n')
    lock = _lock(tmp_path / "pixi.lock", {"default": [], "mi300x": []})
    code, err, _ = _run(["install", "--manifest-path", str(tmp_path), "-e", "mi300x-b", "--prefix",
                         str(tmp_path / "env")], capsys)
    assert code == 2
    assert err == [f"error: {lock}: environment 'mi300x-b' is declared in the manifest but not locked",
                   "hint: run `rocmlock lock` (or `rocmlock lock -e mi300x-b`), then run this again"]
    # A name nothing declares is still a typo, with the nearest locked name.
    code, err, _ = _run(["install", "--manifest-path", str(tmp_path), "-e", "mi300z", "--prefix",
                         str(tmp_path / "env")], capsys)
    assert code == 2 and err == [f"error: {lock}: no environment 'mi300z' (did you mean 'mi300x'?)",
                                 "hint: locked environments: default, mi300x"]
    assert not (tmp_path / "env").exists()


# ----------------------------------------------------------------------------- audit


def test_audit_of_an_unknown_gpu_target_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "conda-meta").mkdir()
    code, err, out = _run(["audit", "--target", "gfx9999", "--prefix", str(tmp_path)], capsys)
    assert code == 2 and out == ""
    assert err[0] == "error: --target: unknown GPU target 'gfx9999' (did you mean 'gfx909'?)"
    assert err[1].startswith("hint: rocmlock's targets: gfx908, gfx90a, gfx942, gfx950, gfx1100")
    # A processor LLVM knows but rocmlock's table does not is still a GPU one can audit for.
    code, err, _ = _run(["audit", "--target", "gfx906", "--prefix", str(tmp_path)], capsys)
    assert code == 0, err


def test_audit_of_an_xnack_mode_on_a_gpu_without_xnack_says_so(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """gfx1100 has no XNACK (LLVM: "Unsupported"; clang refuses the target ID): gfx1100:xnack- was audited and
    every file's verdict spoke of an xnack mode the GPU cannot have."""
    (tmp_path / "conda-meta").mkdir()
    for text, plain in (("gfx1100:xnack-", "gfx1100"), ("gfx1201:sramecc-:xnack+", "gfx1201:sramecc-")):
        code, err, out = _run(["audit", "--target", text, "--prefix", str(tmp_path)], capsys)
        assert code == 2 and out == ""
        gpu = plain.split(":")[0]
        assert err == [f"error: --target: '{text}': {gpu} has no XNACK, so no xnack mode to name",
                       f"hint: pass {plain} (rocmlock's GPU table: xnack unsupported on {gpu})"]
    for text in ("gfx942:xnack-", "gfx90a:xnack+", "gfx1100"):  # where the table says XNACK exists, or none named
        code, err, _ = _run(["audit", "--target", text, "--prefix", str(tmp_path)], capsys)
        assert code == 0, err


def test_audit_of_a_wheel_says_what_audit_takes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wheel = tmp_path / "torch-2.9.0-cp312-cp312-manylinux_2_28_x86_64.whl"
    shutil.make_archive(str(wheel.with_suffix("")), "zip", tmp_path)
    wheel.with_suffix(".zip").rename(wheel)
    code, err, _ = _run(["audit", str(wheel)], capsys)
    assert code == 2
    assert err == [(f"error: {wheel}: a wheel; rocmlock audit reads conda packages (.conda, .tar.bz2), bundles of "
                   "`rocmlock pack` (tar or directory) and installed environments (--prefix DIR)"),
                   "hint: install the wheel into an environment, then `rocmlock audit --prefix DIR`"]
    other = tmp_path / "notes.txt"
    other.write_text("not a tar\n")
    code, err, _ = _run(["audit", str(other)], capsys)
    assert code == 2 and err[0] == (f"error: {other}: not a conda package (.conda, .tar.bz2) or a bundle of "
                                    "`rocmlock pack` (truncated header)")


def _noarch_package(out: Path) -> Path:
    import rattler_build as rb

    files = out / "files"
    (files / "share").mkdir(parents=True)
    (files / "share" / "readme.txt").write_text("no GPU code here\n")
    built = rb.assemble_package(name="helper", version="1.0", target_platform="noarch", build_string="pyhd8ed1ab_0",
                                output_dir=str(out), files_dir=str(files), noarch="generic")
    return Path(str(built.path))


def test_audit_of_a_noarch_package_has_nothing_to_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    package = _noarch_package(tmp_path)
    code, err, out = _run(["audit", str(package)], capsys)
    assert code == 0, err
    assert out == (f"device code in {package}: none (no HIP library or code object); a package without GPU code "
                   "(noarch or CPU-only) runs with any GPU, so there is no target to check\n")
    code, _, out = _run(["audit", str(package), "--json"], capsys)
    assert code == 0 and '"target": null' in out and '"ok": true' in out
    # With a --target the usual report: nothing found, nothing failing.
    code, _, out = _run(["audit", str(package), "--target", "gfx942"], capsys)
    assert code == 0 and out.splitlines()[-1] == "no device code found (no HIP library or code object)"


# ----------------------------------------------------------------------------- lock --check


def test_lock_check_calls_a_file_not_written_yet_missing(ws_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (ws_copy / "envs" / "mi300x" / "environment.yml").unlink()
    (ws_copy / "envs" / "mi250" / "environment.yml").write_text("edited\n")
    code, err, _ = _run(["lock", "--manifest-path", str(ws_copy / "pixi.toml"), "--check"], capsys)
    assert code == 1
    assert "missing: envs/mi300x/environment.yml" in err and "stale: envs/mi250/environment.yml" in err
    assert "stale: envs/mi300x/environment.yml" not in err
    assert not (ws_copy / "envs" / "mi300x" / "environment.yml").exists()
