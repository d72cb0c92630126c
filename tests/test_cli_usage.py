"""The command line helps a newcomer (issue 35, item 10): a command's own usage and the nearest option for an
unknown flag, the nearest command, environment and GPU target for a mistyped one, required options shown as
required, and the workspace found in a parent directory as pixi finds it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from rocmlock.cli.main import main
from rocmlock.errors import OperationError

WS = '[workspace]\nname = "w"\nchannels = ["c"]\nplatforms = ["linux-64"]\n[environments]\nmi250 = []\nmi300x = []\n'


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str], str]:
    capsys.readouterr()
    code = main(argv)
    out = capsys.readouterr()
    return code, out.err.splitlines(), out.out


def test_an_unknown_flag_gets_the_commands_usage_and_the_nearest_option(capsys: pytest.CaptureFixture[str]) -> None:
    code, err, out = _run(["lock", "--chek"], capsys)
    assert code == 2 and out == ""
    assert err[0].startswith("usage: rocmlock lock [-h]")
    assert err[-1] == "rocmlock lock: error: unrecognized arguments: --chek (did you mean --check?)"
    code, err, _ = _run(["pack", "-e", "x", "--with-instaler"], capsys)
    assert code == 2 and err[0].startswith("usage: rocmlock pack ")
    assert err[-1].endswith("--with-instaler (did you mean --with-installer?)")
    code, err, _ = _run(["lock", "--zzzzzz"], capsys)  # nothing near: no guess
    assert code == 2 and err[-1] == "rocmlock lock: error: unrecognized arguments: --zzzzzz"


def test_an_unknown_command_gets_the_nearest(capsys: pytest.CaptureFixture[str]) -> None:
    code, err, _ = _run(["lokc"], capsys)
    assert code == 2 and err[0].startswith("usage: rocmlock ")
    assert err[-1].startswith("rocmlock: error: argument COMMAND: invalid choice: 'lokc'")
    assert err[-1].endswith("(did you mean 'lock'?)")


@pytest.mark.parametrize("command", ["install", "pack", "preset"])
def test_required_environment_is_shown_as_required(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([command, "-h"])
    usage = capsys.readouterr().out.split("\n\n", 1)[0]
    assert " -e ENV" in usage and "[-e ENV]" not in usage


def test_a_mistyped_environment_gets_the_nearest_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "pixi.toml").write_text(WS)
    code, err, _ = _run(["lock", "--check", "-e", "mi30x", "--manifest-path", str(tmp_path)], capsys)
    assert code == 2
    assert err[0] == f"error: {tmp_path / 'pixi.toml'}: unknown environment 'mi30x' (did you mean 'mi300x'?)"


def test_audit_suggests_the_nearest_gpu_target(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "conda-meta").mkdir()
    code, err, _ = _run(["audit", "--target", "gfx94", "--prefix", str(tmp_path)], capsys)
    assert code == 2 and err[0].startswith("error: --target: 'gfx94' is not an AMDGPU target ID")
    assert err[0].endswith("(did you mean 'gfx942'?)")


def test_commands_find_the_workspace_in_a_parent_directory_as_pixi_does(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # pixi_manifest/src/discovery.rs: walk up from the current directory; a pixi.toml without [workspace] (a
    # package) and a pyproject.toml without [tool.pixi] are passed over; pixi.toml before pyproject.toml.
    (tmp_path / "pixi.toml").write_text(WS)
    deep = tmp_path / "pkg" / "src" / "deeper"
    deep.mkdir(parents=True)
    (tmp_path / "pkg" / "pixi.toml").write_text('[package]\nname = "p"\nversion = "1"\n')
    (tmp_path / "pkg" / "src" / "pyproject.toml").write_text('[project]\nname = "p"\n')
    monkeypatch.chdir(deep)
    code, err, _ = _run(["pack", "-e", "mi30x"], capsys)
    assert code == 2 and err[-1] == "hint: run `rocmlock lock` first", err
    assert err[0].startswith(f"error: {tmp_path / 'pixi.lock'}: no lock file")
    # Missing -e: the hint names the environments of the workspace found above.
    code, err, _ = _run(["pack"], capsys)
    assert code == 2 and err[-1] == "hint: pass -e ENV, one of: default, mi250, mi300x"
    # A pyproject.toml with [tool.pixi.workspace] nearer than the pixi.toml is the workspace.
    (tmp_path / "pkg" / "src" / "pyproject.toml").write_text(
        '[project]\nname = "p"\n[tool.pixi.workspace]\nchannels = ["c"]\nplatforms = ["linux-64"]\n'
        '[tool.pixi.environments]\nonly = []\n')
    code, err, _ = _run(["lock", "--check", "-e", "nope"], capsys)
    assert code == 2 and err[0].startswith(f"error: {tmp_path / 'pkg' / 'src' / 'pyproject.toml'}: unknown environment")


def test_a_legacy_project_table_is_a_workspace_that_discovery_stops_at(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # pixi reads a pixi.toml's [project] as its workspace where there is no [workspace]
    # (crates/pixi_manifest/src/toml/manifest.rs, TomlManifest::deserialize: `th.optional("project")`), so its
    # discovery stops at it (discovery.rs: `manifest.has_workspace()`): the outer workspace is never reached.
    (tmp_path / "pixi.toml").write_text(WS)
    legacy = tmp_path / "old"
    (legacy / "src").mkdir(parents=True)
    (legacy / "pixi.toml").write_text('[project]\nname = "old"\nchannels = ["c"]\nplatforms = ["linux-64"]\n'
                                      '[environments]\nlegacy = []\n')
    from rocmlock.workspace.pyproject import discover_manifest

    assert discover_manifest(legacy / "src") == legacy / "pixi.toml"
    monkeypatch.chdir(legacy / "src")
    code, err, _ = _run(["pack"], capsys)
    assert code == 2 and err[-1] == "hint: pass -e ENV, one of: default, legacy", err
    code, err, _ = _run(["lock", "--check", "-e", "mi300x"], capsys)
    assert code == 2 and err[0].startswith(f"error: {legacy / 'pixi.toml'}: unknown environment 'mi300x'"), err


def test_an_unknown_option_given_as_opt_equals_value_gets_the_nearest(capsys: pytest.CaptureFixture[str]) -> None:
    # the guess is made from the option's name alone: a long value after '=' would leave nothing near enough
    value = "/srv/projects/team-a/workspaces/llm-finetune/pixi.toml"
    code, err, _ = _run(["lock", f"--manifest-pth={value}"], capsys)
    assert code == 2
    assert err[-1] == (f"rocmlock lock: error: unrecognized arguments: --manifest-pth={value} "
                       "(did you mean --manifest-path?)")
    # an unknown option that leaves a required one missing: named, with the nearest option
    code, err, _ = _run(["install", "-e", "mi300x", f"--prefx={value}"], capsys)
    assert code == 2 and err[-1] == "rocmlock install: error: unrecognized option --prefx (did you mean --prefix?)"


def _broken(kind: str, path: Path) -> None:
    """``path`` made a manifest that is there but cannot be read as one."""
    import os

    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "dangling":
        path.symlink_to(path.parent / "gone.toml")
    elif kind == "loop":
        path.symlink_to(path)
    elif kind == "directory":
        path.mkdir()


@pytest.mark.parametrize("name", ["pixi.toml", "pyproject.toml"])
@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "dangling", "loop", "directory"])
def test_a_manifest_that_is_there_but_unreadable_stops_discovery(
        kind: str, name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    # Issue 41 (M): a broken pixi.toml in the child made `rocmlock lock` there use (and write into) the parent's
    # workspace. pixi stops on a manifest it cannot read (discovery.rs: `provenance.read()?`); rocmlock stops on
    # any entry of that name that is no readable regular file (workspace/pyproject.py _present_text says why).
    (tmp_path / "pixi.toml").write_text(WS)
    child = tmp_path / "child"
    child.mkdir()
    _broken(kind, child / name)
    before = sorted(p.name for p in tmp_path.iterdir())
    monkeypatch.chdir(child)
    for argv in (["lock", "--check"], ["pack", "-e", "mi300x"]):
        code, err, out = _run(argv, capsys)
        assert code == 2 and out == "", err
        assert len(err) == 2 and err[0].startswith(f"error: {child / name}: "), err
        assert err[0].endswith("; it stops the search for a workspace here"), err
        assert err[1] == "hint: fix or remove it, or pass --manifest-path to the workspace's pixi.toml"
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert sorted(p.name for p in child.iterdir()) == [name]
    # --manifest-path still reaches the parent's workspace past it.
    code, err, _ = _run(["lock", "--check", "-e", "nope", "--manifest-path", str(tmp_path)], capsys)
    assert code == 2 and err[0].startswith(f"error: {tmp_path / 'pixi.toml'}: unknown environment 'nope'"), err


def test_a_manifest_it_may_not_read_stops_discovery(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    # pixi's own rule (discovery.rs `provenance.read()?`): a pixi.toml it cannot read is an error, not passed over.
    import errno
    import os

    from rocmlock.workspace import pyproject

    (tmp_path / "pixi.toml").write_text(WS)
    child = tmp_path / "child"
    child.mkdir()
    (child / "pixi.toml").write_text(WS)
    (child / "pixi.toml").chmod(0)
    if os.geteuid() == 0:  # root reads a file of mode 000: refuse it as the kernel would refuse anyone else
        real = pyproject.read_manifest_text

        def denied(path: Path) -> str:
            if path == child / "pixi.toml":
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
            return real(path)

        monkeypatch.setattr(pyproject, "read_manifest_text", denied)
    monkeypatch.chdir(child)
    code, err, _ = _run(["lock", "--check"], capsys)
    assert code == 2 and err[0] == (f"error: {child / 'pixi.toml'}: cannot be read (permission denied); "
                                    "it stops the search for a workspace here"), err


def test_an_error_quoting_a_huge_value_stays_a_bounded_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A platform key of 1 MB quoted by the error: the line keeps its start (file and key) and its end (the
    suggestion), says how much it left out, and stays under 2,100 characters. Planted: the error printed unbounded
    (a line of 1,000,111 characters)."""
    huge = "gfx" + "9" * 1_000_000
    manifest = tmp_path / "pixi.toml"
    manifest.write_text(f'[workspace]\nname = "w"\nchannels = ["c"]\n'
                        f'platforms = [{{ name = "g", subdir = "linux-64", amdgpu = "{huge}" }}]\n')
    code, err, out = _run(["lock", "--manifest-path", str(manifest)], capsys)
    assert code == 2 and out == ""
    assert err[0].startswith(f"error: {manifest}: key 'workspace.platforms[0].amdgpu': unknown GPU target 'gfx999")
    assert err[0].endswith("'; did you mean 'gfx950'?"), err[0][-80:]
    assert re.search(r" \.\.\. \[99[0-9],[0-9]{3} characters left out\] \.\.\. ", err[0]), err[0][900:1100]
    assert all(len(line) < 2100 for line in err)


