"""Reading a pixi.lock's parts py-rattler 0.28 leaves to rocmlock (issue 29: what mutation testing left unjudged).

``_environment_options`` reads each environment's ``options:`` (channel-priority, solve-strategy, pypi-prerelease-mode:
what pixi records of how it solved, pixi_core/src/lock_file/update.rs), which py-rattler parses but does not
expose; ``redact_record`` takes credentials out of a record's URL and channel before anything is written. Both get
the shapes a hand-edited or an unusual lock has: an empty or null ``environments:`` block, an environment without
options, options written after a long ``packages:`` list, comments, top-level keys after the block; a secret in a
package URL whose channel is clean, and the other way round.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from rattler import BuildString, PackageRecord, RepoDataRecord
from rocmlock.errors import InputError
from rocmlock.lock.lockfile import (
    DISCARD_HINT,
    _clean_records,
    _environment_options,
    pin_problem,
    record_problem,
    redact_record,
    unreadable_lock,
)
from rocmlock.util.text import escape
from rocmlock.workspace.pypi import PypiPin

LOCK_HEAD = "version: 6\n"
PACKAGES = "packages:\n- conda: https://conda.example/linux-64/a-1.0-h0_0.conda\n  sha256: abc\n"


@pytest.mark.parametrize(("block", "options"), [
    ("environments:\n", {}),
    ("environments: {}\n", {}),
    ("environments: null\n", {}),
    ("environments:\n  default:\n    channels:\n    - url: https://conda.example/\n", {}),
    (("environments:\n  default:\n    channels:\n    - url: https://conda.example/\n    options:\n"
     "      channel-priority: disabled\n      solve-strategy: lowest\n"),
     {"default": {"channel-priority": "disabled", "solve-strategy": "lowest"}}),
    # options after a packages: list (skipped as bulk), a comment and a blank line inside the block
    (("environments:\n  gpu:\n    channels:\n    - url: https://conda.example/\n    packages:\n      linux-64:\n"
     "      - conda: https://conda.example/linux-64/a-1.0-h0_0.conda\n\n    # pixi writes none, a hand may\n"
     "    options:\n      pypi-prerelease-mode: allow\n  cpu:\n    options:\n      channel-priority: strict\n"),
     {"gpu": {"pypi-prerelease-mode": "allow"}, "cpu": {"channel-priority": "strict"}}),
    # the key quoted, and spelt with an escape: PyYAML is asked whenever a line could hold it
    ('environments:\n  default:\n    "options": {channel-priority: disabled}\n',
     {"default": {"channel-priority": "disabled"}}),
    ('environments:\n  default:\n    "\\x6fptions":\n      solve-strategy: lowest\n',
     {"default": {"solve-strategy": "lowest"}}),
])
def test_environment_options_are_read_from_every_shape_of_the_block(tmp_path: Path, block: str,
                                                                      options: dict[str, dict[str, str]]) -> None:
    lock = tmp_path / "pixi.lock"
    lock.write_text(LOCK_HEAD + block + PACKAGES, encoding="utf-8")
    assert _environment_options(lock.read_bytes()) == options


def test_a_lock_without_options_is_read_without_pyyaml(tmp_path: Path) -> None:
    """Locks rattler writes have no ``options:``: reading one (install, image, unpack) does not load PyYAML."""
    lock = tmp_path / "pixi.lock"
    lock.write_text(LOCK_HEAD + "environments:\n  default:\n    channels:\n    - url: https://conda.example/\n"
                    "    packages:\n      linux-64:\n      - conda: https://conda.example/linux-64/a-1.0-h0_0.conda\n"
                    + PACKAGES, encoding="utf-8")
    code = ("import sys; from rocmlock.lock.lockfile import _environment_options as o; "
            f"assert o(open({str(lock)!r}, 'rb').read()) == {{}}; print('yaml' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_top_level_keys_outside_the_block_are_not_read_as_environments(tmp_path: Path) -> None:
    # A top-level `options:`-like mapping after the block (or before it) belongs to no environment.
    lock = tmp_path / "pixi.lock"
    lock.write_text(LOCK_HEAD + "other:\n  default:\n    options:\n      channel-priority: disabled\n"
                    "environments:\n  default:\n    options:\n      channel-priority: strict\n"
                    "more:\n  x:\n    options:\n      solve-strategy: lowest\n" + PACKAGES, encoding="utf-8")
    assert _environment_options(lock.read_bytes()) == {"default": {"channel-priority": "strict"}}


def _record(url: str, channel: str) -> RepoDataRecord:
    record = PackageRecord("a", "1.0", BuildString("h0_0"), 0, "linux-64")
    return RepoDataRecord(record, "a-1.0-h0_0.conda", url, channel)


@pytest.mark.parametrize(("url", "channel"), [
    ("https://bob:pw-1@conda.example/rocm/linux-64/a-1.0-h0_0.conda", "https://conda.example/rocm"),
    ("https://conda.example/rocm/linux-64/a-1.0-h0_0.conda", "https://bob:pw-1@conda.example/rocm"),
    ("https://conda.example/t/pw-1/rocm/linux-64/a-1.0-h0_0.conda", "https://conda.example/t/pw-1/rocm"),
])
def test_redact_record_cleans_the_url_and_the_channel_each_on_its_own(url: str, channel: str) -> None:
    clean = redact_record(_record(url, channel))
    assert clean.url == "https://conda.example/rocm/linux-64/a-1.0-h0_0.conda"
    assert clean.channel == "https://conda.example/rocm"
    assert (clean.name.normalized, str(clean.version), str(clean.build), clean.file_name) == (
        "a", "1.0", "h0_0", "a-1.0-h0_0.conda")


def test_redact_record_returns_a_clean_record_as_it_is() -> None:
    record = _record("https://conda.example/rocm/linux-64/a-1.0-h0_0.conda", "https://conda.example/rocm")
    assert redact_record(record) is record


@pytest.mark.parametrize(("pin", "says"), [
    (PypiPin("to#ol", "1.0", "a" * 64), "PyPI package 'to#ol': its name holds a '#'"),
    (PypiPin("tool", "1.0\n", "a" * 64), "PyPI package 'tool': its version holds the control character \\n"),
    (PypiPin("tool", "1.0", "a#" * 32), "PyPI package 'tool': its sha256 holds a '#'"),
    (PypiPin("tool", "1.0", "a" * 64, "https://h/t.whl\n-e ."), "PyPI package 'tool': its url holds the control"),
    (PypiPin("tool", "1.0", "a" * 64, "https://h/tool-1.0.whl#sha256=" + "a" * 64), None),  # pip's own fragment
])
def test_a_pypi_pin_is_refused_naming_the_field_that_would_add_a_line(pin: PypiPin, says: str | None) -> None:
    problem = pin_problem(pin)
    assert (problem is None) if says is None else (problem or "").startswith(says), problem


# (py-rattler refuses such a name, version, build or file name when a record is made in Python; from a lock
# they pass: tests/test_export_strings.py poisons a build there; a URL's newline py-rattler drops.)
@pytest.mark.parametrize(("field", "value", "says"), [
    ("url", "https://h/linux-64/numpy-1.0-h0_0.conda#x", "its url holds a '#'"),
    ("channel", "https://h/#c", "its channel holds a '#'"),
])
def test_a_conda_record_is_refused_naming_the_field_that_would_add_a_line(field: str, value: str, says: str) -> None:
    parts = {"name": "numpy", "version": "1.0", "build": "h0_0", "file": "numpy-1.0-h0_0.conda",
             "url": "https://h/linux-64/numpy-1.0-h0_0.conda", "channel": "https://h", field: value}
    record = PackageRecord(parts["name"], parts["version"], BuildString(parts["build"]), 0, "linux-64")
    problem = record_problem(RepoDataRecord(record, parts["file"], parts["url"], parts["channel"])) or ""
    assert problem.startswith(f"package '{escape(parts['name'])}': {says}"), problem


def _unreadable(tmp_path: Path, text: str | bytes, parser_error: str = "rattler says no") -> tuple[str, str]:
    lock = tmp_path / "pixi.lock"
    lock.write_bytes(text if isinstance(text, bytes) else text.encode())
    err = unreadable_lock(lock, parser_error)
    return str(err).removeprefix(f"{lock}: cannot read the lock file: "), err.hint or ""


RESTORE = f"restore it (`git checkout pixi.lock`), then `rocmlock lock`; or {DISCARD_HINT}"


def test_an_unreadable_lock_says_exactly_what_and_where(tmp_path: Path) -> None:
    # A merge conflict: how many, and the first three markers with their lines; the hint takes one side whole.
    conflict = ("version: 6\n<<<<<<< HEAD\na: 1\n=======\na: 2\n>>>>>>> other\n"
                "<<<<<<< HEAD\nb: 1\n=======\nb: 2\n>>>>>>> other\n")
    says, hint = _unreadable(tmp_path, conflict)
    assert says == "2 unresolved merge conflict(s) (<<<<<<< at line 2, ======= at line 4, >>>>>>> at line 6)"
    assert hint == ("take one side whole, `git checkout --ours pixi.lock` (or `--theirs`), then `rocmlock lock` "
                    f"re-solves what pixi.toml changed since; or {DISCARD_HINT} (every pin dropped)")
    # Markers without an opening one still count as one conflict.
    assert _unreadable(tmp_path, "version: 6\n=======\n")[0] == "1 unresolved merge conflict(s) (======= at line 2)"
    # Invalid YAML: its line and column, 1-based.
    says, hint = _unreadable(tmp_path, "version: 6\nenvironments:\n  a: [1\n")
    assert says.startswith("invalid YAML at line 4, column 1: "), says
    assert hint == f"{RESTORE} (every pin dropped)"
    # Valid YAML that rattler refuses: rattler's message, its URLs' queries masked.
    assert _unreadable(tmp_path, "version: 6\n", "bad value https://h/x?token=s3")[0] == "bad value https://h/x?***"
    # Not UTF-8: the byte; the hint keeps the lock.
    says, hint = _unreadable(tmp_path, b"version: 6\n\xff\n")
    assert (says, hint) == ("not UTF-8 text (byte 11)", RESTORE)
    # A newer format: which pixi to use.
    says, hint = _unreadable(tmp_path, "version: 99\n", "found newer lockfile format version 99")
    assert says == "found newer lockfile format version 99"
    assert hint == ("it was written by a newer pixi than this py-rattler reads: upgrade py-rattler, or lock with a "
                    "pixi that writes format 7")


@pytest.mark.parametrize(("url", "channel", "where"), [
    ("https://h/rocm/linux-64/a-1.0-h0_0.conda?sig=s3cr3t", "https://h/rocm", "env 'x', package 'a'"),
    ("https://h/rocm/linux-64/a-1.0-h0_0.conda", "https://h/rocm#s3cr3t", "env 'x', the channel of package 'a'"),
])
def test_a_query_in_a_locked_record_is_refused_naming_where_and_never_shown(tmp_path: Path, url: str, channel: str,
                                                                           where: str) -> None:
    lock = tmp_path / "pixi.lock"
    with pytest.raises(InputError) as err:
        _clean_records([_record(url, channel)], lock, "env 'x'")
    assert str(err.value) == (f"{lock}: {where}: the URL has a query string or fragment ('?...' or '#...'), which "
                              "no conda channel or package URL has (the URL is not shown: that part may be a secret)")
    assert err.value.hint == ("remove it from pixi.lock, or delete pixi.lock and lock again; if the lock was shared, "
                              "revoke the secret (a channel's secret goes in RATTLER_AUTH_FILE)")
    assert "s3cr3t" not in str(err.value) + (err.value.hint or "")
