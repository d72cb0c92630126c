"""rocmlock against a real quetz server (tests/quetz_server.py, one per session): publish, plan --channel.

The server holds a private channel; reading it needs the API key, given as quetz 0.10.4 accepts it: the
``X-API-Key`` header (quetz/deps.py ``get_rules``), a ``/t/<key>/`` URL prefix (quetz/main.py
``CondaTokenMiddleware``), or, through rattler, a ``CondaToken`` in RATTLER_AUTH_FILE, which rattler turns into that
prefix (rattler-build docs/authentication_and_upload.md lists CondaToken for quetz).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from channels import Pkg, build_channel
from quetz_server import QuetzChannel, QuetzServer
from rocmlock.cli.main import main

PUBLISHED = ["noarch/amdgpu-target-1-gfx942.conda", "noarch/rocm-version-7.2-0.conda"]


def _source(root: Path, summary_files: tuple[tuple[str, str], ...] = ()) -> Path:
    return build_channel(root, [Pkg("rocm-version", "7.2", "0", subdir="noarch", noarch="generic",
                                    files=summary_files),
                                Pkg("amdgpu-target", "1", "gfx942", subdir="noarch", noarch="generic")])


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _publish(capsys: pytest.CaptureFixture[str], source: Path, channel: QuetzChannel,
             *extra: str) -> tuple[int, dict[str, list[str]], str]:
    code, out, err = _run(capsys, "publish", "--from", str(source), "--to", channel.publish_to,
                          "--json", *extra)
    assert channel.api_key not in out + err
    return code, (json.loads(out) if out.strip() else {}), err


def _listed(channel: QuetzChannel, subdir: str) -> set[str]:
    req = urllib.request.Request(f"{channel.url}/{subdir}/repodata.json", headers={"X-API-Key": channel.api_key})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return set(json.loads(resp.read()).get("packages.conda", {}))
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return set()
        raise


def _auth_file(tmp_path: Path, channel: QuetzChannel, token: str) -> Path:
    path = tmp_path / "auth" / "credentials.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({channel.host: {"CondaToken": token}}))
    return path


def test_the_server_writes_its_own_log_file_in_its_directory(quetz: QuetzServer) -> None:
    # quetz 0.10.4's logging config (quetz/config.py ``get_logger_config``) opens ``<cwd>/quetz.log`` at start:
    # started from the checkout, it left an empty quetz.log there (one was committed by mistake).
    assert (quetz.log.parent / "cwd" / "quetz.log").is_file()


def test_the_channel_is_private(quetz_channel: QuetzChannel) -> None:
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"{quetz_channel.url}/noarch/repodata.json", timeout=10)
    assert err.value.code == 401


def test_publish_without_the_key_uploads_nothing(quetz_channel: QuetzChannel, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    src = _source(tmp_path / "src")
    code, _, err = _publish(capsys, src, quetz_channel)
    assert code == 1 and "credentials were refused" in err and "nothing was uploaded" in err
    assert "QUETZ_API_KEY" in err
    monkeypatch.setenv("QUETZ_API_KEY", "not-the-key-0123456789")
    code, _, err = _publish(capsys, src, quetz_channel)
    assert code == 1 and "credentials were refused" in err and "not-the-key-0123456789" not in err
    assert f"hint: the server refused QUETZ_API_KEY: check that it is a key with a role on channel " \
           f"'{quetz_channel.name}'" in err, err
    assert _listed(quetz_channel, "noarch") == set()


def test_publish_to_a_channel_the_server_does_not_have(quetz_channel: QuetzChannel, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    # quetz answers 404 for the repodata of a channel it does not have, as for an empty subdir: the upload
    # then failed with rattler-build's bare "Server responded with error".
    monkeypatch.setenv("QUETZ_API_KEY", quetz_channel.api_key)
    missing = f"{quetz_channel.name}-typo"
    code, _, err = _run(capsys, "publish", "--from", str(_source(tmp_path / "src")), "--to",
                        f"quetz+{quetz_channel.server}/{missing}")
    assert code == 1 and quetz_channel.api_key not in err
    assert f"error: {quetz_channel.server} has no channel '{missing}'; nothing was uploaded" in err, err
    assert "hint: create it in quetz" in err


def test_publish_with_the_key_then_skip_then_refuse(quetz_channel: QuetzChannel, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("QUETZ_API_KEY", quetz_channel.api_key)
    src = _source(tmp_path / "src")
    code, result, err = _publish(capsys, src, quetz_channel)
    assert code == 0, err
    assert result["uploaded"] == PUBLISHED and result["skipped"] == []
    assert result["destination"] == quetz_channel.url
    # publish returns once quetz's index (built in the background after each upload) lists them.
    assert _listed(quetz_channel, "noarch") == {k.split("/")[1] for k in PUBLISHED}
    # What the server serves is byte for byte what was built.
    for key in PUBLISHED:
        req = urllib.request.Request(f"{quetz_channel.url}/{key}", headers={"X-API-Key": quetz_channel.api_key})
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert resp.read() == (src / key).read_bytes()
    # Publishing the same files again uploads nothing.
    code, result, err = _publish(capsys, src, quetz_channel)
    assert code == 0, err
    assert result["uploaded"] == [] and result["skipped"] == PUBLISHED
    # A different file under a name the channel holds is refused before anything is sent.
    other = _source(tmp_path / "other", summary_files=(("share/x.txt", "different"),))
    code, _, err = _publish(capsys, other, quetz_channel)
    assert code == 1 and "already has a different noarch/rocm-version-7.2-0.conda" in err
    assert "nothing was uploaded" in err
    req = urllib.request.Request(f"{quetz_channel.url}/{PUBLISHED[1]}", headers={"X-API-Key": quetz_channel.api_key})
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.read() == (src / PUBLISHED[1]).read_bytes()


def test_plan_sees_what_the_server_holds(quetz_channel: QuetzChannel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    from rocmlock.build.plan import make_plan
    from rocmlock.workspace.manifest import load_workspace
    from test_plan import mirror, workspace

    mirror(tmp_path)
    manifest = workspace(tmp_path, {"mi300x": ("gfx942", "7.2.*", "3.12.*")})
    torch = next(v for v in make_plan(load_workspace(manifest)).variants if v.stage == "pytorch")
    built = build_channel(tmp_path / "built", [Pkg("pytorch", torch.version, torch.build_string)])
    key = f"linux-64/pytorch-{torch.version}-{torch.build_string}.conda"
    # Published with the key from rattler's auth file alone (no QUETZ_API_KEY): rattler-build's quetz upload
    # and rocmlock's check of the channel both take the CondaToken from there.
    monkeypatch.setenv("RATTLER_AUTH_FILE", str(_auth_file(tmp_path, quetz_channel, quetz_channel.api_key)))
    code, result, err = _publish(capsys, built, quetz_channel)
    assert code == 0 and result["uploaded"] == [key], err
    assert key.split("/")[1] in _listed(quetz_channel, key.split("/")[0])

    def plan_present(channel: str) -> set[str]:
        code, out, err = _run(capsys, "plan", "--json", "--channel", channel, "--manifest-path", str(manifest))
        assert code == 0, err
        assert quetz_channel.api_key not in out + err
        data = json.loads(out)
        assert data["channel"] == quetz_channel.url
        return {v["stage"] for v in data["variants"] if v["present"]}

    assert "pytorch" in plan_present(quetz_channel.url)
    # The `--to` form (what build-variants.yml's one ROCMLOCK_CHANNEL holds for publish) reads the same channel.
    assert "pytorch" in plan_present(quetz_channel.publish_to)
    monkeypatch.delenv("RATTLER_AUTH_FILE")
    assert "pytorch" in plan_present(quetz_channel.token_url)
    # No credentials at all: one line naming the channel, nothing about the key.
    code, out, err = _run(capsys, "plan", "--channel", quetz_channel.url, "--manifest-path", str(manifest))
    assert code == 1 and out == ""
    assert f"cannot read channel {quetz_channel.url}" in err and "401" in err
    assert "RATTLER_AUTH_FILE" in err and "/t/<token>/" in err
    # A wrong key in a /t/<key>/ URL: refused, and the key is not echoed.
    wrong = quetz_channel.token_url.replace(quetz_channel.api_key, "wrong-key-0123456789")
    code, _, err = _run(capsys, "plan", "--channel", wrong, "--manifest-path", str(manifest))
    assert code == 1 and "401" in err and "wrong-key-0123456789" not in err


@pytest.mark.parametrize(("ci", "rc", "says"), [("true", 1, "CI must run the quetz server"),
                                                ("", 0, "no quetz server here")])
def test_a_server_that_cannot_start_fails_under_ci(tmp_path: Path, ci: str, rc: int, says: str) -> None:
    import os
    import subprocess
    import sys

    # A venv marked complete whose python exits at once: quetz "starts" and dies.
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("#!/bin/sh\necho 'quetz is broken here' >&2\nexit 3\n")
    (venv / "bin" / "python").chmod(0o755)
    (venv / ".rocmlock-complete").write_text("")
    env = {**os.environ, "CI": ci, "ROCMLOCK_QUETZ_VENV": str(venv)}
    here = Path(__file__)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                           f"{here}::test_the_channel_is_private"], cwd=here.parents[1], env=env,
                          capture_output=True, text=True, check=False, timeout=300)
    assert proc.returncode == rc, proc.stdout + proc.stderr
    assert says in proc.stdout and "quetz is broken here" in proc.stdout


def test_force_on_quetz_says_how_to_replace(quetz_channel: QuetzChannel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("QUETZ_API_KEY", quetz_channel.api_key)
    first = build_channel(tmp_path / "first", [Pkg("replace-me", "1", "0", subdir="noarch", noarch="generic")])
    second = build_channel(tmp_path / "second", [Pkg("replace-me", "1", "0", subdir="noarch", noarch="generic",
                                                     files=(("share/x.txt", "second"),))])
    key = "noarch/replace-me-1-0.conda"
    assert _publish(capsys, first, quetz_channel)[0] == 0
    assert key.split("/")[1] in _listed(quetz_channel, key.split("/")[0])
    code, _, err = _publish(capsys, second, quetz_channel, "--force")
    assert code == 1 and "quetz cannot overwrite on upload; nothing was uploaded" in err
    # The hint's command, run as written (curl's request made with urllib), then a plain publish replaces it.
    delete_url = err.split("curl -X DELETE -H \"X-API-Key: $QUETZ_API_KEY\" ", 1)[1].split(" ", 1)[0]
    assert delete_url == f"{quetz_channel.server}/api/channels/{quetz_channel.name}/packages/replace-me/versions/{key}"
    req = urllib.request.Request(delete_url, method="DELETE", headers={"X-API-Key": quetz_channel.api_key})
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 200
    deadline = time.monotonic() + 60
    while key.split("/")[1] in _listed(quetz_channel, "noarch") and time.monotonic() < deadline:
        time.sleep(0.3)
    code, result, err = _publish(capsys, second, quetz_channel)
    assert code == 0 and result["uploaded"] == [key], err
    assert key.split("/")[1] in _listed(quetz_channel, key.split("/")[0])
    req = urllib.request.Request(f"{quetz_channel.url}/{key}", headers={"X-API-Key": quetz_channel.api_key})
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.read() == (second / key).read_bytes()


# ----------------------------------------------------------------------------- lock and install from quetz


@pytest.fixture(scope="module")
def quetz_private(quetz: QuetzServer, channels: dict[str, Path]) -> QuetzChannel:
    """A quetz channel holding the session's private ROCm channel, published with `rocmlock publish`."""
    from rocmlock.channel.publish import publish

    channel = quetz.private_channel()
    result = publish(channels["private"], channel.publish_to, env={"QUETZ_API_KEY": channel.api_key})
    assert len(result.uploaded) == len(list(channels["private"].glob("*/*.conda")))
    return channel


