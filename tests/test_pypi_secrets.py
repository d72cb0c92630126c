"""Secrets in PyPI index URLs: pixi.toml's ``pypi-options``, a pixi.lock's PyPI packages, ``outdated/bump --index-url``.

What is legitimate decides what rocmlock does:

- ``pypi-options`` index-url / extra-index-urls / find-links with a query string is a URL pixi accepts and uses:
  uv appends ``<name>/`` to an index URL's path and keeps its query (uv-client/src/registry_client.rs,
  ``path_segments_mut().pop_if_empty().push(name).push("")``), and pixi records the URLs verbatim in pixi.lock's
  ``indexes:`` (pixi_manifest/src/pypi/pypi_options.rs ``From<PypiOptions> for PypiIndexes``). So rocmlock reads
  such a manifest, never shows the query in a message, and refuses to write it into an export (environment.yml's
  ``pip:`` section, requirements-<platform>.txt): the export would carry the secret, and pip cannot use it anyway
  (pip/_internal/models/search_scope.py ``mkurl_pypi_url``: ``posixpath.join(url, name)`` puts the project name
  inside the query). Where nothing is exported (no PyPI package locked) nothing is refused.
- userinfo in an index URL was already redacted from exports (pip then takes the credentials from netrc or keyring);
  kept here as a guard.
- A locked PyPI package whose URL has a query: an index wheel is exported as ``name==version`` (no URL: guard);
  a direct URL (``direct+https://...?...``) would be exported as ``name @ <url>``, so it is a package no export can
  pin (``--skip-source`` leaves it out).
- ``outdated``/``bump --index-url`` is a JSON API root that ``/<name>/json`` is appended to: a query there never
  worked, and was printed in every error. Refused in one line, like a channel URL's. A file URL the index
  answers (a presigned ``X-Amz-Signature``) is shown with its query masked.

Every case asserts the secret in no output and no file under the test's directory but pixi.toml and the pixi.lock
the test wrote (pixi itself writes the index URL there), one ``error:`` line and at most one ``hint:``. About 5 s.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from pixilock import Wheel, pypi_entry, write_pixi_lock
from rocmlock.cli.main import main
from rocmlock.lock.lockfile import LockedPlatform

ROOT = Path(__file__).resolve().parents[1]
SECRET = "Pq4-index-s3cr3t-19be"
BASE = "http://127.0.0.1:9"  # never contacted
LINUX = LockedPlatform("linux-64", "linux-64", ("__unix=0=0", "__linux=4.18", "__glibc=2.28"))
WHEEL = Wheel("rlk-alpha", "1.0")
SHA = "0" * 64



def _workspace(root: Path, channels: dict[str, Path], options: str, pypi: list[dict[str, Any]] | None = None,
               indexes: list[str] | None = None, pixi_lock: bool = True) -> Path:
    """A workspace with ``options`` appended to pixi.toml and, unless not ``pixi_lock``, the pixi.lock pixi writes
    for it (``pypi`` packages; ``indexes`` as pixi records them, the manifest's URLs verbatim)."""
    ws = root / "ws"
    ws.mkdir()
    (ws / "pixi.toml").write_text(f'[workspace]\nname = "p"\nchannels = ["{channels["forge"].as_uri()}"]\n'
                                  f'platforms = ["linux-64"]\n\n[dependencies]\npython = "3.12.*"\n\n{options}\n')
    if pixi_lock:
        entries = [pypi_entry(BASE, WHEEL, SHA)] if pypi is None else pypi
        write_pixi_lock(ws / "pixi.lock", channels["forge"], "default", LINUX, ["python 3.12.*"], entries,
                        indexes if indexes is not None else [f"{BASE}/simple"])
    return ws


def _files_with_secret(root: Path, skip: set[Path]) -> list[str]:
    return [str(p) for p in root.rglob("*")
            if p.is_file() and not p.is_symlink() and p not in skip and SECRET.encode() in p.read_bytes()]


def _run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str]:
    """Run the CLI; the secret in neither stream, no traceback, an error in one line (+ a hint). Returns (code, err)."""
    code = main(argv)
    out, err = capsys.readouterr()
    assert SECRET not in out + err, err
    assert "Traceback" not in err
    if code == 2 or "error: " in err:  # exit 1 of `lock --check` lists stale files instead
        lines = err.strip().splitlines()
        assert 1 <= len(lines) <= 2 and lines[0].startswith("error: "), err
        assert len(lines) == 1 or lines[1].startswith("hint: "), err
    return code, err


