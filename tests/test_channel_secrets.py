"""A secret written into a channel URL on the command line or in pixi.toml is refused in one line, never echoed.

Three leaks this guards (a review found them; each test here failed before the fix):

- ``anaconda://<key>@owner`` and ``prefix://<key>@channel`` made the key part of the owner/channel, so the
  read URL was ``https://conda.anaconda.org/<key>@owner`` and no redaction (userinfo, ``/t/<token>/``)
  removed it. Every ``--to`` form now refuses credentials (the uploads take them from PREFIX_API_KEY,
  ANACONDA_API_KEY, QUETZ_API_KEY, ARTIFACTORY_TOKEN, AWS_* or RATTLER_AUTH_FILE); a plain directory path keeps
  its ``@``.
- ``https://host/chan?token=<key>`` was printed back: rattler never sends a channel URL's query (a subdir is
  ``base_url.join("<platform>/")``, which drops it) nor redacts it, and conda drops it too, so a channel URL
  with a query string or fragment is refused wherever channels are read: plan/build ``--channel``,
  ``publish --to``, pixi.toml channels and a dependency's ``channel`` (so lock, install, pack, sources...).
  See :func:`rocmlock.util.credentials.refuse_query` for the upstream sources.
- ``plan``/``build --channel`` errors said ``--to``.

Each case runs the CLI (``main``, as the other tests do; one case through ``python -m rocmlock``) with a
distinctive secret, and asserts exit 2, one ``error:`` line (and at most one ``hint:``), no traceback, and
the secret in neither stdout, stderr nor any file under the test's directory (output, caches, cwd). Nothing
here touches the network: each URL is refused before anything is read. About 5 s.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from channels import Pkg, build_channel
from lockhelpers import manifest
from rocmlock.channel.publish import parse_destination
from rocmlock.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
SECRET = "Zq7-s3cr3t-4e1b-channel"

# (URL, what the error says) for plan --channel and build --channel.
CHANNEL_CASES = [
    (f"anaconda://{SECRET}@rocm-team", "credentials do not go in --channel"),
    (f"anaconda://bot:{SECRET}@rocm-team", "credentials do not go in --channel"),
    (f"prefix://{SECRET}@rocm-team", "credentials do not go in --channel"),
    (f"https://{SECRET}@anaconda.org/rocm-team", "credentials do not go in --channel"),
    (f"https://anaconda.org/t/{SECRET}/rocm-team", "credentials do not go in --channel"),
    (f"https://bot:{SECRET}@prefix.dev/rocm-team", "credentials do not go in --channel"),
    (f"https://prefix.dev/t/{SECRET}/rocm-team", "credentials do not go in --channel"),
    (f"quetz+https://127.0.0.1:9/t/{SECRET}/rocm", "credentials do not go in --channel"),
    (f"https://127.0.0.1:9/rocm?token={SECRET}", "--channel: the URL has a query string"),
    (f"https://127.0.0.1:9/rocm/?token={SECRET}&x=1", "--channel: the URL has a query string"),
    (f"https://127.0.0.1:9/rocm#{SECRET}", "--channel: the URL has a query string or fragment"),
    (f"quetz+https://127.0.0.1:9/rocm?api_key={SECRET}", "--channel: the URL has a query string"),
    (f"anaconda://rocm-team?token={SECRET}", "--channel: the URL has a query string"),
    (f"file:///srv/rocm?token={SECRET}", "--channel: the URL has a query string"),
    # A '?' in a password ends the host part for every URL parser: the rest is a query, and is refused so.
    (f"https://bot:pw?{SECRET}@127.0.0.1:9/rocm", "--channel: the URL has a query string"),
    (f"https://127.0.0.1:9/rocm?token={SECRET}&p=[::1", "--channel: the URL has a query string"),
]

# (URL, what the error says) for publish --to: every form, credentials in each place it could hold them.
TO_CASES = [
    (f"anaconda://{SECRET}@rocm-team", "credentials do not go in --to"),
    (f"anaconda://bot:{SECRET}@rocm-team", "credentials do not go in --to"),
    (f"https://{SECRET}@anaconda.org/rocm-team", "credentials do not go in --to"),
    (f"https://anaconda.org/t/{SECRET}/rocm-team", "credentials do not go in --to"),
    (f"prefix://{SECRET}@rocm-team", "credentials do not go in --to"),
    (f"https://bot:{SECRET}@prefix.dev/rocm-team", "credentials do not go in --to"),
    (f"https://prefix.dev/t/{SECRET}/rocm-team", "credentials do not go in --to"),
    (f"https://repo.prefix.dev/t/{SECRET}/rocm-team", "credentials do not go in --to"),
    (f"quetz+https://bot:{SECRET}@127.0.0.1:9/rocm", "credentials do not go in --to"),
    (f"quetz+http://127.0.0.1:9/t/{SECRET}/rocm", "credentials do not go in --to"),
    (f"artifactory+https://{SECRET}@127.0.0.1:9/artifactory/rocm", "credentials do not go in --to"),
    (f"s3://AKIA:{SECRET}@bucket/rocm", "credentials do not go in --to"),
    (f"file://bot:{SECRET}@/srv/rocm", "credentials do not go in --to"),
    (f"quetz+https://127.0.0.1:9/rocm?api_key={SECRET}", "--to: the URL has a query string"),
    (f"artifactory+https://127.0.0.1:9/artifactory/rocm#{SECRET}", "--to: the URL has a query string"),
    (f"https://prefix.dev/rocm-team?token={SECRET}", "--to: the URL has a query string"),
    (f"s3://bucket/rocm?X-Amz-Signature={SECRET}", "--to: the URL has a query string"),
    (f"file:///srv/rocm?{SECRET}", "--to: the URL has a query string"),
    (f"quetz+http://127.0.0.1:99999/rocm?api_key={SECRET}", "--to: the URL has a query string"),
]

# Hints: what to do instead, by form.
HINTS = {"anaconda": "ANACONDA_API_KEY", "prefix": "PREFIX_API_KEY", "s3://": "AWS_SECRET_ACCESS_KEY",
         "file://": "directory", "?": "RATTLER_AUTH_FILE", "#": "RATTLER_AUTH_FILE"}



def _files_with_secret(root: Path) -> list[str]:
    return [str(p) for p in root.rglob("*")
            if p.is_file() and not p.is_symlink() and p.name != "pixi.toml" and SECRET.encode() in p.read_bytes()]


def _refused(capsys: pytest.CaptureFixture[str], root: Path, argv: list[str]) -> tuple[str, str]:
    """Run the CLI; assert exit 2 in one error line (and a hint), no secret anywhere. Returns (error, hint)."""
    code = main(argv)
    out, err = capsys.readouterr()
    assert SECRET not in out + err, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert code == 2, err
    assert 1 <= len(lines) <= 2 and lines[0].startswith("error: "), err
    assert len(lines) == 1 or lines[1].startswith("hint: "), err
    assert _files_with_secret(root) == []
    return lines[0], lines[1] if len(lines) == 2 else ""


def _hint_for(url: str) -> str:
    if "?" in url or "#" in url:
        return "RATTLER_AUTH_FILE"
    return next((v for k, v in HINTS.items() if k in url), "RATTLER_AUTH_FILE")


@pytest.mark.parametrize(("url", "says"), CHANNEL_CASES)
@pytest.mark.parametrize("command", ["plan", "build"])
def test_plan_and_build_refuse_a_secret_in_channel_and_name_the_option(
        sandbox: Path, capsys: pytest.CaptureFixture[str], command: str, url: str, says: str) -> None:
    extra = ["--output", str(sandbox / "output"), "--skip-doctor"] if command == "build" else []
    error, hint = _refused(capsys, sandbox, [command, "--manifest-path", str(ROOT / "pixi.toml"), "--channel", url,
                                             *extra])
    assert says in error, error
    assert "--to" not in error, error
    if "credentials" in says:
        assert "RATTLER_AUTH_FILE" in hint, hint
    else:
        # Every way to give the secret instead, intact (the CLI's redaction once cut an example URL's userinfo).
        assert all(w in hint for w in ("RATTLER_AUTH_FILE", "user:password@", "/t/<token>/", "%3F")), hint
    assert not (sandbox / "output").exists()


@pytest.fixture(scope="module")
def packages(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_channel(tmp_path_factory.mktemp("src") / "out",
                         [Pkg("rocm-version", "7.2", "0", subdir="noarch", noarch="generic")])


@pytest.mark.parametrize(("url", "says"), TO_CASES)
def test_publish_refuses_a_secret_in_every_to_form(sandbox: Path, capsys: pytest.CaptureFixture[str],
                                                   packages: Path, url: str, says: str) -> None:
    error, hint = _refused(capsys, sandbox, ["publish", "--from", str(packages), "--to", url])
    assert says in error, error
    assert _hint_for(url) in hint, hint


def test_anaconda_and_prefix_forms_show_the_owner_not_the_key(capsys: pytest.CaptureFixture[str],
                                                             packages: Path) -> None:
    """What the user sees is the URL they typed less the key: anaconda://rocm-team, not the read URL."""
    assert main(["publish", "--from", str(packages), "--to", f"anaconda://{SECRET}@rocm-team"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: --to anaconda://rocm-team: credentials do not go in --to",
        "hint: export ANACONDA_API_KEY=<key>, or add the host to RATTLER_AUTH_FILE",
    ]
    assert main(["plan", "--manifest-path", str(ROOT / "pixi.toml"), "--channel", f"prefix://{SECRET}@rocm-team"]) == 2
    first = capsys.readouterr().err.splitlines()[0]
    assert first == "error: --channel prefix://rocm-team: credentials do not go in --channel"


@pytest.mark.parametrize("to", ["anaconda://rocm-team", "prefix://rocm-team", "https://prefix.dev/rocm-team",
                                "https://anaconda.org/rocm-team/", "quetz+https://127.0.0.1:9/rocm",
                                "s3://bucket/rocm"])
def test_the_forms_without_credentials_still_parse(to: str) -> None:
    dest = parse_destination(to)
    assert "@" not in dest.read_url and dest.channel in ("rocm-team", "rocm")


def test_a_directory_path_may_hold_at_and_question_marks(tmp_path: Path) -> None:
    """Only URLs are checked: '@' and '?' are ordinary characters of a directory's name."""
    target = tmp_path / "ci@node" / "chan?1"
    dest = parse_destination(str(target))
    assert dest.kind == "directory" and dest.url == str(target.resolve())


def _pixi_toml(root: Path, channels: dict[str, Path], private: str, dep_channel: str | None = None) -> Path:
    ws = root / "ws"
    ws.mkdir()
    text = manifest(private, channels["forge"].as_uri())
    if dep_channel is not None:
        assert text.count('pytorch = "2.12.*"') == 1
        text = text.replace('pytorch = "2.12.*"', f'pytorch = {{ version = "2.12.*", channel = "{dep_channel}" }}')
    (ws / "pixi.toml").write_text(text)
    return ws / "pixi.toml"


# Every command that reads pixi.toml's channels (lock, export, install, pack, sources, plan, build).
def _commands(m: str, root: Path) -> list[list[str]]:
    return [["lock", "--manifest-path", m], ["lock", "--manifest-path", m, "--check"],
            ["export", "--manifest-path", m],
            ["install", "--manifest-path", m, "-e", "mi300x", "--prefix", str(root / "prefix")],
            ["pack", "--manifest-path", m, "-e", "mi300x", "-o", str(root / "b.tar")],
            ["sources", "check", "--manifest-path", m, "--to", str(root / "sources")],
            ["plan", "--manifest-path", m], ["build", "--manifest-path", m, "--skip-doctor"]]


@pytest.mark.parametrize("private", [f"https://127.0.0.1:9/rocm?token={SECRET}", f"https://127.0.0.1:9/rocm#{SECRET}",
                                     f"rocm-team?token={SECRET}"])
def test_a_workspace_channel_with_a_query_is_refused_by_every_command(
        sandbox: Path, capsys: pytest.CaptureFixture[str], channels: dict[str, Path], private: str) -> None:
    m = str(_pixi_toml(sandbox, channels, private))
    for argv in _commands(m, sandbox):
        error, hint = _refused(capsys, sandbox, argv)
        assert error.startswith(f"error: {m}: key 'workspace.channels[0]': the URL has a query string"), (argv, error)
        assert "RATTLER_AUTH_FILE" in hint
    assert not (sandbox / "prefix").exists() and not (sandbox / "b.tar").exists()
    assert not (Path(m).parent / "pixi.lock").exists()


def test_a_dependency_channel_with_a_query_is_refused(sandbox: Path, capsys: pytest.CaptureFixture[str],
                                                      channels: dict[str, Path]) -> None:
    m = str(_pixi_toml(sandbox, channels, channels["private"].as_uri(),
                       dep_channel=f"https://127.0.0.1:9/rocm?token={SECRET}"))
    error, _ = _refused(capsys, sandbox, ["lock", "--manifest-path", m])
    assert "key 'feature.train.dependencies.pytorch.channel': the URL has a query string" in error, error


@pytest.mark.parametrize("argv", [["plan", "--manifest-path", str(ROOT / "pixi.toml"), "--channel",
                                   f"anaconda://{SECRET}@rocm-team"],
                                  ["publish", "--from", ".", "--to", f"https://127.0.0.1:9/x?token={SECRET}"]])
def test_the_installed_entry_point_refuses_too(sandbox: Path, argv: list[str]) -> None:
    """The same through ``python -m rocmlock`` in a child process: its real stderr, exit code and files."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tools"), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, "-m", "rocmlock", *argv], capture_output=True, text=True, env=env,
                         cwd=sandbox, timeout=120, check=False)
    assert run.returncode == 2, run.stderr
    assert SECRET not in run.stdout + run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("error: ") and lines[1].startswith("hint: "), run.stderr
    assert "Traceback" not in run.stderr and _files_with_secret(sandbox) == []