def _keyless_workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, private: str, forge: Path) -> Path:
    """A workspace over ``private`` and the forge channel; every cache under ``tmp_path``."""
    from lockhelpers import manifest

    for name in ("ROCMLOCK_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)  # rocmlock's repodata cache: <workspace>/.rocmlock/cache
    monkeypatch.setenv("RATTLER_CACHE_DIR", str(tmp_path / "rattler-cache"))  # install's package cache
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "pixi.toml").write_text(manifest(private, forge.as_uri()))
    return ws


def _lock_export_install(capsys: pytest.CaptureFixture[str], ws: Path, channel: QuetzChannel,
                         prefix: Path) -> str:
    """lock, export, install -e mi300x; returns all they printed (checked for the key by the caller)."""
    printed = ""
    m = str(ws / "pixi.toml")
    for argv in (["lock", "--manifest-path", m, "--json"], ["export", "--manifest-path", m],
                 ["install", "--manifest-path", m, "-e", "mi300x", "--prefix", str(prefix), "--json"]):
        code, out, err = _run(capsys, *argv)
        assert code == 0, err
        printed += out + err
    from lockhelpers import by_name

    assert by_name(ws / "pixi.lock", "mi300x")["pytorch"] == "2.12.1 rocm72_gfx942_py312_h1a2b3c4_0"
    lock_text = (ws / "pixi.lock").read_text()
    assert f"{channel.url}/" in lock_text and f"{channel.url}/linux-64/pytorch-2.12.1-" in lock_text
    envs = "".join(p.read_text() for p in sorted((ws / "envs").rglob("*")) if p.is_file())
    assert f"{channel.url}/linux-64/pytorch-2.12.1-rocm72_gfx942" in envs
    assert json.loads((prefix / "conda-meta" / "pytorch-2.12.1-rocm72_gfx942_py312_h1a2b3c4_0.json").read_text())
    # pack fetches from the private channel with the same credentials; the caller's scan covers the bundle.
    code, out, err = _run(capsys, "pack", "--manifest-path", m, "-e", "mi300x", "-o", str(prefix.parent / "b.tar"))
    assert code == 0, err
    printed += out + err
    return printed


