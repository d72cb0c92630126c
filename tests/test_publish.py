"""rocmlock publish: a directory, a local HTTP channel behind basic auth (good and bad credentials), S3 (moto)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from channels import Pkg, build_channel
from rocmlock.channel import publish as publish_mod
from rocmlock.channel.publish import parse_destination
from rocmlock.channel.serve import serving
from rocmlock.cli.main import main
from rocmlock.errors import InputError

PASSWORD = "pa55-w0rd-not-printed"


def _source(root: Path, version: str = "7.2", summary_files: tuple[tuple[str, str], ...] = ()) -> Path:
    return build_channel(root, [Pkg("rocm-version", version, "0", subdir="noarch", noarch="generic",
                                    files=summary_files),
                                Pkg("amdgpu-target", "1", "gfx942", subdir="noarch", noarch="generic")])


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*.conda"))


def _publish(capsys: pytest.CaptureFixture[str], source: Path, to: str, *extra: str) -> tuple[int, dict, str]:
    code = main(["publish", "--from", str(source), "--to", to, "--json", *extra])
    captured = capsys.readouterr()
    return code, (json.loads(captured.out) if captured.out.strip() else {}), captured.err


def test_directory_publish_skips_identical_and_refuses_different(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    src, dest = _source(tmp_path / "src"), tmp_path / "team-channel"
    code, result, _ = _publish(capsys, src, str(dest))
    assert code == 0
    assert result["uploaded"] == ["noarch/amdgpu-target-1-gfx942.conda", "noarch/rocm-version-7.2-0.conda"]
    repodata = json.loads((dest / "noarch" / "repodata.json").read_text())
    assert sorted(repodata["packages.conda"]) == ["amdgpu-target-1-gfx942.conda", "rocm-version-7.2-0.conda"]
    code, result, _ = _publish(capsys, src, dest.as_uri())
    assert code == 0 and result["uploaded"] == [] and len(result["skipped"]) == 2
    # Same file name, different content: refused, nothing changes; --force replaces it.
    other = _source(tmp_path / "other", summary_files=(("share/x.txt", "different"),))
    before = (dest / "noarch" / "rocm-version-7.2-0.conda").read_bytes()
    code, _, err = _publish(capsys, other, str(dest))
    assert code == 1 and "already has a different noarch/rocm-version-7.2-0.conda" in err and "--force" in err
    assert (dest / "noarch" / "rocm-version-7.2-0.conda").read_bytes() == before
    code, result, _ = _publish(capsys, other, str(dest), "--force")
    assert code == 0 and result["replaced"] == ["noarch/rocm-version-7.2-0.conda"]
    assert (dest / "noarch" / "rocm-version-7.2-0.conda").read_bytes() != before


@pytest.mark.parametrize(("move", "says"), [
    (("noarch/amdgpu-target-1-gfx942.conda", "noarch/foo.conda"),
     "its file name says foo, its info/index.json amdgpu-target-1-gfx942"),
    (("noarch/amdgpu-target-1-gfx942.conda", "linux64/amdgpu-target-1-gfx942.conda"), "in linux64/, which is no conda"),
    (("noarch/amdgpu-target-1-gfx942.conda", "linux-64/amdgpu-target-1-gfx942.conda"), "but built for noarch"),
    (("noarch/amdgpu-target-1-gfx942.conda", "noarch/evil\x1b]0;pwned\x07-1-0.conda"), "its file name says evil"),
])
def test_a_package_the_index_would_not_list_under_its_name_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], move: tuple[str, str], says: str) -> None:
    """Renamed, or in a directory that is no subdir (or not its own): "2 uploaded", exit 0, and the channel's
    repodata.json listed none of them (rattler's index names what the archive says). Refused before any upload."""
    src, dest = _source(tmp_path / "src"), tmp_path / "team-channel"
    (src / move[1]).parent.mkdir(exist_ok=True)
    (src / move[0]).rename(src / move[1])
    code, _, err = _publish(capsys, src, str(dest))
    assert code == 2 and says in err and "\x1b" not in err and "\x07" not in err, err
    assert not dest.exists() or not list(dest.rglob("*.conda"))


def _auth_file(tmp_path: Path, password: str) -> Path:
    path = tmp_path / "auth" / "credentials.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"127.0.0.1": {"BasicHTTP": {"username": "ci", "password": password}}}))
    return path


@pytest.fixture
def http_channel(tmp_path: Path):  # type: ignore[no-untyped-def]
    root = tmp_path / "served"
    (root / "noarch").mkdir(parents=True)
    build_channel(root, [])
    with serving(root, "rocm", "ci", PASSWORD) as url:
        yield root, url


def test_http_channel_with_good_credentials(tmp_path: Path, http_channel, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    root, url = http_channel
    src = _source(tmp_path / "src")
    monkeypatch.setenv("RATTLER_AUTH_FILE", str(_auth_file(tmp_path, PASSWORD)))
    to = url.replace("http://", "artifactory+http://")
    code, result, err = _publish(capsys, src, to)
    assert code == 0, err
    assert len(result["uploaded"]) == 2
    assert _files(root) == ["noarch/amdgpu-target-1-gfx942.conda", "noarch/rocm-version-7.2-0.conda"]
    assert PASSWORD not in err
    # The served channel now lists them, and a second publish finds them there.
    code, result, _ = _publish(capsys, src, to)
    assert code == 0 and result["uploaded"] == [] and len(result["skipped"]) == 2


def test_http_channel_with_bad_credentials_publishes_nothing(tmp_path: Path, http_channel,
                                                             monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    root, url = http_channel
    src = _source(tmp_path / "src")
    monkeypatch.setenv("RATTLER_AUTH_FILE", str(_auth_file(tmp_path, "wrong-password")))
    monkeypatch.setenv("ARTIFACTORY_TOKEN", "wrong-token-secret")
    code, _, err = _publish(capsys, src, url.replace("http://", "artifactory+http://"))
    assert code == 1
    assert "credentials were refused" in err and "nothing was uploaded" in err
    assert "wrong-token-secret" not in err and "wrong-password" not in err
    assert _files(root) == []


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_answering(proc: subprocess.Popen[bytes], endpoint: str, seconds: float = 60.0) -> None:
    """Until the server answers (any HTTP status): its start is slow on a loaded machine, so a fixed number of
    tries is not enough; a server that exits or never answers fails here, not later as a refused connection."""
    deadline = time.monotonic() + seconds
    while True:
        assert proc.poll() is None, f"moto.server exited with {proc.returncode} before answering at {endpoint}"
        try:
            urllib.request.urlopen(endpoint, timeout=2).close()
            return
        except urllib.error.HTTPError:
            return
        except OSError:
            assert time.monotonic() < deadline, f"moto.server did not answer at {endpoint} within {seconds:.0f} s"
            time.sleep(0.1)


@pytest.fixture
def s3_server(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """moto's S3-compatible server on 127.0.0.1 (tests/requirements-extra.txt)."""
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        _wait_answering(proc, endpoint)
        for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "s3-secret-key",
                           "AWS_ENDPOINT_URL": endpoint, "AWS_REGION": "us-east-1"}.items():
            monkeypatch.setenv(key, value)
        import boto3

        boto3.client("s3").create_bucket(Bucket="rocm-channel")
        yield endpoint
    finally:
        proc.terminate()
        proc.wait(10)


def test_s3_publish_indexes_the_bucket(tmp_path: Path, s3_server: str, capsys: pytest.CaptureFixture[str]) -> None:
    import boto3

    src = _source(tmp_path / "src")
    code, result, err = _publish(capsys, src, "s3://rocm-channel/private")
    assert code == 0, err
    assert len(result["uploaded"]) == 2
    s3 = boto3.client("s3")
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket="rocm-channel")["Contents"])
    assert "private/noarch/rocm-version-7.2-0.conda" in keys and "private/noarch/repodata.json" in keys
    repodata = json.loads(s3.get_object(Bucket="rocm-channel", Key="private/noarch/repodata.json")["Body"].read())
    assert sorted(repodata["packages.conda"]) == ["amdgpu-target-1-gfx942.conda", "rocm-version-7.2-0.conda"]
    assert "s3-secret-key" not in err
    code, result, _ = _publish(capsys, src, "s3://rocm-channel/private")
    assert code == 0 and result["uploaded"] == [] and len(result["skipped"]) == 2


@pytest.mark.parametrize(("to", "kind", "url", "channel", "read"), [
    ("https://prefix.dev/rocm-team", "prefix", "https://prefix.dev", "rocm-team", "https://repo.prefix.dev/rocm-team"),
    ("prefix://rocm-team", "prefix", "https://prefix.dev", "rocm-team", "https://repo.prefix.dev/rocm-team"),
    ("quetz+https://quetz.example.com/rocm", "quetz", "https://quetz.example.com", "rocm",
     "https://quetz.example.com/get/rocm"),
    ("artifactory+https://art.example.com/artifactory/conda-rocm", "artifactory",
     "https://art.example.com/artifactory", "conda-rocm", "https://art.example.com/artifactory/conda-rocm"),
    ("anaconda://rocm-team", "anaconda", "https://api.anaconda.org", "rocm-team",
     "https://conda.anaconda.org/rocm-team"),
    ("s3://bucket/path/ch", "s3", "s3://bucket/path/ch", "path/ch", "s3://bucket/path/ch"),
])
def test_destinations(to: str, kind: str, url: str, channel: str, read: str) -> None:
    dest = parse_destination(to)
    assert (dest.kind, dest.url, dest.channel, dest.read_url) == (kind, url, channel, read)


def test_unknown_destination_lists_the_forms() -> None:
    with pytest.raises(InputError) as err:
        parse_destination("https://bob:secret@example.com/channel")
    assert "secret" not in str(err.value) and "quetz+https://" in (err.value.hint or "")


@pytest.mark.parametrize(("to", "function", "token_var"), [
    ("https://prefix.dev/rocm-team", "upload_package_to_prefix", "PREFIX_API_KEY"),
    ("quetz+https://quetz.example.com/rocm", "upload_package_to_quetz", "QUETZ_API_KEY"),
    ("anaconda://rocm-team", "upload_package_to_anaconda", "ANACONDA_API_KEY"),
])
def test_hosted_backends_call_py_rattler_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, to: str,
                                               function: str, token_var: str) -> None:
    import rattler_build

    calls: list[tuple[tuple, dict]] = []
    monkeypatch.setattr(rattler_build, function, lambda *a, **k: calls.append((a, k)))
    monkeypatch.setattr(publish_mod, "_remote_records", lambda dest, pkgs, env: {})
    # Nothing was really uploaded, so quetz's wait for its index is skipped (tests/test_quetz.py runs it for real).
    monkeypatch.setattr(publish_mod, "_await_index", lambda dest, pkgs, env: None)
    monkeypatch.setenv(token_var, "tok-123")
    result = publish_mod.publish(_source(tmp_path / "src"), to)
    (args, kwargs), = calls
    assert sorted(Path(f).name for f in args[0]) == ["amdgpu-target-1-gfx942.conda", "rocm-version-7.2-0.conda"]
    assert kwargs["api_key"] == "tok-123"
    assert len(result.uploaded) == 2


