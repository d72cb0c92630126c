"""pixi's diff JSON from `rocmlock lock --json` and `rocmlock diff`, and the markdown of the real pixi-diff-to-markdown.

The shape is pixi's LockFileJsonDiff (prefix-dev/pixi crates/pixi_diff/src/lib.rs): {"version": 1, "environment":
{ENV: {PLATFORM: [{"name", "before", "after", "type", "explicit"?}]}}}, before/after the lock's package entries
(a changed one's only the keys that differ), sorted by name, unchanged platforms and environments left out.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from ciskips import in_ci
from lock_tools import ToolsUnavailable, ensure_tools
from rocmlock.cli.main import main


@pytest.fixture(scope="module")
def tools() -> Path:
    try:
        return ensure_tools()
    except ToolsUnavailable as exc:
        if in_ci():
            pytest.fail(f"CI must run the real lock tools (tests/lock_tools.py): {exc}")
        pytest.skip(f"no lock tools venv here: {exc}")


def _pin_numpy(ws: Path) -> None:
    # numpy 2.1.* instead of the 2.2.0 locked: a downgrade where pytorch pulls it in, an addition in `default`
    text = (ws / "pixi.toml").read_text()
    (ws / "pixi.toml").write_text(text.replace('[dependencies]\n', '[dependencies]\nnumpy = "2.1.*"\n', 1))


def _json(args: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    capsys.readouterr()
    assert main(args) == 0
    return dict(json.loads(capsys.readouterr().out))


def _lock_entries(lock: Path) -> dict[str, dict[str, Any]]:
    return {p["conda"]: p for p in yaml.safe_load(lock.read_text())["packages"]}


def test_lock_json_is_pixis_diff_beside_rocmlocks_keys(ws_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = _lock_entries(ws_copy / "pixi.lock")
    _pin_numpy(ws_copy)
    data = _json(["lock", "--manifest-path", str(ws_copy / "pixi.toml"), "--json"], capsys)
    after = _lock_entries(ws_copy / "pixi.lock")
    assert list(data)[:2] == ["version", "environment"] and data["version"] == 1
    assert {"changes", "stale", "solved", "written", "manifest"} <= set(data)  # rocmlock's, kept beside
    envs = data["environment"]
    assert sorted(envs) == ["default", "mi250", "mi300x"]
    assert sorted(envs["mi250"]) == ["linux-64-gfx90a"] and sorted(envs["mi300x"]) == ["linux-64-gfx942"]
    (numpy,) = envs["mi250"]["linux-64-gfx90a"]
    assert set(numpy) == {"name", "before", "after", "type", "explicit"}
    assert (numpy["name"], numpy["type"], numpy["explicit"]) == ("numpy", "conda", True)
    old_url = next(u for u in before if "/numpy-2.2.0-" in u)
    new_url = next(u for u in after if "/numpy-2.1.3-" in u)
    # only the keys that differ: the location and the hashes, not the equal depends/license/subdir/channel
    differing = {k for k in after[new_url] if after[new_url][k] != before[old_url].get(k)}
    assert set(numpy["after"]) == differing and "conda" in differing and "depends" not in differing
    assert numpy["before"] == {k: before[old_url][k] for k in differing}
    assert numpy["after"] == {k: after[new_url][k] for k in differing}
    added = envs["default"]["linux-64-gfx90a"]
    assert [(a["name"], a["before"], a["after"]) for a in added] == [("numpy", None, after[new_url])]


def test_lock_json_of_an_unchanged_lock_has_an_empty_environment(ws_copy: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    data = _json(["lock", "--manifest-path", str(ws_copy / "pixi.toml"), "--json"], capsys)
    assert (data["version"], data["environment"]) == (1, {})
    capsys.readouterr()
    assert main(["lock", "--manifest-path", str(ws_copy / "pixi.toml"), "--markdown"]) == 0
    assert capsys.readouterr().out == "No diff\n"


def test_diff_of_two_lock_files_is_the_same_diff_without_explicit(ws_copy: Path, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    old = tmp_path / "old.lock"
    old.write_bytes((ws_copy / "pixi.lock").read_bytes())
    _pin_numpy(ws_copy)
    locked = _json(["lock", "--manifest-path", str(ws_copy / "pixi.toml"), "--json"], capsys)
    diffed = _json(["diff", str(old), str(ws_copy / "pixi.lock"), "--json"], capsys)
    assert list(diffed) == ["version", "environment"]
    for plats in locked["environment"].values():  # no manifest: nothing is explicit
        for rows in plats.values():
            for row in rows:
                row.pop("explicit", None)
    assert diffed == {"version": 1, "environment": locked["environment"]}
    capsys.readouterr()
    assert main(["diff", str(old), str(ws_copy / "pixi.lock")]) == 0
    assert "mi250 [linux-64-gfx90a]\n  ~ numpy 2.2.0 py312h0_0 -> 2.1.3 py312h0_0" in capsys.readouterr().out


def test_diff_refuses_a_file_that_is_not_a_lock(ws_copy: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "notes.lock"
    bad.write_text("just: some yaml\n")
    capsys.readouterr()
    assert main(["diff", str(bad), str(ws_copy / "pixi.lock"), "--json"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and str(bad) in err and "Traceback" not in err
    assert main(["diff", str(tmp_path / "missing.lock"), str(ws_copy / "pixi.lock")]) == 2
    assert "missing.lock: no such file" in capsys.readouterr().err


def _to_markdown(tools: Path, data: str, cwd: Path, *args: str) -> str:
    # Its settings come from pixi.toml/pyproject.toml in the working directory: an empty one here.
    proc = subprocess.run([str(tools / "pixi-diff-to-markdown"), *args], input=data, capture_output=True, text=True,
                          check=False, cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_pixi_diff_to_markdown_reads_lock_json_and_prints_our_markdown(tools: Path, ws_copy: Path, tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    old = tmp_path / "old.lock"
    old.write_bytes((ws_copy / "pixi.lock").read_bytes())
    _pin_numpy(ws_copy)
    capsys.readouterr()
    assert main(["lock", "--manifest-path", str(ws_copy / "pixi.toml"), "--json"]) == 0
    data = capsys.readouterr().out
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    theirs = _to_markdown(tools, data, cwd, "--merge-dependencies", "no")
    assert "|**numpy**[^2]|2.2.0|2.1.3|Minor Downgrade|" in theirs
    # the same diff, written by rocmlock from two lock files: equal to the tool's output, byte for byte
    (ws_copy / "pixi.lock").rename(tmp_path / "new.lock")
    capsys.readouterr()
    assert main(["diff", str(old), str(tmp_path / "new.lock"), "--markdown"]) == 0
    ours = capsys.readouterr().out
    assert main(["diff", str(old), str(tmp_path / "new.lock"), "--json"]) == 0
    assert _to_markdown(tools, capsys.readouterr().out, cwd, "--merge-dependencies", "no") == ours
    assert ours == theirs.replace("**numpy**", "numpy")  # lock --json marks numpy explicit: pixi.toml names it
    # its default layout (tables merged across environments) takes the JSON too
    assert "Minor Downgrade" in _to_markdown(tools, data, cwd)