def _files_holding(root: Path, secret: str, allowed: set[Path]) -> list[str]:
    return sorted(str(p) for p in root.rglob("*")
                  if p.is_file() and not p.is_symlink() and p not in allowed and secret.encode() in p.read_bytes())


def test_lock_and_install_with_the_key_in_rattlers_auth_file(quetz_private: QuetzChannel,
                                                             channels: dict[str, Path], tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    ws = _keyless_workspace(tmp_path, monkeypatch, quetz_private.url, channels["forge"])
    auth = _auth_file(tmp_path, quetz_private, quetz_private.api_key)
    monkeypatch.setenv("RATTLER_AUTH_FILE", str(auth))
    printed = _lock_export_install(capsys, ws, quetz_private, tmp_path / "prefix")
    assert (ws / ".rocmlock" / "cache").is_dir()
    assert quetz_private.api_key not in printed
    assert (tmp_path / "b.tar").is_file() and _files_holding(tmp_path, quetz_private.api_key, {auth}) == []
    # Installing from the lock without the auth file (and with no package cache) is refused in one line.
    monkeypatch.delenv("RATTLER_AUTH_FILE")
    monkeypatch.setenv("RATTLER_CACHE_DIR", str(tmp_path / "empty-cache"))
    code, out, err = _run(capsys, "install", "--manifest-path", str(ws / "pixi.toml"), "-e", "mi300x",
                          "--prefix", str(tmp_path / "prefix2"))
    assert code == 1 and out == "", err
    assert len(err.strip().splitlines()) == 2, err
    assert "401" in err and quetz_private.url in err and "RATTLER_AUTH_FILE" in err


def test_lock_and_install_with_the_key_in_a_token_url(quetz_private: QuetzChannel, channels: dict[str, Path],
                                                      tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    ws = _keyless_workspace(tmp_path, monkeypatch, quetz_private.token_url, channels["forge"])
    printed = _lock_export_install(capsys, ws, quetz_private, tmp_path / "prefix")
    assert (ws / ".rocmlock" / "cache").is_dir()
    assert quetz_private.api_key not in printed
    # The user wrote the key into pixi.toml; it goes nowhere else (lock, exports, caches, the prefix).
    assert (tmp_path / "b.tar").is_file()
    assert _files_holding(tmp_path, quetz_private.api_key, {ws / "pixi.toml"}) == []


def test_lock_without_credentials_fails_with_one_line(quetz_private: QuetzChannel, channels: dict[str, Path],
                                                      tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    ws = _keyless_workspace(tmp_path, monkeypatch, quetz_private.url, channels["forge"])
    code, out, err = _run(capsys, "lock", "--manifest-path", str(ws / "pixi.toml"))
    assert code == 1 and out == "" and not (ws / "pixi.lock").exists()
    assert len(err.strip().splitlines()) == 2, err
    error, hint = err.strip().splitlines()
    assert error.startswith("error: ") and quetz_private.url in error and "401" in error
    assert "RATTLER_AUTH_FILE" in hint and "/t/<token>/" in hint
