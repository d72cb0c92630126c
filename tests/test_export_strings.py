"""A string from a lock that would add lines to an export is refused, in every command that writes one (issue 22).

A newline in a record's build string or a channel URL made ``export`` and ``lock`` write extra lines
(``@EXPLICIT``, a foreign URL) into every environment.yml and ``@EXPLICIT`` file, and ``pack`` put them into a
bundle. rattler parses such a pixi.lock without complaint (checked here), so rocmlock refuses it where it
reads a lock, and the renderers refuse such a record from a fresh solve: exit 2, one line, the name escaped.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from rattler import LockFile
from rocmlock.cli.main import main
from rocmlock.errors import InputError
from rocmlock.lock.exports import render_environment_yml, render_explicit
from rocmlock.lock.lockfile import LockedPlatform
from test_pack_robust import _one_error

NUMPY = "numpy-2.2.0-py312h0_0.conda\n  subdir: linux-64\n"


def _poison(lock: Path, key: str, value: str) -> None:
    """``key`` of numpy's record set to ``value`` (YAML escapes allowed); ``url``: an environment's channel."""
    text = lock.read_text()
    if key == "url":
        old = next(line for line in text.splitlines() if line.startswith("    - url: "))
        lock.write_text(text.replace(old, f'    - url: "{old.split(": ", 1)[1]}{value}"', 1))
        return
    assert NUMPY in text
    lock.write_text(text.replace(NUMPY, NUMPY.replace("  subdir:", f'  {key}: "{value}"\n  subdir:'), 1))


@pytest.mark.parametrize(("key", "value", "says"), [
    ("build", "py312h0_0\\n@EXPLICIT", "package 'numpy': its build holds the control character \\n"),
    ("build", "py312h0_0 # x", "package 'numpy': its build holds a '#'"),
    ("url", "\\u001b[2J", "channel 1 holds the control character \\x1b"),
])
@pytest.mark.parametrize("command", ["export", "lock", "pack", "install"])
def test_a_lock_string_with_a_newline_or_hash_is_refused_by_every_command(
        ws_copy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str, value: str, says: str,
        command: str) -> None:
    lock = ws_copy / "pixi.lock"
    _poison(lock, key, value)
    before = {p: p.read_bytes() for p in ws_copy.rglob("*") if p.is_file()}
    out = tmp_path / "out"
    out.mkdir()
    argv = {"export": [], "lock": [], "pack": ["-e", "mi300x", "-o", str(out / "b.tar")],
            "install": ["-e", "mi300x", "--prefix", str(out / "p")]}[command]
    assert main([command, "--manifest-path", str(ws_copy / "pixi.toml"), *argv]) == 2
    line = _one_error(capsys.readouterr().err)
    assert line.startswith(f"error: {lock}: environment '") and says in line, line
    assert {p: p.read_bytes() for p in ws_copy.rglob("*") if p.is_file()} == before, "nothing written"
    assert not list(out.iterdir())


def test_the_renderers_refuse_a_solved_record_that_would_add_a_line(ws_copy: Path) -> None:
    # A fresh solve's records come from a channel's repodata, not from read_lockfile: the renderers check too.
    lock = ws_copy / "pixi.lock"
    _poison(lock, "build", "py312h0_0\\n@EXPLICIT")
    env = dict(LockFile.from_path(lock).environments())["mi300x"]
    plat = next(p for p in env.platforms() if p.name == "linux-64-gfx942")
    records = env.conda_repodata_records_for_platform(plat) or []
    platform = LockedPlatform("linux-64-gfx942", "linux-64", ())
    for render in (lambda: render_environment_yml("mi300x", [], platform, records),
                   lambda: render_explicit("mi300x", platform, records)):
        with pytest.raises(InputError, match=r"package 'numpy': its build holds the control character \\n"):
            render()
    clean = [r for r in records if r.name.normalized != "numpy"]
    with pytest.raises(InputError, match="the channel 'file:///x/#frag' holds a '#'"):
        render_environment_yml("mi300x", ["file:///x/#frag"], platform, clean)
    assert "@EXPLICIT" in render_explicit("mi300x", platform, clean)