def _user_files(ws: Path) -> set[Path]:
    return {ws / "pixi.toml", ws / "pixi.lock"}


def test_pip_cannot_use_an_index_url_with_a_query() -> None:
    """Why an export never carries one, besides the secret: pip appends the project name to the index URL as a
    path (pip/_internal/models/search_scope.py, ``get_index_urls_locations``: ``posixpath.join``), inside the query."""
    from pip._internal.models.search_scope import SearchScope

    scope = SearchScope.create(find_links=[], index_urls=[f"{BASE}/simple?token=x"], no_index=False)
    assert scope.get_index_urls_locations("rlk-alpha") == [f"{BASE}/simple?token=x/rlk-alpha/"]


# (pypi-options table, the key the error names)
QUERY_OPTIONS = [
    (f'[pypi-options]\nindex-url = "{BASE}/simple?token={SECRET}"', "pypi-options.index-url"),
    (f'[pypi-options]\nindex-url = "{BASE}/simple/#{SECRET}"', "pypi-options.index-url"),
    (f'[workspace.pypi-options]\nextra-index-urls = ["{BASE}/a", "{BASE}/simple?token={SECRET}"]',
     "workspace.pypi-options.extra-index-urls[1]"),
    (f'[pypi-options]\nfind-links = [{{ url = "{BASE}/links/?X-Amz-Signature={SECRET}" }}]',
     "pypi-options.find-links[0].url"),
    (f'[feature.f.pypi-options]\nindex-url = "{BASE}/simple?token={SECRET}"\n[environments]\ndefault = ["f"]',
     "feature.f.pypi-options.index-url"),
]


@pytest.mark.parametrize(("options", "key"), QUERY_OPTIONS)
def test_export_refuses_to_write_an_index_url_with_a_query(
        sandbox: Path, channels: dict[str, Path], capsys: pytest.CaptureFixture[str], options: str, key: str) -> None:
    url = options.split('"')[-2]
    ws = _workspace(sandbox, channels, options, indexes=[url])
    lock = (ws / "pixi.lock").read_bytes()
    for argv in (["export", "--manifest-path", str(ws)], ["export", "--manifest-path", str(ws), "--check"],
                 ["export", "--manifest-path", str(ws), "--json"]):
        code, err = _run(capsys, argv)
        assert code == 2, err
        first, hint = err.splitlines()
        assert first.startswith(f"error: {ws / 'pixi.toml'}: key '{key}': ") and "not shown" in first, first
        assert "environment 'default'" in first and "netrc" in hint, err
    assert not (ws / "envs").exists()
    assert (ws / "pixi.lock").read_bytes() == lock
    assert _files_with_secret(sandbox, _user_files(ws)) == []


