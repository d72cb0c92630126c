"""rocmlock publish as a user typing --to by hand: malformed URLs, a server that is down, a key in the way.

Every one is one ``error:`` line and a ``hint:`` that fits the failure (a server that is down is not a
credentials problem), exit 2 for a --to that cannot be a channel, exit 1 when the server cannot be used,
and the key (QUETZ_API_KEY, or a password in the URL) never printed. No server runs here: the "down"
server is a port nobody listens on. Under a second.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from channels import Pkg, build_channel
from rocmlock.cli.main import main

KEY = "k3y-N0t-Pr1nted-0123456789"


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_channel(tmp_path_factory.mktemp("src") / "out",
                         [Pkg("rocm-version", "7.2", "0", subdir="noarch", noarch="generic")])


@pytest.fixture
def dead_port() -> Iterator[int]:
    """A port bound (so no other server of this busy machine can take it) but not listening: refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield int(s.getsockname()[1])


def _publish(capsys: pytest.CaptureFixture[str], source: Path, to: str) -> tuple[int, str, str]:
    code = main(["publish", "--from", str(source), "--to", to])
    out, err = capsys.readouterr()
    assert KEY not in out + err
    lines = err.strip().splitlines()
    assert "Traceback" not in err and len(lines) == 2, err
    assert lines[0].startswith("error: ") and lines[1].startswith("hint: "), err
    return code, lines[0], lines[1]


@pytest.mark.parametrize(("to", "says"), [
    ("quetz+http://[::1/rocm", "not a valid URL"),
    (f"quetz+http://alice:{KEY}@[::1/rocm", "not a valid URL"),
    ("quetz+http://127.0.0.1:99999/rocm", "not a valid URL"),
    ("quetz+http://127.0.0.1:http/rocm", "not a valid URL"),
    ("quets+http://127.0.0.1:8000/rocm", "cannot tell which kind of channel this is"),
    ("file://", "names no directory"),
    ("s3://", "names no bucket"),
    ("s3:///prefix", "names no bucket"),
    ("anaconda://", "names no owner"),
    ("https://prefix.dev/", "names no channel"),
    ("prefix://", "names no channel"),
    ("quetz+http://127.0.0.1:8000", "cannot tell which kind of channel this is"),
])
def test_a_malformed_destination_is_bad_input(source: Path, capsys: pytest.CaptureFixture[str], to: str,
                                              says: str) -> None:
    code, error, _ = _publish(capsys, source, to)
    assert code == 2 and says in error


def test_a_server_that_is_down_is_one_line_and_not_blamed_on_the_key(
        source: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, dead_port: int) -> None:
    monkeypatch.setenv("QUETZ_API_KEY", KEY)
    port = dead_port
    code, error, hint = _publish(capsys, source, f"quetz+http://127.0.0.1:{port}/rocm")
    assert code == 1
    assert error.startswith(f"error: cannot publish to http://127.0.0.1:{port}/get/rocm: it cannot be read")
    assert "Connection refused" in error and "nothing was uploaded" in error
    assert "is the server running" in hint and "QUETZ_API_KEY" not in hint


@pytest.mark.parametrize("to", [f"quetz+http://alice:{KEY}@127.0.0.1:8000/rocm",
                                f"quetz+http://127.0.0.1:8000/t/{KEY}/rocm",
                                f"artifactory+https://ci:{KEY}@example.com/artifactory/rocm"])
def test_a_key_in_the_destination_url_is_refused_and_never_printed(source: Path, capsys: pytest.CaptureFixture[str],
                                                                   to: str) -> None:
    # It would be in `ps` and the shell's history; and the upload never used it (quetz: "No quetz api key
    # was given", after the read had used it).
    code, error, hint = _publish(capsys, source, to)
    assert code == 2 and "credentials do not go in --to" in error
    assert "QUETZ_API_KEY" in hint or "ARTIFACTORY_TOKEN" in hint


def test_from_a_file_says_it_is_not_a_directory(source: Path, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "afile").write_text("")
    code, error, _ = _publish(capsys, tmp_path / "afile", "quetz+http://127.0.0.1:1/rocm")
    assert code == 2 and error == f"error: --from {tmp_path / 'afile'}: not a directory"


def test_file_url_without_a_path_never_publishes_into_the_current_directory(
        source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, _ = _publish(capsys, source, "file://")
    assert code == 2 and list(tmp_path.iterdir()) == []


def test_a_destination_directory_that_is_a_file_is_refused_before_anything_is_written(
        source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "afile").write_text("")
    for to in (tmp_path / "afile", tmp_path / "afile" / "channel"):
        code, error, _ = _publish(capsys, source, str(to))
        assert code == 2 and error == f"error: --to {to}: {tmp_path / 'afile'} is not a directory", error
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]
