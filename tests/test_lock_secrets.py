"""A secret inside an existing pixi.lock is never printed and never written again, whichever command reads the lock.

pixi 0.77 writes a channel's URL into pixi.lock as the manifest spells it, credentials included
(pixi_core/src/lock_file/update.rs: ``set_channels`` of ``into_base_url(..).to_string()``, and ChannelUrl's
Display prints the URL as is: rattler_conda_types/src/channel/channel_url.rs), so a lock that holds
``user:password@`` or a ``/t/<token>/`` segment is one pixi may have written. rocmlock reads such a lock with
those secrets taken out (the clean URL names the same file; the credentials come from pixi.toml's channel URLs
or RATTLER_AUTH_FILE, as for any lock), so ``lock`` writes it back clean and ``lock --check`` calls it stale.
A query string or fragment in a conda channel or package URL is no URL pixi or rattler writes (rattler joins
``<platform>/<file>`` onto the channel URL, which drops both): such a lock is refused in one line, the URL not
shown, and nothing is written.

Each case locks a workspace over a served channel (``rocmlock.channel.serve``, Basic auth from pixi.toml), hand-edits
its pixi.lock, then runs ``lock --check``, ``export``, ``install``, ``pack``, ``lock`` and ``lock --check`` again,
all with ``--json``, and asserts the exit status, one-line errors, no traceback, and the secret in no output
and no file under the test's directory (caches included) but pixi.lock as the test wrote it. About 10 s.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from lockhelpers import manifest
from rocmlock.channel.serve import serving
from rocmlock.cli.main import main
from rocmlock.lock.lockfile import read_lockfile

USER, PASSWORD = "lock-user", "pw-81f0c2-manifest"  # the channel's real credentials, in pixi.toml only
SECRET = "Kx9-lock-s3cr3t-77ad"  # what the edited lock holds


@pytest.fixture(scope="module")
def served(channels: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """The private channel served with Basic auth for the module, and a workspace locked over it once."""
    root = tmp_path_factory.mktemp("lock-secrets")
    chan = shutil.copytree(channels["private"], root / "served" / "private")
    with serving(chan, "private", USER, PASSWORD) as url:
        ws = root / "ws"
        ws.mkdir()
        (ws / "pixi.toml").write_text(manifest(url.replace("http://", f"http://{USER}:{PASSWORD}@"),
                                               channels["forge"].as_uri()))
        mp = pytest.MonkeyPatch()
        mp.setenv("RATTLER_CACHE_DIR", str(root / "rattler-cache"))
        mp.setenv("XDG_CACHE_HOME", str(root / "xdg-cache"))
        try:
            assert main(["lock", "--manifest-path", str(ws / "pixi.toml")]) == 0
        finally:
            mp.undo()
        yield url, ws



def _host(url: str) -> str:
    """``http://127.0.0.1:N`` of the served channel URL ``http://127.0.0.1:N/private``."""
    return url.rsplit("/", 1)[0]


# (case -> edit of the lock text, given the served host): the secret in each place a lock could hold it.
def _edit(case: str, host: str, text: str) -> str:
    bare = host.removeprefix("http://")
    served_file = re.compile(rf"({re.escape(host)}/private/\S+\.conda)$", re.MULTILINE)
    if case == "userinfo":
        return text.replace(f"{host}/", f"http://bot:{SECRET}@{bare}/")
    if case == "lone-user":
        return text.replace(f"{host}/", f"http://{SECRET}@{bare}/")
    if case == "token":
        return text.replace(f"{host}/", f"{host}/t/{SECRET}/")
    if case == "channel-query":
        return text.replace(f"url: {host}/private/\n", f"url: {host}/private/?token={SECRET}\n")
    if case == "channel-fragment":
        return text.replace(f"url: {host}/private/\n", f"url: {host}/private/#{SECRET}\n")
    if case == "package-query":
        return served_file.sub(rf"\1?token={SECRET}", text)
    if case == "package-fragment":
        return served_file.sub(rf"\1#{SECRET}", text)
    # A lock rattler cannot read, whose parse error quotes the value: 'invalid type: string "...", expected u64'.
    assert case == "unparseable"
    return re.sub(r"size: \d+", f"size: {host}/x?token={SECRET}", text, count=1)


CLEANED = ("userinfo", "lone-user", "token")
REFUSED = ("channel-query", "channel-fragment", "package-query", "package-fragment", "unparseable")


def _files_with_secret(root: Path, skip: set[Path]) -> list[str]:
    return [str(p) for p in root.rglob("*")
            if p.is_file() and not p.is_symlink() and p not in skip and SECRET.encode() in p.read_bytes()]


def _run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    assert SECRET not in out + err, (argv, out, err)
    assert "Traceback" not in err, err
    if code == 2 or "error: " in err:  # exit 1 of `lock --check` lists stale files instead
        lines = err.strip().splitlines()
        errors = [line for line in lines if line.startswith("error: ")]
        assert len(errors) == 1, (argv, err)
        after = lines[lines.index(errors[0]) + 1:]
        assert after == [] or (len(after) == 1 and after[0].startswith("hint: ")), (argv, err)
    return code, out, err


@pytest.mark.parametrize("case", CLEANED + REFUSED)
def test_a_secret_in_pixi_lock_is_never_shown_nor_written_again(
        served: tuple[str, Path], sandbox: Path, capsys: pytest.CaptureFixture[str], case: str) -> None:
    url, locked = served
    ws = shutil.copytree(locked, sandbox / "ws")
    text = (ws / "pixi.lock").read_text()
    edited = _edit(case, _host(url), text)
    assert edited != text and SECRET in edited
    (ws / "pixi.lock").write_text(edited)
    m = str(ws / "pixi.toml")
    runs = [["lock", "--manifest-path", m, "--check", "--json"],
            ["export", "--manifest-path", m, "--json"],
            ["install", "--manifest-path", m, "-e", "mi300x", "--prefix", str(sandbox / "prefix"), "--json"],
            ["pack", "--manifest-path", m, "-e", "mi300x", "-o", str(sandbox / "b.tar"), "--json"],
            ["lock", "--manifest-path", m, "--json"],
            ["lock", "--manifest-path", m, "--check", "--json"]]
    codes = []
    for argv in runs:
        code, _, err = _run(capsys, argv)
        codes.append(code)
        if case in REFUSED:
            assert "pixi.lock" in err, (argv, err)
            assert "not shown" in err or case == "unparseable", (argv, err)
    if case in REFUSED:
        assert codes == [2] * len(runs)
        assert (ws / "pixi.lock").read_text() == edited  # left as it was: nothing written
        assert not (sandbox / "prefix").exists() and not (sandbox / "b.tar").exists()
        assert _files_with_secret(sandbox, {ws / "pixi.lock"}) == []
        return
    # The secret is taken out on reading: the lock rocmlock would write differs (stale), the exports, the
    # installed prefix and the bundle have none, and `lock` writes pixi.lock without it (then up to date).
    assert codes == [1, 0, 0, 0, 0, 0], codes
    assert (sandbox / "prefix" / "conda-meta").is_dir() and (sandbox / "b.tar").is_file()
    assert _files_with_secret(sandbox, set()) == []
    relocked = read_lockfile(ws / "pixi.lock")
    assert relocked is not None
    (records,) = relocked.environments["mi300x"].records.values()
    assert any(r.url.startswith(f"{url}/linux-64/") for r in records)
    assert f"{url}/" in relocked.environments["mi300x"].channels