@pytest.mark.parametrize(("status", "port", "what"), [
    ("401 Unauthorized", 54041, "credentials were refused"),  # the port holds "404"
    ("403 Forbidden", 14041, "credentials were refused"),
    ("500 Internal Server Error", 40401, "it cannot be read"),
])
def test_a_port_that_holds_404_is_no_404(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, status: str, port: int,
                                         what: str) -> None:
    """A refusal from quetz on port 54041 was read as "404: no such repodata, nothing published yet", so publish went
    on to upload and failed there with another message (seen in CI). The status is read from rattler's text
    ("HTTP status client error (401 Unauthorized) for url (...)") with its URLs left out. Planted (`"404" in text`):
    every case here reads as an empty channel and goes on to upload."""
    from rocmlock.errors import OperationError

    url = f"http://127.0.0.1:{port}/get/rocm-2/noarch/repodata.json"

    def query(*args: object) -> list[object]:
        raise RuntimeError(f"HTTP status client error ({status}) for url ({url})")

    monkeypatch.setattr(publish_mod, "query_channel", query)
    dest = parse_destination(f"quetz+http://127.0.0.1:{port}/rocm-2")
    with pytest.raises(OperationError) as err:
        publish_mod._remote_records(dest, [], {})
    assert what in str(err.value) and "nothing was uploaded" in str(err.value)


def test_a_404_is_an_empty_channel() -> None:
    from rocmlock.util.credentials import not_found, refused

    text = "HTTP status client error (404 Not Found) for url (http://127.0.0.1:40100/get/c/noarch/repodata.json)"
    assert not_found(text) and not refused(text)
    assert not not_found("HTTP status client error (401 Unauthorized) for url (http://h:8000/404/repodata.json)")
    assert not refused("HTTP status client error (404 Not Found) for url (http://h:8000/x/401/repodata.json)")
