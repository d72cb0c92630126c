"""Secrets in channel URLs: only real secrets are redacted, and none reaches a file, a log line or a message.

The end-to-end test runs every command that reads a private channel (lock, relock on a warm cache, export,
install, pack, image, plan --channel, publish) against ``rocmlock.channel.serve`` requiring both Basic credentials and an
anaconda.org-style ``/t/<token>/`` path, then greps every file under the test's directory (the user's
pixi.toml and auth file excepted) and all output for each secret. Cost: about 5 s.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import shutil
import time
from pathlib import Path

import pytest
from channels import Pkg, build_channel
from lockhelpers import manifest
from rocmlock.channel.serve import serving
from rocmlock.cli.main import main
from rocmlock.errors import InputError
from rocmlock.lock.lockfile import read_lockfile
from rocmlock.util.credentials import (
    ChannelAuth,
    credentials_hint,
    mask_queries,
    mask_query,
    one_line,
    redact_text,
    redact_url,
    refuse_query,
    refused,
    refused_channel,
    split_url,
)

ROOT = Path(__file__).resolve().parents[1]
USER, PASSWORD, TOKEN = "alice-user", "pw-9c1e55-secret", "tok-4b7d02"
SECRETS = (PASSWORD, TOKEN, USER)

# (url, what must remain): anything that is not a secret stays byte for byte.
KEEP = [
    "file:///tmp/x/t/chan",
    "file:///t/chan/",
    "https://host/tools/t/x/",
    "https://host/conda/t/tok/chan",  # a token segment counts only as the first one
    "https://host/t",  # no segment after /t: nothing to strip
    "s3://bucket/t/abc/chan",
    "https://conda.anaconda.org/conda-forge/",
    "/tmp/x/t/chan",
]
STRIP = [
    ("https://bob:s3cret@repo.example.com/t/tok123/private", "https://repo.example.com/private"),
    ("https://prefix.dev/t/abc/conda-forge/linux-64", "https://prefix.dev/conda-forge/linux-64"),
    ("http://127.0.0.1:8080/t/abc/", "http://127.0.0.1:8080/"),
    ("http://quetz.local/t/abc/get/chan/", "http://quetz.local/get/chan/"),
    ("https://u:p%40ss@host:8443/chan/", "https://host:8443/chan/"),
    ("https://tokenonly@host/chan", "https://host/chan"),
    ("quetz+https://host/t/tok/chan", "quetz+https://host/chan"),  # publish --to's http forms: the same token
    ("artifactory+http://u:p@host/t/tok/artifactory/c", "artifactory+http://host/artifactory/c"),
    ("file://user:pw@/srv/chan", "file:///srv/chan"),
    ("file:///tmp/x/t/chan?x#y", "file:///tmp/x/t/chan?x#y"),
]


@pytest.mark.parametrize("url", KEEP)
def test_redaction_keeps_what_is_not_a_secret(url: str) -> None:
    assert redact_url(url) == url
    assert split_url(url).secrets == []


@pytest.mark.parametrize(("url", "clean"), STRIP)
def test_redaction_strips_credentials_and_first_segment_tokens(url: str, clean: str) -> None:
    assert redact_url(url) == clean
    assert redact_text(f"failed: {url} (x)") == f"failed: {clean} (x)"


def test_split_url_keeps_each_secret_for_the_client() -> None:
    auth = split_url("https://bob:p%40ss@host/t/tok1/chan/")
    assert auth == ChannelAuth("https://host/chan/", "bob", "p@ss", "tok1")
    assert auth.request_headers() == {"Authorization": "Basic Ym9iOnBAc3M="}
    assert sorted(auth.secrets) == ["p@ss", "tok1"]
    assert split_url("https://abcdef@host/c").secrets == ["abcdef"]
    assert split_url("file:///tmp/x/t/chan").empty


# ----------------------------------------------------------------------------- end to end


def _never_fresh(channel: Path) -> None:
    # rattler revalidates a cached shard index once it is stale. The server sends no Cache-Control, so its
    # freshness is the heuristic one: a tenth of Date - Last-Modified (RFC 9111 4.2.2), none when
    # Last-Modified is later than Date. A shard index "modified" tomorrow is stale at once: the warm re-solve
    # always revalidates (a 304), with no sleep and no race against the clock.
    later = time.time() + 86400
    for index in channel.glob("*/repodata_shards.msgpack.zst"):
        os.utime(index, (later, later))


def _grep(root: Path, skip: set[Path]) -> list[str]:
    found = []
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink() and path not in skip:
            data = path.read_bytes()
            found += [f"{path}: {s}" for s in SECRETS if s.encode() in data]
    return found


def _run(capsys: pytest.CaptureFixture[str], out: list[str], *args: str) -> int:
    code = main(list(args))
    captured = capsys.readouterr()
    out += [captured.out, captured.err]
    assert "Traceback" not in captured.err
    return code


def test_no_secret_reaches_any_file_or_output(channels: dict[str, Path], tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    served = shutil.copytree(channels["private"], tmp_path / "served" / "private")
    _never_fresh(served)
    monkeypatch.setenv("RATTLER_CACHE_DIR", str(tmp_path / "rattler-cache"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    monkeypatch.delenv("ROCMLOCK_CACHE_DIR", raising=False)
    ws = tmp_path / "ws"
    ws.mkdir()
    out: list[str] = []
    with serving(served, "private", USER, PASSWORD, path_token=TOKEN) as url:
        clean = url.replace(f"/t/{TOKEN}", "")
        private = url.replace("http://", f"http://{USER}:{PASSWORD}@")
        (ws / "pixi.toml").write_text(manifest(private, channels["forge"].as_uri()))
        m = str(ws / "pixi.toml")
        assert _run(capsys, out, "lock", "--manifest-path", m, "--json") == 0, out
        cache = tmp_path / "xdg-cache" / "rocmlock"
        assert list(cache.glob("*")) and (cache.stat().st_mode & 0o077) == 0
        # A re-solve on the warm cache revalidates the shard index (a 304: _never_fresh) and still works.
        assert _run(capsys, out, "lock", "--manifest-path", m, "--update", "--json") == 0, out
        assert _run(capsys, out, "export", "--manifest-path", m) == 0, out
        assert _run(capsys, out, "install", "--manifest-path", m, "-e", "mi300x",
                    "--prefix", str(tmp_path / "prefix"), "--json") == 0, out
        assert _run(capsys, out, "pack", "--manifest-path", m, "-e", "mi300x", "-o", str(tmp_path / "b.tar")) == 0, out
        assert _run(capsys, out, "image", "--manifest-path", m, "-e", "mi300x", "--no-base", "-o",
                    str(tmp_path / "image")) == 0, out
        assert _run(capsys, out, "plan", "--manifest-path", str(ROOT / "pixi.toml"), "--channel", private,
                    "--json") == 0, out
    # publish refuses credentials in --to (they would show in `ps`): they come from the auth file, and the
    # destination is a channel without a path token.
    src = build_channel(tmp_path / "src", [Pkg("rocm-version", "7.9", "0", subdir="noarch", noarch="generic")])
    auth = tmp_path / "auth.json"  # the user's own credentials file, like pixi.toml exempt from the grep
    auth.write_text(json.dumps({"127.0.0.1": {"BasicHTTP": {"username": USER, "password": PASSWORD}}}))
    monkeypatch.setenv("RATTLER_AUTH_FILE", str(auth))
    (tmp_path / "team" / "noarch").mkdir(parents=True)
    build_channel(tmp_path / "team", [])
    with serving(tmp_path / "team", "team", USER, PASSWORD) as team:
        to = team.replace("http://", "artifactory+http://")
        assert _run(capsys, out, "publish", "--from", str(src), "--to", to, "--json") == 0, out[-1]
    assert (tmp_path / "team" / "noarch" / "rocm-version-7.9-0.conda").is_file()
    assert (tmp_path / "prefix" / "conda-meta").is_dir()
    assert _grep(tmp_path, {ws / "pixi.toml", auth}) == []
    # The image's layer is gzip'd: grep what it holds too.
    for blob in (tmp_path / "image" / "blobs" / "sha256").iterdir():
        data = blob.read_bytes()
        data = gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data
        assert not [s for s in SECRETS if s.encode() in data], blob
    assert not [s for s in SECRETS for text in out if s in text]
    # The lock names the channel by its clean URL, and every package URL in the lock and the exports
    # is one the channel serves (with the credentials, which the client adds).
    locked = read_lockfile(ws / "pixi.lock")
    assert locked is not None
    assert f"{clean}/" in locked.environments["mi300x"].channels
    urls = {r.url for env in locked.environments.values() for recs in env.records.values() for r in recs}
    exported = {line.split("#")[0] for p in (ws / "envs").rglob("*.lock") for line in p.read_text().splitlines()
                if "://" in line}
    assert exported and exported <= urls
    for u in sorted(urls):
        if u.startswith(clean):
            assert (served / u[len(clean) + 1:]).is_file(), u
        else:
            assert u.startswith("file://") and Path(u[len("file://"):]).is_file(), u


def test_lock_urls_resolve_when_the_channel_path_contains_t(channels: dict[str, Path], tmp_path: Path) -> None:
    """A channel under a directory named ``t`` locks to URLs that point at the solved files (cold cache)."""
    chan = shutil.copytree(channels["private"], tmp_path / "x" / "t" / "chan")
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "pixi.toml").write_text(manifest(chan.as_uri(), channels["forge"].as_uri()))
    assert main(["lock", "--manifest-path", str(ws / "pixi.toml"), "-e", "mi300x"]) == 0
    locked = read_lockfile(ws / "pixi.lock")
    assert locked is not None
    assert f"{chan.as_uri()}/" in locked.environments["mi300x"].channels
    urls = [r.url for recs in locked.environments["mi300x"].records.values() for r in recs]
    assert any("/x/t/chan/" in u for u in urls)
    for u in urls:
        assert Path(u[len("file://"):]).is_file(), u
    env_yml = (ws / "envs" / "mi300x" / "environment.yml").read_text()
    assert f"  - {chan.as_uri()}\n" in env_yml


def test_channel_server_answers_revalidation_with_its_validator(tmp_path: Path) -> None:
    """A 304 names what it validated (rattler fails a bare 304 on a shard index, conda/rattler#2719)."""
    import base64
    import threading
    import urllib.error
    import urllib.request

    from rocmlock.channel.serve import make_server

    root = tmp_path / "chan"
    (root / "noarch").mkdir(parents=True)
    (root / "noarch" / "repodata.json").write_text("{}")
    server = make_server(root, "chan", "u", "p", path_token="tk")
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    auth = {"Authorization": "Basic " + base64.b64encode(b"u:p").decode()}
    try:
        with urllib.request.urlopen(urllib.request.Request(f"{base}/t/tk/chan/noarch/repodata.json",
                                                           headers=auth)) as resp:
            modified = resp.headers["Last-Modified"]
        request = urllib.request.Request(f"{base}/t/tk/chan/noarch/repodata.json",
                                         headers={**auth, "If-Modified-Since": modified})
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(request)
        assert err.value.code == 304 and err.value.headers["Last-Modified"] == modified
        with pytest.raises(urllib.error.HTTPError) as err:  # the token path is required
            urllib.request.urlopen(urllib.request.Request(f"{base}/chan/noarch/repodata.json", headers=auth))
        assert err.value.code == 404
    finally:
        server.shutdown()
        server.server_close()


def test_a_dependency_channel_with_credentials_solves_and_shows_no_secret(
        channels: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``pytorch = { version, channel = <the private channel's URL with its credentials> }``: pixi matches the
    package's channel by URL (pixi_spec toml.rs puts the channel in the MatchSpec); the credentials are the
    channel's, not part of its identity, so the solve takes pytorch from that channel and no output shows them
    (the token once reached the solver as a channel name: "candidate not in requested channel: 't/<token>/...'")."""
    served = shutil.copytree(channels["private"], tmp_path / "served" / "private")
    ws = tmp_path / "ws"
    ws.mkdir()
    out: list[str] = []
    with serving(served, "private", USER, PASSWORD, path_token=TOKEN) as url:
        private = url.replace("http://", f"http://{USER}:{PASSWORD}@")
        text = manifest(private, channels["forge"].as_uri())
        assert text.count('pytorch = "2.12.*"') == 1
        (ws / "pixi.toml").write_text(text.replace('pytorch = "2.12.*"',
                                                   f'pytorch = {{ version = "2.12.*", channel = "{private}" }}'))
        assert _run(capsys, out, "lock", "--manifest-path", str(ws / "pixi.toml"), "-e", "mi300x") == 0, out
        assert _run(capsys, out, "lock", "--manifest-path", str(ws / "pixi.toml"), "--check", "-e", "mi300x") == 0
    assert not [s for s in SECRETS for text in out if s in text], out
    assert _grep(tmp_path, {ws / "pixi.toml"}) == []
    locked = read_lockfile(ws / "pixi.lock")
    assert locked is not None
    (records,) = locked.environments["mi300x"].records.values()
    torch = next(r for r in records if r.name.normalized == "pytorch")
    assert torch.url.startswith(url.replace(f"/t/{TOKEN}", "") + "/linux-64/pytorch-2.12.1-rocm72_gfx942")


# ----------------------------------------------------------------------------- the helpers, one by one


@pytest.mark.parametrize(("url", "masked"), [
    ("https://host/x.tar.gz", "https://host/x.tar.gz"),
    ("https://u:pw@host/t/tok/x.tar.gz?X-Amz-Signature=abc", "https://host/x.tar.gz?***"),
    ("HTTPS://u:pw@host/t/tok/x?q", "HTTPS://host/x?***"),   # a scheme is case-insensitive
    ("https://host/x#frag-secret", "https://host/x#***"),
    ("https://host/x#a?b", "https://host/x#***"),             # whichever of ? and # comes first
    ("https://host/x?a?b", "https://host/x?***"),             # the first '?', not the last
    ("https://host/x#a#b", "https://host/x#***"),             # the first '#', not the last
    ("https://host/x?a#b", "https://host/x?***"),
    ("?sig=secret", "?***"), ("#frag-secret", "#***"),            # a query at the very start
    ("https://bot:pw?x@host/p?next=https://y", "https://***"),     # the first '://' names the scheme
    ("https://bot:pw?x@host/p", "https://***"),              # the part before '?' may be half a password
    ("bot:pw?x@host", "***"),
])
def test_mask_query_keeps_where_it_points_and_nothing_after_a_query(url: str, masked: str) -> None:
    assert mask_query(url) == masked


def test_mask_queries_masks_every_url_in_a_message() -> None:
    text = "invalid type: string 'https://h/x?sig=1', at http://u:p@h/t/k/y"
    assert mask_queries(text) == "invalid type: string 'https://h/x?***', at http://h/y"


def test_a_url_urllib_cannot_split_still_loses_its_secrets() -> None:
    auth = split_url("http://u:pw@[::1/t/tok/x")
    assert auth.url == "http://[::1/x" and auth.secrets == []
    assert split_url("HTTP://u:pw@[::1/x").url == "HTTP://[::1/x"


def test_small_helpers_of_the_redaction() -> None:
    assert redact_text("token abc in text", ["abc", ""]) == "token *** in text"
    assert split_url("https://host/t/tok").url == "https://host/"  # a token and nothing after it
    basic = base64.b64encode(b"bob:").decode()
    assert ChannelAuth("https://h/c/", "bob").request_headers() == {"Authorization": f"Basic {basic}"}
    with pytest.raises(InputError) as err:
        refuse_query("https://h/c?token=x", "--channel")
    assert str(err.value) == ("--channel: the URL has a query string or fragment ('?...' or '#...'), which conda "
                              "channel URLs never have (the URL is not shown: that part may be a secret)")
    assert (err.value.hint or "").startswith("give the secret in RATTLER_AUTH_FILE")


@pytest.mark.parametrize(("text", "line"), [
    ("A\nCaused by: B\nCaused by: C", "A: C"), ("A\nCaused by: B", "A: B"), ("only", "only"), ("  \n x \n", "x"),
    ("", ""), ("A\nCaused by: B\nCaused by: C\nCaused by: D", "A: D"), ("Caused by: only", "only"),
])
def test_one_line_folds_rattlers_chain(text: str, line: str) -> None:
    assert one_line(text) == line


def test_refusals_are_told_apart_and_name_their_channel() -> None:
    assert refused("HTTP status client error (401 Unauthorized)") and refused("403 Forbidden")
    assert not refused("404 Not Found") and not refused("error 4013")
    channels = ["https://u:p@h.example/t/k/chan", "https://h.example/other"]
    text = "401 Unauthorized for https://h.example/chan/noarch/repodata.json"
    assert refused_channel(channels, text) == "https://h.example/chan"
    assert refused_channel(channels, text.replace("401", "404")) is None
    assert refused_channel(channels, "401 for https://elsewhere/chan/x") is None
    # A channel written with a trailing slash names the same channel; a sibling sharing its prefix is not it.
    assert refused_channel(["https://h.example/chan/"], text) == "https://h.example/chan"
    assert refused_channel(["https://h.example/cha"], text) is None
    assert refused_channel(["https://h.example/chanX/"], "401 for https://h.example/chanX/noarch/x") == \
        "https://h.example/chanX"
    assert refused_channel(["https://h.example/chan"], "403 for https://h.example/chan") == "https://h.example/chan"
    assert credentials_hint("https://u@h.example/chan").startswith("add an entry for 'h.example' to RATTLER_AUTH_FILE")
    assert credentials_hint("not a url").startswith("add an entry for 'not a url'")
    # The hint names each key of a RATTLER_AUTH_FILE entry (prefix-dev/rattler-build
    # docs/authentication_and_upload.md: BearerToken for prefix.dev, CondaToken for anaconda.org and quetz,
    # BasicHTTP with username/password) and the /t/<token>/ form, on one line.
    assert credentials_hint("https://h.example/chan") == (
        "add an entry for 'h.example' to RATTLER_AUTH_FILE (CondaToken for quetz or anaconda.org, BearerToken for "
        "prefix.dev, BasicHTTP for a user and password), or write the channel in pixi.toml with its token as a "
        "/t/<token>/ URL")


_OLD_URL_IN_TEXT = r"[a-zA-Z][a-zA-Z0-9+.-]*://[^\s'\"<>]+"  # before: tried again from every letter of a run


@pytest.mark.parametrize("text", [
    "see https://u:p@h/x ok", "9https://u:p@h/x", "a9http://u:p@h", "x1y2https://tok@h/a b", "foo.https://u:p@h/",
    "123://x", "-https://u:p@h", "quetz+https://h/t/abc123/c", "two https://a:b@h and s3://k:s@b/x.", "no url here",
    "'https://u:p@h/x'", "(https://u:p@h)", "http://h:8080/t/tok/x?y=1#z",
    # A "://" with no scheme before it, then a URL: the match must not start at that "://" and swallow the URL.
    "->://https://bob:hunter2@host/", "bad url ://x/https://bob:hunter2@host/chan",
    "see ://https://conda.example/t/SECRETTOKEN/chan/noarch",
])
def test_urls_in_text_are_redacted_as_before_in_linear_time(text: str) -> None:
    """The same URLs are found as by the earlier pattern, which started a match at every letter of a run of
    scheme characters and so took quadratic time (a 100,000-letter package name: 20 s per message)."""
    import re
    import subprocess
    import sys

    from rocmlock.util.credentials import redact_url

    assert redact_text(text) == re.sub(_OLD_URL_IN_TEXT, lambda m: redact_url(m.group(0)), text)
    if text == "no url here":
        code = ("from rocmlock.util.credentials import redact_text, mask_queries\n"
                "for t in ('x' * 400_000, 'a1' * 200_000, 'x' * 400_000 + '://u:p@h'):\n"
                "    assert 'u:p' not in redact_text(t) and 'u:p' not in mask_queries(t)\n")
        # The earlier pattern: minutes for these (40,000 letters took 3 s); a hang guard, not a timing.
        subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_urls_in_random_text_are_found_as_the_earlier_pattern_found_them() -> None:
    """A differential check against the earlier pattern over text made of the characters that matter."""
    import random
    import re

    from rocmlock.util.credentials import redact_url

    rng = random.Random(20261207)
    alphabet = "ab9+.-:/@ h'\"<>t"
    for _ in range(20_000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 24)))
        assert redact_text(text) == re.sub(_OLD_URL_IN_TEXT, lambda m: redact_url(m.group(0)), text), text