def test_bounded_keeps_short_text_and_escapes_long_text() -> None:
    from rocmlock.util.text import bounded_line

    assert bounded_line("a\nb") == "a\\nb"
    assert bounded_line("x" * 2000) == "x" * 2000
    assert bounded_line("x" * 2001) == f"{'x' * 1000} ... [1 characters left out] ... {'x' * 1000}"
    shown = bounded_line("s" + "\x1b" * 5000 + "e", limit=100)
    assert shown.startswith("s\\x1b") and shown.endswith("\\x1be") and "\x1b" not in shown
    assert "[19,902 characters left out]" in shown and len(shown) < 160


def test_a_warning_quoting_a_huge_name_stays_a_bounded_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An unused feature whose name is 100,000 characters: `plan` warns about it on one bounded line. Planted: the
    warning printed unbounded (a line of 100,000 characters and more)."""
    manifest = tmp_path / "pixi.toml"
    manifest.write_text(WS + f'[feature.{"f" * 100_000}]\ndependencies = {{ numpy = "*" }}\n')
    capsys.readouterr()
    main(["plan", "--manifest-path", str(manifest), "--recipes-dir", str(tmp_path)])
    err = capsys.readouterr().err.splitlines()
    warning = next(line for line in err if line.startswith("warning: "))
    assert warning.endswith("is used by no environment: its dependencies are never solved (pixi warns alike); add "
                            "it to one in [environments], or remove it")
    assert "characters left out" in warning and len(warning) < 2100


@pytest.mark.parametrize("raised", [
    OperationError("solve failed", hint="h" * 5000, details=("explained", "d" * 5000)),
    OSError(28, "No space left on device", "/tmp/" + "y" * 5000),
])
def test_every_line_of_an_error_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str], raised: Exception) -> None:
    """The message, each details line, the hint, and an OSError's file name. Planted: a details line, or the OSError's
    line, printed unbounded (5,000 characters and more)."""
    import rocmlock.workspace.manifest

    def fail(path: object) -> None:
        raise raised

    monkeypatch.setattr(rocmlock.workspace.manifest, "load_workspace", fail)
    code, err, _ = _run(["plan", "--manifest-path", str(tmp_path / "pixi.toml")], capsys)
    assert code == 1 and err and all(len(line) <= 2100 for line in err), [len(line) for line in err]
    assert any("characters left out" in line for line in err)


def test_a_usage_error_quoting_a_huge_argument_is_bounded(capsys: pytest.CaptureFixture[str]) -> None:
    """Planted: the usage error printed unbounded (an unknown flag of 5,000 characters on its line)."""
    code, err, _ = _run(["lock", "--" + "z" * 5000], capsys)
    assert code == 2 and err[-1].startswith("rocmlock lock: error: unrecognized arguments: --zzz")
    assert "characters left out" in err[-1] and len(err[-1]) < 2100


@pytest.mark.parametrize(("head", "tail"), [(975, 1500), (980, 1500), (986, 1500), (1500, 980), (1500, 990)])
def test_a_url_cut_by_the_bound_leaks_no_password(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str], head: int, tail: int) -> None:
    """A long error whose URL with credentials falls where the line is cut (the first 1,000 characters end inside
    its password, or the last 1,000 begin there): redacted first, then cut. Planted (cut first): the line kept
    `https://bob:S3` or `WORD@host.example`, which the redaction no longer read as a URL with credentials."""
    import rocmlock.workspace.manifest

    secret = "S3CRETPASSWORD" * 3
    message = "x" * head + f" https://bob:{secret}@host.example/ch " + "y" * tail

    def fail(path: object) -> None:
        raise OperationError(message, hint=message, details=(message,))

    monkeypatch.setattr(rocmlock.workspace.manifest, "load_workspace", fail)
    code, err, _ = _run(["plan", "--manifest-path", str(tmp_path / "pixi.toml")], capsys)
    text = "\n".join(err)
    assert code == 1 and len(err) >= 3 and "characters left out" in text
    assert "bob" not in text and "S3" not in text and "WORD" not in text and "RD@" not in text, text
