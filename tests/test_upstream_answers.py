"""Hostile answers from an index (a mirror, a proxy, a broken index) to `outdated` and `bump`: each is one line,
exit 1, "the index at URL answered X for Y" (or what the sdist's pyproject.toml holds instead of PEP 621's
types), never a traceback, and nothing written. Served by the tests' fake index (tests/fakeupstream.py)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from fakeupstream import FakeUpstream, Reply, network_args, sdist
from rocmlock.cli.main import main
from shipped import RECIPES, ROOT

VERSION = "9.9.9"
SHA = hashlib.sha256(b"x").hexdigest()


def _file(fake: FakeUpstream, **override: Any) -> dict[str, Any]:
    row = {"filename": f"deepspeed-{VERSION}.tar.gz", "url": f"{fake.url}/files/deepspeed-{VERSION}.tar.gz",
           "packagetype": "sdist", "digests": {"sha256": SHA}, "yanked": False}
    row.update(override)
    return {k: v for k, v in row.items() if v is not ...}


def _project(fake: FakeUpstream, releases: Any = None, info: Any = None) -> dict[str, Any]:
    return {"info": {"name": "deepspeed", "version": VERSION, "requires_dist": []} if info is None else info,
            "releases": {VERSION: [_file(fake)]} if releases is None else releases}


# name -> (answer for /pypi/deepspeed/json, what the line says the index answered, for what)
JSON_CASES: dict[str, tuple[Any, str, str]] = {
    "json-array": (lambda f: [_project(f)], "a JSON array", "project 'deepspeed'"),
    "info-string": (lambda f: _project(f, info="deepspeed"), "'info' as the string 'deepspeed'",
                    "project 'deepspeed'"),
    "file-without-filename": (lambda f: _project(f, {VERSION: [_file(f, filename=...)]}),
                              "a file without 'filename'", f"project 'deepspeed' {VERSION}"),
    "digests-list": (lambda f: _project(f, {VERSION: [_file(f, digests=[SHA])]}), "'digests' as a JSON array",
                     f"project 'deepspeed' {VERSION}, file deepspeed-{VERSION}.tar.gz"),
    "release-int": (lambda f: _project(f, {VERSION: 5}), f"release {VERSION} as a number", "project 'deepspeed'"),
    "releases-string": (lambda f: _project(f, "9.9.9"), "'releases' as the string '9.9.9'", "project 'deepspeed'"),
    # Values that would reach variants.yaml, a path or the terminal.
    "sha256-not-hex": (lambda f: _project(f, {VERSION: [_file(f, digests={"sha256": "zz"})]}),
                       "'digests.sha256' 'zz'", f"project 'deepspeed' {VERSION}, file deepspeed-{VERSION}.tar.gz"),
    "filename-with-path": (lambda f: _project(f, {VERSION: [_file(f, filename="../../x.tar.gz")]}),
                           "the file name '../../x.tar.gz'", f"project 'deepspeed' {VERSION}"),
    "version-with-escape": (lambda f: _project(f, {"9.9.9\x1b[2J": [_file(f)]}),
                            "a release named '9.9.9\\x1b[2J'", "project 'deepspeed'"),
    "file-url-not-http": (lambda f: _project(f, {VERSION: [_file(f, url="file:///etc/passwd")]}),
                          "the file URL 'file:///etc/passwd'",
                          f"project 'deepspeed' {VERSION}, file deepspeed-{VERSION}.tar.gz"),
}


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    shutil.copytree(RECIPES, tmp_path / "recipes")
    (tmp_path / "tools").symlink_to(ROOT / "tools")
    return tmp_path


def _snapshot(ws: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in sorted((ws / "recipes").rglob("*")) if p.is_file()}


def _one_error(capsys: pytest.CaptureFixture[str]) -> tuple[str, str]:
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err, err
    lines = err.strip().splitlines()
    errors = [line for line in lines if line.startswith("error: ")]
    return (errors[0] if errors else ""), out + err


@pytest.mark.parametrize("case", sorted(JSON_CASES))
def test_bump_refuses_a_hostile_json_answer_in_one_line(case: str, ws: Path, fake: FakeUpstream,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    answer, what, of = JSON_CASES[case]
    fake.add_json("/pypi/deepspeed/json", answer(fake))
    before = _snapshot(ws)
    code = main(["bump", f"deepspeed={VERSION}", "--recipes-dir", str(ws / "recipes"),
                 "--manifest-path", str(ws / "no-pixi.toml"), *network_args(fake.url)])
    line, _ = _one_error(capsys)
    assert code == 1, line
    assert line == f"error: the index at {fake.url}/pypi/deepspeed/json answered {what} for {of}", line
    assert _snapshot(ws) == before


@pytest.mark.parametrize("case", sorted(JSON_CASES))
def test_outdated_reports_a_hostile_json_answer_on_its_row(case: str, ws: Path, fake: FakeUpstream,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    answer, what, of = JSON_CASES[case]
    fake.add_json("/pypi/deepspeed/json", answer(fake))
    code = main(["outdated", "--recipes-dir", str(ws / "recipes"), *network_args(fake.url, retries=0)])
    out, err = capsys.readouterr()
    assert code == 1 and "Traceback" not in out + err, err
    assert f"the index at {fake.url}/pypi/deepspeed/json answered {what} for {of}" in out + err


def _llamafactory(fake: FakeUpstream, pyproject: str | bytes) -> None:
    data = sdist("llamafactory", VERSION, pyproject)
    name = f"llamafactory-{VERSION}.tar.gz"
    fake.add(f"/files/{name}", Reply(body=data))
    fake.add_json("/pypi/llamafactory/json", {
        "info": {"version": VERSION},
        "releases": {VERSION: [{"filename": name, "url": f"{fake.url}/files/{name}", "packagetype": "sdist",
                                "digests": {"sha256": hashlib.sha256(data).hexdigest()}}]}})


PYPROJECT_CASES: dict[str, tuple[str | bytes, str]] = {
    "invalid-toml": ("[project\nname = 'x'\n",
                     "is not valid TOML (Expected ']' at the end of a table declaration (at line 1, column 9))"),
    "not-utf8": (b"[project]\nname = '\xff'\n", "is not UTF-8 text (byte 18)"),
    "project-5": ("project = 5\n", "has 'project' as an integer, not a table"),
    "dynamic-5": ("[project]\ndynamic = 5\ndependencies = []\n",
                  "has 'project.dynamic' as an integer; PEP 621 makes it an array of strings"),
    "dependencies-string": ('[project]\ndependencies = "numpy"\n',
                            "has 'project.dependencies' as a string; PEP 621 makes it an array of strings"),
    "dependencies-ints": ("[project]\ndependencies = [1]\n",
                          ("has 'project.dependencies' as an array with a value that is not a string; PEP 621 "
                           "makes it an array of strings")),
}


@pytest.mark.parametrize("case", sorted(PYPROJECT_CASES))
def test_bump_refuses_a_hostile_pyproject_in_one_line(case: str, ws: Path, fake: FakeUpstream,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """`dependencies = "numpy"` used to become the run requirements n, u, m, p, y with exit 0."""
    pyproject, problem = PYPROJECT_CASES[case]
    _llamafactory(fake, pyproject)
    before = _snapshot(ws)
    code = main(["bump", f"llamafactory={VERSION}", "--recipes-dir", str(ws / "recipes"),
                 "--manifest-path", str(ws / "no-pixi.toml"), *network_args(fake.url)])
    line, _ = _one_error(capsys)
    assert code == 1, line
    name = f"llamafactory-{VERSION}.tar.gz"
    assert line == f"error: {name} from {fake.url}/files/{name}: the sdist's pyproject.toml {problem}", line
    assert _snapshot(ws) == before


def test_a_hostile_commit_answer_is_refused(ws: Path, fake: FakeUpstream,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """GitHub's answer for a tag's commit reaches variants.yaml: anything but 40 hex digits is refused."""
    fake.add("/api/repos/pytorch/pytorch/commits/v2.15.0", Reply(body=b"<html>\x1b[2Jlogin</html>",
                                                                       content_type="text/html; charset=utf-8"))
    from rocmlock.upstream.client import Client, Hosts, HttpOptions
    from rocmlock.upstream.pypijson import BadAnswer

    client = Client(Hosts(index_url=f"{fake.url}/pypi", github_api=f"{fake.url}/api"),
                    HttpOptions(timeout=1, retries=0))
    with pytest.raises(BadAnswer) as exc:
        client.github_commit("pytorch/pytorch", "v2.15.0")
    assert str(exc.value) == (f"{fake.url}/api/repos/pytorch/pytorch/commits/v2.15.0 answered the string "
                              "'<html>\\x1b[2Jlogin</html>' for the commit of tag v2.15.0 of pytorch/pytorch")
    assert json.dumps(str(exc.value)).isascii()


@pytest.mark.parametrize("argv", [["--timeout", "-1"], ["--timeout", "0"], ["--timeout", "inf"], ["--timeout", "nan"],
                                  ["--retries", "-1"], ["--backoff", "-2"], ["--backoff", "nan"]])
def test_outdated_refuses_a_timeout_retry_or_backoff_out_of_range_before_any_request(
        ws: Path, capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    # -1 and 0 reached urllib3 (ValueError), inf the clock (OverflowError): tracebacks (a break-it pass).
    assert main(["outdated", "--manifest-path", str(ws / "pixi.toml"), *argv]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    assert f"argument {argv[0]}: '{argv[1]}' is not a number" in err, err


def test_a_root_url_with_a_control_character_is_refused_not_echoed(ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["outdated", "--manifest-path", str(ws / "pixi.toml"), "--index-url", "http://h/\x1b[31m"]) == 2
    line, text = _one_error(capsys)
    assert line == "error: --index-url: not a URL (it holds a control character)" and "\x1b" not in text