def test_an_index_url_with_a_query_is_read_where_nothing_is_exported(
        sandbox: Path, channels: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """pixi accepts the manifest, so rocmlock does: lock, plan, export of an environment without PyPI packages.
    rocmlock's own lock records no PyPI index (py-rattler's LockFile writes conda packages only) — a guard."""
    ws = _workspace(sandbox, channels, f'[pypi-options]\nindex-url = "{BASE}/simple?token={SECRET}"',
                    pixi_lock=False)
    for argv in (["lock", "--manifest-path", str(ws)], ["lock", "--manifest-path", str(ws), "--check"],
                 ["export", "--manifest-path", str(ws)],
                 ["install", "--manifest-path", str(ws), "-e", "default", "--prefix", str(sandbox / "prefix")]):
        code, err = _run(capsys, argv)
        assert code == 0, (argv, err)
    assert "indexes" not in (ws / "pixi.lock").read_text()
    assert (ws / "envs" / "default" / "environment.yml").is_file()
    assert _files_with_secret(sandbox, {ws / "pixi.toml"}) == []


def test_the_indexes_pixi_wrote_into_pixi_lock_are_never_shown_nor_written_again(
        sandbox: Path, channels: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """A guard: pixi.lock's ``indexes:`` and each PyPI package's ``index:`` hold the manifest's URLs verbatim (pixi
    writes them), and py-rattler 0.28 neither reads them (no accessor) nor writes any: a lock rocmlock writes from
    such a lock has no index, and no command prints one."""
    url = f"{BASE}/simple?token={SECRET}"
    entry = {**pypi_entry(BASE, WHEEL, SHA), "index": url}
    ws = _workspace(sandbox, channels, "", pypi=[entry], indexes=[url])
    assert (ws / "pixi.lock").read_text().count(SECRET) == 2
    for argv, want in ((["lock", "--manifest-path", str(ws), "--check", "--json"], 1),
                       (["export", "--manifest-path", str(ws), "--json"], 0),
                       (["install", "--manifest-path", str(ws), "-e", "default", "--prefix", str(sandbox / "p"),
                         "--json"], 0),
                       (["lock", "--manifest-path", str(ws), "--json"], 0)):
        code, err = _run(capsys, argv)
        assert code == want, (argv, err)
    assert _files_with_secret(sandbox, {ws / "pixi.toml"}) == []


@pytest.mark.parametrize("value", [f"127.0.0.1:9/simple?token={SECRET}", f"pypi.example/simple#{SECRET}",
                                   f"//bot:{SECRET}@pypi.example/simple"])
@pytest.mark.parametrize("key", ["index-url", "extra-index-urls", "find-links"])
def test_an_index_value_that_is_no_url_is_refused_without_showing_it(
        sandbox: Path, channels: dict[str, Path], capsys: pytest.CaptureFixture[str], key: str, value: str) -> None:
    toml = {"index-url": f'"{value}"', "extra-index-urls": f'["{value}"]',
            "find-links": f'[{{ url = "{value}" }}]'}[key]
    ws = _workspace(sandbox, channels, f"[pypi-options]\n{key} = {toml}", pixi_lock=False)
    for argv in (["export", "--manifest-path", str(ws)], ["plan", "--manifest-path", str(ws)]):
        code, err = _run(capsys, argv)
        assert code == 2 and "not an absolute URL" in err, err
    assert _files_with_secret(sandbox, {ws / "pixi.toml"}) == []


def test_credentials_in_an_index_url_are_left_out_of_the_exports(
        sandbox: Path, channels: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """A guard: userinfo was redacted before; pip takes the credentials from netrc or keyring."""
    url = f"http://bot:{SECRET}@127.0.0.1:9/simple"
    ws = _workspace(sandbox, channels, f'[pypi-options]\nindex-url = "{url}"', indexes=[url])
    code, err = _run(capsys, ["export", "--manifest-path", str(ws)])
    assert code == 0, err
    req = (ws / "envs" / "default" / "requirements-linux-64.txt").read_text()
    assert f"--index-url {BASE}/simple\n" in req and "rlk-alpha==1.0" in req
    assert _files_with_secret(sandbox, _user_files(ws)) == []


def test_a_locked_index_wheel_whose_url_has_a_query_is_pinned_by_name(
        sandbox: Path, channels: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """A guard: an index pin is exported as name==version with the sha256, never with the lock's file URL."""
    entry = pypi_entry(BASE, WHEEL, SHA)
    entry["pypi"] += f"?token={SECRET}"
    ws = _workspace(sandbox, channels, "", pypi=[entry])
    code, err = _run(capsys, ["export", "--manifest-path", str(ws)])
    assert code == 0, err
    assert "rlk-alpha==1.0 \\\n" in (ws / "envs" / "default" / "requirements-linux-64.txt").read_text()
    assert _files_with_secret(sandbox, _user_files(ws)) == []


@pytest.mark.parametrize("suffix", [f"?token={SECRET}", f"?X-Amz-Signature={SECRET}&X-Amz-Expires=300"])
def test_a_locked_direct_url_with_a_query_is_not_exported(
        sandbox: Path, channels: dict[str, Path], capsys: pytest.CaptureFixture[str], suffix: str) -> None:
    entry = pypi_entry(BASE, WHEEL, SHA)
    entry["pypi"] = f"direct+{entry['pypi']}{suffix}"
    del entry["index"]
    ws = _workspace(sandbox, channels, "", pypi=[entry, pypi_entry(BASE, Wheel("rlk-beta", "2.0"), SHA)])
    code, err = _run(capsys, ["export", "--manifest-path", str(ws)])
    assert code == 2 and "rlk-alpha (pypi, a URL with a query string" in err and "--skip-source" in err, err
    assert not (ws / "envs").exists()
    code, err = _run(capsys, ["export", "--manifest-path", str(ws), "--skip-source"])
    assert code == 0 and "left out source package(s) rlk-alpha (pypi, a URL with a query string" in err, err
    req = (ws / "envs" / "default" / "requirements-linux-64.txt").read_text()
    assert "rlk-alpha" not in req and "rlk-beta==2.0" in req
    code, err = _run(capsys, ["install", "--manifest-path", str(ws), "-e", "default",
                              "--prefix", str(sandbox / "prefix"), "--json"])
    assert code == 0, err
    assert _files_with_secret(sandbox, _user_files(ws)) == []


UPSTREAM_CASES = [
    ("--index-url", f"{BASE}/pypi?token={SECRET}"),
    ("--index-url", f"{BASE}/pypi#{SECRET}"),
    ("--github-url", f"{BASE}/gh?access_token={SECRET}"),
    ("--github-api-url", f"{BASE}/api?token={SECRET}"),
    ("--github-raw-url", f"{BASE}/raw?token={SECRET}"),
]


@pytest.mark.parametrize(("option", "url"), UPSTREAM_CASES)
@pytest.mark.parametrize("command", [["outdated"], ["bump", "flash-attn=9.9.9", "--dry-run"]])
def test_outdated_and_bump_refuse_a_query_in_an_upstream_url(
        sandbox: Path, capsys: pytest.CaptureFixture[str], command: list[str], option: str, url: str) -> None:
    recipes = shutil.copytree(ROOT / "recipes", sandbox / "recipes")
    argv = [*command, "--manifest-path", str(ROOT / "pixi.toml"), "--recipes-dir", str(recipes),
            option, url, "--timeout", "1", "--retries", "0", "--backoff", "0"]
    code, err = _run(capsys, argv)
    assert code == 2, err
    first, hint = err.strip().splitlines()
    assert first.startswith(f"error: {option}: the URL has a query string or fragment") and "not shown" in first
    assert "netrc" in hint or "user:password@" in hint, hint
    assert _files_with_secret(sandbox, set()) == []


def test_a_file_url_query_from_the_index_is_masked_in_messages(fake: Any) -> None:
    """A mirror's JSON API may answer presigned file URLs (``?X-Amz-Signature=...``): messages show them masked,
    as uv's DisplaySafeUrl masks X-Amz-Signature (crates/uv-redacted/src/lib.rs); the download still sends it."""
    from fakeupstream import Reply
    from rocmlock.upstream.client import ChecksumMismatch, Client, Hosts, HttpOptions, NotFound

    fake.add("/files/x-1.0.tar.gz", Reply(body=b"sdist"))
    client = Client(Hosts(index_url=f"{fake.url}/pypi"), HttpOptions(timeout=2, retries=0, backoff=0))
    with pytest.raises(ChecksumMismatch) as mismatch:
        client.download(f"{fake.url}/files/x-1.0.tar.gz?X-Amz-Signature={SECRET}", sha256=SHA)
    with pytest.raises(NotFound) as missing:
        client.download(f"{fake.url}/files/gone.tar.gz?token={SECRET}")
    for exc in (mismatch.value, missing.value):
        assert SECRET not in str(exc) and f"{fake.url}/files/" in str(exc) and "?***" in str(exc), str(exc)
    assert fake.hits["/files/x-1.0.tar.gz"] == 1
